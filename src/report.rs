//! Report models: one serde model per command, with a versioned schema string. Renderers take
//! these by reference; nothing here does I/O.

use crate::inventory::{Inventory, Note};
use crate::topo::Topology;
use serde::Serialize;

pub const TOPO_SCHEMA: &str = "gpudoctor.topo/1";
pub const CHECK_SCHEMA: &str = "gpudoctor.check/1";

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

impl NvmlSummary {
    pub fn of(n: &crate::nvml::NvmlSnapshot) -> Self {
        NvmlSummary {
            source: n.source.clone(),
            driver_version: n.driver_version.clone(),
            nvml_version: n.nvml_version.clone(),
            cuda_driver_version: n.cuda_driver_version,
            unavailable: n.unavailable.clone(),
            gpus: n.gpus.len(),
        }
    }
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
            nvml: NvmlSummary::of(&inv.nvml),
            unread: inv.notes.clone(),
            topology,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    pub pass: usize,
    pub warn: usize,
    pub fail: usize,
    pub skip: usize,
    /// Skips of something that should have been judged (not root, or a fact unknown): what
    /// `--fail-on-skip` fails on.
    pub unjudged: usize,
    /// Of those, the ones that need root.
    pub not_root: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    pub source: SourceInfo,
    pub level: u8,
    /// Worst of pass/warn/fail over all checks (skips do not count).
    pub status: crate::checks::Status,
    pub summary: Summary,
    pub checks: Vec<crate::checks::Finding>,
    pub nvml: NvmlSummary,
    /// Paths that could not be read at all, and why.
    pub unread: Vec<Note>,
}

impl CheckReport {
    pub fn new(
        source: SourceInfo,
        level: u8,
        inv: &Inventory,
        checks: Vec<crate::checks::Finding>,
    ) -> Self {
        use crate::checks::Status;
        let mut summary = Summary::default();
        for f in &checks {
            match f.status {
                Status::Pass => summary.pass += 1,
                Status::Warn => summary.warn += 1,
                Status::Fail => summary.fail += 1,
                Status::Skip => {
                    summary.skip += 1;
                    if f.skip.is_some_and(|k| k.unjudged()) {
                        summary.unjudged += 1;
                    }
                    if f.skip == Some(crate::checks::SkipKind::NotRoot) {
                        summary.not_root += 1;
                    }
                }
            }
        }
        let nvml = NvmlSummary::of(&inv.nvml);
        CheckReport {
            schema: CHECK_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            source,
            level,
            status: crate::checks::overall(&checks),
            summary,
            checks,
            nvml,
            unread: inv.notes.clone(),
        }
    }
}
