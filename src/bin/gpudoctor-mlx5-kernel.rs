//! A test harness for the level-4 CUDA kernel (kernels/mlx5_post.cu) on a GPU machine without
//! a ConnectX; not part of the gpudoctor CLI (scripts/gpu-mlx5-kernel runs it):
//!
//!   gpudoctor-mlx5-kernel build   [--gpu N]
//!       GPU-built WQEs against the Rust builder, byte for byte, over the whole SQ ring.
//!   gpudoctor-mlx5-kernel emulate [--gpu N] [--iters 2048] [--writes 512] [--size 64]
//!       The posting protocol against the NIC stand-in (EMULATED: no adapter is involved),
//!       with both doorbell handlers, the error path and the bounded wait; prints the GPU's
//!       posting time per iteration.
//!   gpudoctor-mlx5-kernel bench   [--gpu N] [--iters 2048] [--writes 512] [--size 64]
//!       The posting cost alone (no consumer) with the SQ in host or GPU memory and either
//!       fence: the measurement behind the live path's choices.
//!
//! Exit: 0 everything as expected, 1 a mismatch or an unexpected outcome, 2 could not run.
//! CUDA_HOME / CUDA_PATH name toolkits to look for libnvrtc in (as gpudoctor's own probes do).

use gpudoctor::rdma::mlx5::harness::{self, EmuHandler, EmuPlan, SqPlace};
use gpudoctor::rdma::mlx5::kernel::{self as k, BuildCase, Fence};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

struct Opts {
    mode: String,
    gpu: usize,
    iters: u32,
    writes: u32,
    size: u32,
}

const USAGE: &str = "usage: gpudoctor-mlx5-kernel build|emulate|bench|queues [--gpu N] [--iters N] [--writes N] [--size B]";

const HELP: &str = "gpudoctor-mlx5-kernel: the level-4 CUDA kernel's test harness for a GPU machine without a ConnectX
(scripts/gpu-mlx5-kernel runs it; not part of the gpudoctor CLI).

  build    GPU-built WQEs against the Rust builder, byte for byte, over the whole SQ ring
  emulate  the posting protocol against the NIC stand-in (EMULATED: no adapter is involved)
  bench    the posting cost alone (no consumer), SQ in host or GPU memory, each fence
  queues   the DevX path's GPU half: queue memory as level 4 lays it out, read back

Options: --gpu N (0), --iters N (2048), --writes N (512, at most 1024), --size B (64).
CUDA_HOME / CUDA_PATH name toolkits to look for libnvrtc in.
Exit: 0 everything as expected, 1 a mismatch or an unexpected outcome, 2 could not run.";

/// What the command line asks for; decided before anything loads CUDA, so that help, the
/// version and every usage error answer on a machine without a GPU.
enum Parsed {
    Help,
    Version,
    Run(Opts),
}

const MODES: [&str; 4] = ["build", "emulate", "bench", "queues"];

fn parse(args: &[String]) -> Result<Parsed, String> {
    // `--help` / `--version` anywhere (`build --help` too) win over everything else.
    if args.iter().any(|a| matches!(a.as_str(), "--help" | "-h"))
        || args.first().is_some_and(|a| a == "help")
    {
        return Ok(Parsed::Help);
    }
    if args
        .iter()
        .any(|a| matches!(a.as_str(), "--version" | "-V"))
    {
        return Ok(Parsed::Version);
    }
    let mut a = args.iter().cloned();
    let mode = a.next().ok_or(USAGE)?;
    if !MODES.contains(&mode.as_str()) {
        return Err(format!(
            "unknown mode {mode} ({}); {USAGE}",
            MODES.join(", ")
        ));
    }
    let mut o = Opts {
        mode,
        gpu: 0,
        iters: 2048,
        writes: 512,
        size: 64,
    };
    while let Some(flag) = a.next() {
        let v = a.next().ok_or(format!("{flag} needs a value"))?;
        let n: u64 = v.parse().map_err(|_| format!("{flag} {v}: not a number"))?;
        match flag.as_str() {
            "--gpu" => o.gpu = n as usize,
            "--iters" => o.iters = n as u32,
            "--writes" => o.writes = n as u32,
            "--size" => o.size = n as u32,
            _ => return Err(format!("unknown option {flag}")),
        }
    }
    if !(1..=1024).contains(&o.writes) {
        return Err("--writes must be 1..=1024 (one block)".into());
    }
    Ok(Parsed::Run(o))
}

