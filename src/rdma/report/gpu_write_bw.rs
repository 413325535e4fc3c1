//! The level-4 report (schema `gpudoctor.gpu-write-bw/1`), pure data: who posted, where the
//! queues lived, what each size delivered, and why a run stopped.

use crate::facts::PortState;
use crate::rdma::engine::error::ErrorClass;
use crate::rdma::report::gdr::{GpuFacts, NicChoice};
use crate::rdma::report::write_bw::{SizeResult, Status, Threshold};
use crate::rdma::request::gpu_write_bw::{GpuWriteRequest, NicHandler, QueuePlace};
use serde::Serialize;

pub const SCHEMA: &str = "gpudoctor.gpu-write-bw/1";

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
    pub fn new(req: &GpuWriteRequest) -> Self {
        GpuWriteBwReport {
            schema: SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            gpudoctor_revision: crate::REVISION,
            mode: "loopback",
            units: crate::rdma::report::write_bw::UNITS,
            plan: PlanFacts {
                sizes: req.sizes.clone(),
                iters: req.iters,
                writes_per_iter: req.writes_per_iter,
                validate: req.validate,
            },
            gpu: None,
            nic: None,
            path: None,
            provider: None,
            poster: Poster {
                requested: req.handler,
                handler: None,
                queues_requested: req.queues,
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

pub struct Run {
    pub subject: String,
    pub report: GpuWriteBwReport,
    pub class: Option<ErrorClass>,
}

/// What the preconditions look at, gathered from the inventory and the library probe (so the
/// decision is a pure function, tested on hand-made facts).
#[derive(Debug, Clone, Default)]
pub struct DeviceFacts {
    pub name: String,
    /// Kernel driver of the PCI function (mlx5_core); None for software devices.
    pub driver: Option<String>,
    /// Some("rxe") / Some("siw") for software devices.
    pub software: Option<String>,
    /// The port's state (outer None: no such port; inner None: state unreadable).
    pub port_state: Option<Option<PortState>>,
}
