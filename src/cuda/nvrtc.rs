//! NVRTC: finding libnvrtc where a CUDA toolkit put it (CUDA_HOME, /usr/local/cuda...),
//! its version, and compiling CUDA C to CUBIN for one GPU's exact `sm_XX`.
//!
//! It must not read the environment (the CUDA homes come from `config`) and must not load or
//! launch what it compiles (`module` does).

use super::library::{CudaError, cstr_or, dlopen_global};
use cudarc::nvrtc::sys as nv;
use std::ffi::{CString, c_char, c_int};
use std::path::PathBuf;

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

pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut ma, mut mi) = (0, 0);
    // SAFETY: out-pointers to locals.
    nvrtc_check("nvrtcVersion", unsafe {
        nvrtc!(nvrtcVersion)?(&mut ma, &mut mi)
    })?;
    Ok((ma, mi))
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
