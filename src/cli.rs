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
    /// Measure one thing with CUDA: h2d/d2h/p2p bandwidth or dma-buf export (skips cleanly,
    /// exit 0, where CUDA is absent).
    Probe(ProbeArgs),
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

#[derive(Debug, ClapArgs)]
pub struct ProbeArgs {
    /// Which probe.
    #[arg(value_enum)]
    pub name: crate::probes::ProbeKind,
    /// Only this GPU (GPU<N> in PCI order, as `topo` labels it).
    #[arg(long, value_name = "N")]
    pub gpu: Option<u32>,
    /// Bytes per timed transfer (a multiple of 16, at least 1 MiB).
    #[arg(long, value_name = "BYTES", default_value_t = crate::probes::live::DEFAULT_SIZE_BYTES)]
    pub size: u64,
    /// Timed transfers per measurement.
    #[arg(long, value_name = "N", default_value_t = crate::probes::live::DEFAULT_ITERS,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub iters: u32,
    /// Untimed transfers before the timed ones.
    #[arg(long, value_name = "N", default_value_t = crate::probes::live::DEFAULT_WARMUP)]
    pub warmup: u32,
    /// Give up after this many seconds: a copy or kernel still running then is a failure.
    #[arg(long, value_name = "SECONDS", default_value_t = crate::probes::live::DEFAULT_DEADLINE_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: u64,
    /// Print one JSON document (schema gpudoctor.probe/1) with every raw sample.
    #[arg(long)]
    pub json: bool,
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
    Probe {
        options: crate::probes::live::ProbeOptions,
        json: bool,
    },
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
            Command::Probe(p) => Action::Probe {
                options: crate::probes::live::ProbeOptions {
                    kind: p.name,
                    gpu: p.gpu,
                    size_bytes: p.size,
                    iters: p.iters,
                    warmup: p.warmup,
                    deadline: std::time::Duration::from_secs(p.deadline),
                    // Where a CUDA toolkit (and so NVRTC) may be installed.
                    cuda_homes: ["CUDA_HOME", "CUDA_PATH"]
                        .iter()
                        .filter_map(std::env::var_os)
                        .filter(|v| !v.is_empty())
                        .map(PathBuf::from)
                        .collect(),
                    progress: std::io::stderr().is_terminal(),
                    policy: crate::probes::Policy::default(),
                },
                json: p.json,
            },
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
