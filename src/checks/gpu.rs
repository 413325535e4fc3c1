//! gpu.*: BAR1, persistence, ECC, row remapping, P2P status, NVLinks, from the NVML snapshot
//! (sysfs `resource` is the BAR1 fallback).

use super::{CheckId, Ctx, Finding, SkipKind, Status, ev};
use crate::nvml::{NvmlErrorKind, NvmlGpu};
use crate::pci::Bdf;

/// BAR1 from `resource`: the second populated memory BAR. Its line index differs by
/// generation (index 2 on Hopper, whose BAR0 is 64-bit and takes two slots; index 1 on GPUs
/// with a 32-bit BAR0), so count populated BARs instead of trusting an index.
pub fn bar1_from_resources(res: &[(u64, u64, u64)]) -> Option<(usize, u64)> {
    res.iter()
        .take(6)
        .enumerate()
        .filter(|(_, (s, e, flags))| *e > *s && flags & 0x200 != 0) // IORESOURCE_MEM
        .nth(1)
        .map(|(i, (s, e, _))| (i, e - s + 1))
}

fn gib(b: u64) -> String {
    if b >= 1 << 30 {
        format!("{} GiB", b >> 30)
    } else {
        format!("{} MiB", b >> 20)
    }
}

fn nvml_for<'a>(ctx: &'a Ctx, bdf: Bdf) -> Option<&'a NvmlGpu> {
    ctx.inv.nvml.gpus.iter().find(|g| g.bdf() == Some(bdf))
}

fn nvml_missing(ctx: &Ctx) -> String {
    ctx.inv
        .nvml
        .unavailable
        .clone()
        .unwrap_or_else(|| "GPU not listed by NVML".into())
}

/// Every GPU with its NVML record (None when NVML does not list it), or one skip on `host`
/// when there are no NVIDIA GPUs.
fn each_gpu(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&crate::topo::Gpu, Option<&NvmlGpu>, &mut Vec<Finding>),
) {
    if ctx.topo.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    for g in &ctx.topo.gpus {
        check(g, nvml_for(ctx, g.bdf), out);
    }
}

/// Like `each_gpu`, for checks that need NVML's record: a GPU without one is a skip with the
/// reason NVML gave. Judged on NVML's error kinds: a GPU NVML reports lost fails every such
/// check; a fact refused for lack of permission is a `not-root` skip, one the GPU does not
/// support a `not-applicable` skip.
pub(super) fn each_nvml_gpu(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(String, &NvmlGpu, &dyn Fn(&str) -> String, &mut Vec<Finding>),
) {
    each_gpu(ctx, id, out, |g, n, out| {
        let s = g.label.clone();
        let Some(n) = n else {
            out.push(Finding::new(
                id,
                s,
                Status::Skip,
                format!("NVML facts unknown: {}", nvml_missing(ctx)),
            ));
            return;
        };
        if let Some((k, why)) = n
            .unread_kind
            .iter()
            .find(|(_, kind)| **kind == NvmlErrorKind::GpuLost)
            .map(|(k, _)| (k, n.unread.get(k).cloned().unwrap_or_default()))
        {
            out.push(
                Finding::new(id, s, Status::Fail, format!("{}: NVML reports the GPU lost ({why})", g.label))
                    .with(ev(format!("NVML {k}"), why))
                    .fix("The GPU has fallen off the bus: drain the node, check `dmesg` for Xid 79 and PCIe errors, then reset the GPU or reboot; if it recurs, service the GPU, its riser and power"),
            );
            return;
        }
        let asked = std::cell::RefCell::new(Vec::new());
        let unread = |k: &str| {
            asked.borrow_mut().push(n.unread_kind.get(k).copied());
            n.unread
                .get(k)
                .cloned()
                .unwrap_or_else(|| nvml_missing(ctx))
        };
        let from = out.len();
        check(s, n, &unread, out);
        let kinds = asked.into_inner();
        for f in out[from..].iter_mut().filter(|f| f.status == Status::Skip) {
            if kinds.contains(&Some(NvmlErrorKind::NoPermission)) {
                f.skip = Some(SkipKind::NotRoot);
            } else if !kinds.is_empty()
                && kinds
                    .iter()
                    .all(|k| *k == Some(NvmlErrorKind::NotSupported))
            {
                f.skip = Some(SkipKind::NotApplicable);
            }
        }
    });
}

