//! NVIDIA GPU models, by PCI device id (and, for ids this table does not hold, by the marketing
//! name NVML or the PCI ID database gives): whether the model can do GPUDirect RDMA in NCCL's
//! view, and whether it is attached to a Grace CPU over NVLink-C2C.
//!
//! NCCL 2.30.7 (src/plugin/net.cc `ncclGpuGdrSupport`) takes a GPU's GPUDirect RDMA support
//! from CUDA's `cudaDevAttrGPUDirectRDMASupported` and writes it as the GPU's `gdr` attribute in
//! its topology; `ncclTopoCheckGdr` (src/graph/paths.cc) then refuses GPUDirect RDMA for every NIC
//! of a GPU with `gdr=0`. CUDA reports 0 on GeForce (and TITAN, CMP) parts: NVIDIA's GPUDirect
//! RDMA documentation names data-center and professional GPUs as the supported ones.
//!
//! Pure lookups: no I/O, and no verdicts (those are `checks::gdr`). A model this table does not
//! know is `Unknown`, never capable.

use serde::Serialize;

/// Whether NCCL can use GPUDirect RDMA with a GPU model at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GdrCapability {
    /// Data-center and professional parts: CUDA reports GPUDirect RDMA supported.
    Capable,
    /// GeForce/TITAN/CMP: CUDA reports it unsupported, NCCL gives the GPU gdr=0.
    NotCapable,
    /// A model this table does not know.
    Unknown,
}

/// What the table says about one GPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuModel {
    /// The model's name as the table knows it (or the name it was judged by).
    pub name: String,
    pub gdr: GdrCapability,
    /// Attached to a Grace CPU over NVLink-C2C (GH200, GB200): NCCL's PATH_C2C to the CPU.
    pub c2c: bool,
    /// How the model was told: "PCI device id 10de:2330", or "name".
    pub basis: String,
}

use GdrCapability::{Capable, NotCapable};

/// (device id, name, capability, C2C-attached). Ids and names from the PCI ID database
/// (pci.ids 2025.07.11, as the pci-ids crate ships it); capability per the module comment.
const MODELS: &[(u16, &str, GdrCapability, bool)] = &[
    // Volta, Turing data-center and Quadro.
    (0x1db0, "Tesla V100 SXM2", Capable, false),
    (0x1db1, "Tesla V100 SXM2 16GB", Capable, false),
    (0x1db4, "Tesla V100 PCIe 16GB", Capable, false),
    (0x1db5, "Tesla V100 SXM2 32GB", Capable, false),
    (0x1db6, "Tesla V100 PCIe 32GB", Capable, false),
    (0x1db8, "Tesla V100 SXM3 32GB", Capable, false),
    (0x1df6, "Tesla V100S PCIe 32GB", Capable, false),
    (0x1dba, "Quadro GV100", Capable, false),
    (0x1eb8, "Tesla T4", Capable, false),
    (0x1e30, "Quadro RTX 6000/8000", Capable, false),
    // Ampere.
    (0x20b0, "A100 SXM4 40GB", Capable, false),
    (0x20b1, "A100 PCIe 40GB", Capable, false),
    (0x20b2, "A100 SXM4 80GB", Capable, false),
    (0x20b3, "A100 SXM 64GB", Capable, false),
    (0x20b5, "A100 PCIe 80GB", Capable, false),
    (0x20b7, "A30 PCIe", Capable, false),
    (0x20b8, "A100X", Capable, false),
    (0x20bd, "A800 SXM4 40GB", Capable, false),
    (0x20f1, "A100 PCIe 40GB", Capable, false),
    (0x20f3, "A800 SXM4 80GB", Capable, false),
    (0x20f5, "A800 80GB PCIe", Capable, false),
    (0x20f6, "A800 40GB PCIe", Capable, false),
    (0x2230, "RTX A6000", Capable, false),
    (0x2231, "RTX A5000", Capable, false),
    (0x2232, "RTX A4500", Capable, false),
    (0x2233, "RTX A5500", Capable, false),
    (0x2235, "A40", Capable, false),
    (0x2236, "A10", Capable, false),
    (0x2237, "A10G", Capable, false),
    (0x2238, "A10M", Capable, false),
    (0x2204, "GeForce RTX 3090", NotCapable, false),
    (0x2203, "GeForce RTX 3090 Ti", NotCapable, false),
    // Hopper.
    (0x2313, "H100 CNX", Capable, false),
    (0x2321, "H100L 94GB", Capable, false),
    (0x2322, "H800 PCIe", Capable, false),
    (0x2324, "H800", Capable, false),
    (0x2329, "H20", Capable, false),
    (0x232c, "H20 HBM3e", Capable, false),
    (0x2330, "H100 SXM5 80GB", Capable, false),
    (0x2331, "H100 PCIe", Capable, false),
    (0x2335, "H200 SXM 141GB", Capable, false),
    (0x2336, "H100", Capable, false),
    (0x2337, "H100 SXM5 64GB", Capable, false),
    (0x2338, "H100 SXM5 96GB", Capable, false),
    (0x2339, "H100 SXM5 94GB", Capable, false),
    (0x233a, "H800L 94GB", Capable, false),
    (0x233b, "H200 NVL", Capable, false),
    (0x233d, "H100 96GB", Capable, false),
    (0x2342, "GH200 120GB / 480GB", Capable, true),
    (0x2348, "GH200 144G HBM3e", Capable, true),
    // Ada.
    (0x2684, "GeForce RTX 4090", NotCapable, false),
    (0x26b1, "RTX 6000 Ada Generation", Capable, false),
    (0x26b2, "RTX 5000 Ada Generation", Capable, false),
    (0x26b3, "RTX 5880 Ada Generation", Capable, false),
    (0x26b5, "L40", Capable, false),
    (0x26b7, "L20", Capable, false),
    (0x26b8, "L40G", Capable, false),
    (0x26b9, "L40S", Capable, false),
    (0x26ba, "L20", Capable, false),
    (0x26bb, "L30", Capable, false),
    (0x27b6, "L2", Capable, false),
    (0x27b8, "L4", Capable, false),
    // Blackwell: data center (B100, B200, GB200 on Grace) and workstation (RTX PRO).
    (0x2901, "B200", Capable, false),
    (0x2920, "B100", Capable, false),
    (0x29bc, "B100", Capable, false),
    (0x2941, "GB200", Capable, true),
    (
        0x2bb1,
        "RTX PRO 6000 Blackwell Workstation Edition",
        Capable,
        false,
    ),
    (0x2bb3, "RTX PRO 5000 Blackwell", Capable, false),
    (
        0x2bb4,
        "RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        Capable,
        false,
    ),
    (
        0x2bb5,
        "RTX PRO 6000 Blackwell Server Edition",
        Capable,
        false,
    ),
    (0x2c31, "RTX PRO 4500 Blackwell", Capable, false),
    (0x2c34, "RTX PRO 4000 Blackwell", Capable, false),
    (0x2b85, "GeForce RTX 5090", NotCapable, false),
    (0x2b87, "GeForce RTX 5090 D", NotCapable, false),
    (0x2c02, "GeForce RTX 5080", NotCapable, false),
    (0x2c05, "GeForce RTX 5070 Ti", NotCapable, false),
    (0x2f04, "GeForce RTX 5070", NotCapable, false),
    (0x2d04, "GeForce RTX 5060 Ti", NotCapable, false),
    (0x2d05, "GeForce RTX 5060", NotCapable, false),
];

