//! Level 3's decisions, as pure functions over facts already gathered: which RDMA port a GPU
//! uses (its closest ACTIVE port in the topology, never "GPU i with NIC i"), which registration
//! path (NCCL's order: dma-buf where it works, nvidia-peermem otherwise), what the GPU-NIC path
//! lets one expect (NCCL's GDR level), and what a failure means (errno and completion status ->
//! a cause a person can act on, with the level-0 checks that support it).
//!
//! Nothing here does I/O; the runner (`level3`) gathers the facts and calls these.

use crate::findings::{Evidence, Finding, Status, ev};
use crate::reading::Reading;
use crate::report::rdma::gdr::GdrMode;
use crate::report::rdma::gdr::{Cause, Decision, Expectation, NicChoice, PathVerdict};
use crate::report::rdma::memory::Registration;
use crate::topo::{PathType, Topology};
use crate::verbs::DmabufProbe;

/// The GPU half of the registration facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuRegFacts {
    pub label: String,
    /// CUDA's CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (0 with the proprietary kernel module).
    pub cuda_dmabuf: Reading<bool>,
    /// /proc/driver/nvidia/version: Some(true) open kernel module, Some(false) proprietary.
    pub open_module: Option<bool>,
    /// nvidia-peermem, as NCCL finds it (src/transport/net_ib.cc `ncclIbGdrSupport`: the
    /// memory_peers version files or /sys/module/nvidia_peermem/version); None: unreadable.
    pub peermem_loaded: Option<bool>,
}

/// Everything `choose_registration` looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationFacts {
    /// `mlx5_0 (provider mlx5)`.
    pub provider: String,
    /// NCCL's probe on this device: ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0).
    pub provider_probe: DmabufProbe,
    /// Running kernel (major, minor); dma-buf MRs need >= 5.12 (ib_umem_dmabuf).
    pub kernel: Option<(u32, u32)>,
    /// None: the buffers are host memory (`--gdr` without `--gpu`): only the NIC half is
    /// decided and host memory needs no peer-memory client.
    pub gpu: Option<GpuRegFacts>,
}

const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;
const EPROTONOSUPPORT: i32 = libc::EPROTONOSUPPORT;
const EBADF: i32 = libc::EBADF;

/// errno's symbolic name for the few values this module talks about.
pub fn errno_name(e: i32) -> String {
    let name = match e {
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EBADF => "EBADF",
        libc::EFAULT => "EFAULT",
        libc::EINVAL => "EINVAL",
        libc::ENOMEM => "ENOMEM",
        libc::ENOSPC => "ENOSPC",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOENT => "ENOENT",
        libc::ENODEV => "ENODEV",
        libc::ENOSYS => "ENOSYS",
        _ => return format!("errno {e}"),
    };
    name.to_string()
}

/// dma-buf's verdict: CUDA's attribute and the open module (GPU half), the kernel, libibverbs'
/// symbol and the provider's answer to NCCL's fd=-1 probe (NIC half).
fn dmabuf_verdict(f: &RegistrationFacts) -> PathVerdict {
    let probe_call = "ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)";
    let nic = match f.provider_probe {
        DmabufProbe::NoSymbol => {
            return PathVerdict::NotUsable(
                "libibverbs lacks ibv_reg_dmabuf_mr (rdma-core < 34)".into(),
            );
        }
        DmabufProbe::Errno(e) if e == EOPNOTSUPP || e == EPROTONOSUPPORT => {
            return PathVerdict::NotUsable(format!(
                "{} does not support dma-buf memory regions: NCCL's probe {probe_call} failed with {}",
                f.provider,
                errno_name(e)
            ));
        }
        DmabufProbe::Errno(e) if e == EBADF => format!(
            "{} accepts dma-buf memory regions ({probe_call}: EBADF)",
            f.provider
        ),
        // NCCL counts anything but EOPNOTSUPP/EPROTONOSUPPORT as support.
        DmabufProbe::Errno(e) => format!(
            "{} answered {probe_call} with {} (not EOPNOTSUPP/EPROTONOSUPPORT: NCCL counts that as support)",
            f.provider,
            errno_name(e)
        ),
        DmabufProbe::Registered => format!(
            "{} registered fd -1 in NCCL's probe (unexpected; counted as support)",
            f.provider
        ),
    };
    if let Some((maj, min)) = f.kernel
        && (maj, min) < (5, 12)
    {
        return PathVerdict::NotUsable(format!(
            "Linux {maj}.{min} has no dma-buf memory regions (needs >= 5.12)"
        ));
    }
    let Some(g) = &f.gpu else {
        return PathVerdict::Usable(format!("{nic}; host memory (no GPU half)"));
    };
    if g.open_module == Some(false) {
        return PathVerdict::NotUsable(format!(
            "{}: the proprietary NVIDIA kernel module cannot export dma-bufs (needs the open module)",
            g.label
        ));
    }
    match &g.cuda_dmabuf {
        Reading::Value(true) => PathVerdict::Usable(format!(
            "{nic}; {} CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 1",
            g.label
        )),
        Reading::Value(false) => PathVerdict::NotUsable(format!(
            "{}: CUDA reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED = 0",
            g.label
        )),
        Reading::Absent(e) | Reading::Unknown(e) => PathVerdict::Unknown(format!(
            "{nic}; {} DMA_BUF_SUPPORTED unreadable: {e}",
            g.label
        )),
    }
}

