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

use crate::checks::{CheckId, Finding, Status, ev};
use crate::inventory::{Inventory, PciFunction};
use crate::probes::ProbeReport;
use crate::topo::{Device, Topology};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub const BASELINE_SCHEMA: &str = "gpudoctor.baseline/1";

pub const ID_GPUS: CheckId = CheckId::BaselineGpus;
pub const ID_NICS: CheckId = CheckId::BaselineNics;
pub const ID_PATHS: CheckId = CheckId::BaselinePaths;
pub const ID_PCIE: CheckId = CheckId::BaselinePcie;
pub const ID_NVLINK: CheckId = CheckId::BaselineNvlink;
pub const ID_BAR1: CheckId = CheckId::BaselineBar1;
pub const ID_VERSIONS: CheckId = CheckId::BaselineVersions;
pub const ID_BANDWIDTH: CheckId = CheckId::BaselineBandwidth;

/// Fraction of a measured median kept as the floor when a baseline records bandwidth: run-to-run
/// spread of the copy probes on the recorded H100/H200 machines is within 2%, so 90% leaves
/// room for noise and still catches a link running at half rate.
pub const FLOOR_FRACTION: f64 = 0.9;

/// The expected shape of a server model. Every field but `schema` may be deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub schema: String,
    /// Informational: what wrote it, from where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_from: Option<String>,
    /// GPUs by PCI position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuShape>>,
    /// RDMA NICs by PCI position (software RDMA devices are not part of a server's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics: Option<Vec<NicShape>>,
    /// Path type for every GPU-GPU and GPU-NIC pair, as `nvidia-smi topo -m` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<PathShape>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Versions>,
    /// Bandwidth floors from recorded probe samples (level 1), compared at `check --level 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Vec<Floor>>,
}

/// A PCIe link: what the device can reach in its slot, and the width it trained at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieShape {
    /// Highest generation the device and the port above it both support (a Gen5 card in a
    /// Gen4 slot is Gen4 here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gen: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u8>,
    /// Trained width. (The trained speed of a GPU is not part of the shape: GPUs lower it when
    /// idle; pcie.link-speed and the level-1 probes judge it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cur_width: Option<u8>,
    /// Trained generation, NICs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cur_gen: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuShape {
    /// PCI position: `pci0000:c0/01.1/00.0` (root complex, bridge slots, own slot).
    pub position: String,
    /// Informational: the label and address on the node it was recorded from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// `vendor:device` PCI ids (compared), with the model name (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieShape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar1_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks_active: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicPortShape {
    pub port: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicShape {
    pub position: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieShape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<NicPortShape>>,
    /// This NIC's firmware, written only where NICs of one model disagreed on the recorded
    /// node (otherwise `versions.nic_firmware` holds one value per model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Pinned>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathShape {
    /// Positions of the two ends (a GPU, then a GPU or NIC).
    pub a: String,
    pub b: String,
    /// Informational: the ends' names on the recorded node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// The cell as `nvidia-smi topo -m` prints it: NV18, PIX, PXB, PHB, NODE, SYS.
    pub path: String,
}

/// How a version difference counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforce {
    /// The fleet pins it: a different value fails.
    Policy,
    /// Recorded for reference: a different value warns.
    Fact,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub value: String,
    pub enforce: Enforce,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_driver: Option<Pinned>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver: Option<Pinned>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Pinned>,
    /// Firmware per NIC model (hca_type or board_id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nic_firmware: BTreeMap<String, Pinned>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Floor {
    pub probe: String,
    pub method: String,
    /// `host` or a GPU position.
    pub src: String,
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    pub min_gbps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("not a gpudoctor baseline: {0}")]
    Parse(String),
    #[error("schema '{found}' is not {BASELINE_SCHEMA} (written by another gpudoctor version?)")]
    Schema { found: String },
    #[error("{0}")]
    Invalid(String),
}

impl Baseline {
    pub fn parse(text: &str) -> Result<Baseline, BaselineError> {
        // Schema first, so a future schema gets a clear message rather than a field error.
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| BaselineError::Parse(e.to_string()))?;
        match v.get("schema").and_then(|s| s.as_str()) {
            Some(BASELINE_SCHEMA) => {}
            Some(other) => {
                return Err(BaselineError::Schema {
                    found: other.to_string(),
                });
            }
            None => {
                return Err(BaselineError::Parse(
                    "no \"schema\" field (expected \"gpudoctor.baseline/1\")".into(),
                ));
            }
        }
        let b: Baseline =
            serde_json::from_value(v).map_err(|e| BaselineError::Parse(e.to_string()))?;
        for list in [
            b.gpus
                .iter()
                .flatten()
                .map(|g| &g.position)
                .collect::<Vec<_>>(),
            b.nics.iter().flatten().map(|n| &n.position).collect(),
        ] {
            let mut seen = BTreeSet::new();
            for p in list {
                if !seen.insert(p) {
                    return Err(BaselineError::Invalid(format!(
                        "position {p} is listed twice"
                    )));
                }
            }
        }
        if let Some(f) = b
            .bandwidth
            .iter()
            .flatten()
            .find(|f| !f.min_gbps.is_finite() || f.min_gbps < 0.0)
        {
            return Err(BaselineError::Invalid(format!(
                "bandwidth floor {} {} {}->{}: min_gbps must be a non-negative number",
                f.probe, f.method, f.src, f.dst
            )));
        }
        Ok(b)
    }
}

