//! The level-4 report (schema `gpudoctor.gpu-write-bw/1`), pure data: who posted, where the
//! queues lived, what each size delivered, and why a run stopped.

use crate::report::rdma::gdr::{GpuFacts, NicChoice};
use crate::report::rdma::write_bw::{SizeResult, Status, Threshold};
use serde::Serialize;

pub const SCHEMA: &str = "gpudoctor.gpu-write-bw/1";

/// `--nic-handler`: who rings the doorbell after the kernel wrote the WQEs and the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NicHandler {
    /// gpu when PeerMappingOverride=1 and the UAR page maps, else cpu-proxy.
    Auto,
    /// The kernel writes the BlueFlame register through the mapped UAR page.
    Gpu,
    /// A CPU thread watches the kernel's producer index and rings the doorbell.
    CpuProxy,
}

impl NicHandler {
    pub fn as_str(self) -> &'static str {
        match self {
            NicHandler::Auto => "auto",
            NicHandler::Gpu => "gpu",
            NicHandler::CpuProxy => "cpu-proxy",
        }
    }
}

/// `--queues`: where the SQ, the CQ and their doorbell records live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueuePlace {
    /// gpu where the gpu handler rings and the DevX queues can be created, else host.
    Auto,
    /// DevX QP and CQ over umems in GPU memory (IBGDA's placement; GPU-scope fences).
    Gpu,
    /// libmlx5's own queues in host memory, mapped for the GPU (cuMemHostRegister).
    Host,
}

impl QueuePlace {
    pub fn as_str(self) -> &'static str {
        match self {
            QueuePlace::Auto => "auto",
            QueuePlace::Gpu => "gpu",
            QueuePlace::Host => "host",
        }
    }
}

/// Posting time per iteration (one kernel launch), from `%globaltimer`.
#[derive(Debug, Clone, Serialize)]
pub struct PostingNs {
    pub n: u64,
    pub median: u64,
    pub min: u64,
    pub max: u64,
}

impl PostingNs {
    /// Median (the upper one of an even count), min and max; None for no samples.
    pub fn of(mut v: Vec<u64>) -> Option<PostingNs> {
        v.sort_unstable();
        Some(PostingNs {
            n: v.len() as u64,
            median: *v.get(v.len() / 2)?,
            min: *v.first()?,
            max: *v.last()?,
        })
    }
}

/// Who posted and why.
#[derive(Debug, Clone, Serialize)]
pub struct Poster {
    pub requested: NicHandler,
    /// The handler that rang the doorbell (None: nothing was posted).
    pub handler: Option<NicHandler>,
    pub why: String,
    pub queues_requested: QueuePlace,
    /// Where the queues the kernel posted on lived (None: no queues were set up).
    pub queues: Option<QueuePlace>,
    pub queues_why: String,
    pub posting_ns: Option<PostingNs>,
    pub sm_cycles: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanFacts {
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub writes_per_iter: u32,
    pub validate: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuWriteBwReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub mode: &'static str,
    pub units: &'static str,
    pub plan: PlanFacts,
    pub gpu: Option<GpuFacts>,
    /// The RDMA port and why it was chosen.
    pub nic: Option<NicChoice>,
    /// PCIe path type GPU-NIC ("PIX", "PXB", ...), where both are on the PCI tree.
    pub path: Option<String>,
    /// "mlx5_0 (mlx5_core)", "rxe0 (soft-RoCE on eth0)".
    pub provider: Option<String>,
    pub poster: Poster,
    pub results: Vec<SizeResult>,
    pub notes: Vec<String>,
    pub status: Status,
    /// The bar (delivery: every write of every size completed, its bytes validated).
    pub threshold: Threshold,
    /// A skip with nothing to judge here (no GPU, no mlx5 port): not a gap in the check.
    pub not_applicable: bool,
}

impl GpuWriteBwReport {
    /// Nothing posted yet, for a run of `plan` asking for `handler` and `queues`.
    pub fn new(plan: PlanFacts, handler: NicHandler, queues: QueuePlace) -> Self {
        GpuWriteBwReport {
            schema: SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            gpudoctor_revision: crate::REVISION,
            mode: "loopback",
            units: crate::report::rdma::write_bw::UNITS,
            plan,
            gpu: None,
            nic: None,
            path: None,
            provider: None,
            poster: Poster {
                requested: handler,
                handler: None,
                queues_requested: queues,
                queues: None,
                queues_why: String::new(),
                why: "nothing was posted".into(),
                posting_ns: None,
                sm_cycles: None,
            },
            results: Vec::new(),
            notes: Vec::new(),
            status: Status::Skipped {
                reason: String::new(),
            },
            threshold: Threshold::Delivery {
                reason: "every write of every size completes and its bytes arrive (validated); \
                         bandwidth is reported, not judged: GPU-initiated posting of small \
                         messages is not line-rate bound"
                    .into(),
            },
            not_applicable: false,
        }
    }
}
