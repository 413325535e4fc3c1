//! gpudoctor: a doctor for GPU + RDMA servers.
//!
//! Data flows one way: args -> config -> source -> inventory -> topology -> report -> render.

/// The source revision this binary was built from: a git commit, or what a packager set in
/// `GPUDOCTOR_REVISION` (build.rs). Every report carries it beside the release so that two runs
/// of "0.1.0" built from different sources are told apart.
pub const REVISION: &str = env!("GPUDOCTOR_REVISION");

pub mod bundle;
pub mod checks;
pub mod cli;
pub mod config;
pub mod cuda;
pub mod export;
pub mod facts;
pub mod findings;
pub mod fleet;
pub mod foreign;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod handshake;
pub mod inventory;
pub mod kmsg;
pub mod libs;
pub mod nccl;
pub mod nic;
pub mod numa;
pub mod nvml;
pub mod pci;
pub mod probes;
pub mod rdma;
pub mod reading;
pub mod render;
pub mod report;
pub mod run;
pub mod signals;
pub mod source;
pub mod stats;
pub mod sysroot;
pub mod topo;
pub mod verbs;
pub mod words;
pub mod workers;

// The fixture trees (fixtures/NAME) laid out for the unit tests that read them, as for the
// integration tests.
#[cfg(test)]
#[path = "../tests/it/fixture_trees.rs"]
mod fixture_trees;
