//! Loopback write-bw: both sides on this host, connected to each other, every size written
//! `plan.repetitions` times by the poster and validated. No printing but through `progress`.

use super::error::ProbeError;
use super::error::stop_if_interrupted;
use super::memory::Sides;
use super::pattern::seed_for;
use super::poster::Poster;
use super::side::{self, Endpoint, Side};
use crate::inventory::RdmaDevice;
use crate::rdma::judge::write_bw::threshold_for;
use crate::rdma::progress;
use crate::rdma::request::write_bw::WriteBwRequest;
use crate::report::rdma::write_bw::{MemorySides, SizeResult, WriteBwReport};

pub fn loopback(
    facts: &[RdmaDevice],
    req: &WriteBwRequest,
    mem: &Sides,
    report: &mut WriteBwReport,
    poster: &mut dyn Poster,
) -> Result<(), ProbeError> {
    let verbs = side::load()?;
    let len = poster.buffer_len(req.plan.max_size());
    let devx_open = poster
        .source_devx()
        .map(|dv| side::open_for(&verbs, facts, req, &mem.source, len, Some(dv)));
    let mut a = match devx_open {
        Some(Ok(side)) => side,
        Some(Err(e)) => {
            poster.devx_refused(e.to_string());
            side::open_for(&verbs, facts, req, &mem.source, len, None)?
        }
        None => side::open_for(&verbs, facts, req, &mem.source, len, None)?,
    };
    let mut b = side::open_for(&verbs, facts, req, &mem.target, len, None)?;
    report.memory = Some(MemorySides {
        source: Some(a.memory().clone()),
        target: Some(b.memory().clone()),
    });
    // Whatever the poster set up on the sides goes (finish) before they do, error or not.
    let res = loopback_connected(req, &mut a, &mut b, report, poster);
    poster.finish();
    res
}

fn loopback_connected(
    req: &WriteBwRequest,
    a: &mut Side,
    b: &mut Side,
    report: &mut WriteBwReport,
    poster: &mut dyn Poster,
) -> Result<(), ProbeError> {
    let b_ep = b.endpoint();
    let a_ep = match poster.own_source_qp(a, &b_ep)? {
        Some(ep) => ep,
        None => {
            a.connect(&b_ep)?;
            a.endpoint()
        }
    };
    b.connect(&a_ep)?;
    report.threshold = Some(threshold_for(&a.facts));
    report.local = Some(a.facts.clone());
    poster.prepare(a)?;
    loopback_sizes(req, a, b, &b_ep, report, poster)
}

fn loopback_sizes(
    req: &WriteBwRequest,
    a: &mut Side,
    b: &mut Side,
    b_ep: &Endpoint,
    report: &mut WriteBwReport,
    poster: &mut dyn Poster,
) -> Result<(), ProbeError> {
    for (i, &size) in req.plan.sizes.iter().enumerate() {
        progress::show_progress(req, i, size);
        let seed = seed_for(size);
        // What the writes of this size cover (level 4: one message per thread, side by side).
        let span = poster.buffer_len(size);
        if req.plan.validate {
            a.fill(span, seed)?;
        }
        let mut reps = Vec::new();
        let mut validated = req.plan.validate.then_some(true);
        for _ in 0..req.plan.repetitions {
            stop_if_interrupted()?;
            // Every repetition writes into zeroes and is checked: a later one cannot hide an
            // earlier one's damage.
            if req.plan.validate {
                b.zero(span)?;
            }
            reps.push(poster.write_size(a, b_ep, req, size)?);
            if req.plan.validate && b.check(span, seed)?.is_some() {
                validated = Some(false);
            }
        }
        report.results.push(SizeResult::new(
            size,
            poster.iterations(req),
            reps,
            validated,
        ));
    }
    Ok(())
}
