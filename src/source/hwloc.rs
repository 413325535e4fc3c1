//! hwloc's XML (`lstopo --of xml`, `hwloc-gather-topology`) as a `MachineRecord`: v1 (hwloc 1.x,
//! `<topology>`), v2 (`<topology version="2.0">`) and v3 (`version="3.0"`, read as v2 with
//! bitmask OS-device types). Written from reading hwloc's doc/hwloc.doxy, hwloc/topology-xml.c
//! and its tests/hwloc/xml machines (no code taken).
//!
//! What the format carries: the PCI tree as object nesting (`Bridge` objects, a host bridge
//! `bridge_type="0-1"` with no `pci_busid` standing for a root complex), each function's
//! `pci_busid` and `pci_type` (`"0302 [10de:1db8] [10de:131d] a1"`, v3 adds the prog-if), bridges'
//! bus ranges (`bridge_pci="0000:[34-36]"`), OS devices (net, OpenFabrics, GPU, co-processor),
//! NUMA nodes with their cpusets, and where the I/O tree hangs (its NUMA locality). What it does
//! not: ACS, the trained against the maximum link (one `pci_link_speed` in GB/s), driver binding,
//! the kernel log, IOMMU groups: those stay unknown.
//!
//! The XML is opened as both XML formats open it (`super::xml::open_format`): DTDs refused, a
//! nodes limit, deep nesting refused, so a hostile file costs little.
//!
//! Pure: text in, record out. It must not judge anything.

use super::record::{
    Carried, Format, FunctionRecord, GpuRecord, MachineRecord, NumaRecord, RecordError,
};
use super::xml::{first_element_name, open_format};
use crate::pci::Bdf;
use std::collections::{BTreeMap, BTreeSet};

/// Most 32-bit words a bitmap may have (131,072 CPUs or NUMA nodes).
const MAX_BITMAP_WORDS: usize = 4096;

/// Whether the text is an hwloc XML (its first element is `<topology>`).
pub fn looks_like(text: &str) -> bool {
    first_element_name(text) == Some("topology")
}

/// Decode an hwloc bitmap ("0x0000ffff,0xffffffff"; an empty word is zero, "0xf...f" leading
/// means every higher bit set): the set bits, or None for an infinite or malformed set.
pub fn parse_bitmap(s: &str) -> Option<BTreeSet<u32>> {
    let words: Vec<&str> = s.trim().split(',').collect();
    if words.len() > MAX_BITMAP_WORDS {
        return None;
    }
    let mut set = BTreeSet::new();
    for (i, w) in words.iter().rev().enumerate() {
        let w = w.trim();
        let hex = w
            .strip_prefix("0x")
            .or_else(|| w.strip_prefix("0X"))
            .unwrap_or(w);
        if hex.contains("...") {
            return None; // infinite
        }
        if hex.is_empty() {
            continue;
        }
        if hex.len() > 8 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let v = u32::from_str_radix(hex, 16).ok()?;
        for b in 0..32u32 {
            if v & (1 << b) != 0 {
                set.insert(i as u32 * 32 + b);
            }
        }
    }
    Some(set)
}

/// `pci_type`: "CCCC [VVVV:DDDD] [SSSS:ssss] RR" and, from hwloc 3, " PP" (prog-if).
#[derive(Debug, Default, PartialEq, Eq)]
struct PciType {
    class16: Option<u16>,
    vendor: Option<u16>,
    device: Option<u16>,
    subsystem_vendor: Option<u16>,
    subsystem_device: Option<u16>,
    revision: Option<u8>,
    prog_if: Option<u8>,
}

