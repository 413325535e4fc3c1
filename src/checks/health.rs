//! The everyday health checks operators already run: RDMA port error counters and
//! link flaps (sysfs counters and the kernel log), NVRM Xid events (the kernel log), clock
//! event reasons, NVLink error counters and NVSwitch fabric registration (the NVML snapshot).
//!
//! Every threshold names its published source in the evidence. Counters are cumulative since
//! the driver loaded (or were last cleared): a point-in-time check cannot take a delta, so a
//! rate threshold is judged on the average since boot (/proc/uptime), which is a lower bound of
//! the rate since the counters were last cleared.

use super::{CheckId, Ctx, Finding, SkipKind, Status, ev};
use crate::inventory::{RdmaDevice, RdmaPort};
use crate::kmsg::KernelLog;
use crate::nvml::NvmlGpu;
use std::collections::BTreeMap;

const NVSENTINEL: &str = "NVIDIA NVSentinel NIC health monitor defaults (docs/nic-health-monitor/link-counter-detection.md, Appendix A)";
const IBTA_SYMBOL: &str = "IBTA BER 10^-12 limit as 120 symbol errors per hour (Oracle/Sun InfiniBand docs 820-7751, cited by NVSentinel)";
const AZNHC_FLAP: &str = "AzNHC check_ib_link_flapping: more than one link-down event within 6 hours fails (azurehpc-health-checks, NHC2005)";
const XID_CATALOG: &str = "NVIDIA Xid catalog, Resolution Bucket (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html); AzNHC check_gpu_xid fails on 48 56 57 58 62 63 64 65 68 69 73 74 79 80 81 92 119 120";
const AZNHC_THROTTLE: &str = "AzNHC check_gpu_clock_throttling flags any reason but GPU idle, none and SW power cap (azurehpc-health-checks); NVML nvmlClocksEventReasons";
const DCGM_NVLINK: &str = "DCGM GpuHardwareLimits.h: DCGM_LIMIT_MAX_NVLINK_ERROR 1 (replay/recovery), DCGM_LIMIT_MAX_NVLINK_CRC_ERROR 100 per second";

/// Counters whose any increment means the workload has failed or will (NVSentinel's "fatal"
/// counters), with the directory they live in.
const FATAL_COUNTERS: [(&str, &str); 3] = [
    ("counters", "excessive_buffer_overrun_errors"),
    ("counters", "local_link_integrity_errors"),
    ("hw_counters", "rnr_nak_retry_err"),
];

/// Rate thresholds (per second) and their source: symbol errors from the IBTA BER limit, the
/// rest NVSentinel's non-fatal defaults.
const RATE_COUNTERS: [(&str, &str, f64, &str); 5] = [
    ("counters", "symbol_error", 120.0 / 3600.0, IBTA_SYMBOL),
    ("counters", "link_error_recovery", 5.0 / 60.0, NVSENTINEL),
    ("counters", "port_rcv_errors", 10.0, NVSENTINEL),
    ("counters", "port_xmit_discards", 100.0, NVSENTINEL),
    ("hw_counters", "local_ack_timeout_err", 1.0, NVSENTINEL),
];

/// Shown with their values but not judged: no published threshold for a cumulative value.
const SHOWN_COUNTERS: [(&str, &str); 3] = [
    ("hw_counters", "out_of_buffer"),
    ("hw_counters", "packet_seq_err"),
    ("hw_counters", "rnr_nak_retry_err"),
];

fn counter(p: &RdmaPort, dir: &str, name: &str) -> Option<u64> {
    let m = if dir == "counters" {
        p.counters.as_ref()
    } else {
        p.hw_counters.as_ref()
    };
    m.and_then(|m| m.get(name)).copied()
}

/// Every port of every PCI RDMA device as (device, port, "dev/port", its sysfs dir), or one
/// not-applicable skip on `host` when there is none.
fn each_port(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&RdmaDevice, &RdmaPort, String, String, &mut Vec<Finding>),
) {
    let Some(devices) = super::rdma::pci_rdma_or_skip(ctx, id, out) else {
        return;
    };
    for (r, _) in devices {
        for p in &r.ports {
            let subject = format!("{}/{}", r.name, p.port);
            let pdir = format!("/sys/class/infiniband/{}/ports/{}", r.name, p.port);
            check(r, p, subject, pdir, out);
        }
    }
}

