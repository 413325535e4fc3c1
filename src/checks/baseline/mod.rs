//! A server model's expected shape (`gpudoctor baseline`) and the comparison of a node against
//! it (`gpudoctor check --expect FILE`, findings under `baseline.*`).
//!
//! Devices are matched by their position in the PCI tree (root complex, then the device and
//! function number of every bridge on the way down, then the device's own), never by index or
//! bus number: bus numbers are handed out at enumeration and shift when a device above goes
//! missing, slot (device.function) numbers are wiring. A GPU that vanished therefore shows as
//! "missing at its position", and the GPUs after it keep being compared with their own
//! expectations instead of sliding one place up.
//!
//! Every field of the file is optional: a person deletes what they do not care about and that
//! part is not compared (its check reports skip, "not in the baseline"). Unknown is never pass:
//! a value that this node cannot read is a skip with the reason, not a match.
//!
//! This module must not read files or sysfs: it works on the inventory, the topology and probe
//! reports it is given, and on the text of the baseline file.

mod bandwidth;
mod bar1;
mod capture;
mod gpus;
mod nics;
mod node;
mod nvlink;
mod paths;
mod pcie;
mod schema;
pub mod silence;
mod versions;

pub use capture::capture;
pub use node::position;
pub use schema::*;

use crate::checks::{CheckId, Finding, Status, ev};
use crate::inventory::Inventory;
use crate::probes::ProbeReport;
use crate::topo::Topology;
use node::Node;
use std::collections::{BTreeMap, BTreeSet};

pub const ID_GPUS: CheckId = CheckId::BaselineGpus;
pub const ID_NICS: CheckId = CheckId::BaselineNics;
pub const ID_PATHS: CheckId = CheckId::BaselinePaths;
pub const ID_PCIE: CheckId = CheckId::BaselinePcie;
pub const ID_NVLINK: CheckId = CheckId::BaselineNvlink;
pub const ID_BAR1: CheckId = CheckId::BaselineBar1;
pub const ID_VERSIONS: CheckId = CheckId::BaselineVersions;
pub const ID_BANDWIDTH: CheckId = CheckId::BaselineBandwidth;

pub(super) const FIX_SHAPE: &str = "Compare the node with the server model: reseat or replace the missing or different device, check the BIOS (bifurcation, slot settings) and riser cabling; if the difference is intended, record a new baseline (`gpudoctor baseline -o FILE`) or delete the field from the baseline file";

/// Nothing to compare: the baseline does not ask for it (a field deleted by hand), or it is
/// compared at another level. Not a gap in what was read, so no `--fail-on-skip` failure.
pub(super) fn skip(id: CheckId, why: &str) -> Finding {
    Finding::new(id, "host", Status::Skip, why).not_applicable()
}

pub(super) fn gen_width(g: Option<u8>, w: Option<u8>) -> String {
    let g = g.map_or("Gen?".to_string(), |g| format!("Gen{g}"));
    let w = w.map_or("x?".to_string(), |w| format!("x{w}"));
    format!("{g} {w}")
}

/// The trained link; a GPU's trained speed is not part of the shape (idle downshift), so only
/// its width is shown.
pub(super) fn trained(g: Option<u8>, w: Option<u8>) -> String {
    match g {
        Some(_) => gen_width(g, w),
        None => w.map_or("x?".to_string(), |w| format!("x{w}")),
    }
}

/// Compare the node with the baseline. `probes` is None below level 1 (floors are then skipped).
pub fn compare(
    b: &Baseline,
    inv: &Inventory,
    topo: &Topology,
    probes: Option<&[ProbeReport]>,
) -> Vec<Finding> {
    let node = Node::new(inv, topo);
    let mut out = Vec::new();
    gpus::compare(b, &node, &mut out);
    nics::compare(b, &node, &mut out);
    paths::compare(b, &node, &mut out);
    versions::compare(b, &node, &mut out);
    bandwidth::compare(b, &node, probes, &mut out);
    out
}

/// Expected entries paired with this node's devices by position.
pub(super) struct Paired<'e, T> {
    /// (expectation, address, label) for each position found.
    pub(super) matched: Vec<(&'e T, crate::pci::Bdf, String)>,
    pub(super) missing: Vec<&'e T>,
    /// Devices at positions the baseline does not list: (address, label).
    pub(super) extra: Vec<(crate::pci::Bdf, String)>,
}

/// Pair expected entries with present (position, address, label) devices by position.
pub(super) fn pair<'e, T>(
    expected: &'e [T],
    pos_of: impl Fn(&T) -> &str,
    present: &[(String, crate::pci::Bdf, String)],
) -> Paired<'e, T> {
    let by_pos: BTreeMap<&str, (crate::pci::Bdf, &String)> = present
        .iter()
        .map(|(p, bdf, name)| (p.as_str(), (*bdf, name)))
        .collect();
    let wanted: BTreeSet<&str> = expected.iter().map(&pos_of).collect();
    let mut matched = Vec::new();
    let mut missing = Vec::new();
    for e in expected {
        match by_pos.get(pos_of(e)) {
            Some((bdf, name)) => matched.push((e, *bdf, (*name).clone())),
            None => missing.push(e),
        }
    }
    let extra = present
        .iter()
        .filter(|(p, _, _)| !wanted.contains(p.as_str()))
        .map(|(_, bdf, name)| (*bdf, name.clone()))
        .collect();
    Paired {
        matched,
        missing,
        extra,
    }
}

pub(super) fn count_finding(
    id: CheckId,
    what: &str,
    want: usize,
    have: usize,
    missing: &[String],
    extra: &[String],
    out: &mut Vec<Finding>,
) {
    if missing.is_empty() && extra.is_empty() {
        out.push(Finding::new(
            id,
            "host",
            Status::Pass,
            format!("{have} {what}s at the baseline's positions"),
        ));
        return;
    }
    let mut msg = format!("{have} {what}s, expected {want}");
    if !missing.is_empty() {
        msg.push_str(&format!("; missing: {}", missing.join(", ")));
    }
    if !extra.is_empty() {
        msg.push_str(&format!("; not in the baseline: {}", extra.join(", ")));
    }
    out.push(
        Finding::new(id, "host", Status::Fail, msg)
            .with(ev("baseline", format!("{want} {what}s")))
            .with(ev("this node", format!("{have} {what}s")))
            .fix(FIX_SHAPE),
    );
}
