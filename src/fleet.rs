//! Many nodes at once (`gpudoctor fleet`) and two nodes side by side (`gpudoctor diff`).
//!
//! Per check: how many nodes fail, warn or skip it, and which. Per probe measurement: the
//! median across nodes and the outliers by robust z-score (Iglewicz and Hoaglin's modified
//! z = 0.6745 (x - median) / MAD, |z| > 3.5 an outlier; where MAD is 0, the mean absolute
//! deviation times 1.2533 stands in, as in their fallback). Per shape field (from bundles,
//! where the topology is known): the nodes whose value differs from the majority (or from the
//! `--expect` baseline of their model). The nodes to drain: those that failed a check, those
//! with a low bandwidth outlier beyond the tolerance floor, those below an absolute floor (the
//! baseline's `bandwidth` floor, else gpudoctor's bar for the probe) however slow their whole
//! group is, and those whose GPUs, NICs or paths differ from the reference.
//!
//! Pure: works on `NodeData` that `run::fleet` read from reports and bundles; must not read
//! files. The reports it fills in are `crate::report::fleet`; the text tables are in
//! `render::fleet`.

use crate::checks::baseline::Baseline;
use crate::findings::Enforce;
use crate::report::fleet::{
    BandwidthChange, BelowFloor, CheckRow, DIFF_SCHEMA, DiffReport, Difference, Drain, Duplicate,
    FLEET_SCHEMA, FindingChange, FindingIn, FleetReport, Group, Outlier, ProbeRow, Undecided,
    Unreadable,
};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// Modified z-score beyond which a value is an outlier (Iglewicz and Hoaglin, 1993).
pub const OUTLIER_Z: f64 = 3.5;

/// How far below its group's median a statistical outlier must also be to be drained: a tight
/// fleet (run-to-run noise of 0.3%) makes a node 3% slow a z -15 outlier, and draining it
/// would take a healthy node out. SuperBench's default rules allow -5% against the baseline.
pub const DEFAULT_MIN_DEVIATION: f64 = 0.05;

/// The part of a `gpudoctor.check/1` report the fleet view reads.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckReportIn {
    pub schema: String,
    pub status: String,
    pub checks: Vec<FindingIn>,
    /// The node's own name, as the report records it.
    #[serde(default)]
    pub hostname: Option<String>,
    /// When the report's facts were read (UTC RFC 3339).
    #[serde(default)]
    pub time: Option<String>,
    /// A level-1 report's measured medians (none below level 1 or before they were kept).
    #[serde(default)]
    pub bandwidth: Vec<crate::report::Bandwidth>,
}

/// Ordering of finding statuses, worst last; a status gpudoctor does not write counts as skip.
pub fn status_rank(s: &str) -> u8 {
    match s {
        "pass" => 0,
        "skip" => 1,
        "warn" => 2,
        "fail" => 3,
        _ => 1,
    }
}

/// A node's findings as the fleet judgement reads them: per check id, the worst status of its
/// findings (subjects and messages left out). 20,000 nodes' findings in full are gigabytes;
/// this is a few dozen short entries a node, and `summarize` gives the same verdicts from it.
#[derive(Debug, Default)]
pub struct WorstPerCheck {
    index: std::collections::HashMap<String, usize>,
    /// The same for silenced findings, kept apart (they never make a check fail).
    silenced: std::collections::HashMap<String, usize>,
    findings: Vec<FindingIn>,
}

impl WorstPerCheck {
    pub fn add(&mut self, id: &str, status: &str) {
        self.add_finding(id, status, false);
    }

    /// A finding, silenced or not.
    pub fn add_finding(&mut self, id: &str, status: &str, silenced: bool) {
        let index = if silenced {
            &mut self.silenced
        } else {
            &mut self.index
        };
        match index.get(id) {
            Some(&i) => {
                let kept = &mut self.findings[i].status;
                if status_rank(status) > status_rank(kept) {
                    *kept = status.to_string();
                }
            }
            None => {
                index.insert(id.to_string(), self.findings.len());
                self.findings.push(FindingIn {
                    id: id.to_string(),
                    subject: String::new(),
                    status: status.to_string(),
                    message: String::new(),
                    silenced,
                });
            }
        }
    }

    /// One finding per check id, in the order the ids first came.
    pub fn finish(self) -> Vec<FindingIn> {
        self.findings
    }
}

/// What a node's reports say of its server model, for nodes without a shape (a bundle or
/// baseline has its PCI ids instead): the GPUs by name and count, the PCIe links its copies were
/// judged against. Nodes are compared only with nodes whose reports say the same.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReportModel {
    /// NVML's GPU names from its probe reports (`gpus[].name`), and how many GPUs they name.
    pub probe_gpus: BTreeSet<String>,
    pub probe_gpu_count: Option<usize>,
    /// GPU models its check report names (the `GPUn model` evidence of `gdr.path`: gpudoctor's
    /// model table, e.g. "H100 SXM5 80GB (PCI device id 10de:2330)"), and NVML's GPU count.
    pub check_gpus: BTreeSet<String>,
    pub check_gpu_count: Option<usize>,
    /// The link basis of its PCIe copy measurements ("PCIe Gen5 x16": what the slot can reach,
    /// not what it trained at, so a downtrained GPU stays in its group and is found slow).
    pub links: BTreeSet<String>,
    /// For the nodes of a `probe nccl --ranks` report: the report. One communicator's nodes
    /// timed the same collectives together and are compared with each other.
    pub run: Option<String>,
}

impl ReportModel {
    /// The group key and its description; Err(why) where the reports do not tell the model.
    /// GPU names: the probe reports' (NVML's, the names of the GPUs that were timed), else the
    /// check report's; the count: the check report's (every GPU NVML saw), else the probes'.
    fn key(&self) -> std::result::Result<String, String> {
        let (names, count) = if !self.probe_gpus.is_empty() {
            (
                &self.probe_gpus,
                self.check_gpu_count.or(self.probe_gpu_count),
            )
        } else {
            (&self.check_gpus, self.check_gpu_count)
        };
        let mut parts = Vec::new();
        if !names.is_empty() {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            parts.push(match count {
                Some(c) => format!("GPUs: {c}x {}", names.join(" + ")),
                None => format!("GPUs: {}", names.join(" + ")),
            });
        }
        if let Some(run) = &self.run {
            parts.push(format!("NCCL run across nodes {run}"));
        }
        if parts.is_empty() {
            return Err(if self.check_gpu_count.is_some() {
                "its reports name no GPU model (a check report without GPU model evidence, no probe report)".into()
            } else {
                "its reports name no GPU model".into()
            });
        }
        if !self.links.is_empty() {
            let links: Vec<&str> = self.links.iter().map(String::as_str).collect();
            parts.push(format!("links: {}", links.join(", ")));
        }
        Ok(parts.join("; "))
    }

