//! RDMA-capable NIC families: which PCI functions are NICs that should carry an RDMA device,
//! and which kernel module gives them one. A NIC is found on the PCI bus; its RDMA
//! device (/sys/class/infiniband) is an attribute it has or lacks, and lacking it is a finding
//! (`rdma.driver`), not an absence.
//!
//! Pure lookups over facts already read (vendor, class, bound driver): no I/O here, and nothing
//! about health (that is `checks`).

use crate::pci::ClassCode;
use serde::Serialize;

/// An RDMA-capable NIC family: the PCI driver that runs the NIC and the kernel module that
/// registers its RDMA device on top of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Family {
    pub name: &'static str,
    pub vendor: u16,
    /// The PCI (Ethernet/InfiniBand) driver, e.g. `mlx5_core`.
    pub pci_driver: &'static str,
    /// The module that provides the RDMA device, e.g. `mlx5_ib` (for EFA, the PCI driver
    /// itself registers it).
    pub rdma_module: &'static str,
}

/// Families by the driver that binds them, from each kernel's drivers/infiniband/hw/* (the
/// RDMA driver names its PCI driver as an auxiliary-bus or netdev-notifier parent). Intel's
/// X722 (i40e -> irdma, iWARP on LAN-on-motherboard ports) is left out on purpose: those ports
/// carry management traffic, and a missing RDMA device there is no misconfiguration.
pub const FAMILIES: &[Family] = &[
    Family {
        name: "NVIDIA/Mellanox ConnectX-4 and later, BlueField",
        vendor: 0x15b3,
        pci_driver: "mlx5_core",
        rdma_module: "mlx5_ib",
    },
    Family {
        name: "NVIDIA/Mellanox ConnectX-3",
        vendor: 0x15b3,
        pci_driver: "mlx4_core",
        rdma_module: "mlx4_ib",
    },
    Family {
        name: "Broadcom NetXtreme-E",
        vendor: 0x14e4,
        pci_driver: "bnxt_en",
        rdma_module: "bnxt_re",
    },
    Family {
        name: "Intel E810",
        vendor: 0x8086,
        pci_driver: "ice",
        rdma_module: "irdma",
    },
    Family {
        name: "AWS Elastic Fabric Adapter",
        vendor: 0x1d0f,
        pci_driver: "efa",
        rdma_module: "efa",
    },
    Family {
        name: "Chelsio T5/T6 (iWARP)",
        vendor: 0x1425,
        pci_driver: "cxgb4",
        rdma_module: "iw_cxgb4",
    },
    Family {
        name: "Marvell/QLogic FastLinQ",
        vendor: 0x1077,
        pci_driver: "qede",
        rdma_module: "qedr",
    },
    Family {
        name: "Microsoft Azure MANA",
        vendor: 0x1414,
        pci_driver: "mana",
        rdma_module: "mana_ib",
    },
];

/// ConnectX-3 (Pro) device IDs: served by mlx4, every later Mellanox NIC by mlx5.
const MLX4_DEVICES: &[u16] = &[0x1003, 0x1004, 0x1007];
/// EFA device IDs (efa0 .. efa3 generations).
const EFA_DEVICES: std::ops::RangeInclusive<u16> = 0xefa0..=0xefa3;

/// The ConnectX-8 Data Direct function (15b3:2100, "CX8 Data Direct Interface" in the PCI ID
/// database; rdma-core kernel-boot/rdma_topo calls it `cx_dma`): the NIC's DMA path placed
/// beside a GPU on Direct-NIC platforms. It carries no RDMA device of its own (its PF does), so
/// it is never a NIC here.
pub const CX8_DATA_DIRECT: u16 = 0x2100;

/// How a NIC model's GPUDirect RDMA reaches GPU memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GdrMemory {
    /// nvidia-peermem (ibv_reg_mr on a GPU pointer) or dma-buf (ibv_reg_dmabuf_mr).
    PeermemOrDmabuf,
    /// dma-buf only: AWS EFA registers GPU memory through ibv_reg_dmabuf_mr (the efa kernel
    /// driver's dma-buf memory regions, Linux >= 5.12 / efa driver 2.x); nvidia-peermem is not
    /// its path.
    DmabufOnly,
}

/// A recognised RDMA NIC model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct NicModel {
    pub name: &'static str,
    pub gdr_memory: GdrMemory,
}

/// RDMA NIC models by vendor and device id, from the PCI ID database (pci.ids 2025.07.11):
/// ConnectX-7 (15b3:1021), ConnectX-8 (15b3:1023), ConnectX-9 (15b3:1025), BlueField-3's
/// integrated ConnectX-7 (15b3:a2dc), AWS EFA (1d0f:efa0..efa3). Other mlx5 devices are NICs
/// too (`family`) but unnamed here.
pub fn model(vendor: u16, device: u16) -> Option<NicModel> {
    let (name, gdr_memory) = match (vendor, device) {
        (0x15b3, 0x1021) => ("ConnectX-7", GdrMemory::PeermemOrDmabuf),
        (0x15b3, 0x1023) => ("ConnectX-8", GdrMemory::PeermemOrDmabuf),
        (0x15b3, 0x1025) => ("ConnectX-9", GdrMemory::PeermemOrDmabuf),
        (0x15b3, 0xa2dc) => ("BlueField-3", GdrMemory::PeermemOrDmabuf),
        (0x1d0f, 0xefa0) => ("AWS EFA (efa0)", GdrMemory::DmabufOnly),
        (0x1d0f, 0xefa1) => ("AWS EFA (efa1)", GdrMemory::DmabufOnly),
        (0x1d0f, 0xefa2) => ("AWS EFA (efa2)", GdrMemory::DmabufOnly),
        (0x1d0f, 0xefa3) => ("AWS EFA (efa3)", GdrMemory::DmabufOnly),
        _ => return None,
    };
    Some(NicModel { name, gdr_memory })
}

