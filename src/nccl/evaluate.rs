//! The `probe nccl` report's evaluation (the model is `crate::report::nccl`): pure functions
//! of recorded data, so a recorded run re-evaluates without a GPU; and, across nodes, the
//! processes' parts (`RankPart`) merged into one report.
//!
//! A collective is judged at the largest size of its sweep (smaller sizes are latency-bound
//! and reported only) against a fraction of the slowest GPU pair's link rate, with level 1's
//! rule (`crate::probes::evaluate`): below the bar twice (the second reading three times
//! longer) fails, below then above warns. NCCL's transport choice is judged against the
//! topology: NVLink between two GPUs whose channels do not go via P2P, or a GPUDirect path
//! judged ready whose NET channels run without GDRDMA, is a failure that names the NCCL_*
//! variables present (they change NCCL's choice).

use crate::probes::{Evaluation, Expected, Method, Status};
use crate::reading::Reading;
use crate::report::nccl::{
    BarInput, ClusterView, Collective, CollectiveRun, ConfigRun, Mode, NcclGpu, NcclPolicy,
    NcclReport, NicUse, NodeView, PairTransport, ProcessInfo, RailView, Rate, SizeResult,
    TransportFinding,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The rate a run's bus bandwidth is held to (before the policy's fraction). Intra: per pair
/// as level 1's p2p probe (NVLink count x per-link rate of the architecture, else the slower
/// PCIe link), the slowest pair bounding a ring through all of them.
pub fn expected(input: &BarInput, cc: Option<(i32, i32)>) -> Reading<Rate> {
    match input {
        BarInput::Net { expected } => expected.clone(),
        BarInput::Intra { .. } => Reading::from_result(expected_of(input, cc)),
    }
}

