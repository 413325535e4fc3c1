//! Measuring on the live machine: plans from the topology, CUDA work on one worker thread,
//! a deadline and SIGINT/SIGTERM watched from the calling thread.
//!
//! This module must not judge: it records samples, expected rates and what it read, and hands
//! the report to `ProbeReport::evaluate`. A hung copy or kernel cannot be cancelled, so when
//! the deadline passes the caller gets the partial report marked `hung` and must end the
//! process (`exit_now`); the driver frees the device and pinned memory when it goes.

use super::{
    CudaInfo, DmabufResult, Expected, LinkUnderLoad, Measurement, Method, PeerInfo, ProbeGpu,
    ProbeKind, ProbeReport, Status,
};
use crate::cuda::{self, Context, CudaError, DeviceBuffer, Event, Module, PinnedBuffer, Stream};
use crate::reading::Reading;
use crate::topo::Topology;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The copy kernel, compiled at run time for the GPU's own sm_XX.
pub const COPY_KERNEL_SRC: &str = include_str!("../../kernels/copy.cu");
const COPY_KERNEL_NAME: &str = "gpudoctor_copy_u4";

pub use super::options::ProbeOptions;

/// What a probe run produced.
pub struct ProbeRun {
    pub report: ProbeReport,
    /// SIGINT/SIGTERM: the worker stopped between samples and freed its memory.
    pub interrupted: bool,
    /// The deadline passed with CUDA work still outstanding: end the process now.
    pub hung: bool,
}

/// Level 1 as a library call (for `check --level 1`): h2d, d2h, p2p and dmabuf-export in
/// that order, each with `base`'s size/iterations/deadline. Stops after a run that was
/// interrupted or hung; the caller must then `exit_now` for a hung one.
pub fn run_level1(base: &ProbeOptions, topo: &Topology) -> Vec<ProbeRun> {
    let mut out = Vec::new();
    for kind in [
        ProbeKind::H2d,
        ProbeKind::D2h,
        ProbeKind::P2p,
        ProbeKind::DmabufExport,
    ] {
        let o = ProbeOptions {
            kind,
            ..base.clone()
        };
        let r = measure_probe(&o, topo);
        let stop = r.interrupted || r.hung;
        out.push(r);
        if stop {
            break;
        }
    }
    out
}

/// One GPU, as planned from the topology (owned: it crosses to the worker thread).
#[derive(Debug, Clone)]
struct PlanGpu {
    label: String,
    /// sysfs form.
    bdf: String,
    /// NVML form.
    bdf_nvml: String,
    cpulist: Option<String>,
    numa_node: Option<u32>,
    /// Max generation/width of the GPU's own link, with the source of the numbers.
    link_max: Reading<(u8, u8, String)>,
}

#[derive(Debug, Clone)]
struct Plan {
    gpus: Vec<PlanGpu>,
    /// (GPU label a, GPU label b) -> path cell (`NV18`, `PIX`...) and NVLink count.
    paths: BTreeMap<(String, String), (String, Option<u32>)>,
}

fn plan(topo: &Topology) -> Plan {
    let mut gpus = Vec::new();
    for g in &topo.gpus {
        let dev = topo.device(g.bdf);
        let link_max = match dev {
            Some(d) => match (d.link.max_gen, d.link.max_width) {
                (Some(gn), Some(w)) => Reading::Value((
                    gn,
                    w,
                    format!("sysfs max_link_speed/max_link_width of {}", g.bdf),
                )),
                _ => Reading::unknown(format!("{}: max link speed/width unreadable", g.bdf)),
            },
            None => Reading::unknown(format!("{}: not in the PCI inventory", g.bdf)),
        };
        gpus.push(PlanGpu {
            label: g.label.clone(),
            bdf: g.bdf.to_string(),
            bdf_nvml: g.bdf.nvml(),
            cpulist: dev.and_then(|d| d.numa.cpu_affinity.clone()),
            numa_node: dev.and_then(|d| d.numa.node),
            link_max,
        });
    }
    // GPU pairs only (what the peer copies look up): the matrix's GPUs come first, and a host
    // with SR-IOV functions has millions of NIC pairs.
    let mut paths = BTreeMap::new();
    let m = &topo.matrix;
    let gpu_labels = &m.labels[..topo.gpus.len().min(m.labels.len())];
    for (i, a) in gpu_labels.iter().enumerate() {
        for (j, b) in gpu_labels.iter().enumerate() {
            if let Some(p) = m.paths.get(i).and_then(|r| r.get(j)) {
                paths.insert((a.clone(), b.clone()), (p.cell(), p.nvlinks));
            }
        }
    }
    Plan { gpus, paths }
}

use crate::signals::interrupted;

