//! The one write-bw engine's entry points: `measure`/`measure_with` run a request with the
//! buffers in the given memory and the given poster (the CPU for levels 2 and 3, a CUDA kernel
//! for level 4), `conclude` folds the stop into the report and judges it. The loops live in
//! `loopback` and `two_node`; this module must not print (`super::super::progress` does).

use super::error::{ErrorClass, ProbeError};
use super::loopback::loopback;
use super::memory::Sides;
use super::poster::{CpuPoster, Poster};
use super::two_node::{client, serve};
use crate::inventory::RdmaDevice;
use crate::rdma::progress;
use crate::rdma::request::write_bw::{Role, WriteBwRequest};
use crate::report::rdma::write_bw::{Mode, Status, WriteBwReport};

/// Run the probe (level 2: host memory on both sides). The report always comes back (with a
/// skipped/error status where it stopped); the class says what the stop means for the exit code.
pub fn write_bw(facts: &[RdmaDevice], req: &WriteBwRequest) -> (WriteBwReport, Option<ErrorClass>) {
    let (report, res) = measure(facts, req, &Sides::host());
    conclude(report, &res)
}

/// Run the probe with buffers in `mem`: the measurements, and the error that stopped it (not
/// yet folded into the report's status: `conclude` does that, after the caller had a look).
pub fn measure(
    facts: &[RdmaDevice],
    req: &WriteBwRequest,
    mem: &Sides,
) -> (WriteBwReport, Result<(), ProbeError>) {
    measure_with(facts, req, mem, &mut CpuPoster)
}

/// `measure` with another poster (loopback only: level 4's kernel posts on a local QP).
pub fn measure_with(
    facts: &[RdmaDevice],
    req: &WriteBwRequest,
    mem: &Sides,
    poster: &mut dyn Poster,
) -> (WriteBwReport, Result<(), ProbeError>) {
    let mode = match req.role {
        Role::Loopback => Mode::Loopback,
        Role::Serve { .. } => Mode::Server,
        Role::Client { .. } => Mode::Client,
    };
    crate::signals::install();
    let mut report = WriteBwReport::new(mode, req.plan.clone());
    let res = match &req.role {
        Role::Loopback => loopback(facts, req, mem, &mut report, poster),
        Role::Serve { listen, token } => serve(facts, req, mem, listen, token, &mut report),
        Role::Client { peer, token } => client(facts, req, mem, peer, token, &mut report),
    };
    progress::clear_progress(req);
    (report, res)
}

/// Fold the stop (if any) into the report's status, judge the run (`crate::rdma::judge::write_bw::judge_run`),
/// and say what that means for the exit code.
pub fn conclude(
    mut report: WriteBwReport,
    res: &Result<(), ProbeError>,
) -> (WriteBwReport, Option<ErrorClass>) {
    match res {
        Ok(()) => {
            report.conclude();
            // What the judge's word means for the exit code: a failure is the machine's; an
            // unknown is a skip (exit 1 with --fail-on-skip); pass or not applicable is none.
            use crate::findings::Judgement;
            let class = match report.judgement.as_ref().map(|j| j.status) {
                Some(Judgement::Fail | Judgement::Warn) => Some(ErrorClass::Machine),
                Some(Judgement::Unknown) | None => Some(ErrorClass::Skip),
                Some(Judgement::Pass | Judgement::NotApplicable) => None,
            };
            (report, class)
        }
        Err(e) => {
            let class = e.class();
            let reason = e.to_string();
            report.status = match class {
                ErrorClass::Skip => Status::Skipped { reason },
                _ => Status::Error { reason },
            };
            report.conclude();
            (report, Some(class))
        }
    }
}
