//! CUDA through cudarc's raw driver and NVRTC bindings, loaded at run time (dlopen), never
//! linked. Thin RAII owners for contexts, streams, events, device and pinned host memory,
//! modules; NVRTC compilation of `kernels/*.cu` to CUBIN for the GPU's exact `sm_XX`.
//!
//! This module must not decide anything (no thresholds, no verdicts) and must not touch sysfs:
//! it turns driver calls into values or typed errors. cudarc panics when a library or a symbol
//! is missing; every call here goes through `resolve` (the `driver!`/`nvrtc!` macros), which
//! turns either into `CudaError::Missing` first.

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nv;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::rc::Rc;

#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A library or device is not there: the probes are skipped with this reason.
    #[error("{0}")]
    Unavailable(String),
    #[error("{call}: {name} ({text})")]
    Driver {
        call: &'static str,
        name: String,
        text: String,
    },
    #[error("NVRTC {call}: {text}")]
    Nvrtc { call: &'static str, text: String },
    /// The library or one of its symbols is not there (`resolve`): a skip with this reason.
    #[error("{library}: no {symbol} ({why})")]
    Missing {
        library: &'static str,
        symbol: &'static str,
        why: String,
    },
    #[error("NVRTC could not compile {kernel} for {arch}: {log}")]
    Compile {
        kernel: String,
        arch: String,
        log: String,
    },
}

impl CudaError {
    /// CUDA is not there to ask (no library, or one without a symbol this call needs): a gap
    /// in what could be probed (a skip), not a failure of the machine.
    pub fn is_absent(&self) -> bool {
        matches!(self, CudaError::Unavailable(_) | CudaError::Missing { .. })
    }

    /// The driver's error name (`CUDA_ERROR_NO_DEVICE`...), when this is a driver error.
    pub fn driver_name(&self) -> Option<&str> {
        match self {
            CudaError::Driver { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// The libraries cudarc loads at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Library {
    /// libcuda (the user-mode driver), by the names cudarc tries.
    Driver,
    /// libnvrtc (made loadable first by `find_nvrtc`).
    Nvrtc,
}

impl Library {
    pub fn name(self) -> &'static str {
        match self {
            Library::Driver => "libcuda.so.1",
            Library::Nvrtc => "libnvrtc",
        }
    }
}

/// THE guarded place where CUDA symbols are loaded: every driver and NVRTC call in this
/// module goes through `driver!`/`nvrtc!`, which call this first. cudarc's dynamic loading
/// panics when the library or one symbol is missing (an old driver without
/// cuMemGetHandleForAddressRange, a stub libcuda); here either is a `CudaError::Missing`, which
/// the probes report as a skip with the reason, never a panic. Success is remembered per call
/// site (`seen`); absence is not, since `find_nvrtc` can make NVRTC loadable later.
pub fn resolve(
    seen: &std::sync::OnceLock<()>,
    lib: Library,
    symbol: &'static str,
) -> Result<(), CudaError> {
    if seen.get().is_some() {
        return Ok(());
    }
    let missing = |why: String| CudaError::Missing {
        library: lib.name(),
        symbol,
        why,
    };
    // SAFETY: dlopen of cudarc's candidate names; the handles are dropped at once.
    let present = unsafe {
        match lib {
            Library::Driver => cu::is_culib_present(),
            Library::Nvrtc => nv::is_culib_present(),
        }
    };
    if !present {
        return Err(missing("the library could not be loaded".into()));
    }
    // SAFETY: the library is present (just checked), so cudarc's loader finds it and does not
    // panic; looking a symbol up runs no code of it.
    let found = unsafe {
        let l = match lib {
            Library::Driver => cu::culib(),
            Library::Nvrtc => nv::culib(),
        };
        l.get::<*const c_void>(symbol.as_bytes()).map(|_| ())
    };
    match found {
        Ok(()) => {
            let _ = seen.set(());
            Ok(())
        }
        Err(e) => Err(missing(e.to_string())),
    }
}

/// `driver!(cuX)`: `Ok(cu::cuX)` once `resolve` found it, else the `CudaError::Missing`.
/// Callers write `unsafe { driver!(cuX)?(args) }` with their own `// SAFETY:` for the call.
macro_rules! driver {
    ($sym:ident) => {{
        static SEEN: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        resolve(&SEEN, Library::Driver, stringify!($sym)).map(|()| cu::$sym)
    }};
}

/// `nvrtc!(nvrtcX)`: as `driver!`, for libnvrtc.
macro_rules! nvrtc {
    ($sym:ident) => {{
        static SEEN: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        resolve(&SEEN, Library::Nvrtc, stringify!($sym)).map(|()| nv::$sym)
    }};
}

fn cstr_or(p: *const c_char, fallback: &str) -> String {
    if p.is_null() {
        return fallback.to_string();
    }
    // SAFETY: the driver returns static NUL-terminated strings for error names/texts.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Turn a CUresult into Ok or a typed error with the driver's name and text for it.
pub fn check(call: &'static str, rc: cu::CUresult) -> Result<(), CudaError> {
    if rc == cu::CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const c_char = std::ptr::null();
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: out-pointers to locals; the driver fills them with static strings or leaves them.
    unsafe {
        // Without these two symbols the result's number stands for its name.
        if let Ok(f) = driver!(cuGetErrorName) {
            let _ = f(rc, &mut name);
        }
        if let Ok(f) = driver!(cuGetErrorString) {
            let _ = f(rc, &mut text);
        }
    }
    Err(CudaError::Driver {
        call,
        name: cstr_or(name, &format!("{rc:?}")),
        text: cstr_or(text, "no description"),
    })
}

fn nvrtc_check(call: &'static str, rc: nv::nvrtcResult) -> Result<(), CudaError> {
    if rc == nv::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    let text = match nvrtc!(nvrtcGetErrorString) {
        // SAFETY: nvrtcGetErrorString returns a static string for any result value.
        Ok(f) => cstr_or(unsafe { f(rc) }, &format!("{rc:?}")),
        Err(_) => format!("{rc:?}"),
    };
    Err(CudaError::Nvrtc { call, text })
}

/// Whether libcuda can be loaded by the names cudarc tries (libcuda.so, libcuda.so.1, ...).
pub fn driver_presence() -> Result<(), CudaError> {
    // SAFETY: dlopen of candidate names; the handles are dropped at once.
    if unsafe { cu::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::Unavailable(
            "libcuda.so.1 (the CUDA user-mode driver) could not be loaded: NVIDIA driver not \
             installed or not on the loader path"
                .to_string(),
        ))
    }
}

/// Where NVRTC was found.
#[derive(Debug, Clone)]
pub enum NvrtcSource {
    /// The dynamic loader found it by name (ld.so.cache, LD_LIBRARY_PATH).
    LoaderPath,
    /// Preloaded from this file.
    File(PathBuf),
}

/// Directories a CUDA toolkit puts libnvrtc in. `cuda_homes` come from CUDA_HOME/CUDA_PATH
/// (read by `config::Config`, the one place that looks at the environment).
pub fn nvrtc_search_dirs(cuda_homes: &[PathBuf]) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = cuda_homes.to_vec();
    roots.push(PathBuf::from("/usr/local/cuda"));
    // Versioned installs, newest first (cuda-13.0 before cuda-12.8).
    if let Ok(rd) = std::fs::read_dir("/usr/local") {
        let mut v: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("cuda-"))
            })
            .collect();
        v.sort_by(|a, b| crate::pci::natural_cmp(&b.to_string_lossy(), &a.to_string_lossy()));
        roots.extend(v);
    }
    roots.push(PathBuf::from("/opt/cuda"));
    let mut dirs = Vec::new();
    for r in roots {
        // On NVIDIA's Ubuntu packages the library lives only under targets/<arch>/lib.
        dirs.push(r.join("targets/x86_64-linux/lib"));
        dirs.push(r.join("targets/sbsa-linux/lib"));
        dirs.push(r.join("lib64"));
        dirs.push(r.join("lib"));
    }
    dirs.push(PathBuf::from("/usr/lib/x86_64-linux-gnu"));
    dirs.push(PathBuf::from("/usr/lib/aarch64-linux-gnu"));
    dirs.dedup();
    dirs
}