/// End the process now, after writing `stdout`: used when CUDA work is hung and the worker
/// thread cannot be joined (exit handlers could wait on the hung context).
pub fn exit_now(stdout: &str, code: i32) -> ! {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    let _ = so.write_all(stdout.as_bytes());
    let _ = so.flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process without running exit handlers.
    unsafe { libc::_exit(code) }
}

#[derive(Default)]
struct Shared {
    report: Option<ProbeReport>,
    step: String,
    done: u32,
    total: u32,
}

type SharedRef = Arc<Mutex<Shared>>;

fn set_step(sh: &SharedRef, step: String, total: u32) {
    if let Ok(mut s) = sh.lock() {
        s.step = step;
        s.done = 0;
        s.total = total;
    }
}

fn tick(sh: &SharedRef) {
    if let Ok(mut s) = sh.lock() {
        s.done += 1;
    }
}

fn with_report(sh: &SharedRef, f: impl FnOnce(&mut ProbeReport)) {
    if let Ok(mut s) = sh.lock()
        && let Some(r) = s.report.as_mut()
    {
        f(r);
    }
}

/// Run one probe against the live machine. Never panics: a panic inside CUDA code is caught
/// and reported as this run's error.
pub fn measure_probe(opts: &ProbeOptions, topo: &Topology) -> ProbeRun {
    let plan = plan(topo);
    crate::signals::install();
    let shared: SharedRef = Arc::new(Mutex::new(Shared {
        report: Some(ProbeReport::new(opts.kind, opts.policy.clone())),
        ..Default::default()
    }));
    let (tx, rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let sh = shared.clone();
    let o = opts.clone();
    let spawned = std::thread::Builder::new()
        .name("gpudoctor-probe".into())
        .spawn(move || {
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| worker(&o, &plan, &sh)));
            let msg = match r {
                Ok(r) => r,
                Err(p) => Err(format!(
                    "CUDA code panicked: {}",
                    p.downcast_ref::<String>()
                        .map(String::as_str)
                        .or_else(|| p.downcast_ref::<&str>().copied())
                        .unwrap_or("(no message)")
                )),
            };
            let _ = tx.send(msg);
        });
    if let Err(e) = spawned {
        let mut r = ProbeReport::new(opts.kind, opts.policy.clone());
        r.error = Some(format!("could not start the probe thread: {e}"));
        r.evaluate();
        return ProbeRun {
            report: r,
            interrupted: false,
            hung: false,
        };
    }
    let start = Instant::now();
    let mut interrupted_at: Option<Instant> = None;
    let mut last_progress = String::new();
    let finish = |hung: bool, error: Option<String>, intr: bool| {
        let mut r = shared
            .lock()
            .ok()
            .and_then(|mut s| s.report.take())
            .unwrap_or_else(|| ProbeReport::new(opts.kind, opts.policy.clone()));
        if let Some(e) = error {
            r.error = Some(e);
        }
        r.evaluate();
        if intr {
            // Cut short by the operator: nothing was judged as a whole.
            r.status = Status::Unknown;
        }
        ProbeRun {
            report: r,
            interrupted: intr,
            hung,
        }
    };
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(res) => {
                clear_progress(opts.progress, &last_progress);
                let intr = interrupted();
                return finish(false, res.err(), intr);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                clear_progress(opts.progress, &last_progress);
                return finish(false, Some("probe thread vanished".into()), false);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        let (step, done, total) = shared
            .lock()
            .map(|s| (s.step.clone(), s.done, s.total))
            .unwrap_or_default();
        if opts.progress {
            let line = format!("gpudoctor: {step} {done}/{total}");
            if line != last_progress {
                let _ = std::io::Write::write_fmt(
                    &mut std::io::stderr(),
                    format_args!("\r\x1b[2K{line}"),
                );
                last_progress = line;
            }
        }
        if interrupted() {
            let at = *interrupted_at.get_or_insert_with(Instant::now);
            // The worker checks the flag between samples; give it time to free memory.
            if at.elapsed() > Duration::from_secs(10) {
                clear_progress(opts.progress, &last_progress);
                return finish(
                    true,
                    Some(format!(
                        "interrupted during {step}; work did not stop in 10 s"
                    )),
                    true,
                );
            }
        }
        if start.elapsed() > opts.deadline {
            clear_progress(opts.progress, &last_progress);
            return finish(
                true,
                Some(format!(
                    "deadline of {} s passed during {step} ({done}/{total}): a copy or kernel \
                     did not complete",
                    opts.deadline.as_secs()
                )),
                false,
            );
        }
    }
}

fn clear_progress(on: bool, last: &str) {
    if on && !last.is_empty() {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), b"\r\x1b[2K");
    }
}

#[derive(Debug)]
enum Stop {
    Interrupted,
    Cuda(CudaError),
}

impl From<CudaError> for Stop {
    fn from(e: CudaError) -> Self {
        Stop::Cuda(e)
    }
}

/// A CUDA device matched to its topology label.
struct Gpu {
    plan: PlanGpu,
    dev: cuda::Device,
}

