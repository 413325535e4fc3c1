//! pcie.*: ACS redirect on the bridges GPUDirect traffic crosses, link training, device
//! control, AER counters.

use super::baseline::AerSource;
use super::{CheckId, Ctx, Finding, Status, ev};
use crate::inventory::PciFunction;
use crate::pci::Bdf;
use crate::pci::config::{Acs, Coverage};
use crate::reading::Reading;
use crate::topo::{BridgeRole, Device, DeviceKind};
use std::collections::{BTreeMap, BTreeSet};

/// Bridges a peer-to-peer transfer between `a` and `b` crosses (where ACS is enforced).
pub fn bridges_between(ctx: &Ctx, a: Bdf, b: Bdf) -> Vec<Bdf> {
    let (Some(fa), Some(fb)) = (ctx.inv.pci.get(&a), ctx.inv.pci.get(&b)) else {
        return Vec::new();
    };
    let mut set = Vec::with_capacity(fa.upstream.len() + fb.upstream.len());
    if fa.root_complex == fb.root_complex {
        let common = fa
            .upstream
            .iter()
            .zip(&fb.upstream)
            .take_while(|(x, y)| x == y)
            .count();
        if common > 0 {
            set.push(fa.upstream[common - 1]);
        }
        set.extend(fa.upstream[common..].iter().copied());
        set.extend(fb.upstream[common..].iter().copied());
    } else {
        set.extend(fa.upstream.iter().copied());
        set.extend(fb.upstream.iter().copied());
    }
    // In bus order, each once.
    set.sort_unstable();
    set.dedup();
    set
}

/// Why a function's extended config space (ACS lives there) cannot be judged, and whether root
/// would have read it: the kernel gives unprivileged readers the header only, so a short read
/// needs root; a config space that could not be read at all (absent from a recording, a
/// format that does not carry it) is unknown for that reason, not for want of root.
struct ConfigGap {
    needs_root: bool,
    why: String,
}

fn config_gap(f: &PciFunction) -> Option<ConfigGap> {
    match &f.config {
        Reading::Absent(why) | Reading::Unknown(why) => Some(ConfigGap {
            needs_root: false,
            why: why.clone(),
        }),
        Reading::Value(c) if c.coverage != Coverage::Extended => Some(ConfigGap {
            needs_root: true,
            why: format!(
                "only {} bytes of config space readable (needs root for the 4096-byte extended space)",
                c.length
            ),
        }),
        Reading::Value(_) => None,
    }
}

fn acs_bits(ctl: u16) -> String {
    let mut v = Vec::new();
    if ctl & Acs::P2P_REQUEST_REDIRECT != 0 {
        v.push("P2P Request Redirect");
    }
    if ctl & Acs::P2P_COMPLETION_REDIRECT != 0 {
        v.push("P2P Completion Redirect");
    }
    if ctl & Acs::UPSTREAM_FORWARDING != 0 {
        v.push("Upstream Forwarding");
    }
    v.join(", ")
}

/// What rdma-core's kernel-boot/rdma_topo (NVIDIA's ACS checker for Direct-NIC platforms)
/// calls a PCI function, by vendor and device id (its `pci_device_types`): Grace and Vera root
/// ports, the ports of the PCIe switch inside a ConnectX or BlueField-3, ConnectX-8's Data
/// Direct function, and the NICs themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PortKind {
    GraceRootPort,
    VeraRootPort,
    NicSwitchPort,
    DataDirect,
    ConnectX,
    Other,
}

fn port_kind(d: &Device) -> PortKind {
    let id = |s: &Option<String>| {
        s.as_deref()
            .and_then(|x| u16::from_str_radix(x.trim_start_matches("0x"), 16).ok())
    };
    match (id(&d.vendor_id), id(&d.device_id)) {
        (Some(0x10de), Some(0x22b1 | 0x22b2 | 0x22b8)) => PortKind::GraceRootPort,
        (Some(0x10de), Some(0x2f95 | 0x2f96)) => PortKind::VeraRootPort,
        // ConnectX-7 (1979), ConnectX/BlueField mlx5Gen (197c) and BlueField-3 (197b) bridges.
        (Some(0x15b3), Some(0x1979 | 0x197b | 0x197c)) => PortKind::NicSwitchPort,
        (Some(0x15b3), Some(crate::nic::CX8_DATA_DIRECT)) => PortKind::DataDirect,
        (Some(0x15b3), Some(0x1021 | 0x1023 | 0x1025 | 0xa2dc)) => PortKind::ConnectX,
        _ => PortKind::Other,
    }
}

/// The platform as rdma_topo tells it apart (`PCITopo.__detect_topo_type`): a Direct-NIC
/// (DMA-based) platform has a ConnectX-8 Data Direct function; a NUMA-based one has a GPU right
/// below a Grace/Vera root port; an inline one has a GPU behind a ConnectX's internal switch;
/// anything else is a plain PCIe switch platform, where today's rule holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AcsPlatform {
    DirectNic,
    GraceNuma,
    InlineNicSwitch,
    Plain,
}

impl AcsPlatform {
    fn as_str(self) -> &'static str {
        match self {
            AcsPlatform::DirectNic => "Direct-NIC (ConnectX-8 Data Direct) platform",
            AcsPlatform::GraceNuma => "Grace/Vera platform with GPUs on CPU root ports",
            AcsPlatform::InlineNicSwitch => {
                "platform with GPUs behind a ConnectX/BlueField internal PCIe switch"
            }
            AcsPlatform::Plain => "plain PCIe switch platform",
        }
    }
}

fn acs_platform(ctx: &Ctx) -> AcsPlatform {
    let t = ctx.topo;
    let kinds: Vec<PortKind> = t.devices.iter().map(port_kind).collect();
    if kinds.contains(&PortKind::DataDirect) {
        return AcsPlatform::DirectNic;
    }
    let gpu_on_cpu_port = t.gpus.iter().any(|g| {
        t.device(g.bdf)
            .and_then(|d| d.upstream.last())
            .and_then(|p| t.device(*p))
            .is_some_and(|p| {
                matches!(
                    port_kind(p),
                    PortKind::GraceRootPort | PortKind::VeraRootPort
                )
            })
    });
    if gpu_on_cpu_port {
        return AcsPlatform::GraceNuma;
    }
    let gpu_behind_nic_switch = t.gpus.iter().any(|g| {
        t.device(g.bdf).is_some_and(|d| {
            d.upstream
                .iter()
                .filter_map(|u| t.device(*u))
                .any(|u| port_kind(u) == PortKind::NicSwitchPort)
        })
    });
    if gpu_behind_nic_switch && kinds.contains(&PortKind::ConnectX) {
        return AcsPlatform::InlineNicSwitch;
    }
    AcsPlatform::Plain
}

/// ACS Control bits rdma_topo prescribes for a port: those that must be set and those that
/// must be clear (bits it leaves alone are in neither). Bit 0 Source Validation, 2 P2P Request
/// Redirect, 3 P2P Completion Redirect, 4 Upstream Forwarding (PCIe Base 6.0, 7.7.8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AcsExpect {
    on: u16,
    off: u16,
    /// Why this port gets these bits.
    role: &'static str,
}

const SV: u16 = Acs::SOURCE_VALIDATION;
const RR: u16 = Acs::P2P_REQUEST_REDIRECT;
const CR: u16 = Acs::P2P_COMPLETION_REDIRECT;
const UF: u16 = Acs::UPSTREAM_FORWARDING;

impl AcsExpect {
    /// rdma_topo's notation: bits 6..0, `1` set, `0` clear, `x` left alone ("xx110x1").
    fn mask(&self) -> String {
        (0..7)
            .rev()
            .map(|b| {
                let bit = 1u16 << b;
                if self.on & bit != 0 {
                    '1'
                } else if self.off & bit != 0 {
                    '0'
                } else {
                    'x'
                }
            })
            .collect()
    }

