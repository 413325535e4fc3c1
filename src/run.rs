//! The edge: turns a `Config` into output text and an exit code. The only place (with
//! `main`) that uses anyhow.

use crate::cli::{Action, CheckOptions, Config, SourceSpec, TopoOutput};
use crate::inventory::{Inventory, Scope};
use crate::libs::LibFacts;
use crate::nvml::NvmlSnapshot;
use crate::render::{self, Style};
use crate::report::{CheckReport, SourceInfo, TopoReport};
use crate::sysroot::{ReadError, SysRoot};
use anyhow::{Context, Result};

/// Exit codes (ripgrep's convention).
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED_CHECK: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// What a command produced.
pub struct Outcome {
    pub stdout: String,
    pub code: i32,
}

/// An opened source: the reader and the snapshots that go with it.
pub struct Opened {
    pub sysroot: SysRoot,
    pub nvml: NvmlSnapshot,
    pub libs: LibFacts,
    pub info: SourceInfo,
}

/// Open the source: the reader and the NVML/library snapshots that go with it.
pub fn open_source(spec: &SourceSpec) -> Result<Opened> {
    match spec {
        SourceSpec::Live => Ok(Opened {
            sysroot: SysRoot::live(),
            nvml: NvmlSnapshot::collect_live(),
            libs: LibFacts::probe_live(),
            info: SourceInfo::Live,
        }),
        SourceSpec::Root(dir) => {
            let sr = SysRoot::at(dir).with_context(|| format!("--root {}", dir.display()))?;
            let nvml_path = sr.root_dir().join("nvml.json");
            let nvml = match std::fs::read(&nvml_path) {
                Ok(bytes) => NvmlSnapshot::from_json(&bytes)
                    .with_context(|| format!("--root {}", dir.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    NvmlSnapshot::unavailable("not recorded (no nvml.json in the tree)", "recorded")
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("reading {}", nvml_path.display()));
                }
            };
            let libs_path = sr.root_dir().join("libs.json");
            let libs = match std::fs::read(&libs_path) {
                Ok(bytes) => LibFacts::from_json(&bytes)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("--root {}", dir.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    LibFacts::unavailable("not recorded (no libs.json in the tree)")
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("reading {}", libs_path.display()));
                }
            };
            let path = dir.display().to_string();
            Ok(Opened {
                sysroot: sr,
                nvml,
                libs,
                info: SourceInfo::Root { path },
            })
        }
    }
}

fn inventory(o: &Opened, scope: Scope) -> Result<Inventory> {
    Inventory::collect_scoped(&o.sysroot, o.nvml.clone(), scope).map_err(|e| match e {
        crate::inventory::InventoryError::NoPciBus(ReadError::NotFound(p)) => {
            anyhow::anyhow!("{p} does not exist: not a sysfs tree (no PCI bus)")
        }
        other => anyhow::anyhow!(other),
    })
}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    let o = open_source(spec)?;
    let inv = inventory(&o, Scope::Topology)?;
    let topo = crate::topo::build(&inv);
    Ok(TopoReport::new(o.info, &inv, topo))
}

pub fn check_report(spec: &SourceSpec, opts: &CheckOptions) -> Result<CheckReport> {
    let unknown = opts.overrides.unknown_ids();
    if !unknown.is_empty() {
        anyhow::bail!(
            "unknown check id(s) {}: `gpudoctor list` shows them all",
            unknown.join(", ")
        );
    }
    let o = open_source(spec)?;
    let inv = inventory(&o, Scope::Checks)?;
    let topo = crate::topo::build(&inv);
    let ctx = crate::checks::Ctx {
        inv: &inv,
        topo: &topo,
        libs: &o.libs,
    };
    let mut findings = crate::checks::run_level0(&ctx);
    if opts.level >= 1 {
        let reports = level1_reports(spec, &o, &topo, opts)?;
        crate::checks::level1::settle_link_speed(&reports, &mut findings, &topo);
        for r in &reports {
            crate::checks::level1::findings(r, &mut findings);
        }
    }
    opts.overrides.apply(&mut findings);
    Ok(CheckReport::new(o.info, opts.level, &inv, findings))
}

/// Level-1 probe reports: measured on a live machine, or read from a recorded tree's
/// `probes/<name>.json` and re-evaluated (so thresholds and verdicts replay offline).
fn level1_reports(
    spec: &SourceSpec,
    o: &Opened,
    topo: &crate::topo::Topology,
    opts: &CheckOptions,
) -> Result<Vec<crate::probes::ProbeReport>> {
    use crate::probes::{ProbeKind, ProbeReport};
    let kinds = [
        ProbeKind::H2d,
        ProbeKind::D2h,
        ProbeKind::P2p,
        ProbeKind::DmabufExport,
    ];
    match spec {
        SourceSpec::Live => {
            let runs = crate::probes::live::run_level1(&opts.probe, topo);
            if let Some(r) = runs.iter().find(|r| r.hung) {
                // CUDA work is stuck: report what we have and leave without joining it.
                let msg = format!(
                    "gpudoctor: level-1 probe {} hung: {}\n",
                    crate::checks::level1::id_of(r.report.probe),
                    r.report.error.clone().unwrap_or_default()
                );
                crate::probes::live::exit_now(&msg, EXIT_FAILED_CHECK);
            }
            if runs.iter().any(|r| r.interrupted) {
                anyhow::bail!("interrupted (Ctrl-C); device and pinned memory freed");
            }
            Ok(runs.into_iter().map(|r| r.report).collect())
        }
        SourceSpec::Root(_) => {
            let mut out = Vec::new();
            for k in kinds {
                let name = crate::checks::level1::id_of(k).trim_start_matches("probe.");
                let path = o
                    .sysroot
                    .root_dir()
                    .join("probes")
                    .join(format!("{name}.json"));
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        let mut r: ProbeReport = serde_json::from_slice(&bytes)
                            .with_context(|| format!("{}: not a probe report", path.display()))?;
                        r.evaluate();
                        out.push(r);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        let mut r = ProbeReport::new(k, opts.probe.policy.clone());
                        r.skipped =
                            Some(format!("not recorded (no probes/{name}.json in the tree)"));
                        r.status = crate::probes::Status::Skip;
                        out.push(r);
                    }
                    Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
                }
            }
            Ok(out)
        }
    }
}

