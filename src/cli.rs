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

    /// Replay a support bundle (a .tar.gz from `gpudoctor bundle`) instead of this machine.
    #[arg(long, global = true, value_name = "FILE", conflicts_with = "root")]
    pub bundle: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Map GPUs, NICs, PCIe switches, root complexes and NUMA nodes.
    Topo(TopoArgs),
    /// Record everything gpudoctor reads into one .tar.gz that replays with --bundle.
    Bundle(BundleArgs),
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
pub struct BundleArgs {
    /// The bundle to write (e.g. NODE.tar.gz).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    /// Keep serial numbers, GPU UUIDs, GUIDs, MAC addresses and the hostname as they are.
    #[arg(long)]
    pub no_redact: bool,
}

/// Where facts come from.
#[derive(Debug, Clone)]
pub enum SourceSpec {
    Live,
    Root(PathBuf),
    /// A support bundle file.
    Bundle(PathBuf),
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
    Man(PathBuf),
    Bundle {
        output: PathBuf,
        redact: bool,
        /// Draw progress on stderr (stderr is a terminal).
        progress: bool,
    },
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
        let source = match (args.root, args.bundle) {
            (Some(p), _) => SourceSpec::Root(p),
            (None, Some(f)) => SourceSpec::Bundle(f),
            (None, None) => SourceSpec::Live,
        };
        let action = match args.command {
            Command::Topo(t) => Action::Topo(if t.json {
                TopoOutput::Json
            } else if t.matrix {
                TopoOutput::Matrix
            } else {
                TopoOutput::Tree
            }),
            Command::Man { dir } => Action::Man(dir),
            Command::Bundle(b) => Action::Bundle {
                output: b.output,
                redact: !b.no_redact,
                progress: std::io::stderr().is_terminal(),
            },
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
