//! Memory regions and their registration: `RawMr` over memory someone else owns
//! (`Pd::reg_mr_at`, `Pd::reg_dmabuf_mr`), `AlignedBuf` and the `Mr` that owns it
//! (`Pd::reg_mr`).

use super::error::VerbsError;
use super::ffi::sys;
use super::pd::Pd;
use std::alloc::Layout;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

/// A registered region over memory it does not own (see `Pd::reg_mr_at`,
/// `Pd::reg_dmabuf_mr`): deregistered on drop, which its owner must order before freeing the
/// memory.
pub struct RawMr {
    pub(super) pd: Pd,
    pub(super) mr: NonNull<sys::ibv_mr>,
    pub(super) addr: u64,
    pub(super) len: usize,
}

impl RawMr {
    /// The address work requests and the peer use for this region.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered for as long as self lives.
        unsafe { (*self.mr.as_ptr()).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
}

impl Drop for RawMr {
    fn drop(&mut self) {
        // SAFETY: registered by this PD, deregistered once.
        unsafe {
            self.pd.0.ctx.lib().ibv_dereg_mr(self.mr.as_ptr());
        }
    }
}

/// A page-aligned, zeroed buffer for registration.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl AlignedBuf {
    const ALIGN: usize = 4096;
    pub fn zeroed(len: usize) -> Option<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), Self::ALIGN).ok()?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(AlignedBuf {
            ptr: NonNull::new(p)?,
            len,
        })
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The buffer's address (for `Pd::reg_mr_at`; the buffer must outlive the region).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: len bytes allocated and initialised (zeroed) in `zeroed`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; &mut self makes this the only CPU view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len.max(1), Self::ALIGN),
            )
        }
    }
}

/// A registered memory region that owns its buffer.
pub struct Mr {
    pd: Pd,
    mr: NonNull<sys::ibv_mr>,
    buf: AlignedBuf,
}

impl Mr {
    pub fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }
    pub fn len(&self) -> usize {
        self.buf.len
    }
    pub fn is_empty(&self) -> bool {
        self.buf.len == 0
    }
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered for as long as self lives.
        unsafe { (*self.mr.as_ptr()).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
    /// The CPU view of the buffer. The device may write into it (it was registered for remote
    /// writes): read it only when no RDMA write to it is in flight.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: len bytes allocated and initialised (zeroed) in AlignedBuf.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr(), self.buf.len) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; &mut self makes this the only CPU view.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr(), self.buf.len) }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: deregistered before `buf` (a field) is freed.
        unsafe {
            self.pd.0.ctx.lib().ibv_dereg_mr(self.mr.as_ptr());
        }
    }
}

impl Pd {
    /// Register `buf` (which the region then owns, so it outlives the registration).
    pub fn reg_mr(&self, buf: AlignedBuf, access: u32) -> Result<Mr, VerbsError> {
        // SAFETY: buf is a live allocation of buf.len() bytes that Mr keeps until after
        // ibv_dereg_mr. ibv_reg_mr here is the exported IBVERBS_1.1 function (the header's
        // __ibv_reg_mr macro only adds IBV_ACCESS_OPTIONAL_RANGE handling, unused here).
        let mr = unsafe {
            self.0.ctx.lib().ibv_reg_mr(
                self.0.pd.as_ptr(),
                buf.ptr.as_ptr() as *mut c_void,
                buf.len,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_mr"))?;
        Ok(Mr {
            pd: self.clone(),
            mr,
            buf,
        })
    }
}

impl Pd {
    /// Register `len` bytes at `addr`, which the caller owns (host memory, or a GPU pointer
    /// that nvidia-peermem resolves). The region does not own the memory.
    ///
    /// # Safety
    /// `addr..addr+len` must stay allocated until the returned region is dropped.
    pub unsafe fn reg_mr_at(
        &self,
        addr: u64,
        len: usize,
        access: u32,
    ) -> Result<RawMr, VerbsError> {
        // SAFETY: the caller vouches for the range; ibv_reg_mr is the exported IBVERBS_1.1
        // function (as in `reg_mr`).
        let mr = unsafe {
            self.0.ctx.lib().ibv_reg_mr(
                self.0.pd.as_ptr(),
                addr as *mut c_void,
                len,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_mr"))?;
        Ok(RawMr {
            pd: self.clone(),
            mr,
            addr,
            len,
        })
    }

    /// Register `len` bytes at `offset` of the dma-buf `fd`, addressed by the peer as `iova`.
    /// The kernel holds its own reference to the dma-buf: `fd` may be closed afterwards.
    pub fn reg_dmabuf_mr(
        &self,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: u32,
    ) -> Result<RawMr, VerbsError> {
        require!(self.0.ctx.lib(), ibv_reg_dmabuf_mr);
        // SAFETY: a live PD; the kernel validates fd, offset and length against the dma-buf.
        let mr = unsafe {
            self.0.ctx.lib().ibv_reg_dmabuf_mr(
                self.0.pd.as_ptr(),
                offset,
                len,
                iova,
                fd,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_dmabuf_mr"))?;
        Ok(RawMr {
            pd: self.clone(),
            mr,
            addr: iova,
            len,
        })
    }
}
