//! Level 4: a short, validated GPU-initiated RDMA-write loopback per GPU against its closest
//! mlx5 port (`probe gpu-write-bw`), as `probe.gpu-write-bw` findings. Pure: turns level-4
//! reports into findings. Unknown is never a pass: a run that measured nothing is a skip,
//! not-applicable only where there is nothing to judge (no GPU, no mlx5 port).

use crate::checks::{CheckId, Finding, Status, ev};
use crate::findings::Judgement;
use crate::rdma::judge::write_bw::judge_run;
use crate::report::rdma::gpu_write_bw::GpuWriteBwReport;
use crate::report::rdma::write_bw::Status as WStatus;

pub const ID: CheckId = CheckId::ProbeGpuWriteBw;

/// The finding for one GPU's run.
pub fn finding(subject: &str, r: &GpuWriteBwReport) -> Finding {
    let mut e = Vec::new();
    if let Some(n) = &r.nic
        && !n.device.is_empty()
    {
        e.push(ev(
            "RDMA port",
            format!("{}/{}: {}", n.device, n.port, n.why),
        ));
    }
    if let Some(p) = &r.provider {
        e.push(ev("provider", p.clone()));
    }
    e.push(ev("doorbell", r.poster.why.clone()));
    if let Some(t) = &r.poster.posting_ns {
        e.push(ev(
            "posting per iteration",
            format!(
                "median {} ns, min {}, max {} (n {})",
                t.median, t.min, t.max, t.n
            ),
        ));
    }
    for n in &r.notes {
        e.push(ev("note", n.clone()));
    }
    // The status is the one judge's (`write_bw::judge_run`) with level 4's bar: delivery.
    let j = judge_run(&r.view());
    let f = match (&r.status, j.status) {
        (WStatus::Skipped { reason }, _) => {
            let f = Finding::new(ID, subject, Status::Skip, reason.clone());
            if r.not_applicable {
                f.not_applicable()
            } else {
                f
            }
        }
        (_, Judgement::Pass) => Finding::new(
            ID,
            subject,
            Status::Pass,
            format!(
                "GPU-initiated RDMA writes ({} rang the doorbell) moved and validated",
                r.poster.handler.map(|h| h.as_str()).unwrap_or("?")
            ),
        ),
        (_, Judgement::Fail | Judgement::Warn) => {
            Finding::new(ID, subject, Status::Fail, j.reason.clone()).fix(
                "`gpudoctor probe gpu-write-bw --gpu N --validate` gives the full run; an error \
                 CQE's syndrome names the cause (see `gpudoctor explain probe.gpu-write-bw`)",
            )
        }
        // Measured but not validated (or not every size): not a pass.
        (_, Judgement::Unknown | Judgement::NotApplicable) => {
            Finding::new(ID, subject, Status::Skip, j.reason.clone())
        }
    };
    f.evidence(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::SkipKind;
    use crate::report::rdma::gpu_write_bw::{NicHandler, PlanFacts, QueuePlace};
    use crate::report::rdma::write_bw::SizeResult;

    fn report(status: WStatus, not_applicable: bool, validated: Option<bool>) -> GpuWriteBwReport {
        let plan = PlanFacts {
            sizes: vec![64],
            iters: 4,
            writes_per_iter: 512,
            validate: true,
        };
        let mut r = GpuWriteBwReport::new(plan, NicHandler::Auto, QueuePlace::Auto);
        r.status = status;
        r.not_applicable = not_applicable;
        let rep = crate::report::rdma::write_bw::Repetition {
            elapsed_ns: 1,
            mb_per_s: 1.0,
            peak_mb_per_s: 1.0,
            peak_window: 1,
        };
        r.results = vec![SizeResult::new(64, 2048, vec![rep], validated)];
        r
    }

    #[test]
    fn verdicts() {
        let skip = || WStatus::Skipped { reason: "x".into() };
        let f = finding("GPU0", &report(skip(), true, None));
        assert_eq!(
            (f.status, f.skip),
            (Status::Skip, Some(SkipKind::NotApplicable))
        );
        // A skip with something left unjudged (the live path missing, libmlx5 absent) stays
        // an unknown skip: --fail-on-skip fails on it.
        let f = finding("GPU0", &report(skip(), false, None));
        assert_eq!((f.status, f.skip), (Status::Skip, Some(SkipKind::Unknown)));
        assert_eq!(
            finding("GPU0", &report(WStatus::Ok, false, Some(true))).status,
            Status::Pass
        );
        // Unknown is never a pass: measured without validation is a skip.
        assert_eq!(
            finding("GPU0", &report(WStatus::Ok, false, None)).status,
            Status::Skip
        );
        let err = WStatus::Error {
            reason: "error CQE".into(),
        };
        let f = finding("GPU0", &report(err, false, None));
        assert_eq!(f.status, Status::Fail);
        assert!(f.remediation.is_some());
    }
}