    fn holds(&self, control: u16) -> bool {
        control & self.on == self.on && control & self.off == 0
    }

    /// The kernel's isolating default (rdma_topo `kernel_acs_isolated`): SV, RR, CR, UF set;
    /// a Vera root port advertises Completion Redirect read-only and clear.
    fn kernel_isolated(kind: PortKind) -> AcsExpect {
        if kind == PortKind::VeraRootPort {
            AcsExpect {
                on: SV | RR | UF,
                off: CR,
                role: "Vera root port: the kernel's isolating default (Completion Redirect is read-only clear there)",
            }
        } else {
            AcsExpect {
                on: SV | RR | CR | UF,
                off: 0,
                role: "the kernel's isolating default for NIC-switch and Grace/Vera ports here",
            }
        }
    }
}

/// What rdma_topo prescribes for bridge `b` on `platform` (None: no platform rule; today's
/// rule, no redirect bit, applies). On a Direct-NIC platform the GPU's traffic to the NIC goes
/// through the Data Direct function beside it, and the shared switch is set so that requests
/// from the GPU side are redirected up while completions and the Data Direct side's requests
/// route peer to peer (rdma_topo `NVCX_DMA_Complex.compute_acs`).
fn acs_expected(ctx: &Ctx, platform: AcsPlatform, b: Bdf) -> Option<AcsExpect> {
    let t = ctx.topo;
    let d = t.device(b)?;
    let kind = port_kind(d);
    if platform == AcsPlatform::DirectNic {
        for dma in t
            .devices
            .iter()
            .filter(|x| port_kind(x) == PortKind::DataDirect)
        {
            // RP -> shared USP -> DSP -> Data Direct function.
            let up = &dma.upstream;
            let (Some(&dsp), Some(&usp)) =
                (up.last(), up.len().checked_sub(2).and_then(|i| up.get(i)))
            else {
                continue;
            };
            if b == dsp {
                return Some(AcsExpect {
                    on: UF | CR | SV,
                    off: RR,
                    role: "downstream port toward the ConnectX-8 Data Direct function",
                });
            }
            if up.first() == Some(&b) {
                return Some(AcsExpect {
                    on: UF | CR | RR,
                    off: SV,
                    role: "root port of a Direct-NIC complex (Source Validation off keeps the complex in one IOMMU group)",
                });
            }
            // The shared switch's other downstream port, on the way to the GPU.
            let on_gpu_side = t.gpus.iter().any(|g| {
                t.device(g.bdf).is_some_and(|gd| {
                    gd.upstream
                        .iter()
                        .position(|u| *u == usp)
                        .and_then(|i| gd.upstream.get(i + 1))
                        == Some(&b)
                })
            });
            if on_gpu_side && d.upstream.last() == Some(&usp) {
                return Some(AcsExpect {
                    on: UF | RR | SV,
                    off: CR,
                    role: "downstream port toward the GPU of a Direct-NIC complex",
                });
            }
        }
    }
    let platform_port = matches!(
        kind,
        PortKind::NicSwitchPort | PortKind::GraceRootPort | PortKind::VeraRootPort
    );
    match platform {
        AcsPlatform::DirectNic | AcsPlatform::GraceNuma if platform_port => {
            Some(AcsExpect::kernel_isolated(kind))
        }
        // Bare metal (rdma_topo --no-virt): peer traffic routed in the NIC's switch.
        AcsPlatform::InlineNicSwitch if platform_port => Some(AcsExpect {
            on: 0,
            off: SV | RR | CR | UF,
            role: "NIC-switch or CPU port of an inline GPU-NIC complex, bare metal: all ACS off so peer traffic stays in the switch",
        }),
        _ => None,
    }
}

pub(super) fn acs_redirect(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieAcsRedirect;
    let t = ctx.topo;
    if t.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    let platform = acs_platform(ctx);
    let hypervisor = t.hypervisor();
    let users = bridge_users(ctx, platform);
    if users.is_empty() {
        // Flat only in a source that shows every port: an NCCL topology XML leaves root ports
        // and switch downstream ports out, so no bridge there is not the absence of one.
        match &ctx.inv.bridges_hidden {
            Some(why) => out.push(Finding::new(
                id,
                "host",
                Status::Skip,
                format!("no PCIe bridge shown between GPUs and their NICs or between GPUs, but {why}"),
            )),
            None => out.push(Finding::new(id, "host", Status::Pass, "no PCIe bridges between GPUs and their NICs or between GPUs (flat PCI): nothing can redirect peer traffic")),
        }
        return;
    }
    let boot = AcsBootParam::new(ctx, platform, hypervisor, &users);
    for (b, pairs) in users {
        if let Some(finding) = bridge_finding(ctx, platform, hypervisor, b, &pairs, &boot) {
            out.push(finding);
        }
    }
}

/// A pair of devices whose peer traffic crosses a bridge (borrowed names: joined once per
/// bridge, not formatted once per bridge and pair, tens of thousands of strings on a large
/// host).
enum PeerPair<'a> {
    Nic(&'a str, &'a str),
    Gpus(&'a str, &'a str),
    /// A GPU and the ConnectX-8 Data Direct function its NIC traffic goes through.
    DataDirect(&'a str, Bdf),
}

/// Bridge -> the device pairs whose traffic crosses it: each GPU and its closest NICs, each
/// GPU and the Data Direct function on its root port (Direct-NIC platforms), each two GPUs.
fn bridge_users<'a>(ctx: &Ctx<'a>, platform: AcsPlatform) -> BTreeMap<Bdf, Vec<PeerPair<'a>>> {
    let t = ctx.topo;
    let mut users: BTreeMap<Bdf, Vec<PeerPair>> = BTreeMap::new();
    for c in &t.closest_nics {
        let Some(g) = t.gpu(&c.gpu) else {
            continue;
        };
        for nic_label in &c.nics {
            let Some(n) = t.nic(nic_label) else {
                continue;
            };
            for b in bridges_between(ctx, g.bdf, n.bdf) {
                users
                    .entry(b)
                    .or_default()
                    .push(PeerPair::Nic(&g.label, &n.rdma_device));
            }
        }
    }
    if platform == AcsPlatform::DirectNic {
        for dma in t
            .devices
            .iter()
            .filter(|d| port_kind(d) == PortKind::DataDirect)
        {
            for g in &t.gpus {
                let on_its_root_port = t.device(g.bdf).is_some_and(|gd| {
                    !gd.upstream.is_empty() && gd.upstream.first() == dma.upstream.first()
                });
                if !on_its_root_port {
                    continue;
                }
                for b in bridges_between(ctx, g.bdf, dma.bdf) {
                    users
                        .entry(b)
                        .or_default()
                        .push(PeerPair::DataDirect(&g.label, dma.bdf));
                }
            }
        }
    }
    for (i, a) in t.gpus.iter().enumerate() {
        for b in &t.gpus[i + 1..] {
            for br in bridges_between(ctx, a.bdf, b.bdf) {
                users
                    .entry(br)
                    .or_default()
                    .push(PeerPair::Gpus(&a.label, &b.label));
            }
        }
    }
    users
}

