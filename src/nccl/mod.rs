//! NCCL collectives measured, and NCCL's transport choice read back and judged against the
//! topology (`gpudoctor probe nccl`, finding `probe.nccl`).
//!
//! - `library`: libnccl found and loaded at run time (never linked), the symbols used;
//! - `bandwidth`: nccl-tests' byte and bus-bandwidth conventions (pure);
//! - `debuglog`: NCCL's `NCCL_DEBUG=INFO` output parsed into per-pair transports (pure);
//! - `evaluate`: the `gpudoctor.nccl/2` report's evaluation, and across nodes its merge (pure;
//!   the model itself is `crate::report::nccl`);
//! - `worker`: the child process that drives the GPUs through NCCL for one configuration;
//! - `live`: the parent: plans, workers under a deadline, debug files in a private directory;
//! - `launcher`: ranks across nodes from srun's, torchrun's or an indexed Job's variables (pure);
//! - `rendezvous`: rank 0 and the others over TCP, authenticated by a shared token (framing and
//!   challenge-response as write-bw's `rdma::engine::oob`, a sibling protocol);
//! - `cluster`: `--ranks`: the rendezvous, NCCL's unique id made by rank 0's worker and handed
//!   out, every process's worker joining with ncclCommInitRank, the parts merged on rank 0;
//! - `render`: the report as text.

pub mod bandwidth;
pub mod cluster;
pub mod debuglog;
pub mod evaluate;
pub mod launcher;
pub mod library;
pub mod live;
pub mod render;
pub mod rendezvous;
pub mod worker;
