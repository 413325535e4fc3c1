//! Write-bw's judgements, pure functions over the report's facts: each repetition's summary
//! (`summarise`), the port's threshold, each size's verdict and the run's judgement
//! (`judge_run`, the one judge of levels 2-4, over `crate::findings::judge`). Nothing here
//! does I/O or prints.

use crate::rdma::request::write_bw::LARGE_MESSAGE_BYTES;
use crate::report::rdma::write_bw::{
    Judged, Mode, PortFacts, Repetition, Served, SizeResult, Status, Threshold, Timeline,
    WriteBwReport,
};
use crate::report::rdma::write_bw::{LineRate, SOFTWARE_NOT_JUDGED};

/// Pass at >= 90% of the port's data rate, the margin AzNHC and SuperBench use for
/// ib_write_bw loopback on healthy HCAs.
pub const LINE_RATE_FRACTION: f64 = 0.90;

/// Decimal MB/s (10^6 bytes/s): perftest 6.06 prints 2^20-byte "MB" (its MsgRate x size shows
/// it); we say decimal everywhere and convert where we compare.
pub fn mb_per_s(bytes: f64, ns: u64) -> f64 {
    if ns == 0 {
        return 0.0;
    }
    bytes / (ns as f64 / 1e9) / 1e6
}

/// Summarise one repetition from its timeline. The peak window is at least an eighth of the
/// run and two moderation batches, so that two completions reaped in one poll do not make a
/// peak.
pub fn summarise(bytes: u64, iterations: u64, cq_moderation: u32, t: &Timeline) -> Repetition {
    let elapsed_ns = t.marks.last().map(|m| m.0).unwrap_or(0);
    let total = bytes as f64 * iterations as f64;
    let average = mb_per_s(total, elapsed_ns);
    let window = (iterations / 8)
        .max(2 * u64::from(cq_moderation))
        .min(iterations)
        .max(1);
    let mut peak: f64 = 0.0;
    let marks: Vec<(u64, u64)> = std::iter::once((0, 0))
        .chain(t.marks.iter().copied())
        .collect();
    let mut j = 0;
    for i in 1..marks.len() {
        // Smallest window ending at i with at least `window` writes: advance j while it holds.
        while j + 1 < i && marks[i].1 - marks[j + 1].1 >= window {
            j += 1;
        }
        let n = marks[i].1 - marks[j].1;
        let dt = marks[i].0 - marks[j].0;
        if n >= window.min(iterations) && dt > 0 {
            peak = peak.max(mb_per_s(bytes as f64 * n as f64, dt));
        }
    }
    Repetition {
        elapsed_ns,
        mb_per_s: average,
        peak_mb_per_s: peak.max(average),
        peak_window: window,
    }
}

pub fn threshold(software_device: Option<&str>, rate: Result<&LineRate, &str>) -> Threshold {
    if let Some(what) = software_device {
        return Threshold::NotApplicable {
            reason: format!(
                "{SOFTWARE_NOT_JUDGED} ({what}: the CPU sets its rate, no line rate applies)"
            ),
        };
    }
    match rate {
        Ok(r) => Threshold::LineRate {
            fraction: LINE_RATE_FRACTION,
            gbps: r.gbps * LINE_RATE_FRACTION,
            min_bytes: LARGE_MESSAGE_BYTES,
            source: format!(
                "{:.0}% of {} = {:.1} Gb/s",
                LINE_RATE_FRACTION * 100.0,
                r.source,
                r.gbps * LINE_RATE_FRACTION
            ),
        },
        Err(why) => Threshold::Unknown {
            reason: format!("line rate unknown: {why}"),
        },
    }
}

/// The bar for a port, from its facts.
pub fn threshold_for(f: &PortFacts) -> Threshold {
    threshold(
        f.software_device.as_deref(),
        f.line_rate.as_ref().ok_or(
            f.line_rate_unknown
                .as_deref()
                .unwrap_or("the port's speed and width are unknown"),
        ),
    )
}

/// A write-bw run as the judge reads it: how it ended, what it measured and validated, the
/// bar, and whether the device is software (levels 2, 3 and 4 each make one).
pub struct RunView<'a> {
    pub status: &'a Status,
    pub results: &'a [SizeResult],
    /// None: the run stopped before the bar was set.
    pub threshold: Option<&'a Threshold>,
    pub software: bool,
    /// The sizes the plan asked for (a run that measured fewer did not complete them).
    pub planned_sizes: usize,
    /// Server mode: what the server checked of the client's writes.
    pub served: Option<&'a Served>,
}

