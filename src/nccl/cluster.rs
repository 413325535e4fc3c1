//! `probe nccl --ranks`: one NCCL communicator over processes that a launcher (srun, torchrun,
//! a Kubernetes indexed Job) started on several nodes.
//!
//! Every process: find libnccl (loading runs no CUDA), ask a discovery worker which GPUs CUDA
//! shows it, and pick its own (the GPU of its local rank where the launcher starts one process
//! per GPU, else all it sees). Rank 0 listens; the others join through `rendezvous` and send
//! what they have (host, node, GPUs, NCCL version, NCCL_* variables). Rank 0 waits a bounded
//! time for everyone, refuses mismatched NCCL versions, numbers the NCCL ranks (prefix sums of
//! GPUs per process) and sends each process its plan. Per configuration, rank 0's worker makes
//! the unique id (ncclGetUniqueId starts NCCL's bootstrap root, which must live in the process
//! that joins the communicator and die with it; so the worker makes it, never this process),
//! the parent forwards it, and every process's worker joins with ncclCommInitRank. Each
//! process sends back its own samples and the transports its debug output named; rank 0
//! merges one report (`evaluate::merge_cluster`) and tells every process how it ended.
//!
//! This module must not judge (the report does) and must not load NCCL into this process
//! beyond reading its version; every worker runs under the deadline of `live::run_one`.

use super::evaluate::RankPart;
use super::launcher::Ranks;
use super::live::{self, Labels, NcclOptions, Plan};
use super::rendezvous::{self, Channel, Joined, Msg, RendezvousError};
use super::worker::{RESULT_PREFIX, WorkerCluster, WorkerRequest, WorkerResult};
use super::{bandwidth, debuglog};
use crate::probes::Status;
use crate::reading::Reading;
use crate::report::nccl::{LibraryInfo, NcclGpu, NcclReport, NicUse, ProcessInfo, Rate};
use crate::topo::Topology;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How the processes find each other.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    pub ranks: Ranks,
    /// Shared secret (never sent); empty only for a world of one.
    pub token: String,
    /// How long rank 0 waits for every rank, and the others for rank 0.
    pub wait: Duration,
}

pub const DEFAULT_WAIT_S: u64 = 120;
/// Bound on one connection's handshake (a silent peer is dropped when it passes).
const HANDSHAKE: Duration = Duration::from_secs(10);
/// Bound on the discovery worker (CUDA init and the device list).
const DISCOVERY: Duration = Duration::from_secs(60);
/// After its own worker, how long rank 0 waits for a process's results beyond the deadline.
const RESULTS_GRACE: Duration = Duration::from_secs(30);

/// How a run across nodes ended for this process.
#[derive(Debug)]
pub enum ClusterOutcome {
    /// Rank 0: the merged report, and the one error line when the run could not complete
    /// (exit 2).
    Report {
        report: Box<NcclReport>,
        error: Option<String>,
    },
    /// Any other rank: rank 0's verdict (`status`) and the line to print.
    Reported { status: String, line: String },
}

/// What a process brings to the rendezvous.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinInfo {
    pub rank: u32,
    pub world_size: u32,
    pub local_rank: u32,
    pub host: String,
    pub node: String,
    /// The GPUs it will drive, in order (`rank` is the CUDA ordinal until assigned).
    pub gpus: Vec<NcclGpu>,
    pub library: Option<LibraryInfo>,
    pub skipped: Option<String>,
    pub nccl_env: BTreeMap<String, String>,
    pub gpudoctor_version: String,
    /// The source revision the binary was built from (`--version`'s; see build.rs); empty in
    /// reports written before it was recorded.
    #[serde(default)]
    pub gpudoctor_revision: String,
}

/// What rank 0 sends each process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PlanMsg {
    pub nranks: u32,
    pub first_rank: u32,
    /// NCCL rank -> `NODE:GPU<N>`.
    pub labels: BTreeMap<u32, String>,
    /// Configurations: name and the NCCL variables set on the workers.
    pub configs: Vec<(String, BTreeMap<String, String>)>,
    pub sizes: Vec<u64>,
    pub warmup: u32,
    pub iters: u32,
    pub samples: u32,
    pub deadline_s: u64,
    /// Every process's skip reason, if any: then nothing runs.
    pub skipped: Option<String>,
}

