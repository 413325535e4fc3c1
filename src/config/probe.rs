//! `gpudoctor probe ...`, resolved: the CUDA probes' options validated, write-bw's plan and role,
//! level 3's and level 4's requests.

use super::defaults::probe_defaults;
use super::output::{OutputFormat, probe_format};
use super::{Action, Env};
use crate::cli::{DmabufExportArgs, GpuWriteBwArgs, ProbeArgs, ProbeCommand, WriteBwArgs};
use crate::probes::ProbeKind;
use crate::probes::options::ProbeOptions;
use crate::rdma::request::write_bw::{self, Role, WriteBwRequest};
use crate::report::rdma::plan::{Plan, PlanSpec};
use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::time::Duration;

/// `probe write-bw`, resolved: the request the engine runs and how to print it.
#[derive(Debug, Clone)]
pub struct WriteBwConfig {
    pub request: WriteBwRequest,
    /// Level 3 (`--gpu`/`--gdr`): GPU memory, the registration path, the NIC per GPU.
    pub gdr: Option<crate::rdma::request::gdr::GdrRequest>,
    pub json: bool,
    pub format: OutputFormat,
    /// A skip (no RDMA device, no libibverbs) exits 1 (`--fail-on-skip`).
    pub fail_on_skip: bool,
}

/// `probe gpu-write-bw`, resolved.
#[derive(Debug, Clone)]
pub struct GpuWriteBwConfig {
    pub request: crate::rdma::request::gpu_write_bw::GpuWriteRequest,
    pub json: bool,
    /// A skip exits 1 (`--fail-on-skip`).
    pub fail_on_skip: bool,
    /// CUDA_HOME / CUDA_PATH, where NVRTC may live (the kernel is compiled at run time).
    pub cuda_homes: Vec<PathBuf>,
}

pub(super) fn resolve(cmd: ProbeCommand, env: &Env) -> Result<Action> {
    Ok(match cmd {
        ProbeCommand::WriteBw(w) => Action::WriteBw(write_bw_config(w, env)?),
        ProbeCommand::GpuWriteBw(w) => Action::GpuWriteBw(gpu_write_bw_config(w, env)?),
        ProbeCommand::H2d(p) => probe_action(ProbeKind::H2d, p, env)?,
        ProbeCommand::D2h(p) => probe_action(ProbeKind::D2h, p, env)?,
        ProbeCommand::P2p(p) => probe_action(ProbeKind::P2p, p, env)?,
        ProbeCommand::DmabufExport(p) => dmabuf_export_action(p, env)?,
        ProbeCommand::Nccl(n) => Action::Nccl(Box::new(super::nccl::resolve(n, env)?)),
        ProbeCommand::NcclWorker => Action::NcclWorker,
    })
}

fn dmabuf_export_action(p: DmabufExportArgs, env: &Env) -> Result<Action> {
    let format = probe_format(p.json, p.format)?;
    Ok(Action::Probe {
        options: ProbeOptions {
            gpu: p.gpu,
            deadline: Duration::from_secs(p.deadline),
            ..probe_defaults(env, ProbeKind::DmabufExport)
        },
        json: format == OutputFormat::Json,
        format,
        fail_on_skip: p.gate.fail_on_skip,
    })
}

fn probe_action(kind: ProbeKind, p: ProbeArgs, env: &Env) -> Result<Action> {
    let options = ProbeOptions {
        gpu: p.gpu,
        size_bytes: p.size,
        iters: p.iters,
        warmup: p.warmup,
        deadline: Duration::from_secs(p.deadline),
        ..probe_defaults(env, kind)
    };
    options.validate().map_err(anyhow::Error::msg)?;
    let format = probe_format(p.json, p.format)?;
    // Progress is for a person at a terminal: silent for machine output.
    let options = ProbeOptions {
        progress: options.progress && format == OutputFormat::Table,
        ..options
    };
    Ok(Action::Probe {
        options,
        json: format == OutputFormat::Json,
        format,
        fail_on_skip: p.gate.fail_on_skip,
    })
}