    /// Another document's facts about the same node added to these.
    pub fn extend(&mut self, o: &ReportModel) {
        self.probe_gpus.extend(o.probe_gpus.iter().cloned());
        self.probe_gpu_count = self.probe_gpu_count.max(o.probe_gpu_count);
        self.check_gpus.extend(o.check_gpus.iter().cloned());
        self.check_gpu_count = self.check_gpu_count.or(o.check_gpu_count);
        self.links.extend(o.links.iter().cloned());
        self.run = self.run.clone().or_else(|| o.run.clone());
    }
}

/// The GPU model a check finding's evidence names: `GPU0 model` = "H100 SXM5 80GB (PCI device
/// id 10de:2330): GPUDirect RDMA capable" (`gdr.path`) gives "H100 SXM5 80GB (PCI device id
/// 10de:2330)"; None for any other evidence.
pub fn gpu_model_evidence(source: &str, value: &str) -> Option<String> {
    let label = source.strip_suffix(" model")?.strip_prefix("GPU")?;
    if label.is_empty() || !label.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(match value.split_once("): ") {
        Some((model, _)) => format!("{model})"),
        None => value.to_string(),
    })
}

/// What is known about one node.
#[derive(Debug, Clone, Default)]
pub struct NodeData {
    pub name: String,
    /// Files it came from.
    pub sources: Vec<String>,
    /// Overall status of its check report, when there is one.
    pub status: Option<String>,
    pub findings: Vec<FindingIn>,
    /// Its shape (bundles only: a report does not carry the topology).
    pub shape: Option<Baseline>,
    /// Probe measurement id ("h2d host->GPU0 copy-engine") -> median GB/s.
    pub bandwidth_gbps: BTreeMap<String, f64>,
    /// Probe measurement id -> gpudoctor's bar for it (the probe's threshold, e.g. 80% of the
    /// PCIe link rate), where the probe report has one.
    pub floor_gbps: BTreeMap<String, f64>,
    /// The hostname its check report records, where it has one.
    pub host: Option<String>,
    /// When its check report's facts were read (UTC RFC 3339), where it says.
    pub time: Option<String>,
    /// Files of this node that could not be read: (file, why).
    pub unreadable: Vec<(String, String)>,
    /// Documents of this node that another one of the same kind replaced.
    pub duplicates: Vec<Duplicate>,
    /// Its server model as its reports tell it (used where it has no shape).
    pub model: ReportModel,
}

/// How `summarize` judges: the tolerance floor of the outlier rule and the baselines nodes
/// are compared with (`fleet --expect`; name, baseline).
#[derive(Debug, Clone)]
pub struct FleetOptions {
    pub min_deviation: f64,
    pub expect: Vec<(String, Baseline)>,
}

impl Default for FleetOptions {
    fn default() -> Self {
        FleetOptions {
            min_deviation: DEFAULT_MIN_DEVIATION,
            expect: Vec::new(),
        }
    }
}

/// The id of the measurement a baseline floor is about on one node ("h2d host->GPU0
/// copy-engine"): the floor names its ends by PCI position, the node's shape gives the label
/// it had there (`was`). None where an end is not on the node (its shape says so).
fn floor_measurement(node: &Baseline, f: &crate::checks::baseline::Floor) -> Option<String> {
    let label = |pos: &str| -> Option<String> {
        if pos == "host" {
            return Some("host".to_string());
        }
        let g = node.gpus.iter().flatten().find(|g| g.position == pos)?;
        Some(g.was.as_deref()?.split(' ').next()?.to_string())
    };
    Some(format!(
        "{} {}->{} {}",
        f.probe,
        label(&f.src)?,
        label(&f.dst)?,
        f.method
    ))
}

/// Modified z-scores, median and spread (`crate::stats::robust_z`).
pub use crate::stats::robust_z;

/// The shape as flat `field -> value` pairs, keyed by PCI position (never by index).
pub fn flatten(b: &Baseline) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let v = serde_json::to_value(b).unwrap_or_default();
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(o) => {
                for (k, x) in o {
                    // Informational fields differ between identical nodes (a model name is
                    // NVML's or the PCI database's; pci_id is compared); `enforce` is how a
                    // baseline judges a version, not the node's shape.
                    if matches!(
                        k.as_str(),
                        "was" | "written_by" | "recorded_from" | "basis" | "model" | "enforce"
                    ) {
                        continue;
                    }
                    walk(&format!("{prefix}.{k}"), x, out);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    // Entries with a position (or two ends) are keyed by it.
                    let key = match (x.get("position"), x.get("a"), x.get("b"), x.get("probe")) {
                        (Some(p), _, _, _) => p.as_str().unwrap_or("?").to_string(),
                        (_, Some(a), Some(b), _) => {
                            format!(
                                "{}<->{}",
                                a.as_str().unwrap_or("?"),
                                b.as_str().unwrap_or("?")
                            )
                        }
                        (_, _, _, Some(p)) => format!(
                            "{} {} {}->{}",
                            p.as_str().unwrap_or("?"),
                            x.get("method").and_then(|m| m.as_str()).unwrap_or("?"),
                            x.get("src").and_then(|m| m.as_str()).unwrap_or("?"),
                            x.get("dst").and_then(|m| m.as_str()).unwrap_or("?")
                        ),
                        _ => match x.get("port") {
                            Some(p) => format!("port {p}"),
                            None => i.to_string(),
                        },
                    };
                    walk(&format!("{prefix}[{key}]"), x, out);
                }
            }
            serde_json::Value::Null => {}
            other => {
                out.insert(
                    prefix.trim_start_matches('.').to_string(),
                    match other {
                        serde_json::Value::String(s) => s.clone(),
                        o => o.to_string(),
                    },
                );
            }
        }
    }
    walk("", &v, &mut m);
    // Floors are measurements of one node, not its shape: the probe table compares those.
    // Silences are the operator's, not the node's shape.
    m.retain(|k, _| !k.starts_with("bandwidth") && !k.starts_with("silences") && k != "schema");
    m
}

