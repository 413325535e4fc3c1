//! Arguments resolved once: clap's raw structs (`cli`) stop here. `Config::from_args` is the
//! one place that looks at the environment (terminal, CUDA_HOME, GPUDOCTOR_TOKEN) and the one
//! place that validates arguments that can be judged without the machine (probe sizes,
//! write-bw plans, check ids, which commands take --root/--bundle), so every later stage
//! works on values that are already right.
//!
//! This module must not read sysfs, open libraries or print.

use crate::bundle::redact::SiteKey;
use crate::checks::Overrides;
use crate::cli::{Args, ColorChoice, Command, ProbeArgs, ProbeCommand, SourceArgs, WriteBwArgs};
use crate::probes::ProbeKind;
use crate::probes::options::ProbeOptions;
use crate::rdma::{Role, WriteBwRequest, write_bw};
pub use crate::source::SourceSpec;
use anyhow::{Context, Result, bail};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopoOutput {
    Tree,
    Matrix,
    Json,
}

/// How a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Human table.
    Table,
    /// One JSON document.
    Json,
    /// Prometheus text exposition (node_exporter textfile collector).
    Prometheus,
    /// JUnit XML (check only).
    Junit,
    /// One line naming what failed, subject and observation (check only): a Slurm drain
    /// reason, a Node Problem Detector condition message.
    Reason,
}

impl OutputFormat {
    /// `--json` and `--format` resolved (clap has already refused both together).
    fn resolve(json: bool, format: Option<OutputFormat>) -> OutputFormat {
        match (json, format) {
            (_, Some(f)) => f,
            (true, None) => OutputFormat::Json,
            (false, None) => OutputFormat::Table,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Options for the level-1 probes (defaults of `gpudoctor probe`).
    pub probe: ProbeOptions,
    pub json: bool,
    /// Every passing subject with its evidence (`--all`).
    pub all_rows: bool,
    /// Only the verdict lines (`--quiet`).
    pub quiet: bool,
    /// ANSI colour in the text report.
    pub color: bool,
    pub strict: bool,
    pub level: u8,
    pub overrides: Overrides,
    /// `--expect FILE`: the baseline to compare with, parsed.
    pub expect: Option<crate::baseline::Baseline>,
    pub format: OutputFormat,
    /// Exit 1 when something that should have been judged was not (`--fail-on-skip`).
    pub fail_on_skip: bool,
    /// `--textfile DIR`: where gpudoctor.prom is written, whatever the verdict.
    pub textfile: Option<PathBuf>,
    /// `--all-series`: every finding's state set in Prometheus output.
    pub all_series: bool,
    /// `--report FILE`: the JSON report written there too, whatever the verdict.
    pub report: Option<PathBuf>,
}

impl CheckOptions {
    /// A plain level-0 check with no overrides and no environment (what a bundle stores, what
    /// tests run).
    pub fn level0() -> Self {
        CheckOptions {
            probe: ProbeOptions::defaults(ProbeKind::H2d),
            json: true,
            all_rows: false,
            quiet: false,
            color: false,
            strict: false,
            level: 0,
            overrides: Overrides::default(),
            expect: None,
            format: OutputFormat::Json,
            fail_on_skip: false,
            textfile: None,
            all_series: false,
            report: None,
        }
    }
}

/// `probe write-bw`, resolved: the request the engine runs and how to print it.
#[derive(Debug, Clone)]
pub struct WriteBwConfig {
    pub request: WriteBwRequest,
    /// Level 3 (`--gpu`/`--gdr`): GPU memory, the registration path, the NIC per GPU.
    pub gdr: Option<crate::rdma::level3::GdrRequest>,
    pub json: bool,
    pub format: OutputFormat,
    /// A skip (no RDMA device, no libibverbs) exits 1 (`--fail-on-skip`).
    pub fail_on_skip: bool,
}

/// `probe gpu-write-bw`, resolved.
#[derive(Debug, Clone)]
pub struct GpuWriteBwConfig {
    pub request: crate::rdma::level4::GpuWriteRequest,
    pub json: bool,
    /// A skip exits 1 (`--fail-on-skip`).
    pub fail_on_skip: bool,
    /// CUDA_HOME / CUDA_PATH, where NVRTC may live (the kernel is compiled at run time).
    pub cuda_homes: Vec<PathBuf>,
}

/// How a bundle redacts identifiers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redaction {
    /// `--no-redact`.
    Off,
    /// A fresh random key per bundle (the default).
    RandomKey,
    /// A site's own key (`--redact-key-file`).
    SiteKey(SiteKey),
}

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
        format: crate::cli::FleetFormat,
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