fn per_second(v: u64, uptime: f64) -> f64 {
    v as f64 / uptime.max(1.0)
}

/// rdma.port-errors: IB port counters and RoCE/mlx5 hw_counters against published thresholds.
pub(super) fn port_errors(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaPortErrors;
    let uptime = ctx.inv.host.uptime_s;
    each_port(ctx, id, out, |_r, p, subject, pdir, out| {
        let Some(c) = &p.counters else {
            out.push(Finding::new(
                id,
                subject,
                Status::Skip,
                format!(
                    "port counters unreadable: {}",
                    p.unread.get("counters").cloned().unwrap_or_default()
                ),
            ));
            return;
        };
        let mut evs = Vec::new();
        // A judged counter that could not be read (garbled), or a standard IB port counter
        // missing from a listed `counters/` (the IB core exposes them all for every port):
        // the port cannot pass. Driver `hw_counters` may legitimately be absent.
        let unreadable: Vec<String> = FATAL_COUNTERS
            .iter()
            .map(|(d, n)| (*d, *n))
            .chain(RATE_COUNTERS.iter().map(|(d, n, _, _)| (*d, *n)))
            .filter(|(d, n)| counter(p, d, n).is_none())
            .filter_map(|(d, n)| match p.unread.get(&format!("{d}.{n}")) {
                Some(why) => Some(format!("{d}/{n}: {why}")),
                None if d == "counters" => Some(format!("{d}/{n}: missing")),
                None => None,
            })
            .collect();
        let mut fatal = Vec::new();
        for (dir, name) in FATAL_COUNTERS {
            if let Some(v) = counter(p, dir, name)
                && v > 0
            {
                fatal.push(format!("{name} {v}"));
                evs.push(ev(
                    format!("{pdir}/{dir}/{name}"),
                    format!("{v} (any increment is fatal: {NVSENTINEL})"),
                ));
            }
        }
        let mut fast = Vec::new();
        let mut unjudged = Vec::new();
        for (dir, name, limit, source) in RATE_COUNTERS {
            let Some(v) = counter(p, dir, name) else {
                continue;
            };
            if v == 0 {
                continue;
            }
            match uptime {
                Some(up) => {
                    let rate = per_second(v, up);
                    let shown = format!(
                        "{v} in {:.0} s since boot = at least {rate:.3}/s (limit {limit:.3}/s: {source})",
                        up
                    );
                    if rate > limit {
                        fast.push(format!("{name} {rate:.3}/s > {limit:.3}/s"));
                    }
                    evs.push(ev(format!("{pdir}/{dir}/{name}"), shown));
                }
                None => {
                    unjudged.push(format!("{name} {v}"));
                    evs.push(ev(
                        format!("{pdir}/{dir}/{name}"),
                        format!("{v} (time since boot unknown: rate not judged)"),
                    ));
                }
            }
        }
        for (dir, name) in SHOWN_COUNTERS {
            if let Some(v) = counter(p, dir, name)
                && v > 0
                && !FATAL_COUNTERS.contains(&(dir, name))
            {
                evs.push(ev(
                    format!("{pdir}/{dir}/{name}"),
                    format!(
                        "{v} (no published threshold for a cumulative value: shown, not judged)"
                    ),
                ));
            }
        }
        if !fatal.is_empty() {
            out.push(
                Finding::new(id, subject, Status::Fail, format!("fatal error counters nonzero: {}{}", fatal.join(", "), if fast.is_empty() { String::new() } else { format!("; also {}", fast.join(", ")) }))
                    .evidence(evs)
                    .fix("Drain the node. excessive_buffer_overrun_errors / local_link_integrity_errors mean a physical link outside spec: reseat or replace the cable/transceiver, check the switch port (`ibdiagnet`, `mlxlink -d <dev> -m`); rnr_nak_retry_err means connections were severed (receiver not ready): check the peers and the application. Clear the counters after the repair (`perfquery -x -R`) so a recurrence shows"),
            );
        } else if !fast.is_empty() {
            out.push(
                Finding::new(id, subject, Status::Warn, format!("error counters above their published rates: {}", fast.join(", ")))
                    .evidence(evs)
                    .fix("A degrading link: check the cable/transceiver and switch port (`mlxlink -d <dev> -m -c` shows BER and FEC), reseat or replace it; clear the counters (`perfquery -x -R`) and re-check to see whether they still grow"),
            );
        } else if !unreadable.is_empty() {
            out.push(
                Finding::new(
                    id,
                    subject,
                    Status::Skip,
                    format!("error counters unreadable: {}", unreadable.join("; ")),
                )
                .evidence(evs),
            );
        } else if !unjudged.is_empty() {
            out.push(
                Finding::new(id, subject, Status::Skip, format!("nonzero error counters ({}) but the time since boot is unknown (/proc/uptime: {}): rates not judged", unjudged.join(", "), ctx.inv.host.unread.get("uptime").cloned().unwrap_or_else(|| "not read".into())))
                    .evidence(evs),
            );
        } else {
            let judged = FATAL_COUNTERS
                .iter()
                .map(|(d, n)| (*d, *n))
                .chain(RATE_COUNTERS.iter().map(|(d, n, _, _)| (*d, *n)))
                .filter(|(d, n)| counter(p, d, n).is_some())
                .count();
            if judged == 0 {
                out.push(
                    Finding::new(
                        id,
                        subject,
                        Status::Skip,
                        format!(
                            "none of the judged error counters is present ({} read)",
                            crate::words::count(c.len(), "counter", "counters")
                        ),
                    )
                    .evidence(evs),
                );
                return;
            }
            out.push(
                Finding::new(
                    id,
                    subject,
                    Status::Pass,
                    format!("{judged} error counters within limits"),
                )
                .with(ev(
                    format!("{pdir}/counters"),
                    "fatal counters 0; rate counters within limits",
                ))
                .evidence(evs),
            );
        }
    });
}

