//! The fleet and diff reports (schemas `gpudoctor.fleet/2`, `gpudoctor.diff/2`), pure data:
//! per check and per measurement across nodes, the groups and their shape differences, the
//! nodes to drain; and two nodes side by side. Filled in by `crate::fleet` (which summarizes
//! and judges), printed by `crate::render`; nothing here reads files or judges.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const FLEET_SCHEMA: &str = "gpudoctor.fleet/2";
pub const DIFF_SCHEMA: &str = "gpudoctor.diff/2";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindingIn {
    pub id: String,
    pub subject: String,
    pub status: String,
    #[serde(default)]
    pub message: String,
    /// A silence matched it (the report's `silenced` object is present): its status is the
    /// check's, but it does not count toward the node's verdict or drain.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub silenced: bool,
}

/// True where the field holds anything but null (`silenced` is an object in a check report).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Ok(Option::<serde::de::IgnoredAny>::deserialize(d)?.is_some())
}

/// Two or more documents of one kind for one node (yesterday's and today's report in one
/// directory): one is kept, by the reports' own time where they all say it, else the worse.
#[derive(Debug, Clone, Serialize)]
pub struct Duplicate {
    pub node: String,
    /// "check report", "shape" or "probe measurements".
    pub kind: String,
    pub kept: String,
    pub dropped: Vec<String>,
    /// How the kept one was chosen.
    pub why: String,
}

impl Duplicate {
    pub fn describe(&self) -> String {
        format!(
            "node {}: {} {} of one node: kept {}, ignored {} ({})",
            self.node,
            1 + self.dropped.len(),
            match self.kind.as_str() {
                "check report" => "check reports",
                "shape" => "shapes (bundles or baselines)",
                k => k,
            },
            self.kept,
            self.dropped.join(", "),
            self.why
        )
    }
}

/// A node's file that could not be read (a report still being written, a damaged bundle):
/// the node is not judged from it and is drained for it.
#[derive(Debug, Clone, Serialize)]
pub struct Unreadable {
    pub node: String,
    pub source: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckRow {
    pub id: String,
    pub fail: Vec<String>,
    pub warn: Vec<String>,
    pub skip: Vec<String>,
    pub pass: usize,
    /// Nodes with a finding of this check that a silence matched (their report's
    /// `--skip ID:SUBJECT` or baseline silences), whatever its status: not drained for it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub silenced: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    pub node: String,
    pub gbps: f64,
    pub z: f64,
    /// (gbps - median) / median.
    pub deviation: f64,
    /// Low by |z| > 3.5 and by more than the tolerance floor: the node is drained.
    pub drain: bool,
}

/// A node below an absolute floor for a measurement, whatever its group's median: a fleet
/// that is uniformly slow has no outliers, but each of its nodes is below the floor.
#[derive(Debug, Clone, Serialize)]
pub struct BelowFloor {
    pub node: String,
    pub gbps: f64,
    pub floor_gbps: f64,
    /// Whose floor: "gpudoctor's bar" (the probe's own threshold, e.g. 80% of the PCIe link
    /// rate) or "baseline NAME" (the `--expect` baseline's `bandwidth` floor, which is judged
    /// first where both apply).
    pub floor_from: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeRow {
    /// The group (model) the statistics are over.
    pub group: String,
    pub measurement: String,
    pub n: usize,
    pub median_gbps: f64,
    /// The spread used for z: MAD, or 1.2533 x mean absolute deviation where MAD is 0.
    pub spread_gbps: f64,
    pub spread: &'static str,
    pub outliers: Vec<Outlier>,
    /// Nodes below gpudoctor's own bar for the measurement, whatever the fleet's median.
    pub below_floor: Vec<BelowFloor>,
    /// Every node's median GB/s, by node (the statistics above are over these).
    pub node_gbps: BTreeMap<String, f64>,
}

/// Nodes compared with one another: one server model (the set of GPU and NIC PCI ids), and
/// what their shape is compared with.
#[derive(Debug, Clone, Serialize)]
pub struct Group {
    pub name: String,
    /// GPU and NIC models (names, or PCI ids where no name is known).
    pub model: String,
    /// "majority" (each field's value on more than half the group's nodes) or
    /// "baseline NAME" (`--expect`).
    pub reference: String,
    pub nodes: Vec<String>,
}

/// One difference of one node's shape from its group's reference. Fields that differ the same
/// way on several GPUs, NICs or paths of the node are one difference (`field` then has `[*]`
/// where the position was, `subjects` lists the positions).
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    pub node: String,
    pub group: String,
    pub field: String,
    pub subjects: Vec<String>,
    /// The reference's value; "(missing)" where it has none.
    pub expected: String,
    /// The node's value; "(missing)" where it has none.
    pub got: String,
    /// Drained for it (GPUs, NICs and paths; a version pinned `policy` by the group's
    /// baseline; other version differences are listed only).
    pub drain: bool,
    /// A version the group's `--expect` baseline pins: how (`policy` drains, `fact` warns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforce: Option<crate::findings::Enforce>,
}

/// A field where no value is held by more than half of a group's nodes (majority reference):
/// no node is judged on it.
#[derive(Debug, Clone, Serialize)]
pub struct Undecided {
    pub group: String,
    pub field: String,
    /// value -> nodes.
    pub values: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Drain {
    pub node: String,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub nodes: usize,
    /// The outlier rule's tolerance floor (fraction below the group median).
    pub min_deviation: f64,
    /// Nodes per overall status (nodes without a check report are not counted).
    pub status: BTreeMap<String, usize>,
    pub groups: Vec<Group>,
    pub checks: Vec<CheckRow>,
    pub probes: Vec<ProbeRow>,
    /// Nodes with a known shape (bundles and baselines).
    pub shape_nodes: usize,
    /// One entry per node and difference from its group's reference.
    pub shape: Vec<Difference>,
    pub undecided: Vec<Undecided>,
    /// Files that could not be read, one per file; each drains its node.
    pub unreadable: Vec<Unreadable>,
    /// Documents of one node that another of the same kind replaced.
    pub duplicates: Vec<Duplicate>,
    pub drain: Vec<Drain>,
    /// Nodes kept in service with a warning: a version their group's baseline records as a
    /// `fact` differs, or one it pins as `policy` is unknown on the node. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warn: Vec<Drain>,
}

impl Difference {
    /// For a drain reason: `"paths[*].path: NODE -> SYS (x3)"`.
    pub fn brief(&self) -> String {
        match self.subjects.len() {
            1 => self.describe(),
            n => format!("{}: {} -> {} (x{n})", self.field, self.expected, self.got),
        }
    }

