//! The worker: one process that drives every GPU through NCCL for one configuration and
//! prints its samples as JSON. `gpudoctor probe nccl` starts one per configuration (NCCL reads
//! its variables once, at init) and kills it at the deadline, so a hung collective costs a
//! process, never the caller: the driver frees its GPU memory when it goes.
//!
//! Protocol: the request as JSON on stdin; progress lines `STEP_PREFIX step` and one
//! `RESULT_PREFIX {json}` line on stdout (NCCL's own output goes to its debug file). This
//! module measures and records; it must not judge beyond asking the report's pure
//! `needs_remeasure` whether to take the judged size again.

use super::bandwidth;
use super::evaluate;
use super::library::{self, Candidate, Nccl};
use crate::cuda::{self, Context, DeviceBuffer, Event, Stream};
use crate::probes::{REMEASURE_FACTOR, Status};
use crate::reading::Reading;
use crate::report::nccl::{
    BarInput, Collective, CollectiveRun, Mode, NcclGpu, NcclPolicy, Rate, SizeResult,
};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::rc::Rc;

pub const STEP_PREFIX: &str = "gpudoctor-nccl-step ";
pub const RESULT_PREFIX: &str = "gpudoctor-nccl-result ";
/// Rank 0's worker across nodes: the unique id it made (hex), for the parent to hand out.
pub const UNIQUE_ID_PREFIX: &str = "gpudoctor-nccl-unique-id ";

/// Across nodes: this process's share of one communicator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerCluster {
    /// NCCL ranks in the whole communicator.
    pub nranks: u32,
    /// The NCCL rank of this process's first GPU (the others follow in `gpus` order).
    pub first_rank: u32,
    /// The unique id (hex) from rank 0; None: make it (rank 0), print it, then join.
    pub unique_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkerRequest {
    /// The library the parent found (a path, or None: the loader path).
    pub library: Option<String>,
    /// GPUs in rank order: (label, sysfs BDF).
    pub gpus: Vec<(String, String)>,
    pub sizes: Vec<u64>,
    pub collectives: Vec<Collective>,
    pub warmup: u32,
    pub iters: u32,
    /// Timed samples per size (each the average of `iters` collectives).
    pub samples: u32,
    pub mode: Mode,
    pub policy: NcclPolicy,
    pub bar_input: BarInput,
    /// Across nodes (ncclCommInitRank); None: every GPU in this process (ncclCommInitAll).
    #[serde(default)]
    pub cluster: Option<WorkerCluster>,
    /// Only list the CUDA devices this process sees (in `gpus` of the result), run nothing.
    #[serde(default)]
    pub discover: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WorkerResult {
    pub gpus: Vec<NcclGpu>,
    pub expected: Option<Reading<Rate>>,
    pub collectives: Vec<CollectiveRun>,
    pub skipped: Option<String>,
    pub error: Option<String>,
}

fn step(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{STEP_PREFIX}{s}");
    let _ = o.flush();
}

/// Read the request from stdin, measure, print the result line. Exit code 0 whatever was
/// measured: the parent judges.
pub fn main_of_worker() -> i32 {
    let mut text = String::new();
    let res = match std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
        Ok(_) => match serde_json::from_str::<WorkerRequest>(&text) {
            Ok(req) => measure(&req),
            Err(e) => WorkerResult {
                error: Some(format!("worker request unreadable: {e}")),
                ..Default::default()
            },
        },
        Err(e) => WorkerResult {
            error: Some(format!("worker request unreadable: {e}")),
            ..Default::default()
        },
    };
    let line = serde_json::to_string(&res).unwrap_or_else(|e| {
        format!("{{\"error\":\"worker result could not be serialized: {e}\"}}")
    });
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{RESULT_PREFIX}{line}");
    let _ = o.flush();
    0
}

struct Rank {
    ctx: Rc<Context>,
    stream: Stream,
    send: DeviceBuffer,
    recv: DeviceBuffer,
    start: Event,
    end: Event,
}

