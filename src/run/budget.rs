//! `check --time-budget SECONDS`: one deadline for the whole run. Discovery, the level-0
//! checks and each probe run under it; when it is spent, what was judged is kept and every
//! check of a step that did not finish is an unknown skip saying so and naming the step that
//! was running ("not judged: time budget of 45 s spent during discovery (reading
//! /sys/bus/pci/devices/0000:17:00.0/config: no answer)"). The gate then decides as always:
//! unknown is never a pass, `--fail-on-skip` fails the node.
//!
//! This module must not judge anything: it only keeps time and words what was cut.

use crate::checks::{self, Finding, Status};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A run's time budget, started when the run began.
#[derive(Debug)]
pub struct Budget {
    total: Duration,
    end: Instant,
    /// The step that was running when the budget ran out (the first one cut).
    spent_during: Mutex<Option<String>>,
    /// A probe's CUDA work was still running when the budget cut it: its thread cannot be
    /// joined, so the process must leave without exit handlers once the report is out.
    abandoned: std::sync::atomic::AtomicBool,
}

/// A step of a run, for the checks it would have judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Discovery: nothing was judged yet.
    Discovery,
    /// The level-0 checks (facts).
    Level0,
    /// A probe level (1-4).
    Level(u8),
    /// `--expect`: the baseline.* findings.
    Baseline,
}

impl Budget {
    pub fn start(total: Duration) -> Budget {
        Budget {
            total,
            end: Instant::now() + total,
            spent_during: Mutex::new(None),
            abandoned: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Note that work cut by the budget is still running on a thread (see `abandoned`).
    pub fn abandon(&self) {
        self.abandoned
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether work cut by the budget was left running.
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Time left (zero once spent).
    pub fn remaining(&self) -> Duration {
        self.end.saturating_duration_since(Instant::now())
    }

    /// `deadline`, or less: what is left of the budget.
    pub fn cap(&self, deadline: Duration) -> Duration {
        deadline.min(self.remaining())
    }

    /// Whether the budget is spent; if so and nothing was named yet, `step` was running.
    pub fn spent_at(&self, step: impl FnOnce() -> String) -> bool {
        if !self.remaining().is_zero() {
            return false;
        }
        self.cut(step());
        true
    }

    /// Record that the budget ran out while `step` was running (the first one named stays).
    pub fn cut(&self, step: String) {
        let mut s = match self.spent_during.lock() {
            Ok(s) => s,
            Err(p) => p.into_inner(),
        };
        if s.is_none() {
            *s = Some(step);
        }
    }

    /// The step that was running when the budget ran out; None while it is not spent.
    pub fn spent_during(&self) -> Option<String> {
        match self.spent_during.lock() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    pub fn seconds(&self) -> f64 {
        self.total.as_secs_f64()
    }

    /// "not judged: time budget of 45 s spent during discovery (...)".
    pub fn reason(&self) -> String {
        format!(
            "not judged: time budget of {} s spent during {}",
            self.seconds(),
            self.spent_during()
                .unwrap_or_else(|| "an earlier step".to_string())
        )
    }

    /// One unknown skip per check of `step` (and of `level` for probe levels) that has no
    /// finding in `findings`: the checks the cut step would have judged.
    pub fn unjudged(&self, step: Step, level: u8, findings: &mut Vec<Finding>) {
        let reason = self.reason();
        for c in checks::CATALOG {
            let of_step = match (step, c.run) {
                (Step::Discovery, checks::Run::Baseline) => false,
                // Judged from the silences given, after every step, whatever was cut.
                (_, checks::Run::Silence) => false,
                (Step::Discovery, _) => c.level <= level,
                (Step::Level0, checks::Run::Facts(_)) => true,
                (Step::Level(n), checks::Run::Probe) => c.level == n,
                (Step::Baseline, checks::Run::Baseline) => true,
                _ => false,
            };
            if of_step && !findings.iter().any(|f| f.id == c.id) {
                findings.push(Finding::new(c.id, "host", Status::Skip, reason.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::CheckId;

    #[test]
    fn a_spent_budget_names_the_first_step_cut() {
        let b = Budget::start(Duration::ZERO);
        assert!(b.spent_at(|| "discovery (reading /sys/x: no answer)".into()));
        assert!(b.spent_at(|| "probe.h2d".into()));
        assert_eq!(
            b.reason(),
            "not judged: time budget of 0 s spent during discovery (reading /sys/x: no answer)"
        );
        let long = Budget::start(Duration::from_secs(3600));
        assert!(!long.spent_at(|| "never".into()));
        assert_eq!(long.spent_during(), None);
        assert!(long.cap(Duration::from_secs(60)) == Duration::from_secs(60));
    }

    #[test]
    fn unjudged_fills_only_the_cut_step_and_keeps_what_was_judged() {
        let b = Budget::start(Duration::ZERO);
        b.cut("the level-0 checks".into());
        let kept = Finding::new(CheckId::PcieAcsRedirect, "0000:00:01.0", Status::Pass, "ok");
        let mut f = vec![kept.clone()];
        b.unjudged(Step::Level0, 0, &mut f);
        assert_eq!(f[0], kept, "what was judged is kept");
        assert!(
            f.iter()
                .filter(|x| x.id == CheckId::PcieAcsRedirect)
                .count()
                == 1
        );
        let facts = checks::CATALOG
            .iter()
            .filter(|c| matches!(c.run, checks::Run::Facts(_)))
            .count();
        assert_eq!(f.len(), facts);
        assert!(f[1..].iter().all(|x| {
            x.status == Status::Skip
                && x.skip == Some(checks::SkipKind::Unknown)
                && x.message
                    .starts_with("not judged: time budget of 0 s spent during the level-0")
        }));
        // No probe and no baseline check at level 0.
        assert!(f.iter().all(|x| {
            checks::CATALOG
                .iter()
                .any(|c| c.id == x.id && matches!(c.run, checks::Run::Facts(_)))
        }));
    }
}