fn cuda_homes() -> Vec<PathBuf> {
    ["CUDA_HOME", "CUDA_PATH"]
        .iter()
        .filter_map(|v| std::env::var_os(v).map(PathBuf::from))
        .collect()
}

fn build(l: &k::Loaded) -> bool {
    let cases = [
        // 512 WQEs, one thread each, into a 1024-entry ring.
        BuildCase {
            sq_size: 1024,
            qpn: 0x1c3,
            first: 0,
            n: 512,
            lbase: 0x7f12_3400_0000,
            lkey: 0x12345,
            rbase: 0x7f99_0000_0000,
            rkey: 0x6789a,
            size: 4096,
        },
        // The ring and the 16-bit WQE counter both wrap.
        BuildCase {
            sq_size: 512,
            qpn: 0xabcdef,
            first: 0xff00,
            n: 512,
            lbase: 0xffff_ffff_0000_0000,
            lkey: 0xffff_ffff,
            rbase: 1,
            rkey: 0x8000_0001,
            size: 64,
        },
        // Fewer WQEs than slots: the rest of the ring must stay untouched.
        BuildCase {
            sq_size: 256,
            qpn: 7,
            first: 200,
            n: 100,
            lbase: 0,
            lkey: 0,
            rbase: 0xdead_beef_cafe_f00d,
            rkey: 0,
            size: 0x7fff_ffff,
        },
    ];
    let mut ok = true;
    for c in &cases {
        match k::build_on_gpu(l, c) {
            Ok(got) => match k::first_difference(&got, &c.expected_ring()) {
                None => println!(
                    "build: {} WQEs (counters {}.., ring {}) built by the GPU are identical to the Rust builder's",
                    c.n, c.first, c.sq_size
                ),
                Some(d) => {
                    println!(
                        "build: MISMATCH (counters {}.., ring {}): {d}",
                        c.first, c.sq_size
                    );
                    ok = false;
                }
            },
            Err(e) => {
                println!("build: could not run: {e}");
                ok = false;
            }
        }
    }
    ok
}

fn stats(ns: &[u64]) -> String {
    if ns.is_empty() {
        return "n 0".into();
    }
    let mut v = ns.to_vec();
    let med = median(&mut v);
    format!(
        "n {}, median {:.2} us, min {:.2} us, max {:.2} us",
        v.len(),
        med / 1000.0,
        v[0] as f64 / 1000.0,
        v[v.len() - 1] as f64 / 1000.0
    )
}

/// Sorts `v` (callers print its ends as min and max) and gives its median
/// (`gpudoctor::stats::median`, the one the reports use); NaN when empty.
fn median(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    let f: Vec<f64> = v.iter().map(|x| *x as f64).collect();
    gpudoctor::stats::median(&f).unwrap_or(f64::NAN)
}

fn cycle_stats(c: &[u64]) -> String {
    if c.is_empty() {
        return "n 0".into();
    }
    let mut v = c.to_vec();
    let m = median(&mut v);
    format!("median {m:.0}, min {}, max {}", v[0], v[v.len() - 1])
}

