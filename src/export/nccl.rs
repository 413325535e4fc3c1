//! The machine as an NCCL topology file (`NCCL_TOPO_FILE`): `<system version="1">` holding one
//! `<cpu numaid=.. affinity=..>` per NUMA node, under it the chain of PCI bridges down to each
//! GPU (`<pci ..><gpu><nvlink ../></gpu></pci>`) and RDMA NIC (`<pci ..><nic><net name=..
//! ../></nic></pci>`), with link speed and width as NCCL reads them from sysfs.
//!
//! Written from reading NCCL's src/graph/xml.cc and topo.cc (no code taken): its parser wants
//! no XML declaration, double-quoted attributes separated by one space, and one element per
//! tag; it keeps every attribute a file gives and reads from sysfs/NVML only the ones that are
//! missing; `link_speed` is the sysfs string ("32.0 GT/s PCIe"), the lower of the device's and
//! its parent port's `max_link_speed`, `link_width` the lower of the two `max_link_width`s;
//! `<nvlink>` elements under a `<gpu>` replace NCCL's own NVLink detection; a `<net>` is matched
//! to a device of NCCL's net plugin by `name`, and nodes no local GPU or NIC uses are trimmed.
//!
//! What gpudoctor does not know is left out (NCCL then reads it itself), never invented: no
//! `sm`, `dev`, `rank` or `gdr` on GPUs (NCCL fills them from CUDA/NVML for the GPUs it runs
//! on), no `link_speed` where sysfs had none, no CPU `arch`/`vendor`/`familyid` (NCCL reads
//! cpuid), no `dev`/`latency`/`maxconn`/`gdr` on nets (the net plugin's answer).
//!
//! Pure: inventory + topology in, text out.

use crate::facts::NvLinkRemote;
use crate::inventory::Inventory;
use crate::pci::Bdf;
use crate::topo::Topology;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// NCCL_TOPO_XML_VERSION in NCCL's xml.h.
pub const NCCL_TOPO_XML_VERSION: u32 = 1;

/// NCCL's class for an NVSwitch (what it assumes for an NVLink peer a VM hides).
const NVSWITCH_CLASS: &str = "0x068000";

fn speed_string(generation: u8) -> Option<&'static str> {
    // The strings Linux >= 5.7 writes to max_link_speed (and NCCL's table matches).
    Some(match generation {
        1 => "2.5 GT/s PCIe",
        2 => "5.0 GT/s PCIe",
        3 => "8.0 GT/s PCIe",
        4 => "16.0 GT/s PCIe",
        5 => "32.0 GT/s PCIe",
        6 => "64.0 GT/s PCIe",
        _ => return None,
    })
}