/// The server model of a shape: its GPUs' and NICs' PCI ids (a set: a node that lost one of
/// eight GPUs is still that model, and its shape shows the missing one).
fn model_key(b: &Baseline) -> (BTreeSet<String>, BTreeSet<String>) {
    let ids = |v: Option<Vec<Option<String>>>| -> BTreeSet<String> {
        v.unwrap_or_default()
            .into_iter()
            .map(|x| x.unwrap_or_else(|| "?".into()))
            .collect()
    };
    (
        ids(b
            .gpus
            .as_ref()
            .map(|g| g.iter().map(|g| g.pci_id.clone()).collect())),
        ids(b
            .nics
            .as_ref()
            .map(|g| g.iter().map(|g| g.pci_id.clone()).collect())),
    )
}

/// "2x NVIDIA H100 80GB HBM3; NICs: ConnectX-7" (models by name where known, else PCI id).
fn model_name(b: &Baseline) -> String {
    let names = |v: Vec<(Option<String>, Option<String>)>| -> String {
        let mut c: BTreeMap<String, usize> = BTreeMap::new();
        for (m, id) in v {
            *c.entry(m.or(id).unwrap_or_else(|| "?".into())).or_default() += 1;
        }
        if c.is_empty() {
            return "none".into();
        }
        c.iter()
            .map(|(k, n)| format!("{n}x {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "GPUs: {}; NICs: {}",
        names(
            b.gpus
                .iter()
                .flatten()
                .map(|g| (g.model.clone(), g.pci_id.clone()))
                .collect()
        ),
        names(
            b.nics
                .iter()
                .flatten()
                .map(|g| (g.model.clone(), g.pci_id.clone()))
                .collect()
        )
    )
}

/// `gpus[pci0000:20/01.1/00.0].pcie.cur_width` -> (`gpus[*].pcie.cur_width`,
/// `pci0000:20/01.1/00.0`, the entity `gpus[pci0000:20/01.1/00.0]`); nested positions are
/// joined by `][`.
fn split_field(field: &str) -> (String, String, String) {
    let mut pattern = String::new();
    let mut subjects = Vec::new();
    let mut rest = field;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        pattern.push_str(&rest[..open]);
        pattern.push_str("[*]");
        subjects.push(rest[open + 1..open + close].to_string());
        rest = &rest[open + close + 1..];
    }
    pattern.push_str(rest);
    let subjects = subjects.join("][");
    let entity = match field.find(']') {
        Some(i) => field[..=i].to_string(),
        None => field.split('.').next().unwrap_or(field).to_string(),
    };
    (pattern, subjects, entity)
}

/// The differences of one node's flat shape from a reference, one per entity that is missing
/// or extra and one per (field pattern, expected, got) otherwise. `only`: where the reference
/// is a baseline, the top-level sections it pins (others are not compared).
fn differences(
    node: &str,
    group: &str,
    reference: &BTreeMap<String, String>,
    ours: &BTreeMap<String, String>,
    only: Option<&BTreeSet<String>>,
) -> Vec<Difference> {
    const MISSING: &str = "(missing)";
    let section = |f: &str| f.split(['.', '[']).next().unwrap_or(f).to_string();
    let fields: BTreeSet<&String> = reference
        .keys()
        .chain(ours.keys())
        .filter(|f| only.is_none_or(|o| o.contains(&section(f))))
        .collect();
    let entity_of = |f: &str| split_field(f).2;
    let has_entity = |m: &BTreeMap<String, String>, e: &str| {
        m.keys().any(|k| k == e || k.starts_with(&format!("{e}.")))
    };
    // GPUs and NICs one side lacks: their paths are part of that one difference.
    let gone: BTreeSet<String> = fields
        .iter()
        .filter(|f| f.starts_with("gpus[") || f.starts_with("nics["))
        .map(|f| entity_of(f))
        .filter(|e| has_entity(reference, e) != has_entity(ours, e))
        .map(|e| split_field(&e).1)
        .collect();
    let mut grouped: BTreeMap<(String, String, String), Vec<String>> = BTreeMap::new();
    for f in fields {
        if f.starts_with("paths[") {
            let ends = split_field(f).1;
            if ends.split("<->").any(|end| gone.contains(end)) {
                continue;
            }
        }
        let want = reference.get(f).map_or(MISSING, String::as_str);
        let got = ours.get(f).map_or(MISSING, String::as_str);
        if want == got {
            continue;
        }
        let e = entity_of(f);
        let (in_ref, in_ours) = (has_entity(reference, &e), has_entity(ours, &e));
        // A GPU, NIC or path the one has and the other has not is one difference, not one
        // per field of it.
        let (field, want, got) = if e.contains('[') && in_ref != in_ours {
            if in_ref {
                (e, "present", MISSING)
            } else {
                (e, MISSING, "present")
            }
        } else {
            (f.clone(), want, got)
        };
        let (pattern, subject, _) = split_field(&field);
        let subjects = grouped
            .entry((pattern, want.to_string(), got.to_string()))
            .or_default();
        if !subjects.contains(&subject) {
            subjects.push(subject);
        }
    }
    grouped
        .into_iter()
        .map(|((pattern, want, got), subjects)| Difference {
            node: node.to_string(),
            group: group.to_string(),
            // Versions are listed, not drained (a rolling upgrade is not a broken node), and
            // a path the node could not class (a NUMA node unknown: the `numa.*` checks say
            // so) is unknown, not drift; everything else is the hardware's shape.
            drain: !(pattern.starts_with("versions")
                || (pattern.starts_with("paths") && got == MISSING)),
            enforce: None,
            field: pattern,
            subjects,
            expected: want,
            got,
        })
        .collect()
}

/// The fleet view of `nodes`: their groups, per-check and per-measurement tables, shape
/// differences, and the nodes to drain or warn about with every reason, in the order the
/// steps below find them (unreadable files, failed checks, bandwidth, shape).
pub fn summarize(nodes: &[NodeData], opts: &FleetOptions) -> FleetReport {
    let status = status_counts(nodes);
    let (groups, group_of) = group_nodes(nodes, opts);
    let checks = check_rows(nodes);
    let mut drain = NodeReasons::new();
    let mut warn = NodeReasons::new();
    let unreadable = unreadable_files(nodes, &mut drain);
    for c in &checks {
        for n in &c.fail {
            drain
                .entry(n.clone())
                .or_default()
                .push(format!("{} failed", c.id));
        }
    }
    let probes = probe_rows(nodes, opts, &group_of, &mut drain);
    let shapes = judge_shapes(nodes, opts, &groups, &group_of, &mut drain, &mut warn);
    FleetReport {
        schema: FLEET_SCHEMA,
        gpudoctor_version: env!("CARGO_PKG_VERSION"),
        gpudoctor_revision: crate::REVISION,
        nodes: nodes.len(),
        min_deviation: opts.min_deviation,
        status,
        groups: groups.into_values().collect(),
        checks,
        probes,
        shape_nodes: shapes.shape_nodes,
        shape: shapes.shape,
        undecided: shapes.undecided,
        unreadable,
        duplicates: nodes.iter().flat_map(|n| n.duplicates.clone()).collect(),
        drain: drain
            .into_iter()
            .map(|(node, reasons)| Drain { node, reasons })
            .collect(),
        warn: warn
            .into_iter()
            .map(|(node, reasons)| Drain { node, reasons })
            .collect(),
    }
}

/// Node -> the reasons it is drained (or warned about), in the order they were found.
type NodeReasons = BTreeMap<String, Vec<String>>;

/// One group's readings of one measurement: (node, GB/s, its absolute floor and whose).
type Readings<'a> = Vec<(&'a str, f64, Option<(f64, String)>)>;