/// The pairs through one bridge as evidence reads them: "GPU0<->mlx5_0, GPU0<->GPU1".
fn peer_names(pairs: &[PeerPair]) -> String {
    let mut named = String::new();
    let mut last: Option<(&str, String)> = None;
    for p in pairs {
        let (a, b) = match *p {
            PeerPair::Nic(a, b) | PeerPair::Gpus(a, b) => (a, b.to_string()),
            PeerPair::DataDirect(a, d) => (a, format!("Data Direct {d}")),
        };
        // The same pair twice in a row (two routes through one bridge) is named once.
        if last.as_ref().is_some_and(|(x, y)| *x == a && *y == b) {
            continue;
        }
        if !named.is_empty() {
            named.push_str(", ");
        }
        named.push_str(a);
        named.push_str("<->");
        named.push_str(&b);
        last = Some((a, b));
    }
    named
}

/// The one boot parameter that must name every redirecting bridge the plain rule fails: the
/// kernel keeps only the last `disable_acs_redir=` it is given (drivers/pci/pci.c, pci_setup)
/// and takes a semicolon-separated device list
/// (Documentation/admin-guide/kernel-parameters.txt).
struct AcsBootParam {
    /// `pci=disable_acs_redir=BDF;BDF`.
    param: String,
    /// Where it names more than one bridge, why they are in one parameter; else empty.
    all_of_them: String,
}

