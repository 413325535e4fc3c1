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
}
