//! Level 4: `probe gpu-write-bw`, a CUDA kernel posting RDMA writes itself on an mlx5 QP
//! (issue 10). This module decides, per GPU, whether the run can happen here and on which
//! port and handler, and carries the report (schema `gpudoctor.gpu-write-bw/1`). The live run
//! is the write-bw engine's loopback (level 3's GPU memory on both sides) with a different
//! poster (`gpu_poster::GpuPoster`: mlx5dv_init_obj over the engine's QP and CQ, the queues
//! and the doorbell page mapped for the GPU, the kernel of `mlx5_kernel`). That live path has
//! not met a ConnectX: no machine here has one beside a GPU (README, "Level 4").

use super::engine::ErrorClass;
use super::gdr::{self, GpuFacts, NicChoice};
use super::level3::{GpuSelect, Machine};
use super::write_bw::{SizeResult, Status};
use crate::facts::PortState;
use crate::libs::LibFacts;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

pub const SCHEMA: &str = "gpudoctor.gpu-write-bw/1";
/// The library `mlx5dv_init_obj` comes from (as libs.rs probes it).
pub const LIBMLX5: &str = "libmlx5.so.1";
const LIBCUDA: &str = "libcuda.so.1";

/// `--nic-handler`: who rings the doorbell after the kernel wrote the WQEs and the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum NicHandler {
    /// gpu when PeerMappingOverride=1 and the UAR page maps, else cpu-proxy.
    Auto,
    /// The kernel writes the BlueFlame register through the mapped UAR page.
    Gpu,
    /// A CPU thread watches the kernel's producer index and rings the doorbell.
    CpuProxy,
}

impl NicHandler {
    pub fn as_str(self) -> &'static str {
        match self {
            NicHandler::Auto => "auto",
            NicHandler::Gpu => "gpu",
            NicHandler::CpuProxy => "cpu-proxy",
        }
    }
}

/// `--queues`: where the SQ, the CQ and their doorbell records live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum QueuePlace {
    /// gpu where the gpu handler rings and the DevX queues can be created, else host.
    Auto,
    /// DevX QP and CQ over umems in GPU memory (IBGDA's placement; GPU-scope fences).
    Gpu,
    /// libmlx5's own queues in host memory, mapped for the GPU (cuMemHostRegister).
    Host,
}

impl QueuePlace {
    pub fn as_str(self) -> &'static str {
        match self {
            QueuePlace::Auto => "auto",
            QueuePlace::Gpu => "gpu",
            QueuePlace::Host => "host",
        }
    }
}

/// `probe gpu-write-bw`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuWriteRequest {
    pub gpu: GpuSelect,
    /// `-d`: this device for every GPU; None: each GPU's closest ACTIVE port.
    pub device: Option<String>,
    pub port: u8,
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub writes_per_iter: u32,
    pub handler: NicHandler,
    pub queues: QueuePlace,
    pub validate: bool,
}

pub const DEFAULT_SIZES: &[u64] = &[64, 256, 1024, 4096];
/// One CUDA thread builds each write and one block of threads posts an iteration (its
/// barrier orders the WQEs before the doorbell): a block has at most 1024 threads.
pub const MAX_WRITES_PER_ITER: u32 = 1024;

/// Argument checks (exit 2 on failure, in config).
pub fn validate(req: &GpuWriteRequest) -> Result<(), String> {
    if req.sizes.is_empty() {
        return Err("--sizes: at least one size".into());
    }
    for &s in &req.sizes {
        // One data segment per WQE; a 0-byte write posts nothing worth timing.
        if s == 0 || s > 1 << 30 {
            return Err(format!("--sizes: {s} is not between 1 B and 1 GiB"));
        }
    }
    let mut sorted = req.sizes.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != req.sizes.len() {
        return Err("--sizes: a size is given twice".into());
    }
    if req.iters == 0 {
        return Err("--iters: at least 1".into());
    }
    if req.writes_per_iter == 0
        || req.writes_per_iter > MAX_WRITES_PER_ITER
        || !req.writes_per_iter.is_power_of_two()
    {
        return Err(format!(
            "--writes-per-iter: a power of two from 1 to {MAX_WRITES_PER_ITER} (one CUDA thread \
             per write, one block per launch), not {}",
            req.writes_per_iter
        ));
    }
    if req.port == 0 {
        return Err("--port: ports are numbered from 1".into());
    }
    if req.queues == QueuePlace::Gpu && req.handler == NicHandler::CpuProxy {
        return Err(
            "--queues gpu needs the gpu handler: a CPU proxy cannot watch a doorbell record in \
             GPU memory (use --queues host or auto with --nic-handler cpu-proxy)"
                .into(),
        );
    }
    Ok(())
}

