//! Level 1: the CUDA probes' verdicts as check findings (`probe.*`), and the GPU link read
//! under load replacing level 0's "idle downshift possible".
//!
//! Pure: takes probe reports (measured live, or recorded in a tree's `probes/`) and turns
//! them into findings. Unknown (no samples, no expected rate) is a skip with the reason.

use crate::checks::{CheckId, Finding, Status, ev};
use crate::probes::{self, ProbeKind, ProbeReport};

/// A probe's verdict as a finding's status (the one mapping: `Verdict::finding`).
fn status(s: probes::Status) -> Status {
    s.finding().0
}

pub fn id_of(kind: ProbeKind) -> CheckId {
    match kind {
        ProbeKind::H2d => CheckId::ProbeH2d,
        ProbeKind::D2h => CheckId::ProbeD2h,
        ProbeKind::P2p => CheckId::ProbeP2p,
        ProbeKind::DmabufExport => CheckId::ProbeDmabufExport,
    }
}

/// The fix for a host<->GPU copy below its threshold, pointing at the probe that measured it.
fn fix_copy(kind: ProbeKind) -> String {
    format!(
        "Check the GPU's PCIe link under load (pcie.link-speed/width), NUMA placement of the pinned buffer (numa.*), and other traffic on the host; `gpudoctor probe {} --json` keeps every sample",
        kind.as_str()
    )
}
const FIX_P2P: &str = "Check nvidia-smi nvlink -s/-e for link errors, fabric manager on NVSwitch systems, and ACS/IOMMU on PCIe paths (pcie.acs-redirect, iommu.mode)";

/// Findings for one probe report.
pub fn findings(r: &ProbeReport, out: &mut Vec<Finding>) {
    let id = id_of(r.probe);
    if let Some(why) = &r.skipped {
        out.push(Finding::new(id, "host", Status::Skip, why.clone()));
        return;
    }
    if let Some(e) = &r.error {
        out.push(
            Finding::new(id, "host", Status::Fail, format!("probe broke off: {e}"))
                .fix("A copy or kernel that never finishes points at a hung GPU or driver: check `dmesg` for Xid errors and `nvidia-smi -q` for the GPU state"),
        );
    }
    for m in &r.measurements {
        let e = &m.evaluation;
        let method = serde_json::to_value(m.method)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let subject = if m.src == "host" {
            format!("{} ({method})", m.dst)
        } else if m.dst == "host" {
            format!("{} ({method})", m.src)
        } else {
            format!("{}->{} ({method})", m.src, m.dst)
        };
        let mut f = Finding::new(
            id,
            subject,
            status(e.status),
            format!("{method}: {}", e.reason),
        );
        if let Some(s) = &e.stats {
            f = f.with(ev(
                format!("{} x {} B, CUDA events", method, m.size_bytes),
                format!(
                    "median {:.1} GB/s (min {:.1}, max {:.1}, n={})",
                    s.median_gbps, s.min_gbps, s.max_gbps, s.n
                ),
            ));
        }
        if let Some(a) = &e.remeasured {
            f = f.with(ev(
                format!(
                    "{} x {} B, measured again (the first reading was below the bar)",
                    method, m.size_bytes
                ),
                format!(
                    "median {:.1} GB/s (min {:.1}, max {:.1}, n={})",
                    a.median_gbps, a.min_gbps, a.max_gbps, a.n
                ),
            ));
        }
        if let (Some(t), Some(b)) = (e.threshold_gbps, &e.threshold_basis) {
            f = f.with(ev("threshold", format!("{t:.1} GB/s ({b})")));
        }
        if matches!(f.status, Status::Warn | Status::Fail) {
            f = f.fix(if r.probe == ProbeKind::P2p {
                FIX_P2P.to_string()
            } else {
                fix_copy(r.probe)
            });
        }
        out.push(f);
    }
    for p in &r.peers {
        if p.status == probes::Status::Pass {
            continue;
        }
        let mut f = Finding::new(
            id,
            format!("{}->{}", p.src, p.dst),
            status(p.status),
            p.reason.clone(),
        );
        if f.status == Status::Fail || f.status == Status::Warn {
            f = f.fix(FIX_P2P);
        }
        out.push(f);
    }
    for d in &r.dmabuf {
        let mut f = Finding::new(id, d.gpu.clone(), status(d.status), d.reason.clone());
        if let Some(a) = d.attribute_supported.value() {
            f = f.with(ev("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED", a.to_string()));
        }
        if matches!(f.status, Status::Warn | Status::Fail) {
            f = f.fix("Use the open NVIDIA kernel module (dma-buf export needs it) on Linux >= 5.12, allocate with cuMemAlloc (not the async pool); or use nvidia-peermem");
        }
        out.push(f);
    }
    if r.measurements.is_empty() && r.dmabuf.is_empty() && r.peers.is_empty() && r.error.is_none() {
        out.push(Finding::new(
            id,
            "host",
            Status::Skip,
            "nothing to measure (fewer GPUs than the probe needs)",
        ));
    }
}

