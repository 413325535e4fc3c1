//! The typed topology graph: root complexes, bridges and switches, GPUs, NICs, NUMA nodes and
//! NVLinks, with path classification in the vocabulary of `nvidia-smi topo -m`.
//!
//! Pure: builds from an `Inventory`, does no I/O. A path is as bad as its worst hop
//! (PIX < PXB < PHB < NODE < SYS, NCCL's src/graph ordering). Where NUMA placement is unknown
//! the classification says so (`certain: false` plus a note) instead of guessing.

use crate::facts::{NvLinkRemote, PortState};
use crate::inventory::{Inventory, PciFunction, RdmaBacking};
use crate::numa;
use crate::nvml::NvmlGpu;
use crate::pci::config::PortType;
use crate::pci::{self, Bdf, ClassCode};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap};

pub mod gpu_model;

/// How two devices are connected, best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum PathType {
    /// Self.
    X,
    /// A bonded set of NVLinks (count kept alongside).
    NV,
    /// At most one PCIe bridge or switch.
    PIX,
    /// Several PCIe bridges/switches, no host bridge.
    PXB,
    /// Through a PCIe host bridge (the CPU's root complex).
    PHB,
    /// Between host bridges within one NUMA node.
    NODE,
    /// Across the SMP interconnect between NUMA nodes.
    SYS,
}

impl PathType {
    pub fn as_str(self) -> &'static str {
        match self {
            PathType::X => "X",
            PathType::NV => "NV",
            PathType::PIX => "PIX",
            PathType::PXB => "PXB",
            PathType::PHB => "PHB",
            PathType::NODE => "NODE",
            PathType::SYS => "SYS",
        }
    }
}

/// A classified connection between two devices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Path {
    pub kind: PathType,
    /// NVLink count for `NV`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvlinks: Option<u32>,
    /// False where NUMA placement was unknown and NODE/SYS was inferred from CPU affinity.
    pub certain: bool,
    /// The PCIe-only classification (what the path is without NVLink), for GPUDirect RDMA.
    pub pcie: PathType,
}

impl Path {
    /// The cell as `nvidia-smi topo -m` prints it.
    pub fn cell(&self) -> String {
        self.cell_str().into_owned()
    }

    /// The cell as `nvidia-smi topo -m` prints it, allocated only for `NV#`.
    pub fn cell_str(&self) -> std::borrow::Cow<'static, str> {
        match (self.kind, self.nvlinks) {
            (PathType::NV, Some(n)) => std::borrow::Cow::Owned(format!("NV{n}")),
            (k, _) => std::borrow::Cow::Borrowed(k.as_str()),
        }
    }
}

/// The matrix's `cells` in JSON: rows of `Path::cell`, written straight from the paths.
fn serialize_cells<S: serde::Serializer>(paths: &[Vec<Path>], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq;
    struct Row<'a>(&'a [Path]);
    impl Serialize for Row<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut seq = s.serialize_seq(Some(self.0.len()))?;
            for p in self.0 {
                seq.serialize_element(&*p.cell_str())?;
            }
            seq.end()
        }
    }
    // Each row compact, on one line of the document (as `nvidia-smi topo -m` shows a row):
    // written cell by cell, pretty JSON gave every cell a line of its own, and a host with
    // SR-IOV functions millions of lines.
    // (`to_raw_value` takes the row's text as serde_json wrote it, without parsing it again.)
    let mut seq = s.serialize_seq(Some(paths.len()))?;
    for r in paths {
        let raw = serde_json::value::to_raw_value(&Row(r)).map_err(serde::ser::Error::custom)?;
        seq.serialize_element(&raw)?;
    }
    seq.end()
}

/// Role of a PCI bridge function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BridgeRole {
    RootPort,
    SwitchUpstream,
    SwitchDownstream,
    PciBridge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoleSource {
    /// From the PCIe capability's Device/Port Type.
    ConfigSpace,
    /// From the position in the tree (config space not readable).
    Inferred,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    Gpu,
    Nic,
    NvSwitch,
    Bridge,
    HostBridge,
    Other,
}

/// Where a NUMA affinity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NumaBasis {
    /// The device's `numa_node`.
    NumaNode,
    /// `numa_node` is -1; derived from `local_cpulist` against the nodes' cpulists.
    LocalCpulist,
    Unknown,
}