    /// Resolve parsed arguments against `env`. Errors here are usage errors (exit 2).
    pub fn resolve(args: Args, env: &Env) -> Result<Config> {
        let top = args.source;
        let probe_defaults = |kind| ProbeOptions {
            cuda_homes: env.cuda_homes.clone(),
            progress: env.stderr_is_terminal,
            ..ProbeOptions::defaults(kind)
        };
        let (own, action) = match args.command {
            Command::Topo(t) => (
                Some(t.source),
                Action::Topo(if t.json {
                    TopoOutput::Json
                } else if t.matrix {
                    TopoOutput::Matrix
                } else {
                    TopoOutput::Tree
                }),
            ),
            Command::Check(c) => {
                let overrides =
                    Overrides::parse(&c.warn, &c.deny, &c.skip).map_err(anyhow::Error::msg)?;
                let expect = match &c.expect {
                    Some(p) => Some(read_baseline(p)?),
                    None => None,
                };
                let format = OutputFormat::resolve(c.json, c.format);
                (
                    Some(c.source),
                    Action::Check(Box::new(CheckOptions {
                        // Progress is for a person at a terminal: silent for machine output.
                        probe: ProbeOptions {
                            progress: env.stderr_is_terminal && format == OutputFormat::Table,
                            ..probe_defaults(ProbeKind::H2d)
                        },
                        json: format == OutputFormat::Json,
                        format,
                        all_rows: c.all,
                        quiet: c.quiet,
                        color: match c.color {
                            ColorChoice::Always => true,
                            ColorChoice::Never => false,
                            ColorChoice::Auto => env.stdout_width.is_some() && !env.no_color,
                        },
                        strict: c.strict,
                        level: c.level,
                        overrides,
                        fail_on_skip: c.gate.fail_on_skip,
                        expect,
                        textfile: c.textfile,
                        all_series: c.all_series,
                        report: c.report,
                    })),
                )
            }
            Command::List { json } => (None, Action::List { json }),
            Command::Explain { id, format } => (None, Action::Explain(id, format == "md")),
            Command::Snapshot { what, source } => (Some(source), Action::Snapshot(what)),
            Command::Probe(cmd) => (
                None,
                match cmd {
                    ProbeCommand::WriteBw(w) => Action::WriteBw(write_bw_config(w, env)?),
                    ProbeCommand::GpuWriteBw(w) => Action::GpuWriteBw(gpu_write_bw_config(w, env)?),
                    ProbeCommand::H2d(p) => probe_action(ProbeKind::H2d, p, probe_defaults)?,
                    ProbeCommand::D2h(p) => probe_action(ProbeKind::D2h, p, probe_defaults)?,
                    ProbeCommand::P2p(p) => probe_action(ProbeKind::P2p, p, probe_defaults)?,
                    ProbeCommand::DmabufExport(p) => {
                        let format = probe_format(p.json, p.format)?;
                        Action::Probe {
                            options: ProbeOptions {
                                gpu: p.gpu,
                                deadline: Duration::from_secs(p.deadline),
                                ..probe_defaults(ProbeKind::DmabufExport)
                            },
                            json: format == OutputFormat::Json,
                            format,
                            fail_on_skip: p.gate.fail_on_skip,
                        }
                    }
                },
            ),
            Command::Completions { shell } => (None, Action::Completions(shell)),
            Command::Man { dir } => (None, Action::Man(dir)),
            Command::Bundle(b) => {
                let redact = match (b.no_redact, &b.redact_key_file) {
                    (true, _) => Redaction::Off,
                    (false, None) => Redaction::RandomKey,
                    (false, Some(f)) => {
                        let text = std::fs::read_to_string(f).with_context(|| {
                            format!("--redact-key-file {}: cannot read the key", f.display())
                        })?;
                        Redaction::SiteKey(SiteKey::parse(&text).map_err(|e| {
                            anyhow::anyhow!("--redact-key-file {}: {e}", f.display())
                        })?)
                    }
                };
                (
                    Some(b.source),
                    Action::Bundle {
                        output: b.output,
                        redact,
                        progress: env.stderr_is_terminal,
                    },
                )
            }
            Command::Fleet {
                inputs,
                json,
                format,
                min_deviation,
                expect,
            } => {
                if !(0.0..100.0).contains(&min_deviation) {
                    bail!(
                        "--min-deviation is a percentage from 0 to below 100, not {min_deviation}"
                    );
                }
                let format = match (json, format) {
                    (_, Some(f)) => f,
                    (true, None) => crate::cli::FleetFormat::Json,
                    (false, None) => crate::cli::FleetFormat::Table,
                };
                (
                    None,
                    Action::Fleet {
                        inputs,
                        format,
                        min_deviation: min_deviation / 100.0,
                        expect,
                    },
                )
            }
            Command::Diff { a, b, json, all } => (None, Action::Diff { a, b, json, all }),
            Command::Export(crate::cli::ExportCommand::NcclTopo { source, output }) => {
                (Some(source), Action::ExportNcclTopo { output })
            }
            Command::Baseline(b) => (
                Some(b.source),
                Action::Baseline {
                    output: b.output,
                    level: b.level,
                    probe: probe_defaults(ProbeKind::H2d),
                },
            ),
        };
        let source = source_spec(&top, own.as_ref(), &action)?;
        Ok(Config {
            source,
            action,
            width: env.columns.or(env.stdout_width),
        })
    }
}

