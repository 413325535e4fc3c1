//! An NCCL topology XML as a `MachineRecord`: a dump NCCL wrote (`NCCL_TOPO_DUMP_FILE`) or a
//! hand-written `NCCL_TOPO_FILE` such as cloud providers publish for their VMs. Written from
//! reading NCCL's src/graph/xml.cc, xml.h and topo.cc (no code taken).
//!
//! The format: `<system version="1">` holding one `<cpu numaid=.. affinity=..>` per NUMA node,
//! under it `<pci busid class vendor device subsystem_vendor subsystem_device link_speed
//! link_width>` elements nested as NCCL sees the PCI tree, `<gpu dev sm rank gdr>` with
//! `<nvlink target count tclass>` (and `<c2c>`) under a GPU's `<pci>`, `<nic><net name dev speed
//! port guid maxconn gdr/></nic>` under a NIC's `<pci>` (or under a `<cpu>` where the net has no
//! PCI device, as a socket interface in a container).
//!
//! What NCCL's tree is not: the kernel's. NCCL's parent of a device is the bridge two levels up
//! its sysfs path (a switch's upstream port; root ports and downstream ports are left out), its
//! `link_speed`/`link_width` are the lower of the device's and its port's maxima (never the
//! trained link), it trims devices no local GPU or NIC uses, it puts the nets of all functions of
//! a NIC (and of its virtual functions) under function 0, and hand-written files invent bridges
//! (`ffff:ff:01.0`) only to say which GPU sits near which NIC. Those bus ids are kept as written:
//! they are how the file shows the grouping. Every attribute NCCL fills in itself when a file
//! leaves it out stays unknown here.
//!
//! Pure: text in, record out. It must not judge anything.

use super::record::{
    Carried, ForeignGdr, Format, FunctionRecord, GpuRecord, MachineRecord, NumaRecord,
    NvLinkRecord, RecordError,
};
use super::xml::{first_element_name, open_format};
use crate::pci::Bdf;
use std::collections::{BTreeMap, BTreeSet};

/// NCCL_TOPO_XML_VERSION in NCCL's xml.h: the only version NCCL loads.
const NCCL_XML_VERSION: &str = "1";
/// Most `<pci>` one file may place: far above any machine's (a topology NCCL writes holds its
/// GPUs, NICs and the bridges between, a few hundred at most), and low enough that a hostile
/// file of hundreds of thousands is refused in bounded memory rather than laid out.
pub const MAX_FUNCTIONS: usize = 4096;

/// Most NVLinks one `<nvlink count>` may say (an NVLink 5 GPU has 18 per peer; a GB200/GB300
/// dump shows 18 or 36 to the one hidden switch).
const MAX_NVLINK_COUNT: u32 = 64;
/// Most 32-bit words of an affinity cpumap.
const MAX_CPUMAP_WORDS: usize = 4096;

/// Whether the text is an NCCL topology XML (its first element is `<system>`).
pub fn looks_like(text: &str) -> bool {
    first_element_name(text) == Some("system")
}

/// A kernel cpumap ("00000000,0000ffff,ffffffff": 32-bit hex words, most significant first, no
/// `0x`) as a cpulist ("0-47"); None where malformed.
pub fn cpumap_to_cpulist(s: &str) -> Option<String> {
    let words: Vec<&str> = s.trim().split(',').collect();
    if words.len() > MAX_CPUMAP_WORDS {
        return None;
    }
    let mut set = BTreeSet::new();
    for (i, w) in words.iter().rev().enumerate() {
        let w = w.trim();
        let w = w.strip_prefix("0x").unwrap_or(w);
        if w.is_empty() || w.len() > 8 || !w.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        let v = u32::from_str_radix(w, 16).ok()?;
        for b in 0..32u32 {
            if v & (1 << b) != 0 {
                set.insert(i as u32 * 32 + b);
            }
        }
    }
    Some(crate::numa::format_cpulist(&set))
}

/// What an NVLink's `tclass` says of its peer (NCCL's kvDictPciClass: 0x068000 an NVSwitch,
/// 0x068001 a CPU, 0x03.... a GPU).
fn remote_kind(tclass: &str) -> Option<&'static str> {
    let c = crate::pci::parse_hex(tclass)?;
    match c {
        0x068000 => Some("switch"),
        0x068001 => Some("cpu"),
        c if c >> 16 == 0x03 => Some("gpu"),
        _ => None,
    }
}

