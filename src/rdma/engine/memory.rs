//! Where write-bw's buffers live and how the NIC reaches them: the memory-provider seam of the
//! one write-bw engine. Level 2 uses host memory (`Memory::Host`, ibv_reg_mr); level 3 puts a
//! side's buffer in GPU memory (cuMemAlloc) and registers it through nvidia-peermem (ibv_reg_mr
//! on the device pointer) or through dma-buf (ibv_reg_dmabuf_mr on the fd that
//! cuMemGetHandleForAddressRange exports). Nothing else in the engine differs.
//!
//! A `Region` deregisters its memory region before it frees the memory, on every path (error,
//! Ctrl-C, panic unwinding): field order is drop order. This module must not choose the
//! registration path (that is `crate::rdma::judge::gdr::choose_registration`) nor judge anything.

use super::pattern::{check_pattern, fill_pattern};
use crate::cuda::{self, CudaError, RdmaBuffer};
use crate::report::rdma::memory::{MemoryFacts, Registration};
use crate::verbs::{self, AlignedBuf, Pd, RawMr, VerbsError};
use std::rc::Rc;

/// A GPU as level 3 addresses it: its topology label and PCI address, and its retained CUDA
/// context (found by PCI address, never by index).
#[derive(Clone)]
pub struct GpuTarget {
    pub label: String,
    pub bdf: String,
    pub ctx: Rc<cuda::Context>,
}

/// Where one side's buffer lives.
#[derive(Clone)]
pub enum Memory {
    Host,
    Gpu {
        gpu: GpuTarget,
        registration: Registration,
    },
}

impl Memory {
    pub fn describe(&self) -> String {
        match self {
            Memory::Host => "host memory".into(),
            Memory::Gpu { gpu, registration } => {
                format!("{} {} via {}", gpu.label, gpu.bdf, registration.as_str())
            }
        }
    }
}

/// Why a buffer could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("cannot allocate a {0} B host buffer")]
    HostAlloc(u64),
    #[error("{gpu}: {source}")]
    Cuda {
        gpu: String,
        #[source]
        source: CudaError,
    },
    #[error("{gpu}: CU_POINTER_ATTRIBUTE_SYNC_MEMOPS reads back 0 after being set")]
    SyncMemops { gpu: String },
    /// The NIC refused the memory: `errno` drives `crate::rdma::judge::gdr::cause`.
    #[error("{what}: {source}")]
    Register {
        what: String,
        registration: Option<Registration>,
        #[source]
        source: VerbsError,
    },
}

impl MemoryError {
    /// errno of a failed registration.
    pub fn register_errno(&self) -> Option<(Option<Registration>, i32)> {
        match self {
            MemoryError::Register {
                registration,
                source,
                ..
            } => source.raw_os_error().map(|e| (*registration, e)),
            _ => None,
        }
    }
}

enum Backing {
    Host(AlignedBuf),
    Gpu {
        buf: RdmaBuffer,
        /// A host copy for filling and checking (GPU memory is not CPU-addressable).
        staging: Vec<u8>,
    },
}

/// A registered buffer. Field order is drop order: the memory region is deregistered before
/// the memory it covers is freed.
pub struct Region {
    mr: RawMr,
    backing: Backing,
    facts: MemoryFacts,
}

pub fn alignment_of(addr: u64) -> u64 {
    if addr == 0 {
        return 2 << 20;
    }
    (1u64 << addr.trailing_zeros().min(63)).min(2 << 20)
}