/// The kernel log's link-down records naming this port's netdev or its PCI function.
fn log_link_downs<'a>(ctx: &Ctx, log: &'a KernelLog, r: &RdmaDevice, p: &RdmaPort) -> Vec<&'a str> {
    let mut names: Vec<String> = p.gids.iter().filter_map(|g| g.ndev.clone()).collect();
    names.extend(
        ctx.inv
            .netdevs
            .iter()
            .filter(|n| n.bdf.is_some() && n.bdf == r.bdf())
            .map(|n| n.name.clone()),
    );
    names.sort();
    names.dedup();
    let bdf = r.bdf().map(|b| b.to_string());
    log.lines
        .iter()
        .filter_map(|l| crate::kmsg::link_down(l))
        .filter(|t| {
            names.iter().any(|n| {
                t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
                    .any(|w| w == n)
            }) || bdf.as_deref().is_some_and(|b| t.contains(b)) && names.is_empty()
        })
        .collect()
}

/// rdma.link-flaps: link-down events from `link_downed` and the kernel log.
pub(super) fn link_flaps(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaLinkFlaps;
    let log = &*ctx.inv.kernel_log;
    each_port(ctx, id, out, |r, p, subject, pdir, out| {
        let downed = counter(p, "counters", "link_downed");
        let logged = log
            .unavailable
            .is_none()
            .then(|| log_link_downs(ctx, log, r, p));
        let mut evs = vec![ev(
            format!("{pdir}/counters/link_downed"),
            match downed {
                Some(v) => v.to_string(),
                None => p
                    .unread
                    .get("counters.link_downed")
                    .or(p.unread.get("counters"))
                    .cloned()
                    .unwrap_or_else(|| "not present".into()),
            },
        )];
        match &logged {
            Some(lines) => {
                evs.push(ev(
                    log.origin(),
                    format!(
                        "{} link-down records for this port; {}",
                        lines.len(),
                        log.coverage()
                    ),
                ));
                for l in lines.iter().take(5) {
                    evs.push(ev(log.origin(), l.to_string()));
                }
            }
            None => evs.push(ev(
                log.origin(),
                log.unavailable.clone().unwrap_or_default(),
            )),
        }
        let events = downed
            .unwrap_or(0)
            .max(logged.as_ref().map_or(0, |l| l.len() as u64));
        if downed.is_none() && logged.is_none() {
            let mut f = Finding::new(
                id,
                subject,
                Status::Skip,
                "link-down history unknown: link_downed counter and kernel log both unreadable",
            )
            .evidence(evs);
            if log.needs_root {
                f.skip = Some(SkipKind::NotRoot);
            }
            out.push(f);
        } else if events >= 2 {
            out.push(
                Finding::new(id, subject, Status::Fail, format!("link went down {events} times since the counters were cleared / boot: a flapping link"))
                    .evidence(evs)
                    .with(ev("threshold", format!("{AZNHC_FLAP}; {NVSENTINEL}: any link_downed increment is fatal")))
                    .fix("Drain the node: every link-down kills the RDMA connections over it. Reseat or replace the cable/transceiver, check the switch port's log and `mlxlink -d <dev> -m`; clear the counters (`perfquery -x -R`) after the repair"),
            );
        } else if events == 1 {
            out.push(
                Finding::new(id, subject, Status::Warn, "link went down once since the counters were cleared / boot")
                    .evidence(evs)
                    .with(ev("threshold", format!("{NVSENTINEL}: any link_downed increment is fatal to running jobs; {AZNHC_FLAP}")))
                    .fix("If nobody replugged the cable or rebooted the switch, check the cable/transceiver and switch port; clear the counter (`perfquery -x -R`) and watch for a recurrence"),
            );
        } else if downed.is_none() {
            // The kernel log shows no link-down, but the port's own counter (which also counts
            // events from before the log's start) could not be read: not a pass.
            out.push(
                Finding::new(
                    id,
                    subject,
                    Status::Skip,
                    "link-down history incomplete: no link-down in the kernel log, link_downed counter unreadable",
                )
                .evidence(evs),
            );
        } else {
            out.push(Finding::new(id, subject, Status::Pass, "no link-down events").evidence(evs));
        }
    });
}

