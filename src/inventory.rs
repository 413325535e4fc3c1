//! Raw facts, read through the one `SysRoot`: PCI functions, RDMA devices, netdevs, NUMA nodes,
//! plus the NVML snapshot and notes on everything that could not be read and why.
//!
//! This module must not interpret topology (that is `topo`) and must not judge health (that is
//! `checks`). A value that could not be read is None with its reason in `unread`; nothing gets
//! a default.

use crate::facts::{self, GidType, LinkLayer, PhysState, PortState};
use crate::numa;
use crate::nvml::NvmlSnapshot;
use crate::pci::config::{ConfigSpace, PcieCap};
use crate::pci::{self, Bdf};
use crate::sysroot::{ReadError, SysRoot};
use serde::Serialize;
use std::collections::BTreeMap;

/// Why a fact is missing, keyed by the fact's name.
pub type Unread = BTreeMap<String, String>;

#[derive(Debug, Clone, Serialize)]
pub struct PciFunction {
    pub bdf: Bdf,
    /// Canonical kernel path, e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
    pub sysfs_path: String,
    /// Root complex directory name, e.g. `pci0000:00`.
    pub root_complex: String,
    /// Upstream PCI functions (bridges), nearest the root complex first.
    pub upstream: Vec<Bdf>,
    pub class: Option<u32>,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    pub driver: Option<String>,
    pub numa_node: Option<u32>,
    pub local_cpulist: Option<String>,
    pub link: Link,
    pub config: Option<ConfigSpace>,
    /// SR-IOV: the physical function this virtual function belongs to (its `physfn` link).
    /// A VF has no PCIe link of its own; its PF's link carries its traffic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physfn: Option<Bdf>,
    pub unread: Unread,
}

impl PciFunction {
    /// What `nic::family` judges a function by.
    pub fn ids(&self) -> crate::nic::FunctionIds<'_> {
        crate::nic::FunctionIds {
            class: self.class,
            vendor: self.vendor,
            device: self.device,
            driver: self.driver.as_deref(),
            virtual_function: self.physfn.is_some(),
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Link {
    pub cur_gen: Option<u8>,
    pub cur_width: Option<u8>,
    pub max_gen: Option<u8>,
    pub max_width: Option<u8>,
    /// Where the values came from: the PCI Express capability at this config-space offset
    /// (Link Capabilities/Status, as lspci shows them), or None for the sysfs attributes
    /// (`current_link_speed` ...), read when config space does not reach the capability.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pcie_cap: Option<u16>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RdmaDevice {
    pub name: String,
    /// What the device sits on: a PCI function, a netdev (software RDMA), or unknown.
    pub backing: RdmaBacking,
    pub node_type: Option<String>,
    pub hca_type: Option<String>,
    pub fw_ver: Option<String>,
    pub node_guid: Option<String>,
    pub board_id: Option<String>,
    pub ports: Vec<RdmaPort>,
    pub unread: Unread,
}

/// What an RDMA device sits on, as read from its `device` link and `parent` attribute. Only a
/// positive read makes a device software RDMA: a link that cannot be read is `Unresolved`, so
/// a ConnectX behind a damaged link is never taken for rxe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum RdmaBacking {
    /// Its `device` link resolves to this PCI function.
    Pci { bdf: Bdf },
    /// No `device` link, and a `parent` netdev (rxe, siw: the kernel writes `parent` for
    /// software devices only).
    Software { parent_netdev: String },
    /// The `device` link or `parent` could not be read, or the link leads to no PCI function:
    /// the device's hardware is unknown. `reason` says what was read and how it failed.
    Unresolved { reason: String },
}

impl RdmaDevice {
    /// The PCI function behind it, when that was read.
    pub fn bdf(&self) -> Option<Bdf> {
        match self.backing {
            RdmaBacking::Pci { bdf } => Some(bdf),
            _ => None,
        }
    }

    /// The netdev a software device (rxe, siw) runs on; None unless it is positively software.
    pub fn software_parent(&self) -> Option<&str> {
        match &self.backing {
            RdmaBacking::Software { parent_netdev } => Some(parent_netdev),
            _ => None,
        }
    }

    /// Why its hardware is unknown, when it is.
    pub fn unresolved(&self) -> Option<&str> {
        match &self.backing {
            RdmaBacking::Unresolved { reason } => Some(reason),
            _ => None,
        }
    }
}

/// What listing a class directory (`/sys/class/infiniband`, `/sys/class/net`) found: its
/// entries were read, it is absent (a fact: no such devices, the class driver not loaded), or
/// it could not be listed (unknown: devices may exist that nothing here can see).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ClassListing {
    #[default]
    Listed,
    Absent,
    Unreadable {
        reason: String,
    },
}

impl ClassListing {
    pub fn unreadable(&self) -> Option<&str> {
        match self {
            ClassListing::Unreadable { reason } => Some(reason),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RdmaPort {
    pub port: u32,
    /// The raw texts, as evidence; the `_kind` fields beside them are parsed once, here.
    pub state: Option<String>,
    pub phys_state: Option<String>,
    pub rate: Option<String>,
    pub link_layer: Option<String>,
    pub state_kind: Option<PortState>,
    pub phys_state_kind: Option<PhysState>,
    pub link_layer_kind: Option<LinkLayer>,
    pub rate_gbps: Option<f64>,
    pub lid: Option<String>,
    pub gids: Vec<Gid>,
    /// `counters/*` (the IB PMA port counters: symbol_error, link_downed...), by file name;
    /// None when the directory could not be listed (why: `unread["counters"]`). A counter
    /// file that could not be read or parsed is missing here, its reason under
    /// `unread["counters.NAME"]`.
    pub counters: Option<BTreeMap<String, u64>>,
    /// `hw_counters/*` (driver counters: mlx5's out_of_buffer, rnr_nak_retry_err...), likewise.
    pub hw_counters: Option<BTreeMap<String, u64>>,
    pub unread: Unread,
}

#[derive(Debug, Clone, Serialize)]
pub struct Gid {
    pub index: u32,
    pub gid: String,
    /// "IB/RoCE v1" or "RoCE v2"; None where the kernel has no gid_attrs.
    pub gid_type: Option<String>,
    pub gid_type_kind: Option<GidType>,
    pub ndev: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NetDev {
    pub name: String,
    pub bdf: Option<Bdf>,
    pub mtu: Option<u32>,
    pub operstate: Option<String>,
    pub if_type: Option<u32>,
    pub unread: Unread,
}

#[derive(Debug, Clone, Serialize)]
pub struct NumaNode {
    pub id: u32,
    pub cpulist: Option<String>,
    pub distances: Option<Vec<u32>>,
    pub unread: Unread,
}

/// A whole-inventory note: something that could not be read that is not a single attribute.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Note {
    pub path: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    pub pci: BTreeMap<Bdf, PciFunction>,
    pub rdma: Vec<RdmaDevice>,
    pub netdevs: Vec<NetDev>,
    pub numa_nodes: Vec<NumaNode>,
    pub nvml: std::sync::Arc<NvmlSnapshot>,
    pub host: Host,
    /// Per-function extras (AER counters, resources) for GPUs, NICs and bridges.
    pub extras: BTreeMap<Bdf, DeviceExtras>,
    pub notes: Vec<Note>,
    /// How /sys/class/infiniband was found: an unreadable one leaves every NIC's RDMA device
    /// unknown, an absent one means none.
    pub rdma_class: ClassListing,
    /// How /sys/class/net was found.
    pub net_class: ClassListing,
    /// The kernel log's Xid and link-down records: read with the source (`Source::kernel_log`),
    /// not by discovery; "not read" until the caller sets it.
    #[serde(skip)]
    pub kernel_log: std::sync::Arc<crate::kmsg::KernelLog>,
    /// NCCL's own GPUDirect verdicts where the source carries them (`Source::foreign_gdr`):
    /// handed over with the source, not read by discovery.
    #[serde(skip)]
    pub foreign_gdr: std::sync::Arc<crate::foreign::ForeignVerdicts>,
    /// Why the ports between devices are not all shown, where the source leaves some out (an
    /// NCCL topology XML has no root ports or switch downstream ports): a tree that looks flat
    /// there is not evidence that nothing can redirect. Handed over with the source.
    #[serde(skip)]
    pub bridges_hidden: Option<String>,
}

impl Inventory {
    /// Nothing read: discovery did not finish (`check --time-budget` ran out), `why` says so.
    /// For a report of what was not judged; no check runs on it.
    pub fn unread(why: String) -> Inventory {
        Inventory {
            pci: BTreeMap::new(),
            rdma: Vec::new(),
            netdevs: Vec::new(),
            numa_nodes: Vec::new(),
            nvml: Default::default(),
            host: Host::default(),
            extras: BTreeMap::new(),
            notes: vec![Note {
                path: "/".to_string(),
                reason: why,
            }],
            rdma_class: ClassListing::Unreadable {
                reason: "discovery did not finish".to_string(),
            },
            net_class: ClassListing::Unreadable {
                reason: "discovery did not finish".to_string(),
            },
            kernel_log: Default::default(),
            foreign_gdr: Default::default(),
            bridges_hidden: None,
        }
    }
}

/// How much to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Topology,
    Checks,
}

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("cannot list PCI devices: {0}")]
    NoPciBus(ReadError),
}

