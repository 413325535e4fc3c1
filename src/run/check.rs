//! `topo` and `check`: discovery, the topology, level-0 checks, and the probe levels on top.

use super::budget::{Budget, Step};
use super::{Waited, inventory, wait_at_most};
use crate::checks::{self, CheckId, Finding, SkipKind, Status};
use crate::config::{CheckOptions, OutputFormat};
use crate::inventory::{Inventory, Scope};
use crate::probes::RecordedProbe;
use crate::probes::{self, ProbeKind, ProbeReport};
use crate::report::{CheckReport, TopoReport};
use crate::source::{Source, SourceSpec};
use anyhow::Result;
use std::sync::Arc;

/// Why a `check` produced no report, by what the caller does about it: a hung probe ends the
/// process without joining its worker and exits 1 (the machine failed); anything else is
/// gpudoctor's own failure, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// A level-1 probe's CUDA work hung: the run cannot go on, and the process must end
    /// without joining the worker (`Outcome::hung`).
    #[error("{0}")]
    Hung(String),
    /// gpudoctor could not finish the check (unreadable source, Ctrl-C, ...).
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    topo_report_from(&Source::open(spec)?)
}

pub fn topo_report_from(source: &Source) -> Result<TopoReport> {
    let (report, _inv) = topo_report_and_inventory(source)?;
    Ok(report)
}

fn topo_report_and_inventory(source: &Source) -> Result<(TopoReport, Inventory)> {
    let inv = inventory(source, Scope::Topology)?;
    let topo = crate::topo::build(&inv);
    Ok((TopoReport::new(source.info.clone(), &inv, topo), inv))
}

/// `topo_report` for a command that ends the process right after: where the source holds
/// nothing but memory, it and the facts read are left to the exit rather than freed piece by
/// piece (a tenth of a `topo --from FILE` run went into freeing them).
pub fn topo_report_for_exit(spec: &SourceSpec) -> Result<TopoReport> {
    let source = Source::open(spec)?;
    source.sysroot.keep_last_path_only();
    let (report, inv) = topo_report_and_inventory(&source)?;
    if source.sysroot.owns_nothing_outside() {
        std::mem::forget(inv);
        std::mem::forget(source);
    }
    Ok(report)
}

pub fn check_report(spec: &SourceSpec, opts: &CheckOptions) -> Result<CheckReport, CheckError> {
    // The budget counts from the start, opening the source included.
    let budget = opts.time_budget.map(Budget::start);
    let source = Source::open(spec)?;
    // Nothing here asks which paths were read (a bundle does, and opens its own source).
    source.sysroot.keep_last_path_only();
    if let Some((path, delay)) = &opts.test_slow_read {
        source.sysroot.delay_reads_of(path.clone(), *delay);
    }
    let (r, inv) = report_within(&source, opts, budget.as_ref())?;
    // The command line's check: the process ends once the report is written, so the facts
    // behind it are not freed piece by piece (a large host's take tens of thousands of frees).
    // What is not memory is released now: an extracted bundle's scratch directory is removed
    // before the report is written, as it always was.
    std::mem::forget(inv);
    source.dismiss();
    Ok(r)
}

pub fn check_report_from(source: &Source, opts: &CheckOptions) -> Result<CheckReport, CheckError> {
    let budget = opts.time_budget.map(Budget::start);
    report_within(source, opts, budget.as_ref()).map(|(r, _)| r)
}

/// Discovery under the budget (and never longer than the discovery deadline). None: the
/// budget ran out first.
fn budgeted_inventory(source: &Source, budget: Option<&Budget>) -> Result<Option<Inventory>> {
    let Some(b) = budget else {
        return inventory(source, Scope::Checks).map(Some);
    };
    let deadline = b.cap(super::DISCOVERY_DEADLINE);
    match super::inventory_within(source, Scope::Checks, deadline)? {
        Waited::Done(inv) => Ok(Some(inv)),
        Waited::Cut(stall) if b.remaining().is_zero() => {
            b.cut(format!("discovery ({})", stall.doing()));
            Ok(None)
        }
        // The discovery deadline passed first: gpudoctor could not run, as without a budget.
        Waited::Cut(stall) => Err(stall.error("discovery", deadline)),
    }
}

