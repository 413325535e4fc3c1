//! Level 1: the CUDA probes' verdicts as check findings (`probe.*`), and the GPU link read
//! under load replacing level 0's "idle downshift possible".
//!
//! Pure: takes probe reports (measured live, or recorded in a tree's `probes/`) and turns
//! them into findings. Unknown (no samples, no expected rate) is a skip with the reason.

use super::{CheckId, Finding, Status, ev};
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
        if let Ok(a) = &d.attribute_supported {
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
