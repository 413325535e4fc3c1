//! Arguments resolved once: clap's raw structs (`cli`) stop here. `Config::from_args` is the
//! one place that looks at the environment (terminal, CUDA_HOME, GPUDOCTOR_TOKEN) and the one
//! place that validates arguments that can be judged without the machine (probe sizes,
//! write-bw plans, check ids, which commands take --root/--bundle), so every later stage
//! works on values that are already right.
//!
//! This module must not read sysfs, open libraries or print.

mod baseline;
mod bundle;
mod check;
mod defaults;
mod fleet;
mod output;
mod probe;
#[cfg(test)]
mod tests;
mod topo;

pub use crate::source::SourceSpec;
pub use bundle::Redaction;
pub use check::CheckOptions;
pub use defaults::probe_defaults;
pub use output::{FleetOutput, OutputFormat, TopoOutput, json_or_table};
pub use probe::{GpuWriteBwConfig, WriteBwConfig};

use crate::cli::{Args, Command, ExportCommand, SourceArgs};
use crate::probes::options::ProbeOptions;
use anyhow::{Result, bail};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(Debug)]
pub enum Action {
    Topo(TopoOutput),
    Check(Box<CheckOptions>),
    List {
        json: bool,
    },
    /// A check's document: (id, raw Markdown instead of terminal text).
    Explain(String, bool),
    Snapshot(String),
    Probe {
        options: ProbeOptions,
        json: bool,
        format: OutputFormat,
        /// A skip (no CUDA, no GPU) exits 1.
        fail_on_skip: bool,
    },
    WriteBw(WriteBwConfig),
    GpuWriteBw(GpuWriteBwConfig),
    Completions(clap_complete::Shell),
    Man(PathBuf),
    Fleet {
        inputs: Vec<PathBuf>,
        format: FleetOutput,
        /// Fraction (0.05 = 5%).
        min_deviation: f64,
        expect: Vec<PathBuf>,
    },
    Diff {
        a: PathBuf,
        b: PathBuf,
        json: bool,
        all: bool,
    },
    /// `export nccl-topo`.
    ExportNcclTopo {
        output: Option<PathBuf>,
    },
    Baseline {
        output: Option<PathBuf>,
        level: u8,
        probe: ProbeOptions,
    },
    Bundle {
        output: PathBuf,
        redact: Redaction,
        /// Draw progress on stderr (stderr is a terminal).
        progress: bool,
    },
}

/// The environment `from_args` consults, gathered in one value so tests can give their own.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// stdout is a terminal: its width for human tables.
    pub stdout_width: Option<u16>,
    /// COLUMNS, when set to a number: the width a person asked for, terminal or not.
    pub columns: Option<u16>,
    /// NO_COLOR is set to something (https://no-color.org).
    pub no_color: bool,
    pub stderr_is_terminal: bool,
    /// CUDA_HOME / CUDA_PATH, where NVRTC may live.
    pub cuda_homes: Vec<PathBuf>,
    /// GPUDOCTOR_TOKEN.
    pub token: Option<String>,
    /// GPUDOCTOR_TEST_SLOW_READ=PATH=SECONDS, for tests only: every read of PATH (a kernel
    /// path such as /sys/bus/pci/devices/0000:00:06.0/config, or a recorded document such as
    /// /probes/h2d.json) takes SECONDS longer, as a device that stops answering would. How the
    /// tests make a step of `check --time-budget` outlast its budget; not for production use.
    pub test_slow_read: Option<(String, std::time::Duration)>,
}

