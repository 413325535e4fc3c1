//! The edge: turns a `Config` into output text and an exit code. The only place (with
//! `main`) that uses anyhow.

use crate::cli::{Action, Config, SourceSpec, TopoOutput};
use crate::inventory::Inventory;
use crate::nvml::NvmlSnapshot;
use crate::render::{self, Style};
use crate::report::{SourceInfo, TopoReport};
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

/// Open the source: the reader and the NVML snapshot that goes with it.
pub fn open_source(spec: &SourceSpec) -> Result<(SysRoot, NvmlSnapshot, SourceInfo)> {
    match spec {
        SourceSpec::Live => Ok((
            SysRoot::live(),
            NvmlSnapshot::collect_live(),
            SourceInfo::Live,
        )),
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
            let path = dir.display().to_string();
            Ok((sr, nvml, SourceInfo::Root { path }))
        }
    }
}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    let (sr, nvml, info) = open_source(spec)?;
    let inv = Inventory::collect(&sr, nvml).map_err(|e| match e {
        crate::inventory::InventoryError::NoPciBus(ReadError::NotFound(p)) => {
            anyhow::anyhow!("{p} does not exist: not a sysfs tree (no PCI bus)")
        }
        other => anyhow::anyhow!(other),
    })?;
    let topo = crate::topo::build(&inv);
    Ok(TopoReport::new(info, &inv, topo))
}

pub fn run(cfg: &Config) -> Result<Outcome> {
    let style = Style { width: cfg.width };
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