fn worker(o: &ProbeOptions, plan: &Plan, sh: &SharedRef) -> Result<(), String> {
    // Presence first, for its reason; every later call is guarded too (`cuda::resolve`).
    if let Err(e) = cuda::driver_presence() {
        skip(sh, e.to_string());
        return Ok(());
    }
    let driver_version = match cuda::init() {
        Ok(v) => v,
        Err(e) => {
            let why = match e.driver_name() {
                Some("CUDA_ERROR_NO_DEVICE") => "no CUDA device visible".to_string(),
                _ => format!("the CUDA driver could not be initialised: {e}"),
            };
            skip(sh, why);
            return Ok(());
        }
    };
    let dirs = cuda::nvrtc_search_dirs(&o.cuda_homes);
    let nvrtc = Reading::from_result(match cuda::find_nvrtc(&dirs) {
        Ok(src) => {
            let v = cuda::nvrtc_version()
                .map(|(a, b)| format!("{a}.{b}"))
                .unwrap_or_else(|e| format!("version unknown: {e}"));
            Ok(match src {
                cuda::NvrtcSource::LoaderPath => format!("NVRTC {v} (loader path)"),
                cuda::NvrtcSource::File(p) => format!("NVRTC {v} ({})", p.display()),
            })
        }
        Err(e) => Err(e.to_string()),
    });
    with_report(sh, |r| {
        r.cuda = Some(CudaInfo {
            driver_version: Some(driver_version),
            nvrtc: nvrtc.clone(),
        })
    });
    let devs = cuda::devices().map_err(|e| e.to_string())?;
    if devs.is_empty() {
        skip(sh, "no CUDA device visible".to_string());
        return Ok(());
    }
    let mut gpus: Vec<Gpu> = Vec::new();
    for d in devs {
        let p = plan
            .gpus
            .iter()
            .find(|g| g.bdf == d.bdf)
            .cloned()
            .unwrap_or_else(|| PlanGpu {
                label: format!("cuda{}", d.ordinal),
                bdf: d.bdf.clone(),
                bdf_nvml: d.bdf.to_uppercase(),
                cpulist: None,
                numa_node: None,
                link_max: Reading::unknown(format!("{}: not in the PCI inventory", d.bdf)),
            });
        gpus.push(Gpu { plan: p, dev: d });
    }
    // PCI order, as labelled.
    gpus.sort_by(|a, b| a.plan.bdf.cmp(&b.plan.bdf));
    if let Some(n) = o.gpu {
        let want = format!("GPU{n}");
        if !gpus.iter().any(|g| g.plan.label == want) {
            let have: Vec<&str> = gpus.iter().map(|g| g.plan.label.as_str()).collect();
            return Err(format!(
                "--gpu {n}: no {want} here (have {})",
                have.join(", ")
            ));
        }
    }
    let selected = |g: &Gpu| o.gpu.is_none_or(|n| g.plan.label == format!("GPU{n}"));
    with_report(sh, |r| {
        r.gpus = gpus
            .iter()
            .filter(|g| selected(g) || o.kind == ProbeKind::P2p)
            .map(|g| ProbeGpu {
                label: g.plan.label.clone(),
                bdf: g.plan.bdf.clone(),
                cuda_ordinal: g.dev.ordinal,
                name: g.dev.name.clone(),
                arch: g.dev.arch(),
                sm_count: g.dev.sm_count,
                host_memory: String::new(),
            })
            .collect();
    });
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| e.to_string());
    let res = match o.kind {
        ProbeKind::H2d | ProbeKind::D2h => {
            let mut r = Ok(());
            for g in gpus.iter().filter(|g| selected(g)) {
                r = host_copies(o, g, nvml.as_ref().ok(), nvrtc.is_value(), sh);
                if r.is_err() {
                    break;
                }
            }
            r
        }
        ProbeKind::P2p => peer_copies(o, plan, &gpus, nvrtc.is_value(), sh),
        ProbeKind::DmabufExport => {
            for g in gpus.iter().filter(|g| selected(g)) {
                dmabuf(g, sh);
            }
            Ok(())
        }
    };
    match res {
        Ok(()) => Ok(()),
        Err(Stop::Interrupted) => Err(format!(
            "interrupted by {}; device and pinned memory freed",
            crate::signals::which()
        )),
        Err(Stop::Cuda(e)) => Err(e.to_string()),
    }
}

fn skip(sh: &SharedRef, reason: String) {
    with_report(sh, |r| {
        r.skipped = Some(reason);
    });
}

/// Bind this (worker) thread to `cpulist` so pinned pages come from the GPU's NUMA node.
fn bind_to(cpulist: &str) -> Result<(), String> {
    let set = crate::numa::parse_cpulist(cpulist).ok_or("unparsable cpulist")?;
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut cs: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in set {
        if (c as usize) < libc::CPU_SETSIZE as usize {
            // SAFETY: index checked against CPU_SETSIZE.
            unsafe { libc::CPU_SET(c as usize, &mut cs) };
        }
    }
    // SAFETY: pid 0 is this thread; the set is fully initialised.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &cs) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().to_string())
    }
}

