//! Many nodes at once (`gpudoctor fleet`) and two nodes side by side (`gpudoctor diff`).
//!
//! Per check: how many nodes fail, warn or skip it, and which. Per probe measurement: the
//! median across nodes and the outliers by robust z-score (Iglewicz and Hoaglin's modified
//! z = 0.6745 (x - median) / MAD, |z| > 3.5 an outlier; where MAD is 0, the mean absolute
//! deviation times 1.2533 stands in, as in their fallback). Per shape field (from bundles,
//! where the topology is known): the nodes whose value differs from the majority. The nodes to
//! drain: those that failed a check, and those with a low bandwidth outlier.
//!
//! Pure: works on `NodeData` that `run::fleet` read from reports and bundles; must not read
//! files. The text tables are in `render::fleet`.

use crate::baseline::Baseline;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub const FLEET_SCHEMA: &str = "gpudoctor.fleet/1";
pub const DIFF_SCHEMA: &str = "gpudoctor.diff/1";

/// Modified z-score beyond which a value is an outlier (Iglewicz and Hoaglin, 1993).
pub const OUTLIER_Z: f64 = 3.5;

/// The part of a `gpudoctor.check/1` report the fleet view reads.
#[derive(Debug, Clone, Deserialize)]
pub struct CheckReportIn {
    pub schema: String,
    pub status: String,
    pub checks: Vec<FindingIn>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindingIn {
    pub id: String,
    pub subject: String,
    pub status: String,
    #[serde(default)]
    pub message: String,
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
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckRow {
    pub id: String,
    pub fail: Vec<String>,
    pub warn: Vec<String>,
    pub skip: Vec<String>,
    pub pass: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Outlier {
    pub node: String,
    pub gbps: f64,
    pub z: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProbeRow {
    pub measurement: String,
    pub n: usize,
    pub median_gbps: f64,
    /// The spread used for z: MAD, or 1.2533 x mean absolute deviation where MAD is 0.
    pub spread_gbps: f64,
    pub spread: &'static str,
    pub outliers: Vec<Outlier>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShapeRow {
    pub field: String,
    pub majority: String,
    pub majority_nodes: usize,
    /// node -> its value (absent: "(missing)").
    pub differ: BTreeMap<String, String>,
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
    pub nodes: usize,
    /// Nodes per overall status (nodes without a check report are not counted).
    pub status: BTreeMap<String, usize>,
    pub checks: Vec<CheckRow>,
    pub probes: Vec<ProbeRow>,
    /// Nodes with a known shape (bundles) and the fields where some differ from the majority.
    pub shape_nodes: usize,
    pub shape: Vec<ShapeRow>,
    pub drain: Vec<Drain>,
}

fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// Modified z-scores of `values` (same order), the median, the spread and its kind.
pub fn robust_z(values: &[f64]) -> (Vec<f64>, f64, f64, &'static str) {
    let mut s: Vec<f64> = values.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let med = median(&s);
    let mut dev: Vec<f64> = values.iter().map(|v| (v - med).abs()).collect();
    dev.sort_by(|a, b| a.total_cmp(b));
    let mad = median(&dev);
    if mad > 0.0 {
        let z = values.iter().map(|v| 0.6745 * (v - med) / mad).collect();
        return (z, med, mad, "mad");
    }
    let mean_ad = dev.iter().sum::<f64>() / dev.len().max(1) as f64;
    if mean_ad > 0.0 {
        let d = 1.253314 * mean_ad;
        let z = values.iter().map(|v| (v - med) / d).collect();
        return (z, med, d, "mean-absolute-deviation");
    }
    (vec![0.0; values.len()], med, 0.0, "none (all equal)")
}

/// The shape as flat `field -> value` pairs, keyed by PCI position (never by index).
pub fn flatten(b: &Baseline) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let v = serde_json::to_value(b).unwrap_or_default();
    fn walk(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
        match v {
            serde_json::Value::Object(o) => {
                for (k, x) in o {
                    // Informational fields differ between identical nodes (a model name is
                    // NVML's or the PCI database's; pci_id is compared).
                    if matches!(
                        k.as_str(),
                        "was" | "written_by" | "recorded_from" | "basis" | "model"
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
                        _ => i.to_string(),
                    };
                    walk(&format!("{prefix}[{key}]"), x, out);
                }
            }
            other => {
                out.insert(
                    prefix.trim_start_matches('.').to_string(),
                    other.to_string(),
                );
            }
        }
    }
    walk("", &v, &mut m);
    // Floors are measurements of one node, not its shape: the probe table compares those.
    m.retain(|k, _| !k.starts_with("bandwidth") && k != "schema");
    m
}

pub fn summarize(nodes: &[NodeData]) -> FleetReport {
    let mut status: BTreeMap<String, usize> = BTreeMap::new();
    for n in nodes {
        if let Some(s) = &n.status {
            *status.entry(s.clone()).or_default() += 1;
        }
    }
    // Per check: worst status per node.
    let mut per_check: BTreeMap<&str, BTreeMap<&str, u8>> = BTreeMap::new();
    let rank = |s: &str| match s {
        "pass" => 0u8,
        "skip" => 1,
        "warn" => 2,
        "fail" => 3,
        _ => 1,
    };
    for n in nodes {
        for f in &n.findings {
            let e = per_check
                .entry(f.id.as_str())
                .or_default()
                .entry(n.name.as_str())
                .or_insert(0);
            *e = (*e).max(rank(&f.status));
        }
    }
    let checks: Vec<CheckRow> = per_check
        .into_iter()
        .map(|(id, by_node)| {
            let mut row = CheckRow {
                id: id.to_string(),
                fail: Vec::new(),
                warn: Vec::new(),
                skip: Vec::new(),
                pass: 0,
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
        .collect();
    // Probes.
    let mut per_m: BTreeMap<&str, Vec<(&str, f64)>> = BTreeMap::new();
    for n in nodes {
        for (m, v) in &n.bandwidth_gbps {
            if v.is_finite() {
                per_m
                    .entry(m.as_str())
                    .or_default()
                    .push((n.name.as_str(), *v));
            }
        }
    }
    let mut drain: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let probes: Vec<ProbeRow> = per_m
        .into_iter()
        .map(|(m, vals)| {
            let xs: Vec<f64> = vals.iter().map(|(_, v)| *v).collect();
            let (z, med, spread, kind) = robust_z(&xs);
            let mut outliers: Vec<Outlier> = vals
                .iter()
                .zip(&z)
                .filter(|(_, z)| z.abs() > OUTLIER_Z)
                .map(|((node, v), z)| Outlier {
                    node: node.to_string(),
                    gbps: *v,
                    z: *z,
                })
                .collect();
            outliers.sort_by(|a, b| a.z.total_cmp(&b.z));
            for o in outliers.iter().filter(|o| o.z < -OUTLIER_Z) {
                drain.entry(o.node.clone()).or_default().push(format!(
                    "{m}: {:.1} GB/s, fleet median {med:.1} (z {:.1})",
                    o.gbps, o.z
                ));
            }
            ProbeRow {
                measurement: m.to_string(),
                n: vals.len(),
                median_gbps: med,
                spread_gbps: spread,
                spread: kind,
                outliers,
            }
        })
        .collect();
    for c in &checks {
        for n in &c.fail {
            drain
                .entry(n.clone())
                .or_default()
                .push(format!("{} failed", c.id));
        }
    }
    // Shape: majority value per field over nodes with a shape.
    let shaped: Vec<(&str, BTreeMap<String, String>)> = nodes
        .iter()
        .filter_map(|n| n.shape.as_ref().map(|s| (n.name.as_str(), flatten(s))))
        .collect();
    let fields: BTreeSet<&String> = shaped.iter().flat_map(|(_, f)| f.keys()).collect();
    let mut shape = Vec::new();
    for field in fields {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, f) in &shaped {
            *counts
                .entry(f.get(field).map_or("(missing)", String::as_str))
                .or_default() += 1;
        }
        if counts.len() < 2 {
            continue;
        }
        let (majority, majority_nodes) = counts
            .iter()
            .max_by(|a, b| a.1.cmp(b.1).then_with(|| b.0.cmp(a.0)))
            .map(|(v, c)| (v.to_string(), *c))
            .unwrap_or_default();
        let differ = shaped
            .iter()
            .filter_map(|(n, f)| {
                let v = f.get(field).map_or("(missing)", String::as_str);
                (v != majority).then(|| (n.to_string(), v.to_string()))
            })
            .collect();
        shape.push(ShapeRow {
            field: field.clone(),
            majority,
            majority_nodes,
            differ,
        });
    }
    FleetReport {
        schema: FLEET_SCHEMA,
        gpudoctor_version: env!("CARGO_PKG_VERSION"),
        nodes: nodes.len(),
        status,
        checks,
        probes,
        shape_nodes: shaped.len(),
        shape,
        drain: drain
            .into_iter()
            .map(|(node, reasons)| Drain { node, reasons })
            .collect(),
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct FindingChange {
    pub id: String,
    pub subject: String,
    /// "(absent)" where the node has no such finding.
    pub a: String,
    pub b: String,
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
    pub a: String,
    pub b: String,
    pub status: [Option<String>; 2],
    pub checks: Vec<FindingChange>,
    /// B judged against A's shape (bundles): the baseline.* findings that are not pass.
    pub shape: Option<Vec<FindingIn>>,
    pub bandwidth: Vec<BandwidthChange>,
}

/// Bandwidth changes smaller than this are noise between runs (the copy probes' run-to-run
/// spread on the recorded machines is within 2%).
pub const BANDWIDTH_NOISE: f64 = 0.05;

pub fn diff(a: &NodeData, b: &NodeData, shape: Option<Vec<FindingIn>>) -> DiffReport {
    let key = |n: &NodeData| -> BTreeMap<(String, String), FindingIn> {
        n.findings
            .iter()
            .map(|f| ((f.id.clone(), f.subject.clone()), f.clone()))
            .collect()
    };
    let (ka, kb) = (key(a), key(b));
    let keys: BTreeSet<&(String, String)> = ka.keys().chain(kb.keys()).collect();
    let mut checks = Vec::new();
    for k in keys {
        let sa = ka
            .get(k)
            .map_or("(absent)".to_string(), |f| f.status.clone());
        let sb = kb
            .get(k)
            .map_or("(absent)".to_string(), |f| f.status.clone());
        if sa != sb {
            checks.push(FindingChange {
                id: k.0.clone(),
                subject: k.1.clone(),
                a: sa,
                b: sb,
                message_b: kb.get(k).map(|f| f.message.clone()).unwrap_or_default(),
            });
        }
    }
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
        a: a.name.clone(),
        b: b.name.clone(),
        status: [a.status.clone(), b.status.clone()],
        checks,
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
}