/// A joining rank is one of 1..world, with the same world size (pure).
pub fn admit(info: &JoinInfo, world: u32) -> Result<u32, String> {
    if info.world_size != world {
        return Err(format!(
            "rank {} ({}) says the world has {} processes, rank 0 says {world}",
            info.rank, info.host, info.world_size
        ));
    }
    if info.rank == 0 || info.rank >= world {
        return Err(format!("rank {} is not in 1..{world}", info.rank));
    }
    Ok(info.rank)
}

/// Every process's NCCL version must be the same (pure): the error names host and version of
/// each.
pub fn same_versions(infos: &[JoinInfo]) -> Result<(), String> {
    let codes: std::collections::BTreeSet<i32> = infos
        .iter()
        .filter_map(|i| i.library.as_ref().map(|l| l.version_code))
        .collect();
    if codes.len() <= 1 {
        return Ok(());
    }
    let each: Vec<String> = infos
        .iter()
        .map(|i| {
            format!(
                "rank {} ({}) {}",
                i.rank,
                i.host,
                i.library
                    .as_ref()
                    .map_or("no libnccl".to_string(), |l| format!("NCCL {}", l.version))
            )
        })
        .collect();
    Err(format!(
        "the processes load different NCCL versions, which cannot form one communicator: {}",
        each.join(", ")
    ))
}

/// NCCL ranks: prefix sums of GPUs per process, in process-rank order (pure). `infos` sorted.
pub fn first_ranks(infos: &[JoinInfo]) -> (Vec<u32>, u32) {
    let mut out = Vec::new();
    let mut next = 0u32;
    for i in infos {
        out.push(next);
        next += i.gpus.len() as u32;
    }
    (out, next)
}

fn hostname() -> String {
    crate::sysroot::SysRoot::live()
        .read_text("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_string())
}

/// The discovery worker: the CUDA devices this process sees, or why none.
fn discover(o: &NcclOptions) -> Result<Vec<NcclGpu>, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let req = WorkerRequest {
        library: None,
        gpus: Vec::new(),
        sizes: Vec::new(),
        collectives: Vec::new(),
        warmup: 0,
        iters: 0,
        samples: 0,
        mode: o.mode,
        policy: o.policy.clone(),
        bar_input: crate::report::nccl::BarInput::Net {
            expected: Reading::unknown("discovery"),
        },
        cluster: None,
        discover: true,
    };
    let mut child = Command::new(&exe)
        .args(["probe", "nccl-worker"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not start the discovery worker: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        let _ = i.write_all(serde_json::to_string(&req).unwrap_or_default().as_bytes());
    }
    let out = child.stdout.take().map(|mut so| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = so.read_to_string(&mut s);
            s
        })
    });
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() < DISCOVERY && !crate::signals::interrupted() => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "listing the CUDA devices did not finish within {} s (worker killed)",
                    DISCOVERY.as_secs()
                ));
            }
        }
    }
    let text = out.and_then(|h| h.join().ok()).unwrap_or_default();
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix(RESULT_PREFIX))
        .ok_or("the discovery worker ended without a result")?;
    let r: WorkerResult = serde_json::from_str(line).map_err(|e| e.to_string())?;
    if let Some(s) = r.skipped {
        return Err(s);
    }
    if let Some(e) = r.error {
        return Err(e);
    }
    Ok(r.gpus)
}

/// This process's GPUs: one per process (its local rank) or all it sees; labelled as the
/// topology labels them.
fn pick_gpus(
    ranks: &Ranks,
    label_of: &dyn Fn(&str) -> Option<String>,
    mut seen: Vec<NcclGpu>,
) -> Result<Vec<NcclGpu>, String> {
    seen.sort_by_key(|g| g.cuda_ordinal);
    for g in &mut seen {
        g.label = label_of(&g.bdf).unwrap_or_else(|| format!("CUDA{}", g.cuda_ordinal));
    }
    if seen.is_empty() {
        return Err("CUDA shows this process no GPU".into());
    }
    if !ranks.one_per_gpu() {
        return Ok(seen);
    }
    // One process per GPU: a launcher that binds each task to its GPU leaves one visible.
    if seen.len() == 1 {
        return Ok(seen);
    }
    let n = seen.len();
    seen.into_iter()
        .nth(ranks.local_rank as usize)
        .map(|g| vec![g])
        .ok_or(format!(
            "local rank {} of {} but CUDA shows this process {n} GPU(s)",
            ranks.local_rank, ranks.local_world_size
        ))
}