/// Nodes per overall status of their check report; a node without one whose files could not
/// be read counts as "unreadable", any other node without one is not counted.
fn status_counts(nodes: &[NodeData]) -> BTreeMap<String, usize> {
    let mut status: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes {
        if let Some(s) = &n.status {
            *status.entry(s.clone()).or_default() += 1;
        } else if !n.unreadable.is_empty() {
            *status.entry("unreadable".into()).or_default() += 1;
        }
    }
    status
}

/// Which nodes are compared with one another: the groups by name, and each node's group.
///
/// By `--expect` baseline where a node's model is the baseline's, else by model; nodes
/// without a shape (reports only) by the model their reports tell (GPU model and count, link
/// basis), and a node whose reports do not tell it is a group of its own: an A100 node is
/// never an outlier of H100 nodes.
fn group_nodes<'a>(
    nodes: &'a [NodeData],
    opts: &FleetOptions,
) -> (BTreeMap<String, Group>, BTreeMap<&'a str, String>) {
    let expect_keys: Vec<_> = opts.expect.iter().map(|(_, b)| model_key(b)).collect();
    let mut group_of: BTreeMap<&str, String> = BTreeMap::new();
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut model_groups: BTreeMap<(BTreeSet<String>, BTreeSet<String>), String> = BTreeMap::new();
    let mut report_groups: BTreeMap<String, String> = BTreeMap::new();
    for n in nodes {
        let (gname, model, reference) = match &n.shape {
            None => match n.model.key() {
                Ok(key) => {
                    let next = report_groups.len();
                    let name = report_groups
                        .entry(key.clone())
                        .or_insert_with(|| format!("reports {}", next + 1))
                        .clone();
                    (name, key, "none".to_string())
                }
                Err(why) => (
                    format!("node {} (model unknown)", n.name),
                    format!("unknown: {why}; compared with no other node"),
                    "none".to_string(),
                ),
            },
            Some(b) => {
                let key = model_key(b);
                match expect_keys.iter().position(|k| *k == key) {
                    Some(i) => (
                        format!("baseline {}", opts.expect[i].0),
                        model_name(&opts.expect[i].1),
                        format!("baseline {}", opts.expect[i].0),
                    ),
                    None => {
                        let next = model_groups.len();
                        let name = model_groups
                            .entry(key)
                            .or_insert_with(|| format!("model {}", next + 1))
                            .clone();
                        (name, model_name(b), "majority".to_string())
                    }
                }
            }
        };
        groups
            .entry(gname.clone())
            .or_insert_with(|| Group {
                name: gname.clone(),
                model,
                reference,
                nodes: Vec::new(),
            })
            .nodes
            .push(n.name.clone());
        group_of.insert(n.name.as_str(), gname);
    }
    (groups, group_of)
}

/// Per check: the nodes whose worst unsilenced finding fails, warns or skips it, how many pass
/// it, and the nodes with a silenced finding of it (a check only silenced still has a row).
fn check_rows(nodes: &[NodeData]) -> Vec<CheckRow> {
    let mut per_check: BTreeMap<&str, BTreeMap<&str, u8>> = BTreeMap::new();
    let mut silenced: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let rank = status_rank;
    for n in nodes {
        for f in &n.findings {
            if f.silenced {
                silenced
                    .entry(f.id.as_str())
                    .or_default()
                    .insert(n.name.as_str());
                continue;
            }
            let e = per_check
                .entry(f.id.as_str())
                .or_default()
                .entry(n.name.as_str())
                .or_insert(0);
            *e = (*e).max(rank(&f.status));
        }
    }
    for id in silenced.keys() {
        per_check.entry(id).or_default();
    }
    per_check
        .into_iter()
        .map(|(id, by_node)| {
            let mut row = CheckRow {
                id: id.to_string(),
                fail: Vec::new(),
                warn: Vec::new(),
                skip: Vec::new(),
                pass: 0,
                silenced: silenced
                    .get(id)
                    .map(|s| s.iter().map(|n| n.to_string()).collect())
                    .unwrap_or_default(),
            };
            for (node, r) in by_node {
                match r {
                    3 => row.fail.push(node.to_string()),
                    2 => row.warn.push(node.to_string()),
                    1 => row.skip.push(node.to_string()),
                    _ => row.pass += 1,
                }
            }
            row
        })
        .collect()
}

