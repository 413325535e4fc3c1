//! `gpudoctor probe ...`: the arguments of each probe, as clap parses them.
//!
//! The doc comments below are clap's `--help` text (and the man pages'), not rustdoc markup:
//! "GPU<N>" and "HOST[:PORT]" are written as a user reads them.
#![allow(rustdoc::invalid_html_tags, rustdoc::broken_intra_doc_links)]

use super::GateArgs;
use super::values::{FormatArg, GdrModeArg, GpuSideArg, NicHandlerArg, QueuePlaceArg};
use crate::probes::options as probe_defaults;
use clap::{Args as ClapArgs, Subcommand};

#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// Host-to-GPU copy bandwidth (copy engine and SM kernel), against the PCIe link rate.
    H2d(ProbeArgs),
    /// GPU-to-host copy bandwidth (copy engine and SM kernel), against the PCIe link rate.
    D2h(ProbeArgs),
    /// GPU-to-GPU peer access and copy bandwidth for every pair, against NVLink or PCIe.
    P2p(ProbeArgs),
    /// Export GPU memory as a dma-buf (the GPU half of dma-buf GPUDirect RDMA).
    DmabufExport(DmabufExportArgs),
    /// RDMA-write bandwidth over RC QPs, like ib_write_bw: loopback on one device (two QPs
    /// connected to each other), or between two hosts with --serve / --peer.
    WriteBw(WriteBwArgs),
    /// Level 4: a CUDA kernel posts the RDMA writes itself on an mlx5 QP (loopback on one
    /// ConnectX port); skips cleanly, exit 0, where the GPU, CUDA, libmlx5 or an mlx5 port is
    /// absent. Schema gpudoctor.gpu-write-bw/1.
    GpuWriteBw(GpuWriteBwArgs),
    /// NCCL all-reduce and all-gather across this node's GPUs: bus bandwidth as nccl-tests
    /// computes it, against the NVLink/PCIe rate, and NCCL's transport per GPU pair against
    /// the topology (`--net`: through a NIC instead). libnccl is loaded at run time; skips
    /// cleanly, exit 0, without it or with fewer than two GPUs.
    Nccl(NcclArgs),
    /// Internal: one NCCL configuration in a child process of `probe nccl`.
    #[command(hide = true)]
    NcclWorker,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct NcclArgs {
    /// Smallest size of the sweep (bytes; K, M, G suffixes: binary), as nccl-tests' -b.
    #[arg(long, short = 'b', value_name = "BYTES", default_value = "8M",
          value_parser = crate::nccl::bandwidth::parse_size)]
    pub min_size: u64,
    /// Largest size, doubling from --min-size, as nccl-tests' -e; judged at this size.
    #[arg(long, short = 'e', value_name = "BYTES", default_value = "1G",
          value_parser = crate::nccl::bandwidth::parse_size)]
    pub max_size: u64,
    /// Collectives per timed sample (nccl-tests' -n).
    #[arg(long, short = 'n', value_name = "N", default_value_t = crate::nccl::live::DEFAULT_ITERS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub iters: u32,
    /// Untimed collectives before each size (nccl-tests' -w).
    #[arg(long, short = 'w', value_name = "N", default_value_t = crate::nccl::live::DEFAULT_WARMUP)]
    pub warmup: u32,
    /// Timed samples per size (median, min, max reported; a size below its bar is measured
    /// again with three times as many).
    #[arg(long, value_name = "N", default_value_t = crate::nccl::live::DEFAULT_SAMPLES,
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub samples: u32,
    /// The network path on this node: P2P and SHM disabled, through each active RDMA port in
    /// turn (NCCL_IB_HCA), or NCCL's socket transport where there is none.
    #[arg(long)]
    pub net: bool,
    /// With --net: only this RDMA device or port (mlx5_0, mlx5_0:1).
    #[arg(long, value_name = "DEV", requires = "net")]
    pub hca: Option<String>,
    /// Give up on a configuration after this many seconds: its worker process is killed (exit 2).
    #[arg(long, value_name = "SECONDS", default_value_t = crate::nccl::live::DEFAULT_DEADLINE_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: u64,
    /// Across nodes: this process is one rank of a run a launcher started (srun, torchrun, a
    /// Kubernetes indexed Job); its rank comes from that launcher's variables (auto: the first
    /// found). Rank 0 gathers the others, prints the report; the others print one line.
    #[arg(long, value_name = "FROM", value_parser = ["auto", "slurm", "torchrun", "k8s"],
          conflicts_with_all = ["net", "hca"])]
    pub ranks: Option<String>,
    /// With --ranks: where rank 0 listens, overriding the launcher's (port: MASTER_PORT+1 for
    /// torchrun, else 18517).
    #[arg(long, value_name = "HOST[:PORT]", requires = "ranks")]
    pub rendezvous: Option<String>,
    /// With --ranks: the number of processes, overriding the launcher's.
    #[arg(long, value_name = "N", requires = "ranks",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub world_size: Option<u32>,
    /// With --ranks: this process's rank, overriding the launcher's.
    #[arg(long, value_name = "N", requires = "ranks")]
    pub rank: Option<u32>,
    /// With --ranks: the shared secret every process holds (or --token-file, or
    /// GPUDOCTOR_TOKEN). It never crosses the wire: each side proves it holds it.
    #[arg(
        long,
        value_name = "TOKEN",
        requires = "ranks",
        conflicts_with = "token_file"
    )]
    pub token: Option<String>,
    /// With --ranks: read the shared secret from this file (a mounted Secret).
    #[arg(long, value_name = "FILE", requires = "ranks")]
    pub token_file: Option<std::path::PathBuf>,
    /// With --ranks: how long rank 0 waits for every rank to join (and the others for rank 0).
    #[arg(long, value_name = "SECONDS", requires = "ranks",
          default_value_t = crate::nccl::cluster::DEFAULT_WAIT_S,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub rendezvous_timeout: u64,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print one JSON document (schema gpudoctor.nccl/2) with every raw sample.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct GpuWriteBwArgs {
    /// The GPU whose kernel posts (GPU<N> in PCI order, as `topo` labels it), or `auto`: every
    /// GPU in turn [default: auto].
    #[arg(long, value_name = "N|auto", value_parser = parse_gpu_arg)]
    pub gpu: Option<GpuArg>,
    /// RDMA device (as in /sys/class/infiniband), e.g. mlx5_0 [default: each GPU's closest
    /// ACTIVE port in the topology].
    #[arg(long, short = 'd', value_name = "DEV")]
    pub device: Option<String>,
    /// Port number (with -d).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..),
          requires = "device")]
    pub port: u8,
    /// Message sizes in bytes, comma-separated [default: 64,256,1024,4096].
    #[arg(long, value_delimiter = ',', value_name = "BYTES")]
    pub sizes: Option<Vec<u64>>,
    /// Iterations (kernel launches) per message size.
    #[arg(long, short = 'n', default_value_t = 2048, value_name = "N")]
    pub iters: u32,
    /// RDMA writes one kernel launch posts (a power of two, at most 1024: one thread each, one block).
    #[arg(long, default_value_t = 512, value_name = "N")]
    pub writes_per_iter: u32,
    /// Who rings the doorbell: the GPU (BlueFlame register mapped with
    /// CU_MEMHOSTREGISTER_IOMEMORY; needs PeerMappingOverride=1), a CPU proxy thread, or auto.
    #[arg(long, value_enum, default_value = "auto", value_name = "HOW")]
    pub nic_handler: NicHandlerArg,
    /// Where the send queue, CQ and doorbell records live: GPU memory (DevX QP and CQ over
    /// umems, IBGDA's placement), libmlx5's host-memory queues, or auto (gpu where the gpu
    /// handler rings and DevX allows it, else host, with the reason in the report).
    #[arg(long, value_enum, default_value = "auto", value_name = "WHERE")]
    pub queues: QueuePlaceArg,
    /// Check that the written bytes arrived intact after each size.
    #[arg(long)]
    pub validate: bool,
    /// Print one JSON document (schema gpudoctor.probe-runs/1: a gpudoctor.gpu-write-bw/1 run
    /// per GPU).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub gate: GateArgs,
}