fn note_err(unread: &mut Unread, key: &str, e: &ReadError) {
    unread.insert(key.to_string(), e.to_string());
}

/// Read a text attribute; on failure record why.
fn text(sr: &SysRoot, unread: &mut Unread, key: &str, path: &str) -> Option<String> {
    match sr.read_text(path) {
        Ok(s) => Some(s),
        Err(e) => {
            note_err(unread, key, &e);
            None
        }
    }
}

/// Read and parse; a parse failure records the garbage seen.
fn parsed<T>(
    sr: &SysRoot,
    unread: &mut Unread,
    key: &str,
    path: &str,
    f: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    let s = text(sr, unread, key, path)?;
    match f(&s) {
        Some(v) => Some(v),
        None => {
            let shown: String = s.chars().take(40).collect();
            unread.insert(
                key.to_string(),
                format!("{path}: unparseable value '{shown}'"),
            );
            None
        }
    }
}

impl Inventory {
    /// Read everything the topology and the checks need. Fails only when there is no PCI bus
    /// to read at all.
    pub fn collect(
        sr: &SysRoot,
        nvml: impl Into<std::sync::Arc<NvmlSnapshot>>,
    ) -> Result<Inventory, InventoryError> {
        Self::collect_scoped(sr, nvml, Scope::Checks)
    }

    /// Read what `scope` needs: `Topology` leaves out host facts and per-device extras (AER
    /// counters, BARs) that only checks use. The NVML snapshot is shared, not copied (a large
    /// host's is megabytes).
    pub fn collect_scoped(
        sr: &SysRoot,
        nvml: impl Into<std::sync::Arc<NvmlSnapshot>>,
        scope: Scope,
    ) -> Result<Inventory, InventoryError> {
        let nvml = nvml.into();
        Self::collect_with(sr, &|| nvml.clone(), scope)
    }

    /// `collect_scoped`, NVML's snapshot asked of `nvml` only where it is needed (a recorded
    /// tree's nvml.json may still be parsing while the tree is read).
    pub fn collect_with(
        sr: &SysRoot,
        nvml: &(dyn Fn() -> std::sync::Arc<NvmlSnapshot> + Sync),
        scope: Scope,
    ) -> Result<Inventory, InventoryError> {
        let mut notes = Vec::new();
        let names = sr
            .list_names("/sys/bus/pci/devices")
            .map_err(InventoryError::NoPciBus)?;
        let (net_names, net_class) = list_class(sr, "/sys/class/net", &mut notes);
        let (rdma_names, rdma_class) = list_class(sr, "/sys/class/infiniband", &mut notes);
        // Every independent read as one job, the long ones first, so that the workers stay
        // busy to the end (no stage waits for the slowest of another).
        let mut jobs = vec![Job::Numa];
        if scope == Scope::Checks {
            jobs.push(Job::Host);
        }
        jobs.extend(rdma_names.iter().map(|n| Job::Rdma(n)));
        jobs.extend(net_names.iter().map(|n| Job::Net(n)));
        jobs.extend(names.iter().map(|n| Job::Function(n)));
        let mut pci = BTreeMap::new();
        let mut netdevs = Vec::new();
        let mut rdma = Vec::new();
        let mut numa_nodes = Vec::new();
        let mut host = Host::default();
        let done = crate::workers::map_if(!sr.is_in_memory(), &jobs, |job| match *job {
            Job::Numa => {
                let mut notes = Vec::new();
                Found::Numa(read_numa(sr, &mut notes), notes)
            }
            Job::Host => Found::Host({
                let mut h = read_host(sr);
                if nvml().gpus.iter().any(|g| {
                    g.nvlinks
                        .iter()
                        .any(|l| l.remote_device_type.value() == Some(&facts::NvLinkRemote::Switch))
                }) {
                    read_fabric_manager(sr, &mut h);
                }
                h
            }),
            Job::Rdma(name) => Found::Rdma(read_one_rdma(sr, name.to_string(), scope)),
            Job::Net(name) => Found::Net(read_netdev(sr, name)),
            Job::Function(name) => Found::Function(
                name,
                name.parse::<Bdf>()
                    .ok()
                    .map(|bdf| (bdf, read_function(sr, name, bdf))),
            ),
        });
        for found in done {
            match found {
                Found::Numa(n, mut more) => {
                    numa_nodes = n;
                    notes.append(&mut more);
                }
                Found::Host(h) => host = h,
                Found::Rdma(r) => rdma.push(r),
                Found::Net(n) => netdevs.push(n),
                Found::Function(name, None) => notes.push(Note {
                    path: format!("/sys/bus/pci/devices/{name}"),
                    reason: "entry is not a PCI address; ignored".into(),
                }),
                Found::Function(_, Some((bdf, Ok(f)))) => {
                    pci.insert(bdf, f);
                }
                Found::Function(name, Some((_, Err(e)))) => notes.push(Note {
                    path: format!("/sys/bus/pci/devices/{name}"),
                    reason: format!("{e}; device left out of the topology"),
                }),
            }
        }
        netdevs.sort_by(|a, b| pci::natural_cmp(&a.name, &b.name));
        rdma.sort_by(|a, b| pci::natural_cmp(&a.name, &b.name));
        check_numa_nodes(&mut pci, &numa_nodes, &notes);
        let mut extras = BTreeMap::new();
        if scope == Scope::Checks {
            // Only the checks' subjects: pcie.aer judges GPUs and the functions behind RDMA
            // devices, gpu.bar1 reads a GPU's `resource` (bridges and plain NICs: nothing).
            let rdma_bdfs: std::collections::BTreeSet<Bdf> =
                rdma.iter().filter_map(RdmaDevice::bdf).collect();
            let wanted: Vec<(&PciFunction, bool)> = pci
                .values()
                .filter_map(|f| {
                    let c = f.class.map(pci::ClassCode)?;
                    let gpu = f.vendor == Some(pci::VENDOR_NVIDIA) && c.is_display();
                    // A NIC of an RDMA-capable family is judged with or without its RDMA
                    // device.
                    let nic = (rdma_bdfs.contains(&f.bdf) || crate::nic::family(f.ids()).is_some())
                        && (c.is_bridge_pci() || c.is_network());
                    (gpu || nic).then_some((f, gpu))
                })
                .collect();
            let read = crate::workers::map_if(!sr.is_in_memory(), &wanted, |(f, gpu)| {
                (f.bdf, read_extras(sr, f, *gpu))
            });
            // iommu.mode judges every GPU and every function behind an RDMA device.
            let judged: Vec<&PciFunction> = pci
                .values()
                .filter(|f| {
                    rdma_bdfs.contains(&f.bdf)
                        || (f.vendor == Some(pci::VENDOR_NVIDIA)
                            && f.class.is_some_and(|c| pci::ClassCode(c).is_display()))
                })
                .collect();
            // Groups to look up only when there are any (none: IOMMU off, nothing to read).
            if host.iommu_groups.as_ref().is_some_and(|g| !g.is_empty()) {
                read_iommu(sr, &judged, &mut host);
            }
            for (bdf, (x, u)) in read {
                if let Some(f) = pci.get_mut(&bdf) {
                    f.unread.extend(u);
                }
                extras.insert(bdf, x);
            }
        }
        notes.sort();
        Ok(Inventory {
            pci,
            rdma,
            netdevs,
            numa_nodes,
            nvml: nvml(),
            host,
            extras,
            notes,
            rdma_class,
            net_class,
            kernel_log: std::sync::Arc::new(crate::kmsg::KernelLog::not_recorded(
                "kernel log not read",
            )),
            foreign_gdr: Default::default(),
            bridges_hidden: None,
        })
    }
}