impl Env {
    pub fn current() -> Env {
        let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        Env {
            stdout_width: if std::io::stdout().is_terminal() {
                comfy_table::Table::new().width()
            } else {
                None
            },
            columns: std::env::var("COLUMNS")
                .ok()
                .and_then(|c| c.trim().parse::<u16>().ok())
                .filter(|c| *c >= 20),
            no_color: nonempty("NO_COLOR").is_some(),
            stderr_is_terminal: std::io::stderr().is_terminal(),
            cuda_homes: ["CUDA_HOME", "CUDA_PATH"]
                .iter()
                .filter_map(|k| nonempty(k))
                .map(PathBuf::from)
                .collect(),
            token: nonempty("GPUDOCTOR_TOKEN").and_then(|t| t.into_string().ok()),
            test_slow_read: nonempty("GPUDOCTOR_TEST_SLOW_READ")
                .and_then(|v| v.into_string().ok())
                .and_then(|v| {
                    let (path, secs) = v.rsplit_once('=')?;
                    let secs: f64 = secs
                        .parse()
                        .ok()
                        .filter(|s: &f64| s.is_finite() && *s >= 0.0)?;
                    Some((
                        path.to_string(),
                        std::time::Duration::from_secs_f64(secs.min(3600.0)),
                    ))
                }),
        }
    }
}

#[derive(Debug)]
pub struct Config {
    pub source: SourceSpec,
    pub action: Action,
    /// Width for human output: COLUMNS, else the terminal's; None in a pipe (stable output).
    pub width: Option<u16>,
}

impl Config {
    /// Resolve parsed arguments against the process environment.
    pub fn from_args(args: Args) -> Result<Config> {
        Config::resolve(args, &Env::current())
    }

    /// Resolve parsed arguments against `env`: each command in its own module. Errors here are
    /// usage errors (exit 2).
    pub fn resolve(args: Args, env: &Env) -> Result<Config> {
        let top = args.source;
        let (own, action) = match args.command {
            Command::Topo(t) => topo::resolve(t),
            Command::Check(c) => check::resolve(c, env)?,
            Command::List { json } => (None, Action::List { json }),
            Command::Explain { id, format } => (None, Action::Explain(id, format == "md")),
            Command::Snapshot { what, source } => (Some(source), Action::Snapshot(what)),
            Command::Probe(cmd) => (None, probe::resolve(cmd, env)?),
            Command::Completions { shell } => (None, Action::Completions(shell)),
            Command::Man { dir } => (None, Action::Man(dir)),
            Command::Bundle(b) => bundle::resolve(b, env)?,
            Command::Fleet {
                inputs,
                json,
                format,
                min_deviation,
                expect,
            } => (
                None,
                fleet::resolve(inputs, json, format, min_deviation, expect)?,
            ),
            Command::Diff { a, b, json, all } => (None, fleet::resolve_diff(a, b, json, all)),
            Command::Export(ExportCommand::NcclTopo { source, output }) => {
                (Some(source), Action::ExportNcclTopo { output })
            }
            Command::Baseline(b) => baseline::resolve(b, env),
        };
        let source = source_spec(&top, own.as_ref(), &action)?;
        Ok(Config {
            source,
            action,
            width: env.columns.or(env.stdout_width),
        })
    }
}

/// `--root`/`--bundle` given before the subcommand or after it (not both); refused for
/// commands that do not read facts.
fn source_spec(top: &SourceArgs, own: Option<&SourceArgs>, action: &Action) -> Result<SourceSpec> {
    let given = |s: &SourceArgs| s.root.is_some() || s.bundle.is_some();
    let chosen = match own {
        Some(own) if given(own) && given(top) => {
            bail!("--root/--bundle given twice (before and after the subcommand): give it once")
        }
        Some(own) if given(own) => own,
        _ if !given(top) => return Ok(SourceSpec::Live),
        Some(_) => top,
        None => {
            let what = match action {
                Action::Probe { .. } | Action::WriteBw(_) | Action::GpuWriteBw(_) => {
                    "probes measure the live machine; --root and --bundle replay recorded facts (use `check --level 1` to re-evaluate recorded probe samples)"
                }
                _ => "--root and --bundle apply to topo, check, bundle, baseline and export only",
            };
            bail!("{what}");
        }
    };
    Ok(match (&chosen.root, &chosen.bundle) {
        (Some(p), _) => SourceSpec::Root(p.clone()),
        (None, Some(f)) => SourceSpec::Bundle(f.clone()),
        (None, None) => SourceSpec::Live,
    })
}