/// The PCI position of a function: root complex, the slot of every bridge above it, its own
/// slot. Stable across identical machines and across a device above it going missing.
pub fn position(f: &PciFunction) -> String {
    let mut s = f.root_complex.clone();
    for b in f.upstream.iter().chain(std::iter::once(&f.bdf)) {
        s.push_str(&format!("/{:02x}.{:x}", b.device, b.function));
    }
    s
}

/// The kernel release from `/proc/version` ("Linux version 6.8.0-45-generic (builder...) ..."
/// gives "6.8.0-45-generic"): the build host and date are not part of a version to pin.
fn kernel_release(inv: &Inventory) -> Option<String> {
    let line = inv.host.kernel_version.as_deref()?;
    let rest = line.trim().strip_prefix("Linux version ")?;
    rest.split_whitespace().next().map(str::to_string)
}

/// The node's devices, indexed the ways a comparison needs.
struct Node<'a> {
    inv: &'a Inventory,
    topo: &'a Topology,
    devices: BTreeMap<crate::pci::Bdf, &'a Device>,
}

impl<'a> Node<'a> {
    fn new(inv: &'a Inventory, topo: &'a Topology) -> Self {
        Node {
            inv,
            topo,
            devices: topo.devices.iter().map(|d| (d.bdf, d)).collect(),
        }
    }

    fn position(&self, bdf: crate::pci::Bdf) -> String {
        match self.inv.pci.get(&bdf) {
            Some(f) => position(f),
            None => format!("?/{bdf}"),
        }
    }

    fn pci_id(&self, bdf: crate::pci::Bdf) -> Option<String> {
        let f = self.inv.pci.get(&bdf)?;
        Some(format!("{:04x}:{:04x}", f.vendor?, f.device?))
    }

    /// The link as the baseline sees it: capability capped by the port above.
    fn pcie(&self, bdf: crate::pci::Bdf, with_gen: bool) -> PcieShape {
        let d = self.devices.get(&bdf);
        let link = d.map(|d| &d.link);
        let parent = d
            .and_then(|d| d.upstream.last())
            .and_then(|p| self.devices.get(p));
        let cap = |own: Option<u8>, up: Option<u8>| match (own, up) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, _) => None,
        };
        PcieShape {
            max_gen: cap(
                link.and_then(|l| l.max_gen),
                parent.and_then(|p| p.link.max_gen),
            ),
            max_width: cap(
                link.and_then(|l| l.max_width),
                parent.and_then(|p| p.link.max_width),
            ),
            cur_width: link.and_then(|l| l.cur_width),
            cur_gen: if with_gen {
                link.and_then(|l| l.cur_gen)
            } else {
                None
            },
        }
    }

    /// Label -> (position, display name) for GPUs and NICs.
    fn ends(&self) -> BTreeMap<String, (String, String)> {
        let mut m = BTreeMap::new();
        for g in &self.topo.gpus {
            m.insert(g.label.clone(), (self.position(g.bdf), g.label.clone()));
        }
        for n in &self.topo.nics {
            m.insert(
                n.label.clone(),
                (self.position(n.bdf), n.rdma_device.clone()),
            );
        }
        m
    }

    fn nic_model(&self, rdma_device: &str) -> Option<String> {
        let r = self.inv.rdma.iter().find(|r| r.name == rdma_device)?;
        r.hca_type.clone().or_else(|| r.board_id.clone())
    }

    fn nic_fw(&self, rdma_device: &str) -> Option<String> {
        self.inv
            .rdma
            .iter()
            .find(|r| r.name == rdma_device)?
            .fw_ver
            .clone()
    }
}