/// Exit code for a check report: 1 when a check failed (or warned, with --strict).
pub fn check_exit_code(r: &CheckReport, strict: bool) -> i32 {
    use crate::checks::Status;
    match r.status {
        Status::Fail => EXIT_FAILED_CHECK,
        Status::Warn if strict => EXIT_FAILED_CHECK,
        _ => EXIT_OK,
    }
}

pub fn run(cfg: &Config) -> Result<Outcome> {
    let style = Style {
        width: cfg.width,
        all_rows: matches!(&cfg.action, Action::Check(o) if o.all_rows),
    };
    match &cfg.action {
        Action::Topo(out) => {
            let r = topo_report(&cfg.source)?;
            let stdout = match out {
                TopoOutput::Tree => render::topo_tree(&r, style),
                TopoOutput::Matrix => render::topo_matrix(&r),
                TopoOutput::Json => render::json(&r),
            };
            Ok(Outcome {
                stdout,
                code: EXIT_OK,
            })
        }
        Action::Check(opts) => {
            let r = check_report(&cfg.source, opts)?;
            let stdout = if opts.json {
                render::json(&r)
            } else {
                render::check_table(&r, style)
            };
            Ok(Outcome {
                code: check_exit_code(&r, opts.strict),
                stdout,
            })
        }
        Action::List { json } => Ok(Outcome {
            stdout: if *json {
                render::json(&crate::checks::CATALOG)
            } else {
                render::catalog_table(style)
            },
            code: EXIT_OK,
        }),
        Action::Explain(id) => match crate::checks::info(id) {
            Some(c) => Ok(Outcome {
                stdout: render::explain(c),
                code: EXIT_OK,
            }),
            None => anyhow::bail!("no check '{id}': `gpudoctor list` shows them all"),
        },
        Action::Snapshot(what) => {
            let o = open_source(&cfg.source)?;
            Ok(Outcome {
                stdout: if what == "nvml" {
                    render::json(&o.nvml)
                } else {
                    render::json(&o.libs)
                },
                code: EXIT_OK,
            })
        }
        Action::Probe { options, json } => probe(&cfg.source, options, *json, style),
        Action::Man(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let mut names = Vec::new();
            for (name, bytes) in crate::cli::man_pages().context("rendering man pages")? {
                let p = dir.join(&name);
                std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
                names.push(p.display().to_string());
            }
            Ok(Outcome {
                stdout: format!("wrote {}\n", names.join(", ")),
                code: EXIT_OK,
            })
        }
    }
}

/// `gpudoctor probe NAME`: exit 0 on pass or skip (no CUDA is not a failure of the machine),
/// 1 when a measurement failed or a copy hung, 2 when gpudoctor could not finish
/// (bad arguments, Ctrl-C).
fn probe(
    source: &SourceSpec,
    options: &crate::probes::live::ProbeOptions,
    json: bool,
    style: Style,
) -> Result<Outcome> {
    use crate::probes::{Status, live};
    if let SourceSpec::Root(dir) = source {
        anyhow::bail!(
            "probes measure the live machine; --root {} is for replaying recorded facts",
            dir.display()
        );
    }
    if options.size_bytes < (1 << 20) || !options.size_bytes.is_multiple_of(16) {
        anyhow::bail!(
            "--size {}: must be a multiple of 16 bytes and at least 1 MiB (1048576)",
            options.size_bytes
        );
    }
    let topo = topo_report(source)?.topology;
    if let Some(n) = options.gpu {
        let want = format!("GPU{n}");
        if !topo.gpus.is_empty() && !topo.gpus.iter().any(|g| g.label == want) {
            let have: Vec<&str> = topo.gpus.iter().map(|g| g.label.as_str()).collect();
            anyhow::bail!("--gpu {n}: no {want} here (GPUs: {})", have.join(", "));
        }
    }
    let run = live::run(options, &topo);
    let stdout = if json {
        render::json(&run.report)
    } else {
        crate::probes::render::table(&run.report, style)
    };
    let code = if run.interrupted {
        EXIT_ERROR
    } else if run.report.status == Status::Fail {
        EXIT_FAILED_CHECK
    } else {
        EXIT_OK
    };
    if run.hung {
        // CUDA work is stuck on the probe thread: leave without joining it.
        live::exit_now(&stdout, code);
    }
    Ok(Outcome { stdout, code })
}
