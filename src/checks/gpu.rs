//! gpu.*: BAR1, persistence, ECC, row remapping, P2P status, NVLinks, from the NVML snapshot
//! (sysfs `resource` is the BAR1 fallback); and the everyday GPU health checks operators
//! already run: NVRM Xid events (the kernel log), clock event reasons, NVLink error counters and
//! NVSwitch fabric registration (the NVML snapshot).
//!
//! Every health threshold names its published source in the evidence. NVLink counters are
//! cumulative since the driver loaded: a point-in-time check cannot take a delta, so the CRC
//! rate is judged on the average since boot (/proc/uptime), a lower bound of the rate since the
//! counters were last cleared.
//!
//! Pure functions of the inventory and topology: no reads here.

use super::{CheckId, Ctx, Finding, SkipKind, Status, ev};
use crate::nvml::{NvmlErrorKind, NvmlGpu, Unread};
use crate::pci::Bdf;
use std::collections::BTreeMap;

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
    let nvml = ctx.inv.nvml.by_bdf();
    for g in &ctx.topo.gpus {
        check(g, nvml.get(&g.bdf).copied(), out);
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
    mut check: impl FnMut(String, &NvmlGpu, &dyn Fn(Option<Unread>) -> String, &mut Vec<Finding>),
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
        if let Some((k, why)) = n.lost() {
            out.push(
                Finding::new(id, s, Status::Fail, format!("{}: NVML reports the GPU lost ({why})", g.label))
                    .with(ev(format!("NVML {k}"), why))
                    .fix("The GPU has fallen off the bus: drain the node, check `dmesg` for Xid 79 and PCIe errors, then reset the GPU or reboot; if it recurs, service the GPU, its riser and power"),
            );
            return;
        }
        let asked = std::cell::RefCell::new(Vec::new());
        // Why a fact the check asked for has no value, keeping NVML's kind of failure.
        let unread = |u: Option<Unread>| {
            asked.borrow_mut().push(u.and_then(|u| u.kind));
            u.map_or_else(|| nvml_missing(ctx), |u| u.why.to_string())
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
        let unread = |u: Option<Unread>| u.map_or_else(|| nvml_missing(ctx), |u| u.why.to_string());
        let mem = n.and_then(|n| n.memory_total_bytes.value().copied());
        let (bar1, src) = match n.and_then(|n| n.bar1_total_bytes.value().copied()) {
            Some(b) => (Some(b), "nvmlDeviceGetBAR1MemoryInfo".to_string()),
            None => match ctx
                .inv
                .extras
                .get(&g.bdf)
                .and_then(|x| x.resources.as_ref()?.value())
                .and_then(|r| bar1_from_resources(r))
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
            (Some(b), None) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("BAR1 {} but GPU memory size unknown ({})", gib(b), unread(n.and_then(|n| n.memory_total_bytes.unread())))).with(ev(src, gib(b)))),
            (None, _) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("BAR1 size unknown: {}", unread(n.and_then(|n| n.bar1_total_bytes.unread()))))),
        }
    });
}

pub(super) fn persistence(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuPersistence;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        match n.persistence_mode.value() {
            Some(true) => out.push(Finding::new(id, s.clone(), Status::Pass, "persistence mode on").with(ev("nvmlDeviceGetPersistenceMode", "enabled"))),
            Some(false) => out.push(Finding::new(id, s.clone(), Status::Warn, "persistence mode off: the driver tears the GPU down between jobs (slow start-up, lost state)")
                .with(ev("nvmlDeviceGetPersistenceMode", "disabled"))
                .fix("Run nvidia-persistenced (`systemctl enable --now nvidia-persistenced`) or `nvidia-smi -pm 1`")),
            None => out.push(Finding::new(id, s.clone(), Status::Skip, format!("persistence mode unknown: {}", unread(n.persistence_mode.unread())))),
        }
    });
}

