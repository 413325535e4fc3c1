//! gdr.*: which memory path GPUDirect RDMA can use: nvidia-peermem, dma-buf, or none.

use super::{CheckId, Ctx, Evidence, Finding, SkipKind, Status, ev};
use crate::facts::{kernel_major_minor, parse_nvrm};

/// Where NCCL looks for nvidia-peermem (src/transport/net_ib.cc: memory_peers version files),
/// plus the module itself (a built-in module has /sys/module/X but no /proc/modules line).
fn peermem_facts(ctx: &Ctx) -> (Option<bool>, Vec<Evidence>) {
    let h = &ctx.inv.host;
    let mut e = Vec::new();
    for (p, v) in &h.memory_peers {
        e.push(ev(p.clone(), v.clone()));
    }
    let in_sys = h.sys_modules.as_ref().map(|m| {
        m.iter()
            .any(|n| n == "nvidia_peermem" || n == "nv_peer_mem")
    });
    let in_proc = h.modules.as_ref().map(|m| {
        m.iter()
            .any(|n| n == "nvidia_peermem" || n == "nv_peer_mem")
    });
    e.push(ev(
        "/sys/module/nvidia_peermem",
        match in_sys {
            Some(true) => "present".into(),
            Some(false) => "absent".into(),
            None => h
                .unread
                .get("sys_modules")
                .cloned()
                .unwrap_or_else(|| "unreadable".into()),
        },
    ));
    e.push(ev(
        "/proc/modules",
        match in_proc {
            Some(true) => "nvidia_peermem listed".into(),
            Some(false) => "nvidia_peermem not listed".into(),
            None => h
                .unread
                .get("modules")
                .cloned()
                .unwrap_or_else(|| "unreadable".into()),
        },
    ));
    let loaded = if !h.memory_peers.is_empty() || in_sys == Some(true) || in_proc == Some(true) {
        Some(true)
    } else if in_sys.is_none() && in_proc.is_none() {
        None
    } else {
        Some(false)
    };
    (loaded, e)
}

/// dma-buf needs: the open kernel module, Linux >= 5.12 (ib_umem_dmabuf), and an rdma-core
/// that exports ibv_reg_dmabuf_mr (rdma-core >= 34). CUDA's DMA_BUF_SUPPORTED attribute is
/// confirmed by the level-1 dmabuf-export probe.
fn dmabuf_facts(ctx: &Ctx) -> (Option<bool>, Vec<String>, Vec<Evidence>) {
    let h = &ctx.inv.host;
    let mut e = Vec::new();
    let mut missing = Vec::new();
    let mut unknown = false;
    match h.nvidia_version_line.as_deref().map(parse_nvrm) {
        Some((_, Some(true))) => e.push(ev("/proc/driver/nvidia/version", "open kernel module")),
        Some((_, Some(false))) => {
            e.push(ev(
                "/proc/driver/nvidia/version",
                "proprietary kernel module",
            ));
            missing.push("the open NVIDIA kernel module".to_string());
        }
        _ => {
            e.push(ev("/proc/driver/nvidia/version", "unknown"));
            unknown = true;
        }
    }
    match h.kernel_version.as_deref().and_then(kernel_major_minor) {
        Some((maj, min)) => {
            e.push(ev("/proc/version", format!("{maj}.{min}")));
            if (maj, min) < (5, 12) {
                missing.push(format!("Linux >= 5.12 (running {maj}.{min})"));
            }
        }
        None => {
            e.push(ev("/proc/version", "unknown"));
            unknown = true;
        }
    }
    match ctx.libs.has_symbol("libibverbs.so.1", "ibv_reg_dmabuf_mr") {
        Some(true) => e.push(ev("libibverbs.so.1: ibv_reg_dmabuf_mr", "exported")),
        Some(false) => {
            e.push(ev(
                "libibverbs.so.1: ibv_reg_dmabuf_mr",
                "missing (or libibverbs not loadable)",
            ));
            missing.push("rdma-core >= 34 (libibverbs with ibv_reg_dmabuf_mr)".to_string());
        }
        None => {
            e.push(ev(
                "libibverbs.so.1: ibv_reg_dmabuf_mr",
                ctx.libs
                    .unavailable
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
            ));
            unknown = true;
        }
    }
    let possible = if !missing.is_empty() {
        Some(false)
    } else if unknown {
        None
    } else {
        Some(true)
    };
    (possible, missing, e)
}