fn parse_pci_type(s: &str) -> Option<PciType> {
    let mut it = s.split_whitespace();
    let hex16 = |x: &str| {
        (x.len() <= 4)
            .then(|| u16::from_str_radix(x, 16).ok())
            .flatten()
    };
    let pair = |x: Option<&str>| -> Option<(u16, u16)> {
        let inner = x?.strip_prefix('[')?.strip_suffix(']')?;
        let (a, b) = inner.split_once(':')?;
        Some((hex16(a)?, hex16(b)?))
    };
    let class16 = hex16(it.next()?)?;
    let (vendor, device) = pair(it.next())?;
    let (sv, sd) = pair(it.next())?;
    let byte = |x: Option<&str>| {
        x.and_then(|x| {
            (x.len() <= 2)
                .then(|| u8::from_str_radix(x, 16).ok())
                .flatten()
        })
    };
    let revision = byte(it.next());
    let prog_if = byte(it.next());
    Some(PciType {
        class16: Some(class16),
        vendor: Some(vendor),
        device: Some(device),
        subsystem_vendor: Some(sv),
        subsystem_device: Some(sd),
        revision,
        prog_if,
    })
}

/// `bridge_pci="0000:[18-1f]"`: secondary and subordinate bus.
fn parse_bridge_pci(s: &str) -> Option<(u8, u8)> {
    let (_, range) = s.trim().split_once(':')?;
    let inner = range.strip_prefix('[')?.strip_suffix(']')?;
    let (a, b) = inner.split_once('-')?;
    let bus = |x: &str| {
        (x.len() <= 2)
            .then(|| u8::from_str_radix(x, 16).ok())
            .flatten()
    };
    Some((bus(a)?, bus(b)?))
}

/// What an OS device is, as hwloc typed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OsDevKind {
    Net,
    OpenFabrics,
    Gpu,
    Other,
}

/// hwloc <= 2 numbers OS device types (BLOCK 0, GPU 1, NETWORK 2, OPENFABRICS 3, DMA 4,
/// COPROC 5); hwloc 3 writes a bitmask (GPU 1<<2, COPROC 1<<3, NETWORK 1<<4, OPENFABRICS 1<<5).
/// A CUDA or NVML co-processor ("cuda0", "nvml0") is a GPU; BXI, typed OpenFabrics by v2, is a plain network.
fn osdev_kind(e: roxmltree::Node, v3: bool) -> OsDevKind {
    let name = e.attribute("name").unwrap_or("");
    let subtype = e
        .attribute("subtype")
        .or_else(|| info(e, "CoProcType"))
        .unwrap_or("");
    // hwloc's DGX-2 test machine (a 2.x development build) types its NVML devices as
    // co-processors.
    let nvidia_coproc = subtype == "CUDA" || name.starts_with("cuda") || name.starts_with("nvml");
    let Some(t) = e
        .attribute("osdev_type")
        .and_then(|t| t.trim().parse::<u64>().ok())
    else {
        return OsDevKind::Other;
    };
    if v3 {
        if t & (1 << 5) != 0 {
            OsDevKind::OpenFabrics
        } else if t & (1 << 4) != 0 {
            OsDevKind::Net
        } else if t & (1 << 2) != 0 || (t & (1 << 3) != 0 && nvidia_coproc) {
            OsDevKind::Gpu
        } else {
            OsDevKind::Other
        }
    } else {
        match t {
            1 => OsDevKind::Gpu,
            2 => OsDevKind::Net,
            3 if subtype == "BXI" => OsDevKind::Net,
            3 => OsDevKind::OpenFabrics,
            5 if nvidia_coproc => OsDevKind::Gpu,
            _ => OsDevKind::Other,
        }
    }
}

/// `<info name=".." value=".."/>` of an object.
fn info<'a>(e: roxmltree::Node<'a, 'a>, name: &str) -> Option<&'a str> {
    e.children()
        .filter(|c| c.has_tag_name("info") && c.attribute("name") == Some(name))
        .find_map(|c| c.attribute("value"))
}

fn object_type<'a>(e: roxmltree::Node<'a, 'a>) -> &'a str {
    e.attribute("type").unwrap_or("")
}

fn is_io(t: &str) -> bool {
    matches!(t, "Bridge" | "PCIDev" | "OSDev")
}

/// The walk's state at one object.
#[derive(Clone, Copy)]
struct Place<'a> {
    /// The bridge above (None: the root complex, or no bridge at all).
    parent: Option<Bdf>,
    /// v1: the nearest NUMANode ancestor's os_index.
    numa_ancestor: Option<u32>,
    /// The nodeset of the nearest non-I/O ancestor that has one.
    nodeset: Option<&'a str>,
}