fn peermem_verdict(f: &RegistrationFacts) -> PathVerdict {
    let Some(g) = &f.gpu else {
        return PathVerdict::Usable("host memory: ibv_reg_mr needs no peer-memory client".into());
    };
    match g.peermem_loaded {
        Some(true) => PathVerdict::Usable("nvidia-peermem is loaded".into()),
        Some(false) => PathVerdict::NotUsable(
            "nvidia-peermem is not loaded (none of /sys/kernel/mm/memory_peers/nv_mem/version, \
             nv_mem_nc/version, /sys/module/nvidia_peermem/version exists)"
                .into(),
        ),
        None => PathVerdict::Unknown("whether nvidia-peermem is loaded could not be read".into()),
    }
}

/// NCCL's choice (src/transport/net.cc: `useDmaBuf = useGdr && dmaBufSupport && (ptrSupport &
/// NCCL_PTR_DMABUF)`, else ibv_reg_mr through nvidia-peermem): dma-buf where it can work,
/// peermem otherwise. A forced path is refused up front when the facts say it cannot work.
pub fn choose_registration(mode: GdrMode, f: &RegistrationFacts) -> Decision {
    let dmabuf = dmabuf_verdict(f);
    let peermem = peermem_verdict(f);
    use PathVerdict::*;
    let (used, summary) = match mode {
        GdrMode::Auto => match (&dmabuf, &peermem) {
            (Usable(_), _) => (
                Some(Registration::Dmabuf),
                "dma-buf (NCCL's first choice where it works); peermem not needed".to_string(),
            ),
            (_, Usable(_) | Unknown(_)) => (
                Some(Registration::Peermem),
                format!(
                    "peermem (ibv_reg_mr{}): dma-buf not used: {}",
                    if matches!(peermem, Unknown(_)) {
                        ", nvidia-peermem presence unknown: trying"
                    } else {
                        ""
                    },
                    dmabuf.why()
                ),
            ),
            (Unknown(_), NotUsable(p)) => (
                Some(Registration::Dmabuf),
                format!(
                    "dma-buf (support unknown: trying; {}); peermem not usable: {p}",
                    dmabuf.why()
                ),
            ),
            (NotUsable(d), NotUsable(p)) => (
                None,
                format!("no GPUDirect RDMA path: dma-buf: {d}; peermem: {p}"),
            ),
        },
        GdrMode::Dmabuf => match &dmabuf {
            NotUsable(d) => (
                None,
                format!(
                    "dma-buf requested but not usable: {d}; peermem: {}",
                    peermem.why()
                ),
            ),
            _ => (
                Some(Registration::Dmabuf),
                format!("dma-buf (requested): {}", dmabuf.why()),
            ),
        },
        GdrMode::Peermem => match &peermem {
            NotUsable(p) => (
                None,
                format!(
                    "peermem requested but not usable: {p}; dma-buf: {}",
                    dmabuf.why()
                ),
            ),
            _ => (
                Some(Registration::Peermem),
                format!("peermem (requested): {}", peermem.why()),
            ),
        },
    };
    Decision {
        requested: mode,
        used,
        dmabuf,
        peermem,
        summary,
    }
}

/// A GPU's closest ACTIVE RDMA port, by PCIe path type from the topology (GPUDirect RDMA never
/// rides NVLink); ties go to the first NIC in natural name order, then the lowest port. A
/// closer NIC without an ACTIVE port is named in `why`.
pub fn closest_active_port(topo: &Topology, gpu: &str) -> Result<NicChoice, String> {
    let m = &topo.matrix;
    let Some(gi) = m.labels.iter().position(|l| l == gpu) else {
        return Err(format!("{gpu} is not in the topology"));
    };
    let gaps: Vec<String> = topo.nic_gaps().into_iter().map(|(_, why)| why).collect();
    // A NIC without an RDMA device closer than every one with: named.
    let rdmaless = topo
        .closest_nics
        .iter()
        .find(|c| c.gpu == gpu)
        .and_then(|c| c.closer_without_rdma.first())
        .map(|n| {
            format!(
                "NIC {} at {} has no RDMA device ({} would provide it: see rdma.driver)",
                n.bdf,
                n.path.as_str(),
                n.rdma_module
            )
        });
    if topo.nics.is_empty() {
        if let Some(n) = &rdmaless {
            return Err(format!("no NIC has an RDMA device: {gpu}'s closest {n}"));
        }
        if !gaps.is_empty() {
            return Err(format!(
                "no RDMA NIC could be placed: {} (unknown, not absent)",
                gaps.join("; ")
            ));
        }
        return Err(
            "no RDMA NIC on the PCI bus (software devices such as rxe have no PCIe path to a GPU)"
                .into(),
        );
    }
    let mut cands = Vec::new();
    let mut inactive = Vec::new();
    for nic in &topo.nics {
        let Some(ni) = m.labels.iter().position(|l| *l == nic.label) else {
            continue;
        };
        let Some(p) = m.paths.get(gi).and_then(|r| r.get(ni)) else {
            continue;
        };
        for port in &nic.ports {
            if port.state_kind == Some(crate::facts::PortState::Active) {
                cands.push((p.pcie, p.certain, nic, port.port));
            } else {
                inactive.push((
                    p.pcie,
                    format!(
                        "{}/{} ({}, {})",
                        nic.rdma_device,
                        port.port,
                        p.pcie.as_str(),
                        port.state.as_deref().unwrap_or("state unknown")
                    ),
                ));
            }
        }
    }
    // Stable: NICs come in natural order and ports in order, so the first minimum wins ties.
    let best = cands.iter().min_by_key(|c| c.0);
    let Some(&(path, certain, nic, port)) = best else {
        let list: Vec<String> = inactive.into_iter().map(|(_, s)| s).collect();
        return Err(format!(
            "no ACTIVE RDMA port (ports: {})",
            if list.is_empty() {
                "none listed".to_string()
            } else {
                list.join(", ")
            }
        ));
    };
    let closer: Vec<String> = inactive
        .into_iter()
        .filter(|(p, _)| *p < path)
        .map(|(_, s)| s)
        .collect();
    let ties = cands.iter().filter(|c| c.0 == path).count();
    let mut why = format!(
        "{gpu}'s closest ACTIVE RDMA port: {}/{port} at {}{}",
        nic.rdma_device,
        path.as_str(),
        if certain { "" } else { " (NUMA inferred)" }
    );
    if ties > 1 {
        why.push_str(&format!(
            " (first of {ties} ports at {} in name order)",
            path.as_str()
        ));
    }
    if !closer.is_empty() {
        why.push_str(&format!("; closer ports not ACTIVE: {}", closer.join(", ")));
    }
    if let Some(n) = &rdmaless {
        why.push_str(&format!("; closer: {n}"));
    }
    if !gaps.is_empty() {
        why.push_str(&format!(
            "; a closer NIC may be among those that could not be placed: {}",
            gaps.join("; ")
        ));
    }
    Ok(NicChoice {
        device: nic.rdma_device.clone(),
        port: u8::try_from(port).unwrap_or(u8::MAX),
        path: Some(path),
        path_certain: certain,
        why,
    })
}