/// A cpulist ("0-15,32-47") as the kernel's cpumap: 32-bit hex groups, most significant
/// first, comma separated ("0000ffff,0000ffff").
pub fn cpumap(cpulist: &str) -> Option<String> {
    let cpus = crate::numa::parse_cpulist(cpulist)?;
    let max = *cpus.iter().max()?;
    let groups = (max / 32 + 1) as usize;
    let mut words = vec![0u32; groups];
    for c in cpus {
        words[(c / 32) as usize] |= 1 << (c % 32);
    }
    Some(
        words
            .iter()
            .rev()
            .map(|w| format!("{w:08x}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

fn attr_escape(v: &str) -> String {
    // NCCL's parser has no entity decoding; quotes and angle brackets cannot appear in what
    // we write (bus ids, hex, numbers, device names), so replace rather than escape.
    v.chars()
        .map(|c| {
            if matches!(c, '"' | '<' | '>' | '&') {
                '_'
            } else {
                c
            }
        })
        .collect()
}

struct Element {
    name: &'static str,
    attrs: Vec<(&'static str, String)>,
    children: Vec<Element>,
}

impl Element {
    fn new(name: &'static str) -> Self {
        Element {
            name,
            attrs: Vec::new(),
            children: Vec::new(),
        }
    }
    fn attr(mut self, k: &'static str, v: impl Into<String>) -> Self {
        self.attrs.push((k, v.into()));
        self
    }
    fn write(&self, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        let _ = write!(out, "{pad}<{}", self.name);
        for (k, v) in &self.attrs {
            let _ = write!(out, " {k}=\"{}\"", attr_escape(v));
        }
        if self.children.is_empty() {
            out.push_str("/>\n");
        } else {
            out.push_str(">\n");
            for c in &self.children {
                c.write(indent + 2, out);
            }
            let _ = writeln!(out, "{pad}</{}>", self.name);
        }
    }
}

/// The PCI facts of one function as NCCL writes them on a `<pci>` element.
fn pci_element(inv: &Inventory, bdf: Bdf) -> Element {
    let mut e = Element::new("pci").attr("busid", bdf.to_string());
    let Some(f) = inv.pci.get(&bdf) else {
        return e;
    };
    if let Some(c) = f.class {
        e = e.attr("class", format!("0x{c:06x}"));
    }
    if let Some(v) = f.vendor {
        e = e.attr("vendor", format!("0x{v:04x}"));
    }
    if let Some(d) = f.device {
        e = e.attr("device", format!("0x{d:04x}"));
    }
    let parent = f.upstream.last().and_then(|p| inv.pci.get(p));
    let lower = |own: Option<u8>, up: Option<u8>| match (own, up) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, _) => a,
    };
    let speed = lower(f.link.max_gen, parent.and_then(|p| p.link.max_gen));
    if let Some(s) = speed.and_then(speed_string) {
        e = e.attr("link_speed", s);
    }
    if let Some(w) = lower(f.link.max_width, parent.and_then(|p| p.link.max_width)) {
        e = e.attr("link_width", w.to_string());
    }
    e
}

/// Render the topology file.
pub fn topo_xml(inv: &Inventory, topo: &Topology) -> String {
    // Leaves: GPUs and RDMA NICs with a PCI function.
    let mut leaves: BTreeMap<Bdf, Element> = BTreeMap::new();
    let nvml_by_bdf: BTreeMap<String, &crate::nvml::NvmlGpu> = inv
        .nvml
        .gpus
        .iter()
        .map(|g| (g.bus_id.to_ascii_lowercase(), g))
        .collect();
    for g in &topo.gpus {
        let mut gpu = Element::new("gpu");
        if let Some(n) = nvml_by_bdf.get(&g.bdf.nvml().to_ascii_lowercase()) {
            // Count active links per peer, as NCCL does (target = the NVML bus id, lower case).
            let mut per_peer: BTreeMap<String, (u32, Option<String>)> = BTreeMap::new();
            for l in n.nvlinks.iter().filter(|l| l.active) {
                let Some(remote) = &l.remote_bus_id else {
                    continue;
                };
                let target = remote.to_ascii_lowercase();
                let tclass = match l.remote_device_type {
                    Some(NvLinkRemote::Switch) => Some(NVSWITCH_CLASS.to_string()),
                    Some(NvLinkRemote::Gpu) => remote
                        .parse::<Bdf>()
                        .ok()
                        .and_then(|b| inv.pci.get(&b))
                        .and_then(|f| f.class)
                        .map(|c| format!("0x{c:06x}"))
                        .or(Some("0x030200".to_string())),
                    _ => None,
                };
                let e = per_peer.entry(target).or_insert((0, tclass));
                e.0 += 1;
            }
            for (target, (count, tclass)) in per_peer {
                let mut nv = Element::new("nvlink")
                    .attr("target", target)
                    .attr("count", count.to_string());
                if let Some(t) = tclass {
                    nv = nv.attr("tclass", t);
                }
                gpu.children.push(nv);
            }
        }
        let mut pci = pci_element(inv, g.bdf);
        pci.children.push(gpu);
        leaves.insert(g.bdf, pci);
    }
    // An SR-IOV virtual function's nets go under its physical function's NIC, as NCCL puts
    // them (NCCL_IB_MERGE_VFS=1, the default: ncclIbGetPciPath zeroes the device and function
    // digits of a VF's PCI path, so a PF and its VFs are one PCI device to the topology).
    let mut nics: BTreeMap<Bdf, Element> = BTreeMap::new();
    for n in &topo.nics {
        let r = inv.rdma.iter().find(|r| r.name == n.rdma_device);
        let host = inv.pci.get(&n.bdf).and_then(|f| f.physfn).unwrap_or(n.bdf);
        let nic = nics.entry(host).or_insert_with(|| Element::new("nic"));
        for p in &n.ports {
            let mut net = Element::new("net")
                .attr("name", n.rdma_device.clone())
                .attr("port", p.port.to_string());
            // NCCL's speed is Mb/s; the port's rate reads "100 Gb/sec (2X HDR)".
            if let Some(gbps) = p
                .rate
                .as_deref()
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok())
            {
                net = net.attr("speed", format!("{:.0}", gbps * 1000.0));
            }
            if let Some(guid) = r.and_then(|r| r.node_guid.as_deref()) {
                let hex: String = guid.chars().filter(|c| c.is_ascii_hexdigit()).collect();
                if !hex.is_empty() {
                    net = net.attr("guid", format!("0x{hex}"));
                }
            }
            nic.children.push(net);
        }
    }
    for (bdf, nic) in nics {
        let mut pci = pci_element(inv, bdf);
        pci.children.push(nic);
        leaves.insert(bdf, pci);
    }

    // The bridge chains above the leaves, merged into one tree per NUMA node.
    #[derive(Default)]
    struct Node {
        children: BTreeSet<Bdf>,
    }
    let mut tree: BTreeMap<Bdf, Node> = BTreeMap::new();
    let mut tops: BTreeMap<String, BTreeSet<Bdf>> = BTreeMap::new();
    for &bdf in leaves.keys() {
        let Some(f) = inv.pci.get(&bdf) else { continue };
        let chain: Vec<Bdf> = f.upstream.iter().copied().chain([bdf]).collect();
        for w in chain.windows(2) {
            tree.entry(w[0]).or_default().children.insert(w[1]);
        }
        let top = chain[0];
        let numa = inv
            .pci
            .get(&top)
            .and_then(|t| t.numa_node)
            .map_or("-1".to_string(), |n| n.to_string());
        tops.entry(numa).or_default().insert(top);
    }
    fn build(
        bdf: Bdf,
        inv: &Inventory,
        tree: &BTreeMap<Bdf, Node>,
        leaves: &mut BTreeMap<Bdf, Element>,
    ) -> Element {
        if let Some(leaf) = leaves.remove(&bdf) {
            // A leaf can itself have leaves below only in odd topologies; NCCL nests them too.
            let mut leaf = leaf;
            if let Some(n) = tree.get(&bdf) {
                for c in &n.children {
                    leaf.children.push(build(*c, inv, tree, leaves));
                }
            }
            return leaf;
        }
        let mut e = pci_element(inv, bdf);
        if let Some(n) = tree.get(&bdf) {
            for c in &n.children {
                e.children.push(build(*c, inv, tree, leaves));
            }
        }
        e
    }
    let mut system = Element::new("system")
        .attr("version", NCCL_TOPO_XML_VERSION.to_string())
        .attr("name", "gpudoctor");
    // NUMA nodes in numeric order, unknown (-1) last.
    let mut numa_ids: Vec<&String> = tops.keys().collect();
    numa_ids.sort_by_key(|k| k.parse::<i64>().map_or(i64::MAX, |v| v));
    for numa in numa_ids {
        let mut cpu = Element::new("cpu").attr("numaid", numa.clone());
        if let Some(map) = numa
            .parse::<u32>()
            .ok()
            .and_then(|id| inv.numa_nodes.iter().find(|n| n.id == id))
            .and_then(|n| n.cpulist.as_deref())
            .and_then(cpumap)
        {
            cpu = cpu.attr("affinity", map);
        }
        for top in &tops[numa] {
            cpu.children.push(build(*top, inv, &tree, &mut leaves));
        }
        system.children.push(cpu);
    }
    let mut out = String::new();
    out.push_str(&format!(
        "<!-- NCCL topology written by gpudoctor {} (NCCL_TOPO_FILE). Attributes gpudoctor could not read are left out for NCCL to read itself. -->\n",
        env!("CARGO_PKG_VERSION")
    ));
    system.write(0, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpumaps() {
        assert_eq!(cpumap("0-31").unwrap(), "ffffffff");
        assert_eq!(cpumap("0-15,32-47").unwrap(), "0000ffff,0000ffff");
        assert_eq!(cpumap("0").unwrap(), "00000001");
        assert_eq!(cpumap("40").unwrap(), "00000100,00000000");
        assert!(cpumap("x").is_none());
    }

    #[test]
    fn speeds_are_sysfs_strings() {
        assert_eq!(speed_string(5), Some("32.0 GT/s PCIe"));
        assert_eq!(speed_string(1), Some("2.5 GT/s PCIe"));
        assert_eq!(speed_string(0), None);
    }
}