/// The files that could not be read, one entry each; each drains its node.
fn unreadable_files(nodes: &[NodeData], drain: &mut NodeReasons) -> Vec<Unreadable> {
    let mut unreadable = Vec::new();
    for n in nodes {
        for (source, reason) in &n.unreadable {
            drain
                .entry(n.name.clone())
                .or_default()
                .push(format!("unreadable report {source}: {reason}"));
            unreadable.push(Unreadable {
                node: n.name.clone(),
                source: source.clone(),
                reason: reason.clone(),
            });
        }
    }
    unreadable
}

/// Absolute floors from the `--expect` baselines, per node of their groups and measurement:
/// (node, measurement) -> (GB/s, "baseline NAME").
fn baseline_floors<'a>(
    nodes: &'a [NodeData],
    opts: &FleetOptions,
    group_of: &BTreeMap<&str, String>,
) -> BTreeMap<(&'a str, String), (f64, String)> {
    let mut baseline_floor: BTreeMap<(&str, String), (f64, String)> = BTreeMap::new();
    for n in nodes {
        let g = &group_of[n.name.as_str()];
        let Some((name, b)) = opts
            .expect
            .iter()
            .find(|(name, _)| *g == format!("baseline {name}"))
        else {
            continue;
        };
        let (Some(shape), Some(floors)) = (&n.shape, &b.bandwidth) else {
            continue;
        };
        for f in floors.iter().filter(|f| f.min_gbps.is_finite()) {
            if let Some(m) = floor_measurement(shape, f) {
                baseline_floor.insert(
                    (n.name.as_str(), m),
                    (f.min_gbps, format!("baseline {name}")),
                );
            }
        }
    }
    baseline_floor
}

/// The probe table, one row per group and measurement; drains the low outliers beyond the
/// tolerance floor and the nodes below an absolute floor.
fn probe_rows(
    nodes: &[NodeData],
    opts: &FleetOptions,
    group_of: &BTreeMap<&str, String>,
    drain: &mut NodeReasons,
) -> Vec<ProbeRow> {
    let baseline_floor = baseline_floors(nodes, opts, group_of);
    let mut per_m: BTreeMap<(&str, &str), Readings> = BTreeMap::new();
    for n in nodes {
        let g = group_of[n.name.as_str()].as_str();
        for (m, v) in &n.bandwidth_gbps {
            if v.is_finite() {
                // The baseline's floor where the node has one, else gpudoctor's bar.
                let floor = baseline_floor
                    .get(&(n.name.as_str(), m.clone()))
                    .cloned()
                    .or_else(|| {
                        n.floor_gbps
                            .get(m)
                            .map(|b| (*b, "gpudoctor's bar".to_string()))
                    });
                per_m
                    .entry((g, m.as_str()))
                    .or_default()
                    .push((n.name.as_str(), *v, floor));
            }
        }
    }
    per_m
        .into_iter()
        .map(|((g, m), vals)| probe_row(g, m, &vals, opts, drain))
        .collect()
}

/// One group's statistics for one measurement: its median and spread, its outliers by robust
/// z (drained where low beyond the tolerance floor), and its nodes below their absolute floor
/// (drained however slow the whole group is).
fn probe_row(
    g: &str,
    m: &str,
    vals: &Readings,
    opts: &FleetOptions,
    drain: &mut NodeReasons,
) -> ProbeRow {
    let xs: Vec<f64> = vals.iter().map(|(_, v, _)| *v).collect();
    let (z, med, spread, kind) = robust_z(&xs);
    let mut outliers: Vec<Outlier> = vals
        .iter()
        .zip(&z)
        .filter(|(_, z)| z.abs() > OUTLIER_Z)
        .map(|((node, v, _), z)| {
            let deviation = if med > 0.0 { (v - med) / med } else { 0.0 };
            Outlier {
                node: node.to_string(),
                gbps: *v,
                z: *z,
                deviation,
                drain: *z < -OUTLIER_Z && deviation < -opts.min_deviation,
            }
        })
        .collect();
    outliers.sort_by(|a, b| a.z.total_cmp(&b.z));
    for o in outliers.iter().filter(|o| o.drain) {
        drain.entry(o.node.clone()).or_default().push(format!(
            "{m}: {:.1} GB/s, {:+.1}% from the median {med:.1} (z {:.1})",
            o.gbps,
            o.deviation * 100.0,
            o.z
        ));
    }
    let below_floor: Vec<BelowFloor> = vals
        .iter()
        .filter_map(|(node, v, floor)| {
            let (f, from) = floor.as_ref()?;
            (v < f).then(|| BelowFloor {
                node: node.to_string(),
                gbps: *v,
                floor_gbps: *f,
                floor_from: from.clone(),
            })
        })
        .collect();
    for b in &below_floor {
        let whose = match b.floor_from.as_str() {
            "gpudoctor's bar" => format!("gpudoctor's bar {:.1}", b.floor_gbps),
            from => format!("the floor {:.1} of {from}", b.floor_gbps),
        };
        drain
            .entry(b.node.clone())
            .or_default()
            .push(format!("{m}: {:.1} GB/s, below {whose}", b.gbps));
    }
    ProbeRow {
        group: g.to_string(),
        measurement: m.to_string(),
        n: vals.len(),
        median_gbps: med,
        spread_gbps: spread,
        spread: kind,
        outliers,
        below_floor,
        node_gbps: vals
            .iter()
            .map(|(node, v, _)| (node.to_string(), *v))
            .collect(),
    }
}

/// The shape part of the fleet view.
#[derive(Default)]
struct ShapeJudgement {
    /// Nodes with a known shape.
    shape_nodes: usize,
    shape: Vec<Difference>,
    undecided: Vec<Undecided>,
}

