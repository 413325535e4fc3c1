//! Raw facts, read through the one `SysRoot`: PCI functions, RDMA devices, netdevs, NUMA nodes,
//! plus the NVML snapshot and notes on everything that could not be read and why.
//!
//! This module must not interpret topology (that is `topo`) and must not judge health (that is
//! `checks`). Every fact is a `Reading`: its value, absent (read, and not there) or unknown, the
//! reason carried with the fact; nothing gets a default.

use crate::facts::{self, GidType, LinkLayer, PhysState, PortState};
use crate::numa;
use crate::nvml::NvmlSnapshot;
use crate::pci::config::{ConfigSpace, PcieCap};
use crate::pci::{self, Bdf};
use crate::reading::Reading;
use crate::sysroot::{ReadError, SysRoot, join};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Serialize)]
pub struct PciFunction {
    pub bdf: Bdf,
    /// Canonical kernel path, e.g. /sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0
    pub sysfs_path: String,
    /// Root complex directory name, e.g. `pci0000:00`.
    pub root_complex: String,
    /// Upstream PCI functions (bridges), nearest the root complex first.
    pub upstream: Vec<Bdf>,
    pub class: Reading<u32>,
    pub vendor: Reading<u16>,
    pub device: Reading<u16>,
    /// Absent: no driver bound.
    pub driver: Reading<String>,
    /// Absent: the kernel reports -1 (no NUMA affinity known). A node the host does not list
    /// is unknown (`check_numa_nodes`).
    pub numa_node: Reading<u32>,
    pub local_cpulist: Reading<String>,
    pub link: Link,
    pub config: Reading<ConfigSpace>,
    /// SR-IOV: the physical function this virtual function belongs to (its `physfn` link).
    /// A VF has no PCIe link of its own; its PF's link carries its traffic. Absent: no VF (no
    /// `physfn` link, or config space shows the function's own IDs and it was not looked for).
    pub physfn: Reading<Bdf>,
}

impl PciFunction {
    /// What `nic::family` judges a function by.
    pub fn ids(&self) -> crate::nic::FunctionIds<'_> {
        crate::nic::FunctionIds {
            class: self.class.value().copied(),
            vendor: self.vendor.value().copied(),
            device: self.device.value().copied(),
            driver: self.driver.value().map(String::as_str),
            virtual_function: self.physfn.is_value(),
        }
    }

    /// Why each fact of the function (and of its `extras`, where read) has no value, keyed by
    /// the fact's sysfs name: what a report shows as the device's unknowns. A function that is
    /// no virtual function (`physfn` absent) is not unknown.
    pub fn unknowns(&self, extras: Option<&DeviceExtras>) -> BTreeMap<String, String> {
        let l = &self.link;
        let facts: [(&str, Option<&str>); 12] = [
            ("class", self.class.why()),
            ("vendor", self.vendor.why()),
            ("device", self.device.why()),
            ("driver", self.driver.why()),
            ("numa_node", self.numa_node.why()),
            ("local_cpulist", self.local_cpulist.why()),
            ("config", self.config.why()),
            ("current_link_speed", l.cur_gen.why()),
            ("current_link_width", l.cur_width.why()),
            ("max_link_speed", l.max_gen.why()),
            ("max_link_width", l.max_width.why()),
            (
                "physfn",
                match &self.physfn {
                    Reading::Unknown(w) => Some(w),
                    _ => None,
                },
            ),
        ];
        let mut out: BTreeMap<String, String> = facts
            .into_iter()
            .filter_map(|(k, why)| Some((k.to_string(), why?.to_string())))
            .collect();
        if let Some(x) = extras {
            for (name, r) in &x.aer {
                if let Some(why) = r.why() {
                    out.insert(name.to_string(), why.to_string());
                }
            }
            if let Some(why) = x.resources.as_ref().and_then(Reading::why) {
                out.insert("resource".into(), why.to_string());
            }
        }
        out
    }
}

#[cfg(test)]
impl Link {
    /// A link none of whose attributes was read: for hand-built tests.
    pub(crate) fn not_read() -> Link {
        Link {
            cur_gen: Reading::unknown("not read"),
            cur_width: Reading::unknown("not read"),
            max_gen: Reading::unknown("not read"),
            max_width: Reading::unknown("not read"),
            pcie_cap: None,
        }
    }
}

