//! Level 2: a short RDMA-write loopback (`probe write-bw`) on every active RDMA port, as
//! `probe.write-bw` findings. Pure: turns write-bw reports into findings.

use super::{CheckId, Evidence, Finding, Status, ev};
use crate::rdma::write_bw::{SizeResult, Status as WStatus, Verdict, WriteBwReport};

pub const ID: CheckId = CheckId::ProbeWriteBw;

/// One message size's measurement as evidence (levels 2 and 3).
pub fn size_evidence(s: &SizeResult) -> Evidence {
    ev(
        format!("{} B x {} writes", s.bytes, s.iterations),
        format!(
            "{:.1} MB/s average ({:.2} Gb/s), data {}",
            s.average_mb_per_s,
            s.average_gbps,
            match s.validated {
                Some(true) => "validated",
                Some(false) => "CORRUPT",
                None => "not checked",
            }
        ),
    )
}

pub fn findings(subject: &str, r: &WriteBwReport, out: &mut Vec<Finding>) {
    let rows: Vec<_> = r.results.iter().map(size_evidence).collect();
    let judged = r.results.iter().any(|s| s.verdict != Verdict::Unknown);
    let f = match &r.status {
        WStatus::Ok if judged => Finding::new(ID, subject, Status::Pass, "RDMA writes reach the line-rate threshold; data validated"),
        // Software devices (rxe) have no line rate: the port moved and validated data, which is
        // what this level proves there.
        WStatus::Ok => Finding::new(ID, subject, Status::Pass, "RDMA writes moved and validated (no line-rate threshold applies to this device)"),
        WStatus::Skipped { reason } => Finding::new(ID, subject, Status::Skip, reason.clone()),
        WStatus::Failed { reason } | WStatus::Error { reason } => Finding::new(ID, subject, Status::Fail, reason.clone())
            .fix("Check the port (rdma.port-state), cables and switch port counters (`perfquery`, `ethtool -S`), PCIe link of the NIC (pcie.link-*), and firmware; `gpudoctor probe write-bw -d DEV --all --validate` gives the full sweep"),
    };
    out.push(f.evidence(rows));
}
