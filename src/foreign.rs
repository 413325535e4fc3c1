//! GPUDirect verdicts another tool wrote into a record (NCCL's `gdr` attributes), carried from
//! the source that read them to the inventory unjudged; `gdr.nccl-agrees` compares them with
//! gpudoctor's own. Types only: below both the sources and the inventory.

use crate::pci::Bdf;

/// Someone else's GPUDirect verdict carried by the record (NCCL's `gdr` attributes). What each
/// means, from NCCL's source (src/graph/topo.cc writes them, src/graph/paths.cc
/// `ncclTopoCheckGdr` reads them):
///
/// - `<gpu gdr>`: `ncclGpuGdrSupport` (src/plugin/net.cc). Since NCCL 2.12 with a CUDA 11.3+
///   driver it is CUDA's `cudaDevAttrGPUDirectRDMASupported` for the GPU, whatever the NICs;
///   before that (NCCL 2.6-2.11, or an older driver) it was whether registering 2 MiB of the
///   GPU's memory with `NCCL_PTR_CUDA` on the first net device offering it worked, so it was also
///   0 without nvidia-peermem or without any RDMA net. A file that already holds the attribute
///   keeps it (`xmlInitAttrInt`): a hand-written file's value is its author's.
/// - `<net gdr>`: the net plugin's `ptrSupport` has `NCCL_PTR_CUDA` (NET/IB: an nvidia-peermem
///   or nv_peer_mem version file exists) or `NCCL_PTR_DMABUF` with dma-buf enabled
///   (src/graph/topo.cc `ncclTopoPopulateNics`). Sockets never have it.
///
/// Neither says whether NCCL used GPUDirect RDMA for a pair: that also needs the GPU-NIC path
/// within NCCL_NET_GDR_LEVEL, decided at run time and not written into the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForeignGdr {
    /// `<gpu gdr="0|1">`: NCCL's view of whether this GPU supports GPUDirect RDMA.
    Gpu { gpu: Bdf, gdr: bool },
    /// `<net name=".." gdr="0|1">`: the net plugin's view of the NIC port.
    Net {
        nic: Option<Bdf>,
        name: String,
        gdr: bool,
    },
}

/// The GPUDirect verdicts a source carries from another tool, for `gdr.nccl-agrees`: handed
/// from the source to the inventory as they are (no second reading path), judged nowhere here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForeignVerdicts {
    /// The source cannot carry such a verdict: why ("the live system: ...").
    NotCarried(String),
    /// A record of another tool's format, with the verdicts it holds (none: a file without `gdr` attributes,
    /// such as a hand-written NCCL_TOPO_FILE that leaves them to NCCL).
    Carried {
        /// What the record is ("NCCL topology XML"), for messages.
        noun: &'static str,
        verdicts: Vec<ForeignGdr>,
    },
}

impl Default for ForeignVerdicts {
    fn default() -> Self {
        ForeignVerdicts::NotCarried("not read with this source".into())
    }
}