/// The level-0 checks, under the budget: when it ran out before they finished, each is an
/// unknown skip with the budget's reason.
fn budgeted_level0(
    inv: &Arc<Inventory>,
    topo: &Arc<crate::topo::Topology>,
    libs: &crate::libs::LibFacts,
    budget: Option<&Budget>,
) -> Result<Vec<Finding>> {
    let Some(b) = budget else {
        return Ok(checks::run_level0(&checks::Ctx { inv, topo, libs }));
    };
    let (i, t, l) = (inv.clone(), topo.clone(), libs.clone());
    let work = move || {
        checks::run_level0(&checks::Ctx {
            inv: &i,
            topo: &t,
            libs: &l,
        })
    };
    match wait_at_most(b.remaining(), work, || "the level-0 checks".to_string())? {
        Waited::Done(f) => Ok(f),
        Waited::Cut(_) => {
            b.cut("the level-0 checks".into());
            let mut f = Vec::new();
            b.unjudged(Step::Level0, 0, &mut f);
            Ok(f)
        }
    }
}

/// The report, and the inventory it was judged from (the caller decides how it is freed).
fn report_within(
    source: &Source,
    opts: &CheckOptions,
    budget: Option<&Budget>,
) -> Result<(CheckReport, Option<Arc<Inventory>>), CheckError> {
    let Some(inv) = budgeted_inventory(source, budget)? else {
        // Nothing was judged: every check this run would have judged is unknown.
        let b = budget.expect("only a budget cuts discovery short");
        let mut findings = Vec::new();
        b.unjudged(Step::Discovery, opts.level, &mut findings);
        if opts.expect.is_some() {
            b.unjudged(Step::Baseline, opts.level, &mut findings);
        }
        let r = finish(
            source,
            opts,
            &Inventory::unread(b.reason()),
            None,
            findings,
            budget,
        );
        return Ok((r, None));
    };
    let inv = Arc::new(inv);
    // The NIC-by-NIC cells of the path matrix only where something shows or compares them:
    // the HTML page prints the matrix, a baseline may pin any pair.
    let cells = if opts.format == OutputFormat::Html || opts.expect.is_some() {
        crate::topo::Cells::All
    } else {
        crate::topo::Cells::WithGpu
    };
    let topo = Arc::new(crate::topo::build_with(&inv, cells));
    let mut findings = budgeted_level0(&inv, &topo, &source.libs, budget)?;
    let mut probe_reports = None;
    let mut bandwidth = Vec::new();
    if opts.level >= 1 {
        let reports = level1_reports_within(source, &topo, opts, budget)?;
        checks::probe::level1::settle_link_speed(&reports, &mut findings, &topo);
        for r in &reports {
            checks::probe::level1::findings(r, &mut findings);
        }
        // A CUDA probe on a node without GPUs (or p2p with one GPU) has nothing to measure.
        for f in findings.iter_mut().filter(|f| f.status == Status::Skip) {
            let few = match f.id {
                CheckId::ProbeH2d | CheckId::ProbeD2h | CheckId::ProbeDmabufExport => 1,
                CheckId::ProbeP2p => 2,
                _ => continue,
            };
            if topo.gpus.len() < few {
                f.skip = Some(SkipKind::NotApplicable);
            }
        }
        bandwidth.extend(reports.iter().flat_map(crate::report::Bandwidth::of_probe));
        probe_reports = Some(reports);
        if let Some(r) = nccl_level1(source, &topo, opts, budget, &mut findings)? {
            bandwidth.extend(crate::report::Bandwidth::of_nccl(&r));
        }
    }
    // Levels 2-4 start only with budget left; a measurement the budget's end cut short is
    // unknown, not a failure of the machine (`cut_short`).
    for level in 2..=opts.level.min(4) {
        let before = findings.len();
        if let Some(b) = budget
            && b.spent_at(|| format!("an earlier step, before level {level}"))
        {
            b.unjudged(Step::Level(level), level, &mut findings);
            continue;
        }
        match level {
            2 => level2(source, &inv, opts.probe.progress, budget, &mut findings)?,
            3 => level3(
                source,
                &inv,
                &topo,
                opts.probe.progress,
                budget,
                &mut findings,
            )?,
            _ => level4(source, &inv, &topo, &opts.probe.cuda_homes, &mut findings)?,
        }
        if let Some(b) = budget {
            cut_short(b, level, &mut findings[before..]);
        }
    }
    if let Some(b) = &opts.expect {
        findings.extend(crate::checks::baseline::compare(
            b,
            &inv,
            &topo,
            probe_reports.as_deref(),
        ));
    }
    let mut r = finish(source, opts, &inv, Some(topo), findings, budget);
    r.bandwidth = bandwidth;
    Ok((r, Some(inv)))
}

