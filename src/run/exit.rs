//! The exit code of every command, decided here and only here, from what the command's report
//! says (ripgrep's convention): 0 the machine passed, or the command only informs; 1 the
//! machine failed (a check, a gate, a probe, a node to drain, a node worse than before); 2
//! gpudoctor itself could not do the job, or was interrupted.
//!
//! Pure functions of a report's verdict: nothing here reads, prints or ends the process.

use crate::findings::{Status, Verdict};
use crate::rdma::engine::error::ErrorClass;

pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED_CHECK: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// `check`: the gate (`--strict`, `--fail-on-skip`) has already made the report's verdict,
/// so the code is the verdict's and nothing else.
pub fn check(r: &crate::report::CheckReport) -> i32 {
    match r.status {
        Status::Fail => EXIT_FAILED_CHECK,
        _ => EXIT_OK,
    }
}

/// `check --report-only`: exit 0 whatever the verdict, which the report keeps as the code it
/// would have exited with (gpudoctor's own failure never reaches here: it still exits 2).
pub fn report_only(verdict_code: i32) -> (i32, Option<i32>) {
    (EXIT_OK, Some(verdict_code))
}

/// A probe's or NCCL run's verdict: fail is 1; with `--fail-on-skip`, so is anything that was
/// not judged (a skip, or unknown: never a pass); interrupted is 2.
pub fn probe(verdict: Verdict, interrupted: bool, fail_on_skip: bool) -> i32 {
    if interrupted {
        EXIT_ERROR
    } else if verdict == Verdict::Fail
        || (fail_on_skip && matches!(verdict, Verdict::Skip | Verdict::Unknown))
    {
        EXIT_FAILED_CHECK
    } else {
        EXIT_OK
    }
}

/// A rank other than 0 of `probe nccl --ranks`, from the verdict rank 0 sent it (`pass`,
/// `warn`, `skip`, `unknown`, `fail`, or `error`: rank 0 could not run).
pub fn nccl_rank(status: &str, fail_on_skip: bool) -> i32 {
    match status {
        "error" => EXIT_ERROR,
        "fail" => EXIT_FAILED_CHECK,
        "skip" | "unknown" if fail_on_skip => EXIT_FAILED_CHECK,
        _ => EXIT_OK,
    }
}

/// Several write-bw runs (one per GPU): SIGINT/SIGTERM 2; a machine failure, or a skip under
/// `--fail-on-skip`, 1; else 0.
pub fn write_bw_runs(classes: impl Iterator<Item = Option<ErrorClass>>, fail_on_skip: bool) -> i32 {
    let classes: Vec<_> = classes.collect();
    if classes.contains(&Some(ErrorClass::Interrupted)) {
        EXIT_ERROR
    } else if classes.contains(&Some(ErrorClass::Machine))
        || (fail_on_skip && classes.contains(&Some(ErrorClass::Skip)))
    {
        EXIT_FAILED_CHECK
    } else {
        EXIT_OK
    }
}

/// `fleet`: 1 when a node is to be drained.
pub fn fleet(r: &crate::report::fleet::FleetReport) -> i32 {
    if r.drain.is_empty() {
        EXIT_OK
    } else {
        EXIT_FAILED_CHECK
    }
}

/// `diff`: 1 when B is worse than A; a change for the better alone is no failure.
pub fn diff(d: &crate::report::fleet::DiffReport) -> i32 {
    if d.worse() {
        EXIT_FAILED_CHECK
    } else {
        EXIT_OK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_judged_fails_only_with_fail_on_skip() {
        for v in [Verdict::Skip, Verdict::Unknown] {
            assert_eq!(probe(v, false, false), EXIT_OK);
            assert_eq!(probe(v, false, true), EXIT_FAILED_CHECK);
        }
        assert_eq!(probe(Verdict::Warn, false, true), EXIT_OK);
        assert_eq!(probe(Verdict::Fail, false, false), EXIT_FAILED_CHECK);
        assert_eq!(probe(Verdict::Pass, true, false), EXIT_ERROR);
        assert_eq!(nccl_rank("unknown", true), EXIT_FAILED_CHECK);
        assert_eq!(nccl_rank("skip", false), EXIT_OK);
        assert_eq!(nccl_rank("error", false), EXIT_ERROR);
        assert_eq!(report_only(EXIT_FAILED_CHECK), (EXIT_OK, Some(1)));
    }
}