/// The NCCL release whose rules `nccl_default_gdr` and the GPU model table follow.
pub const NCCL_RULES: &str = "NCCL 2.30.7";

/// Where `nccl_default_gdr`'s rule lives, for evidence.
pub const NCCL_GDR_LEVEL_SOURCE: &str = "NCCL 2.30.7 src/graph/paths.cc ncclTopoCheckGdr: netGdrLevel = NCCL_NET_GDR_C2C (default 1) ? PATH_P2C : PATH_PXB; GPUDirect RDMA off where the GPU-NIC path is beyond it; NCCL_NET_GDR_LEVEL overrides";

/// A GPU-NIC path in NCCL's own classes (src/graph/topo.h, best to worst PIX < PXB < P2C < PXN
/// < PHB < SYS). NCCL has one CPU node per NUMA node, so nvidia-smi's NODE (another host bridge
/// of the same NUMA node) is NCCL's PHB; P2C is NCCL's PHB where the GPU reaches that CPU over
/// NVLink-C2C (src/graph/paths.cc `mergePathType`: C2C + PHB = P2C).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum NcclPath {
    Pix,
    Pxb,
    P2c,
    Phb,
    Sys,
}

impl NcclPath {
    pub fn as_str(self) -> &'static str {
        match self {
            NcclPath::Pix => "PIX",
            NcclPath::Pxb => "PXB",
            NcclPath::P2c => "P2C",
            NcclPath::Phb => "PHB",
            NcclPath::Sys => "SYS",
        }
    }
}

/// NCCL's default GPUDirect RDMA decision for one GPU-NIC pair, as `ncclTopoCheckGdr` makes it
/// with NCCL_NET_GDR_LEVEL unset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NcclGdrDefault {
    pub path: NcclPath,
    /// GPUDirect RDMA used by default.
    pub enabled: bool,
    /// One line for evidence: the path, the level, the version and where the rule lives.
    pub rule: String,
}

/// NCCL's default decision for a GPU-NIC pair at PCIe path `pcie` (nvidia-smi's class).
/// `gpu_c2c`: the GPU reaches its CPU over NVLink-C2C (GH200, GB200).
///
/// NCCL 2.30.7 src/graph/paths.cc `ncclTopoCheckGdr`: `netGdrLevel = ncclParamNetGdrC2c() ?
/// PATH_P2C : PATH_PXB`, NCCL_NET_GDR_C2C defaulting to 1 (since 2.27; 2.26 had it 0 and PXB),
/// and GPUDirect RDMA is off when the path is beyond the level. Without a C2C link no path is
/// P2C, so the default accepts PIX and PXB; on Grace it also accepts a NIC on the GPU's own CPU.
pub fn nccl_default_gdr(pcie: PathType, gpu_c2c: bool) -> NcclGdrDefault {
    let path = match pcie {
        PathType::X | PathType::NV | PathType::PIX => NcclPath::Pix,
        PathType::PXB => NcclPath::Pxb,
        PathType::PHB | PathType::NODE if gpu_c2c => NcclPath::P2c,
        PathType::PHB | PathType::NODE => NcclPath::Phb,
        PathType::SYS => NcclPath::Sys,
    };
    let enabled = path <= NcclPath::P2c;
    let rule = format!(
        "NCCL path {}{} {} default NCCL_NET_GDR_LEVEL {}: GPUDirect RDMA {} by default",
        path.as_str(),
        if pcie == PathType::NODE || path == NcclPath::P2c {
            format!(" (nvidia-smi {})", pcie.as_str())
        } else {
            String::new()
        },
        if enabled { "<=" } else { ">" },
        if gpu_c2c {
            "P2C"
        } else {
            "P2C (= PXB without C2C)"
        },
        if enabled { "used" } else { "off" },
    );
    NcclGdrDefault {
        path,
        enabled,
        rule,
    }
}

/// NCCL enables GPUDirect RDMA only up to PXB by default: src/graph/paths.cc,
/// `ncclTopoCheckGdr`: `netGdrLevel = PATH_PXB` (PATH_P2C on C2C platforms such as Grace),
/// `if (distance > netGdrLevel)` GDR is disabled; NCCL_NET_GDR_LEVEL overrides.
pub fn expectation(path: Option<PathType>) -> Expectation {
    match path {
        Some(p @ (PathType::X | PathType::NV | PathType::PIX | PathType::PXB)) => Expectation {
            judged: true,
            text: format!(
                "path {}: within NCCL's default GPUDirect RDMA level (PXB): large messages must reach 90% of the port's line rate",
                p.as_str()
            ),
        },
        Some(p) => Expectation {
            judged: false,
            text: format!(
                "path {}: crosses a host bridge{}; NCCL does not use GPUDirect RDMA beyond PXB by default \
                 (src/graph/paths.cc ncclTopoCheckGdr, NCCL_NET_GDR_LEVEL): expect low bandwidth; measured, not judged against line rate",
                p.as_str(),
                if p == PathType::SYS {
                    " and the inter-socket link"
                } else {
                    ""
                }
            ),
        },
        None => Expectation {
            judged: false,
            text: "GPU-NIC path unknown (the RDMA device is not on the PCI tree, or no GPU): measured, not judged against line rate".into(),
        },
    }
}