/// Sonames cudarc (built for CUDA 13) asks the loader for, newest first.
const NVRTC_SONAMES: [&str; 2] = ["libnvrtc.so.13", "libnvrtc.so.12"];

/// Make libnvrtc loadable by cudarc. cudarc dlopens by bare name (`libnvrtc.so.13`...), which
/// only searches the loader path; on our GPU machines libnvrtc lives only under
/// /usr/local/cuda/targets/x86_64-linux/lib, and LD_LIBRARY_PATH cannot be changed for a
/// running process. So we dlopen the file by absolute path first: glibc then answers
/// cudarc's later dlopen by name with the object already loaded, matched on its DT_SONAME.
/// The builtins library NVRTC dlopens during compilation is preloaded the same way.
pub fn find_nvrtc(dirs: &[PathBuf]) -> Result<NvrtcSource, CudaError> {
    // SAFETY: dlopen of candidate names; handles dropped at once.
    if unsafe { nv::is_culib_present() } {
        return Ok(NvrtcSource::LoaderPath);
    }
    for soname in NVRTC_SONAMES {
        for d in dirs {
            let p = d.join(soname);
            if !p.exists() {
                continue;
            }
            if dlopen_global(&p).is_err() {
                continue;
            }
            // libnvrtc-builtins.so.13.0 (or .12.8, ...) beside it.
            if let Ok(rd) = std::fs::read_dir(d) {
                let major = soname.rsplit('.').next().unwrap_or("");
                let prefix = format!("libnvrtc-builtins.so.{major}.");
                let mut b: Vec<PathBuf> = rd
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| {
                        p.file_name()
                            .and_then(|n| n.to_str())
                            .is_some_and(|n| n.starts_with(&prefix))
                    })
                    .collect();
                b.sort();
                if let Some(first) = b.first() {
                    let _ = dlopen_global(first);
                }
            }
            // SAFETY: as above.
            if unsafe { nv::is_culib_present() } {
                return Ok(NvrtcSource::File(p));
            }
        }
    }
    let shown: Vec<String> = dirs
        .iter()
        .take(6)
        .map(|d| d.display().to_string())
        .collect();
    Err(CudaError::Unavailable(format!(
        "libnvrtc ({}) not found on the loader path nor in {}, ...: install the CUDA toolkit's \
         NVRTC or set CUDA_HOME",
        NVRTC_SONAMES.join(", "),
        shown.join(", ")
    )))
}

/// dlopen a file by absolute path with RTLD_NOW | RTLD_GLOBAL and keep it loaded for the
/// life of the process (the handle is deliberately never closed).
fn dlopen_global(p: &Path) -> Result<(), String> {
    let c = CString::new(p.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid NUL-terminated path; the library's initialisers are NVIDIA's own.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        // SAFETY: dlerror returns a thread-local message or null.
        let e = unsafe { libc::dlerror() };
        return Err(cstr_or(e, "dlopen failed"));
    }
    Ok(())
}

pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut ma, mut mi) = (0, 0);
    // SAFETY: out-pointers to locals.
    nvrtc_check("nvrtcVersion", unsafe {
        nvrtc!(nvrtcVersion)?(&mut ma, &mut mi)
    })?;
    Ok((ma, mi))
}

/// cuInit and the driver's CUDA version (13000 for 13.0).
pub fn init() -> Result<i32, CudaError> {
    // SAFETY: cuInit has no pointer arguments.
    check("cuInit", unsafe { driver!(cuInit)?(0) })?;
    let mut v = 0;
    // SAFETY: out-pointer to a local.
    check("cuDriverGetVersion", unsafe {
        driver!(cuDriverGetVersion)?(&mut v)
    })?;
    Ok(v)
}

/// A CUDA device as the driver numbers it (not PCI order: callers map by `bdf`).
#[derive(Debug, Clone)]
pub struct Device {
    pub ordinal: i32,
    pub handle: cu::CUdevice,
    /// sysfs form, lower case: `0000:00:06.0`.
    pub bdf: String,
    pub name: String,
    pub cc_major: i32,
    pub cc_minor: i32,
    pub sm_count: i32,
    pub dma_buf_supported: Result<bool, String>,
}

impl Device {
    /// The NVRTC target for CUBIN: `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.cc_major, self.cc_minor)
    }
}

fn attr(
    dev: cu::CUdevice,
    a: cu::CUdevice_attribute,
    call: &'static str,
) -> Result<i32, CudaError> {
    let mut v: c_int = 0;
    // SAFETY: out-pointer to a local; `dev` came from cuDeviceGet.
    check(call, unsafe {
        driver!(cuDeviceGetAttribute)?(&mut v, a, dev)
    })?;
    Ok(v)
}

pub fn devices() -> Result<Vec<Device>, CudaError> {
    use cu::CUdevice_attribute as A;
    let mut n: c_int = 0;
    // SAFETY: out-pointer to a local.
    check("cuDeviceGetCount", unsafe {
        driver!(cuDeviceGetCount)?(&mut n)
    })?;
    let mut out = Vec::new();
    for ordinal in 0..n {
        let mut h: cu::CUdevice = 0;
        // SAFETY: out-pointer to a local.
        check("cuDeviceGet", unsafe {
            driver!(cuDeviceGet)?(&mut h, ordinal)
        })?;
        let mut buf = [0 as c_char; 64];
        // SAFETY: the buffer is 64 bytes and its length is passed.
        check("cuDeviceGetPCIBusId", unsafe {
            driver!(cuDeviceGetPCIBusId)?(buf.as_mut_ptr(), buf.len() as c_int, h)
        })?;
        let bdf = cstr_or(buf.as_ptr(), "").to_ascii_lowercase();
        let mut nb = [0 as c_char; 256];
        // SAFETY: as above.
        check("cuDeviceGetName", unsafe {
            driver!(cuDeviceGetName)?(nb.as_mut_ptr(), nb.len() as c_int, h)
        })?;
        let dma_buf_supported = attr(
            h,
            A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
            "cuDeviceGetAttribute(DMA_BUF_SUPPORTED)",
        )
        .map(|v| v != 0)
        .map_err(|e| e.to_string());
        out.push(Device {
            ordinal,
            handle: h,
            bdf,
            name: cstr_or(nb.as_ptr(), ""),
            cc_major: attr(
                h,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                "cuDeviceGetAttribute(CC_MAJOR)",
            )?,
            cc_minor: attr(
                h,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                "cuDeviceGetAttribute(CC_MINOR)",
            )?,
            sm_count: attr(
                h,
                A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
            )?,
            dma_buf_supported,
        });
    }
    Ok(out)
}

/// A device's primary context, retained for the life of this value.
pub struct Context {
    pub dev: cu::CUdevice,
    pub raw: cu::CUcontext,
}

impl Context {
    pub fn retain(dev: cu::CUdevice) -> Result<Rc<Context>, CudaError> {
        let mut raw: cu::CUcontext = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; `dev` is a valid device handle.
        check("cuDevicePrimaryCtxRetain", unsafe {
            driver!(cuDevicePrimaryCtxRetain)?(&mut raw, dev)
        })?;
        let c = Rc::new(Context { dev, raw });
        c.make_current()?;
        Ok(c)
    }

    pub fn make_current(&self) -> Result<(), CudaError> {
        // SAFETY: `raw` is a retained primary context.
        check("cuCtxSetCurrent", unsafe {
            driver!(cuCtxSetCurrent)?(self.raw)
        })
    }

    /// Let this context's kernels and copies reach `peer`'s memory.
    pub fn enable_peer_access(&self, peer: &Context) -> Result<(), CudaError> {
        self.make_current()?;
        // SAFETY: both contexts are retained.
        let rc = unsafe { driver!(cuCtxEnablePeerAccess)?(peer.raw, 0) };
        if rc == cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
            return Ok(());
        }
        check("cuCtxEnablePeerAccess", rc)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: balanced with the retain in `Context::retain`.
        if let Ok(f) = driver!(cuDevicePrimaryCtxRelease_v2) {
            let _ = unsafe { f(self.dev) };
        }
    }
}

