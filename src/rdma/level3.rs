//! Level 3: write-bw with a side's buffer in GPU memory (GPUDirect RDMA). The same engine as
//! level 2 (`super::engine::run`) with a different memory provider (`super::engine::memory`);
//! this module gathers, through `super::pairing` (shared with level 4), the facts the decisions
//! in `super::judge::gdr` need (CUDA, the NIC's answer to NCCL's dma-buf probe, the topology),
//! runs each GPU against its closest ACTIVE port, and checks that the GPU gets all its memory
//! back (cuMemGetInfo before and after).
//!
//! It must not print, and must not decide anything `gdr` decides.

use super::engine::error::{ErrorClass, ProbeError};
use super::engine::memory::Sides;
use super::engine::memory::{GpuTarget, Memory, MemoryError};
use super::engine::run as engine;
use super::judge::gdr::{self, CauseContext, Failure, RegistrationFacts};
use super::pairing::{
    cuda_device, decide_registration, gpu_labels, kernel_version, path_between, probe_provider,
    provider_name,
};
use super::request::gdr::{GdrRequest, GpuSelect, GpuSide, Machine};
use super::request::write_bw::{Role, WriteBwRequest};
use crate::cuda;
use crate::reading::Reading;
use crate::report::rdma::gdr::{
    Decision, GdrFacts, GpuBufferFacts, GpuFacts, GpuMemoryCheck, NicChoice,
};
use crate::report::rdma::write_bw::{Mode, Status, Threshold, Verdict, WriteBwReport};
use std::rc::Rc;

/// One GPU's (or the host's) run.
pub struct Run {
    pub subject: String,
    pub report: WriteBwReport,
    pub class: Option<ErrorClass>,
}

/// Run level 3 for every GPU `g` selects (or once on host memory). Ctrl-C stops the loop.
pub fn measure_gdr(m: &Machine, base: &WriteBwRequest, g: &GdrRequest) -> Vec<Run> {
    crate::signals::install();
    if g.gpu == GpuSelect::Host {
        return vec![host_run(m, base, g)];
    }
    let labels = gpu_labels(m.topo, g.gpu);
    if labels.is_empty() {
        let mut report = WriteBwReport::new(mode_of(&base.role), base.plan.clone());
        report.status = Status::Skipped {
            reason: "no NVIDIA GPUs: nothing for GPUDirect RDMA to reach".into(),
        };
        return vec![Run {
            subject: "host".into(),
            report,
            class: Some(ErrorClass::Skip),
        }];
    }
    let mut out = Vec::new();
    for label in labels {
        let r =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| gpu_run(m, base, g, &label)));
        let run = match r {
            Ok(run) => run,
            Err(p) => {
                let mut report = WriteBwReport::new(mode_of(&base.role), base.plan.clone());
                report.status = Status::Error {
                    reason: format!(
                        "CUDA or verbs code panicked: {}",
                        p.downcast_ref::<String>()
                            .map(String::as_str)
                            .or_else(|| p.downcast_ref::<&str>().copied())
                            .unwrap_or("(no message)")
                    ),
                };
                Run {
                    subject: label.clone(),
                    report,
                    class: Some(ErrorClass::Machine),
                }
            }
        };
        let stop = run.class == Some(ErrorClass::Interrupted);
        out.push(run);
        if stop {
            break;
        }
    }
    out
}

fn mode_of(role: &Role) -> Mode {
    match role {
        Role::Loopback => Mode::Loopback,
        Role::Serve { .. } => Mode::Server,
        Role::Client { .. } => Mode::Client,
    }
}

/// `--gdr` on host memory: the NIC half of the decision, then level 2's measurement.
fn host_run(m: &Machine, base: &WriteBwRequest, g: &GdrRequest) -> Run {
    let device = base.device.clone();
    let nic = NicChoice {
        device: device.clone(),
        port: base.port,
        path: None,
        path_certain: false,
        why: "-d".into(),
    };
    let mut facts = GdrFacts {
        gpu: None,
        gpu_side: "none (host memory)".into(),
        expectation: gdr::host_expectation(),
        nic,
        registration: None,
        gpu_memory: None,
        gpu_buffer: None,
        cause: None,
        not_applicable: false,
    };
    let probe = match probe_provider(&device) {
        Ok(p) => p,
        Err(e) => return stopped(base, facts, "host", e),
    };
    let decision = gdr::choose_registration(
        g.mode,
        &RegistrationFacts {
            provider: provider_name(m, &device),
            provider_probe: probe,
            kernel: kernel_version(m.inv),
            gpu: None,
        },
    );
    facts.registration = Some(decision.clone());
    if decision.used.is_none() {
        return refused(m, base, facts, &decision, "host", None);
    }
    let (report, res) = engine::measure(&m.inv.rdma, base, &Sides::host());
    finish(m, report, res, facts, None, "host".into())
}

