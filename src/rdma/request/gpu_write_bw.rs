//! Level 4's request (`probe gpu-write-bw`): GPUs, device, sizes, iterations, the doorbell
//! handler and where the queues live. Plain data and its validation; no clap.

use super::gdr::GpuSelect;
use crate::report::rdma::gpu_write_bw::{GpuWriteBwReport, NicHandler, PlanFacts, QueuePlace};
use crate::report::rdma::plan::{Plan, PlanError, PlanSpec};

/// `probe gpu-write-bw`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuWriteRequest {
    pub gpu: GpuSelect,
    /// `-d`: this device for every GPU; None: each GPU's closest ACTIVE port.
    pub device: Option<String>,
    pub port: u8,
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub writes_per_iter: u32,
    pub handler: NicHandler,
    pub queues: QueuePlace,
    pub validate: bool,
}

impl GpuWriteRequest {
    /// Level 4 of `check`: short, 64 B and 4 KiB writes, 64 launches of 512 each, validated, on
    /// each GPU's closest ACTIVE port (port 1 where a device is named).
    pub fn check_level4() -> GpuWriteRequest {
        GpuWriteRequest {
            gpu: GpuSelect::Auto,
            device: None,
            port: 1,
            sizes: vec![64, 4096],
            iters: 64,
            writes_per_iter: 512,
            handler: NicHandler::Auto,
            queues: QueuePlace::Auto,
            validate: true,
        }
    }

    /// The report of a run of this request before anything is posted.
    pub fn empty_report(&self) -> GpuWriteBwReport {
        let plan = PlanFacts {
            sizes: self.sizes.clone(),
            iters: self.iters,
            writes_per_iter: self.writes_per_iter,
            validate: self.validate,
        };
        GpuWriteBwReport::new(plan, self.handler, self.queues)
    }

    /// The write-bw engine's plan for this request: per size, `iters` launches of
    /// `writes_per_iter` writes, one launch's writes in flight at once (the TX depth) with one
    /// signalled completion per launch, on one QP.
    pub fn engine_plan(&self) -> Result<Plan, PlanError> {
        Plan::new(PlanSpec {
            sizes: self.sizes.clone(),
            iterations: self.iters.saturating_mul(self.writes_per_iter),
            tx_depth: self.writes_per_iter,
            cq_moderation: self.writes_per_iter,
            post_list: None,
            qps: 1,
            validate: self.validate,
        })
    }
}

pub const DEFAULT_SIZES: &[u64] = &[64, 256, 1024, 4096];

/// One CUDA thread builds each write and one block of threads posts an iteration (its
/// barrier orders the WQEs before the doorbell): a block has at most 1024 threads.
pub const MAX_WRITES_PER_ITER: u32 = 1024;

/// Argument checks (exit 2 on failure, in config).
pub fn validate(req: &GpuWriteRequest) -> Result<(), String> {
    if req.sizes.is_empty() {
        return Err("--sizes: at least one size".into());
    }
    for &s in &req.sizes {
        // One data segment per WQE; a 0-byte write posts nothing worth timing.
        if s == 0 || s > 1 << 30 {
            return Err(format!("--sizes: {s} is not between 1 B and 1 GiB"));
        }
    }
    let mut sorted = req.sizes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != req.sizes.len() {
        return Err("--sizes: a size is given twice".into());
    }
    if req.iters == 0 {
        return Err("--iters: at least 1".into());
    }
    if req.writes_per_iter == 0
        || req.writes_per_iter > MAX_WRITES_PER_ITER
        || !req.writes_per_iter.is_power_of_two()
    {
        return Err(format!(
            "--writes-per-iter: a power of two from 1 to {MAX_WRITES_PER_ITER} (one CUDA thread \
             per write, one block per launch), not {}",
            req.writes_per_iter
        ));
    }
    if req.port == 0 {
        return Err("--port: ports are numbered from 1".into());
    }
    if req.queues == QueuePlace::Gpu && req.handler == NicHandler::CpuProxy {
        return Err(
            "--queues gpu needs the gpu handler: a CPU proxy cannot watch a doorbell record in \
             GPU memory (use --queues host or auto with --nic-handler cpu-proxy)"
                .into(),
        );
    }
    Ok(())
}
