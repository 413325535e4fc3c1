//! driver.*: is the NVIDIA driver there, does NVML answer, do the versions and GPU counts agree.

use super::{CheckId, Ctx, Finding, Status, ev};
use crate::facts::parse_nvrm;
use crate::nvml::NvmlErrorKind;
use crate::reading::Reading;
use crate::topo::DeviceKind;

const VER: &str = "/proc/driver/nvidia/version";

/// GPUs on the PCI bus that a driver-side list lacks, each with the lists that lack it (NVML,
/// /proc/driver/nvidia/gpus). Lists that could not be read are not consulted.
pub(super) fn missing_gpus<'a>(ctx: &Ctx<'a>) -> Vec<(&'a crate::topo::Gpu, Vec<&'static str>)> {
    let nvml = &ctx.inv.nvml;
    let mut out = Vec::new();
    for g in &ctx.topo.gpus {
        let mut lacking = Vec::new();
        if nvml.unavailable.is_none() && !nvml.gpus.iter().any(|n| n.bdf() == Some(g.bdf)) {
            lacking.push("NVML");
        }
        if let Some(d) = ctx.inv.host.driver_gpus.value()
            && !d.contains(&g.bdf)
        {
            lacking.push("/proc/driver/nvidia/gpus");
        }
        if !lacking.is_empty() {
            out.push((g, lacking));
        }
    }
    out
}

/// NVIDIA GPUs on the PCI bus (sysfs), whatever the driver says.
fn sysfs_gpu_count(ctx: &Ctx) -> usize {
    ctx.topo
        .devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Gpu)
        .count()
}

/// Loaded when /proc/driver/nvidia/version holds an NVRM version line, or, where it does not
/// (garbled, empty, unreadable), when the module lists show `nvidia`; not loaded only when the
/// version file is absent and no list shows the module. Anything else is unknown: a version
/// file that cannot be read or makes no sense never passes on its own.
pub(super) fn nvidia_loaded(ctx: &Ctx, out: &mut Vec<Finding>) {
    let (sysfs_gpus, h) = (sysfs_gpu_count(ctx), &ctx.inv.host);
    let id = CheckId::DriverNvidiaLoaded;
    if let Reading::Value(line) = &h.nvidia_version_line
        && let (Some(v), open) = parse_nvrm(line)
    {
        let kind = match open {
            Some(true) => "open kernel module",
            Some(false) => "proprietary kernel module",
            None => "module flavour not recognised",
        };
        out.push(
            Finding::new(
                id,
                "host",
                Status::Pass,
                format!("NVIDIA driver {v} loaded ({kind})"),
            )
            .with(ev(VER, line.clone())),
        );
        return;
    }
    let version_says = match &h.nvidia_version_line {
        Reading::Value(l) => format!(
            "reads '{}' (no NVRM version)",
            l.chars().take(60).collect::<String>()
        ),
        Reading::Absent(why) | Reading::Unknown(why) => why.clone(),
    };
    let in_proc = h.modules.value().map(|m| m.iter().any(|n| n == "nvidia"));
    let in_sys = h
        .sys_modules
        .value()
        .map(|m| m.iter().any(|n| n == "nvidia"));
    if in_proc == Some(true) || in_sys == Some(true) {
        let (src, value) = if in_proc == Some(true) {
            ("/proc/modules", "nvidia listed")
        } else {
            ("/sys/module/nvidia", "present")
        };
        out.push(
            Finding::new(
                id,
                "host",
                Status::Pass,
                format!(
                    "NVIDIA kernel module loaded ({src}); its version is unknown: {VER} {version_says}"
                ),
            )
            .with(ev(src, value)),
        );
        return;
    }
    let lists = format!(
        "{}; {}",
        match in_proc {
            Some(_) => "/proc/modules does not list nvidia".to_string(),
            None => h
                .modules
                .why()
                .unwrap_or("/proc/modules not read")
                .to_string(),
        },
        match in_sys {
            Some(_) => "/sys/module/nvidia absent".to_string(),
            None => h
                .sys_modules
                .why()
                .unwrap_or("/sys/module not listed")
                .to_string(),
        }
    );
    if sysfs_gpus == 0 {
        out.push(
            Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs on the PCI bus")
                .not_applicable()
                .with(ev(VER, version_says)),
        );
    } else if matches!(h.nvidia_version_line, Reading::Absent(_)) {
        out.push(
            Finding::new(id, "host", Status::Fail, format!("{} on the PCI bus but the NVIDIA kernel driver is not loaded", crate::words::count(sysfs_gpus, "NVIDIA GPU", "NVIDIA GPUs")))
                .with(ev(VER, version_says))
                .with(ev("/proc/modules, /sys/module", lists))
                .fix("Install the NVIDIA data-center driver and load it (`modprobe nvidia`); check `dmesg | grep -i nvrm` for why it failed to load"),
        );
    } else {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!("whether the NVIDIA driver is loaded is unknown: {VER} {version_says}, and the module lists do not show it ({lists})"),
            )
            .with(ev(VER, version_says)),
        );
    }
}

