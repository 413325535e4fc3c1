//! Command-line arguments: pure clap definitions, nothing else. `config::Config::from_args`
//! resolves them (and the environment) once; no later stage sees these structs.

use crate::probes::options as probe_defaults;
use clap::{Args as ClapArgs, Parser, Subcommand};
use std::path::PathBuf;

// Older paths of the resolved types (they moved to `config` and `source`).
pub use crate::config::{CheckOptions, Config, OutputFormat};
pub use crate::source::SourceSpec;

/// A doctor for GPU + RDMA servers: topology, GPUDirect readiness, bandwidth probes.
#[derive(Debug, Parser)]
#[command(name = "gpudoctor", version, about, long_about = None, disable_help_subcommand = true)]
pub struct Args {
    /// Accepted before the subcommand too, for the commands that read facts (topo, check,
    /// bundle): `gpudoctor --root DIR check` is `gpudoctor check --root DIR`.
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ColorChoice {
    Auto,
    Always,
    Never,
}

/// Where facts come from: offered only by the commands that read them.
#[derive(Debug, Clone, Default, ClapArgs)]
pub struct SourceArgs {
    /// Read DIR/sys and DIR/proc (a recorded tree or unpacked bundle) instead of /sys and /proc;
    /// NVML facts come from DIR/nvml.json.
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,

