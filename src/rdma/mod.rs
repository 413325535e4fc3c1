//! The probe ladder's RDMA side (levels 2-4: write-bw on host memory, on GPU memory, and
//! posted by a CUDA kernel), by concern; every import arrow points one way (down this list):
//!
//! - `level2`, `level3`, `level4`: thin runners, one entry point each (`level2::measure_ports`,
//!   `level3::measure_gdr`, `level4::measure_gpu_write`); per port or GPU they gather what is
//!   decided, call the engine, and fold the outcome into a report (`crate::report::rdma`, the
//!   JSON schemas, pure data: arrows point from here to there, never back).
//! - `pairing`: what levels 3 and 4 both gather to pair a GPU with a port (the GPUs selected,
//!   the CUDA device, the path, the provider's dma-buf probe, the registration decision).
//! - `mlx5`: everything ConnectX-specific (WQE/CQE and PRM encodings, DevX, queue memory, the
//!   CPU proxy, the kernel's host side, the GPU poster; the NIC stand-in under `standin`).
//! - `engine`: the one write-bw engine (sides, posting loop, memory, pattern, loopback, two-node
//!   with its framing and handshake).
//! - `judge`: pure judgements (summaries, thresholds, addressing, registration and handler
//!   choice, causes).
//! - `request`: what a run is asked to do, plain data (no clap).
//! - `progress`: the one place that prints while a probe runs.
//!
//! `tests::no_import_cycle` keeps the arrows one way at file level.

pub mod engine;
pub mod judge;
pub mod level2;
pub mod level3;
pub mod level4;
pub mod mlx5;
pub mod pairing;
pub mod progress;
pub mod request;

#[cfg(test)]
mod tests;
