//! `baseline.gpus`: the GPUs at the baseline's positions, and their model. Walks the matched
//! GPUs once and hands each to the per-GPU comparisons (`pcie`, `nvlink`, `bar1`), so their
//! findings come in GPU order.

use super::node::Node;
use super::schema::{Baseline, GpuShape};
use super::{FIX_SHAPE, ID_BAR1, ID_GPUS, ID_NVLINK, ID_PCIE, Paired, count_finding, pair, skip};
use crate::checks::{Finding, Status};

pub(super) fn compare(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
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
            super::pcie::compare(
                &who,
                &subject,
                want_pcie,
                &node.pcie(bdf, false),
                &node.aer(bdf),
                out,
            );
        }
        if let Some(w) = want.nvlinks_active {
            nv_judged = true;
            out.push(super::nvlink::judge(&who, &subject, w, g));
        }
        if let Some(w) = want.bar1_bytes {
            bar_judged = true;
            out.push(super::bar1::judge(&who, &subject, w, g));
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
