//! Loading libcuda and libnvrtc at run time, and the driver's results as typed errors:
//! `resolve` is the one guarded door every driver and NVRTC call goes through (the `driver!`
//! and `nvrtc!` macros), so a missing library or symbol is a `CudaError::Missing`, never
//! cudarc's panic.
//!
//! It must not call into the CUDA API beyond looking symbols up and naming errors.

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nv;
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;

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

pub(super) fn cstr_or(p: *const c_char, fallback: &str) -> String {
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

/// dlopen a file by absolute path with RTLD_NOW | RTLD_GLOBAL and keep it loaded for the
/// life of the process (the handle is deliberately never closed).
pub(super) fn dlopen_global(p: &Path) -> Result<(), String> {
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