struct Walk<'a> {
    v3: bool,
    functions: Vec<FunctionRecord>,
    gpus: BTreeMap<Bdf, GpuRecord>,
    numa: BTreeMap<u32, NumaRecord>,
    notes: Vec<String>,
    bad_busids: Vec<String>,
    skipped_functions: usize,
    /// PCI objects past `record::MAX_FUNCTIONS` (a PCI segment's worth), with what hangs under
    /// them: a hostile file of more is not laid out.
    over_limit: usize,
    /// The NUMA node a function's locality names, by function index: resolved once every NUMA
    /// node is known (v2 puts them anywhere).
    locality: Vec<Locality<'a>>,
    prog_if_absent: bool,
}

enum Locality<'a> {
    Node(u32),
    Nodeset(&'a str),
    Unknown,
}

impl<'a> Walk<'a> {
    fn object(&mut self, e: roxmltree::Node<'a, 'a>, place: Place<'a>) {
        let t = object_type(e);
        let mut inner = place;
        match t {
            "NUMANode" => {
                if let Some(id) = e.attribute("os_index").and_then(|v| v.parse::<u32>().ok()) {
                    let cpulist = e
                        .attribute("cpuset")
                        .and_then(parse_bitmap)
                        .map(|s| crate::numa::format_cpulist(&s));
                    self.numa.entry(id).or_insert(NumaRecord {
                        id,
                        cpulist,
                        distance: None,
                    });
                    inner.numa_ancestor = Some(id);
                }
                if let Some(ns) = e.attribute("nodeset") {
                    inner.nodeset = Some(ns);
                }
            }
            "Bridge" | "PCIDev" => {
                let busid = e.attribute("pci_busid");
                let host_bridge = t == "Bridge"
                    && (busid.is_none()
                        || e.attribute("bridge_type")
                            .is_some_and(|b| b.starts_with("0-")));
                if host_bridge {
                    // A root complex: what hangs under it is on a root bus.
                    inner.parent = None;
                } else {
                    let Some(bdf) = busid.and_then(|b| b.parse::<Bdf>().ok()) else {
                        self.bad_busids.push(busid.unwrap_or("(none)").to_string());
                        self.skipped_functions += e
                            .descendants()
                            .filter(|d| matches!(object_type(*d), "Bridge" | "PCIDev"))
                            .count();
                        return;
                    };
                    if self.functions.len() >= super::record::MAX_FUNCTIONS {
                        self.over_limit += e
                            .descendants()
                            .filter(|d| matches!(object_type(*d), "Bridge" | "PCIDev"))
                            .count();
                        return;
                    }
                    let index = self.functions.len();
                    let f = self.function(e, bdf, place.parent);
                    self.functions.push(f);
                    self.locality
                        .push(match (place.numa_ancestor, place.nodeset) {
                            (Some(id), _) => Locality::Node(id),
                            (None, Some(ns)) => Locality::Nodeset(ns),
                            (None, None) => Locality::Unknown,
                        });
                    for c in e.children().filter(|c| object_type(*c) == "OSDev") {
                        self.os_device(c, index);
                    }
                    if t == "Bridge" {
                        inner.parent = Some(bdf);
                    }
                }
            }
            "OSDev" => {} // read with their function
            _ => {
                if !is_io(t)
                    && let Some(ns) = e.attribute("nodeset")
                {
                    inner.nodeset = Some(ns);
                }
            }
        }
        let pci = t == "Bridge" || t == "PCIDev";
        for c in e.children().filter(|c| c.has_tag_name("object")) {
            if pci && object_type(c) == "OSDev" {
                continue;
            }
            self.object(c, inner);
        }
    }