/// A function's `numa_node` must name one of the host's nodes: a number the node directory
/// does not list (4095 on a two-node host) is not a fact. Where the node directory could not be
/// listed there is nothing to hold the numbers against, and they stay as read.
fn check_numa_nodes(pci: &mut BTreeMap<Bdf, PciFunction>, nodes: &[NumaNode], notes: &[Note]) {
    if notes.iter().any(|n| n.path == "/sys/devices/system/node") {
        return;
    }
    let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
    for f in pci.values_mut() {
        if let Some(n) = f.numa_node.filter(|n| !ids.contains(n)) {
            f.numa_node = None;
            f.unread.insert(
                "numa_node".into(),
                format!(
                    "{}/numa_node: node {n} is not one of the host's NUMA nodes ({})",
                    f.sysfs_path,
                    if ids.is_empty() {
                        "none listed under /sys/devices/system/node".to_string()
                    } else {
                        ids.iter()
                            .map(u32::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    }
                ),
            );
        }
    }
}

/// One independent piece of discovery (see `collect_scoped`).
enum Job<'a> {
    Numa,
    Host,
    Rdma(&'a str),
    Net(&'a str),
    Function(&'a str),
}

/// What a `Job` read.
enum Found<'a> {
    Numa(Vec<NumaNode>, Vec<Note>),
    Host(Host),
    Rdma(RdmaDevice),
    Net(NetDev),
    /// The directory name, and its address with what was read (None: not a PCI address).
    Function(&'a str, Option<(Bdf, Result<PciFunction, ReadError>)>),
}

/// The PCI function named by the last BDF component of a canonical path.
fn bdf_of_device_link(sr: &SysRoot, path: &str) -> Result<Option<Bdf>, ReadError> {
    let canon = sr.canonical(path)?;
    Ok(canon
        .split('/')
        .filter_map(|c| c.parse::<Bdf>().ok())
        .next_back())
}

fn read_function(sr: &SysRoot, name: &str, bdf: Bdf) -> Result<PciFunction, ReadError> {
    let canon = sr.canonical(&format!("/sys/bus/pci/devices/{name}"))?;
    let comps: Vec<&str> = canon.split('/').collect();
    let rc_pos = comps
        .iter()
        .position(|c| c.starts_with("pci") && c.contains(':'))
        .ok_or_else(|| ReadError::Io {
            path: canon.clone(),
            message: "no pciDDDD:BB root complex in its path".into(),
        })?;
    let root_complex = comps[rc_pos].to_string();
    let mut chain: Vec<Bdf> = comps[rc_pos + 1..]
        .iter()
        .filter_map(|c| c.parse::<Bdf>().ok())
        .collect();
    match chain.pop() {
        Some(last) if last == bdf => {}
        _ => {
            return Err(ReadError::Io {
                path: canon.clone(),
                message: format!("canonical path does not end in {bdf}"),
            });
        }
    }
    let dir = canon.clone();
    let mut u = Unread::new();
    let hex = |s: &str| pci::parse_hex(s);
    let class = parsed(sr, &mut u, "class", &format!("{dir}/class"), hex);
    let config = match sr.read_bytes(&format!("{dir}/config")) {
        Ok(b) => Some(ConfigSpace::parse(&b)),
        Err(e) => {
            note_err(&mut u, "config", &e);
            None
        }
    };
    // Vendor and device ID: the first four bytes of config space (readable without root)
    // are what the `vendor`/`device` attributes show, so those two files are read only when
    // config space cannot say: unreadable, or 0xffff as a virtual function reads (the kernel
    // takes a VF's IDs from its PF's SR-IOV capability).
    // A config space cut short of its 64-byte header (or garbage in its place) says nothing.
    let config_ids = config
        .as_ref()
        .filter(|c| c.coverage != crate::pci::config::Coverage::Truncated)
        .and_then(|c| c.vendor_id.zip(c.device_id))
        .filter(|(v, _)| *v != 0xffff && *v != 0);
    let (vendor, device) = match config_ids {
        Some((v, d)) => (Some(v), Some(d)),
        None => (
            parsed(sr, &mut u, "vendor", &format!("{dir}/vendor"), hex).map(|v| v as u16),
            parsed(sr, &mut u, "device", &format!("{dir}/device"), hex).map(|v| v as u16),
        ),
    };
    let driver = match sr.read_link(&format!("{dir}/driver")) {
        Ok(t) => {
            match pci_driver_name(&t) {
                Some(d) => Some(d),
                None => {
                    u.insert(
                    "driver".into(),
                    format!("{dir}/driver: link to '{}' names no PCI driver (…/bus/pci/drivers/NAME)", shown(&t)),
                );
                    None
                }
            }
        }
        Err(ReadError::NotFound(_)) => {
            u.insert("driver".into(), "no driver bound".into());
            None
        }
        Err(e) => {
            note_err(&mut u, "driver", &e);
            None
        }
    };
    let numa_node = match sr.read_text(&format!("{dir}/numa_node")) {
        Ok(s) => match numa::parse_numa_node(&s) {
            Ok(Some(n)) => Some(n),
            Ok(None) => {
                u.insert(
                    "numa_node".into(),
                    "kernel reports -1: no NUMA affinity known (typical in VMs and single-node firmware tables)".into(),
                );
                None
            }
            Err(m) => {
                u.insert("numa_node".into(), format!("{dir}/numa_node: {m}"));
                None
            }
        },
        Err(e) => {
            note_err(&mut u, "numa_node", &e);
            None
        }
    };
    let local_cpulist = parsed(
        sr,
        &mut u,
        "local_cpulist",
        &format!("{dir}/local_cpulist"),
        |s| numa::parse_cpulist(s).map(|_| s.to_string()),
    );
    let link = match config.as_ref().and_then(|c| c.pcie.as_ref()) {
        Some(p) => link_from_config(p, &dir, &mut u),
        None => link_from_files(sr, &dir, &mut u),
    };
    // Only virtual functions have a physfn link: its absence is the normal case. A VF's
    // config space reads 0xffff for its IDs (SR-IOV), so a function whose config space shows
    // real IDs is no VF and the link is not looked for.
    let physfn =
        match config_ids.map_or_else(|| Some(sr.link_name(&format!("{dir}/physfn"))), |_| None) {
            None => None,
            Some(Ok(name)) => match name.parse::<Bdf>() {
                Ok(pf) => Some(pf),
                Err(_) => {
                    u.insert("physfn".into(), format!("not a PCI address: {name:?}"));
                    None
                }
            },
            Some(Err(ReadError::NotFound(_))) => None,
            Some(Err(e)) => {
                note_err(&mut u, "physfn", &e);
                None
            }
        };
    Ok(PciFunction {
        bdf,
        sysfs_path: canon,
        root_complex,
        upstream: chain,
        class,
        vendor,
        device,
        driver,
        numa_node,
        local_cpulist,
        link,
        config,
        physfn,
        unread: u,
    })
}

/// The driver a function's `driver` link names: the kernel links it to
/// `../../../bus/pci/drivers/NAME`; a link anywhere else (to itself, out of the tree) names none.
fn pci_driver_name(target: &str) -> Option<String> {
    let parts: Vec<&str> = target.split('/').filter(|p| !p.is_empty()).collect();
    match parts.as_slice() {
        [.., "bus", "pci", "drivers", name] if !matches!(*name, "." | "..") => {
            Some(name.to_string())
        }
        _ => None,
    }
}

/// The link from the kernel's attributes (`current_link_speed`, `current_link_width`,
/// `max_link_speed`, `max_link_width`): when config space does not reach the PCI Express
/// capability (a non-root reader gets 64 bytes, a recording may lack `config`).
fn link_from_files(sr: &SysRoot, dir: &str, u: &mut Unread) -> Link {
    Link {
        cur_gen: parsed(
            sr,
            u,
            "current_link_speed",
            &format!("{dir}/current_link_speed"),
            pci::gen_from_speed,
        ),
        cur_width: parsed(
            sr,
            u,
            "current_link_width",
            &format!("{dir}/current_link_width"),
            pci::parse_width,
        ),
        max_gen: parsed(
            sr,
            u,
            "max_link_speed",
            &format!("{dir}/max_link_speed"),
            pci::gen_from_speed,
        ),
        max_width: parsed(
            sr,
            u,
            "max_link_width",
            &format!("{dir}/max_link_width"),
            pci::parse_width,
        ),
        pcie_cap: None,
    }
}

/// The link from the PCI Express capability: the registers the kernel reads to write the
/// four link attributes (Link Status for the current speed and width, Link Capabilities and
/// Link Capabilities 2 for the maximum), so the attributes need not be opened. A field the
/// registers leave undefined (speed 0, width 0: link down, or a virtual function) is unknown,
/// with why.
fn link_from_config(p: &PcieCap, dir: &str, u: &mut Unread) -> Link {
    let sta = format!("{dir}/config Link Status @0x{:02x}", p.offset + 0x12);
    let cap = format!("{dir}/config Link Capabilities @0x{:02x}", p.offset + 0x0c);
    let sta_speed = u32::from(p.link_status) & 0xf;
    let sta_width = (u32::from(p.link_status) >> 4) & 0x3f;
    let cap_width = (p.link_caps >> 4) & 0x3f;
    let down = "0, not a valid value (no link trained: empty slot or link down; a virtual function has no link of its own)";
    let regs = format!(
        "Link Capabilities 0x{:08x}, Link Status 0x{:04x}",
        p.link_caps, p.link_status
    );
    let width_bad = |w: u32| {
        format!(
            "x{w} ({regs}) is not a width a PCIe link can report ({}): a dead or absent device reads all ones",
            pci::LINK_WIDTHS.map(|w| format!("x{w}")).join(", ")
        )
    };
    let gen_bad = |g: u32| {
        format!(
            "Gen{g} ({regs}) is not a speed a PCIe link can report (Gen1 to Gen{}): a dead or absent device reads all ones",
            pci::MAX_GEN
        )
    };
    for (missing, key, at, raw, bad) in [
        (
            p.link_cur_gen.is_none(),
            "current_link_speed",
            &sta,
            sta_speed,
            &gen_bad as &dyn Fn(u32) -> String,
        ),
        (
            p.link_cur_width.is_none(),
            "current_link_width",
            &sta,
            sta_width,
            &width_bad,
        ),
        (
            p.link_max_gen.is_none(),
            "max_link_speed",
            &cap,
            0,
            &gen_bad,
        ),
        (
            p.link_max_width.is_none(),
            "max_link_width",
            &cap,
            cap_width,
            &width_bad,
        ),
    ] {
        if missing {
            let why = match (key, raw) {
                // The maximum speed comes from a vector (Link Capabilities 2): say the register.
                ("max_link_speed", _) if p.link_caps & 0xf > u32::from(pci::MAX_GEN) => {
                    gen_bad(p.link_caps & 0xf)
                }
                ("max_link_speed", _) if p.link_caps & 0xf == 0 => down.to_string(),
                ("max_link_speed", _) => {
                    "no generation the Supported Link Speeds vector and Max Link Speed agree on"
                        .to_string()
                }
                (_, 0) => down.to_string(),
                (_, v) => bad(v),
            };
            u.insert(key.into(), format!("{at}: {why}"));
        }
    }
    Link {
        cur_gen: p.link_cur_gen,
        cur_width: p.link_cur_width,
        max_gen: p.link_max_gen,
        max_width: p.link_max_width,
        pcie_cap: Some(p.offset),
    }
}

/// The names in a class directory (`/sys/class/net`, `/sys/class/infiniband`) and how the
/// listing went: absent (a fact) and unreadable (unknown, with why) are told apart, both noted.
fn list_class(sr: &SysRoot, dir: &str, notes: &mut Vec<Note>) -> (Vec<String>, ClassListing) {
    match sr.list_names(dir) {
        Ok(n) => (n, ClassListing::Listed),
        Err(ReadError::NotFound(_)) => {
            notes.push(Note {
                path: dir.into(),
                reason: if dir == "/sys/class/infiniband" {
                    "not present: no RDMA devices (ib_core not loaded or no RDMA hardware)"
                } else {
                    "not present"
                }
                .into(),
            });
            (Vec::new(), ClassListing::Absent)
        }
        Err(e) => {
            notes.push(Note {
                path: dir.into(),
                reason: format!("{e}: its devices are unknown"),
            });
            (
                Vec::new(),
                ClassListing::Unreadable {
                    reason: e.to_string(),
                },
            )
        }
    }
}

fn read_netdev(sr: &SysRoot, name: &str) -> NetDev {
    let name = name.to_string();
    let dir = format!("/sys/class/net/{name}");
    let mut u = Unread::new();
    let bdf = match bdf_of_device_link(sr, &format!("{dir}/device")) {
        Ok(b) => b,
        Err(ReadError::NotFound(_)) => None, // virtual interface (lo, bridges, veth)
        Err(e) => {
            note_err(&mut u, "device", &e);
            None
        }
    };
    let mtu = parsed(sr, &mut u, "mtu", &format!("{dir}/mtu"), |s| s.parse().ok());
    let operstate = text(sr, &mut u, "operstate", &format!("{dir}/operstate"));
    let if_type = parsed(sr, &mut u, "type", &format!("{dir}/type"), |s| {
        s.parse().ok()
    });
    NetDev {
        name,
        bdf,
        mtu,
        operstate,
        if_type,
        unread: u,
    }
}

/// One RDMA device by name (None when /sys/class/infiniband/NAME does not exist): what a verbs
/// probe needs, without reading every device's GID table or its error counters.
pub fn read_rdma_device(sr: &SysRoot, name: &str) -> Option<RdmaDevice> {
    if !sr.exists(&format!("/sys/class/infiniband/{name}")) {
        return None;
    }
    Some(read_one_rdma(sr, name.to_string(), Scope::Topology))
}

fn read_one_rdma(sr: &SysRoot, name: String, scope: Scope) -> RdmaDevice {
    let dir = format!("/sys/class/infiniband/{name}");
    let mut u = Unread::new();
    let backing = read_backing(sr, &dir, &mut u);
    let node_type = text(sr, &mut u, "node_type", &format!("{dir}/node_type"));
    let hca_type = text(sr, &mut u, "hca_type", &format!("{dir}/hca_type"));
    let fw_ver = text(sr, &mut u, "fw_ver", &format!("{dir}/fw_ver"));
    let node_guid = text(sr, &mut u, "node_guid", &format!("{dir}/node_guid"));
    let board_id = text(sr, &mut u, "board_id", &format!("{dir}/board_id"));
    let mut ports = Vec::new();
    match sr.list_names(&format!("{dir}/ports")) {
        Ok(pnames) => {
            for p in pnames {
                let Ok(num) = p.parse::<u32>() else { continue };
                ports.push(read_port(sr, &format!("{dir}/ports/{p}"), num, scope));
            }
        }
        Err(e) => note_err(&mut u, "ports", &e),
    }
    ports.sort_by_key(|p| p.port);
    RdmaDevice {
        name,
        backing,
        node_type,
        hca_type,
        fw_ver,
        node_guid,
        board_id,
        ports,
        unread: u,
    }
}

/// What the RDMA device at `dir` sits on. The `device` link must be a link (a file in its place
/// is damage, not a device) that resolves to a PCI function; only its positive absence, with a
/// readable `parent` beside it, makes the device software RDMA. Every other outcome is
/// `Unresolved`, its reason also recorded in `unread["device"]`.
fn read_backing(sr: &SysRoot, dir: &str, u: &mut Unread) -> RdmaBacking {
    let link = format!("{dir}/device");
    let unresolved = |u: &mut Unread, reason: String| {
        u.insert("device".into(), reason.clone());
        RdmaBacking::Unresolved { reason }
    };
    match sr.read_link(&link) {
        Ok(target) => match bdf_of_device_link(sr, &link) {
            Ok(Some(bdf)) => RdmaBacking::Pci { bdf },
            Ok(None) => unresolved(u, format!("{link} -> {target}: leads to no PCI function")),
            Err(e) => unresolved(u, format!("{e} (the link reads {target})")),
        },
        Err(ReadError::NotFound(_)) => match sr.read_text(&format!("{dir}/parent")) {
            Ok(p) if !p.is_empty() => RdmaBacking::Software { parent_netdev: p },
            Ok(_) => unresolved(u, format!("{link}: not present, and {dir}/parent is empty")),
            Err(ReadError::NotFound(_)) => unresolved(
                u,
                format!(
                    "{link}: not present, and no {dir}/parent either (a software device names its netdev there)"
                ),
            ),
            Err(e) => unresolved(u, format!("{link}: not present, and {e}")),
        },
        Err(e) => unresolved(u, e.to_string()),
    }
}

/// Most entries a port's GID table may list (each is a read, and two more for its attributes).
/// Real tables are the device's `gid_tbl_len`: 128 on an InfiniBand port, 255 for RoCE on
/// ConnectX; a larger listing is refused naming the directory (the port's GIDs unknown).
pub const MAX_GID_ENTRIES: usize = 4096;

/// The port counters (`counters/`) the checks judge or show (`rdma.port-errors`,
/// `rdma.link-flaps`): only these are read, and only for the checks. A port has dozens; a host
/// with SR-IOV functions thousands of ports.
pub const PORT_COUNTERS: [&str; 7] = [
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "port_rcv_errors",
    "port_xmit_discards",
    "symbol_error",
];

/// The driver counters (`hw_counters/`) the checks judge or show.
pub const PORT_HW_COUNTERS: [&str; 4] = [
    "local_ack_timeout_err",
    "out_of_buffer",
    "packet_seq_err",
    "rnr_nak_retry_err",
];

fn read_port(sr: &SysRoot, dir: &str, port: u32, scope: Scope) -> RdmaPort {
    let mut u = Unread::new();
    let state = text(sr, &mut u, "state", &format!("{dir}/state"));
    let phys_state = text(sr, &mut u, "phys_state", &format!("{dir}/phys_state"));
    // The kernel always writes a rate ("400 Gb/sec (4X NDR)"); an empty file is damage.
    let rate = parsed(sr, &mut u, "rate", &format!("{dir}/rate"), |s| {
        (!s.trim().is_empty()).then(|| s.to_string())
    });
    let link_layer = text(sr, &mut u, "link_layer", &format!("{dir}/link_layer"));
    let lid = text(sr, &mut u, "lid", &format!("{dir}/lid"));
    let mut gids = Vec::new();
    // GIDs matter for RoCE (GID type and netdev pick the address family); an InfiniBand port's
    // GIDs are its GUID-derived addresses and nothing checks them, so skip the 100s of reads.
    let link_layer_kind = link_layer.as_deref().map(LinkLayer::parse);
    let listing = if link_layer_kind == Some(LinkLayer::InfiniBand) {
        Ok(Vec::new())
    } else {
        sr.list_names_max(&format!("{dir}/gids"), MAX_GID_ENTRIES)
    };
    match listing {
        Ok(names) => {
            let mut idx: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
            idx.sort_unstable();
            for i in idx {
                let Ok(g) = sr.read_text(&format!("{dir}/gids/{i}")) else {
                    continue; // unpopulated GID entries fail to read on real kernels (EINVAL)
                };
                if g.chars().all(|c| c == '0' || c == ':') {
                    continue;
                }
                // Absent on kernels without gid_attrs (None); any other failure is noted, so
                // an unreadable type is never mistaken for a kernel that has none.
                let mut attr =
                    |what: &str| match sr.read_text(&format!("{dir}/gid_attrs/{what}/{i}")) {
                        Ok(v) => Some(v),
                        Err(ReadError::NotFound(_)) => None,
                        Err(e) => {
                            note_err(&mut u, &format!("gid_attrs.{what}.{i}"), &e);
                            None
                        }
                    };
                let gid_type = attr("types");
                let ndev = attr("ndevs");
                gids.push(Gid {
                    index: i,
                    gid: g,
                    gid_type_kind: gid_type.as_deref().map(GidType::parse),
                    gid_type,
                    ndev,
                });
            }
        }
        Err(e) => note_err(&mut u, "gids", &e),
    }
    // The topology and the verbs probes judge no counter.
    let (counters, hw_counters) = if scope == Scope::Checks {
        (
            read_counters(sr, &mut u, dir, "counters", &PORT_COUNTERS),
            read_counters(sr, &mut u, dir, "hw_counters", &PORT_HW_COUNTERS),
        )
    } else {
        (None, None)
    };
    RdmaPort {
        port,
        counters,
        hw_counters,
        state_kind: state.as_deref().map(PortState::parse),
        phys_state_kind: phys_state.as_deref().map(PhysState::parse),
        link_layer_kind,
        rate_gbps: rate.as_deref().and_then(facts::rate_gbps),
        state,
        phys_state,
        rate,
        link_layer,
        lid,
        gids,
        unread: u,
    }
}

/// The `wanted` counter files of `dir/which` (`counters`, `hw_counters`) that its listing
/// shows: decimal u64 values. Files that do not read or parse are left out with their reason
/// (some mlx5 firmware refuses a counter it does not implement: EINVAL); one the listing does
/// not show is missing, as before.
fn read_counters(
    sr: &SysRoot,
    u: &mut Unread,
    dir: &str,
    which: &str,
    wanted: &[&str],
) -> Option<BTreeMap<String, u64>> {
    let cdir = format!("{dir}/{which}");
    let names = match sr.list_names(&cdir) {
        Ok(n) => n,
        Err(e) => {
            note_err(u, which, &e);
            return None;
        }
    };
    let mut out = BTreeMap::new();
    for n in names.into_iter().filter(|n| wanted.contains(&n.as_str())) {
        if let Some(v) = parsed(
            sr,
            u,
            &format!("{which}.{n}"),
            &format!("{cdir}/{n}"),
            |s| s.parse().ok(),
        ) {
            out.insert(n, v);
        }
    }
    Some(out)
}

fn read_numa(sr: &SysRoot, notes: &mut Vec<Note>) -> Vec<NumaNode> {
    let names = match sr.list_names("/sys/devices/system/node") {
        Ok(n) => n,
        Err(e) => {
            notes.push(Note {
                path: "/sys/devices/system/node".into(),
                reason: format!("{e}: NUMA layout unknown"),
            });
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for name in names {
        // The node directory also holds `possible`, `online`, `has_cpu`...: only nodeN are nodes.
        let Some(id) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = format!("/sys/devices/system/node/{name}");
        let mut u = Unread::new();
        let cpulist = parsed(sr, &mut u, "cpulist", &format!("{dir}/cpulist"), |s| {
            numa::parse_cpulist(s).map(|_| s.to_string())
        });
        let distances = parsed(
            sr,
            &mut u,
            "distance",
            &format!("{dir}/distance"),
            numa::parse_distances,
        );
        out.push(NumaNode {
            id,
            cpulist,
            distances,
            unread: u,
        });
    }
    out.sort_by_key(|n| n.id);
    out
}

/// Host-wide kernel facts the checks need (driver, modules, IOMMU, kernel version).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Host {
    /// First line of /proc/driver/nvidia/version.
    pub nvidia_version_line: Option<String>,
    /// /proc/driver/nvidia/version is not there (the driver creates it when it loads), as
    /// opposed to there and unreadable (`unread["nvidia_version"]` says why).
    pub nvidia_version_absent: bool,
    /// /proc/driver/nvidia/params: the module parameters the driver runs with (`Name: value`
    /// lines; RegistryDwords holds NVreg_RegistryDwords, e.g. PeerMappingOverride).
    pub nvidia_params: Option<String>,
    /// /proc/modules names (None when unreadable).
    pub modules: Option<Vec<String>>,
    /// Directory names under /sys/module (built-in modules show here but not in /proc/modules).
    pub sys_modules: Option<Vec<String>>,
    /// Contents of the memory_peers version files nvidia-peermem registers (NCCL looks here).
    pub memory_peers: BTreeMap<String, String>,
    pub cmdline: Option<String>,
    /// /proc/version.
    pub kernel_version: Option<String>,
    /// The groups under /sys/kernel/iommu_groups (None: the directory could not be listed;
    /// absent: none, no IOMMU driver registered any).
    pub iommu_groups: Option<Vec<u32>>,
    /// The domain type (`DMA`, `DMA-FQ`, `identity`, `blocked`) of each group a judged device
    /// (GPU, function behind an RDMA device) is in; other groups are not read.
    pub iommu_group_types: BTreeMap<u32, String>,
    /// Judged device -> its IOMMU group from its `iommu_group` link (None: no link, in no
    /// group). A device missing here was not read (why: `unread["iommu_group_of.<bdf>"]`).
    pub iommu_group_of: BTreeMap<Bdf, Option<u32>>,
    /// /proc/driver/nvidia/gpus entries (one per GPU the driver owns).
    pub driver_gpus: Option<Vec<Bdf>>,
    /// /dev/nvidiaN nodes.
    pub dev_nodes: Option<Vec<u32>>,
    /// Seconds since boot (/proc/uptime): the interval cumulative counters span at most.
    pub uptime_s: Option<f64>,
    /// PIDs of running `nv-fabricmanager` processes (/proc/PID/comm), read only where NVML
    /// shows an NVLink ending at an NVSwitch; None: not read there, or /proc not listable (why:
    /// `unread["fabric_manager"]`).
    pub fabric_manager_pids: Option<Vec<u32>>,
    /// Processes named like the fabric manager that are not it (not root, or not its
    /// installed binary): "pid N: why"; they do not count as the daemon.
    pub fabric_manager_lookalikes: Vec<String>,
    pub unread: Unread,
}

/// Per-function extras the checks need beyond topology.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceExtras {
    /// AER counters: file name -> TOTAL_* value.
    pub aer: BTreeMap<String, u64>,
    /// `resource` lines: (start, end, flags).
    pub resources: Option<Vec<(u64, u64, u64)>>,
}

/// The AER counter files of a function (drivers/pci/pcie/aer.c).
pub const AER_FILES: [&str; 3] = ["aer_dev_correctable", "aer_dev_fatal", "aer_dev_nonfatal"];

/// The TOTAL_ERR_* count of an AER counter file (kernel >= 4.19 format: `NAME count` lines,
/// the last `TOTAL_ERR_COR`/`TOTAL_ERR_FATAL`/`TOTAL_ERR_NONFATAL`). Every line must be a name
/// and a count and there must be exactly one total: a file with any other line is garbled, and
/// none of its counts is believed (why: the error).
pub fn parse_aer_total(s: &str) -> Result<u64, String> {
    let mut total = None;
    for l in s.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = l.split_whitespace();
        let (Some(name), Some(count), None) = (it.next(), it.next(), it.next()) else {
            return Err(format!("line '{}' is not `NAME count`", shown(l)));
        };
        let Ok(n) = count.parse::<u64>() else {
            return Err(format!(
                "line '{}': '{}' is not a count",
                shown(l),
                shown(count)
            ));
        };
        if name.starts_with("TOTAL_ERR") {
            if total.is_some() {
                return Err("more than one TOTAL_ERR line".into());
            }
            total = Some(n);
        }
    }
    total.ok_or_else(|| "no TOTAL_ERR line".to_string())
}

/// At most 40 characters of something read, for a message.
fn shown(s: &str) -> String {
    s.chars().take(40).collect()
}

/// A `resource` file: one `0xstart 0xend 0xflags` line per BAR/ROM/bridge window.
pub fn parse_resources(s: &str) -> Option<Vec<(u64, u64, u64)>> {
    s.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut it = l.split_whitespace().map(|x| {
                u64::from_str_radix(x.trim_start_matches("0x").trim_start_matches("0X"), 16).ok()
            });
            Some((it.next()??, it.next()??, it.next()??))
        })
        .collect()
}