fn each_gpu(ctx: &Ctx, id: CheckId, out: &mut Vec<Finding>) -> bool {
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
    if !each_gpu(ctx, id, out) {
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

/// What `unread` says about `key`, or "not recorded" for a snapshot written before it was kept.
fn why(n: &NvmlGpu, unread: &dyn Fn(&str) -> String, key: &str) -> String {
    if n.unread.contains_key(key) {
        unread(key)
    } else {
        "not recorded (nvml.json written before gpudoctor kept it)".into()
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
    super::gpu::each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        let Some(bits) = n.clock_event_reasons else {
            out.push(Finding::new(
                id,
                s,
                Status::Skip,
                format!(
                    "clock event reasons unknown: {}",
                    why(n, unread, "clock_event_reasons")
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
    let uptime = ctx.inv.host.uptime_s;
    super::gpu::each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
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
                missing.push(format!(
                    "link {link}: {}",
                    why(n, unread, &format!("nvlink.{link}.errors"))
                ));
                continue;
            };
            let (Some(replay), Some(recovery), Some(flit), Some(data)) =
                (e.replay, e.recovery, e.crc_flit, e.crc_data)
            else {
                missing.push(format!(
                    "link {link}: {}",
                    why(n, unread, &format!("nvlink.{link}.errors.replay"))
                ));
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
                && per_second(crc, up) >= 100.0
            {
                bad.push(format!(
                    "link {link}: {:.1} CRC errors/s",
                    per_second(crc, up)
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
        .any(|f| f.vendor.is_none() || f.class.is_none())
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
    super::gpu::each_nvml_gpu(ctx, id, out, |s, n, unread, out| {
        let switched = n
            .nvlinks
            .iter()
            .any(|l| l.remote_device_type == Some(crate::facts::NvLinkRemote::Switch));
        let Some(f) = &n.fabric else {
            if switched {
                out.push(Finding::new(
                    id,
                    s,
                    Status::Skip,
                    format!(
                        "NVSwitch fabric state unknown: {}",
                        why(n, unread, "fabric")
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
                        why(n, unread, "fabric")
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
        let fm = &ctx.inv.host.fabric_manager_pids;
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
                    ctx.inv
                        .host
                        .unread
                        .get("fabric_manager")
                        .cloned()
                        .unwrap_or_else(
                            || "not read (no NVLink to an NVSwitch, or not recorded)".into()
                        )
                ),
            },
        );
        let fm_down = fm.as_ref().is_some_and(|p| p.is_empty());
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
