//! Streams, events and asynchronous copies on the copy engine: what the copy probes time.
//!
//! It must not allocate the memory it copies (`memory`) and must not judge a timing.

use super::device::Context;
use super::library::{CudaError, check};
use cudarc::driver::sys as cu;
use std::rc::Rc;

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
        if let Ok(f) = driver!(cuStreamDestroy_v2) {
            // SAFETY: created by cuStreamCreate, destroyed once.
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
        if let Ok(f) = driver!(cuEventDestroy_v2) {
            // SAFETY: created by cuEventCreate, destroyed once.
            let _ = unsafe { f(self.raw) };
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
