//! Report models: one serde model per command, with a versioned schema string. Renderers take
//! these by reference; nothing here does I/O.

use crate::inventory::{Inventory, Note};
use crate::topo::Topology;
use serde::Serialize;

pub const TOPO_SCHEMA: &str = "gpudoctor.topo/1";

/// Where the facts came from.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceInfo {
    /// This machine, now.
    Live,
    /// A recorded tree (`--root DIR`).
    Root { path: String },
    /// A support bundle (`--bundle FILE`).
    Bundle { path: String },
}

impl SourceInfo {
    pub fn describe(&self) -> String {
        match self {
            SourceInfo::Live => "live system".to_string(),
            SourceInfo::Root { path } => format!("recorded tree {path}"),
            SourceInfo::Bundle { path } => format!("bundle {path}"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct NvmlSummary {
    pub source: String,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub cuda_driver_version: Option<i32>,
    pub unavailable: Option<String>,
    pub gpus: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct TopoReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    pub source: SourceInfo,
    pub nvml: NvmlSummary,
    /// Paths that could not be read at all, and why (per-attribute reasons live on devices).
    pub unread: Vec<Note>,
    pub topology: Topology,
}

impl TopoReport {
    pub fn new(source: SourceInfo, inv: &Inventory, topology: Topology) -> Self {
        TopoReport {
            schema: TOPO_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            source,
            nvml: NvmlSummary {
                source: inv.nvml.source.clone(),
                driver_version: inv.nvml.driver_version.clone(),
                nvml_version: inv.nvml.nvml_version.clone(),
                cuda_driver_version: inv.nvml.cuda_driver_version,
                unavailable: inv.nvml.unavailable.clone(),
                gpus: inv.nvml.gpus.len(),
            },
            unread: inv.notes.clone(),
            topology,
        }
    }
}
