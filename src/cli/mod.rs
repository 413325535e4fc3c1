//! Command-line arguments: pure clap definitions, nothing else. `config::Config::from_args`
//! resolves them (and the environment) once; no later stage sees these structs.
//!
//! The only module with clap derives: the value enums of options (`values`) mirror engine
//! types, which carry no clap. This module must not import `config` (config reads it, one way).

mod man;
mod probe;
mod values;

pub use man::{command, completion_script, man_pages};
pub use probe::{
    DmabufExportArgs, GpuArg, GpuWriteBwArgs, NcclArgs, ProbeArgs, ProbeCommand, WriteBwArgs,
};
pub use values::{
    ColorChoice, DiffFormat, FleetFormat, FormatArg, GdrModeArg, GpuSideArg, NicHandlerArg,
    QueuePlaceArg, TopoFormat,
};

use clap::{Args as ClapArgs, Parser, Subcommand};
use std::path::PathBuf;

/// What `--version` prints: the release and the source revision it was built from (a git
/// commit, or what the packager set in `GPUDOCTOR_REVISION`; see build.rs). `-V` and the man
/// pages keep the release alone.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (revision ",
    env!("GPUDOCTOR_REVISION"),
    ")"
);

/// A doctor for GPU + RDMA servers: topology, GPUDirect readiness, bandwidth probes.
#[derive(Debug, Parser)]
#[command(name = "gpudoctor", version, long_version = LONG_VERSION, about, long_about = None, disable_help_subcommand = true)]
pub struct Args {
    /// Accepted before the subcommand too, for the commands that read facts (topo, check,
    /// bundle): `gpudoctor --root DIR check` is `gpudoctor check --root DIR`.
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(subcommand)]
    pub command: Command,
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

    /// Judge a machine from a record in another format: an nvidia-bug-report log, lspci text
    /// (-v..-vvv, -D, -nn, -k, -x..-xxxx), hwloc XML (lstopo --of xml) or an NCCL topology XML
    /// (NCCL_TOPO_DUMP_FILE or NCCL_TOPO_FILE), gzip accepted. What the format does not carry is
    /// unknown, never a pass.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["root", "bundle"])]
    pub from: Option<PathBuf>,

    /// The format of --from, instead of recognising it from the content.
    #[arg(long, value_name = "FORMAT", requires = "from", value_parser = ["bug-report", "lspci", "hwloc", "nccl"])]
    pub from_format: Option<String>,
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
    /// Print the live NVML, library and kernel-log snapshots (nvml.json / libs.json /
    /// kmsg.json of a recorded tree).
    #[command(hide = true)]
    Snapshot {
        /// Which snapshot: nvml, libs or kmsg.
        #[arg(value_parser = ["nvml", "libs", "kmsg"])]
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
        /// Output format: table, json, md (Markdown for a ticket), html (one self-contained
        /// page).
        #[arg(long, value_enum, value_name = "FORMAT")]
        format: Option<FleetFormat>,
        /// A low bandwidth outlier (modified z < -3.5) is drained only when it is also more
        /// than PERCENT below its group's median.
        #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
        min_deviation: f64,
        /// Compare the nodes of this baseline's server model (`gpudoctor baseline`) with it
        /// instead of with their majority, and hold their bandwidth to its floors (`baseline
        /// --level 1`: a node below one is drained however slow its whole group is) rather
        /// than to gpudoctor's bar only (repeatable, one per model).
        #[arg(long, value_name = "FILE")]
        expect: Vec<PathBuf>,
    },
    /// What differs between two nodes, or one node before and after a change: check verdicts,
    /// probe bandwidth, and (two bundles) B's shape against A's by PCI position. Exit 1 when
    /// B is worse (a verdict worse, a finding newly failing or warning, bandwidth down 5% or
    /// more, another shape), 0 when every change is for the better.
    Diff {
        /// Report or bundle A.
        a: PathBuf,
        /// Report or bundle B.
        b: PathBuf,
        /// Print one JSON document (schema gpudoctor.diff/2); the same as --format json.
        #[arg(long, conflicts_with = "format")]
        json: bool,
        /// Output format: table, json, html (one self-contained page).
        #[arg(long, value_enum, value_name = "FORMAT")]
        format: Option<DiffFormat>,
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

#[derive(Debug, ClapArgs)]
pub struct TopoArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print the GPU/NIC matrix of `nvidia-smi topo -m` (its path types, CPU and NUMA
    /// affinity), in aligned columns within the width: a wider grid is cut into column blocks.
    #[arg(long, conflicts_with = "json")]
    pub matrix: bool,
    /// With --matrix: nvidia-smi's own tab-separated layout, one line per row however wide (for
    /// its parsers and a diff against `nvidia-smi topo -m`).
    #[arg(long, requires = "matrix")]
    pub tsv: bool,
    /// Print one JSON document (schema gpudoctor.topo/1).
    #[arg(long)]
    pub json: bool,
    /// Output format: table, json, html (one self-contained page: the topology drawn and the
    /// path matrix).
    #[arg(long, value_enum, value_name = "FORMAT", conflicts_with_all = ["json", "matrix"])]
    pub format: Option<TopoFormat>,
}

#[derive(Debug, ClapArgs)]
pub struct CheckArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print one JSON document (schema gpudoctor.check/1); the same as --format json.
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Output format: table, json, prometheus (node_exporter textfile collector), junit (CI
    /// test reports), reason (one line naming what failed: a Slurm drain reason), html (one
    /// self-contained page: verdict, findings, topology drawn, path matrix, bandwidth).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub format: Option<FormatArg>,
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
    /// Do not judge this check (repeatable); it is reported as skip. ID:SUBJECT silences one
    /// subject instead (the subject exactly as the report prints it: 0000:17:00.0, mlx5_3/1,
    /// GPU3, host): the finding keeps its status and evidence, is shown as silenced, and
    /// counts toward neither the exit code nor --fail-on-skip; a silence that matches nothing
    /// is reported (silence.stale).
    #[arg(long = "skip", value_name = "ID[:SUBJECT]", value_parser = check_id_parser(),
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
    /// Finish within SECONDS whatever hangs: discovery, the checks and each probe run under
    /// this budget; when it is spent, what was judged is kept and everything not finished is
    /// an unknown skip ("not judged: time budget of N s spent during STEP"), judged by the
    /// gate as usual (--fail-on-skip fails the node). Without it, discovery gives up after
    /// 60 s (exit 2) and probes after their --deadline.
    #[arg(long, value_name = "SECONDS", value_parser = parse_time_budget)]
    pub time_budget: Option<f64>,
    /// Report everything as always (output, --textfile, --report) but exit 0 whatever the
    /// verdict: for canary nodes. The report says what the exit code would have been (JSON
    /// `would_exit`); gpudoctor's own failures still exit 2. GPUDOCTOR_REPORT_ONLY=1 does the
    /// same.
    #[arg(long)]
    pub report_only: bool,
}

/// `--time-budget`: a positive number of seconds, at most a day.
fn parse_time_budget(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 86400.0 => Ok(v),
        _ => Err(format!(
            "'{s}': expected seconds, more than 0 and at most 86400"
        )),
    }
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
