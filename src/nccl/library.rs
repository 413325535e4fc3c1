//! libnccl loaded at run time (dlopen through libloading), never linked: found on the loader
//! path, under $NCCL_HOME/lib, or in a Python environment's `nvidia/nccl/lib` (the wheel that
//! PyTorch installs). Only the symbols the probe calls are resolved.
//!
//! This module must not decide anything: it finds the library, resolves symbols and turns
//! ncclResult_t into typed errors. CUDA memory and streams come from `crate::cuda`.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};

/// The soname NCCL 2.x ships as.
pub const SONAME: &str = "libnccl.so.2";

#[derive(Debug, thiserror::Error)]
pub enum NcclError {
    /// No libnccl anywhere looked: the probe is skipped with this list.
    #[error("{SONAME} not found; looked in: {}", .looked.join(", "))]
    NotFound { looked: Vec<String> },
    /// A library was found but lacks a symbol the probe calls (too old, or not NCCL).
    #[error("{path}: no {symbol} ({why})")]
    Missing {
        path: String,
        symbol: &'static str,
        why: String,
    },
    /// An NCCL call returned an error.
    #[error("{call}: {text} (ncclResult_t {code})")]
    Call {
        call: &'static str,
        code: i32,
        text: String,
    },
}

/// Where to look, as the config resolved it from the environment.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct Search {
    /// $NCCL_HOME (its `lib/` is searched first: the operator named it).
    pub nccl_home: Option<PathBuf>,
    /// Python environments to search besides the system's (VIRTUAL_ENV, CONDA_PREFIX, ~/.local).
    pub python_prefixes: Vec<PathBuf>,
}

/// One place a libnccl may be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Candidate {
    /// dlopen by soname: LD_LIBRARY_PATH, ld.so.cache, the system's lib dirs.
    LoaderPath,
    File(PathBuf),
}

impl Candidate {
    pub fn describe(&self) -> String {
        match self {
            Candidate::LoaderPath => {
                format!("{SONAME} on the loader path (ld.so.cache, LD_LIBRARY_PATH)")
            }
            Candidate::File(p) => p.display().to_string(),
        }
    }
}

/// Python `site-packages`/`dist-packages` directories under `prefix/lib/python3*` (and
/// `prefix/local/lib/python3*`), sorted for a stable order.
fn site_dirs(prefix: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for lib in [prefix.join("lib"), prefix.join("local/lib")] {
        let Ok(rd) = std::fs::read_dir(&lib) else {
            continue;
        };
        let mut pys: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("python3"))
            })
            .collect();
        pys.sort_by(|a, b| crate::pci::natural_cmp(&b.to_string_lossy(), &a.to_string_lossy()));
        for py in pys {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    out
}

/// Every place looked, in order: $NCCL_HOME/lib, the loader path, then the `nvidia/nccl/lib`
/// of each Python environment (the given prefixes, then /usr/local, /usr, /opt/conda).
pub fn candidates(s: &Search) -> Vec<Candidate> {
    let mut out = Vec::new();
    if let Some(h) = &s.nccl_home {
        out.push(Candidate::File(h.join("lib").join(SONAME)));
        out.push(Candidate::File(h.join("lib64").join(SONAME)));
    }
    out.push(Candidate::LoaderPath);
    let mut prefixes = s.python_prefixes.clone();
    for p in ["/usr/local", "/usr", "/opt/conda"] {
        prefixes.push(PathBuf::from(p));
    }
    for p in prefixes {
        for d in site_dirs(&p) {
            let c = Candidate::File(d.join("nvidia/nccl/lib").join(SONAME));
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type GetUniqueIdFn = unsafe extern "C" fn(*mut UniqueId) -> c_int;
type CommInitAllFn = unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> c_int;
type CommInitRankFn = unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> c_int;
type CollAllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    c_int,
    c_int,
    Comm,
    *mut c_void,
) -> c_int;
type CollAllGatherFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, Comm, *mut c_void) -> c_int;
type GroupFn = unsafe extern "C" fn() -> c_int;
type CommFn = unsafe extern "C" fn(Comm) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type AsyncErrorFn = unsafe extern "C" fn(Comm, *mut c_int) -> c_int;

/// ncclComm_t.
pub type Comm = *mut c_void;

/// ncclUniqueId: 128 opaque bytes (NCCL_UNIQUE_ID_BYTES).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    pub internal: [c_char; 128],
}

