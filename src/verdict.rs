//! One vocabulary for what a measurement or a check concluded.
//!
//! `Verdict` is what a probe (the CUDA copies, each write-bw message size, a whole write-bw run)
//! concludes: pass, warn, fail, skip (on purpose, with a reason) or unknown (measured or tried,
//! but nothing to judge it against: never a pass). A check finding uses the same words; its
//! `unknown` is a skip whose `SkipKind` says why (`checks::SkipKind::Unknown`), because a finding
//! always carries the reason it could not be judged. `Verdict::finding` is the one mapping from
//! the first to the second; the severity order (pass < skip < warn < unknown < fail) is the
//! order in which a worse verdict wins.

use crate::checks::{SkipKind, Status};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Pass,
    /// Skipped on purpose (no CUDA, nothing to measure), with the reason.
    Skip,
    /// Below the bar where the bar is advisory (SM-kernel variants).
    Warn,
    /// Could not be judged (no expected rate, no samples, a small message or a software
    /// device): never a pass.
    Unknown,
    Fail,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Skip => "skip",
            Verdict::Warn => "warn",
            Verdict::Unknown => "unknown",
            Verdict::Fail => "fail",
        }
    }

    /// Every verdict, in severity order (metrics export a state set over them).
    pub const ALL: [Verdict; 5] = [
        Verdict::Pass,
        Verdict::Skip,
        Verdict::Warn,
        Verdict::Unknown,
        Verdict::Fail,
    ];

    /// The status of a check finding that reports this verdict, and the skip kind where it is
    /// not judged (`Unknown` is a skip that could not be judged; `Skip` is one by the probe's
    /// own account, which the caller may narrow, e.g. to not-applicable).
    pub fn finding(self) -> (Status, Option<SkipKind>) {
        match self {
            Verdict::Pass => (Status::Pass, None),
            Verdict::Warn => (Status::Warn, None),
            Verdict::Fail => (Status::Fail, None),
            Verdict::Skip => (Status::Skip, Some(SkipKind::Unknown)),
            Verdict::Unknown => (Status::Skip, Some(SkipKind::Unknown)),
        }
    }
}

/// What a judged run concluded: a verdict, or "not judged on purpose" (a software RDMA
/// device, a path NCCL would not use), which no verdict word covers. The output of `judge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Judgement {
    Pass,
    /// Measured on purpose without a verdict (software RDMA, beyond NCCL's GPUDirect level).
    NotApplicable,
    Warn,
    /// Could not be judged: never a pass.
    Unknown,
    Fail,
}

impl Judgement {
    pub fn as_str(self) -> &'static str {
        match self {
            Judgement::Pass => "pass",
            Judgement::NotApplicable => "not-applicable",
            Judgement::Warn => "warn",
            Judgement::Unknown => "unknown",
            Judgement::Fail => "fail",
        }
    }

    /// The verdict word (not-applicable is a skip on purpose).
    pub fn verdict(self) -> Verdict {
        match self {
            Judgement::Pass => Verdict::Pass,
            Judgement::NotApplicable => Verdict::Skip,
            Judgement::Warn => Verdict::Warn,
            Judgement::Unknown => Verdict::Unknown,
            Judgement::Fail => Verdict::Fail,
        }
    }

    /// The status of a check finding that reports this judgement.
    pub fn finding(self) -> (Status, Option<SkipKind>) {
        match self {
            Judgement::NotApplicable => (Status::Skip, Some(SkipKind::NotApplicable)),
            other => other.verdict().finding(),
        }
    }
}

/// How a run's data was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Data {
    /// Every size's written bytes were read back and matched.
    Validated,
    /// Some size's bytes did not match: a failure whatever else holds.
    Mismatch,
    /// Some size was not checked (or nothing was measured): a pass cannot rest on it.
    NotChecked,
    /// The method carries no data check (level 1's copies are judged on bandwidth alone).
    NotPart,
}

/// How the run measured up to its bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bar {
    /// A threshold applied and every judged reading reached it.
    Met,
    /// A threshold applied and a judged reading fell short.
    Below,
    /// No threshold could be set (rate unknown, rates disagree, no samples): never a pass.
    Unknown,
    /// No threshold on purpose (a path NCCL would not use): measured, not judged.
    NotApplicable,
}

/// What a verdict rests on: facts of one run, no verdict in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFacts {
    /// The run finished every planned step (no error, deadline or interruption).
    pub completed: bool,
    pub data: Data,
    pub bar: Bar,
    /// A software RDMA device (rxe, siw): the CPU sets its rate, so it is measured, not judged.
    pub software: bool,
}

/// A shortfall's weight for the method at hand; it cannot say pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shortfall {
    Warn,
    Unknown,
    Fail,
}

impl From<Shortfall> for Judgement {
    fn from(s: Shortfall) -> Judgement {
        match s {
            Shortfall::Warn => Judgement::Warn,
            Shortfall::Unknown => Judgement::Unknown,
            Shortfall::Fail => Judgement::Fail,
        }
    }
}

/// What a run that broke off, or fell below its bar, weighs for one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weights {
    pub broken: Shortfall,
    pub below: Shortfall,
}

impl Weights {
    /// Write-bw (levels 2-4) and level 1's copy engine: either is a failure.
    pub const STRICT: Weights = Weights {
        broken: Shortfall::Fail,
        below: Shortfall::Fail,
    };
}

