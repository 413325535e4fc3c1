//! Every output format behind one trait (`exporter`: `Exporter`, chosen in one place, `format::export`),
//! and reports in the formats of the tools next to gpudoctor: Prometheus text exposition
//! (node_exporter's textfile collector), JUnit XML (CI test reports), NCCL's topology XML
//! (NCCL_TOPO_FILE).
//!
//! Pure renderers like `render`: they take finished reports or the topology and return text;
//! they must not read files or judge anything.

mod exporter;
mod format;
mod html;
mod json;
pub mod junit;
mod markdown;
pub mod nccl;
pub mod prometheus;
mod reason;
mod table;

pub use exporter::{ExportOptions, Exporter, Format};
pub use format::{Unsupported, export, exporter};
