//! The `probe nccl` report (schema `gpudoctor.nccl/1`) and its evaluation: pure functions of
//! recorded data, so a recorded run re-evaluates without a GPU.
//!
//! A collective is judged at the largest size of its sweep (smaller sizes are latency-bound
//! and reported only) against a fraction of the slowest GPU pair's link rate, with level 1's
//! rule (`crate::probes::evaluate`): below the bar twice (the second reading three times
//! longer) fails, below then above warns. NCCL's transport choice is judged against the
//! topology: NVLink between two GPUs whose channels do not go via P2P, or a GPUDirect path
//! judged ready whose NET channels run without GDRDMA, is a failure that names the NCCL_*
//! variables present (they change NCCL's choice).

use super::bandwidth::Collective;
use crate::probes::{Evaluation, Expected, Method, Status};

/// A rate a bus bandwidth is held to (before the policy's fraction), with its source.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    pub bandwidth_gbps: f64,
    pub basis: String,
}

impl From<Expected> for Rate {
    fn from(e: Expected) -> Rate {
        Rate {
            bandwidth_gbps: e.bandwidth_gbps,
            basis: e.basis,
        }
    }
}
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const NCCL_SCHEMA: &str = "gpudoctor.nccl/1";

/// Bars: fractions of the link rate the largest size's bus bandwidth must reach.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclPolicy {
    /// All-reduce inside a node: nccl-tests' all_reduce_perf measured 329.9 GB/s busbw at 1 GiB
    /// over NV18 between two H200s (fixtures/nccl-2.28.9/h200x2/p2p-allreduce.txt), 69% of
    /// 18 x 26.5625 = 478.1 GB/s, and 329 GB/s on two H100s; 55% leaves room for run-to-run
    /// spread and fails a link carrying half its rate.
    pub all_reduce_min_fraction: f64,
    /// All-gather: 271.2 GB/s busbw at 1 GiB on the same machine (p2p-allgather.txt), 57%.
    pub all_gather_min_fraction: f64,
    /// Network path (`--net`): bus bandwidth against the port's line rate (one direction).
    pub net_min_fraction: f64,
    /// Only a sweep reaching this size is judged: below it NCCL does not reach the link rate
    /// (169-299 GB/s at 8-256 MiB in the same recording).
    pub judged_min_bytes: u64,
}

impl Default for NcclPolicy {
    fn default() -> Self {
        NcclPolicy {
            all_reduce_min_fraction: 0.55,
            all_gather_min_fraction: 0.45,
            net_min_fraction: 0.70,
            judged_min_bytes: 256 << 20,
        }
    }
}

impl NcclPolicy {
    pub fn fraction(&self, mode: Mode, c: Collective) -> f64 {
        match (mode, c) {
            (Mode::Net, _) => self.net_min_fraction,
            (Mode::Intra, Collective::AllReduce) => self.all_reduce_min_fraction,
            (Mode::Intra, Collective::AllGather) => self.all_gather_min_fraction,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// One process drives every GPU; NCCL picks its transports (NVLink/PCIe P2P, SHM).
    Intra,
    /// P2P and SHM disabled: the GPUs talk through a NIC (or NCCL's socket transport).
    Net,
}

/// Facts about one ordered GPU pair, from the topology: what NCCL should be able to use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairFacts {
    pub from: String,
    pub to: String,
    /// The `nvidia-smi topo -m` cell: `NV18`, `PIX`, `SYS`...
    pub path: Option<String>,
    pub nvlinks: Option<u32>,
    /// The slower of the two GPUs' PCIe links: (generation, width, source).
    pub pcie: Result<(u8, u8, String), String>,
}

/// What bounds a run's bus bandwidth, before the GPUs' architecture is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BarInput {
    /// Inside a node: the slowest GPU pair's NVLink or PCIe rate.
    Intra { pairs: Vec<PairFacts> },
    /// Through a NIC: its line rate (or why it is unknown).
    Net { expected: Result<Rate, String> },
}

