//! Command-line arguments (pure clap definitions) and their resolution into a `Config`, the one
//! place that looks at the environment (terminal, paths).

use clap::{Args as ClapArgs, Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;

/// A doctor for GPU + RDMA servers: topology, GPUDirect readiness, bandwidth probes.
#[derive(Debug, Parser)]
#[command(name = "gpudoctor", version, about, long_about = None)]
pub struct Args {
    /// Read DIR/sys and DIR/proc (a recorded tree or unpacked bundle) instead of /sys and /proc;
    /// NVML facts come from DIR/nvml.json.
    #[arg(long, global = true, value_name = "DIR")]
    pub root: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Map GPUs, NICs, PCIe switches, root complexes and NUMA nodes.
    Topo(TopoArgs),
    /// Run a measurement on the hardware (level-2 probes).
    #[command(subcommand)]
    Probe(ProbeCommand),
    /// Write the man pages (roff) into a directory.
    #[command(hide = true)]
    Man {
        /// Output directory.
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

#[derive(Debug, ClapArgs)]
pub struct TopoArgs {
    /// Print the GPU/NIC matrix in the layout of `nvidia-smi topo -m`.
    #[arg(long, conflicts_with = "json")]
    pub matrix: bool,
    /// Print one JSON document (schema gpudoctor.topo/1).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ProbeCommand {
    /// RDMA-write bandwidth over RC QPs, like ib_write_bw: loopback on one device (two QPs
    /// connected to each other), or between two hosts with --serve / --peer.
    WriteBw(WriteBwArgs),
}

#[derive(Debug, Clone, ClapArgs)]
pub struct WriteBwArgs {
    /// RDMA device (as in /sys/class/infiniband), e.g. mlx5_0.
    #[arg(long, short = 'd', value_name = "DEV")]
    pub device: String,
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
    /// Sweep all powers of two from 2 B to 8 MiB (perftest's -a).
    #[arg(long, short = 'a')]
    pub all: bool,
    /// Writes per message size (over all QPs).
    #[arg(long, short = 'n', default_value_t = 5000, value_name = "N")]
    pub iters: u32,
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
    /// Number of QP pairs; writes are spread evenly over them.
    #[arg(long, short = 'q', default_value_t = 1, value_name = "N")]
    pub qps: u32,
    /// Check that the written bytes arrived intact after each size.
    #[arg(long)]
    pub validate: bool,
    /// Print one JSON document (schema gpudoctor.write-bw/1).
    #[arg(long)]
    pub json: bool,
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
    /// Shared secret for two-node mode, given to both sides (or GPUDOCTOR_TOKEN).
    #[arg(long, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Deadline in seconds for each step: connecting, each answer from the peer, and the wait
    /// for any completion.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub timeout: u64,
}

/// Where facts come from.
#[derive(Debug, Clone)]
pub enum SourceSpec {
    Live,
    Root(PathBuf),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopoOutput {
    Tree,
    Matrix,
    Json,
}

#[derive(Debug)]
pub enum Action {
    Topo(TopoOutput),
    /// Token from --token or GPUDOCTOR_TOKEN resolved into the args.
    WriteBw(WriteBwArgs),
    Man(PathBuf),
}

#[derive(Debug)]
pub struct Config {
    pub source: SourceSpec,
    pub action: Action,
    /// Terminal width for human tables; None when stdout is not a terminal (stable output).
    pub width: Option<u16>,
}

impl Config {
    pub fn from_args(args: Args) -> Self {
        let source = match args.root {
            Some(p) => SourceSpec::Root(p),
            None => SourceSpec::Live,
        };
        let action = match args.command {
            Command::Topo(t) => Action::Topo(if t.json {
                TopoOutput::Json
            } else if t.matrix {
                TopoOutput::Matrix
            } else {
                TopoOutput::Tree
            }),
            Command::Probe(ProbeCommand::WriteBw(mut w)) => {
                if w.token.is_none() {
                    w.token = std::env::var("GPUDOCTOR_TOKEN")
                        .ok()
                        .filter(|t| !t.is_empty());
                }
                Action::WriteBw(w)
            }
            Command::Man { dir } => Action::Man(dir),
        };
        let width = if std::io::stdout().is_terminal() {
            comfy_table::Table::new().width()
        } else {
            None
        };
        Config {
            source,
            action,
            width,
        }
    }
}

/// The clap command, for man page generation.
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}

/// Render the man pages: `gpudoctor.1` and one `gpudoctor-<sub>.1` per visible subcommand.
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>, std::io::Error> {
    let cmd = command();
    let mut pages = Vec::new();
    let mut buf = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut buf)?;
    pages.push(("gpudoctor.1".to_string(), buf));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("gpudoctor-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(clap::builder::Str::from(name.clone().leak() as &'static str));
        let mut buf = Vec::new();
        clap_mangen::Man::new(sub).render(&mut buf)?;
        pages.push((format!("{name}.1"), buf));
    }
    Ok(pages)
}
