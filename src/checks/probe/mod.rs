//! probe.*: the probes' verdicts as check findings, one module per level (`check --level N`):
//! level 1 the CUDA copies, dma-buf export and NCCL (`probe.h2d`, `probe.d2h`, `probe.p2p`,
//! `probe.dmabuf-export`, `probe.nccl`), level 2 RDMA writes (`probe.write-bw`), level 3
//! GPUDirect RDMA writes (`probe.gdr-write-bw`), level 4 GPU-initiated writes
//! (`probe.gpu-write-bw`).
//!
//! Pure: each turns probe reports (measured live, or recorded in a tree's `probes/`) into
//! findings. Running the probes is `crate::probes` and `crate::rdma`; these modules must not.

pub mod level1;
pub mod level2;
pub mod level3;
pub mod level4;