    /// Replay a support bundle (a .tar.gz from `gpudoctor bundle`) instead of this machine.
    #[arg(long, value_name = "FILE", conflicts_with = "root")]
    pub bundle: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Map GPUs, NICs, PCIe switches, root complexes and NUMA nodes.
    Topo(TopoArgs),
    /// Check GPUDirect RDMA readiness: pass/warn/fail/skip with evidence and a fix for each
    /// failure. Exit 0 when nothing failed, 1 when a check failed (--strict: or warned).
    #[command(after_long_help = crate::checks::catalog_help())]
    Check(CheckArgs),
    /// List every check with its level and default severity.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Explain one check: what it checks, why it matters, how to fix it.
    Explain {
        /// Check id, e.g. pcie.acs-redirect.
        #[arg(value_parser = check_id_parser(), hide_possible_values = true)]
        id: String,
        /// Output format: text (for a terminal, wrapped to its width) or md (the Markdown
        /// document as written, checks/ID.md).
        #[arg(long, value_name = "FORMAT", default_value = "text",
              value_parser = ["text", "md"])]
        format: String,
    },
    /// Print the live NVML and library snapshots (nvml.json / libs.json of a recorded tree).
    #[command(hide = true)]
    Snapshot {
        /// Which snapshot: nvml or libs.
        #[arg(value_parser = ["nvml", "libs"])]
        what: String,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Measure on the hardware: CUDA copies (h2d, d2h, p2p), dma-buf export, RDMA-write
    /// bandwidth (write-bw). Skips cleanly, exit 0, where CUDA or RDMA is absent.
    #[command(subcommand, disable_help_subcommand = true)]
    Probe(ProbeCommand),
    /// Record everything gpudoctor reads into one .tar.gz that replays with --bundle.
    Bundle(BundleArgs),
    /// Write the expected shape of this server model (schema gpudoctor.baseline/1): GPUs and
    /// NICs by PCI position, path matrix, PCIe links, NVLinks, BAR1, versions, bandwidth
    /// floors. Compare other nodes with `check --expect FILE`.
    Baseline(BaselineArgs),
    /// Summarize many nodes: check reports (`check --json`), probe reports (`probe ... --json`),
    /// baselines and bundles, or directories of them. Nodes are grouped by server model (the
    /// GPU and NIC models of their bundles) or by --expect baseline. Per check the nodes that
    /// fail, warn or skip; per probe measurement and group the median, the robust-z outliers
    /// and the nodes below gpudoctor's bar; per node one line per difference of its shape from
    /// its group's (majority or baseline); the nodes to drain. Files of one node share the name
    /// before the first dot (node17.check.json, node17.h2d.json, node17.tar.gz). Exit 1 when a
    /// node should be drained.
    Fleet {
        /// Reports, bundles or directories.
        #[arg(required = true, value_name = "REPORT|BUNDLE|DIR")]
        inputs: Vec<PathBuf>,
        /// Print one JSON document (schema gpudoctor.fleet/2); the same as --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Output format: table, json, md (Markdown for a ticket).
        #[arg(long, value_enum, value_name = "FORMAT")]
        format: Option<FleetFormat>,
        /// A low bandwidth outlier (modified z < -3.5) is drained only when it is also more
        /// than PERCENT below its group's median.
        #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
        min_deviation: f64,
        /// Compare the nodes of this baseline's server model (`gpudoctor baseline`) with it
        /// instead of with their majority (repeatable, one per model).
        #[arg(long, value_name = "FILE")]
        expect: Vec<PathBuf>,
    },
    /// What differs between two nodes, or one node before and after a change: check verdicts,
    /// probe bandwidth, and (two bundles) B's shape against A's by PCI position. Exit 1 when
    /// they differ.
    Diff {
        /// Report or bundle A.
        a: PathBuf,
        /// Report or bundle B.
        b: PathBuf,
        /// Print one JSON document (schema gpudoctor.diff/2).
        #[arg(long)]
        json: bool,
        /// Also list subjects judged pass in one node and not at all in the other.
        #[arg(long)]
        all: bool,
    },
    /// Write the machine in the formats of other tools: `nccl-topo` for NCCL_TOPO_FILE.
    #[command(subcommand, disable_help_subcommand = true)]
    Export(ExportCommand),
    /// Print a shell completion script: `gpudoctor completions bash >
    /// /etc/bash_completion.d/gpudoctor` (zsh: into a directory on $fpath as `_gpudoctor`;
    /// fish: ~/.config/fish/completions/gpudoctor.fish).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (roff), one per command, into DIR: after `cargo install`, e.g.
    /// `sudo gpudoctor man /usr/local/share/man/man1`.
    Man {
        /// Output directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// How `fleet` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetFormat {
    /// Human table.
    Table,
    /// One JSON document.
    Json,
    /// Markdown (for a ticket).
    Md,
}

#[derive(Debug, ClapArgs)]
pub struct TopoArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print the GPU/NIC matrix in the layout of `nvidia-smi topo -m`.
    #[arg(long, conflicts_with = "json")]
    pub matrix: bool,
    /// Print one JSON document (schema gpudoctor.topo/1).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, ClapArgs)]
pub struct CheckArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print one JSON document (schema gpudoctor.check/1); the same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json, prometheus (node_exporter textfile collector), junit (CI
    /// test reports), reason (one line naming what failed: a Slurm drain reason).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
    /// Exit 1 on warnings too.
    #[arg(long)]
    pub strict: bool,
    #[command(flatten)]
    pub gate: GateArgs,
    /// List every passing subject with its evidence (default: one line per passing check).
    #[arg(long, visible_alias = "verbose", short = 'v')]
    pub all: bool,
    /// Print only the verdict: what failed, what warned, and the counts (for Slurm logs and
    /// provisioning output). Exit codes are unchanged.
    #[arg(long, short = 'q', conflicts_with_all = ["all", "json"])]
    pub quiet: bool,
    /// Colour the status words and the verdict: auto (a terminal, unless NO_COLOR is set),
    /// always, never.
    #[arg(long, value_enum, default_value_t = ColorChoice::Auto, value_name = "WHEN")]
    pub color: ColorChoice,
    /// Probe level: 0 = sysfs/NVML facts only (nothing moves through a device); 1 = also
    /// CUDA host<->GPU and GPU<->GPU copies and dma-buf export (replayed from probes/*.json
    /// in a recorded tree); 2 = also a short RDMA-write loopback on every active RDMA port;
    /// 3 = also a short GPUDirect RDMA loopback per GPU against its closest active port;
    /// 4 = also a short GPU-initiated RDMA-write loopback per GPU on its closest mlx5 port.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=4))]
    pub level: u8,
    /// Downgrade a failing check to a warning (repeatable).
    #[arg(long = "warn", value_name = "ID", value_parser = check_id_parser(),
          hide_possible_values = true)]
    pub warn: Vec<String>,
    /// Upgrade a warning check to a failure (repeatable).
    #[arg(long = "deny", value_name = "ID", value_parser = check_id_parser(),
          hide_possible_values = true)]
    pub deny: Vec<String>,
    /// Do not judge this check (repeatable); it is reported as skip.
    #[arg(long = "skip", value_name = "ID", value_parser = check_id_parser(),
          hide_possible_values = true)]
    pub skip: Vec<String>,
    /// Compare with a baseline written by `gpudoctor baseline` (findings baseline.*).
    #[arg(long, value_name = "FILE")]
    pub expect: Option<PathBuf>,
    /// Also write DIR/gpudoctor.prom for node_exporter's textfile collector, atomically and
    /// whatever the verdict: the run's time, exit code and `gpudoctor_up` (0 when gpudoctor
    /// could not run, with the reason). Standard output is unchanged.
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
    /// Prometheus output (--format prometheus, --textfile) with every finding's state set
    /// (several series per finding); default: per-check counts and one series per finding
    /// that is not a pass.
    #[arg(long)]
    pub all_series: bool,
    /// Also write the JSON report (schema gpudoctor.check/1) to FILE, atomically and whatever
    /// the verdict, beside what standard output prints (e.g. `--format reason`).
    #[arg(long, value_name = "FILE")]
    pub report: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// NCCL topology XML (for NCCL_TOPO_FILE): CPUs (NUMA nodes with their CPU masks), under
    /// them one PCI node per switch (as NCCL's own detection builds the tree) and each GPU and
    /// RDMA NIC with link speed and width, NVLinks, nets.
    /// Gives NCCL the real topology inside VMs and containers that hide it.
    NcclTopo {
        #[command(flatten)]
        source: SourceArgs,
        /// Write to FILE instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

#[derive(Debug, ClapArgs)]
pub struct BaselineArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Where to write the baseline (default: stdout).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// 1 = also record bandwidth floors: measured by the level-1 CUDA probes on the live
    /// machine (replayed sources use their recorded probes/*.json whenever present).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub level: u8,
}

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
    pub nic_handler: crate::rdma::level4::NicHandler,
    /// Where the send queue, CQ and doorbell records live: GPU memory (DevX QP and CQ over
    /// umems, IBGDA's placement), libmlx5's host-memory queues, or auto (gpu where the gpu
    /// handler rings and DevX allows it, else host, with the reason in the report).
    #[arg(long, value_enum, default_value = "auto", value_name = "WHERE")]
    pub queues: crate::rdma::level4::QueuePlace,
    /// Check that the written bytes arrived intact after each size.
    #[arg(long)]
    pub validate: bool,
    /// Print one JSON document (schema gpudoctor.gpu-write-bw/1; --gpu auto: an array).
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
    /// Print one JSON document (schema gpudoctor.probe/1) with every raw sample.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json or prometheus (node_exporter textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
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
    /// Print one JSON document (schema gpudoctor.probe/1).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json or prometheus (node_exporter textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
}

