//! The driver's view of the GPUs: `cuInit`, the devices and their attributes (by PCI address,
//! never assumed to be in PCI order), each device's primary context, and its memory figures.
//!
//! It must not allocate or copy memory (`memory`, `stream`) and must not map devices to the
//! topology (callers match by `Device::bdf`).

use super::library::{CudaError, check, cstr_or};
use cudarc::driver::sys as cu;
use std::ffi::{c_char, c_int};
use std::rc::Rc;

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
    /// CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, or why it could not be read.
    pub dma_buf_supported: crate::reading::Reading<bool>,
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
        let dma_buf_supported = crate::reading::Reading::from_result(
            attr(
                h,
                A::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                "cuDeviceGetAttribute(DMA_BUF_SUPPORTED)",
            )
            .map(|v| v != 0),
        );
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
        if let Ok(f) = driver!(cuDevicePrimaryCtxRelease_v2) {
            // SAFETY: balanced with the retain in `Context::retain`.
            let _ = unsafe { f(self.dev) };
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
