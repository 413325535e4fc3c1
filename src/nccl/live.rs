//! `probe nccl` on the live machine: plan the configurations from the topology, run each in
//! its own worker process (this binary, `probe nccl-worker`) with NCCL's variables set on the
//! child only, kill a worker that passes the deadline, read NCCL's debug output back from a
//! private temporary directory, and hand the report to `NcclReport::evaluate`.
//!
//! This module must not judge, and must not change this process's environment: every NCCL_*
//! variable gpudoctor sets is set on a child's command line environment.

use super::bandwidth;
use super::debuglog;
use super::library::{self, Candidate, Search};
use super::worker::{RESULT_PREFIX, STEP_PREFIX, UNIQUE_ID_PREFIX, WorkerRequest, WorkerResult};
use crate::probes::Status;
use crate::reading::Reading;
use crate::report::nccl::{
    BarInput, Collective, ConfigRun, LibraryInfo, Mode, NcclPolicy, NcclReport, PairFacts,
    PairTransport, Rate,
};
use crate::topo::Topology;
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What `probe nccl` was asked to do, resolved by the config.
#[derive(Debug, Clone)]
pub struct NcclOptions {
    pub mode: Mode,
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub iters: u32,
    pub warmup: u32,
    pub samples: u32,
    /// For each worker (one configuration).
    pub deadline: Duration,
    /// `--net`: only this RDMA device (`mlx5_0` or `mlx5_0:1`).
    pub hca: Option<String>,
    pub search: Search,
    /// NCCL_* variables in this process's environment (the workers inherit them).
    pub environment: BTreeMap<String, String>,
    pub policy: NcclPolicy,
    pub progress: bool,
}

pub const DEFAULT_MIN_BYTES: u64 = 8 << 20;
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;
/// nccl-tests' defaults: 20 timed iterations; warm-up 5 as in the recorded 2.19.6 runs.
pub const DEFAULT_ITERS: u32 = 20;
pub const DEFAULT_WARMUP: u32 = 5;
pub const DEFAULT_SAMPLES: u32 = 5;
pub const DEFAULT_DEADLINE_S: u64 = 300;

/// A worker that passed its deadline or was interrupted: the caller reports it as an error
/// (exit 2); the worker has been killed and reaped.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    #[error(
        "NCCL did not finish within {secs} s ({config}, during {step}): its worker process {pid} was killed, which frees its GPU memory"
    )]
    Deadline {
        secs: u64,
        config: String,
        step: String,
        pid: u32,
    },
    #[error(
        "interrupted by {signal} during {config} ({step}): its worker process {pid} was killed"
    )]
    Interrupted {
        signal: &'static str,
        config: String,
        step: String,
        pid: u32,
    },
    #[error("could not start the NCCL worker ({0})")]
    Spawn(String),
}

/// Facts about every ordered GPU pair, as level 1's p2p probe plans them.
pub fn pair_facts(topo: &Topology) -> Vec<PairFacts> {
    let link = |label: &str| -> Result<(u8, u8, String), String> {
        let g = topo
            .gpu(label)
            .ok_or(format!("{label}: not in the topology"))?;
        let d = topo
            .device(g.bdf)
            .ok_or(format!("{}: not in the PCI inventory", g.bdf))?;
        match (d.link.max_gen, d.link.max_width) {
            (Some(gn), Some(w)) => Ok((
                gn,
                w,
                format!("sysfs max_link_speed/max_link_width of {}", g.bdf),
            )),
            _ => Err(format!("{}: max link speed/width unreadable", g.bdf)),
        }
    };
    let m = &topo.matrix;
    let mut out = Vec::new();
    for (i, a) in m.labels.iter().enumerate() {
        for (j, b) in m.labels.iter().enumerate() {
            if i == j || topo.gpu(a).is_none() || topo.gpu(b).is_none() {
                continue;
            }
            let p = m.paths.get(i).and_then(|r| r.get(j));
            let pcie = Reading::from_result(match (link(a), link(b)) {
                (Ok(x), Ok(y)) => Ok(
                    if crate::pci::link_gbps_per_direction(x.0, x.1)
                        <= crate::pci::link_gbps_per_direction(y.0, y.1)
                    {
                        x
                    } else {
                        y
                    },
                ),
                (Err(e), _) | (_, Err(e)) => Err(e),
            });
            out.push(PairFacts {
                from: a.clone(),
                to: b.clone(),
                path: p.map(|p| p.cell()),
                nvlinks: p.and_then(|p| p.nvlinks),
                pcie,
            });
        }
    }
    out
}

