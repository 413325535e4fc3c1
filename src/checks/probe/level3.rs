//! Level 3: a short, validated GPUDirect RDMA loopback per GPU against its closest ACTIVE RDMA
//! port (`probe write-bw --gpu`), as `probe.gdr-write-bw` findings. Pure: turns level-3
//! write-bw reports into findings.

use crate::checks::{CheckId, Finding, Status, ev};
use crate::findings::Judgement;
use crate::rdma::judge::write_bw::judge_run;
use crate::report::rdma::write_bw::{Status as WStatus, WriteBwReport};

pub const ID: CheckId = CheckId::ProbeGdrWriteBw;

/// The finding for one GPU's run.
pub fn finding(subject: &str, r: &WriteBwReport) -> Finding {
    let mut e = Vec::new();
    let g = r.gdr.as_ref();
    if let Some(g) = g {
        if !g.nic.device.is_empty() {
            e.push(ev(
                "RDMA port",
                format!("{}/{}: {}", g.nic.device, g.nic.port, g.nic.why),
            ));
        }
        if let Some(b) = &g.gpu_buffer {
            e.push(ev(
                "cuMemAlloc",
                format!(
                    "{} B at {} ({} KiB-aligned), SYNC_MEMOPS {}, dma-buf export: {}",
                    b.bytes,
                    b.address,
                    b.address_alignment_bytes >> 10,
                    u8::from(b.sync_memops),
                    b.dmabuf_export
                ),
            ));
        }
        if let Some(d) = &g.registration {
            e.push(ev("registration", d.summary.clone()));
        }
        if let Some(m) = &g.gpu_memory {
            e.push(ev(
                "cuMemGetInfo",
                format!(
                    "free {} B before, {} B after",
                    m.free_before_bytes, m.free_after_bytes
                ),
            ));
        }
        e.push(ev("expectation", g.expectation.text.clone()));
    }
    e.extend(r.results.iter().map(super::level2::size_evidence));
    if let Some(c) = g.and_then(|g| g.cause.as_ref()) {
        e.extend(c.evidence.iter().cloned());
    }
    if let Some(t) = &r.threshold {
        e.push(ev("threshold", super::level2::threshold_text(t)));
    }
    let via = g
        .and_then(|g| g.registration.as_ref())
        .and_then(|d| d.used)
        .map(|u| u.as_str())
        .unwrap_or("?");
    let beyond_pxb = g.is_some_and(|g| !g.expectation.judged && g.nic.path.is_some());
    // The status is the one judge's (`write_bw::judge_run`); level 3 adds its words, the
    // beyond-PXB warning and the cause of a failure.
    let j = judge_run(&r.view());
    let f = match (&r.status, j.status) {
        (WStatus::Skipped { reason }, _) => {
            let f = Finding::new(ID, subject, Status::Skip, reason.clone());
            if g.is_none_or(|g| g.not_applicable) {
                f.not_applicable()
            } else {
                f
            }
        }
        (_, Judgement::Pass) => Finding::new(
            ID,
            subject,
            Status::Pass,
            format!("GPUDirect RDMA writes via {via} reach the line-rate threshold; data validated in GPU memory"),
        ),
        // Beyond PXB NCCL would not use GPUDirect RDMA: say so, as a warning (--deny makes it
        // a failure).
        (_, Judgement::NotApplicable) if beyond_pxb && !r.view().software => Finding::new(
            ID,
            subject,
            Status::Warn,
            format!(
                "GPUDirect RDMA via {via} works, but {}",
                g.map(|g| g.expectation.text.as_str()).unwrap_or_default()
            ),
        )
        .fix("Put the GPU and its NIC behind one PCIe switch (PIX/PXB), or let NCCL stage through host memory there (its default beyond PXB)"),
        (_, Judgement::NotApplicable) => {
            Finding::new(ID, subject, Status::Skip, j.reason.clone()).not_applicable()
        }
        (_, Judgement::Unknown) => Finding::new(ID, subject, Status::Skip, j.reason.clone()),
        (_, Judgement::Fail | Judgement::Warn) => {
            let c = g.and_then(|g| g.cause.as_ref());
            let msg = match c {
                Some(c) => format!("{}: {}", j.reason, c.summary),
                None => j.reason.clone(),
            };
            Finding::new(ID, subject, Status::Fail, msg).fix(
                c.map(|c| c.remediation.clone()).unwrap_or_else(|| {
                    "`gpudoctor probe write-bw --gpu N --all --validate` gives the full sweep and the cause".into()
                }),
            )
        }
    };
    f.evidence(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::SkipKind;
    use crate::rdma::judge::gdr;
    use crate::report::rdma::gdr::{GdrFacts, GpuFacts, NicChoice};
    use crate::report::rdma::plan::{Plan, PlanSpec};
    use crate::report::rdma::write_bw::{Mode, SizeResult, Threshold};
    use crate::topo::PathType;

    /// A 1 MiB run at `gbps` on a 200 Gb/s port (threshold 180 Gb/s), as level 3's `finish`
    /// leaves it (the path's expectation decides whether the line rate applies).
    fn report(path: Option<PathType>, status: WStatus, gbps: f64) -> WriteBwReport {
        let plan = Plan::new(PlanSpec {
            sizes: vec![1 << 20],
            ..PlanSpec::check()
        })
        .unwrap();
        let mut r = WriteBwReport::new(Mode::Loopback, plan);
        let rep = crate::report::rdma::write_bw::Repetition {
            elapsed_ns: 1,
            mb_per_s: gbps * 1e3 / 8.0,
            peak_mb_per_s: gbps * 1e3 / 8.0,
            peak_window: 1,
        };
        r.results
            .push(SizeResult::new(1 << 20, 500, vec![rep], Some(true)));
        r.status = status;
        let expectation = gdr::expectation(path);
        let rate = crate::report::rdma::write_bw::LineRate {
            gbps: 200.0,
            source: "4X HDR".into(),
        };
        r.threshold = Some(match path {
            _ if expectation.judged => crate::rdma::judge::write_bw::threshold(None, Ok(&rate)),
            Some(_) => Threshold::NotApplicable {
                reason: expectation.text.clone(),
            },
            None => Threshold::Unknown {
                reason: expectation.text.clone(),
            },
        });
        r.gdr = Some(GdrFacts {
            gpu: Some(GpuFacts {
                label: "GPU0".into(),
                bdf: "0000:1b:00.0".into(),
                name: "H100".into(),
            }),
            gpu_side: "both".into(),
            nic: NicChoice {
                device: "mlx5_0".into(),
                port: 1,
                path,
                path_certain: true,
                why: "closest".into(),
            },
            expectation,
            registration: None,
            gpu_memory: None,
            gpu_buffer: None,
            cause: None,
            not_applicable: false,
        });
        r
    }

    #[test]
    fn every_verdict() {
        let f = finding("GPU0", &report(Some(PathType::PIX), WStatus::Ok, 190.0));
        assert_eq!(f.status, Status::Pass);
        assert!(f.message.contains("line-rate threshold"));
        // Beyond PXB: works, but a warning that names NCCL's rule.
        let f = finding("GPU0", &report(Some(PathType::SYS), WStatus::Ok, 20.0));
        assert_eq!(f.status, Status::Warn);
        assert!(f.message.contains("ncclTopoCheckGdr"), "{}", f.message);
        assert!(f.remediation.is_some());
        // Below the line rate within PXB: a failure.
        let f = finding("GPU0", &report(Some(PathType::PIX), WStatus::Ok, 100.0));
        assert_eq!(f.status, Status::Fail);
        assert!(
            f.message.contains("1048576 B: median 100.00 Gb/s"),
            "{}",
            f.message
        );
        // Path unknown (not on the PCI tree): measured, and an unknown skip, never a pass.
        let f = finding("GPU0", &report(None, WStatus::Ok, 190.0));
        assert_eq!((f.status, f.skip), (Status::Skip, Some(SkipKind::Unknown)));
        assert!(f.message.contains("GPU-NIC path unknown"), "{}", f.message);
        // Line rate unknown: the same.
        let mut r = report(Some(PathType::PIX), WStatus::Ok, 190.0);
        r.threshold = Some(crate::rdma::judge::write_bw::threshold(
            None,
            Err("no rate"),
        ));
        let f = finding("GPU0", &r);
        assert_eq!((f.status, f.skip), (Status::Skip, Some(SkipKind::Unknown)));
        assert!(
            f.message.starts_with("line rate unknown: "),
            "{}",
            f.message
        );
        // A software device: measured, not judged.
        r.threshold = Some(crate::rdma::judge::write_bw::threshold(
            Some("no PCI function"),
            Err("x"),
        ));
        r.local = Some(crate::report::rdma::write_bw::PortFacts {
            device: "rxe0".into(),
            port: 1,
            state: "ACTIVE".into(),
            link_layer: "Ethernet".into(),
            mtu_bytes: 1024,
            addressing: crate::report::rdma::write_bw::Addressing::Lid { lid: 0 },
            software_device: Some("no PCI function".into()),
            line_rate: None,
            line_rate_unknown: None,
        });
        let f = finding("GPU0", &r);
        assert_eq!(
            (f.status, f.skip, f.message.as_str()),
            (
                Status::Skip,
                Some(SkipKind::NotApplicable),
                "software RDMA: measured, not judged"
            )
        );
        // Failure with a cause: the cause's summary and fix.
        let mut r = report(
            Some(PathType::PIX),
            WStatus::Error {
                reason: "mlx5_0: ibv_reg_mr failed".into(),
            },
            0.0,
        );
        if let Some(g) = r.gdr.as_mut() {
            g.cause = Some(crate::report::rdma::gdr::Cause {
                summary: "nvidia-peermem is not loaded".into(),
                checks: vec!["gdr.peermem"],
                evidence: vec![ev("check gdr.peermem host", "fail")],
                remediation: "modprobe nvidia-peermem".into(),
            });
        }
        let f = finding("GPU0", &r);
        assert_eq!(f.status, Status::Fail);
        assert!(f.message.ends_with(": nvidia-peermem is not loaded"));
        assert_eq!(f.remediation.as_deref(), Some("modprobe nvidia-peermem"));
        assert!(
            f.evidence
                .iter()
                .any(|e| e.source == "check gdr.peermem host")
        );
        // Failure without a cause still says how to dig.
        let f = finding(
            "GPU0",
            &report(
                Some(PathType::PIX),
                WStatus::Failed {
                    reason: "slow".into(),
                },
                100.0,
            ),
        );
        assert_eq!(f.status, Status::Fail);
        assert!(f.remediation.unwrap().contains("--all --validate"));
        // Skips: nothing to test here (not applicable) vs could not run (unknown).
        let mut r = report(
            None,
            WStatus::Skipped {
                reason: "no RDMA NIC".into(),
            },
            0.0,
        );
        assert_eq!(finding("GPU0", &r).skip, Some(SkipKind::Unknown));
        if let Some(g) = r.gdr.as_mut() {
            g.not_applicable = true;
        }
        assert_eq!(finding("GPU0", &r).skip, Some(SkipKind::NotApplicable));
        r.gdr = None;
        assert_eq!(finding("host", &r).skip, Some(SkipKind::NotApplicable));
    }
}
