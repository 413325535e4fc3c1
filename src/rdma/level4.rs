//! Level 4: `probe gpu-write-bw`, a CUDA kernel posting RDMA writes itself on an mlx5 QP
//!. This module decides, per GPU, whether the run can happen here and on which
//! port and handler, and carries the report (schema `gpudoctor.gpu-write-bw/1`). The live run
//! is the write-bw engine's loopback (level 3's GPU memory on both sides) with a different
//! poster (`gpu_poster::GpuPoster`: mlx5dv_init_obj over the engine's QP and CQ, the queues
//! and the doorbell page mapped for the GPU, the kernel of `mlx5_kernel`). That live path has
//! not met a ConnectX: no machine here has one beside a GPU (README, "Level 4").

use super::engine::error::ErrorClass;
use super::judge::gdr;
use super::judge::gpu_write_bw::{DeviceFacts, choose_handler, device_refusal};
use super::mlx5::gpu_poster::{GpuPoster, PosterFacts, QueueChoice};
use super::request::gdr::Machine;
use super::request::gpu_write_bw::GpuWriteRequest;
use crate::libs::LibFacts;
use crate::report::rdma::gdr::{GpuFacts, NicChoice};
use crate::report::rdma::gpu_write_bw::{GpuWriteBwReport, NicHandler, PostingNs};
use crate::report::rdma::memory::Registration;
use crate::report::rdma::write_bw::Status;
use crate::verbs::LIBMLX5_SONAME as LIBMLX5;
use std::path::PathBuf;
use std::time::Duration;

/// The library `mlx5dv_init_obj` comes from (as libs.rs probes it).
const LIBCUDA: &str = "libcuda.so.1";

/// One GPU's run: its subject, its report, and what a stop means for the exit code.
pub struct Run {
    pub subject: String,
    pub report: GpuWriteBwReport,
    pub class: Option<ErrorClass>,
}

fn device_facts(m: &Machine, name: &str, port: u8) -> Option<DeviceFacts> {
    let d = m.inv.rdma.iter().find(|d| d.name == name)?;
    // An unresolved device (its `device` link unreadable) has neither: its driver is unknown,
    // which `device_refusal` says.
    let driver = d
        .bdf()
        .and_then(|b| m.topo.device(b).and_then(|x| x.driver.clone()));
    let software = if d.software_parent().is_some() {
        Some(
            if name.starts_with("siw") {
                "siw"
            } else {
                "rxe"
            }
            .to_string(),
        )
    } else {
        None
    };
    Some(DeviceFacts {
        name: name.into(),
        driver,
        software,
        port_state: d
            .port_list()
            .iter()
            .find(|p| p.port == u32::from(port))
            .map(|p| p.state_kind),
    })
}

fn provider(m: &Machine, d: &DeviceFacts) -> String {
    match (&d.driver, &d.software) {
        (Some(drv), _) => format!("{} ({drv})", d.name),
        (None, Some(sw)) => {
            let parent = m
                .inv
                .rdma
                .iter()
                .find(|x| x.name == d.name)
                .and_then(|x| x.software_parent().map(str::to_string));
            match parent {
                Some(p) => format!("{} ({sw}, soft-RoCE on {p})", d.name),
                None => format!("{} ({sw})", d.name),
            }
        }
        (None, None) => d.name.clone(),
    }
}

fn lib_result(l: &LibFacts, lib: &str, sym: &str) -> Result<(), String> {
    if let Some(why) = &l.unavailable {
        return Err(format!("not probed: {why}"));
    }
    match l.libs.get(lib) {
        None => Err("not probed".into()),
        Some(p) if !p.loaded => Err(p.error.clone().unwrap_or_else(|| "does not load".into())),
        Some(p) if p.symbols.get(sym) != Some(&true) => Err(format!("{sym} missing")),
        Some(_) => Ok(()),
    }
}

/// PeerMappingOverride from the level-0 finding gdr.peer-mapping (pass: set; warn/fail: not).
fn peer_mapping(m: &Machine) -> (Option<bool>, Option<String>) {
    use crate::findings::{CheckId, Status as F};
    let f = m.level0.iter().find(|f| f.id == CheckId::GdrPeerMapping);
    match f {
        Some(f) => (
            match f.status {
                F::Pass => Some(true),
                F::Warn | F::Fail => Some(false),
                F::Skip => None,
            },
            Some(format!(
                "gdr.peer-mapping: {}: {}",
                format!("{:?}", f.status).to_lowercase(),
                f.message
            )),
        ),
        None => (None, None),
    }
}

