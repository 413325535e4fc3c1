//! The machine as an NCCL topology file (`NCCL_TOPO_FILE`): `<system version="1">` holding one
//! `<cpu numaid=.. affinity=..>` per NUMA node, under it one `<pci>` per PCIe switch (its
//! upstream port) and under those each GPU (`<pci ..><gpu><nvlink ../></gpu></pci>`) and RDMA
//! NIC (`<pci ..><nic><net name=.. ../></nic></pci>`), with link speed and width as NCCL reads
//! them from sysfs: the tree NCCL's own `ncclTopoGetXmlFromSys` builds, so that NCCL's path
//! classes on the file are the ones it computes on the machine (and gpudoctor's matrix gives).
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
    if let Some(c) = f.class.value() {
        e = e.attr("class", format!("0x{c:06x}"));
    }
    if let Some(v) = f.vendor.value() {
        e = e.attr("vendor", format!("0x{v:04x}"));
    }
    if let Some(d) = f.device.value() {
        e = e.attr("device", format!("0x{d:04x}"));
    }
    let parent = f.upstream.last().and_then(|p| inv.pci.get(p));
    let lower = |own: Option<u8>, up: Option<u8>| match (own, up) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, _) => a,
    };
    let speed = lower(
        f.link.max_gen.value().copied(),
        parent.and_then(|p| p.link.max_gen.value().copied()),
    );
    if let Some(s) = speed.and_then(speed_string) {
        e = e.attr("link_speed", s);
    }
    if let Some(w) = lower(
        f.link.max_width.value().copied(),
        parent.and_then(|p| p.link.max_width.value().copied()),
    ) {
        e = e.attr("link_width", w.to_string());
    }
    e
}

/// The `<pci>` NCCL puts a NIC's nets under: function 0 of the physical function (see
/// `topo_xml`), where the inventory has that function; else the function itself.
fn nccl_nic_bdf(inv: &Inventory, bdf: Bdf) -> Bdf {
    let base = inv
        .pci
        .get(&bdf)
        .and_then(|f| f.physfn.value().copied())
        .unwrap_or(bdf);
    let merged = Bdf {
        function: 0,
        ..base
    };
    if inv.pci.contains_key(&merged) {
        merged
    } else {
        base
    }
}

/// NCCL's parent of a PCI function: the bridge two levels up its chain of upstream bridges
/// (`upstream` runs from the root port down to the direct parent); `None`: the CPU (the
/// chain is shorter than two, so NCCL's walk up the sysfs path met the root complex).
fn nccl_parent(inv: &Inventory, bdf: Bdf) -> Option<Bdf> {
    let up = &inv.pci.get(&bdf)?.upstream;
    up.len().checked_sub(2).map(|i| up[i])
}