/// The rate a run's bus bandwidth is held to (before the policy's fraction). Intra: per pair
/// as level 1's p2p probe (NVLink count x per-link rate of the architecture, else the slower
/// PCIe link), the slowest pair bounding a ring through all of them.
pub fn expected(input: &BarInput, cc: Option<(i32, i32)>) -> Result<Rate, String> {
    expected_of(input, cc)
}

fn expected_of(input: &BarInput, cc: Option<(i32, i32)>) -> Result<Rate, String> {
    match input {
        BarInput::Net { expected } => expected.clone(),
        BarInput::Intra { pairs } => {
            let mut worst: Option<(Expected, String)> = None;
            for p in pairs {
                let e = match (&p.path, p.nvlinks) {
                    (Some(cell), Some(n)) if cell.starts_with("NV") && n > 0 => {
                        let (ma, mi) = cc.ok_or("the GPUs' compute capability is unknown")?;
                        crate::probes::nvlink_expected(n, ma, mi)?
                    }
                    _ => {
                        let (g, w, src) = p.pcie.clone()?;
                        crate::probes::pcie_expected(
                            g,
                            w,
                            &format!(
                                "PCIe path {}: {src}",
                                p.path.as_deref().unwrap_or("unknown")
                            ),
                        )?
                    }
                };
                if worst
                    .as_ref()
                    .is_none_or(|(w, _)| e.bandwidth_gbps < w.bandwidth_gbps)
                {
                    worst = Some((e, format!("{}->{}", p.from, p.to)));
                }
            }
            let (e, pair) = worst.ok_or("no GPU pair in the topology")?;
            Ok(Rate {
                bandwidth_gbps: e.bandwidth_gbps,
                basis: format!("{} (the slowest GPU pair, {pair})", e.basis),
            })
        }
    }
}

/// A GPU as the worker saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclGpu {
    pub rank: u32,
    pub label: String,
    pub bdf: String,
    pub cuda_ordinal: i32,
    pub name: String,
    pub arch: String,
}

/// One sweep point: nccl-tests' shape and every timed sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizeResult {
    /// nccl-tests' `size` column.
    pub size_bytes: u64,
    /// Elements passed to NCCL (all-gather: per rank).
    pub count: u64,
    /// Per sample: the average time of one collective over `iters`, in microseconds.
    pub time_us: Vec<f64>,
    pub algbw_gbps: Vec<f64>,
    pub busbw_gbps: Vec<f64>,
    /// The judged size only: taken again, longer, after a first reading below its bar.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remeasured_busbw_gbps: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CollectiveRun {
    pub collective: Collective,
    pub ranks: u32,
    pub warmup: u32,
    pub iters: u32,
    pub sizes: Vec<SizeResult>,
    pub error: Option<String>,
    pub evaluation: Evaluation,
}

impl CollectiveRun {
    /// The size the verdict is about: the largest measured.
    pub fn judged(&self) -> Option<&SizeResult> {
        self.sizes.iter().max_by_key(|s| s.size_bytes)
    }
}

/// One ordered GPU pair's channels as NCCL's debug output names them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairTransport {
    pub from: String,
    pub to: String,
    pub path: Option<String>,
    /// `P2P/direct pointer` -> channels.
    pub via: BTreeMap<String, u32>,
}

/// A contradiction between NCCL's choice and the topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransportFinding {
    pub subject: String,
    pub status: Status,
    pub reason: String,
}