/// A run that stopped before measuring.
fn stopped(base: &WriteBwRequest, facts: GdrFacts, subject: &str, e: ProbeError) -> Run {
    let report = WriteBwReport {
        gdr: Some(facts),
        ..WriteBwReport::new(mode_of(&base.role), base.plan.clone())
    };
    let (report, class) = engine::conclude(report, &Err(e));
    Run {
        subject: subject.into(),
        report,
        class,
    }
}

fn skipped(base: &WriteBwRequest, facts: GdrFacts, subject: &str, reason: String) -> Run {
    let mut report = WriteBwReport::new(mode_of(&base.role), base.plan.clone());
    report.gdr = Some(facts);
    report.status = Status::Skipped { reason };
    Run {
        subject: subject.into(),
        report,
        class: Some(ErrorClass::Skip),
    }
}

/// The GPU could not be set up (CUDA failed): the machine failed the run.
fn machine_error(
    base: &WriteBwRequest,
    facts: GdrFacts,
    label: &str,
    e: impl std::fmt::Display,
) -> Run {
    let mut r = skipped(base, facts, label, String::new());
    r.report.status = Status::Error {
        reason: format!("{label}: {e}"),
    };
    r.class = Some(ErrorClass::Machine);
    r
}

fn refused(
    m: &Machine,
    base: &WriteBwRequest,
    mut facts: GdrFacts,
    decision: &Decision,
    subject: &str,
    gpu: Option<(&str, &str)>,
) -> Run {
    let failure = Failure::Refused {
        requested: decision.requested,
        reason: decision.summary.clone(),
    };
    let provider = provider_name(m, &facts.nic.device);
    facts.cause = Some(gdr::cause(
        &failure,
        &CauseContext {
            level0: m.level0,
            gpu,
            provider: &provider,
            path: facts.nic.path,
            bar1: None,
        },
    ));
    let mut report = WriteBwReport::new(mode_of(&base.role), base.plan.clone());
    report.status = Status::Error {
        reason: decision.summary.clone(),
    };
    report.gdr = Some(facts);
    Run {
        subject: subject.into(),
        report,
        class: Some(ErrorClass::Machine),
    }
}

/// What stopped a run, as `gdr::cause` sees it.
fn failure_of(res: &Result<(), ProbeError>, report: &WriteBwReport) -> Option<Failure> {
    match res {
        Err(ProbeError::Memory { source, .. }) => match source {
            MemoryError::Register { .. } => {
                source
                    .register_errno()
                    .map(|(registration, errno)| Failure::Register {
                        registration,
                        errno,
                    })
            }
            _ => None,
        },
        Err(ProbeError::Completion { source, .. }) => Some(Failure::Completion {
            status: source.to_string(),
        }),
        Err(ProbeError::NoCompletion { .. }) => Some(Failure::Stall),
        Err(_) => None,
        Ok(()) => {
            if report.results.iter().any(|r| r.validated == Some(false)) {
                Some(Failure::DataMismatch)
            } else if report.results.iter().any(|r| r.verdict == Verdict::Fail) {
                Some(Failure::BelowThreshold)
            } else {
                None
            }
        }
    }
}

/// BAR1 use of a GPU from NVML, at the moment a registration ran out of room.
fn bar1_in_use(bdf: &crate::pci::Bdf) -> Reading<(u64, u64)> {
    Reading::from_result(bar1_read(bdf))
}

fn bar1_read(bdf: &crate::pci::Bdf) -> Result<(u64, u64), String> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| format!("NVML: {e}"))?;
    let d = nvml
        .device_by_pci_bus_id(bdf.nvml())
        .map_err(|e| format!("NVML device {}: {e}", bdf.nvml()))?;
    let b = d
        .bar1_memory_info()
        .map_err(|e| format!("nvmlDeviceGetBAR1MemoryInfo: {e}"))?;
    Ok((b.used, b.total))
}