/// gpu.bar1: NVML's BAR1 size, or the second populated memory BAR in sysfs `resource`.
pub(super) fn bar1(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuBar1;
    each_gpu(ctx, id, out, |g, n, out| {
        let s = g.label.clone();
        let unread = |k: &str| {
            n.and_then(|n| n.unread.get(k).cloned())
                .unwrap_or_else(|| nvml_missing(ctx))
        };
        let mem = n.and_then(|n| n.memory_total_bytes);
        let (bar1, src) = match n.and_then(|n| n.bar1_total_bytes) {
            Some(b) => (Some(b), "nvmlDeviceGetBAR1MemoryInfo".to_string()),
            None => match ctx
                .inv
                .extras
                .get(&g.bdf)
                .and_then(|x| x.resources.as_deref())
                .and_then(bar1_from_resources)
            {
                Some((i, b)) => (
                    Some(b),
                    format!("{}/resource line {i}", ctx.inv.pci[&g.bdf].sysfs_path),
                ),
                None => (None, String::new()),
            },
        };
        match (bar1, mem) {
            (Some(b), Some(m)) if b < m => out.push(
                Finding::new(id, s.clone(), Status::Fail, format!("BAR1 {} is smaller than GPU memory {}: GPUDirect RDMA cannot register buffers beyond the BAR1 aperture", gib(b), gib(m)))
                    .with(ev(src, gib(b)))
                    .with(ev("nvmlDeviceGetMemoryInfo", gib(m)))
                    .fix("Enable \"Above 4G decoding\" and \"Resizable BAR\"/large BAR in the BIOS; for data-center GPUs use the vendor's large-BAR1 VBIOS/mode (`nvidia-smi -q -d MEMORY` shows BAR1); in VMs, give the GPU a 64-bit MMIO window large enough (e.g. QEMU `-fw_cfg opt/ovmf/X-PciMmio64Mb`)"),
            ),
            (Some(b), Some(m)) => out.push(
                Finding::new(id, s.clone(), Status::Pass, format!("BAR1 {} covers GPU memory {}", gib(b), gib(m))).with(ev(src, gib(b))),
            ),
            (Some(b), None) if b < (1 << 30) => out.push(
                Finding::new(id, s.clone(), Status::Fail, format!("BAR1 only {}: large GPUDirect RDMA registrations will fail", gib(b)))
                    .with(ev(src, gib(b)))
                    .fix("Enable \"Above 4G decoding\" and Resizable BAR in the BIOS"),
            ),
            (Some(b), None) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("BAR1 {} but GPU memory size unknown ({})", gib(b), unread("memory_total_bytes"))).with(ev(src, gib(b)))),
            (None, _) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("BAR1 size unknown: {}", unread("bar1_total_bytes")))),
        }
    });
}

pub(super) fn persistence(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuPersistence;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        match n.persistence_mode {
            Some(true) => out.push(Finding::new(id, s.clone(), Status::Pass, "persistence mode on").with(ev("nvmlDeviceGetPersistenceMode", "enabled"))),
            Some(false) => out.push(Finding::new(id, s.clone(), Status::Warn, "persistence mode off: the driver tears the GPU down between jobs (slow start-up, lost state)")
                .with(ev("nvmlDeviceGetPersistenceMode", "disabled"))
                .fix("Run nvidia-persistenced (`systemctl enable --now nvidia-persistenced`) or `nvidia-smi -pm 1`")),
            None => out.push(Finding::new(id, s.clone(), Status::Skip, format!("persistence mode unknown: {}", unread("persistence_mode")))),
        }
    });
}

