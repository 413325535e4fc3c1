//! Level 2: a short RDMA-write loopback (`probe write-bw`) on every active RDMA port, as
//! `probe.write-bw` findings. Pure: turns write-bw reports into findings.

use crate::checks::{CheckId, Evidence, Finding, SkipKind, ev};
use crate::findings::Judgement;
use crate::rdma::judge::write_bw::judge_run;
use crate::report::rdma::write_bw::{SizeResult, Threshold, WriteBwReport};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::Status;
    use crate::report::rdma::plan::Plan;
    use crate::report::rdma::write_bw::{Addressing, LineRate, Mode, PortFacts, Repetition};

    /// A completed, validated level-2 run at `gbps` (median of 5) on a port whose facts say
    /// `software` and `rate`: the finding the check makes of it.
    fn run(gbps: f64, software: bool, rate: Result<f64, &str>) -> Finding {
        let plan = Plan::check_level2(false).unwrap();
        let mut r = WriteBwReport::new(Mode::Loopback, plan);
        let line = rate.map(|g| LineRate {
            gbps: g,
            source: "4X HDR".into(),
        });
        r.local = Some(PortFacts {
            device: "mlx5_0".into(),
            port: 1,
            state: "ACTIVE".into(),
            link_layer: "InfiniBand".into(),
            mtu_bytes: 4096,
            addressing: Addressing::Lid { lid: 1 },
            software_device: software.then(|| "no PCI function".into()),
            line_rate: line.clone().ok(),
            line_rate_unknown: line.clone().err().map(String::from),
        });
        r.threshold = Some(crate::rdma::judge::write_bw::threshold_for(
            r.local.as_ref().unwrap(),
        ));
        for bytes in [65536, 1 << 20] {
            let reps = (0..5)
                .map(|i| Repetition {
                    elapsed_ns: 1,
                    mb_per_s: (gbps + f64::from(i) - 2.0) * 1e3 / 8.0,
                    peak_mb_per_s: gbps * 1e3 / 8.0,
                    peak_window: 1,
                })
                .collect();
            r.results
                .push(SizeResult::new(bytes, 500, reps, Some(true)));
        }
        r.conclude();
        finding("mlx5_0/1", &r)
    }

    /// Unknown is never a pass: a line rate that is unknown (or whose sources disagree) and a
    /// software device are skips, of the right kind, with the measurement kept as evidence.
    #[test]
    fn level2_findings() {
        let f = run(190.0, false, Ok(200.0));
        assert_eq!(f.status, Status::Pass);
        assert!(
            f.evidence.iter().any(|e| e.value.contains("(n 5)")),
            "{f:?}"
        );
        let f = run(150.0, false, Ok(200.0));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message.contains("median 150.00 Gb/s (n 5"),
            "{}",
            f.message
        );
        assert!(f.remediation.is_some());
        let f = run(
            190.0,
            false,
            Err("ibv_query_port says 4X NDR (400 Gb/s), sysfs rate says \"800 Gb/sec (4X XDR)\""),
        );
        assert_eq!((f.status, f.skip), (Status::Skip, Some(SkipKind::Unknown)));
        assert!(
            f.message
                .starts_with("line rate unknown: ibv_query_port says 4X NDR"),
            "{}",
            f.message
        );
        assert!(f.evidence.iter().any(|e| e.value.contains("median")));
        let f = run(0.4, true, Err("x"));
        assert_eq!(
            (f.status, f.skip, f.message.as_str()),
            (
                Status::Skip,
                Some(SkipKind::NotApplicable),
                "software RDMA: measured, not judged"
            )
        );
    }
}
