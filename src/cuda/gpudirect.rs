//! GPU memory for GPUDirect RDMA: `RdmaBuffer` (whole 64 KiB GPU pages, SYNC_MEMOPS set as NCCL
//! sets it) and the dma-buf export of device memory (`cuMemGetHandleForAddressRange`).
//!
//! It must not register memory with a NIC (the verbs side does) and must not decide how GPU
//! memory is registered (`rdma::judge::gdr`).

use super::device::Context;
use super::library::{CudaError, check};
use super::memory::DeviceBuffer;
use cudarc::driver::sys as cu;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

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
        if let Ok(f) = driver!(cuMemFree_v2) {
            // SAFETY: allocated by cuMemAlloc, freed once (after every registration of it: the
            // owner drops its memory regions first).
            let _ = unsafe { f(self.ptr) };
        }
    }
}