pub(super) fn ecc(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuEcc;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        match (n.ecc_enabled, n.ecc_volatile_uncorrected) {
            (_, Some(u)) if u > 0 => out.push(Finding::new(id, s.clone(), Status::Fail, format!("{u} volatile uncorrectable ECC errors since the last driver load"))
                .with(ev("nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)", u.to_string()))
                .fix("Drain the node; reset the GPU (`nvidia-smi -r`) so pending row remaps apply; if errors recur, RMA the GPU (check `nvidia-smi -q -d ECC,ROW_REMAPPER` and Xid 48/63/64 in dmesg)")),
            (Some(false), _) => out.push(Finding::new(id, s.clone(), Status::Warn, "ECC disabled: memory errors go undetected")
                .with(ev("nvmlDeviceGetEccMode", "disabled"))
                .fix("`nvidia-smi -e 1` and reboot/reset the GPU")),
            (Some(true), Some(_)) => out.push(Finding::new(id, s.clone(), Status::Pass, "ECC enabled, no volatile uncorrectable errors")
                .with(ev("nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)", "0"))),
            (Some(true), None) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("ECC on; error counters unknown: {}", unread("ecc_volatile_uncorrected")))),
            (None, _) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("ECC mode unknown: {}", unread("ecc_enabled")))),
        }
    });
}

pub(super) fn row_remap(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuRowRemap;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        match (n.remapped_rows_pending, n.retired_pending) {
            (Some(true), _) | (_, Some(true)) => out.push(Finding::new(id, s.clone(), Status::Fail, "memory repairs pending (row remap or page retirement): they apply only after a GPU reset")
                .with(ev("nvmlDeviceGetRemappedRows pending / nvmlDeviceGetRetiredPagesPendingStatus", format!("{:?} / {:?}", n.remapped_rows_pending, n.retired_pending)))
                .fix("Drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot")),
            (Some(false), _) | (None, Some(false)) => out.push(Finding::new(id, s.clone(), Status::Pass, "no pending row remaps or page retirements")),
            (None, None) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("row remap state unknown: {}", unread("remapped_rows_pending")))),
        }
    });
}

pub(super) fn nvlink_down(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuNvlinkDown;
    each_nvml_gpu(ctx, id, out, |s, n, _unread, out| {
        let total = n.nvlinks.len();
        let down: Vec<u32> = n
            .nvlinks
            .iter()
            .filter(|l| !l.active)
            .map(|l| l.link)
            .collect();
        if let Some(why) = n.nvlinks_unread().filter(|_| down.is_empty()) {
            // Links that were read as down are a fact (below); otherwise what could not be
            // read may be a link that is down, or links at all.
            out.push(
                Finding::new(
                    id,
                    s.clone(),
                    Status::Skip,
                    if total == 0 {
                        format!("NVLink list unreadable: {why}")
                    } else {
                        format!("NVLink state unknown: {total} links read (all active), the rest unreadable: {why}")
                    },
                )
                .with(ev("nvmlDeviceGetNvLinkState", why)),
            );
        } else if total == 0 {
            out.push(
                Finding::new(
                    id,
                    s.clone(),
                    Status::Skip,
                    "no NVLinks reported (PCIe GPU or NVLink not supported)",
                )
                .not_applicable(),
            );
        } else if down.is_empty() {
            out.push(
                Finding::new(
                    id,
                    s.clone(),
                    Status::Pass,
                    format!("{} active", crate::words::count(total, "NVLink", "NVLinks")),
                )
                .with(ev(
                    "nvmlDeviceGetNvLinkState",
                    format!("{total}/{total} active"),
                )),
            );
        } else {
            // A peer the driver lost (driver.gpu-count) takes its links down with it: say so,
            // definitely where NVML names the far end, as a lead where it does not.
            let mut msg = format!(
                "{} {down:?} down ({} of {total} active)",
                if down.len() == 1 { "NVLink" } else { "NVLinks" },
                total - down.len()
            );
            let lost = super::driver::missing_gpus(ctx);
            let remotes: Vec<Option<Bdf>> = n
                .nvlinks
                .iter()
                .filter(|l| !l.active)
                .map(|l| l.remote_bus_id.as_deref().and_then(|r| r.parse().ok()))
                .collect();
            for (g, lacking) in &lost {
                if remotes.contains(&Some(g.bdf)) {
                    msg.push_str(&format!(
                        "; the far end {} ({}) is missing from {} (see driver.gpu-count)",
                        g.label,
                        g.bdf,
                        lacking.join(" and ")
                    ));
                } else if remotes.iter().any(Option::is_none) {
                    msg.push_str(&format!("; {} ({}) is missing from {} (see driver.gpu-count): if it is the far end of these links, fix that first", g.label, g.bdf, lacking.join(" and ")));
                }
            }
            out.push(Finding::new(id, s.clone(), Status::Fail, msg)
                .with(ev("nvmlDeviceGetNvLinkState", format!("{}/{total} active", total - down.len())))
                .fix("Check `nvidia-smi nvlink -s` and `-e` (error counters); on NVSwitch systems make sure nvidia-fabricmanager is running; persistent down links need a GPU reset or hardware service"));
        }
    });
}

