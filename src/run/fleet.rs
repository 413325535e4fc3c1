//! `fleet` and `diff`: read reports, probe reports, baselines and bundles into `NodeData`, then
//! summarize (`crate::fleet`).

use super::{EXIT_FAILED_CHECK, EXIT_OK, Outcome};
use crate::config::CheckOptions;
use crate::config::json_or_table;
use crate::export::{ExportOptions, Format, export};
use crate::fleet::{self, CheckReportIn, FindingIn, NodeData};
use crate::probes::RecordedProbe;
use crate::probes::{ProbeKind, ProbeReport};
use crate::source::{Source, SourceSpec};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The node a file belongs to: its name up to the first dot (`node17.check.json`,
/// `node17.h2d.json` and `node17.tar.gz` are all node17).
fn node_name(p: &Path) -> String {
    let f = p
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    f.split('.').next().unwrap_or(&f).to_string()
}

fn is_bundle(p: &Path) -> bool {
    let s = p.to_string_lossy();
    s.ends_with(".tar.gz") || s.ends_with(".tgz")
}

/// A record in another format (`--from`'s formats), by its name: XML (hwloc, NCCL), logs
/// (nvidia-bug-report.log, .log.gz) and lspci text (.lspci, .txt).
fn is_record(p: &Path) -> bool {
    let s = p.to_string_lossy();
    [".xml", ".xml.gz", ".log", ".log.gz", ".lspci", ".txt"]
        .iter()
        .any(|e| s.ends_with(e))
}

/// The source a bundle or a record file opens as; None for gpudoctor's JSON documents.
fn file_source(p: &Path) -> Option<SourceSpec> {
    if is_bundle(p) {
        Some(SourceSpec::Bundle(p.to_path_buf()))
    } else if is_record(p) {
        Some(SourceSpec::From {
            path: p.to_path_buf(),
            format: None,
        })
    } else {
        None
    }
}

/// Deepest directory `expand` descends into below an input (a fleet's reports are a directory
/// or two deep; recorded trees under an input hold sysfs's own deep link cycles).
const MAX_WALK_DEPTH: usize = 16;
/// Largest report or baseline read (real ones are tens of KiB).
const MAX_REPORT_BYTES: u64 = 64 << 20;

/// Files under the inputs: files as given, directories walked (gpudoctor JSON and bundles).
/// Each directory is entered once, by its device and inode, however many links lead to it
/// (two `up -> ..` links made the walk exponential), and at most MAX_WALK_DEPTH deep.
fn expand(inputs: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut seen: std::collections::BTreeSet<(u64, u64)> = std::collections::BTreeSet::new();
    for i in inputs {
        let meta = std::fs::metadata(i).with_context(|| format!("{}", i.display()))?;
        if meta.is_dir() {
            if !seen.insert((meta.dev(), meta.ino())) {
                continue;
            }
            let mut stack = vec![(i.clone(), 0usize)];
            while let Some((d, depth)) = stack.pop() {
                let mut entries: Vec<PathBuf> = std::fs::read_dir(&d)
                    .with_context(|| format!("reading {}", d.display()))?
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .collect();
                entries.sort();
                let mut dirs = Vec::new();
                for p in entries {
                    // Followed (a link to a directory of reports is a directory of reports).
                    let Ok(m) = std::fs::metadata(&p) else {
                        continue;
                    };
                    if m.is_dir() {
                        if depth < MAX_WALK_DEPTH && seen.insert((m.dev(), m.ino())) {
                            dirs.push(p);
                        }
                    } else if m.is_file()
                        && (is_bundle(&p)
                            || is_record(&p)
                            || p.extension().is_some_and(|e| e == "json"))
                    {
                        out.push((p, true));
                    }
                }
                stack.extend(dirs.into_iter().map(|p| (p, depth + 1)));
            }
        } else {
            out.push((i.clone(), false));
        }
    }
    Ok(out)
}

/// Each measurement's median, and gpudoctor's bar for it where the probe had one.
fn bandwidth_of(r: &ProbeReport, n: &mut NodeData) {
    for m in &r.measurements {
        if let Some(s) = &m.evaluation.stats {
            let id = format!(
                "{} {}->{} {}",
                m.probe.as_str(),
                m.src,
                m.dst,
                m.method.as_str()
            );
            if let Some(t) = m.evaluation.threshold_gbps.filter(|t| t.is_finite()) {
                n.floor_gbps.insert(id.clone(), t);
            }
            n.bandwidth_gbps.insert(id, s.median_gbps);
        }
    }
}

/// One file's contribution. `from_dir`: JSON that is not a gpudoctor document is skipped
/// (a directory may hold other files); given by name it is an error.
fn read_one(p: &Path, from_dir: bool) -> Result<Option<NodeData>> {
    let mut n = NodeData {
        name: node_name(p),
        sources: vec![p.display().to_string()],
        ..Default::default()
    };
    if let Some(spec) = file_source(p) {
        let source = Source::open(&spec)?;
        let opts = CheckOptions {
            level: 1,
            ..CheckOptions::level0()
        };
        let r = super::check::check_report_from(&source, &opts)?;
        n.status = Some(r.status.as_str().to_string());
        n.findings = r
            .checks
            .iter()
            .map(|f| FindingIn {
                id: f.id.to_string(),
                subject: f.subject.clone(),
                status: f.status.as_str().to_string(),
                message: f.message.clone(),
            })
            .collect();
        let inv = super::inventory(&source, crate::inventory::Scope::Checks)?;
        let topo = crate::topo::build(&inv);
        let mut probes = Vec::new();
        for kind in [ProbeKind::H2d, ProbeKind::D2h, ProbeKind::P2p] {
            if let RecordedProbe::Report(r) = crate::probes::recorded_probe(&source, kind)? {
                bandwidth_of(&r, &mut n);
                probes.push(*r);
            }
        }
        n.shape = Some(crate::checks::baseline::capture(
            &inv, &topo, &probes, &n.name,
        ));
        return Ok(Some(n));
    }
    let bytes = crate::bundle::read::read_regular(p, MAX_REPORT_BYTES)
        .with_context(|| format!("reading {}", p.display()))?;
    let text = String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", p.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
    let schema = v.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    match schema {
        "gpudoctor.check/1" => {
            let r: CheckReportIn = serde_json::from_value(v)
                .with_context(|| format!("{}: malformed check report", p.display()))?;
            n.status = Some(r.status);
            n.findings = r.checks;
        }
        crate::report::PROBE_RUNS_SCHEMA | crate::probes::PROBE_SCHEMA => {
            // `probe ... --json` prints a `gpudoctor.probe-runs/1` envelope; older files hold
            // the bare `gpudoctor.probe/1` report. Fleet compares the copy probes' runs.
            let runs = crate::report::probe_runs_in(v)
                .with_context(|| format!("{}: malformed probe report", p.display()))?;
            let copies: Vec<serde_json::Value> = runs
                .into_iter()
                .filter(|r| {
                    r.get("schema").and_then(|s| s.as_str()) == Some(crate::probes::PROBE_SCHEMA)
                })
                .collect();
            if copies.is_empty() {
                if from_dir {
                    return Ok(None);
                }
                bail!(
                    "{}: a probe report without copy-probe runs ({} of h2d, d2h, p2p or dmabuf-export): fleet compares those",
                    p.display(),
                    crate::probes::PROBE_SCHEMA
                );
            }
            for run in copies {
                let r: ProbeReport = serde_json::from_value(run)
                    .with_context(|| format!("{}: malformed probe report", p.display()))?;
                bandwidth_of(&r, &mut n);
            }
        }
        crate::checks::baseline::BASELINE_SCHEMA => {
            n.shape = Some(
                crate::checks::baseline::Baseline::parse(&text)
                    .with_context(|| format!("{}", p.display()))?,
            );
        }
        _ if from_dir => return Ok(None),
        other => bail!(
            "{}: not a gpudoctor check report, probe report, baseline or bundle (schema {:?})",
            p.display(),
            other
        ),
    }
    Ok(Some(n))
}

/// Read every input in parallel (reports are independent; parsing dominates), then merge the
/// files of one node.
pub fn load(inputs: &[PathBuf]) -> Result<Vec<NodeData>> {
    let files = expand(inputs)?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(files.len().max(1));
    let chunk = files.len().div_ceil(threads).max(1);
    let parts: Vec<Result<Vec<NodeData>>> = std::thread::scope(|s| {
        let handles: Vec<_> = files
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || -> Result<Vec<NodeData>> {
                    let mut v = Vec::new();
                    for (p, from_dir) in c {
                        if let Some(n) = read_one(p, *from_dir)? {
                            v.push(n);
                        }
                    }
                    Ok(v)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a reader thread panicked (bug)")))
            })
            .collect()
    });
    let mut by_name: BTreeMap<String, NodeData> = BTreeMap::new();
    for part in parts {
        for n in part? {
            match by_name.get_mut(&n.name) {
                None => {
                    by_name.insert(n.name.clone(), n);
                }
                Some(m) => {
                    m.sources.extend(n.sources);
                    if n.status.is_some() {
                        if m.status.is_some() {
                            bail!(
                                "two check reports for node {} ({}): one report per node",
                                m.name,
                                m.sources.join(", ")
                            );
                        }
                        m.status = n.status;
                        m.findings = n.findings;
                    }
                    if n.shape.is_some() {
                        m.shape = n.shape;
                    }
                    m.bandwidth_gbps.extend(n.bandwidth_gbps);
                    m.floor_gbps.extend(n.floor_gbps);
                }
            }
        }
    }
    if by_name.is_empty() {
        bail!("no gpudoctor reports or bundles found in the inputs");
    }
    Ok(by_name.into_values().collect())
}