/// AER counters, and for a GPU (`gpu`) its `resource` lines (the BAR1 fallback).
pub fn read_extras(sr: &SysRoot, f: &PciFunction, gpu: bool) -> (DeviceExtras, Unread) {
    let mut u = Unread::new();
    let mut x = DeviceExtras::default();
    for name in AER_FILES {
        let path = format!("{}/{name}", f.sysfs_path);
        match sr.read_text(&path) {
            Ok(s) => match parse_aer_total(&s) {
                Ok(v) => {
                    x.aer.insert(name.to_string(), v);
                }
                Err(why) => {
                    u.insert(name.into(), format!("{path}: {why}"));
                }
            },
            Err(e) => note_err(&mut u, name, &e),
        }
    }
    if gpu {
        x.resources = parsed(
            sr,
            &mut u,
            "resource",
            &format!("{}/resource", f.sysfs_path),
            parse_resources,
        );
    }
    (x, u)
}

/// What an IOMMU group's `type` says (drivers/iommu/iommu.c, iommu_group_show_type); its
/// "unknown" (no default domain) is the kernel not knowing, so it is not among them.
const IOMMU_DOMAIN_TYPES: [&str; 5] = ["blocked", "identity", "unmanaged", "DMA", "DMA-FQ"];

/// The IOMMU group of each of `judged` (from its `iommu_group` link: one readlink, where
/// listing every group's members costs a directory per group) and the type of those groups.
pub fn read_iommu(sr: &SysRoot, judged: &[&PciFunction], h: &mut Host) {
    let links = crate::workers::map_if(!sr.is_in_memory(), judged, |f| {
        (
            f.bdf,
            sr.link_name(&format!("{}/iommu_group", f.sysfs_path)),
        )
    });
    for (b, r) in links {
        match r {
            Ok(name) => match name.parse::<u32>() {
                Ok(g) => {
                    h.iommu_group_of.insert(b, Some(g));
                }
                Err(_) => {
                    h.unread.insert(
                        format!("iommu_group_of.{b}"),
                        format!("iommu_group link names '{name}', not a group number"),
                    );
                }
            },
            // No link: the device is in no IOMMU group.
            Err(ReadError::NotFound(_)) => {
                h.iommu_group_of.insert(b, None);
            }
            Err(e) => note_err(&mut h.unread, &format!("iommu_group_of.{b}"), &e),
        }
    }
    let groups: std::collections::BTreeSet<u32> =
        h.iommu_group_of.values().flatten().copied().collect();
    for g in groups {
        let path = format!("/sys/kernel/iommu_groups/{g}/type");
        match sr.read_text(&path) {
            Ok(t) if IOMMU_DOMAIN_TYPES.contains(&t.trim()) => {
                h.iommu_group_types.insert(g, t);
            }
            Ok(t) => {
                let shown: String = t.chars().take(40).collect();
                h.unread.insert(
                    format!("iommu_group.{g}.type"),
                    format!(
                        "{path}: '{shown}' is not a domain type the kernel writes ({})",
                        IOMMU_DOMAIN_TYPES.join(", ")
                    ),
                );
            }
            Err(e) => note_err(&mut h.unread, &format!("iommu_group.{g}.type"), &e),
        }
    }
}

