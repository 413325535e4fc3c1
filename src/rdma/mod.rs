//! Level-2 RDMA probes (plan -> measure -> evaluate) over the run-time-loaded verbs layer
//! (`crate::verbs`). write-bw: RDMA-write bandwidth over RC QPs, loopback on one device or
//! between two hosts. Each probe's result is a report model that `render` turns into text;
//! nothing here prints.

pub mod devx;
pub mod engine;
pub mod gdr;
pub mod gpu_poster;
pub mod level3;
pub mod level4;
pub mod memory;
pub mod mlx5;
pub mod mlx5_emu;
pub mod mlx5_kernel;
pub mod mlx5_prm;
pub mod oob;
pub mod path;
pub mod write_bw;

use crate::sysroot::SysRoot;
use engine::{ErrorClass, ProbeError, Side};
use memory::Memory;
use oob::{Channel, Msg, OobError};
use std::time::Duration;
use write_bw::{Mode, Plan, Status, WriteBwReport};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Loopback,
    /// Wait on `listen` for one `--peer` client presenting `token`.
    Serve {
        listen: String,
        token: String,
    },
    /// Write into the `--serve` side at `peer`.
    Client {
        peer: String,
        token: String,
    },
}

#[derive(Debug, Clone)]
pub struct WriteBwRequest {
    pub device: String,
    pub port: u8,
    pub gid_index: Option<u32>,
    pub plan: Plan,
    pub role: Role,
    /// Deadline for each step: TCP connect/accept/answer, and the wait for any completion.
    pub timeout: Duration,
    /// Draw a progress line on stderr (a person at a terminal; never with machine output).
    pub progress: bool,
}

/// The progress line for message size `i` of `n` (overwritten in place; cleared at the end).
fn show_progress(req: &WriteBwRequest, i: usize, size: u64) {
    if req.progress {
        use std::io::Write;
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[2Kwrite-bw {}/{}: {size} B messages ({}/{})",
            req.device,
            req.port,
            i + 1,
            req.plan.sizes.len()
        );
        let _ = e.flush();
    }
}

fn clear_progress(req: &WriteBwRequest) {
    if req.progress {
        use std::io::Write;
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K");
        let _ = e.flush();
    }
}

/// Where each side's buffer lives: the source is written from (loopback's first QP side, the
/// `--peer` client), the target written into (loopback's second side, the `--serve` side).
/// Level 2 is host memory on both; level 3 puts one or both in GPU memory.
#[derive(Clone)]
pub struct Sides {
    pub source: Memory,
    pub target: Memory,
}

impl Sides {
    pub fn host() -> Sides {
        Sides {
            source: Memory::Host,
            target: Memory::Host,
        }
    }
}

/// Run the probe (level 2: host memory on both sides). The report always comes back (with a
/// skipped/error status where it stopped); the class says what the stop means for the exit code.
pub fn write_bw(sr: &SysRoot, req: &WriteBwRequest) -> (WriteBwReport, Option<ErrorClass>) {
    let (report, res) = measure(sr, req, &Sides::host());
    conclude(report, &res)
}

