//! `fleet` and `diff`: read reports, probe reports, baselines and bundles into `NodeData`, then
//! summarize (`crate::fleet`).

use super::Outcome;
use crate::config::CheckOptions;
use crate::export::{ExportOptions, Format, export};
use crate::fleet::{self, CheckReportIn, NodeData};
use crate::probes::RecordedProbe;
use crate::probes::{ProbeKind, ProbeReport};
use crate::report::fleet::FindingIn;
use crate::source::{Source, SourceSpec};
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
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

/// The GPU models a check report's evidence names and NVML's GPU count (as `CheckSummaryIn`
/// reads them).
fn check_model_in(v: &serde_json::Value) -> (BTreeSet<String>, Option<usize>) {
    let mut models = BTreeSet::new();
    for f in v["checks"].as_array().into_iter().flatten() {
        for e in f["evidence"].as_array().into_iter().flatten() {
            if let (Some(s), Some(x)) = (e["source"].as_str(), e["value"].as_str()) {
                models.extend(fleet::gpu_model_evidence(s, x));
            }
        }
    }
    let count = v["nvml"]["gpus"].as_u64().map(|c| c as usize);
    (models, count)
}

/// Each measurement's median, and gpudoctor's bar for it where the probe had one; and the
/// model it tells: its GPUs' names and count, its PCIe copies' link basis.
fn bandwidth_of(r: &ProbeReport, n: &mut NodeData) {
    if !r.gpus.is_empty() {
        n.model
            .probe_gpus
            .extend(r.gpus.iter().map(|g| g.name.clone()));
        n.model.probe_gpu_count = n.model.probe_gpu_count.max(Some(r.gpus.len()));
    }
    add_bandwidth(&crate::report::Bandwidth::of_probe(r), n);
}

/// The GPU models a check report lists (`gpu_models`, with their count): they name the model
/// even where no check's evidence does (a GPU-only node has no GPU-NIC pairing to show).
fn models_of(models: &BTreeMap<String, usize>, n: &mut NodeData) {
    if models.is_empty() {
        return;
    }
    n.model.check_gpus = models.keys().cloned().collect();
    n.model.check_gpu_count = Some(models.values().sum());
}

/// Medians as a level-1 check report or a probe report gives them: fleet's measurement ids,
/// gpudoctor's bars, and the PCIe links the copies' bars were based on (the model's link).
fn add_bandwidth(list: &[crate::report::Bandwidth], n: &mut NodeData) {
    for b in list {
        if let Some(link) = &b.link {
            n.model.links.insert(link.clone());
        }
        if let Some(t) = b.threshold_gbps.filter(|t| t.is_finite()) {
            n.floor_gbps.insert(b.id.clone(), t);
        }
        n.bandwidth_gbps.insert(b.id.clone(), b.median_gbps);
    }
}

/// A file given by name that is no gpudoctor document fleet compares: the command line is
/// wrong (exit 2), unlike a report that is broken (one node's problem).
#[derive(Debug)]
struct Foreign(String);

impl std::fmt::Display for Foreign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Foreign {}

/// What a reader keeps of a node's check report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Every finding (`diff` lists them by subject, with their messages).
    Findings,
    /// Per check the worst status only (`fleet`: its judgement reads no more; see
    /// `fleet::WorstPerCheck`).
    WorstPerCheck,
}

/// The `schema` of a gpudoctor document read from its first key, without parsing the rest:
/// every gpudoctor document is written with `schema` first. None where the text does not start
/// that way (another writer's key order, an escaped name): the caller then parses it whole.
fn leading_schema(text: &str) -> Option<&str> {
    const WS: &[char] = &[' ', '\t', '\n', '\r'];
    let rest = text.trim_start_matches(WS).strip_prefix('{')?;
    let rest = rest.trim_start_matches(WS).strip_prefix("\"schema\"")?;
    let rest = rest.trim_start_matches(WS).strip_prefix(':')?;
    let rest = rest.trim_start_matches(WS).strip_prefix('"')?;
    let end = rest.find(['"', '\\'])?;
    (rest.as_bytes()[end] == b'"').then(|| &rest[..end])
}