/// Read and parse a baseline file (a usage error when it is missing or malformed).
fn read_baseline(p: &std::path::Path) -> Result<crate::baseline::Baseline> {
    // A baseline may come from elsewhere: a regular file only, capped, never a blocking open.
    let bytes = crate::bundle::read::read_regular(p, 64 << 20)
        .with_context(|| format!("--expect {}: cannot read", p.display()))?;
    let text =
        String::from_utf8(bytes).with_context(|| format!("--expect {}: not UTF-8", p.display()))?;
    crate::baseline::Baseline::parse(&text).with_context(|| format!("--expect {}", p.display()))
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

fn probe_action(
    kind: ProbeKind,
    p: ProbeArgs,
    defaults: impl Fn(ProbeKind) -> ProbeOptions,
) -> Result<Action> {
    let options = ProbeOptions {
        gpu: p.gpu,
        size_bytes: p.size,
        iters: p.iters,
        warmup: p.warmup,
        deadline: Duration::from_secs(p.deadline),
        ..defaults(kind)
    };
    options.validate().map_err(anyhow::Error::msg)?;
    let format = probe_format(p.json, p.format)?;
    // Progress is for a person at a terminal: silent for machine output.
    let options = ProbeOptions {
        progress: options.progress && format == OutputFormat::Table,
        ..options
    };
    Ok(Action::Probe {
        options,
        json: format == OutputFormat::Json,
        format,
        fail_on_skip: p.gate.fail_on_skip,
    })
}

fn probe_format(json: bool, format: Option<OutputFormat>) -> Result<OutputFormat> {
    let f = OutputFormat::resolve(json, format);
    if matches!(f, OutputFormat::Junit | OutputFormat::Reason) {
        bail!(
            "--format {} is for `check` (probes print table, json or prometheus)",
            if f == OutputFormat::Junit {
                "junit"
            } else {
                "reason"
            }
        );
    }
    Ok(f)
}

/// Level 3's options: present with --gpu or --gdr; the others need one of them.
fn level3_request(
    w: &WriteBwArgs,
    role: &Role,
    format: OutputFormat,
) -> Result<Option<crate::rdma::level3::GdrRequest>> {
    use crate::cli::GpuArg;
    use crate::rdma::gdr::{GdrMode, GpuSide};
    use crate::rdma::level3::{GdrRequest, GpuSelect};
    if w.gpu.is_none() && w.gdr.is_none() {
        if w.repeat != 1 {
            bail!("--repeat applies to level-3 runs (--gpu or --gdr)");
        }
        return Ok(None);
    }
    if w.gpu_side.is_some() && *role != Role::Loopback {
        bail!(
            "--gpu-side is for loopback; in two-node mode --gpu places this host's buffer (the client's is the source, the server's the target)"
        );
    }
    if w.gpu == Some(GpuArg::Auto) && format == OutputFormat::Prometheus {
        bail!("--format prometheus prints one run: use --gpu N, not --gpu auto");
    }
    if w.gpu == Some(GpuArg::Auto) && *role != Role::Loopback {
        bail!("--gpu auto runs loopbacks; two-node mode takes one GPU (--gpu N)");
    }
    Ok(Some(GdrRequest {
        gpu: match w.gpu {
            None => GpuSelect::Host,
            Some(GpuArg::Index(n)) => GpuSelect::One(n),
            Some(GpuArg::Auto) => GpuSelect::Auto,
        },
        mode: w.gdr.unwrap_or(GdrMode::Auto),
        gpu_side: w.gpu_side.unwrap_or(GpuSide::Both),
        repeat: w.repeat,
        device_given: w.device.is_some(),
    }))
}

fn gpu_write_bw_config(w: crate::cli::GpuWriteBwArgs, env: &Env) -> Result<GpuWriteBwConfig> {
    use crate::cli::GpuArg;
    use crate::rdma::level3::GpuSelect;
    use crate::rdma::level4::{self, GpuWriteRequest};
    let request = GpuWriteRequest {
        gpu: match w.gpu {
            None | Some(GpuArg::Auto) => GpuSelect::Auto,
            Some(GpuArg::Index(n)) => GpuSelect::One(n),
        },
        device: w.device.filter(|d| !d.is_empty()),
        port: w.port,
        sizes: w.sizes.unwrap_or_else(|| level4::DEFAULT_SIZES.to_vec()),
        iters: w.iters,
        writes_per_iter: w.writes_per_iter,
        handler: w.nic_handler,
        queues: w.queues,
        validate: w.validate,
    };
    level4::validate(&request).map_err(|e| anyhow::anyhow!("probe gpu-write-bw: {e}"))?;
    Ok(GpuWriteBwConfig {
        request,
        json: w.json,
        fail_on_skip: w.gate.fail_on_skip,
        cuda_homes: env.cuda_homes.clone(),
    })
}

fn write_bw_config(w: WriteBwArgs, env: &Env) -> Result<WriteBwConfig> {
    let format = probe_format(w.json, w.format)?;
    let sizes = if w.all {
        write_bw::all_sizes()
    } else {
        w.sizes
            .clone()
            .unwrap_or_else(|| write_bw::DEFAULT_SIZES.to_vec())
    };
    let plan = write_bw::Plan::new(
        sizes,
        w.iters,
        w.tx_depth,
        w.cq_mod,
        w.post_list,
        w.qps,
        w.validate,
    )
    .and_then(|p| p.with_repetitions(w.reps))
    .context("probe write-bw")?;
    let token = || {
        w.token
            .clone()
            .or_else(|| env.token.clone())
            .filter(|t| !t.is_empty())
            .context("two-node mode needs a shared --token (or GPUDOCTOR_TOKEN) on both sides")
    };
    let role = if w.serve {
        Role::Serve {
            listen: w.listen.clone(),
            token: token()?,
        }
    } else if let Some(peer) = &w.peer {
        Role::Client {
            peer: peer.clone(),
            token: token()?,
        }
    } else {
        Role::Loopback
    };
    let gdr = level3_request(&w, &role, format)?;
    Ok(WriteBwConfig {
        gdr,
        request: WriteBwRequest {
            // With --gpu and no -d, level 3 picks each GPU's port.
            device: w.device.unwrap_or_default(),
            port: w.port,
            gid_index: w.gid_index,
            plan,
            role,
            timeout: Duration::from_secs(w.timeout.max(1)),
            progress: env.stderr_is_terminal && format == OutputFormat::Table,
        },
        json: format == OutputFormat::Json,
        format,
        fail_on_skip: w.gate.fail_on_skip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn resolve(argv: &[&str], env: &Env) -> Result<Config> {
        let mut full = vec!["gpudoctor"];
        full.extend_from_slice(argv);
        Config::resolve(Args::try_parse_from(full).expect("parses"), env)
    }

    fn err(argv: &[&str]) -> String {
        format!("{:#}", resolve(argv, &Env::default()).unwrap_err())
    }

    #[test]
    fn the_environment_is_read_only_through_env() {
        let env = Env {
            stdout_width: Some(99),
            columns: None,
            no_color: false,
            stderr_is_terminal: true,
            cuda_homes: vec![PathBuf::from("/opt/cuda")],
            token: Some("s3cret".into()),
        };
        let c = resolve(&["check", "--level", "1"], &env).unwrap();
        assert_eq!(c.width, Some(99));
        let Action::Check(o) = c.action else {
            panic!("check")
        };
        assert_eq!(o.probe.cuda_homes, vec![PathBuf::from("/opt/cuda")]);
        assert!(o.probe.progress);
        assert!(o.color, "a terminal gets colour");
        let c = resolve(&["check", "--color", "never"], &env).unwrap();
        let Action::Check(o) = c.action else {
            panic!("check")
        };
        assert!(!o.color);
        let no_color = Env {
            no_color: true,
            columns: Some(80),
            ..env.clone()
        };
        let c = resolve(&["check"], &no_color).unwrap();
        assert_eq!(c.width, Some(80), "COLUMNS wins over the terminal's width");
        let Action::Check(o) = c.action else {
            panic!("check")
        };
        assert!(!o.color, "NO_COLOR");
        // Progress lines are for a person: never with machine output, even on a terminal.
        let c = resolve(&["check", "--level", "1", "--json"], &env).unwrap();
        let Action::Check(o) = c.action else {
            panic!("check")
        };
        assert!(!o.probe.progress);
        let c = resolve(&["probe", "h2d", "--json"], &env).unwrap();
        let Action::Probe { options, .. } = c.action else {
            panic!("probe")
        };
        assert!(!options.progress);
        let c = resolve(&["check", "--color", "always"], &Env::default()).unwrap();
        let Action::Check(o) = c.action else {
            panic!("check")
        };
        assert!(o.color, "--color always, even in a pipe");
        let c = resolve(&["probe", "write-bw", "-d", "mlx5_0", "--peer", "h"], &env).unwrap();
        let Action::WriteBw(w) = c.action else {
            panic!("write-bw")
        };
        assert_eq!(
            w.request.role,
            Role::Client {
                peer: "h".into(),
                token: "s3cret".into()
            }
        );
    }

    #[test]
    fn usage_errors_are_found_before_anything_runs() {
        assert!(err(&["check", "--deny", "pcie.acs-redirekt"]).contains("unknown check id"));
        assert!(err(&["probe", "h2d", "--size", "1000"]).contains("at least 1 MiB"));
        assert!(err(&["--root", "/x", "probe", "h2d"]).contains("probes measure the live"));
        assert!(
            err(&["--root", "/x", "list"])
                .contains("apply to topo, check, bundle, baseline and export")
        );
        assert!(err(&["--root", "/x", "topo", "--bundle", "b"]).contains("given twice"));
        assert!(
            err(&["check", "--deny", "gpu.bar1", "--skip", "gpu.bar1"]).contains("at most one")
        );
        assert!(
            err(&["bundle", "-o", "x", "--redact-key-file", "/nonexistent"])
                .contains("cannot read the key")
        );
        assert!(err(&["probe", "write-bw", "-d", "x", "--peer", "h"]).contains("--token"));
        assert!(err(&["probe", "write-bw", "-d", "x", "--sizes", "0"]).contains("write-bw"));
    }

    #[test]
    fn level3_options() {
        use crate::rdma::gdr::{GdrMode, GpuSide};
        use crate::rdma::level3::{GdrRequest, GpuSelect};
        let env = Env::default();
        let gdr = |argv: &[&str]| match resolve(argv, &env).unwrap().action {
            Action::WriteBw(w) => w.gdr,
            _ => panic!("write-bw"),
        };
        assert_eq!(gdr(&["probe", "write-bw", "-d", "mlx5_0"]), None);
        assert_eq!(
            gdr(&["probe", "write-bw", "--gpu", "3"]),
            Some(GdrRequest {
                gpu: GpuSelect::One(3),
                mode: GdrMode::Auto,
                gpu_side: GpuSide::Both,
                repeat: 1,
                device_given: false,
            })
        );
        let g = gdr(&[
            "probe",
            "write-bw",
            "--gpu",
            "auto",
            "-d",
            "mlx5_1",
            "--gdr",
            "peermem",
            "--gpu-side",
            "target",
            "--repeat",
            "5",
        ])
        .unwrap();
        assert_eq!(
            (g.gpu, g.mode, g.gpu_side, g.repeat, g.device_given),
            (GpuSelect::Auto, GdrMode::Peermem, GpuSide::Target, 5, true)
        );
        // --gdr without --gpu: host memory through the level-3 path.
        assert_eq!(
            gdr(&["probe", "write-bw", "-d", "rxe0", "--gdr", "dmabuf"]).map(|g| g.gpu),
            Some(GpuSelect::Host)
        );
        assert!(err(&["probe", "write-bw", "-d", "x", "--repeat", "3"]).contains("--repeat"));
        assert!(
            err(&[
                "probe",
                "write-bw",
                "--gpu",
                "0",
                "--gpu-side",
                "source",
                "--peer",
                "h",
                "--token",
                "t"
            ])
            .contains("--gpu-side is for loopback")
        );
        assert!(
            err(&[
                "probe",
                "write-bw",
                "--gpu",
                "auto",
                "--format",
                "prometheus"
            ])
            .contains("use --gpu N")
        );
        assert!(
            err(&[
                "probe", "write-bw", "--gpu", "auto", "--serve", "--token", "t"
            ])
            .contains("two-node mode takes one GPU")
        );
        // clap refuses these before resolution.
        for argv in [
            &["gpudoctor", "probe", "write-bw"][..],
            &["gpudoctor", "probe", "write-bw", "--gpu", "x"],
            &[
                "gpudoctor",
                "probe",
                "write-bw",
                "-d",
                "x",
                "--gpu-side",
                "both",
            ],
            &["gpudoctor", "check", "--level", "5"],
        ] {
            assert!(Args::try_parse_from(argv).is_err(), "{argv:?}");
        }
    }

    #[test]
    fn gpu_write_bw_options() {
        use crate::rdma::level3::GpuSelect;
        use crate::rdma::level4::NicHandler;
        let env = Env::default();
        let c = |argv: &[&str]| match resolve(argv, &env).unwrap().action {
            Action::GpuWriteBw(w) => w,
            _ => panic!("gpu-write-bw"),
        };
        let d = c(&["probe", "gpu-write-bw"]);
        assert_eq!(d.request.gpu, GpuSelect::Auto);
        assert_eq!(d.request.device, None);
        assert_eq!(d.request.sizes, vec![64, 256, 1024, 4096]);
        assert_eq!((d.request.iters, d.request.writes_per_iter), (2048, 512));
        assert_eq!(d.request.handler, NicHandler::Auto);
        let g = c(&[
            "probe",
            "gpu-write-bw",
            "--gpu",
            "2",
            "-d",
            "mlx5_3",
            "--port",
            "2",
            "--nic-handler",
            "cpu-proxy",
            "--sizes",
            "64,128",
            "--validate",
            "--fail-on-skip",
        ]);
        assert_eq!(g.request.gpu, GpuSelect::One(2));
        assert_eq!(g.request.device.as_deref(), Some("mlx5_3"));
        assert_eq!(g.request.port, 2);
        assert_eq!(g.request.handler, NicHandler::CpuProxy);
        assert!(g.request.validate && g.fail_on_skip);
        let err = |argv: &[&str]| format!("{:#}", resolve(argv, &env).unwrap_err());
        assert!(err(&["probe", "gpu-write-bw", "--writes-per-iter", "3"]).contains("power of two"));
        assert!(err(&["--root", "r", "probe", "gpu-write-bw"]).contains("probes measure the live"));
    }

    #[test]
    fn sources() {
        let env = Env::default();
        assert_eq!(resolve(&["topo"], &env).unwrap().source, SourceSpec::Live);
        assert_eq!(
            resolve(&["--bundle", "b.tgz", "topo"], &env)
                .unwrap()
                .source,
            SourceSpec::Bundle("b.tgz".into())
        );
        assert_eq!(
            resolve(&["topo", "--root", "/t"], &env).unwrap().source,
            SourceSpec::Root("/t".into())
        );
        assert_eq!(
            resolve(&["--root", "/t", "bundle", "-o", "x"], &env)
                .unwrap()
                .source,
            SourceSpec::Root("/t".into())
        );
    }
}