    /// `"nics[pci0000:28/01.0/00.0]: present -> (missing)"`, `"paths[*].path: NODE -> ? (12: ...)"`.
    pub fn describe(&self) -> String {
        // One subject: the field as it is (`nics[pos].ports[port 1].rate`).
        let field = match self.subjects.as_slice() {
            [one] => one.split("][").fold(self.field.clone(), |f, s| {
                f.replacen("[*]", &format!("[{s}]"), 1)
            }),
            _ => self.field.clone(),
        };
        let mut s = format!("{field}: {} -> {}", self.expected, self.got);
        if self.subjects.len() > 1 {
            let shown: Vec<&str> = self.subjects.iter().take(4).map(String::as_str).collect();
            s.push_str(&format!(
                " ({} of them: {}{})",
                self.subjects.len(),
                shown.join(", "),
                if self.subjects.len() > 4 { ", ..." } else { "" }
            ));
        }
        s
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingChange {
    pub id: String,
    pub subject: String,
    /// "(absent)" where the node has no such finding.
    pub a: String,
    pub b: String,
    /// "worse" (B's verdict ranks lower: pass < skip < warn < fail), "better", or "other".
    pub change: &'static str,
    pub message_b: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct BandwidthChange {
    pub measurement: String,
    pub a_gbps: Option<f64>,
    pub b_gbps: Option<f64>,
    /// (b - a) / a, where both are known.
    pub change: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub a: String,
    pub b: String,
    pub status: [Option<String>; 2],
    /// Worse verdicts first, then better ones.
    pub checks: Vec<FindingChange>,
    /// Changes not listed (`diff --all` lists them): a subject judged pass in one node and not
    /// judged at all in the other (another GPU count, a NIC only one has).
    pub hidden: usize,
    /// B judged against A's shape (bundles): the baseline.* findings that are not pass.
    pub shape: Option<Vec<FindingIn>>,
    pub bandwidth: Vec<BandwidthChange>,
}
