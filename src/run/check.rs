//! `topo` and `check`: discovery, the topology, level-0 checks, and the probe levels on top.

use super::{EXIT_FAILED_CHECK, EXIT_OK, inventory};
use crate::checks::{self, CheckId, Finding, SkipKind, Status};
use crate::config::CheckOptions;
use crate::inventory::{Inventory, Scope};
use crate::probes::{self, ProbeKind, ProbeReport};
use crate::report::{CheckReport, TopoReport};
use crate::source::{RecordedProbe, Source, SourceSpec};
use anyhow::Result;

/// A level-1 probe's CUDA work hung: the run cannot go on, and the process must end without
/// joining the worker (`Outcome::hung`).
#[derive(Debug)]
pub struct Hung(pub String);

impl std::fmt::Display for Hung {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Hung {}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    topo_report_from(&Source::open(spec)?)
}

pub fn topo_report_from(source: &Source) -> Result<TopoReport> {
    let inv = inventory(source, Scope::Topology)?;
    let topo = crate::topo::build(&inv);
    Ok(TopoReport::new(source.info.clone(), &inv, topo))
}

pub fn check_report(spec: &SourceSpec, opts: &CheckOptions) -> Result<CheckReport> {
    check_report_from(&Source::open(spec)?, opts)
}

pub fn check_report_from(source: &Source, opts: &CheckOptions) -> Result<CheckReport> {
    let inv = inventory(source, Scope::Checks)?;
    let topo = crate::topo::build(&inv);
    let ctx = checks::Ctx {
        inv: &inv,
        topo: &topo,
        libs: &source.libs,
    };
    let mut findings = checks::run_level0(&ctx);
    let mut probe_reports = None;
    if opts.level >= 1 {
        let reports = level1_reports(source, &topo, opts)?;
        checks::level1::settle_link_speed(&reports, &mut findings, &topo);
        for r in &reports {
            checks::level1::findings(r, &mut findings);
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
        probe_reports = Some(reports);
    }
    if opts.level >= 2 {
        level2(source, &inv, opts.probe.progress, &mut findings)?;
    }
    if opts.level >= 3 {
        level3(source, &inv, &topo, opts.probe.progress, &mut findings)?;
    }
    if opts.level >= 4 {
        level4(source, &inv, &topo, &opts.probe.cuda_homes, &mut findings)?;
    }
    if let Some(b) = &opts.expect {
        findings.extend(crate::baseline::compare(
            b,
            &inv,
            &topo,
            probe_reports.as_deref(),
        ));
    }
    checks::debug_assert_sound(&findings);
    opts.overrides.apply(&mut findings);
    Ok(
        CheckReport::new(source.info.clone(), opts.level, &inv, findings)
            .with_gpus(&topo)
            .at(source.hostname.clone(), source.time.clone())
            .gated(opts.strict, opts.fail_on_skip),
    )
}

/// Level 2: a short, validated RDMA-write loopback on every ACTIVE port of every RDMA device.
fn level2(
    source: &Source,
    inv: &Inventory,
    opts_progress: bool,
    findings: &mut Vec<Finding>,
) -> Result<()> {
    use crate::rdma::engine::run as rdma;
    use crate::rdma::request::write_bw::{Plan, Role, WriteBwRequest};
    use checks::level2;
    if replay_skip(source, level2::ID, "RDMA-write probes", findings) {
        return Ok(());
    }
    let before = findings.len();
    for d in &inv.rdma {
        // Hardware unknown (its `device` link unreadable): whether a line rate applies (a NIC)
        // or not (rxe) is unknown, so it is not planned (issue 21).
        if let Some(why) = d.unresolved() {
            findings.push(Finding::new(
                level2::ID,
                d.name.clone(),
                Status::Skip,
                format!(
                    "RDMA device {}: PCI function unknown ({why}): not measured",
                    d.name
                ),
            ));
            continue;
        }
        for p in &d.ports {
            let subject = format!("{}/{}", d.name, p.port);
            if p.state_kind != Some(crate::facts::PortState::Active) {
                // rdma.port-state judges the port; there is nothing to measure here.
                findings.push(
                    Finding::new(
                        level2::ID,
                        subject,
                        Status::Skip,
                        format!(
                            "port not ACTIVE ({}): see rdma.port-state",
                            p.state.as_deref().unwrap_or("state unknown")
                        ),
                    )
                    .not_applicable(),
                );
                continue;
            }
            // Short on purpose: 64 KiB and 1 MiB writes, 500 each, 5 timed repetitions judged
            // on their median, validated (about 2.7 GB per port: tens of milliseconds at line
            // rate). A software device (rxe, no PCI function) moves ~50 MB/s under emulation
            // and is measured, not judged: 32 each, 3 repetitions.
            let (iters, reps) = if d.bdf().is_some() { (500, 5) } else { (32, 3) };
            let plan = match Plan::new(vec![65536, 1 << 20], iters, 128, 16, None, 1, true)
                .and_then(|p| p.with_repetitions(reps))
            {
                Ok(p) => p,
                Err(e) => {
                    findings.push(Finding::new(
                        level2::ID,
                        subject,
                        Status::Skip,
                        e.to_string(),
                    ));
                    continue;
                }
            };
            let req = WriteBwRequest {
                device: d.name.clone(),
                port: u8::try_from(p.port).unwrap_or(1),
                gid_index: None,
                plan,
                role: Role::Loopback,
                timeout: std::time::Duration::from_secs(30),
                progress: opts_progress,
            };
            let (report, class) = rdma::write_bw(&source.sysroot, &req);
            if class == Some(crate::rdma::engine::error::ErrorClass::Interrupted) {
                anyhow::bail!(
                    "interrupted by {}; queue pairs destroyed and memory regions deregistered",
                    crate::signals::which()
                );
            }
            level2::findings(&subject, &report, findings);
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
    findings: &mut Vec<Finding>,
) -> Result<()> {
    use crate::rdma::engine::error::ErrorClass;
    use crate::rdma::level3;
    use crate::rdma::request::gdr::{GdrMode, GdrRequest, GpuSelect, GpuSide};
    use crate::rdma::request::write_bw::{Plan, Role, WriteBwRequest};
    use checks::level3 as l3;
    if replay_skip(source, l3::ID, "GPUDirect RDMA probes", findings) {
        return Ok(());
    }
    // As level 2's: 64 KiB and 1 MiB writes, 500 each, 5 timed repetitions, validated (copied
    // back from GPU memory).
    let plan = Plan::new(vec![65536, 1 << 20], 500, 128, 16, None, 1, true)
        .map_err(|e| anyhow::anyhow!("level-3 plan: {e}"))?;
    let base = WriteBwRequest {
        device: String::new(),
        port: 1,
        gid_index: None,
        plan,
        role: Role::Loopback,
        timeout: std::time::Duration::from_secs(30),
        progress,
    };
    let req = GdrRequest {
        gpu: GpuSelect::Auto,
        mode: GdrMode::Auto,
        gpu_side: GpuSide::Both,
        repeat: 1,
        device_given: false,
    };
    // The level-0 findings so far are the evidence a failure's cause cites.
    let runs = level3::run(&machine(source, inv, topo, findings), &base, &req);
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
        sr: &source.sysroot,
        inv,
        topo,
        level0,
        netdev_macs: crate::rdma::level4::netdev_macs(&source.sysroot, inv),
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
    use crate::rdma::request::gdr::GpuSelect;
    use crate::rdma::request::gpu_write_bw::{GpuWriteRequest, NicHandler};
    use checks::level4 as l4;
    if replay_skip(source, l4::ID, "GPU-initiated RDMA probes", findings) {
        return Ok(());
    }
    // Short: 64 B and 4 KiB writes, 64 launches of 512 each, validated.
    let req = GpuWriteRequest {
        gpu: GpuSelect::Auto,
        device: None,
        port: 1,
        sizes: vec![64, 4096],
        iters: 64,
        writes_per_iter: 512,
        handler: NicHandler::Auto,
        queues: crate::rdma::request::gpu_write_bw::QueuePlace::Auto,
        validate: true,
    };
    let runs = level4::run(
        &machine(source, inv, topo, findings),
        &source.libs,
        &req,
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

/// Level-1 probe reports: measured on a live machine, or read from a recorded tree's
/// `probes/<name>.json` and re-evaluated (so thresholds and verdicts replay offline).
pub(super) fn level1_reports(
    source: &Source,
    topo: &crate::topo::Topology,
    opts: &CheckOptions,
) -> Result<Vec<ProbeReport>> {
    if source.is_live() {
        let runs = probes::live::run_level1(&opts.probe, topo);
        if let Some(r) = runs.iter().find(|r| r.hung) {
            return Err(Hung(format!(
                "level-1 probe {} hung: {}",
                checks::level1::id_of(r.report.probe),
                r.report.error.clone().unwrap_or_default()
            ))
            .into());
        }
        if runs.iter().any(|r| r.interrupted) {
            anyhow::bail!(
                "interrupted by {}; device and pinned memory freed",
                crate::signals::which()
            );
        }
        return Ok(runs.into_iter().map(|r| r.report).collect());
    }
    let mut out = Vec::new();
    for kind in [
        ProbeKind::H2d,
        ProbeKind::D2h,
        ProbeKind::P2p,
        ProbeKind::DmabufExport,
    ] {
        out.push(match source.recorded_probe(kind)? {
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
        });
    }
    Ok(out)
}

/// Exit code for a check report: 1 when a check failed (or warned, with --strict; or, with
/// --fail-on-skip, something that should have been judged was not, or nothing was judged).
/// The exit code of a `check`: the gate has already decided (`CheckReport::gated`), so the
/// code is the verdict's and nothing else.
pub fn check_exit_code(r: &CheckReport) -> i32 {
    match r.status {
        Status::Fail => EXIT_FAILED_CHECK,
        _ => EXIT_OK,
    }
}
