//! iommu.mode: translated DMA on GPUs/NICs breaks or slows GPUDirect RDMA peer mappings.

use super::{CheckId, Ctx, Finding, Status, ev};
use crate::reading::Reading;
use std::collections::BTreeSet;

pub(super) fn iommu_mode(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::IommuMode;
    let h = &ctx.inv.host;
    let t = ctx.topo;
    let cmd = h.cmdline.value().cloned().unwrap_or_default();
    let args: BTreeSet<&str> = cmd.split_whitespace().collect();
    let pt = args.contains("iommu=pt");
    let off = args
        .iter()
        .any(|a| matches!(*a, "intel_iommu=off" | "amd_iommu=off" | "iommu=off"));
    let cmd_ev = ev(
        "/proc/cmdline",
        if h.cmdline.is_value() {
            let mut v: Vec<&str> = args
                .iter()
                .copied()
                .filter(|a| a.contains("iommu"))
                .collect();
            if v.is_empty() {
                v.push("(no iommu options)");
            }
            v.join(" ")
        } else {
            h.cmdline.why().unwrap_or_default().to_string()
        },
    );
    let devices: Vec<(String, crate::pci::Bdf)> = t
        .gpus
        .iter()
        .map(|g| (g.label.clone(), g.bdf))
        .chain(t.nics.iter().map(|n| (n.rdma_device.clone(), n.bdf)))
        .collect();
    if devices.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no GPUs or RDMA NICs").not_applicable());
        return;
    }
    let Reading::Value(groups) = &h.iommu_groups else {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!(
                    "IOMMU groups unreadable: {}",
                    h.iommu_groups.why().unwrap_or_default()
                ),
            )
            .with(cmd_ev),
        );
        return;
    };
    if groups.is_empty()
        && h.iommu_group_of
            .values()
            .all(|g| matches!(g, Reading::Absent(_)))
        && h.iommu_group_types.values().all(Reading::is_value)
    {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Pass,
                "no IOMMU groups: IOMMU off or absent, DMA is untranslated",
            )
            .with(ev("/sys/kernel/iommu_groups", "empty or absent"))
            .with(cmd_ev),
        );
        return;
    }
    let mut translated = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut evs = vec![cmd_ev];
    for (who, b) in &devices {
        match h.iommu_group_of.get(b) {
            Some(Reading::Value(g)) => match h.iommu_group_types.get(g) {
                Some(Reading::Value(ty)) => {
                    evs.push(ev(
                        format!("/sys/kernel/iommu_groups/{g}/type ({who})"),
                        ty.clone(),
                    ));
                    if ty.starts_with("DMA") {
                        translated.push(format!("{who} (group {g}: {ty})"));
                    }
                }
                // In a group whose type could not be read: unknown, never "none".
                other => {
                    let why = other.and_then(Reading::why).unwrap_or("type not read");
                    evs.push(ev(
                        format!("/sys/kernel/iommu_groups/{g}/type ({who})"),
                        format!("unread: {why}"),
                    ));
                    unknown.push(format!("{who} (group {g}: {why})"));
                }
            },
            // No `iommu_group` link: in no group.
            Some(Reading::Absent(_)) => evs.push(ev(
                format!("{}/iommu_group ({who})", sysfs_dir(ctx, *b)),
                "none",
            )),
            // The link could not be read: unknown, never "none".
            other => {
                let why = other.and_then(Reading::why).unwrap_or("not read");
                evs.push(ev(
                    format!("{}/iommu_group ({who})", sysfs_dir(ctx, *b)),
                    format!("unknown: {why}"),
                ));
                unknown.push(format!("{who} (group unknown: {why})"));
            }
        }
    }
    if translated.is_empty() && !unknown.is_empty() {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!("IOMMU domain type unreadable for {}", unknown.join(", ")),
            )
            .evidence(evs),
        );
    } else if translated.is_empty() {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Pass,
                if pt || off {
                    "IOMMU in passthrough/off for GPUs and NICs"
                } else {
                    "GPUs and NICs are in identity (passthrough) IOMMU domains"
                },
            )
            .evidence(evs),
        );
    } else {
        out.push(Finding::new(id, "host", Status::Fail, format!(
            "IOMMU translates DMA for {}: GPUDirect RDMA peer mappings fail or bounce, and every DMA pays IOTLB misses",
            translated.join(", ")
        ))
        .evidence(evs)
        .fix("Boot with `iommu=pt` (plus `intel_iommu=on` or `amd_iommu=on` if you need the IOMMU for VFs), or disable the IOMMU in the BIOS; GPUDirect RDMA is supported only with the IOMMU off or in passthrough (NVIDIA GPUDirect RDMA docs)"));
    }
}

/// The sysfs directory of PCI function `b` (its address under /sys/bus/pci/devices when it
/// was not read).
fn sysfs_dir(ctx: &Ctx, b: crate::pci::Bdf) -> String {
    ctx.inv.pci.get(&b).map_or_else(
        || format!("/sys/bus/pci/devices/{b}"),
        |f| f.sysfs_path.clone(),
    )
}