/// The four link attributes, each a reading: from config space's PCI Express capability or
/// from the kernel's attribute files (`pcie_cap` says which).
#[derive(Debug, Clone, Serialize)]
pub struct Link {
    /// `current_link_speed` as a PCIe generation.
    pub cur_gen: Reading<u8>,
    /// `current_link_width`.
    pub cur_width: Reading<u8>,
    /// `max_link_speed` as a PCIe generation.
    pub max_gen: Reading<u8>,
    /// `max_link_width`.
    pub max_width: Reading<u8>,
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
    pub node_type: Reading<String>,
    pub hca_type: Reading<String>,
    pub fw_ver: Reading<String>,
    pub node_guid: Reading<String>,
    pub board_id: Reading<String>,
    /// Its `ports/` directory, listed (unknown: it could not be).
    pub ports: Reading<Vec<RdmaPort>>,
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
    /// Its ports; none where `ports/` could not be listed (why: `ports`).
    pub fn port_list(&self) -> &[RdmaPort] {
        self.ports.value().map_or(&[], Vec::as_slice)
    }

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
    /// The raw texts, as evidence; the `_kind` fields beside them are parsed once, here, from
    /// a value (None where the raw reading has none: its reason is there).
    pub state: Reading<String>,
    pub phys_state: Reading<String>,
    pub rate: Reading<String>,
    pub link_layer: Reading<String>,
    pub state_kind: Option<PortState>,
    pub phys_state_kind: Option<PhysState>,
    pub link_layer_kind: Option<LinkLayer>,
    pub rate_gbps: Option<f64>,
    pub lid: Reading<String>,
    /// The populated GID entries (an InfiniBand port's are not read: none); unknown where the
    /// `gids/` directory could not be listed.
    pub gids: Reading<Vec<Gid>>,
    /// `counters/*` (the IB PMA port counters: symbol_error, link_downed...), by file name:
    /// the judged ones the directory lists, each read or unknown with why; unknown when the
    /// directory could not be listed. None: not looked for (the topology and the verbs probes
    /// judge no counter).
    pub counters: Option<Reading<Counters>>,
    /// `hw_counters/*` (driver counters: mlx5's out_of_buffer, rnr_nak_retry_err...), likewise.
    pub hw_counters: Option<Reading<Counters>>,
}

/// Counter files by name, each read or unknown with why (some mlx5 firmware refuses a counter
/// it does not implement: EINVAL). A name the directory does not list is not here.
pub type Counters = BTreeMap<String, Reading<u64>>;

