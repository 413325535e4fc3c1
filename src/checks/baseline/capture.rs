//! `gpudoctor baseline`: record the shape of this node as a baseline.

use super::node::{Node, kernel_release};
use super::schema::*;
use crate::findings::Enforce;
use crate::inventory::Inventory;
use crate::probes::ProbeReport;
use crate::topo::Topology;
use std::collections::{BTreeMap, BTreeSet};

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
            pcie: Some(PcieShape {
                aer: node.aer(g.bdf).into_value(),
                ..node.pcie(g.bdf, false)
            }),
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
            pcie: Some(PcieShape {
                aer: node.aer(n.bdf).into_value(),
                ..node.pcie(n.bdf, true)
            }),
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
    let paths = gpu_paths(&topo.matrix, &ends);
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
        nvidia_driver: pinned(inv.nvml.driver_version.cloned(), Enforce::Policy),
        cuda_driver: pinned(
            inv.nvml.cuda_driver_version.value().map(|v| v.to_string()),
            Enforce::Fact,
        ),
        kernel: pinned(kernel_release(inv), Enforce::Fact),
        nic_firmware,
    };
    let floors = bandwidth_floors(probes, &ends);
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
        silences: None,
    }
}

/// The path class of each two GPUs and of each GPU and NIC, by PCI position; uncertain cells
/// (NUMA unknown) are left out.
fn gpu_paths(m: &crate::topo::Matrix, ends: &BTreeMap<String, (String, String)>) -> Vec<PathShape> {
    let mut paths = Vec::new();
    for (i, a) in m.labels.iter().enumerate() {
        if !a.starts_with("GPU") {
            continue;
        }
        for (j, b) in m.labels.iter().enumerate().skip(i + 1) {
            let (Some((pa, na)), Some((pb, nb))) = (ends.get(a), ends.get(b)) else {
                continue;
            };
            // An uncertain cell (NUMA unknown) is not a fact worth pinning. Read from the cell
            // itself: a search of `uncertain` (itself up to every pair) per pair made this loop
            // quartic in the functions of a node whose NUMA is unknown.
            if m.paths
                .get(i)
                .and_then(|r| r.get(j))
                .is_none_or(|p| !p.certain)
            {
                continue;
            }
            if let Some(cell) = m.paths.get(i).and_then(|r| r.get(j)) {
                paths.push(PathShape {
                    a: pa.clone(),
                    b: pb.clone(),
                    was: Some(format!("{na} <-> {nb}")),
                    path: cell.cell(),
                });
            }
        }
    }
    paths
}

/// A floor at `FLOOR_FRACTION` of the median of each probe measurement with statistics whose
/// ends are on the node (or the host).
fn bandwidth_floors(
    probes: &[ProbeReport],
    ends: &BTreeMap<String, (String, String)>,
) -> Vec<Floor> {
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
    floors
}
