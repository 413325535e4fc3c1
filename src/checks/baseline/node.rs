//! The node as a baseline sees it: each device by its PCI position, its link capped by the
//! port above, its model and firmware. Shared by capture and by every comparison.

use super::schema::{AerSource, PcieShape};
use crate::inventory::{Inventory, PciFunction};
use crate::reading::Reading;
use crate::topo::{Device, Topology};
use std::collections::BTreeMap;

/// The PCI position of a function: root complex, the slot of every bridge above it, its own
/// slot. Stable across identical machines and across a device above it going missing.
pub fn position(f: &PciFunction) -> String {
    let mut s = f.root_complex.clone();
    for b in f.upstream.iter().chain(std::iter::once(&f.bdf)) {
        s.push_str(&format!("/{:02x}.{:x}", b.device, b.function));
    }
    s
}

/// The kernel release from `/proc/version` ("Linux version 6.8.0-45-generic (builder...) ..."
/// gives "6.8.0-45-generic"): the build host and date are not part of a version to pin.
pub(super) fn kernel_release(inv: &Inventory) -> Option<String> {
    let line = inv.host.kernel_version.value()?;
    let rest = line.trim().strip_prefix("Linux version ")?;
    rest.split_whitespace().next().map(str::to_string)
}

/// The node's devices, indexed the ways a comparison needs.
pub(super) struct Node<'a> {
    pub(super) inv: &'a Inventory,
    pub(super) topo: &'a Topology,
    pub(super) devices: BTreeMap<crate::pci::Bdf, &'a Device>,
}

impl<'a> Node<'a> {
    pub(super) fn new(inv: &'a Inventory, topo: &'a Topology) -> Self {
        Node {
            inv,
            topo,
            devices: topo.devices.iter().map(|d| (d.bdf, d)).collect(),
        }
    }

    pub(super) fn position(&self, bdf: crate::pci::Bdf) -> String {
        match self.inv.pci.get(&bdf) {
            Some(f) => position(f),
            None => format!("?/{bdf}"),
        }
    }

    pub(super) fn pci_id(&self, bdf: crate::pci::Bdf) -> Option<String> {
        let f = self.inv.pci.get(&bdf)?;
        Some(format!(
            "{:04x}:{:04x}",
            f.vendor.value()?,
            f.device.value()?
        ))
    }

    /// The link as the baseline sees it: capability capped by the port above (`aer` left out).
    pub(super) fn pcie(&self, bdf: crate::pci::Bdf, with_gen: bool) -> PcieShape {
        let d = self.devices.get(&bdf);
        let link = d.map(|d| &d.link);
        let parent = d
            .and_then(|d| d.upstream.last())
            .and_then(|p| self.devices.get(p));
        let cap = |own: Option<u8>, up: Option<u8>| match (own, up) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, None) => a,
            (None, _) => None,
        };
        PcieShape {
            max_gen: cap(
                link.and_then(|l| l.max_gen),
                parent.and_then(|p| p.link.max_gen),
            ),
            max_width: cap(
                link.and_then(|l| l.max_width),
                parent.and_then(|p| p.link.max_width),
            ),
            cur_width: link.and_then(|l| l.cur_width),
            cur_gen: if with_gen {
                link.and_then(|l| l.cur_gen)
            } else {
                None
            },
            // Where errors are recorded is read apart (`aer`): a comparison needs its reason
            // where it is unknown, capture only its value.
            aer: None,
        }
    }

    /// Where the device's PCIe errors are recorded (as `pcie.aer` reads them), or why that is
    /// unknown.
    pub(super) fn aer(&self, bdf: crate::pci::Bdf) -> Reading<AerSource> {
        match self.inv.pci.get(&bdf) {
            Some(f) => crate::checks::aer_source(self.inv, f),
            None => Reading::unknown(format!("{bdf} is not on the PCI bus")),
        }
    }

    /// Label -> (position, display name) for GPUs and NICs.
    pub(super) fn ends(&self) -> BTreeMap<String, (String, String)> {
        let mut m = BTreeMap::new();
        for g in &self.topo.gpus {
            m.insert(g.label.clone(), (self.position(g.bdf), g.label.clone()));
        }
        for n in &self.topo.nics {
            m.insert(
                n.label.clone(),
                (self.position(n.bdf), n.rdma_device.clone()),
            );
        }
        m
    }

    pub(super) fn nic_model(&self, rdma_device: &str) -> Option<String> {
        let r = self.inv.rdma.iter().find(|r| r.name == rdma_device)?;
        r.hca_type.value().or(r.board_id.value()).cloned()
    }

    pub(super) fn nic_fw(&self, rdma_device: &str) -> Option<String> {
        self.inv
            .rdma
            .iter()
            .find(|r| r.name == rdma_device)?
            .fw_ver
            .value()
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_uses_slots_not_bus_numbers() {
        let f = |bus: u8, up: Vec<crate::pci::Bdf>| PciFunction {
            bdf: crate::pci::Bdf {
                domain: 0,
                bus,
                device: 0,
                function: 0,
            },
            sysfs_path: String::new(),
            root_complex: "pci0000:c0".into(),
            upstream: up,
            class: Reading::unknown("not read"),
            vendor: Reading::unknown("not read"),
            device: Reading::unknown("not read"),
            driver: Reading::unknown("not read"),
            numa_node: Reading::unknown("not read"),
            local_cpulist: Reading::unknown("not read"),
            link: crate::inventory::Link::not_read(),
            config: Reading::unknown("not read"),
            physfn: Reading::unknown("not read"),
        };
        let rp = |bus: u8| crate::pci::Bdf {
            domain: 0,
            bus,
            device: 1,
            function: 1,
        };
        assert_eq!(position(&f(0xc1, vec![rp(0xc0)])), "pci0000:c0/01.1/00.0");
        // Same slot, renumbered bus: same position.
        assert_eq!(
            position(&f(0xc2, vec![rp(0xc0)])),
            position(&f(0xc1, vec![rp(0xc0)]))
        );
    }
}
