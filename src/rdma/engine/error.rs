//! How a write-bw run stops (`ProbeError`) and what the stop means for the exit code
//! (`ErrorClass`): the engine's error type, which level 3 and level 4 branch on.

use crate::rdma::engine::memory::MemoryError;
use crate::rdma::judge::path::GidError;
use crate::verbs::VerbsError;
use std::time::Duration;

/// Why the probe stopped. `class` maps each cause to an exit code at the edge.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// libibverbs absent, etc.: the probe cannot run here.
    #[error("{0}")]
    Unavailable(VerbsError),
    #[error("{0}")]
    BadDevice(VerbsError),
    #[error("{device} has no port {port} (ports 1..={count})")]
    BadPort { device: String, port: u8, count: u8 },
    #[error("{device} port {port} is {state}, not ACTIVE")]
    PortDown {
        device: String,
        port: u8,
        state: String,
    },
    #[error("{device}: {source}")]
    Gid {
        device: String,
        #[source]
        source: GidError,
    },
    #[error("{device}: sysfs has no entry for port {port} ({reason})")]
    NoSysfs {
        device: String,
        port: u8,
        reason: String,
    },
    /// A verb failed while setting up or running.
    #[error("{device}: {source}")]
    Verbs {
        device: String,
        #[source]
        source: VerbsError,
    },
    #[error("{device}: {bytes} B writes: {source}")]
    Completion {
        device: String,
        bytes: u64,
        #[source]
        source: VerbsError,
    },
    #[error(
        "{device}: {bytes} B writes: no completion for {timeout:?} ({completed} of {iterations} done): the QP never completed"
    )]
    NoCompletion {
        device: String,
        bytes: u64,
        completed: u64,
        iterations: u64,
        timeout: Duration,
    },
    /// The buffer could not be allocated or registered (host or GPU memory).
    #[error("{device}: {source}")]
    Memory {
        device: String,
        #[source]
        source: MemoryError,
    },
    /// A CUDA copy into or out of a GPU buffer failed (validation).
    #[error("{device}: {source}")]
    Cuda {
        device: String,
        #[source]
        source: crate::cuda::CudaError,
    },
    /// Ctrl-C: stopped between polls; every region was deregistered and freed on the way out.
    #[error("interrupted by {}", crate::signals::which())]
    Interrupted,
    #[error("{bytes} B writes do not fit the registered buffers ({len} B)")]
    TooLarge { bytes: u64, len: u64 },
    /// Two-node mode: TCP to the peer.
    #[error("peer {peer}: {reason}")]
    Peer { peer: String, reason: String },
    /// Level 4: the mlx5 direct-verbs queues or the GPU kernel posting on them.
    #[error("{device}: {reason}")]
    Mlx5 { device: String, reason: String },
}

/// What a ProbeError means for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The probe could not run on this machine (reported as skipped, exit 1).
    Skip,
    /// The machine failed (exit 1).
    Machine,
    /// The request was wrong: no such device/port/GID index (exit 2).
    Usage,
    /// Ctrl-C (exit 2).
    Interrupted,
}

impl ProbeError {
    pub fn class(&self) -> ErrorClass {
        match self {
            ProbeError::Unavailable(_) => ErrorClass::Skip,
            // No RDMA device at all (or no kernel support): nothing to probe on this machine.
            ProbeError::BadDevice(VerbsError::NoDevice { found, .. }) if found == "none" => {
                ErrorClass::Skip
            }
            ProbeError::Verbs {
                source: VerbsError::NoKernelSupport(_),
                ..
            } => ErrorClass::Skip,
            ProbeError::BadDevice(_) | ProbeError::BadPort { .. } => ErrorClass::Usage,
            ProbeError::Gid {
                source: GidError::BadIndex { .. },
                ..
            } => ErrorClass::Usage,
            ProbeError::Interrupted => ErrorClass::Interrupted,
            // CUDA not there to ask (`crate::cuda::resolve`): a gap, like a missing libibverbs.
            ProbeError::Cuda { source, .. }
            | ProbeError::Memory {
                source: MemoryError::Cuda { source, .. },
                ..
            } if source.is_absent() => ErrorClass::Skip,
            _ => ErrorClass::Machine,
        }
    }
}

pub fn stop_if_interrupted() -> Result<(), ProbeError> {
    if crate::signals::interrupted() {
        return Err(ProbeError::Interrupted);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::CudaError;

    #[test]
    fn absent_cuda_is_a_skip_and_a_failed_call_the_machines() {
        let missing = || CudaError::Missing {
            library: "libcuda.so.1",
            symbol: "cuMemGetHandleForAddressRange",
            why: "undefined symbol".into(),
        };
        let failed = || CudaError::Driver {
            call: "cuMemcpyHtoD",
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            text: "an illegal memory access".into(),
        };
        let copy = |source| ProbeError::Cuda {
            device: "mlx5_0".into(),
            source,
        };
        let alloc = |source| ProbeError::Memory {
            device: "mlx5_0".into(),
            source: MemoryError::Cuda {
                gpu: "GPU0".into(),
                source,
            },
        };
        assert_eq!(copy(missing()).class(), ErrorClass::Skip);
        assert_eq!(alloc(missing()).class(), ErrorClass::Skip);
        assert_eq!(
            copy(CudaError::Unavailable("no libcuda".into())).class(),
            ErrorClass::Skip
        );
        assert_eq!(copy(failed()).class(), ErrorClass::Machine);
        assert_eq!(alloc(failed()).class(), ErrorClass::Machine);
    }
}