/// Judge the measurement: the path's expectation replaces the line-rate threshold beyond PXB;
/// a failure gets its cause.
fn finish(
    m: &Machine,
    mut report: WriteBwReport,
    res: Result<(), ProbeError>,
    mut facts: GdrFacts,
    gpu: Option<(&str, &crate::pci::Bdf)>,
    subject: String,
) -> Run {
    // Beyond PXB NCCL would not use GPUDirect RDMA: no bar on purpose. A path that could not
    // be placed on the PCI tree leaves the bar unknown (never a pass).
    if !facts.expectation.judged && matches!(report.threshold, Some(Threshold::LineRate { .. })) {
        let reason = facts.expectation.text.clone();
        report.threshold = Some(if facts.nic.path.is_some() {
            Threshold::NotApplicable { reason }
        } else {
            Threshold::Unknown { reason }
        });
    }
    let (mut report, class) = engine::conclude(report, &res);
    if let Some(f) = failure_of(&res, &report) {
        let provider = provider_name(m, &facts.nic.device);
        let bdf_s = gpu.map(|(_, b)| b.to_string());
        let bar1 = match (&f, gpu) {
            (
                Failure::Register {
                    registration: Some(_),
                    errno,
                },
                Some((_, b)),
            ) if *errno == libc::ENOMEM || *errno == libc::ENOSPC => Some(bar1_in_use(b)),
            _ => None,
        };
        facts.cause = Some(gdr::cause(
            &f,
            &CauseContext {
                level0: m.level0,
                gpu: gpu.map(|(l, _)| l).zip(bdf_s.as_deref()),
                provider: &provider,
                path: facts.nic.path,
                bar1,
            },
        ));
    }
    report.gdr = Some(facts);
    Run {
        subject,
        report,
        class,
    }
}

/// The GPU half on its own: allocate like a run would, read the attribute back, export a
/// dma-buf, free. Errors are the GPU half's failures.
fn gpu_half(gpu: &GpuTarget, bytes: u64, dev: &cuda::Device) -> Result<GpuBufferFacts, String> {
    let n = usize::try_from(bytes.max(1)).map_err(|e| e.to_string())?;
    let buf = cuda::RdmaBuffer::new(&gpu.ctx, n).map_err(|e| e.to_string())?;
    let sync = buf.sync_memops().map_err(|e| e.to_string())?;
    let (dmabuf_exported, dmabuf_export) = match &dev.dma_buf_supported {
        Reading::Value(true) => match buf.export_dmabuf() {
            Ok(fd) => {
                drop(fd);
                (true, "exported".to_string())
            }
            Err(e) => (false, format!("failed although CUDA reports support: {e}")),
        },
        Reading::Value(false) => (
            false,
            "not attempted: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0".to_string(),
        ),
        Reading::Absent(e) | Reading::Unknown(e) => (
            false,
            format!("not attempted: DMA_BUF_SUPPORTED unreadable ({e})"),
        ),
    };
    Ok(GpuBufferFacts {
        bytes: buf.bytes as u64,
        address: format!("{:#x}", buf.ptr),
        address_alignment_bytes: crate::rdma::engine::memory::alignment_of(buf.ptr),
        sync_memops: sync,
        dmabuf_export,
        dmabuf_exported,
    })
}