/// Level 3's options: present with --gpu or --gdr; the others need one of them.
fn level3_request(
    w: &WriteBwArgs,
    role: &Role,
    format: OutputFormat,
) -> Result<Option<crate::rdma::request::gdr::GdrRequest>> {
    use crate::cli::GpuArg;
    use crate::rdma::request::gdr::{GdrRequest, GpuSelect, GpuSide};
    use crate::report::rdma::gdr::GdrMode;
    if w.gpu.is_none() && w.gdr.is_none() {
        if w.repeat != 1 {
            bail!("--repeat applies to level-3 runs (--gpu or --gdr)");
        }
        return Ok(None);
    }
    if w.gpu_side.is_some() && *role != Role::Loopback {
        bail!(
            "--gpu-side is for loopback; in two-node mode --gpu places this host's buffer (the client's is the source, the server's the target)"
        );
    }
    if w.gpu == Some(GpuArg::Auto) && format == OutputFormat::Prometheus {
        bail!("--format prometheus prints one run: use --gpu N, not --gpu auto");
    }
    if w.gpu == Some(GpuArg::Auto) && *role != Role::Loopback {
        bail!("--gpu auto runs loopbacks; two-node mode takes one GPU (--gpu N)");
    }
    Ok(Some(GdrRequest {
        gpu: match w.gpu {
            None => GpuSelect::Host,
            Some(GpuArg::Index(n)) => GpuSelect::One(n),
            Some(GpuArg::Auto) => GpuSelect::Auto,
        },
        mode: w.gdr.map_or(GdrMode::Auto, GdrMode::from),
        gpu_side: w.gpu_side.map_or(GpuSide::Both, GpuSide::from),
        repeat: w.repeat,
        device_given: w.device.is_some(),
    }))
}

fn gpu_write_bw_config(w: GpuWriteBwArgs, env: &Env) -> Result<GpuWriteBwConfig> {
    use crate::cli::GpuArg;
    use crate::rdma::request::gdr::GpuSelect;
    use crate::rdma::request::gpu_write_bw::{self as level4, GpuWriteRequest};
    let request = GpuWriteRequest {
        gpu: match w.gpu {
            None | Some(GpuArg::Auto) => GpuSelect::Auto,
            Some(GpuArg::Index(n)) => GpuSelect::One(n),
        },
        device: w.device.filter(|d| !d.is_empty()),
        port: w.port,
        sizes: w.sizes.unwrap_or_else(|| level4::DEFAULT_SIZES.to_vec()),
        iters: w.iters,
        writes_per_iter: w.writes_per_iter,
        handler: w.nic_handler.into(),
        queues: w.queues.into(),
        validate: w.validate,
    };
    level4::validate(&request).map_err(|e| anyhow::anyhow!("probe gpu-write-bw: {e}"))?;
    Ok(GpuWriteBwConfig {
        request,
        json: w.json,
        fail_on_skip: w.gate.fail_on_skip,
        cuda_homes: env.cuda_homes.clone(),
    })
}

fn write_bw_config(w: WriteBwArgs, env: &Env) -> Result<WriteBwConfig> {
    let format = probe_format(w.json, w.format)?;
    let sizes = if w.all {
        write_bw::all_sizes()
    } else {
        w.sizes
            .clone()
            .unwrap_or_else(|| write_bw::DEFAULT_SIZES.to_vec())
    };
    let plan = Plan::new(PlanSpec {
        sizes,
        iterations: w.iters,
        tx_depth: w.tx_depth,
        cq_moderation: w.cq_mod,
        post_list: w.post_list,
        qps: w.qps,
        validate: w.validate,
    })
    .and_then(|p| p.with_repetitions(w.reps))
    .context("probe write-bw")?;
    let token = || {
        w.token
            .clone()
            .or_else(|| env.token.clone())
            .filter(|t| !t.is_empty())
            .context("two-node mode needs a shared --token (or GPUDOCTOR_TOKEN) on both sides")
    };
    let role = if w.serve {
        Role::Serve {
            listen: w.listen.clone(),
            token: token()?,
        }
    } else if let Some(peer) = &w.peer {
        Role::Client {
            peer: peer.clone(),
            token: token()?,
        }
    } else {
        Role::Loopback
    };
    let gdr = level3_request(&w, &role, format)?;
    Ok(WriteBwConfig {
        gdr,
        request: WriteBwRequest {
            // With --gpu and no -d, level 3 picks each GPU's port.
            device: w.device.unwrap_or_default(),
            port: w.port,
            gid_index: w.gid_index,
            plan,
            role,
            timeout: Duration::from_secs(w.timeout.max(1)),
            progress: env.stderr_is_terminal && format == OutputFormat::Table,
        },
        json: format == OutputFormat::Json,
        format,
        fail_on_skip: w.gate.fail_on_skip,
    })
}