/// A check report as much as `fleet` reads of it, parsed straight from the text in one pass:
/// the verdict, the node's name and time, per check the worst status; subjects' evidence and
/// remediation (most of a report's bytes) are skipped without being built.
#[derive(serde::Deserialize)]
struct CheckSummaryIn {
    status: String,
    checks: WorstPerCheckIn,
    #[serde(default)]
    hostname: Option<String>,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    nvml: Option<NvmlIn>,
    /// A level-1 report's measured medians.
    #[serde(default)]
    bandwidth: Vec<crate::report::Bandwidth>,
    /// GPU model -> count (reports written before it was kept: none).
    #[serde(default)]
    gpu_models: BTreeMap<String, usize>,
}

/// How many GPUs NVML saw (the report's `nvml.gpus`).
#[derive(serde::Deserialize)]
struct NvmlIn {
    #[serde(default)]
    gpus: Option<usize>,
}

/// One piece of evidence, borrowed from the text where it has no escapes.
#[derive(serde::Deserialize)]
struct EvidenceLite<'a> {
    #[serde(borrow)]
    source: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    value: std::borrow::Cow<'a, str>,
}

/// The GPU model a finding's evidence names (`fleet::gpu_model_evidence`); nothing else of
/// the evidence is kept.
#[derive(Default)]
struct GpuModelIn(Option<String>);

impl<'de> serde::Deserialize<'de> for GpuModelIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Evidence;
        impl<'de> serde::de::Visitor<'de> for Evidence {
            type Value = GpuModelIn;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of evidence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<GpuModelIn, A::Error> {
                let mut found = None;
                while let Some(e) = seq.next_element::<EvidenceLite<'de>>()? {
                    if found.is_none() {
                        found = fleet::gpu_model_evidence(&e.source, &e.value);
                    }
                }
                Ok(GpuModelIn(found))
            }
        }
        d.deserialize_seq(Evidence)
    }
}

/// One finding, borrowed from the text where it has no escapes; the fields `FindingIn`
/// requires are required here too, so that a report fleet reads is one `diff` reads.
#[derive(serde::Deserialize)]
struct FindingLite<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(borrow, rename = "subject")]
    _subject: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    status: std::borrow::Cow<'a, str>,
    #[serde(borrow, default, rename = "message")]
    _message: std::borrow::Cow<'a, str>,
    #[serde(default)]
    evidence: GpuModelIn,
    /// Present where a silence matched the finding.
    #[serde(default)]
    silenced: Option<serde::de::IgnoredAny>,
}

/// Per check the worst status, and the GPU models the evidence names.
struct WorstPerCheckIn(Vec<FindingIn>, BTreeSet<String>);

impl<'de> serde::Deserialize<'de> for WorstPerCheckIn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Findings;
        impl<'de> serde::de::Visitor<'de> for Findings {
            type Value = WorstPerCheckIn;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of findings")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<WorstPerCheckIn, A::Error> {
                let mut worst = fleet::WorstPerCheck::default();
                let mut models = BTreeSet::new();
                while let Some(f) = seq.next_element::<FindingLite<'de>>()? {
                    worst.add_finding(&f.id, &f.status, f.silenced.is_some());
                    models.extend(f.evidence.0);
                }
                Ok(WorstPerCheckIn(worst.finish(), models))
            }
        }
        d.deserialize_seq(Findings)
    }
}

/// `findings` as `keep` asks.
fn kept(findings: Vec<FindingIn>, keep: Keep) -> Vec<FindingIn> {
    match keep {
        Keep::Findings => findings,
        Keep::WorstPerCheck => {
            let mut worst = fleet::WorstPerCheck::default();
            for f in &findings {
                worst.add_finding(&f.id, &f.status, f.silenced);
            }
            worst.finish()
        }
    }
}

