//! The `probe nccl` report (schema `gpudoctor.nccl/2`), pure data: what each configuration
//! measured, NCCL's transport choice, the bars and the verdicts, and across nodes the processes,
//! nodes and rails. What could not be read is a `Reading` (`crate::reading`); `gpudoctor.nccl/1`
//! reports, whose readings were serde's `{"Ok": ..}` / `{"Err": ..}`, still read back.
//!
//! Filled in and judged by `crate::nccl` (`crate::nccl::evaluate` re-derives every verdict from
//! the recorded data); nothing here evaluates, does I/O or prints.

use crate::probes::{Evaluation, Expected, Status};
use crate::reading::Reading;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const NCCL_SCHEMA: &str = "gpudoctor.nccl/2";

/// The schema before readings had their own shape (`{"Ok": ..}` / `{"Err": ..}`); still read.
pub const NCCL_SCHEMA_V1: &str = "gpudoctor.nccl/1";

/// The collectives measured, as nccl-tests names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Collective {
    AllReduce,
    AllGather,
}

impl Collective {
    pub fn as_str(self) -> &'static str {
        match self {
            Collective::AllReduce => "all-reduce",
            Collective::AllGather => "all-gather",
        }
    }

    /// The nccl-tests binary that measures the same thing.
    pub fn nccl_tests_binary(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce_perf",
            Collective::AllGather => "all_gather_perf",
        }
    }
}

/// A rate a bus bandwidth is held to (before the policy's fraction), with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub bandwidth_gbps: f64,
    pub basis: String,
}

impl From<Expected> for Rate {
    fn from(e: Expected) -> Rate {
        Rate {
            bandwidth_gbps: e.bandwidth_gbps,
            basis: e.basis,
        }
    }
}

/// Bars: fractions of the link rate the largest size's bus bandwidth must reach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclPolicy {
    /// All-reduce inside a node: nccl-tests' all_reduce_perf measured 329.9 GB/s busbw at 1 GiB
    /// over NV18 between two H200s (fixtures/nccl-2.28.9/h200x2/p2p-allreduce.txt), 69% of
    /// 18 x 26.5625 = 478.1 GB/s, and 329 GB/s on two H100s; 55% leaves room for run-to-run
    /// spread and fails a link carrying half its rate.
    pub all_reduce_min_fraction: f64,
    /// All-gather: 271.2 GB/s busbw at 1 GiB on the same machine (p2p-allgather.txt), 57%.
    pub all_gather_min_fraction: f64,
    /// Network path (`--net`): bus bandwidth against the port's line rate (one direction).
    pub net_min_fraction: f64,
    /// Only a sweep reaching this size is judged: below it NCCL does not reach the link rate
    /// (169-299 GB/s at 8-256 MiB in the same recording).
    pub judged_min_bytes: u64,
}

impl Default for NcclPolicy {
    fn default() -> Self {
        NcclPolicy {
            all_reduce_min_fraction: 0.55,
            all_gather_min_fraction: 0.45,
            net_min_fraction: 0.70,
            judged_min_bytes: 256 << 20,
        }
    }
}

impl NcclPolicy {
    pub fn fraction(&self, mode: Mode, c: Collective) -> f64 {
        match (mode, c) {
            (Mode::Net | Mode::Cluster, _) => self.net_min_fraction,
            (Mode::Intra, Collective::AllReduce) => self.all_reduce_min_fraction,
            (Mode::Intra, Collective::AllGather) => self.all_gather_min_fraction,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One process drives every GPU; NCCL picks its transports (NVLink/PCIe P2P, SHM).
    Intra,
    /// P2P and SHM disabled: the GPUs talk through a NIC (or NCCL's socket transport).
    Net,
    /// Ranks across nodes (`--ranks`): one communicator over every process's GPUs, NCCL picks
    /// its transports; the bar is the slowest node's network rate.
    Cluster,
}

/// Facts about one ordered GPU pair, from the topology: what NCCL should be able to use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFacts {
    pub from: String,
    pub to: String,
    /// The `nvidia-smi topo -m` cell: `NV18`, `PIX`, `SYS`...
    pub path: Option<String>,
    pub nvlinks: Option<u32>,
    /// The slower of the two GPUs' PCIe links: (generation, width, source).
    pub pcie: Reading<(u8, u8, String)>,
}

/// What bounds a run's bus bandwidth, before the GPUs' architecture is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BarInput {
    /// Inside a node: the slowest GPU pair's NVLink or PCIe rate.
    Intra { pairs: Vec<PairFacts> },
    /// Through a NIC: its line rate (or why it is unknown).
    Net { expected: Reading<Rate> },
}

/// A GPU as the worker saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclGpu {
    pub rank: u32,
    pub label: String,
    pub bdf: String,
    pub cuda_ordinal: i32,
    pub name: String,
    pub arch: String,
}

/// One sweep point: nccl-tests' shape and every timed sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    /// nccl-tests' `size` column.
    pub size_bytes: u64,
    /// Elements passed to NCCL (all-gather: per rank).
    pub count: u64,
    /// Per sample: the average time of one collective over `iters`, in microseconds.
    pub time_us: Vec<f64>,
    pub algbw_gbps: Vec<f64>,
    pub busbw_gbps: Vec<f64>,
    /// The judged size only: taken again, longer, after a first reading below its bar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remeasured_busbw_gbps: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRun {
    pub collective: Collective,
    pub ranks: u32,
    pub warmup: u32,
    pub iters: u32,
    pub sizes: Vec<SizeResult>,
    pub error: Option<String>,
    pub evaluation: Evaluation,
}

