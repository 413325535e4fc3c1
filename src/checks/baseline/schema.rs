//! The baseline file (schema `gpudoctor.baseline/1`): the expected shape of a server model,
//! every field but `schema` optional, and its parsing.
//!
//! This module must not look at a node: it is the file's data and its validation only.

use crate::findings::Enforce;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub const BASELINE_SCHEMA: &str = "gpudoctor.baseline/1";

/// Fraction of a measured median kept as the floor when a baseline records bandwidth: run-to-run
/// spread of the copy probes on the recorded H100/H200 machines is within 2%, so 90% leaves
/// room for noise and still catches a link running at half rate.
pub const FLOOR_FRACTION: f64 = 0.9;

/// The expected shape of a server model. Every field but `schema` may be deleted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    pub schema: String,
    /// Informational: what wrote it, from where.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_from: Option<String>,
    /// GPUs by PCI position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Vec<GpuShape>>,
    /// RDMA NICs by PCI position (software RDMA devices are not part of a server's shape).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nics: Option<Vec<NicShape>>,
    /// Path type for every GPU-GPU and GPU-NIC pair, as `nvidia-smi topo -m` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paths: Option<Vec<PathShape>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<Versions>,
    /// Bandwidth floors from recorded probe samples (level 1), compared at `check --level 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bandwidth: Option<Vec<Floor>>,
    /// Findings put aside by hand, each until a date (`check --expect` honours them; never
    /// written by `gpudoctor baseline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silences: Option<Vec<SilenceEntry>>,
}

/// One silence as the file writes it: every field required.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SilenceEntry {
    /// A check id of the catalog (`gpudoctor list`).
    pub check: String,
    /// The subject exactly as the report prints it: `0000:17:00.0`, `mlx5_3/1`, `host`.
    pub subject: String,
    /// Why (a ticket, an RMA): shown beside every silenced finding.
    pub reason: String,
    /// The last day the silence holds, UTC, `YYYY-MM-DD`.
    pub expires: String,
}

/// A PCIe link: what the device can reach in its slot, and the width it trained at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PcieShape {
    /// Highest generation the device and the port above it both support (a Gen5 card in a
    /// Gen4 slot is Gen4 here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_gen: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_width: Option<u8>,
    /// Trained width. (The trained speed of a GPU is not part of the shape: GPUs lower it when
    /// idle; pcie.link-speed and the level-1 probes judge it.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cur_width: Option<u8>,
    /// Trained generation, NICs only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cur_gen: Option<u8>,
    /// Where this device's PCIe errors are recorded: a fact of the platform (a guest kernel
    /// without native AER control keeps no counters; some devices have no AER capability), so
    /// that a node of this model that cannot record them is told apart from one that lost
    /// them. Written by `gpudoctor baseline` only where it was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aer: Option<AerSource>,
}

/// Where a PCI function's errors are recorded (`pcie.aer` reads them there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AerSource {
    /// The kernel's `aer_dev_*` counters (native AER control).
    Counters,
    /// No counters; the AER capability's status registers in config space (read as root).
    ConfigSpace,
    /// Nowhere: no counters and no AER capability in config space read in full (a virtual
    /// function's errors are counted on its physical function).
    None,
}