fn stop(mut report: GpuWriteBwReport, subject: &str, class: ErrorClass, reason: String) -> Run {
    report.status = match class {
        ErrorClass::Skip => Status::Skipped { reason },
        _ => Status::Error { reason },
    };
    Run {
        subject: subject.into(),
        report,
        class: Some(class),
    }
}

/// Run level 4 for every GPU the request selects, in PCI order. `cuda_homes`: where NVRTC
/// may live (CUDA_HOME, CUDA_PATH).
pub fn measure_gpu_write(
    m: &Machine,
    libs: &LibFacts,
    req: &GpuWriteRequest,
    cuda_homes: &[PathBuf],
) -> Vec<Run> {
    // -d: the NIC half first, so a device that can never work says so whatever the GPUs.
    if let Some(dev) = &req.device {
        let report = req.empty_report();
        match nic_refusal(m, libs, dev, req.port) {
            Ok(_) => {}
            Err((class, why, na)) => {
                let mut report = report;
                report.not_applicable = na;
                return vec![stop(report, dev, class, why)];
            }
        }
    }
    let labels = super::pairing::gpu_labels(m.topo, req.gpu);
    if m.topo.gpus.is_empty() {
        let mut report = req.empty_report();
        report.not_applicable = true;
        return vec![stop(
            report,
            "host",
            ErrorClass::Skip,
            "no NVIDIA GPUs: no kernel to post from".into(),
        )];
    }
    labels
        .iter()
        .map(|l| gpu_run(m, libs, req, l, cuda_homes))
        .collect()
}

/// Ok(provider) when `dev`/`port` can take mlx5 direct verbs; Err((class, why)) otherwise.
fn nic_refusal(
    m: &Machine,
    libs: &LibFacts,
    dev: &str,
    port: u8,
) -> Result<String, (ErrorClass, String, bool)> {
    let Some(d) = device_facts(m, dev, port) else {
        let have: Vec<&str> = m.inv.rdma.iter().map(|d| d.name.as_str()).collect();
        return Err((
            ErrorClass::Skip,
            if have.is_empty() {
                format!(
                    "no RDMA device: {dev} does not exist (no devices in /sys/class/infiniband)"
                )
            } else {
                format!("no RDMA device {dev} (devices: {})", have.join(", "))
            },
            true,
        ));
    };
    let lib = crate::reading::Reading::from_result(lib_result(libs, LIBMLX5, "mlx5dv_init_obj"));
    match device_refusal(&d, port, &lib) {
        Some((why, na)) => Err((ErrorClass::Skip, why, na)),
        None => Ok(provider(m, &d)),
    }
}

fn gpu_run(
    m: &Machine,
    libs: &LibFacts,
    req: &GpuWriteRequest,
    label: &str,
    cuda_homes: &[PathBuf],
) -> Run {
    let mut report = req.empty_report();
    if let Some(g) = m.topo.gpu(label) {
        report.gpu = Some(GpuFacts {
            label: label.into(),
            bdf: g.bdf.to_string(),
            name: g.name.clone(),
        });
    }
    // The GPU half, cheap and reported even where the NIC half stops the run.
    let (mapping, note) = peer_mapping(m);
    report.notes.extend(note);
    let (handler, why) = choose_handler(req.handler, mapping);
    report.poster.why = format!("would be {}: {why}", handler.as_str());
    if let Err(e) = lib_result(libs, LIBCUDA, "cuInit") {
        return stop(
            report,
            label,
            ErrorClass::Skip,
            format!("no CUDA: {LIBCUDA} ({e})"),
        );
    }
    let nic = match &req.device {
        Some(dev) => NicChoice {
            device: dev.clone(),
            port: req.port,
            path: None,
            path_certain: false,
            why: format!("-d {dev}"),
        },
        None => match gdr::closest_active_port(m.topo, label) {
            Ok(n) => n,
            Err(why) => {
                report.not_applicable = true;
                return stop(
                    report,
                    label,
                    ErrorClass::Skip,
                    format!("no RDMA device for {label}: {why}"),
                );
            }
        },
    };
    report.path = path_of(m, label, &nic.device);
    report.nic = Some(nic.clone());
    let provider = match nic_refusal(m, libs, &nic.device, nic.port) {
        Ok(p) => p,
        Err((class, why, na)) => {
            report.not_applicable = na;
            return stop(report, label, class, why);
        }
    };
    report.provider = Some(provider);
    live(m, req, label, &nic, handler, why, cuda_homes, report)
}