/// NICs this process's NET channels went through, with their rates (IB/RoCE: the port's sysfs
/// rate; socket: the interface's speed).
fn nic_uses(log: &debuglog::DebugLog, mine: &[u32], topo: &Topology) -> BTreeMap<String, NicUse> {
    let mut out: BTreeMap<String, NicUse> = BTreeMap::new();
    let mut seen = std::collections::BTreeSet::new();
    for c in &log.channels {
        if c.kind != debuglog::TransportKind::Net || !mine.contains(&c.from_rank) {
            continue;
        }
        if !seen.insert((c.channel, c.from_rank, c.to_rank, c.via.clone())) {
            continue;
        }
        let names: Vec<String> = match c.net.as_deref() {
            Some("IB") => {
                let idx = c.via.split('/').nth(2).and_then(|i| i.parse::<u32>().ok());
                vec![
                    idx.and_then(|i| log.ib_devices.get(&i).cloned())
                        .unwrap_or_else(|| {
                            format!(
                                "NET/IB device {}",
                                idx.map_or("?".into(), |i| i.to_string())
                            )
                        }),
                ]
            }
            Some("Socket") => log
                .socket_interfaces
                .iter()
                .map(|i| format!("socket {i}"))
                .collect(),
            other => vec![format!("NET/{}", other.unwrap_or("?"))],
        };
        for n in names {
            let rate = Reading::from_result(nic_rate(&n, topo));
            out.entry(n)
                .or_insert(NicUse { channels: 0, rate })
                .channels += 1;
        }
    }
    out
}

fn nic_rate(name: &str, topo: &Topology) -> Result<Rate, String> {
    if let Some(i) = name.strip_prefix("socket ") {
        return live::socket_rate(&[i.to_string()]);
    }
    let (dev, port) = name
        .split_once(':')
        .ok_or(format!("{name}: no port named"))?;
    let port: u32 = port.parse().map_err(|_| format!("{name}: no port named"))?;
    let p = topo
        .nics
        .iter()
        .filter(|n| n.rdma_device == dev)
        .flat_map(|n| n.ports.iter())
        .find(|p| p.port == port)
        .ok_or(format!("{name}: not in this node's topology"))?;
    match p.rate_gbps {
        Some(g) if g > 0.0 => Ok(Rate {
            bandwidth_gbps: g / 8.0,
            basis: format!(
                "{name} line rate {} = {:.1} GB/s per direction (sysfs rate)",
                p.rate.as_deref().unwrap_or("?"),
                g / 8.0
            ),
        }),
        _ => Err(format!("{name}: port rate unreadable")),
    }
}

/// Run one configuration's worker for this process and turn it into its part.
#[allow(clippy::too_many_arguments)]
fn run_part(
    o: &NcclOptions,
    topo: &Topology,
    me: &JoinInfo,
    plan: &PlanMsg,
    config: usize,
    lib: &Option<String>,
    unique_id: Option<String>,
    keep_user_debug: bool,
    on_unique_id: Option<live::UniqueIdHook>,
) -> RankPart {
    let (name, env) = plan.configs[config].clone();
    let run_plan = Plan {
        name: name.clone(),
        env,
        bar_input: crate::report::nccl::BarInput::Net {
            expected: Reading::unknown("every node's network rate, known after the run"),
        },
    };
    let req = WorkerRequest {
        library: lib.clone(),
        gpus: me
            .gpus
            .iter()
            .map(|g| (g.label.clone(), g.bdf.clone()))
            .collect(),
        sizes: plan.sizes.clone(),
        collectives: vec![
            crate::report::nccl::Collective::AllReduce,
            crate::report::nccl::Collective::AllGather,
        ],
        warmup: plan.warmup,
        iters: plan.iters,
        samples: plan.samples,
        mode: crate::report::nccl::Mode::Cluster,
        policy: o.policy.clone(),
        bar_input: run_plan.bar_input.clone(),
        cluster: Some(WorkerCluster {
            nranks: plan.nranks,
            first_rank: plan.first_rank,
            unique_id,
        }),
        discover: false,
    };
    let mine: Vec<u32> = (plan.first_rank..plan.first_rank + me.gpus.len() as u32).collect();
    let labels: Labels = plan
        .labels
        .iter()
        .map(|(r, l)| {
            let local = mine
                .iter()
                .position(|m| m == r)
                .and_then(|i| me.gpus.get(i))
                .map(|g| g.label.clone());
            (*r, (l.clone(), local))
        })
        .collect();
    let o = NcclOptions {
        deadline: Duration::from_secs(plan.deadline_s),
        ..o.clone()
    };
    match live::run_one(
        &o,
        topo,
        &run_plan,
        &req,
        keep_user_debug,
        &labels,
        on_unique_id,
    ) {
        Ok((run, gpus, log)) => RankPart {
            rank: me.rank,
            node: me.node.clone(),
            nics: log
                .as_ref()
                .map(|l| nic_uses(l, &mine, topo))
                .unwrap_or_default(),
            run,
            gpus,
            hung: None,
        },
        Err(e) => RankPart {
            rank: me.rank,
            node: me.node.clone(),
            run: crate::report::nccl::ConfigRun {
                name,
                mode: crate::report::nccl::Mode::Cluster,
                nccl_env: run_plan.env.clone(),
                bar_input: run_plan.bar_input.clone(),
                expected: Reading::unknown("not run"),
                collectives: Vec::new(),
                transports: Vec::new(),
                networks: Vec::new(),
                socket_interfaces: Vec::new(),
                debug_log: Reading::unknown("the worker was killed"),
                nccl_warnings: Vec::new(),
                findings: Vec::new(),
                skipped: None,
                error: None,
                status: Status::Unknown,
            },
            gpus: Vec::new(),
            nics: BTreeMap::new(),
            hung: Some(e.to_string()),
        },
    }
}

