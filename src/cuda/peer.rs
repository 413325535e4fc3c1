//! Peer access between two GPUs: whether one can reach the other, and the P2P attributes the
//! driver reports for the pair.
//!
//! It must not enable access (`Context::enable_peer_access`) and must not judge the answers.

use super::device::Device;
use super::library::{CudaError, check};
use cudarc::driver::sys as cu;
use std::ffi::c_int;

/// Peer capability of `src` reaching `dst`.
pub fn can_access_peer(src: &Device, dst: &Device) -> Result<bool, CudaError> {
    let mut v: c_int = 0;
    // SAFETY: out-pointer to a local; valid device handles.
    check("cuDeviceCanAccessPeer", unsafe {
        driver!(cuDeviceCanAccessPeer)?(&mut v, src.handle, dst.handle)
    })?;
    Ok(v != 0)
}

/// The P2P attributes, by the names of the CUDA driver API.
pub fn p2p_attributes(
    src: &Device,
    dst: &Device,
) -> Vec<(&'static str, crate::reading::Reading<i32>)> {
    use cu::CUdevice_P2PAttribute as P;
    let list = [
        (
            "performance_rank",
            P::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK,
        ),
        (
            "access_supported",
            P::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED,
        ),
        (
            "native_atomic_supported",
            P::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED,
        ),
        (
            "cuda_array_access_supported",
            P::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_ACCESS_SUPPORTED,
        ),
    ];
    list.into_iter()
        .map(|(name, a)| {
            let mut v: c_int = 0;
            let r = driver!(cuDeviceGetP2PAttribute).and_then(|f| {
                // SAFETY: out-pointer to a local; valid device handles.
                check("cuDeviceGetP2PAttribute", unsafe {
                    f(&mut v, a, src.handle, dst.handle)
                })
            });
            (name, crate::reading::Reading::from_result(r.map(|_| v)))
        })
        .collect()
}
