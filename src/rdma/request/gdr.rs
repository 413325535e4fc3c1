//! Level 3's request (which GPUs, which registration, which side's buffer) and the facts about
//! the machine a level-3 or level-4 run is given (`Machine`), gathered once by the caller.

use crate::findings::Finding;
use crate::inventory::Inventory;
use crate::report::rdma::gdr::GdrMode;
use crate::topo::Topology;
use serde::Serialize;

/// Which GPUs (`--gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuSelect {
    /// `--gdr` without `--gpu`: host memory through the level-3 path (the NIC half of the
    /// registration decision is made and reported).
    Host,
    /// `--gpu N`: `GPU<N>` in PCI order, as `topo` labels it.
    One(u32),
    /// `--gpu auto`: every GPU, one after another, each against its closest ACTIVE port.
    Auto,
}

/// Level 3's part of a write-bw request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GdrRequest {
    pub gpu: GpuSelect,
    pub mode: GdrMode,
    pub gpu_side: GpuSide,
    /// Runs in one process (allocation, registration, measurement, release), for a leak check.
    pub repeat: u32,
    /// `-d` given: this device for every GPU, instead of each GPU's closest ACTIVE port.
    pub device_given: bool,
}

impl GdrRequest {
    /// Level 3 of `check`: every GPU once, registered as NCCL would, both buffers in its memory,
    /// each against its closest ACTIVE port.
    pub fn check_level3() -> GdrRequest {
        GdrRequest {
            gpu: GpuSelect::Auto,
            mode: GdrMode::Auto,
            gpu_side: GpuSide::Both,
            repeat: 1,
            device_given: false,
        }
    }
}

/// What level 3 reads about the machine, gathered once by the caller.
pub struct Machine<'a> {
    /// Discovery's facts, read before any probe runs: the engine opens each RDMA device with
    /// what `inv.rdma` says of it (GIDs, ports); nothing under `rdma` reads sysfs while probing.
    pub inv: &'a Inventory,
    pub topo: &'a Topology,
    /// Level-0 findings of the same inventory: the evidence `crate::rdma::judge::gdr::cause` cites.
    pub level0: &'a [Finding],
    /// The MAC address of each RDMA GID's netdev (`/sys/class/net/<ndev>/address`), read by
    /// the caller before any probe runs (`level4::netdev_macs`): level 4's RoCE next hop
    /// when its own QP loops back on a port. Nothing under `rdma` reads sysfs while probing.
    pub netdev_macs: std::collections::BTreeMap<String, [u8; 6]>,
}

/// `--gpu-side`: which side's buffer is GPU memory in a loopback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuSide {
    /// The NIC reads GPU memory (writes from the GPU).
    Source,
    /// The NIC writes into GPU memory.
    Target,
    Both,
}