pub(super) fn ecc(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuEcc;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        match (n.ecc_enabled.value(), n.ecc_volatile_uncorrected.value()) {
            (_, Some(&u)) if u > 0 => out.push(Finding::new(id, s.clone(), Status::Fail, format!("{u} volatile uncorrectable ECC errors since the last driver load"))
                .with(ev("nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)", u.to_string()))
                .fix("Drain the node; reset the GPU (`nvidia-smi -r`) so pending row remaps apply; if errors recur, RMA the GPU (check `nvidia-smi -q -d ECC,ROW_REMAPPER` and Xid 48/63/64 in dmesg)")),
            (Some(false), _) => out.push(Finding::new(id, s.clone(), Status::Warn, "ECC disabled: memory errors go undetected")
                .with(ev("nvmlDeviceGetEccMode", "disabled"))
                .fix("`nvidia-smi -e 1` and reboot/reset the GPU")),
            (Some(true), Some(_)) => out.push(Finding::new(id, s.clone(), Status::Pass, "ECC enabled, no volatile uncorrectable errors")
                .with(ev("nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)", "0"))),
            (Some(true), None) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("ECC on; error counters unknown: {}", unread(n.ecc_volatile_uncorrected.unread())))),
            (None, _) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("ECC mode unknown: {}", unread(n.ecc_enabled.unread())))),
        }
    });
}