/// Who posts the writes of one message size on the loopback's source side: the CPU through
/// ibv_post_send (levels 2 and 3, `CpuPoster`) or a CUDA kernel on the QP's own mlx5 queues
/// (level 4, `gpu_poster::GpuPoster`). Everything else (devices, QPs, buffers and their
/// registration, the connection, validation, the report) is the one engine's.
pub trait Poster {
    /// Bytes each side's buffer needs for `size`-byte messages.
    fn buffer_len(&self, size: u64) -> u64 {
        size
    }
    /// libmlx5, when the source side's context must be opened for DevX (level 4's queues in
    /// GPU memory); None for an ordinary context.
    fn source_devx(&mut self) -> Option<&crate::verbs::mlx5dv_sys::Mlx5Dv> {
        None
    }
    /// The DevX open of the source side failed with `why` and it was opened plainly.
    fn devx_refused(&mut self, _why: String) {}
    /// Before the sides connect: a poster that posts on a QP of its own creates and connects
    /// it to `peer` here and returns the endpoint the peer must connect to; None: the
    /// source side's own QP is used (connected by the engine).
    fn own_source_qp(
        &mut self,
        _source: &Side,
        _peer: &engine::Endpoint,
    ) -> Result<Option<engine::Endpoint>, ProbeError> {
        Ok(None)
    }
    /// Once, after both sides are connected and before the first size.
    fn prepare(&mut self, _source: &Side) -> Result<(), ProbeError> {
        Ok(())
    }
    /// Once, after the last size or the error that stopped the run, while both sides (their
    /// QPs, CQ and buffers) are still alive: undo what `prepare` set up on them.
    fn finish(&mut self) {}
    /// Post and complete every write of one timed repetition of one size from `source` into
    /// `peer` (the engine repeats it `plan.repetitions` times).
    fn write_size(
        &mut self,
        source: &Side,
        peer: &engine::Endpoint,
        req: &WriteBwRequest,
        size: u64,
    ) -> Result<write_bw::Repetition, ProbeError>;
    /// Writes per repetition of `size`, as the report states them.
    fn iterations(&self, req: &WriteBwRequest) -> u64 {
        u64::from(req.plan.iterations / req.plan.qps * req.plan.qps)
    }
}

/// The CPU posts (ibv_post_send with the plan's TX depth, CQ moderation and post lists).
pub struct CpuPoster;

impl Poster for CpuPoster {
    fn write_size(
        &mut self,
        source: &Side,
        peer: &engine::Endpoint,
        req: &WriteBwRequest,
        size: u64,
    ) -> Result<write_bw::Repetition, ProbeError> {
        measure_one(source, peer, req, size)
    }
}

/// Run the probe with buffers in `mem`: the measurements, and the error that stopped it (not
/// yet folded into the report's status: `conclude` does that, after the caller had a look).
pub fn measure(
    sr: &SysRoot,
    req: &WriteBwRequest,
    mem: &Sides,
) -> (WriteBwReport, Result<(), ProbeError>) {
    measure_with(sr, req, mem, &mut CpuPoster)
}

/// `measure` with another poster (loopback only: level 4's kernel posts on a local QP).
pub fn measure_with(
    sr: &SysRoot,
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
        Role::Loopback => loopback(sr, req, mem, &mut report, poster),
        Role::Serve { listen, token } => serve(sr, req, mem, listen, token, &mut report),
        Role::Client { peer, token } => client(sr, req, mem, peer, token, &mut report),
    };
    clear_progress(req);
    (report, res)
}

/// Fold the stop (if any) into the report's status, judge the run (`write_bw::judge_run`),
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

fn peer_err(peer: &str) -> impl Fn(OobError) -> ProbeError + '_ {
    move |e| ProbeError::Peer {
        peer: peer.to_string(),
        reason: e.to_string(),
    }
}