const FIX_NCCL_BW: &str = "Compare with probe.p2p (the same GPU pairs without NCCL), look for other GPU work on the node (`nvidia-smi`), NVLink errors (gpu.nvlink-errors) and the fabric manager (gpu.fabric); `gpudoctor probe nccl --json` keeps every sample";
const FIX_NCCL_TRANSPORT: &str = "Unset the NCCL_* variables named (NCCL_P2P_DISABLE, NCCL_P2P_LEVEL, NCCL_SHM_DISABLE, NCCL_TOPO_FILE ...) or explain them; check peer access (probe.p2p), ACS/IOMMU on the PCIe path (pcie.acs-redirect, iommu.mode) and, for the network, GPUDirect RDMA readiness (gdr.*)";

/// `probe.nccl`'s findings from one NCCL report (measured live or replayed from a tree's
/// `probes/nccl.json`): per configuration and collective the bus bandwidth at the judged size
/// against its bar, and every contradiction between NCCL's transports and the topology.
pub fn nccl_findings(r: &crate::report::nccl::NcclReport, out: &mut Vec<Finding>) {
    let id = CheckId::ProbeNccl;
    let library = r.library.as_ref().map(|l| {
        ev(
            "NCCL library",
            format!("{} ({}, loaded at run time)", l.version, l.path),
        )
    });
    if let Some(why) = &r.skipped {
        let mut f = Finding::new(id, "host", Status::Skip, why.clone());
        if r.library.is_none() && !r.looked_in.is_empty() {
            f = f.with(ev("libnccl looked for in", r.looked_in.join("; ")));
        }
        out.push(f);
        return;
    }
    if let Some(e) = &r.error {
        out.push(
            Finding::new(id, "host", Status::Fail, format!("NCCL run broke off: {e}"))
                .fix("Run `gpudoctor probe nccl` for NCCL's own messages; a collective that never finishes points at a hung GPU, NVLink or fabric manager (gpu.xid, gpu.fabric)"),
        );
    }
    let env: Vec<String> = r
        .environment
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for run in &r.runs {
        let subject = |what: &str| format!("{} ({what})", run.name);
        if let Some(why) = &run.skipped {
            out.push(Finding::new(id, subject("run"), Status::Skip, why.clone()));
            continue;
        }
        if let Some(e) = &run.error {
            out.push(
                Finding::new(
                    id,
                    subject("run"),
                    Status::Fail,
                    format!("NCCL failed: {e}"),
                )
                .fix(FIX_NCCL_BW),
            );
        }
        let transports: Vec<String> = run
            .transports
            .iter()
            .map(|t| {
                let via: Vec<String> = t.via.iter().map(|(v, n)| format!("{v} x{n}")).collect();
                format!(
                    "{}->{} ({}): {}",
                    t.from,
                    t.to,
                    t.path.as_deref().unwrap_or("path unknown"),
                    via.join(", ")
                )
            })
            .collect();
        for c in &run.collectives {
            let e = &c.evaluation;
            let mut f = Finding::new(
                id,
                subject(c.collective.as_str()),
                status(e.status),
                format!(
                    "{} over {} ranks: {}",
                    c.collective.as_str(),
                    c.ranks,
                    e.reason
                ),
            );
            if let Some(s) = &e.stats {
                f = f.with(ev(
                    format!(
                        "bus bandwidth, {} warm-up + {} x {} iterations, CUDA events",
                        c.warmup, s.n, c.iters
                    ),
                    format!(
                        "median {:.1} GB/s (min {:.1}, max {:.1}, n={})",
                        s.median_gbps, s.min_gbps, s.max_gbps, s.n
                    ),
                ));
            }
            if let Some(a) = &e.remeasured {
                f = f.with(ev(
                    "measured again (the first reading was below the bar)",
                    format!(
                        "median {:.1} GB/s (min {:.1}, max {:.1}, n={})",
                        a.median_gbps, a.min_gbps, a.max_gbps, a.n
                    ),
                ));
            }
            if let (Some(t), Some(b)) = (e.threshold_gbps, &e.threshold_basis) {
                f = f.with(ev("threshold", format!("{t:.1} GB/s ({b})")));
            }
            if let Some(l) = &library {
                f = f.with(l.clone());
            }
            if !transports.is_empty() {
                f = f.with(ev(
                    "NCCL's transports (its debug output)",
                    transports.join("; "),
                ));
            }
            if !env.is_empty() {
                f = f.with(ev("NCCL_* in the environment", env.join(" ")));
            }
            if matches!(f.status, Status::Warn | Status::Fail) {
                f = f.fix(FIX_NCCL_BW);
            }
            out.push(f);
        }
        for t in &run.findings {
            let mut f = Finding::new(
                id,
                format!("{} ({})", t.subject, run.name),
                status(t.status),
                t.reason.clone(),
            );
            if matches!(f.status, Status::Warn | Status::Fail) {
                f = f.fix(FIX_NCCL_TRANSPORT);
            }
            out.push(f);
        }
    }
    if r.runs.is_empty() && r.error.is_none() {
        out.push(Finding::new(
            id,
            "host",
            Status::Skip,
            "no NCCL configuration was run",
        ));
    }
}