impl AcsBootParam {
    fn new(
        ctx: &Ctx,
        platform: AcsPlatform,
        hypervisor: Option<(Bdf, &'static str)>,
        users: &BTreeMap<Bdf, Vec<PeerPair>>,
    ) -> AcsBootParam {
        let redirecting: Vec<String> = users
            .keys()
            .filter(|b| hypervisor.is_none() && acs_expected(ctx, platform, **b).is_none())
            .filter(|b| {
                ctx.inv.pci.get(b).is_some_and(|f| {
                    config_gap(f).is_none()
                        && f.config
                            .value()
                            .and_then(|c| c.acs)
                            .is_some_and(|a| a.redirect_bits() != 0)
                })
            })
            .map(Bdf::to_string)
            .collect();
        let param = format!("pci=disable_acs_redir={}", redirecting.join(";"));
        let all_of_them = if redirecting.len() > 1 {
            format!(
                " (one parameter for {} flagged here: the kernel keeps only the last disable_acs_redir= it is given)",
                match redirecting.len() {
                    2 => "both bridges".to_string(),
                    n => format!("all {n} bridges"),
                }
            )
        } else {
            String::new()
        };
        AcsBootParam { param, all_of_them }
    }
}

/// One bridge's finding: skipped where its config space is unknown, else its ACS Control
/// judged against what the bridge should hold (rdma_topo's prescription on the platforms it
/// knows, else today's rule: no redirect bit on a GPU-NIC or GPU-GPU path). None where the
/// bridge is not in the inventory.
fn bridge_finding(
    ctx: &Ctx,
    platform: AcsPlatform,
    hypervisor: Option<(Bdf, &'static str)>,
    b: Bdf,
    pairs: &[PeerPair],
    boot: &AcsBootParam,
) -> Option<Finding> {
    let id = CheckId::PcieAcsRedirect;
    let f = ctx.inv.pci.get(&b)?;
    let pairs_ev = ev("peer paths through this bridge", peer_names(pairs));
    let subject = b.to_string();
    if let Some(gap) = config_gap(f) {
        let skip = if gap.needs_root {
            Finding::new(
                id,
                subject,
                Status::Skip,
                format!("needs root: {}", gap.why),
            )
            .not_root()
        } else {
            Finding::new(
                id,
                subject,
                Status::Skip,
                format!("config space unknown: {}", gap.why),
            )
        };
        return Some(skip.with(pairs_ev));
    }
    let cfg = f.config.value().expect("checked by config_gap");
    let plain = AcsExpect {
        on: 0,
        off: RR | CR | UF,
        role: "bridge on a GPU-NIC or GPU-GPU path: no redirect, peer traffic routed in the switch",
    };
    let platform_rule = acs_expected(ctx, platform, b);
    let want = platform_rule.unwrap_or(plain);
    let want_ev = ev(
        "expected ACS Control (bits 6..0, rdma_topo notation)",
        format!(
            "{} ({}; {})",
            want.mask(),
            want.role,
            if platform_rule.is_some() {
                format!("rdma-core kernel-boot/rdma_topo, {}", platform.as_str())
            } else {
                "NCCL troubleshooting: PCI Access Control Services".to_string()
            }
        ),
    );
    Some(match cfg.acs {
        None if cfg.ext_caps_readable => Finding::new(
            id,
            subject,
            Status::Pass,
            "bridge has no ACS capability: peer traffic is routed directly",
        )
        .with(pairs_ev),
        None => Finding::new(
            id,
            subject,
            Status::Skip,
            format!(
                "extended capability list unreadable: {}",
                cfg.problems.join("; ")
            ),
        )
        .with(pairs_ev),
        Some(a) => {
            let reg_ev = ev(
                format!(
                    "{}/config ACS Control @0x{:03x}",
                    f.sysfs_path,
                    a.offset + 6
                ),
                format!("0x{:04x}", a.control),
            );
            let actual_ev = ev(
                "actual ACS Control (bits 6..0)",
                format!("{:07b}", a.control & 0x7f),
            );
            let evs = vec![reg_ev, want_ev, actual_ev, pairs_ev];
            acs_control_finding(subject, a, hypervisor, platform_rule, platform, boot).evidence(evs)
        }
    })
}

/// A bridge's ACS Control against the platform's rule where there is one, else against "no
/// redirect bit"; a guest's virtual bridges pass whatever they hold.
fn acs_control_finding(
    subject: String,
    a: Acs,
    hypervisor: Option<(Bdf, &'static str)>,
    platform_rule: Option<AcsExpect>,
    platform: AcsPlatform,
    boot: &AcsBootParam,
) -> Finding {
    let id = CheckId::PcieAcsRedirect;
    let (boot_param, all_of_them) = (&boot.param, &boot.all_of_them);
    match (&hypervisor, platform_rule) {
        // A guest's bridges are the hypervisor's virtual ports: their ACS keeps the
        // guest kernel's isolation, and whether peer traffic is redirected is the
        // host's ACS (and IOMMU), which the guest can neither see nor change.
        (Some((hb, what)), _) if a.redirect_bits() != 0 => Finding::new(id, subject, Status::Pass, format!(
            "ACS {} enabled on a virtual bridge in a VM ({what} at {hb}): the guest kernel's isolation is kept, as it should be; the guest cannot change how the host routes peer traffic (the host's ACS and IOMMU decide), so this is not failed",
            acs_bits(a.control)
        )),
        (_, Some(e)) if e.holds(a.control) => Finding::new(id, subject, Status::Pass, format!(
            "ACS Control as rdma_topo prescribes for a {} on a {}{}",
            e.role,
            platform.as_str(),
            if a.redirect_bits() != 0 {
                format!(" ({} on is correct here)", acs_bits(a.control))
            } else {
                String::new()
            }
        )),
        (_, Some(e)) => Finding::new(id, subject.clone(), Status::Fail, format!(
            "ACS Control {:07b} differs from what rdma_topo prescribes for a {} on a {}: expected {}; GPUDirect RDMA through this port is misrouted or its IOMMU grouping is wrong",
            a.control & 0x7f,
            e.role,
            platform.as_str(),
            e.mask()
        ))
        .fix(format!(
            "Set the platform's ACS bits with rdma-core's `rdma_topo` (`rdma_topo check` shows each port, `rdma_topo write-grub-acs` makes the kernel set them at boot with pci=config_acs=, `rdma_topo setpci-acs` sets them now); by hand: `setpci -s {subject} ECAP_ACS+0x6.w` to the expected bits. Do not clear ACS wholesale here: some redirect bits are required on this platform"
        )),
        (_, None) if a.redirect_bits() != 0 => Finding::new(id, subject.clone(), Status::Fail, format!(
            "ACS {} enabled: peer-to-peer traffic is bounced through the root complex (GPUDirect RDMA and GPU P2P slow or broken)",
            acs_bits(a.control)
        ))
        .fix(format!(
            "Disable ACS in the BIOS (often \"ACS Control\"/\"PCIe ACS\" or \"BIOS P2P\" settings), or at boot with `{boot_param}`{all_of_them} (kernel >= 4.19), or at run time `setpci -s {subject} ECAP_ACS+0x6.w=0000` (not persistent). Only do this where VM isolation via IOMMU groups is not needed"
        )),
        (_, None) => Finding::new(id, subject, Status::Pass, "ACS present, no P2P redirect bits set"),
    }
}

/// Devices whose upstream link we judge: GPUs, NICs and the switch upstream ports above them.
/// Each physical link is judged once, from its downstream end.
fn link_subjects(ctx: &Ctx) -> Vec<Bdf> {
    // A NIC without its RDMA device is still a NIC on the bus.
    let nics: BTreeSet<Bdf> = (ctx.topo.nics.iter().map(|n| n.bdf))
        .chain(ctx.topo.nics_without_rdma.iter().map(|n| n.bdf))
        .collect();
    let mut set = BTreeSet::new();
    for d in &ctx.topo.devices {
        if d.kind == DeviceKind::Gpu || nics.contains(&d.bdf) {
            set.insert(d.bdf);
            for u in &d.upstream {
                if let Some(ud) = ctx.topo.device(*u)
                    && ud.role == Some(BridgeRole::SwitchUpstream)
                {
                    set.insert(*u);
                }
            }
        }
    }
    // A NIC whose function was not read is still a subject (judged unknown by `each_link`).
    set.extend(ctx.topo.nics.iter().map(|n| n.bdf));
    set.into_iter().collect()
}

/// Every link subject with what the link checks need: the device, its function, its sysfs
/// dir, who it is ("GPU3", "mlx5_0", "switch upstream port"), its link and the port above.
#[allow(clippy::type_complexity)]
fn each_link(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&Device, &PciFunction, &str, &str, String, Option<&Device>, &mut Vec<Finding>),
) {
    let subjects = link_subjects(ctx);
    if subjects.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no GPUs or RDMA NICs").not_applicable());
        return;
    }
    // A function's RDMA devices (a multi-port NIC function has several), in NIC order.
    let mut rdma: BTreeMap<Bdf, Vec<&str>> = BTreeMap::new();
    for n in &ctx.topo.nics {
        rdma.entry(n.bdf).or_default().push(&n.rdma_device);
    }
    for b in subjects {
        let (Some(d), Some(f)) = (ctx.topo.device(b), ctx.inv.pci.get(&b)) else {
            out.push(unlisted(id, b, &b.to_string()));
            continue;
        };
        let who = match d.kind {
            DeviceKind::Gpu => ctx
                .topo
                .gpu_at(b)
                .map(|g| g.label.clone())
                .unwrap_or_default(),
            DeviceKind::Bridge => "switch upstream port".into(),
            _ => rdma.get(&b).map(|r| r.join("/")).unwrap_or_default(),
        };
        let who = if who.is_empty() {
            "NIC without RDMA device".to_string()
        } else {
            who
        };
        if let Reading::Value(pf) = f.physfn {
            out.push(vf_not_applicable(id, b, &who, pf, "no PCIe link of its own (its link registers read 0); its physical function's link carries its traffic and is checked"));
            continue;
        }
        let parent = d.upstream.last().and_then(|p| ctx.topo.device(*p));
        check(d, f, &f.sysfs_path, &who, b.to_string(), parent, out);
    }
}

/// An SR-IOV virtual function where a check is about something only its physical function has.
fn vf_not_applicable(
    id: CheckId,
    vf: crate::pci::Bdf,
    who: &str,
    pf: crate::pci::Bdf,
    why: &str,
) -> Finding {
    Finding::new(
        id,
        vf.to_string(),
        Status::Skip,
        format!("{who} is an SR-IOV virtual function of {pf}: {why}"),
    )
    .with(ev(
        format!("/sys/bus/pci/devices/{vf}/physfn"),
        pf.to_string(),
    ))
    .not_applicable()
}

/// pcie.link-width: trained at the device's full width.
pub(super) fn link_width(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieLinkWidth;
    each_link(ctx, id, out, |d, f, dir, who, subject, _parent, out| {
        let l = &d.link;
        match (l.cur_width, l.max_width) {
            (Some(c), Some(m)) if c < m => out.push(
                Finding::new(id, subject.clone(), Status::Fail, format!("{who} link trained x{c}, capable of x{m}: bandwidth cut to {}%", u32::from(c) * 100 / u32::from(m)))
                    .with(ev(link_at(f, dir, "current_link_width"), c.to_string()))
                    .with(ev(link_at(f, dir, "max_link_width"), m.to_string()))
                    .fix("Reseat the card/cable and check the riser; confirm the slot's electrical width and BIOS lane bifurcation settings; a persistent downtrain is a hardware fault (check `dmesg` for link errors)"),
            ),
            (Some(c), Some(m)) => out.push(
                Finding::new(id, subject.clone(), Status::Pass, format!("{who} x{c} (max x{m})"))
                    .with(ev(link_at(f, dir, "current_link_width"), c.to_string())),
            ),
            _ => out.push(Finding::new(id, subject.clone(), Status::Skip, format!(
                "{who} link width unknown: {}",
                link_unknown_why(ctx, f, &["current_link_width", "max_link_width"])
            ))),
        }
    });
}

/// pcie.link-speed: trained at the best speed both ends support.
pub(super) fn link_speed(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieLinkSpeed;
    each_link(ctx, id, out, |d, f, dir, who, subject, parent, out| {
        let l = &d.link;
        let port_max = parent.and_then(|p| p.link.max_gen);
        match (l.cur_gen, l.max_gen) {
            (Some(c), Some(m)) => {
                let best = port_max.map_or(m, |p| p.min(m));
                let evs = vec![
                    ev(link_at(f, dir, "current_link_speed"), format!("Gen{c}")),
                    ev(link_at(f, dir, "max_link_speed"), format!("Gen{m}")),
                ];
                if c >= best {
                    out.push(
                        Finding::new(
                            id,
                            subject.clone(),
                            Status::Pass,
                            format!("{who} Gen{c} (best both ends support: Gen{best})"),
                        )
                        .evidence(evs),
                    );
                } else if d.kind == DeviceKind::Gpu {
                    out.push(
                        Finding::new(id, subject.clone(), Status::Warn, format!("{who} at Gen{c}, capable of Gen{best}: idle downshift possible (GPUs lower link speed when idle); the level-1 CUDA probe re-reads it under load"))
                            .evidence(evs)
                            .fix("Run `gpudoctor check --level 1` to read the link under load; if it stays low, reseat the GPU and check BIOS PCIe speed settings"),
                    );
                } else {
                    out.push(
                        Finding::new(id, subject.clone(), Status::Fail, format!("{who} trained Gen{c}, both ends support Gen{best}"))
                            .evidence(evs)
                            .fix("Check BIOS PCIe link speed settings (Auto/GenN), reseat the card or cable, update NIC/switch firmware; `dmesg` shows link retraining errors"),
                    );
                }
            }
            _ => out.push(Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                format!(
                    "{who} link speed unknown: {}",
                    link_unknown_why(ctx, f, &["current_link_speed", "max_link_speed"])
                ),
            )),
        }
    });
}