fn gbps(bytes: u64, ms: f32) -> f64 {
    if ms <= 0.0 {
        return f64::NAN;
    }
    bytes as f64 / (f64::from(ms) * 1e-3) / 1e9
}

/// Warm up, then time `iters` transfers with events on `s`. Everything is enqueued back to
/// back (warm-up, then each timed transfer between its own pair of events) and waited for at
/// the end, as nvbandwidth keeps its stream busy: a host that waits for each copy before
/// enqueueing the next leaves the link idle between samples, and a GPU's PCIe link and clocks
/// leave their top state when idle. On the H100 VM the one-at-a-time loop measured medians of
/// 36.5-48.4 GB/s where nvbandwidth measured 52-55.
/// How many timed copies of `bytes` may be queued at once: about 2 GiB of copies, but never
/// fewer than a default reading's samples (`DEFAULT_ITERS`: a default reading queues every copy
/// up front, as level 1 always did, so its verdicts are measured exactly as before) and at most
/// 256 (small copies: the host keeps up one by one). A stop waits for at most this many: 20
/// copies of 256 MiB, 0.1 s at PCIe Gen5 speed, instead of every copy of a long run.
fn in_flight(bytes: u64) -> usize {
    const BYTES: u64 = 2 << 30;
    let least = super::options::DEFAULT_ITERS as u64;
    (BYTES / bytes.max(1)).clamp(least, 256) as usize
}

fn sample<F: FnMut() -> Result<(), CudaError>>(
    ctx: &Rc<Context>,
    s: &Stream,
    bytes: u64,
    warmup: u32,
    iters: u32,
    sh: &SharedRef,
    mut enqueue: F,
) -> (Vec<f64>, Option<Stop>) {
    let mut out = Vec::new();
    let iters = iters as usize;
    let window = in_flight(bytes).min(iters.max(1));
    let run = |out: &mut Vec<f64>, enqueue: &mut F| -> Result<(), Stop> {
        // A ring of `window` event pairs: at most that many timed copies are queued ahead of
        // the one being read, so the GPU never waits for the host, and a stop (Ctrl-C, the
        // budget) waits for a bounded amount of queued work, not for every copy of the sample
        // (all of them were queued up front before: 2 s of 256 MiB copies to drain).
        let mut ring = Vec::with_capacity(window);
        for _ in 0..window {
            ring.push((Event::new(ctx)?, Event::new(ctx)?));
        }
        for _ in 0..warmup {
            enqueue()?;
        }
        let (mut queued, mut read) = (0usize, 0usize);
        while read < iters {
            if interrupted() {
                return Err(Stop::Interrupted);
            }
            if queued < iters && queued - read < window {
                let (a, b) = &ring[queued % window];
                a.record(s)?;
                enqueue()?;
                b.record(s)?;
                queued += 1;
                continue;
            }
            let (a, b) = &ring[read % window];
            b.synchronize()?;
            out.push(gbps(bytes, b.elapsed_ms_since(a)?));
            tick(sh);
            read += 1;
        }
        Ok(())
    };
    let r = run(&mut out, &mut enqueue);
    if r.is_err() {
        // Whatever was enqueued finishes before the buffers it reads are freed.
        let _ = s.synchronize();
    }
    (out, r.err())
}

/// One reading, and where it is below its bar (`probes::below_bar`), a second one with
/// `REMEASURE_FACTOR` times the samples: (first samples, second samples or empty, stop).
#[allow(clippy::too_many_arguments)]
fn measure<F: FnMut() -> Result<(), CudaError>>(
    ctx: &Rc<Context>,
    s: &Stream,
    o: &ProbeOptions,
    sh: &SharedRef,
    step: &str,
    bar: &Result<super::Bar, String>,
    mut enqueue: F,
) -> (Vec<f64>, Vec<f64>, Option<Stop>) {
    set_step(sh, step.to_string(), o.iters);
    let (first, stop) = sample(ctx, s, o.size_bytes, o.warmup, o.iters, sh, &mut enqueue);
    if stop.is_some() || !super::below_bar(&first, bar) {
        return (first, Vec::new(), stop);
    }
    let n = o.iters.saturating_mul(super::REMEASURE_FACTOR);
    set_step(sh, format!("{step} (below its bar: measuring again)"), n);
    let (again, stop) = sample(ctx, s, o.size_bytes, o.warmup, n, sh, &mut enqueue);
    (first, again, stop)
}

fn copy_grid(dev: &cuda::Device) -> (u32, u32) {
    // Four 512-thread blocks per SM: full occupancy on Hopper/Ampere for this small kernel.
    ((dev.sm_count.max(1) as u32) * 4, 512)
}