pub(super) fn nvml(ctx: &Ctx, out: &mut Vec<Finding>) {
    let (sysfs_gpus, nvml) = (sysfs_gpu_count(ctx), &ctx.inv.nvml);
    let id = CheckId::DriverNvml;
    // A record whose GPU list is only its PCI devices (an NCCL topology XML) says nothing of
    // NVML answering.
    if let Some(why) = nvml.listed_by_nvml.why()
        && nvml.unavailable.is_none()
    {
        out.push(
            Finding::new(id, "host", Status::Skip, format!("NVML unknown: {why}"))
                .with(ev("nvmlInit_v2", why)),
        );
        return;
    }
    match (&nvml.unavailable, sysfs_gpus) {
        (None, _) => out.push(
            Finding::new(
                id,
                "host",
                Status::Pass,
                format!(
                    "NVML answers ({}, driver {})",
                    crate::words::count(nvml.gpus.len(), "GPU", "GPUs"),
                    nvml.driver_version.value().map_or("?", String::as_str)
                ),
            )
            .with(ev(
                "nvmlInit_v2 / nvmlSystemGetDriverVersion",
                nvml.driver_version.cloned().unwrap_or_else(|| "?".into()),
            )),
        ),
        (Some(r), _) if nvml.source != "live" && !nvml.source.is_empty() => out.push(
            Finding::new(id, "host", Status::Skip, format!("NVML facts unknown: {r}"))
                .with(ev("nvml.json", r.clone())),
        ),
        (Some(r), 0) => out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!("no NVIDIA GPUs; NVML not usable: {r}"),
            )
            .not_applicable()
            .with(ev("nvmlInit_v2", r.clone())),
        ),
        // Judged on NVML's error kind where it was recorded.
        (Some(r), _) if nvml.unavailable_kind == Some(NvmlErrorKind::NoPermission) => out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!("NVML refused this user: {r}"),
            )
            .not_root()
            .with(ev("nvmlInit_v2", r.clone())),
        ),
        (Some(r), _) => {
            let (msg, fix) = match nvml.unavailable_kind {
                Some(NvmlErrorKind::LibRmVersionMismatch) => (
                    format!("NVML unusable: {r} (see driver.version-match)"),
                    "Reboot, or stop every GPU user and reload the NVIDIA kernel modules, so the kernel module matches the library (the driver was upgraded without reloading it)",
                ),
                Some(NvmlErrorKind::DriverNotLoaded) => (
                    format!("NVML unusable: {r} (see driver.nvidia-loaded)"),
                    "Load the NVIDIA kernel module (`modprobe nvidia`); `dmesg | grep -i nvrm` says why it did not load",
                ),
                _ => (
                    format!("NVML unusable: {r}"),
                    "Install the NVIDIA driver's user-space libraries matching the kernel module (libnvidia-ml.so.1); after a driver upgrade, reboot or reload the module",
                ),
            };
            out.push(
                Finding::new(id, "host", Status::Fail, msg)
                    .with(ev("nvmlInit_v2", r.clone()))
                    .fix(fix),
            )
        }
    }
}

pub(super) fn version_match(ctx: &Ctx, out: &mut Vec<Finding>) {
    let (sysfs_gpus, h, nvml) = (sysfs_gpu_count(ctx), &ctx.inv.host, &ctx.inv.nvml);
    let id = CheckId::DriverVersionMatch;
    let kmod = h.nvidia_version_line.value().and_then(|l| parse_nvrm(l).0);
    match (&kmod, nvml.driver_version.value()) {
        (Some(k), Some(u)) if k == u => out.push(
            Finding::new(id, "host", Status::Pass, format!("kernel module and NVML both {k}"))
                .with(ev(VER, k.clone()))
                .with(ev("nvmlSystemGetDriverVersion", u.clone())),
        ),
        (Some(k), Some(u)) => out.push(
            Finding::new(id, "host", Status::Fail, format!("kernel module {k} but NVML library {u}"))
                .with(ev(VER, k.clone()))
                .with(ev("nvmlSystemGetDriverVersion", u.clone()))
                .fix("The driver was upgraded without reloading the kernel module: reboot (or stop GPU users and `rmmod nvidia_uvm nvidia_peermem nvidia_modeset nvidia && modprobe nvidia`)"),
        ),
        _ if sysfs_gpus == 0 => out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable()),
        _ => {
            let why = match (&kmod, nvml.driver_version.value()) {
                (None, _) => "kernel module version unknown (/proc/driver/nvidia/version unreadable)".to_string(),
                _ => format!(
                    "NVML driver version unknown ({})",
                    nvml.unavailable.clone().or_else(|| nvml.driver_version.why().map(str::to_string)).unwrap_or_else(|| "not recorded".into())
                ),
            };
            out.push(Finding::new(id, "host", Status::Skip, why));
        }
    }
}