    fn function(
        &mut self,
        e: roxmltree::Node<'a, 'a>,
        bdf: Bdf,
        parent: Option<Bdf>,
    ) -> FunctionRecord {
        let mut f = FunctionRecord {
            bdf,
            parent,
            ..FunctionRecord::default()
        };
        if let Some(pt) = e.attribute("pci_type").and_then(parse_pci_type) {
            f.vendor = pt.vendor;
            f.device = pt.device;
            f.subsystem_vendor = pt.subsystem_vendor;
            f.subsystem_device = pt.subsystem_device;
            f.revision = pt.revision;
            if pt.prog_if.is_none() {
                self.prog_if_absent = true;
            }
            f.class = pt
                .class16
                .map(|c| (u32::from(c) << 8) | u32::from(pt.prog_if.unwrap_or(0)));
        }
        if let Some((sec, sub)) = e.attribute("bridge_pci").and_then(parse_bridge_pci) {
            f.secondary_bus = Some(sec);
            f.subordinate_bus = Some(sub);
        }
        f.description = e
            .attribute("name")
            .map(str::to_string)
            .or_else(|| {
                let v = info(e, "PCIVendor");
                let d = info(e, "PCIDevice");
                match (v, d) {
                    (Some(v), Some(d)) => Some(format!("{v} {d}")),
                    (Some(x), None) | (None, Some(x)) => Some(x.to_string()),
                    (None, None) => None,
                }
            })
            .filter(|s| !s.trim().is_empty());
        f
    }

    fn os_device(&mut self, e: roxmltree::Node<'a, 'a>, index: usize) {
        let Some(name) = e.attribute("name").filter(|n| !n.is_empty()) else {
            return;
        };
        let f = &mut self.functions[index];
        match osdev_kind(e, self.v3) {
            OsDevKind::Net => {
                if !f.netdevs.iter().any(|n| n == name) {
                    f.netdevs.push(name.to_string());
                }
            }
            OsDevKind::OpenFabrics => {
                if !f.rdma_devices.iter().any(|n| n == name) {
                    f.rdma_devices.push(name.to_string());
                }
            }
            OsDevKind::Gpu => {
                // What NVML would show: NVIDIA GPUs only (a CUDA or NVML device, or a DRM card
                // of an NVIDIA function).
                let nvidia = name.starts_with("cuda")
                    || name.starts_with("nvml")
                    || f.vendor == Some(crate::pci::VENDOR_NVIDIA);
                if !nvidia {
                    return;
                }
                let bdf = f.bdf;
                let g = self.gpus.entry(bdf).or_insert_with(|| GpuRecord {
                    bdf,
                    ..GpuRecord::default()
                });
                if g.name.is_none() {
                    g.name = info(e, "GPUModel").map(str::to_string);
                }
                if g.uuid.is_none() {
                    g.uuid = info(e, "NVIDIAUUID").map(str::to_string);
                }
                if g.serial.is_none() {
                    g.serial = info(e, "NVIDIASerial").map(str::to_string);
                }
                if g.memory_total_bytes.is_none() {
                    // KiB (doc/hwloc.doxy).
                    g.memory_total_bytes = info(e, "CUDAGlobalMemorySize")
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .and_then(|k| k.checked_mul(1024));
                }
            }
            OsDevKind::Other => {}
        }
    }
}

/// A function's NUMA node from its locality: one node, -1 (the kernel's "no affinity") where
/// the I/O tree hangs above several nodes, None where nothing says.
fn resolve_numa(l: &Locality, known: &BTreeMap<u32, NumaRecord>) -> Option<i32> {
    match l {
        Locality::Node(id) => i32::try_from(*id).ok(),
        Locality::Nodeset(ns) => {
            let set = parse_bitmap(ns)?;
            let nodes: Vec<u32> = set.into_iter().filter(|n| known.contains_key(n)).collect();
            match nodes.as_slice() {
                [] => None,
                [one] => i32::try_from(*one).ok(),
                _ => Some(-1),
            }
        }
        Locality::Unknown => None,
    }
}