/// Run `probe nccl --ranks` as this process.
pub fn run_across_nodes(
    o: &NcclOptions,
    topo: &Topology,
    c: &ClusterOptions,
) -> Result<ClusterOutcome, RendezvousError> {
    crate::signals::install();
    let mut report = NcclReport::new(crate::report::nccl::Mode::Cluster, o.policy.clone());
    report.environment = o.environment.clone();
    let lib = live::find_library(o, &mut report);
    let host = hostname();
    let node = o
        .environment
        .get("NCCL_HOSTID")
        .filter(|h| !h.is_empty())
        .cloned()
        .unwrap_or_else(|| host.clone());
    // The discovery worker runs whether or not libnccl was found: every process reaches the
    // same stage and reports why it cannot run.
    let label_of = |bdf: &str| {
        topo.gpus
            .iter()
            .find(|t| t.bdf.to_string() == bdf)
            .map(|t| t.label.clone())
    };
    let gpus = discover(o).and_then(|seen| pick_gpus(&c.ranks, &label_of, seen));
    let skipped = report
        .skipped
        .clone()
        .or_else(|| gpus.as_ref().err().cloned());
    let me = JoinInfo {
        rank: c.ranks.rank,
        world_size: c.ranks.world_size,
        local_rank: c.ranks.local_rank,
        host: host.clone(),
        node,
        gpus: gpus.unwrap_or_default(),
        library: report.library.clone(),
        skipped,
        nccl_env: o.environment.clone(),
        gpudoctor_version: env!("CARGO_PKG_VERSION").to_string(),
        gpudoctor_revision: crate::REVISION.to_string(),
    };
    let keep_user_debug = o.environment.contains_key("NCCL_DEBUG_FILE");
    let lib_path = lib.flatten();
    if c.ranks.rank == 0 {
        rank0(o, topo, c, report, me, lib_path, keep_user_debug)
    } else {
        peer(o, topo, c, me, lib_path, keep_user_debug)
    }
}

fn peer(
    o: &NcclOptions,
    topo: &Topology,
    c: &ClusterOptions,
    me: JoinInfo,
    lib: Option<String>,
    keep_user_debug: bool,
) -> Result<ClusterOutcome, RendezvousError> {
    let mut chan = Channel::connect(&c.ranks.host, c.ranks.port, c.wait)?;
    let params =
        serde_json::to_string(&me).map_err(|e| RendezvousError::Malformed(e.to_string()))?;
    // Rank 0 answers once every rank is in: up to its own wait, started about when ours did.
    let plan_text = rendezvous::join(
        &mut chan,
        &c.token,
        &params,
        Instant::now() + HANDSHAKE,
        Instant::now() + c.wait * 2 + HANDSHAKE,
    )?;
    let plan: PlanMsg =
        serde_json::from_str(&plan_text).map_err(|e| RendezvousError::Malformed(e.to_string()))?;
    let wait_go = Duration::from_secs(plan.deadline_s) + c.wait + RESULTS_GRACE;
    loop {
        match chan.recv_by("rank 0's next step", Instant::now() + wait_go)? {
            Msg::Go { config, unique_id } => {
                if config as usize >= plan.configs.len() {
                    return Err(RendezvousError::Malformed(format!(
                        "no configuration {config}"
                    )));
                }
                let part = run_part(
                    o,
                    topo,
                    &me,
                    &plan,
                    config as usize,
                    &lib,
                    Some(unique_id),
                    keep_user_debug,
                    None,
                );
                let text = serde_json::to_string(&part)
                    .map_err(|e| RendezvousError::Malformed(e.to_string()))?;
                chan.send(&Msg::Done { config, part: text })?;
            }
            Msg::Finish { status, line } => return Ok(ClusterOutcome::Reported { status, line }),
            Msg::Refused { reason } => return Err(RendezvousError::Refused(reason)),
            other => {
                return Err(RendezvousError::Unexpected {
                    want: "go or finish",
                    got: format!("{other:?}").chars().take(200).collect(),
                });
            }
        }
    }
}