#[derive(Debug, Clone, Serialize)]
pub struct Numa {
    /// The kernel's `numa_node` (None for -1 or unreadable).
    pub node: Option<u32>,
    /// Nodes the device is local to: `node`, or derived from CPU affinity.
    pub affinity: Vec<u32>,
    pub basis: NumaBasis,
    /// `local_cpulist`.
    pub cpu_affinity: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LinkState {
    pub cur_gen: Option<u8>,
    pub cur_width: Option<u8>,
    pub max_gen: Option<u8>,
    pub max_width: Option<u8>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Device {
    pub bdf: Bdf,
    pub kind: DeviceKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<BridgeRole>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role_source: Option<RoleSource>,
    pub class: Option<String>,
    pub vendor_id: Option<String>,
    pub device_id: Option<String>,
    pub name: String,
    pub driver: Option<String>,
    pub root_complex: String,
    pub upstream: Vec<Bdf>,
    pub numa: Numa,
    pub link: LinkState,
    /// SR-IOV: the physical function of a virtual function.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub physfn: Option<Bdf>,
    pub unknown: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RootComplex {
    pub id: String,
    /// Affinity of the devices below it, when they agree.
    pub numa_affinity: Vec<u32>,
    pub functions: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub label: String,
    pub bdf: Bdf,
    pub name: String,
    pub nvml_index: Option<u32>,
    pub uuid: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub bar1_total_bytes: Option<u64>,
    pub nvlinks_active: Option<u32>,
    /// The GPU's PCIe link (as on its entry in `devices`, here so a GPU needs no join).
    pub link: LinkState,
    /// The GPU's NUMA placement (as on its entry in `devices`).
    pub numa: Numa,
    /// The NUMA node of the GPU's own memory (NVML; coherent systems only), as nvidia-smi's
    /// `GPU NUMA ID` column.
    pub numa_node_id: Option<u32>,
    /// Why NVML facts are missing for this GPU, when they are.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nvml_missing: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Nic {
    pub label: String,
    pub rdma_device: String,
    pub bdf: Bdf,
    pub name: String,
    pub netdevs: Vec<String>,
    pub ports: Vec<NicPort>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NicPort {
    pub port: u32,
    /// As sysfs prints it ("4: ACTIVE"); `state_kind` is the parsed value.
    pub state: Option<String>,
    pub state_kind: Option<PortState>,
    pub link_layer: Option<String>,
    pub rate: Option<String>,
    /// `rate` in Gb/s, where the text says.
    pub rate_gbps: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoftRdma {
    pub rdma_device: String,
    pub parent_netdev: Option<String>,
}

/// A NIC of an RDMA-capable family (`crate::nic`) on the PCI bus with no RDMA device: shown in
/// the tree and the NIC table, left out of the matrix (nvidia-smi's rule: the matrix's NICs
/// are RDMA devices) with a note, and judged by `rdma.driver`.
#[derive(Debug, Clone, Serialize)]
pub struct RdmalessNic {
    pub bdf: Bdf,
    pub name: String,
    pub family: String,
    /// The PCI driver bound (None: none).
    pub driver: Option<String>,
    /// The module that would provide its RDMA device.
    pub rdma_module: String,
    pub netdevs: Vec<String>,
    /// Why it cannot be told that it has no RDMA device (its device may be among those whose
    /// PCI function is unknown, or in an unlisted /sys/class/infiniband); None: it has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown: Option<String>,
}

/// An RDMA-less NIC closer to a GPU than any NIC with an RDMA device.
#[derive(Debug, Clone, Serialize)]
pub struct CloserNic {
    pub bdf: Bdf,
    pub path: PathType,
    pub rdma_module: String,
}

/// An RDMA device whose hardware could not be read (its `device` link or `parent`): neither a
/// NIC in the matrix nor software RDMA, and unknown to every NIC check.
#[derive(Debug, Clone, Serialize)]
pub struct UnresolvedRdma {
    pub rdma_device: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Matrix {
    /// GPU0..GPUn then NIC0..NICm.
    pub labels: Vec<String>,
    /// Full classification per cell (PCIe type under NV#, certainty). In JSON, `cells`: each
    /// cell as printed by `nvidia-smi topo -m` (`Path::cell`), written as it is serialized
    /// (a matrix of every GPU and NIC, SR-IOV functions included, holds millions of cells:
    /// no string is kept per cell); the uncertain ones are also listed, as `uncertain`. Built
    /// with `Cells::WithGpu` (`build_with`), a NIC row holds only its GPU columns: look cells
    /// up with `get`, never by index.
    #[serde(rename = "cells", serialize_with = "serialize_cells")]
    pub paths: Vec<Vec<Path>>,
    /// Cells whose NODE/SYS was inferred from CPU affinity because NUMA is unknown:
    /// [row label, column label] (of the cells computed).
    pub uncertain: Vec<[String; 2]>,
    pub cpu_affinity: Vec<String>,
    pub numa_affinity: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Closest {
    pub gpu: String,
    /// Best PCIe path type to any NIC; None when there are no NICs.
    pub path: Option<PathType>,
    pub certain: bool,
    /// All NICs at that path type (ties listed), by label and RDMA device name.
    pub nics: Vec<String>,
    pub rdma_devices: Vec<String>,
    /// NICs without an RDMA device that are closer than `path` (or the closest, when no NIC
    /// has an RDMA device), closest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub closer_without_rdma: Vec<CloserNic>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    pub root_complexes: Vec<RootComplex>,
    pub devices: Vec<Device>,
    pub gpus: Vec<Gpu>,
    pub nics: Vec<Nic>,
    pub software_rdma: Vec<SoftRdma>,
    /// NICs of RDMA-capable families without an RDMA device (see `RdmalessNic`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nics_without_rdma: Vec<RdmalessNic>,
    /// RDMA devices on unknown hardware (see `UnresolvedRdma`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unresolved_rdma: Vec<UnresolvedRdma>,
    /// Why the list of RDMA devices itself is unknown: /sys/class/infiniband could not be
    /// listed (None: it was listed, or is absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rdma_unknown: Option<String>,
    pub numa_nodes: Vec<crate::inventory::NumaNode>,
    pub matrix: Matrix,
    pub closest_nics: Vec<Closest>,
    pub notes: Vec<String>,
}

/// Human name from the PCI ID database, falling back to the numeric ids.
impl Topology {
    /// A GPU by its label (`GPU3`).
    pub fn gpu(&self, label: &str) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.label == label)
    }

    /// The GPU at a PCI address.
    pub fn gpu_at(&self, bdf: Bdf) -> Option<&Gpu> {
        self.gpus.iter().find(|g| g.bdf == bdf)
    }

    /// A NIC by its label (`NIC0`).
    pub fn nic(&self, label: &str) -> Option<&Nic> {
        self.nics.iter().find(|n| n.label == label)
    }

    /// The PCI function at an address, as a device of the tree. `build` keeps `devices` in bus
    /// order, so this is a binary search (checks ask it for every device and its upstream
    /// ports: thousands of times on a large host); a list put together otherwise is searched
    /// from end to end.
    pub fn device(&self, bdf: Bdf) -> Option<&Device> {
        match self.devices.binary_search_by_key(&bdf, |d| d.bdf) {
            Ok(i) => Some(&self.devices[i]),
            Err(_) => self.devices.iter().find(|d| d.bdf == bdf),
        }
    }

    /// The GPU model (`gpu_model`): by the GPU's PCI device id, else its name.
    pub fn gpu_model(&self, g: &Gpu) -> gpu_model::GpuModel {
        let id = self
            .device(g.bdf)
            .and_then(|d| d.device_id.as_deref())
            .and_then(hex_id);
        gpu_model::lookup(id, &g.name)
    }

    /// The PCI function that shows this OS runs under a hypervisor, with what it is: a virtio
    /// function (Red Hat, 1af4), QEMU's own devices (1b36), the i440FX host bridge QEMU
    /// emulates (8086:1237), VMware's (15ad), Xen's platform device (5853) or VirtualBox's
    /// (80ee). None: no such function among those read (bare metal, or a hypervisor that
    /// shows none of these, e.g. a guest with only passed-through devices).
    pub fn hypervisor(&self) -> Option<(Bdf, &'static str)> {
        self.devices.iter().find_map(|d| {
            let v = d.vendor_id.as_deref().and_then(hex_id)?;
            let dev = d.device_id.as_deref().and_then(hex_id);
            let what = match (v, dev) {
                (0x1af4, _) => "a virtio function (1af4)",
                (0x1b36, _) => "a QEMU device (1b36)",
                (0x8086, Some(0x1237)) => "QEMU's i440FX host bridge (8086:1237)",
                (0x15ad, _) => "a VMware virtual device (15ad)",
                (0x5853, _) => "the Xen platform device (5853)",
                (0x80ee, _) => "a VirtualBox device (80ee)",
                _ => return None,
            };
            Some((d.bdf, what))
        })
    }

    /// Both functions sit directly on one root bus with no bridge above either, and neither
    /// has a NUMA node: a hypervisor's flattened PCI tree, where the PCIe switches between
    /// the physical devices are hidden (every pair reads PHB).
    pub fn flattened(&self, a: Bdf, b: Bdf) -> bool {
        match (self.device(a), self.device(b)) {
            (Some(x), Some(y)) => {
                x.upstream.is_empty()
                    && y.upstream.is_empty()
                    && x.root_complex == y.root_complex
                    && x.numa.node.is_none()
                    && y.numa.node.is_none()
            }
            _ => false,
        }
    }

    /// What keeps the NIC list from being known whole, as (subject, why): an unreadable
    /// /sys/class/infiniband (subject `host`), and each RDMA device on unknown hardware. A NIC
    /// check says unknown for each, never "no RDMA NICs".
    pub fn nic_gaps(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if let Some(why) = &self.rdma_unknown {
            out.push((
                "host".to_string(),
                format!("RDMA devices unknown: /sys/class/infiniband could not be listed ({why})"),
            ));
        }
        for u in &self.unresolved_rdma {
            out.push((
                u.rdma_device.clone(),
                format!(
                    "RDMA device {}: PCI function unknown ({})",
                    u.rdma_device, u.reason
                ),
            ));
        }
        out
    }
}

/// A `0x1af4`-style id as `Device` keeps it.
fn hex_id(s: &str) -> Option<u16> {
    u16::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

pub fn pci_name(vendor: Option<u16>, device: Option<u16>) -> String {
    match (vendor, device) {
        (Some(v), Some(d)) => {
            if let Some(dev) = crate::pci::ids::device(v, d) {
                let vn = crate::pci::ids::vendor(v).unwrap_or("");
                return format!("{} {}", short_vendor(vn), dev);
            }
            match crate::pci::ids::vendor(v) {
                Some(vn) => format!("{} [{v:04x}:{d:04x}]", short_vendor(vn)),
                None => format!("[{v:04x}:{d:04x}]"),
            }
        }
        _ => "unknown device".to_string(),
    }
}

fn short_vendor(v: &str) -> &str {
    match v {
        "NVIDIA Corporation" => "NVIDIA",
        "Mellanox Technologies" => "Mellanox",
        "Intel Corporation" => "Intel",
        "Advanced Micro Devices, Inc. [AMD]" => "AMD",
        "Broadcom / LSI" => "Broadcom",
        other => other,
    }
}

fn classify_kind(f: &PciFunction) -> DeviceKind {
    let Some(class) = f.class.value().map(|c| ClassCode(*c)) else {
        return DeviceKind::Other;
    };
    if class.is_bridge_pci() {
        DeviceKind::Bridge
    } else if class.is_host_bridge() {
        DeviceKind::HostBridge
    } else if f.vendor.value() == Some(&pci::VENDOR_NVIDIA) && class.is_display() {
        DeviceKind::Gpu
    } else if f.vendor.value() == Some(&pci::VENDOR_NVIDIA) && class.base_sub() == 0x0680 {
        DeviceKind::NvSwitch
    } else if class.is_network() {
        DeviceKind::Nic
    } else {
        DeviceKind::Other
    }
}

/// Bridge roles: from the PCIe capability where readable, else inferred from position (a
/// bridge on the root bus is a root port; below a root port or downstream port sits an
/// upstream port; below an upstream port sit downstream ports).
fn bridge_roles(inv: &Inventory) -> BTreeMap<Bdf, (BridgeRole, RoleSource)> {
    let mut roles = BTreeMap::new();
    for (bdf, f) in &inv.pci {
        if classify_kind(f) != DeviceKind::Bridge {
            continue;
        }
        let from_cfg = f
            .config
            .value()
            .and_then(|c| c.pcie.as_ref())
            .and_then(|p| match p.port_type {
                PortType::RootPort => Some(BridgeRole::RootPort),
                PortType::SwitchUpstream => Some(BridgeRole::SwitchUpstream),
                PortType::SwitchDownstream => Some(BridgeRole::SwitchDownstream),
                PortType::PcieToPciBridge | PortType::PciToPcieBridge => {
                    Some(BridgeRole::PciBridge)
                }
                _ => None,
            });
        if let Some(r) = from_cfg {
            roles.insert(*bdf, (r, RoleSource::ConfigSpace));
        }
    }
    // Inference in chain order (parents first), for bridges config space did not settle.
    let mut by_depth: Vec<&PciFunction> = inv
        .pci
        .values()
        .filter(|f| classify_kind(f) == DeviceKind::Bridge)
        .collect();
    by_depth.sort_by_key(|f| (f.upstream.len(), f.bdf));
    for f in by_depth {
        if roles.contains_key(&f.bdf) {
            continue;
        }
        let role = match f.upstream.last() {
            None => BridgeRole::RootPort,
            Some(parent) => match roles.get(parent).map(|r| r.0) {
                Some(BridgeRole::SwitchUpstream) => BridgeRole::SwitchDownstream,
                Some(BridgeRole::RootPort) | Some(BridgeRole::SwitchDownstream) => {
                    BridgeRole::SwitchUpstream
                }
                _ => BridgeRole::PciBridge,
            },
        };
        roles.insert(f.bdf, (role, RoleSource::Inferred));
    }
    roles
}

struct NodeCpus(Vec<(u32, BTreeSet<u32>)>);

impl NodeCpus {
    fn new(inv: &Inventory) -> Self {
        NodeCpus(
            inv.numa_nodes
                .iter()
                .filter_map(|n| {
                    let cpus = numa::parse_cpulist(n.cpulist.value()?)?;
                    Some((n.id, cpus))
                })
                .collect(),
        )
    }

    fn affinity(&self, f: &PciFunction) -> Numa {
        if let Some(&n) = f.numa_node.value() {
            return Numa {
                node: Some(n),
                affinity: vec![n],
                basis: NumaBasis::NumaNode,
                cpu_affinity: f.local_cpulist.value().cloned(),
            };
        }
        let derived: Vec<u32> = f
            .local_cpulist
            .value()
            .and_then(|c| numa::parse_cpulist(c))
            .map(|cpus| {
                self.0
                    .iter()
                    .filter(|(_, node_cpus)| !node_cpus.is_disjoint(&cpus))
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default();
        Numa {
            node: None,
            basis: if derived.is_empty() {
                NumaBasis::Unknown
            } else {
                NumaBasis::LocalCpulist
            },
            affinity: derived,
            cpu_affinity: f.local_cpulist.value().cloned(),
        }
    }
}

/// The part of the PCIe graph that path classification needs.
/// Root complexes numbered as the matrix meets them (`PciGraph::end_key`).
#[derive(Default)]
struct RootComplexIds<'a>(HashMap<&'a str, usize>);

/// One end of a path as `PciGraph::keyed_path` compares it.
struct EndKey<'a> {
    bdf: Bdf,
    /// None: the function is not among the PCI devices read.
    on_bus: Option<OnBus<'a>>,
    numa: Option<&'a Numa>,
}

/// Where a function sits on the PCI bus.
struct OnBus<'a> {
    /// Its root complex, numbered (`RootComplexIds`).
    rc: usize,
    /// The bridges above it, root port first.
    upstream: &'a [Bdf],
    /// `PciGraph::switch_key` of each of `upstream`.
    switches: Vec<Bdf>,
}

struct PciGraph<'a> {
    inv: &'a Inventory,
    roles: BTreeMap<Bdf, (BridgeRole, RoleSource)>,
    numa: &'a BTreeMap<Bdf, Numa>,
}

impl PciGraph<'_> {
    /// Bridges collapse into switches: a downstream port belongs to the switch of its upstream
    /// port, so a GPU and a NIC on two downstream ports of one switch cross one "bridge" (PIX),
    /// as nvidia-smi and NCCL count it.
    fn switch_key(&self, b: Bdf) -> Bdf {
        if let Some((BridgeRole::SwitchDownstream, _)) = self.roles.get(&b)
            && let Some(parent) = self.inv.pci.get(&b).and_then(|f| f.upstream.last())
            && let Some((BridgeRole::SwitchUpstream, _)) = self.roles.get(parent)
        {
            return *parent;
        }
        b
    }

    /// PCIe-only path type between two functions, and whether it is certain.
    fn pcie_path(&self, a: Bdf, b: Bdf) -> (PathType, bool) {
        let mut rcs = RootComplexIds::default();
        Self::keyed_path(&self.end_key(a, &mut rcs), &self.end_key(b, &mut rcs))
    }

    /// What `keyed_path` needs of one function, looked up once: the matrix asks for every pair
    /// of its ends (millions on an SR-IOV host), so nothing is looked up, compared as text or
    /// allocated per pair.
    fn end_key<'g>(&'g self, bdf: Bdf, rcs: &mut RootComplexIds<'g>) -> EndKey<'g> {
        let Some(f) = self.inv.pci.get(&bdf) else {
            return EndKey {
                bdf,
                on_bus: None,
                numa: self.numa.get(&bdf),
            };
        };
        let next = rcs.0.len();
        let rc = *rcs.0.entry(f.root_complex.as_str()).or_insert(next);
        EndKey {
            bdf,
            on_bus: Some(OnBus {
                rc,
                upstream: &f.upstream,
                switches: f.upstream.iter().map(|b| self.switch_key(*b)).collect(),
            }),
            numa: self.numa.get(&bdf),
        }
    }

    /// The path type between two ends (`end_key`): X for the same function; across root
    /// complexes, NODE or SYS by NUMA node (inferred from CPU affinity where the node is
    /// unknown: not certain); under one root complex, PHB through the host bridge, PIX within
    /// one switch (or bridge), PXB across several.
    fn keyed_path(a: &EndKey, b: &EndKey) -> (PathType, bool) {
        if a.bdf == b.bdf {
            return (PathType::X, true);
        }
        let (Some(fa), Some(fb)) = (&a.on_bus, &b.on_bus) else {
            return (PathType::SYS, false);
        };
        if fa.rc != fb.rc {
            return Self::cross_host_bridge(a.numa, b.numa);
        }
        let common = fa
            .upstream
            .iter()
            .zip(fb.upstream.iter())
            .take_while(|(x, y)| x == y)
            .count();
        if common == 0 {
            // Different root ports (or the flat root bus of a VM): through the host bridge.
            return (PathType::PHB, true);
        }
        // The switches crossed: the one above both, and each below it on either side.
        let top = fa.switches[common - 1];
        let one = fa.switches[common..]
            .iter()
            .chain(&fb.switches[common..])
            .all(|s| *s == top);
        if one {
            (PathType::PIX, true)
        } else {
            (PathType::PXB, true)
        }
    }

    fn cross_host_bridge(na: Option<&Numa>, nb: Option<&Numa>) -> (PathType, bool) {
        let (Some(na), Some(nb)) = (na, nb) else {
            return (PathType::SYS, false);
        };
        if let (Some(x), Some(y)) = (na.node, nb.node) {
            return (
                if x == y {
                    PathType::NODE
                } else {
                    PathType::SYS
                },
                true,
            );
        }
        if na.affinity.is_empty() || nb.affinity.is_empty() {
            return (PathType::SYS, false);
        }
        // Inferred from CPU affinity, as nvidia-smi's NUMA Affinity column is: same CPUs means
        // the same node as far as the OS knows, otherwise across nodes.
        if na.affinity == nb.affinity {
            (PathType::NODE, false)
        } else {
            (PathType::SYS, false)
        }
    }
}

/// NVLink count between two GPUs: direct links, or through NVSwitches (every pair of GPUs
/// attached to the switch fabric gets the smaller of their switch-link counts, as nvidia-smi
/// prints NV18 for every pair on a DGX H100).
fn nvlinks_between(a: &NvmlGpu, b: &NvmlGpu) -> u32 {
    let direct = |g: &NvmlGpu, other: &NvmlGpu| {
        let mut peers = g
            .nvlinks
            .iter()
            .filter(|l| l.active)
            .filter(|l| l.remote_device_type.value() != Some(&NvLinkRemote::Switch))
            .peekable();
        // The other GPU's address is parsed only where a link could lead to it (NVSwitch
        // systems have none: every pair of 80 GPUs asks).
        if peers.peek().is_none() {
            return 0;
        }
        let Some(other) = other.bdf() else {
            return 0;
        };
        peers
            .filter(|l| l.remote_bus_id.value().and_then(|s| s.parse::<Bdf>().ok()) == Some(other))
            .count() as u32
    };
    let to_switch = |g: &NvmlGpu| {
        g.nvlinks
            .iter()
            .filter(|l| l.active && l.remote_device_type.value() == Some(&NvLinkRemote::Switch))
            .count() as u32
    };
    let d = direct(a, b).max(direct(b, a));
    d + to_switch(a).min(to_switch(b))
}

/// Stage 1: every PCI function as a device, with its role, NUMA placement and link.
fn devices(
    inv: &Inventory,
    roles: &BTreeMap<Bdf, (BridgeRole, RoleSource)>,
    numa: &BTreeMap<Bdf, Numa>,
) -> Vec<Device> {
    inv.pci
        .values()
        .map(|f| {
            let kind = classify_kind(f);
            let (role, role_source) = match roles.get(&f.bdf) {
                Some((r, s)) => (Some(*r), Some(*s)),
                None => (None, None),
            };
            Device {
                bdf: f.bdf,
                kind,
                role,
                role_source,
                class: f.class.value().map(|c| format!("0x{c:06x}")),
                vendor_id: f.vendor.value().map(|v| format!("0x{v:04x}")),
                device_id: f.device.value().map(|v| format!("0x{v:04x}")),
                name: pci_name(f.vendor.value().copied(), f.device.value().copied()),
                driver: f.driver.value().cloned(),
                root_complex: f.root_complex.clone(),
                upstream: f.upstream.clone(),
                numa: numa[&f.bdf].clone(),
                link: LinkState {
                    cur_gen: f.link.cur_gen.value().copied(),
                    cur_width: f.link.cur_width.value().copied(),
                    max_gen: f.link.max_gen.value().copied(),
                    max_width: f.link.max_width.value().copied(),
                },
                physfn: f.physfn.value().copied(),
                unknown: f.unknowns(inv.extras.get(&f.bdf)),
            }
        })
        .collect()
}

/// Stage 2: root complexes, with the NUMA affinity of the devices below them when it agrees.
fn root_complexes(devices: &[Device]) -> Vec<RootComplex> {
    let mut rc_map: BTreeMap<String, Vec<&Device>> = BTreeMap::new();
    for d in devices {
        rc_map.entry(d.root_complex.clone()).or_default().push(d);
    }
    rc_map
        .iter()
        .map(|(id, devs)| {
            let sets: BTreeSet<Vec<u32>> = devs
                .iter()
                .filter(|d| !d.numa.affinity.is_empty())
                .map(|d| d.numa.affinity.clone())
                .collect();
            RootComplex {
                id: id.clone(),
                numa_affinity: if sets.len() == 1 {
                    sets.into_iter().next().unwrap_or_default()
                } else {
                    Vec::new()
                },
                functions: devs.len(),
            }
        })
        .collect()
}

/// Stage 3: GPUs in PCI bus order, joined with NVML on the numeric BDF.
fn gpus(inv: &Inventory, devices: &[Device], notes: &mut Vec<String>) -> Vec<Gpu> {
    let nvml_by_bdf = inv.nvml.by_bdf();
    let gpu_devs: Vec<&Device> = devices
        .iter()
        .filter(|d| d.kind == DeviceKind::Gpu)
        .collect();
    let nvml_missing_reason = match (&inv.nvml.unavailable, inv.nvml.source.as_str()) {
        (Some(r), _) => Some(r.clone()),
        (None, "") => Some("NVML not recorded".to_string()),
        _ => None,
    };
    let gpus: Vec<Gpu> = gpu_devs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let n = nvml_by_bdf.get(&d.bdf);
            Gpu {
                label: format!("GPU{i}"),
                bdf: d.bdf,
                name: n
                    .and_then(|n| n.name.cloned())
                    .unwrap_or_else(|| d.name.clone()),
                nvml_index: n.map(|n| n.index),
                uuid: n.and_then(|n| n.uuid.cloned()),
                memory_total_bytes: n.and_then(|n| n.memory_total_bytes.cloned()),
                bar1_total_bytes: n.and_then(|n| n.bar1_total_bytes.cloned()),
                // Unknown where the list could not be read (never "0 active").
                nvlinks_active: n
                    .filter(|n| n.nvlinks_unread().is_none())
                    .map(|n| n.nvlinks.iter().filter(|l| l.active).count() as u32),
                link: d.link.clone(),
                numa: d.numa.clone(),
                numa_node_id: n.and_then(|n| n.numa_node_id.cloned()),
                nvml_missing: match n {
                    Some(_) => None,
                    None => Some(
                        nvml_missing_reason
                            .clone()
                            .unwrap_or_else(|| "NVML does not list this GPU".to_string()),
                    ),
                },
            }
        })
        .collect();
    if let Some(r) = &nvml_missing_reason
        && !gpus.is_empty()
    {
        notes.push(format!(
            "NVML facts missing: {r}; NVLink (NV#) cells cannot be shown"
        ));
    }
    for (bdf, g) in &nvml_by_bdf {
        if !inv.pci.contains_key(bdf) {
            notes.push(format!(
                "NVML lists GPU {} at {} which sysfs does not show",
                g.index,
                g.bus_id.value().map_or("", String::as_str)
            ));
        }
    }

    gpus
}

/// Stage 4: NICs (RDMA devices with a PCI function, natural name order), software RDMA
/// devices, and devices whose hardware could not be read.
fn nics(
    inv: &Inventory,
    notes: &mut Vec<String>,
) -> (Vec<Nic>, Vec<SoftRdma>, Vec<UnresolvedRdma>) {
    let mut nics = Vec::new();
    let mut software_rdma = Vec::new();
    let mut unresolved = Vec::new();
    for r in &inv.rdma {
        match &r.backing {
            RdmaBacking::Pci { bdf } => {
                let bdf = *bdf;
                let label = format!("NIC{}", nics.len());
                let mut netdevs: Vec<String> = inv
                    .netdevs
                    .iter()
                    .filter(|n| n.bdf.value() == Some(&bdf))
                    .map(|n| n.name.clone())
                    .collect();
                netdevs.sort_by(|a, b| pci::natural_cmp(a, b));
                let f = inv.pci.get(&bdf);
                nics.push(Nic {
                    label,
                    rdma_device: r.name.clone(),
                    bdf,
                    name: pci_name(
                        f.and_then(|f| f.vendor.value().copied()),
                        f.and_then(|f| f.device.value().copied()),
                    ),
                    netdevs,
                    ports: r
                        .port_list()
                        .iter()
                        .map(|p| NicPort {
                            port: p.port,
                            state: p.state.value().cloned(),
                            state_kind: p.state_kind,
                            link_layer: p.link_layer.value().cloned(),
                            rate: p.rate.value().cloned(),
                            rate_gbps: p.rate_gbps,
                        })
                        .collect(),
                });
                if f.is_none() {
                    notes.push(format!(
                        "RDMA device {} points at {bdf}, which is not among the PCI devices",
                        r.name
                    ));
                }
            }
            RdmaBacking::Software { parent_netdev } => software_rdma.push(SoftRdma {
                rdma_device: r.name.clone(),
                parent_netdev: Some(parent_netdev.clone()),
            }),
            RdmaBacking::Unresolved { reason } => {
                notes.push(format!(
                    "RDMA device {}: PCI function unknown ({reason}); not in the matrix, its NIC checks are unknown",
                    r.name
                ));
                unresolved.push(UnresolvedRdma {
                    rdma_device: r.name.clone(),
                    reason: reason.clone(),
                });
            }
        }
    }
    if let Some(why) = inv.rdma_class.unreadable() {
        notes.push(format!(
            "/sys/class/infiniband could not be listed ({why}): RDMA devices unknown, the matrix may lack NICs"
        ));
    }

    (nics, software_rdma, unresolved)
}

/// Stage 4b: NICs of RDMA-capable families that no RDMA device points at. Where an
/// RDMA device's PCI function is unknown, or the devices could not be listed, each one's lack
/// is unknown rather than a fact.
fn rdmaless_nics(
    inv: &Inventory,
    nics: &[Nic],
    unresolved: &[UnresolvedRdma],
    notes: &mut Vec<String>,
) -> Vec<RdmalessNic> {
    let unknown = match (inv.rdma_class.unreadable(), unresolved.is_empty()) {
        (Some(why), _) => Some(format!("/sys/class/infiniband could not be listed ({why})")),
        (None, false) => Some(format!(
            "the PCI function of {} is unknown",
            unresolved
                .iter()
                .map(|u| u.rdma_device.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
        (None, true) => None,
    };
    let mut out = Vec::new();
    for f in inv.pci.values() {
        if nics.iter().any(|n| n.bdf == f.bdf) {
            continue;
        }
        let Some(fam) = crate::nic::family(f.ids()) else {
            continue;
        };
        let mut netdevs: Vec<String> = inv
            .netdevs
            .iter()
            .filter(|n| n.bdf.value() == Some(&f.bdf))
            .map(|n| n.name.clone())
            .collect();
        netdevs.sort_by(|a, b| pci::natural_cmp(a, b));
        let name = pci_name(f.vendor.value().copied(), f.device.value().copied());
        notes.push(match &unknown {
            None => format!(
                "NIC {} ({name}): no RDMA device seen ({} would provide it): not in the matrix, see rdma.driver",
                f.bdf, fam.rdma_module
            ),
            Some(why) => format!(
                "NIC {} ({name}): whether it has an RDMA device is unknown ({why}); not in the matrix",
                f.bdf
            ),
        });
        out.push(RdmalessNic {
            bdf: f.bdf,
            name,
            family: fam.name.to_string(),
            driver: f.driver.value().cloned(),
            rdma_module: fam.rdma_module.to_string(),
            netdevs,
            unknown: unknown.clone(),
        });
    }
    out
}

/// Stage 6: each GPU's closest NIC(s), by PCIe path (GPUDirect RDMA never goes over NVLink);
/// ties are all kept.
fn closest_nics(gpus: &[Gpu], nics: &[Nic], paths: &[Vec<Path>]) -> Vec<Closest> {
    gpus.iter()
        .enumerate()
        .map(|(gi, g)| {
            let row = &paths[gi];
            let best = (0..nics.len()).map(|ni| row[gpus.len() + ni].pcie).min();
            let chosen: Vec<usize> = (0..nics.len())
                .filter(|ni| Some(row[gpus.len() + ni].pcie) == best)
                .collect();
            Closest {
                gpu: g.label.clone(),
                path: best,
                certain: chosen.iter().all(|ni| row[gpus.len() + ni].certain),
                nics: chosen.iter().map(|ni| nics[*ni].label.clone()).collect(),
                rdma_devices: chosen
                    .iter()
                    .map(|ni| nics[*ni].rdma_device.clone())
                    .collect(),
                closer_without_rdma: Vec::new(),
            }
        })
        .collect()
}

/// Which cells of the path matrix `build_with` computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cells {
    /// Every pair of ends: what `topo` and the HTML page print, and what a baseline may pin.
    All,
    /// Each pair with a GPU at one end at least: every GPU row whole, and each NIC row only its
    /// GPU columns (`Matrix::paths`). What the checks and probes judge; on a host with SR-IOV
    /// functions the NIC-by-NIC block, which nothing judges, is nearly all of the matrix.
    WithGpu,
}

/// The topology of `inv` with its whole path matrix (`Cells::All`).
pub fn build(inv: &Inventory) -> Topology {
    build_with(inv, Cells::All)
}

/// The topology of `inv`, its path matrix holding `cells`. The topology's notes are the same
/// either way: whether some NIC-by-NIC path is only inferred is found without its cell
/// (`nic_pairs_uncertain`).
pub fn build_with(inv: &Inventory, cells: Cells) -> Topology {
    let mut notes: Vec<String> = Vec::new();
    let roles = bridge_roles(inv);
    let cpus = NodeCpus::new(inv);
    let numa: BTreeMap<Bdf, Numa> = inv
        .pci
        .iter()
        .map(|(b, f)| (*b, cpus.affinity(f)))
        .collect();
    let devices = devices(inv, &roles, &numa);
    let root_complexes = root_complexes(&devices);
    let gpus = gpus(inv, &devices, &mut notes);
    let (nics, software_rdma, unresolved_rdma) = nics(inv, &mut notes);
    let nics_without_rdma = rdmaless_nics(inv, &nics, &unresolved_rdma, &mut notes);
    let nvml_by_bdf = inv.nvml.by_bdf();
    let graph = PciGraph {
        inv,
        roles,
        numa: &numa,
    };

    // Stage 5: the matrix.
    let mut labels: Vec<String> = gpus.iter().map(|g| g.label.clone()).collect();
    labels.extend(nics.iter().map(|n| n.label.clone()));
    let ends: Vec<(Bdf, Option<&NvmlGpu>, Option<&str>)> = gpus
        .iter()
        .map(|g| (g.bdf, nvml_by_bdf.get(&g.bdf).copied(), None))
        .chain(
            nics.iter()
                .map(|n| (n.bdf, None, Some(n.rdma_device.as_str()))),
        )
        .collect();
    let (computed, nic_pairs_uncertain) = path_rows(&graph, &ends, gpus.len(), cells);
    let uncertain = nic_pairs_uncertain || computed.iter().any(|(_, u)| *u);
    let paths: Vec<Vec<Path>> = computed.into_iter().map(|(row, _)| row).collect();
    if uncertain {
        notes.push(
            "NUMA node unknown (numa_node -1) for devices on different host bridges: NODE/SYS inferred from CPU affinity, not proven"
                .to_string(),
        );
    }
    let affinity_of = |bdf: &Bdf| -> (String, String) {
        // An RDMA device may point at a function that was left out of the PCI devices
        // (unreadable, see `nics`' note): its affinity is unknown, shown as N/A.
        let Some(n) = numa.get(bdf) else {
            return ("N/A".into(), "N/A".into());
        };
        (
            n.cpu_affinity.clone().unwrap_or_else(|| "N/A".into()),
            if n.affinity.is_empty() {
                "N/A".into()
            } else {
                numa::format_cpulist(&n.affinity.iter().copied().collect())
            },
        )
    };
    let (cpu_affinity, numa_affinity): (Vec<String>, Vec<String>) =
        ends.iter().map(|(b, _, _)| affinity_of(b)).unzip();

    let mut closest_nics = closest_nics(&gpus, &nics, &paths);
    name_closer_rdmaless(&mut closest_nics, &gpus, &nics_without_rdma, &graph);

    notes.sort();
    notes.dedup();
    Topology {
        root_complexes,
        devices,
        gpus,
        nics,
        software_rdma,
        nics_without_rdma,
        unresolved_rdma,
        rdma_unknown: inv.rdma_class.unreadable().map(str::to_string),
        numa_nodes: inv.numa_nodes.clone(),
        matrix: Matrix {
            uncertain: paths
                .iter()
                .enumerate()
                .flat_map(|(i, row)| {
                    let labels = &labels;
                    row.iter()
                        .enumerate()
                        .filter(|(_, p)| !p.certain)
                        .map(move |(j, _)| [labels[i].clone(), labels[j].clone()])
                })
                .collect(),
            labels,
            paths,
            cpu_affinity,
            numa_affinity,
        },
        closest_nics,
        notes,
    }
}
/// Each row of the path matrix between `ends` (GPUs, then NICs: PCI function, NVML GPU, RDMA
/// device; the first `gpus` are GPUs), and whether any of its PCIe paths is inferred rather
/// than proven. With `Cells::WithGpu` a NIC row holds only its GPU columns; the second value
/// then says whether some NIC-by-NIC path, not computed, would be inferred (with `Cells::All`:
/// false, the rows say it).
fn path_rows(
    graph: &PciGraph,
    ends: &[(Bdf, Option<&NvmlGpu>, Option<&str>)],
    gpus: usize,
    cells: Cells,
) -> (Vec<(Vec<Path>, bool)>, bool) {
    // Each end looked up once; rows are independent (the graph is read-only): computed side
    // by side, kept in order.
    let mut rcs = RootComplexIds::default();
    let keys: Vec<EndKey> = ends
        .iter()
        .map(|(b, _, _)| graph.end_key(*b, &mut rcs))
        .collect();
    let rows: Vec<usize> = (0..ends.len()).collect();
    let computed = crate::workers::map(&rows, |&i| {
        let (a, ga, ra) = &ends[i];
        let columns = match cells {
            Cells::WithGpu if i >= gpus => gpus.min(ends.len()),
            _ => ends.len(),
        };
        let mut uncertain = false;
        let mut row = Vec::with_capacity(columns);
        for (j, (b, gb, rb)) in ends[..columns].iter().enumerate() {
            let (pcie, certain) = if i == j {
                (PathType::X, true)
            } else if a == b && ra != rb {
                // Two RDMA devices on one PCI function: same card.
                (PathType::PIX, true)
            } else {
                PciGraph::keyed_path(&keys[i], &keys[j])
            };
            uncertain |= !certain;
            let nv = match (ga, gb) {
                (Some(x), Some(y)) if i != j => nvlinks_between(x, y),
                _ => 0,
            };
            row.push(if nv > 0 {
                Path {
                    kind: PathType::NV,
                    nvlinks: Some(nv),
                    certain: true,
                    pcie,
                }
            } else {
                Path {
                    kind: pcie,
                    nvlinks: None,
                    certain,
                    pcie,
                }
            });
        }
        (row, uncertain)
    });
    let skipped = cells == Cells::WithGpu && nic_pairs_uncertain(&keys[gpus.min(keys.len())..]);
    (computed, skipped)
}

/// Whether some pair of `ends` on two PCI functions has a path `PciGraph::keyed_path` can only
/// infer, found without classifying each pair: such a pair has an end off the PCI devices
/// read, or crosses root complexes with an end whose NUMA node is unknown. (Two ends on one
/// function are X or one card: certain.)
fn nic_pairs_uncertain(ends: &[EndKey]) -> bool {
    let Some(first) = ends.first() else {
        return false;
    };
    if ends.iter().all(|e| e.bdf == first.bdf) {
        return false;
    }
    // Two functions at least: an end off the bus has one of a different function.
    if ends.iter().any(|e| e.on_bus.is_none()) {
        return true;
    }
    let rc = |e: &EndKey| e.on_bus.as_ref().map(|b| b.rc);
    let node_known = |e: &EndKey| e.numa.and_then(|n| n.node).is_some();
    // An end of unknown node and another under a different root complex (which exists
    // wherever there are two root complexes, whatever the first end's).
    ends.iter().any(|e| !node_known(e)) && ends.iter().any(|e| rc(e) != rc(first))
}

/// Names, for each GPU, the NICs without an RDMA device closer to it than its closest NIC
/// with one, nearest first.
fn name_closer_rdmaless(
    closest_nics: &mut [Closest],
    gpus: &[Gpu],
    nics_without_rdma: &[RdmalessNic],
    graph: &PciGraph,
) {
    // A NIC without an RDMA device closer than every NIC with one is named: the
    // GPU's GPUDirect partner would be it, once its RDMA module is loaded.
    for c in closest_nics.iter_mut() {
        let Some(g) = gpus.iter().find(|g| g.label == c.gpu) else {
            continue;
        };
        let mut closer: Vec<CloserNic> = nics_without_rdma
            .iter()
            .filter(|n| n.unknown.is_none())
            .map(|n| (n, graph.pcie_path(g.bdf, n.bdf).0))
            .filter(|(_, p)| c.path.is_none_or(|best| *p < best))
            .map(|(n, path)| CloserNic {
                bdf: n.bdf,
                path,
                rdma_module: n.rdma_module.clone(),
            })
            .collect();
        closer.sort_by_key(|x| (x.path, x.bdf));
        c.closer_without_rdma = closer;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    //! Path classification on small hand-built topologies (no sysfs): each path type, the
    //! NUMA -1 inference, NVLinks, and closest-NIC ties.
    use super::*;
    use crate::inventory::{Link, NumaNode, PciFunction, RdmaDevice};
    use crate::nvml::{NvmlGpu, NvmlLink, NvmlReading, NvmlSnapshot};
    use crate::reading::Reading;

    const BRIDGE: u32 = 0x060400;
    const GPU: u32 = 0x030200;
    const NIC: u32 = 0x020000;

    fn b(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    /// A function under `rc`, below the bridges `up` (root port first).
    fn f(bdf: &str, rc: &str, up: &[&str], class: u32, numa: Option<u32>) -> PciFunction {
        PciFunction {
            bdf: b(bdf),
            sysfs_path: format!("/sys/devices/{rc}/{bdf}"),
            root_complex: rc.to_string(),
            upstream: up.iter().map(|u| b(u)).collect(),
            class: Reading::Value(class),
            vendor: Reading::Value(match class {
                GPU => 0x10de,
                NIC => 0x15b3,
                _ => 0x1000,
            }),
            device: Reading::Value(1),
            driver: Reading::absent("no driver bound"),
            numa_node: numa.map_or_else(|| Reading::absent("kernel reports -1"), Reading::Value),
            local_cpulist: match numa {
                Some(0) => Reading::Value("0-7".into()),
                Some(_) => Reading::Value("8-15".into()),
                None => Reading::unknown("not read"),
            },
            link: Link::not_read(),
            config: Reading::unknown("not read"),
            physfn: Reading::absent("no virtual function"),
        }
    }

    /// An RDMA device on the PCI function `bdf` (tests elsewhere in the crate build on it).
    pub(crate) fn nic(name: &str, bdf: &str) -> RdmaDevice {
        RdmaDevice {
            name: name.into(),
            backing: crate::inventory::RdmaBacking::Pci { bdf: b(bdf) },
            node_type: Reading::unknown("not read"),
            hca_type: Reading::unknown("not read"),
            fw_ver: Reading::unknown("not read"),
            node_guid: Reading::unknown("not read"),
            board_id: Reading::unknown("not read"),
            ports: Reading::Value(Vec::new()),
        }
    }

    /// An inventory of these functions and RDMA devices on two NUMA nodes (tests elsewhere in
    /// the crate build on it).
    pub(crate) fn inventory(
        pci: Vec<PciFunction>,
        rdma: Vec<RdmaDevice>,
        nvml: NvmlSnapshot,
    ) -> Inventory {
        Inventory {
            pci: pci.into_iter().map(|f| (f.bdf, f)).collect(),
            rdma,
            netdevs: Vec::new(),
            numa_nodes: vec![
                NumaNode {
                    id: 0,
                    cpulist: Reading::Value("0-7".into()),
                    distances: Reading::unknown("not read"),
                },
                NumaNode {
                    id: 1,
                    cpulist: Reading::Value("8-15".into()),
                    distances: Reading::unknown("not read"),
                },
            ],
            nvml: nvml.into(),
            host: crate::inventory::Host::not_read("not read"),
            extras: Default::default(),
            notes: Vec::new(),
            rdma_class: Default::default(),
            net_class: Default::default(),
            kernel_log: Default::default(),
            foreign_gdr: Default::default(),
            bridges_hidden: None,
        }
    }

    fn cell(t: &Topology, a: &str, b: &str) -> String {
        let m = &t.matrix;
        let i = m.labels.iter().position(|l| l == a).unwrap();
        let j = m.labels.iter().position(|l| l == b).unwrap();
        m.paths[i][j].cell()
    }

    /// One socket-0 switch tree with a nested switch, a bare root port, a second host bridge
    /// on node 0 and one on node 1:
    ///
    /// pci0000:00 ─ 00:01.0 ─ 01:00.0 (switch) ─┬ 02:00.0 ─ 03:00.0 GPU0
    ///                                          ├ 02:01.0 ─ 04:00.0 mlx5_0
    ///                                          └ 02:02.0 ─ 05:00.0 (switch) ─ 06:00.0 ─ 07:00.0 GPU1
    ///            ─ 00:02.0 ─ 08:00.0 GPU2
    /// pci0000:40 ─ 40:01.0 ─ 41:00.0 mlx5_1          (node 0)
    /// pci0000:80 ─ 80:01.0 ─ 81:00.0 GPU3            (node 1)
    fn two_socket() -> Inventory {
        let s0 = ["0000:00:01.0", "0000:01:00.0"];
        let pci = vec![
            f("0000:00:01.0", "pci0000:00", &[], BRIDGE, Some(0)),
            f("0000:01:00.0", "pci0000:00", &s0[..1], BRIDGE, Some(0)),
            f("0000:02:00.0", "pci0000:00", &s0, BRIDGE, Some(0)),
            f("0000:02:01.0", "pci0000:00", &s0, BRIDGE, Some(0)),
            f("0000:02:02.0", "pci0000:00", &s0, BRIDGE, Some(0)),
            f(
                "0000:03:00.0",
                "pci0000:00",
                &[s0[0], s0[1], "0000:02:00.0"],
                GPU,
                Some(0),
            ),
            f(
                "0000:04:00.0",
                "pci0000:00",
                &[s0[0], s0[1], "0000:02:01.0"],
                NIC,
                Some(0),
            ),
            f(
                "0000:05:00.0",
                "pci0000:00",
                &[s0[0], s0[1], "0000:02:02.0"],
                BRIDGE,
                Some(0),
            ),
            f(
                "0000:06:00.0",
                "pci0000:00",
                &[s0[0], s0[1], "0000:02:02.0", "0000:05:00.0"],
                BRIDGE,
                Some(0),
            ),
            f(
                "0000:07:00.0",
                "pci0000:00",
                &[s0[0], s0[1], "0000:02:02.0", "0000:05:00.0", "0000:06:00.0"],
                GPU,
                Some(0),
            ),
            f("0000:00:02.0", "pci0000:00", &[], BRIDGE, Some(0)),
            f(
                "0000:08:00.0",
                "pci0000:00",
                &["0000:00:02.0"],
                GPU,
                Some(0),
            ),
            f("0000:40:01.0", "pci0000:40", &[], BRIDGE, Some(0)),
            f(
                "0000:41:00.0",
                "pci0000:40",
                &["0000:40:01.0"],
                NIC,
                Some(0),
            ),
            f("0000:80:01.0", "pci0000:80", &[], BRIDGE, Some(1)),
            f(
                "0000:81:00.0",
                "pci0000:80",
                &["0000:80:01.0"],
                GPU,
                Some(1),
            ),
        ];
        inventory(
            pci,
            vec![nic("mlx5_0", "0000:04:00.0"), nic("mlx5_1", "0000:41:00.0")],
            NvmlSnapshot::default(),
        )
    }

    #[test]
    fn every_pcie_path_type() {
        let t = build(&two_socket());
        let labels: Vec<&str> = t.matrix.labels.iter().map(String::as_str).collect();
        assert_eq!(labels, ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1"]);
        assert_eq!(cell(&t, "GPU0", "GPU0"), "X");
        // Two downstream ports of one switch count once.
        assert_eq!(cell(&t, "GPU0", "NIC0"), "PIX");
        // Through two switches, below one root port.
        assert_eq!(cell(&t, "GPU1", "NIC0"), "PXB");
        // Different root ports of one host bridge.
        assert_eq!(cell(&t, "GPU2", "NIC0"), "PHB");
        // Host bridges of one NUMA node.
        assert_eq!(cell(&t, "GPU0", "NIC1"), "NODE");
        // Across sockets.
        assert_eq!(cell(&t, "GPU3", "NIC0"), "SYS");
        assert_eq!(cell(&t, "GPU3", "GPU0"), "SYS");
        // The matrix is symmetric.
        for a in &labels {
            for b in &labels {
                assert_eq!(cell(&t, a, b), cell(&t, b, a), "{a}/{b}");
            }
        }
        assert!(
            t.notes.iter().all(|n| !n.contains("inferred")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn closest_nic_is_the_best_path_and_ties_are_kept() {
        let t = build(&two_socket());
        let closest = |g: &str| t.closest_nics.iter().find(|c| c.gpu == g).unwrap();
        assert_eq!(closest("GPU0").rdma_devices, ["mlx5_0"]);
        assert_eq!(closest("GPU0").path, Some(PathType::PIX));
        // GPU3 is across the socket from both NICs: both are equally (badly) close.
        assert_eq!(closest("GPU3").rdma_devices, ["mlx5_0", "mlx5_1"]);
        assert_eq!(closest("GPU3").path, Some(PathType::SYS));
        // GPU2: PHB to mlx5_0 beats NODE to mlx5_1.
        assert_eq!(closest("GPU2").rdma_devices, ["mlx5_0"]);
        assert_eq!(closest("GPU2").path, Some(PathType::PHB));
    }

    #[test]
    fn numa_minus_one_is_inferred_from_cpus_and_marked_uncertain() {
        // Two host bridges, no numa_node anywhere (a VM): same CPUs -> NODE, else SYS, both
        // uncertain.
        let mut a = f("0000:10:00.0", "pci0000:10", &[], GPU, None);
        let mut n = f("0000:20:00.0", "pci0000:20", &[], NIC, None);
        let mut g2 = f("0000:30:00.0", "pci0000:30", &[], GPU, None);
        a.local_cpulist = Reading::Value("0-7".into());
        n.local_cpulist = Reading::Value("0-7".into());
        g2.local_cpulist = Reading::Value("8-15".into());
        let t = build(&inventory(
            vec![a, n, g2],
            vec![nic("mlx5_0", "0000:20:00.0")],
            NvmlSnapshot::default(),
        ));
        assert_eq!(cell(&t, "GPU0", "NIC0"), "NODE");
        assert_eq!(cell(&t, "GPU1", "NIC0"), "SYS");
        let m = &t.matrix;
        assert!(!m.paths[0][2].certain && !m.paths[1][2].certain);
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("inferred from CPU affinity"))
        );
        // With no CPU list at all there is nothing to infer from: SYS, uncertain, never NODE.
        let mut a = f("0000:10:00.0", "pci0000:10", &[], GPU, None);
        let mut n = f("0000:20:00.0", "pci0000:20", &[], NIC, None);
        a.local_cpulist = Reading::unknown("not read");
        n.local_cpulist = Reading::unknown("not read");
        let t = build(&inventory(
            vec![a, n],
            vec![nic("mlx5_0", "0000:20:00.0")],
            NvmlSnapshot::default(),
        ));
        assert_eq!(cell(&t, "GPU0", "NIC0"), "SYS");
        assert!(!t.matrix.paths[0][1].certain);
    }

    #[test]
    fn nvlinks_give_nv_cells_and_never_a_closest_nic() {
        let link = |i: u32, to: &str| NvmlLink {
            link: i,
            active: true,
            remote_bus_id: NvmlReading::of(to.into()),
            remote_device_type: NvmlReading::of(crate::facts::NvLinkRemote::Gpu),
        };
        let gpu = |bus: &str, to: &str| NvmlGpu {
            bus_id: NvmlReading::of(bus.into()),
            nvlinks: (0..4).map(|i| link(i, to)).collect(),
            ..Default::default()
        };
        let nvml = NvmlSnapshot {
            source: "test".into(),
            gpus: vec![
                gpu("00000000:03:00.0", "00000000:81:00.0"),
                gpu("00000000:81:00.0", "00000000:03:00.0"),
            ],
            ..Default::default()
        };
        let mut inv = two_socket();
        inv.nvml = nvml.into();
        let t = build(&inv);
        assert_eq!(cell(&t, "GPU0", "GPU3"), "NV4");
        // GPUDirect RDMA does not ride NVLink: GPU3's closest NIC is still by PCIe.
        let c = t.closest_nics.iter().find(|c| c.gpu == "GPU3").unwrap();
        assert_eq!(c.path, Some(PathType::SYS));
    }

    /// The matrix with only the cells that have a GPU end (`Cells::WithGpu`) against the whole
    /// one: the same labels, notes and closest NICs; every cell it holds the same; exactly the
    /// cells with a GPU end held.
    fn assert_partial_is_full_where_computed(inv: &Inventory, what: &str) {
        let full = build_with(inv, Cells::All);
        let part = build_with(inv, Cells::WithGpu);
        let (fm, pm) = (&full.matrix, &part.matrix);
        assert_eq!(fm.labels, pm.labels, "{what}");
        assert_eq!(full.notes, part.notes, "{what}");
        assert_eq!(
            format!("{:?}", full.closest_nics),
            format!("{:?}", part.closest_nics),
            "{what}"
        );
        let gpus = full.gpus.len();
        assert_eq!(fm.paths.len(), pm.paths.len(), "{what}");
        for (i, (frow, prow)) in fm.paths.iter().zip(&pm.paths).enumerate() {
            let want = if i < gpus { frow.len() } else { gpus };
            assert_eq!(prow.len(), want, "{what}: row {i}");
            for (j, p) in prow.iter().enumerate() {
                assert_eq!(
                    format!("{p:?}"),
                    format!("{:?}", frow[j]),
                    "{what}: {i},{j}"
                );
            }
        }
    }

    #[test]
    fn the_matrix_without_nic_pairs_is_the_whole_one_where_computed() {
        assert_partial_is_full_where_computed(&two_socket(), "two sockets");
        // A GPU and mlx5_0 under one host bridge, mlx5_1 (node 0) under another; mlx5_0's
        // node as given.
        let hosts = |mlx5_0_node: Option<u32>| {
            let pci = vec![
                f("0000:10:00.0", "pci0000:10", &[], GPU, Some(0)),
                f("0000:11:00.0", "pci0000:10", &[], NIC, mlx5_0_node),
                f("0000:20:00.0", "pci0000:20", &[], NIC, Some(0)),
            ];
            let rdma = vec![nic("mlx5_0", "0000:11:00.0"), nic("mlx5_1", "0000:20:00.0")];
            inventory(pci, rdma, NvmlSnapshot::default())
        };
        let inferred = |inv: &Inventory| {
            let t = build_with(inv, Cells::WithGpu);
            t.notes.iter().any(|n| n.contains("inferred"))
        };
        // Only the NIC pair is inferred (mlx5_0's node unknown): the note must still be there.
        let inv = hosts(None);
        assert!(inferred(&inv));
        assert_partial_is_full_where_computed(&inv, "one NIC pair inferred");
        // mlx5_0's node known: nothing inferred, no note.
        let inv = hosts(Some(0));
        assert!(!inferred(&inv));
        assert_partial_is_full_where_computed(&inv, "nothing inferred");
        // A NIC whose function was not read (off the bus), two on one function, no GPU.
        let pci = vec![f("0000:11:00.0", "pci0000:10", &[], NIC, Some(0))];
        let rdma = vec![
            nic("mlx5_0", "0000:11:00.0"),
            nic("mlx5_1", "0000:11:00.0"),
            nic("mlx5_2", "0000:99:00.0"),
        ];
        let inv = inventory(pci, rdma, NvmlSnapshot::default());
        assert_partial_is_full_where_computed(&inv, "a NIC off the bus, no GPU");
        // Recorded machines, from a single box to a two-socket RoCE host and a VM.
        for name in [
            "hgx-h100-8gpu",
            "pcie-2socket-roce",
            "vm-flat-4gpu",
            "h100x4-live",
            "hwloc-32intel64-2p8co2t-8ve",
        ] {
            let sr = crate::sysroot::SysRoot::at(&crate::fixture_trees::tree(name)).unwrap();
            let inv = Inventory::collect(&sr, NvmlSnapshot::unavailable("test", "test")).unwrap();
            assert_partial_is_full_where_computed(&inv, name);
        }
    }
}