/// The id as text (hex), to cross the rendezvous; and back.
pub fn unique_id_hex(id: &UniqueId) -> String {
    id.internal
        .iter()
        .map(|b| format!("{:02x}", *b as u8))
        .collect()
}

pub fn unique_id_from_hex(s: &str) -> Result<UniqueId, String> {
    if s.len() != 256 || !s.is_ascii() {
        return Err("an NCCL unique id is 128 bytes of hex".into());
    }
    let mut id = UniqueId { internal: [0; 128] };
    for (i, b) in id.internal.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .map_err(|_| "an NCCL unique id is 128 bytes of hex".to_string())?
            as c_char;
    }
    Ok(id)
}

/// ncclFloat32 and ncclSum in nccl.h's enums (stable since NCCL 2.0).
pub const NCCL_FLOAT32: c_int = 7;
pub const NCCL_SUM: c_int = 0;
/// ncclInProgress: a non-blocking call still running (ncclCommGetAsyncError).
pub const NCCL_IN_PROGRESS: c_int = 7;

/// A loaded libnccl with the symbols the probe calls.
pub struct Nccl {
    // Kept alive for as long as the function pointers below are used.
    _lib: libloading::Library,
    pub path: String,
    get_version: GetVersionFn,
    get_unique_id: GetUniqueIdFn,
    comm_init_all: CommInitAllFn,
    comm_init_rank: CommInitRankFn,
    all_reduce: CollAllReduceFn,
    all_gather: CollAllGatherFn,
    group_start: GroupFn,
    group_end: GroupFn,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    error_string: ErrorStringFn,
    async_error: AsyncErrorFn,
}

/// Open the first candidate that loads; `NotFound` names every place looked.
pub fn load(cands: &[Candidate]) -> Result<Nccl, NcclError> {
    let mut looked = Vec::new();
    for c in cands {
        looked.push(c.describe());
        let opened = match c {
            Candidate::LoaderPath => {
                // SAFETY: dlopen of NVIDIA's library by soname; its initialisers do not touch CUDA.
                unsafe { libloading::Library::new(SONAME) }.map(|l| (l, loaded_path(SONAME)))
            }
            Candidate::File(p) => {
                if !p.exists() {
                    continue;
                }
                // SAFETY: as above, by absolute path.
                unsafe { libloading::Library::new(p) }.map(|l| (l, p.display().to_string()))
            }
        };
        match opened {
            Ok((lib, path)) => return resolve(lib, path),
            Err(e) => {
                if let Some(last) = looked.last_mut() {
                    last.push_str(&format!(" ({e})"));
                }
            }
        }
    }
    Err(NcclError::NotFound { looked })
}

