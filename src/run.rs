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
    opts.overrides.apply(&mut findings);
    Ok(CheckReport::new(o.info, opts.level, &inv, findings))
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