/// Seed of the validation pattern for one size (both sides compute it).
fn seed_for(size: u64) -> u64 {
    size.wrapping_mul(31).wrapping_add(0x5eed)
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

fn measure_one(
    side: &Side,
    peer: &engine::Endpoint,
    req: &WriteBwRequest,
    size: u64,
) -> Result<write_bw::Repetition, ProbeError> {
    let t = side.write_size(peer, &req.plan, size, req.timeout)?;
    let per_qp = u64::from(req.plan.iterations / req.plan.qps);
    Ok(write_bw::summarise(
        size,
        per_qp * u64::from(req.plan.qps),
        req.plan.cq_moderation,
        &t,
    ))
}

/// This request's side: its device, port and GID choice, a buffer of `len` bytes in `memory`
/// (the context opened for DevX when `devx` is given).
fn open_side(
    verbs: &std::sync::Arc<crate::verbs::Verbs>,
    sr: &SysRoot,
    req: &WriteBwRequest,
    memory: &Memory,
    len: u64,
    devx: Option<&crate::verbs::mlx5dv_sys::Mlx5Dv>,
) -> Result<engine::Side, ProbeError> {
    engine::open_side(
        verbs,
        sr,
        &req.device,
        req.port,
        req.gid_index,
        &req.plan,
        len,
        memory,
        devx,
    )
}

fn stop_if_interrupted() -> Result<(), ProbeError> {
    if crate::signals::interrupted() {
        return Err(ProbeError::Interrupted);
    }
    Ok(())
}

fn loopback(
    sr: &SysRoot,
    req: &WriteBwRequest,
    mem: &Sides,
    report: &mut WriteBwReport,
    poster: &mut dyn Poster,
) -> Result<(), ProbeError> {
    let verbs = engine::load()?;
    let len = poster.buffer_len(req.plan.max_size());
    let devx_open = poster
        .source_devx()
        .map(|dv| open_side(&verbs, sr, req, &mem.source, len, Some(dv)));
    let mut a = match devx_open {
        Some(Ok(side)) => side,
        Some(Err(e)) => {
            poster.devx_refused(e.to_string());
            open_side(&verbs, sr, req, &mem.source, len, None)?
        }
        None => open_side(&verbs, sr, req, &mem.source, len, None)?,
    };
    let mut b = open_side(&verbs, sr, req, &mem.target, len, None)?;
    report.memory = Some(write_bw::MemorySides {
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
    report.threshold = Some(write_bw::threshold_for(&a.facts));
    report.local = Some(a.facts.clone());
    poster.prepare(a)?;
    loopback_sizes(req, a, b, &b_ep, report, poster)
}

fn loopback_sizes(
    req: &WriteBwRequest,
    a: &mut Side,
    b: &mut Side,
    b_ep: &engine::Endpoint,
    report: &mut WriteBwReport,
    poster: &mut dyn Poster,
) -> Result<(), ProbeError> {
    for (i, &size) in req.plan.sizes.iter().enumerate() {
        show_progress(req, i, size);
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
        report.results.push(write_bw::SizeResult::new(
            size,
            poster.iterations(req),
            reps,
            validated,
        ));
    }
    Ok(())
}

fn client(
    sr: &SysRoot,
    req: &WriteBwRequest,
    mem: &Sides,
    peer: &str,
    token: &str,
    report: &mut WriteBwReport,
) -> Result<(), ProbeError> {
    let verbs = engine::load()?;
    let max = req.plan.max_size();
    let mut side = open_side(&verbs, sr, req, &mem.source, max, None)?;
    report.memory = Some(write_bw::MemorySides {
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
    report.threshold = Some(write_bw::threshold_for(&side.facts));
    report.local = Some(side.facts.clone());
    report.remote = Some(remote_facts);
    let iterations = u64::from(req.plan.iterations / req.plan.qps * req.plan.qps);
    for (i, &size) in req.plan.sizes.iter().enumerate() {
        show_progress(req, i, size);
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
            .push(write_bw::SizeResult::new(size, iterations, reps, validated));
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

fn serve(
    sr: &SysRoot,
    req: &WriteBwRequest,
    mem: &Sides,
    listen: &str,
    token: &str,
    report: &mut WriteBwReport,
) -> Result<(), ProbeError> {
    let verbs = engine::load()?;
    // Check the port before waiting for anyone: a down port or bad GID fails at once.
    let probe = engine::open_side(
        &verbs,
        sr,
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
    if max_size > write_bw::MAX_MESSAGE_BYTES || !(1..=64).contains(&qps) {
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
    let mut side = engine::open_side(
        &verbs,
        sr,
        &req.device,
        req.port,
        req.gid_index,
        &plan,
        max_size,
        &mem.target,
        None,
    )?;
    report.memory = Some(write_bw::MemorySides {
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
    report.served = Some(write_bw::Served {
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
