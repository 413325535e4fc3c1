//! Level 3's part of a write-bw report (GPUDirect RDMA facts), pure data: the GPU, the port
//! chosen, the registration decision, the expectation, and the cause of a failure.

use crate::findings::Evidence;
use crate::report::rdma::memory::Registration;
use crate::topo::PathType;
use serde::Serialize;

/// Can one registration path work here?
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict", content = "why", rename_all = "kebab-case")]
pub enum PathVerdict {
    Usable(String),
    NotUsable(String),
    /// A fact it needs could not be read: NCCL would try, and so do we.
    Unknown(String),
}

impl PathVerdict {
    pub fn why(&self) -> &str {
        match self {
            PathVerdict::Usable(w) | PathVerdict::NotUsable(w) | PathVerdict::Unknown(w) => w,
        }
    }
}

/// The registration choice and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub requested: GdrMode,
    /// None: the requested path cannot work here (the reason is in `dmabuf`/`peermem`).
    pub used: Option<Registration>,
    pub dmabuf: PathVerdict,
    pub peermem: PathVerdict,
    /// One line: what is used and why the other is not.
    pub summary: String,
}

/// The RDMA port a GPU's buffers go through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NicChoice {
    pub device: String,
    pub port: u8,
    /// PCIe path type between the GPU and the NIC (None: the device is not on the PCI tree,
    /// e.g. soft-RoCE, or no GPU).
    pub path: Option<PathType>,
    pub path_certain: bool,
    pub why: String,
}

/// What the GPU-NIC path lets one expect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Expectation {
    /// Judged against the port's line rate (PIX/PXB), or measured only.
    pub judged: bool,
    pub text: String,
}

/// A cause a person can act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cause {
    pub summary: String,
    /// The level-0 checks that look at it.
    pub checks: Vec<&'static str>,
    pub evidence: Vec<Evidence>,
    pub remediation: String,
}

/// Level 3's part of a write-bw report.
#[derive(Debug, Clone, Serialize)]
pub struct GdrFacts {
    /// The GPU (None: `--gdr` on host memory).
    pub gpu: Option<GpuFacts>,
    /// Which side's buffer is GPU memory: source, target, both, or none (host memory).
    pub gpu_side: String,
    pub nic: NicChoice,
    pub expectation: Expectation,
    pub registration: Option<Decision>,
    /// cuMemGetInfo free bytes before the run's allocations and after they were freed.
    pub gpu_memory: Option<GpuMemoryCheck>,
    /// The GPU half on its own, before any NIC is involved: a buffer allocated as a run
    /// allocates it, its alignment and SYNC_MEMOPS attribute, and a dma-buf export.
    pub gpu_buffer: Option<GpuBufferFacts>,
    pub cause: Option<Cause>,
    /// Nothing to test here (no GPU, no RDMA port): a skip that is not a gap in what was
    /// judged.
    #[serde(skip)]
    pub not_applicable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuBufferFacts {
    /// cuMemAlloc size (the largest message, rounded up to 64 KiB GPU pages).
    pub bytes: u64,
    pub address: String,
    /// The largest power of two (up to 2 MiB) the address is a multiple of.
    pub address_alignment_bytes: u64,
    /// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS read back after setting it.
    pub sync_memops: bool,
    /// cuMemGetHandleForAddressRange(DMA_BUF_FD) on the whole buffer: "exported" or why not.
    pub dmabuf_export: String,
    pub dmabuf_exported: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuFacts {
    pub label: String,
    pub bdf: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuMemoryCheck {
    pub free_before_bytes: u64,
    pub free_after_bytes: u64,
    pub total_bytes: u64,
    /// free_before - free_after, when positive: memory this run did not give back (or another
    /// process took meanwhile).
    pub left_behind_bytes: u64,
    /// Runs (`--repeat`) between the two readings.
    pub runs: u32,
}

impl GpuMemoryCheck {
    pub fn new(before: (u64, u64), after: (u64, u64), runs: u32) -> GpuMemoryCheck {
        GpuMemoryCheck {
            free_before_bytes: before.0,
            free_after_bytes: after.0,
            total_bytes: before.1,
            left_behind_bytes: before.0.saturating_sub(after.0),
            runs,
        }
    }
    /// Something was left behind: at least one 2 MiB allocation unit.
    pub fn leaked(&self) -> bool {
        self.left_behind_bytes >= 2 << 20
    }

    /// The error when `label`'s runs left memory behind.
    pub fn leak(&self, label: &str) -> Option<String> {
        self.leaked().then(|| {
            format!(
                "{label}: {} MiB of GPU memory not given back after {} run(s) (cuMemGetInfo free {} -> {} bytes)",
                self.left_behind_bytes >> 20,
                self.runs,
                self.free_before_bytes,
                self.free_after_bytes
            )
        })
    }
}

/// `--gdr`: how GPU memory is to be registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GdrMode {
    /// As NCCL decides: dma-buf where it can work, nvidia-peermem otherwise.
    Auto,
    /// ibv_reg_dmabuf_mr on a dma-buf exported by CUDA.
    Dmabuf,
    /// ibv_reg_mr on the device pointer (needs nvidia-peermem).
    Peermem,
}