/// Step deadline of the live run: each iteration's completion, each verbs step.
const LIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The GPU's PCI address and CUDA device, and how its memory is registered with `nic`'s
/// device (level 3's decision, noted in `report`); else the class and reason to stop with.
fn gpu_registration(
    m: &Machine,
    label: &str,
    nic: &NicChoice,
    report: &mut GpuWriteBwReport,
) -> Result<(crate::pci::Bdf, crate::cuda::Device, Registration), (ErrorClass, String)> {
    let Some(bdf) = m.topo.gpu(label).map(|g| g.bdf) else {
        return Err((ErrorClass::Usage, format!("{label} is not in the topology")));
    };
    let dev = super::pairing::cuda_device(label, bdf).map_err(|why| (ErrorClass::Skip, why))?;
    let probe = super::pairing::probe_provider(&nic.device).map_err(|e| {
        let class = e.class();
        (class, e.to_string())
    })?;
    let decision = super::pairing::decide_registration(
        m,
        crate::report::rdma::gdr::GdrMode::Auto,
        label,
        &dev,
        &nic.device,
        probe,
    );
    report
        .notes
        .push(format!("GPU memory registration: {}", decision.summary));
    let Some(registration) = decision.used else {
        return Err((
            ErrorClass::Machine,
            format!(
                "{label}'s memory cannot be registered with {}: {}",
                nic.device, decision.summary
            ),
        ));
    };
    Ok((bdf, dev, registration))
}

/// Compare the GPU's free memory before and after the run (as level 3 does), noting both in
/// `notes` (or why they could not be read): the leak found, if any.
fn memory_leak(
    before: Result<(u64, u64), crate::cuda::CudaError>,
    after: Result<(u64, u64), crate::cuda::CudaError>,
    label: &str,
    notes: &mut Vec<String>,
) -> Option<String> {
    match (before, after) {
        (Ok(b), Ok(a)) => {
            let c = crate::report::rdma::gdr::GpuMemoryCheck::new(b, a, 1);
            notes.push(format!(
                "GPU memory (cuMemGetInfo): free {} B before, {} B after",
                c.free_before_bytes, c.free_after_bytes
            ));
            c.leak(label)
        }
        (b, a) => {
            if let Some(e) = b.err().or(a.err()) {
                notes.push(format!("cuMemGetInfo: {e}"));
            }
            None
        }
    }
}

/// What the poster did, into the report: its handler and why, its posting times, its queues,
/// and a note on the queues' layout (or why they are where they are).
fn poster_into(report: &mut GpuWriteBwReport, f: PosterFacts) {
    report.poster.handler = f.handler;
    report.poster.why = f.why;
    report.poster.posting_ns = PostingNs::of(f.post_ns);
    report.poster.sm_cycles = PostingNs::of(f.post_cycles).map(|c| c.median);
    report.poster.queues = f.queues;
    report.poster.queues_why = f.queues_why;
    if let Some(n) = f.queues_note {
        report.notes.push(format!("mlx5 queues: {n}"));
    } else if let Some(l) = f.layout {
        report.notes.push(format!(
            "mlx5 queues (mlx5dv_init_obj): SQ {} x {} B, CQ {} x {} B, doorbell register {} B; \
             SQ and CQ in host memory mapped with cuMemHostRegister",
            l.sq_wqe_cnt, l.sq_stride, l.cqe_cnt, l.cqe_size, l.bf_size
        ));
    }
}