/// v2's `<distances2 type="NUMANode" indexing="os">`: the SLIT rows (kind 5 = from the OS,
/// latency), by node.
fn numa_distances(doc: &roxmltree::Document, numa: &mut BTreeMap<u32, NumaRecord>) {
    for d in doc.descendants().filter(|d| {
        d.has_tag_name("distances2")
            && d.attribute("type") == Some("NUMANode")
            && d.attribute("indexing") == Some("os")
            && d.attribute("name").is_none_or(|n| n == "NUMALatency")
    }) {
        let text_of = |tag: &str| -> Vec<u64> {
            d.children()
                .filter(|c| c.has_tag_name(tag))
                .flat_map(|c| {
                    c.text()
                        .unwrap_or("")
                        .split_whitespace()
                        .map(|v| v.parse::<u64>().ok())
                        .collect::<Vec<_>>()
                })
                .map(|v| v.unwrap_or(u64::MAX))
                .collect()
        };
        let idx = text_of("indexes");
        let vals = text_of("u64values");
        let n = idx.len();
        if n == 0 || vals.len() != n * n || vals.contains(&u64::MAX) || idx.contains(&u64::MAX) {
            continue;
        }
        for (row, id) in idx.iter().enumerate() {
            let Ok(id) = u32::try_from(*id) else { continue };
            if let Some(r) = numa.get_mut(&id) {
                let line: Vec<String> = vals[row * n..(row + 1) * n]
                    .iter()
                    .map(u64::to_string)
                    .collect();
                r.distance = Some(line.join(" "));
            }
        }
    }
}