/// Tell every joined process how the run ended (best effort: one that left is past telling).
fn finish_all(joined: &mut BTreeMap<u32, Joined>, status: &str, line: &str) {
    for j in joined.values_mut() {
        let _ = j.chan.send(&Msg::Finish {
            status: status.to_string(),
            line: line.to_string(),
        });
    }
}

fn refuse_all(joined: &mut BTreeMap<u32, Joined>, reason: &str) {
    for j in joined.values_mut() {
        let _ = j.chan.send(&Msg::Refused {
            reason: reason.to_string(),
        });
    }
}

/// The processes that joined rank 0: their channels, what each brought, and, when some never
/// came, the line that names them.
struct Gathered {
    joined: BTreeMap<u32, Joined>,
    infos: BTreeMap<u32, JoinInfo>,
    missing: Option<String>,
}

/// Listen on the rendezvous port and wait (up to `c.wait`) for ranks 1..world to join; a world
/// of one gathers nobody.
fn gather_ranks(c: &ClusterOptions) -> Result<Gathered, RendezvousError> {
    let world = c.ranks.world_size;
    let mut infos: BTreeMap<u32, JoinInfo> = BTreeMap::new();
    if world <= 1 {
        return Ok(Gathered {
            joined: BTreeMap::new(),
            infos,
            missing: None,
        });
    }
    let listener = rendezvous::listen(c.ranks.port)?;
    let mut admit_fn = |p: &str| -> Result<u32, String> {
        let info: JoinInfo =
            serde_json::from_str(p).map_err(|e| format!("unreadable join: {e}"))?;
        let r = admit(&info, world)?;
        infos.entry(r).or_insert(info);
        Ok(r)
    };
    let want = world as usize - 1;
    let (joined, turned) = rendezvous::gather(
        listener,
        &c.token,
        Instant::now() + c.wait,
        HANDSHAKE,
        &mut admit_fn,
        &|n| n == want,
    );
    infos.retain(|r, _| joined.contains_key(r));
    let missing = (joined.len() < want).then(|| {
        let missing: Vec<String> = (1..world)
            .filter(|r| !joined.contains_key(r))
            .map(|r| r.to_string())
            .collect();
        let mut line = format!(
            "rank(s) {} of {world} never joined the rendezvous on port {} within {} s",
            missing.join(", "),
            c.ranks.port,
            c.wait.as_secs()
        );
        if !turned.refused.is_empty() {
            line.push_str(&format!(" (turned away: {})", turned.refused.join("; ")));
        }
        line
    });
    Ok(Gathered {
        joined,
        infos,
        missing,
    })
}

/// Number every process's GPUs as NCCL ranks (from `firsts`): the label of each rank
/// (`NODE:GPU<N>`) and each process as the report shows it.
fn number_gpus(all: &[JoinInfo], firsts: &[u32]) -> (BTreeMap<u32, String>, Vec<ProcessInfo>) {
    let mut labels = BTreeMap::new();
    let mut processes = Vec::new();
    for (info, first) in all.iter().zip(firsts) {
        let mut gpus = info.gpus.clone();
        for (i, g) in gpus.iter_mut().enumerate() {
            g.rank = first + i as u32;
            labels.insert(g.rank, format!("{}:{}", info.node, g.label));
        }
        processes.push(ProcessInfo {
            rank: info.rank,
            host: info.host.clone(),
            node: info.node.clone(),
            local_rank: info.local_rank,
            gpus,
            library: info.library.clone(),
            nccl_env: info.nccl_env.clone(),
            skipped: info.skipped.clone(),
        });
    }
    (labels, processes)
}

/// Every process's reason not to run NCCL, as `rank R (HOST): why`.
fn skip_reasons(all: &[JoinInfo]) -> Vec<String> {
    all.iter()
        .filter_map(|i| {
            i.skipped
                .as_ref()
                .map(|s| format!("rank {} ({}): {s}", i.rank, i.host))
        })
        .collect()
}