#[derive(Debug, ClapArgs)]
pub struct ProbeArgs {
    /// Only this GPU (GPU<N> in PCI order, as `topo` labels it).
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// Bytes per timed transfer (a multiple of 16, at least 1 MiB).
    #[arg(long, value_name = "BYTES", default_value_t = probe_defaults::DEFAULT_SIZE_BYTES)]
    pub size: u64,
    /// Timed transfers per measurement.
    #[arg(long, value_name = "N", default_value_t = probe_defaults::DEFAULT_ITERS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub iters: u32,
    /// Untimed transfers before the timed ones.
    #[arg(long, value_name = "N", default_value_t = probe_defaults::DEFAULT_WARMUP)]
    pub warmup: u32,
    /// Give up after this many seconds: a copy or kernel still running then is a failure.
    #[arg(long, value_name = "SECONDS", default_value_t = probe_defaults::DEFAULT_DEADLINE_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: u64,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print one JSON document (schema gpudoctor.probe-runs/1: one gpudoctor.probe/2 run) with
    /// every raw sample.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json or prometheus (node_exporter textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<FormatArg>,
}

#[derive(Debug, ClapArgs)]
pub struct DmabufExportArgs {
    /// Only this GPU (GPU<N> in PCI order, as `topo` labels it).
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// Give up after this many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = probe_defaults::DEFAULT_DEADLINE_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: u64,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Print one JSON document (schema gpudoctor.probe-runs/1: one gpudoctor.probe/2 run).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json or prometheus (node_exporter textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<FormatArg>,
}

