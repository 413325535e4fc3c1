//! gdr.*: which memory path GPUDirect RDMA can use: nvidia-peermem, dma-buf, or none; and
//! `gdr.peer-mapping`, whether the NVIDIA driver lets CUDA map the NIC's doorbell page for the
//! GPU (its PeerMappingOverride registry key), which GPU-initiated RDMA (level 4) needs.
//!
//! Pure functions of the inventory: no reads here.

use super::{CheckId, Ctx, Evidence, Finding, SkipKind, Status, ev};
use crate::facts::{kernel_major_minor, parse_nvrm};
use crate::reading::Reading;

/// Where NCCL looks for nvidia-peermem (src/transport/net_ib.cc: memory_peers version files),
/// plus the module itself (a built-in module has /sys/module/X but no /proc/modules line).
fn peermem_facts(ctx: &Ctx) -> (Option<bool>, Vec<Evidence>) {
    let h = &ctx.inv.host;
    let mut e = Vec::new();
    // A version file that could not be read shows nothing of peermem (nor does it count).
    let peers: Vec<(&String, &String)> = h
        .memory_peers
        .iter()
        .filter_map(|(p, v)| Some((p, v.value()?)))
        .collect();
    for (p, v) in &peers {
        e.push(ev(p.to_string(), v.to_string()));
    }
    let in_sys = h.sys_modules.value().map(|m| {
        m.iter()
            .any(|n| n == "nvidia_peermem" || n == "nv_peer_mem")
    });
    let in_proc = h.modules.value().map(|m| {
        m.iter()
            .any(|n| n == "nvidia_peermem" || n == "nv_peer_mem")
    });
    e.push(ev(
        "/sys/module/nvidia_peermem",
        match in_sys {
            Some(true) => "present".into(),
            Some(false) => "absent".into(),
            None => h.sys_modules.why().unwrap_or("unreadable").to_string(),
        },
    ));
    e.push(ev(
        "/proc/modules",
        match in_proc {
            Some(true) => "nvidia_peermem listed".into(),
            Some(false) => "nvidia_peermem not listed".into(),
            None => h.modules.why().unwrap_or("unreadable").to_string(),
        },
    ));
    let loaded = if !peers.is_empty() || in_sys == Some(true) || in_proc == Some(true) {
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
    match h.nvidia_version_line.value().map(|l| parse_nvrm(l)) {
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
    match h.kernel_version.value().and_then(|v| kernel_major_minor(v)) {
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
    } else if matches!(ctx.inv.host.nvidia_version_line, Reading::Absent(_)) {
        Some((
            "NVIDIA driver not loaded (see driver.nvidia-loaded): no GPUDirect path can exist",
            SkipKind::Unknown,
        ))
    } else if !ctx.inv.host.nvidia_version_line.is_value() {
        // Unreadable, not absent (a record that does not carry it, a damaged tree): whether
        // the driver runs is unknown, and so is every GPUDirect path.
        Some((
            "whether the NVIDIA driver is loaded is unknown (see driver.nvidia-loaded): GPUDirect paths not judged",
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

/// One GPU-NIC pair's GPUDirect RDMA readiness, worst first: the GPU model cannot do it, no
/// memory path, something unknown, NCCL would not use it by default, ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Readiness {
    GpuNotCapable,
    NoMemoryPath,
    Unknown,
    BeyondNcclLevel,
    Ready,
}

/// The memory path a pair can use: nvidia-peermem or dma-buf for most NICs, dma-buf only for
/// EFA (`nic::GdrMemory`). `Err` holds why it is unknown; `Ok(None)` there is none.
fn memory_path(
    pm: Option<bool>,
    db: Option<bool>,
    gdr_memory: crate::nic::GdrMemory,
) -> Result<Option<&'static str>, &'static str> {
    use crate::nic::GdrMemory;
    match gdr_memory {
        GdrMemory::DmabufOnly => match db {
            Some(true) => Ok(Some("dma-buf")),
            Some(false) => Ok(None),
            None => Err("dma-buf facts unreadable"),
        },
        GdrMemory::PeermemOrDmabuf => match (pm, db) {
            (Some(true), _) => Ok(Some("peermem")),
            (_, Some(true)) => Ok(Some("dma-buf")),
            (Some(false), Some(false)) => Ok(None),
            _ => Err("peermem or dma-buf facts unreadable"),
        },
    }
}

/// gdr.path: for each GPU and its closest NIC(s), whether GPUDirect RDMA is ready the way NCCL
/// decides it by default: a GPU model that can do it (`topo::gpu_model`), a memory path
/// (peermem or dma-buf; dma-buf only for EFA), and a path within NCCL's default
/// NCCL_NET_GDR_LEVEL (`rdma::judge::gdr::nccl_default_gdr`).
pub(super) fn path(ctx: &Ctx, out: &mut Vec<Finding>) {
    use crate::topo::gpu_model::GdrCapability;
    let t = ctx.topo;
    let no_gdr = not_applicable(ctx);
    let (pm, _) = peermem_facts(ctx);
    let (db, _, _) = dmabuf_facts(ctx);
    let id = CheckId::GdrPath;
    if let Some(why) = no_gdr {
        out.push(cannot_judge(id, why));
        return;
    }
    // A NIC that could not be placed may be some GPU's closest: unknown for it.
    super::rdma::nic_gaps(ctx, id, out);
    let host_path = match memory_path(pm, db, crate::nic::GdrMemory::PeermemOrDmabuf) {
        Ok(Some(p)) => p,
        Ok(None) => "none",
        Err(_) => "unknown",
    };
    let hypervisor = t.hypervisor();
    for c in &t.closest_nics {
        let subject = c.gpu.clone();
        if c.rdma_devices.is_empty() {
            // NICs there are, none with an RDMA device.
            if let Some(n) = c.closer_without_rdma.first() {
                out.push(
                    Finding::new(id, subject, Status::Fail, format!(
                        "no GPUDirect RDMA path: {}'s closest NIC {} ({}) has no RDMA device ({} would provide it), and no NIC has one",
                        c.gpu, n.bdf, n.path.as_str(), n.rdma_module
                    ))
                    .with(ev("memory path", host_path))
                    .fix(format!("Give the NIC its RDMA device: load {} (see `gpudoctor explain rdma.driver`)", n.rdma_module)),
                );
            }
            continue;
        }
        let Some(g) = t.gpu(&c.gpu) else {
            continue;
        };
        let model = t.gpu_model(g);
        let mut evs = vec![ev(
            format!("{} model", c.gpu),
            format!(
                "{} ({}): {}",
                model.name,
                model.basis,
                match model.gdr {
                    GdrCapability::Capable => "GPUDirect RDMA capable",
                    GdrCapability::NotCapable =>
                        "no GPUDirect RDMA (cudaDevAttrGPUDirectRDMASupported = 0 on GeForce/TITAN/CMP; NCCL gives the GPU gdr=0)",
                    GdrCapability::Unknown =>
                        "GPUDirect RDMA support unknown (model not in gpudoctor's table)",
                }
            ),
        )];
        if model.c2c {
            evs.push(ev(
                format!("{} CPU link", c.gpu),
                "NVLink-C2C to a Grace CPU (NCCL path C2C)",
            ));
        }
        let ready = pairs_readiness(ctx, c, g, &model, pm, db, &mut evs);
        let mut f = readiness_finding(c, &model, &ready, hypervisor);
        f.message.push_str(&super::topo::closer_note(c));
        out.push(f.with(ev("memory path", host_path)).evidence(evs).with(ev(
            "NCCL default GPUDirect RDMA level",
            crate::rdma::judge::gdr::NCCL_GDR_LEVEL_SOURCE,
        )));
    }
}

/// What a GPU's closest NICs come to for GPUDirect RDMA, the worst pair deciding.
struct PairsReadiness {
    worst: Readiness,
    /// The memory paths the pairs can use, in NIC order, each once.
    paths_used: Vec<&'static str>,
    /// Some pair is on a flattened virtual PCI bus.
    flattened: bool,
    /// NCCL's path class of the last pair judged.
    nccl_path: Option<crate::rdma::judge::gdr::NcclPath>,
    /// Some NIC registers GPU memory through dma-buf only (EFA).
    dmabuf_only: bool,
}

/// Judges each pair of the GPU `g` and one of its closest NICs: the GPU model, the memory path
/// the NIC can use (`pm`, `db`: nvidia-peermem and dma-buf possible, where known) and NCCL's
/// default GDR level for their path; each pair's evidence goes to `evs`.
fn pairs_readiness(
    ctx: &Ctx,
    c: &crate::topo::Closest,
    g: &crate::topo::Gpu,
    model: &crate::topo::gpu_model::GpuModel,
    pm: Option<bool>,
    db: Option<bool>,
    evs: &mut Vec<Evidence>,
) -> PairsReadiness {
    use crate::rdma::judge::gdr::nccl_default_gdr;
    use crate::topo::gpu_model::GdrCapability;
    let t = ctx.topo;
    let mut worst = Readiness::Ready;
    let mut paths_used: Vec<&str> = Vec::new();
    let mut flattened = false;
    let mut nccl_path = None;
    let mut dmabuf_only = false;
    for label in &c.nics {
        let Some(n) = t.nic(label) else {
            continue;
        };
        let nd = t.device(n.bdf);
        let ids = nd.and_then(|d| {
            let p = |s: &Option<String>| {
                s.as_deref()
                    .and_then(|x| u16::from_str_radix(x.trim_start_matches("0x"), 16).ok())
            };
            Some((p(&d.vendor_id)?, p(&d.device_id)?))
        });
        let nic_model = ids.and_then(|(v, d)| crate::nic::model(v, d));
        let gdr_memory = nic_model.map_or(crate::nic::GdrMemory::PeermemOrDmabuf, |m| m.gdr_memory);
        dmabuf_only |= gdr_memory == crate::nic::GdrMemory::DmabufOnly;
        let mem = memory_path(pm, db, gdr_memory);
        let pcie = c.path.unwrap_or(crate::topo::PathType::SYS);
        let nccl = nccl_default_gdr(pcie, model.c2c);
        let flat = t.flattened(g.bdf, n.bdf);
        flattened |= flat;
        nccl_path = Some(nccl.path);
        let r = match (model.gdr, &mem) {
            (GdrCapability::NotCapable, _) => Readiness::GpuNotCapable,
            (_, Ok(None)) => Readiness::NoMemoryPath,
            (GdrCapability::Unknown, _) | (_, Err(_)) => Readiness::Unknown,
            _ if !nccl.enabled => Readiness::BeyondNcclLevel,
            _ => Readiness::Ready,
        };
        worst = worst.min(r);
        if let Ok(Some(p)) = mem
            && !paths_used.contains(&p)
        {
            paths_used.push(p);
        }
        evs.push(ev(
            format!("{}<->{}", c.gpu, n.rdma_device),
            format!(
                "{}{}; memory path {}{}; {}{}",
                nic_model.map_or_else(|| n.name.clone(), |m| m.name.to_string()),
                if c.certain {
                    ""
                } else {
                    " (path inferred: NUMA unknown)"
                },
                match mem {
                    Ok(Some(p)) => p,
                    Ok(None) => "none",
                    Err(why) => why,
                },
                if gdr_memory == crate::nic::GdrMemory::DmabufOnly {
                    " (EFA: dma-buf only, no nvidia-peermem)"
                } else {
                    ""
                },
                nccl.rule,
                if flat {
                    "; flattened virtual PCI: both on the root bus, numa_node -1"
                } else {
                    ""
                },
            ),
        ));
    }
    PairsReadiness {
        worst,
        paths_used,
        flattened,
        nccl_path,
        dmabuf_only,
    }
}

/// The `gdr.path` finding of one GPU from its pairs' readiness: fails without a GPU that can
/// do it or a memory path, warns beyond NCCL's default level (naming the VM where its PCI is
/// flattened), skips where unknown.
fn readiness_finding(
    c: &crate::topo::Closest,
    model: &crate::topo::gpu_model::GpuModel,
    ready: &PairsReadiness,
    hypervisor: Option<(crate::pci::Bdf, &'static str)>,
) -> Finding {
    use crate::rdma::judge::gdr::NCCL_RULES;
    use crate::topo::gpu_model::GdrCapability;
    let id = CheckId::GdrPath;
    let subject = c.gpu.clone();
    let PairsReadiness {
        worst,
        ref paths_used,
        flattened,
        nccl_path,
        dmabuf_only,
    } = *ready;
    let nics = c.rdma_devices.join(", ");
    let at = c.path.map_or("unknown", |p| p.as_str());
    let inferred = if c.certain {
        ""
    } else {
        " (inferred: NUMA unknown)"
    };
    let via = if paths_used.is_empty() {
        "no memory path".to_string()
    } else {
        paths_used.join("/")
    };
    let vm_note = if flattened {
        format!(
            "; this is a VM{} with flattened PCI (GPU and NIC on the root bus, numa_node -1): NCCL cannot see the PCIe switches between them and reads PHB whatever the physical layout; an NCCL topology file (NCCL_TOPO_FILE) describing the host's real switches lets NCCL see PIX/PXB and use GPUDirect RDMA",
            hypervisor.map_or(String::new(), |(b, what)| format!(" ({what} at {b})"))
        )
    } else {
        String::new()
    };
    match worst {
        Readiness::GpuNotCapable => Finding::new(id, subject, Status::Fail, format!(
            "{} ({}) cannot do GPUDirect RDMA: CUDA reports cudaDevAttrGPUDirectRDMASupported = 0 on GeForce-class GPUs and {NCCL_RULES} then gives the GPU gdr=0 (src/plugin/net.cc ncclGpuGdrSupport; src/graph/paths.cc ncclTopoCheckGdr): traffic to {nics} stages through host memory",
            c.gpu, model.name
        ))
        .fix("Use a data-center or professional GPU (A100, H100/H200, B200/GB200, L40S, RTX PRO) where GPUDirect RDMA is needed; a GeForce part cannot be configured into it"),
        Readiness::NoMemoryPath if dmabuf_only => Finding::new(id, subject, Status::Fail, format!(
            "no GPUDirect RDMA path to {nics}: EFA registers GPU memory only through dma-buf, and dma-buf is not possible here (see gdr.dmabuf)"
        ))
        .fix("Use the open NVIDIA kernel module, Linux >= 5.12, rdma-core >= 34 and an efa driver with dma-buf memory regions (AWS's EFA installer); nvidia-peermem does not help EFA"),
        Readiness::NoMemoryPath => Finding::new(id, subject, Status::Fail, format!("no GPUDirect RDMA path to {nics}: neither nvidia-peermem nor dma-buf"))
            .fix("Load nvidia-peermem, or move to the open kernel module + Linux >= 5.12 + rdma-core >= 34 for dma-buf"),
        Readiness::Unknown if model.gdr == GdrCapability::Unknown => Finding::new(id, subject, Status::Skip, format!(
            "GPUDirect RDMA to {nics} unknown: {} ({}) is not in gpudoctor's GPU model table, so whether it can do GPUDirect RDMA (CUDA's cudaDevAttrGPUDirectRDMASupported, which {NCCL_RULES} follows) is unknown",
            model.name, model.basis
        )),
        Readiness::Unknown => Finding::new(id, subject, Status::Skip, format!("GPUDirect path to {nics} unknown (peermem or dma-buf facts unreadable)")),
        Readiness::BeyondNcclLevel => Finding::new(id, subject, Status::Warn, format!(
            "{} reaches {nics} via {via} at {at}{inferred}, but {NCCL_RULES} does not use GPUDirect RDMA there by default (NCCL path {} is beyond NCCL_NET_GDR_LEVEL's default P2C, which is PXB without a C2C link): traffic stages through host memory{vm_note}",
            c.gpu,
            nccl_path.map_or("unknown", |p| p.as_str()),
        ))
        .fix(if flattened {
            "Ask the provider for the instance type's NCCL topology file and point NCCL_TOPO_FILE at it (cloud GPU images ship one, naming the PCIe switches the VM does not show); or, after measuring, NCCL_NET_GDR_LEVEL=PHB"
        } else {
            "Place a NIC under the same PCIe switch as the GPU (PIX/PXB); or accept the CPU path explicitly with NCCL_NET_GDR_LEVEL=PHB (measure first)"
        }),
        Readiness::Ready => Finding::new(id, subject, Status::Pass, format!(
            "GPUDirect RDMA to {nics} via {via} at {at}{}: {NCCL_RULES} uses it by default",
            if nccl_path == Some(crate::rdma::judge::gdr::NcclPath::P2c) {
                " over the Grace CPU's NVLink-C2C (NCCL path P2C)"
            } else {
                ""
            }
        )),
    }
}

/// What one side said of one part of a GPU's GPUDirect RDMA, for `gdr.nccl-agrees`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Comparison {
    Agree,
    Disagree,
    /// gpudoctor's side is unknown (a fact the source does not carry, a model not in the table).
    NotCompared,
}

/// What NCCL's `<gpu gdr>` means, for evidence (src/plugin/net.cc ncclGpuGdrSupport).
const NCCL_GPU_GDR: &str = "NCCL >= 2.12 with a CUDA >= 11.3 driver writes CUDA's cudaDevAttrGPUDirectRDMASupported; older NCCL wrote whether registering GPU memory on the first NIC with NCCL_PTR_CUDA worked (src/plugin/net.cc ncclGpuGdrSupport; src/graph/topo.cc)";

/// What NCCL's `<net gdr>` means, for evidence (src/graph/topo.cc ncclTopoPopulateNics).
const NCCL_NET_GDR: &str = "the net plugin offers NCCL_PTR_CUDA (NET/IB: an nvidia-peermem version file exists) or NCCL_PTR_DMABUF with dma-buf enabled (src/graph/topo.cc ncclTopoPopulateNics)";

/// gdr.nccl-agrees: where the source carries NCCL's own GPUDirect verdicts (an
/// NCCL_TOPO_DUMP_FILE dump read with --from), NCCL's `<gpu gdr>` beside gpudoctor's GPU model
/// verdict, and for each of the GPU's closest NICs NCCL's `<net gdr>` beside gpudoctor's memory
/// path, with what each side's pair verdict comes to under NCCL's default GDR level. A
/// disagreement warns: one of the two judges is wrong about this machine (gpudoctor's model
/// table, the NCCL version or setup that wrote the file, a hand-edited file), and which one is
/// for a person to tell; `gdr.path` stays the check that fails a machine without GPUDirect RDMA.
pub(super) fn nccl_agrees(ctx: &Ctx, out: &mut Vec<Finding>) {
    use crate::foreign::{ForeignGdr, ForeignVerdicts};
    let id = CheckId::GdrNcclAgrees;
    let t = ctx.topo;
    let (noun, verdicts) = match ctx.inv.foreign_gdr.as_ref() {
        ForeignVerdicts::NotCarried(why) => {
            out.push(Finding::new(id, "host", Status::Skip, why.clone()).not_applicable());
            return;
        }
        ForeignVerdicts::Carried { noun, verdicts } => (*noun, verdicts),
    };
    let mut gpus: Vec<(crate::pci::Bdf, bool)> = verdicts
        .iter()
        .filter_map(|v| match v {
            ForeignGdr::Gpu { gpu, gdr } => Some((*gpu, *gdr)),
            ForeignGdr::Net { .. } => None,
        })
        .collect();
    gpus.sort();
    gpus.dedup_by_key(|(b, _)| *b);
    if gpus.is_empty() {
        out.push(
            Finding::new(id, "host", Status::Skip, format!(
                "the {noun} has no <gpu gdr> attribute (a hand-written NCCL_TOPO_FILE leaves it to NCCL, which fills it in at run time): no NCCL verdict to compare"
            ))
            .not_applicable(),
        );
        return;
    }
    let (pm, _) = peermem_facts(ctx);
    let (db, _, _) = dmabuf_facts(ctx);
    for (bdf, nccl_gpu) in gpus {
        let Some(g) = t.gpu_at(bdf) else {
            out.push(Finding::new(id, bdf.to_string(), Status::Skip, format!(
                "NCCL recorded gdr={} for a GPU at {bdf}, but gpudoctor sees no NVIDIA GPU there (the {noun} does not give that <pci>'s class and vendor): not compared",
                zero_one(nccl_gpu)
            )));
            continue;
        };
        out.push(gpu_agreement(ctx, g, nccl_gpu, verdicts, pm, db));
    }
}

/// NCCL's attribute value as it writes it.
fn zero_one(b: bool) -> &'static str {
    if b { "1" } else { "0" }
}

/// One GPU's `gdr.nccl-agrees` finding: NCCL's `<gpu gdr>` against gpudoctor's GPU model
/// verdict, and NCCL's `<net gdr>` of each of its closest NICs against gpudoctor's memory path
/// (`pm`, `db`: nvidia-peermem and dma-buf possible, where known).
fn gpu_agreement(
    ctx: &Ctx,
    g: &crate::topo::Gpu,
    nccl_gpu: bool,
    verdicts: &[crate::foreign::ForeignGdr],
    pm: Option<bool>,
    db: Option<bool>,
) -> Finding {
    use crate::foreign::ForeignGdr;
    use crate::topo::gpu_model::GdrCapability;
    let t = ctx.topo;
    let net_gdr = |name: &str| {
        verdicts.iter().find_map(|v| match v {
            ForeignGdr::Net { name: n, gdr, .. } if n == name => Some(*gdr),
            _ => None,
        })
    };
    let model = t.gpu_model(g);
    let mut evs = vec![ev(
        format!("{} NCCL <gpu gdr>", g.label),
        format!("{} ({NCCL_GPU_GDR})", zero_one(nccl_gpu)),
    )];
    let ours = match model.gdr {
        GdrCapability::Capable => "GPUDirect RDMA capable",
        GdrCapability::NotCapable => {
            "no GPUDirect RDMA (CUDA reports cudaDevAttrGPUDirectRDMASupported = 0 on GeForce/TITAN/CMP)"
        }
        GdrCapability::Unknown => "unknown (model not in gpudoctor's table)",
    };
    evs.push(ev(
        format!("{} gpudoctor model", g.label),
        format!("{} ({}): {ours}", model.name, model.basis),
    ));
    let gpu_cmp = match (model.gdr, nccl_gpu) {
        (GdrCapability::Capable, true) | (GdrCapability::NotCapable, false) => Comparison::Agree,
        (GdrCapability::Unknown, _) => Comparison::NotCompared,
        _ => Comparison::Disagree,
    };
    let mut reasons: Vec<String> = Vec::new();
    match gpu_cmp {
        Comparison::Disagree if nccl_gpu => reasons.push(format!(
            "NCCL gives {} gdr=1 (CUDA said GPUDirect RDMA is supported) where gpudoctor's model table says {} cannot do it: the table is wrong for this part, or the file was edited",
            g.label, model.name
        )),
        Comparison::Disagree => reasons.push(format!(
            "NCCL gives {} gdr=0 where gpudoctor's model table says {} can do GPUDirect RDMA: CUDA reported it unsupported (a VM or vGPU that hides it, a driver that does not offer it), or the file comes from NCCL < 2.12 or a CUDA < 11.3 driver, where gdr=0 also meant no NIC took the GPU's memory (nvidia-peermem not loaded, no RDMA NIC), or the file was edited",
            g.label, model.name
        )),
        _ => {}
    }
    let closest = t.closest_nics.iter().find(|c| c.gpu == g.label);
    let mut nic_cmps: Vec<Comparison> = Vec::new();
    let mut nic_unknown: Vec<String> = Vec::new();
    for label in closest.map(|c| c.nics.as_slice()).unwrap_or(&[]) {
        let Some(n) = t.nic(label) else {
            continue;
        };
        let Some(nccl_net) = net_gdr(&n.rdma_device) else {
            continue;
        };
        let gdr_memory = t
            .device(n.bdf)
            .and_then(|d| {
                let p = |s: &Option<String>| {
                    s.as_deref()
                        .and_then(|x| u16::from_str_radix(x.trim_start_matches("0x"), 16).ok())
                };
                crate::nic::model(p(&d.vendor_id)?, p(&d.device_id)?)
            })
            .map_or(crate::nic::GdrMemory::PeermemOrDmabuf, |m| m.gdr_memory);
        let mem = memory_path(pm, db, gdr_memory);
        let c = closest.expect("a NIC label comes from this GPU's closest NICs");
        let (net_cmp, reason, pair_ev) = nic_agreement(g, n, c, &model, nccl_gpu, nccl_net, mem);
        reasons.extend(reason);
        if net_cmp == Comparison::NotCompared {
            nic_unknown.push(n.rdma_device.clone());
        }
        nic_cmps.push(net_cmp);
        evs.push(pair_ev);
    }
    agreement_finding(
        g,
        &model,
        nccl_gpu,
        gpu_cmp,
        &nic_cmps,
        &nic_unknown,
        &reasons,
    )
    .evidence(evs)
}

/// One GPU-NIC pair: NCCL's `<net gdr>` against gpudoctor's memory path `mem`; the reason
/// where they disagree; and the evidence, with what each side's pair verdict comes to under
/// NCCL's default GDR level.
fn nic_agreement(
    g: &crate::topo::Gpu,
    n: &crate::topo::Nic,
    c: &crate::topo::Closest,
    model: &crate::topo::gpu_model::GpuModel,
    nccl_gpu: bool,
    nccl_net: bool,
    mem: Result<Option<&'static str>, &'static str>,
) -> (Comparison, Option<String>, Evidence) {
    use crate::rdma::judge::gdr::nccl_default_gdr;
    use crate::topo::gpu_model::GdrCapability;
    let net_cmp = match (&mem, nccl_net) {
        (Ok(Some(_)), true) | (Ok(None), false) => Comparison::Agree,
        (Err(_), _) => Comparison::NotCompared,
        _ => Comparison::Disagree,
    };
    let reason = (net_cmp == Comparison::Disagree).then(|| {
        format!(
            "NCCL gives {} gdr={} where gpudoctor finds {}",
            n.rdma_device,
            zero_one(nccl_net),
            match mem {
                Ok(Some(p)) => format!("the memory path {p}"),
                _ => "no memory path (neither nvidia-peermem nor dma-buf)".to_string(),
            }
        )
    });
    let pcie = c.path.unwrap_or(crate::topo::PathType::SYS);
    let level = nccl_default_gdr(pcie, model.c2c);
    let nccl_pair = nccl_gpu && nccl_net && level.enabled;
    let ours_pair = match (model.gdr, &mem) {
        (GdrCapability::NotCapable, _) | (_, Ok(None)) => "no",
        (GdrCapability::Unknown, _) | (_, Err(_)) => "unknown",
        _ if !level.enabled => "no (beyond the default level)",
        _ => "yes",
    };
    let pair_ev = ev(
        format!("{}<->{}", g.label, n.rdma_device),
        format!(
            "NCCL <net gdr>={} ({NCCL_NET_GDR}); gpudoctor memory path {}; {}; GPUDirect RDMA by default: NCCL's attributes {}, gpudoctor {ours_pair}",
            zero_one(nccl_net),
            match &mem {
                Ok(Some(p)) => (*p).to_string(),
                Ok(None) => "none".to_string(),
                Err(why) => format!("unknown ({why})"),
            },
            level.rule,
            if nccl_pair { "yes" } else { "no" },
        ),
    );
    (net_cmp, reason, pair_ev)
}

/// The verdict from the comparisons of one GPU: any disagreement warns; otherwise it passes
/// where anything was compared, and is skipped where nothing could be.
fn agreement_finding(
    g: &crate::topo::Gpu,
    model: &crate::topo::gpu_model::GpuModel,
    nccl_gpu: bool,
    gpu_cmp: Comparison,
    nic_cmps: &[Comparison],
    nic_unknown: &[String],
    reasons: &[String],
) -> Finding {
    use crate::rdma::judge::gdr::NCCL_RULES;
    let id = CheckId::GdrNcclAgrees;
    let subject = g.label.clone();
    let any_disagree = gpu_cmp == Comparison::Disagree || nic_cmps.contains(&Comparison::Disagree);
    let any_agree = gpu_cmp == Comparison::Agree || nic_cmps.contains(&Comparison::Agree);
    let not_compared = if nic_unknown.is_empty() {
        String::new()
    } else {
        format!(
            "; NCCL's <net gdr> for {} not compared: gpudoctor's memory-path facts (nvidia-peermem, dma-buf) are unknown here",
            nic_unknown.join(", ")
        )
    };
    if any_disagree {
        Finding::new(id, subject, Status::Warn, format!(
            "NCCL's GPUDirect verdict for {} disagrees with gpudoctor's: {}{not_compared}",
            g.label,
            reasons.join("; ")
        ))
        .fix(format!(
            "Find which judge is wrong before trusting either: on the machine, check CUDA's cudaDevAttrGPUDirectRDMASupported for the GPU (`nvidia-smi -q` product name and brand), whether nvidia-peermem is loaded (`gpudoctor check` live: gdr.peermem, gdr.dmabuf) and which NCCL wrote the file (NCCL_DEBUG=INFO prints its version and \"GPU Direct RDMA Enabled/Disabled\" per NIC); gdr.path judges the machine as {NCCL_RULES} would"
        ))
    } else if gpu_cmp == Comparison::Agree {
        Finding::new(
            id,
            subject,
            Status::Pass,
            format!(
                "NCCL's <gpu gdr>={} agrees with gpudoctor's model verdict for {} ({}){}{not_compared}",
                zero_one(nccl_gpu),
                g.label,
                model.name,
                if nic_cmps.contains(&Comparison::Agree) {
                    ", and NCCL's <net gdr> with gpudoctor's memory path"
                } else {
                    ""
                }
            ),
        )
    } else if any_agree {
        Finding::new(
            id,
            subject,
            Status::Pass,
            format!(
                "NCCL's <net gdr> agrees with gpudoctor's memory path for {}'s closest NIC; NCCL's <gpu gdr>={} not compared: {} ({}) is not in gpudoctor's GPU model table{not_compared}",
                g.label,
                zero_one(nccl_gpu),
                model.name,
                model.basis
            ),
        )
    } else {
        Finding::new(
            id,
            subject,
            Status::Skip,
            format!(
                "NCCL recorded gdr={} for {}, but gpudoctor's verdict is unknown: {} ({}) is not in its GPU model table{not_compared}",
                zero_one(nccl_gpu),
                g.label,
                model.name,
                model.basis
            ),
        )
    }
}

const PARAMS: &str = "/proc/driver/nvidia/params";
const REGKEY: &str = "PeerMappingOverride";

/// The `RegistryDwords` value in /proc/driver/nvidia/params (`RegistryDwords: "K=V;K=V"`):
/// None when the driver prints no such line.
pub fn registry_dwords(params: &str) -> Option<&str> {
    params.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "RegistryDwords").then(|| v.trim().trim_matches('"'))
    })
}

/// The value given to `key` in a RegistryDwords string (`K=V;K=V;`, values decimal or 0x
/// hex). The key must be spelled as NVIDIA spells it: a differently-cased key is not trusted
/// to take effect (a false warn is cheaper than a false pass). None when absent or not a number.
pub fn registry_value(dwords: &str, key: &str) -> Option<u32> {
    dwords.split(';').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        if k.trim() != key {
            return None;
        }
        let v = v.trim();
        match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    })
}

