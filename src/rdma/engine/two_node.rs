//! Two-node write-bw: the `--peer` client and the `--serve` side, their steps framed over the
//! out-of-band channel (`oob`: framing and handshake). No printing but through `progress`.

use super::error::ProbeError;
use super::error::stop_if_interrupted;
use super::memory::Sides;
use super::oob::{self, Channel, Msg, OobError};
use super::pattern::seed_for;
use super::poster::measure_one;
use super::side;
use crate::inventory::RdmaDevice;
use crate::rdma::engine::memory::Memory;
use crate::rdma::judge::write_bw::threshold_for;
use crate::rdma::progress;
use crate::rdma::request::write_bw::WriteBwRequest;
use crate::report::rdma::plan::{MAX_MESSAGE_BYTES, Plan};
use crate::report::rdma::write_bw::{MemorySides, Served, SizeResult, WriteBwReport};
use std::time::Duration;

fn peer_err(peer: &str) -> impl Fn(OobError) -> ProbeError + '_ {
    move |e| ProbeError::Peer {
        peer: peer.to_string(),
        reason: e.to_string(),
    }
}

/// A generous deadline for one size's writes as seen from the server: the step timeout plus the
/// time the bytes take at 1 MB/s (far below any RDMA device, soft-RoCE under emulation included)
/// plus 10 us per write (message-rate bound small writes).
fn size_deadline(timeout: Duration, size: u64, iterations: u64) -> Duration {
    let us = size
        .saturating_add(10)
        .saturating_mul(iterations)
        .min(u64::MAX / 1000);
    timeout.saturating_add(Duration::from_micros(us))
}

pub fn client(
    facts: &[RdmaDevice],
    req: &WriteBwRequest,
    mem: &Sides,
    peer: &str,
    token: &str,
    report: &mut WriteBwReport,
) -> Result<(), ProbeError> {
    let verbs = crate::rdma::engine::side::load()?;
    let max = req.plan.max_size();
    let mut side = side::open_for(&verbs, facts, req, &mem.source, max, None)?;
    report.memory = Some(MemorySides {
        source: Some(side.memory().clone()),
        target: None,
    });
    let perr = peer_err(peer);
    let mut chan = Channel::connect(peer, req.timeout).map_err(&perr)?;
    let ours = oob::ClientParams {
        qps: req.plan.qps,
        max_size: max,
        endpoint: side.endpoint(),
        facts: side.facts.clone(),
    };
    let oob::ServerParams {
        endpoint: remote_ep,
        facts: remote_facts,
    } = oob::client_handshake(
        &mut chan,
        token,
        &ours,
        std::time::Instant::now() + req.timeout,
        req.timeout,
    )
    .map_err(&perr)?;
    side.connect(&remote_ep)?;
    report.threshold = Some(threshold_for(&side.facts));
    report.local = Some(side.facts.clone());
    report.remote = Some(remote_facts);
    let iterations = u64::from(req.plan.iterations / req.plan.qps * req.plan.qps);
    for (i, &size) in req.plan.sizes.iter().enumerate() {
        progress::show_progress(req, i, size);
        let seed = seed_for(size);
        if req.plan.validate {
            side.fill(size, seed)?;
        }
        let mut reps = Vec::new();
        let mut validated = req.plan.validate.then_some(true);
        for _ in 0..req.plan.repetitions {
            stop_if_interrupted()?;
            // The server zeroes its buffer on Prepare, and checks after each repetition.
            chan.send(&Msg::Prepare { size, iterations })
                .map_err(&perr)?;
            expect(&mut chan, "prepared", req.timeout, |m| {
                matches!(m, Msg::Prepared)
            })
            .map_err(&perr)?;
            reps.push(measure_one(&side, &remote_ep, req, size)?);
            if req.plan.validate {
                chan.send(&Msg::Check { size, seed }).map_err(&perr)?;
                match chan.recv("the peer's check", req.timeout).map_err(&perr)? {
                    Msg::Checked { first_mismatch } => {
                        if first_mismatch.is_some() {
                            validated = Some(false);
                        }
                    }
                    other => {
                        return Err(perr(OobError::Unexpected {
                            want: "checked",
                            got: format!("{other:?}"),
                        }));
                    }
                }
            }
        }
        report
            .results
            .push(SizeResult::new(size, iterations, reps, validated));
    }
    chan.send(&Msg::Bye).map_err(&perr)?;
    Ok(())
}

fn expect(
    chan: &mut Channel,
    want: &'static str,
    timeout: Duration,
    ok: impl Fn(&Msg) -> bool,
) -> Result<(), OobError> {
    let m = chan.recv(want, timeout)?;
    if ok(&m) {
        Ok(())
    } else if let Msg::Refused { reason } = m {
        Err(OobError::Refused(reason))
    } else {
        Err(OobError::Unexpected {
            want,
            got: format!("{m:?}"),
        })
    }
}