/// The one judge of a measured run (levels 1-4): pass only when the run completed, its data
/// was validated (or the method has no data check), a threshold applied and was met. Anything
/// else is a failure, a warning, unknown, or not applicable, never a pass:
///
/// 1. broke off: `w.broken`;
/// 2. data mismatch: fail (even where nothing else is judged);
/// 3. software RDMA device: not applicable (measured, not judged);
/// 4. no threshold on purpose: not applicable; no threshold known: unknown;
/// 5. below the threshold: `w.below`;
/// 6. data not checked: unknown;
/// 7. otherwise pass.
pub fn judge(f: &RunFacts, w: Weights) -> Judgement {
    if !f.completed {
        return w.broken.into();
    }
    if f.data == Data::Mismatch {
        return Judgement::Fail;
    }
    if f.software {
        return Judgement::NotApplicable;
    }
    match f.bar {
        Bar::NotApplicable => Judgement::NotApplicable,
        Bar::Unknown => Judgement::Unknown,
        Bar::Below => w.below.into(),
        Bar::Met if f.data == Data::NotChecked => Judgement::Unknown,
        Bar::Met => Judgement::Pass,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_is_never_a_pass_and_worse_wins() {
        for v in Verdict::ALL {
            let (s, k) = v.finding();
            assert_eq!(s == Status::Pass, v == Verdict::Pass, "{v:?}");
            assert_eq!(k.is_some(), s == Status::Skip, "{v:?}");
        }
        assert!(Verdict::Unknown > Verdict::Warn && Verdict::Fail > Verdict::Unknown);
        assert_eq!(
            serde_json::to_string(&Verdict::ALL).unwrap(),
            r#"["pass","skip","warn","unknown","fail"]"#
        );
    }
    /// The judge, table-driven: every combination of completed / data / bar / software device
    /// (2 x 4 x 4 x 2), each against the rule written out once more here. Unknown is never a
    /// pass: the only pass is completed + validated (or no data check) + met + hardware.
    #[test]
    fn judge_table() {
        use Bar as B;
        use Data as D;
        use Judgement as J;
        let w = Weights::STRICT;
        let soft = Weights {
            broken: Shortfall::Unknown,
            below: Shortfall::Warn,
        };
        // (completed, data, bar, software) -> under STRICT, and under the soft weights.
        let rows: &[(bool, D, B, bool, J, J)] = &[
            (true, D::Validated, B::Met, false, J::Pass, J::Pass),
            (true, D::NotPart, B::Met, false, J::Pass, J::Pass),
            (true, D::NotChecked, B::Met, false, J::Unknown, J::Unknown),
            (true, D::Mismatch, B::Met, false, J::Fail, J::Fail),
            (true, D::Validated, B::Below, false, J::Fail, J::Warn),
            (true, D::NotChecked, B::Below, false, J::Fail, J::Warn),
            (
                true,
                D::Validated,
                B::Unknown,
                false,
                J::Unknown,
                J::Unknown,
            ),
            (true, D::NotPart, B::Unknown, false, J::Unknown, J::Unknown),
            (
                true,
                D::Validated,
                B::NotApplicable,
                false,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (true, D::Mismatch, B::NotApplicable, false, J::Fail, J::Fail),
            (
                true,
                D::Validated,
                B::Met,
                true,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (
                true,
                D::Validated,
                B::Unknown,
                true,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (
                true,
                D::NotChecked,
                B::Unknown,
                true,
                J::NotApplicable,
                J::NotApplicable,
            ),
            (true, D::Mismatch, B::Unknown, true, J::Fail, J::Fail),
            (false, D::Validated, B::Met, false, J::Fail, J::Unknown),
            (false, D::Validated, B::Met, true, J::Fail, J::Unknown),
            (false, D::NotChecked, B::Unknown, false, J::Fail, J::Unknown),
        ];
        for &(completed, data, bar, software, strict, weak) in rows {
            let f = RunFacts {
                completed,
                data,
                bar,
                software,
            };
            assert_eq!(judge(&f, w), strict, "{f:?}");
            assert_eq!(judge(&f, soft), weak, "{f:?} (soft weights)");
        }
        // Every combination: a pass exactly where the rule allows one, whatever the weights.
        let datas = [D::Validated, D::Mismatch, D::NotChecked, D::NotPart];
        let bars = [B::Met, B::Below, B::Unknown, B::NotApplicable];
        let weights = [w, soft];
        let mut n = 0;
        for completed in [true, false] {
            for data in datas {
                for bar in bars {
                    for software in [true, false] {
                        let f = RunFacts {
                            completed,
                            data,
                            bar,
                            software,
                        };
                        let may_pass = completed
                            && matches!(data, D::Validated | D::NotPart)
                            && bar == B::Met
                            && !software;
                        for w in weights {
                            let j = judge(&f, w);
                            assert_eq!(j == J::Pass, may_pass, "{f:?} {w:?} -> {j:?}");
                            if data == D::Mismatch {
                                assert!(!completed || j == J::Fail, "{f:?}");
                            }
                            if completed && software && data != D::Mismatch {
                                assert_eq!(j, J::NotApplicable, "{f:?}");
                            }
                            // A finding reporting it is a pass only when the judge passed.
                            assert_eq!(j.finding().0 == Status::Pass, j == J::Pass);
                        }
                        n += 1;
                    }
                }
            }
        }
        assert_eq!(n, 64);
        assert_eq!(
            J::NotApplicable.finding(),
            (Status::Skip, Some(SkipKind::NotApplicable))
        );
        assert_eq!(
            J::Unknown.finding(),
            (Status::Skip, Some(SkipKind::Unknown))
        );
    }
}
