//! Protection domains (`Pd`, from `Context::alloc_pd`) and NCCL's dma-buf probe
//! (`DmabufProbe`). Registration is `mr`'s; queue pairs are `qp`'s.

use super::context::Context;
use super::error::VerbsError;
use super::ffi::sys;
use std::ptr::NonNull;
use std::rc::Rc;

pub(super) struct PdInner {
    pub(super) ctx: Context,
    pub(super) pd: NonNull<sys::ibv_pd>,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Rc to this, so none is alive any more.
        unsafe {
            self.ctx.lib().ibv_dealloc_pd(self.pd.as_ptr());
        }
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct Pd(pub(super) Rc<PdInner>);

/// What NCCL's dma-buf probe learnt about a provider: `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`
/// (NCCL src/transport/net_ib.cc, `ncclIbDmaBufSupport`; src/transport/net_ib/gdr.cc in later
/// releases) fails with EOPNOTSUPP or EPROTONOSUPPORT where the provider or kernel lacks dma-buf
/// MRs, and with EBADF (the fd) where it would try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmabufProbe {
    /// libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34).
    NoSymbol,
    /// The call failed with this errno.
    Errno(i32),
    /// The call succeeded on fd -1 (never seen; the region was deregistered at once).
    Registered,
}

impl Pd {
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }
    /// The raw PD, for libmlx5's direct verbs (alive as long as this handle).
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.0.pd.as_ptr()
    }

    /// NCCL's dma-buf support probe on this PD's device (see `DmabufProbe`).
    pub fn probe_dmabuf(&self) -> DmabufProbe {
        if !self.0.ctx.verbs().has_reg_dmabuf_mr() {
            return DmabufProbe::NoSymbol;
        }
        match self.reg_dmabuf_mr(0, 0, 0, -1, 0) {
            Ok(mr) => {
                drop(mr);
                DmabufProbe::Registered
            }
            Err(e) => DmabufProbe::Errno(e.raw_os_error().unwrap_or(0)),
        }
    }
}

impl Context {
    pub fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: the context is open; the PD is freed by PdInner's Drop.
        let pd = unsafe { self.lib().ibv_alloc_pd(self.ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| VerbsError::errno("ibv_alloc_pd"))?;
        Ok(Pd(Rc::new(PdInner {
            ctx: self.clone(),
            pd,
        })))
    }
}