/// The common documents parsed typed in one pass, their kind told by `leading_schema`: a check
/// report (180 KB at level 1) and a bare probe report. None where this does not apply or the
/// document does not parse: the caller then reads it the general way, which also words the
/// error.
fn read_fast(text: &str, keep: Keep, n: &mut NodeData) -> Option<()> {
    match leading_schema(text)? {
        "gpudoctor.check/1" => match keep {
            Keep::WorstPerCheck => {
                let r: CheckSummaryIn = serde_json::from_str(text).ok()?;
                n.status = Some(r.status);
                n.findings = r.checks.0;
                n.model.check_gpus = r.checks.1;
                n.model.check_gpu_count = r.nvml.and_then(|m| m.gpus);
                models_of(&r.gpu_models, n);
                add_bandwidth(&r.bandwidth, n);
                n.host = r.hostname;
                n.time = r.time;
            }
            Keep::Findings => {
                let r: CheckReportIn = serde_json::from_str(text).ok()?;
                add_bandwidth(&r.bandwidth, n);
                n.status = Some(r.status);
                n.findings = r.checks;
                n.host = r.hostname;
                n.time = r.time;
            }
        },
        crate::probes::PROBE_SCHEMA | crate::probes::PROBE_SCHEMA_V1 => {
            let r: ProbeReport = serde_json::from_str(text).ok()?;
            bandwidth_of(&r, n);
        }
        _ => return None,
    }
    Some(())
}

/// One input file as the nodes it describes: one for a node's report or bundle, every node of
/// a cluster-wide `probe nccl --ranks` report, none for a file in a directory that is no
/// gpudoctor document (`from_dir`; given by name, such a file is an error).
fn read_docs(p: &Path, from_dir: bool, keep: Keep) -> Result<Vec<NodeData>> {
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
        n.host = r.hostname.clone();
        n.time = r.time.clone();
        n.findings = kept(
            r.checks
                .iter()
                .map(|f| FindingIn {
                    id: f.id.to_string(),
                    subject: f.subject.clone(),
                    status: f.status.as_str().to_string(),
                    message: f.message.clone(),
                    silenced: f.silenced.is_some(),
                })
                .collect(),
            keep,
        );
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
        return Ok(vec![n]);
    }
    let bytes = crate::bundle::read::read_regular(p, MAX_REPORT_BYTES)
        .with_context(|| format!("reading {}", p.display()))?;
    let text = String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8", p.display()))?;
    if read_fast(&text, keep, &mut n).is_some() {
        return Ok(vec![n]);
    }
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", p.display()))?;
    let schema = v.get("schema").and_then(|s| s.as_str()).unwrap_or("");
    match schema {
        "gpudoctor.check/1" => {
            let (models, count) = check_model_in(&v);
            n.model.check_gpus = models;
            n.model.check_gpu_count = count;
            if let Some(m) = v.get("gpu_models") {
                let m: BTreeMap<String, usize> = serde_json::from_value(m.clone())
                    .with_context(|| format!("{}: malformed gpu_models", p.display()))?;
                models_of(&m, &mut n);
            }
            let r: CheckReportIn = serde_json::from_value(v)
                .with_context(|| format!("{}: malformed check report", p.display()))?;
            add_bandwidth(&r.bandwidth, &mut n);
            n.status = Some(r.status);
            n.findings = kept(r.checks, keep);
            n.host = r.hostname;
            n.time = r.time;
        }
        crate::report::PROBE_RUNS_SCHEMA
        | crate::probes::PROBE_SCHEMA
        | crate::probes::PROBE_SCHEMA_V1 => {
            // `probe ... --json` prints a `gpudoctor.probe-runs/1` envelope; older files hold
            // the bare report. Fleet compares the copy probes' runs, `gpudoctor.probe/2` or /1
            // (whose readings are serde's `{"Ok": ..}` / `{"Err": ..}`, read the same).
            let runs = crate::report::probe_runs_in(v)
                .with_context(|| format!("{}: malformed probe report", p.display()))?;
            let copies: Vec<serde_json::Value> = runs
                .into_iter()
                .filter(|r| {
                    r.get("schema")
                        .and_then(|s| s.as_str())
                        .is_some_and(crate::probes::is_probe_schema)
                })
                .collect();
            if copies.is_empty() {
                if from_dir {
                    return Ok(Vec::new());
                }
                return Err(Foreign(format!(
                    "{}: a probe report without copy-probe runs ({} of h2d, d2h, p2p or dmabuf-export): fleet compares those",
                    p.display(),
                    crate::probes::PROBE_SCHEMA
                ))
                .into());
            }
            for run in copies {
                let r: ProbeReport = serde_json::from_value(run)
                    .with_context(|| format!("{}: malformed probe report", p.display()))?;
                bandwidth_of(&r, &mut n);
            }
        }
        crate::report::nccl::NCCL_SCHEMA | crate::report::nccl::NCCL_SCHEMA_V1 => {
            let r: crate::report::nccl::NcclReport = serde_json::from_value(v)
                .with_context(|| format!("{}: malformed NCCL report", p.display()))?;
            return Ok(nccl_nodes(&r, n));
        }
        crate::checks::baseline::BASELINE_SCHEMA => {
            n.shape = Some(
                crate::checks::baseline::Baseline::parse(&text)
                    .with_context(|| format!("{}", p.display()))?,
            );
        }
        _ if from_dir => return Ok(Vec::new()),
        other => {
            return Err(Foreign(format!(
                "{}: not a gpudoctor check report, probe report, baseline or bundle (schema {:?})",
                p.display(),
                other
            ))
            .into());
        }
    }
    Ok(vec![n])
}