/// RDMA device names as the kernel and rdma-core name them (`mlx5_0`, `ibp12s0`, `rdmap16s27`,
/// `efa_0`, `irdma0`, `bnxt_re0`, `rocep94s0f0`, ...); anything else a `<net>` names is a
/// network interface of NCCL's socket transport (`eth0`, `ens5`).
pub fn looks_like_rdma_device(name: &str) -> bool {
    const PREFIXES: [&str; 16] = [
        "mlx4_", "mlx5_", "ibp", "rdmap", "efa_", "efa", "irdma", "bnxt_re", "qedr", "hfi1_",
        "rxe", "siw", "erdma", "mana_ib", "rocep", "ionic_",
    ];
    PREFIXES
        .iter()
        .any(|p| name.starts_with(p) && name.len() > p.len())
}

fn gdr_attr(e: roxmltree::Node) -> Option<bool> {
    match e.attribute("gdr")?.trim() {
        "0" => Some(false),
        "" => None,
        v => v.parse::<i64>().ok().map(|v| v != 0),
    }
}

fn u16_attr(e: roxmltree::Node, name: &str) -> Option<u16> {
    crate::pci::parse_hex(e.attribute(name)?).and_then(|v| u16::try_from(v).ok())
}

#[derive(Default)]
struct Walk {
    functions: Vec<FunctionRecord>,
    gpus: BTreeMap<Bdf, GpuRecord>,
    gdr: Vec<ForeignGdr>,
    numa: BTreeMap<u32, NumaRecord>,
    saw_nic: bool,
    bad_busids: BTreeSet<String>,
    skipped: usize,
    /// `<pci>` past `MAX_FUNCTIONS`, with everything under them.
    over_limit: usize,
    bad_speeds: BTreeSet<String>,
    bad_targets: BTreeSet<String>,
    /// GPUs whose `<nvlink target>` names the GPU itself (a hand-written file's slip: NCCL
    /// would connect the GPU to itself, a path it never takes to another device).
    self_targets: BTreeSet<Bdf>,
    c2c: usize,
    pcilinks: usize,
    ignored: BTreeSet<String>,
    duplicate_numa: BTreeSet<String>,
    /// Bridges whose children do not share one bus (NCCL skipped the ports between).
    mixed_children: usize,
}

impl Walk {
    fn cpu(&mut self, cpu: roxmltree::Node) {
        let numaid = cpu.attribute("numaid").map(str::trim);
        let numa_node = numaid.and_then(|v| v.parse::<i32>().ok());
        if let Some(id) = numa_node.and_then(|n| u32::try_from(n).ok()) {
            match self.numa.entry(id) {
                std::collections::btree_map::Entry::Occupied(_) => {
                    self.duplicate_numa.insert(id.to_string());
                }
                std::collections::btree_map::Entry::Vacant(v) => {
                    let cpulist = cpu.attribute("affinity").and_then(cpumap_to_cpulist);
                    v.insert(NumaRecord {
                        id,
                        cpulist,
                        distance: None,
                    });
                }
            }
        }
        for c in cpu.children().filter(|c| c.is_element()) {
            match c.tag_name().name() {
                "pci" => self.pci(c, None, numa_node),
                "nic" => self.nic(c, None),
                other => {
                    self.ignored.insert(format!("<{other}> under <cpu>"));
                }
            }
        }
    }