/// Posting time per iteration (one kernel launch), from `%globaltimer`.
#[derive(Debug, Clone, Serialize)]
pub struct PostingNs {
    pub n: u64,
    pub median: u64,
    pub min: u64,
    pub max: u64,
}

impl PostingNs {
    /// Median (the upper one of an even count), min and max; None for no samples.
    pub fn of(mut v: Vec<u64>) -> Option<PostingNs> {
        v.sort_unstable();
        Some(PostingNs {
            n: v.len() as u64,
            median: *v.get(v.len() / 2)?,
            min: *v.first()?,
            max: *v.last()?,
        })
    }
}

/// Who posted and why.
#[derive(Debug, Clone, Serialize)]
pub struct Poster {
    pub requested: NicHandler,
    /// The handler that rang the doorbell (None: nothing was posted).
    pub handler: Option<NicHandler>,
    pub why: String,
    pub queues_requested: QueuePlace,
    /// Where the queues the kernel posted on lived (None: no queues were set up).
    pub queues: Option<QueuePlace>,
    pub queues_why: String,
    pub posting_ns: Option<PostingNs>,
    pub sm_cycles: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanFacts {
    pub sizes: Vec<u64>,
    pub iters: u32,
    pub writes_per_iter: u32,
    pub validate: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuWriteBwReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    pub mode: &'static str,
    pub units: &'static str,
    pub plan: PlanFacts,
    pub gpu: Option<GpuFacts>,
    /// The RDMA port and why it was chosen.
    pub nic: Option<NicChoice>,
    /// PCIe path type GPU-NIC ("PIX", "PXB", ...), where both are on the PCI tree.
    pub path: Option<String>,
    /// "mlx5_0 (mlx5_core)", "rxe0 (soft-RoCE on eth0)".
    pub provider: Option<String>,
    pub poster: Poster,
    pub results: Vec<SizeResult>,
    pub notes: Vec<String>,
    pub status: Status,
    /// The bar (delivery: every write of every size completed, its bytes validated).
    pub threshold: super::write_bw::Threshold,
    /// A skip with nothing to judge here (no GPU, no mlx5 port): not a gap in the check.
    pub not_applicable: bool,
}

impl GpuWriteBwReport {
    pub fn new(req: &GpuWriteRequest) -> Self {
        GpuWriteBwReport {
            schema: SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            mode: "loopback",
            units: super::write_bw::UNITS,
            plan: PlanFacts {
                sizes: req.sizes.clone(),
                iters: req.iters,
                writes_per_iter: req.writes_per_iter,
                validate: req.validate,
            },
            gpu: None,
            nic: None,
            path: None,
            provider: None,
            poster: Poster {
                requested: req.handler,
                handler: None,
                queues_requested: req.queues,
                queues: None,
                queues_why: String::new(),
                why: "nothing was posted".into(),
                posting_ns: None,
                sm_cycles: None,
            },
            results: Vec::new(),
            notes: Vec::new(),
            status: Status::Skipped {
                reason: String::new(),
            },
            threshold: super::write_bw::Threshold::Delivery {
                reason: "every write of every size completes and its bytes arrive (validated); \
                         bandwidth is reported, not judged: GPU-initiated posting of small \
                         messages is not line-rate bound"
                    .into(),
            },
            not_applicable: false,
        }
    }
}

pub struct Run {
    pub subject: String,
    pub report: GpuWriteBwReport,
    pub class: Option<ErrorClass>,
}

/// What the preconditions look at, gathered from the inventory and the library probe (so the
/// decision is a pure function, tested on hand-made facts).
#[derive(Debug, Clone, Default)]
pub struct DeviceFacts {
    pub name: String,
    /// Kernel driver of the PCI function (mlx5_core); None for software devices.
    pub driver: Option<String>,
    /// Some("rxe") / Some("siw") for software devices.
    pub software: Option<String>,
    /// The port's state (outer None: no such port; inner None: state unreadable).
    pub port_state: Option<Option<PortState>>,
}

/// Why an mlx5 direct-verbs run cannot happen on this device, or None when it can; the flag
/// says there is nothing for level 4 to judge there (not an mlx5 device, port not ACTIVE) as
/// against a gap (driver unknown, libmlx5 missing on a ConnectX).
pub fn device_refusal(
    d: &DeviceFacts,
    port: u8,
    libmlx5: &Result<(), String>,
) -> Option<(String, bool)> {
    if let Some(sw) = &d.software {
        return Some((
            format!(
                "{} is not an mlx5 device: no direct verbs ({sw} is a software RDMA provider; \
             level 4 needs a ConnectX served by mlx5_core)",
                d.name
            ),
            true,
        ));
    }
    match d.driver.as_deref() {
        Some("mlx5_core") => {}
        Some(other) => {
            return Some((
                format!(
                    "{} is not an mlx5 device: no direct verbs (driver {other}; level 4 needs a \
                 ConnectX served by mlx5_core)",
                    d.name
                ),
                true,
            ));
        }
        None => {
            return Some((
                format!(
                    "{}: its kernel driver is unknown, so whether it is an mlx5 device is unknown",
                    d.name
                ),
                false,
            ));
        }
    }
    if let Err(why) = libmlx5 {
        return Some((
            format!(
                "{LIBMLX5} does not load ({why}): no mlx5 direct verbs (install rdma-core's \
             libibverbs providers, e.g. Debian's ibverbs-providers)"
            ),
            false,
        ));
    }
    match &d.port_state {
        None => Some((format!("{} has no port {port}", d.name), true)),
        Some(Some(PortState::Active)) => None,
        Some(s) => Some((
            format!(
                "{}/{port} is not ACTIVE ({}): no RDMA traffic can flow",
                d.name,
                s.map(|s| format!("{s:?}"))
                    .unwrap_or_else(|| "state unknown".into())
            ),
            true,
        )),
    }
}

/// `auto`: gpu when the driver allows the peer mapping (PeerMappingOverride=1), else cpu-proxy;
/// the mapping itself is tried by the live path, which falls back and says so.
pub fn choose_handler(requested: NicHandler, peer_mapping: Option<bool>) -> (NicHandler, String) {
    match (requested, peer_mapping) {
        (NicHandler::Gpu, _) => (NicHandler::Gpu, "--nic-handler gpu".into()),
        (NicHandler::CpuProxy, _) => (NicHandler::CpuProxy, "--nic-handler cpu-proxy".into()),
        (NicHandler::Auto, Some(true)) => (
            NicHandler::Gpu,
            "auto: PeerMappingOverride=1, so the GPU may map the doorbell page".into(),
        ),
        (NicHandler::Auto, Some(false)) => (
            NicHandler::CpuProxy,
            "auto: PeerMappingOverride is not 1 (gdr.peer-mapping): a CPU thread rings the doorbell".into(),
        ),
        (NicHandler::Auto, None) => (
            NicHandler::CpuProxy,
            "auto: whether PeerMappingOverride is set is unknown (gdr.peer-mapping): a CPU thread rings the doorbell".into(),
        ),
    }
}

fn device_facts(m: &Machine, name: &str, port: u8) -> Option<DeviceFacts> {
    let d = m.inv.rdma.iter().find(|d| d.name == name)?;
    // An unresolved device (its `device` link unreadable) has neither: its driver is unknown,
    // which `device_refusal` says (issue 21).
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
            .ports
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

impl GpuWriteBwReport {
    /// The facts of this run as the judge (`write_bw::judge_run`) reads them. Level 4's bar
    /// is delivery, not bandwidth: a software device never gets this far (refused as not mlx5).
    pub fn view(&self) -> super::write_bw::RunView<'_> {
        super::write_bw::RunView {
            status: &self.status,
            results: &self.results,
            threshold: Some(&self.threshold),
            software: false,
            planned_sizes: self.plan.sizes.len(),
            served: None,
        }
    }
}

/// Run level 4 for every GPU the request selects, in PCI order. `cuda_homes`: where NVRTC
/// may live (CUDA_HOME, CUDA_PATH).
pub fn run(
    m: &Machine,
    libs: &LibFacts,
    req: &GpuWriteRequest,
    cuda_homes: &[PathBuf],
) -> Vec<Run> {
    // -d: the NIC half first, so a device that can never work says so whatever the GPUs.
    if let Some(dev) = &req.device {
        let report = GpuWriteBwReport::new(req);
        match nic_refusal(m, libs, dev, req.port) {
            Ok(_) => {}
            Err((class, why, na)) => {
                let mut report = report;
                report.not_applicable = na;
                return vec![stop(report, dev, class, why)];
            }
        }
    }
    let labels = super::level3::gpu_labels(m.topo, req.gpu);
    if m.topo.gpus.is_empty() {
        let mut report = GpuWriteBwReport::new(req);
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
    let lib = lib_result(libs, LIBMLX5, "mlx5dv_init_obj");
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
    let mut report = GpuWriteBwReport::new(req);
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
    use super::memory::{GpuTarget, Memory};
    use crate::cuda;
    let Some(bdf) = m.topo.gpu(label).map(|g| g.bdf) else {
        return stop(
            report,
            label,
            ErrorClass::Usage,
            format!("{label} is not in the topology"),
        );
    };
    let dev = match super::level3::cuda_device(label, bdf) {
        Ok(d) => d,
        Err(why) => return stop(report, label, ErrorClass::Skip, why),
    };
    let probe = match super::level3::probe_provider(&nic.device) {
        Ok(p) => p,
        Err(e) => {
            let class = e.class();
            return stop(report, label, class, e.to_string());
        }
    };
    let decision = super::level3::decide_registration(
        m,
        super::gdr::GdrMode::Auto,
        label,
        &dev,
        &nic.device,
        probe,
    );
    report
        .notes
        .push(format!("GPU memory registration: {}", decision.summary));
    let Some(registration) = decision.used else {
        return stop(
            report,
            label,
            ErrorClass::Machine,
            format!(
                "{label}'s memory cannot be registered with {}: {}",
                nic.device, decision.summary
            ),
        );
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
    let sides = super::Sides {
        source: gpu_mem.clone(),
        target: gpu_mem,
    };
    let total = req.iters.saturating_mul(req.writes_per_iter);
    let plan = match super::write_bw::Plan::new(
        req.sizes.clone(),
        total,
        req.writes_per_iter,
        req.writes_per_iter,
        None,
        1,
        req.validate,
    ) {
        Ok(p) => p,
        Err(e) => return stop(report, label, ErrorClass::Usage, e.to_string()),
    };
    let wreq = super::WriteBwRequest {
        device: nic.device.clone(),
        port: nic.port,
        gid_index: None,
        plan,
        role: super::Role::Loopback,
        timeout: LIVE_TIMEOUT,
        progress: false,
    };
    let mut poster = super::gpu_poster::GpuPoster::new(
        &nic.device,
        dev,
        cuda_homes.to_vec(),
        req.writes_per_iter,
        req.iters,
        req.handler,
        handler,
        why,
    )
    .with_queues(super::gpu_poster::QueueChoice {
        requested: req.queues,
        gpu_ctx: std::rc::Rc::clone(&ctx),
        registration,
        macs: port_macs(m, &nic.device, nic.port),
    });
    let (measured, res) = super::measure_with(m.sr, &wreq, &sides, &mut poster);
    drop(sides);
    let (measured, mut class) = super::conclude(measured, &res);
    // The kernel module and the poster's pinned memory go with the poster's `live`, already
    // dropped by `finish`; the regions and buffers with the sides.
    let leak = match (before, cuda::mem_info(&ctx)) {
        (Ok(b), Ok(a)) => {
            let c = super::gdr::GpuMemoryCheck::new(b, a, 1);
            report.notes.push(format!(
                "GPU memory (cuMemGetInfo): free {} B before, {} B after",
                c.free_before_bytes, c.free_after_bytes
            ));
            c.leak(label)
        }
        (b, a) => {
            if let Some(e) = b.err().or(a.err()) {
                report.notes.push(format!("cuMemGetInfo: {e}"));
            }
            None
        }
    };
    let f = poster.facts;
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

/// The MAC address of each GID's netdev on `device`'s `port` (read through the sysfs
/// reader): RoCE's next hop when level 4's own QP loops back on the port.
fn port_macs(m: &Machine, device: &str, port: u8) -> Vec<(u32, [u8; 6])> {
    let Some(p) = m
        .inv
        .rdma
        .iter()
        .find(|d| d.name == device)
        .and_then(|d| d.ports.iter().find(|p| p.port == u32::from(port)))
    else {
        return Vec::new();
    };
    p.gids
        .iter()
        .filter_map(|g| {
            let ndev = g.ndev.as_deref()?;
            let text =
                m.sr.read_text(&format!("/sys/class/net/{ndev}/address"))
                    .ok()?;
            Some((g.index, parse_mac(&text)?))
        })
        .collect()
}

/// "aa:bb:cc:dd:ee:ff" (sysfs's address attribute), None for anything else.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.trim().split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.len() != 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn path_of(m: &Machine, gpu: &str, device: &str) -> Option<String> {
    let nic = m.topo.nics.iter().find(|n| n.rdma_device == device)?;
    let mx = &m.topo.matrix;
    let gi = mx.labels.iter().position(|l| l == gpu)?;
    let ni = mx.labels.iter().position(|l| *l == nic.label)?;
    Some(mx.paths.get(gi)?.get(ni)?.pcie.as_str().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let ok = Ok(());
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
        let nolib = Err("libmlx5.so.1: cannot open shared object file".to_string());
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