fn load_copy_kernel(ctx: &Rc<Context>, dev: &cuda::Device) -> Result<Module, CudaError> {
    let cubin = cuda::compile_cubin(COPY_KERNEL_SRC, "copy.cu", &dev.arch())?;
    Module::load(ctx, &cubin)
}

#[allow(clippy::too_many_arguments)]
fn record(
    sh: &SharedRef,
    o: &ProbeOptions,
    id: String,
    method: Method,
    src: &str,
    dst: &str,
    (samples, remeasured): (Vec<f64>, Vec<f64>),
    expected: Reading<Expected>,
    error: Option<String>,
) {
    let m = Measurement {
        id,
        probe: o.kind,
        method,
        src: src.to_string(),
        dst: dst.to_string(),
        size_bytes: o.size_bytes,
        warmup: o.warmup,
        samples_gbps: samples,
        remeasured_samples_gbps: remeasured,
        expected,
        error,
        evaluation: super::evaluate(method, &[], &[], &Err(String::new()), None),
    };
    with_report(sh, |r| r.measurements.push(m));
}

/// Split a stop into what to record and whether to go on.
fn settle(stop: Option<Stop>) -> Result<Option<String>, Stop> {
    match stop {
        None => Ok(None),
        Some(Stop::Interrupted) => Err(Stop::Interrupted),
        Some(Stop::Cuda(e)) => Ok(Some(e.to_string())),
    }
}

/// One timed variant of a copy between `ends`: measured (`measure`) against the bar its
/// method sets (the SM kernel's from the copy engine's median, `ce_gbps`), and recorded under
/// `id`. Returns the median it is judged on (of the remeasured samples where it was
/// remeasured), where it ran to the end against a known bar: what the SM-kernel variant is
/// then held to, as `ProbeReport::evaluate` holds it.
#[allow(clippy::too_many_arguments)]
fn run_variant<F: FnMut() -> Result<(), CudaError>>(
    ctx: &Rc<Context>,
    s: &Stream,
    o: &ProbeOptions,
    sh: &SharedRef,
    (id, method): (String, Method),
    (src, dst): (&str, &str),
    (expected, ce_gbps): (&Reading<Expected>, Option<f64>),
    enqueue: F,
) -> Result<Option<f64>, Stop> {
    let bar = super::bar(method, expected, ce_gbps, &o.policy);
    let (samples, again, stop) = measure(ctx, s, o, sh, &id, &bar, enqueue);
    let err = settle(stop)?;
    let judged = if err.is_none() && bar.is_ok() {
        super::median(if again.is_empty() { &samples } else { &again })
    } else {
        None
    };
    record(
        sh,
        o,
        id,
        method,
        src,
        dst,
        (samples, again),
        expected.clone(),
        err,
    );
    Ok(judged)
}

fn host_copies(
    o: &ProbeOptions,
    g: &Gpu,
    nvml: Option<&nvml_wrapper::Nvml>,
    have_nvrtc: bool,
    sh: &SharedRef,
) -> Result<(), Stop> {
    let label = g.plan.label.clone();
    let h2d = o.kind == ProbeKind::H2d;
    let dir = o.kind.as_str();
    set_step(sh, format!("{dir} {label}: allocating"), 0);
    let placement = match &g.plan.cpulist {
        Some(cl) => match bind_to(cl) {
            Ok(()) => format!(
                "pinned (cuMemHostAlloc PORTABLE|DEVICEMAP, not write-combined), allocated by a \
                 thread bound to CPUs {cl} (local_cpulist of {}; NUMA node {})",
                g.plan.bdf,
                g.plan
                    .numa_node
                    .map_or("unknown".to_string(), |n| n.to_string())
            ),
            Err(e) => format!("pinned; could not bind to CPUs {cl}: {e}; placement unknown"),
        },
        None => "pinned; the GPU's local CPUs are unknown, placement unknown".to_string(),
    };
    with_report(sh, |r| {
        if let Some(pg) = r.gpus.iter_mut().find(|x| x.label == label) {
            pg.host_memory = placement.clone();
        }
    });
    let bytes = o.size_bytes as usize;
    let ctx = Context::retain(g.dev.handle)?;
    let stream = Stream::new(&ctx)?;
    let host = PinnedBuffer::new(&ctx, bytes)?;
    let devbuf = DeviceBuffer::new(&ctx, bytes)?;
    let (src, dst, src_l, dst_l) = if h2d {
        (host.addr(), devbuf.ptr, "host", label.as_str())
    } else {
        (devbuf.ptr, host.addr(), label.as_str(), "host")
    };
    let expected = Reading::from_result(
        g.plan
            .link_max
            .as_ref()
            .into_result()
            .and_then(|(gn, w, source)| super::pcie_expected(*gn, *w, source)),
    );

    // Copy engine, with the link read while a batch of copies is in flight.
    set_step(sh, format!("{dir} {label} copy-engine"), o.iters);
    let lul = link_under_load(o, g, nvml, &ctx, &stream, src, dst, bytes);
    match lul {
        Ok(l) => with_report(sh, |r| r.link_under_load.push(l)),
        Err(Stop::Interrupted) => return Err(Stop::Interrupted),
        Err(Stop::Cuda(e)) => with_report(sh, |r| {
            r.notes
                .push(format!("{label}: link under load not read: {e}"))
        }),
    }
    // Its median is what the SM kernel is judged against.
    let ce_gbps = run_variant(
        &ctx,
        &stream,
        o,
        sh,
        (format!("{dir} {label} copy-engine"), Method::CopyEngine),
        (src_l, dst_l),
        (&expected, None),
        || cuda::memcpy_async(dst, src, bytes, &stream),
    )?;

    // SM kernel: the GPU's SMs read (h2d) or write (d2h) the mapped host buffer.
    if !have_nvrtc {
        with_report(sh, |r| {
            r.notes.push(format!(
                "{label}: SM-kernel variant not run: NVRTC unavailable"
            ))
        });
        return Ok(());
    }
    let id = format!("{dir} {label} sm-kernel");
    match load_copy_kernel(&ctx, &g.dev) {
        Ok(module) => {
            let f = module.function(COPY_KERNEL_NAME)?;
            let (grid, block) = copy_grid(&g.dev);
            let words = o.size_bytes / 16;
            run_variant(
                &ctx,
                &stream,
                o,
                sh,
                (id, Method::SmKernel),
                (src_l, dst_l),
                (&expected, ce_gbps),
                || cuda::launch_copy(f, grid, block, src, dst, words, &stream),
            )?;
        }
        Err(e) => record(
            sh,
            o,
            id,
            Method::SmKernel,
            src_l,
            dst_l,
            (Vec::new(), Vec::new()),
            expected,
            Some(e.to_string()),
        ),
    }
    Ok(())
}