/// Why GPUDirect RDMA cannot be judged here, if it cannot: nothing to judge (no GPUs, no
/// NICs), the NICs are unknown (an RDMA device's PCI function or the device list could not be
/// read), or the driver it needs is missing (which driver.nvidia-loaded fails).
fn not_applicable(ctx: &Ctx) -> Option<(String, SkipKind)> {
    let gaps = ctx.topo.nic_gaps();
    match basic_not_applicable(ctx) {
        Some(("no RDMA NICs: GPUDirect RDMA not applicable", _)) if !gaps.is_empty() => Some((
            format!(
                "no RDMA NIC could be placed: {}",
                gaps.iter()
                    .map(|(_, why)| why.as_str())
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            SkipKind::Unknown,
        )),
        other => other.map(|(why, kind)| (why.to_string(), kind)),
    }
}

fn basic_not_applicable(ctx: &Ctx) -> Option<(&'static str, SkipKind)> {
    if ctx.topo.gpus.is_empty() {
        Some(("no NVIDIA GPUs", SkipKind::NotApplicable))
    } else if ctx.inv.host.nvidia_version_line.is_none() {
        Some((
            "NVIDIA driver not loaded (see driver.nvidia-loaded): no GPUDirect path can exist",
            SkipKind::Unknown,
        ))
    } else if ctx.topo.nics.is_empty() && ctx.topo.nics_without_rdma.is_empty() {
        Some((
            "no RDMA NICs: GPUDirect RDMA not applicable",
            SkipKind::NotApplicable,
        ))
    } else {
        None
    }
}

/// The skip for `not_applicable`'s reason.
fn cannot_judge(id: CheckId, (why, kind): (String, SkipKind)) -> Finding {
    let f = Finding::new(id, "host", Status::Skip, why);
    if kind == SkipKind::NotApplicable {
        f.not_applicable()
    } else {
        f
    }
}

pub(super) fn peermem(ctx: &Ctx, out: &mut Vec<Finding>) {
    let no_gdr = not_applicable(ctx);
    let (pm, pm_ev) = peermem_facts(ctx);
    let (db, _, _) = dmabuf_facts(ctx);
    let id = CheckId::GdrPeermem;
    let f = match (no_gdr, pm) {
        (Some(why), _) => cannot_judge(id, why),
        (None, Some(true)) => Finding::new(id, "host", Status::Pass, "nvidia-peermem is loaded"),
        (None, Some(false)) if db == Some(true) => Finding::new(id, "host", Status::Warn, "nvidia-peermem is not loaded; GPUDirect RDMA must use dma-buf (only applications that register GPU memory with ibv_reg_dmabuf_mr, e.g. NCCL >= 2.13 with NCCL_DMABUF_ENABLE, get GPUDirect)")
            .fix("`modprobe nvidia-peermem` (and add it to /etc/modules-load.d) if applications need the peermem path"),
        (None, Some(false)) => Finding::new(id, "host", Status::Fail, "nvidia-peermem is not loaded and dma-buf is not a proven alternative: GPUDirect RDMA falls back to staging through host memory")
            .fix("`modprobe nvidia-peermem`; make it persistent with `echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`. It ships with the NVIDIA driver (built against the MLNX_OFED/inbox RDMA core in use)"),
        (None, None) => Finding::new(id, "host", Status::Skip, "module lists unreadable: nvidia-peermem state unknown"),
    };
    out.push(f.evidence(pm_ev));
}

pub(super) fn dmabuf(ctx: &Ctx, out: &mut Vec<Finding>) {
    let no_gdr = not_applicable(ctx);
    let (pm, _) = peermem_facts(ctx);
    let (db, db_missing, db_ev) = dmabuf_facts(ctx);
    let id = CheckId::GdrDmabuf;
    let f = match (no_gdr, db) {
        (Some(why), _) => cannot_judge(id, why),
        (None, Some(true)) => Finding::new(id, "host", Status::Pass, "dma-buf GPUDirect RDMA possible (open module, kernel >= 5.12, ibv_reg_dmabuf_mr); the level-1 probe confirms CUDA's DMA_BUF_SUPPORTED"),
        (None, Some(false)) if pm == Some(true) => Finding::new(id, "host", Status::Pass, format!("dma-buf not possible (needs {}); nvidia-peermem covers GPUDirect RDMA", db_missing.join(", "))),
        (None, Some(false)) => Finding::new(id, "host", Status::Warn, format!("dma-buf GPUDirect RDMA not possible: needs {}", db_missing.join(", ")))
            .fix("Use the open NVIDIA kernel module (driver >= 515, `nvidia-open` packages), Linux >= 5.12 and rdma-core >= 34; or load nvidia-peermem"),
        (None, None) => Finding::new(id, "host", Status::Skip, "dma-buf support unknown (a required fact could not be read)"),
    };
    out.push(f.evidence(db_ev));
}

/// gdr.path: which memory path each GPU's GPUDirect RDMA to its closest NIC can take.
pub(super) fn path(ctx: &Ctx, out: &mut Vec<Finding>) {
    let t = ctx.topo;
    let no_gdr = not_applicable(ctx);
    let (pm, _) = peermem_facts(ctx);
    let (db, _, _) = dmabuf_facts(ctx);
    let id = CheckId::GdrPath;
    if let Some(why) = no_gdr {
        out.push(cannot_judge(id, why));
        return;
    }
    // A NIC that could not be placed may be some GPU's closest: unknown for it (issue 21).
    super::rdma::nic_gaps(ctx, id, out);
    let path = match (pm, db) {
        (Some(true), _) => Some("peermem"),
        (_, Some(true)) => Some("dma-buf"),
        (Some(false), Some(false)) => None,
        _ => Some("unknown"),
    };
    for c in &t.closest_nics {
        let subject = c.gpu.clone();
        if c.rdma_devices.is_empty() {
            // NICs there are, none with an RDMA device (issue 28).
            if let Some(n) = c.closer_without_rdma.first() {
                out.push(
                    Finding::new(id, subject, Status::Fail, format!(
                        "no GPUDirect RDMA path: {}'s closest NIC {} ({}) has no RDMA device ({} would provide it), and no NIC has one",
                        c.gpu, n.bdf, n.path.as_str(), n.rdma_module
                    ))
                    .with(ev("memory path", path.unwrap_or("none")))
                    .fix(format!("Give the NIC its RDMA device: load {} (see `gpudoctor explain rdma.driver`)", n.rdma_module)),
                );
            }
            continue;
        }
        let nics = c.rdma_devices.join(", ");
        let f = match path {
            Some("unknown") => Finding::new(id, subject, Status::Skip, format!("GPUDirect path to {nics} unknown (peermem or dma-buf facts unreadable)")),
            Some(p) => Finding::new(id, subject, Status::Pass, format!("GPUDirect RDMA to {nics} via {p}")),
            None => Finding::new(id, subject, Status::Fail, format!("no GPUDirect RDMA path to {nics}: neither nvidia-peermem nor dma-buf"))
                .fix("Load nvidia-peermem, or move to the open kernel module + Linux >= 5.12 + rdma-core >= 34 for dma-buf"),
        };
        let mut f = f;
        f.message.push_str(&super::placement::closer_note(c));
        out.push(f.with(ev("memory path", path.unwrap_or("none"))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn kernel_versions() {
        assert_eq!(
            kernel_major_minor("Linux version 6.18.44-fc-v657-gpu (nixbld@) #1 SMP"),
            Some((6, 18))
        );
        assert_eq!(
            kernel_major_minor("Linux version 5.4.0-150-generic (buildd@)"),
            Some((5, 4))
        );
        assert_eq!(kernel_major_minor("nonsense"), None);
    }
}