pub(super) fn gpu_count(ctx: &Ctx, out: &mut Vec<Finding>) {
    let (sysfs_gpus, h, nvml) = (sysfs_gpu_count(ctx), &ctx.inv.host, &ctx.inv.nvml);
    let id = CheckId::DriverGpuCount;
    if sysfs_gpus == 0 && nvml.gpus.is_empty() {
        out.push(
            Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs on the PCI bus")
                .not_applicable(),
        );
        return;
    }
    let mut evidence = vec![ev(
        "/sys/bus/pci/devices (class 0x0300/0x0302, vendor 0x10de)",
        sysfs_gpus.to_string(),
    )];
    let mut counts: Vec<(&str, usize)> = vec![("sysfs", sysfs_gpus)];
    let mut unknown = Vec::new();
    if let Some(why) = nvml.listed_by_nvml.why() {
        // The record's GPUs are its PCI devices: counting them against sysfs would compare the
        // record with itself.
        unknown.push("NVML");
        evidence.push(ev("nvmlDeviceGetCount", why));
    } else if nvml.unavailable.is_none() {
        counts.push(("NVML", nvml.gpus.len()));
        evidence.push(ev("nvmlDeviceGetCount", nvml.gpus.len().to_string()));
    } else {
        unknown.push("NVML");
    }
    match &h.driver_gpus {
        Reading::Value(v) => {
            counts.push(("/proc/driver/nvidia/gpus", v.len()));
            evidence.push(ev("/proc/driver/nvidia/gpus", v.len().to_string()));
        }
        Reading::Absent(_) | Reading::Unknown(_) => unknown.push("/proc/driver/nvidia/gpus"),
    }
    match &h.dev_nodes {
        Reading::Value(v) => {
            counts.push(("/dev/nvidiaN", v.len()));
            evidence.push(ev("/dev/nvidia[0-9]*", v.len().to_string()));
        }
        Reading::Absent(why) | Reading::Unknown(why) => {
            unknown.push("/dev/nvidiaN");
            evidence.push(ev("/dev/nvidiaN", why.clone()));
        }
    }
    let disagree = counts.iter().any(|(_, c)| *c != sysfs_gpus);
    if disagree {
        let desc = counts
            .iter()
            .map(|(n, c)| format!("{n} {c}"))
            .collect::<Vec<_>>()
            .join(", ");
        // Name the GPUs the driver lost: the topology knows each one's place on the bus.
        let missing = missing_gpus(ctx);
        let named: Vec<String> = missing
            .iter()
            .map(|(g, lacking)| {
                format!(
                    "{} ({}) is on the PCI bus but missing from {}",
                    g.label,
                    g.bdf,
                    lacking.join(" and ")
                )
            })
            .collect();
        let msg = if named.is_empty() {
            format!("GPU counts disagree: {desc}")
        } else {
            format!("GPU counts disagree: {desc}; {}", named.join("; "))
        };
        for (g, lacking) in &missing {
            evidence.push(ev(
                format!("{} {}", g.label, g.bdf),
                format!("in sysfs; not in {}", lacking.join(", ")),
            ));
        }
        out.push(
            Finding::new(id, "host", Status::Fail, msg)
                .evidence(evidence)
                .fix("A GPU the bus shows is not usable: check `dmesg` for Xid/RmInitAdapter errors or a GPU fallen off the bus; check /dev permissions and nvidia-persistenced/nvidia-modprobe for missing /dev nodes"),
        );
    } else if counts.len() == 1 {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!(
                    "only sysfs is known ({}); {} unknown",
                    crate::words::count(sysfs_gpus, "GPU", "GPUs"),
                    unknown.join(", ")
                ),
            )
            .evidence(evidence),
        );
    } else {
        let mut msg = format!(
            "{} in {}",
            crate::words::count(sysfs_gpus, "GPU", "GPUs"),
            counts
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ")
        );
        if !unknown.is_empty() {
            msg.push_str(&format!("; not known: {}", unknown.join(", ")));
        }
        out.push(Finding::new(id, "host", Status::Pass, msg).evidence(evidence));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn nvrm_lines() {
        let (v, o) = parse_nvrm(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)",
        );
        assert_eq!(v.as_deref(), Some("580.159.04"));
        assert_eq!(o, Some(true));
        let (v, o) = parse_nvrm(
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024",
        );
        assert_eq!(v.as_deref(), Some("550.90.07"));
        assert_eq!(o, Some(false));
        assert_eq!(parse_nvrm("garbage"), (None, None));
    }
}