/// Each node's shape against its group's reference (a baseline, or each field's majority):
/// drains the nodes whose GPUs, NICs or paths differ, or whose version the baseline pins as
/// policy; warns where a version it records as a fact differs or a pinned one is unknown.
fn judge_shapes(
    nodes: &[NodeData],
    opts: &FleetOptions,
    groups: &BTreeMap<String, Group>,
    group_of: &BTreeMap<&str, String>,
    drain: &mut NodeReasons,
    warn: &mut NodeReasons,
) -> ShapeJudgement {
    let mut out = ShapeJudgement::default();
    for g in groups.values() {
        // By the group each node was put in (a lookup: `g.nodes.contains` made 20,000
        // reports-only nodes cost 200 million name comparisons).
        let members: Vec<(&str, BTreeMap<String, String>)> = nodes
            .iter()
            .filter(|n| group_of.get(n.name.as_str()) == Some(&g.name))
            .filter_map(|n| n.shape.as_ref().map(|s| (n.name.as_str(), flatten(s))))
            .collect();
        out.shape_nodes += members.len();
        if members.is_empty() {
            continue;
        }
        let baseline = opts
            .expect
            .iter()
            .find(|(name, _)| g.reference == format!("baseline {name}"));
        let (reference, only, unjudged) = match baseline {
            Some((_, b)) => {
                let flat = flatten(b);
                let sections: BTreeSet<String> = flat
                    .keys()
                    .map(|f| f.split(['.', '[']).next().unwrap_or(f).to_string())
                    .collect();
                (flat, Some(sections), BTreeSet::new())
            }
            None => {
                let (reference, unjudged) = majority_reference(g, &members, &mut out.undecided);
                (reference, None, unjudged)
            }
        };
        for (n, f) in &members {
            let mut ours = f.clone();
            ours.retain(|k, _| !unjudged.contains(k));
            for mut d in differences(n, &g.name, &reference, &ours, only.as_ref()) {
                if let Some((name, b)) = baseline {
                    enforce_pin(&mut d, name, b, warn);
                }
                if d.drain && d.enforce.is_some() {
                    drain.entry(d.node.clone()).or_default().push(pin_reason(
                        &d,
                        baseline.map_or("", |(name, _)| name.as_str()),
                    ));
                } else if d.drain {
                    drain
                        .entry(d.node.clone())
                        .or_default()
                        .push(format!("shape: {}", d.brief()));
                }
                out.shape.push(d);
            }
        }
    }
    out
}

/// A group's majority reference: per field, the value more than half its members hold, and
/// the fields no value is held by more than half of (each listed as undecided; no node is
/// judged on them). A field most members lack has no reference value.
fn majority_reference(
    g: &Group,
    members: &[(&str, BTreeMap<String, String>)],
    undecided: &mut Vec<Undecided>,
) -> (BTreeMap<String, String>, BTreeSet<String>) {
    let mut unjudged: BTreeSet<String> = BTreeSet::new();
    let fields: BTreeSet<&String> = members.iter().flat_map(|(_, f)| f.keys()).collect();
    let mut reference = BTreeMap::new();
    for field in fields {
        let mut by_value: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        for (n, f) in members {
            by_value
                .entry(f.get(field).map_or("(missing)", String::as_str))
                .or_default()
                .push(n.to_string());
        }
        if by_value.len() < 2 {
            if let Some(v) = members[0].1.get(field) {
                reference.insert(field.clone(), v.clone());
            }
            continue;
        }
        match by_value.iter().find(|(_, ns)| ns.len() * 2 > members.len()) {
            Some((v, _)) if *v != "(missing)" => {
                reference.insert(field.clone(), v.to_string());
            }
            Some(_) => {}
            None => {
                undecided.push(Undecided {
                    group: g.name.clone(),
                    field: field.clone(),
                    values: by_value
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect(),
                });
                // Not judged: no node is compared on it.
                unjudged.insert(field.clone());
            }
        }
    }
    (reference, unjudged)
}

/// How the baseline pins the version a difference is about: `versions.nvidia_driver.value`,
/// `versions.cuda_driver.value`, `versions.kernel.value`, `versions.nic_firmware.MODEL.value`,
/// `nics[*].firmware.value` (policy where any of its positions is pinned as policy). None for
/// anything else.
fn pin_of(d: &Difference, b: &Baseline) -> Option<Enforce> {
    let v = b.versions.as_ref();
    let one = match d.field.as_str() {
        "versions.nvidia_driver.value" => v.and_then(|v| v.nvidia_driver.as_ref()),
        "versions.cuda_driver.value" => v.and_then(|v| v.cuda_driver.as_ref()),
        "versions.kernel.value" => v.and_then(|v| v.kernel.as_ref()),
        "nics[*].firmware.value" => {
            let pins: Vec<Enforce> = b
                .nics
                .iter()
                .flatten()
                .filter(|n| d.subjects.contains(&n.position))
                .filter_map(|n| n.firmware.as_ref().map(|p| p.enforce))
                .collect();
            return pins
                .iter()
                .copied()
                .find(|e| *e == Enforce::Policy)
                .or(pins.first().copied());
        }
        f => {
            let model = f
                .strip_prefix("versions.nic_firmware.")?
                .strip_suffix(".value")?;
            v.and_then(|v| v.nic_firmware.get(model))
        }
    };
    one.map(|p| p.enforce)
}

/// The subject of a pinned version's finding, as `check --expect` names it: `host` for the
/// driver, CUDA, kernel and per-model NIC firmware, the NIC positions for a NIC's own pin.
fn pin_subject(d: &Difference) -> String {
    if d.field.starts_with("nics[") {
        d.subjects.join(", ")
    } else {
        "host".to_string()
    }
}

/// A version difference judged as its baseline pins it (as `check --expect` judges
/// `baseline.versions`): `policy` drains, `fact` warns; a policy pin the node does not report
/// is unknown, never a pass, and warns.
fn enforce_pin(
    d: &mut Difference,
    baseline: &str,
    b: &Baseline,
    warn: &mut BTreeMap<String, Vec<String>>,
) {
    let Some(e) = pin_of(d, b) else {
        return;
    };
    d.enforce = Some(e);
    let unknown = d.got == "(missing)";
    d.drain = e == Enforce::Policy && !unknown;
    if !d.drain {
        let why = if unknown {
            format!(
                "{} {}: {} unknown on this node (pinned as policy by baseline {baseline}: {})",
                crate::checks::baseline::ID_VERSIONS,
                pin_subject(d),
                d.field,
                d.expected
            )
        } else {
            format!(
                "{} {}: {}: {} -> {} (a fact of baseline {baseline}: warns)",
                crate::checks::baseline::ID_VERSIONS,
                pin_subject(d),
                d.field,
                d.expected,
                d.got
            )
        };
        warn.entry(d.node.clone()).or_default().push(why);
    }
}