fn measure(req: &WorkerRequest) -> WorkerResult {
    let mut out = WorkerResult::default();
    if req.discover {
        // Only CUDA: which devices this process sees (CUDA_VISIBLE_DEVICES applies).
        if let Err(e) = cuda::driver_presence().and_then(|()| cuda::init().map(|_| ())) {
            out.skipped = Some(format!("CUDA: {e}"));
            return out;
        }
        match cuda::devices() {
            Ok(devs) => {
                out.gpus = devs
                    .iter()
                    .map(|d| NcclGpu {
                        rank: d.ordinal as u32,
                        label: String::new(),
                        bdf: d.bdf.clone(),
                        cuda_ordinal: d.ordinal,
                        name: d.name.clone(),
                        arch: d.arch(),
                    })
                    .collect();
            }
            Err(e) => out.error = Some(e.to_string()),
        }
        return out;
    }
    let cands = match &req.library {
        Some(p) => vec![Candidate::File(p.into())],
        None => vec![Candidate::LoaderPath],
    };
    let nccl = match library::load(&cands) {
        Ok(n) => n,
        Err(e) => {
            out.skipped = Some(e.to_string());
            return out;
        }
    };
    if let Err(e) = cuda::driver_presence().and_then(|()| cuda::init().map(|_| ())) {
        out.skipped = Some(format!("CUDA: {e}"));
        return out;
    }
    let devs = match cuda::devices() {
        Ok(d) => d,
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let first_rank = req.cluster.as_ref().map_or(0, |c| c.first_rank);
    let mut picked = Vec::new();
    for (i, (label, bdf)) in req.gpus.iter().enumerate() {
        match devs.iter().find(|d| d.bdf == *bdf) {
            Some(d) => {
                out.gpus.push(NcclGpu {
                    rank: first_rank + i as u32,
                    label: label.clone(),
                    bdf: bdf.clone(),
                    cuda_ordinal: d.ordinal,
                    name: d.name.clone(),
                    arch: d.arch(),
                });
                picked.push(d.clone());
            }
            None => {
                out.skipped = Some(format!(
                    "{label} ({bdf}) is not a CUDA device here (CUDA_VISIBLE_DEVICES?)"
                ));
                return out;
            }
        }
    }
    if req.cluster.is_some() && picked.is_empty() {
        out.skipped = Some("no GPU assigned to this process".into());
        return out;
    }
    if req.cluster.is_none() && picked.len() < 2 {
        out.skipped = Some(format!(
            "NCCL collectives need two GPUs; {} visible",
            picked.len()
        ));
        return out;
    }
    let cc = picked.first().map(|d| (d.cc_major, d.cc_minor));
    let expected = evaluate::expected(&req.bar_input, cc);
    out.expected = Some(expected.clone());
    match run_collectives(req, &nccl, &picked, &expected) {
        Ok(c) => out.collectives = c,
        Err((c, e)) => {
            out.collectives = c;
            out.error = Some(e);
        }
    }
    out
}

type Partial = (Vec<CollectiveRun>, String);

fn run_collectives(
    req: &WorkerRequest,
    nccl: &Nccl,
    devs: &[cuda::Device],
    expected: &Reading<Rate>,
) -> Result<Vec<CollectiveRun>, Partial> {
    let n = req.cluster.as_ref().map_or(devs.len() as u32, |c| c.nranks);
    let max_bytes = req
        .collectives
        .iter()
        .flat_map(|c| {
            req.sizes.iter().map(move |s| {
                let sh = bandwidth::shape(*c, *s, n);
                sh.send_bytes.max(sh.recv_bytes)
            })
        })
        .max()
        .unwrap_or(0)
        .max(16) as usize;
    step("allocating");
    let mut ranks = Vec::new();
    for d in devs {
        let r = (|| -> Result<Rank, cuda::CudaError> {
            let ctx = Context::retain(d.handle)?;
            Ok(Rank {
                stream: Stream::new(&ctx)?,
                send: DeviceBuffer::new(&ctx, max_bytes)?,
                recv: DeviceBuffer::new(&ctx, max_bytes)?,
                start: Event::new(&ctx)?,
                end: Event::new(&ctx)?,
                ctx,
            })
        })();
        match r {
            Ok(r) => ranks.push(r),
            Err(e) => return Err((Vec::new(), format!("{}: {e}", d.bdf))),
        }
    }
    let comms = match &req.cluster {
        None => {
            step("ncclCommInitAll");
            let ordinals: Vec<i32> = devs.iter().map(|d| d.ordinal).collect();
            nccl.comm_init_all(&ordinals)
                .map_err(|e| (Vec::new(), e.to_string()))?
        }
        Some(c) => {
            let id = match &c.unique_id {
                Some(hex) => library::unique_id_from_hex(hex).map_err(|e| (Vec::new(), e))?,
                None => {
                    step("ncclGetUniqueId");
                    let id = nccl.unique_id().map_err(|e| (Vec::new(), e.to_string()))?;
                    let mut o = std::io::stdout().lock();
                    let _ = writeln!(o, "{UNIQUE_ID_PREFIX}{}", library::unique_id_hex(&id));
                    let _ = o.flush();
                    id
                }
            };
            step(&format!(
                "ncclCommInitRank (ranks {}-{} of {})",
                c.first_rank,
                c.first_rank as usize + ranks.len() - 1,
                c.nranks
            ));
            let set = |i: usize| -> Result<(), String> {
                ranks
                    .get(i)
                    .ok_or_else(|| "no such GPU".to_string())?
                    .ctx
                    .make_current()
                    .map_err(|e| e.to_string())
            };
            nccl.comm_init_ranks(&id, c.nranks, c.first_rank, &set, ranks.len())
                .map_err(|e| (Vec::new(), e))?
        }
    };
    let mut done = Vec::new();
    let mut failure = None;
    for &c in &req.collectives {
        let mut run = CollectiveRun {
            collective: c,
            ranks: n,
            warmup: req.warmup,
            iters: req.iters,
            sizes: Vec::new(),
            error: None,
            evaluation: crate::probes::Evaluation {
                status: Status::Unknown,
                stats: None,
                threshold_gbps: None,
                threshold_basis: None,
                remeasured: None,
                reason: String::new(),
            },
        };
        for &size in &req.sizes {
            step(&format!("{} {size} B", c.as_str()));
            match time_size(req, nccl, &comms, &ranks, c, size, req.samples) {
                Ok(s) => run.sizes.push(s),
                Err(e) => {
                    run.error = Some(e);
                    break;
                }
            }
        }
        if run.error.is_none()
            && let Some(last) = run.sizes.iter().max_by_key(|s| s.size_bytes).cloned()
            // Across nodes every rank must run the same collectives: no rank decides alone to
            // measure again.
            && req.cluster.is_none()
            && evaluate::needs_remeasure(&req.policy, req.mode, c, expected, &last)
        {
            step(&format!("{} {} B again", c.as_str(), last.size_bytes));
            match time_size(
                req,
                nccl,
                &comms,
                &ranks,
                c,
                // all-gather's size is already whole 16-byte groups per rank: the same shape again.
                last.size_bytes,
                req.samples * REMEASURE_FACTOR,
            ) {
                Ok(again) => {
                    if let Some(s) = run.sizes.iter_mut().max_by_key(|s| s.size_bytes) {
                        s.remeasured_busbw_gbps = again.busbw_gbps;
                    }
                }
                Err(e) => run.error = Some(e),
            }
        }
        let broke = run.error.clone();
        done.push(run);
        if let Some(e) = broke {
            failure = Some(e);
            break;
        }
    }
    step("ncclCommDestroy");
    for comm in comms {
        // SAFETY: each communicator of comm_init_all, finished once, its work synchronised
        // (or abandoned with an abort after an error).
        let _ = unsafe { nccl.comm_finish(comm, failure.is_some()) };
    }
    drop(ranks);
    match failure {
        None => Ok(done),
        Some(e) => Err((done, e)),
    }
}

/// One collective on every rank, as one NCCL group (nccl-tests' startColl for one thread).
fn launch(
    nccl: &Nccl,
    comms: &[library::Comm],
    ranks: &[Rank],
    c: Collective,
    shape: &bandwidth::Shape,
) -> Result<(), String> {
    nccl.group_start().map_err(|e| e.to_string())?;
    let mut err = None;
    for (r, comm) in ranks.iter().zip(comms) {
        let stream = r.stream.raw as *mut std::ffi::c_void;
        // SAFETY: send/recv are this rank's allocations of at least max(send, recv) bytes of
        // the largest shape; the stream and communicator belong to the same GPU.
        let res = unsafe {
            match c {
                Collective::AllReduce => {
                    nccl.all_reduce(r.send.ptr, r.recv.ptr, shape.count as usize, *comm, stream)
                }
                Collective::AllGather => {
                    nccl.all_gather(r.send.ptr, r.recv.ptr, shape.count as usize, *comm, stream)
                }
            }
        };
        if let Err(e) = res {
            err = Some(e.to_string());
            break;
        }
    }
    let end = nccl.group_end().map_err(|e| e.to_string());
    match (err, end) {
        (Some(e), _) => Err(e),
        (None, Err(e)) => Err(e),
        (None, Ok(())) => Ok(()),
    }
}

fn sync_all(nccl: &Nccl, comms: &[library::Comm], ranks: &[Rank]) -> Result<(), String> {
    for (r, comm) in ranks.iter().zip(comms) {
        r.stream.synchronize().map_err(|e| e.to_string())?;
        // SAFETY: a live communicator of comm_init_all.
        unsafe { nccl.async_error(*comm) }.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Warm up, then `samples` timed batches of `iters` collectives: CUDA events around each
/// batch on every GPU's stream, the slowest GPU's time divided by `iters` (nccl-tests divides
/// its host-timed batch by iters in the same way).
#[allow(clippy::too_many_arguments)]
fn time_size(
    req: &WorkerRequest,
    nccl: &Nccl,
    comms: &[library::Comm],
    ranks: &[Rank],
    c: Collective,
    size: u64,
    samples: u32,
) -> Result<SizeResult, String> {
    let n = req
        .cluster
        .as_ref()
        .map_or(ranks.len() as u32, |c| c.nranks);
    let shape = bandwidth::shape(c, size, n);
    for _ in 0..req.warmup {
        launch(nccl, comms, ranks, c, &shape)?;
    }
    sync_all(nccl, comms, ranks)?;
    let mut out = SizeResult {
        size_bytes: shape.size_bytes,
        count: shape.count,
        time_us: Vec::new(),
        algbw_gbps: Vec::new(),
        busbw_gbps: Vec::new(),
        remeasured_busbw_gbps: Vec::new(),
    };
    for _ in 0..samples.max(1) {
        for r in ranks {
            r.ctx.make_current().map_err(|e| e.to_string())?;
            r.start.record(&r.stream).map_err(|e| e.to_string())?;
        }
        for _ in 0..req.iters.max(1) {
            launch(nccl, comms, ranks, c, &shape)?;
        }
        for r in ranks {
            r.ctx.make_current().map_err(|e| e.to_string())?;
            r.end.record(&r.stream).map_err(|e| e.to_string())?;
        }
        sync_all(nccl, comms, ranks)?;
        let mut ms = 0f64;
        for r in ranks {
            r.end.synchronize().map_err(|e| e.to_string())?;
            let t = r
                .end
                .elapsed_ms_since(&r.start)
                .map_err(|e| e.to_string())?;
            ms = ms.max(f64::from(t));
        }
        let sec = ms / 1e3 / f64::from(req.iters.max(1));
        out.time_us.push(sec * 1e6);
        out.algbw_gbps
            .push(bandwidth::algbw_gbps(c, &shape, n, sec));
        out.busbw_gbps
            .push(bandwidth::busbw_gbps(c, &shape, n, sec));
    }
    Ok(out)
}
