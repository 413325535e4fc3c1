//! Memory owners: device memory (`cuMemAlloc`), page-locked host memory (`cuMemHostAlloc`), and
//! host memory someone else allocated registered for the GPU (`cuMemHostRegister`); each
//! freed or unregistered on drop.
//!
//! It must not copy (`stream`) and must not hand out memory for GPUDirect RDMA (`gpudirect`).

use super::device::Context;
use super::library::{CudaError, check};
use cudarc::driver::sys as cu;
use std::ffi::c_void;
use std::rc::Rc;

/// Device memory from cuMemAlloc (not the stream-ordered pool: dma-buf export needs it).
pub struct DeviceBuffer {
    pub(super) ctx: Rc<Context>,
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
        if let Ok(f) = driver!(cuMemFree_v2) {
            // SAFETY: allocated by cuMemAlloc, freed once.
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
        if let Ok(f) = driver!(cuMemFreeHost) {
            // SAFETY: allocated by cuMemHostAlloc, freed once.
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
            if let Ok(f) = driver!(cuMemHostUnregister) {
                // SAFETY: registered above, unregistered once.
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
        if let Ok(f) = driver!(cuMemHostUnregister) {
            // SAFETY: registered by new, unregistered once.
            let _ = unsafe { f(self.ptr) };
        }
    }
}
