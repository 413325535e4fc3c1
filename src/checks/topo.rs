//! topo.gpu-nic-pairing: is each GPU's closest NIC close enough for GPUDirect RDMA (NCCL's
//! default NCCL_NET_GDR_LEVEL accepts PIX/PXB); and the walk over each GPU's closest NIC(s)
//! that numa.gpu-nic shares.
//!
//! Pure functions of the topology: no reads here.

use super::{CheckId, Ctx, Finding, Status, ev};
use crate::topo::{Closest, Device, Gpu, Nic, PathType};

/// Each GPU with its closest NIC(s), or one skip on `host` when there are no GPUs or no NICs.
pub(super) fn each_closest(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&Closest, &Gpu, Option<&Device>, &[&Nic], &str, &mut Vec<Finding>),
) {
    let t = ctx.topo;
    if t.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    // A NIC that cannot be placed (its RDMA device's PCI function unknown, or the RDMA
    // devices unlisted) may be any GPU's closest: an unknown for each, beside the verdicts on
    // the NICs that were placed.
    let gaps = super::rdma::nic_gaps(ctx, id, out);
    if t.nics.is_empty() {
        if id == CheckId::TopoGpuNicPairing && !t.nics_without_rdma.is_empty() {
            // NICs there are, but none with an RDMA device: each GPU's closest one is named
            //.
            for c in &t.closest_nics {
                let Some(n) = c.closer_without_rdma.first() else {
                    continue;
                };
                out.push(
                    Finding::new(
                        id,
                        c.gpu.clone(),
                        Status::Fail,
                        format!(
                            "{}'s closest NIC {} ({}) has no RDMA device ({} would provide it): no NIC can carry its GPUDirect RDMA",
                            c.gpu,
                            n.bdf,
                            n.path.as_str(),
                            n.rdma_module
                        ),
                    )
                    .with(ev("PCIe path (as nvidia-smi topo -m)", n.path.as_str()))
                    .fix(format!(
                        "Give the NIC its RDMA device: load {} (see `gpudoctor explain rdma.driver`)",
                        n.rdma_module
                    )),
                );
            }
            return;
        }
        if !gaps {
            out.push(
                Finding::new(
                    id,
                    "host",
                    Status::Skip,
                    if t.nics_without_rdma.is_empty() {
                        "no RDMA NICs".to_string()
                    } else {
                        "no NIC has an RDMA device (see rdma.driver)".to_string()
                    },
                )
                .not_applicable(),
            );
        }
        return;
    }
    // Each NIC's places by label, once (an SR-IOV host has thousands, each GPU tens of
    // closest; a label a damaged tree repeats has several).
    let mut by_label: std::collections::HashMap<&str, Vec<usize>> = Default::default();
    for (i, n) in t.nics.iter().enumerate() {
        by_label.entry(n.label.as_str()).or_default().push(i);
    }
    for c in &t.closest_nics {
        let Some(g) = t.gpu(&c.gpu) else {
            continue;
        };
        let gd = t.device(g.bdf);
        // Every NIC whose label is among the closest, in the topology's order.
        let mut at: Vec<usize> = c
            .nics
            .iter()
            .filter_map(|l| by_label.get(l.as_str()))
            .flatten()
            .copied()
            .collect();
        at.sort_unstable();
        at.dedup();
        let nics: Vec<&Nic> = at.into_iter().map(|i| &t.nics[i]).collect();
        check(c, g, gd, &nics, &c.rdma_devices.join(", "), out);
    }
}

/// What a GPU's closest RDMA NIC does not say: a NIC without an RDMA device is closer.
pub(super) fn closer_note(c: &Closest) -> String {
    match c.closer_without_rdma.first() {
        Some(n) => format!(
            "; a closer NIC, {} at {}, has no RDMA device ({}: see rdma.driver)",
            n.bdf,
            n.path.as_str(),
            n.rdma_module
        ),
        None => String::new(),
    }
}

/// topo.gpu-nic-pairing: the GPU's closest NIC at PIX/PXB (NCCL's default GDR level).
pub(super) fn gpu_nic_pairing(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::TopoGpuNicPairing;
    each_closest(ctx, id, out, |c, _g, _gd, _nics, names, out| {
        let Some(p) = c.path else { return };
        let closer = closer_note(c);
        let names = &format!("{names}{closer}");
        let inferred = if c.certain {
            ""
        } else {
            " (inferred: NUMA unknown)"
        };
        let e = ev(
            "PCIe path (as nvidia-smi topo -m)",
            format!("{}{inferred}", p.as_str()),
        );
        match p {
            PathType::PIX | PathType::PXB | PathType::X | PathType::NV => out.push(
                Finding::new(id, c.gpu.clone(), Status::Pass, format!("{} reaches {names} at {}: GPUDirect RDMA usable by default", c.gpu, p.as_str())).with(e),
            ),
            PathType::PHB | PathType::NODE => out.push(
                Finding::new(id, c.gpu.clone(), Status::Warn, format!("{}'s closest NIC {names} is at {}{inferred}: NCCL does not use GPUDirect RDMA beyond PXB by default, so traffic stages through host memory", c.gpu, p.as_str()))
                    .with(e)
                    .fix("Place a NIC under the same PCIe switch as the GPU; or accept the CPU path explicitly with NCCL_NET_GDR_LEVEL=PHB (measure first)"),
            ),
            PathType::SYS => out.push(
                Finding::new(id, c.gpu.clone(), Status::Fail, format!("{}'s closest NIC {names} is across NUMA nodes (SYS){inferred}: no usable GPUDirect RDMA, and traffic crosses the inter-socket link", c.gpu))
                    .with(e)
                    .fix("Install a NIC on the GPU's socket, ideally under the same PCIe switch; check that the NIC is not disabled in the BIOS"),
            ),
        }
    });
}