pub fn serve(
    facts: &[RdmaDevice],
    req: &WriteBwRequest,
    mem: &Sides,
    listen: &str,
    token: &str,
    report: &mut WriteBwReport,
) -> Result<(), ProbeError> {
    let verbs = crate::rdma::engine::side::load()?;
    // Check the port before waiting for anyone: a down port or bad GID fails at once.
    let probe = crate::rdma::engine::side::open_side(
        &verbs,
        facts,
        &req.device,
        req.port,
        req.gid_index,
        &req.plan,
        1,
        &Memory::Host,
        None,
    )?;
    report.local = Some(probe.facts.clone());
    drop(probe);
    let lerr = peer_err(listen);
    let mut chan = oob::accept_one(listen, req.timeout).map_err(&lerr)?;
    let peer = chan.peer.clone();
    let perr = peer_err(&peer);
    // One handshake per connection, all of it within --timeout of the accept: a client that
    // sends nothing, dribbles, or fails its proof ends this run with that error and its
    // connection closed (the listener is already closed: a stray client cannot queue behind).
    let verified = oob::server_handshake(
        &mut chan,
        token,
        std::time::Instant::now() + req.timeout,
        req.timeout,
    )
    .map_err(&perr)?;
    let oob::ClientParams {
        qps,
        max_size,
        endpoint: client_ep,
        facts: client_facts,
    } = verified.client.clone();
    if max_size > MAX_MESSAGE_BYTES || !(1..=64).contains(&qps) {
        let reason = format!("asks for {qps} QPs and {max_size} B messages (limits: 64, 1 GiB)");
        let _ = chan.send(&Msg::Refused {
            reason: reason.clone(),
        });
        return Err(perr(OobError::Refused(reason)));
    }
    let plan = Plan {
        qps,
        ..req.plan.clone()
    };
    let mut side = crate::rdma::engine::side::open_side(
        &verbs,
        facts,
        &req.device,
        req.port,
        req.gid_index,
        &plan,
        max_size,
        &mem.target,
        None,
    )?;
    report.memory = Some(MemorySides {
        source: None,
        target: Some(side.memory().clone()),
    });
    side.connect(&client_ep)?;
    oob::server_welcome(
        &mut chan,
        token,
        &verified,
        &oob::ServerParams {
            endpoint: side.endpoint(),
            facts: side.facts.clone(),
        },
    )
    .map_err(&perr)?;
    report.remote = Some(client_facts);
    let mut wait = req.timeout;
    // Distinct sizes: the client repeats each (Prepare, writes, Check) per timed repetition.
    let (mut sizes, mut checked, mut bad) = (
        std::collections::BTreeSet::new(),
        std::collections::BTreeSet::new(),
        std::collections::BTreeMap::new(),
    );
    let mut runs = 0u32;
    loop {
        stop_if_interrupted()?;
        match chan.recv("the client's next step", wait).map_err(&perr)? {
            Msg::Prepare { size, iterations } => {
                side.zero(size)?;
                chan.send(&Msg::Prepared).map_err(&perr)?;
                sizes.insert(size);
                runs += 1;
                wait = size_deadline(req.timeout, size, iterations);
            }
            Msg::Check { size, seed } => {
                let first_mismatch = side.check(size, seed)?;
                if let Some(off) = first_mismatch {
                    bad.entry(size)
                        .or_insert(format!("{size} B (first difference at offset {off})"));
                }
                checked.insert(size);
                chan.send(&Msg::Checked { first_mismatch }).map_err(&perr)?;
                wait = req.timeout;
            }
            Msg::Bye => break,
            other => {
                return Err(perr(OobError::Unexpected {
                    want: "prepare, check or bye",
                    got: format!("{other:?}"),
                }));
            }
        }
    }
    let bad: Vec<String> = bad.into_values().collect();
    let (sizes, checked) = (sizes.len() as u32, checked.len() as u32);
    report.notes.push(format!(
        "served {peer}: {sizes} size(s) written into {} port {} in {runs} timed run(s), {checked} validated{}",
        req.device,
        req.port,
        if bad.is_empty() {
            String::new()
        } else {
            format!(", mismatched: {}", bad.join(", "))
        }
    ));
    // Facts only: the judge (`conclude`) fails a mismatch.
    report.served = Some(Served {
        peer: peer.clone(),
        sizes,
        validated: checked,
        mismatched: bad,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_deadline_grows_with_the_work() {
        let t = Duration::from_secs(30);
        // 1 MiB x 1000 at 1 MB/s is ~1049 s, plus 10 us per write.
        assert_eq!(
            size_deadline(t, 1 << 20, 1000),
            t + Duration::from_micros(((1 << 20) + 10) * 1000)
        );
        assert_eq!(size_deadline(t, 64, 0), t);
        // Absurd requests saturate instead of overflowing.
        assert!(size_deadline(t, u64::MAX, u64::MAX) > t);
        assert_eq!(seed_for(64), seed_for(64));
        assert_ne!(seed_for(64), seed_for(128));
    }
}
