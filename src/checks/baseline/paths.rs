//! `baseline.paths`: the GPU-GPU and GPU-NIC path types of the matrix against the baseline's.

use super::node::Node;
use super::schema::Baseline;
use super::{ID_PATHS, skip};
use crate::checks::{Finding, Status, ev};
use std::collections::BTreeMap;

pub(super) fn compare(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
    let Some(expected) = &b.paths else {
        out.push(skip(ID_PATHS, "no \"paths\" in the baseline"));
        return;
    };
    let m = &node.topo.matrix;
    let ends = node.ends();
    // position -> (matrix index, display name)
    let mut at: BTreeMap<String, (usize, String)> = BTreeMap::new();
    for (i, l) in m.labels.iter().enumerate() {
        if let Some((pos, name)) = ends.get(l) {
            at.insert(pos.clone(), (i, name.clone()));
        }
    }
    // Looked up per pair: a set, not a search of the GPUs (cubic over the pairs).
    let nvlink_unknown: std::collections::BTreeSet<&str> = node
        .topo
        .gpus
        .iter()
        .filter(|g| g.nvlinks_active.is_none())
        .map(|g| g.label.as_str())
        .collect();
    let mut judged = 0usize;
    let mut absent = 0usize;
    let mut same = 0usize;
    for p in expected {
        let (Some((i, na)), Some((j, nb))) = (at.get(&p.a), at.get(&p.b)) else {
            // An end is missing: baseline.gpus / baseline.nics say so.
            absent += 1;
            continue;
        };
        judged += 1;
        let Some(cell) = m.paths.get(*i).and_then(|r| r.get(*j)).map(|p| p.cell()) else {
            continue;
        };
        let cell = &cell;
        // The cell's own certainty (both directions): searching `uncertain`, itself up to
        // every pair, for each expected pair was quartic in a node's functions.
        let certain = |r: usize, c: usize| {
            m.paths
                .get(r)
                .and_then(|row| row.get(c))
                .is_some_and(|p| p.certain)
        };
        let uncertain = !certain(*i, *j) || !certain(*j, *i);
        if cell == &p.path {
            same += 1;
            continue;
        }
        let subject = format!("{na}-{nb}");
        // An NVLink path can only be judged where NVML answered for both GPUs: without it the
        // matrix falls back to the PCIe path, which is not a finding about the wiring.
        let nvlink_unknown = |label: &str| nvlink_unknown.contains(label);
        if p.path.starts_with("NV")
            && (nvlink_unknown(&m.labels[*i]) || nvlink_unknown(&m.labels[*j]))
        {
            out.push(Finding::new(
                ID_PATHS,
                subject,
                Status::Skip,
                format!("{na} <-> {nb} expected {}: NVLink state unknown (NVML has no answer for this GPU), PCIe path is {cell}", p.path),
            ));
            continue;
        }
        if uncertain {
            out.push(Finding::new(
                ID_PATHS,
                subject,
                Status::Skip,
                format!("{na} <-> {nb} classified {cell} only from CPU affinity (NUMA unknown), expected {}", p.path),
            ));
            continue;
        }
        let rank = |c: &str| -> u8 {
            match c.trim_end_matches(|ch: char| ch.is_ascii_digit()) {
                "X" => 0,
                "NV" => 1,
                "PIX" => 2,
                "PXB" => 3,
                "PHB" => 4,
                "NODE" => 5,
                "SYS" => 6,
                _ => 7,
            }
        };
        let nv = |c: &str| c.strip_prefix("NV").and_then(|n| n.parse::<u32>().ok());
        let worse = match (nv(cell), nv(&p.path)) {
            (Some(h), Some(w)) => h < w,
            _ => rank(cell) > rank(&p.path),
        };
        out.push(
            Finding::new(
                ID_PATHS,
                subject,
                if worse { Status::Fail } else { Status::Warn },
                format!("{na} <-> {nb} is {cell}, expected {}", p.path),
            )
            .with(ev("baseline", format!("{} <-> {}: {}", p.a, p.b, p.path)))
            .with(ev("topology matrix", cell.clone()))
            .fix("A path worse than the model's means a device sits in another slot or behind another switch, or NUMA/ACS settings changed: compare `gpudoctor topo` with a healthy node of the model and move the card back"),
        );
    }
    if expected.is_empty() {
        out.push(Finding::new(
            ID_PATHS,
            "host",
            Status::Pass,
            "the baseline lists no GPU-GPU or GPU-NIC pairs (one GPU, no NIC)",
        ));
    } else if judged == 0 {
        out.push(skip(
            ID_PATHS,
            &format!(
                "none of the baseline's {} paths has both ends on this node",
                expected.len()
            ),
        ));
    } else if same == judged {
        out.push(Finding::new(
            ID_PATHS,
            "host",
            Status::Pass,
            format!(
                "{same} paths as in the baseline{}",
                if absent > 0 {
                    format!(" ({absent} with an end missing, see baseline.gpus/nics)")
                } else {
                    String::new()
                }
            ),
        ));
    }
}