impl CollectiveRun {
    /// The size the verdict is about: the largest measured.
    pub fn judged(&self) -> Option<&SizeResult> {
        self.sizes.iter().max_by_key(|s| s.size_bytes)
    }
}

/// One ordered GPU pair's channels as NCCL's debug output names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairTransport {
    pub from: String,
    pub to: String,
    pub path: Option<String>,
    /// `P2P/direct pointer` -> channels.
    pub via: BTreeMap<String, u32>,
}

/// A contradiction between NCCL's choice and the topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransportFinding {
    pub subject: String,
    pub status: Status,
    pub reason: String,
}

/// One configuration, run in its own worker process (NCCL reads its variables at init).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigRun {
    /// `intra-node`, `net IB mlx5_0:1`, `net Socket`.
    pub name: String,
    pub mode: Mode,
    /// The NCCL variables gpudoctor set for this run's worker (beyond NCCL_DEBUG*).
    pub nccl_env: BTreeMap<String, String>,
    pub bar_input: BarInput,
    /// The rate the bars are fractions of, or why it is unknown.
    pub expected: Reading<Rate>,
    pub collectives: Vec<CollectiveRun>,
    pub transports: Vec<PairTransport>,
    /// `Using network ...` (IB, Socket).
    pub networks: Vec<String>,
    pub socket_interfaces: Vec<String>,
    /// Where NCCL's debug output was read from, or why it was not.
    pub debug_log: Reading<String>,
    pub nccl_warnings: Vec<String>,
    pub findings: Vec<TransportFinding>,
    pub skipped: Option<String>,
    pub error: Option<String>,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibraryInfo {
    pub path: String,
    pub version: String,
    pub version_code: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclReport {
    pub schema: String,
    pub gpudoctor_version: String,
    /// The source revision the binary was built from (`--version`'s; see build.rs); empty in
    /// reports written before it was recorded.
    #[serde(default)]
    pub gpudoctor_revision: String,
    pub units: String,
    pub mode: Mode,
    pub library: Option<LibraryInfo>,
    /// Where libnccl was looked for, in order.
    pub looked_in: Vec<String>,
    pub skipped: Option<String>,
    pub policy: NcclPolicy,
    pub gpus: Vec<NcclGpu>,
    /// NCCL_* variables in gpudoctor's environment (its workers inherit them).
    pub environment: BTreeMap<String, String>,
    /// GPUDirect RDMA judged ready by the level-0 checks (gdr.*), with why; None: not judged.
    pub gdr_ready: Option<(bool, String)>,
    pub runs: Vec<ConfigRun>,
    pub notes: Vec<String>,
    pub error: Option<String>,
    pub status: Status,
    /// Across nodes (`--ranks`): the processes, per node and per NIC (rail).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterView>,
}

/// One process of a run across nodes, as it joined the rendezvous.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProcessInfo {
    pub rank: u32,
    pub host: String,
    /// The node as NCCL tells them apart: NCCL_HOSTID where set, else the host name.
    pub node: String,
    pub local_rank: u32,
    pub gpus: Vec<NcclGpu>,
    pub library: Option<LibraryInfo>,
    /// NCCL_* variables in that process's environment.
    pub nccl_env: BTreeMap<String, String>,
    pub skipped: Option<String>,
}

/// A NIC (or socket interface) one process's NET channels used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NicUse {
    /// Channels of this process's connections through it.
    pub channels: u32,
    /// Its line rate (one direction), or why unknown.
    pub rate: Reading<Rate>,
}

/// One node of a run across nodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    pub node: String,
    pub hosts: Vec<String>,
    pub processes: Vec<u32>,
    pub nccl_ranks: Vec<u32>,
    /// The sum of the line rates of the NICs its NET channels used, or why unknown.
    pub network: Reading<Rate>,
    /// `CONFIG COLLECTIVE` -> the bus bandwidth its own GPUs timed at the judged size (median;
    /// the slowest of its processes).
    pub busbw_gbps: BTreeMap<String, f64>,
    /// NIC -> channels (summed over its processes).
    pub nics: BTreeMap<String, u32>,
}

/// A NIC name seen on one or more nodes (a rail where every node has it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RailView {
    pub nic: String,
    pub nodes: Vec<String>,
    pub channels: u32,
    /// The slowest line rate of this NIC over its nodes.
    pub rate: Reading<Rate>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    pub launcher: String,
    /// Processes.
    pub world_size: u32,
    /// NCCL ranks (GPUs) in the communicator.
    pub nranks: u32,
    pub processes: Vec<ProcessInfo>,
    pub nodes: Vec<NodeView>,
    pub rails: Vec<RailView>,
    /// The node whose own timing is the lowest, with the figures (None: one node, or none
    /// measured).
    pub slowest_node: Option<String>,
    /// The rail with the lowest line rate where rails differ (None: equal or unknown).
    pub slowest_rail: Option<String>,
}

impl NcclReport {
    /// Nothing measured yet, status unknown (`crate::nccl::evaluate` judges it).
    pub fn new(mode: Mode, policy: NcclPolicy) -> Self {
        NcclReport {
            schema: NCCL_SCHEMA.to_string(),
            gpudoctor_version: env!("CARGO_PKG_VERSION").to_string(),
            gpudoctor_revision: crate::REVISION.to_string(),
            units: "GB/s = 10^9 bytes/s; bus bandwidth as nccl-tests computes it".to_string(),
            mode,
            library: None,
            looked_in: Vec::new(),
            skipped: None,
            policy,
            gpus: Vec::new(),
            environment: BTreeMap::new(),
            gdr_ready: None,
            runs: Vec::new(),
            notes: Vec::new(),
            error: None,
            status: Status::Unknown,
            cluster: None,
        }
    }
}