/// The file the loader chose for `soname`, from /proc/self/maps once it is loaded.
fn loaded_path(soname: &str) -> String {
    std::fs::read_to_string("/proc/self/maps")
        .ok()
        .and_then(|m| {
            m.lines()
                .filter_map(|l| l.split_whitespace().nth(5))
                .find(|p| p.contains("libnccl.so"))
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{soname} (loader path)"))
}

fn resolve(lib: libloading::Library, path: String) -> Result<Nccl, NcclError> {
    macro_rules! sym {
        ($name:literal, $ty:ty) => {{
            // SAFETY: the symbol's C signature is nccl.h's, spelt by the type alias.
            match unsafe { lib.get::<$ty>($name.as_bytes()) } {
                Ok(s) => *s,
                Err(e) => {
                    return Err(NcclError::Missing {
                        path: path.clone(),
                        symbol: $name,
                        why: e.to_string(),
                    });
                }
            }
        }};
    }
    let get_version = sym!("ncclGetVersion", GetVersionFn);
    let get_unique_id = sym!("ncclGetUniqueId", GetUniqueIdFn);
    let comm_init_all = sym!("ncclCommInitAll", CommInitAllFn);
    let comm_init_rank = sym!("ncclCommInitRank", CommInitRankFn);
    let all_reduce = sym!("ncclAllReduce", CollAllReduceFn);
    let all_gather = sym!("ncclAllGather", CollAllGatherFn);
    let group_start = sym!("ncclGroupStart", GroupFn);
    let group_end = sym!("ncclGroupEnd", GroupFn);
    let comm_destroy = sym!("ncclCommDestroy", CommFn);
    let comm_abort = sym!("ncclCommAbort", CommFn);
    let error_string = sym!("ncclGetErrorString", ErrorStringFn);
    let async_error = sym!("ncclCommGetAsyncError", AsyncErrorFn);
    Ok(Nccl {
        _lib: lib,
        path,
        get_version,
        get_unique_id,
        comm_init_all,
        comm_init_rank,
        all_reduce,
        all_gather,
        group_start,
        group_end,
        comm_destroy,
        comm_abort,
        error_string,
        async_error,
    })
}

/// NCCL's version code as text: 22809 -> 2.28.9 (NCCL >= 2.9: major*10000 + minor*100 +
/// patch; before: major*1000 + minor*100 + patch).
pub fn version_text(code: i32) -> String {
    if code >= 20900 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

impl Nccl {
    fn check(&self, call: &'static str, rc: c_int) -> Result<(), NcclError> {
        if rc == 0 {
            return Ok(());
        }
        // SAFETY: ncclGetErrorString returns a static string for any result value.
        let p = unsafe { (self.error_string)(rc) };
        let text = if p.is_null() {
            "no description".to_string()
        } else {
            // SAFETY: NUL-terminated static string from NCCL.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        };
        Err(NcclError::Call {
            call,
            code: rc,
            text,
        })
    }

    pub fn version(&self) -> Result<i32, NcclError> {
        let mut v: c_int = 0;
        // SAFETY: out-pointer to a local.
        self.check("ncclGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// One communicator per device (`ordinals`: CUDA device numbers), rank i on `ordinals[i]`.
    pub fn comm_init_all(&self, ordinals: &[i32]) -> Result<Vec<Comm>, NcclError> {
        let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); ordinals.len()];
        // SAFETY: `comms` has room for one communicator per device; `ordinals` is as long.
        self.check("ncclCommInitAll", unsafe {
            (self.comm_init_all)(
                comms.as_mut_ptr(),
                ordinals.len() as c_int,
                ordinals.as_ptr(),
            )
        })?;
        Ok(comms)
    }

    /// A new unique id (ncclGetUniqueId): NCCL's bootstrap root starts listening in this
    /// process and lives as long as it does, so only a worker that goes on to join the
    /// communicator calls this.
    pub fn unique_id(&self) -> Result<UniqueId, NcclError> {
        let mut id = UniqueId { internal: [0; 128] };
        // SAFETY: out-pointer to a local of nccl.h's ncclUniqueId layout (128 bytes).
        self.check("ncclGetUniqueId", unsafe { (self.get_unique_id)(&mut id) })?;
        Ok(id)
    }

    /// One communicator per device of this process, ranks `first_rank..` of `nranks`, joined
    /// through `id` (ncclCommInitRank; inside ncclGroupStart/End when there are several, as
    /// one thread driving several GPUs must). The caller makes each device's context current
    /// by passing its CUDA `ordinals` in order; NCCL uses the current device per call, so this
    /// sets it with `set_device` before each.
    pub fn comm_init_ranks(
        &self,
        id: &UniqueId,
        nranks: u32,
        first_rank: u32,
        set_device: &dyn Fn(usize) -> Result<(), String>,
        count: usize,
    ) -> Result<Vec<Comm>, String> {
        let mut comms: Vec<Comm> = vec![std::ptr::null_mut(); count];
        let grouped = count > 1;
        if grouped {
            self.group_start().map_err(|e| e.to_string())?;
        }
        let mut err = None;
        for (i, c) in comms.iter_mut().enumerate() {
            if let Err(e) = set_device(i) {
                err = Some(e);
                break;
            }
            // SAFETY: out-pointer to one communicator; the id is the 128-byte value NCCL made.
            let rc = unsafe {
                (self.comm_init_rank)(c, nranks as c_int, *id, (first_rank as usize + i) as c_int)
            };
            if let Err(e) = self.check("ncclCommInitRank", rc) {
                err = Some(e.to_string());
                break;
            }
        }
        if grouped && let Err(e) = self.group_end() {
            err.get_or_insert(e.to_string());
        }
        match err {
            None => Ok(comms),
            Some(e) => Err(e),
        }
    }

    pub fn group_start(&self) -> Result<(), NcclError> {
        // SAFETY: no arguments.
        self.check("ncclGroupStart", unsafe { (self.group_start)() })
    }

    pub fn group_end(&self) -> Result<(), NcclError> {
        // SAFETY: no arguments.
        self.check("ncclGroupEnd", unsafe { (self.group_end)() })
    }

    /// ncclAllReduce of `count` floats (sum) on `stream` (a CUstream, which is a cudaStream_t).
    ///
    /// # Safety
    /// `send`/`recv` are device pointers of the communicator's GPU holding `count` floats;
    /// `comm` is live; `stream` belongs to the same GPU's primary context.
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        comm: Comm,
        stream: *mut c_void,
    ) -> Result<(), NcclError> {
        // SAFETY: the caller's contract above.
        self.check("ncclAllReduce", unsafe {
            (self.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                NCCL_FLOAT32,
                NCCL_SUM,
                comm,
                stream,
            )
        })
    }

    /// ncclAllGather of `sendcount` floats per rank.
    ///
    /// # Safety
    /// As `all_reduce`; `recv` holds `sendcount * nranks` floats.
    pub unsafe fn all_gather(
        &self,
        send: u64,
        recv: u64,
        sendcount: usize,
        comm: Comm,
        stream: *mut c_void,
    ) -> Result<(), NcclError> {
        // SAFETY: the caller's contract above.
        self.check("ncclAllGather", unsafe {
            (self.all_gather)(
                send as *const c_void,
                recv as *mut c_void,
                sendcount,
                NCCL_FLOAT32,
                comm,
                stream,
            )
        })
    }

    /// The communicator's asynchronous error (a failed or aborted collective), if any.
    ///
    /// # Safety
    /// `comm` came from `comm_init_all` and has not been finished.
    pub unsafe fn async_error(&self, comm: Comm) -> Result<(), NcclError> {
        let mut r: c_int = 0;
        // SAFETY: a live communicator; out-pointer to a local.
        self.check("ncclCommGetAsyncError", unsafe {
            (self.async_error)(comm, &mut r)
        })?;
        if r == 0 || r == NCCL_IN_PROGRESS {
            Ok(())
        } else {
            self.check("ncclCommGetAsyncError (collective)", r)
        }
    }

    /// Destroy a communicator (after its work completed), or abort it (after an error).
    ///
    /// # Safety
    /// `comm` came from `comm_init_all` and is finished once; nothing uses it afterwards.
    pub unsafe fn comm_finish(&self, comm: Comm, abort: bool) -> Result<(), NcclError> {
        if abort {
            // SAFETY: a live communicator (the caller's contract), aborted once.
            self.check("ncclCommAbort", unsafe { (self.comm_abort)(comm) })
        } else {
            // SAFETY: a live communicator (the caller's contract), destroyed once.
            self.check("ncclCommDestroy", unsafe { (self.comm_destroy)(comm) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_ids_cross_as_hex() {
        let mut id = UniqueId { internal: [0; 128] };
        for (i, b) in id.internal.iter_mut().enumerate() {
            *b = (i * 7) as u8 as c_char;
        }
        let t = unique_id_hex(&id);
        assert_eq!(t.len(), 256);
        assert_eq!(unique_id_from_hex(&t).unwrap().internal, id.internal);
        assert!(unique_id_from_hex("00").is_err());
        assert!(unique_id_from_hex(&"zz".repeat(128)).is_err());
        assert!(unique_id_from_hex(&"é".repeat(128)).is_err());
    }

    #[test]
    fn versions_decode_both_encodings() {
        assert_eq!(version_text(22809), "2.28.9");
        assert_eq!(version_text(21805), "2.18.5");
        assert_eq!(version_text(2804), "2.8.4");
    }

    #[test]
    fn candidates_start_with_nccl_home_and_name_every_python_env() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::create_dir_all(dir.path().join("venv/lib/python3.12/site-packages"))
            .expect("a fake venv");
        let s = Search {
            nccl_home: Some(PathBuf::from("/opt/nccl")),
            python_prefixes: vec![dir.path().join("venv")],
        };
        let c = candidates(&s);
        assert_eq!(
            c[0],
            Candidate::File(PathBuf::from("/opt/nccl/lib/libnccl.so.2"))
        );
        assert!(c.contains(&Candidate::LoaderPath));
        assert!(
            c.contains(&Candidate::File(dir.path().join(
                "venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"
            )))
        );
    }

    /// Nothing found: the error names every place looked (the loader path included).
    #[test]
    fn absent_library_names_every_place_looked() {
        let cands = vec![
            Candidate::File(PathBuf::from("/nonexistent/lib/libnccl.so.2")),
            Candidate::File(PathBuf::from("/nonexistent2/nvidia/nccl/lib/libnccl.so.2")),
        ];
        match load(&cands) {
            Err(NcclError::NotFound { looked }) => {
                assert_eq!(looked.len(), 2);
                assert!(looked[1].contains("nonexistent2"));
            }
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("a libnccl loaded from nowhere"),
        }
    }
}
