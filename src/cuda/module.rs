//! Loaded CUBINs (`cuModuleLoadData`) and their kernels' launches.
//!
//! It must not compile (`nvrtc`) and must not choose a launch's shape (its callers do).

use super::device::Context;
use super::library::{CudaError, check};
use super::stream::Stream;
use cudarc::driver::sys as cu;
use std::ffi::{CString, c_void};
use std::rc::Rc;

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
        if let Ok(f) = driver!(cuModuleUnload) {
            // SAFETY: loaded by cuModuleLoadData, unloaded once.
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