pub(super) fn row_remap(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuRowRemap;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        match (n.remapped_rows_pending.value(), n.retired_pending.value()) {
            (Some(true), _) | (_, Some(true)) => out.push(Finding::new(id, s.clone(), Status::Fail, "memory repairs pending (row remap or page retirement): they apply only after a GPU reset")
                .with(ev("nvmlDeviceGetRemappedRows pending / nvmlDeviceGetRetiredPagesPendingStatus", format!("{:?} / {:?}", n.remapped_rows_pending.value(), n.retired_pending.value())))
                .fix("Drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot")),
            (Some(false), _) | (None, Some(false)) => out.push(Finding::new(id, s.clone(), Status::Pass, "no pending row remaps or page retirements")),
            (None, None) => out.push(Finding::new(id, s.clone(), Status::Skip, format!("row remap state unknown: {}", unread(n.remapped_rows_pending.unread())))),
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
        } else if let Some(hidden) = n.nvlink_state.why()
            && down.is_empty()
        {
            // Only active links were written (an NCCL topology XML): a down one would be missing,
            // not shown as down.
            out.push(
                Finding::new(
                    id,
                    s.clone(),
                    Status::Skip,
                    format!(
                        "{} listed, whether any is down is unknown: {hidden}",
                        crate::words::count(total, "NVLink", "NVLinks")
                    ),
                )
                .with(ev("nvmlDeviceGetNvLinkState", hidden)),
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
                .map(|l| l.remote_bus_id.value().and_then(|r| r.parse().ok()))
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
    let pairs = match ctx.inv.nvml.p2p.value() {
        Some(v) if !v.is_empty() => v,
        // Not read, or no pair read: P2P is unknown either way.
        _ => {
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
    };
    // NVML's pairs by address, parsed once (GPUs^2 pairs: a lookup, not a scan, per pair).
    let mut recorded = std::collections::HashMap::new();
    for p in pairs {
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

const XID_CATALOG: &str = "NVIDIA Xid catalog, Resolution Bucket (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html); AzNHC check_gpu_xid fails on 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120";
const AZNHC_THROTTLE: &str = "AzNHC check_gpu_clock_throttling flags any reason but GPU idle, none and SW power cap (azurehpc-health-checks); NVML nvmlClocksEventReasons";
const DCGM_NVLINK: &str = "DCGM GpuHardwareLimits.h: DCGM_LIMIT_MAX_NVLINK_ERROR 1 (replay/recovery), DCGM_LIMIT_MAX_NVLINK_CRC_ERROR 100 per second";

fn any_gpu_or_skip(ctx: &Ctx, id: CheckId, out: &mut Vec<Finding>) -> bool {
    if ctx.topo.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return false;
    }
    true
}

/// What an Xid asks of the operator, after NVIDIA's Xid catalog (Resolution Bucket) and the
/// list AzNHC fails a node on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum XidClass {
    /// The application's fault (RESTART_APP, CHECK_APP/CUDA): the node is fine.
    Application,
    /// Not in gpudoctor's table: look it up.
    Unlisted,
    /// The GPU needs a reset (or a reboot) before it is trusted again.
    NeedsReset,
    /// A hardware or mechanical fault: reseat, check power, RMA if it recurs.
    ReseatOrRma,
}

/// The class and short meaning of an Xid code.
pub fn classify_xid(code: u32) -> (XidClass, &'static str) {
    use XidClass::*;
    match code {
        8 => (Application, "GPU stopped processing (channel idle timeout)"),
        11 => (Application, "invalid or corrupted push buffer stream"),
        13 => (Application, "graphics engine exception"),
        31 => (
            Application,
            "GPU memory page fault (illegal access by the application)",
        ),
        43 => (
            Application,
            "GPU stopped processing (channel reset after an application error)",
        ),
        45 => (Application, "preemptive cleanup after earlier errors"),
        48 => (NeedsReset, "double-bit ECC error"),
        54 => (ReseatOrRma, "auxiliary power not connected"),
        56 => (NeedsReset, "display engine error"),
        57 => (NeedsReset, "error programming the video memory interface"),
        58 => (NeedsReset, "unstable video memory interface"),
        62 => (NeedsReset, "internal micro-controller halt"),
        63 => (
            NeedsReset,
            "row remapping / page retirement recorded (applies after a reset)",
        ),
        64 => (ReseatOrRma, "row remapping / page retirement failed"),
        65 => (NeedsReset, "video processor exception"),
        68 => (NeedsReset, "video decoder exception"),
        69 => (NeedsReset, "graphics engine class error"),
        73 => (NeedsReset, "video encoder error"),
        74 => (NeedsReset, "NVLink error"),
        79 => (ReseatOrRma, "GPU has fallen off the bus"),
        80 => (NeedsReset, "corrupted data sent to the GPU"),
        81 => (NeedsReset, "VGA subsystem error"),
        92 => (NeedsReset, "high single-bit ECC error rate"),
        94 => (NeedsReset, "contained ECC error (row remap pending)"),
        95 => (NeedsReset, "uncontained ECC error"),
        119 => (NeedsReset, "GSP RPC timeout"),
        120 => (NeedsReset, "GSP error"),
        140 => (NeedsReset, "unrecovered ECC error"),
        _ => (Unlisted, "not in gpudoctor's table"),
    }
}

/// `0000:65:00` for a GPU at 0000:65:00.0 (NVRM names domain, bus and device).
fn xid_pci(bdf: crate::pci::Bdf) -> String {
    let s = bdf.to_string();
    s.rsplit_once('.').map(|(a, _)| a.to_string()).unwrap_or(s)
}

/// gpu.xid: NVRM Xid events in the kernel log since boot, by GPU.
pub(super) fn xid(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuXid;
    if !any_gpu_or_skip(ctx, id, out) {
        return;
    }
    let log = &*ctx.inv.kernel_log;
    if let Some(why) = &log.unavailable {
        for g in &ctx.topo.gpus {
            let mut f = Finding::new(
                id,
                g.label.clone(),
                Status::Skip,
                format!("kernel log unknown: {why}"),
            )
            .with(ev(log.origin(), why.clone()));
            if log.needs_root {
                f.skip = Some(SkipKind::NotRoot);
            }
            out.push(f);
        }
        return;
    }
    let xids = log.xids();
    let mut matched = vec![false; xids.len()];
    for g in &ctx.topo.gpus {
        let pci = xid_pci(g.bdf);
        let mine: Vec<_> = xids
            .iter()
            .enumerate()
            .filter(|(_, x)| x.pci == pci)
            .map(|(i, x)| {
                matched[i] = true;
                x
            })
            .collect();
        let mut by_code: BTreeMap<u32, usize> = BTreeMap::new();
        for x in &mine {
            *by_code.entry(x.code).or_default() += 1;
        }
        let worst = by_code.keys().map(|c| classify_xid(*c).0).max();
        let summary = by_code
            .iter()
            .map(|(c, n)| format!("Xid {c} x{n} ({})", classify_xid(*c).1))
            .collect::<Vec<_>>()
            .join(", ");
        let mut evs = vec![ev(
            log.origin(),
            format!(
                "{} Xid records for PCI:{pci}; {}",
                mine.len(),
                log.coverage()
            ),
        )];
        // The last record of each code, as the operator will grep for it.
        for c in by_code.keys() {
            if let Some(x) = mine.iter().rev().find(|x| x.code == *c) {
                evs.push(ev(
                    format!("{} (last Xid {c})", log.origin()),
                    x.text.clone(),
                ));
            }
        }
        let s = g.label.clone();
        let f = match worst {
            None => Finding::new(id, s, Status::Pass, "no Xid events since boot").evidence(evs),
            Some(XidClass::Application) => Finding::new(id, s, Status::Pass, format!("only application-caused Xids: {summary}")).evidence(evs),
            Some(XidClass::Unlisted) => Finding::new(id, s, Status::Warn, format!("Xids gpudoctor does not classify: {summary}"))
                .evidence(evs)
                .with(ev("classification", XID_CATALOG))
                .fix("Look the code up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors) and follow its resolution bucket"),
            Some(XidClass::NeedsReset) => Finding::new(id, s, Status::Fail, format!("Xids that need a GPU reset: {summary}"))
                .evidence(evs)
                .with(ev("classification", XID_CATALOG))
                .fix("Drain the node and reset the GPU (`nvidia-smi -r -i N`) or reboot; check `nvidia-smi -q -d ECC,ROW_REMAPPER`; if the Xid recurs after the reset, run `dcgmi diag -r 3` and contact NVIDIA support. The log keeps the event until reboot"),
            Some(XidClass::ReseatOrRma) => Finding::new(id, s, Status::Fail, format!("Xids that point at hardware: {summary}"))
                .evidence(evs)
                .with(ev("classification", XID_CATALOG))
                .fix("Drain the node; reboot (a reset cannot reach a GPU off the bus); check the GPU's seating, riser, power cables and BMC/SEL log; if it recurs, RMA the GPU"),
        };
        out.push(f);
    }
    let stray: Vec<String> = xids
        .iter()
        .zip(&matched)
        .filter(|(_, m)| !**m)
        .map(|(x, _)| format!("Xid {} on PCI:{}", x.code, x.pci))
        .collect();
    if !stray.is_empty() {
        out.push(
            Finding::new(id, "host", Status::Warn, format!("Xids for GPUs not on the PCI bus now: {}", stray.join(", ")))
                .with(ev(log.origin(), log.coverage()))
                .fix("A GPU that logged Xids is gone from the bus (see driver.gpu-count): reboot; check its seating and power; RMA it if it does not come back"),
        );
    }
}

/// Clock event reasons that mean trouble, with their names (NVML's nvmlClocksEventReason*).
const TROUBLE: [(u64, &str); 4] = [
    (0x8, "HW slowdown"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake slowdown"),
];
const BENIGN: [(u64, &str); 5] = [
    (0x1, "GPU idle"),
    (0x2, "applications clocks setting"),
    (0x4, "SW power cap"),
    (0x10, "sync boost"),
    (0x100, "display clock setting"),
];

fn reason_names(bits: u64) -> String {
    let names: Vec<&str> = TROUBLE
        .iter()
        .chain(BENIGN.iter())
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// gpu.throttle: clock event reasons that mean trouble.
pub(super) fn throttle(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuThrottle;
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        let Some(&bits) = n.clock_event_reasons.value() else {
            out.push(Finding::new(
                id,
                s,
                Status::Skip,
                format!(
                    "clock event reasons unknown: {}",
                    unread(n.clock_event_reasons.unread())
                ),
            ));
            return;
        };
        let e = ev(
            "nvmlDeviceGetCurrentClocksEventReasons",
            format!("0x{bits:x} ({})", reason_names(bits)),
        );
        let bad: Vec<&str> = TROUBLE
            .iter()
            .filter(|(b, _)| bits & b != 0)
            .map(|(_, n)| *n)
            .collect();
        if bad.is_empty() {
            out.push(
                Finding::new(
                    id,
                    s,
                    Status::Pass,
                    format!("no hardware or thermal slowdown ({})", reason_names(bits)),
                )
                .with(e),
            );
        } else {
            out.push(
                Finding::new(id, s, Status::Warn, format!("clocks held down by {}", bad.join(", ")))
                    .with(e)
                    .with(ev("threshold", AZNHC_THROTTLE))
                    .fix("Thermal: check inlet temperature, fans and airflow (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`); HW slowdown / power brake: the board or the chassis asserted it (PSU, power cabling, BMC power capping: check the BMC/SEL log); persistent hardware slowdown on one GPU needs service"),
            );
        }
    });
}

/// gpu.nvlink-errors: NVLink replay, recovery and CRC counters per active link.
pub(super) fn nvlink_errors(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuNvlinkErrors;
    let uptime = ctx.inv.host.uptime_s.value().copied();
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        let active: Vec<u32> = n
            .nvlinks
            .iter()
            .filter(|l| l.active)
            .map(|l| l.link)
            .collect();
        if active.is_empty() {
            // No active link read: not applicable only when the list itself was read; an
            // unreadable list may hide active links (absent is read, unreadable is
            // unknown).
            let f = match n.nvlinks_unread() {
                Some(why) => Finding::new(
                    id,
                    s,
                    Status::Skip,
                    format!("NVLink list unreadable: {why}"),
                )
                .with(ev("nvmlDeviceGetNvLinkState", why)),
                None => Finding::new(
                    id,
                    s,
                    Status::Skip,
                    "no active NVLinks (PCIe GPU, or links down: see gpu.nvlink-down)",
                )
                .not_applicable(),
            };
            out.push(f);
            return;
        }
        let mut evs = Vec::new();
        let mut bad = Vec::new();
        let mut missing = Vec::new();
        for link in &active {
            let Some(e) = n.nvlink_errors.get(link) else {
                missing.push(format!("link {link}: {}", crate::nvml::NOT_RECORDED));
                continue;
            };
            let (Some(&replay), Some(&recovery), Some(&flit), Some(&data)) = (
                e.replay.value(),
                e.recovery.value(),
                e.crc_flit.value(),
                e.crc_data.value(),
            ) else {
                let first = e.counters().into_iter().find_map(|(_, r)| r.unread());
                missing.push(format!("link {link}: {}", unread(first)));
                continue;
            };
            if replay + recovery + flit + data == 0 {
                continue;
            }
            evs.push(ev(
                format!("nvmlDeviceGetNvLinkErrorCounter link {link}"),
                format!("replay {replay}, recovery {recovery}, CRC flit {flit}, CRC data {data}"),
            ));
            if replay >= 1 || recovery >= 1 {
                bad.push(format!("link {link}: replay {replay}, recovery {recovery}"));
            }
            let crc = flit + data;
            if let Some(up) = uptime
                && super::per_second(crc, up) >= 100.0
            {
                bad.push(format!(
                    "link {link}: {:.1} CRC errors/s",
                    super::per_second(crc, up)
                ));
            }
        }
        if !bad.is_empty() {
            out.push(
                Finding::new(id, s, Status::Warn, format!("NVLink errors: {}", bad.join("; ")))
                    .evidence(evs)
                    .with(ev("threshold", DCGM_NVLINK))
                    .fix("Check `nvidia-smi nvlink -e` over time; counters that keep growing mean a marginal link: reset the GPU, and on HGX have the baseboard/NVSwitch tray serviced if they recur (Xid 74 in the kernel log confirms)"),
            );
        } else if !missing.is_empty() {
            // One reason for many links (an old recording): say it once.
            let mut by_reason: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for m in missing {
                if let Some((l, r)) = m.split_once(": ") {
                    by_reason
                        .entry(r.to_string())
                        .or_default()
                        .push(l.trim_start_matches("link ").to_string());
                }
            }
            let text = by_reason
                .iter()
                .map(|(r, ls)| {
                    format!(
                        "{} {}: {r}",
                        if ls.len() == 1 { "link" } else { "links" },
                        ls.join(",")
                    )
                })
                .collect::<Vec<_>>()
                .join("; ");
            out.push(
                Finding::new(
                    id,
                    s,
                    Status::Skip,
                    format!("NVLink error counters unknown: {text}"),
                )
                .evidence(evs),
            );
        } else {
            out.push(
                Finding::new(
                    id,
                    s,
                    Status::Pass,
                    format!(
                        "{} active NVLinks without replay/recovery errors or a high CRC rate",
                        active.len()
                    ),
                )
                .with(ev(
                    "nvmlDeviceGetNvLinkErrorCounter",
                    format!(
                        "{} read",
                        crate::words::count(active.len(), "link", "links")
                    ),
                ))
                .evidence(evs),
            );
        }
    });
}

/// NVSwitch functions on this OS's PCI bus, as the topology classed them; None when a
/// function's vendor or class could not be read (it might be one).
fn nvswitches(ctx: &Ctx) -> Option<usize> {
    if ctx
        .inv
        .pci
        .values()
        .any(|f| !f.vendor.is_value() || !f.class.is_value())
    {
        return None;
    }
    Some(
        ctx.topo
            .devices
            .iter()
            .filter(|d| d.kind == crate::topo::DeviceKind::NvSwitch)
            .count(),
    )
}

/// gpu.fabric: the NVSwitch fabric registration of each GPU.
pub(super) fn fabric(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GpuFabric;
    let switches = nvswitches(ctx);
    each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        let switched = n
            .nvlinks
            .iter()
            .any(|l| l.remote_device_type.value() == Some(&crate::facts::NvLinkRemote::Switch));
        let Some(f) = n.fabric.value() else {
            if switched {
                out.push(Finding::new(
                    id,
                    s,
                    Status::Skip,
                    format!(
                        "NVSwitch fabric state unknown: {}",
                        unread(n.fabric.unread())
                    ),
                ));
            } else if n.nvlinks.is_empty() && n.nvlinks_unread().is_none() {
                out.push(
                    Finding::new(id, s, Status::Skip, "no NVLinks: not on an NVSwitch fabric")
                        .not_applicable(),
                );
            } else {
                out.push(Finding::new(
                    id,
                    s,
                    Status::Skip,
                    format!(
                        "fabric state unknown ({}) and no link reports an NVSwitch at its far end",
                        unread(n.fabric.unread())
                    ),
                ));
            }
            return;
        };
        let e = ev(
            "nvmlDeviceGetGpuFabricInfo",
            format!(
                "state {}, status {}",
                f.state,
                f.status.map_or("-".into(), |s| s.to_string())
            ),
        );
        let fm = ctx.inv.host.fabric_manager_pids.value();
        let fm_ev = ev(
            "/proc/*/comm (nv-fabricmanage)",
            match fm {
                Some(p) if p.is_empty() && !ctx.inv.host.fabric_manager_lookalikes.is_empty() => {
                    format!(
                        "not running (processes named like it are not the daemon: {})",
                        ctx.inv.host.fabric_manager_lookalikes.join("; ")
                    )
                }
                Some(p) if p.is_empty() => "not running".to_string(),
                Some(p) => format!(
                    "running, pid {}",
                    p.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
                ),
                None => format!(
                    "unknown: {}",
                    ctx.inv.host.fabric_manager_pids.why().unwrap_or_default()
                ),
            },
        );
        let fm_down = fm.is_some_and(|p| p.is_empty());
        // No NVSwitch on this OS's PCI bus (every function identified) while the GPU is on a
        // fabric: the switches and their fabric manager belong to the host or a service VM
        // (NVIDIA's shared NVSwitch virtualization model), so none runs here, rightly.
        let managed_elsewhere = switches == Some(0);
        let switches_ev = ev(
            "PCI bus: NVSwitch functions (vendor 10de, class 0680)",
            match switches {
                Some(n) => format!("{n} among {} functions", ctx.inv.pci.len()),
                None => "unknown: a function's vendor or class could not be read".into(),
            },
        );
        match (f.state.as_str(), f.status) {
            ("not-supported", _) if !switched => out.push(Finding::new(id, s, Status::Skip, "GPU not on an NVSwitch fabric (fabric state not supported)").with(e).not_applicable()),
            ("completed", Some(0)) if managed_elsewhere && (fm_down || fm.is_none()) => out.push(
                Finding::new(id, s, Status::Pass, "registered with the NVSwitch fabric, which is managed outside this OS: no NVSwitch on its PCI bus (shared NVSwitch virtualization: the fabric manager runs in the host or a service VM)")
                    .with(e)
                    .with(switches_ev)
                    .with(fm_ev),
            ),
            ("completed", Some(0)) if fm_down => out.push(
                Finding::new(id, s, Status::Warn, "registered with the NVSwitch fabric, but nvidia-fabricmanager is not running: the fabric is not re-programmed after a GPU reset or an NVSwitch error")
                    .with(e)
                    .with(fm_ev)
                    .with(switches_ev.clone())
                    .fix("Start nvidia-fabricmanager (`systemctl enable --now nvidia-fabricmanager`); `journalctl -u nvidia-fabricmanager` says why it stopped"),
            ),
            ("completed", Some(0)) if switched && fm.is_none() => out.push(
                Finding::new(id, s, Status::Skip, "registered with the NVSwitch fabric; whether nvidia-fabricmanager runs could not be read")
                    .with(e)
                    .with(fm_ev),
            ),
            ("completed", Some(0)) => out.push(Finding::new(id, s, Status::Pass, "registered with the NVSwitch fabric").with(e).with(fm_ev)),
            ("completed", st) => out.push(
                Finding::new(id, s, Status::Fail, format!("fabric registration completed with NVML error {}: the GPU cannot use NVLink through the switches", st.map_or("?".into(), |v| v.to_string())))
                    .with(e)
                    .with(fm_ev)
                    .fix("Check `journalctl -u nvidia-fabricmanager` and `nvidia-smi -q | grep -A3 Fabric`; restart nvidia-fabricmanager, and reset the GPUs or reboot if the state does not recover"),
            ),
            (state, _) if managed_elsewhere => out.push(
                Finding::new(id, s, Status::Fail, format!("NVSwitch fabric registration {state}: NVLink traffic through the switches does not work (CUDA init fails or P2P is unavailable); the fabric is managed outside this OS (no NVSwitch on its PCI bus)"))
                    .with(e)
                    .with(switches_ev)
                    .with(fm_ev)
                    .fix("The fabric manager runs in the host or service VM that owns the NVSwitches: report the GPU's fabric state (`nvidia-smi -q | grep -A3 Fabric`) to whoever runs that host; restarting the VM lets the host re-register the GPU"),
            ),
            (state, _) => out.push(
                Finding::new(id, s, Status::Fail, format!("NVSwitch fabric registration {state}{}: NVLink traffic through the switches does not work (CUDA init fails or P2P is unavailable)", if fm_down { " and nvidia-fabricmanager is not running" } else { "" }))
                    .with(e)
                    .with(fm_ev)
                    .fix("Start nvidia-fabricmanager (`systemctl enable --now nvidia-fabricmanager`, same version as the driver); `journalctl -u nvidia-fabricmanager` says why it failed; on HGX H100 also check nvlsm/NVLink subnet manager"),
            ),
        }
    });
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