/// The report of what was judged, gated.
fn finish(
    source: &Source,
    opts: &CheckOptions,
    inv: &Inventory,
    topo: Option<Arc<crate::topo::Topology>>,
    mut findings: Vec<Finding>,
    budget: Option<&Budget>,
) -> CheckReport {
    checks::debug_assert_sound(&findings);
    opts.overrides.apply(&mut findings);
    checks::fold_excess(&mut findings);
    let mut r = CheckReport::new(source.info.clone(), opts.level, inv, findings);
    if let Some(t) = topo {
        // The report takes the topology over; a copy only where a thread still shares it.
        let t = Arc::try_unwrap(t).unwrap_or_else(|t| (*t).clone());
        r = r
            .with_gpus(&t)
            .with_topology(TopoReport::new(source.info.clone(), inv, t));
    }
    if let Some(b) = budget {
        r = r.with_time_budget(b.seconds(), b.spent_during());
        r.abandoned_work = b.abandoned();
    }
    r.at(source.hostname.clone(), source.time.clone())
        .gated(opts.strict, opts.fail_on_skip)
}

/// After a probe level ran under the budget: when the budget is now spent, a finding of that
/// level that is not a pass was (or may have been) cut short by the capped timeout: unknown,
/// with the budget's reason, never a failure of the machine.
fn cut_short(b: &Budget, level: u8, findings: &mut [Finding]) {
    if !b.spent_at(|| format!("the level-{level} probes")) {
        return;
    }
    let reason = b.reason();
    for f in findings
        .iter_mut()
        .filter(|f| matches!(f.status, Status::Fail | Status::Warn))
    {
        *f = Finding::new(f.id, f.subject.clone(), Status::Skip, reason.clone());
    }
}

/// Level 2: a short, validated RDMA-write loopback on every ACTIVE port of every RDMA device
/// (`rdma::level2`), as `probe.write-bw` findings.
fn level2(
    source: &Source,
    inv: &Inventory,
    progress: bool,
    budget: Option<&Budget>,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    use crate::rdma::engine::error::ErrorClass;
    use crate::rdma::level2::{Limits, PortOutcome};
    use checks::probe::level2;
    if replay_skip(source, level2::ID, "RDMA-write probes", findings) {
        return Ok(());
    }
    let spent_before = |subject: &str| {
        let b = budget?;
        b.spent_at(|| format!("the level-2 probes, before {} {subject}", level2::ID))
            .then(|| b.reason())
    };
    let step_timeout = || cap(budget, std::time::Duration::from_secs(30));
    let limits = Limits {
        spent_before: &spent_before,
        step_timeout: &step_timeout,
    };
    let runs = crate::rdma::level2::measure_ports(&inv.rdma, progress, &limits);
    let before = findings.len();
    for r in runs {
        match r.outcome {
            PortOutcome::Skipped {
                reason,
                not_applicable,
            } => {
                let f = Finding::new(level2::ID, r.subject, Status::Skip, reason);
                findings.push(if not_applicable {
                    f.not_applicable()
                } else {
                    f
                });
            }
            PortOutcome::Measured {
                class: Some(ErrorClass::Interrupted),
                ..
            } => anyhow::bail!(
                "interrupted by {}; queue pairs destroyed and memory regions deregistered",
                crate::signals::which()
            ),
            PortOutcome::Measured { report, .. } => level2::findings(&r.subject, &report, findings),
        }
    }
    if findings.len() == before {
        findings.push(
            Finding::new(
                level2::ID,
                "host",
                Status::Skip,
                "no RDMA devices: nothing to probe",
            )
            .not_applicable(),
        );
    }
    Ok(())
}

