//! Level 2: a short RDMA-write loopback (`probe write-bw`) on every active RDMA port, as
//! `probe.write-bw` findings. Pure: turns write-bw reports into findings.

use super::{CheckId, Evidence, Finding, SkipKind, ev};
use crate::rdma::write_bw::{SizeResult, Threshold, WriteBwReport, judge_run};
use crate::verdict::Judgement;

pub const ID: CheckId = CheckId::ProbeWriteBw;

/// One message size's measurement as evidence (levels 2 and 3): n, median, min and max of
/// its timed repetitions.
pub fn size_evidence(s: &SizeResult) -> Evidence {
    let rate = match &s.stats {
        Some(st) => format!(
            "median {:.1} MB/s ({:.2} Gb/s), min {:.1}, max {:.1} (n {})",
            st.median_mb_per_s, st.median_gbps, st.min_mb_per_s, st.max_mb_per_s, st.n
        ),
        None => "no samples".to_string(),
    };
    ev(
        format!("{} B x {} writes", s.bytes, s.iterations),
        format!(
            "{rate}, data {}",
            match s.validated {
                Some(true) => "validated",
                Some(false) => "CORRUPT",
                None => "not checked",
            }
        ),
    )
}

pub fn findings(subject: &str, r: &WriteBwReport, out: &mut Vec<Finding>) {
    out.push(finding(subject, r));
}

/// The finding for one port's run: the status is the one judge's (`write_bw::judge_run`).
pub fn finding(subject: &str, r: &WriteBwReport) -> Finding {
    let mut rows: Vec<_> = r.results.iter().map(size_evidence).collect();
    if let Some(t) = &r.threshold {
        rows.push(ev("threshold", threshold_text(t)));
    }
    let j = judge_run(&r.view());
    let (status, skip) = j.status.finding();
    let message = match j.status {
        Judgement::Pass => "RDMA writes reach the line-rate threshold; data validated".to_string(),
        _ => j.reason.clone(),
    };
    let mut f = Finding::new(ID, subject, status, message);
    if skip == Some(SkipKind::NotApplicable) {
        f = f.not_applicable();
    }
    if matches!(j.status, Judgement::Fail | Judgement::Warn) {
        f = f.fix("Check the port (rdma.port-state), cables and switch port counters (`perfquery`, `ethtool -S`), PCIe link of the NIC (pcie.link-*), and firmware; `gpudoctor probe write-bw -d DEV --all --validate` gives the full sweep");
    }
    f.evidence(rows)
}

/// The bar in words, as evidence (levels 2 and 3).
pub fn threshold_text(t: &Threshold) -> String {
    match t {
        Threshold::LineRate {
            source, min_bytes, ..
        } => format!("messages >= {min_bytes} B at {source}"),
        Threshold::Unknown { reason } => format!("none: {reason}"),
        Threshold::NotApplicable { reason } | Threshold::Delivery { reason } => {
            format!("none: {reason}")
        }
    }
}