/// Render the topology file.
pub fn topo_xml(inv: &Inventory, topo: &Topology) -> String {
    // Leaves: GPUs and RDMA NICs with a PCI function.
    let mut leaves: BTreeMap<Bdf, Element> = BTreeMap::new();
    gpu_leaves(inv, topo, &mut leaves);
    nic_leaves(inv, topo, &mut leaves);

    // The tree NCCL builds from sysfs (src/graph/xml.cc, ncclTopoGetXmlFromSys): a device's
    // parent is the bridge two levels up its sysfs path (past the switch's downstream port,
    // to the switch's upstream port), or the CPU of its NUMA node where the path reaches the
    // root complex first. So there is one `<pci>` per switch and none per root port or
    // downstream port, and NCCL's path rules (src/graph/paths.cc: one hop between two PCI
    // nodes is PXB, a hop through a CPU PHB) give the classes gpudoctor's matrix gives.
    let mut children: BTreeMap<Bdf, BTreeSet<Bdf>> = BTreeMap::new();
    let mut tops: BTreeMap<String, BTreeSet<Bdf>> = BTreeMap::new();
    let mut todo: Vec<Bdf> = leaves.keys().copied().collect();
    let mut seen: BTreeSet<Bdf> = BTreeSet::new();
    while let Some(bdf) = todo.pop() {
        if !seen.insert(bdf) {
            continue;
        }
        match nccl_parent(inv, bdf) {
            Some(parent) => {
                children.entry(parent).or_default().insert(bdf);
                todo.push(parent);
            }
            None => {
                // NCCL takes the NUMA node of the device whose parent is the CPU.
                let numa = inv
                    .pci
                    .get(&bdf)
                    .and_then(|t| t.numa_node.value())
                    .map_or("-1".to_string(), |n| n.to_string());
                tops.entry(numa).or_default().insert(bdf);
            }
        }
    }
    fn build(
        bdf: Bdf,
        inv: &Inventory,
        children: &BTreeMap<Bdf, BTreeSet<Bdf>>,
        leaves: &mut BTreeMap<Bdf, Element>,
    ) -> Element {
        // A leaf can itself have leaves below only in odd topologies; NCCL nests them too.
        let mut e = leaves.remove(&bdf).unwrap_or_else(|| pci_element(inv, bdf));
        for c in children.get(&bdf).into_iter().flatten() {
            e.children.push(build(*c, inv, children, leaves));
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
            .and_then(|n| n.cpulist.value())
            .and_then(|c| cpumap(c))
        {
            cpu = cpu.attr("affinity", map);
        }
        for top in &tops[numa] {
            cpu.children.push(build(*top, inv, &children, &mut leaves));
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
/// Each GPU as NCCL writes it: its `<pci>` holding a `<gpu>` with one `<nvlink>` per peer.
fn gpu_leaves(inv: &Inventory, topo: &Topology, leaves: &mut BTreeMap<Bdf, Element>) {
    let nvml_by_bdf: BTreeMap<String, &crate::nvml::NvmlGpu> = inv
        .nvml
        .gpus
        .iter()
        .filter_map(|g| Some((g.bus_id.value()?.to_ascii_lowercase(), g)))
        .collect();
    for g in &topo.gpus {
        let mut gpu = Element::new("gpu");
        if let Some(n) = nvml_by_bdf.get(&g.bdf.nvml().to_ascii_lowercase()) {
            // Count active links per peer, as NCCL does (target = the NVML bus id, lower case).
            let mut per_peer: BTreeMap<String, (u32, Option<String>)> = BTreeMap::new();
            for l in n.nvlinks.iter().filter(|l| l.active) {
                let Some(remote) = l.remote_bus_id.value() else {
                    continue;
                };
                let target = remote.to_ascii_lowercase();
                let tclass = match l.remote_device_type.value() {
                    Some(NvLinkRemote::Switch) => Some(NVSWITCH_CLASS.to_string()),
                    Some(NvLinkRemote::Gpu) => remote
                        .parse::<Bdf>()
                        .ok()
                        .and_then(|b| inv.pci.get(&b))
                        .and_then(|f| f.class.value())
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
}

/// Each RDMA NIC as NCCL writes it: a `<pci>` holding a `<nic>` with a `<net>` per port.
fn nic_leaves(inv: &Inventory, topo: &Topology, leaves: &mut BTreeMap<Bdf, Element>) {
    // NICs as NCCL's IB transport names their PCI device (src/transport/net_ib/init.cc,
    // ncclIbGetPciPath): the function digit of the sysfs path zeroed, so the ports of a
    // multi-port NIC (0000:29:00.0 and .1) are one `<pci>` with two `<net>`s; and an SR-IOV
    // virtual function under its physical function (NCCL_IB_MERGE_VFS=1, the default, zeroes
    // the device digits too; gpudoctor reads the VF's physfn link instead).
    let mut nics: BTreeMap<Bdf, Element> = BTreeMap::new();
    for n in &topo.nics {
        let r = inv.rdma.iter().find(|r| r.name == n.rdma_device);
        let host = nccl_nic_bdf(inv, n.bdf);
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
            if let Some(guid) = r.and_then(|r| r.node_guid.value()) {
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