/// Record the shape of this node. `probes` are level-1 reports (recorded or measured); each
/// measurement with statistics becomes a floor at `FLOOR_FRACTION` of its median.
pub fn capture(
    inv: &Inventory,
    topo: &Topology,
    probes: &[ProbeReport],
    recorded_from: &str,
) -> Baseline {
    let node = Node::new(inv, topo);
    let gpus = topo
        .gpus
        .iter()
        .map(|g| GpuShape {
            position: node.position(g.bdf),
            was: Some(format!("{} {}", g.label, g.bdf)),
            pci_id: node.pci_id(g.bdf),
            model: Some(g.name.clone()),
            pcie: Some(node.pcie(g.bdf, false)),
            bar1_bytes: g.bar1_total_bytes,
            nvlinks_active: g.nvlinks_active,
        })
        .collect();
    let nics = topo
        .nics
        .iter()
        .map(|n| NicShape {
            position: node.position(n.bdf),
            was: Some(format!("{} {} {}", n.label, n.rdma_device, n.bdf)),
            pci_id: node.pci_id(n.bdf),
            model: Some(n.name.clone()),
            pcie: Some(node.pcie(n.bdf, true)),
            ports: Some(
                n.ports
                    .iter()
                    .map(|p| NicPortShape {
                        port: p.port,
                        link_layer: p.link_layer.clone(),
                        rate: p.rate.clone(),
                    })
                    .collect(),
            ),
            firmware: None,
        })
        .collect();
    let ends = node.ends();
    let m = &topo.matrix;
    let mut paths = Vec::new();
    for (i, a) in m.labels.iter().enumerate() {
        if !a.starts_with("GPU") {
            continue;
        }
        for (j, b) in m.labels.iter().enumerate().skip(i + 1) {
            let (Some((pa, na)), Some((pb, nb))) = (ends.get(a), ends.get(b)) else {
                continue;
            };
            // An uncertain cell (NUMA unknown) is not a fact worth pinning.
            if m.uncertain.iter().any(|[r, c]| r == a && c == b) {
                continue;
            }
            if let Some(cell) = m.cells.get(i).and_then(|r| r.get(j)) {
                paths.push(PathShape {
                    a: pa.clone(),
                    b: pb.clone(),
                    was: Some(format!("{na} <-> {nb}")),
                    path: cell.clone(),
                });
            }
        }
    }
    let pinned = |v: Option<String>, enforce| v.map(|value| Pinned { value, enforce });
    // One firmware per model where the node's NICs of that model agree; where they do not
    // (rdma.fw-consistency warns), each NIC keeps its own, so the node matches its own baseline.
    let mut by_model: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for n in &topo.nics {
        if let (Some(model), Some(fw)) =
            (node.nic_model(&n.rdma_device), node.nic_fw(&n.rdma_device))
        {
            by_model.entry(model).or_default().insert(fw);
        }
    }
    let mut nic_firmware = BTreeMap::new();
    for (model, fws) in &by_model {
        if let [fw] = fws.iter().collect::<Vec<_>>()[..] {
            nic_firmware.insert(
                model.clone(),
                Pinned {
                    value: fw.clone(),
                    enforce: Enforce::Policy,
                },
            );
        }
    }
    let mut nics: Vec<NicShape> = nics;
    for (shape, n) in nics.iter_mut().zip(&topo.nics) {
        let mixed = node
            .nic_model(&n.rdma_device)
            .is_some_and(|m| by_model.get(&m).is_some_and(|f| f.len() > 1));
        if mixed {
            shape.firmware = pinned(node.nic_fw(&n.rdma_device), Enforce::Policy);
        }
    }
    let versions = Versions {
        nvidia_driver: pinned(inv.nvml.driver_version.clone(), Enforce::Policy),
        cuda_driver: pinned(
            inv.nvml.cuda_driver_version.map(|v| v.to_string()),
            Enforce::Fact,
        ),
        kernel: pinned(kernel_release(inv), Enforce::Fact),
        nic_firmware,
    };
    let mut floors = Vec::new();
    let label_pos = |l: &str| -> Option<String> {
        if l == "host" {
            return Some("host".into());
        }
        ends.get(l).map(|(p, _)| p.clone())
    };
    for r in probes {
        for ms in &r.measurements {
            let (Some(stats), Some(src), Some(dst)) = (
                ms.evaluation.stats.as_ref(),
                label_pos(&ms.src),
                label_pos(&ms.dst),
            ) else {
                continue;
            };
            let floor = (stats.median_gbps * FLOOR_FRACTION * 10.0).floor() / 10.0;
            floors.push(Floor {
                probe: ms.probe.as_str().to_string(),
                method: ms.method.as_str().to_string(),
                src,
                dst,
                was: Some(format!("{} -> {}", ms.src, ms.dst)),
                min_gbps: floor,
                basis: Some(format!(
                    "{:.0}% of the recorded median {:.1} GB/s (n={})",
                    FLOOR_FRACTION * 100.0,
                    stats.median_gbps,
                    stats.n
                )),
            });
        }
    }
    Baseline {
        schema: BASELINE_SCHEMA.to_string(),
        written_by: Some(format!("gpudoctor {}", env!("CARGO_PKG_VERSION"))),
        recorded_from: Some(recorded_from.to_string()),
        gpus: Some(gpus),
        nics: Some(nics),
        paths: Some(paths),
        versions: Some(versions),
        bandwidth: if floors.is_empty() {
            None
        } else {
            Some(floors)
        },
    }
}

