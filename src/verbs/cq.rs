//! Completion queues (`Cq`, from `Context::create_cq`), polled without a channel.

use super::context::Context;
use super::error::{VerbsError, libc_enosys};
use super::ffi::sys;
use std::ffi::c_int;
use std::ptr::NonNull;
use std::rc::Rc;

pub(super) struct CqInner {
    pub(super) ctx: Context,
    pub(super) cq: NonNull<sys::ibv_cq>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ hold an Rc to it, so none is alive any more.
        unsafe {
            self.ctx.lib().ibv_destroy_cq(self.cq.as_ptr());
        }
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq(pub(super) Rc<CqInner>);

/// An all-zero work completion, for poll buffers.
pub fn empty_wc() -> sys::ibv_wc {
    // SAFETY: ibv_wc is plain data.
    unsafe { std::mem::zeroed() }
}

impl Cq {
    /// The provider's CQ (for libmlx5's direct verbs); valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.0.cq.as_ptr()
    }

    /// verbs.h's `static inline ibv_poll_cq`, by hand: through the context's ops table.
    /// Returns how many entries of `wc` were filled.
    #[inline]
    pub fn poll(&self, wc: &mut [sys::ibv_wc]) -> Result<usize, VerbsError> {
        // SAFETY: cq->context is the context the CQ was created on (alive: we hold it); its
        // ops.poll_cq is set by every provider; wc has room for wc.len() entries.
        unsafe {
            let cq = self.0.cq.as_ptr();
            let Some(poll) = (*(*cq).context).ops.poll_cq else {
                return Err(VerbsError::rc(
                    "ibv_poll_cq (no provider op)",
                    libc_enosys(),
                ));
            };
            let n = poll(
                cq,
                wc.len().min(i32::MAX as usize) as c_int,
                wc.as_mut_ptr(),
            );
            if n < 0 {
                return Err(VerbsError::rc("ibv_poll_cq", n));
            }
            Ok(n as usize)
        }
    }

    /// An error for a completion `wc` with a non-success status.
    pub fn completion_error(&self, wc: &sys::ibv_wc) -> VerbsError {
        VerbsError::Completion {
            status: wc.status,
            status_str: self.0.ctx.verbs().wc_status_str(wc.status),
            vendor_err: wc.vendor_err,
        }
    }
}

impl Context {
    /// A completion queue with at least `cqe` entries, without a completion channel (polled).
    pub fn create_cq(&self, cqe: i32) -> Result<Cq, VerbsError> {
        // SAFETY: the context is open; the CQ is destroyed by CqInner's Drop.
        let cq = unsafe {
            self.lib().ibv_create_cq(
                self.ptr(),
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| VerbsError::errno("ibv_create_cq"))?;
        Ok(Cq(Rc::new(CqInner {
            ctx: self.clone(),
            cq,
        })))
    }
}