/// pcie.slot-mismatch: the port above can carry what the device can do.
pub(super) fn slot_mismatch(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieSlotMismatch;
    each_link(ctx, id, out, |d, f, dir, who, subject, parent, out| {
        let l = &d.link;
        match (parent, l.max_gen, l.max_width) {
            // A port above that was not read (left out of the topology): unknown, not "none".
            (None, _, _) if !d.upstream.is_empty() => out.push(Finding::new(id, subject.clone(), Status::Skip, format!(
                "{who}: the port above ({}) was not read: {}",
                d.upstream[d.upstream.len() - 1],
                ctx.inv.notes.iter().find(|n| d.upstream.last().is_some_and(|p| n.path.ends_with(&p.to_string()))).map_or("not among the PCI devices read", |n| n.reason.as_str())
            ))),
            (None, _, _) => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("{who} sits on the root bus (no port above to compare; typical in VMs)")).not_applicable()),
            (Some(p), Some(dg), Some(dw)) => match (p.link.max_gen, p.link.max_width) {
                (Some(pg), Some(pw)) if pg < dg || pw < dw => out.push(
                    Finding::new(id, subject.clone(), Status::Fail, format!("{who} can do Gen{dg} x{dw} but the port above ({}) tops out at Gen{pg} x{pw}", p.bdf))
                        .with(ev(link_at(f, dir, "max_link_speed, max_link_width"), format!("Gen{dg} x{dw}")))
                        .with(ev(ctx.inv.pci.get(&p.bdf).map_or_else(|| format!("{} max_link_speed, max_link_width", p.bdf), |pf| link_at(pf, &pf.sysfs_path, "max_link_speed, max_link_width")), format!("Gen{pg} x{pw}")))
                        .fix("Move the card to a slot wired for its full speed and width (check the board manual: some slots are Gen4 or x8 electrically), or check riser/retimer capability"),
                ),
                (Some(pg), Some(pw)) => out.push(
                    Finding::new(id, subject.clone(), Status::Pass, format!("{who} Gen{dg} x{dw} under a Gen{pg} x{pw} port")),
                ),
                _ => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("port above ({}) link capability unknown", p.bdf))),
            },
            _ => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("{who} link capability unknown"))),
        }
    });
}

/// Why a link value is unknown, for each of `keys` that was not read: the reader's reason, a 0
/// (or "Unknown") explained as what it is (no value: a link that is down, or a hypervisor's
/// virtual port that does not report its link; NCCL 2.30.7 src/graph/topo.cc then assumes x16,
/// a doctor must not), and, in a VM, that the host's physical link is not visible here.
fn link_unknown_why(ctx: &Ctx, f: &PciFunction, keys: &[&str]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for k in keys {
        let reading = match *k {
            "current_link_speed" => &f.link.cur_gen,
            "current_link_width" => &f.link.cur_width,
            "max_link_speed" => &f.link.max_gen,
            _ => &f.link.max_width,
        };
        let Some(r) = reading.why() else {
            continue;
        };
        let zero =
            r.ends_with("unparseable value '0'") || r.ends_with("unparseable value 'Unknown'");
        parts.push(if zero {
            format!("{r}: no value (the link is down, or a virtual port does not report it)")
        } else {
            r.to_string()
        });
    }
    if parts.is_empty() {
        parts.push(format!("{} not read", keys.join(", ")));
    }
    let mut why = parts.join("; ");
    if let Some((b, what)) = ctx.topo.hypervisor() {
        why.push_str(&format!(
            "; this is a VM ({what} at {b}): the physical link is the host's and is not visible here"
        ));
    }
    why
}

/// Where a link value was read: the sysfs attribute `attr` ("current_link_width", ...), or,
/// when the link came from config space, the register behind it (Link Status for the current
/// values, Link Capabilities for the maximum).
fn link_at(f: &PciFunction, dir: &str, attr: &str) -> String {
    match f.link.pcie_cap {
        None => format!("{dir}/{attr}"),
        Some(o) if attr.starts_with("current") => {
            format!("{dir}/config Link Status @0x{:02x}", o + 0x12)
        }
        Some(o) => format!("{dir}/config Link Capabilities @0x{:02x}", o + 0x0c),
    }
}

/// A subject (an RDMA device's function) that is not among the PCI devices read: nothing of
/// it can be judged.
fn unlisted(id: CheckId, b: Bdf, who: &str) -> Finding {
    Finding::new(
        id,
        b.to_string(),
        Status::Skip,
        format!(
            "{who}: PCI function {b} is not among the PCI devices read (/sys/bus/pci/devices/{b} missing or unreadable): cannot be judged"
        ),
    )
}

/// GPUs and NIC functions (a dual-port NIC's function once), each with who it is and whether
/// it is a NIC; or one skip on `host` when there are none.
fn each_endpoint(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(Bdf, &PciFunction, String, bool, &mut Vec<Finding>),
) {
    let t = ctx.topo;
    let mut subjects: Vec<(Bdf, String, bool)> = t
        .gpus
        .iter()
        .map(|g| (g.bdf, g.label.clone(), false))
        .collect();
    let mut seen = BTreeSet::new();
    for n in &t.nics {
        if seen.insert(n.bdf) {
            let names: Vec<String> = t
                .nics
                .iter()
                .filter(|x| x.bdf == n.bdf)
                .map(|x| x.rdma_device.clone())
                .collect();
            subjects.push((n.bdf, names.join("/"), true));
        }
    }
    // A NIC without its RDMA device is still a NIC on the bus.
    for n in &t.nics_without_rdma {
        if seen.insert(n.bdf) {
            subjects.push((n.bdf, "NIC without RDMA device".into(), true));
        }
    }
    if subjects.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no GPUs or RDMA NICs").not_applicable());
        return;
    }
    for (b, who, is_nic) in subjects {
        match ctx.inv.pci.get(&b) {
            Some(f) => check(b, f, who, is_nic, out),
            None => out.push(unlisted(id, b, &who)),
        }
    }
}

/// pcie.devctl: MaxReadReq and relaxed ordering in Device Control.
pub(super) fn devctl(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieDevctl;
    each_endpoint(ctx, id, out, |b, f, who, is_nic, out| {
        let subject = b.to_string();
        match f.config.value().and_then(|c| c.pcie.clone()) {
            Some(p) => {
                let src = ev(
                    format!(
                        "{}/config Device Control @0x{:02x}",
                        f.sysfs_path,
                        p.offset + 8
                    ),
                    format!(
                        "MaxReadReq {} B, MaxPayload {} B, relaxed ordering {}",
                        p.max_read_request_bytes,
                        p.max_payload_bytes,
                        if p.relaxed_ordering { "on" } else { "off" }
                    ),
                );
                if is_nic && !p.relaxed_ordering {
                    out.push(Finding::new(id, subject, Status::Warn, format!("{who}: relaxed ordering disabled in Device Control: RDMA writes into GPU memory lose bandwidth on hosts that need it (AMD EPYC, Grace, some Intel)"))
                        .with(src)
                        .fix("Relaxed ordering is off in the NIC's Device Control register (bit 4), so no write it makes can be relaxed, whatever the firmware asks: the BIOS or the kernel's quirk list for this root complex turned it off. Check the BIOS PCIe relaxed-ordering setting; `setpci -s BDF CAP_EXP+8.w` shows the register. On ConnectX, `mlxconfig -d <dev> query PCI_WR_ORDERING` shows the firmware policy: per_mkey(0), the default, relaxes the writes of memory regions registered with IBV_ACCESS_RELAXED_ORDERING (NCCL asks for it); force_relax(1) relaxes every write"));
                } else if is_nic && p.max_read_request_bytes < 512 {
                    out.push(Finding::new(id, subject, Status::Warn, format!("{who}: MaxReadReq {} B: small read requests limit RDMA read/send bandwidth", p.max_read_request_bytes))
                        .with(src)
                        .fix("Raise MaxReadReq (ConnectX: `mlxconfig ... set MAX_ACC_OUT_READ`/`setpci -s BDF CAP_EXP+8.w=5000:7000` for 4096 B), or check the BIOS `MaxReadRequest` setting"));
                } else {
                    out.push(
                        Finding::new(
                            id,
                            subject,
                            Status::Pass,
                            format!(
                                "{who}: MaxReadReq {} B, relaxed ordering {}",
                                p.max_read_request_bytes,
                                if p.relaxed_ordering { "on" } else { "off" }
                            ),
                        )
                        .with(src),
                    );
                }
            }
            None => {
                let root = f
                    .config
                    .value()
                    .is_some_and(|c| c.coverage == Coverage::Header);
                let why = match &f.config {
                    Reading::Value(c) if c.coverage == Coverage::Header => format!(
                        "needs root: only {} bytes of config space readable",
                        c.length
                    ),
                    Reading::Value(c) => {
                        format!("PCIe capability not found ({})", c.problems.join("; "))
                    }
                    Reading::Absent(why) | Reading::Unknown(why) => why.clone(),
                };
                let skip = Finding::new(id, subject, Status::Skip, format!("{who}: {why}"));
                out.push(if root { skip.not_root() } else { skip });
            }
        }
    });
}