/// A `probe nccl --json` report as fleet's nodes: its NCCL bus bandwidth per configuration and
/// collective (median at the judged size) with the bar it was judged against; a report of a run
/// across nodes (`--ranks`) gives every node its own GPUs' timing, so that fleet names the slow
/// node among its peers.
fn nccl_nodes(r: &crate::report::nccl::NcclReport, n: NodeData) -> Vec<NodeData> {
    let mut bars = BTreeMap::new();
    for run in &r.runs {
        for c in &run.collectives {
            if let Some(t) = c.evaluation.threshold_gbps.filter(|t| t.is_finite()) {
                bars.insert(format!("{} {}", run.name, c.collective.as_str()), t);
            }
        }
    }
    let id = |key: &str| format!("nccl {key}");
    let Some(cluster) = &r.cluster else {
        let mut n = n;
        if !r.gpus.is_empty() {
            n.model
                .probe_gpus
                .extend(r.gpus.iter().map(|g| g.name.clone()));
            n.model.probe_gpu_count = Some(r.gpus.len());
        }
        for run in &r.runs {
            for c in &run.collectives {
                let key = format!("{} {}", run.name, c.collective.as_str());
                if let Some(m) = c
                    .judged()
                    .and_then(|j| crate::probes::median(&j.busbw_gbps))
                {
                    n.bandwidth_gbps.insert(id(&key), m);
                    if let Some(t) = bars.get(&key) {
                        n.floor_gbps.insert(id(&key), *t);
                    }
                }
            }
        }
        return vec![n];
    };
    cluster
        .nodes
        .iter()
        .map(|node| {
            let mut d = NodeData {
                name: node.node.clone(),
                sources: n.sources.clone(),
                host: node.hosts.first().cloned(),
                ..Default::default()
            };
            // The report names only its own GPUs; the nodes of one run are compared together.
            d.model.run = n.sources.first().cloned();
            for (key, gbps) in &node.busbw_gbps {
                d.bandwidth_gbps.insert(id(key), *gbps);
                if let Some(t) = bars.get(key) {
                    d.floor_gbps.insert(id(key), *t);
                }
            }
            d
        })
        .collect()
}

/// Read every input in parallel (reports are independent; parsing dominates), then merge the
/// files of one node. A file that cannot be read (truncated while its node wrote it, a
/// damaged bundle) is that node's problem, named in the summary; every other node is still
/// judged. Only a file given by name that is no gpudoctor document stops the run.
pub fn load(inputs: &[PathBuf]) -> Result<Vec<NodeData>> {
    let files = expand(inputs)?;
    // One file per item (a bundle takes a thousand times a report's time), results in the
    // files' order; each keeps only its node's summary, so memory grows with the nodes, not
    // with the bytes read.
    let parts: Vec<Result<Vec<NodeData>>> = crate::workers::map_min(&files, 1, |(p, from_dir)| {
        match read_docs(p, *from_dir, Keep::WorstPerCheck) {
            Ok(nodes) => Ok(nodes),
            Err(e) if e.downcast_ref::<Foreign>().is_some() => Err(e),
            Err(e) => Ok(vec![NodeData {
                name: node_name(p),
                unreadable: vec![(
                    p.display().to_string(),
                    format!("{e:#}").replace(&format!("{}: ", p.display()), ""),
                )],
                ..Default::default()
            }]),
        }
    });
    let mut docs: Vec<NodeData> = Vec::new();
    for part in parts {
        docs.extend(part?);
    }
    if docs.is_empty() {
        bail!("no gpudoctor reports or bundles found in the inputs");
    }
    // One node per file name (`reports/NODE.json`, `NODE.h2d.json`, `NODE.tar.gz`): the
    // hostname a report records is not used, as cloned images and recorded trees share one.
    docs.sort_by(|a, b| a.sources.cmp(&b.sources));
    let mut by_name: BTreeMap<String, Vec<NodeData>> = BTreeMap::new();
    for d in docs {
        by_name.entry(d.name.clone()).or_default().push(d);
    }
    Ok(by_name
        .into_iter()
        .map(|(name, docs)| merge(name, docs))
        .collect())
}

