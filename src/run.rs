//! The edge: turns a `Config` into output text and an exit code. The only place (with
//! `main`) that uses anyhow.

use crate::cli::{Action, Config, SourceSpec, TopoOutput};
use crate::inventory::Inventory;
use crate::nvml::NvmlSnapshot;
use crate::render::{self, Style};
use crate::report::{SourceInfo, TopoReport};
use crate::sysroot::{ReadError, SysRoot};
use anyhow::{Context, Result};

/// Exit codes (ripgrep's convention).
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILED_CHECK: i32 = 1;
pub const EXIT_ERROR: i32 = 2;

/// What a command produced.
pub struct Outcome {
    pub stdout: String,
    pub code: i32,
}

/// Open the source: the reader and the NVML snapshot that goes with it.
pub fn open_source(spec: &SourceSpec) -> Result<(SysRoot, NvmlSnapshot, SourceInfo)> {
    match spec {
        SourceSpec::Live => Ok((
            SysRoot::live(),
            NvmlSnapshot::collect_live(),
            SourceInfo::Live,
        )),
        SourceSpec::Root(dir) => {
            let sr = SysRoot::at(dir).with_context(|| format!("--root {}", dir.display()))?;
            let nvml_path = sr.root_dir().join("nvml.json");
            let nvml = match std::fs::read(&nvml_path) {
                Ok(bytes) => NvmlSnapshot::from_json(&bytes)
                    .with_context(|| format!("--root {}", dir.display()))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    NvmlSnapshot::unavailable("not recorded (no nvml.json in the tree)", "recorded")
                }
                Err(e) => {
                    return Err(e).with_context(|| format!("reading {}", nvml_path.display()));
                }
            };
            let path = dir.display().to_string();
            Ok((sr, nvml, SourceInfo::Root { path }))
        }
    }
}

pub fn topo_report(spec: &SourceSpec) -> Result<TopoReport> {
    let (sr, nvml, info) = open_source(spec)?;
    let inv = Inventory::collect(&sr, nvml).map_err(|e| match e {
        crate::inventory::InventoryError::NoPciBus(ReadError::NotFound(p)) => {
            anyhow::anyhow!("{p} does not exist: not a sysfs tree (no PCI bus)")
        }
        other => anyhow::anyhow!(other),
    })?;
    let topo = crate::topo::build(&inv);
    Ok(TopoReport::new(info, &inv, topo))
}

pub fn run(cfg: &Config) -> Result<Outcome> {
    let style = Style { width: cfg.width };
    match &cfg.action {
        Action::Topo(out) => {
            let r = topo_report(&cfg.source)?;
            let stdout = match out {
                TopoOutput::Tree => render::topo_tree(&r, style),
                TopoOutput::Matrix => render::topo_matrix(&r),
                TopoOutput::Json => render::json(&r),
            };
            Ok(Outcome {
                stdout,
                code: EXIT_OK,
            })
        }
        Action::WriteBw(w) => write_bw(&cfg.source, w),
        Action::Man(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            let mut names = Vec::new();
            for (name, bytes) in crate::cli::man_pages().context("rendering man pages")? {
                let p = dir.join(&name);
                std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
                names.push(p.display().to_string());
            }
            Ok(Outcome {
                stdout: format!("wrote {}\n", names.join(", ")),
                code: EXIT_OK,
            })
        }
    }
}

/// `probe write-bw`: exit 0 when it ran and passed, 1 when the machine failed it (or it could
/// not run here: no libibverbs, port down, peer unreachable), 2 for bad arguments.
fn write_bw(spec: &SourceSpec, w: &crate::cli::WriteBwArgs) -> Result<Outcome> {
    use crate::rdma::engine::ErrorClass;
    use crate::rdma::{self, Role, WriteBwRequest, write_bw::Plan};
    let sr = match spec {
        SourceSpec::Live => SysRoot::live(),
        SourceSpec::Root(_) => {
            anyhow::bail!("probe write-bw measures live hardware; --root does not apply")
        }
    };
    let sizes = if w.all {
        rdma::write_bw::all_sizes()
    } else {
        w.sizes
            .clone()
            .unwrap_or_else(|| rdma::write_bw::DEFAULT_SIZES.to_vec())
    };
    let plan = Plan::new(
        sizes,
        w.iters,
        w.tx_depth,
        w.cq_mod,
        w.post_list,
        w.qps,
        w.validate,
    )?;
    let token = || {
        w.token
            .clone()
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
    let req = WriteBwRequest {
        device: w.device.clone(),
        port: w.port,
        gid_index: w.gid_index,
        plan,
        role,
        timeout: std::time::Duration::from_secs(w.timeout.max(1)),
    };
    let (report, class) = rdma::write_bw(&sr, &req);
    if class == Some(ErrorClass::Usage) {
        let why = match &report.status {
            rdma::write_bw::Status::Error { reason } => reason.clone(),
            other => format!("{other:?}"),
        };
        anyhow::bail!("probe write-bw: {why}");
    }
    let stdout = if w.json {
        render::json(&report)
    } else {
        rdma::render::write_bw_table(&report)
    };
    Ok(Outcome {
        stdout,
        code: if class.is_some() {
            EXIT_FAILED_CHECK
        } else {
            EXIT_OK
        },
    })
}