/// One configuration to run.
pub(super) struct Plan {
    pub name: String,
    pub env: BTreeMap<String, String>,
    pub bar_input: BarInput,
}

pub(super) fn plans(o: &NcclOptions, topo: &Topology, report: &mut NcclReport) -> Vec<Plan> {
    match o.mode {
        Mode::Cluster => vec![Plan {
            name: "across nodes".into(),
            env: BTreeMap::new(),
            bar_input: BarInput::Net {
                expected: Reading::unknown("every node's network rate, known after the run"),
            },
        }],
        Mode::Intra => vec![Plan {
            name: "intra-node".into(),
            env: BTreeMap::new(),
            bar_input: BarInput::Intra {
                pairs: pair_facts(topo),
            },
        }],
        Mode::Net => {
            let base: BTreeMap<String, String> =
                [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1")]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
            let mut out = Vec::new();
            for nic in &topo.nics {
                for p in &nic.ports {
                    let active = p.state_kind == Some(crate::facts::PortState::Active);
                    let want = match &o.hca {
                        None => active,
                        Some(h) => {
                            *h == nic.rdma_device || *h == format!("{}:{}", nic.rdma_device, p.port)
                        }
                    };
                    if !want {
                        continue;
                    }
                    let dev = format!("{}:{}", nic.rdma_device, p.port);
                    let mut env = base.clone();
                    env.insert("NCCL_IB_HCA".into(), format!("={dev}"));
                    let expected = match p.rate_gbps {
                        Some(g) if g > 0.0 => Reading::Value(Rate {
                            bandwidth_gbps: g / 8.0,
                            basis: format!(
                                "{dev} line rate {} = {:.1} GB/s per direction (sysfs rate)",
                                p.rate.as_deref().unwrap_or("?"),
                                g / 8.0
                            ),
                        }),
                        _ => Reading::unknown(format!("{dev}: port rate unreadable")),
                    };
                    out.push(Plan {
                        name: format!("net IB {dev}"),
                        env,
                        bar_input: BarInput::Net { expected },
                    });
                }
            }
            if out.is_empty() {
                if let Some(h) = &o.hca {
                    report.notes.push(format!(
                        "--hca {h}: no such RDMA device port here; NCCL's socket transport runs instead"
                    ));
                }
                let mut env = base;
                env.insert("NCCL_NET".into(), "Socket".into());
                out.push(Plan {
                    name: "net Socket".into(),
                    env,
                    bar_input: BarInput::Net {
                        expected: Reading::unknown(
                            "the interface NCCL's socket transport uses is known only after the run",
                        ),
                    },
                });
            }
            out
        }
    }
}

/// Load libnccl here too: its version for the report and a skip that names every place
/// looked, before any worker starts. Loading runs no CUDA code.
pub(super) fn find_library(o: &NcclOptions, r: &mut NcclReport) -> Option<Option<String>> {
    let cands = library::candidates(&o.search);
    r.looked_in = cands.iter().map(Candidate::describe).collect();
    match library::load(&cands) {
        Ok(n) => {
            let code = n.version().unwrap_or(0);
            r.library = Some(LibraryInfo {
                path: n.path.clone(),
                version: library::version_text(code),
                version_code: code,
            });
            // The worker opens the same file (by path where the parent knows one).
            Some(if std::path::Path::new(&n.path).is_absolute() {
                Some(n.path.clone())
            } else {
                None
            })
        }
        Err(e) => {
            r.skipped = Some(e.to_string());
            None
        }
    }
}

/// Run `probe nccl`: each configuration in a worker, this binary re-executed.
pub fn run_in_node(
    o: &NcclOptions,
    topo: &Topology,
    gdr_ready: Option<(bool, String)>,
) -> Result<NcclReport, LiveError> {
    // SIGINT/SIGTERM are polled (`run_one` kills its worker and reports), not fatal at once:
    // a worker left behind would keep the GPUs.
    crate::signals::install();
    let mut r = NcclReport::new(o.mode, o.policy.clone());
    r.environment = o.environment.clone();
    r.gdr_ready = gdr_ready;
    let Some(lib) = find_library(o, &mut r) else {
        r.evaluate();
        return Ok(r);
    };
    let mut gpus: Vec<(String, String)> = topo
        .gpus
        .iter()
        .map(|g| (g.label.clone(), g.bdf.to_string()))
        .collect();
    gpus.sort_by(|a, b| a.1.cmp(&b.1));
    if gpus.len() < 2 {
        r.skipped = Some(format!(
            "NCCL collectives need two GPUs; the topology has {}",
            gpus.len()
        ));
        r.evaluate();
        return Ok(r);
    }
    let user_debug_file = o.environment.get("NCCL_DEBUG_FILE").cloned();
    if let Some(f) = &user_debug_file {
        r.notes.push(format!(
            "NCCL_DEBUG_FILE is set ({f}): left as it is (NCCL_DEBUG too), so NCCL's transports were not read"
        ));
    } else if let Some(d) = o.environment.get("NCCL_DEBUG") {
        r.notes.push(format!(
            "NCCL_DEBUG={d} is set: gpudoctor's workers run with NCCL_DEBUG=INFO into their own file to read NCCL's transports"
        ));
    }
    let sizes = bandwidth::sweep(o.min_bytes, o.max_bytes);
    for plan in plans(o, topo, &mut r) {
        let req = WorkerRequest {
            library: lib.clone(),
            gpus: gpus.clone(),
            sizes: sizes.clone(),
            collectives: vec![Collective::AllReduce, Collective::AllGather],
            warmup: o.warmup,
            iters: o.iters,
            samples: o.samples,
            mode: o.mode,
            policy: o.policy.clone(),
            bar_input: plan.bar_input.clone(),
            cluster: None,
            discover: false,
        };
        let labels: BTreeMap<u32, (String, Option<String>)> = gpus
            .iter()
            .enumerate()
            .map(|(i, g)| (i as u32, (g.0.clone(), Some(g.0.clone()))))
            .collect();
        let run = run_one(
            o,
            topo,
            &plan,
            &req,
            user_debug_file.is_some(),
            &labels,
            None,
        )?;
        if r.gpus.is_empty() {
            r.gpus = run.1;
        }
        r.runs.push(run.0);
    }
    r.evaluate();
    Ok(r)
}

/// NCCL rank -> (the label shown, the topology label where the GPU is this process's).
pub(super) type Labels = BTreeMap<u32, (String, Option<String>)>;
/// Called once with the unique id rank 0's worker printed (hex); an error kills the worker.
pub(super) type UniqueIdHook<'a> = &'a mut dyn FnMut(&str) -> Result<(), String>;

/// One worker run: its result, its GPUs, and NCCL's debug output parsed.
pub(super) type OneRun = (
    ConfigRun,
    Vec<crate::report::nccl::NcclGpu>,
    Option<debuglog::DebugLog>,
);

/// Start this binary as `probe nccl-worker` with the plan's NCCL variables (and, unless the
/// user's own debug file is kept, NCCL's debug output into `tmp`), and hand it the request.
fn spawn_worker(
    plan: &Plan,
    req: &WorkerRequest,
    keep_user_debug: bool,
    tmp: &tempfile::TempDir,
) -> Result<std::process::Child, LiveError> {
    let exe = std::env::current_exe().map_err(|e| LiveError::Spawn(e.to_string()))?;
    let mut cmd = Command::new(&exe);
    cmd.args(["probe", "nccl-worker"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &plan.env {
        cmd.env(k, v);
    }
    if !keep_user_debug {
        cmd.env("NCCL_DEBUG", "INFO");
        cmd.env("NCCL_DEBUG_FILE", tmp.path().join("nccl.%p.log"));
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| LiveError::Spawn(format!("{}: {e}", exe.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(serde_json::to_string(req).unwrap_or_default().as_bytes());
    }
    Ok(child)
}

/// What a worker says as it runs, read by threads off its stdout and stderr.
struct WorkerOutput {
    /// The step it last announced.
    step: Arc<Mutex<String>>,
    /// Its result line (JSON), once printed.
    result: Arc<Mutex<Option<String>>>,
    /// The unique id it printed (hex), until taken.
    unique_id: Arc<Mutex<Option<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    err_reader: Option<std::thread::JoinHandle<String>>,
}

impl WorkerOutput {
    /// Start reading the child's stdout (steps, unique id, result) and stderr (kept whole).
    fn watch(child: &mut std::process::Child) -> WorkerOutput {
        let step = Arc::new(Mutex::new("starting".to_string()));
        let result: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let unique_id: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let reader = child.stdout.take().map(|so| {
            let (step, result, unique_id) = (step.clone(), result.clone(), unique_id.clone());
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(so).lines().map_while(Result::ok) {
                    if let Some(u) = line.strip_prefix(UNIQUE_ID_PREFIX) {
                        if let Ok(mut g) = unique_id.lock() {
                            *g = Some(u.trim().to_string());
                        }
                    } else if let Some(s) = line.strip_prefix(STEP_PREFIX) {
                        if let Ok(mut g) = step.lock() {
                            *g = s.to_string();
                        }
                    } else if let Some(j) = line.strip_prefix(RESULT_PREFIX)
                        && let Ok(mut g) = result.lock()
                    {
                        *g = Some(j.to_string());
                    }
                }
            })
        });
        let err_reader = child.stderr.take().map(|se| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut std::io::BufReader::new(se), &mut s);
                s
            })
        });
        WorkerOutput {
            step,
            result,
            unique_id,
            reader,
            err_reader,
        }
    }

    /// After the worker ended: wait for both readers; its result, or why there is none (with
    /// the last lines of its stderr).
    fn finish(self, status: &Result<std::process::ExitStatus, String>) -> WorkerResult {
        if let Some(h) = self.reader {
            let _ = h.join();
        }
        let stderr = self
            .err_reader
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let parsed: Result<WorkerResult, String> =
            match self.result.lock().ok().and_then(|g| g.clone()) {
                Some(j) => {
                    serde_json::from_str(&j).map_err(|e| format!("worker result unreadable: {e}"))
                }
                None => {
                    let tail: String = stderr
                        .lines()
                        .rev()
                        .take(5)
                        .collect::<Vec<_>>()
                        .into_iter()
                        .rev()
                        .collect::<Vec<_>>()
                        .join(" | ");
                    Err(format!(
                        "the worker ended ({}) without a result{}",
                        match status {
                            Ok(s) => s.to_string(),
                            Err(e) => e.clone(),
                        },
                        if tail.is_empty() {
                            String::new()
                        } else {
                            format!("; its last words: {tail}")
                        }
                    ))
                }
            };
        parsed.unwrap_or_else(|e| WorkerResult {
            error: Some(e),
            ..Default::default()
        })
    }
}