    fn pci(&mut self, e: roxmltree::Node, parent: Option<Bdf>, numa_node: Option<i32>) {
        let busid = e.attribute("busid").unwrap_or("");
        let Ok(bdf) = busid.parse::<Bdf>() else {
            self.bad_busids.insert(busid.to_string());
            self.skipped += e.descendants().filter(|d| d.has_tag_name("pci")).count();
            return;
        };
        let mut f = FunctionRecord {
            bdf,
            parent,
            numa_node,
            ..FunctionRecord::default()
        };
        // An invented bridge (a cloud provider's `ffff:ff:0N.0`) directly under a <cpu> hangs
        // from that CPU, as NCCL reads it: one root complex per CPU, not one shared by every
        // invented bridge of the file.
        if parent.is_none() && bdf.domain == 0xffff {
            f.root_complex = Some(match numa_node {
                Some(n) if n >= 0 => format!("pcicpu{n}:00"),
                _ => "pcicpu:00".to_string(),
            });
        }
        f.class = e
            .attribute("class")
            .and_then(crate::pci::parse_hex)
            .filter(|c| *c <= 0xff_ffff);
        f.vendor = u16_attr(e, "vendor");
        f.device = u16_attr(e, "device");
        f.subsystem_vendor = u16_attr(e, "subsystem_vendor");
        f.subsystem_device = u16_attr(e, "subsystem_device");
        // The lower of the device's and its port's maximum (NCCL's xml.cc), never the trained
        // link; "" where NCCL read none, and NCCL's "16.0 GT/s" stand-in is indistinguishable
        // from a real reading, so a dump's speed is what NCCL believed.
        if let Some(s) = e
            .attribute("link_speed")
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            match crate::pci::gen_from_speed(s).and_then(crate::pci::speed_of_gen) {
                Some(gts) => f.max_link_speed = Some(format!("{gts:.1} GT/s PCIe")),
                None => {
                    self.bad_speeds.insert(s.to_string());
                }
            }
        }
        f.max_link_width = e
            .attribute("link_width")
            .and_then(crate::pci::parse_width)
            .map(|w| w.to_string());
        if self.functions.len() >= MAX_FUNCTIONS {
            self.over_limit += e.descendants().filter(|d| d.has_tag_name("pci")).count();
            return;
        }
        let index = self.functions.len();
        self.functions.push(f);
        let mut child_buses: BTreeSet<(u32, u8)> = BTreeSet::new();
        for c in e.children().filter(|c| c.is_element()) {
            match c.tag_name().name() {
                "pci" => {
                    if let Ok(b) = c.attribute("busid").unwrap_or("").parse::<Bdf>() {
                        child_buses.insert((b.domain, b.bus));
                    }
                    self.pci(c, Some(bdf), numa_node);
                }
                "gpu" => self.gpu(c, bdf),
                "nic" => self.nic(c, Some((index, bdf))),
                "pcilink" => self.pcilinks += 1,
                other => {
                    self.ignored.insert(format!("<{other}> under <pci>"));
                }
            }
        }
        // A bridge's secondary bus, where its children say it: all on one bus of its domain.
        let is_bridge = self.functions[index]
            .class
            .is_some_and(|c| crate::pci::ClassCode(c).is_bridge_pci());
        if is_bridge && !child_buses.is_empty() {
            let mut it = child_buses.iter();
            match (it.next(), it.next()) {
                (Some((dom, bus)), None) if *dom == bdf.domain => {
                    self.functions[index].secondary_bus = Some(*bus);
                }
                _ => self.mixed_children += 1,
            }
        }
    }

    fn gpu(&mut self, e: roxmltree::Node, bdf: Bdf) {
        if let Some(g) = gdr_attr(e) {
            let v = ForeignGdr::Gpu { gpu: bdf, gdr: g };
            if !self.gdr.contains(&v) {
                self.gdr.push(v);
            }
        }
        let sm = e.attribute("sm").and_then(|v| v.trim().parse::<u32>().ok());
        let mut links = Vec::new();
        let mut any_link = false;
        for c in e.children().filter(|c| c.is_element()) {
            match c.tag_name().name() {
                "nvlink" => {
                    any_link = true;
                    let target = c.attribute("target").unwrap_or("");
                    let remote = target.parse::<Bdf>().ok();
                    if remote.is_none() {
                        self.bad_targets.insert(target.to_string());
                    }
                    if remote == Some(bdf) {
                        self.self_targets.insert(bdf);
                        continue;
                    }
                    let kind = c.attribute("tclass").and_then(remote_kind);
                    let count = c
                        .attribute("count")
                        .and_then(|v| v.trim().parse::<u32>().ok())
                        .filter(|n| *n <= MAX_NVLINK_COUNT)
                        .unwrap_or(0);
                    for _ in 0..count {
                        links.push(NvLinkRecord {
                            link: links.len() as u32,
                            active: true,
                            remote_bus_id: remote,
                            remote_kind: kind.map(str::to_string),
                        });
                    }
                }
                "c2c" => self.c2c += 1,
                other => {
                    self.ignored.insert(format!("<{other}> under <gpu>"));
                }
            }
        }
        // A dump (NCCL writes `rank` once it has read the GPU) shows NVML's links, none
        // included; a hand-written <gpu> without <nvlink> leaves NCCL to ask NVML.
        let nvlinks = (any_link || e.attribute("rank").is_some()).then_some(links);
        let g = self.gpus.entry(bdf).or_insert_with(|| GpuRecord {
            bdf,
            ..GpuRecord::default()
        });
        // Several <gpu> under one <pci> (several ranks or MIG-like parts of one GPU): one GPU.
        if g.sm.is_none() {
            g.sm = sm;
        }
        if g.nvlinks.is_none() {
            g.nvlinks = nvlinks;
        }
    }

    fn nic(&mut self, e: roxmltree::Node, function: Option<(usize, Bdf)>) {
        self.saw_nic = true;
        for net in e.children().filter(|c| c.has_tag_name("net")) {
            let Some(name) = net
                .attribute("name")
                .map(str::trim)
                .filter(|n| !n.is_empty())
            else {
                continue;
            };
            if let Some((i, _)) = function {
                let f = &mut self.functions[i];
                let list = if looks_like_rdma_device(name) {
                    &mut f.rdma_devices
                } else {
                    &mut f.netdevs
                };
                if !list.iter().any(|n| n == name) {
                    list.push(name.to_string());
                }
            }
            if let Some(g) = gdr_attr(net) {
                let v = ForeignGdr::Net {
                    nic: function.map(|(_, b)| b),
                    name: name.to_string(),
                    gdr: g,
                };
                if !self.gdr.contains(&v) {
                    self.gdr.push(v);
                }
            }
        }
    }
}