const FIX_SHAPE: &str = "Compare the node with the server model: reseat or replace the missing or different device, check the BIOS (bifurcation, slot settings) and riser cabling; if the difference is intended, record a new baseline (`gpudoctor baseline -o FILE`) or delete the field from the baseline file";

/// Nothing to compare: the baseline does not ask for it (a field deleted by hand), or it is
/// compared at another level. Not a gap in what was read, so no `--fail-on-skip` failure.
fn skip(id: CheckId, why: &str) -> Finding {
    Finding::new(id, "host", Status::Skip, why).not_applicable()
}

fn gen_width(g: Option<u8>, w: Option<u8>) -> String {
    let g = g.map_or("Gen?".to_string(), |g| format!("Gen{g}"));
    let w = w.map_or("x?".to_string(), |w| format!("x{w}"));
    format!("{g} {w}")
}

/// The trained link; a GPU's trained speed is not part of the shape (idle downshift), so only
/// its width is shown.
fn trained(g: Option<u8>, w: Option<u8>) -> String {
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
    compare_gpus(b, &node, &mut out);
    compare_nics(b, &node, &mut out);
    compare_paths(b, &node, &mut out);
    compare_versions(b, &node, &mut out);
    compare_floors(b, &node, probes, &mut out);
    out
}

/// Expected entries paired with this node's devices by position.
struct Paired<'e, T> {
    /// (expectation, address, label) for each position found.
    matched: Vec<(&'e T, crate::pci::Bdf, String)>,
    missing: Vec<&'e T>,
    /// Devices at positions the baseline does not list: (address, label).
    extra: Vec<(crate::pci::Bdf, String)>,
}

/// Pair expected entries with present (position, address, label) devices by position.
fn pair<'e, T>(
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

fn compare_pcie(
    who: &str,
    subject: &str,
    want: &PcieShape,
    have: &PcieShape,
    out: &mut Vec<Finding>,
) -> bool {
    let mut differs = false;
    let mut unknown = Vec::new();
    let mut worse = false;
    let mut check = |name: &str, w: Option<u8>, h: Option<u8>| {
        if let Some(w) = w {
            match h {
                None => unknown.push(name.to_string()),
                Some(h) if h != w => {
                    differs = true;
                    if h < w {
                        worse = true;
                    }
                }
                _ => {}
            }
        }
    };
    check("max link speed", want.max_gen, have.max_gen);
    check("max link width", want.max_width, have.max_width);
    check("link width", want.cur_width, have.cur_width);
    check("link speed", want.cur_gen, have.cur_gen);
    let evidence = vec![
        ev(
            "baseline",
            format!(
                "capable {}, trained {}",
                gen_width(want.max_gen, want.max_width),
                trained(want.cur_gen, want.cur_width)
            ),
        ),
        ev(
            "PCIe link: LnkCap/LnkSta (sysfs link attributes when config space is short), capped by the port above",
            format!(
                "capable {}, trained {}",
                gen_width(have.max_gen, have.max_width),
                trained(have.cur_gen, have.cur_width)
            ),
        ),
    ];
    if differs {
        let (status, expect_text) = if worse {
            (Status::Fail, "expected")
        } else {
            (Status::Warn, "better than the baseline's")
        };
        let trained_have = gen_width(have.cur_gen.or(have.max_gen), have.cur_width);
        let trained_want = gen_width(want.cur_gen.or(want.max_gen), want.cur_width);
        let msg = if have.max_gen != want.max_gen || have.max_width != want.max_width {
            format!(
                "{who} capable of {}, {expect_text} {} (trained width x{})",
                gen_width(have.max_gen, have.max_width),
                gen_width(want.max_gen, want.max_width),
                have.cur_width.map_or("?".into(), |w| w.to_string())
            )
        } else {
            format!("{who} {trained_have}, {expect_text} {trained_want}")
        };
        out.push(
            Finding::new(ID_PCIE, subject, status, msg)
                .evidence(evidence)
                .fix(FIX_SHAPE),
        );
    } else if !unknown.is_empty() {
        out.push(
            Finding::new(
                ID_PCIE,
                subject,
                Status::Skip,
                format!("{who}: {} unreadable", unknown.join(", ")),
            )
            .evidence(evidence),
        );
    } else {
        out.push(
            Finding::new(
                ID_PCIE,
                subject,
                Status::Pass,
                format!("{who} link as in the baseline"),
            )
            .evidence(evidence),
        );
    }
    differs
}