fn gpu_run(m: &Machine, base: &WriteBwRequest, g: &GdrRequest, label: &str) -> Run {
    let subject = label.to_string();
    let Some(tg) = m.topo.gpu(label) else {
        let mut report = WriteBwReport::new(mode_of(&base.role), base.plan.clone());
        report.status = Status::Error {
            reason: format!("{label} is not in the topology"),
        };
        return Run {
            subject,
            report,
            class: Some(ErrorClass::Usage),
        };
    };
    let bdf = tg.bdf;
    // The NIC: -d, or the GPU's closest ACTIVE port.
    let nic = Reading::from_result(if g.device_given {
        let (path, certain) = match path_between(m.topo, label, &base.device) {
            Some((p, c)) => (Some(p), c),
            None => (None, false),
        };
        Ok(NicChoice {
            device: base.device.clone(),
            port: base.port,
            path,
            path_certain: certain,
            why: format!(
                "-d {}{}",
                base.device,
                path.map(|p| format!(" (path {} from {label})", p.as_str()))
                    .unwrap_or_default()
            ),
        })
    } else {
        gdr::closest_active_port(m.topo, label)
    });
    let side = match (&base.role, g.gpu_side) {
        (Role::Loopback, s) => s,
        (Role::Client { .. }, _) => GpuSide::Source,
        (Role::Serve { .. }, _) => GpuSide::Target,
    };
    let facts = GdrFacts {
        gpu: Some(GpuFacts {
            label: label.into(),
            bdf: bdf.to_string(),
            name: tg.name.clone(),
        }),
        gpu_side: format!("{side:?}").to_lowercase(),
        nic: nic.clone().into_result().unwrap_or_else(|why| NicChoice {
            device: String::new(),
            port: 0,
            path: None,
            path_certain: false,
            why,
        }),
        expectation: gdr::expectation(nic.value().and_then(|n| n.path)),
        registration: None,
        gpu_memory: None,
        gpu_buffer: None,
        cause: None,
        not_applicable: false,
    };
    // CUDA: the GPU by PCI address, its primary context, memory before.
    let dev = match cuda_device(label, bdf) {
        Ok(d) => d,
        Err(why) => return skipped(base, facts, label, why),
    };
    let dev = &dev;
    let ctx = match cuda::Context::retain(dev.handle) {
        Ok(c) => c,
        Err(e) if e.is_absent() => return skipped(base, facts, label, format!("{label}: {e}")),
        Err(e) => return machine_error(base, facts, label, e),
    };
    let target = GpuTarget {
        label: label.into(),
        bdf: bdf.to_string(),
        ctx: Rc::clone(&ctx),
    };
    let before = match cuda::mem_info(&ctx) {
        Ok(b) => b,
        Err(e) => return machine_error(base, facts, label, e),
    };
    let mut last = None;
    let runs = g.repeat.max(1);
    let mut done = 0;
    for _ in 0..runs {
        if crate::signals::interrupted() {
            last = Some(stopped(base, facts.clone(), label, ProbeError::Interrupted));
            break;
        }
        done += 1;
        let run = one_gpu_run(m, base, g, &target, dev, side, &nic, facts.clone());
        let stop = run.class.is_some_and(|c| c != ErrorClass::Skip);
        last = Some(run);
        if stop {
            break;
        }
    }
    let mut run = last.unwrap_or_else(|| skipped(base, facts.clone(), label, "no run".into()));
    // Every region and buffer of the runs is gone; the context is still retained.
    let check = cuda::mem_info(&ctx).map(|after| GpuMemoryCheck::new(before, after, done));
    drop(target);
    drop(ctx);
    let f = run.report.gdr.get_or_insert(facts);
    match check {
        Ok(c) => {
            if let Some(reason) = c.leak(label)
                && run.class.is_none_or(|k| k == ErrorClass::Skip)
            {
                run.report.status = Status::Error { reason };
                run.class = Some(ErrorClass::Machine);
            }
            f.gpu_memory = Some(c);
        }
        Err(e) => run
            .report
            .notes
            .push(format!("cuMemGetInfo after the run: {e}")),
    }
    if runs > 1 {
        run.report.notes.push(format!(
            "{done} of {runs} run(s) in this process (--repeat); the report is the last one"
        ));
    }
    run
}