/// Host memory through the level-3 path (`--gdr` without `--gpu`): no GPU-NIC path, judged as
/// level 2 judges it.
pub fn host_expectation() -> Expectation {
    Expectation {
        judged: true,
        text: "host memory: judged as level 2 (90% of the port's line rate for messages >= 64 KiB, where the port has one)".into(),
    }
}

/// What went wrong, as the runner saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Registering the buffer failed with errno (None: host memory).
    Register {
        registration: Option<Registration>,
        errno: i32,
    },
    /// The requested path was refused before trying (the decision's reason).
    Refused { requested: GdrMode, reason: String },
    /// A work completion with an error status.
    Completion { status: String },
    /// No completion within the deadline.
    Stall,
    /// The bytes that landed differ from those sent.
    DataMismatch,
    /// Large messages below the line-rate threshold.
    BelowThreshold,
}

/// What `cause` may cite: level-0 findings (from the same inventory), and BAR1 use.
pub struct CauseContext<'a> {
    pub level0: &'a [Finding],
    /// The GPU's label and PCI address (subjects of gpu.* findings).
    pub gpu: Option<(&'a str, &'a str)>,
    pub provider: &'a str,
    pub path: Option<PathType>,
    /// NVML BAR1 (used, total) bytes, or why unknown.
    pub bar1: Option<Reading<(u64, u64)>>,
}

/// The findings of `id` that bear on this run: its non-passing ones (with their first piece of
/// evidence), or one line saying it passed.
fn cite(cx: &CauseContext, id: &str, out: &mut Vec<Evidence>) {
    let fs: Vec<&Finding> = cx.level0.iter().filter(|f| f.id.as_str() == id).collect();
    if fs.is_empty() {
        out.push(ev(format!("check {id}"), "not run"));
        return;
    }
    let mut bad = 0;
    for f in fs.iter().filter(|f| f.status != Status::Pass) {
        if let Some((label, bdf)) = cx.gpu
            && id.starts_with("gpu.")
            && f.subject != label
            && f.subject != bdf
        {
            continue;
        }
        bad += 1;
        let first = f
            .evidence
            .first()
            .map(|e| format!(" [{}: {}]", e.source, e.value))
            .unwrap_or_default();
        out.push(ev(
            format!("check {id} {}", f.subject),
            format!("{}: {}{first}", f.status.as_str(), f.message),
        ));
    }
    if bad == 0 {
        out.push(ev(
            format!("check {id}"),
            format!("pass ({} subject(s))", fs.len()),
        ));
    }
}

fn mib(b: u64) -> String {
    format!("{} MiB", b / (1 << 20))
}