/// The live run on a GPU and an mlx5 port that meet every precondition: level 3's memory
/// provider (GPU memory on both sides, registered as NCCL would) and the write-bw engine's
/// loopback with the GPU poster. NOT RUN ON A CONNECTX here (see gpu_poster.rs).
#[allow(clippy::too_many_arguments)]
fn live(
    m: &Machine,
    req: &GpuWriteRequest,
    label: &str,
    nic: &NicChoice,
    handler: NicHandler,
    why: String,
    cuda_homes: &[PathBuf],
    mut report: GpuWriteBwReport,
) -> Run {
    use crate::cuda;
    use crate::rdma::engine::memory::{GpuTarget, Memory};
    let (bdf, dev, registration) = match gpu_registration(m, label, nic, &mut report) {
        Ok(x) => x,
        Err((class, why)) => return stop(report, label, class, why),
    };
    let ctx = match cuda::Context::retain(dev.handle) {
        Ok(c) => c,
        Err(e) => return stop(report, label, ErrorClass::Machine, e.to_string()),
    };
    // As level 3: what the run takes of the GPU's memory must all come back.
    let before = cuda::mem_info(&ctx);
    let gpu_mem = Memory::Gpu {
        gpu: GpuTarget {
            label: label.into(),
            bdf: bdf.to_string(),
            ctx: std::rc::Rc::clone(&ctx),
        },
        registration,
    };
    let sides = crate::rdma::engine::memory::Sides {
        source: gpu_mem.clone(),
        target: gpu_mem,
    };
    let plan = match req.engine_plan() {
        Ok(p) => p,
        Err(e) => return stop(report, label, ErrorClass::Usage, e.to_string()),
    };
    let wreq = crate::rdma::request::write_bw::WriteBwRequest {
        device: nic.device.clone(),
        port: nic.port,
        gid_index: None,
        plan,
        role: crate::rdma::request::write_bw::Role::Loopback,
        timeout: LIVE_TIMEOUT,
        progress: false,
    };
    let mut poster = GpuPoster::new(
        &nic.device,
        dev,
        cuda_homes.to_vec(),
        req.writes_per_iter,
        req.iters,
        req.handler,
        handler,
        why,
    )
    .with_queues(QueueChoice {
        requested: req.queues,
        gpu_ctx: std::rc::Rc::clone(&ctx),
        registration,
        macs: port_macs(m, &nic.device, nic.port),
    });
    let (measured, res) =
        crate::rdma::engine::run::measure_with(&m.inv.rdma, &wreq, &sides, &mut poster);
    drop(sides);
    let (measured, mut class) = crate::rdma::engine::run::conclude(measured, &res);
    // The kernel module and the poster's pinned memory go with the poster's `live`, already
    // dropped by `finish`; the regions and buffers with the sides.
    let leak = memory_leak(before, cuda::mem_info(&ctx), label, &mut report.notes);
    poster_into(&mut report, poster.facts);
    report.notes.extend(measured.notes);
    report.results = measured.results;
    report.status = measured.status;
    if let Some(reason) = leak
        && class.is_none_or(|k| k == ErrorClass::Skip)
    {
        report.status = Status::Error { reason };
        class = Some(ErrorClass::Machine);
    }
    Run {
        subject: label.into(),
        report,
        class,
    }
}

/// The MAC address of each GID's netdev on `device`'s `port`, from what the caller gathered
/// (`Machine::netdev_macs`): RoCE's next hop when level 4's own QP loops back on the port.
fn port_macs(m: &Machine, device: &str, port: u8) -> Vec<(u32, [u8; 6])> {
    let Some(p) = m
        .inv
        .rdma
        .iter()
        .find(|d| d.name == device)
        .and_then(|d| d.port_list().iter().find(|p| p.port == u32::from(port)))
    else {
        return Vec::new();
    };
    p.gid_list()
        .iter()
        .filter_map(|g| {
            let ndev = g.ndev.value()?;
            Some((g.index, *m.netdev_macs.get(ndev)?))
        })
        .collect()
}

