//! The edge: turns a `Config` into output text and an exit code. The only place (with
//! `main`) that uses anyhow.

use crate::bundle;
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
            let label = format!("--root {}", dir.display());
            let (sr, nvml) = open_tree(dir, &label)?;
            let path = dir.display().to_string();
            Ok((sr, nvml, SourceInfo::Root { path }))
        }
        SourceSpec::Bundle(file) => {
            let label = format!("--bundle {}", file.display());
            let x = bundle::read::extract(file).with_context(|| label.clone())?;
            let (sr, nvml) = open_tree(x.dir.path(), &label)?;
            let path = file.display().to_string();
            Ok((sr.holding(x.dir), nvml, SourceInfo::Bundle { path }))
        }
    }
}

/// A recorded tree (fixture, unpacked bundle): its sys/ and proc/, its nvml.json, and the
/// errors its manifest.json says the recorded machine gave (replayed as the same errors).
fn open_tree(dir: &std::path::Path, label: &str) -> Result<(SysRoot, NvmlSnapshot)> {
    let sr = SysRoot::at(dir).with_context(|| label.to_string())?;
    let manifest_path = sr.root_dir().join("manifest.json");
    let sr = match std::fs::read(&manifest_path) {
        Ok(bytes) => {
            let m = bundle::Manifest::from_json(&bytes).with_context(|| label.to_string())?;
            sr.with_recorded_errors(m.recorded_errors())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => sr,
        Err(e) => {
            return Err(e).with_context(|| format!("reading {}", manifest_path.display()));
        }
    };
    let nvml_path = sr.root_dir().join("nvml.json");
    let nvml = match std::fs::read(&nvml_path) {
        Ok(bytes) => NvmlSnapshot::from_json(&bytes).with_context(|| label.to_string())?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            NvmlSnapshot::unavailable("not recorded (no nvml.json in the tree)", "recorded")
        }
        Err(e) => {
            return Err(e).with_context(|| format!("reading {}", nvml_path.display()));
        }
    };
    Ok((sr, nvml))
}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    let (sr, nvml, info) = open_source(spec)?;
    topo_report_from(&sr, nvml, info)
}

fn topo_report_from(sr: &SysRoot, nvml: NvmlSnapshot, info: SourceInfo) -> Result<TopoReport> {
    let inv = Inventory::collect(sr, nvml).map_err(|e| match e {
        crate::inventory::InventoryError::NoPciBus(ReadError::NotFound(p)) => {
            anyhow::anyhow!("{p} does not exist: not a sysfs tree (no PCI bus)")
        }
        other => anyhow::anyhow!(other),
    })?;
    let topo = crate::topo::build(&inv);
    Ok(TopoReport::new(info, &inv, topo))
}

/// Every report a bundle stores (report.json), by command, computed from one source. A new
/// command's report joins here with one line (e.g. `check` after the merge); the bundle's
/// self-replay then compares it too.
fn bundle_reports(
    sr: &SysRoot,
    nvml: &NvmlSnapshot,
    info: &SourceInfo,
) -> Result<std::collections::BTreeMap<String, serde_json::Value>> {
    let mut reports = std::collections::BTreeMap::new();
    let topo = topo_report_from(sr, nvml.clone(), info.clone())?;
    reports.insert(
        "topo".to_string(),
        serde_json::to_value(&topo).context("serializing the topo report")?,
    );
    Ok(reports)
}

/// `gpudoctor bundle`: discovery, capture, write, then replay the bundle just written and warn
/// where it reads differently from what was seen live.
fn make_bundle(
    source: &SourceSpec,
    output: &std::path::Path,
    redact: bool,
    progress: bool,
) -> Result<Outcome> {
    let t0 = std::time::Instant::now();
    let (sr, nvml, info) = open_source(source)?;
    let reports = bundle_reports(&sr, &nvml, &info)?;
    // What discovery read, before the capture reads more through the same reader.
    let touched = sr.touched();
    let listed = sr.listed();
    let opts = bundle::write::Options {
        redact,
        progress,
        source: if sr.is_live() {
            "live"
        } else {
            "recorded tree"
        }
        .to_string(),
        notes: Vec::new(),
    };
    let discovery = bundle::write::Discovery {
        touched: &touched,
        listed: &listed,
    };
    let extra = std::collections::BTreeMap::new();
    let w = bundle::write::write_bundle(&sr, &nvml, extra, reports, discovery, output, &opts)
        .with_context(|| format!("writing {}", output.display()))?;
    let elapsed = t0.elapsed();
    let mut warnings = Vec::new();
    if !w.manifest.uncovered.is_empty() {
        let msg = format!(
            "discovery read {} path(s) the capture list does not cover (add a pattern to CAPTURE in src/bundle/capture.rs): {}",
            w.manifest.uncovered.len(),
            w.manifest.uncovered.join(", ")
        );
        if cfg!(debug_assertions) {
            let _ = std::fs::remove_file(output);
            anyhow::bail!("{msg}");
        }
        warnings.push(msg);
    }
    // Replay what was just written; only where the data came from may differ.
    let replayed = open_source(&SourceSpec::Bundle(output.to_path_buf()))
        .and_then(|(sr, nvml, info)| bundle_reports(&sr, &nvml, &info));
    match replayed {
        Ok(replayed) => {
            for (command, stored) in &w.reports {
                let mut stored = stored.clone();
                let mut again = replayed.get(command).cloned().unwrap_or_default();
                if let Some(diff) = bundle::first_difference(&mut stored, &mut again) {
                    warnings.push(format!(
                        "the bundle's {command} report replays differently from the live run at {diff}: please report this"
                    ));
                }
            }
        }
        Err(e) => warnings.push(format!("the bundle just written does not replay: {e:#}")),
    }
    for w in &warnings {
        eprintln!("gpudoctor: warning: {}", w.replace('\n', " "));
    }
    let m = &w.manifest;
    let mut stdout = format!(
        "wrote {}: {} KiB, {} files, {} links, {} directories ({} KiB uncompressed) in {} ms\n",
        output.display(),
        w.archive_bytes.div_ceil(1024),
        m.contents.files,
        m.contents.links,
        m.contents.dirs,
        m.contents.file_bytes.div_ceil(1024),
        elapsed.as_millis()
    );
    if m.redaction.enabled {
        let classes: Vec<String> = m
            .redaction
            .distinct_values
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        stdout.push_str(&format!(
            "redacted: {} (in {} files; --no-redact keeps them)\n",
            if classes.is_empty() {
                "nothing found".to_string()
            } else {
                classes.join(", ")
            },
            m.redaction.files.len()
        ));
    } else {
        stdout.push_str("not redacted (--no-redact): serials, UUIDs, GUIDs, MACs and the hostname are in the bundle\n");
    }
    if !m.unreadable.is_empty() {
        stdout.push_str(&format!(
            "{} path(s) could not be read (listed in manifest.json, replayed as the same errors)\n",
            m.unreadable.len()
        ));
    }
    Ok(Outcome {
        stdout,
        code: EXIT_OK,
    })
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
        Action::Bundle {
            output,
            redact,
            progress,
        } => make_bundle(&cfg.source, output, *redact, *progress),
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