/// A size is judged on its bandwidth (`rate_gbps`) against a line-rate bar when it is at least
/// `min_bytes`; smaller messages are message-rate bound and not judged.
fn size_bar(s: &SizeResult, t: Option<&Threshold>) -> crate::findings::Bar {
    use crate::findings::Bar;
    match t {
        Some(Threshold::LineRate {
            gbps, min_bytes, ..
        }) if s.bytes >= *min_bytes => match s.rate_gbps() {
            Some(r) if r >= *gbps => Bar::Met,
            Some(_) => Bar::Below,
            None => Bar::Unknown,
        },
        Some(Threshold::NotApplicable { .. }) => Bar::NotApplicable,
        Some(Threshold::Delivery { .. }) => Bar::Met,
        _ => Bar::Unknown,
    }
}

fn data_of(validated: Option<bool>) -> crate::findings::Data {
    use crate::findings::Data;
    match validated {
        Some(true) => Data::Validated,
        Some(false) => Data::Mismatch,
        None => Data::NotChecked,
    }
}

/// Each size's verdict (the table's column and the JSON's `verdict`), by the one judge.
pub fn size_verdicts(results: &mut [SizeResult], t: Option<&Threshold>, software: bool) {
    use crate::findings::{RunFacts, Weights, judge};
    for r in results {
        let f = RunFacts {
            completed: true,
            data: data_of(r.validated),
            bar: size_bar(r, t),
            software,
        };
        r.verdict = judge(&f, Weights::STRICT).verdict();
    }
}