/// pcie.aer: no errors in the AER counters.
pub(super) fn aer(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieAer;
    each_endpoint(ctx, id, out, |b, f, who, _is_nic, out| {
        let subject = b.to_string();
        let extras = ctx.inv.extras.get(&b);
        let counted = extras.map(|x| x.aer_counted()).filter(|a| !a.is_empty());
        // A counter file that could not be read or parsed: its count is unknown, and so is
        // "no errors" (only errors that were counted are a fact).
        let unread: Vec<String> = crate::inventory::AER_FILES
            .iter()
            .filter(|n| counted.as_ref().is_none_or(|a| !a.contains_key(**n)))
            .map(|n| match extras.and_then(|x| x.aer_why(n)) {
                Some(why) => why.to_string(),
                None => format!("{n}: not read"),
            })
            .collect();
        match (counted, aer_source(ctx.inv, f)) {
            (Some(aer), _) => {
                let total: u64 = aer.values().sum();
                let evs = aer
                    .iter()
                    .map(|(k, v)| ev(format!("{}/{k} TOTAL", f.sysfs_path), v.to_string()))
                    .chain(
                        unread
                            .iter()
                            .map(|w| ev("unreadable AER counters", w.clone())),
                    )
                    .collect();
                if total > 0 {
                    out.push(Finding::new(id, subject, Status::Warn, format!("{who}: {total} PCIe errors counted since boot"))
                        .evidence(evs)
                        .fix("Check `dmesg` for AER reports; correctable errors that keep growing mean a marginal link (reseat, replace riser/cable, update firmware); any fatal/non-fatal error needs hardware service"));
                } else if !unread.is_empty() {
                    out.push(
                        Finding::new(
                            id,
                            subject,
                            Status::Skip,
                            format!(
                                "{who}: AER counters partly unreadable ({})",
                                unread.join("; ")
                            ),
                        )
                        .evidence(evs),
                    );
                } else {
                    out.push(
                        Finding::new(
                            id,
                            subject,
                            Status::Pass,
                            format!("{who}: no AER errors counted"),
                        )
                        .evidence(evs),
                    );
                }
            }
            // A VF without the files: no AER capability of its own (a read error is still unknown).
            (None, Reading::Value(AerSource::None)) if f.physfn.is_value() => {
                let pf = f.physfn.value().copied().unwrap_or(b);
                out.push(vf_not_applicable(id, b, &who, pf, "no AER capability of its own; errors on its link are counted on its physical function"));
            }
            // The kernel keeps no counters for this function (no native AER control: a guest,
            // firmware-first platforms): the capability's own status registers are the record.
            (None, source) if no_aer_counters(extras) => {
                out.push(aer_from_config(id, subject, f, &who, &source));
            }
            (None, source) => out.push(Finding::new(
                id,
                subject,
                Status::Skip,
                format!(
                    "{who}: {}",
                    source.why().unwrap_or("AER counters unavailable")
                ),
            )),
        }
    });
}

/// The kernel keeps no `aer_dev_*` counters for this function (`extras`, as read): every
/// counter file is absent.
fn no_aer_counters(extras: Option<&crate::inventory::DeviceExtras>) -> bool {
    crate::inventory::AER_FILES.iter().all(|n| {
        extras
            .and_then(|x| x.aer_why(n))
            .is_some_and(|r| r.ends_with("not present"))
    })
}

/// Where a function's PCIe errors are recorded, as `pcie.aer` reads them: the kernel's
/// counters, else the AER capability's status registers, else nowhere (no capability in config
/// space read in full; a virtual function without counters, whose errors its physical function
/// counts). Unknown where a counter file could not be read or config space stops short of the
/// capability (not root). The one decision both `pcie.aer` and a baseline's `aer` rest on.
pub(crate) fn aer_source(inv: &crate::inventory::Inventory, f: &PciFunction) -> Reading<AerSource> {
    let extras = inv.extras.get(&f.bdf);
    if extras.is_some_and(|x| x.aer.values().any(Reading::is_value)) {
        return Reading::Value(AerSource::Counters);
    }
    let first = extras.and_then(|x| x.aer_why("aer_dev_correctable"));
    if f.physfn.is_value() && first.is_none_or(|r| r.ends_with("not present")) {
        return Reading::Value(AerSource::None);
    }
    if !no_aer_counters(extras) {
        return Reading::unknown(format!(
            "AER counters unavailable ({})",
            first.unwrap_or("not read")
        ));
    }
    let Reading::Value(cs) = &f.config else {
        let why = f.config.why().unwrap_or_default();
        return Reading::unknown(format!(
            "the kernel keeps no AER counters and config space is unreadable ({why})"
        ));
    };
    if cs.aer.is_some() {
        Reading::Value(AerSource::ConfigSpace)
    } else if cs.coverage == Coverage::Extended && cs.ext_caps_readable {
        Reading::Value(AerSource::None)
    } else if cs.coverage == Coverage::Extended {
        Reading::unknown(format!(
            "the kernel keeps no AER counters, and extended capability list unreadable ({})",
            cs.problems.join("; ")
        ))
    } else {
        Reading::unknown(format!(
            "the kernel keeps no AER counters, and the AER capability lies beyond the {} bytes of config space readable (root reads 4096)",
            cs.length
        ))
    }
}