/// nv-fabricmanager's /proc/PID/comm: the kernel truncates comm to 15 characters.
pub const FABRIC_MANAGER_COMM: &str = "nv-fabricmanage";

/// Where NVIDIA's packages install the fabric manager daemon (the CUDA repository's
/// nvidia-fabricmanager-NNN installs /usr/bin/nv-fabricmanager; /usr/sbin and /usr/local are
/// where a distribution or a local build put it).
pub const FABRIC_MANAGER_BINARIES: &[&str] = &[
    "/usr/bin/nv-fabricmanager",
    "/usr/sbin/nv-fabricmanager",
    "/bin/nv-fabricmanager",
    "/sbin/nv-fabricmanager",
    "/usr/local/bin/nv-fabricmanager",
    "/usr/local/sbin/nv-fabricmanager",
];

/// What a process named like the fabric manager is.
enum FabricProcess {
    Daemon,
    /// Not the daemon, and why.
    LookAlike(String),
    /// Could not be told, and why.
    Unknown(String),
}

/// Whether process `pid` (named FABRIC_MANAGER_COMM) is the fabric manager daemon: any user
/// can name a process so, but only root runs the installed binary. Its real uid from
/// /proc/PID/status, its program from the /proc/PID/exe link (readable by root only), else
/// the first word of /proc/PID/cmdline (world-readable; a root process's own word).
fn fabric_process(sr: &SysRoot, pid: u32) -> FabricProcess {
    let status = match sr.read_text(&format!("/proc/{pid}/status")) {
        Ok(s) => s,
        Err(e) => return FabricProcess::Unknown(e.to_string()),
    };
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|u| u.split_whitespace().next())
        .and_then(|u| u.parse::<u32>().ok());
    match uid {
        None => {
            return FabricProcess::Unknown(format!("/proc/{pid}/status: no readable Uid line"));
        }
        Some(0) => {}
        Some(u) => return FabricProcess::LookAlike(format!("runs as uid {u}, not root")),
    }
    let program = match sr.read_link(&format!("/proc/{pid}/exe")) {
        // The daemon keeps running after a package upgrade replaced its file.
        Ok(t) => t.trim_end_matches(" (deleted)").to_string(),
        Err(exe) => match sr.read_bytes(&format!("/proc/{pid}/cmdline")) {
            Ok(b) => {
                let first = b.split(|c| *c == 0).next().unwrap_or_default();
                match std::str::from_utf8(first) {
                    Ok(s) if !s.is_empty() => s.to_string(),
                    _ => {
                        return FabricProcess::Unknown(format!(
                            "{exe}; /proc/{pid}/cmdline names no program"
                        ));
                    }
                }
            }
            Err(cmd) => return FabricProcess::Unknown(format!("{exe}; {cmd}")),
        },
    };
    if FABRIC_MANAGER_BINARIES.contains(&program.as_str()) {
        FabricProcess::Daemon
    } else {
        FabricProcess::LookAlike(format!(
            "runs {program:?}, not the installed nv-fabricmanager"
        ))
    }
}