/// The one judge of a write-bw run (levels 2, 3 and 4): pure, over the facts the engine
/// reported. Pass only when the run completed every planned size, every size was validated, a
/// threshold applied (to at least one size) and every size it applies to met it.
pub fn judge_run(v: &RunView) -> Judged {
    use crate::findings::{Bar, Data, Judgement, RunFacts, Shortfall, Weights, judge};
    let mk = |status, reason: String| Judged { status, reason };
    // Could not run here (no libibverbs, no device): unknown by the probe's own account; the
    // checks narrow it to not applicable where there is nothing to test.
    let (completed, weights, stop) = match v.status {
        Status::Skipped { reason } => (
            false,
            Weights {
                broken: Shortfall::Unknown,
                ..Weights::STRICT
            },
            Some(reason.clone()),
        ),
        Status::Error { reason } => (false, Weights::STRICT, Some(reason.clone())),
        Status::Ok | Status::Failed { .. } => (true, Weights::STRICT, None),
    };
    let mismatched: Vec<String> = match v.served {
        Some(s) => s.mismatched.clone(),
        None => v
            .results
            .iter()
            .filter(|r| r.validated == Some(false))
            .map(|r| format!("{} B", r.bytes))
            .collect(),
    };
    let data = if !mismatched.is_empty() {
        Data::Mismatch
    } else if let Some(s) = v.served {
        if s.validated > 0 && s.validated == s.sizes {
            Data::Validated
        } else {
            Data::NotChecked
        }
    } else if !v.results.is_empty() && v.results.iter().all(|r| r.validated == Some(true)) {
        Data::Validated
    } else {
        Data::NotChecked
    };
    let measured_all = v.results.len() >= v.planned_sizes;
    let below: Vec<&SizeResult> = v
        .results
        .iter()
        .filter(|r| size_bar(r, v.threshold) == Bar::Below)
        .collect();
    let judged = v
        .results
        .iter()
        .filter(|r| matches!(size_bar(r, v.threshold), Bar::Met | Bar::Below))
        .count();
    let (bar, bar_why) = match v.threshold {
        _ if v.served.is_some() => (
            Bar::NotApplicable,
            "server side: the client measures and judges the bandwidth".to_string(),
        ),
        None => (Bar::Unknown, "no threshold was set".to_string()),
        Some(Threshold::Unknown { reason }) => (Bar::Unknown, reason.clone()),
        Some(Threshold::NotApplicable { reason }) => (Bar::NotApplicable, reason.clone()),
        Some(Threshold::Delivery { reason }) if measured_all && !v.results.is_empty() => {
            (Bar::Met, reason.clone())
        }
        Some(Threshold::Delivery { .. }) => (
            Bar::Unknown,
            format!(
                "{} of {} planned size(s) measured",
                v.results.len(),
                v.planned_sizes
            ),
        ),
        Some(Threshold::LineRate { min_bytes, .. }) if judged == 0 => (
            Bar::Unknown,
            format!(
                "no message of at least {min_bytes} B was measured: the line-rate threshold applies to none"
            ),
        ),
        Some(Threshold::LineRate { source, .. }) if !below.is_empty() => (
            Bar::Below,
            format!(
                "{} (threshold {source})",
                below
                    .iter()
                    .map(|r| match &r.stats {
                        Some(st) => format!(
                            "{} B: median {:.2} Gb/s (n {}, min {:.2}, max {:.2})",
                            r.bytes,
                            st.median_gbps,
                            st.n,
                            st.min_mb_per_s * 8.0 / 1e3,
                            st.max_mb_per_s * 8.0 / 1e3
                        ),
                        None => format!("{} B: no samples", r.bytes),
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        Some(Threshold::LineRate { source, .. }) => (Bar::Met, format!("threshold {source}")),
    };
    let facts = RunFacts {
        completed,
        data,
        bar,
        software: v.software,
    };
    let status = judge(&facts, weights);
    let reason = match status {
        _ if !completed => stop.unwrap_or_default(),
        Judgement::Fail if data == Data::Mismatch => {
            format!("written data did not match: {}", mismatched.join(", "))
        }
        Judgement::NotApplicable if v.software => SOFTWARE_NOT_JUDGED.to_string(),
        Judgement::Unknown if data == Data::NotChecked && bar == Bar::Met => {
            "the written data was not validated: nothing judged".to_string()
        }
        _ => bar_why,
    };
    mk(status, reason)
}

impl WriteBwReport {
    /// The facts of this run as the judge reads them.
    pub fn view(&self) -> RunView<'_> {
        RunView {
            status: &self.status,
            results: &self.results,
            threshold: self.threshold.as_ref(),
            software: self
                .local
                .as_ref()
                .is_some_and(|l| l.software_device.is_some()),
            planned_sizes: match self.mode {
                Mode::Server => 0,
                _ => self.plan.sizes.len(),
            },
            served: self.served.as_ref(),
        }
    }

    /// Judge the run (`judge_run`): each size's verdict, the run's judgement, and a `failed`
    /// status where the judge failed a run that completed.
    pub fn conclude(&mut self) {
        let software = self.view().software;
        size_verdicts(&mut self.results, self.threshold.as_ref(), software);
        let j = judge_run(&self.view());
        if matches!(self.status, Status::Ok) && j.status == crate::findings::Judgement::Fail {
            self.status = Status::Failed {
                reason: j.reason.clone(),
            };
        }
        self.judgement = Some(j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::request::write_bw::all_sizes;
    use crate::report::rdma::plan::{Plan, PlanError, PlanSpec};
    use crate::report::rdma::write_bw::Verdict;

    #[test]
    fn plan_checks() {
        assert_eq!(
            Plan::new(PlanSpec {
                sizes: vec![64],
                iterations: 0,
                cq_moderation: 100,
                validate: false,
                ..PlanSpec::check()
            }),
            Err(PlanError::NoIterations)
        );
        assert_eq!(
            Plan::new(PlanSpec {
                sizes: vec![0],
                iterations: 10,
                cq_moderation: 100,
                validate: false,
                ..PlanSpec::check()
            }),
            Err(PlanError::Size(0))
        );
        assert_eq!(
            Plan::new(PlanSpec {
                sizes: vec![64],
                iterations: 10,
                cq_moderation: 100,
                qps: 3,
                validate: false,
                ..PlanSpec::check()
            }),
            Err(PlanError::ItersPerQp { iters: 10, qps: 3 })
        );
        let p = Plan::new(PlanSpec {
            sizes: vec![64],
            iterations: 10,
            tx_depth: 16,
            cq_moderation: 100,
            post_list: Some(64),
            validate: false,
            ..PlanSpec::check()
        })
        .unwrap();
        assert_eq!(p.cq_moderation, 16);
        assert_eq!(p.post_list_for(64), 16);
        let p = Plan::new(PlanSpec {
            sizes: vec![64],
            iterations: 10,
            cq_moderation: 100,
            validate: false,
            ..PlanSpec::check()
        })
        .unwrap();
        assert_eq!(p.post_list_for(64), 16);
        assert_eq!(p.post_list_for(8192), 8);
        assert_eq!(p.post_list_for(65536), 1);
        assert_eq!(p.post_list_for(1 << 20), 1);
        assert_eq!(all_sizes().first(), Some(&2));
        assert_eq!(all_sizes().last(), Some(&(8 << 20)));
    }

    #[test]
    fn summary_numbers() {
        // 1000 writes of 1 MB (decimal) in 1 s: 1000 MB/s, 8 Gb/s, 0.001 Mpps.
        let marks = (1..=10).map(|i| (i * 100_000_000, i * 100)).collect();
        let r = summarise(1_000_000, 1000, 100, &Timeline { marks });
        assert!((r.mb_per_s - 1000.0).abs() < 1e-6);
        assert!((r.peak_mb_per_s - 1000.0).abs() < 1e-6);
        assert_eq!(r.peak_window, 200);
        let s = SizeResult::new(1_000_000, 1000, vec![r], None);
        let st = s.stats.unwrap();
        assert!((st.median_gbps - 8.0).abs() < 1e-9);
        assert!((st.median_msg_rate_mpps - 0.001).abs() < 1e-12);
    }

    /// A size is judged on the median of its repetitions, and every sample is kept.
    #[test]
    fn per_size_samples() {
        let rep = |mb| Repetition {
            elapsed_ns: 1,
            mb_per_s: mb,
            peak_mb_per_s: mb * 1.1,
            peak_window: 1,
        };
        let s = SizeResult::new(
            1 << 20,
            500,
            [24_000.0, 10_000.0, 23_000.0, 24_500.0, 23_500.0]
                .map(rep)
                .to_vec(),
            Some(true),
        );
        let st = s.stats.as_ref().unwrap();
        assert_eq!(
            (st.n, st.median_mb_per_s, st.min_mb_per_s, st.max_mb_per_s),
            (5, 23_500.0, 10_000.0, 24_500.0)
        );
        assert_eq!(s.rate_gbps(), Some(188.0));
        assert_eq!(s.samples.len(), 5);
        assert!((s.peak_mb_per_s - 24_500.0 * 1.1).abs() < 1e-6);
        // One slow repetition does not fail a 200 Gb/s port (180 Gb/s bar); its median would.
        let hdr = LineRate {
            gbps: 200.0,
            source: "4X HDR".into(),
        };
        let mut rs = vec![s];
        size_verdicts(&mut rs, Some(&threshold(None, Ok(&hdr))), false);
        assert_eq!(rs[0].verdict, Verdict::Pass);
        let json = serde_json::to_value(&rs[0]).unwrap();
        assert_eq!(json["stats"]["n"], 5);
        assert_eq!(json["samples"][1]["mb_per_s"], 10_000.0);
        assert!(SizeResult::new(64, 1, Vec::new(), None).stats.is_none());
        assert_eq!(
            Plan::new(PlanSpec {
                sizes: vec![64],
                iterations: 10,
                cq_moderation: 100,
                validate: false,
                ..PlanSpec::check()
            })
            .unwrap()
            .with_repetitions(0),
            Err(PlanError::Repetitions)
        );
    }

    #[test]
    fn peak_ignores_bunched_completions() {
        // Two completions 1 ns apart must not make a huge peak: the window is >= 1/8 of the run.
        let marks = vec![(500, 50), (501, 100), (1000, 150), (1500, 200)];
        let r = summarise(1000, 200, 50, &Timeline { marks });
        // 50 writes 1 ns apart would be a 50000x peak; over >= 100 writes it stays near average.
        assert_eq!(r.peak_window, 100);
        assert!(r.peak_mb_per_s <= 2.0 * r.mb_per_s, "{r:?}");
        assert!(r.peak_mb_per_s >= r.mb_per_s);
    }

    fn mk(bytes: u64, gbps: f64, validated: Option<bool>) -> SizeResult {
        let rep = Repetition {
            elapsed_ns: 1,
            mb_per_s: gbps * 1e3 / 8.0,
            peak_mb_per_s: gbps * 1e3 / 8.0,
            peak_window: 1,
        };
        SizeResult::new(bytes, 1, vec![rep], validated)
    }

    fn hdr() -> LineRate {
        LineRate {
            gbps: 200.0,
            source: "4X HDR".into(),
        }
    }

    #[test]
    fn verdicts() {
        let t = threshold(None, Ok(&hdr()));
        let mut rs = vec![
            mk(64, 1.0, None),
            mk(65536, 185.0, None),
            mk(1 << 20, 170.0, None),
        ];
        size_verdicts(&mut rs, Some(&t), false);
        // Not validated: the judged sizes below the bar fail, those above are unknown.
        assert_eq!(
            rs.iter().map(|r| r.verdict).collect::<Vec<_>>(),
            vec![Verdict::Unknown, Verdict::Unknown, Verdict::Fail]
        );
        for r in &mut rs {
            r.validated = Some(true);
        }
        size_verdicts(&mut rs, Some(&t), false);
        assert_eq!(
            rs.iter().map(|r| r.verdict).collect::<Vec<_>>(),
            vec![Verdict::Unknown, Verdict::Pass, Verdict::Fail]
        );
        let soft = threshold(Some("no PCI function"), Err("x"));
        let mut rs = vec![mk(1 << 20, 0.4, Some(true))];
        size_verdicts(&mut rs, Some(&soft), true);
        assert_eq!(rs[0].verdict, Verdict::Skip);
        rs[0].validated = Some(false);
        size_verdicts(&mut rs, Some(&soft), true);
        assert_eq!(rs[0].verdict, Verdict::Fail);
    }

    /// The run-level judge over report facts (levels 2 and 3): unknown rate, software device,
    /// small messages only, unvalidated data and an incomplete run are never a pass.
    #[test]
    fn run_judge() {
        use crate::findings::Judgement as J;
        let plan = Plan::new(PlanSpec {
            iterations: 10,
            ..PlanSpec::check()
        })
        .unwrap();
        let run = |t: Option<Threshold>, results: Vec<SizeResult>, software: bool| {
            let mut r = WriteBwReport::new(Mode::Loopback, plan.clone());
            r.threshold = t;
            r.results = results;
            let v = RunView {
                software,
                ..r.view()
            };
            judge_run(&v)
        };
        let good = || vec![mk(65536, 190.0, Some(true)), mk(1 << 20, 195.0, Some(true))];
        let rate = || Some(threshold(None, Ok(&hdr())));
        assert_eq!(run(rate(), good(), false).status, J::Pass);
        let slow = vec![mk(65536, 190.0, Some(true)), mk(1 << 20, 100.0, Some(true))];
        let j = run(rate(), slow, false);
        assert_eq!(j.status, J::Fail);
        assert!(
            j.reason.contains("1048576 B: median 100.00 Gb/s (n 1"),
            "{}",
            j.reason
        );
        let unknown = Some(threshold(
            None,
            Err("ibv_query_port says 4X HDR, sysfs 100 Gb/s"),
        ));
        let j = run(unknown, good(), false);
        assert_eq!(j.status, J::Unknown);
        assert!(j.reason.starts_with("line rate unknown: "), "{}", j.reason);
        let soft = Some(threshold(Some("no PCI function"), Err("x")));
        let j = run(soft.clone(), good(), true);
        assert_eq!(
            (j.status, j.reason.as_str()),
            (J::NotApplicable, SOFTWARE_NOT_JUDGED)
        );
        let bad = vec![mk(65536, 0.4, Some(false)), mk(1 << 20, 0.4, Some(true))];
        let j = run(soft, bad, true);
        assert_eq!(j.status, J::Fail);
        assert!(j.reason.contains("did not match: 65536 B"), "{}", j.reason);
        // Only small messages: the threshold applied to none.
        let j = run(
            rate(),
            vec![mk(64, 1.0, Some(true)), mk(4096, 9.0, Some(true))],
            false,
        );
        assert_eq!(j.status, J::Unknown);
        // Not validated, or fewer sizes than planned.
        let nv = vec![mk(65536, 190.0, None), mk(1 << 20, 195.0, None)];
        assert_eq!(run(rate(), nv, false).status, J::Unknown);
        assert_eq!(run(rate(), Vec::new(), false).status, J::Unknown);
        // Broke off: a failure; could not run: unknown.
        let mut r = WriteBwReport::new(Mode::Loopback, plan.clone());
        r.status = Status::Error {
            reason: "completion error".into(),
        };
        assert_eq!(judge_run(&r.view()).status, J::Fail);
        r.status = Status::Skipped {
            reason: "no libibverbs".into(),
        };
        assert_eq!(judge_run(&r.view()).status, J::Unknown);
        // Server side: facts of the client's writes; the bandwidth is the client's to judge.
        let mut s = WriteBwReport::new(Mode::Server, plan);
        s.served = Some(Served {
            peer: "10.0.0.1".into(),
            sizes: 2,
            validated: 2,
            mismatched: Vec::new(),
        });
        assert_eq!(judge_run(&s.view()).status, J::NotApplicable);
        if let Some(x) = s.served.as_mut() {
            x.mismatched
                .push("4096 B (first difference at offset 0)".into());
        }
        assert_eq!(judge_run(&s.view()).status, J::Fail);
    }
}