impl AerSource {
    /// Words for messages: where errors are recorded ("in ...", "nowhere ...").
    pub fn describe(self) -> &'static str {
        match self {
            AerSource::Counters => "in the kernel's AER counters",
            AerSource::ConfigSpace => {
                "in the AER status registers in config space (no kernel counters)"
            }
            AerSource::None => "nowhere (no AER counters, no AER capability)",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuShape {
    /// PCI position: `pci0000:c0/01.1/00.0` (root complex, bridge slots, own slot).
    pub position: String,
    /// Informational: the label and address on the node it was recorded from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// `vendor:device` PCI ids (compared), with the model name (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieShape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bar1_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvlinks_active: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicPortShape {
    pub port: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_layer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NicShape {
    pub position: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie: Option<PcieShape>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<NicPortShape>>,
    /// This NIC's firmware, written only where NICs of one model disagreed on the recorded
    /// node (otherwise `versions.nic_firmware` holds one value per model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Pinned>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathShape {
    /// Positions of the two ends (a GPU, then a GPU or NIC).
    pub a: String,
    pub b: String,
    /// Informational: the ends' names on the recorded node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    /// The cell as `nvidia-smi topo -m` prints it: NV18, PIX, PXB, PHB, NODE, SYS.
    pub path: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pinned {
    pub value: String,
    pub enforce: Enforce,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Versions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvidia_driver: Option<Pinned>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_driver: Option<Pinned>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Pinned>,
    /// Firmware per NIC model (hca_type or board_id).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub nic_firmware: BTreeMap<String, Pinned>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Floor {
    pub probe: String,
    pub method: String,
    /// `host` or a GPU position.
    pub src: String,
    pub dst: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub was: Option<String>,
    pub min_gbps: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("not a gpudoctor baseline: {0}")]
    Parse(String),
    #[error("schema '{found}' is not {BASELINE_SCHEMA} (written by another gpudoctor version?)")]
    Schema { found: String },
    #[error("{0}")]
    Invalid(String),
}

impl Baseline {
    pub fn parse(text: &str) -> Result<Baseline, BaselineError> {
        // Schema first, so a future schema gets a clear message rather than a field error.
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| BaselineError::Parse(e.to_string()))?;
        match v.get("schema").and_then(|s| s.as_str()) {
            Some(BASELINE_SCHEMA) => {}
            Some(other) => {
                return Err(BaselineError::Schema {
                    found: other.to_string(),
                });
            }
            None => {
                return Err(BaselineError::Parse(
                    "no \"schema\" field (expected \"gpudoctor.baseline/1\")".into(),
                ));
            }
        }
        let b: Baseline =
            serde_json::from_value(v).map_err(|e| BaselineError::Parse(e.to_string()))?;
        for list in [
            b.gpus
                .iter()
                .flatten()
                .map(|g| &g.position)
                .collect::<Vec<_>>(),
            b.nics.iter().flatten().map(|n| &n.position).collect(),
        ] {
            let mut seen = BTreeSet::new();
            for p in list {
                if !seen.insert(p) {
                    return Err(BaselineError::Invalid(format!(
                        "position {p} is listed twice"
                    )));
                }
            }
        }
        if let Some(f) = b
            .bandwidth
            .iter()
            .flatten()
            .find(|f| !f.min_gbps.is_finite() || f.min_gbps < 0.0)
        {
            return Err(BaselineError::Invalid(format!(
                "bandwidth floor {} {} {}->{}: min_gbps must be a non-negative number",
                f.probe, f.method, f.src, f.dst
            )));
        }
        for (i, e) in b.silences.iter().flatten().enumerate() {
            let at = format!("silences[{i}]");
            if let Err(why) = e.check.parse::<crate::findings::CheckId>() {
                let near = crate::checks::suggest(&e.check)
                    .map(|n| format!(" (did you mean {n}?)"))
                    .unwrap_or_default();
                return Err(BaselineError::Invalid(format!(
                    "{at}: {why}{near}: `gpudoctor list` shows them all"
                )));
            }
            if e.subject.trim().is_empty() {
                return Err(BaselineError::Invalid(format!(
                    "{at}: \"subject\" is empty: name it as the report prints it (0000:17:00.0, mlx5_3/1, host)"
                )));
            }
            if e.reason.trim().is_empty() {
                return Err(BaselineError::Invalid(format!(
                    "{at}: \"reason\" is empty: say why it is silenced (a ticket, an RMA)"
                )));
            }
            if !super::silence::valid_date(&e.expires) {
                return Err(BaselineError::Invalid(format!(
                    "{at}: \"expires\" is '{}', not a date YYYY-MM-DD",
                    e.expires
                )));
            }
        }
        Ok(b)
    }

    /// The silences, resolved (`Baseline::parse` has checked every id).
    pub fn resolved_silences(&self) -> Vec<super::silence::Silence> {
        self.silences
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, e)| {
                Some(super::silence::Silence {
                    id: e.check.parse().ok()?,
                    subject: e.subject.clone(),
                    origin: crate::findings::SilenceOrigin::Baseline,
                    reason: Some(e.reason.clone()),
                    expires: Some(e.expires.clone()),
                    written: format!("baseline silences[{i}]"),
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_rejects_other_schemas_and_typos() {
        assert!(matches!(
            Baseline::parse(r#"{"schema":"gpudoctor.baseline/2"}"#),
            Err(BaselineError::Schema { .. })
        ));
        assert!(matches!(
            Baseline::parse(r#"{"schema":"gpudoctor.baseline/1","gpu":[]}"#),
            Err(BaselineError::Parse(_))
        ));
        assert!(Baseline::parse("[1,2").is_err());
        let b = Baseline::parse(r#"{"schema":"gpudoctor.baseline/1"}"#).unwrap();
        assert!(b.gpus.is_none() && b.paths.is_none());
        assert!(matches!(
            Baseline::parse(
                r#"{"schema":"gpudoctor.baseline/1","gpus":[{"position":"p"},{"position":"p"}]}"#
            ),
            Err(BaselineError::Invalid(_))
        ));
    }
}
