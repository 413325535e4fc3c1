//! CUDA through cudarc's raw driver and NVRTC bindings, loaded at run time (dlopen), never
//! linked. Thin RAII owners for contexts, streams, events, device and pinned host memory,
//! modules; NVRTC compilation of `kernels/*.cu` to CUBIN for the GPU's exact `sm_XX`. By
//! concern, every item re-exported here as `crate::cuda::X`:
//!
//! - `library`: loading libcuda and libnvrtc (`resolve`, the one guarded door), and turning
//!   driver results into `CudaError`s.
//! - `nvrtc`: finding libnvrtc and compiling CUDA C to CUBIN.
//! - `device`: `cuInit`, the devices and their attributes, primary contexts, memory figures.
//! - `stream`: streams, events and asynchronous copies.
//! - `memory`: device memory, pinned host memory, host memory registered for the GPU.
//! - `module`: loaded CUBINs and kernel launches.
//! - `peer`: peer access between two GPUs.
//! - `gpudirect`: GPU memory for GPUDirect RDMA and its dma-buf export.
//!
//! This module must not decide anything (no thresholds, no verdicts) and must not touch sysfs:
//! it turns driver calls into values or typed errors. cudarc panics when a library or a symbol
//! is missing; every call here goes through `resolve` (the `driver!`/`nvrtc!` macros), which
//! turns either into `CudaError::Missing` first.

/// `driver!(cuX)`: `Ok(cu::cuX)` once `resolve` found it, else the `CudaError::Missing`.
/// Callers write `unsafe { driver!(cuX)?(args) }` with their own `// SAFETY:` for the call, and
/// have cudarc's driver bindings in scope as `cu`.
macro_rules! driver {
    ($sym:ident) => {{
        static SEEN: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        $crate::cuda::resolve(&SEEN, $crate::cuda::Library::Driver, stringify!($sym))
            .map(|()| cu::$sym)
    }};
}

/// `nvrtc!(nvrtcX)`: as `driver!`, for libnvrtc (its bindings in scope as `nv`).
macro_rules! nvrtc {
    ($sym:ident) => {{
        static SEEN: std::sync::OnceLock<()> = std::sync::OnceLock::new();
        $crate::cuda::resolve(&SEEN, $crate::cuda::Library::Nvrtc, stringify!($sym))
            .map(|()| nv::$sym)
    }};
}

mod device;
mod gpudirect;
mod library;
mod memory;
mod module;
mod nvrtc;
mod peer;
mod stream;

pub use device::{Context, Device, devices, init, mem_info};
pub use gpudirect::{GPU_PAGE_BYTES, RdmaBuffer, export_dmabuf};
pub use library::{CudaError, Library, check, driver_presence, resolve};
pub use memory::{DeviceBuffer, HostRegistration, PinnedBuffer};
pub use module::{Kernel, Module, launch, launch_copy};
pub use nvrtc::{NvrtcSource, compile_cubin, find_nvrtc, nvrtc_search_dirs, nvrtc_version};
pub use peer::{can_access_peer, p2p_attributes};
pub use stream::{Event, Stream, memcpy_async};

#[cfg(test)]
mod tests;