/// The plan every process shares (`first_rank` 0): the configurations to run (none when any
/// process skips), the sizes and the counts.
fn base_plan(
    o: &NcclOptions,
    topo: &Topology,
    nranks: u32,
    labels: BTreeMap<u32, String>,
    skips: &[String],
) -> PlanMsg {
    let mut dummy = NcclReport::new(o.mode, o.policy.clone());
    let configs: Vec<(String, BTreeMap<String, String>)> = live::plans(o, topo, &mut dummy)
        .into_iter()
        .map(|p| (p.name, p.env))
        .collect();
    PlanMsg {
        nranks,
        first_rank: 0,
        labels,
        configs: if skips.is_empty() {
            configs.clone()
        } else {
            Vec::new()
        },
        sizes: bandwidth::sweep(o.min_bytes, o.max_bytes),
        warmup: o.warmup,
        iters: o.iters,
        samples: o.samples,
        deadline_s: o.deadline.as_secs(),
        skipped: (!skips.is_empty()).then(|| skips.join("; ")),
    }
}

/// Welcome every joined process with its own plan (`base` from its first NCCL rank); the line
/// for the first process that could not be sent it.
fn send_plans(
    joined: &mut BTreeMap<u32, Joined>,
    all: &[JoinInfo],
    firsts: &[u32],
    base: &PlanMsg,
    token: &str,
) -> Result<(), String> {
    for (info, first) in all.iter().zip(firsts) {
        if let Some(j) = joined.get_mut(&info.rank) {
            let p = PlanMsg {
                first_rank: *first,
                ..base.clone()
            };
            let text = serde_json::to_string(&p).unwrap_or_default();
            if let Err(e) = j.welcome(token, &text) {
                return Err(format!(
                    "rank {} ({}): could not send its plan: {e}",
                    info.rank, info.host
                ));
            }
        }
    }
    Ok(())
}

/// Rank 0's own side of every configuration: what its worker runs with.
struct OwnSide<'a> {
    o: &'a NcclOptions,
    topo: &'a Topology,
    /// This process, with its GPUs numbered as NCCL ranks.
    me: JoinInfo,
    plan: PlanMsg,
    lib: &'a Option<String>,
    keep_user_debug: bool,
}

impl OwnSide<'_> {
    /// Run the `n` configurations in turn, stopping after one that cannot go on: every
    /// configuration's parts, and why the run stopped, if it did.
    fn run_configs(
        &self,
        joined: &mut BTreeMap<u32, Joined>,
        n: usize,
    ) -> (Vec<Vec<RankPart>>, Option<String>) {
        let mut parts: Vec<Vec<RankPart>> = Vec::new();
        for ci in 0..n {
            let (these, fault) = self.run_config(joined, ci);
            parts.push(these);
            if fault.is_some() {
                return (parts, fault);
            }
        }
        (parts, None)
    }

    /// Run configuration `ci` everywhere: rank 0's worker makes the unique id, which goes to
    /// every joined process, then their results come back. Rank 0's part first, then each
    /// rank's in order, and why the run cannot go on (the last fault seen), if it cannot.
    fn run_config(
        &self,
        joined: &mut BTreeMap<u32, Joined>,
        ci: usize,
    ) -> (Vec<RankPart>, Option<String>) {
        let mut sent: Result<bool, String> = Ok(false);
        let own = {
            let mut hook = |uid: &str| -> Result<(), String> {
                for (r, j) in joined.iter_mut() {
                    j.chan
                        .send(&Msg::Go {
                            config: ci as u32,
                            unique_id: uid.to_string(),
                        })
                        .map_err(|e| format!("rank {r}: {e}"))?;
                }
                sent = Ok(true);
                Ok(())
            };
            run_part(
                self.o,
                self.topo,
                &self.me,
                &self.plan,
                ci,
                self.lib,
                None,
                self.keep_user_debug,
                Some(&mut hook),
            )
        };
        let mut these = vec![own];
        if sent != Ok(true) {
            // The unique id never left: the others are still waiting for it.
            let why = these[0]
                .hung
                .clone()
                .or_else(|| these[0].run.error.clone())
                .or_else(|| these[0].run.skipped.clone())
                .unwrap_or_else(|| "rank 0's worker made no unique id".into());
            return (these, Some(format!("rank 0 ({}): {why}", self.me.host)));
        }
        let until = Instant::now() + Duration::from_secs(self.plan.deadline_s) + RESULTS_GRACE;
        let fatal = collect_parts(joined, ci, until, &mut these);
        (these, fatal)
    }
}