/// gpu.p2p: NVML's P2P read/write status for every GPU pair.
pub(super) fn p2p(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuP2p;
    let t = ctx.topo;
    if t.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    if t.gpus.len() < 2 {
        out.push(Finding::new(id, "host", Status::Skip, "fewer than two GPUs").not_applicable());
        return;
    }
    if ctx.inv.nvml.p2p.is_empty() {
        out.push(Finding::new(
            id,
            "host",
            Status::Skip,
            format!(
                "P2P status not known: {}",
                ctx.inv
                    .nvml
                    .unavailable
                    .clone()
                    .unwrap_or_else(|| "not recorded".into())
            ),
        ));
        return;
    }
    // NVML's pairs by address, parsed once (GPUs^2 pairs: a lookup, not a scan, per pair).
    let mut recorded = std::collections::HashMap::new();
    for p in &ctx.inv.nvml.p2p {
        if let (Ok(x), Ok(y)) = (p.a.parse::<Bdf>(), p.b.parse::<Bdf>()) {
            recorded.entry((x, y)).or_insert(p);
        }
    }
    for (i, a) in t.gpus.iter().enumerate() {
        for b in &t.gpus[i + 1..] {
            let subject = format!("{}-{}", a.label, b.label);
            let e = recorded.get(&(a.bdf, b.bdf)).copied();
            match e {
                Some(p) if p.read.as_deref() == Some("ok") && p.write.as_deref() == Some("ok") => {
                    out.push(Finding::new(id, subject, Status::Pass, "P2P read and write OK").with(ev("nvmlDeviceGetP2PStatus", "read ok, write ok")))
                }
                Some(p) if p.read.is_some() && p.write.is_some() => out.push(
                    Finding::new(id, subject, Status::Fail, format!("P2P not available: read {}, write {}", p.read.as_deref().unwrap_or("?"), p.write.as_deref().unwrap_or("?")))
                        .with(ev("nvmlDeviceGetP2PStatus", format!("read {:?}, write {:?}", p.read, p.write)))
                        .fix("Disable ACS redirect on the PCIe path (see pcie.acs-redirect), enable IOMMU passthrough, check the BIOS P2P setting; on NVLink systems check fabric manager"),
                ),
                Some(p) => out.push(Finding::new(id, subject, Status::Skip, format!("P2P status query failed: {}", p.error.clone().unwrap_or_default()))),
                None => out.push(Finding::new(id, subject, Status::Skip, "P2P status for this pair not recorded")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bar1_index_by_generation() {
        // Hopper: 64-bit BAR0 takes lines 0-1, BAR1 on line 2 (fixtures/h200x1-vm).
        let h = [
            (0x104002000000, 0x104002ffffff, 0x14220c),
            (0, 0, 0),
            (0x100000000000, 0x103fffffffff, 0x14220c),
        ];
        assert_eq!(bar1_from_resources(&h), Some((2, 256 << 30)));
        // Older: 32-bit BAR0 on line 0, BAR1 on line 1.
        let v = [
            (0xd0000000, 0xd0ffffff, 0x40200),
            (0x3800000000, 0x3fffffffff, 0x14220c),
            (0, 0, 0),
        ];
        assert_eq!(bar1_from_resources(&v), Some((1, 32 << 30)));
        assert_eq!(bar1_from_resources(&[]), None);
    }
}