/// The errno-and-completion-to-cause table.
pub fn cause(f: &Failure, cx: &CauseContext) -> Cause {
    let mut e = Vec::new();
    let bar1 = |e: &mut Vec<Evidence>| match &cx.bar1 {
        Some(Reading::Value((used, total))) => e.push(ev(
            "nvmlDeviceGetBAR1MemoryInfo",
            format!("{} of {} in use", mib(*used), mib(*total)),
        )),
        Some(Reading::Absent(why) | Reading::Unknown(why)) => {
            e.push(ev("nvmlDeviceGetBAR1MemoryInfo", why.clone()))
        }
        None => {}
    };
    let (summary, checks, remediation): (String, Vec<&'static str>, String) = match f {
        Failure::Register { registration, errno } if *errno == libc::ENOMEM || *errno == libc::ENOSPC => {
            match registration {
                None => (
                    format!("registering host memory failed with {}: the locked-memory limit is too low", errno_name(*errno)),
                    vec![],
                    "Raise the memlock limit (`ulimit -l unlimited`, or LimitMEMLOCK=infinity for a service)".into(),
                ),
                Some(r) => {
                    bar1(&mut e);
                    (
                        format!("{} of GPU memory failed with {}: BAR1 is too small or exhausted (the NIC reaches GPU memory through the BAR1 aperture)", r.call(), errno_name(*errno)),
                        vec!["gpu.bar1"],
                        "Free BAR1 (other processes' GPUDirect registrations, `nvidia-smi -q -d MEMORY` shows BAR1 use), or enable a large BAR1 in the BIOS (\"Above 4G decoding\", \"Resizable BAR\") / use a GPU model with BAR1 >= its memory".into(),
                    )
                }
            }
        }
        Failure::Register { registration: Some(Registration::Peermem), errno } if *errno == libc::EFAULT || *errno == libc::EINVAL => (
            format!("ibv_reg_mr on a GPU pointer failed with {}: nvidia-peermem is not loaded (no peer-memory client resolves GPU addresses)", errno_name(*errno)),
            vec!["gdr.peermem"],
            "`modprobe nvidia-peermem` (shipped with the NVIDIA driver >= 470; make it load at boot), or register through dma-buf (--gdr dmabuf: open kernel module, Linux >= 5.12)".into(),
        ),
        Failure::Register { registration: Some(Registration::Dmabuf), errno } if *errno == EOPNOTSUPP || *errno == EPROTONOSUPPORT => (
            format!("ibv_reg_dmabuf_mr failed with {}: {} does not support dma-buf memory regions; peermem (ibv_reg_mr through nvidia-peermem) is the remaining path", errno_name(*errno), cx.provider),
            vec!["gdr.dmabuf", "gdr.peermem"],
            "Use --gdr peermem (load nvidia-peermem), or a provider/kernel with dma-buf MRs (mlx5 with rdma-core >= 34 and Linux >= 5.12)".into(),
        ),
        Failure::Register { registration: Some(Registration::Dmabuf), errno } => (
            format!("ibv_reg_dmabuf_mr on {}'s dma-buf failed with {}: the kernel's dma-buf importer or the NVIDIA open module refused it", cx.provider, errno_name(*errno)),
            vec!["gdr.dmabuf"],
            "Check `dmesg` for the refusal; try --gdr peermem; update the NVIDIA open kernel module and rdma-core".into(),
        ),
        Failure::Register { registration, errno } => (
            format!("{} failed with {}", registration.map(|r| r.call()).unwrap_or("ibv_reg_mr on host memory"), errno_name(*errno)),
            if registration.is_some() { vec!["gdr.peermem", "gdr.dmabuf"] } else { vec![] },
            "Check `dmesg` for the refusal; `gpudoctor explain gdr.peermem` and `gdr.dmabuf` list what each path needs".into(),
        ),
        Failure::Refused { requested, reason } => match requested {
            GdrMode::Dmabuf => (
                format!("dma-buf cannot work here: {reason}"),
                vec!["gdr.dmabuf", "gdr.peermem"],
                "Use --gdr auto or peermem (peermem is the remaining path), or make dma-buf possible (open kernel module, Linux >= 5.12, rdma-core >= 34, a provider with dma-buf MRs such as mlx5)".into(),
            ),
            GdrMode::Peermem => (
                format!("peermem cannot work here: {reason}"),
                vec!["gdr.peermem"],
                "`modprobe nvidia-peermem`, or use --gdr auto / dmabuf".into(),
            ),
            GdrMode::Auto => (
                format!("no GPUDirect RDMA path: {reason}"),
                vec!["gdr.peermem", "gdr.dmabuf"],
                "Load nvidia-peermem, or make dma-buf possible (open kernel module, Linux >= 5.12, rdma-core >= 34, mlx5)".into(),
            ),
        },
        Failure::Completion { status } => (
            format!("completion error ({status}) on an otherwise usable port: GPU memory traffic is redirected by ACS or translated by the IOMMU on the GPU-NIC path"),
            vec!["pcie.acs-redirect", "iommu.mode"],
            "Disable ACS redirect on the bridges between GPU and NIC and use IOMMU passthrough (iommu=pt) or off; `gpudoctor explain pcie.acs-redirect`".into(),
        ),
        Failure::Stall => (
            "writes stalled (no completion within the deadline) on an otherwise usable port: ACS redirect or IOMMU translation on the GPU-NIC path".into(),
            vec!["pcie.acs-redirect", "iommu.mode"],
            "Disable ACS redirect on the bridges between GPU and NIC and use IOMMU passthrough (iommu=pt) or off".into(),
        ),
        Failure::DataMismatch => (
            "bytes written into GPU memory differ from those sent: PCIe ordering or translation on the path".into(),
            vec!["pcie.acs-redirect", "iommu.mode", "pcie.devctl"],
            "Check ACS and IOMMU on the path and the NIC's and GPU's relaxed-ordering settings; rerun with --gdr peermem/dmabuf to see whether one path is affected".into(),
        ),
        Failure::BelowThreshold => match cx.path {
            Some(p) if p > PathType::PXB => (
                format!("low bandwidth as expected for path {}: GPUDirect RDMA through a host bridge", p.as_str()),
                vec!["topo.gpu-nic-pairing"],
                "Use a NIC behind the same PCIe switch as the GPU (PIX/PXB), as NCCL does by default".into(),
            ),
            _ => (
                "below line rate on a PIX/PXB path: ACS redirect, IOMMU translation or a downtrained link on the path".into(),
                vec!["pcie.acs-redirect", "iommu.mode", "pcie.link-speed", "pcie.link-width"],
                "Fix what the cited checks report; compare with host memory on the same port (`probe write-bw -d DEV`)".into(),
            ),
        },
    };
    for id in &checks {
        cite(cx, id, &mut e);
    }
    Cause {
        summary,
        checks,
        evidence: e,
        remediation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::CheckId;
    use crate::report::rdma::gdr::GpuMemoryCheck;

    fn gpu(cuda: Reading<bool>, open: Option<bool>, peermem: Option<bool>) -> GpuRegFacts {
        GpuRegFacts {
            label: "GPU3".into(),
            cuda_dmabuf: cuda,
            open_module: open,
            peermem_loaded: peermem,
        }
    }

    fn facts(probe: DmabufProbe, g: Option<GpuRegFacts>) -> RegistrationFacts {
        RegistrationFacts {
            provider: "mlx5_3 (provider mlx5)".into(),
            provider_probe: probe,
            kernel: Some((6, 8)),
            gpu: g,
        }
    }

    const OK: DmabufProbe = DmabufProbe::Errno(libc::EBADF);

    #[test]
    fn auto_prefers_dmabuf_where_it_works() {
        let d = choose_registration(
            GdrMode::Auto,
            &facts(OK, Some(gpu(Reading::Value(true), Some(true), Some(true)))),
        );
        assert_eq!(d.used, Some(Registration::Dmabuf));
        assert!(matches!(d.dmabuf, PathVerdict::Usable(_)));
        assert!(d.summary.contains("first choice"), "{}", d.summary);
    }

    #[test]
    fn auto_falls_back_to_peermem_and_says_why() {
        // Provider without dma-buf MRs (rxe, or an old kernel): EOPNOTSUPP, and EPROTONOSUPPORT.
        for e in [libc::EOPNOTSUPP, libc::EPROTONOSUPPORT] {
            let d = choose_registration(
                GdrMode::Auto,
                &facts(
                    DmabufProbe::Errno(e),
                    Some(gpu(Reading::Value(true), Some(true), Some(true))),
                ),
            );
            assert_eq!(d.used, Some(Registration::Peermem));
            assert!(
                d.summary.contains("does not support dma-buf"),
                "{}",
                d.summary
            );
            assert!(d.summary.contains(&errno_name(e)), "{}", d.summary);
        }
        // No symbol (rdma-core < 34).
        let d = choose_registration(
            GdrMode::Auto,
            &facts(
                DmabufProbe::NoSymbol,
                Some(gpu(Reading::Value(true), Some(true), Some(true))),
            ),
        );
        assert_eq!(d.used, Some(Registration::Peermem));
        assert!(d.summary.contains("rdma-core < 34"));
        // Proprietary module; CUDA attribute 0; old kernel.
        let d = choose_registration(
            GdrMode::Auto,
            &facts(
                OK,
                Some(gpu(Reading::Value(false), Some(false), Some(true))),
            ),
        );
        assert_eq!(d.used, Some(Registration::Peermem));
        assert!(d.summary.contains("proprietary"), "{}", d.summary);
        let d = choose_registration(
            GdrMode::Auto,
            &facts(OK, Some(gpu(Reading::Value(false), Some(true), Some(true)))),
        );
        assert!(d.summary.contains("DMA_BUF_SUPPORTED = 0"), "{}", d.summary);
        let mut f = facts(OK, Some(gpu(Reading::Value(true), Some(true), Some(true))));
        f.kernel = Some((5, 10));
        let d = choose_registration(GdrMode::Auto, &f);
        assert_eq!(d.used, Some(Registration::Peermem));
        assert!(d.summary.contains("5.12"), "{}", d.summary);
        // peermem unknown: tried, and said so.
        let d = choose_registration(
            GdrMode::Auto,
            &facts(
                DmabufProbe::Errno(libc::EOPNOTSUPP),
                Some(gpu(Reading::Value(true), Some(true), None)),
            ),
        );
        assert_eq!(d.used, Some(Registration::Peermem));
        assert!(d.summary.contains("presence unknown"), "{}", d.summary);
    }

    #[test]
    fn auto_tries_unknown_dmabuf_when_peermem_is_absent_and_gives_up_when_neither_works() {
        let d = choose_registration(
            GdrMode::Auto,
            &facts(
                OK,
                Some(gpu(Reading::unknown("no attr"), Some(true), Some(false))),
            ),
        );
        assert_eq!(d.used, Some(Registration::Dmabuf));
        assert!(matches!(d.dmabuf, PathVerdict::Unknown(_)));
        assert!(d.summary.contains("trying"), "{}", d.summary);
        let d = choose_registration(
            GdrMode::Auto,
            &facts(
                DmabufProbe::Errno(libc::EOPNOTSUPP),
                Some(gpu(Reading::Value(true), Some(true), Some(false))),
            ),
        );
        assert_eq!(d.used, None);
        assert!(
            d.summary.contains("no GPUDirect RDMA path"),
            "{}",
            d.summary
        );
    }

    #[test]
    fn nccl_counts_other_errnos_and_a_success_as_support() {
        for p in [DmabufProbe::Errno(libc::EINVAL), DmabufProbe::Registered] {
            let d = choose_registration(
                GdrMode::Auto,
                &facts(p, Some(gpu(Reading::Value(true), Some(true), Some(false)))),
            );
            assert_eq!(d.used, Some(Registration::Dmabuf), "{p:?}");
        }
    }

    #[test]
    fn forced_paths_are_refused_when_they_cannot_work() {
        let g = Some(gpu(Reading::Value(true), Some(true), Some(false)));
        let d = choose_registration(GdrMode::Peermem, &facts(OK, g.clone()));
        assert_eq!(d.used, None);
        assert!(d.summary.contains("peermem requested but not usable"));
        let d = choose_registration(GdrMode::Dmabuf, &facts(OK, g));
        assert_eq!(d.used, Some(Registration::Dmabuf));
        let g = Some(gpu(Reading::Value(true), Some(true), Some(true)));
        let d = choose_registration(
            GdrMode::Dmabuf,
            &facts(DmabufProbe::Errno(libc::EOPNOTSUPP), g.clone()),
        );
        assert_eq!(d.used, None);
        assert!(d.summary.contains("dma-buf requested but not usable"));
        let d = choose_registration(GdrMode::Peermem, &facts(OK, g));
        assert_eq!(d.used, Some(Registration::Peermem));
    }

    #[test]
    fn host_memory_decides_the_nic_half_only() {
        // rxe in the VM: dma-buf refused by the provider, auto falls back to ibv_reg_mr.
        let mut f = facts(DmabufProbe::Errno(libc::EOPNOTSUPP), None);
        f.provider = "rxe0 (provider rxe)".into();
        let d = choose_registration(GdrMode::Auto, &f);
        assert_eq!(d.used, Some(Registration::Peermem));
        assert!(
            d.summary
                .contains("rxe0 (provider rxe) does not support dma-buf")
        );
        assert!(d.peermem.why().contains("host memory"));
        let d = choose_registration(GdrMode::Dmabuf, &f);
        assert_eq!(d.used, None);
        let d = choose_registration(GdrMode::Auto, &facts(OK, None));
        assert_eq!(d.used, Some(Registration::Dmabuf));
    }

    fn finding(id: CheckId, subject: &str, status: Status, msg: &str) -> Finding {
        Finding::new(id, subject, status, msg).with(ev("src", "val"))
    }

    fn cx(level0: &[Finding]) -> CauseContext<'_> {
        CauseContext {
            level0,
            gpu: Some(("GPU3", "0000:9a:00.0")),
            provider: "mlx5_3 (provider mlx5)",
            path: Some(PathType::PXB),
            bar1: Some(Reading::Value((200 << 20, 256 << 20))),
        }
    }

    #[test]
    fn errno_table() {
        let l0 = vec![
            finding(
                CheckId::GdrPeermem,
                "host",
                Status::Fail,
                "nvidia-peermem not loaded",
            ),
            finding(
                CheckId::GpuBar1,
                "0000:9a:00.0",
                Status::Fail,
                "BAR1 only 256 MiB",
            ),
            finding(
                CheckId::GpuBar1,
                "0000:1b:00.0",
                Status::Fail,
                "another GPU's BAR1",
            ),
            finding(
                CheckId::PcieAcsRedirect,
                "0000:5d:03.0",
                Status::Fail,
                "ACS redirect",
            ),
            finding(CheckId::IommuMode, "host", Status::Pass, "passthrough"),
        ];
        let c = cx(&l0);
        let reg = |r, e| Failure::Register {
            registration: r,
            errno: e,
        };
        // EFAULT / EINVAL on a GPU pointer: peermem.
        for e in [libc::EFAULT, libc::EINVAL] {
            let k = cause(&reg(Some(Registration::Peermem), e), &c);
            assert_eq!(k.checks, ["gdr.peermem"]);
            assert!(k.summary.contains("nvidia-peermem is not loaded"));
            assert!(
                k.evidence
                    .iter()
                    .any(|x| x.value.contains("nvidia-peermem not loaded"))
            );
        }
        // dma-buf refused by the provider: provider named, peermem remains.
        for e in [libc::EOPNOTSUPP, libc::EPROTONOSUPPORT] {
            let k = cause(&reg(Some(Registration::Dmabuf), e), &c);
            assert!(
                k.summary
                    .contains("mlx5_3 (provider mlx5) does not support dma-buf")
            );
            assert!(k.summary.contains("peermem"));
            assert_eq!(k.checks, ["gdr.dmabuf", "gdr.peermem"]);
        }
        // Other dma-buf refusals.
        let k = cause(&reg(Some(Registration::Dmabuf), libc::EINVAL), &c);
        assert_eq!(k.checks, ["gdr.dmabuf"]);
        // ENOMEM / ENOSPC on GPU memory: BAR1 with its use; only this GPU's gpu.bar1 finding.
        for r in [Registration::Peermem, Registration::Dmabuf] {
            for e in [libc::ENOMEM, libc::ENOSPC] {
                let k = cause(&reg(Some(r), e), &c);
                assert_eq!(k.checks, ["gpu.bar1"]);
                assert!(k.summary.contains("BAR1"));
                assert!(
                    k.evidence
                        .iter()
                        .any(|x| x.value == "200 MiB of 256 MiB in use")
                );
                assert!(k.evidence.iter().any(|x| x.value.contains("BAR1 only 256")));
                assert!(!k.evidence.iter().any(|x| x.value.contains("another GPU")));
            }
        }
        // ENOMEM on host memory: memlock.
        let k = cause(&reg(None, libc::ENOMEM), &c);
        assert!(k.summary.contains("locked-memory"));
        assert!(k.checks.is_empty());
        // Anything else: named, with both paths' checks (GPU) or none (host).
        let k = cause(&reg(Some(Registration::Peermem), libc::EPERM), &c);
        assert!(k.summary.contains("ibv_reg_mr failed with EPERM"));
        assert_eq!(k.checks, ["gdr.peermem", "gdr.dmabuf"]);
        assert!(
            k.evidence
                .iter()
                .any(|x| x.source == "check gdr.dmabuf" && x.value == "not run")
        );
        let k = cause(&reg(None, libc::EPERM), &c);
        assert!(k.checks.is_empty());
        // Completion error and stall: ACS / IOMMU, the failing ACS bridge cited, IOMMU's pass.
        for f in [
            Failure::Completion {
                status: "local protection error".into(),
            },
            Failure::Stall,
        ] {
            let k = cause(&f, &c);
            assert_eq!(k.checks, ["pcie.acs-redirect", "iommu.mode"]);
            assert!(
                k.evidence
                    .iter()
                    .any(|x| x.source == "check pcie.acs-redirect 0000:5d:03.0")
            );
            assert!(
                k.evidence
                    .iter()
                    .any(|x| x.source == "check iommu.mode" && x.value.starts_with("pass"))
            );
        }
        let k = cause(&Failure::DataMismatch, &c);
        assert!(k.checks.contains(&"pcie.devctl"));
        // Below the threshold: expected beyond PXB, a fault within it.
        let k = cause(&Failure::BelowThreshold, &c);
        assert!(k.summary.contains("PIX/PXB"));
        let far = CauseContext {
            path: Some(PathType::SYS),
            ..cx(&l0)
        };
        let k = cause(&Failure::BelowThreshold, &far);
        assert!(k.summary.contains("as expected for path SYS"));
        // Refusals up front, per requested mode.
        for (m, id) in [
            (GdrMode::Dmabuf, "gdr.dmabuf"),
            (GdrMode::Peermem, "gdr.peermem"),
            (GdrMode::Auto, "gdr.peermem"),
        ] {
            let k = cause(
                &Failure::Refused {
                    requested: m,
                    reason: "why".into(),
                },
                &c,
            );
            assert!(k.checks.contains(&id), "{m:?}");
            assert!(k.summary.contains("why"));
        }
    }

    #[test]
    fn expectations_follow_nccls_gdr_level() {
        for p in [PathType::PIX, PathType::PXB] {
            assert!(expectation(Some(p)).judged);
        }
        for p in [PathType::PHB, PathType::NODE, PathType::SYS] {
            let e = expectation(Some(p));
            assert!(!e.judged);
            assert!(e.text.contains("ncclTopoCheckGdr"), "{}", e.text);
        }
        assert!(
            expectation(Some(PathType::SYS))
                .text
                .contains("inter-socket")
        );
        assert!(!expectation(None).judged);
        assert!(host_expectation().judged);
    }

    #[test]
    fn nccl_default_level_with_and_without_c2c() {
        let d = |p, c| nccl_default_gdr(p, c);
        assert!(d(PathType::PIX, false).enabled);
        assert!(d(PathType::PXB, false).enabled);
        for p in [PathType::PHB, PathType::NODE, PathType::SYS] {
            let x = d(p, false);
            assert!(!x.enabled, "{p:?}");
            assert!(
                x.rule.contains("> default NCCL_NET_GDR_LEVEL"),
                "{}",
                x.rule
            );
        }
        // nvidia-smi's NODE is NCCL's PHB (one CPU node per NUMA node).
        assert_eq!(d(PathType::NODE, false).path, NcclPath::Phb);
        // Grace: a NIC on the GPU's own CPU is P2C, within the default; across sockets is not.
        let g = d(PathType::PHB, true);
        assert_eq!(g.path, NcclPath::P2c);
        assert!(g.enabled);
        assert!(g.rule.contains("P2C (nvidia-smi PHB)"), "{}", g.rule);
        assert!(d(PathType::NODE, true).enabled);
        assert!(!d(PathType::SYS, true).enabled);
        assert!(d(PathType::PIX, true).enabled);
    }

    #[test]
    fn memory_check() {
        let m = GpuMemoryCheck::new((80 << 30, 81 << 30), (80 << 30, 81 << 30), 100);
        assert!(!m.leaked());
        let m = GpuMemoryCheck::new((80 << 30, 81 << 30), ((80 << 30) - (2 << 20), 81 << 30), 1);
        assert!(m.leaked());
        assert_eq!(m.left_behind_bytes, 2 << 20);
        // More free afterwards (another process freed memory): nothing left behind.
        let m = GpuMemoryCheck::new((1, 10), (5, 10), 1);
        assert_eq!(m.left_behind_bytes, 0);
    }

    fn fixture(name: &str) -> Topology {
        let sr = crate::sysroot::SysRoot::at(&crate::fixture_trees::tree(name)).unwrap();
        let inv = crate::inventory::Inventory::collect(
            &sr,
            crate::nvml::NvmlSnapshot::unavailable("test", "test"),
        )
        .unwrap();
        crate::topo::build(&inv)
    }

    fn set_state(t: &mut Topology, dev: &str, s: crate::facts::PortState) {
        for n in t.nics.iter_mut().filter(|n| n.rdma_device == dev) {
            for p in &mut n.ports {
                p.state_kind = Some(s);
                p.state = Some(format!("{s:?}"));
            }
        }
    }

    #[test]
    fn closest_active_port_by_path_never_by_index() {
        use crate::facts::PortState;
        let mut t = fixture("hgx-h100-8gpu");
        let c = closest_active_port(&t, "GPU0").unwrap();
        assert_eq!(
            (c.device.as_str(), c.port, c.path),
            ("mlx5_0", 1, Some(PathType::PIX))
        );
        assert!(
            c.why.contains("closest ACTIVE RDMA port: mlx5_0/1 at PIX"),
            "{}",
            c.why
        );
        // GPU1's switch holds NIC3, not NIC1.
        let c = closest_active_port(&t, "GPU1").unwrap();
        assert_eq!((c.device.as_str(), c.path), ("mlx5_3", Some(PathType::PIX)));
        // Its NIC down: the next best ACTIVE port, and the closer one named.
        set_state(&mut t, "mlx5_0", PortState::Down);
        let c = closest_active_port(&t, "GPU0").unwrap();
        assert_eq!(c.path, Some(PathType::NODE));
        assert_ne!(c.device, "mlx5_0");
        assert!(
            c.why.contains("closer ports not ACTIVE: mlx5_0/1 (PIX"),
            "{}",
            c.why
        );
        assert!(c.why.contains("first of"), "{}", c.why);
        // Nothing ACTIVE; no NICs; no such GPU.
        let names: Vec<String> = t.nics.iter().map(|n| n.rdma_device.clone()).collect();
        for n in &names {
            set_state(&mut t, n, PortState::Down);
        }
        let e = closest_active_port(&t, "GPU0").unwrap_err();
        assert!(
            e.starts_with("no ACTIVE RDMA port (ports: mlx5_0/1 (PIX"),
            "{e}"
        );
        t.nics.clear();
        assert!(
            closest_active_port(&t, "GPU0")
                .unwrap_err()
                .contains("no RDMA NIC")
        );
        assert!(
            closest_active_port(&t, "GPU42")
                .unwrap_err()
                .contains("not in the topology")
        );
    }

    #[test]
    fn ties_go_to_the_first_nic_in_name_order() {
        // Two-socket PCIe server: GPU0 is PHB to both ports of the first dual-port card.
        let t = fixture("pcie-2socket-roce");
        let c = closest_active_port(&t, "GPU0").unwrap();
        assert_eq!((c.device.as_str(), c.path), ("mlx5_0", Some(PathType::PHB)));
        assert!(c.why.contains("first of 2 ports at PHB"), "{}", c.why);
        assert!(!expectation(c.path).judged);
        let c = closest_active_port(&t, "GPU3").unwrap();
        assert_eq!((c.device.as_str(), c.path), ("mlx5_2", Some(PathType::PHB)));
    }

    #[test]
    fn errno_names() {
        assert_eq!(errno_name(libc::EBADF), "EBADF");
        assert_eq!(errno_name(9999), "errno 9999");
    }
}
