//! `gpudoctor probe ...`: the CUDA probes and write-bw on the live machine (the config has
//! already refused --root/--bundle and judged the arguments).

use super::check::topo_report;
use super::{EXIT_ERROR, EXIT_FAILED_CHECK, EXIT_OK, Outcome};
use crate::config::{WriteBwConfig, json_or_table};
use crate::export::{ExportOptions, Format, export};
use crate::probes::live::{self, ProbeOptions};
use crate::source::SourceSpec;
use crate::sysroot::SysRoot;
use anyhow::Result;

/// `gpudoctor probe h2d|d2h|p2p|dmabuf-export`: exit 0 on pass or skip (no CUDA is not a
/// failure of the machine; with --fail-on-skip it is 1), 1 when a measurement failed or a copy hung, 2 when gpudoctor could
/// not finish (Ctrl-C).
pub(super) fn cuda(
    source: &SourceSpec,
    options: &ProbeOptions,
    format: Format,
    fail_on_skip: bool,
    text: ExportOptions,
) -> Result<Outcome> {
    let topo = topo_report(source)?.topology;
    if let Some(n) = options.gpu {
        let want = format!("GPU{n}");
        if !topo.gpus.is_empty() && !topo.gpus.iter().any(|g| g.label == want) {
            let have: Vec<&str> = topo.gpus.iter().map(|g| g.label.as_str()).collect();
            anyhow::bail!("--gpu {n}: no {want} here (GPUs: {})", have.join(", "));
        }
    }
    let run = live::measure_probe(options, &topo);
    let stdout = export(format, text, "a probe report", |e| e.probe(&run.report))?;
    let code = super::exit::probe(run.report.status, run.interrupted, fail_on_skip);
    Ok(Outcome {
        stdout,
        code,
        hung: run.hung,
    })
}

/// `probe write-bw`: exit 0 when it ran and passed, or could not run here at all (no
/// libibverbs, no RDMA device or kernel support: a skip, as for the CUDA probes; 1 with
/// --fail-on-skip); 1 when the
/// machine failed it (port down, completion error, peer unreachable); 2 for bad arguments.
pub(super) fn write_bw(w: &WriteBwConfig, text: ExportOptions) -> Result<Outcome> {
    use crate::rdma::engine::error::ErrorClass;
    use crate::rdma::engine::run as rdma;
    use crate::report::rdma::write_bw::Status;
    if let Some(g) = &w.gdr {
        return gdr_write_bw(w, g, text);
    }
    // What sysfs says of the device, read before the probe starts (the engine reads nothing).
    let facts: Vec<_> = crate::inventory::read_rdma_device(&SysRoot::live(), &w.request.device)
        .into_iter()
        .collect();
    let (report, class) = rdma::write_bw(&facts, &w.request);
    if class == Some(ErrorClass::Usage) {
        let why = match &report.status {
            Status::Error { reason } => reason.clone(),
            other => format!("{other:?}"),
        };
        anyhow::bail!("probe write-bw: {why}");
    }
    let stdout = export(w.format.into(), text, "a write-bw report", |e| {
        e.write_bw(&[&report])
    })?;
    Ok(Outcome {
        stdout,
        code: match class {
            None => EXIT_OK,
            Some(ErrorClass::Interrupted) => EXIT_ERROR,
            Some(ErrorClass::Skip) if !w.fail_on_skip => EXIT_OK,
            Some(_) => EXIT_FAILED_CHECK,
        },
        hung: false,
    })
}

/// `probe write-bw --gpu/--gdr` (level 3): one report per GPU (JSON: one run each),
/// exit as for level 2 with the worst run deciding; Ctrl-C is exit 2.
fn gdr_write_bw(
    w: &WriteBwConfig,
    g: &crate::rdma::request::gdr::GdrRequest,
    text: ExportOptions,
) -> Result<Outcome> {
    use crate::rdma::engine::error::ErrorClass;
    use crate::rdma::level3;
    use crate::report::rdma::write_bw::Status;
    let (source, inv, topo, level0) = live_gpu_machine(g.gpu, true)?;
    let m = super::check::machine(&source, &inv, &topo, &level0);
    let runs = level3::measure_gdr(&m, &w.request, g);
    if let Some(r) = runs.iter().find(|r| r.class == Some(ErrorClass::Usage)) {
        let why = match &r.report.status {
            Status::Error { reason } => reason.clone(),
            other => format!("{other:?}"),
        };
        anyhow::bail!("probe write-bw: {why}");
    }
    let reports: Vec<&crate::report::rdma::write_bw::WriteBwReport> =
        runs.iter().map(|r| &r.report).collect();
    let stdout = export(w.format.into(), text, "a write-bw report", |e| {
        e.write_bw(&reports)
    })?;
    let code = super::exit::write_bw_runs(runs.iter().map(|r| r.class), w.fail_on_skip);
    Ok(Outcome {
        stdout,
        code,
        hung: false,
    })
}

/// The live machine as levels 3 and 4 need it: source, inventory, topology, level-0 findings
/// (the evidence a failure's cause cites). `--gpu N` naming no GPU is a usage error (exit 2);
/// on a machine without GPUs too when `refuse_without_gpus` (level 4 reports that as a skip).
fn live_gpu_machine(
    gpu: crate::rdma::request::gdr::GpuSelect,
    refuse_without_gpus: bool,
) -> Result<(
    crate::source::Source,
    crate::inventory::Inventory,
    crate::topo::Topology,
    Vec<crate::findings::Finding>,
)> {
    let source = crate::source::Source::open(&SourceSpec::Live)?;
    let inv = super::inventory(&source, crate::inventory::Scope::Checks)?;
    let topo = crate::topo::build(&inv);
    if let crate::rdma::request::gdr::GpuSelect::One(n) = gpu
        && topo.gpu(&format!("GPU{n}")).is_none()
        && (refuse_without_gpus || !topo.gpus.is_empty())
    {
        let have: Vec<&str> = topo.gpus.iter().map(|g| g.label.as_str()).collect();
        anyhow::bail!(
            "--gpu {n}: no GPU{n} here (GPUs: {})",
            if have.is_empty() {
                "none".to_string()
            } else {
                have.join(", ")
            }
        );
    }
    let level0 = crate::checks::run_level0(&crate::checks::Ctx {
        inv: &inv,
        topo: &topo,
        libs: &source.libs,
    });
    Ok((source, inv, topo, level0))
}

/// `probe gpu-write-bw` (level 4): one report per GPU (JSON: one run each); exit 0 on
/// a skip (1 with --fail-on-skip), 1 when the machine failed it, 2 for an unknown --gpu N.
pub(super) fn gpu_write_bw(
    w: &crate::config::GpuWriteBwConfig,
    text: ExportOptions,
) -> Result<Outcome> {
    use crate::rdma::level4;
    let (source, inv, topo, level0) = live_gpu_machine(w.request.gpu, false)?;
    let m = super::check::machine(&source, &inv, &topo, &level0);
    let runs = level4::measure_gpu_write(&m, &source.libs, &w.request, &w.cuda_homes);
    let reports: Vec<&crate::report::rdma::gpu_write_bw::GpuWriteBwReport> =
        runs.iter().map(|r| &r.report).collect();
    let stdout = export(json_or_table(w.json), text, "a gpu-write-bw report", |e| {
        e.gpu_write_bw(&reports)
    })?;
    let code = super::exit::write_bw_runs(runs.iter().map(|r| r.class), w.fail_on_skip);
    Ok(Outcome {
        stdout,
        code,
        hung: false,
    })
}