/// Level 3: a short, validated GPUDirect RDMA loopback per GPU (both buffers in its memory,
/// registered as NCCL would) against its closest ACTIVE RDMA port.
fn level3(
    source: &Source,
    inv: &Inventory,
    topo: &crate::topo::Topology,
    progress: bool,
    budget: Option<&Budget>,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    use crate::rdma::engine::error::ErrorClass;
    use crate::rdma::level3;
    use crate::rdma::request::gdr::GdrRequest;
    use crate::rdma::request::write_bw::{Role, WriteBwRequest};
    use crate::report::rdma::plan::Plan;
    use checks::probe::level3 as l3;
    if replay_skip(source, l3::ID, "GPUDirect RDMA probes", findings) {
        return Ok(());
    }
    let plan = Plan::check_level3().map_err(|e| anyhow::anyhow!("level-3 plan: {e}"))?;
    let base = WriteBwRequest {
        device: String::new(),
        port: 1,
        gid_index: None,
        plan,
        role: Role::Loopback,
        timeout: cap(budget, std::time::Duration::from_secs(30)),
        progress,
    };
    // The level-0 findings so far are the evidence a failure's cause cites.
    let runs = level3::measure_gdr(
        &machine(source, inv, topo, findings),
        &base,
        &GdrRequest::check_level3(),
    );
    if runs
        .iter()
        .any(|r| r.class == Some(ErrorClass::Interrupted))
    {
        anyhow::bail!(
            "interrupted by {}; memory regions deregistered and GPU memory freed",
            crate::signals::which()
        );
    }
    for r in &runs {
        findings.push(l3::finding(&r.subject, &r.report));
    }
    Ok(())
}

/// What levels 3 and 4 run on: the source's reader, its inventory and topology, and the
/// findings so far (the evidence a failure's cause cites).
pub(super) fn machine<'a>(
    source: &'a Source,
    inv: &'a Inventory,
    topo: &'a crate::topo::Topology,
    level0: &'a [Finding],
) -> crate::rdma::request::gdr::Machine<'a> {
    crate::rdma::request::gdr::Machine {
        inv,
        topo,
        level0,
        netdev_macs: crate::inventory::netdev_macs(&source.sysroot, inv),
    }
}

/// Levels 2-4 measure the live machine: on a recorded tree, one not-applicable skip for `id`
/// (true: the caller has nothing more to do).
fn replay_skip(
    source: &Source,
    id: checks::CheckId,
    what: &str,
    findings: &mut Vec<Finding>,
) -> bool {
    if source.is_live() {
        return false;
    }
    findings.push(
        Finding::new(
            id,
            "host",
            Status::Skip,
            format!("{what} run on the live machine; a recorded tree does not replay them"),
        )
        .not_applicable(),
    );
    true
}

/// Level 4: a short, validated GPU-initiated RDMA-write loopback per GPU on its closest ACTIVE
/// port, which must be an mlx5 one (probe.gpu-write-bw).
fn level4(
    source: &Source,
    inv: &Inventory,
    topo: &crate::topo::Topology,
    cuda_homes: &[std::path::PathBuf],
    findings: &mut Vec<Finding>,
) -> Result<()> {
    use crate::rdma::engine::error::ErrorClass;
    use crate::rdma::level4;
    use crate::rdma::request::gpu_write_bw::GpuWriteRequest;
    use checks::probe::level4 as l4;
    if replay_skip(source, l4::ID, "GPU-initiated RDMA probes", findings) {
        return Ok(());
    }
    let runs = level4::measure_gpu_write(
        &machine(source, inv, topo, findings),
        &source.libs,
        &GpuWriteRequest::check_level4(),
        cuda_homes,
    );
    if runs
        .iter()
        .any(|r| r.class == Some(ErrorClass::Interrupted))
    {
        anyhow::bail!("interrupted by {}", crate::signals::which());
    }
    for r in &runs {
        findings.push(l4::finding(&r.subject, &r.report));
    }
    Ok(())
}

