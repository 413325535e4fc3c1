//! `baseline.nics`: the RDMA NICs at the baseline's positions, their model, ports and firmware.

use super::node::Node;
use super::schema::Baseline;
use super::{FIX_SHAPE, ID_NICS, Paired, count_finding, pair, pcie, skip};
use crate::checks::{Finding, Status};
use std::collections::BTreeSet;

pub(super) fn compare(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
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
            pcie::compare(
                &who,
                &subject,
                want_pcie,
                &node.pcie(bdf, true),
                &node.aer(bdf),
                out,
            );
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