/// The running nv-fabricmanager daemons: processes whose /proc/PID/comm is
/// FABRIC_MANAGER_COMM, run by root from the installed binary. A process that exits between
/// the listing and the read is simply gone. Where no daemon is found but a process so named
/// could not be told, whether the daemon runs is unknown (`unread["fabric_manager"]`).
pub fn read_fabric_manager(sr: &SysRoot, h: &mut Host) {
    match sr.list_names("/proc") {
        Ok(names) => {
            let mut pids = Vec::new();
            let mut unknown = Vec::new();
            for pid in names.iter().filter_map(|n| n.parse::<u32>().ok()) {
                if let Ok(c) = sr.read_text(&format!("/proc/{pid}/comm"))
                    && c == FABRIC_MANAGER_COMM
                {
                    match fabric_process(sr, pid) {
                        FabricProcess::Daemon => pids.push(pid),
                        FabricProcess::LookAlike(why) => h
                            .fabric_manager_lookalikes
                            .push(format!("pid {pid}: {why}")),
                        FabricProcess::Unknown(why) => unknown.push(format!("pid {pid}: {why}")),
                    }
                }
            }
            pids.sort_unstable();
            if pids.is_empty() && !unknown.is_empty() {
                h.unread.insert(
                    "fabric_manager".into(),
                    format!(
                        "a process is named {FABRIC_MANAGER_COMM}, but whether it is the daemon (root, {}) could not be read: {}",
                        FABRIC_MANAGER_BINARIES[0],
                        unknown.join("; ")
                    ),
                );
            } else {
                h.fabric_manager_pids = Some(pids);
            }
        }
        Err(e) => note_err(&mut h.unread, "fabric_manager", &e),
    }
}