/// `deadline`, or what is left of the budget when that is less.
fn cap(budget: Option<&Budget>, deadline: std::time::Duration) -> std::time::Duration {
    budget.map_or(deadline, |b| b.cap(deadline))
}

/// The level-1 reports under the budget: a probe not finished when it ran out, and every probe
/// after it, is a skipped report with the budget's reason (one unknown finding each).
fn level1_reports_within(
    source: &Source,
    topo: &crate::topo::Topology,
    opts: &CheckOptions,
    budget: Option<&Budget>,
) -> Result<Vec<ProbeReport>, CheckError> {
    let Some(b) = budget else {
        return level1_reports(source, topo, opts);
    };
    let cut = |kind: ProbeKind| {
        let mut r = ProbeReport::new(kind, opts.probe.policy.clone());
        r.skipped = Some(b.reason());
        r.status = probes::Status::Skip;
        r
    };
    let mut out = Vec::new();
    for kind in LEVEL1 {
        let id = checks::probe::level1::id_of(kind);
        if b.spent_at(|| format!("an earlier step, before {id}")) {
            out.push(cut(kind));
            continue;
        }
        if source.is_live() {
            let o = probes::options::ProbeOptions {
                kind,
                deadline: b.cap(opts.probe.deadline),
                ..opts.probe.clone()
            };
            let r = probes::live::measure_probe(&o, topo);
            // Cut by the budget's end (its capped deadline), not hung: not judged. The copy may
            // still be running on its thread, so the process leaves without joining it.
            if r.hung && b.spent_at(|| id.to_string()) {
                b.abandon();
                out.push(cut(kind));
                continue;
            }
            if let Some(e) = stopped(&r) {
                return Err(e);
            }
            // Broken off at the budget's end (the capped deadline): not judged.
            if r.report.error.is_some() && b.spent_at(|| id.to_string()) {
                out.push(cut(kind));
            } else {
                out.push(r.report);
            }
            continue;
        }
        let sr = source.sysroot.clone();
        let file = format!("/probes/{}.json", kind.as_str());
        let doing = format!("{id} (reading {file}: a read not answering)");
        match wait_at_most(
            b.remaining(),
            move || crate::probes::recorded_probe_in(&sr, kind),
            || file.clone(),
        )? {
            Waited::Done(r) => out.push(replayed(r?, kind, opts)),
            Waited::Cut(_) => {
                b.cut(doing);
                out.push(cut(kind));
            }
        }
    }
    Ok(out)
}

/// What ends a level-1 run, worded once for both paths (with and without a budget): a probe
/// that hung (CUDA work still outstanding at its deadline: the process must leave), or Ctrl-C.
fn stopped(r: &probes::live::ProbeRun) -> Option<CheckError> {
    if r.hung {
        return Some(CheckError::Hung(format!(
            "level-1 probe {} hung: {}",
            checks::probe::level1::id_of(r.report.probe),
            r.report.error.clone().unwrap_or_default()
        )));
    }
    r.interrupted.then(|| {
        anyhow::anyhow!(
            "interrupted by {}; device and pinned memory freed",
            crate::signals::which()
        )
        .into()
    })
}

