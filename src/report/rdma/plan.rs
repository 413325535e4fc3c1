//! What a write-bw run measures, as its report records it (`plan`): the sizes, the iterations,
//! the depths and the timed repetitions, checked against their ranges (`Plan::new`). Shared by
//! the request (`crate::rdma::request`), the engine and the report; plain data, no clap.

use serde::Serialize;

/// Largest message: 1 GiB is far past any useful sweep and bounds the registered buffers.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 30;

/// Timed repetitions per size: a size is judged on the median of their rates, as level 1
/// judges a copy on the median of its samples, not on one run's average.
pub const DEFAULT_REPETITIONS: u32 = 5;

pub const MAX_REPETITIONS: u32 = 1000;

/// What to run, resolved from the arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub sizes: Vec<u64>,
    pub iterations: u32,
    pub tx_depth: u32,
    /// A signalled completion every this many writes.
    pub cq_moderation: u32,
    /// Writes chained into one ibv_post_send call, at most; None: `auto_post_list` per size.
    pub post_list: Option<u32>,
    pub qps: u32,
    pub validate: bool,
    /// Timed repetitions of `iterations` writes per size (`DEFAULT_REPETITIONS`).
    pub repetitions: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--iters must be at least 1")]
    NoIterations,
    #[error("--tx-depth must be between 1 and 8192")]
    TxDepth,
    #[error("--qps must be between 1 and 64")]
    Qps,
    #[error("message size {0} is out of range (1 B to 1 GiB)")]
    Size(u64),
    #[error("--iters {iters} is not a multiple of --qps {qps}")]
    ItersPerQp { iters: u32, qps: u32 },
    #[error("--reps must be between 1 and 1000")]
    Repetitions,
}

/// What a plan is asked for, field by field, before `Plan::new` checks it (the command line's
/// flags, or a check level's fixed choice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSpec {
    pub sizes: Vec<u64>,
    pub iterations: u32,
    pub tx_depth: u32,
    /// A signalled completion every this many writes (clamped to `tx_depth`).
    pub cq_moderation: u32,
    /// Writes chained into one ibv_post_send call, at most; None: `auto_post_list` per size.
    pub post_list: Option<u32>,
    pub qps: u32,
    pub validate: bool,
}

impl PlanSpec {
    /// What `check` levels 2 and 3 share: 64 KiB and 1 MiB writes, 500 each, a TX depth of 128
    /// with a signalled completion every 16, chains chosen per size, one QP, validated (tests
    /// start from it and change what they need).
    pub fn check() -> PlanSpec {
        PlanSpec {
            sizes: vec![65536, 1 << 20],
            iterations: 500,
            tx_depth: 128,
            cq_moderation: 16,
            post_list: None,
            qps: 1,
            validate: true,
        }
    }
}

impl Plan {
    /// The plan `spec` asks for, with `DEFAULT_REPETITIONS`; an error names the flag out of range.
    pub fn new(spec: PlanSpec) -> Result<Plan, PlanError> {
        let PlanSpec {
            sizes,
            iterations,
            tx_depth,
            cq_moderation,
            post_list,
            qps,
            validate,
        } = spec;
        if iterations == 0 {
            return Err(PlanError::NoIterations);
        }
        if !(1..=8192).contains(&tx_depth) {
            return Err(PlanError::TxDepth);
        }
        if !(1..=64).contains(&qps) {
            return Err(PlanError::Qps);
        }
        if !iterations.is_multiple_of(qps) {
            return Err(PlanError::ItersPerQp {
                iters: iterations,
                qps,
            });
        }
        if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s > MAX_MESSAGE_BYTES) {
            return Err(PlanError::Size(s));
        }
        // perftest clamps CQ moderation to the TX depth the same way.
        let cq_moderation = cq_moderation.clamp(1, tx_depth);
        Ok(Plan {
            sizes,
            iterations,
            tx_depth,
            cq_moderation,
            post_list: post_list.map(|l| l.clamp(1, tx_depth)),
            qps,
            validate,
            repetitions: DEFAULT_REPETITIONS,
        })
    }

    /// Level 2 of `check` on one port: short on purpose, 64 KiB and 1 MiB writes, 500 each, 5
    /// timed repetitions judged on their median, validated (about 2.7 GB per port: tens of
    /// milliseconds at line rate). A software device (rxe, no PCI function) moves ~50 MB/s
    /// under emulation and is measured, not judged: 32 each, 3 repetitions.
    pub fn check_level2(software: bool) -> Result<Plan, PlanError> {
        let (iterations, repetitions) = if software { (32, 3) } else { (500, 5) };
        Plan::new(PlanSpec {
            iterations,
            ..PlanSpec::check()
        })
        .and_then(|p| p.with_repetitions(repetitions))
    }

    /// Level 3 of `check` on one GPU: as level 2's on a NIC, 64 KiB and 1 MiB writes, 500 each,
    /// 5 timed repetitions, validated (copied back from GPU memory).
    pub fn check_level3() -> Result<Plan, PlanError> {
        Plan::new(PlanSpec::check())
    }

    /// The same plan with `n` timed repetitions per size.
    pub fn with_repetitions(self, n: u32) -> Result<Plan, PlanError> {
        if !(1..=MAX_REPETITIONS).contains(&n) {
            return Err(PlanError::Repetitions);
        }
        Ok(Plan {
            repetitions: n,
            ..self
        })
    }

    /// The chain length used for `size`-byte writes.
    pub fn post_list_for(&self, size: u64) -> u32 {
        self.post_list
            .unwrap_or_else(|| auto_post_list(size))
            .clamp(1, self.tx_depth)
    }

    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// Chain up to 16 writes but at most 64 KiB of payload per post. Lists save a doorbell per
/// write where writes are small; a long chain of large writes gains nothing and on soft-RoCE
/// costs bandwidth, because rxe (Linux 6.1, rxe_post_send) runs the requester for user QPs inside
/// the posting call: 16 x 1 MiB measured 27-42 MB/s against 41-45 MB/s unchained in the VM
/// (scripts/bench-write-bw).
pub fn auto_post_list(size: u64) -> u32 {
    (65536 / size.max(1)).clamp(1, 16) as u32
}