/// One configuration, run in its own worker process (NCCL reads its variables at init).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigRun {
    /// `intra-node`, `net IB mlx5_0:1`, `net Socket`.
    pub name: String,
    pub mode: Mode,
    /// The NCCL variables gpudoctor set for this run's worker (beyond NCCL_DEBUG*).
    pub nccl_env: BTreeMap<String, String>,
    pub bar_input: BarInput,
    /// The rate the bars are fractions of (unknown: why).
    pub expected: Result<Rate, String>,
    pub collectives: Vec<CollectiveRun>,
    pub transports: Vec<PairTransport>,
    /// `Using network ...` (IB, Socket).
    pub networks: Vec<String>,
    pub socket_interfaces: Vec<String>,
    /// Where NCCL's debug output was read from, or why it was not.
    pub debug_log: Result<String, String>,
    pub nccl_warnings: Vec<String>,
    pub findings: Vec<TransportFinding>,
    pub skipped: Option<String>,
    pub error: Option<String>,
    pub status: Status,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LibraryInfo {
    pub path: String,
    pub version: String,
    pub version_code: i32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NcclReport {
    pub schema: String,
    pub gpudoctor_version: String,
    pub units: String,
    pub mode: Mode,
    pub library: Option<LibraryInfo>,
    /// Where libnccl was looked for, in order.
    pub looked_in: Vec<String>,
    pub skipped: Option<String>,
    pub policy: NcclPolicy,
    pub gpus: Vec<NcclGpu>,
    /// NCCL_* variables in gpudoctor's environment (its workers inherit them).
    pub environment: BTreeMap<String, String>,
    /// GPUDirect RDMA judged ready by the level-0 checks (gdr.*), with why; None: not judged.
    pub gdr_ready: Option<(bool, String)>,
    pub runs: Vec<ConfigRun>,
    pub notes: Vec<String>,
    pub error: Option<String>,
    pub status: Status,
}

impl NcclReport {
    pub fn new(mode: Mode, policy: NcclPolicy) -> Self {
        NcclReport {
            schema: NCCL_SCHEMA.to_string(),
            gpudoctor_version: env!("CARGO_PKG_VERSION").to_string(),
            units: "GB/s = 10^9 bytes/s; bus bandwidth as nccl-tests computes it".to_string(),
            mode,
            library: None,
            looked_in: Vec::new(),
            skipped: None,
            policy,
            gpus: Vec::new(),
            environment: BTreeMap::new(),
            gdr_ready: None,
            runs: Vec::new(),
            notes: Vec::new(),
            error: None,
            status: Status::Unknown,
        }
    }

    /// Re-derive every verdict from the recorded data.
    pub fn evaluate(&mut self) {
        let env_names: Vec<String> = self.environment.keys().cloned().collect();
        for r in &mut self.runs {
            evaluate_run(r, &self.policy, &env_names, self.gdr_ready.as_ref());
        }
        self.status = if self.skipped.is_some() {
            Status::Skip
        } else if self.error.is_some() {
            Status::Fail
        } else {
            worst(self.runs.iter().map(|r| r.status))
        };
    }
}

/// The bar of one collective in one run: policy fraction x expected rate, with its source.
pub fn bar(
    policy: &NcclPolicy,
    mode: Mode,
    c: Collective,
    expected: &Result<Rate, String>,
) -> Result<crate::probes::Bar, String> {
    let e = expected.as_ref().map_err(Clone::clone)?;
    let f = policy.fraction(mode, c);
    Ok(crate::probes::Bar {
        threshold_gbps: e.bandwidth_gbps * f,
        basis: format!("{:.0}% of {}", f * 100.0, e.basis),
    })
}

/// Whether the judged size should be measured again (the worker asks before it finishes).
pub fn needs_remeasure(
    policy: &NcclPolicy,
    mode: Mode,
    c: Collective,
    expected: &Result<Rate, String>,
    judged: &SizeResult,
) -> bool {
    judged.size_bytes >= policy.judged_min_bytes
        && crate::probes::below_bar(&judged.busbw_gbps, &bar(policy, mode, c, expected))
}

/// Warn counts as a pass for the whole, as level 1's `overall`.
fn worst(parts: impl Iterator<Item = Status>) -> Status {
    let mut w: Option<Status> = None;
    for s in parts {
        let s = if s == Status::Warn { Status::Pass } else { s };
        w = Some(w.map_or(s, |x: Status| x.max(s)));
    }
    w.unwrap_or(Status::Unknown)
}

fn evaluate_run(
    r: &mut ConfigRun,
    policy: &NcclPolicy,
    env_names: &[String],
    gdr_ready: Option<&(bool, String)>,
) {
    for c in &mut r.collectives {
        let b = bar(policy, r.mode, c.collective, &r.expected);
        c.evaluation = match c.judged() {
            Some(j) if j.size_bytes < policy.judged_min_bytes => Evaluation {
                status: Status::Unknown,
                stats: crate::probes::stats(&j.busbw_gbps),
                threshold_gbps: None,
                threshold_basis: None,
                remeasured: None,
                reason: format!(
                    "not judged: the largest size, {} B, is below {} B, where NCCL is not yet at the link's rate",
                    j.size_bytes, policy.judged_min_bytes
                ),
            },
            Some(j) => {
                let mut e = crate::probes::evaluate(
                    Method::CopyEngine,
                    &j.busbw_gbps,
                    &j.remeasured_busbw_gbps,
                    &b,
                    c.error.as_deref(),
                );
                e.reason = format!("busbw at {} B: {}", j.size_bytes, e.reason);
                e
            }
            None => crate::probes::evaluate(Method::CopyEngine, &[], &[], &b, c.error.as_deref()),
        };
    }
    r.findings = transport_findings(r, env_names, gdr_ready);
    r.status = if r.skipped.is_some() {
        Status::Skip
    } else if r.error.is_some() {
        Status::Fail
    } else {
        worst(
            r.collectives
                .iter()
                .map(|c| c.evaluation.status)
                .chain(r.findings.iter().map(|f| f.status)),
        )
    };
}

/// NCCL_* names that say where NCCL is installed or how it logs, not how it connects: left out
/// of the variables a transport finding names (NCCL_VERSION is set by NVIDIA's containers).
const NOT_TRANSPORT_SETTINGS: [&str; 9] = [
    "NCCL_HOME",
    "NCCL_VERSION",
    "NCCL_ROOT",
    "NCCL_DIR",
    "NCCL_LIB_DIR",
    "NCCL_INCLUDE_DIR",
    "NCCL_DEBUG",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
];

fn env_words(env_names: &[String]) -> String {
    let env_names: Vec<&String> = env_names
        .iter()
        .filter(|n| !NOT_TRANSPORT_SETTINGS.contains(&n.as_str()))
        .collect();
    if env_names.is_empty() {
        "no NCCL_* variable is set".to_string()
    } else {
        format!(
            "NCCL_* variables set (they change NCCL's choice): {}",
            env_names
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

/// NCCL's choice against the topology (pure).
pub fn transport_findings(
    r: &ConfigRun,
    env_names: &[String],
    gdr_ready: Option<&(bool, String)>,
) -> Vec<TransportFinding> {
    let mut out = Vec::new();
    match r.mode {
        Mode::Intra => {
            for t in &r.transports {
                let nv = t.path.as_deref().is_some_and(|p| p.starts_with("NV"));
                if !nv {
                    continue;
                }
                let not_p2p: BTreeMap<&String, &u32> = t
                    .via
                    .iter()
                    .filter(|(v, _)| !v.starts_with("P2P"))
                    .collect();
                if not_p2p.is_empty() {
                    continue;
                }
                let shown: Vec<String> = not_p2p
                    .iter()
                    .map(|(v, n)| format!("{v} on {n} channel(s)"))
                    .collect();
                out.push(TransportFinding {
                    subject: format!("{}->{}", t.from, t.to),
                    status: Status::Fail,
                    reason: format!(
                        "{} between them, but NCCL's channels went via {}: not over NVLink; {}",
                        t.path.as_deref().unwrap_or("NVLink"),
                        shown.join(", "),
                        env_words(env_names)
                    ),
                });
            }
        }
        Mode::Net => {
            if let Some((true, why)) = gdr_ready {
                for t in &r.transports {
                    let plain: Vec<&String> = t
                        .via
                        .keys()
                        .filter(|v| v.starts_with("NET/IB") && !v.contains("GDRDMA"))
                        .collect();
                    if plain.is_empty() {
                        continue;
                    }
                    out.push(TransportFinding {
                        subject: format!("{}->{}", t.from, t.to),
                        status: Status::Fail,
                        reason: format!(
                            "GPUDirect RDMA judged ready ({why}), but NCCL's NET channels ran without it (via {}): data is staged through host memory; {}",
                            plain
                                .iter()
                                .map(|s| s.as_str())
                                .collect::<Vec<_>>()
                                .join(", "),
                            env_words(env_names)
                        ),
                    });
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nv18_pairs() -> BarInput {
        BarInput::Intra {
            pairs: vec![
                PairFacts {
                    from: "GPU0".into(),
                    to: "GPU1".into(),
                    path: Some("NV18".into()),
                    nvlinks: Some(18),
                    pcie: Ok((5, 16, "sysfs".into())),
                },
                PairFacts {
                    from: "GPU1".into(),
                    to: "GPU0".into(),
                    path: Some("NV18".into()),
                    nvlinks: Some(18),
                    pcie: Ok((5, 16, "sysfs".into())),
                },
            ],
        }
    }

    fn run(busbw: &[f64], again: &[f64], via: &str) -> ConfigRun {
        let input = nv18_pairs();
        let expected = expected(&input, Some((9, 0)));
        let sizes = vec![SizeResult {
            size_bytes: 1 << 30,
            count: 1 << 28,
            time_us: vec![],
            algbw_gbps: vec![],
            busbw_gbps: busbw.to_vec(),
            remeasured_busbw_gbps: again.to_vec(),
        }];
        ConfigRun {
            name: "intra-node".into(),
            mode: Mode::Intra,
            nccl_env: BTreeMap::new(),
            bar_input: input,
            expected,
            collectives: vec![CollectiveRun {
                collective: Collective::AllReduce,
                ranks: 2,
                warmup: 5,
                iters: 20,
                sizes,
                error: None,
                evaluation: crate::probes::evaluate(
                    Method::CopyEngine,
                    &[],
                    &[],
                    &Err(String::new()),
                    None,
                ),
            }],
            transports: vec![PairTransport {
                from: "GPU0".into(),
                to: "GPU1".into(),
                path: Some("NV18".into()),
                via: BTreeMap::from([(via.to_string(), 24)]),
            }],
            networks: vec![],
            socket_interfaces: vec![],
            debug_log: Err("test".into()),
            nccl_warnings: vec![],
            findings: vec![],
            skipped: None,
            error: None,
            status: Status::Unknown,
        }
    }

    fn judged(busbw: &[f64], again: &[f64], via: &str, env: &[(&str, &str)]) -> NcclReport {
        let mut r = NcclReport::new(Mode::Intra, NcclPolicy::default());
        r.environment = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        r.runs.push(run(busbw, again, via));
        r.evaluate();
        r
    }

    /// The recorded H200 figure (329.9 GB/s over NV18) passes; half of it fails; a dip that
    /// recovers when measured again warns.
    #[test]
    fn all_reduce_bar_from_nvlink() {
        let r = judged(&[329.9], &[], "P2P/direct pointer", &[]);
        let e = &r.runs[0].collectives[0].evaluation;
        assert_eq!(e.status, Status::Pass, "{}", e.reason);
        assert!((e.threshold_gbps.unwrap() - 0.55 * 478.125).abs() < 1e-6);
        assert!(e.threshold_basis.as_ref().unwrap().contains("NV18"));
        assert!(e.threshold_basis.as_ref().unwrap().contains("GPU0->GPU1"));
        assert_eq!(r.status, Status::Pass);
        assert_eq!(
            judged(&[165.0], &[160.0], "P2P/direct pointer", &[]).status,
            Status::Fail
        );
        let w = judged(&[165.0], &[320.0], "P2P/direct pointer", &[]);
        assert_eq!(w.runs[0].collectives[0].evaluation.status, Status::Warn);
        assert_eq!(w.status, Status::Pass);
    }

    /// NVLink between the GPUs but SHM channels: a failure naming the variables set.
    #[test]
    fn shm_over_nvlink_is_a_contradiction() {
        let r = judged(
            &[329.9],
            &[],
            "SHM/direct/direct",
            &[("NCCL_P2P_DISABLE", "1")],
        );
        let f = &r.runs[0].findings;
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].status, Status::Fail);
        assert!(f[0].reason.contains("NCCL_P2P_DISABLE"), "{}", f[0].reason);
        assert!(f[0].reason.contains("SHM/direct/direct"), "{}", f[0].reason);
        assert!(!f[0].reason.contains("NCCL_HOME"), "{}", f[0].reason);
        assert_eq!(r.status, Status::Fail);
    }

    #[test]
    fn small_sweeps_and_unknown_rates_are_not_a_pass() {
        let mut r = run(&[200.0], &[], "P2P/direct pointer");
        r.collectives[0].sizes[0].size_bytes = 64 << 20;
        let mut rep = NcclReport::new(Mode::Intra, NcclPolicy::default());
        rep.runs.push(r);
        rep.evaluate();
        assert_eq!(
            rep.runs[0].collectives[0].evaluation.status,
            Status::Unknown
        );
        assert_eq!(rep.status, Status::Unknown);
        assert!(expected(&nv18_pairs(), None).is_err());
    }

    #[test]
    fn gdr_ready_but_no_gdrdma() {
        let mut r = run(&[40.0], &[], "NET/IB/0");
        r.mode = Mode::Net;
        r.expected = Ok(Rate {
            bandwidth_gbps: 50.0,
            basis: "mlx5_0 port 1: 400 Gb/s".into(),
        });
        let ready = (true, "gdr.* pass".to_string());
        let f = transport_findings(&r, &[], Some(&ready));
        assert_eq!(f.len(), 1);
        assert!(transport_findings(&r, &[], Some(&(false, String::new()))).is_empty());
        r.transports[0].via = BTreeMap::from([("NET/IB/0/GDRDMA".to_string(), 2)]);
        assert!(transport_findings(&r, &[], Some(&ready)).is_empty());
    }
}

#[cfg(test)]
mod recorded {
    use super::*;

    fn recorded() -> NcclReport {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl-probe/h200x2-degraded.json");
        serde_json::from_str(&std::fs::read_to_string(p).expect("the recorded report"))
            .expect("a gpudoctor.nccl/1 report")
    }

    /// A live run under a competing load re-evaluates to the failure it was; with healthy
    /// samples (the same machine's unloaded figures) it passes.
    #[test]
    fn live_degraded_run_replays_as_a_failure() {
        let mut r = recorded();
        assert_eq!(r.schema, NCCL_SCHEMA);
        r.evaluate();
        assert_eq!(r.status, Status::Fail);
        let run = &r.runs[0];
        assert!(run.findings.is_empty(), "{:?}", run.findings);
        assert!(
            run.transports
                .iter()
                .all(|t| t.via.keys().all(|v| v.starts_with("P2P")))
        );
        for c in &run.collectives {
            assert_eq!(c.evaluation.status, Status::Fail, "{}", c.evaluation.reason);
            assert!(c.evaluation.remeasured.is_some());
        }
        let mut healthy = recorded();
        for c in &mut healthy.runs[0].collectives {
            let good = match c.collective {
                Collective::AllReduce => 330.4,
                Collective::AllGather => 271.8,
            };
            if let Some(s) = c.sizes.iter_mut().max_by_key(|s| s.size_bytes) {
                s.busbw_gbps = vec![good; 5];
                s.remeasured_busbw_gbps.clear();
            }
        }
        healthy.evaluate();
        assert_eq!(healthy.status, Status::Pass);
    }
}