/// Receive every joined process's results for configuration `ci` (until `until`) onto
/// `these`; the last fault seen (a rank without results, or with someone else's), if any.
fn collect_parts(
    joined: &mut BTreeMap<u32, Joined>,
    ci: usize,
    until: Instant,
    these: &mut Vec<RankPart>,
) -> Option<String> {
    let mut fatal = None;
    for (r, j) in joined.iter_mut() {
        match j.chan.recv_by("a rank's results", until) {
            Ok(Msg::Done { config, part }) if config as usize == ci => {
                match serde_json::from_str::<RankPart>(&part) {
                    Ok(p) if p.rank == *r => these.push(p),
                    Ok(p) => fatal = Some(format!("rank {r} sent the results of rank {}", p.rank)),
                    Err(e) => fatal = Some(format!("rank {r}: unreadable results: {e}")),
                }
            }
            Ok(other) => {
                fatal = Some(format!(
                    "rank {r}: unexpected {}",
                    format!("{other:?}").chars().take(80).collect::<String>()
                ))
            }
            Err(e) => fatal = Some(format!("rank {r}: {e}")),
        }
    }
    fatal
}

/// Rank 0's report where some process cannot run NCCL (`reasons`): nothing ran, every
/// process shown.
fn skipped_report(
    mut report: NcclReport,
    launcher: &str,
    processes: Vec<ProcessInfo>,
    reasons: &str,
) -> NcclReport {
    report.skipped = Some(reasons.to_string());
    report.evaluate();
    report.cluster = None;
    let mut merged = report.clone();
    super::evaluate::merge_cluster(&mut merged, launcher, processes, &[], &[]);
    merged.skipped = Some(reasons.to_string());
    merged.evaluate();
    merged
}

/// Rank 0's report for a run that cannot complete: the report as it stands and the line.
fn stopped(report: NcclReport, line: String) -> ClusterOutcome {
    ClusterOutcome::Report {
        report: Box::new(report),
        error: Some(line),
    }
}

/// Rank 0: gather every process, send each its plan, run every configuration across them and
/// merge one report.
fn rank0(
    o: &NcclOptions,
    topo: &Topology,
    c: &ClusterOptions,
    mut report: NcclReport,
    me: JoinInfo,
    lib: Option<String>,
    keep_user_debug: bool,
) -> Result<ClusterOutcome, RendezvousError> {
    let world = c.ranks.world_size;
    let Gathered {
        mut joined,
        mut infos,
        missing,
    } = gather_ranks(c)?;
    if let Some(line) = missing {
        finish_all(&mut joined, "error", &line);
        return Ok(stopped(report, line));
    }
    infos.insert(0, me.clone());
    let all: Vec<JoinInfo> = infos.into_values().collect();
    if let Err(why) = same_versions(&all) {
        refuse_all(&mut joined, &why);
        return Ok(stopped(report, why));
    }
    let (firsts, nranks) = first_ranks(&all);
    let (labels, processes) = number_gpus(&all, &firsts);
    let skips = skip_reasons(&all);
    let base = base_plan(o, topo, nranks, labels, &skips);
    if let Err(line) = send_plans(&mut joined, &all, &firsts, &base, &c.token) {
        finish_all(&mut joined, "error", &line);
        return Ok(stopped(report, line));
    }
    if let Some(s) = &base.skipped {
        let merged = skipped_report(report, c.ranks.launcher.as_str(), processes, s);
        let line = format!(
            "SKIP: {} of {world} process(es) cannot run NCCL (rank 0 on {} printed each reason)",
            skips.len(),
            me.host
        );
        finish_all(&mut joined, "skip", &line);
        return Ok(ClusterOutcome::Report {
            report: Box::new(merged),
            error: None,
        });
    }
    let own = OwnSide {
        o,
        topo,
        me: JoinInfo {
            gpus: processes[0].gpus.clone(),
            ..me.clone()
        },
        plan: PlanMsg {
            first_rank: 0,
            ..base.clone()
        },
        lib: &lib,
        keep_user_debug,
    };
    let (parts, fatal) = own.run_configs(&mut joined, base.configs.len());
    let ran: Vec<(String, BTreeMap<String, String>)> =
        base.configs.iter().take(parts.len()).cloned().collect();
    super::evaluate::merge_cluster(
        &mut report,
        c.ranks.launcher.as_str(),
        processes,
        &ran,
        &parts,
    );
    report.evaluate();
    // A hung or failed worker on any rank, or a rank without results: the run could not
    // complete (exit 2), whatever was measured.
    let run_errors: Vec<String> = report.runs.iter().filter_map(|r| r.error.clone()).collect();
    let error = fatal.or_else(|| (!run_errors.is_empty()).then(|| run_errors.join("; ")));
    let (status, line) = match &error {
        Some(e) => ("error".to_string(), format!("NCCL across nodes: {e}")),
        None => (
            status_word(report.status),
            format!(
                "{} (rank 0 on {} printed the report)",
                status_word(report.status).to_uppercase(),
                me.host
            ),
        ),
    };
    finish_all(&mut joined, &status, &line);
    Ok(ClusterOutcome::Report {
        report: Box::new(report),
        error: error.map(|e| format!("NCCL across nodes: {e}")),
    })
}

