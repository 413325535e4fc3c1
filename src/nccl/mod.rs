//! NCCL collectives measured, and NCCL's transport choice read back and judged against the
//! topology (`gpudoctor probe nccl`, finding `probe.nccl`).
//!
//! - `library`: libnccl found and loaded at run time (never linked), the symbols used;
//! - `bandwidth`: nccl-tests' byte and bus-bandwidth conventions (pure);
//! - `debuglog`: NCCL's `NCCL_DEBUG=INFO` output parsed into per-pair transports (pure);
//! - `report`: the `gpudoctor.nccl/1` model and its evaluation (pure);
//! - `worker`: the child process that drives the GPUs through NCCL for one configuration;
//! - `live`: the parent: plans, workers under a deadline, debug files in a private directory;
//! - `render`: the report as text.
//!
//! Across nodes (Slurm or torchrun ranks, the unique id over `rdma::engine::oob`) is not done.

pub mod bandwidth;
pub mod debuglog;
pub mod library;
pub mod live;
pub mod render;
pub mod report;
pub mod worker;