pub fn read_host(sr: &SysRoot) -> Host {
    let mut u = Unread::new();
    let (nvidia_version_line, nvidia_version_absent) =
        match sr.read_text("/proc/driver/nvidia/version") {
            Ok(s) => (
                Some(s.lines().next().unwrap_or("").trim().to_string()),
                false,
            ),
            Err(e) => {
                note_err(&mut u, "nvidia_version", &e);
                (None, matches!(e, ReadError::NotFound(_)))
            }
        };
    let mut h = Host {
        nvidia_version_line,
        nvidia_version_absent,
        nvidia_params: text(sr, &mut u, "nvidia_params", "/proc/driver/nvidia/params"),
        modules: text(sr, &mut u, "modules", "/proc/modules").map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        }),
        sys_modules: match sr.list_names("/sys/module") {
            Ok(v) => Some(v),
            Err(e) => {
                note_err(&mut u, "sys_modules", &e);
                None
            }
        },
        cmdline: text(sr, &mut u, "cmdline", "/proc/cmdline"),
        kernel_version: text(sr, &mut u, "kernel_version", "/proc/version"),
        uptime_s: parsed(sr, &mut u, "uptime", "/proc/uptime", |s| {
            s.split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
        }),
        ..Default::default()
    };
    for p in [
        "/sys/kernel/mm/memory_peers/nv_mem/version",
        "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    ] {
        match sr.read_text(p) {
            Ok(v) => {
                h.memory_peers.insert(p.to_string(), v);
            }
            // Absent means nothing registered there (nvidia-peermem not loaded).
            Err(ReadError::NotFound(_)) => {}
            Err(e) => note_err(&mut u, &format!("memory_peers {p}"), &e),
        }
    }
    // The groups' names only: members and types are read for the judged devices
    // (`read_iommu`), not for every group on the host.
    match sr.list_names("/sys/kernel/iommu_groups") {
        // The kernel names groups by number only; anything else is not a group.
        Ok(groups) => h.iommu_groups = Some(groups.iter().filter_map(|g| g.parse().ok()).collect()),
        // No directory: no IOMMU driver registered any group (IOMMU off or absent).
        Err(ReadError::NotFound(_)) => h.iommu_groups = Some(Vec::new()),
        Err(e) => note_err(&mut u, "iommu_groups", &e),
    }
    h.driver_gpus = match sr.list_names("/proc/driver/nvidia/gpus") {
        Ok(v) => {
            let mut bdfs = Vec::new();
            for n in &v {
                match n.parse() {
                    Ok(b) => bdfs.push(b),
                    // Kept out of the count, but said: the driver listed something unexpected.
                    Err(_) => {
                        u.insert(
                            "driver_gpus".into(),
                            format!("/proc/driver/nvidia/gpus/{n} is not a PCI address"),
                        );
                    }
                }
            }
            Some(bdfs)
        }
        Err(e) => {
            note_err(&mut u, "driver_gpus", &e);
            None
        }
    };
    h.dev_nodes = match sr.list_names("/dev") {
        Ok(v) => Some(
            v.iter()
                .filter_map(|n| n.strip_prefix("nvidia")?.parse().ok())
                .collect(),
        ),
        Err(e) => {
            note_err(&mut u, "dev_nodes", &e);
            None
        }
    };
    h.unread = u;
    h
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