pub struct Stream {
    ctx: Rc<Context>,
    pub raw: cu::CUstream,
}

impl Stream {
    pub fn new(ctx: &Rc<Context>) -> Result<Stream, CudaError> {
        ctx.make_current()?;
        let mut raw: cu::CUstream = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; the context is current.
        check("cuStreamCreate", unsafe {
            driver!(cuStreamCreate)?(&mut raw, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        Ok(Stream {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: a live stream.
        check("cuStreamSynchronize", unsafe {
            driver!(cuStreamSynchronize)?(self.raw)
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: created by cuStreamCreate, destroyed once.
        if let Ok(f) = driver!(cuStreamDestroy_v2) {
            let _ = unsafe { f(self.raw) };
        }
    }
}

pub struct Event {
    ctx: Rc<Context>,
    raw: cu::CUevent,
}

impl Event {
    pub fn new(ctx: &Rc<Context>) -> Result<Event, CudaError> {
        ctx.make_current()?;
        let mut raw: cu::CUevent = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; CU_EVENT_DEFAULT keeps timing enabled.
        check("cuEventCreate", unsafe {
            driver!(cuEventCreate)?(&mut raw, cu::CUevent_flags::CU_EVENT_DEFAULT as u32)
        })?;
        Ok(Event {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn record(&self, s: &Stream) -> Result<(), CudaError> {
        // SAFETY: live event and stream of the same context.
        check("cuEventRecord", unsafe {
            driver!(cuEventRecord)?(self.raw, s.raw)
        })
    }

    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: a live, recorded event.
        check("cuEventSynchronize", unsafe {
            driver!(cuEventSynchronize)?(self.raw)
        })
    }

    /// Milliseconds from `start` to `self` (both recorded and complete).
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32, CudaError> {
        let mut ms = 0f32;
        // SAFETY: out-pointer to a local; both events live.
        check("cuEventElapsedTime", unsafe {
            driver!(cuEventElapsedTime_v2)?(&mut ms, start.raw, self.raw)
        })?;
        Ok(ms)
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: created by cuEventCreate, destroyed once.
        if let Ok(f) = driver!(cuEventDestroy_v2) {
            let _ = unsafe { f(self.raw) };
        }
    }
}

/// Device memory from cuMemAlloc (not the stream-ordered pool: dma-buf export needs it).
pub struct DeviceBuffer {
    ctx: Rc<Context>,
    pub ptr: cu::CUdeviceptr,
    pub bytes: usize,
}

impl DeviceBuffer {
    pub fn new(ctx: &Rc<Context>, bytes: usize) -> Result<DeviceBuffer, CudaError> {
        ctx.make_current()?;
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; the context is current.
        check("cuMemAlloc", unsafe {
            driver!(cuMemAlloc_v2)?(&mut ptr, bytes)
        })?;
        let b = DeviceBuffer {
            ctx: ctx.clone(),
            ptr,
            bytes,
        };
        // Touch every page so the first timed copy pays no first-use cost.
        // SAFETY: `ptr` spans `bytes`; the null stream is legal.
        check("cuMemsetD8", unsafe {
            driver!(cuMemsetD8_v2)?(ptr, 0x5a, bytes)
        })?;
        Ok(b)
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: allocated by cuMemAlloc, freed once.
        if let Ok(f) = driver!(cuMemFree_v2) {
            let _ = unsafe { f(self.ptr) };
        }
    }
}

/// Page-locked host memory from cuMemHostAlloc: PORTABLE | DEVICEMAP, never WRITECOMBINED
/// (write-combined memory is uncached for CPU reads, and not what applications use).
pub struct PinnedBuffer {
    ctx: Rc<Context>,
    pub ptr: *mut c_void,
    pub bytes: usize,
}

impl PinnedBuffer {
    pub fn new(ctx: &Rc<Context>, bytes: usize) -> Result<PinnedBuffer, CudaError> {
        ctx.make_current()?;
        let mut ptr: *mut c_void = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; flags are documented cuMemHostAlloc flags.
        check("cuMemHostAlloc", unsafe {
            driver!(cuMemHostAlloc)?(
                &mut ptr,
                bytes,
                cu::CU_MEMHOSTALLOC_PORTABLE | cu::CU_MEMHOSTALLOC_DEVICEMAP,
            )
        })?;
        // SAFETY: the driver returned `bytes` writable bytes at `ptr`.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, 0xa5, bytes) };
        Ok(PinnedBuffer {
            ctx: ctx.clone(),
            ptr,
            bytes,
        })
    }

    /// The unified address (host pointer as a device pointer; UVA on every 64-bit platform).
    pub fn addr(&self) -> cu::CUdeviceptr {
        self.ptr as cu::CUdeviceptr
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: allocated by cuMemHostAlloc, freed once.
        if let Ok(f) = driver!(cuMemFreeHost) {
            let _ = unsafe { f(self.ptr) };
        }
    }
}

/// Host memory someone else allocated (libmlx5's queues, a UAR page) made visible to the GPU
/// with cuMemHostRegister (PORTABLE | DEVICEMAP, plus IOMEMORY for a device register page,
/// which needs the driver's PeerMappingOverride=1). `ptr`/`bytes` must cover whole pages;
/// unregistered on drop. The memory itself is not owned.
pub struct HostRegistration {
    ctx: Rc<Context>,
    ptr: *mut c_void,
    pub bytes: usize,
    /// The address kernels use for `ptr`.
    pub device: cu::CUdeviceptr,
}

impl HostRegistration {
    /// # Safety
    /// `ptr..ptr+bytes` must be mapped for the life of the result (the caller unregisters,
    /// by dropping it, before the owner frees or unmaps it).
    pub unsafe fn new(
        ctx: &Rc<Context>,
        ptr: *mut c_void,
        bytes: usize,
        io_memory: bool,
    ) -> Result<HostRegistration, CudaError> {
        ctx.make_current()?;
        let mut flags = cu::CU_MEMHOSTREGISTER_PORTABLE | cu::CU_MEMHOSTREGISTER_DEVICEMAP;
        if io_memory {
            flags |= cu::CU_MEMHOSTREGISTER_IOMEMORY;
        }
        // SAFETY: the caller's contract; documented flags.
        check("cuMemHostRegister", unsafe {
            driver!(cuMemHostRegister_v2)?(ptr, bytes, flags)
        })?;
        let mut device: cu::CUdeviceptr = 0;
        // SAFETY: `ptr` was registered above; out-pointer to a local.
        let got = check("cuMemHostGetDevicePointer", unsafe {
            driver!(cuMemHostGetDevicePointer_v2)?(&mut device, ptr, 0)
        });
        if let Err(e) = got {
            // SAFETY: registered above, unregistered once.
            if let Ok(f) = driver!(cuMemHostUnregister) {
                let _ = unsafe { f(ptr) };
            }
            return Err(e);
        }
        Ok(HostRegistration {
            ctx: ctx.clone(),
            ptr,
            bytes,
            device,
        })
    }

    /// The device address of host address `p`, which must lie inside the registration.
    pub fn device_addr(&self, p: *const c_void) -> Option<cu::CUdeviceptr> {
        let off = (p as usize).checked_sub(self.ptr as usize)?;
        (off < self.bytes).then(|| self.device + off as cu::CUdeviceptr)
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: registered by new, unregistered once.
        if let Ok(f) = driver!(cuMemHostUnregister) {
            let _ = unsafe { f(self.ptr) };
        }
    }
}

/// Copy `bytes` from `src` to `dst` (unified addresses) on `s`: the copy engine.
pub fn memcpy_async(
    dst: cu::CUdeviceptr,
    src: cu::CUdeviceptr,
    bytes: usize,
    s: &Stream,
) -> Result<(), CudaError> {
    // SAFETY: the callers own both ranges for at least `bytes` and keep them alive until the
    // stream is synchronized.
    check("cuMemcpyAsync", unsafe {
        driver!(cuMemcpyAsync)?(dst, src, bytes, s.raw)
    })
}

/// A kernel of a loaded `Module` (valid while the module lives).
#[derive(Debug, Clone, Copy)]
pub struct Kernel(cu::CUfunction);

/// A loaded CUBIN.
pub struct Module {
    ctx: Rc<Context>,
    raw: cu::CUmodule,
}

impl Module {
    pub fn load(ctx: &Rc<Context>, cubin: &[u8]) -> Result<Module, CudaError> {
        ctx.make_current()?;
        let mut raw: cu::CUmodule = std::ptr::null_mut();
        // SAFETY: `cubin` is a complete CUBIN image produced by NVRTC.
        check("cuModuleLoadData", unsafe {
            driver!(cuModuleLoadData)?(&mut raw, cubin.as_ptr() as *const c_void)
        })?;
        Ok(Module {
            ctx: ctx.clone(),
            raw,
        })
    }

    pub fn function(&self, name: &str) -> Result<Kernel, CudaError> {
        let c = CString::new(name).map_err(|e| CudaError::Unavailable(e.to_string()))?;
        let mut f: cu::CUfunction = std::ptr::null_mut();
        // SAFETY: out-pointer to a local; a loaded module.
        check("cuModuleGetFunction", unsafe {
            driver!(cuModuleGetFunction)?(&mut f, self.raw, c.as_ptr())
        })?;
        Ok(Kernel(f))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: loaded by cuModuleLoadData, unloaded once.
        if let Ok(f) = driver!(cuModuleUnload) {
            let _ = unsafe { f(self.raw) };
        }
    }
}

/// Launch `gpudoctor_copy_u4(src, dst, words)` on `s`.
pub fn launch_copy(
    f: Kernel,
    grid: u32,
    block: u32,
    src: cu::CUdeviceptr,
    dst: cu::CUdeviceptr,
    words: u64,
    s: &Stream,
) -> Result<(), CudaError> {
    let (mut a, mut b, mut n) = (src, dst, words);
    let mut params: [*mut c_void; 3] = [
        &mut a as *mut _ as *mut c_void,
        &mut b as *mut _ as *mut c_void,
        &mut n as *mut _ as *mut c_void,
    ];
    // SAFETY: the parameter array matches the kernel's signature (two pointers, one u64) and
    // the locals outlive the call (the driver copies them at launch).
    unsafe { launch(f, grid, block, &mut params, s) }
}

/// Launch `f` on one-dimensional `grid` x `block` with `params` (pointers to each argument,
/// in the kernel's parameter order).
///
/// # Safety
/// `params` must match the kernel's signature in number, order and size, and every pointer
/// argument must name memory that stays valid until the stream is synchronized.
pub unsafe fn launch(
    f: Kernel,
    grid: u32,
    block: u32,
    params: &mut [*mut c_void],
    s: &Stream,
) -> Result<(), CudaError> {
    // SAFETY: the caller's contract above; the driver copies the arguments at launch.
    check("cuLaunchKernel", unsafe {
        driver!(cuLaunchKernel)?(
            f.0,
            grid,
            1,
            1,
            block,
            1,
            1,
            0,
            s.raw,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    })
}

/// Compile CUDA C to CUBIN for `arch` (`sm_90`): CUBIN, not PTX, so a newer NVRTC never
/// hands the driver PTX of an ISA version it cannot JIT.
pub fn compile_cubin(src: &str, name: &str, arch: &str) -> Result<Vec<u8>, CudaError> {
    let csrc = CString::new(src).map_err(|e| CudaError::Unavailable(e.to_string()))?;
    let cname = CString::new(name).map_err(|e| CudaError::Unavailable(e.to_string()))?;
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NUL-terminated source and name; no headers.
    nvrtc_check("nvrtcCreateProgram", unsafe {
        nvrtc!(nvrtcCreateProgram)?(
            &mut prog,
            csrc.as_ptr(),
            cname.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    })?;
    let result = compile_inner(prog, name, arch);
    // SAFETY: created above, destroyed once.
    let _ = unsafe { nvrtc!(nvrtcDestroyProgram)?(&mut prog) };
    result
}

fn compile_inner(prog: nv::nvrtcProgram, name: &str, arch: &str) -> Result<Vec<u8>, CudaError> {
    // NVRTC optimises device code by default (-dopt); it has no -O3.
    let opts = [format!("--gpu-architecture={arch}")];
    let copts: Vec<CString> = opts
        .iter()
        .map(|o| CString::new(o.as_str()).unwrap_or_default())
        .collect();
    let ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
    // SAFETY: `ptrs` holds `ptrs.len()` valid C strings that outlive the call.
    let rc = unsafe { nvrtc!(nvrtcCompileProgram)?(prog, ptrs.len() as c_int, ptrs.as_ptr()) };
    if rc != nv::nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(prog).unwrap_or_else(|e| format!("(no log: {e})"));
        return Err(CudaError::Compile {
            kernel: name.to_string(),
            arch: arch.to_string(),
            log: log.trim().to_string(),
        });
    }
    let mut size = 0usize;
    // SAFETY: out-pointer to a local.
    nvrtc_check("nvrtcGetCUBINSize", unsafe {
        nvrtc!(nvrtcGetCUBINSize)?(prog, &mut size)
    })?;
    let mut buf = vec![0u8; size];
    // SAFETY: `buf` has the size NVRTC reported.
    nvrtc_check("nvrtcGetCUBIN", unsafe {
        nvrtc!(nvrtcGetCUBIN)?(prog, buf.as_mut_ptr() as *mut c_char)
    })?;
    Ok(buf)
}

fn program_log(prog: nv::nvrtcProgram) -> Result<String, CudaError> {
    let mut size = 0usize;
    // SAFETY: out-pointer to a local.
    nvrtc_check("nvrtcGetProgramLogSize", unsafe {
        nvrtc!(nvrtcGetProgramLogSize)?(prog, &mut size)
    })?;
    let mut buf = vec![0u8; size.max(1)];
    // SAFETY: `buf` has the size NVRTC reported.
    nvrtc_check("nvrtcGetProgramLog", unsafe {
        nvrtc!(nvrtcGetProgramLog)?(prog, buf.as_mut_ptr() as *mut c_char)
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Peer capability of `src` reaching `dst`.
pub fn can_access_peer(src: &Device, dst: &Device) -> Result<bool, CudaError> {
    let mut v: c_int = 0;
    // SAFETY: out-pointer to a local; valid device handles.
    check("cuDeviceCanAccessPeer", unsafe {
        driver!(cuDeviceCanAccessPeer)?(&mut v, src.handle, dst.handle)
    })?;
    Ok(v != 0)
}

/// The P2P attributes, by the names of the CUDA driver API.
pub fn p2p_attributes(src: &Device, dst: &Device) -> Vec<(&'static str, Result<i32, String>)> {
    use cu::CUdevice_P2PAttribute as P;
    let list = [
        (
            "performance_rank",
            P::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
        ),
        (
            "access_supported",
            P::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
        ),
        (
            "native_atomic_supported",
            P::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
        ),
        (
            "cuda_array_access_supported",
            P::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_ACCESS_SUPPORTED,
        ),
    ];
    list.into_iter()
        .map(|(name, a)| {
            let mut v: c_int = 0;
            // SAFETY: out-pointer to a local; valid device handles.
            let r = driver!(cuDeviceGetP2PAttribute).and_then(|f| {
                check("cuDeviceGetP2PAttribute", unsafe {
                    f(&mut v, a, src.handle, dst.handle)
                })
            });
            (name, r.map(|_| v).map_err(|e| e.to_string()))
        })
        .collect()
}

/// Export `buf` as a dma-buf file descriptor (the GPU half of GPUDirect RDMA over dma-buf);
/// the descriptor is closed before returning.
pub fn export_dmabuf(buf: &DeviceBuffer) -> Result<(), CudaError> {
    buf.ctx.make_current()?;
    let mut fd: c_int = -1;
    // SAFETY: out-pointer to a local int (the driver writes an fd); the range is one whole
    // cuMemAlloc allocation, aligned to the host page size.
    check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", unsafe {
        driver!(cuMemGetHandleForAddressRange)?(
            &mut fd as *mut c_int as *mut c_void,
            buf.ptr,
            buf.bytes,
            cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    })?;
    if fd >= 0 {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(fd) };
        Ok(())
    } else {
        Err(CudaError::Unavailable(
            "cuMemGetHandleForAddressRange returned success but no file descriptor".to_string(),
        ))
    }
}

/// Device memory for GPUDirect RDMA (level 3): one cuMemAlloc allocation rounded up to whole
/// 64 KiB GPU pages (the unit nvidia-peermem pins and NCCL aligns to), zeroed, with
/// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` set as NCCL and perftest set it, so that a CUDA copy
/// touching this memory is complete before the NIC reads or writes it.
pub struct RdmaBuffer {
    ctx: Rc<Context>,
    pub ptr: cu::CUdeviceptr,
    /// Bytes allocated (`requested` rounded up to `GPU_PAGE_BYTES`).
    pub bytes: usize,
}

/// nvidia-peermem and the GPU's MMU map device memory in 64 KiB pages.
pub const GPU_PAGE_BYTES: usize = 1 << 16;

impl RdmaBuffer {
    pub fn new(ctx: &Rc<Context>, requested: usize) -> Result<RdmaBuffer, CudaError> {
        ctx.make_current()?;
        let bytes = requested.max(1).div_ceil(GPU_PAGE_BYTES) * GPU_PAGE_BYTES;
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: out-pointer to a local; the context is current.
        check("cuMemAlloc", unsafe {
            driver!(cuMemAlloc_v2)?(&mut ptr, bytes)
        })?;
        let b = RdmaBuffer {
            ctx: ctx.clone(),
            ptr,
            bytes,
        };
        let one: u32 = 1;
        // SAFETY: `ptr` is the base of a live cuMemAlloc allocation; the attribute takes an
        // unsigned int.
        check("cuPointerSetAttribute(SYNC_MEMOPS)", unsafe {
            driver!(cuPointerSetAttribute)?(
                &one as *const u32 as *const c_void,
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                ptr,
            )
        })?;
        b.memset(0, bytes)?;
        Ok(b)
    }

    /// `CU_POINTER_ATTRIBUTE_SYNC_MEMOPS` as the driver reports it now.
    pub fn sync_memops(&self) -> Result<bool, CudaError> {
        self.ctx.make_current()?;
        let mut v: u32 = 0;
        // SAFETY: out-pointer to a local unsigned int; `ptr` is live.
        check("cuPointerGetAttribute(SYNC_MEMOPS)", unsafe {
            driver!(cuPointerGetAttribute)?(
                &mut v as *mut u32 as *mut c_void,
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_SYNC_MEMOPS,
                self.ptr,
            )
        })?;
        Ok(v != 0)
    }

    /// Set `len` bytes from the start to `byte` (synchronous with respect to the host).
    pub fn memset(&self, byte: u8, len: usize) -> Result<(), CudaError> {
        self.ctx.make_current()?;
        // SAFETY: `ptr` spans `bytes`; callers pass len <= bytes.
        check("cuMemsetD8", unsafe {
            driver!(cuMemsetD8_v2)?(self.ptr, byte, len.min(self.bytes))
        })?;
        self.synchronize()
    }

    /// Copy `src` to the start of the buffer.
    pub fn upload(&self, src: &[u8]) -> Result<(), CudaError> {
        self.upload_at(0, &src[..src.len().min(self.bytes)])
    }

    /// Copy `src` to byte `off` of the buffer (an error where it does not fit).
    pub fn upload_at(&self, off: usize, src: &[u8]) -> Result<(), CudaError> {
        if off
            .checked_add(src.len())
            .is_none_or(|end| end > self.bytes)
        {
            return Err(CudaError::Unavailable(format!(
                "{} B at offset {off} do not fit a {} B buffer",
                src.len(),
                self.bytes
            )));
        }
        self.ctx.make_current()?;
        // SAFETY: `src` holds src.len() readable bytes; the device range fits (checked).
        check("cuMemcpyHtoD", unsafe {
            driver!(cuMemcpyHtoD_v2)?(
                self.ptr + off as cu::CUdeviceptr,
                src.as_ptr() as *const c_void,
                src.len(),
            )
        })
    }

    /// Copy the start of the buffer into `dst`.
    pub fn download(&self, dst: &mut [u8]) -> Result<(), CudaError> {
        self.ctx.make_current()?;
        let n = dst.len().min(self.bytes);
        // SAFETY: `dst` holds n writable bytes; the device range holds n bytes.
        check("cuMemcpyDtoH", unsafe {
            driver!(cuMemcpyDtoH_v2)?(dst.as_mut_ptr() as *mut c_void, self.ptr, n)
        })
    }

    fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: the context is current.
        check("cuCtxSynchronize", unsafe { driver!(cuCtxSynchronize)?() })
    }

    /// Export the whole allocation as a dma-buf; the caller owns (and closes) the descriptor.
    pub fn export_dmabuf(&self) -> Result<std::os::fd::OwnedFd, CudaError> {
        use std::os::fd::FromRawFd;
        self.ctx.make_current()?;
        let mut fd: c_int = -1;
        // SAFETY: out-pointer to a local int; the range is one whole cuMemAlloc allocation,
        // a multiple of the host page size (64 KiB pages).
        check("cuMemGetHandleForAddressRange(DMA_BUF_FD)", unsafe {
            driver!(cuMemGetHandleForAddressRange)?(
                &mut fd as *mut c_int as *mut c_void,
                self.ptr,
                self.bytes,
                cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        })?;
        if fd < 0 {
            return Err(CudaError::Unavailable(
                "cuMemGetHandleForAddressRange returned success but no file descriptor".into(),
            ));
        }
        // SAFETY: the driver handed us a new descriptor that nothing else owns.
        Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
    }
}

impl Drop for RdmaBuffer {
    fn drop(&mut self) {
        let _ = self.ctx.make_current();
        // SAFETY: allocated by cuMemAlloc, freed once (after every registration of it: the
        // owner drops its memory regions first).
        if let Ok(f) = driver!(cuMemFree_v2) {
            let _ = unsafe { f(self.ptr) };
        }
    }
}

/// Free and total device memory of the current context's GPU (cuMemGetInfo).
pub fn mem_info(ctx: &Context) -> Result<(u64, u64), CudaError> {
    ctx.make_current()?;
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: out-pointers to locals; a current context.
    check("cuMemGetInfo", unsafe {
        driver!(cuMemGetInfo_v2)?(&mut free, &mut total)
    })?;
    Ok((free as u64, total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvrtc_search_covers_cuda_home_and_the_targets_dir() {
        let dirs = nvrtc_search_dirs(&[PathBuf::from("/opt/mycuda")]);
        assert_eq!(
            dirs[0],
            PathBuf::from("/opt/mycuda/targets/x86_64-linux/lib")
        );
        // Where NVIDIA's Ubuntu packages put libnvrtc on our GPU machines.
        assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/targets/x86_64-linux/lib")));
        assert!(dirs.contains(&PathBuf::from("/usr/local/cuda/lib64")));
    }

    /// A libcuda with only cuInit and cuDeviceGetCount (the latter failing), built here with
    /// cc and preloaded by absolute path as `find_nvrtc` does, so cudarc's dlopen("libcuda.so")
    /// gets it: every missing symbol is a `CudaError::Missing`, where cudarc would panic.
    /// (Under nextest each test is its own process: the fake is seen by this test only.)
    #[test]
    fn a_missing_driver_symbol_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let c = dir.path().join("fake_cuda.c");
        std::fs::write(
            &c,
            "int cuInit(unsigned int f) { (void)f; return 0; }\n\
             int cuDeviceGetCount(int *n) { *n = 0; return 999; }\n",
        )
        .expect("write the fake's source");
        let so = dir.path().join("libcuda.so");
        let built = std::process::Command::new("cc")
            .args(["-shared", "-fPIC", "-Wl,-soname,libcuda.so", "-o"])
            .arg(&so)
            .arg(&c)
            .status()
            .expect("cc runs (scripts/test installs gcc)");
        assert!(built.success(), "cc could not build the fake libcuda");
        dlopen_global(&so).expect("the fake libcuda loads");
        assert!(driver_presence().is_ok());
        // cuInit is there and succeeds; cuDriverGetVersion is not.
        match init() {
            Err(CudaError::Missing {
                library: "libcuda.so.1",
                symbol: "cuDriverGetVersion",
                ..
            }) => {}
            other => panic!("init: {other:?}"),
        }
        // cuDeviceGetCount fails with 999 (CUDA_ERROR_UNKNOWN); without cuGetErrorName and
        // cuGetErrorString the error still says which.
        match devices() {
            Err(CudaError::Driver { call, name, text }) => {
                assert_eq!(call, "cuDeviceGetCount");
                assert_eq!(name, "CUDA_ERROR_UNKNOWN");
                assert_eq!(text, "no description");
            }
            other => panic!("devices: {other:?}"),
        }
        let e = context_missing();
        assert!(e.to_string().contains("no cuDevicePrimaryCtxRetain"), "{e}");
    }

    /// Context::retain on the fake: the first missing symbol of a context.
    fn context_missing() -> CudaError {
        match Context::retain(0) {
            Err(e) => e,
            Ok(_) => panic!("a context on the fake libcuda"),
        }
    }

    /// The guard is the only door: no call into cudarc's bindings outside `driver!`/`nvrtc!`,
    /// and no other module names cudarc.
    #[test]
    fn every_cuda_call_goes_through_the_guard() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let me = std::fs::read_to_string(root.join("cuda.rs")).expect("read src/cuda.rs");
        for (i, line) in me.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for bare in ["cu::cu", "nv::nvrtc"] {
                for (at, _) in line.match_indices(bare) {
                    // A call: cuX/nvrtcX then "(" (types such as nv::nvrtcResult, the loader's
                    // cu::culib() and the macros' own `cu::$sym` are not calls into the API).
                    let rest = &line[at + bare.len()..];
                    let name_end = rest
                        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                        .unwrap_or(rest.len());
                    let called = rest.starts_with(|c: char| c.is_ascii_uppercase())
                        && rest[name_end..].starts_with('(');
                    assert!(
                        !called,
                        "src/cuda.rs:{}: a CUDA call outside driver!/nvrtc!: {line}",
                        i + 1
                    );
                }
            }
        }
        fn walk(d: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(d).expect("read src").flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    out.push(p);
                }
            }
        }
        let mut files = Vec::new();
        walk(&root, &mut files);
        assert!(files.len() > 50);
        for f in files.iter().filter(|f| !f.ends_with("cuda.rs")) {
            let text = std::fs::read_to_string(f).expect("read a source file");
            assert!(
                !text.contains("cudarc::"),
                "{} uses cudarc directly: go through crate::cuda",
                f.display()
            );
        }
    }

    #[test]
    fn presence_checks_never_panic() {
        // Here (no CUDA) these say why; on a GPU machine they succeed. Neither panics.
        let _ = driver_presence();
        let _ = find_nvrtc(&nvrtc_search_dirs(&[]));
    }
}