/// The drain reason of a version pinned as policy: `baseline.versions host:
/// versions.nvidia_driver.value: 550.54.15 -> 535.104.05 (policy of baseline sku-a)`.
fn pin_reason(d: &Difference, baseline: &str) -> String {
    format!(
        "{} {}: {}: {} -> {} (policy of baseline {baseline})",
        crate::checks::baseline::ID_VERSIONS,
        pin_subject(d),
        d.field,
        d.expected,
        d.got
    )
}

impl DiffReport {
    /// B is worse than A: a verdict got worse (a finding that appeared failing or warning
    /// included), a bandwidth fell by `BANDWIDTH_NOISE` or more, or B's shape differs from A's.
    /// What `diff` exits 1 for; a change for the better alone exits 0.
    pub fn worse(&self) -> bool {
        self.checks.iter().any(|c| c.change == "worse")
            || self
                .bandwidth
                .iter()
                .any(|b| b.change.is_some_and(|c| c <= -BANDWIDTH_NOISE))
            || self.shape.as_ref().is_some_and(|s| !s.is_empty())
    }
}

/// Bandwidth changes smaller than this are noise between runs (the copy probes' run-to-run
/// spread on the recorded machines is within 2%).
pub const BANDWIDTH_NOISE: f64 = 0.05;