/// Consumer lines by name: CUDA reports no GPUDirect RDMA on them.
const CONSUMER_WORDS: [&str; 3] = ["GeForce", "TITAN", "CMP "];

/// The model of an NVIDIA GPU from its PCI device id, else its name (NVML's or the PCI ID
/// database's). A name is trusted only for the consumer lines (whose names say so); anything
/// else the table does not hold is unknown.
pub fn lookup(device_id: Option<u16>, name: &str) -> GpuModel {
    if let Some(id) = device_id
        && let Some(&(_, n, gdr, c2c)) = MODELS.iter().find(|m| m.0 == id)
    {
        return GpuModel {
            name: n.to_string(),
            gdr,
            c2c,
            basis: format!("PCI device id 10de:{id:04x}"),
        };
    }
    let consumer = CONSUMER_WORDS.iter().any(|w| name.contains(w));
    GpuModel {
        name: name.to_string(),
        gdr: if consumer {
            NotCapable
        } else {
            GdrCapability::Unknown
        },
        c2c: false,
        basis: match device_id {
            Some(id) => format!("name (PCI device id 10de:{id:04x} not in the model table)"),
            None => "name (PCI device id unknown)".to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_center_consumer_and_unknown() {
        for (id, c2c) in [
            (0x2330, false),
            (0x2901, false),
            (0x2941, true),
            (0x2342, true),
        ] {
            let m = lookup(Some(id), "");
            assert_eq!((m.gdr, m.c2c), (Capable, c2c), "{id:04x}");
        }
        assert_eq!(lookup(Some(0x26b9), "").name, "L40S");
        assert_eq!(lookup(Some(0x2bb1), "").gdr, Capable);
        assert_eq!(lookup(Some(0x2b85), "").gdr, NotCapable);
        // By name where the id is not in the table: consumer names only.
        assert_eq!(
            lookup(Some(0x2782), "NVIDIA GeForce RTX 4070 Ti").gdr,
            NotCapable
        );
        assert_eq!(lookup(None, "NVIDIA TITAN RTX").gdr, NotCapable);
        let u = lookup(Some(0x31c0), "NVIDIA Corporation GB110");
        assert_eq!(u.gdr, GdrCapability::Unknown);
        assert!(u.basis.contains("not in the model table"), "{}", u.basis);
        // A data-center-sounding name is not enough to call it capable.
        assert_eq!(
            lookup(None, "NVIDIA H100 80GB HBM3").gdr,
            GdrCapability::Unknown
        );
    }

    #[test]
    fn ids_are_unique() {
        let mut ids: Vec<u16> = MODELS.iter().map(|m| m.0).collect();
        ids.sort_unstable();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n);
    }
}