/// Level 0 said "idle downshift possible" for a GPU; the link read under load settles it.
pub fn settle_link_speed(
    reports: &[ProbeReport],
    findings: &mut [Finding],
    topo: &crate::topo::Topology,
) {
    for f in findings
        .iter_mut()
        .filter(|f| f.id == CheckId::PcieLinkSpeed && f.status == Status::Warn)
    {
        let Some(g) = f.subject.parse().ok().and_then(|b| topo.gpu_at(b)) else {
            continue;
        };
        let Some(l) = reports
            .iter()
            .flat_map(|r| r.link_under_load.iter())
            .find(|l| l.gpu == g.label && l.status != probes::Status::Unknown)
        else {
            continue;
        };
        let (st, reason) = probes::evaluate_link_under_load(l);
        f.evidence.push(ev(
            format!("link under load ({})", l.during),
            reason.clone(),
        ));
        match st {
            probes::Status::Pass => {
                f.status = Status::Pass;
                f.message = format!("{}: idle downshift only; {reason}", g.label);
                f.remediation = None;
            }
            probes::Status::Fail => {
                f.status = Status::Fail;
                f.message = format!("{}: {reason}", g.label);
                f.remediation = Some("Reseat the GPU, check the riser/retimer and BIOS PCIe speed settings; a link that stays below its capability under load is a hardware or firmware fault".into());
            }
            _ => {}
        }
    }
}