fn status_word(s: Status) -> String {
    format!("{s:?}").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(rank: u32, host: &str, gpus: usize, version: Option<(i32, &str)>) -> JoinInfo {
        JoinInfo {
            rank,
            world_size: 3,
            local_rank: 0,
            host: host.into(),
            node: host.into(),
            gpus: (0..gpus)
                .map(|i| NcclGpu {
                    rank: i as u32,
                    label: format!("GPU{i}"),
                    bdf: format!("0000:{:02x}:00.0", i + 1),
                    cuda_ordinal: i as i32,
                    name: "H100".into(),
                    arch: "sm_90".into(),
                })
                .collect(),
            library: version.map(|(code, v)| LibraryInfo {
                path: "/x/libnccl.so.2".into(),
                version: v.into(),
                version_code: code,
            }),
            skipped: None,
            nccl_env: BTreeMap::new(),
            gpudoctor_version: "0".into(),
            gpudoctor_revision: "r".into(),
        }
    }

    #[test]
    fn admission_and_numbering() {
        assert_eq!(admit(&info(2, "b", 1, None), 3), Ok(2));
        assert!(
            admit(&info(0, "b", 1, None), 3)
                .unwrap_err()
                .contains("not in 1..3")
        );
        assert!(admit(&info(3, "b", 1, None), 3).is_err());
        let mut i = info(1, "b", 1, None);
        i.world_size = 4;
        assert!(admit(&i, 3).unwrap_err().contains("says the world has 4"));
        let all = [
            info(0, "a", 8, None),
            info(1, "b", 1, None),
            info(2, "c", 4, None),
        ];
        assert_eq!(first_ranks(&all), (vec![0, 8, 9], 13));
    }

    #[test]
    fn version_mismatch_names_each_host_and_version() {
        let ok = [
            info(0, "a", 1, Some((22809, "2.28.9"))),
            info(1, "b", 1, Some((22809, "2.28.9"))),
        ];
        assert!(same_versions(&ok).is_ok());
        let bad = [
            info(0, "a", 1, Some((22809, "2.28.9"))),
            info(1, "b", 1, Some((21903, "2.19.3"))),
        ];
        let e = same_versions(&bad).unwrap_err();
        assert!(e.contains("rank 0 (a) NCCL 2.28.9"), "{e}");
        assert!(e.contains("rank 1 (b) NCCL 2.19.3"), "{e}");
    }

    fn ranks_of(local_rank: u32, local_world: u32) -> Ranks {
        Ranks {
            launcher: super::super::launcher::Launcher::Torchrun,
            rank: 0,
            world_size: 4,
            local_rank,
            local_world_size: local_world,
            host: "h".into(),
            port: 1,
            sources: Vec::new(),
        }
    }

    #[test]
    fn gpu_choice_per_launcher_shape() {
        let topo = |_: &str| None;
        let seen = info(0, "a", 4, None).gpus;
        // One process per node: every GPU.
        assert_eq!(
            pick_gpus(&ranks_of(0, 1), &topo, seen.clone())
                .unwrap()
                .len(),
            4
        );
        // One per GPU, all visible (torchrun): the local rank's.
        let g = pick_gpus(&ranks_of(2, 4), &topo, seen.clone()).unwrap();
        assert_eq!((g.len(), g[0].cuda_ordinal), (1, 2));
        // One per GPU, each bound to its own (srun --gpus-per-task): the one it sees.
        let g = pick_gpus(&ranks_of(3, 4), &topo, seen[..1].to_vec()).unwrap();
        assert_eq!(g[0].cuda_ordinal, 0);
        assert!(pick_gpus(&ranks_of(3, 4), &topo, seen[..2].to_vec()).is_err());
        assert!(pick_gpus(&ranks_of(0, 1), &topo, Vec::new()).is_err());
    }
}