impl RdmaPort {
    /// Its populated GIDs; none where the table could not be listed (why: `gids`).
    pub fn gid_list(&self) -> &[Gid] {
        self.gids.value().map_or(&[], Vec::as_slice)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Gid {
    pub index: u32,
    pub gid: String,
    /// "IB/RoCE v1" or "RoCE v2"; absent where the kernel has no gid_attrs.
    pub gid_type: Reading<String>,
    pub gid_type_kind: Option<GidType>,
    /// The netdev of a RoCE GID; absent where the kernel has no gid_attrs or names none.
    pub ndev: Reading<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NetDev {
    pub name: String,
    /// The PCI function its `device` link leads to; absent for a virtual interface (lo,
    /// bridges, veth: no link, or one that leads to no PCI function).
    pub bdf: Reading<Bdf>,
    pub mtu: Reading<u32>,
    pub operstate: Reading<String>,
    pub if_type: Reading<u32>,
}

#[derive(Debug, Clone)]
pub struct NumaNode {
    pub id: u32,
    pub cpulist: Reading<String>,
    pub distances: Reading<Vec<u32>>,
}

/// A report's topology carries the nodes in the shape it always had: `cpulist` and
/// `distances` null where unread, the reasons under `unread` keyed by file name.
impl Serialize for NumaNode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shape<'a> {
            id: u32,
            cpulist: Option<&'a String>,
            distances: Option<&'a Vec<u32>>,
            unread: BTreeMap<&'static str, &'a str>,
        }
        let unread = [
            ("cpulist", self.cpulist.why()),
            ("distance", self.distances.why()),
        ]
        .into_iter()
        .filter_map(|(k, w)| Some((k, w?)))
        .collect();
        Shape {
            id: self.id,
            cpulist: self.cpulist.value(),
            distances: self.distances.value(),
            unread,
        }
        .serialize(s)
    }
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
            host: Host::not_read("discovery did not finish"),
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

/// Read a text attribute: its text, or unknown with why.
fn text(sr: &SysRoot, path: &str) -> Reading<String> {
    Reading::from_result(sr.read_text(path))
}

/// Read and parse; a parse failure is unknown, naming the garbage seen.
fn parsed<T>(sr: &SysRoot, path: &str, f: impl FnOnce(&str) -> Option<T>) -> Reading<T> {
    text(sr, path).and_then(|s| parse_read(path, &s, f))
}

/// `s`, read from `path`, parsed by `f` (what `parsed` does once the read succeeded).
fn parse_read<T>(path: &str, s: &str, f: impl FnOnce(&str) -> Option<T>) -> Reading<T> {
    match f(s) {
        Some(v) => Reading::Value(v),
        None => Reading::Unknown(format!("{path}: unparseable value '{}'", shown(s))),
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
        let mut host = Host::not_read("host facts not read");
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
            // Groups to look up only when there are any (none: IOMMU off, nothing to read).
            let iommu_on = host.iommu_groups.value().is_some_and(|g| !g.is_empty());
            // Each subject: its extras where wanted (Some(is a GPU)), and its IOMMU group
            // where judged (iommu.mode judges every GPU and every function behind an RDMA
            // device), read in one pass so each device's directory is opened once for both.
            let subjects: Vec<(&PciFunction, Option<bool>, bool)> = pci
                .values()
                .filter_map(|f| {
                    let class = f.class.value().map(|c| pci::ClassCode(*c));
                    let gpu = f.vendor.value() == Some(&pci::VENDOR_NVIDIA)
                        && class.is_some_and(|c| c.is_display());
                    // A NIC of an RDMA-capable family is judged with or without its RDMA
                    // device.
                    let extras = class.and_then(|c| {
                        let nic = (rdma_bdfs.contains(&f.bdf)
                            || crate::nic::family(f.ids()).is_some())
                            && (c.is_bridge_pci() || c.is_network());
                        (gpu || nic).then_some(gpu)
                    });
                    let iommu = iommu_on && (gpu || rdma_bdfs.contains(&f.bdf));
                    (extras.is_some() || iommu).then_some((f, extras, iommu))
                })
                .collect();
            let read = crate::workers::map_if(!sr.is_in_memory(), &subjects, |(f, x, iommu)| {
                (
                    f.bdf,
                    x.map(|gpu| read_extras(sr, f, gpu)),
                    iommu.then(|| iommu_group(sr, f)),
                )
            });
            for (bdf, x, group) in read {
                if let Some(x) = x {
                    extras.insert(bdf, x);
                }
                if let Some(g) = group {
                    host.iommu_group_of.insert(bdf, g);
                }
            }
            if iommu_on {
                read_iommu_types(sr, &mut host);
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
        if let Some(&n) = f.numa_node.value().filter(|n| !ids.contains(n)) {
            f.numa_node = Reading::Unknown(format!(
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
            ));
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
    let hex = |s: &str| pci::parse_hex(s);
    let class = parsed(sr, &join(&dir, "class"), hex);
    let config =
        Reading::from_result(sr.read_bytes(&join(&dir, "config"))).map(|b| ConfigSpace::parse(&b));
    // Vendor and device ID: the first four bytes of config space (readable without root)
    // are what the `vendor`/`device` attributes show, so those two files are read only when
    // config space cannot say: unreadable, or 0xffff as a virtual function reads (the kernel
    // takes a VF's IDs from its PF's SR-IOV capability).
    // A config space cut short of its 64-byte header (or garbage in its place) says nothing.
    let config_ids = config
        .value()
        .filter(|c| c.coverage != crate::pci::config::Coverage::Truncated)
        .and_then(|c| c.vendor_id.zip(c.device_id))
        .filter(|(v, _)| *v != 0xffff && *v != 0);
    let (vendor, device) = match config_ids {
        Some((v, d)) => (Reading::Value(v), Reading::Value(d)),
        None => (
            parsed(sr, &join(&dir, "vendor"), hex).map(|v| v as u16),
            parsed(sr, &join(&dir, "device"), hex).map(|v| v as u16),
        ),
    };
    let driver = match sr.read_link(&join(&dir, "driver")) {
        Ok(t) => match pci_driver_name(&t) {
            Some(d) => Reading::Value(d),
            None => Reading::Unknown(format!(
                "{dir}/driver: link to '{}' names no PCI driver (…/bus/pci/drivers/NAME)",
                shown(&t)
            )),
        },
        Err(ReadError::NotFound(_)) => Reading::absent("no driver bound"),
        Err(e) => Reading::Unknown(e.to_string()),
    };
    let numa_node = text(sr, &join(&dir, "numa_node")).and_then(|s| {
        match numa::parse_numa_node(&s) {
            Ok(Some(n)) => Reading::Value(n),
            Ok(None) => Reading::absent(
                "kernel reports -1: no NUMA affinity known (typical in VMs and single-node firmware tables)",
            ),
            Err(m) => Reading::Unknown(format!("{dir}/numa_node: {m}")),
        }
    });
    let local_cpulist = parsed(sr, &join(&dir, "local_cpulist"), |s| {
        numa::is_cpulist(s).then(|| s.to_string())
    });
    let link = match config.value().and_then(|c| c.pcie.as_ref()) {
        Some(p) => link_from_config(p, &dir),
        None => link_from_files(sr, &dir),
    };
    // Only virtual functions have a physfn link: its absence is the normal case. A VF's
    // config space reads 0xffff for its IDs (SR-IOV), so a function whose config space shows
    // real IDs is no VF and the link is not looked for.
    let physfn = match config_ids {
        Some(_) => {
            Reading::absent("config space shows the function's own IDs: no virtual function")
        }
        None => match sr.link_name(&join(&dir, "physfn")) {
            Ok(name) => match name.parse::<Bdf>() {
                Ok(pf) => Reading::Value(pf),
                Err(_) => Reading::Unknown(format!("not a PCI address: {name:?}")),
            },
            Err(ReadError::NotFound(_)) => Reading::absent("no physfn link: no virtual function"),
            Err(e) => Reading::Unknown(e.to_string()),
        },
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
fn link_from_files(sr: &SysRoot, dir: &str) -> Link {
    Link {
        cur_gen: parsed(sr, &join(dir, "current_link_speed"), pci::gen_from_speed),
        cur_width: parsed(sr, &join(dir, "current_link_width"), pci::parse_width),
        max_gen: parsed(sr, &join(dir, "max_link_speed"), pci::gen_from_speed),
        max_width: parsed(sr, &join(dir, "max_link_width"), pci::parse_width),
        pcie_cap: None,
    }
}

/// The link from the PCI Express capability: the registers the kernel reads to write the
/// four link attributes (Link Status for the current speed and width, Link Capabilities and
/// Link Capabilities 2 for the maximum), so the attributes need not be opened. A field the
/// registers leave undefined (speed 0, width 0: link down, or a virtual function) is unknown,
/// with why.
fn link_from_config(p: &PcieCap, dir: &str) -> Link {
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
    let why = |key: &str, at: &str, raw: u32, bad: &dyn Fn(u32) -> String| {
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
        format!("{at}: {why}")
    };
    let reading =
        |v: Option<u8>, key: &str, at: &str, raw: u32, bad: &dyn Fn(u32) -> String| match v {
            Some(v) => Reading::Value(v),
            None => Reading::Unknown(why(key, at, raw, bad)),
        };
    Link {
        cur_gen: reading(
            p.link_cur_gen,
            "current_link_speed",
            &sta,
            sta_speed,
            &gen_bad,
        ),
        cur_width: reading(
            p.link_cur_width,
            "current_link_width",
            &sta,
            sta_width,
            &width_bad,
        ),
        max_gen: reading(p.link_max_gen, "max_link_speed", &cap, 0, &gen_bad),
        max_width: reading(
            p.link_max_width,
            "max_link_width",
            &cap,
            cap_width,
            &width_bad,
        ),
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
    let bdf = match bdf_of_device_link(sr, &join(&dir, "device")) {
        Ok(Some(b)) => Reading::Value(b),
        Ok(None) => Reading::absent(format!("{dir}/device leads to no PCI function")),
        // A virtual interface (lo, bridges, veth).
        Err(ReadError::NotFound(_)) => Reading::absent("virtual interface: no device link"),
        Err(e) => Reading::Unknown(e.to_string()),
    };
    NetDev {
        mtu: parsed(sr, &join(&dir, "mtu"), |s| s.parse().ok()),
        operstate: text(sr, &join(&dir, "operstate")),
        if_type: parsed(sr, &join(&dir, "type"), |s| s.parse().ok()),
        name,
        bdf,
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
    let backing = read_backing(sr, &dir);
    let ports = Reading::from_result(sr.list_names(&join(&dir, "ports"))).map(|pnames| {
        let mut ports: Vec<RdmaPort> = pnames
            .iter()
            .filter_map(|p| {
                let num = p.parse::<u32>().ok()?;
                Some(read_port(sr, &format!("{dir}/ports/{p}"), num, scope))
            })
            .collect();
        ports.sort_by_key(|p| p.port);
        ports
    });
    RdmaDevice {
        backing,
        node_type: text(sr, &join(&dir, "node_type")),
        hca_type: text(sr, &join(&dir, "hca_type")),
        fw_ver: text(sr, &join(&dir, "fw_ver")),
        node_guid: text(sr, &join(&dir, "node_guid")),
        board_id: text(sr, &join(&dir, "board_id")),
        ports,
        name,
    }
}

/// What the RDMA device at `dir` sits on. The `device` link must be a link (a file in its place
/// is damage, not a device) that resolves to a PCI function; only its positive absence, with a
/// readable `parent` beside it, makes the device software RDMA. Every other outcome is
/// `Unresolved`, with its reason.
fn read_backing(sr: &SysRoot, dir: &str) -> RdmaBacking {
    let link = join(dir, "device");
    let unresolved = |reason: String| RdmaBacking::Unresolved { reason };
    match sr.read_link(&link) {
        Ok(target) => match bdf_of_device_link(sr, &link) {
            Ok(Some(bdf)) => RdmaBacking::Pci { bdf },
            Ok(None) => unresolved(format!("{link} -> {target}: leads to no PCI function")),
            Err(e) => unresolved(format!("{e} (the link reads {target})")),
        },
        Err(ReadError::NotFound(_)) => match sr.read_text(&join(dir, "parent")) {
            Ok(p) if !p.is_empty() => RdmaBacking::Software { parent_netdev: p },
            Ok(_) => unresolved(format!("{link}: not present, and {dir}/parent is empty")),
            Err(ReadError::NotFound(_)) => unresolved(format!(
                "{link}: not present, and no {dir}/parent either (a software device names its netdev there)"
            )),
            Err(e) => unresolved(format!("{link}: not present, and {e}")),
        },
        Err(e) => unresolved(e.to_string()),
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
    let state = text(sr, &join(dir, "state"));
    let phys_state = text(sr, &join(dir, "phys_state"));
    // The kernel always writes a rate ("400 Gb/sec (4X NDR)"); an empty file is damage.
    let rate = parsed(sr, &join(dir, "rate"), |s| {
        (!s.trim().is_empty()).then(|| s.to_string())
    });
    let link_layer = text(sr, &join(dir, "link_layer"));
    let lid = text(sr, &join(dir, "lid"));
    // GIDs matter for RoCE (GID type and netdev pick the address family); an InfiniBand port's
    // GIDs are its GUID-derived addresses and nothing checks them, so skip the 100s of reads.
    let link_layer_kind = link_layer.value().map(|l| LinkLayer::parse(l));
    let gids = if link_layer_kind == Some(LinkLayer::InfiniBand) {
        Reading::Value(Vec::new())
    } else {
        Reading::from_result(sr.list_names_max(&join(dir, "gids"), MAX_GID_ENTRIES))
            .map(|names| read_gids(sr, dir, &names))
    };
    // The topology and the verbs probes judge no counter.
    let (counters, hw_counters) = if scope == Scope::Checks {
        (
            Some(read_counters(sr, dir, "counters", &PORT_COUNTERS)),
            Some(read_counters(sr, dir, "hw_counters", &PORT_HW_COUNTERS)),
        )
    } else {
        (None, None)
    };
    RdmaPort {
        port,
        counters,
        hw_counters,
        state_kind: state.value().map(|s| PortState::parse(s)),
        phys_state_kind: phys_state.value().map(|s| PhysState::parse(s)),
        link_layer_kind,
        rate_gbps: rate.value().and_then(|r| facts::rate_gbps(r)),
        state,
        phys_state,
        rate,
        link_layer,
        lid,
        gids,
    }
}

/// The populated entries of a port's GID table (`names`: its `gids/` listing).
fn read_gids(sr: &SysRoot, dir: &str, names: &[String]) -> Vec<Gid> {
    let mut idx: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    idx.sort_unstable();
    let mut gids = Vec::new();
    for i in idx {
        let Ok(g) = sr.read_text(&format!("{dir}/gids/{i}")) else {
            continue; // unpopulated GID entries fail to read on real kernels (EINVAL)
        };
        if g.chars().all(|c| c == '0' || c == ':') {
            continue;
        }
        // Absent on kernels without gid_attrs; any other failure is unknown, so an unreadable
        // type is never mistaken for a kernel that has none.
        let attr = |what: &str| match sr.read_text(&format!("{dir}/gid_attrs/{what}/{i}")) {
            Ok(v) => Reading::Value(v),
            Err(e @ ReadError::NotFound(_)) => Reading::Absent(e.to_string()),
            Err(e) => Reading::Unknown(e.to_string()),
        };
        let gid_type = attr("types");
        gids.push(Gid {
            index: i,
            gid: g,
            gid_type_kind: gid_type.value().map(|t| GidType::parse(t)),
            gid_type,
            ndev: attr("ndevs"),
        });
    }
    gids
}

/// The `wanted` counter files of `dir/which` (`counters`, `hw_counters`) that its listing
/// shows: decimal u64 values. A file that does not read or parse is unknown with its reason
/// (some mlx5 firmware refuses a counter it does not implement: EINVAL); one the listing does
/// not show is missing, as before.
fn read_counters(sr: &SysRoot, dir: &str, which: &str, wanted: &[&str]) -> Reading<Counters> {
    let cdir = join(dir, which);
    // Where every wanted counter reads, its listing would show each of them: they are read by
    // name, without one (a device directory's listing costs the kernel more than the reads'
    // own checks of the files). Any other outcome is taken as the listing gives it.
    let mut all = Counters::new();
    for name in wanted {
        let path = join(&cdir, name);
        let Ok(s) = sr.read_text(&path) else {
            return read_listed_counters(sr, &cdir, wanted);
        };
        all.insert(
            (*name).to_string(),
            parse_read(&path, &s, |s| s.parse().ok()),
        );
    }
    Reading::Value(all)
}

/// `read_counters` by the listing of `cdir`: the wanted counters it shows.
fn read_listed_counters(sr: &SysRoot, cdir: &str, wanted: &[&str]) -> Reading<Counters> {
    Reading::from_result(sr.list_names(cdir)).map(|names| {
        names
            .into_iter()
            .filter(|n| wanted.contains(&n.as_str()))
            .map(|n| {
                let v = parsed(sr, &join(cdir, &n), |s| s.parse().ok());
                (n, v)
            })
            .collect()
    })
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
        let cpulist = parsed(sr, &join(&dir, "cpulist"), |s| {
            numa::is_cpulist(s).then(|| s.to_string())
        });
        let distances = parsed(sr, &join(&dir, "distance"), numa::parse_distances);
        out.push(NumaNode {
            id,
            cpulist,
            distances,
        });
    }
    out.sort_by_key(|n| n.id);
    out
}

/// Host-wide kernel facts the checks need (driver, modules, IOMMU, kernel version).
#[derive(Debug, Clone, Serialize)]
pub struct Host {
    /// First line of /proc/driver/nvidia/version; absent where the file is not there (the
    /// driver creates it when it loads), unknown where it is there and unreadable.
    pub nvidia_version_line: Reading<String>,
    /// /proc/driver/nvidia/params: the module parameters the driver runs with (`Name: value`
    /// lines; RegistryDwords holds NVreg_RegistryDwords, e.g. PeerMappingOverride).
    pub nvidia_params: Reading<String>,
    /// /proc/modules names.
    pub modules: Reading<Vec<String>>,
    /// Directory names under /sys/module (built-in modules show here but not in /proc/modules).
    pub sys_modules: Reading<Vec<String>>,
    /// The memory_peers version files nvidia-peermem registers (NCCL looks here), by path: a
    /// file that is not there (nothing registered) is not listed; one there is read or unknown.
    pub memory_peers: BTreeMap<String, Reading<String>>,
    pub cmdline: Reading<String>,
    /// /proc/version.
    pub kernel_version: Reading<String>,
    /// The groups under /sys/kernel/iommu_groups (empty: none, no IOMMU driver registered any;
    /// unknown: the directory could not be listed).
    pub iommu_groups: Reading<Vec<u32>>,
    /// The domain type (`DMA`, `DMA-FQ`, `identity`, `blocked`) of each group a judged device
    /// (GPU, function behind an RDMA device) is in; other groups are not read.
    pub iommu_group_types: BTreeMap<u32, Reading<String>>,
    /// Judged device -> its IOMMU group from its `iommu_group` link (absent: no link, in no
    /// group). A device missing here was not looked up.
    pub iommu_group_of: BTreeMap<Bdf, Reading<u32>>,
    /// /proc/driver/nvidia/gpus entries (one per GPU the driver owns).
    pub driver_gpus: Reading<Vec<Bdf>>,
    /// Entries of /proc/driver/nvidia/gpus that are not a PCI address: kept out of
    /// `driver_gpus`, but said (the driver listed something unexpected).
    pub driver_gpus_strays: Vec<String>,
    /// /dev/nvidiaN nodes.
    pub dev_nodes: Reading<Vec<u32>>,
    /// Seconds since boot (/proc/uptime): the interval cumulative counters span at most.
    pub uptime_s: Reading<f64>,
    /// PIDs of running `nv-fabricmanager` processes (/proc/PID/comm), read only where NVML
    /// shows an NVLink ending at an NVSwitch; unknown: not read there, or /proc not listable,
    /// or a process named like it could not be told.
    pub fabric_manager_pids: Reading<Vec<u32>>,
    /// Processes named like the fabric manager that are not it (not root, or not its
    /// installed binary): "pid N: why"; they do not count as the daemon.
    pub fabric_manager_lookalikes: Vec<String>,
}

impl Host {
    /// Nothing read, `why` said of every fact (a topology-only inventory, or none).
    pub fn not_read(why: &str) -> Host {
        Host {
            nvidia_version_line: Reading::unknown(why),
            nvidia_params: Reading::unknown(why),
            modules: Reading::unknown(why),
            sys_modules: Reading::unknown(why),
            memory_peers: BTreeMap::new(),
            cmdline: Reading::unknown(why),
            kernel_version: Reading::unknown(why),
            iommu_groups: Reading::unknown(why),
            iommu_group_types: BTreeMap::new(),
            iommu_group_of: BTreeMap::new(),
            driver_gpus: Reading::unknown(why),
            driver_gpus_strays: Vec::new(),
            dev_nodes: Reading::unknown(why),
            uptime_s: Reading::unknown(why),
            fabric_manager_pids: Reading::unknown(FABRIC_MANAGER_NOT_READ),
            fabric_manager_lookalikes: Vec::new(),
        }
    }
}

/// Why whether the fabric manager runs is unknown where it was not looked for.
const FABRIC_MANAGER_NOT_READ: &str = "not read (no NVLink to an NVSwitch, or not recorded)";

/// Per-function extras the checks need beyond topology.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeviceExtras {
    /// AER counters: file name -> TOTAL_* value, or unknown with why. A file not read is not
    /// here.
    pub aer: BTreeMap<&'static str, Reading<u64>>,
    /// `resource` lines: (start, end, flags); None: not read (not a GPU).
    pub resources: Option<Reading<Vec<(u64, u64, u64)>>>,
}

impl DeviceExtras {
    /// Why AER counter file `name` has no count; None where it was counted or not read.
    pub fn aer_why(&self, name: &str) -> Option<&str> {
        self.aer.get(name).and_then(Reading::why)
    }

    /// The AER counts that were read, by file name.
    pub fn aer_counted(&self) -> BTreeMap<&'static str, u64> {
        self.aer
            .iter()
            .filter_map(|(k, r)| Some((*k, *r.value()?)))
            .collect()
    }
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
pub fn read_extras(sr: &SysRoot, f: &PciFunction, gpu: bool) -> DeviceExtras {
    let mut x = DeviceExtras::default();
    for name in AER_FILES {
        let path = join(&f.sysfs_path, name);
        let r = text(sr, &path).and_then(|s| match parse_aer_total(&s) {
            Ok(v) => Reading::Value(v),
            Err(why) => Reading::Unknown(format!("{path}: {why}")),
        });
        x.aer.insert(name, r);
    }
    if gpu {
        x.resources = Some(parsed(
            sr,
            &join(&f.sysfs_path, "resource"),
            parse_resources,
        ));
    }
    x
}

/// What an IOMMU group's `type` says (drivers/iommu/iommu.c, iommu_group_show_type); its
/// "unknown" (no default domain) is the kernel not knowing, so it is not among them.
const IOMMU_DOMAIN_TYPES: [&str; 5] = ["blocked", "identity", "unmanaged", "DMA", "DMA-FQ"];

/// The IOMMU group of `f` (from its `iommu_group` link: one readlink, where listing every
/// group's members costs a directory per group).
fn iommu_group(sr: &SysRoot, f: &PciFunction) -> Reading<u32> {
    match sr.link_name(&join(&f.sysfs_path, "iommu_group")) {
        Ok(name) => match name.parse::<u32>() {
            Ok(g) => Reading::Value(g),
            Err(_) => Reading::Unknown(format!(
                "iommu_group link names '{name}', not a group number"
            )),
        },
        // No link: the device is in no IOMMU group.
        Err(ReadError::NotFound(_)) => Reading::absent("no iommu_group link: in no group"),
        Err(e) => Reading::Unknown(e.to_string()),
    }
}

/// The type of each IOMMU group named in `h.iommu_group_of`.
fn read_iommu_types(sr: &SysRoot, h: &mut Host) {
    let groups: std::collections::BTreeSet<u32> = h
        .iommu_group_of
        .values()
        .filter_map(Reading::value)
        .copied()
        .collect();
    for g in groups {
        let path = format!("/sys/kernel/iommu_groups/{g}/type");
        let ty = text(sr, &path).and_then(|t| {
            if IOMMU_DOMAIN_TYPES.contains(&t.trim()) {
                Reading::Value(t)
            } else {
                Reading::Unknown(format!(
                    "{path}: '{}' is not a domain type the kernel writes ({})",
                    shown(&t),
                    IOMMU_DOMAIN_TYPES.join(", ")
                ))
            }
        });
        h.iommu_group_types.insert(g, ty);
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
/// could not be told, whether the daemon runs is unknown.
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
            h.fabric_manager_pids = if pids.is_empty() && !unknown.is_empty() {
                Reading::Unknown(format!(
                    "a process is named {FABRIC_MANAGER_COMM}, but whether it is the daemon (root, {}) could not be read: {}",
                    FABRIC_MANAGER_BINARIES[0],
                    unknown.join("; ")
                ))
            } else {
                Reading::Value(pids)
            };
        }
        Err(e) => h.fabric_manager_pids = Reading::Unknown(e.to_string()),
    }
}

pub fn read_host(sr: &SysRoot) -> Host {
    let listed = |dir: &str| Reading::from_result(sr.list_names(dir));
    let nvidia_version_line = match sr.read_text("/proc/driver/nvidia/version") {
        Ok(s) => Reading::Value(s.lines().next().unwrap_or("").trim().to_string()),
        Err(e @ ReadError::NotFound(_)) => Reading::Absent(e.to_string()),
        Err(e) => Reading::Unknown(e.to_string()),
    };
    let mut h = Host {
        nvidia_version_line,
        nvidia_params: text(sr, "/proc/driver/nvidia/params"),
        modules: text(sr, "/proc/modules").map(|s| {
            s.lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        }),
        sys_modules: listed("/sys/module"),
        cmdline: text(sr, "/proc/cmdline"),
        kernel_version: text(sr, "/proc/version"),
        uptime_s: parsed(sr, "/proc/uptime", |s| {
            s.split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
        }),
        ..Host::not_read("not read")
    };
    for p in [
        "/sys/kernel/mm/memory_peers/nv_mem/version",
        "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
    ] {
        match sr.read_text(p) {
            Ok(v) => {
                h.memory_peers.insert(p.to_string(), Reading::Value(v));
            }
            // Absent means nothing registered there (nvidia-peermem not loaded).
            Err(ReadError::NotFound(_)) => {}
            Err(e) => {
                h.memory_peers
                    .insert(p.to_string(), Reading::Unknown(e.to_string()));
            }
        }
    }
    // The groups' names only: members and types are read for the judged devices
    // (`read_iommu_types`), not for every group on the host.
    h.iommu_groups = match sr.list_names("/sys/kernel/iommu_groups") {
        // The kernel names groups by number only; anything else is not a group.
        Ok(groups) => Reading::Value(groups.iter().filter_map(|g| g.parse().ok()).collect()),
        // No directory: no IOMMU driver registered any group (IOMMU off or absent).
        Err(ReadError::NotFound(_)) => Reading::Value(Vec::new()),
        Err(e) => Reading::Unknown(e.to_string()),
    };
    h.driver_gpus = listed("/proc/driver/nvidia/gpus").map(|v| {
        let mut bdfs = Vec::new();
        for n in &v {
            match n.parse() {
                Ok(b) => bdfs.push(b),
                // Kept out of the count, but said: the driver listed something unexpected.
                Err(_) => h
                    .driver_gpus_strays
                    .push(format!("/proc/driver/nvidia/gpus/{n} is not a PCI address")),
            }
        }
        bdfs
    });
    h.dev_nodes = listed("/dev").map(|v| {
        v.iter()
            .filter_map(|n| n.strip_prefix("nvidia")?.parse().ok())
            .collect()
    });
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
        .flat_map(|d| d.port_list())
        .flat_map(|p| p.gid_list())
        .filter_map(|g| g.ndev.value())
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
