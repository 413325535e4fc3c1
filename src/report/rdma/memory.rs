//! Where a write-bw side's buffer lived and how it was registered, for the report. Pure data.

use serde::Serialize;

/// How GPU memory is registered with the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Registration {
    /// ibv_reg_mr on the device pointer: the kernel's peer-memory client (nvidia-peermem)
    /// resolves and pins the GPU pages.
    Peermem,
    /// ibv_reg_dmabuf_mr on a dma-buf exported by CUDA (open kernel module, Linux >= 5.12).
    Dmabuf,
}

impl Registration {
    pub fn as_str(self) -> &'static str {
        match self {
            Registration::Peermem => "peermem",
            Registration::Dmabuf => "dma-buf",
        }
    }
    /// The verb that registers memory this way.
    pub fn call(self) -> &'static str {
        match self {
            Registration::Peermem => "ibv_reg_mr",
            Registration::Dmabuf => "ibv_reg_dmabuf_mr",
        }
    }
}

/// What a side's buffer turned out to be (for the report).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryFacts {
    /// "host" or "gpu".
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bdf: Option<String>,
    /// How it was registered: "host" (ibv_reg_mr on host memory), "peermem" or "dma-buf".
    pub registration: String,
    pub bytes: u64,
    pub address: String,
    /// The largest power of two (up to 2 MiB) the address is a multiple of.
    pub address_alignment_bytes: u64,
    /// CU_POINTER_ATTRIBUTE_SYNC_MEMOPS as read back from the driver (GPU memory only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_memops: Option<bool>,
}