#[derive(Debug, Clone, ClapArgs)]
pub struct WriteBwArgs {
    /// RDMA device (as in /sys/class/infiniband), e.g. mlx5_0. With --gpu: default each GPU's
    /// closest ACTIVE port in the topology.
    #[arg(long, short = 'd', value_name = "DEV", required_unless_present = "gpu")]
    pub device: Option<String>,
    /// Level 3 (GPUDirect RDMA): buffers in this GPU's memory (GPU<N> in PCI order, as `topo`
    /// labels it), or `auto`: every GPU in turn, each against its closest ACTIVE RDMA port.
    #[arg(long, value_name = "N|auto", value_parser = parse_gpu_arg)]
    pub gpu: Option<GpuArg>,
    /// How GPU memory is registered: auto (as NCCL: dma-buf where it works, else
    /// nvidia-peermem), dmabuf (ibv_reg_dmabuf_mr) or peermem (ibv_reg_mr on the GPU pointer).
    /// Without --gpu: host memory, with the NIC's half of that decision reported [default with
    /// --gpu: auto].
    #[arg(long, value_enum, value_name = "HOW")]
    pub gdr: Option<GdrModeArg>,
    /// Loopback with --gpu: which buffer is GPU memory: the one the NIC reads (source), the one
    /// it writes (target), or both. Two-node mode: this host's buffer (the client's is the
    /// source, the server's the target).
    #[arg(long, value_enum, value_name = "SIDE", requires = "gpu")]
    pub gpu_side: Option<GpuSideArg>,
    /// Level 3: run everything (allocate, register, measure, release) this many times in one
    /// process; GPU memory free before the first run and after the last must agree.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeat: u32,
    /// Port number.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..))]
    pub port: u8,
    /// Source GID index (default: chosen like NCCL: RoCE v2 with an IPv4-mapped address
    /// preferred on Ethernet; LID routing on InfiniBand).
    #[arg(long, short = 'x', value_name = "N")]
    pub gid_index: Option<u32>,
    /// Message sizes in bytes, comma-separated [default: 64,4096,65536,1048576].
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "BYTES",
        conflicts_with = "all"
    )]
    pub sizes: Option<Vec<u64>>,
    /// Sweep all powers of two from 2 B to 8 MiB (perftest's -a). Not `--all`: that lists
    /// passing subjects in `check` and `diff`.
    #[arg(long = "all-sizes", short = 'a')]
    pub all: bool,
    /// Writes per message size (over all QPs) in each timed repetition.
    #[arg(long, short = 'n', default_value_t = 5000, value_name = "N")]
    pub iters: u32,
    /// Timed repetitions per message size: a size is judged on the median of their
    /// bandwidths; n, median, min, max and every sample are reported.
    #[arg(long, default_value_t = crate::report::rdma::plan::DEFAULT_REPETITIONS, value_name = "N")]
    pub reps: u32,
    /// Writes in flight per QP.
    #[arg(long, short = 't', default_value_t = 128, value_name = "N")]
    pub tx_depth: u32,
    /// A signalled completion every N writes (CQ moderation).
    #[arg(long, short = 'Q', default_value_t = 100, value_name = "N")]
    pub cq_mod: u32,
    /// Writes chained into one ibv_post_send call (perftest's --post_list) [default: up to 16
    /// writes and 64 KiB per post].
    #[arg(long, short = 'l', value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub post_list: Option<u32>,
    /// Number of QP pairs; writes are spread evenly over them. No `-q` (perftest's): that is
    /// `--quiet` in `check`.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub qps: u32,
    /// Check that the written bytes arrived intact after each size.
    #[arg(long)]
    pub validate: bool,
    /// Print one JSON document (schema gpudoctor.probe-runs/1: a gpudoctor.write-bw/3 run, one
    /// per GPU with --gpu auto).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json or prometheus (node_exporter textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<FormatArg>,
    #[command(flatten)]
    pub gate: GateArgs,
    /// Two-node mode, passive side: wait for one --peer client and be written into.
    #[arg(long, conflicts_with = "peer")]
    pub serve: bool,
    /// Address to listen on with --serve.
    #[arg(
        long,
        value_name = "ADDR:PORT",
        default_value = "0.0.0.0:18516",
        requires = "serve"
    )]
    pub listen: String,
    /// Two-node mode, active side: write into the --serve side at HOST[:PORT] (port 18516).
    #[arg(long, value_name = "HOST")]
    pub peer: Option<String>,
    /// Shared secret for two-node mode, given to both sides (or GPUDOCTOR_TOKEN). It never
    /// crosses the wire: each side proves it holds it (HMAC-SHA256 over fresh nonces).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Deadline in seconds for each step: connecting, each answer from the peer, and the wait
    /// for any completion.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub timeout: u64,
}

/// `--gpu N|auto`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuArg {
    Index(u32),
    Auto,
}

fn parse_gpu_arg(s: &str) -> Result<GpuArg, String> {
    if s == "auto" {
        return Ok(GpuArg::Auto);
    }
    s.parse::<u32>()
        .map(GpuArg::Index)
        .map_err(|_| format!("'{s}' is not a GPU number or 'auto'"))
}