fn path_of(m: &Machine, gpu: &str, device: &str) -> Option<String> {
    super::pairing::path_between(m.topo, gpu, device).map(|(p, _)| p.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::PortState;
    use crate::inventory::parse_mac;
    use crate::rdma::request::gdr::GpuSelect;
    use crate::rdma::request::gpu_write_bw::{DEFAULT_SIZES, validate};
    use crate::report::rdma::gpu_write_bw::QueuePlace;

    #[test]
    fn macs_parse_from_sysfs_text_only() {
        assert_eq!(
            parse_mac("0c:42:a1:2b:3c:4d\n"),
            Some([0x0c, 0x42, 0xa1, 0x2b, 0x3c, 0x4d])
        );
        for bad in [
            "",
            "0c:42:a1:2b:3c",
            "0c:42:a1:2b:3c:4d:5e",
            "0c:42:a1:2b:3c:zz",
            "c:42:a1:2b:3c:4d0",
        ] {
            assert_eq!(parse_mac(bad), None, "{bad}");
        }
    }

    #[test]
    fn writes_per_iteration_fit_one_thread_block() {
        let mut r = req();
        r.writes_per_iter = 1024;
        assert!(validate(&r).is_ok());
        r.writes_per_iter = 2048;
        assert!(validate(&r).unwrap_err().contains("from 1 to 1024"));
    }

    #[test]
    fn gpu_queues_need_the_gpu_handler() {
        let mut r = req();
        r.queues = QueuePlace::Gpu;
        r.handler = NicHandler::CpuProxy;
        assert!(
            validate(&r)
                .unwrap_err()
                .contains("--queues gpu needs the gpu handler")
        );
        r.handler = NicHandler::Auto;
        assert!(validate(&r).is_ok());
        r.queues = QueuePlace::Auto;
        r.handler = NicHandler::CpuProxy;
        assert!(validate(&r).is_ok());
    }

    fn req() -> GpuWriteRequest {
        GpuWriteRequest {
            gpu: GpuSelect::Auto,
            device: None,
            port: 1,
            sizes: DEFAULT_SIZES.to_vec(),
            iters: 2048,
            writes_per_iter: 512,
            handler: NicHandler::Auto,
            queues: QueuePlace::Auto,
            validate: false,
        }
    }

    #[test]
    fn arguments() {
        assert_eq!(validate(&req()), Ok(()));
        let bad = |f: &dyn Fn(&mut GpuWriteRequest)| {
            let mut r = req();
            f(&mut r);
            validate(&r).unwrap_err()
        };
        assert!(bad(&|r| r.writes_per_iter = 500).contains("power of two"));
        assert!(bad(&|r| r.writes_per_iter = 8192).contains("power of two"));
        assert!(bad(&|r| r.writes_per_iter = 0).contains("--writes-per-iter"));
        assert!(bad(&|r| r.sizes = vec![0]).contains("--sizes"));
        assert!(bad(&|r| r.sizes = vec![]).contains("--sizes"));
        assert!(bad(&|r| r.sizes = vec![64, 64]).contains("twice"));
        assert!(bad(&|r| r.iters = 0).contains("--iters"));
    }

    fn mlx5() -> DeviceFacts {
        DeviceFacts {
            name: "mlx5_0".into(),
            driver: Some("mlx5_core".into()),
            software: None,
            port_state: Some(Some(PortState::Active)),
        }
    }

    #[test]
    fn device_preconditions() {
        let ok = crate::reading::Reading::Value(());
        assert_eq!(device_refusal(&mlx5(), 1, &ok), None);
        let rxe = DeviceFacts {
            name: "rxe0".into(),
            driver: None,
            software: Some("rxe".into()),
            port_state: Some(Some(PortState::Active)),
        };
        let (why, na) = device_refusal(&rxe, 1, &ok).unwrap();
        assert!(na, "a software device has nothing for level 4 to judge");
        assert!(
            why.starts_with("rxe0 is not an mlx5 device: no direct verbs"),
            "{why}"
        );
        let bnxt = DeviceFacts {
            driver: Some("bnxt_en".into()),
            ..mlx5()
        };
        assert!(
            device_refusal(&bnxt, 1, &ok)
                .unwrap()
                .0
                .contains("driver bnxt_en")
        );
        let nolib =
            crate::reading::Reading::unknown("libmlx5.so.1: cannot open shared object file");
        let (why, na) = device_refusal(&mlx5(), 1, &nolib).unwrap();
        assert!(
            why.contains("does not load") && !na,
            "a ConnectX without libmlx5 is a gap"
        );
        let down = DeviceFacts {
            port_state: Some(Some(PortState::Down)),
            ..mlx5()
        };
        assert!(
            device_refusal(&down, 1, &ok)
                .unwrap()
                .0
                .contains("not ACTIVE")
        );
        let noport = DeviceFacts {
            port_state: None,
            ..mlx5()
        };
        assert!(
            device_refusal(&noport, 2, &ok)
                .unwrap()
                .0
                .contains("no port 2")
        );
        let unknown = DeviceFacts {
            driver: None,
            ..mlx5()
        };
        assert!(
            device_refusal(&unknown, 1, &ok)
                .unwrap()
                .0
                .contains("unknown")
        );
    }

    #[test]
    fn handler_choice() {
        assert_eq!(
            choose_handler(NicHandler::Auto, Some(true)).0,
            NicHandler::Gpu
        );
        assert_eq!(
            choose_handler(NicHandler::Auto, Some(false)).0,
            NicHandler::CpuProxy
        );
        assert_eq!(
            choose_handler(NicHandler::Auto, None).0,
            NicHandler::CpuProxy
        );
        assert!(choose_handler(NicHandler::Auto, None).1.contains("unknown"));
        assert_eq!(
            choose_handler(NicHandler::Gpu, Some(false)).0,
            NicHandler::Gpu
        );
        assert_eq!(
            choose_handler(NicHandler::CpuProxy, Some(true)).0,
            NicHandler::CpuProxy
        );
    }
}