/// pcie.aer where the kernel keeps no `aer_dev_*` counters: judged from the AER capability's
/// status registers in config space (root reads all 4096 bytes). Unmasked bits latched there
/// warn as counted errors do; all clear passes, saying what it covers (since the registers
/// were last cleared). No AER capability in a space read in full: nothing on this function
/// can record PCIe errors, a fact of the platform (not applicable), never a pass. Config space
/// that stops short of the capability: unknown (not-root where the kernel gave 64 bytes).
/// Which of these it is, `aer_source` decided (`source`); this renders it.
fn aer_from_config(
    id: CheckId,
    subject: String,
    f: &PciFunction,
    who: &str,
    source: &Reading<AerSource>,
) -> Finding {
    let counters = ev(
        format!("{}/aer_dev_{{correctable,fatal,nonfatal}}", f.sysfs_path),
        "not present: the kernel keeps no AER counters for this function",
    );
    let config = format!("{}/config", f.sysfs_path);
    if let Some(aer) = f.config.value().and_then(|c| c.aer.as_ref()) {
        let regs = ev(
            format!("{config} AER capability at 0x{:03x}", aer.offset),
            format!(
                "UESta 0x{:08x} UEMsk 0x{:08x} UESvrty 0x{:08x} CESta 0x{:08x} CEMsk 0x{:08x}",
                aer.uncorrectable_status,
                aer.uncorrectable_mask,
                aer.uncorrectable_severity,
                aer.correctable_status,
                aer.correctable_mask
            ),
        );
        let errors = aer.unmasked_errors();
        let masked = aer.masked_errors();
        let masked = if masked.is_empty() {
            String::new()
        } else {
            format!(
                "; latched but masked, so not reported: {}",
                masked.join(", ")
            )
        };
        return if errors.is_empty() {
            Finding::new(
                id,
                subject,
                Status::Pass,
                format!("{who}: no unmasked errors latched in the AER status registers (the kernel keeps no counters here; the registers hold errors since they were last cleared){masked}"),
            )
            .evidence(vec![counters, regs])
        } else {
            Finding::new(
                id,
                subject,
                Status::Warn,
                format!(
                    "{who}: PCIe errors latched in the AER status registers: {}",
                    errors.join(", ")
                ),
            )
            .evidence(vec![counters, regs])
            .fix("Check `dmesg` and the BMC's event log for PCIe errors; correctable errors that come back after `setpci` clears the status registers mean a marginal link (reseat, replace riser/cable, update firmware); any fatal/non-fatal error needs hardware service")
        };
    }
    if let Reading::Value(AerSource::None) = source {
        return Finding::new(
            id,
            subject,
            Status::Skip,
            format!("{who}: no AER capability (the extended capability list, read in full, names none) and the kernel keeps no counters: nothing on this function records PCIe errors"),
        )
        .evidence(vec![counters, ev(config, "4096 bytes; no AER capability (0x0001)")])
        .not_applicable();
    }
    // Unknown (`aer_source` says why): config space unreadable, its capability list
    // unreadable, or short of the capability (64 bytes without root).
    let skip = Finding::new(
        id,
        subject,
        Status::Skip,
        format!(
            "{who}: {}",
            source.why().unwrap_or(
                "the kernel keeps no AER counters, and where errors are recorded is unknown"
            )
        ),
    )
    .with(counters);
    if f.config
        .value()
        .is_some_and(|c| c.coverage == Coverage::Header)
    {
        skip.not_root()
    } else {
        skip
    }
}

/// Checks that judge GPUs, NICs or the bridges between them one device at a time: a PCI
/// function that could be one of those but could not be identified is a subject none of them
/// judged.
const DEVICE_CHECKS: [CheckId; 16] = [
    CheckId::PcieAcsRedirect,
    CheckId::IommuMode,
    CheckId::GpuBar1,
    CheckId::PcieLinkWidth,
    CheckId::PcieLinkSpeed,
    CheckId::PcieSlotMismatch,
    CheckId::NumaGpuNic,
    CheckId::TopoGpuNicPairing,
    CheckId::GdrPath,
    CheckId::PcieDevctl,
    CheckId::PcieAer,
    CheckId::GpuPersistence,
    CheckId::GpuEcc,
    CheckId::GpuRowRemap,
    CheckId::GpuP2p,
    CheckId::GpuNvlinkDown,
];

/// PCI functions that may be a GPU or a NIC but are not known to be either, with why: the
/// function could not be read at all (left out of the topology), it is an NVIDIA function whose
/// class could not be read, a display controller whose vendor could not be read, or NVML names
/// a GPU at an address the PCI device list does not hold. "Is there any GPU" is unknown while any of these remain.
pub(super) fn unidentified(ctx: &Ctx) -> Vec<(Bdf, String)> {
    let mut out = BTreeMap::new();
    for f in ctx.inv.pci.values() {
        // GPUs are NVIDIA display controllers; a function of another vendor is none, whatever
        // its class (NICs are found from their RDMA devices, not their class).
        let unread = |r: Option<&str>| r.unwrap_or("not read").to_string();
        let why = match (
            f.class.value().map(|c| crate::pci::ClassCode(*c)),
            f.vendor.value().copied(),
        ) {
            (_, Some(v)) if v != crate::pci::VENDOR_NVIDIA => None,
            (None, Some(_)) => Some(format!(
                "an NVIDIA function whose class could not be read ({})",
                unread(f.class.why())
            )),
            (None, None) => Some(format!(
                "neither its vendor nor its class could be read ({}; {})",
                unread(f.vendor.why()),
                unread(f.class.why())
            )),
            (Some(c), None) if c.is_display() => Some(format!(
                "a display controller whose vendor could not be read ({})",
                unread(f.vendor.why())
            )),
            _ => None,
        };
        if let Some(why) = why {
            out.insert(f.bdf, why);
        }
    }
    for n in &ctx.inv.notes {
        let Some(b) = n
            .path
            .strip_prefix("/sys/bus/pci/devices/")
            .and_then(|b| b.parse::<Bdf>().ok())
        else {
            continue;
        };
        if !ctx.inv.pci.contains_key(&b) {
            out.insert(b, format!("it could not be read ({})", n.reason));
        }
    }
    for g in &ctx.inv.nvml.gpus {
        if let Some(b) = g.bdf().filter(|b| !ctx.inv.pci.contains_key(b)) {
            out.entry(b).or_insert_with(|| {
                "NVML names a GPU there, and /sys/bus/pci/devices does not list it".to_string()
            });
        }
    }
    out.into_iter().collect()
}