/// What `family` looks at in a PCI function (`inventory::PciFunction::ids`): this module takes
/// plain facts, so it does not import the inventory that asks it (one way: inventory -> nic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FunctionIds<'a> {
    pub class: Option<u32>,
    pub vendor: Option<u16>,
    pub device: Option<u16>,
    /// The bound driver's name.
    pub driver: Option<&'a str>,
    /// A virtual function (it has a `physfn`).
    pub virtual_function: bool,
}

/// The RDMA-capable family of a PCI function, when it is a NIC of one: a network or
/// InfiniBand class function bound to a family's driver, or, with no driver bound, a physical
/// function whose vendor and device say the family (Mellanox: every NIC; AWS: EFA IDs). A
/// function bound to another driver (vfio-pci for a VM, a DPDK driver) is not one here: its
/// RDMA device belongs to whoever owns it.
pub fn family(f: FunctionIds) -> Option<&'static Family> {
    if !f.class.map(ClassCode).is_some_and(ClassCode::is_network) {
        return None;
    }
    let vendor = f.vendor?;
    match f.driver {
        Some(d) => FAMILIES
            .iter()
            .find(|fam| fam.pci_driver == d && fam.vendor == vendor),
        None if f.virtual_function => None,
        None => {
            let driver = match (vendor, f.device?) {
                (0x15b3, CX8_DATA_DIRECT) => return None,
                (0x15b3, d) if MLX4_DEVICES.contains(&d) => "mlx4_core",
                (0x15b3, _) => "mlx5_core",
                (0x1d0f, d) if EFA_DEVICES.contains(&d) => "efa",
                _ => return None,
            };
            FAMILIES.iter().find(|fam| fam.pci_driver == driver)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(class: u32, vendor: u16, device: u16, driver: Option<&str>) -> FunctionIds<'_> {
        FunctionIds {
            class: Some(class),
            vendor: Some(vendor),
            device: Some(device),
            driver,
            virtual_function: false,
        }
    }

    #[test]
    fn families() {
        let m = |x: Option<&Family>| x.map(|x| x.rdma_module);
        // ConnectX-4 InfiniBand (hwloc's 32intel64-2p8co2t+8ve), bound or not.
        assert_eq!(
            m(family(f(0x020700, 0x15b3, 0x1013, Some("mlx5_core")))),
            Some("mlx5_ib")
        );
        assert_eq!(
            m(family(f(0x020700, 0x15b3, 0x1013, None))),
            Some("mlx5_ib")
        );
        assert_eq!(
            m(family(f(0x020000, 0x15b3, 0x1007, None))),
            Some("mlx4_ib")
        );
        assert_eq!(
            m(family(f(0x020000, 0x14e4, 0x1750, Some("bnxt_en")))),
            Some("bnxt_re")
        );
        assert_eq!(
            m(family(f(0x020000, 0x8086, 0x1593, Some("ice")))),
            Some("irdma")
        );
        assert_eq!(m(family(f(0x020000, 0x1d0f, 0xefa1, None))), Some("efa"));
        // Today's NICs: ConnectX-7/8, BlueField-3, EFA's four generations, bound or not.
        for d in [0x1021, 0x1023, 0xa2dc] {
            assert_eq!(
                m(family(f(0x020700, 0x15b3, d, None))),
                Some("mlx5_ib"),
                "{d:04x}"
            );
            assert_eq!(
                m(family(f(0x020000, 0x15b3, d, Some("mlx5_core")))),
                Some("mlx5_ib"),
                "{d:04x}"
            );
            assert!(model(0x15b3, d).is_some(), "{d:04x}");
        }
        for d in 0xefa0..=0xefa3 {
            assert_eq!(
                m(family(f(0x020000, 0x1d0f, d, None))),
                Some("efa"),
                "{d:04x}"
            );
            assert_eq!(
                model(0x1d0f, d).map(|x| x.gdr_memory),
                Some(GdrMemory::DmabufOnly)
            );
        }
        assert_eq!(model(0x15b3, 0x1023).unwrap().name, "ConnectX-8");
        assert_eq!(model(0x15b3, 0x101d), None);
        // ConnectX-8's Data Direct function is no NIC of its own, bound or not.
        assert_eq!(m(family(f(0x020000, 0x15b3, 0x2100, None))), None);
        assert_eq!(
            m(family(f(
                0x020000,
                0x15b3,
                0x2100,
                Some("mlx5_data_direct")
            ))),
            None
        );
        // Not RDMA NICs here: X722 on i40e, a ConnectX given to a VM, a Broadcom tg3, a
        // Mellanox function that is no NIC (a BlueField's management function, class 0x0880).
        assert_eq!(m(family(f(0x020000, 0x8086, 0x37d2, Some("i40e")))), None);
        assert_eq!(
            m(family(f(0x020000, 0x15b3, 0x101d, Some("vfio-pci")))),
            None
        );
        assert_eq!(m(family(f(0x020000, 0x14e4, 0x165f, None))), None);
        assert_eq!(m(family(f(0x088000, 0x15b3, 0xc2d5, None))), None);
        // An unbound virtual function: its PF's owner decides.
        let mut vf = f(0x020000, 0x15b3, 0x101e, None);
        vf.virtual_function = true;
        assert_eq!(m(family(vf)), None);
    }
}