fn count_finding(
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

fn compare_gpus(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
    let Some(expected) = &b.gpus else {
        for id in [ID_GPUS, ID_PCIE, ID_NVLINK, ID_BAR1] {
            out.push(skip(id, "no \"gpus\" in the baseline"));
        }
        return;
    };
    let present: Vec<(String, crate::pci::Bdf, String)> = node
        .topo
        .gpus
        .iter()
        .map(|g| (node.position(g.bdf), g.bdf, g.label.clone()))
        .collect();
    let Paired {
        matched,
        missing,
        extra,
    } = pair(expected, |g| &g.position, &present);
    let describe = |g: &GpuShape| {
        format!(
            "{} at {}{}",
            g.model.as_deref().unwrap_or("GPU"),
            g.position,
            g.was
                .as_deref()
                .map(|w| format!(" (was {w})"))
                .unwrap_or_default()
        )
    };
    count_finding(
        ID_GPUS,
        "GPU",
        expected.len(),
        present.len(),
        &missing.iter().map(|g| describe(g)).collect::<Vec<_>>(),
        &extra
            .iter()
            .map(|(bdf, l)| format!("{l} {bdf} at {}", node.position(*bdf)))
            .collect::<Vec<_>>(),
        out,
    );
    let topo_gpu = |bdf| node.topo.gpu_at(bdf);
    let (mut nv_judged, mut bar_judged, mut pcie_judged) = (false, false, false);
    for (want, bdf, label) in matched {
        let Some(g) = topo_gpu(bdf) else { continue };
        let subject = bdf.to_string();
        let who = format!("{label} {bdf}");
        // Model, by PCI ids.
        if let Some(want_id) = &want.pci_id {
            match node.pci_id(bdf) {
                Some(id) if &id != want_id => out.push(
                    Finding::new(
                        ID_GPUS,
                        subject.clone(),
                        Status::Fail,
                        format!(
                            "{who} is {} [{id}], expected {} [{want_id}]",
                            g.name,
                            want.model.as_deref().unwrap_or("?")
                        ),
                    )
                    .fix(FIX_SHAPE),
                ),
                Some(_) => out.push(Finding::new(
                    ID_GPUS,
                    subject.clone(),
                    Status::Pass,
                    format!("{who} is the expected model ({})", g.name),
                )),
                None => out.push(Finding::new(
                    ID_GPUS,
                    subject.clone(),
                    Status::Skip,
                    format!("{who}: PCI vendor/device id unreadable"),
                )),
            }
        }
        if let Some(want_pcie) = &want.pcie {
            pcie_judged = true;
            compare_pcie(&who, &subject, want_pcie, &node.pcie(bdf, false), out);
        }
        if let Some(w) = want.nvlinks_active {
            nv_judged = true;
            out.push(match g.nvlinks_active {
                None => Finding::new(
                    ID_NVLINK,
                    subject.clone(),
                    Status::Skip,
                    format!(
                        "{who}: NVLink state unknown ({})",
                        g.nvml_missing.as_deref().unwrap_or("NVML gave no link state")
                    ),
                ),
                Some(h) if h < w => Finding::new(
                    ID_NVLINK,
                    subject.clone(),
                    Status::Fail,
                    format!("{who} has {h} NVLinks active, expected {w}"),
                )
                .with(ev("nvmlDeviceGetNvLinkState", format!("{h} active")))
                .fix("Check `nvidia-smi nvlink -s` and the NVSwitch/fabric manager state; a link that stays down after a reboot is a hardware fault (baseboard, GPU)"),
                Some(h) if h > w => Finding::new(
                    ID_NVLINK,
                    subject.clone(),
                    Status::Warn,
                    format!("{who} has {h} NVLinks active, the baseline expected only {w}"),
                )
                .fix(FIX_SHAPE),
                Some(h) => Finding::new(
                    ID_NVLINK,
                    subject.clone(),
                    Status::Pass,
                    format!("{who}: {h} NVLinks active, as expected"),
                ),
            });
        }
        if let Some(w) = want.bar1_bytes {
            bar_judged = true;
            let gib = |v: u64| format!("{:.0} MiB", v as f64 / (1u64 << 20) as f64);
            out.push(match g.bar1_total_bytes {
                None => Finding::new(
                    ID_BAR1,
                    subject.clone(),
                    Status::Skip,
                    format!("{who}: BAR1 size unknown (NVML)"),
                ),
                Some(h) if h < w => Finding::new(
                    ID_BAR1,
                    subject.clone(),
                    Status::Fail,
                    format!("{who} BAR1 {}, expected {}", gib(h), gib(w)),
                )
                .with(ev("nvmlDeviceGetBAR1MemoryInfo", gib(h)))
                .fix("Enable Above 4G decoding and Resizable BAR in the BIOS (for a VM: the hypervisor's MMIO window for the passed-through GPU)"),
                Some(h) if h != w => Finding::new(
                    ID_BAR1,
                    subject.clone(),
                    Status::Warn,
                    format!("{who} BAR1 {}, the baseline recorded {}", gib(h), gib(w)),
                )
                .fix(FIX_SHAPE),
                Some(h) => Finding::new(
                    ID_BAR1,
                    subject.clone(),
                    Status::Pass,
                    format!("{who} BAR1 {}, as expected", gib(h)),
                ),
            });
        }
    }
    for (id, judged) in [
        (ID_NVLINK, nv_judged),
        (ID_BAR1, bar_judged),
        (ID_PCIE, pcie_judged),
    ] {
        if !judged && !out.iter().any(|f| f.id == id) {
            out.push(skip(id, "nothing to compare (no field in the baseline, or no GPU at the baseline's positions)"));
        }
    }
}

fn compare_nics(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
    let Some(expected) = &b.nics else {
        out.push(skip(ID_NICS, "no \"nics\" in the baseline"));
        return;
    };
    let present: Vec<(String, crate::pci::Bdf, String)> = node
        .topo
        .nics
        .iter()
        .map(|n| (node.position(n.bdf), n.bdf, n.rdma_device.clone()))
        .collect();
    let Paired {
        matched,
        missing,
        extra,
    } = pair(expected, |n| &n.position, &present);
    count_finding(
        ID_NICS,
        "NIC",
        expected.len(),
        present.len(),
        &missing
            .iter()
            .map(|n| {
                format!(
                    "{} at {}{}",
                    n.model.as_deref().unwrap_or("NIC"),
                    n.position,
                    n.was
                        .as_deref()
                        .map(|w| format!(" (was {w})"))
                        .unwrap_or_default()
                )
            })
            .collect::<Vec<_>>(),
        &extra
            .iter()
            .map(|(bdf, name)| format!("{name} {bdf} at {}", node.position(*bdf)))
            .collect::<Vec<_>>(),
        out,
    );
    for (want, bdf, rdma) in matched {
        let Some(n) = node.topo.nics.iter().find(|n| n.bdf == bdf) else {
            continue;
        };
        let subject = rdma.clone();
        let who = format!("{rdma} {bdf}");
        if let Some(want_id) = &want.pci_id {
            match node.pci_id(bdf) {
                Some(id) if &id != want_id => out.push(
                    Finding::new(
                        ID_NICS,
                        subject.clone(),
                        Status::Fail,
                        format!(
                            "{who} is {} [{id}], expected {} [{want_id}]",
                            n.name,
                            want.model.as_deref().unwrap_or("?")
                        ),
                    )
                    .fix(FIX_SHAPE),
                ),
                Some(_) => {}
                None => out.push(Finding::new(
                    ID_NICS,
                    subject.clone(),
                    Status::Skip,
                    format!("{who}: PCI vendor/device id unreadable"),
                )),
            }
        }
        if let Some(ports) = &want.ports {
            for wp in ports {
                let hp = n.ports.iter().find(|p| p.port == wp.port);
                let Some(hp) = hp else {
                    out.push(
                        Finding::new(
                            ID_NICS,
                            format!("{rdma}/{}", wp.port),
                            Status::Fail,
                            format!("{who} has no port {}", wp.port),
                        )
                        .fix(FIX_SHAPE),
                    );
                    continue;
                };
                let mut diffs = Vec::new();
                let mut unknown = Vec::new();
                for (name, w, h) in [
                    ("link layer", &wp.link_layer, &hp.link_layer),
                    ("rate", &wp.rate, &hp.rate),
                ] {
                    match (w, h) {
                        (Some(w), Some(h)) if w != h => {
                            diffs.push(format!("{name} {h}, expected {w}"))
                        }
                        (Some(_), None) => unknown.push(name),
                        _ => {}
                    }
                }
                let sub = format!("{rdma}/{}", wp.port);
                if !diffs.is_empty() {
                    out.push(
                        Finding::new(ID_NICS, sub, Status::Fail, format!("{rdma} port {}: {}", wp.port, diffs.join("; ")))
                            .fix("Check the cable, the switch port's speed settings and the NIC's port type (mlxconfig LINK_TYPE); a port that negotiated a lower rate is often a bad cable or transceiver"),
                    );
                } else if !unknown.is_empty() {
                    out.push(Finding::new(
                        ID_NICS,
                        sub,
                        Status::Skip,
                        format!("{rdma} port {}: {} unreadable", wp.port, unknown.join(", ")),
                    ));
                }
            }
        }
        out.push(Finding::new(
            ID_NICS,
            subject.clone(),
            Status::Pass,
            format!("{who} at the baseline's position"),
        ));
        if let Some(want_pcie) = &want.pcie {
            compare_pcie(&who, &subject, want_pcie, &node.pcie(bdf, true), out);
        }
    }
    // A NIC that passes but also has a failing port finding: drop its pass (worst wins per
    // subject prefix is left to the renderer; keep findings honest instead).
    let failing: BTreeSet<String> = out
        .iter()
        .filter(|f| f.id == ID_NICS && f.status != Status::Pass)
        .map(|f| f.subject.split('/').next().unwrap_or("").to_string())
        .collect();
    out.retain(|f| !(f.id == ID_NICS && f.status == Status::Pass && failing.contains(&f.subject)));
}

fn compare_paths(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
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
        let Some(cell) = m.cells.get(*i).and_then(|r| r.get(*j)) else {
            continue;
        };
        let uncertain = m.uncertain.iter().any(|[r, c]| {
            (r == &m.labels[*i] && c == &m.labels[*j]) || (r == &m.labels[*j] && c == &m.labels[*i])
        });
        if cell == &p.path {
            same += 1;
            continue;
        }
        let subject = format!("{na}-{nb}");
        // An NVLink path can only be judged where NVML answered for both GPUs: without it the
        // matrix falls back to the PCIe path, which is not a finding about the wiring.
        let nvlink_unknown = |label: &str| {
            node.topo
                .gpus
                .iter()
                .find(|g| g.label == label)
                .is_some_and(|g| g.nvlinks_active.is_none())
        };
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

fn compare_versions(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
    let empty = Versions::default();
    let v = b.versions.as_ref().unwrap_or(&empty);
    let before = out.len();
    let mut one = |subject: String,
                   what: &str,
                   want: &Pinned,
                   have: Option<String>,
                   source: &str| {
        out.push(match have {
            None => Finding::new(
                ID_VERSIONS,
                subject,
                Status::Skip,
                format!("{what} unknown on this node"),
            ),
            Some(h) if h == want.value => Finding::new(
                ID_VERSIONS,
                subject,
                Status::Pass,
                format!("{what} {h}, as expected"),
            ),
            Some(h) => Finding::new(
                ID_VERSIONS,
                subject,
                match want.enforce {
                    Enforce::Policy => Status::Fail,
                    Enforce::Fact => Status::Warn,
                },
                format!(
                    "{what} {h}, expected {} ({})",
                    want.value,
                    match want.enforce {
                        Enforce::Policy => "policy",
                        Enforce::Fact => "recorded fact",
                    }
                ),
            )
            .with(ev(source, h))
            .fix(format!("Install the fleet's {what} {} (or, if the change is intended, update the baseline)", want.value)),
        });
    };
    if let Some(p) = &v.nvidia_driver {
        one(
            "host".into(),
            "NVIDIA driver",
            p,
            node.inv.nvml.driver_version.clone(),
            "nvmlSystemGetDriverVersion",
        );
    }
    if let Some(p) = &v.cuda_driver {
        one(
            "host".into(),
            "CUDA driver API version",
            p,
            node.inv.nvml.cuda_driver_version.map(|v| v.to_string()),
            "nvmlSystemGetCudaDriverVersion",
        );
    }
    if let Some(p) = &v.kernel {
        one(
            "host".into(),
            "kernel",
            p,
            kernel_release(node.inv),
            "/proc/version",
        );
    }
    for (model, p) in &v.nic_firmware {
        let nics: Vec<&str> = node
            .topo
            .nics
            .iter()
            .map(|n| n.rdma_device.as_str())
            .filter(|n| node.nic_model(n).as_deref() == Some(model))
            .collect();
        for n in nics {
            one(
                n.to_string(),
                &format!("{model} firmware"),
                p,
                node.nic_fw(n),
                "/sys/class/infiniband/*/fw_ver",
            );
        }
    }
    for want in b.nics.iter().flatten() {
        let Some(p) = &want.firmware else { continue };
        let Some(n) = node
            .topo
            .nics
            .iter()
            .find(|n| node.position(n.bdf) == want.position)
        else {
            continue; // missing: baseline.nics says so
        };
        one(
            n.rdma_device.clone(),
            "NIC firmware",
            p,
            node.nic_fw(&n.rdma_device),
            "/sys/class/infiniband/*/fw_ver",
        );
    }
    if out.len() == before {
        out.push(skip(
            ID_VERSIONS,
            if b.versions.is_none() {
                "no \"versions\" in the baseline"
            } else {
                "nothing to compare"
            },
        ));
    }
}

fn compare_floors(
    b: &Baseline,
    node: &Node,
    probes: Option<&[ProbeReport]>,
    out: &mut Vec<Finding>,
) {
    let Some(floors) = &b.bandwidth else {
        out.push(skip(
            ID_BANDWIDTH,
            "no \"bandwidth\" floors in the baseline",
        ));
        return;
    };
    let Some(probes) = probes else {
        out.push(skip(
            ID_BANDWIDTH,
            "bandwidth floors are compared at --level 1 (probe samples)",
        ));
        return;
    };
    let ends = node.ends();
    let pos_label: BTreeMap<&str, &str> = ends
        .iter()
        .map(|(l, (p, _))| (p.as_str(), l.as_str()))
        .collect();
    let label = |p: &str| -> Option<String> {
        if p == "host" {
            Some("host".into())
        } else {
            pos_label.get(p).map(|s| s.to_string())
        }
    };
    for f in floors {
        let subject = format!("{} {}", f.probe, f.method);
        let (Some(src), Some(dst)) = (label(&f.src), label(&f.dst)) else {
            out.push(Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Skip,
                format!(
                    "{} {} {} -> {}: an end is not on this node (see baseline.gpus)",
                    f.probe, f.method, f.src, f.dst
                ),
            ));
            continue;
        };
        let subject = format!("{} {}->{} {}", f.probe, src, dst, f.method);
        let m = probes.iter().flat_map(|r| &r.measurements).find(|m| {
            m.probe.as_str() == f.probe
                && m.method.as_str() == f.method
                && m.src == src
                && m.dst == dst
        });
        let Some(stats) = m.and_then(|m| m.evaluation.stats.as_ref()) else {
            out.push(Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Skip,
                format!(
                    "no measurement ({})",
                    m.map(|m| m.evaluation.reason.clone())
                        .unwrap_or_else(|| "probe not run or not recorded".into())
                ),
            ));
            continue;
        };
        let e = ev(
            "probe samples",
            format!(
                "median {:.1} GB/s (n={}, min {:.1}, max {:.1})",
                stats.median_gbps, stats.n, stats.min_gbps, stats.max_gbps
            ),
        );
        let basis = f.basis.clone().unwrap_or_else(|| "baseline".into());
        out.push(if stats.median_gbps < f.min_gbps {
            Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Fail,
                format!(
                    "median {:.1} GB/s below the baseline floor {:.1} GB/s",
                    stats.median_gbps, f.min_gbps
                ),
            )
            .with(e)
            .with(ev("baseline floor", format!("{:.1} GB/s: {basis}", f.min_gbps)))
            .fix("Compare with the probe's own check (probe.h2d/d2h/p2p) and the link state under load; a drop against the model's floor with a healthy link points at host settings (IOMMU, NUMA placement of the process, clocks)")
        } else {
            Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Pass,
                format!(
                    "median {:.1} GB/s >= floor {:.1} GB/s",
                    stats.median_gbps, f.min_gbps
                ),
            )
            .with(e)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rejects_other_schemas_and_typos() {
        assert!(matches!(
            Baseline::parse(r#"{"schema":"gpudoctor.baseline/2"}"#),
            Err(BaselineError::Schema { .. })
        ));
        assert!(matches!(
            Baseline::parse(r#"{"schema":"gpudoctor.baseline/1","gpu":[]}"#),
            Err(BaselineError::Parse(_))
        ));
        assert!(Baseline::parse("[1,2").is_err());
        let b = Baseline::parse(r#"{"schema":"gpudoctor.baseline/1"}"#).unwrap();
        assert!(b.gpus.is_none() && b.paths.is_none());
        assert!(matches!(
            Baseline::parse(
                r#"{"schema":"gpudoctor.baseline/1","gpus":[{"position":"p"},{"position":"p"}]}"#
            ),
            Err(BaselineError::Invalid(_))
        ));
    }

    #[test]
    fn position_uses_slots_not_bus_numbers() {
        let f = |bus: u8, up: Vec<crate::pci::Bdf>| PciFunction {
            bdf: crate::pci::Bdf {
                domain: 0,
                bus,
                device: 0,
                function: 0,
            },
            sysfs_path: String::new(),
            root_complex: "pci0000:c0".into(),
            upstream: up,
            class: None,
            vendor: None,
            device: None,
            driver: None,
            numa_node: None,
            local_cpulist: None,
            link: Default::default(),
            config: None,
            physfn: None,
            unread: Default::default(),
        };
        let rp = |bus: u8| crate::pci::Bdf {
            domain: 0,
            bus,
            device: 1,
            function: 1,
        };
        assert_eq!(position(&f(0xc1, vec![rp(0xc0)])), "pci0000:c0/01.1/00.0");
        // Same slot, renumbered bus: same position.
        assert_eq!(
            position(&f(0xc2, vec![rp(0xc0)])),
            position(&f(0xc1, vec![rp(0xc0)]))
        );
    }
}