const PEER_MAPPING_FIX: &str = "Add `options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` to /etc/modprobe.d/nvidia.conf (append to an existing NVreg_RegistryDwords string, keys separated by ';'), then reload the driver (stop GPU users and nvidia-persistenced, `rmmod nvidia_peermem nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`, or reboot; update the initramfs if the module loads from it). It lets any CUDA process map other devices' MMIO for its GPU: see `gpudoctor explain gdr.peer-mapping` for the trade-off. Without it, GPU-initiated RDMA uses a CPU proxy thread to ring the doorbell";

/// gdr.peer-mapping: PeerMappingOverride=1, which `cuMemHostRegister(...,
/// CU_MEMHOSTREGISTER_IOMEMORY)` of the NIC's UAR page needs for the `gpu` doorbell handler.
pub(super) fn peer_mapping(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GdrPeerMapping;
    let h = &ctx.inv.host;
    if ctx.topo.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    if ctx.topo.nics.is_empty() {
        // No NIC seen: not applicable only when none can hide.
        if !super::rdma::nic_gaps(ctx, id, out) {
            out.push(
                Finding::new(
                    id,
                    "host",
                    Status::Skip,
                    "no RDMA NICs: GPU-initiated RDMA not applicable",
                )
                .not_applicable(),
            );
        }
        return;
    }
    let Reading::Value(params) = &h.nvidia_params else {
        let why = h.nvidia_params.why().unwrap_or("not read");
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!(
                    "{PARAMS} unreadable ({why}): whether the driver allows peer mappings is \
                     unknown (is the NVIDIA driver loaded? see driver.nvidia-loaded)"
                ),
            )
            .with(ev(PARAMS, why)),
        );
        return;
    };
    let Some(dwords) = registry_dwords(params) else {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!("{PARAMS} has no RegistryDwords line: the regkey state is unknown"),
            )
            .with(ev(PARAMS, "no RegistryDwords line")),
        );
        return;
    };
    let evidence = ev(format!("{PARAMS} RegistryDwords"), format!("\"{dwords}\""));
    let f = match registry_value(dwords, REGKEY) {
        Some(1) => Finding::new(
            id,
            "host",
            Status::Pass,
            "PeerMappingOverride=1: a GPU kernel can ring the NIC's doorbell itself (gpu handler)",
        ),
        Some(v) => Finding::new(
            id,
            "host",
            Status::Warn,
            format!(
                "PeerMappingOverride={v} (not 1): the driver refuses to map the NIC's doorbell \
                 for the GPU in processes that are not root; GPU-initiated RDMA there falls back \
                 to a CPU proxy thread ringing it"
            ),
        )
        .fix(PEER_MAPPING_FIX),
        None => Finding::new(
            id,
            "host",
            Status::Warn,
            "PeerMappingOverride is not set: the driver refuses to map the NIC's doorbell for \
             the GPU in processes that are not root; GPU-initiated RDMA there falls back to a \
             CPU proxy thread ringing it",
        )
        .fix(PEER_MAPPING_FIX),
    };
    out.push(f.with(evidence));
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

    #[test]
    fn registry_dwords_parse() {
        let p =
            "EnableMSI: 1\nRegistryDwords: \"PeerMappingOverride=1;RMForceX=0x10\"\nRmMsg: \"\"\n";
        let d = registry_dwords(p).unwrap();
        assert_eq!(d, "PeerMappingOverride=1;RMForceX=0x10");
        assert_eq!(registry_value(d, REGKEY), Some(1));
        assert_eq!(registry_value(d, "RMForceX"), Some(16));
        assert_eq!(registry_value(d, "rmforcex"), None);
        assert_eq!(registry_value(d, "Other"), None);
        assert_eq!(registry_dwords("RegistryDwords: \"\"\n"), Some(""));
        assert_eq!(registry_value("", REGKEY), None);
        assert_eq!(
            registry_value(" PeerMappingOverride = 0x0 ;", REGKEY),
            Some(0)
        );
        assert_eq!(registry_value("PeerMappingOverride=yes;", REGKEY), None);
        // A per-device line is not the global one.
        assert_eq!(
            registry_dwords(
                "RegistryDwordsPerDevice: \"pci=0000:1b:00.0;PeerMappingOverride=1\"\n"
            ),
            None
        );
    }
}