/// `probe.nccl` in `check --level 1`, after the copies: measured on the live machine (inside
/// the node, `config::nccl_for_check`'s sweep), or replayed from a tree's `probes/nccl.json`
/// (what `probe nccl --json` printed) and re-evaluated. The report, where there is one.
fn nccl_level1(
    source: &Source,
    topo: &crate::topo::Topology,
    opts: &CheckOptions,
    budget: Option<&Budget>,
    findings: &mut Vec<Finding>,
) -> Result<Option<crate::report::nccl::NcclReport>, CheckError> {
    use crate::nccl::live::LiveError;
    let id = CheckId::ProbeNccl;
    if topo.gpus.len() < 2 {
        let mut f = Finding::new(
            id,
            "host",
            Status::Skip,
            format!(
                "NCCL collectives need two GPUs; the topology has {}",
                topo.gpus.len()
            ),
        );
        f.skip = Some(SkipKind::NotApplicable);
        findings.push(f);
        return Ok(None);
    }
    if let Some(b) = budget
        && b.spent_at(|| format!("an earlier step, before {id}"))
    {
        findings.push(Finding::new(id, "host", Status::Skip, b.reason()));
        return Ok(None);
    }
    let report = if source.is_live() {
        let deadline = budget.map_or(opts.probe.deadline, |b| b.cap(opts.probe.deadline));
        let o = crate::config::nccl_for_check(deadline, opts.probe.progress);
        match crate::nccl::live::run_in_node(&o, topo, None) {
            Ok(r) => r,
            Err(e @ LiveError::Interrupted { .. }) => return Err(anyhow::anyhow!(e).into()),
            Err(e @ LiveError::Deadline { .. }) => {
                // Cut by the budget's end (its capped deadline): not judged; otherwise NCCL
                // itself did not finish in time, which the machine failed.
                if let Some(b) = budget
                    && b.spent_at(|| id.to_string())
                {
                    findings.push(Finding::new(id, "host", Status::Skip, b.reason()));
                } else {
                    findings.push(
                        Finding::new(id, "host", Status::Fail, e.to_string()).fix(
                            "A collective that never finishes points at a hung GPU, NVLink or fabric manager: check gpu.xid, gpu.fabric and `nvidia-smi -q`; `gpudoctor probe nccl` shows the step it hung in",
                        ),
                    );
                }
                return Ok(None);
            }
            Err(e @ LiveError::Spawn(_)) => {
                findings.push(Finding::new(
                    id,
                    "host",
                    Status::Skip,
                    format!("not judged: {e}"),
                ));
                return Ok(None);
            }
        }
    } else {
        let file = "probes/nccl.json";
        match crate::source::recorded_document_in(&source.sysroot, file)? {
            None => {
                findings.push(Finding::new(
                    id,
                    "host",
                    Status::Skip,
                    format!("not recorded (no {file} in the tree)"),
                ));
                return Ok(None);
            }
            Some(b) => {
                let mut r: crate::report::nccl::NcclReport =
                    serde_json::from_slice(&b).map_err(|e| {
                        anyhow::anyhow!(
                            "{}: not a `probe nccl --json` report: {e}",
                            source.sysroot.root_dir().join(file).display()
                        )
                    })?;
                r.evaluate();
                r
            }
        }
    };
    checks::probe::level1::nccl_findings(&report, findings);
    Ok(Some(report))
}

/// The level-1 probes, in the order they run.
const LEVEL1: [ProbeKind; 4] = [
    ProbeKind::H2d,
    ProbeKind::D2h,
    ProbeKind::P2p,
    ProbeKind::DmabufExport,
];

/// A recorded probe re-evaluated, or a skipped report saying it was not recorded.
fn replayed(r: RecordedProbe, kind: ProbeKind, opts: &CheckOptions) -> ProbeReport {
    match r {
        RecordedProbe::Report(mut r) => {
            r.evaluate();
            *r
        }
        RecordedProbe::Absent { file } => {
            let mut r = ProbeReport::new(kind, opts.probe.policy.clone());
            r.skipped = Some(format!("not recorded (no {file} in the tree)"));
            r.status = probes::Status::Skip;
            r
        }
    }
}

/// Level-1 probe reports: measured on a live machine, or read from a recorded tree's
/// `probes/<name>.json` and re-evaluated (so thresholds and verdicts replay offline).
pub(super) fn level1_reports(
    source: &Source,
    topo: &crate::topo::Topology,
    opts: &CheckOptions,
) -> Result<Vec<ProbeReport>, CheckError> {
    if source.is_live() {
        let runs = probes::live::run_level1(&opts.probe, topo);
        // A hung probe ends the run before an interrupted one (the process must leave now).
        let hung = runs.iter().filter(|r| r.hung);
        if let Some(e) = hung.chain(runs.iter()).find_map(stopped) {
            return Err(e);
        }
        return Ok(runs.into_iter().map(|r| r.report).collect());
    }
    let mut out = Vec::new();
    for kind in LEVEL1 {
        out.push(replayed(
            crate::probes::recorded_probe(source, kind)?,
            kind,
            opts,
        ));
    }
    Ok(out)
}