impl Region {
    /// Allocate `len` bytes as `memory` says and register them on `pd` for RDMA writes.
    pub fn new(pd: &Pd, memory: &Memory, len: u64) -> Result<Region, MemoryError> {
        let access = verbs::ACCESS_RDMA_TARGET;
        match memory {
            Memory::Host => {
                let buf = usize::try_from(len.max(1))
                    .ok()
                    .and_then(AlignedBuf::zeroed)
                    .ok_or(MemoryError::HostAlloc(len))?;
                // SAFETY: `buf` moves into the Region, which drops `mr` before it.
                let mr =
                    unsafe { pd.reg_mr_at(buf.addr(), buf.len(), access) }.map_err(|source| {
                        MemoryError::Register {
                            what: format!("{} B of host memory", buf.len()),
                            registration: None,
                            source,
                        }
                    })?;
                let facts = MemoryFacts {
                    kind: "host",
                    gpu: None,
                    bdf: None,
                    registration: "host".into(),
                    bytes: buf.len() as u64,
                    address: format!("{:#x}", buf.addr()),
                    address_alignment_bytes: alignment_of(buf.addr()),
                    sync_memops: None,
                };
                Ok(Region {
                    mr,
                    backing: Backing::Host(buf),
                    facts,
                })
            }
            Memory::Gpu { gpu, registration } => {
                let cuda_err = |source| MemoryError::Cuda {
                    gpu: gpu.label.clone(),
                    source,
                };
                let n = usize::try_from(len.max(1)).map_err(|_| MemoryError::HostAlloc(len))?;
                let buf = RdmaBuffer::new(&gpu.ctx, n).map_err(cuda_err)?;
                let sync = buf.sync_memops().map_err(cuda_err)?;
                if !sync {
                    return Err(MemoryError::SyncMemops {
                        gpu: gpu.label.clone(),
                    });
                }
                let what = format!(
                    "{} B of {} memory ({})",
                    buf.bytes,
                    gpu.label,
                    registration.call()
                );
                let reg_err = |source| MemoryError::Register {
                    what: what.clone(),
                    registration: Some(*registration),
                    source,
                };
                let mr = match registration {
                    Registration::Peermem => {
                        // SAFETY: `buf` moves into the Region, which drops `mr` before it.
                        unsafe { pd.reg_mr_at(buf.ptr, buf.bytes, access) }.map_err(reg_err)?
                    }
                    Registration::Dmabuf => {
                        let fd = buf.export_dmabuf().map_err(cuda_err)?;
                        // The MR holds its own reference to the dma-buf: the fd closes here.
                        use std::os::fd::AsRawFd;
                        pd.reg_dmabuf_mr(0, buf.bytes, buf.ptr, fd.as_raw_fd(), access)
                            .map_err(reg_err)?
                    }
                };
                let facts = MemoryFacts {
                    kind: "gpu",
                    gpu: Some(gpu.label.clone()),
                    bdf: Some(gpu.bdf.clone()),
                    registration: registration.as_str().into(),
                    bytes: buf.bytes as u64,
                    address: format!("{:#x}", buf.ptr),
                    address_alignment_bytes: alignment_of(buf.ptr),
                    sync_memops: Some(sync),
                };
                Ok(Region {
                    mr,
                    backing: Backing::Gpu {
                        staging: Vec::new(),
                        buf,
                    },
                    facts,
                })
            }
        }
    }

    pub fn addr(&self) -> u64 {
        self.mr.addr()
    }
    pub fn len(&self) -> usize {
        self.mr.len()
    }
    pub fn is_empty(&self) -> bool {
        self.mr.is_empty()
    }
    pub fn lkey(&self) -> u32 {
        self.mr.lkey()
    }
    pub fn rkey(&self) -> u32 {
        self.mr.rkey()
    }
    pub fn facts(&self) -> &MemoryFacts {
        &self.facts
    }

    /// Write the validation pattern for `size` into the first `size` bytes.
    pub fn fill(&mut self, size: u64, seed: u64) -> Result<(), CudaError> {
        let n = (size as usize).min(self.len());
        match &mut self.backing {
            Backing::Host(b) => {
                fill_pattern(&mut b.as_mut_slice()[..n], size, seed);
                Ok(())
            }
            Backing::Gpu { buf, staging } => {
                staging.resize(n, 0);
                fill_pattern(staging, size, seed);
                buf.upload(staging)
            }
        }
    }

    /// Zero the first `n` bytes.
    pub fn zero(&mut self, n: u64) -> Result<(), CudaError> {
        let n = (n as usize).min(self.len());
        match &mut self.backing {
            Backing::Host(b) => {
                b.as_mut_slice()[..n].fill(0);
                Ok(())
            }
            Backing::Gpu { buf, .. } => buf.memset(0, n),
        }
    }

    /// First offset of the first `size` bytes that does not hold the pattern (GPU memory is
    /// copied back first). Read only when no write into the buffer is in flight.
    pub fn check(&mut self, size: u64, seed: u64) -> Result<Option<u64>, CudaError> {
        match &mut self.backing {
            Backing::Host(b) => Ok(check_pattern(b.as_slice(), size, seed)),
            Backing::Gpu { buf, staging } => {
                let n = (size as usize).min(buf.bytes);
                staging.resize(n, 0);
                buf.download(staging)?;
                Ok(check_pattern(staging, size, seed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alignment() {
        assert_eq!(alignment_of(0x7f00_0020_0000), 2 << 20);
        assert_eq!(alignment_of(0x1000), 4096);
        assert_eq!(alignment_of(0x1_0000), 65536);
        assert_eq!(alignment_of(0x1001), 1);
        assert_eq!(alignment_of(0), 2 << 20);
    }

    #[test]
    fn names() {
        assert_eq!(Registration::Dmabuf.call(), "ibv_reg_dmabuf_mr");
        assert_eq!(Registration::Peermem.call(), "ibv_reg_mr");
        assert_eq!(Memory::Host.describe(), "host memory");
    }
}

/// Where each side's buffer lives: the source is written from (loopback's first QP side, the
/// `--peer` client), the target written into (loopback's second side, the `--serve` side).
/// Level 2 is host memory on both; level 3 puts one or both in GPU memory.
#[derive(Clone)]
pub struct Sides {
    pub source: Memory,
    pub target: Memory,
}

impl Sides {
    pub fn host() -> Sides {
        Sides {
            source: Memory::Host,
            target: Memory::Host,
        }
    }
}