/// Ordering of check statuses, worst last.
fn status_rank(s: Option<&str>) -> u8 {
    match s {
        Some("pass") => 0,
        Some("skip") => 1,
        Some("warn") => 2,
        Some("fail") => 3,
        _ => 1,
    }
}

/// Which of several documents of one kind to keep: the newest where every one says when its
/// facts were read (RFC 3339 UTC, the same width: they compare as text) and no two say the
/// same; otherwise the worst (the slow or failing one never loses silently). Returns the
/// index and how it was chosen.
fn pick(docs: &[&NodeData]) -> (usize, String) {
    let times: Option<Vec<&str>> = docs.iter().map(|d| d.time.as_deref()).collect();
    if let Some(t) = times {
        let distinct: std::collections::BTreeSet<&str> = t.iter().copied().collect();
        let same_form = t.iter().all(|x| x.len() == t[0].len() && x.ends_with('Z'));
        if distinct.len() == t.len() && same_form {
            let newest = (0..t.len()).max_by_key(|i| t[*i]).unwrap_or(0);
            return (newest, format!("the newest, read at {}", t[newest]));
        }
    }
    let worst = (0..docs.len())
        .max_by_key(|i| {
            (
                status_rank(docs[*i].status.as_deref()),
                std::cmp::Reverse(*i),
            )
        })
        .unwrap_or(0);
    (
        worst,
        "which is newer cannot be told from the reports' times: kept the worse".into(),
    )
}