/// Poll the worker every 50 ms until it ends: show its step (with `--progress`), forward its
/// unique id once, and kill and reap it when interrupted, past the deadline, or when the id
/// could not be handed out. Its exit status (or why none could be read).
fn supervise(
    o: &NcclOptions,
    plan: &Plan,
    child: &mut std::process::Child,
    out: &WorkerOutput,
    mut on_unique_id: Option<UniqueIdHook>,
) -> Result<Result<std::process::ExitStatus, String>, LiveError> {
    let pid = child.id();
    let start = Instant::now();
    let mut last_progress = String::new();
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break Ok(st),
            Ok(None) => {}
            Err(e) => break Err(e.to_string()),
        }
        let now = out.step.lock().map(|s| s.clone()).unwrap_or_default();
        if o.progress {
            let line = format!("gpudoctor: nccl {}: {now}", plan.name);
            if line != last_progress {
                let _ = write!(std::io::stderr(), "\r\x1b[2K{line}");
                last_progress = line;
            }
        }
        let killed = |child: &mut std::process::Child| {
            let _ = child.kill();
            let _ = child.wait();
            if o.progress {
                let _ = write!(std::io::stderr(), "\r\x1b[2K");
            }
        };
        if let Some(hook) = on_unique_id.as_mut()
            && let Some(u) = out.unique_id.lock().ok().and_then(|mut g| g.take())
        {
            let forwarded = hook(&u);
            on_unique_id = None;
            if let Err(e) = forwarded {
                killed(child);
                return Err(LiveError::Spawn(format!(
                    "the unique id could not be handed out ({e}): worker {pid} killed"
                )));
            }
        }
        if crate::signals::interrupted() {
            killed(child);
            return Err(LiveError::Interrupted {
                signal: crate::signals::which(),
                config: plan.name.clone(),
                step: now,
                pid,
            });
        }
        if start.elapsed() > o.deadline {
            killed(child);
            return Err(LiveError::Deadline {
                secs: o.deadline.as_secs(),
                config: plan.name.clone(),
                step: now,
                pid,
            });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if o.progress && !last_progress.is_empty() {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
    Ok(status)
}

/// NCCL's debug output: every file the worker wrote into the private directory `tmp`, parsed,
/// and where it was read from (or why it was not).
fn read_debug_log(
    tmp: &tempfile::TempDir,
    keep_user_debug: bool,
) -> (Option<debuglog::DebugLog>, Reading<String>) {
    if keep_user_debug {
        return (
            None,
            Reading::unknown("NCCL_DEBUG_FILE is set by the environment: not read"),
        );
    }
    let mut text = String::new();
    let mut names = Vec::new();
    if let Ok(rd) = std::fs::read_dir(tmp.path()) {
        let mut files: Vec<PathBuf> = rd.filter_map(|e| e.ok()).map(|e| e.path()).collect();
        files.sort();
        for f in files {
            if let Ok(t) = std::fs::read_to_string(&f) {
                text.push_str(&t);
                names.push(
                    f.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                );
            }
        }
    }
    if names.is_empty() {
        (None, Reading::absent("NCCL wrote no debug file"))
    } else {
        (
            Some(debuglog::parse(&text)),
            Reading::Value(format!(
                "NCCL_DEBUG=INFO into a private temporary directory ({}), removed after reading",
                names.join(", ")
            )),
        )
    }
}

/// What NCCL's debug output says about a run, as the report carries it.
#[derive(Default)]
struct LogFacts {
    /// The transport between each pair of ranks, with the topology's path where both GPUs
    /// are this process's.
    transports: Vec<PairTransport>,
    networks: Vec<String>,
    socket_interfaces: Vec<String>,
    nccl_warnings: Vec<String>,
}

impl LogFacts {
    /// Read the facts off `log` (none without one), naming ranks through `labels`.
    fn of(log: Option<&debuglog::DebugLog>, topo: &Topology, labels: &Labels) -> LogFacts {
        let Some(l) = log else {
            return LogFacts::default();
        };
        let label_of = |rank: u32| {
            labels
                .get(&rank)
                .map(|g| g.0.clone())
                .unwrap_or_else(|| format!("rank{rank}"))
        };
        let local_of = |rank: u32| labels.get(&rank).and_then(|g| g.1.clone());
        let path_of = |a: u32, b: u32| {
            let (a, b) = (local_of(a)?, local_of(b)?);
            let m = &topo.matrix;
            let i = m.labels.iter().position(|l| *l == a)?;
            let j = m.labels.iter().position(|l| *l == b)?;
            m.paths.get(i).and_then(|r| r.get(j)).map(|p| p.cell())
        };
        let mut transports = Vec::new();
        for p in debuglog::pairs(l) {
            let (from, to) = (label_of(p.from_rank), label_of(p.to_rank));
            transports.push(PairTransport {
                path: path_of(p.from_rank, p.to_rank),
                from,
                to,
                via: p.via,
            });
        }
        LogFacts {
            transports,
            networks: l.networks.iter().cloned().collect(),
            socket_interfaces: l.socket_interfaces.iter().cloned().collect(),
            nccl_warnings: l.warnings.clone(),
        }
    }
}

/// Run one configuration in its own worker process, under the deadline, and read back its
/// result and NCCL's debug output.
pub(super) fn run_one(
    o: &NcclOptions,
    topo: &Topology,
    plan: &Plan,
    req: &WorkerRequest,
    keep_user_debug: bool,
    labels: &Labels,
    on_unique_id: Option<UniqueIdHook>,
) -> Result<OneRun, LiveError> {
    let tmp = tempfile::Builder::new()
        .prefix("gpudoctor-nccl.")
        .tempdir()
        .map_err(|e| LiveError::Spawn(format!("a private temporary directory: {e}")))?;
    let mut child = spawn_worker(plan, req, keep_user_debug, &tmp)?;
    let out = WorkerOutput::watch(&mut child);
    let status = supervise(o, plan, &mut child, &out, on_unique_id)?;
    let wr = out.finish(&status);
    let (log, debug_log) = read_debug_log(&tmp, keep_user_debug);
    let facts = LogFacts::of(log.as_ref(), topo, labels);
    let mut expected = wr
        .expected
        .clone()
        .unwrap_or_else(|| report_expected(&plan.bar_input));
    // The socket transport: its interface's speed, now that NCCL has named it.
    if o.mode == Mode::Net && plan.env.get("NCCL_NET").map(String::as_str) == Some("Socket") {
        expected = Reading::from_result(socket_rate(&facts.socket_interfaces));
    }
    Ok((
        ConfigRun {
            name: plan.name.clone(),
            mode: o.mode,
            nccl_env: plan.env.clone(),
            bar_input: plan.bar_input.clone(),
            expected,
            collectives: wr.collectives,
            transports: facts.transports,
            networks: facts.networks,
            socket_interfaces: facts.socket_interfaces,
            debug_log,
            nccl_warnings: facts.nccl_warnings,
            findings: Vec::new(),
            skipped: wr.skipped,
            error: wr.error,
            status: Status::Unknown,
        },
        wr.gpus,
        log,
    ))
}

fn report_expected(b: &BarInput) -> Reading<Rate> {
    super::evaluate::expected(b, None)
}

/// The speed of the interface NCCL's socket transport used (sysfs `speed`, Mb/s).
pub(super) fn socket_rate(ifs: &[String]) -> Result<Rate, String> {
    let [i] = ifs else {
        return Err(format!(
            "the socket transport used {} interfaces ({}): no single line rate",
            ifs.len(),
            ifs.join(", ")
        ));
    };
    let sr = crate::sysroot::SysRoot::live();
    let s = sr
        .read_text(&format!("/sys/class/net/{i}/speed"))
        .map_err(|e| format!("{i}: speed unreadable ({e})"))?;
    match s.trim().parse::<i64>() {
        Ok(mbps) if mbps > 0 => Ok(Rate {
            bandwidth_gbps: mbps as f64 / 8000.0,
            basis: format!(
                "{i} speed {mbps} Mb/s = {:.2} GB/s (sysfs)",
                mbps as f64 / 8000.0
            ),
        }),
        _ => Err(format!(
            "{i}: no link speed (sysfs speed reads '{}'; virtual interfaces have none)",
            s.trim()
        )),
    }
}