/// The MAC address of each RDMA GID's netdev in `inv` (read through the sysfs reader), for
/// `rdma::request::gdr::Machine::netdev_macs`: gathered by the caller before any probe runs. A netdev whose
/// address cannot be read or parsed is left out (its GIDs then have no next hop).
pub fn netdev_macs(sr: &SysRoot, inv: &Inventory) -> std::collections::BTreeMap<String, [u8; 6]> {
    inv.rdma
        .iter()
        .flat_map(|d| d.ports.iter())
        .flat_map(|p| p.gids.iter())
        .filter_map(|g| g.ndev.as_deref())
        .filter_map(|ndev| {
            let text = sr
                .read_text(&format!("/sys/class/net/{ndev}/address"))
                .ok()?;
            Some((ndev.to_string(), parse_mac(&text)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_aer_total;

    /// Every line a name and a count, exactly one total (a garbled line passed).
    #[test]
    fn aer_counter_files() {
        assert_eq!(
            parse_aer_total("RxErr 0\nBadTLP 3\nTOTAL_ERR_COR 3\n"),
            Ok(3)
        );
        for garbled in [
            "TOTAL_ERR_FATAL 7 garbage\n",
            "Undefined x\nTOTAL_ERR_FATAL 0\n",
            "TOTAL_ERR_FATAL 0\nTOTAL_ERR_FATAL 0\n",
            "RxErr 0\n",
            "",
            "\u{fffd} garbage\n",
        ] {
            assert!(parse_aer_total(garbled).is_err(), "{garbled:?}");
        }
    }
}