pub fn fleet(
    inputs: &[PathBuf],
    format: Format,
    min_deviation: f64,
    expect: &[PathBuf],
) -> Result<Outcome> {
    let mut opts = fleet::FleetOptions {
        min_deviation,
        expect: Vec::new(),
    };
    for p in expect {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
        let b = crate::checks::baseline::Baseline::parse(&text)
            .with_context(|| format!("{}", p.display()))?;
        opts.expect.push((node_name(p), b));
    }
    let nodes = load(inputs)?;
    let r = fleet::summarize(&nodes, &opts);
    let code = if r.drain.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED_CHECK
    };
    Ok(Outcome::new(
        export(format, ExportOptions::default(), "a fleet summary", |e| {
            e.fleet(&r)
        })?,
        code,
    ))
}

pub fn diff(a: &Path, b: &Path, json: bool, all: bool) -> Result<Outcome> {
    let one = |p: &Path| -> Result<NodeData> {
        read_one(p, false)?.with_context(|| format!("{}: nothing to compare", p.display()))
    };
    let (na, nb) = (one(a)?, one(b)?);
    // Two bundles: B judged against A's shape, by PCI position.
    let shape = match (&na.shape, file_source(b)) {
        (Some(s), Some(spec)) => {
            let source = Source::open(&spec)?;
            let opts = CheckOptions {
                expect: Some(s.clone()),
                ..CheckOptions::level0()
            };
            let r = super::check::check_report_from(&source, &opts)?;
            Some(
                r.checks
                    .iter()
                    .filter(|f| {
                        f.id.as_str().starts_with("baseline.")
                            && matches!(
                                f.status,
                                crate::findings::Status::Fail | crate::findings::Status::Warn
                            )
                    })
                    .map(|f| FindingIn {
                        id: f.id.to_string(),
                        subject: f.subject.clone(),
                        status: f.status.as_str().to_string(),
                        message: f.message.clone(),
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    let mut d = fleet::diff(&na, &nb, shape, all);
    d.a = a.display().to_string();
    d.b = b.display().to_string();
    let same =
        d.checks.is_empty() && d.bandwidth.is_empty() && d.shape.as_ref().is_none_or(Vec::is_empty);
    Ok(Outcome::new(
        export(
            json_or_table(json),
            ExportOptions::default(),
            "a diff",
            |e| e.diff(&d),
        )?,
        if same { EXIT_OK } else { EXIT_FAILED_CHECK },
    ))
}