/// For pre-deployment gates: a probe or check that could not be judged fails the gate.
#[derive(Debug, Clone, Copy, Default, ClapArgs)]
pub struct GateArgs {
    /// Exit 1 when something that should have been judged was not. For `check`: a check that
    /// could not be judged (not root, no driver on a node with NVIDIA GPUs on its PCI bus, an
    /// unreadable fact), not one with nothing to judge here (no RDMA device on a GPU-only
    /// node). For a probe: any skip (no CUDA, no GPU, no RDMA device).
    #[arg(long)]
    pub fail_on_skip: bool,
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
    pub gdr: Option<crate::rdma::gdr::GdrMode>,
    /// Loopback with --gpu: which buffer is GPU memory: the one the NIC reads (source), the one
    /// it writes (target), or both. Two-node mode: this host's buffer (the client's is the
    /// source, the server's the target).
    #[arg(long, value_enum, value_name = "SIDE", requires = "gpu")]
    pub gpu_side: Option<crate::rdma::gdr::GpuSide>,
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
    #[arg(long, default_value_t = crate::rdma::write_bw::DEFAULT_REPETITIONS, value_name = "N")]
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
    /// Print one JSON document (schema gpudoctor.write-bw/3).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json or prometheus (node_exporter textfile collector).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<OutputFormat>,
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

#[derive(Debug, ClapArgs)]
pub struct BundleArgs {
    /// Record a recorded tree or re-pack a bundle instead of this machine.
    #[command(flatten)]
    pub source: SourceArgs,
    /// The bundle to write (e.g. NODE.tar.gz).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Keep serial numbers, GPU UUIDs, GUIDs, MAC addresses and the hostname as they are.
    #[arg(long, conflicts_with = "redact_key_file")]
    pub no_redact: bool,
    /// Redact with this site key instead of a fresh random one, so one site's bundles redact
    /// the same value to the same token and can be compared GPU by GPU. The file holds 32
    /// hex digits (128 bits), e.g. made once with `od -An -tx1 -N16 /dev/urandom | tr -d ' \n'`;
    /// keep it secret: anyone with the key can test guesses against the tokens.
    #[arg(long, value_name = "FILE")]
    pub redact_key_file: Option<PathBuf>,
}

/// Any string is accepted (an unknown id gets `explain`'s own suggestion), but the check ids
/// are offered as possible values, so shell completions list them.
fn check_id_parser() -> impl clap::builder::TypedValueParser<Value = String> {
    #[derive(Clone)]
    struct CheckIdParser;
    impl clap::builder::TypedValueParser for CheckIdParser {
        type Value = String;
        fn parse_ref(
            &self,
            cmd: &clap::Command,
            arg: Option<&clap::Arg>,
            value: &std::ffi::OsStr,
        ) -> Result<String, clap::Error> {
            clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
        }
        fn possible_values(
            &self,
        ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
            Some(Box::new(
                crate::checks::CATALOG
                    .iter()
                    .map(|c| clap::builder::PossibleValue::new(c.id.as_str())),
            ))
        }
    }
    CheckIdParser
}

/// The clap command, for man page generation.
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Render the man pages: `gpudoctor.1` and one `gpudoctor-<sub>[-<subsub>].1` per visible
/// subcommand at every depth, so every page a SUBCOMMANDS section names is shipped.
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    let mut pages = Vec::new();
    man_page_tree(command(), "gpudoctor", &mut pages)?;
    Ok(pages)
}

fn man_page_tree(
    cmd: clap::Command,
    name: &str,
    pages: &mut Vec<(String, Vec<u8>)>,
) -> Result<(), std::io::Error> {
    // clap names are &'static str without its `string` feature: a few bytes per page, once.
    let cmd = cmd.name(clap::builder::Str::from(
        name.to_string().leak() as &'static str
    ));
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    pages.push((format!("{name}.1"), buf));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_page_tree(sub.clone(), &format!("{name}-{}", sub.get_name()), pages)?;
    }
    Ok(())
}