/// The emulated cases: each name, its plan (from `base`, sized by `o`) and the status the
/// kernel must end with (0 all completions seen, 1 an error CQE, 2 timed out).
fn emu_cases(o: &Opts) -> [(&'static str, EmuPlan, u32); 10] {
    let sq_size = o.writes.next_power_of_two().max(2) * 2;
    let base = EmuPlan {
        handler: EmuHandler::Gpu,
        fence: Fence::Leader,
        writes_per_iter: o.writes,
        iterations: o.iters,
        size: o.size,
        sq_size,
        // As deep as the SQ: after an error every outstanding WQE completes with a flush
        // error CQE, and a shallower CQ would overrun (the stand-in reports that).
        cq_size: sq_size,
        bad_rkey_at: None,
        timeout: Duration::from_secs(5),
        launches: 1,
    };
    [
        ("gpu handler, barrier + one fence", base.clone(), 0u32),
        (
            "gpu handler, 4 launches carrying the WQE counter and CQ index (as the live path's sizes)",
            EmuPlan {
                iterations: (o.iters / 4).max(1),
                launches: 4,
                ..base.clone()
            },
            0,
        ),
        (
            "cpu-proxy handler, 4 launches carrying the WQE counter and CQ index",
            EmuPlan {
                handler: EmuHandler::CpuProxy,
                iterations: (o.iters / 4).max(1),
                launches: 4,
                ..base.clone()
            },
            0,
        ),
        (
            "gpu handler, barrier + acq_rel.sys fence",
            EmuPlan {
                fence: Fence::LeaderRelease,
                ..base.clone()
            },
            0,
        ),
        (
            "cpu-proxy handler, barrier + acq_rel.sys fence",
            EmuPlan {
                handler: EmuHandler::CpuProxy,
                fence: Fence::LeaderRelease,
                ..base.clone()
            },
            0,
        ),
        (
            "gpu handler, fence in every thread",
            EmuPlan {
                fence: Fence::PerThread,
                ..base.clone()
            },
            0,
        ),
        (
            "cpu-proxy handler, barrier + one fence",
            EmuPlan {
                handler: EmuHandler::CpuProxy,
                ..base.clone()
            },
            0,
        ),
        (
            "cpu-proxy handler, fence in every thread",
            EmuPlan {
                handler: EmuHandler::CpuProxy,
                fence: Fence::PerThread,
                ..base.clone()
            },
            0,
        ),
        (
            "error path (bad rkey on WQE 700)",
            EmuPlan {
                bad_rkey_at: Some(700),
                ..base.clone()
            },
            1,
        ),
        (
            "nobody rings (bounded wait)",
            EmuPlan {
                handler: EmuHandler::Nobody,
                iterations: 2,
                timeout: Duration::from_millis(200),
                ..base.clone()
            },
            2,
        ),
    ]
}

/// Run one emulated case and print what happened: whether it ended as `want` says, with
/// the data and completion times right and no protocol violation.
fn emu_case(l: &k::Loaded, name: &str, plan: &EmuPlan, want: u32) -> bool {
    match harness::emulate(l, plan) {
        Ok(out) => {
            let r = out.result;
            let outcome = match r.status {
                0 => "all completions seen".to_string(),
                1 => format!(
                    "error CQE for WQE {}: {}",
                    r.wqe_counter,
                    gpudoctor::rdma::mlx5::wqe::Syndrome::from_u8(r.syndrome as u8)
                ),
                2 => format!(
                    "timed out waiting for WQE {} (stopped, not hung)",
                    r.wqe_counter
                ),
                s => format!("unknown status {s}"),
            };
            let data = if r.status == 0 {
                match (out.data_ok, out.timeline_ok) {
                    (true, true) => ", data verified, completion times rising",
                    (false, _) => ", DATA MISMATCH",
                    (true, false) => ", data verified, COMPLETION TIMES OUT OF ORDER",
                }
            } else {
                ""
            };
            let total = u64::from(plan.iterations) * u64::from(plan.launches.max(1));
            println!(
                "emulate [EMULATED NIC] {name}: {} of {} iterations ({} launch(es)) x {} writes of {} B, {outcome}{data}; \
                 stand-in consumed {} WQEs, wrote {} CQEs; kernel {:.1} ms; posting time per iteration \
                 (%globaltimer): {}; in SM cycles (clock64): {}",
                out.iterations_done,
                total,
                out.launches_done,
                plan.writes_per_iter,
                plan.size,
                out.consumed,
                out.cqes,
                out.wall.as_secs_f64() * 1000.0,
                stats(&out.post_ns),
                cycle_stats(&out.post_cycles)
            );
            for v in &out.violations {
                println!("  protocol violation seen by the stand-in: {v}");
            }
            let good = r.status == want
                && out.violations.is_empty()
                && (want != 0 || (out.data_ok && out.timeline_ok && out.iterations_done == total));
            if !good {
                println!("  UNEXPECTED: wanted status {want}");
                return false;
            }
        }
        Err(e) => {
            println!("emulate {name}: could not run: {e}");
            return false;
        }
    }
    true
}

/// Every emulated case in turn (EMULATED: no adapter is involved); whether each ended as
/// expected.
fn emulate(l: &k::Loaded, o: &Opts) -> bool {
    let mut ok = true;
    for (name, plan, want) in emu_cases(o) {
        ok &= emu_case(l, name, &plan, want);
    }
    println!(
        "(seed figure for comparison: DOCA GPUNetIO write_bw posts 512 writes in ~4 us; goal <= 2.0 us median)"
    );
    ok
}

/// The posting cost alone (no consumer, no completion wait) for each SQ placement and fence,
/// three runs each: what decides where the live path puts its SQ and how it fences.
fn bench(l: &k::Loaded, o: &Opts) -> bool {
    let mut ok = true;
    println!(
        "bench: posting only ({} iterations x {} WQEs of {} B writes, one block; nothing consumes \
         the ring; the doorbell register in host memory): ns per iteration by %globaltimer",
        o.iters, o.writes, o.size
    );
    for (place, fences) in [
        (
            SqPlace::Host,
            &[Fence::PerThread, Fence::Leader, Fence::LeaderRelease][..],
        ),
        (
            SqPlace::Device,
            &[
                Fence::PerThread,
                Fence::Leader,
                Fence::LeaderRelease,
                Fence::LeaderGpuScope,
                Fence::LeaderReleaseGpuScope,
            ][..],
        ),
    ] {
        for &fence in fences {
            let mut medians = Vec::new();
            for run in 1..=3 {
                match harness::post_only(l, place, fence, o.writes, o.iters, o.size) {
                    Ok(ns) => {
                        let mut v = ns.clone();
                        let m = if v.is_empty() { 0.0 } else { median(&mut v) };
                        medians.push(m);
                        println!(
                            "bench {:<17} {:<29} run {run}: {}",
                            place.as_str(),
                            fence.as_str(),
                            stats(&ns)
                        );
                    }
                    Err(e) => {
                        println!(
                            "bench {} {}: could not run: {e}",
                            place.as_str(),
                            fence.as_str()
                        );
                        ok = false;
                    }
                }
            }
            if !medians.is_empty() {
                let m = median_f(&mut medians);
                println!(
                    "bench {:<17} {:<29} median of run medians {:.2} us ({:.2}x the 2.0 us goal, \
                     {:.2}x the seed's ~4 us)",
                    place.as_str(),
                    fence.as_str(),
                    m / 1000.0,
                    m / 2000.0,
                    m / 4000.0
                );
            }
        }
    }
    ok
}

/// The median of `v` (`gpudoctor::stats::median`); NaN when empty.
fn median_f(v: &mut [f64]) -> f64 {
    gpudoctor::stats::median(v).unwrap_or(f64::NAN)
}

/// The GPU half of the DevX path: the queue memory as level 4 lays it out, the kernel over it.
fn queues(l: &k::Loaded, o: &Opts) -> bool {
    match harness::gpu_queues_check(l, o.writes, o.iters, o.size) {
        Ok(lines) => {
            for s in lines {
                println!("queues: {s}");
            }
            println!("queues: ok (GPU side only: no NIC created, registered or read these queues)");
            true
        }
        Err(e) => {
            println!("queues: FAILED: {e}");
            false
        }
    }
}

fn main() -> ExitCode {
    // Parsed whole before CUDA is loaded: help, the version and usage errors work on a machine
    // without a GPU.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(Parsed::Help) => {
            println!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Version) => {
            println!("gpudoctor-mlx5-kernel {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Ok(Parsed::Run(o)) => o,
        Err(e) => {
            eprintln!("gpudoctor-mlx5-kernel: {e}");
            return ExitCode::from(2);
        }
    };
    let l = match k::load(o.gpu, &cuda_homes()) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("gpudoctor-mlx5-kernel: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "GPU {} ({}, {}, {})",
        o.gpu,
        l.device.name,
        l.device.bdf,
        l.device.arch()
    );
    let ok = match o.mode.as_str() {
        "build" => build(&l),
        "emulate" => emulate(&l, &o),
        "bench" => bench(&l, &o),
        "queues" => queues(&l, &o),
        m => {
            eprintln!(
                "gpudoctor-mlx5-kernel: unknown mode {m} ({})",
                MODES.join(", ")
            );
            return ExitCode::from(2);
        }
    };
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