/// Enqueue a batch of copies (~16 x size), read NVML and sysfs while they run, then wait.
#[allow(clippy::too_many_arguments)]
fn link_under_load(
    o: &ProbeOptions,
    g: &Gpu,
    nvml: Option<&nvml_wrapper::Nvml>,
    ctx: &Rc<Context>,
    stream: &Stream,
    src: u64,
    dst: u64,
    bytes: usize,
) -> Result<LinkUnderLoad, Stop> {
    let _ = ctx;
    for _ in 0..16 {
        cuda::memcpy_async(dst, src, bytes, stream)?;
    }
    // Let the link leave any idle power state before reading it.
    std::thread::sleep(Duration::from_millis(5));
    let sr = crate::sysroot::SysRoot::live();
    let sys = |attr: &str| {
        Reading::from_result(
            sr.read_text(&format!("/sys/bus/pci/devices/{}/{attr}", g.plan.bdf))
                .map(|s| s.trim().to_string()),
        )
    };
    let (cur_speed, cur_width) = (sys("current_link_speed"), sys("current_link_width"));
    let (max_speed, max_width) = (sys("max_link_speed"), sys("max_link_width"));
    let no = |what: &str| Reading::<u32>::unknown(format!("NVML unavailable ({what})"));
    let (ng, nw, nmg, nmw) = match nvml.map(|n| n.device_by_pci_bus_id(g.plan.bdf_nvml.as_str())) {
        Some(Ok(d)) => (
            nvml_reading(d.current_pcie_link_gen()),
            nvml_reading(d.current_pcie_link_width()),
            nvml_reading(d.max_pcie_link_gen()),
            nvml_reading(d.max_pcie_link_width()),
        ),
        Some(Err(e)) => {
            let m = e.to_string();
            (no(&m), no(&m), no(&m), no(&m))
        }
        None => (no("init"), no("init"), no("init"), no("init")),
    };
    stream.synchronize()?;
    Ok(LinkUnderLoad {
        gpu: g.plan.label.clone(),
        bdf: g.plan.bdf.clone(),
        during: format!("{} copy-engine", o.kind.as_str()),
        nvml_gen_current: ng,
        nvml_width_current: nw,
        nvml_gen_max: nmg,
        nvml_width_max: nmw,
        sysfs_current_speed: cur_speed,
        sysfs_current_width: cur_width,
        sysfs_max_speed: max_speed,
        sysfs_max_width: max_width,
        status: Status::Unknown,
        reason: String::new(),
    })
}

/// An NVML answer as a reading: NotSupported is absent (the driver answered: not on this
/// GPU), any other error unknown.
fn nvml_reading<T>(r: Result<T, nvml_wrapper::error::NvmlError>) -> Reading<T> {
    match r {
        Ok(v) => Reading::Value(v),
        Err(nvml_wrapper::error::NvmlError::NotSupported) => {
            Reading::absent("NVML: not supported on this GPU")
        }
        Err(e) => Reading::unknown(e.to_string()),
    }
}