#[allow(clippy::too_many_arguments)]
fn one_gpu_run(
    m: &Machine,
    base: &WriteBwRequest,
    g: &GdrRequest,
    target: &GpuTarget,
    dev: &cuda::Device,
    side: GpuSide,
    nic: &Reading<NicChoice>,
    mut facts: GdrFacts,
) -> Run {
    let label = target.label.as_str();
    // The GPU half: allocation, SYNC_MEMOPS, alignment, dma-buf export.
    let failed = |facts: GdrFacts, reason: String| {
        let mut r = skipped(base, facts, label, String::new());
        r.report.status = Status::Error { reason };
        r.class = Some(ErrorClass::Machine);
        r
    };
    match gpu_half(target, base.plan.max_size(), dev) {
        Ok(b) => facts.gpu_buffer = Some(b),
        Err(e) => return failed(facts, format!("{label}: GPU buffer: {e}")),
    }
    if let Some(b) = &facts.gpu_buffer {
        if dev.dma_buf_supported == Reading::Value(true) && !b.dmabuf_exported {
            let why = format!("{label}: dma-buf export {}", b.dmabuf_export);
            return failed(facts, why);
        }
        if (b.address_alignment_bytes as usize) < cuda::GPU_PAGE_BYTES {
            let why = format!(
                "{label}: cuMemAlloc returned {} ({} B aligned), not a 64 KiB GPU page boundary",
                b.address, b.address_alignment_bytes
            );
            return failed(facts, why);
        }
    }
    let nic = match nic {
        Reading::Value(n) => n.clone(),
        Reading::Absent(why) | Reading::Unknown(why) => {
            facts.not_applicable = true;
            return skipped(
                base,
                facts,
                label,
                format!("{label}: GPU half ready; no RDMA port to test it with: {why}"),
            );
        }
    };
    // The NIC half: NCCL's probe on the chosen device, then the decision.
    let probe = match probe_provider(&nic.device) {
        Ok(p) => p,
        Err(e) => return stopped(base, facts, label, e),
    };
    let decision = decide_registration(m, g.mode, label, dev, &nic.device, probe);
    facts.registration = Some(decision.clone());
    let bdf = target.bdf.clone();
    let Some(reg) = decision.used else {
        return refused(
            m,
            base,
            facts,
            &decision,
            label,
            Some((label, bdf.as_str())),
        );
    };
    let gpu_mem = Memory::Gpu {
        gpu: target.clone(),
        registration: reg,
    };
    let sides = match side {
        GpuSide::Source => Sides {
            source: gpu_mem,
            target: Memory::Host,
        },
        GpuSide::Target => Sides {
            source: Memory::Host,
            target: gpu_mem,
        },
        GpuSide::Both => Sides {
            source: gpu_mem.clone(),
            target: gpu_mem,
        },
    };
    let req = WriteBwRequest {
        device: nic.device.clone(),
        port: nic.port,
        ..base.clone()
    };
    let (mut report, res) = engine::measure(&m.inv.rdma, &req, &sides);
    drop(sides);
    report.notes.push(format!(
        "registration: {} ({})",
        reg.as_str(),
        decision.summary
    ));
    let tb = m.topo.gpu(label).map(|t| t.bdf);
    let gpu = tb.as_ref().map(|b| (label, b));
    finish(m, report, res, facts, gpu, label.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_map_to_the_cause_table() {
        use crate::report::rdma::memory::Registration;
        use crate::report::rdma::plan::{Plan, PlanSpec};
        use crate::verbs::VerbsError;
        let plan = Plan::new(PlanSpec {
            sizes: vec![64],
            iterations: 1,
            tx_depth: 1,
            cq_moderation: 1,
            ..PlanSpec::check()
        })
        .unwrap();
        let empty = WriteBwReport::new(Mode::Loopback, plan);
        let reg = |r, e| {
            Err(ProbeError::Memory {
                device: "mlx5_0".into(),
                source: MemoryError::Register {
                    what: "x".into(),
                    registration: r,
                    source: VerbsError::Call {
                        call: "ibv_reg_mr",
                        source: std::io::Error::from_raw_os_error(e),
                    },
                },
            })
        };
        assert_eq!(
            failure_of(&reg(Some(Registration::Peermem), libc::EFAULT), &empty),
            Some(Failure::Register {
                registration: Some(Registration::Peermem),
                errno: libc::EFAULT
            })
        );
        assert_eq!(
            failure_of(&reg(None, libc::ENOMEM), &empty),
            Some(Failure::Register {
                registration: None,
                errno: libc::ENOMEM
            })
        );
        let comp = Err(ProbeError::Completion {
            device: "mlx5_0".into(),
            bytes: 64,
            source: VerbsError::Completion {
                status: 10,
                status_str: "remote access error".into(),
                vendor_err: 0,
            },
        });
        assert!(
            matches!(failure_of(&comp, &empty), Some(Failure::Completion { status }) if status.contains("remote access error"))
        );
        let stall = Err(ProbeError::NoCompletion {
            device: "mlx5_0".into(),
            bytes: 64,
            completed: 0,
            iterations: 1,
            timeout: std::time::Duration::from_secs(1),
        });
        assert_eq!(failure_of(&stall, &empty), Some(Failure::Stall));
        assert_eq!(failure_of(&Err(ProbeError::Interrupted), &empty), None);
        assert_eq!(failure_of(&Ok(()), &empty), None);
        let mut r = empty.clone();
        let rep = crate::rdma::judge::write_bw::summarise(64, 1, 1, &Default::default());
        let mut s = crate::report::rdma::write_bw::SizeResult::new(64, 1, vec![rep], Some(true));
        s.verdict = Verdict::Fail;
        r.results.push(s.clone());
        assert_eq!(failure_of(&Ok(()), &r), Some(Failure::BelowThreshold));
        s.validated = Some(false);
        r.results.push(s);
        assert_eq!(failure_of(&Ok(()), &r), Some(Failure::DataMismatch));
    }
}
