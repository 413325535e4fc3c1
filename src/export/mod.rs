//! Every output format behind one trait (`format`: `Exporter`, chosen in one place by `export`),
//! and reports in the formats of the tools next to gpudoctor: Prometheus text exposition
//! (node_exporter's textfile collector), JUnit XML (CI test reports), NCCL's topology XML
//! (NCCL_TOPO_FILE).
//!
//! Pure renderers like `render`: they take finished reports or the topology and return text;
//! they must not read files or judge anything.

mod format;
mod json;
pub mod junit;
mod markdown;
pub mod nccl;
pub mod prometheus;
mod reason;
mod table;

pub use format::{ExportOptions, Exporter, Format, Unsupported, export, exporter};