/// Every GPU's resources for the peer copies, by GPU index. Fields drop in declaration order:
/// kernels, buffers and streams before their contexts.
struct PeerGpus {
    /// The copy kernel loaded on each GPU (its module kept alive), or why it is not.
    kernels: Vec<Result<(Module, cuda::Kernel), String>>,
    /// Each GPU's (source, destination) buffers.
    bufs: Vec<(DeviceBuffer, DeviceBuffer)>,
    streams: Vec<Stream>,
    ctxs: Vec<Rc<Context>>,
}

impl PeerGpus {
    /// A context, two `bytes` buffers and a stream on every GPU, and the copy kernel where
    /// NVRTC can compile it.
    fn alloc(gpus: &[Gpu], bytes: usize, have_nvrtc: bool) -> Result<PeerGpus, Stop> {
        let mut ctxs = Vec::new();
        let mut bufs = Vec::new();
        let mut streams = Vec::new();
        let mut kernels = Vec::new();
        for g in gpus {
            let ctx = Context::retain(g.dev.handle)?;
            bufs.push((
                DeviceBuffer::new(&ctx, bytes)?,
                DeviceBuffer::new(&ctx, bytes)?,
            ));
            streams.push(Stream::new(&ctx)?);
            kernels.push(if have_nvrtc {
                match load_copy_kernel(&ctx, &g.dev) {
                    Ok(m) => match m.function(COPY_KERNEL_NAME) {
                        Ok(f) => Ok((m, f)),
                        Err(e) => Err(e.to_string()),
                    },
                    Err(e) => Err(e.to_string()),
                }
            } else {
                Err("NVRTC unavailable".to_string())
            });
            ctxs.push(ctx);
        }
        Ok(PeerGpus {
            kernels,
            bufs,
            streams,
            ctxs,
        })
    }
}

/// The expected rate from GPU `a` to `b` over `path`: NVLink's where the path is NVLinks,
/// else the slower of the two GPUs' PCIe links.
fn peer_expected(a: &Gpu, b: &Gpu, path: &Option<(String, Option<u32>)>) -> Reading<Expected> {
    let (la, lb) = (a.plan.label.as_str(), b.plan.label.as_str());
    Reading::from_result(match path {
        Some((cell, Some(n))) if cell.starts_with("NV") && *n > 0 => {
            super::nvlink_expected(*n, a.dev.cc_major, a.dev.cc_minor)
        }
        Some((cell, _)) => match (&a.plan.link_max, &b.plan.link_max) {
            (Reading::Value((ga, wa, _)), Reading::Value((gb, wb, _))) => {
                let (gn, w) = if crate::pci::link_gbps_per_direction(*ga, *wa)
                    <= crate::pci::link_gbps_per_direction(*gb, *wb)
                {
                    (*ga, *wa)
                } else {
                    (*gb, *wb)
                };
                super::pcie_expected(
                    gn,
                    w,
                    &format!("PCIe path {cell}: the slower of the two GPUs' links"),
                )
            }
            (Reading::Absent(e) | Reading::Unknown(e), _)
            | (_, Reading::Absent(e) | Reading::Unknown(e)) => Err(e.clone()),
        },
        None => Err(format!("no topology path for {la}->{lb}")),
    })
}

/// Ask CUDA whether GPU `i` can reach GPU `j`, enable peer access where it can, and record
/// the pair (its path, the answer and the P2P attributes). Whether peer access is enabled.
fn peer_info(
    sh: &SharedRef,
    gpus: &[Gpu],
    res: &PeerGpus,
    (i, j): (usize, usize),
    path: &Option<(String, Option<u32>)>,
) -> bool {
    let (a, b) = (&gpus[i], &gpus[j]);
    let (la, lb) = (a.plan.label.as_str(), b.plan.label.as_str());
    let can = Reading::from_result(cuda::can_access_peer(&a.dev, &b.dev));
    let attributes = cuda::p2p_attributes(&a.dev, &b.dev)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut peer_enabled = false;
    if can == Reading::Value(true) {
        match res.ctxs[i].enable_peer_access(&res.ctxs[j]) {
            Ok(()) => peer_enabled = true,
            Err(e) => with_report(sh, |r| {
                r.notes
                    .push(format!("{la}->{lb}: enabling peer access failed: {e}"))
            }),
        }
    }
    with_report(sh, |r| {
        r.peers.push(PeerInfo {
            src: la.to_string(),
            dst: lb.to_string(),
            path: path.as_ref().map(|p| p.0.clone()),
            can_access_peer: can.clone(),
            attributes,
            status: Status::Unknown,
            reason: String::new(),
        })
    });
    peer_enabled
}