/// `all`: also list the changes between a pass and no finding (see `DiffReport::hidden`).
pub fn diff(a: &NodeData, b: &NodeData, shape: Option<Vec<FindingIn>>, all: bool) -> DiffReport {
    // Findings keyed by check id, subject and their place among the findings of that check on
    // that subject (checks write them in a fixed order): `baseline.versions` judges the NVIDIA
    // driver, the CUDA driver and the kernel all on `host`, and a key of id and subject alone
    // kept one of the three, so a node with another driver could diff as equal.
    type Key = (String, String, usize);
    let key = |n: &NodeData| -> BTreeMap<Key, FindingIn> {
        let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        n.findings
            .iter()
            .map(|f| {
                let k = seen.entry((f.id.as_str(), f.subject.as_str())).or_insert(0);
                *k += 1;
                ((f.id.clone(), f.subject.clone(), *k - 1), f.clone())
            })
            .collect()
    };
    let (ka, kb) = (key(a), key(b));
    // Subjects with more than one finding of a check, in either node: shown as `host #2`.
    let several: BTreeSet<(&str, &str)> = ka
        .keys()
        .chain(kb.keys())
        .filter(|k| k.2 > 0)
        .map(|k| (k.0.as_str(), k.1.as_str()))
        .collect();
    let keys: BTreeSet<&Key> = ka.keys().chain(kb.keys()).collect();
    let mut checks = Vec::new();
    let mut hidden = 0;
    let rank = |s: &str| match s {
        "fail" => 3u8,
        "warn" => 2,
        "skip" => 1,
        _ => 0,
    };
    // A silenced finding shows its status as silenced (`fail (silenced)`), which ranks as
    // nothing to act on: silencing a failure is never "worse", and never reads as a pass.
    let shown = |f: &FindingIn| {
        if f.silenced {
            format!("{} (silenced)", f.status)
        } else {
            f.status.clone()
        }
    };
    for k in keys {
        let sa = ka.get(k).map_or("(absent)".to_string(), shown);
        let sb = kb.get(k).map_or("(absent)".to_string(), shown);
        if sa == sb {
            continue;
        }
        let one_sided_pass = matches!(
            (sa.as_str(), sb.as_str()),
            ("(absent)", "pass") | ("pass", "(absent)")
        );
        if one_sided_pass && !all {
            hidden += 1;
            continue;
        }
        let (ra, rb) = (rank(&sa), rank(&sb));
        checks.push(FindingChange {
            id: k.0.clone(),
            subject: if several.contains(&(k.0.as_str(), k.1.as_str())) {
                format!("{} #{}", k.1, k.2 + 1)
            } else {
                k.1.clone()
            },
            change: match rb.cmp(&ra) {
                std::cmp::Ordering::Greater => "worse",
                std::cmp::Ordering::Less => "better",
                std::cmp::Ordering::Equal => "other",
            },
            message_b: kb.get(k).map(|f| f.message.clone()).unwrap_or_default(),
            a: sa,
            b: sb,
        });
    }
    // Worse first (the worst B verdict first), then better, then the rest; by id within.
    let order = |c: &FindingChange| match c.change {
        "worse" => (0, 3 - rank(&c.b)),
        "better" => (1, 0),
        _ => (2, 0),
    };
    checks.sort_by(|x, y| {
        order(x)
            .cmp(&order(y))
            .then_with(|| (&x.id, &x.subject).cmp(&(&y.id, &y.subject)))
    });
    let ms: BTreeSet<&String> = a
        .bandwidth_gbps
        .keys()
        .chain(b.bandwidth_gbps.keys())
        .collect();
    let bandwidth = ms
        .into_iter()
        .filter_map(|m| {
            let (x, y) = (
                a.bandwidth_gbps.get(m).copied(),
                b.bandwidth_gbps.get(m).copied(),
            );
            let change = match (x, y) {
                (Some(x), Some(y)) if x > 0.0 => Some((y - x) / x),
                _ => None,
            };
            let noteworthy = change.is_none_or(|c| c.abs() >= BANDWIDTH_NOISE);
            noteworthy.then(|| BandwidthChange {
                measurement: m.clone(),
                a_gbps: x,
                b_gbps: y,
                change,
            })
        })
        .collect();
    DiffReport {
        schema: DIFF_SCHEMA,
        gpudoctor_version: env!("CARGO_PKG_VERSION"),
        gpudoctor_revision: crate::REVISION,
        a: a.name.clone(),
        b: b.name.clone(),
        status: [a.status.clone(), b.status.clone()],
        checks,
        hidden,
        shape,
        bandwidth,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn robust_z_finds_the_slow_node() {
        let mut v = vec![50.0, 50.5, 49.8, 50.2, 50.1, 49.9, 50.3];
        v.push(30.0);
        let (z, med, _, kind) = robust_z(&v);
        assert_eq!(kind, "mad");
        assert!((med - 50.05).abs() < 1e-9);
        assert!(z[7] < -OUTLIER_Z, "{z:?}");
        assert!(z[..7].iter().all(|z| z.abs() < OUTLIER_Z));
    }

    #[test]
    fn robust_z_with_zero_mad_uses_the_mean_deviation() {
        let v = vec![50.0, 50.0, 50.0, 50.0, 10.0];
        let (z, _, _, kind) = robust_z(&v);
        assert_eq!(kind, "mean-absolute-deviation");
        assert!(z[4] < -OUTLIER_Z);
        let (z, _, _, kind) = robust_z(&[1.0, 1.0]);
        assert_eq!(kind, "none (all equal)");
        assert_eq!(z, vec![0.0, 0.0]);
    }

    fn node(name: &str, gbps: f64) -> NodeData {
        NodeData {
            name: name.into(),
            bandwidth_gbps: [("h2d host->GPU0 copy-engine".to_string(), gbps)].into(),
            model: ReportModel {
                probe_gpus: ["NVIDIA H100 80GB HBM3".to_string()].into(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The case: 20 nodes with +-0.3% noise, one at 97% of the median: an outlier far
    /// beyond |z| 3.5, and not drained under the default 5% floor; drained under 2%.
    #[test]
    fn tolerance_floor_keeps_a_near_outlier_in_service() {
        let mut nodes: Vec<NodeData> = (0..20)
            .map(|i| {
                node(
                    &format!("n{i:02}"),
                    50.0 * (1.0 + ((i % 7) as f64 - 3.0) * 0.001),
                )
            })
            .collect();
        nodes.push(node("near", 50.0 * 0.97));
        let r = summarize(&nodes, &FleetOptions::default());
        let o = &r.probes[0].outliers;
        assert_eq!(o.len(), 1);
        assert_eq!(o[0].node, "near");
        assert!(o[0].z < -10.0, "{o:?}");
        assert!(!o[0].drain);
        assert!(r.drain.is_empty());
        let strict = FleetOptions {
            min_deviation: 0.02,
            ..FleetOptions::default()
        };
        let r = summarize(&nodes, &strict);
        assert_eq!(r.drain.len(), 1);
        assert_eq!(r.drain[0].node, "near");
    }

    #[test]
    fn fields_split_into_pattern_subjects_and_entity() {
        let (p, s, e) = split_field("nics[pci0000:15/01.0][port 1].rate");
        assert_eq!(p, "nics[*][*].rate");
        assert_eq!(s, "pci0000:15/01.0][port 1");
        assert_eq!(e, "nics[pci0000:15/01.0]");
        let d = Difference {
            node: "n".into(),
            group: "g".into(),
            field: "nics[*].ports[*].rate".into(),
            subjects: vec!["a][port 1".into()],
            expected: "400".into(),
            got: "200".into(),
            drain: true,
            enforce: None,
        };
        assert_eq!(d.describe(), "nics[a].ports[port 1].rate: 400 -> 200");
        let (p, s, e) = split_field("versions.kernel.value");
        assert_eq!(
            (p.as_str(), s.as_str(), e.as_str()),
            ("versions.kernel.value", "", "versions")
        );
    }

    #[test]
    fn worst_per_check_keeps_each_checks_worst_status() {
        let mut w = WorstPerCheck::default();
        for (id, st) in [("a", "pass"), ("b", "warn"), ("a", "fail"), ("a", "skip")] {
            w.add(id, st);
        }
        let got: Vec<(String, String)> = w.finish().into_iter().map(|f| (f.id, f.status)).collect();
        assert_eq!(
            got,
            [("a".into(), "fail".into()), ("b".into(), "warn".into())]
        );
    }

    #[test]
    fn report_models_name_gpus_count_and_links() {
        assert_eq!(
            gpu_model_evidence(
                "GPU3 model",
                "A100 PCIe 80GB (PCI device id 10de:20b5): GPUDirect RDMA capable"
            )
            .as_deref(),
            Some("A100 PCIe 80GB (PCI device id 10de:20b5)")
        );
        assert_eq!(gpu_model_evidence("GPU3 gpudoctor model", "x"), None);
        let m = ReportModel {
            probe_gpus: ["NVIDIA H100 80GB HBM3".to_string()].into(),
            probe_gpu_count: Some(3),
            check_gpu_count: Some(8),
            links: ["PCIe Gen5 x16".to_string()].into(),
            ..Default::default()
        };
        assert_eq!(
            m.key().unwrap(),
            "GPUs: 8x NVIDIA H100 80GB HBM3; links: PCIe Gen5 x16"
        );
        assert!(ReportModel::default().key().is_err());
    }

    #[test]
    fn diff_tells_findings_of_one_check_and_subject_apart() {
        let f = |st: &str, msg: &str| FindingIn {
            id: "baseline.versions".into(),
            subject: "host".into(),
            status: st.into(),
            message: msg.into(),
            silenced: false,
        };
        let a = NodeData {
            findings: vec![f("pass", "driver"), f("pass", "cuda"), f("pass", "kernel")],
            ..Default::default()
        };
        let b = NodeData {
            findings: vec![f("fail", "driver"), f("pass", "cuda"), f("pass", "kernel")],
            ..Default::default()
        };
        let d = diff(&a, &b, None, false);
        assert_eq!(d.checks.len(), 1);
        assert_eq!(d.checks[0].subject, "host #1");
        assert!(d.worse());
        assert!(!diff(&b, &a, None, false).worse());
    }

    #[test]
    fn diff_orders_worse_first_and_hides_one_sided_passes() {
        let f = |id: &str, st: &str| FindingIn {
            id: id.into(),
            subject: "host".into(),
            status: st.into(),
            message: String::new(),
            silenced: false,
        };
        let a = NodeData {
            findings: vec![
                f("a.better", "fail"),
                f("b.worse", "pass"),
                f("c.only-a", "pass"),
            ],
            ..Default::default()
        };
        let b = NodeData {
            findings: vec![
                f("a.better", "pass"),
                f("b.worse", "warn"),
                f("d.only-b", "pass"),
                f("e.new-fail", "fail"),
            ],
            ..Default::default()
        };
        let d = diff(&a, &b, None, false);
        let ids: Vec<&str> = d.checks.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["e.new-fail", "b.worse", "a.better"]);
        assert_eq!(d.hidden, 2);
        assert_eq!(diff(&a, &b, None, true).checks.len(), 5);
    }
}