/// The files of one node as one NodeData. Two documents of one kind (check reports, shapes)
/// are duplicates: one is kept (`pick`) and the others are named in `duplicates`; two readings
/// of one probe measurement keep the slower, and say so.
fn merge(name: String, docs: Vec<NodeData>) -> NodeData {
    let source = |d: &NodeData| d.sources.join(", ");
    let checks: Vec<&NodeData> = docs.iter().filter(|d| d.status.is_some()).collect();
    let picked = (!checks.is_empty()).then(|| pick(&checks));
    let mut n = NodeData {
        name: name.clone(),
        ..Default::default()
    };
    let kept_check = if let Some((i, why)) = picked {
        if checks.len() > 1 {
            n.duplicates.push(crate::report::fleet::Duplicate {
                node: name.clone(),
                kind: "check report".into(),
                kept: source(checks[i]),
                dropped: (0..checks.len())
                    .filter(|j| *j != i)
                    .map(|j| source(checks[j]))
                    .collect(),
                why,
            });
        }
        Some(checks[i].sources.clone())
    } else {
        None
    };
    // A document whose check report lost is the older capture: none of it counts.
    let live: Vec<&NodeData> = docs
        .iter()
        .filter(|d| d.status.is_none() || Some(&d.sources) == kept_check.as_ref())
        .collect();
    for d in &docs {
        n.sources.extend(d.sources.iter().cloned());
        n.unreadable.extend(d.unreadable.iter().cloned());
    }
    for d in &live {
        n.model.extend(&d.model);
    }
    if let Some(k) = live.iter().find(|d| d.status.is_some()) {
        n.status = k.status.clone();
        n.findings = k.findings.clone();
        n.host = k.host.clone();
        n.time = k.time.clone();
    }
    let shapes: Vec<&NodeData> = live.iter().copied().filter(|d| d.shape.is_some()).collect();
    if !shapes.is_empty() {
        // The shape of the kept check report's bundle, else the newest (`pick`).
        let (i, why) = match shapes.iter().position(|d| d.status.is_some()) {
            Some(i) => (i, "the one of the kept check report".to_string()),
            None => pick(&shapes),
        };
        if shapes.len() > 1 {
            n.duplicates.push(crate::report::fleet::Duplicate {
                node: name.clone(),
                kind: "shape".into(),
                kept: source(shapes[i]),
                dropped: (0..shapes.len())
                    .filter(|j| *j != i)
                    .map(|j| source(shapes[j]))
                    .collect(),
                why,
            });
        }
        n.shape = shapes[i].shape.clone();
    }
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    let mut clashes: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for d in &live {
        for (id, v) in &d.bandwidth_gbps {
            let src = source(d);
            match n.bandwidth_gbps.get(id) {
                Some(old) => {
                    let e = clashes.entry(id.clone()).or_default();
                    if *v < *old || v.is_nan() {
                        e.push(from[id].clone());
                        n.bandwidth_gbps.insert(id.clone(), *v);
                        from.insert(id.clone(), src.clone());
                        if let Some(f) = d.floor_gbps.get(id) {
                            n.floor_gbps.insert(id.clone(), *f);
                        }
                    } else {
                        e.push(src.clone());
                    }
                }
                None => {
                    n.bandwidth_gbps.insert(id.clone(), *v);
                    from.insert(id.clone(), src);
                    if let Some(f) = d.floor_gbps.get(id) {
                        n.floor_gbps.insert(id.clone(), *f);
                    }
                }
            }
        }
    }
    if !clashes.is_empty() {
        let mut dropped: Vec<String> = clashes.values().flatten().cloned().collect();
        dropped.sort();
        dropped.dedup();
        let mut kept: Vec<String> = clashes.keys().map(|id| from[id].clone()).collect();
        kept.sort();
        kept.dedup();
        n.duplicates.push(crate::report::fleet::Duplicate {
            node: name,
            kind: "probe measurements".into(),
            kept: kept.join(", "),
            dropped,
            why: format!(
                "{} measured in more than one file, no time to tell them apart: kept the slower of each",
                crate::words::count(clashes.len(), "measurement", "measurements")
            ),
        });
    }
    n
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
        // As `check --expect`: a regular file only, capped, never a blocking open.
        let bytes = crate::bundle::read::read_regular(p, MAX_REPORT_BYTES)
            .with_context(|| format!("--expect {}: cannot read", p.display()))?;
        let text = String::from_utf8(bytes)
            .with_context(|| format!("--expect {}: not UTF-8", p.display()))?;
        let b = crate::checks::baseline::Baseline::parse(&text)
            .with_context(|| format!("{}", p.display()))?;
        opts.expect.push((node_name(p), b));
    }
    let nodes = load(inputs)?;
    let r = fleet::summarize(&nodes, &opts);
    // Said on stderr too, whatever the format: a report that lost or could not be read must
    // not go unnoticed in a pipeline that only keeps the JSON.
    for d in &r.duplicates {
        eprintln!(
            "gpudoctor: warning: {}",
            crate::render::terminal::escape(&d.describe())
        );
    }
    for u in &r.unreadable {
        eprintln!(
            "gpudoctor: warning: node {}: unreadable report {}: {}",
            crate::render::terminal::escape(&u.node),
            crate::render::terminal::escape(&u.source),
            crate::render::terminal::escape(&u.reason)
        );
    }
    let code = super::exit::fleet(&r);
    Ok(Outcome::new(
        export(format, ExportOptions::default(), "a fleet summary", |e| {
            e.fleet(&r)
        })?,
        code,
    ))
}

pub fn diff(a: &Path, b: &Path, format: Format, all: bool) -> Result<Outcome> {
    let one = |p: &Path| -> Result<NodeData> {
        let mut nodes = read_docs(p, false, Keep::Findings)?;
        match nodes.len() {
            1 => Ok(nodes.remove(0)),
            0 => bail!("{}: nothing to compare", p.display()),
            k => bail!(
                "{}: a report of {k} nodes (a run across nodes): diff compares one node; give it to fleet",
                p.display()
            ),
        }
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
                        silenced: f.silenced.is_some(),
                    })
                    .collect(),
            )
        }
        _ => None,
    };
    let mut d = fleet::diff(&na, &nb, shape, all);
    d.a = a.display().to_string();
    d.b = b.display().to_string();
    // Exit 1 when B is worse than A; a change for the better alone is no failure.
    Ok(Outcome::new(
        export(format, ExportOptions::default(), "a diff", |e| e.diff(&d))?,
        super::exit::diff(&d),
    ))
}