/// One ordered pair, GPU `i` to GPU `j`: record it, measure the copy engine, then (with peer
/// access and a loaded kernel) the SM copy kernel, or note why that variant did not run.
fn peer_pair(
    o: &ProbeOptions,
    plan: &Plan,
    gpus: &[Gpu],
    res: &PeerGpus,
    (i, j): (usize, usize),
    sh: &SharedRef,
) -> Result<(), Stop> {
    let (a, b) = (&gpus[i], &gpus[j]);
    let (la, lb) = (a.plan.label.as_str(), b.plan.label.as_str());
    let bytes = o.size_bytes as usize;
    let path = plan.paths.get(&(la.to_string(), lb.to_string())).cloned();
    let peer_enabled = peer_info(sh, gpus, res, (i, j), &path);
    let expected = peer_expected(a, b, &path);
    let s = &res.streams[i];
    let (src, dst) = (res.bufs[i].0.ptr, res.bufs[j].1.ptr);
    let ce_gbps = run_variant(
        &res.ctxs[i],
        s,
        o,
        sh,
        (format!("p2p {la}->{lb} copy-engine"), Method::CopyEngine),
        (la, lb),
        (&expected, None),
        || cuda::memcpy_async(dst, src, bytes, s),
    )?;
    if !peer_enabled {
        with_report(sh, |r| {
            r.notes.push(format!(
                "{la}->{lb}: SM-kernel variant not run: no peer access"
            ))
        });
        return Ok(());
    }
    match &res.kernels[i] {
        Ok((_, f)) => {
            let f = *f;
            let (grid, block) = copy_grid(&a.dev);
            let words = o.size_bytes / 16;
            res.ctxs[i].make_current()?;
            run_variant(
                &res.ctxs[i],
                s,
                o,
                sh,
                (format!("p2p {la}->{lb} sm-kernel"), Method::SmKernel),
                (la, lb),
                (&expected, ce_gbps),
                || cuda::launch_copy(f, grid, block, src, dst, words, s),
            )?;
        }
        Err(e) => with_report(sh, |r| {
            r.notes
                .push(format!("{la}->{lb}: SM-kernel variant not run: {e}"))
        }),
    }
    Ok(())
}

/// Level 1 p2p: every ordered pair of GPUs (or, with `--gpu`, those with that GPU), copy
/// engine and SM kernel.
fn peer_copies(
    o: &ProbeOptions,
    plan: &Plan,
    gpus: &[Gpu],
    have_nvrtc: bool,
    sh: &SharedRef,
) -> Result<(), Stop> {
    if gpus.len() < 2 {
        skip(sh, format!("p2p needs two GPUs; {} visible", gpus.len()));
        return Ok(());
    }
    set_step(sh, "p2p: allocating".into(), 0);
    // Dropped at the end: buffers, kernels and streams before their contexts.
    let res = PeerGpus::alloc(gpus, o.size_bytes as usize, have_nvrtc)?;
    for (i, a) in gpus.iter().enumerate() {
        for (j, b) in gpus.iter().enumerate() {
            if i == j {
                continue;
            }
            if let Some(n) = o.gpu {
                let want = format!("GPU{n}");
                if a.plan.label != want && b.plan.label != want {
                    continue;
                }
            }
            peer_pair(o, plan, gpus, &res, (i, j), sh)?;
        }
    }
    Ok(())
}

fn dmabuf(g: &Gpu, sh: &SharedRef) {
    const BYTES: usize = 2 << 20;
    set_step(sh, format!("dmabuf-export {}", g.plan.label), 1);
    let export = Reading::from_result((|| -> Result<(), CudaError> {
        let ctx = Context::retain(g.dev.handle)?;
        let buf = DeviceBuffer::new(&ctx, BYTES)?;
        cuda::export_dmabuf(&buf)
    })());
    tick(sh);
    with_report(sh, |r| {
        r.dmabuf.push(DmabufResult {
            gpu: g.plan.label.clone(),
            attribute_supported: g.dev.dma_buf_supported.clone(),
            size_bytes: BYTES as u64,
            export,
            status: Status::Unknown,
            reason: String::new(),
        })
    });
}

#[cfg(test)]
mod tests {
    use super::in_flight;
    use crate::probes::options::{DEFAULT_ITERS, DEFAULT_SIZE_BYTES};

    /// A default reading queues all its copies up front (as level 1 always measured); a long
    /// run or a large copy keeps a bounded queue, which is all a stop waits for.
    #[test]
    fn a_default_reading_is_queued_whole_and_long_runs_are_bounded() {
        assert!(in_flight(DEFAULT_SIZE_BYTES) >= DEFAULT_ITERS as usize);
        assert_eq!(in_flight(DEFAULT_SIZE_BYTES), DEFAULT_ITERS as usize);
        assert_eq!(in_flight(1 << 30), DEFAULT_ITERS as usize);
        assert_eq!(in_flight(1 << 20), 256);
        assert_eq!(in_flight(0), 256);
    }
}