/// The first three of `set`, and how many more there are.
fn list<'a>(set: impl IntoIterator<Item = &'a String>) -> String {
    let all: Vec<&str> = set.into_iter().map(String::as_str).collect();
    let shown = all[..all.len().min(3)].join(", ");
    match all.len().saturating_sub(3) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// Parse an NCCL topology XML.
pub fn parse(text: &str) -> Result<MachineRecord, RecordError> {
    let doc = open_format(text, Format::Nccl, "system")?;
    let root = doc.root_element();
    let mut rec = MachineRecord::new(Format::Nccl);
    match root.attribute("version").map(str::trim) {
        Some(NCCL_XML_VERSION) => {}
        Some(v) => rec.notes.push(format!(
            "NCCL topology version \"{v}\": NCCL loads only version {NCCL_XML_VERSION}; read as version {NCCL_XML_VERSION}"
        )),
        None => rec.notes.push(format!(
            "no version on <system>: NCCL refuses such a file; read as version {NCCL_XML_VERSION}"
        )),
    }
    let mut w = Walk::default();
    let mut hosts: BTreeSet<&str> = BTreeSet::new();
    for c in root.children().filter(|c| c.is_element()) {
        if c.has_tag_name("cpu") {
            if let Some(h) = c.attribute("host_hash") {
                hosts.insert(h);
            }
            w.cpu(c);
        } else {
            w.ignored
                .insert(format!("<{}> under <system>", c.tag_name().name()));
        }
    }
    if w.functions.is_empty() && w.numa.is_empty() {
        return Err(RecordError::Malformed(
            "an NCCL topology XML without any <cpu> or <pci>".into(),
        ));
    }
    // NCCL runs only on NVIDIA GPUs and takes every display-class <pci> of its topology for one
    // (topo.cc: class 0x03 is a GPU node): a file that omits the vendor (Azure's hand-written
    // ones) still names NVIDIA GPUs there.
    let mut inferred = 0usize;
    for f in &mut w.functions {
        if f.vendor.unwrap_or(0) == 0 && f.class.is_some_and(|c| c >> 16 == 0x03) {
            f.vendor = Some(crate::pci::VENDOR_NVIDIA);
            inferred += 1;
        }
    }
    if inferred > 0 {
        rec.notes.push(format!(
            "{inferred} display-class <pci> without a vendor taken as NVIDIA GPUs (NCCL takes every one for a GPU it can use)"
        ));
    }
    walk_notes(&w, hosts.len(), &mut rec.notes);
    let mut functions = w.functions;
    functions.sort_by_key(|f| f.bdf);
    let before = functions.len();
    functions.dedup_by_key(|f| f.bdf);
    if functions.len() != before {
        rec.notes.push(format!(
            "{} <pci> listed twice: the first kept",
            before - functions.len()
        ));
    }
    rec.functions = functions;
    rec.gpus = w.gpus.into_values().collect();
    rec.foreign_gdr = w.gdr;
    rec.numa = Some(w.numa.into_values().collect());
    rec.carried = Carried {
        driver: false,
        numa_node: true,
        // A file without <nic> says nothing of net devices (a hand-written one leaves them to
        // NCCL), so absence there is not absence.
        os_devices: w.saw_nic,
    };
    let nc = Format::Nccl.not_carried();
    for what in [
        "ACS",
        "trained link speed/width",
        "driver binding",
        "kernel log",
        "IOMMU",
        "BAR1",
        "root ports and switch downstream ports",
        "PCI functions NCCL did not use",
        "config space",
    ] {
        rec.cannot_tell.push(format!("{what}: {nc}"));
    }
    Ok(rec)
}

/// Notes on what the walk met and how it was read: joined hosts, repeated NUMA nodes, skipped
/// or unreadable elements, and what NCCL's tree leaves out. `hosts`: how many host_hash
/// values the file holds.
fn walk_notes(w: &Walk, hosts: usize, notes: &mut Vec<String>) {
    if hosts > 1 {
        notes.push(format!(
            "the file joins {} hosts (host_hash): their PCI functions and NUMA nodes are read as one machine's",
            hosts
        ));
    }
    if !w.duplicate_numa.is_empty() {
        notes.push(format!(
            "<cpu numaid> repeated ({}): the first one's affinity kept",
            list(&w.duplicate_numa)
        ));
    }
    if w.over_limit > 0 {
        notes.push(format!(
            "{} <pci> past the limit of {MAX_FUNCTIONS} skipped, with what they hold",
            w.over_limit
        ));
    }
    if !w.bad_busids.is_empty() {
        notes.push(format!(
            "{} <pci> with an unreadable busid ({}) skipped with the {} <pci> under them",
            w.bad_busids.len(),
            list(&w.bad_busids),
            w.skipped
        ));
    }
    if !w.bad_speeds.is_empty() {
        notes.push(format!(
            "link_speed not a PCIe rate ({}): left unknown",
            list(&w.bad_speeds)
        ));
    }
    if !w.bad_targets.is_empty() {
        notes.push(format!(
            "NVLink target not a PCI address ({}): NCCL's stand-in for a peer the machine hides (an NVSwitch a VM or NVLink domain does not show); the links are kept without a peer address",
            list(&w.bad_targets)
        ));
    }
    if !w.self_targets.is_empty() {
        let names: BTreeSet<String> = w.self_targets.iter().map(Bdf::to_string).collect();
        notes.push(format!(
            "<nvlink> naming its own GPU as the target ({}): not a link to another device (NCCL would join the GPU to itself, which no path between devices uses); not counted",
            list(&names)
        ));
    }
    if w.c2c > 0 {
        notes.push(format!(
            "{} <c2c> (GPU-CPU chip-to-chip) link(s) not recorded",
            w.c2c
        ));
    }
    if w.pcilinks > 0 {
        notes.push(format!(
            "{} <pcilink> (switch peer link) element(s) not recorded",
            w.pcilinks
        ));
    }
    if !w.ignored.is_empty() {
        notes.push(format!("elements not read: {}", list(&w.ignored)));
    }
    if w.mixed_children > 0 {
        notes.push(format!(
            "{} bridge(s) whose children are not on one bus of their domain (NCCL leaves out the ports between, or the bridge is a file's invented grouping): secondary bus unknown",
            w.mixed_children
        ));
    }
    notes.push(
        "NCCL's PCI tree leaves out root ports and switch downstream ports: a <pci>'s parent here is the bridge NCCL names, two levels up the kernel's tree".into(),
    );
    notes.push(
        "link_speed/link_width are NCCL's (the lower of the device's and its port's maximum), read as maximum speed and width".into(),
    );
    if w.saw_nic {
        notes.push(
            "NCCL lists the nets of all functions of a NIC (and of its virtual functions) under function 0".into(),
        );
    } else {
        notes.push(
            "no <nic> in the file: which RDMA devices and interfaces the NICs carry is not in it (NCCL finds them itself)".into(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Azure's NCCL_TOPO_FILE for ND A100 v4 VMs (azhpc-images): 4 NUMA nodes, each with one
    /// invented switch holding 2 A100s and 2 InfiniBand VFs.
    const NDV4: &str = include_str!("../../fixtures/records/azure-ndv4/ndv4-topo.xml");
    /// Azure's NCCL_TOPO_FILE for ND H100 v5: 2 NUMA nodes, 8 invented switches of 1 GPU + 1 NIC.
    const NDV5: &str = include_str!("../../fixtures/records/azure-ndv5/ndv5-topo.xml");
    /// aws-ofi-nccl's static topology for p4d.24xlarge: 4 switches of 2 GPUs + 1 EFA.
    const P4D: &str = include_str!("../../fixtures/records/aws-p4d/p4d-24xl-topo.xml");
    /// aws-ofi-nccl's static topology for p5.48xlarge (since removed): switches of 4 NICs, no
    /// GPUs, no class, "32 GT/s PCIe/s" speeds.
    const P5: &str = include_str!("../../fixtures/records/aws-p5/p5.48xl-topo.xml");

    fn bdf(s: &str) -> Bdf {
        s.parse().unwrap()
    }

    fn func<'a>(r: &'a MachineRecord, b: &str) -> &'a FunctionRecord {
        r.functions
            .iter()
            .find(|f| f.bdf == bdf(b))
            .unwrap_or_else(|| panic!("{b} missing"))
    }

    fn children<'a>(r: &'a MachineRecord, b: &str) -> Vec<&'a FunctionRecord> {
        r.functions
            .iter()
            .filter(|f| f.parent == Some(bdf(b)))
            .collect()
    }

    #[test]
    fn cpumaps() {
        assert_eq!(
            cpumap_to_cpulist("00000000,00000000,00ffffff").unwrap(),
            "0-23"
        );
        assert_eq!(
            cpumap_to_cpulist("ffffff00,00000000,00000000").unwrap(),
            "72-95"
        );
        assert_eq!(
            cpumap_to_cpulist("00000000,0000ffff,ffffffff").unwrap(),
            "0-47"
        );
        assert_eq!(
            cpumap_to_cpulist("ffffffff,ffff0000,00000000").unwrap(),
            "48-95"
        );
        assert!(cpumap_to_cpulist("xyz").is_none());
        assert!(cpumap_to_cpulist("").is_none());
        // The inverse of the writer in export/nccl.rs (tests/it/records.rs checks the round trip
        // against it; source/ must not import export/).
        assert_eq!(
            cpumap_to_cpulist("0000ffff,0000ffff").unwrap(),
            "0-15,32-47"
        );
        assert_eq!(cpumap_to_cpulist("00000100").unwrap(), "8");
    }

    #[test]
    fn rdma_names() {
        for n in [
            "mlx5_0",
            "mlx5_11",
            "ibp12s0",
            "rdmap16s27",
            "efa_0",
            "irdma0",
            "bnxt_re0",
            "rocep94s0f0",
        ] {
            assert!(looks_like_rdma_device(n), "{n}");
        }
        for n in ["eth0", "ens5", "enp20s0np0", "ib0", "mlx5_", "lo"] {
            assert!(!looks_like_rdma_device(n), "{n}");
        }
        assert_eq!(remote_kind("0x068000"), Some("switch"));
        assert_eq!(remote_kind("0x068001"), Some("cpu"));
        assert_eq!(remote_kind("0x030200"), Some("gpu"));
        assert_eq!(remote_kind("0x060400"), None);
    }

    #[test]
    fn azure_ndv4() {
        assert!(looks_like(NDV4));
        let r = parse(NDV4).unwrap();
        let numa = r.numa.as_ref().unwrap();
        assert_eq!(numa.iter().map(|n| n.id).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(numa[0].cpulist.as_deref(), Some("0-23"));
        assert_eq!(numa[3].cpulist.as_deref(), Some("72-95"));
        // 8 GPUs and 8 InfiniBand (0x0207) functions, 2 of each under each invented switch.
        assert_eq!(
            r.functions
                .iter()
                .filter(|f| f.class == Some(0x030200))
                .count(),
            8
        );
        assert_eq!(
            r.functions
                .iter()
                .filter(|f| f.class == Some(0x020700))
                .count(),
            8
        );
        let sw = func(&r, "ffff:ff:01.0");
        assert_eq!(
            (sw.parent, sw.numa_node, sw.class),
            (None, Some(0), Some(0x060400))
        );
        let under: Vec<String> = children(&r, "ffff:ff:01.0")
            .iter()
            .map(|f| f.bdf.to_string())
            .collect();
        assert_eq!(
            under,
            [
                "0003:00:00.0",
                "0004:00:00.0",
                "0103:00:00.0",
                "0104:00:00.0"
            ]
        );
        // GPU 0001:00:00.0 shares switch ffff:ff:02.0 with NIC 0101:00:00.0, on NUMA node 1.
        assert_eq!(func(&r, "0001:00:00.0").parent, Some(bdf("ffff:ff:02.0")));
        assert_eq!(func(&r, "0101:00:00.0").parent, Some(bdf("ffff:ff:02.0")));
        assert_eq!(func(&r, "0101:00:00.0").numa_node, Some(1));
        // "16 GT/s" (kernels before 5.7) read as Gen4.
        assert_eq!(
            func(&r, "0003:00:00.0").max_link_speed.as_deref(),
            Some("16.0 GT/s PCIe")
        );
        assert_eq!(
            func(&r, "0003:00:00.0").max_link_width.as_deref(),
            Some("16")
        );
        assert!(
            r.functions
                .iter()
                .all(|f| f.cur_link_speed.is_none() && f.cur_link_width.is_none())
        );
        // The invented switch's children are in other domains: no secondary bus.
        assert_eq!(sw.secondary_bus, None);
        // No <gpu>, no <nic>: nothing NVML-like, and net devices are not carried.
        assert!(r.gpus.is_empty() && r.foreign_gdr.is_empty());
        assert!(!r.carried.os_devices && r.carried.numa_node && !r.carried.driver);
    }

    #[test]
    fn azure_ndv5() {
        let r = parse(NDV5).unwrap();
        let numa = r.numa.as_ref().unwrap();
        assert_eq!(numa.len(), 2);
        assert_eq!(numa[0].cpulist.as_deref(), Some("0-47"));
        assert_eq!(numa[1].cpulist.as_deref(), Some("48-95"));
        // 8 invented switches ffff:ff:01.0..08.0, each with one GPU and one NIC.
        for i in 1..=8 {
            let sw = format!("ffff:ff:{i:02x}.0");
            let kids = children(&r, &sw);
            assert_eq!(kids.len(), 2, "{sw}");
            assert!(kids.iter().any(|f| f.class == Some(0x030200)));
            assert!(kids.iter().any(|f| f.class == Some(0x020700)));
            assert_eq!(func(&r, &sw).numa_node, Some(if i <= 4 { 0 } else { 1 }));
            // vendor="0x0000": what the file says.
            assert_eq!(func(&r, &sw).vendor, Some(0));
        }
        assert_eq!(func(&r, "0008:00:00.0").parent, Some(bdf("ffff:ff:04.0")));
        assert_eq!(func(&r, "0104:00:00.0").parent, Some(bdf("ffff:ff:04.0")));
        assert_eq!(
            func(&r, "0008:00:00.0").max_link_speed.as_deref(),
            Some("32.0 GT/s PCIe")
        );
    }

    #[test]
    fn aws_p4d() {
        let r = parse(P4D).unwrap();
        // "Each group has 2 GPUs and 1 NIC behind a PCIe switch", two groups per socket.
        for (sw, numa) in [
            ("ffff:ff:01.0", 0),
            ("ffff:ff:02.0", 0),
            ("ffff:ff:03.0", 1),
            ("ffff:ff:04.0", 1),
        ] {
            let kids = children(&r, sw);
            assert_eq!(
                kids.iter().filter(|f| f.class == Some(0x030200)).count(),
                2,
                "{sw}"
            );
            assert_eq!(
                kids.iter().filter(|f| f.class == Some(0x020000)).count(),
                1,
                "{sw}"
            );
            assert!(kids.iter().all(|f| f.numa_node == Some(numa)));
        }
        // GPU 0 (10:1c.0) and NIC 0 (10:1b.0, EFA 1d0f:efa0) under switch 0.
        let nic0 = func(&r, "0000:10:1b.0");
        assert_eq!((nic0.vendor, nic0.device), (Some(0x1d0f), Some(0xefa0)));
        assert_eq!(nic0.parent, Some(bdf("ffff:ff:01.0")));
        assert_eq!(func(&r, "0000:10:1c.0").device, Some(0x20b0));
        // Children of switch 0 all on bus 0x10 but in another domain than ffff: unknown.
        assert_eq!(func(&r, "ffff:ff:01.0").secondary_bus, None);
        assert_eq!(
            func(&r, "0000:10:1c.0").max_link_speed.as_deref(),
            Some("8.0 GT/s PCIe")
        );
        let numa = r.numa.as_ref().unwrap();
        // affinity 000000ff,ffff0000,00ffffff: CPUs 0-23 and 48-71.
        assert_eq!(numa[0].cpulist.as_deref(), Some("0-23,48-71"));
        assert_eq!(numa[1].cpulist.as_deref(), Some("24-47,72-95"));
    }

    #[test]
    fn aws_p5_no_class_odd_speed() {
        let r = parse(P5).unwrap();
        // "4 groups of PCIe hierarchy under each socket", "4 NIC behind a PCIe switch",
        // "GPUs are not reported in this file".
        assert_eq!(r.functions.len(), 8 + 32);
        for sw in [
            "0000:45:00.0",
            "0000:56:00.0",
            "0000:67:00.0",
            "0000:78:00.0",
        ] {
            assert_eq!(children(&r, sw).len(), 4);
            assert_eq!(func(&r, sw).numa_node, Some(0));
            assert_eq!(func(&r, sw).class, None);
        }
        assert_eq!(func(&r, "0000:c9:00.0").parent, Some(bdf("0000:bc:00.0")));
        assert_eq!(func(&r, "0000:c9:00.0").numa_node, Some(1));
        // No affinity attribute: the NUMA node is known, its CPUs are not.
        assert!(r.numa.as_ref().unwrap().iter().all(|n| n.cpulist.is_none()));
        // "32 GT/s PCIe/s" names a Gen5 rate.
        assert_eq!(
            func(&r, "0000:4f:00.0").max_link_speed.as_deref(),
            Some("32.0 GT/s PCIe")
        );
        assert!(r.gpus.is_empty());
    }

    /// A dump as NCCL writes it (shape from NCCL's xml.cc; values made up for the test).
    const DUMP: &str = r#"<system version="1">
  <cpu numaid="0" affinity="00000000,0000ffff" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:16:00.0" class="0x060400" vendor="0x1000" device="0xc030" link_speed="32.0 GT/s PCIe" link_width="16">
      <pci busid="0000:18:00.0" class="0x030200" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe" link_width="16">
        <gpu dev="0" sm="90" rank="0" gdr="1">
          <nvlink target="0000:07:00.0" count="5" tclass="0x068000"/>
          <nvlink target="fffffff:ff:ff.0" count="2" tclass="0x068000"/>
        </gpu>
      </pci>
      <pci busid="0000:19:00.0" class="0x020000" vendor="0x15b3" device="0x1021" link_speed="" link_width="0">
        <nic>
          <net name="mlx5_0" dev="0" speed="400000" port="1" gdr="1"/>
          <net name="mlx5_1" dev="1" speed="400000" port="1" gdr="0"/>
        </nic>
      </pci>
    </pci>
    <pci busid="0000:2a:00.0" class="0x030000" vendor="0x10de" device="0x2684" link_speed="16.0 GT/s PCIe" link_width="16">
      <gpu dev="1" sm="89" rank="1" gdr="0"/>
    </pci>
    <nic>
      <net name="eth0" dev="2" speed="10000" port="0" gdr="0"/>
    </nic>
  </cpu>
</system>"#;

    #[test]
    fn dump() {
        let r = parse(DUMP).unwrap();
        assert!(r.carried.os_devices);
        let nic = func(&r, "0000:19:00.0");
        assert_eq!(nic.rdma_devices, ["mlx5_0", "mlx5_1"]);
        assert_eq!(
            (nic.max_link_speed.as_deref(), nic.max_link_width.as_deref()),
            (None, None)
        );
        assert_eq!(nic.parent, Some(bdf("0000:16:00.0")));
        // Children on two buses (NCCL skipped the downstream ports): secondary bus unknown.
        assert_eq!(func(&r, "0000:16:00.0").secondary_bus, None);
        let g0 = r
            .gpus
            .iter()
            .find(|g| g.bdf == bdf("0000:18:00.0"))
            .unwrap();
        assert_eq!(g0.sm, Some(90));
        let links = g0.nvlinks.as_ref().unwrap();
        assert_eq!(links.len(), 7);
        assert!(
            links
                .iter()
                .all(|l| l.active && l.remote_kind.as_deref() == Some("switch"))
        );
        assert_eq!(links[0].remote_bus_id, Some(bdf("0000:07:00.0")));
        assert_eq!(links[6].remote_bus_id, None);
        let g1 = r
            .gpus
            .iter()
            .find(|g| g.bdf == bdf("0000:2a:00.0"))
            .unwrap();
        assert_eq!(g1.nvlinks.as_deref(), Some(&[][..]));
        assert!(r.foreign_gdr.contains(&ForeignGdr::Gpu {
            gpu: bdf("0000:18:00.0"),
            gdr: true
        }));
        assert!(r.foreign_gdr.contains(&ForeignGdr::Gpu {
            gpu: bdf("0000:2a:00.0"),
            gdr: false
        }));
        assert!(r.foreign_gdr.contains(&ForeignGdr::Net {
            nic: Some(bdf("0000:19:00.0")),
            name: "mlx5_1".into(),
            gdr: false
        }));
        assert!(r.foreign_gdr.contains(&ForeignGdr::Net {
            nic: None,
            name: "eth0".into(),
            gdr: false
        }));
        assert_eq!(r.numa.as_ref().unwrap()[0].cpulist.as_deref(), Some("0-15"));
        assert!(r.notes.iter().any(|n| n.contains("fffffff:ff:ff.0")));
    }

    #[test]
    fn versions_and_not_nccl() {
        let r = parse("<system version=\"2\"><cpu numaid=\"0\"/></system>").unwrap();
        assert!(r.notes.iter().any(|n| n.contains("version \"2\"")));
        assert!(matches!(
            parse("<topology version=\"2.0\"/>"),
            Err(RecordError::NotThisFormat(..))
        ));
        assert!(matches!(
            parse("<system version=\"1\"/>"),
            Err(RecordError::Malformed(_))
        ));
        assert!(matches!(parse("<system"), Err(RecordError::Malformed(_))));
        assert!(!looks_like("<topology>"));
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = looks_like(&s);
            let _ = parse(&s);
            let _ = cpumap_to_cpulist(&s);
        }

        #[test]
        fn never_panics_on_nccl_shaped_input(
            busid in "[0-9a-f:.]{0,14}",
            class in "(0x)?[0-9a-f]{0,8}",
            speed in "[0-9. ]{0,6}(GT/s)?( PCIe)?",
            width in "[0-9]{0,3}",
            count in "[0-9-]{0,4}",
            gdr in "[0-9-]{0,3}",
            aff in "[0-9a-f,]{0,20}",
            numa in "-?[0-9]{0,3}",
        ) {
            let text = format!(
                "<system version=\"1\"><cpu numaid=\"{numa}\" affinity=\"{aff}\"><pci busid=\"{busid}\" class=\"{class}\" link_speed=\"{speed}\" link_width=\"{width}\"><pci busid=\"{busid}\" class=\"{class}\"><gpu sm=\"{width}\" gdr=\"{gdr}\"><nvlink target=\"{busid}\" count=\"{count}\" tclass=\"{class}\"/></gpu><nic><net name=\"mlx5_{width}\" gdr=\"{gdr}\"/></nic></pci></pci></cpu></system>"
            );
            let _ = parse(&text);
        }
    }
}