fn expected_of(input: &BarInput, cc: Option<(i32, i32)>) -> Result<Rate, String> {
    match input {
        BarInput::Net { expected } => expected.clone().into_result(),
        BarInput::Intra { pairs } => {
            let mut worst: Option<(Expected, String)> = None;
            for p in pairs {
                let e = match (&p.path, p.nvlinks) {
                    (Some(cell), Some(n)) if cell.starts_with("NV") && n > 0 => {
                        let (ma, mi) = cc.ok_or("the GPUs' compute capability is unknown")?;
                        crate::probes::nvlink_expected(n, ma, mi)?
                    }
                    _ => {
                        let (g, w, src) = p.pcie.clone().into_result()?;
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

/// What one process brings back from one configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankPart {
    pub rank: u32,
    pub node: String,
    /// Its own view: its GPUs' samples, the transports its debug output named.
    pub run: ConfigRun,
    pub gpus: Vec<NcclGpu>,
    /// `mlx5_0:1` or `socket eth0` -> use.
    pub nics: BTreeMap<String, NicUse>,
    /// Its worker passed the deadline or was interrupted (killed, reaped): why.
    pub hung: Option<String>,
}

/// Median bus bandwidth at the largest size of one collective run.
fn judged_median(c: &CollectiveRun) -> Option<f64> {
    c.judged()
        .and_then(|j| crate::probes::median(&j.busbw_gbps))
}

/// The per-sample worst of every process: a collective is as slow as its slowest rank (each
/// process times its own GPUs with CUDA events; the worker already takes its slowest GPU).
fn merge_collectives(parts: &[&RankPart], nranks: u32) -> (Vec<CollectiveRun>, Option<String>) {
    let Some(first) = parts.iter().find(|p| !p.run.collectives.is_empty()) else {
        return (Vec::new(), None);
    };
    let mut out = Vec::new();
    let mut err = None;
    for c0 in &first.run.collectives {
        let mut c = c0.clone();
        c.ranks = nranks;
        c.error = None;
        for s in &mut c.sizes {
            s.remeasured_busbw_gbps.clear();
            for p in parts {
                let theirs = p
                    .run
                    .collectives
                    .iter()
                    .find(|x| x.collective == c.collective)
                    .and_then(|x| x.sizes.iter().find(|z| z.size_bytes == s.size_bytes));
                match theirs {
                    Some(z) => {
                        let k = s.time_us.len().min(z.time_us.len());
                        s.time_us.truncate(k);
                        for (a, b) in s.time_us.iter_mut().zip(&z.time_us) {
                            *a = a.max(*b);
                        }
                    }
                    None => s.time_us.clear(),
                }
            }
            let shape = super::bandwidth::Shape {
                size_bytes: s.size_bytes,
                count: s.count,
                send_bytes: 0,
                recv_bytes: 0,
            };
            s.algbw_gbps = s
                .time_us
                .iter()
                .map(|t| super::bandwidth::algbw_gbps(c.collective, &shape, nranks, t * 1e-6))
                .collect();
            s.busbw_gbps = s
                .time_us
                .iter()
                .map(|t| super::bandwidth::busbw_gbps(c.collective, &shape, nranks, t * 1e-6))
                .collect();
        }
        c.sizes.retain(|s| !s.time_us.is_empty());
        for p in parts {
            if let Some(e) = p
                .run
                .collectives
                .iter()
                .find(|x| x.collective == c.collective)
                .and_then(|x| x.error.clone())
            {
                c.error
                    .get_or_insert(format!("rank {} ({}): {e}", p.rank, p.node));
            }
        }
        if let Some(e) = &c.error {
            err.get_or_insert(e.clone());
        }
        out.push(c);
    }
    (out, err)
}

/// The rate a run across nodes is held to: the slowest node's network (the sum of the NIC
/// rates its NET channels used); unknown where any node's is, or where all ranks share a node.
pub fn cluster_expected(nodes: &[NodeView]) -> Result<Rate, String> {
    if nodes.len() < 2 {
        return Err(format!(
            "every rank is on one node ({}): NCCL does not cross a network; `probe nccl` without --ranks judges a node",
            nodes.first().map_or("none", |n| n.node.as_str())
        ));
    }
    let mut worst: Option<(&NodeView, &Rate)> = None;
    for n in nodes {
        let r = n
            .network
            .value()
            .ok_or_else(|| format!("{}: {}", n.node, n.network.why().unwrap_or_default()))?;
        if worst.is_none_or(|(_, w)| r.bandwidth_gbps < w.bandwidth_gbps) {
            worst = Some((n, r));
        }
    }
    let (n, r) = worst.ok_or("no node")?;
    Ok(Rate {
        bandwidth_gbps: r.bandwidth_gbps,
        basis: format!("{}'s network, the slowest node's: {}", n.node, r.basis),
    })
}

/// One node's NICs: name -> (channels, line rate).
type NodeNics = BTreeMap<String, (u32, Reading<Rate>)>;

/// Each node's network: the NICs its processes' NET channels used, rates summed.
fn node_network(nics: &NodeNics) -> Result<Rate, String> {
    if nics.is_empty() {
        return Err("no NET channel named a NIC or interface".into());
    }
    let mut total = 0.0;
    let mut parts = Vec::new();
    for (name, (_, r)) in nics {
        let r = r
            .value()
            .ok_or_else(|| format!("{name}: {}", r.why().unwrap_or_default()))?;
        total += r.bandwidth_gbps;
        parts.push(r.basis.clone());
    }
    Ok(Rate {
        bandwidth_gbps: total,
        basis: if parts.len() == 1 {
            parts.remove(0)
        } else {
            format!("{} = {total:.1} GB/s", parts.join(" + "))
        },
    })
}

/// The nodes of `processes`, in order of their first process: hosts, processes and NCCL ranks
/// of each, nothing measured yet.
fn cluster_nodes(processes: &[ProcessInfo]) -> Vec<NodeView> {
    let mut nodes: Vec<NodeView> = Vec::new();
    for p in processes {
        let n = match nodes.iter_mut().find(|n| n.node == p.node) {
            Some(n) => n,
            None => {
                nodes.push(NodeView {
                    node: p.node.clone(),
                    hosts: Vec::new(),
                    processes: Vec::new(),
                    nccl_ranks: Vec::new(),
                    network: Reading::unknown("not measured"),
                    busbw_gbps: BTreeMap::new(),
                    nics: BTreeMap::new(),
                });
                nodes.last_mut().expect("just pushed")
            }
        };
        if !n.hosts.contains(&p.host) {
            n.hosts.push(p.host.clone());
        }
        n.processes.push(p.rank);
        n.nccl_ranks.extend(p.gpus.iter().map(|g| g.rank));
    }
    nodes
}

/// Count part `p`'s NICs into its node's NICs and into the rails: channels summed, a rail's
/// rate the slowest seen (or why one is not known, naming the node).
fn tally_nics(
    p: &RankPart,
    node_nics: &mut BTreeMap<String, NodeNics>,
    rails: &mut BTreeMap<String, RailView>,
) {
    for (nic, u) in &p.nics {
        let e = node_nics
            .entry(p.node.clone())
            .or_default()
            .entry(nic.clone())
            .or_insert((0, u.rate.clone()));
        e.0 += u.channels;
        let rail = rails.entry(nic.clone()).or_insert(RailView {
            nic: nic.clone(),
            nodes: Vec::new(),
            channels: 0,
            rate: u.rate.clone(),
        });
        if !rail.nodes.contains(&p.node) {
            rail.nodes.push(p.node.clone());
        }
        rail.channels += u.channels;
        rail.rate = match (&rail.rate, &u.rate) {
            (Reading::Value(a), Reading::Value(b)) if b.bandwidth_gbps < a.bandwidth_gbps => {
                Reading::Value(b.clone())
            }
            (Reading::Value(_), Reading::Absent(e)) => Reading::absent(format!("{}: {e}", p.node)),
            (Reading::Value(_), Reading::Unknown(e)) => {
                Reading::unknown(format!("{}: {e}", p.node))
            }
            (x, _) => x.clone(),
        };
    }
}

/// Keep, on part `p`'s node, the lowest judged median of each of its collectives in
/// configuration `name`.
fn record_busbw(nodes: &mut [NodeView], name: &str, p: &RankPart) {
    if let Some(n) = nodes.iter_mut().find(|n| n.node == p.node) {
        for c in &p.run.collectives {
            if let Some(m) = judged_median(c) {
                let k = format!("{name} {}", c.collective.as_str());
                let v = n.busbw_gbps.entry(k).or_insert(m);
                *v = v.min(m);
            }
        }
    }
}

/// Every pair's transport over the parts `ps`: one entry per (from, to), the first path known,
/// each transport's channel count the largest any part saw.
fn merge_transports(ps: &[&RankPart]) -> Vec<PairTransport> {
    let mut transports: BTreeMap<(String, String), PairTransport> = BTreeMap::new();
    for p in ps {
        for t in &p.run.transports {
            let e = transports
                .entry((t.from.clone(), t.to.clone()))
                .or_insert_with(|| PairTransport {
                    via: BTreeMap::new(),
                    ..t.clone()
                });
            if e.path.is_none() {
                e.path = t.path.clone();
            }
            for (v, n) in &t.via {
                let x = e.via.entry(v.clone()).or_insert(0);
                *x = (*x).max(*n);
            }
        }
    }
    transports.into_values().collect()
}

/// One configuration's run across the cluster from the parts `ps` (sorted by rank) of the
/// processes that answered: collectives merged, NCCL's facts of every part (each naming its
/// rank and node), and an error for a hung worker, a failed one or a rank that never answered.
/// Its bar is set later, from every node's network.
fn merge_run(
    name: &str,
    env: &BTreeMap<String, String>,
    ps: &[&RankPart],
    processes: &[ProcessInfo],
    nranks: u32,
) -> ConfigRun {
    let (collectives, error) = merge_collectives(ps, nranks);
    let mut networks = std::collections::BTreeSet::new();
    let mut socket_interfaces = std::collections::BTreeSet::new();
    let mut warnings = Vec::new();
    let mut skipped = Vec::new();
    let mut errors: Vec<String> = error.into_iter().collect();
    let mut debug_missing = Vec::new();
    for p in ps {
        networks.extend(p.run.networks.iter().cloned());
        socket_interfaces.extend(
            p.run
                .socket_interfaces
                .iter()
                .map(|i| format!("{}:{i}", p.node)),
        );
        warnings.extend(
            p.run
                .nccl_warnings
                .iter()
                .map(|w| format!("rank {} ({}): {w}", p.rank, p.node)),
        );
        if let Some(s) = &p.run.skipped {
            skipped.push(format!("rank {} ({}): {s}", p.rank, p.node));
        }
        if let Some(e) = &p.hung {
            errors.push(format!("rank {} ({}): {e}", p.rank, p.node));
        } else if let Some(e) = &p.run.error
            && !errors.iter().any(|x| x.contains(e.as_str()))
        {
            errors.push(format!("rank {} ({}): {e}", p.rank, p.node));
        }
        if let Some(e) = p.run.debug_log.why() {
            debug_missing.push(format!("rank {}: {e}", p.rank));
        }
    }
    let answered: Vec<u32> = ps.iter().map(|p| p.rank).collect();
    let silent: Vec<String> = processes
        .iter()
        .filter(|p| !answered.contains(&p.rank))
        .map(|p| format!("{} ({})", p.rank, p.node))
        .collect();
    if !silent.is_empty() {
        errors.push(format!("no result from rank(s) {}", silent.join(", ")));
    }
    ConfigRun {
        name: name.to_string(),
        mode: Mode::Cluster,
        nccl_env: env.clone(),
        bar_input: BarInput::Net {
            expected: Reading::unknown("set below, from every node's network"),
        },
        expected: Reading::unknown("set below, from every node's network"),
        collectives,
        transports: merge_transports(ps),
        networks: networks.into_iter().collect(),
        socket_interfaces: socket_interfaces.into_iter().collect(),
        debug_log: if debug_missing.is_empty() {
            Reading::Value(format!(
                "NCCL_DEBUG=INFO into a private temporary directory on each of {} processes, removed after reading",
                ps.len()
            ))
        } else {
            Reading::unknown(debug_missing.join("; "))
        },
        nccl_warnings: warnings,
        findings: Vec::new(),
        skipped: (!skipped.is_empty()).then(|| skipped.join("; ")),
        error: (!errors.is_empty()).then(|| errors.join("; ")),
        status: Status::Unknown,
    }
}

/// Each node's network (its NICs' rates summed) and its NICs: every rail it is on, with the
/// channels its processes' parts used over all configurations.
fn node_networks(
    nodes: &mut [NodeView],
    mut node_nics: BTreeMap<String, NodeNics>,
    rails: &BTreeMap<String, RailView>,
    parts: &[Vec<RankPart>],
) {
    for n in nodes.iter_mut() {
        n.network =
            Reading::from_result(node_network(&node_nics.remove(&n.node).unwrap_or_default()));
        n.nics = BTreeMap::new();
    }
    for rail in rails.values() {
        for node in &rail.nodes {
            if let Some(n) = nodes.iter_mut().find(|n| &n.node == node) {
                n.nics.insert(rail.nic.clone(), 0);
            }
        }
    }
    // Channels per node and NIC, summed over configurations.
    for ps in parts {
        for p in ps {
            if let Some(n) = nodes.iter_mut().find(|n| n.node == p.node) {
                for (nic, u) in &p.nics {
                    *n.nics.entry(nic.clone()).or_insert(0) += u.channels;
                }
            }
        }
    }
}

/// Merge every process's parts of every configuration into rank 0's report (pure).
/// `parts[config]` holds one part per process that answered.
pub fn merge_cluster(
    r: &mut NcclReport,
    launcher: &str,
    processes: Vec<ProcessInfo>,
    configs: &[(String, BTreeMap<String, String>)],
    parts: &[Vec<RankPart>],
) {
    let nranks: u32 = processes.iter().map(|p| p.gpus.len() as u32).sum();
    let world_size = processes.len() as u32;
    let mut gpus: Vec<NcclGpu> = processes.iter().flat_map(|p| p.gpus.clone()).collect();
    gpus.sort_by_key(|g| g.rank);
    r.gpus = gpus;
    let mut nodes = cluster_nodes(&processes);
    let mut rails: BTreeMap<String, RailView> = BTreeMap::new();
    let mut node_nics: BTreeMap<String, NodeNics> = BTreeMap::new();
    for (ci, (name, env)) in configs.iter().enumerate() {
        let mut ps: Vec<&RankPart> = parts
            .get(ci)
            .map(|v| v.iter().collect())
            .unwrap_or_default();
        ps.sort_by_key(|p| p.rank);
        for p in &ps {
            tally_nics(p, &mut node_nics, &mut rails);
            record_busbw(&mut nodes, name, p);
        }
        r.runs.push(merge_run(name, env, &ps, &processes, nranks));
    }
    node_networks(&mut nodes, node_nics, &rails, parts);
    let expected = Reading::from_result(cluster_expected(&nodes));
    for run in &mut r.runs {
        run.bar_input = BarInput::Net {
            expected: expected.clone(),
        };
        run.expected = expected.clone();
    }
    let slowest_node = slowest_node(&nodes);
    let rails: Vec<RailView> = rails.into_values().collect();
    let slowest_rail = slowest_rail(&rails);
    r.cluster = Some(ClusterView {
        launcher: launcher.to_string(),
        world_size,
        nranks,
        processes,
        nodes,
        rails,
        slowest_node,
        slowest_rail,
    });
}

/// The node whose own timing is lowest, on the first measurement every node has.
pub fn slowest_node(nodes: &[NodeView]) -> Option<String> {
    if nodes.len() < 2 {
        return None;
    }
    let key = nodes
        .first()?
        .busbw_gbps
        .keys()
        .find(|k| nodes.iter().all(|n| n.busbw_gbps.contains_key(*k)))?
        .clone();
    let vals: Vec<(&str, f64)> = nodes
        .iter()
        .map(|n| (n.node.as_str(), n.busbw_gbps[&key]))
        .collect();
    let (node, low) = vals.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1))?;
    let others: Vec<f64> = vals.iter().filter(|v| v.0 != node).map(|v| v.1).collect();
    let lo = others.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = others.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if low >= lo {
        // Every node timed the same: none is the slow one.
        return None;
    }
    Some(format!(
        "{node}: {key} busbw {low:.2} GB/s as its own GPUs timed it (other nodes {lo:.2}-{hi:.2})"
    ))
}

/// The rail with the lowest line rate where the known rates differ.
pub fn slowest_rail(rails: &[RailView]) -> Option<String> {
    let known: Vec<(&RailView, &Rate)> = rails
        .iter()
        .filter_map(|r| r.rate.value().map(|x| (r, x)))
        .collect();
    let (low, lr) = known
        .iter()
        .copied()
        .min_by(|a, b| a.1.bandwidth_gbps.total_cmp(&b.1.bandwidth_gbps))?;
    let high = known
        .iter()
        .map(|x| x.1.bandwidth_gbps)
        .fold(f64::NEG_INFINITY, f64::max);
    (high > lr.bandwidth_gbps).then(|| {
        format!(
            "{}: {:.1} GB/s line rate against up to {high:.1} on other rails ({})",
            low.nic, lr.bandwidth_gbps, lr.basis
        )
    })
}

impl NcclReport {
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
    expected: &Reading<Rate>,
) -> Result<crate::probes::Bar, String> {
    let e = expected.as_ref().into_result()?;
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
    expected: &Reading<Rate>,
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
        Mode::Intra | Mode::Cluster => {
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
    use crate::report::nccl::PairFacts;

    fn nv18_pairs() -> BarInput {
        BarInput::Intra {
            pairs: vec![
                PairFacts {
                    from: "GPU0".into(),
                    to: "GPU1".into(),
                    path: Some("NV18".into()),
                    nvlinks: Some(18),
                    pcie: Reading::Value((5, 16, "sysfs".into())),
                },
                PairFacts {
                    from: "GPU1".into(),
                    to: "GPU0".into(),
                    path: Some("NV18".into()),
                    nvlinks: Some(18),
                    pcie: Reading::Value((5, 16, "sysfs".into())),
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
            debug_log: Reading::unknown("test"),
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
        assert!(matches!(expected(&nv18_pairs(), None), Reading::Unknown(_)));
    }

    #[test]
    fn gdr_ready_but_no_gdrdma() {
        let mut r = run(&[40.0], &[], "NET/IB/0");
        r.mode = Mode::Net;
        r.expected = Reading::Value(Rate {
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
mod across_nodes {
    use super::*;

    fn gpu(rank: u32) -> NcclGpu {
        NcclGpu {
            rank,
            label: "GPU0".into(),
            bdf: "0000:01:00.0".into(),
            cuda_ordinal: 0,
            name: "H100".into(),
            arch: "sm_90".into(),
        }
    }

    fn process(rank: u32, node: &str) -> ProcessInfo {
        ProcessInfo {
            rank,
            host: node.into(),
            node: node.into(),
            local_rank: 0,
            gpus: vec![gpu(rank)],
            library: None,
            nccl_env: BTreeMap::new(),
            skipped: None,
        }
    }

    fn rate(gbps: f64, what: &str) -> Reading<Rate> {
        Reading::Value(Rate {
            bandwidth_gbps: gbps,
            basis: what.into(),
        })
    }

    /// One process's part: its own times (us) of a 1 GiB all-reduce, one NIC.
    fn part(rank: u32, node: &str, times: &[f64], nic: (&str, Reading<Rate>)) -> RankPart {
        let n = 3;
        let shape = crate::nccl::bandwidth::shape(Collective::AllReduce, 1 << 30, n);
        let busbw: Vec<f64> = times
            .iter()
            .map(|t| crate::nccl::bandwidth::busbw_gbps(Collective::AllReduce, &shape, n, t * 1e-6))
            .collect();
        RankPart {
            rank,
            node: node.into(),
            run: ConfigRun {
                name: "across nodes".into(),
                mode: Mode::Cluster,
                nccl_env: BTreeMap::new(),
                bar_input: BarInput::Net {
                    expected: Reading::unknown("later"),
                },
                expected: Reading::unknown("later"),
                collectives: vec![CollectiveRun {
                    collective: Collective::AllReduce,
                    ranks: 1,
                    warmup: 5,
                    iters: 20,
                    sizes: vec![SizeResult {
                        size_bytes: shape.size_bytes,
                        count: shape.count,
                        time_us: times.to_vec(),
                        algbw_gbps: Vec::new(),
                        busbw_gbps: busbw,
                        remeasured_busbw_gbps: Vec::new(),
                    }],
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
                    from: format!("{node}:GPU0"),
                    to: "next".into(),
                    path: None,
                    via: BTreeMap::from([("NET/IB/0/GDRDMA".to_string(), 4)]),
                }],
                networks: vec!["IB".into()],
                socket_interfaces: Vec::new(),
                debug_log: Reading::Value("x".into()),
                nccl_warnings: Vec::new(),
                findings: Vec::new(),
                skipped: None,
                error: None,
                status: Status::Unknown,
            },
            gpus: vec![gpu(rank)],
            nics: BTreeMap::from([(
                nic.0.to_string(),
                NicUse {
                    channels: 4,
                    rate: nic.1,
                },
            )]),
            hung: None,
        }
    }

    fn merged(parts: Vec<RankPart>) -> NcclReport {
        let mut r = NcclReport::new(Mode::Cluster, NcclPolicy::default());
        let procs = vec![process(0, "a"), process(1, "b"), process(2, "c")];
        merge_cluster(
            &mut r,
            "torchrun",
            procs,
            &[("across nodes".into(), BTreeMap::new())],
            &[parts],
        );
        r.evaluate();
        r
    }

    /// The collective is as slow as its slowest rank; node b timed itself slowest; the rail
    /// on c has the lower line rate; the bar is the slowest node's network.
    #[test]
    fn merge_names_the_slowest_node_and_rail() {
        let r = merged(vec![
            part(
                0,
                "a",
                &[50_000.0, 51_000.0],
                ("mlx5_0:1", rate(50.0, "mlx5_0:1 400G")),
            ),
            part(
                1,
                "b",
                &[60_000.0, 61_000.0],
                ("mlx5_0:1", rate(50.0, "mlx5_0:1 400G")),
            ),
            part(
                2,
                "c",
                &[52_000.0, 50_500.0],
                ("mlx5_1:1", rate(25.0, "mlx5_1:1 200G")),
            ),
        ]);
        let c = r.cluster.as_ref().unwrap();
        assert_eq!(c.nranks, 3);
        assert_eq!(c.nodes.len(), 3);
        let run = &r.runs[0];
        let s = &run.collectives[0].sizes[0];
        assert_eq!(s.time_us, vec![60_000.0, 61_000.0]);
        assert!(
            c.slowest_node
                .as_deref()
                .unwrap()
                .starts_with("b: across nodes all-reduce"),
            "{:?}",
            c.slowest_node
        );
        assert!(
            c.slowest_rail
                .as_deref()
                .unwrap()
                .starts_with("mlx5_1:1: 25.0 GB/s"),
            "{:?}",
            c.slowest_rail
        );
        let e = run.expected.value().unwrap();
        assert_eq!(e.bandwidth_gbps, 25.0);
        assert!(e.basis.starts_with("c's network"), "{}", e.basis);
        assert_eq!(run.transports.len(), 3);
        assert_eq!(run.collectives[0].ranks, 3);
        // 1 GiB over 3 ranks in 60 ms: 2*(2/3) * 17.9 GB/s = 23.9 GB/s against 70% of 25.
        assert_eq!(
            run.collectives[0].evaluation.status,
            Status::Pass,
            "{}",
            run.collectives[0].evaluation.reason
        );
    }

    /// A node whose interface reports no speed: the bar is unknown, never a pass; transports
    /// are still reported. A rank without results is an error naming it.
    #[test]
    fn unknown_network_is_not_a_pass_and_a_silent_rank_is_named() {
        let r = merged(vec![
            part(
                0,
                "a",
                &[50_000.0],
                ("socket eth0", Reading::unknown("eth0: no link speed")),
            ),
            part(
                1,
                "b",
                &[50_000.0],
                ("socket eth0", rate(1.25, "eth0 10000 Mb/s")),
            ),
        ]);
        let run = &r.runs[0];
        assert!(
            matches!(&run.expected, Reading::Unknown(why)
                if why.starts_with("a: socket eth0: eth0: no link speed")),
            "{:?}",
            run.expected
        );
        assert_eq!(run.collectives[0].evaluation.status, Status::Unknown);
        assert!(!run.transports.is_empty());
        assert!(
            run.error
                .as_deref()
                .unwrap()
                .contains("no result from rank(s) 2 (c)"),
            "{:?}",
            run.error
        );
        assert_ne!(r.status, Status::Pass);
        // All ranks on one node: unknown too.
        let one = cluster_expected(&r.cluster.as_ref().unwrap().nodes[..1]);
        assert!(one.unwrap_err().contains("every rank is on one node"));
    }
}

#[cfg(test)]
mod recorded {
    use super::*;
    use crate::report::nccl::NCCL_SCHEMA_V1;

    fn recorded() -> NcclReport {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl-probe/h200x2-degraded.json");
        serde_json::from_str(&std::fs::read_to_string(p).expect("the recorded report"))
            .expect("a gpudoctor.nccl/1 report (recorded before the Reading shape)")
    }

    /// A live run under a competing load re-evaluates to the failure it was; with healthy
    /// samples (the same machine's unloaded figures) it passes.
    #[test]
    fn live_degraded_run_replays_as_a_failure() {
        let mut r = recorded();
        // Recorded as gpudoctor.nccl/1: its readings are serde's Ok/Err, read as readings.
        assert_eq!(r.schema, NCCL_SCHEMA_V1);
        assert!(r.runs[0].expected.is_value());
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