/// Parse an hwloc XML.
pub fn parse(text: &str) -> Result<MachineRecord, RecordError> {
    let doc = open_format(text, Format::Hwloc, "topology")?;
    let root = doc.root_element();
    let mut rec = MachineRecord::new(Format::Hwloc);
    let version = root.attribute("version");
    let v3 = match version {
        None => false,
        Some(v) if v.starts_with("2.") => false,
        Some(v) if v.starts_with("3.") => true,
        Some(v) => {
            rec.notes.push(format!(
                "hwloc XML version \"{v}\" is not one this reader knows (1, 2.x, 3.x): read as 2.x"
            ));
            false
        }
    };
    let mut walk = Walk {
        v3,
        functions: Vec::new(),
        gpus: BTreeMap::new(),
        numa: BTreeMap::new(),
        notes: Vec::new(),
        bad_busids: Vec::new(),
        skipped_functions: 0,
        over_limit: 0,
        locality: Vec::new(),
        prog_if_absent: false,
    };
    let top = Place {
        parent: None,
        numa_ancestor: None,
        nodeset: None,
    };
    let objects: Vec<_> = root
        .children()
        .filter(|c| c.has_tag_name("object"))
        .collect();
    if objects.is_empty() {
        return Err(RecordError::Malformed(
            "an hwloc XML without any <object>".into(),
        ));
    }
    // v3 keeps the host's name among the topology's own infos, v1 and v2 on the root object.
    rec.hostname = info(root, "HostName")
        .or_else(|| objects.iter().find_map(|o| info(*o, "HostName")))
        .map(str::to_string);
    for o in &objects {
        walk.object(*o, top);
    }
    numa_distances(&doc, &mut walk.numa);
    for (f, l) in walk.functions.iter_mut().zip(&walk.locality) {
        f.numa_node = resolve_numa(l, &walk.numa);
    }
    if !walk.bad_busids.is_empty() {
        walk.notes.push(format!(
            "{} PCI object(s) with an unreadable pci_busid ({}) skipped with what hangs under them ({} function(s))",
            walk.bad_busids.len(),
            walk.bad_busids.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
            walk.skipped_functions
        ));
    }
    if walk.over_limit > 0 {
        walk.notes.push(format!(
            "{} PCI object(s) past the limit of {} skipped",
            walk.over_limit,
            super::record::MAX_FUNCTIONS
        ));
    }
    if walk.prog_if_absent {
        walk.notes.push(
            "class: hwloc XML before v3 gives base class and subclass only; the programming interface is taken as 00"
                .into(),
        );
    }
    walk.notes.push(
        "link speed: hwloc gives one figure (GB/s), not the trained and maximum speed and width"
            .into(),
    );
    walk.notes.push(
        "hwloc's I/O filter may leave out PCI functions it finds unimportant (bridges with nothing below, devices without OS devices)"
            .into(),
    );
    let mut functions = walk.functions;
    functions.sort_by_key(|f| f.bdf);
    let before = functions.len();
    functions.dedup_by_key(|f| f.bdf);
    if functions.len() != before {
        walk.notes.push(format!(
            "{} duplicate PCI function(s) dropped",
            before - functions.len()
        ));
    }
    let numa_known = !walk.numa.is_empty();
    rec.functions = functions;
    rec.gpus = walk.gpus.into_values().collect();
    rec.numa = numa_known.then(|| walk.numa.into_values().collect());
    rec.carried = Carried {
        driver: false,
        numa_node: numa_known,
        os_devices: true,
    };
    rec.notes.extend(walk.notes);
    let nc = Format::Hwloc.not_carried();
    for what in [
        "ACS control bits",
        "link trained vs maximum speed and width",
        "driver binding",
        "kernel log",
        "IOMMU groups",
        "NVLink links (hwloc gives a bandwidth matrix, not links)",
        "BAR1",
        "config space",
    ] {
        rec.cannot_tell.push(format!("{what}: {nc}"));
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps() {
        let s = |v: &str| parse_bitmap(v).map(|s| crate::numa::format_cpulist(&s));
        assert_eq!(s("0x00555555").unwrap(), "0,2,4,6,8,10,12,14,16,18,20,22");
        assert_eq!(s("0x0000ffff,0xffffffff").unwrap(), "0-47");
        assert_eq!(s("0x0").unwrap(), "");
        // Empty words are zero (hwloc abbreviates them): CPUs 0-47 and 96-143.
        assert_eq!(
            s("0x0000ffff,0xffffffff,,0x0000ffff,0xffffffff").unwrap(),
            "0-47,96-143"
        );
        assert_eq!(s("0x00000001,,,0x0").unwrap(), "96");
        assert!(parse_bitmap("0xf...f,0xffffffff").is_none());
        assert!(parse_bitmap("0xzz").is_none());
        assert!(parse_bitmap("0x123456789").is_none());
    }

    #[test]
    fn pci_types() {
        let t = parse_pci_type("0302 [10de:1db8] [10de:131d] a1").unwrap();
        assert_eq!(t.class16, Some(0x0302));
        assert_eq!((t.vendor, t.device), (Some(0x10de), Some(0x1db8)));
        assert_eq!(
            (t.subsystem_vendor, t.subsystem_device),
            (Some(0x10de), Some(0x131d))
        );
        assert_eq!((t.revision, t.prog_if), (Some(0xa1), None));
        let t3 = parse_pci_type("0604 [8086:2030] [8086:0000] 04 01").unwrap();
        assert_eq!(t3.prog_if, Some(1));
        assert!(parse_pci_type("0302 10de:1db8").is_none());
        assert_eq!(parse_bridge_pci("0000:[2c-3b]"), Some((0x2c, 0x3b)));
        assert_eq!(parse_bridge_pci("0000:[04-04]"), Some((4, 4)));
        assert_eq!(parse_bridge_pci("0000:2c-3b"), None);
    }

    #[test]
    fn first_elements() {
        assert!(looks_like(
            "<?xml version=\"1.0\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n<topology version=\"2.0\">"
        ));
        assert!(looks_like("<topology>"));
        assert!(!looks_like("<system version=\"1\">"));
        assert!(!looks_like("00:00.0 Host bridge"));
        assert!(!looks_like(""));
        assert_eq!(
            first_element_name("<!-- x --><system version=\"1\">"),
            Some("system")
        );
    }

    /// hwloc's own test machine, exported by hwloc 1.11 (v1 format): an HP ProLiant SL390s G7,
    /// two NUMA nodes, three NVIDIA 10de:06d2 GPUs, a Mellanox ConnectX (15b3:6746) with mlx4_0.
    const SL390S_V1: &str =
        include_str!("../../fixtures/records/hwloc-sl390s/24em64t-2n6c2t-pci.v1.xml");
    /// The same machine exported by hwloc 2.14 (v2 format).
    const SL390S_V2: &str =
        include_str!("../../fixtures/records/hwloc-sl390s/24em64t-2n6c2t-pci.v2.xml");
    /// The same machine exported by hwloc's development branch (v3: bitmask OS-device types,
    /// prog-if in `pci_type`).
    const SL390S_V3: &str =
        include_str!("../../fixtures/records/hwloc-sl390s/24em64t-2n6c2t-pci.v3.xml");
    /// hwloc's NVIDIA DGX-2H (v2): 16 V100 GPUs seen through NVML, 12 NVSwitches, 2 NUMA nodes.
    const DGX2: &str = include_str!("../../fixtures/records/hwloc-dgx2/nvidiaDGX2.xml");

    fn bdf(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    fn func<'a>(r: &'a MachineRecord, b: &str) -> &'a FunctionRecord {
        r.functions
            .iter()
            .find(|f| f.bdf == bdf(b))
            .unwrap_or_else(|| panic!("{b} missing"))
    }

    fn check_sl390s(r: &MachineRecord) {
        assert!(r.carried.numa_node && r.carried.os_devices && !r.carried.driver);
        let numa = r.numa.as_ref().unwrap();
        assert_eq!(numa.len(), 2);
        // cpuset 0x00555555 / 0x00aaaaaa: even and odd CPUs of 24.
        assert_eq!(
            numa[0].cpulist.as_deref(),
            Some("0,2,4,6,8,10,12,14,16,18,20,22")
        );
        assert_eq!(
            numa[1].cpulist.as_deref(),
            Some("1,3,5,7,9,11,13,15,17,19,21,23")
        );
        // The ConnectX behind root port 00:05.0 carries eth2, ib0 and mlx4_0, on node 0.
        let ib = func(r, "0000:05:00.0");
        assert_eq!(ib.parent, Some(bdf("0000:00:05.0")));
        assert_eq!(ib.rdma_devices, vec!["mlx4_0"]);
        assert_eq!(ib.netdevs, vec!["eth2", "ib0"]);
        assert_eq!(ib.numa_node, Some(0));
        assert_eq!(
            (ib.vendor, ib.device, ib.class),
            (Some(0x15b3), Some(0x6746), Some(0x0c0600))
        );
        // Three 10de:06d2 3D controllers: 06:00.0 on node 0, 14:00.0 and 11:00.0 on node 1.
        let gpus: Vec<_> = r
            .functions
            .iter()
            .filter(|f| f.class == Some(0x030200))
            .collect();
        assert_eq!(gpus.len(), 3);
        assert!(
            gpus.iter()
                .all(|g| g.vendor == Some(0x10de) && g.device == Some(0x06d2))
        );
        assert_eq!(func(r, "0000:06:00.0").numa_node, Some(0));
        assert_eq!(func(r, "0000:14:00.0").numa_node, Some(1));
        assert_eq!(func(r, "0000:11:00.0").parent, Some(bdf("0000:10:07.0")));
        // Root ports sit on the root bus (parent None) with their bus ranges.
        let rp = func(r, "0000:00:07.0");
        assert_eq!(rp.parent, None);
        assert_eq!((rp.secondary_bus, rp.subordinate_bus), (Some(6), Some(8)));
        // The SATA controller hangs directly under the host bridge.
        assert_eq!(func(r, "0000:00:1f.2").parent, None);
        assert_eq!(func(r, "0000:04:00.1").netdevs, vec!["eth1"]);
        // No CUDA/NVML OS devices in this export: no NVML-like GPU facts.
        assert!(r.gpus.is_empty());
        assert_eq!(r.hostname.as_deref(), Some("mirage004"));
        // hwloc carries no link split.
        assert!(
            r.functions
                .iter()
                .all(|f| f.max_link_speed.is_none() && f.cur_link_speed.is_none())
        );
    }

    #[test]
    fn sl390s_v1() {
        assert!(looks_like(SL390S_V1));
        check_sl390s(&parse(SL390S_V1).unwrap());
    }

    #[test]
    fn sl390s_v2() {
        assert!(looks_like(SL390S_V2));
        check_sl390s(&parse(SL390S_V2).unwrap());
    }

    #[test]
    fn sl390s_v3() {
        assert!(looks_like(SL390S_V3));
        let r = parse(SL390S_V3).unwrap();
        check_sl390s(&r);
        // v3 gives the prog-if: no note that it was taken as 00.
        assert!(!r.notes.iter().any(|n| n.contains("programming interface")));
    }

    #[test]
    fn sl390s_v1_v2_v3_agree() {
        let strip = |r: MachineRecord| {
            let numa: Vec<NumaRecord> = r
                .numa
                .unwrap()
                .into_iter()
                .map(|n| NumaRecord {
                    distance: None,
                    ..n
                })
                .collect();
            (r.functions, numa)
        };
        let a = strip(parse(SL390S_V1).unwrap());
        assert_eq!(a, strip(parse(SL390S_V2).unwrap()));
        assert_eq!(a, strip(parse(SL390S_V3).unwrap()));
    }

    #[test]
    fn dgx2() {
        let r = parse(DGX2).unwrap();
        assert_eq!(r.gpus.len(), 16);
        assert!(
            r.gpus
                .iter()
                .all(|g| g.name.as_deref() == Some("Tesla V100-SXM3-32GB-H"))
        );
        let g0 = r
            .gpus
            .iter()
            .find(|g| g.bdf == bdf("0000:34:00.0"))
            .unwrap();
        assert_eq!(
            g0.uuid.as_deref(),
            Some("GPU-d3977428-7a30-086b-2e20-5c1eeed647c6")
        );
        assert_eq!(g0.serial.as_deref(), Some("0321019030775"));
        assert!(g0.nvlinks.is_none());
        // GPU 34:00.0 under PLX 10b5:9781 ports 33:00.0 <- 32:00.0 <- 2d:04.0 <- 2c:00.0 <- root port 2b:00.0.
        let chain: Vec<Bdf> = std::iter::successors(Some(bdf("0000:34:00.0")), |b| {
            func(&r, &b.to_string()).parent
        })
        .collect();
        assert_eq!(
            chain,
            [
                "0000:34:00.0",
                "0000:33:00.0",
                "0000:32:00.0",
                "0000:2d:04.0",
                "0000:2c:00.0",
                "0000:2b:00.0"
            ]
            .map(bdf)
        );
        assert_eq!(func(&r, "0000:2b:00.0").parent, None);
        // 12 NVSwitches (class 0680), one of which hwloc read as all zeros.
        let nvs = r
            .functions
            .iter()
            .filter(|f| f.class == Some(0x068000))
            .count();
        assert_eq!(nvs, 11);
        assert_eq!(func(&r, "0000:66:00.0").vendor, Some(0));
        let numa = r.numa.as_ref().unwrap();
        assert_eq!(numa.len(), 2);
        assert_eq!(numa[0].distance.as_deref(), Some("10 21"));
        assert_eq!(numa[1].distance.as_deref(), Some("21 10"));
        assert_eq!(func(&r, "0000:34:00.0").numa_node, Some(0));
        assert_eq!(func(&r, "0000:c1:00.0").numa_node, Some(1));
    }

    #[test]
    fn not_hwloc() {
        assert!(matches!(
            parse("<system version=\"1\"/>"),
            Err(RecordError::NotThisFormat(..))
        ));
        assert!(matches!(parse("<topology"), Err(RecordError::Malformed(_))));
        assert!(matches!(
            parse("<topology/>"),
            Err(RecordError::Malformed(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = looks_like(&s);
            let _ = parse(&s);
            let _ = parse_bitmap(&s);
        }

        #[test]
        fn never_panics_on_hwloc_shaped_input(
            busid in "[0-9a-f:.]{0,14}",
            ty in "[0-9a-f\\[\\]: ]{0,40}",
            ost in "[0-9]{0,3}",
            cpuset in "[0-9a-fx,.]{0,30}",
            bridge in "[0-9a-f:\\[\\]-]{0,16}",
        ) {
            let text = format!(
                "<topology version=\"2.0\"><object type=\"Machine\" nodeset=\"{cpuset}\"><object type=\"NUMANode\" os_index=\"{ost}\" cpuset=\"{cpuset}\"/><object type=\"Bridge\" bridge_type=\"1-1\" pci_busid=\"{busid}\" bridge_pci=\"{bridge}\" pci_type=\"{ty}\"><object type=\"PCIDev\" pci_busid=\"{busid}\" pci_type=\"{ty}\"><object type=\"OSDev\" name=\"x\" osdev_type=\"{ost}\"/></object></object></object></topology>"
            );
            let _ = parse(&text);
        }
    }
}