/// An unknown skip from every device check for every function of `unidentified` (as
/// `unidentified` gives them) it has no finding on (`found`: every finding so far).
pub(super) fn unidentified_skips(
    unidentified: &[(Bdf, String)],
    found: &[Finding],
) -> Vec<Finding> {
    let mut out = Vec::new();
    for (b, why) in unidentified {
        let subject = b.to_string();
        for id in DEVICE_CHECKS {
            if found.iter().any(|f| f.id == id && f.subject == subject) {
                continue;
            }
            out.push(Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                format!("PCI function {b} may be a GPU or NIC this check did not judge: {why}"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! ACS per platform on small hand-built trees: rdma_topo's prescriptions on a Direct-NIC
    //! complex, today's rule on a plain switch, and a guest's virtual bridges.
    use super::*;
    use crate::inventory::Link;
    use crate::pci::config::{ConfigSpace, Coverage};

    const BRIDGE: u32 = 0x060400;

    fn b(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    /// A function below `up` (root port first), with ACS Control `acs` where it is a bridge.
    fn f(
        bdf: &str,
        up: &[&str],
        class: u32,
        vendor: u16,
        device: u16,
        acs: Option<u16>,
    ) -> PciFunction {
        PciFunction {
            bdf: b(bdf),
            sysfs_path: format!("/sys/devices/pci0000:00/{bdf}"),
            root_complex: "pci0000:00".into(),
            upstream: up.iter().map(|u| b(u)).collect(),
            class: Reading::Value(class),
            vendor: Reading::Value(vendor),
            device: Reading::Value(device),
            driver: Reading::absent("no driver bound"),
            numa_node: Reading::Value(0),
            local_cpulist: Reading::Value("0-7".into()),
            link: Link::not_read(),
            config: Reading::Value(ConfigSpace {
                length: 4096,
                coverage: Coverage::Extended,
                vendor_id: Some(vendor),
                device_id: Some(device),
                header_type: None,
                pcie: None,
                caps_readable: true,
                acs: acs.map(|control| Acs {
                    offset: 0x100,
                    capability: 0x5f,
                    control,
                }),
                aer_offset: None,
                aer: None,
                ext_caps_readable: true,
                problems: Vec::new(),
            }),
            physfn: Reading::absent("no virtual function"),
        }
    }

    fn run(pci: Vec<PciFunction>, nic: &str) -> Vec<Finding> {
        let inv = crate::topo::tests::inventory(
            pci,
            vec![crate::topo::tests::nic("mlx5_0", nic)],
            Default::default(),
        );
        let topo = crate::topo::build(&inv);
        let libs = crate::libs::LibFacts::default();
        let ctx = Ctx {
            inv: &inv,
            topo: &topo,
            libs: &libs,
        };
        let mut out = Vec::new();
        acs_redirect(&ctx, &mut out);
        out
    }

    fn at<'a>(out: &'a [Finding], bdf: &str) -> &'a Finding {
        out.iter()
            .find(|f| f.subject == bdf)
            .unwrap_or_else(|| panic!("{bdf}: {out:#?}"))
    }

    fn evidence<'a>(f: &'a Finding, source: &str) -> &'a str {
        f.evidence
            .iter()
            .find(|e| e.source.starts_with(source))
            .map(|e| e.value.as_str())
            .unwrap_or_else(|| panic!("{source}: {f:#?}"))
    }

    /// The six bridges of `direct_nic`, in the order of its `acs` argument.
    const DIRECT_NIC_PORTS: [&str; 6] = [
        "0000:00:01.0",
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:02:01.0",
        "0000:04:00.0",
        "0000:05:00.0",
    ];

    /// A Grace root port, a ConnectX-8's switch with its Data Direct function on one downstream
    /// port and a second switch (toward the GPU) on the other; the NIC's PF elsewhere:
    ///
    /// 00:01.0 Grace RP ─ 01:00.0 CX USP ─┬ 02:00.0 DSP ─ 03:00.0 CX8 Data Direct
    ///                                    └ 02:01.0 DSP ─ 04:00.0 USP ─ 05:00.0 DSP ─ 06:00.0 GPU
    /// 00:02.0 Grace RP ─ 07:00.0 ConnectX-8 PF (mlx5_0)
    fn direct_nic(acs: [u16; 6]) -> Vec<PciFunction> {
        let [rp, usp, dsp_dma, dsp_gpu, usp2, dsp2] = DIRECT_NIC_PORTS;
        vec![
            f(rp, &[], BRIDGE, 0x10de, 0x22b2, Some(acs[0])),
            f(usp, &[rp], BRIDGE, 0x15b3, 0x197c, Some(acs[1])),
            f(dsp_dma, &[rp, usp], BRIDGE, 0x15b3, 0x197c, Some(acs[2])),
            f(dsp_gpu, &[rp, usp], BRIDGE, 0x15b3, 0x197c, Some(acs[3])),
            f(
                usp2,
                &[rp, usp, dsp_gpu],
                BRIDGE,
                0x15b3,
                0x197c,
                Some(acs[4]),
            ),
            f(
                dsp2,
                &[rp, usp, dsp_gpu, usp2],
                BRIDGE,
                0x15b3,
                0x197c,
                Some(acs[5]),
            ),
            f(
                "0000:03:00.0",
                &[rp, usp, dsp_dma],
                0x020000,
                0x15b3,
                0x2100,
                None,
            ),
            f(
                "0000:06:00.0",
                &[rp, usp, dsp_gpu, usp2, dsp2],
                0x030200,
                0x10de,
                0x2941,
                None,
            ),
            f("0000:00:02.0", &[], BRIDGE, 0x10de, 0x22b2, Some(0x1d)),
            f(
                "0000:07:00.0",
                &["0000:00:02.0"],
                0x020000,
                0x15b3,
                0x1023,
                None,
            ),
        ]
    }

    #[test]
    fn direct_nic_ports_get_rdma_topos_bits_and_redirect_on_is_correct_there() {
        // rdma_topo: RP xx111x0, DSP toward Data Direct xx110x1, DSP toward the GPU xx101x1,
        // every other NIC-switch port the kernel's isolation xx111x1.
        let good = [0x1c, 0x1d, 0x19, 0x15, 0x1d, 0x1d];
        let out = run(direct_nic(good), "0000:07:00.0");
        for bdf in DIRECT_NIC_PORTS {
            assert_eq!(
                at(&out, bdf).status,
                Status::Pass,
                "{bdf}: {:#?}",
                at(&out, bdf)
            );
        }
        let dsp = at(&out, "0000:02:00.0");
        assert!(dsp.message.contains("is correct here"), "{}", dsp.message);
        assert!(evidence(dsp, "expected ACS Control").starts_with("xx110x1"));
        assert_eq!(evidence(dsp, "actual ACS Control"), "0011001");
        assert!(evidence(dsp, "peer paths").contains("Data Direct 0000:03:00.0"));
        assert!(evidence(at(&out, "0000:00:01.0"), "expected ACS Control").starts_with("xx111x0"));
        assert!(evidence(at(&out, "0000:02:01.0"), "expected ACS Control").starts_with("xx101x1"));
        // The plain rule (all redirect off) fails a Direct-NIC port: ACS cleared wholesale.
        let cleared = run(direct_nic([0; 6]), "0000:07:00.0");
        let dsp = at(&cleared, "0000:02:00.0");
        assert_eq!(dsp.status, Status::Fail);
        assert!(dsp.message.contains("expected xx110x1"), "{}", dsp.message);
        assert!(dsp.remediation.as_deref().unwrap().contains("rdma_topo"));
        // Request Redirect on toward the Data Direct function is wrong.
        let mut bad = good;
        bad[2] = 0x1d;
        assert_eq!(
            at(&run(direct_nic(bad), "0000:07:00.0"), "0000:02:00.0").status,
            Status::Fail
        );
    }

    #[test]
    fn plain_switch_keeps_todays_rule_and_a_vm_keeps_its_isolation() {
        let (rp, usp) = ("0000:00:01.0", "0000:01:00.0");
        let tree = |acs: u16, virtio: bool| {
            let mut v = vec![
                f(rp, &[], BRIDGE, 0x8086, 0x2030, Some(0)),
                f(usp, &[rp], BRIDGE, 0x1000, 0xc030, Some(0)),
                f(
                    "0000:02:00.0",
                    &[rp, usp],
                    BRIDGE,
                    0x1000,
                    0xc030,
                    Some(acs),
                ),
                f("0000:02:01.0", &[rp, usp], BRIDGE, 0x1000, 0xc030, Some(0)),
                f(
                    "0000:03:00.0",
                    &[rp, usp, "0000:02:00.0"],
                    0x030200,
                    0x10de,
                    0x2330,
                    None,
                ),
                f(
                    "0000:04:00.0",
                    &[rp, usp, "0000:02:01.0"],
                    0x020000,
                    0x15b3,
                    0x1021,
                    None,
                ),
            ];
            if virtio {
                v.push(f("0000:00:03.0", &[], 0x020000, 0x1af4, 0x1041, None));
            }
            v
        };
        let out = run(tree(0x1d, false), "0000:04:00.0");
        let dsp = at(&out, "0000:02:00.0");
        assert_eq!(dsp.status, Status::Fail);
        assert!(dsp.message.contains("bounced through the root complex"));
        assert!(evidence(dsp, "expected ACS Control").starts_with("xx000xx"));
        assert_eq!(evidence(dsp, "actual ACS Control"), "0011101");
        assert!(
            dsp.remediation
                .as_deref()
                .unwrap()
                .contains("disable_acs_redir=0000:02:00.0")
        );
        assert_eq!(at(&out, "0000:02:01.0").status, Status::Pass);
        // The same bits in a guest (a virtio function on its bus): kept, not failed, said so.
        let out = run(tree(0x1d, true), "0000:04:00.0");
        let dsp = at(&out, "0000:02:00.0");
        assert_eq!(dsp.status, Status::Pass);
        assert!(dsp.message.contains("in a VM"), "{}", dsp.message);
        assert!(dsp.message.contains("virtio"), "{}", dsp.message);
    }
}
