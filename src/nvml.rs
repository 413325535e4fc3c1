//! NVML facts as a plain, serializable snapshot (`nvml.json` in a recorded tree or bundle).
//!
//! Live collection loads libnvidia-ml at run time through `nvml-wrapper`; every fact is an
//! [`NvmlReading`]: its value, absent (NVML said NotSupported) or unknown with the reason and
//! NVML's error kind, carried with the fact, never as a default value and never in a side
//! table. A missing library or driver is `unavailable`, never a crash. This module must not
//! look at sysfs: the join with sysfs devices happens in `topo`, on the numeric BDF; and it
//! must not judge: checks match on the readings.

use crate::pci::Bdf;
use crate::reading::Reading;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// `nvml.json` with every fact a reading (docs/schemas.md).
pub const SCHEMA: &str = "gpudoctor.nvml/2";

/// `nvml.json` before readings: facts as values or null, with the reasons in `unread` maps by
/// key. Still read (every recording made before `gpudoctor.nvml/2`), converted on load.
pub const SCHEMA_V1: &str = "gpudoctor.nvml/1";

/// Why a fact reads unknown where nvml.json does not hold it (written before gpudoctor kept it).
pub const NOT_RECORDED: &str = "not recorded (nvml.json written before gpudoctor kept it)";

/// Why an inactive NVLink's far end reads absent: NVML is not asked about a link that is down.
pub const LINK_NOT_ACTIVE: &str = "link not active: its far end is not asked";

/// An NVML fact as read: a [`Reading`], and for an unknown one NVML's error kind where NVML
/// said (checks judge on it: a GPU lost fails, a refusal needs root). Absent is NVML's
/// NotSupported: read, and the GPU or driver does not have it.
///
/// JSON: the reading's one key, plus `"kind"` beside an unknown whose kind is known:
/// `{"value": 5}`, `{"absent": "why"}`, `{"unknown": "why", "kind": "no-permission"}`.
/// A fact that nvml.json does not hold reads as unknown, [`NOT_RECORDED`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[must_use = "a reading that is not looked at is a fact thrown away"]
pub struct NvmlReading<T> {
    #[serde(flatten)]
    pub reading: Reading<T>,
    /// NVML's kind of failure, for an unknown reading where it is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<NvmlErrorKind>,
}

/// Why a fact has no value, and NVML's kind of failure where known (NotSupported for absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unread<'a> {
    pub why: &'a str,
    pub kind: Option<NvmlErrorKind>,
}

impl<T> NvmlReading<T> {
    /// Read: this is its value.
    pub fn of(v: T) -> Self {
        NvmlReading {
            reading: Reading::Value(v),
            kind: None,
        }
    }

    /// NVML said NotSupported: the GPU or driver does not have it.
    pub fn absent(why: impl Into<String>) -> Self {
        NvmlReading {
            reading: Reading::absent(why),
            kind: None,
        }
    }

    /// Could not be read, with why and NVML's kind of failure where known.
    pub fn unknown(why: impl Into<String>, kind: Option<NvmlErrorKind>) -> Self {
        NvmlReading {
            reading: Reading::unknown(why),
            kind,
        }
    }

    /// Not held by the nvml.json it comes from.
    pub fn not_recorded() -> Self {
        Self::unknown(NOT_RECORDED, None)
    }

    pub fn value(&self) -> Option<&T> {
        self.reading.value()
    }

    pub fn is_value(&self) -> bool {
        self.reading.is_value()
    }

    /// Why there is no value (absent or unknown); None for a value.
    pub fn why(&self) -> Option<&str> {
        self.reading.why()
    }

    /// Why there is no value and NVML's kind of failure; None for a value.
    pub fn unread(&self) -> Option<Unread<'_>> {
        match &self.reading {
            Reading::Value(_) => None,
            Reading::Absent(why) => Some(Unread {
                why,
                kind: Some(NvmlErrorKind::NotSupported),
            }),
            Reading::Unknown(why) => Some(Unread {
                why,
                kind: self.kind,
            }),
        }
    }

    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> NvmlReading<U> {
        NvmlReading {
            reading: self.reading.map(f),
            kind: self.kind,
        }
    }
}

impl<T: Clone> NvmlReading<T> {
    /// The value, where there is one, cloned.
    pub fn cloned(&self) -> Option<T> {
        self.reading.value().cloned()
    }
}

/// What a fact that nvml.json does not hold reads as: unknown, not recorded (never a value).
impl<T> Default for NvmlReading<T> {
    fn default() -> Self {
        Self::not_recorded()
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlSnapshot {
    pub schema: String,
    /// "live", "synthetic", "derived from nvidia-smi -q", ...
    pub source: String,
    /// nvmlSystemGetDriverVersion.
    pub driver_version: NvmlReading<String>,
    /// nvmlSystemGetNVMLVersion.
    pub nvml_version: NvmlReading<String>,
    /// nvmlSystemGetCudaDriverVersion.
    pub cuda_driver_version: NvmlReading<i32>,
    /// Set when NVML could not be used at all (library missing, driver not loaded...).
    pub unavailable: Option<String>,
    /// What kind of failure `unavailable` is, so checks can judge on it (absent in nvml.json
    /// files recorded before kinds were kept: unknown).
    pub unavailable_kind: Option<NvmlErrorKind>,
    /// Whether `gpus` is NVML's own list: a value where it is (or where NVML was unavailable,
    /// then `gpus` is empty and `unavailable` says why); unknown, with why, where a record's
    /// GPU list is its PCI devices and says nothing of NVML answering: NVML is not judged on it.
    pub listed_by_nvml: NvmlReading<()>,
    /// nvmlDeviceGetCount; unknown where it failed (then `gpus` is empty for that reason).
    pub device_count: NvmlReading<u32>,
    pub gpus: Vec<NvmlGpu>,
    /// nvmlDeviceGetP2PStatus for every ordered GPU pair (read and write capability); unknown
    /// where it was not read (a record that does not carry it).
    pub p2p: NvmlReading<Vec<NvmlP2p>>,
}

/// NVML's error, as a kind checks can branch on (nvml-wrapper's typed errors, kept beside the
/// prose in each reading rather than flattened into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NvmlErrorKind {
    /// libnvidia-ml could not be loaded: no driver installed.
    LibraryNotFound,
    DriverNotLoaded,
    NoPermission,
    /// Library and kernel module versions differ (upgrade without reboot).
    LibRmVersionMismatch,
    /// The GPU has fallen off the bus.
    GpuLost,
    NotSupported,
    SymbolMissing,
    #[serde(other)]
    Other,
}

impl NvmlErrorKind {
    /// The kind of an `nvmlReturn_t` from a call made through the library's function pointer
    /// (nvml.h: 3 NOT_SUPPORTED, 4 NO_PERMISSION, 9 DRIVER_NOT_LOADED, 15 GPU_IS_LOST,
    /// 18 LIB_RM_VERSION_MISMATCH).
    pub fn of_return_code(rc: u32) -> Self {
        match rc {
            3 => NvmlErrorKind::NotSupported,
            4 => NvmlErrorKind::NoPermission,
            9 => NvmlErrorKind::DriverNotLoaded,
            15 => NvmlErrorKind::GpuLost,
            18 => NvmlErrorKind::LibRmVersionMismatch,
            _ => NvmlErrorKind::Other,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlP2p {
    /// NVML bus ids of the two GPUs.
    pub a: String,
    pub b: String,
    /// "ok", "chipset-not-supported", "gpu-not-supported", "ioh-topology-not-supported",
    /// "disabled-by-regkey", "not-supported", "unknown"; None when the query failed.
    pub read: Option<String>,
    pub write: Option<String>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlGpu {
    pub index: u32,
    /// NVML form, `00000000:1A:00.0` (nvmlDeviceGetPciInfo); the join with sysfs.
    pub bus_id: NvmlReading<String>,
    pub uuid: NvmlReading<String>,
    pub name: NvmlReading<String>,
    pub serial: NvmlReading<String>,
    pub memory_total_bytes: NvmlReading<u64>,
    pub bar1_total_bytes: NvmlReading<u64>,
    pub pcie: NvmlPcie,
    /// The NVLinks NVML listed, from link 0 on.
    pub nvlinks: Vec<NvmlLink>,
    /// Whether `nvlinks` holds every link: a value where NVML ended the walk itself (no further
    /// link, so an empty list is "no NVLinks", positively read); unknown with why where it could
    /// not be read whole: the GPU's handle (`device: ...`), a link's state (`nvlink.N: ...`,
    /// links from N on not asked), or nvml.json holding no list (`nvlinks: ...`).
    pub nvlinks_listed: NvmlReading<()>,
    /// Whether a link that is down would be listed as down: a value where each link's state was
    /// read; unknown, with why, where only the active links were written (an NCCL topology XML):
    /// a down link would be missing, not shown as down.
    pub nvlink_state: NvmlReading<()>,
    pub persistence_mode: NvmlReading<bool>,
    pub ecc_enabled: NvmlReading<bool>,
    pub ecc_volatile_uncorrected: NvmlReading<u64>,
    pub retired_pending: NvmlReading<bool>,
    pub remapped_rows_pending: NvmlReading<bool>,
    /// The NUMA node of the GPU's own memory (nvmlDeviceGetNumaNodeId: coherent systems such as
    /// Grace Hopper); absent on PCIe/SXM GPUs of x86 hosts, where NVML does not support it.
    pub numa_node_id: NvmlReading<u32>,
    /// nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons): the bit mask of
    /// `nvmlClocksEventReason*` (0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW
    /// power brake...).
    pub clock_event_reasons: NvmlReading<u64>,
    /// NVLink error counters by link number (nvmlDeviceGetNvLinkErrorCounter), for the links
    /// in `nvlinks` that are active; a link missing here was not recorded.
    pub nvlink_errors: BTreeMap<u32, NvLinkErrors>,
    /// nvmlDeviceGetGpuFabricInfo: the GPU's registration with the NVSwitch fabric (fabric
    /// manager).
    pub fabric: NvmlReading<NvmlFabric>,
}

/// One NVLink's error counters since the driver loaded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvLinkErrors {
    /// NVML_NVLINK_ERROR_DL_REPLAY: data link transmit replays.
    pub replay: NvmlReading<u64>,
    /// NVML_NVLINK_ERROR_DL_RECOVERY: data link recoveries (link retraining).
    pub recovery: NvmlReading<u64>,
    /// NVML_NVLINK_ERROR_DL_CRC_FLIT: flow-control digit CRC errors received.
    pub crc_flit: NvmlReading<u64>,
    /// NVML_NVLINK_ERROR_DL_CRC_DATA: data CRC errors received.
    pub crc_data: NvmlReading<u64>,
}

impl NvLinkErrors {
    /// The four counters with their names, in the order above.
    pub fn counters(&self) -> [(&'static str, &NvmlReading<u64>); 4] {
        [
            ("replay", &self.replay),
            ("recovery", &self.recovery),
            ("crc_flit", &self.crc_flit),
            ("crc_data", &self.crc_data),
        ]
    }
}

/// The GPU's fabric registration (nvmlGpuFabricInfo_t).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlFabric {
    /// "not-supported" (no NVSwitch fabric), "not-started", "in-progress", "completed", or
    /// "unknown-N" for a value this build does not know.
    pub state: String,
    /// The NVML return code of the registration once completed (0: success); None where the
    /// state carries none (not supported).
    pub status: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlPcie {
    pub gen_current: NvmlReading<u32>,
    pub gen_max: NvmlReading<u32>,
    pub width_current: NvmlReading<u32>,
    pub width_max: NvmlReading<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlLink {
    pub link: u32,
    pub active: bool,
    /// The far end's bus id; absent for a link that is not active ([`LINK_NOT_ACTIVE`]).
    pub remote_bus_id: NvmlReading<String>,
    /// What is at the far end ("gpu", "switch", "ibmnpu", "unknown" in nvml.json); absent for a
    /// link that is not active.
    pub remote_device_type: NvmlReading<crate::facts::NvLinkRemote>,
}

impl NvmlGpu {
    /// A GPU NVML lists but whose handle could not be had: every fact unknown for that reason.
    pub fn unread_whole(index: u32, why: &str, kind: Option<NvmlErrorKind>) -> Self {
        macro_rules! u {
            () => {
                NvmlReading::unknown(why, kind)
            };
        }
        NvmlGpu {
            index,
            bus_id: u!(),
            uuid: u!(),
            name: u!(),
            serial: u!(),
            memory_total_bytes: u!(),
            bar1_total_bytes: u!(),
            pcie: NvmlPcie {
                gen_current: u!(),
                gen_max: u!(),
                width_current: u!(),
                width_max: u!(),
            },
            nvlinks: Vec::new(),
            nvlinks_listed: NvmlReading::unknown(format!("device: {why}"), kind),
            nvlink_state: u!(),
            persistence_mode: u!(),
            ecc_enabled: u!(),
            ecc_volatile_uncorrected: u!(),
            retired_pending: u!(),
            remapped_rows_pending: u!(),
            numa_node_id: u!(),
            clock_event_reasons: u!(),
            nvlink_errors: BTreeMap::new(),
            fabric: u!(),
        }
    }

    pub fn bdf(&self) -> Option<Bdf> {
        self.bus_id.value().and_then(|b| b.parse().ok())
    }

    /// Why the NVLink list is not the whole truth, if it is not: the GPU's handle or a link's
    /// state could not be read, or nvml.json recorded no list. An empty list with no such
    /// reason is "no NVLinks", positively read (NVML said NotSupported or InvalidArg for link 0).
    pub fn nvlinks_unread(&self) -> Option<String> {
        self.nvlinks_listed.why().map(str::to_string)
    }

    /// Every fact of this GPU that has no value, by its name in nvml.json (`ecc_enabled`,
    /// `pcie.gen_max`, `nvlink.3.errors.replay`, ...), sorted by name.
    pub fn unread(&self) -> Vec<(String, Unread<'_>)> {
        let fixed: [(&str, Option<Unread<'_>>); 20] = [
            ("bus_id", self.bus_id.unread()),
            ("uuid", self.uuid.unread()),
            ("name", self.name.unread()),
            ("serial", self.serial.unread()),
            ("memory_total_bytes", self.memory_total_bytes.unread()),
            ("bar1_total_bytes", self.bar1_total_bytes.unread()),
            ("pcie.gen_current", self.pcie.gen_current.unread()),
            ("pcie.gen_max", self.pcie.gen_max.unread()),
            ("pcie.width_current", self.pcie.width_current.unread()),
            ("pcie.width_max", self.pcie.width_max.unread()),
            ("nvlinks", self.nvlinks_listed.unread()),
            ("nvlink_state", self.nvlink_state.unread()),
            ("persistence_mode", self.persistence_mode.unread()),
            ("ecc_enabled", self.ecc_enabled.unread()),
            (
                "ecc_volatile_uncorrected",
                self.ecc_volatile_uncorrected.unread(),
            ),
            ("retired_pending", self.retired_pending.unread()),
            ("remapped_rows_pending", self.remapped_rows_pending.unread()),
            ("numa_node_id", self.numa_node_id.unread()),
            ("clock_event_reasons", self.clock_event_reasons.unread()),
            ("fabric", self.fabric.unread()),
        ];
        // Names are made only for facts without a value (a GPU has a hundred link facts).
        let mut out: Vec<(String, Unread<'_>)> = fixed
            .into_iter()
            .filter_map(|(k, u)| Some((k.to_string(), u?)))
            .collect();
        for l in &self.nvlinks {
            let n = l.link;
            if let Some(u) = l.remote_bus_id.unread() {
                out.push((format!("nvlink.{n}.remote_bus_id"), u));
            }
            if let Some(u) = l.remote_device_type.unread() {
                out.push((format!("nvlink.{n}.remote_device_type"), u));
            }
        }
        for (n, e) in &self.nvlink_errors {
            for (c, r) in e.counters() {
                if let Some(u) = r.unread() {
                    out.push((format!("nvlink.{n}.errors.{c}"), u));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The first fact (by name) NVML could not read because the GPU is lost, with why.
    pub fn lost(&self) -> Option<(String, String)> {
        self.unread()
            .into_iter()
            .find(|(_, u)| u.kind == Some(NvmlErrorKind::GpuLost))
            .map(|(k, u)| (k, u.why.to_string()))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("nvml.json: {0}")]
    Parse(String),
    #[error("nvml.json: schema '{0}' is not one this gpudoctor reads ({SCHEMA}, {SCHEMA_V1})")]
    Schema(String),
}

impl NvmlSnapshot {
    /// The GPUs by PCI address, each address parsed once; a GPU whose bus id does not parse is
    /// left out. Were an address listed twice (a damaged record), its first GPU is the one
    /// found, as a search from the front finds it.
    pub fn by_bdf(&self) -> std::collections::BTreeMap<Bdf, &NvmlGpu> {
        let mut by = std::collections::BTreeMap::new();
        for g in &self.gpus {
            if let Some(b) = g.bdf() {
                by.entry(b).or_insert(g);
            }
        }
        by
    }

    /// NVML could not be used at all: every fact unknown for that reason.
    pub fn unavailable(reason: impl Into<String>, source: &str) -> Self {
        Self::unavailable_as(reason, None, source)
    }

    /// As [`NvmlSnapshot::unavailable`], with NVML's kind of failure.
    pub fn unavailable_as(
        reason: impl Into<String>,
        kind: Option<NvmlErrorKind>,
        source: &str,
    ) -> Self {
        let reason = reason.into();
        macro_rules! u {
            () => {
                NvmlReading::unknown(reason.as_str(), kind)
            };
        }
        NvmlSnapshot {
            schema: SCHEMA.to_string(),
            source: source.to_string(),
            driver_version: u!(),
            nvml_version: u!(),
            cuda_driver_version: u!(),
            listed_by_nvml: NvmlReading::of(()),
            device_count: u!(),
            p2p: u!(),
            unavailable_kind: kind,
            unavailable: Some(reason),
            gpus: Vec::new(),
        }
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, SnapshotError> {
        Self::from_json_typed(bytes).map_or_else(|| Self::from_json_value(bytes), Ok)
    }

    /// A GPU whose entry in the file holds no `nvlinks` list (`unlisted(index)`): its links
    /// were not recorded, so "no NVLinks" is never inferred from a list that is not there. A
    /// reason the file gives (the GPU's handle, a link) stands.
    fn mark_unlisted(&mut self, unlisted: impl Fn(usize) -> bool) {
        for (i, g) in self.gpus.iter_mut().enumerate() {
            let said =
                !g.nvlinks_listed.is_value() && g.nvlinks_listed != NvmlReading::not_recorded();
            if unlisted(i) && !said {
                g.nvlinks_listed = NvmlReading::unknown("nvlinks: not recorded in nvml.json", None);
            }
        }
    }

    /// `from_json` straight from the text into the typed snapshot (a recorded 80-GPU
    /// nvml.json is over a megabyte: no JSON tree is built and copied): the schema and which
    /// GPUs hold an `nvlinks` list are read first, skipping everything else. None for anything
    /// it does not read cleanly; `from_json_value` then gives the answer and its message.
    fn from_json_typed(bytes: &[u8]) -> Option<Self> {
        /// Only what the conversion needs before the whole parse.
        #[derive(Deserialize)]
        struct Outline {
            #[serde(default)]
            schema: String,
            #[serde(default)]
            gpus: Vec<GpuOutline>,
        }
        #[derive(Deserialize)]
        struct GpuOutline {
            /// Whether the key is there (whatever it holds).
            #[serde(default, deserialize_with = "present")]
            nvlinks: bool,
        }
        fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
            serde::de::IgnoredAny::deserialize(d).map(|_| true)
        }
        let outline: Outline = serde_json::from_slice(bytes).ok()?;
        let unlisted = |i: usize| outline.gpus.get(i).is_some_and(|g| !g.nvlinks);
        Some(match outline.schema.as_str() {
            SCHEMA => {
                let mut snap: NvmlSnapshot = serde_json::from_slice(bytes).ok()?;
                if snap.gpus.len() != outline.gpus.len() {
                    return None;
                }
                snap.mark_unlisted(unlisted);
                snap
            }
            SCHEMA_V1 => {
                let mut old: v1::Snapshot = serde_json::from_slice(bytes).ok()?;
                if old.gpus.len() != outline.gpus.len() {
                    return None;
                }
                old.mark_unlisted(unlisted);
                old.into_current()
            }
            _ => return None,
        })
    }

    /// `from_json` through a JSON tree: every file, clean or not, and the message for one
    /// that does not parse.
    fn from_json_value(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let raw: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| SnapshotError::Parse(e.to_string()))?;
        let schema = raw
            .get("schema")
            .and_then(|s| s.as_str())
            .unwrap_or_default()
            .to_string();
        let gpus_raw = raw.get("gpus").and_then(|g| g.as_array());
        // A list the file does not hold reads as empty (serde's default): say it was not
        // recorded, so that "no NVLinks" is never inferred from a list that is not there.
        let unlisted = |i: usize| {
            gpus_raw
                .and_then(|g| g.get(i))
                .is_some_and(|r| r.get("nvlinks").is_none())
        };
        let snap = match schema.as_str() {
            SCHEMA => {
                let mut snap: NvmlSnapshot = serde_json::from_value(raw.clone())
                    .map_err(|e| SnapshotError::Parse(e.to_string()))?;
                snap.mark_unlisted(unlisted);
                snap
            }
            SCHEMA_V1 => {
                let mut old: v1::Snapshot = serde_json::from_value(raw.clone())
                    .map_err(|e| SnapshotError::Parse(e.to_string()))?;
                old.mark_unlisted(unlisted);
                old.into_current()
            }
            _ => return Err(SnapshotError::Schema(schema)),
        };
        Ok(snap)
    }

    /// Collect from the live driver. Never panics; every failure is recorded.
    pub fn collect_live() -> Self {
        match std::panic::catch_unwind(live::collect) {
            Ok(s) => s,
            Err(_) => NvmlSnapshot::unavailable("NVML collection panicked (bug)", "live"),
        }
    }
}

/// `gpudoctor.nvml/1`: facts as values or null, the reasons in `unread` maps by key and NVML's
/// kinds in `unread_kind` by the same key. Read and converted, never written.
mod v1 {
    use super::*;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub(super) struct Snapshot {
        source: String,
        driver_version: Option<String>,
        nvml_version: Option<String>,
        cuda_driver_version: Option<i32>,
        unavailable: Option<String>,
        unavailable_kind: Option<NvmlErrorKind>,
        unread: BTreeMap<String, String>,
        unread_kind: BTreeMap<String, NvmlErrorKind>,
        pub(super) gpus: Vec<Gpu>,
        p2p: Vec<NvmlP2p>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub(super) struct Gpu {
        index: u32,
        bus_id: String,
        uuid: Option<String>,
        name: Option<String>,
        serial: Option<String>,
        memory_total_bytes: Option<u64>,
        bar1_total_bytes: Option<u64>,
        pcie: Pcie,
        nvlinks: Vec<Link>,
        persistence_mode: Option<bool>,
        ecc_enabled: Option<bool>,
        ecc_volatile_uncorrected: Option<u64>,
        retired_pending: Option<bool>,
        remapped_rows_pending: Option<bool>,
        unread_kind: BTreeMap<String, NvmlErrorKind>,
        numa_node_id: Option<u32>,
        clock_event_reasons: Option<u64>,
        nvlink_errors: BTreeMap<u32, LinkErrors>,
        fabric: Option<NvmlFabric>,
        pub(super) unread: BTreeMap<String, String>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Pcie {
        gen_current: Option<u32>,
        gen_max: Option<u32>,
        width_current: Option<u32>,
        width_max: Option<u32>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct Link {
        link: u32,
        active: bool,
        remote_bus_id: Option<String>,
        remote_device_type: Option<crate::facts::NvLinkRemote>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    struct LinkErrors {
        replay: Option<u64>,
        recovery: Option<u64>,
        crc_flit: Option<u64>,
        crc_data: Option<u64>,
    }

    /// The reasons of one snapshot or GPU, by key, and what a fact without one reads as.
    struct Reasons<'a> {
        unread: &'a BTreeMap<String, String>,
        kinds: &'a BTreeMap<String, NvmlErrorKind>,
        /// The reason every fact of the GPU shares (its handle, or NVML unavailable), if any.
        whole: Option<(&'a str, Option<NvmlErrorKind>)>,
    }

    impl Reasons<'_> {
        /// A value; else the recorded reason (absent where NVML said NotSupported); else the
        /// reason the whole GPU or snapshot shares; else not recorded.
        fn fact<T>(&self, key: &str, v: Option<T>) -> NvmlReading<T> {
            if let Some(v) = v {
                return NvmlReading::of(v);
            }
            let kind = self.kinds.get(key).copied();
            match (self.unread.get(key), kind) {
                (Some(w), Some(NvmlErrorKind::NotSupported)) => NvmlReading::absent(w),
                (Some(w), k) => NvmlReading::unknown(w, k),
                (None, _) => match self.whole {
                    Some((w, k)) => NvmlReading::unknown(w, k),
                    None => NvmlReading::not_recorded(),
                },
            }
        }

        /// A far end of a link: as [`Reasons::fact`] for an active link or where a reason was
        /// recorded; absent for a link that is not active (NVML is not asked).
        fn far_end<T>(&self, link: &Link, what: &str, v: Option<T>) -> NvmlReading<T> {
            let key = format!("nvlink.{}.{what}", link.link);
            if v.is_some() || link.active || self.unread.contains_key(&key) {
                self.fact(&key, v)
            } else {
                NvmlReading::absent(LINK_NOT_ACTIVE)
            }
        }

        /// A fact whose only record is its reason (a value meant "nothing to say").
        fn flag(&self, key: &str) -> NvmlReading<()> {
            match self.unread.get(key) {
                Some(w) => NvmlReading::unknown(w, self.kinds.get(key).copied()),
                None => NvmlReading::of(()),
            }
        }
    }

    impl Snapshot {
        /// A GPU whose entry holds no `nvlinks` list (`unlisted(index)`) and whose handle was
        /// read: its links were not recorded.
        pub(super) fn mark_unlisted(&mut self, unlisted: impl Fn(usize) -> bool) {
            for (i, g) in self.gpus.iter_mut().enumerate() {
                if unlisted(i) && !g.unread.contains_key("device") {
                    g.unread
                        .insert("nvlinks".into(), "not recorded in nvml.json".into());
                }
            }
        }

        pub(super) fn into_current(self) -> NvmlSnapshot {
            let r = Reasons {
                unread: &self.unread,
                kinds: &self.unread_kind,
                whole: self
                    .unavailable
                    .as_deref()
                    .map(|w| (w, self.unavailable_kind)),
            };
            let device_count = match (self.unread.get("device_count"), &self.unavailable) {
                (Some(_), _) | (None, Some(_)) => r.fact("device_count", None),
                (None, None) => NvmlReading::of(self.gpus.len() as u32),
            };
            NvmlSnapshot {
                schema: SCHEMA.to_string(),
                driver_version: r.fact("driver_version", self.driver_version),
                nvml_version: r.fact("nvml_version", self.nvml_version),
                cuda_driver_version: r.fact("cuda_driver_version", self.cuda_driver_version),
                listed_by_nvml: r.flag("nvml_answered"),
                device_count,
                p2p: match (self.unread.get("p2p"), &self.unavailable) {
                    (Some(_), _) | (None, Some(_)) => r.fact("p2p", None),
                    (None, None) => NvmlReading::of(self.p2p),
                },
                gpus: self.gpus.into_iter().map(Gpu::into_current).collect(),
                source: self.source,
                unavailable: self.unavailable,
                unavailable_kind: self.unavailable_kind,
            }
        }
    }

    impl Gpu {
        fn into_current(self) -> NvmlGpu {
            let whole = self
                .unread
                .get("device")
                .map(|w| (w.as_str(), self.unread_kind.get("device").copied()));
            let r = Reasons {
                unread: &self.unread,
                kinds: &self.unread_kind,
                whole,
            };
            // The list's reasons as `nvlinks_unread` joined them: "key: why; ...".
            let list_keys: Vec<&String> = self
                .unread
                .keys()
                .filter(|k| {
                    *k == "device"
                        || *k == "nvlinks"
                        || k.strip_prefix("nvlink.")
                            .is_some_and(|n| n.parse::<u32>().is_ok())
                })
                .collect();
            let nvlinks_listed = match list_keys.first() {
                None => NvmlReading::of(()),
                Some(first) => NvmlReading::unknown(
                    list_keys
                        .iter()
                        .map(|k| format!("{k}: {}", self.unread[*k]))
                        .collect::<Vec<_>>()
                        .join("; "),
                    self.unread_kind.get(*first).copied(),
                ),
            };
            let nvlinks = self
                .nvlinks
                .iter()
                .map(|l| NvmlLink {
                    link: l.link,
                    active: l.active,
                    remote_bus_id: r.far_end(l, "remote_bus_id", l.remote_bus_id.clone()),
                    remote_device_type: r.far_end(l, "remote_device_type", l.remote_device_type),
                })
                .collect();
            let nvlink_errors = self
                .nvlink_errors
                .iter()
                .map(|(n, e)| {
                    let c = |name: &str, v: Option<u64>| {
                        r.fact(&format!("nvlink.{n}.errors.{name}"), v)
                    };
                    (
                        *n,
                        NvLinkErrors {
                            replay: c("replay", e.replay),
                            recovery: c("recovery", e.recovery),
                            crc_flit: c("crc_flit", e.crc_flit),
                            crc_data: c("crc_data", e.crc_data),
                        },
                    )
                })
                .collect();
            NvmlGpu {
                index: self.index,
                bus_id: r.fact(
                    "bus_id",
                    Some(self.bus_id.clone()).filter(|b| !b.is_empty()),
                ),
                uuid: r.fact("uuid", self.uuid.clone()),
                name: r.fact("name", self.name.clone()),
                serial: r.fact("serial", self.serial.clone()),
                memory_total_bytes: r.fact("memory_total_bytes", self.memory_total_bytes),
                bar1_total_bytes: r.fact("bar1_total_bytes", self.bar1_total_bytes),
                pcie: NvmlPcie {
                    gen_current: r.fact("pcie.gen_current", self.pcie.gen_current),
                    gen_max: r.fact("pcie.gen_max", self.pcie.gen_max),
                    width_current: r.fact("pcie.width_current", self.pcie.width_current),
                    width_max: r.fact("pcie.width_max", self.pcie.width_max),
                },
                nvlinks,
                nvlinks_listed,
                nvlink_state: r.flag("nvlink_state"),
                persistence_mode: r.fact("persistence_mode", self.persistence_mode),
                ecc_enabled: r.fact("ecc_enabled", self.ecc_enabled),
                ecc_volatile_uncorrected: r
                    .fact("ecc_volatile_uncorrected", self.ecc_volatile_uncorrected),
                retired_pending: r.fact("retired_pending", self.retired_pending),
                remapped_rows_pending: r.fact("remapped_rows_pending", self.remapped_rows_pending),
                numa_node_id: r.fact("numa_node_id", self.numa_node_id),
                clock_event_reasons: r.fact("clock_event_reasons", self.clock_event_reasons),
                nvlink_errors,
                fabric: r.fact("fabric", self.fabric.clone()),
            }
        }
    }
}

mod live {
    use super::*;
    use nvml_wrapper::Nvml;
    use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError};
    use nvml_wrapper::error::NvmlError;

    /// Say what an NVML error means to an operator.
    pub(super) fn explain(e: &NvmlError) -> String {
        match e {
            NvmlError::LibloadingError(inner) => {
                format!(
                    "libnvidia-ml.so.1 could not be loaded ({inner}): NVIDIA driver not installed"
                )
            }
            NvmlError::DriverNotLoaded => "NVIDIA kernel driver is not loaded".to_string(),
            NvmlError::NoPermission => "no permission to query NVML".to_string(),
            NvmlError::LibRmVersionMismatch => {
                "NVML library and kernel module versions differ (driver upgraded without reboot?)"
                    .to_string()
            }
            NvmlError::GpuLost => "GPU has fallen off the bus (GpuLost)".to_string(),
            NvmlError::NotSupported => "not supported by this GPU/driver".to_string(),
            NvmlError::FailedToLoadSymbol(s) => format!("NVML symbol missing: {s}"),
            other => other.to_string(),
        }
    }

    /// The kind of an NVML error, for checks to judge on.
    pub(super) fn kind(e: &NvmlError) -> NvmlErrorKind {
        match e {
            NvmlError::LibloadingError(_) => NvmlErrorKind::LibraryNotFound,
            NvmlError::DriverNotLoaded => NvmlErrorKind::DriverNotLoaded,
            NvmlError::NoPermission => NvmlErrorKind::NoPermission,
            NvmlError::LibRmVersionMismatch => NvmlErrorKind::LibRmVersionMismatch,
            NvmlError::GpuLost => NvmlErrorKind::GpuLost,
            NvmlError::NotSupported => NvmlErrorKind::NotSupported,
            NvmlError::FailedToLoadSymbol(_) => NvmlErrorKind::SymbolMissing,
            _ => NvmlErrorKind::Other,
        }
    }

    /// One NVML answer as a reading: NotSupported is absent, any other error unknown with its
    /// kind.
    pub(super) fn read<T>(r: Result<T, NvmlError>) -> NvmlReading<T> {
        match r {
            Ok(v) => NvmlReading::of(v),
            Err(e @ NvmlError::NotSupported) => NvmlReading::absent(explain(&e)),
            Err(e) => NvmlReading::unknown(explain(&e), Some(kind(&e))),
        }
    }

    /// A call made through the library's function pointer: its symbol, then its return code.
    fn symbol_missing<T>(e: impl std::fmt::Display) -> NvmlReading<T> {
        NvmlReading::unknown(
            format!("symbol missing: {e}"),
            Some(NvmlErrorKind::SymbolMissing),
        )
    }

    fn return_code<T>(rc: u32) -> NvmlReading<T> {
        NvmlReading::unknown(
            format!("NVML error {rc}"),
            Some(NvmlErrorKind::of_return_code(rc)),
        )
    }

    pub(super) fn collect() -> NvmlSnapshot {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => return NvmlSnapshot::unavailable_as(explain(&e), Some(kind(&e)), "live"),
        };
        let device_count = read(nvml.device_count());
        let count = device_count.value().copied().unwrap_or(0);
        let mut snap = NvmlSnapshot {
            schema: SCHEMA.to_string(),
            source: "live".to_string(),
            driver_version: read(nvml.sys_driver_version()),
            nvml_version: read(nvml.sys_nvml_version()),
            cuda_driver_version: read(nvml.sys_cuda_driver_version()),
            unavailable: None,
            unavailable_kind: None,
            listed_by_nvml: NvmlReading::of(()),
            device_count,
            gpus: Vec::new(),
            p2p: NvmlReading::of(Vec::new()),
        };
        for i in 0..count {
            let dev = match nvml.device_by_index(i) {
                Ok(d) => d,
                Err(e) => {
                    snap.gpus
                        .push(NvmlGpu::unread_whole(i, &explain(&e), Some(kind(&e))));
                    continue;
                }
            };
            let mut g = NvmlGpu {
                index: i,
                bus_id: read(dev.pci_info()).map(|p| p.bus_id),
                uuid: read(dev.uuid()),
                name: read(dev.name()),
                serial: read(dev.serial()),
                memory_total_bytes: read(dev.memory_info()).map(|m| m.total),
                bar1_total_bytes: read(dev.bar1_memory_info()).map(|m| m.total),
                pcie: NvmlPcie {
                    gen_current: read(dev.current_pcie_link_gen()),
                    gen_max: read(dev.max_pcie_link_gen()),
                    width_current: read(dev.current_pcie_link_width()),
                    width_max: read(dev.max_pcie_link_width()),
                },
                nvlinks: Vec::new(),
                nvlinks_listed: NvmlReading::of(()),
                // Each link's state is asked, down ones included.
                nvlink_state: NvmlReading::of(()),
                persistence_mode: read(dev.is_in_persistent_mode()),
                ecc_enabled: read(dev.is_ecc_enabled()).map(|e| e.currently_enabled),
                ecc_volatile_uncorrected: read(
                    dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
                ),
                retired_pending: read(dev.are_pages_pending_retired()),
                remapped_rows_pending: remapped_pending(&nvml, &dev),
                numa_node_id: read(dev.numa_node_id()),
                clock_event_reasons: read(dev.current_throttle_reasons().map(|r| r.bits())),
                nvlink_errors: BTreeMap::new(),
                fabric: NvmlReading::not_recorded(),
            };
            nvlinks(&nvml, &dev, &mut g);
            health(&nvml, &dev, &mut g);
            snap.gpus.push(g);
        }
        snap.p2p = NvmlReading::of(collect_p2p(&nvml, count));
        snap
    }

    /// Each NVLink of `dev`: whether it is active, and the bus id and kind of its remote end;
    /// a link whose state could not be read ends the list, unknown from there on.
    fn nvlinks(nvml: &Nvml, dev: &nvml_wrapper::Device, g: &mut NvmlGpu) {
        // NVML_NVLINK_MAX_LINKS is 18 on Hopper; ask each link and stop at the first
        // InvalidArg (no such link).
        for link in 0..18u32 {
            let l = dev.link_wrapper_for(link);
            match l.is_active() {
                Ok(active) => {
                    let (remote_bus_id, remote_device_type) = if active {
                        (
                            read(l.remote_pci_info()).map(|p| p.bus_id),
                            remote_type(nvml, dev, link),
                        )
                    } else {
                        (
                            NvmlReading::absent(LINK_NOT_ACTIVE),
                            NvmlReading::absent(LINK_NOT_ACTIVE),
                        )
                    };
                    g.nvlinks.push(NvmlLink {
                        link,
                        active,
                        remote_bus_id,
                        remote_device_type,
                    });
                }
                Err(NvmlError::InvalidArg) | Err(NvmlError::NotSupported) => break,
                Err(e) => {
                    g.nvlinks_listed = NvmlReading::unknown(
                        format!("nvlink.{link}: {}", explain(&e)),
                        Some(kind(&e)),
                    );
                    break;
                }
            }
        }
    }

    /// The health facts of `gpu.nvlink-errors` and `gpu.fabric`: error counters of the active
    /// NVLinks, fabric registration.
    fn health(nvml: &Nvml, dev: &nvml_wrapper::Device, g: &mut NvmlGpu) {
        use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter as E;
        let active: Vec<u32> = g
            .nvlinks
            .iter()
            .filter(|l| l.active)
            .map(|l| l.link)
            .collect();
        for link in active {
            let l = dev.link_wrapper_for(link);
            let e = NvLinkErrors {
                replay: read(l.error_counter(E::DlReplay)),
                recovery: read(l.error_counter(E::DlRecovery)),
                crc_flit: read(l.error_counter(E::DlCrcFlit)),
                crc_data: read(l.error_counter(E::DlCrcData)),
            };
            g.nvlink_errors.insert(link, e);
        }
        g.fabric = fabric(nvml, dev);
    }

    /// nvmlDeviceGetGpuFabricInfo (not wrapped by nvml-wrapper 0.13), through the loaded
    /// library's function pointer as `remote_type` does.
    fn fabric(nvml: &Nvml, dev: &nvml_wrapper::Device) -> NvmlReading<NvmlFabric> {
        let sym = match nvml.lib().nvmlDeviceGetGpuFabricInfo.as_ref() {
            Ok(s) => s,
            Err(e) => return symbol_missing(e),
        };
        let mut info = nvml_wrapper_sys::bindings::nvmlGpuFabricInfo_t {
            clusterUuid: [0; 16],
            status: 0,
            cliqueId: 0,
            state: 0xff,
        };
        // SAFETY: the handle comes from a live Device of this Nvml; `info` outlives the call.
        let rc = unsafe { sym(dev.handle(), &mut info) };
        match rc {
            0 => NvmlReading::of(NvmlFabric {
                state: match info.state {
                    0 => "not-supported".into(),
                    1 => "not-started".into(),
                    2 => "in-progress".into(),
                    3 => "completed".into(),
                    n => format!("unknown-{n}"),
                },
                status: Some(info.status),
            }),
            // NVML_ERROR_NOT_SUPPORTED: a GPU without fabric support (PCIe-only), which is the
            // fabric state "not supported", read.
            3 => NvmlReading::of(NvmlFabric {
                state: "not-supported".into(),
                status: None,
            }),
            rc => return_code(rc),
        }
    }
    fn p2p_name(s: nvml_wrapper::enum_wrappers::device::P2pStatus) -> String {
        use nvml_wrapper::enum_wrappers::device::P2pStatus as P;
        match s {
            P::Ok => "ok",
            P::ChipsetNotSupported => "chipset-not-supported",
            P::GpuNotSupported => "gpu-not-supported",
            P::IohTopologyNotSupported => "ioh-topology-not-supported",
            P::DisabledByRegkey => "disabled-by-regkey",
            P::NotSupported => "not-supported",
            P::Unknown => "unknown",
        }
        .to_string()
    }

    fn collect_p2p(nvml: &Nvml, count: u32) -> Vec<NvmlP2p> {
        use nvml_wrapper::enum_wrappers::device::P2pCapabilitiesIndex as I;
        let devs: Vec<_> = (0..count)
            .filter_map(|i| nvml.device_by_index(i).ok())
            .collect();
        let mut out = Vec::new();
        for (i, a) in devs.iter().enumerate() {
            for (j, b) in devs.iter().enumerate() {
                if i == j {
                    continue;
                }
                let id =
                    |d: &nvml_wrapper::Device| d.pci_info().map(|p| p.bus_id).unwrap_or_default();
                let mut e = NvmlP2p {
                    a: id(a),
                    b: id(b),
                    ..Default::default()
                };
                match a.p2p_status(b, I::Read) {
                    Ok(s) => e.read = Some(p2p_name(s)),
                    Err(err) => e.error = Some(explain(&err)),
                }
                match a.p2p_status(b, I::Write) {
                    Ok(s) => e.write = Some(p2p_name(s)),
                    Err(err) => e.error = Some(explain(&err)),
                }
                out.push(e);
            }
        }
        out
    }

    /// nvml-wrapper 0.13's `remote_device_type` writes its answer into a temporary and always
    /// returns Unknown, so call nvmlDeviceGetNvLinkRemoteDeviceType ourselves.
    fn remote_type(
        nvml: &Nvml,
        dev: &nvml_wrapper::Device,
        link: u32,
    ) -> NvmlReading<crate::facts::NvLinkRemote> {
        use crate::facts::NvLinkRemote;
        let sym = match nvml.lib().nvmlDeviceGetNvLinkRemoteDeviceType.as_ref() {
            Ok(s) => s,
            Err(e) => return symbol_missing(e),
        };
        let mut t: nvml_wrapper_sys::bindings::nvmlIntNvLinkDeviceType_t = 0xff;
        // SAFETY: the handle comes from a live Device of this Nvml; `t` outlives the call.
        let rc = unsafe { sym(dev.handle(), link, &mut t) };
        if rc != 0 {
            return return_code(rc);
        }
        NvmlReading::of(match t {
            0 => NvLinkRemote::Gpu,
            1 => NvLinkRemote::Ibmnpu,
            2 => NvLinkRemote::Switch,
            _ => NvLinkRemote::Unknown,
        })
    }

    /// nvmlDeviceGetRemappedRows (not wrapped by nvml-wrapper 0.13): pending remaps need a
    /// GPU reset before the memory is usable at full capacity.
    fn remapped_pending(nvml: &Nvml, dev: &nvml_wrapper::Device) -> NvmlReading<bool> {
        let sym = match nvml.lib().nvmlDeviceGetRemappedRows.as_ref() {
            Ok(s) => s,
            Err(e) => return symbol_missing(e),
        };
        let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: valid handle; four out-pointers to locals.
        let rc = unsafe { sym(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
        match rc {
            0 => NvmlReading::of(pending != 0),
            3 => NvmlReading::absent("not supported by this GPU"),
            rc => return_code(rc),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `gpudoctor.nvml/1` file with each way a fact was written: values, reasons with and
    /// without kinds, facts not recorded, a partly read NVLink list.
    const V1: &str = r#"{"schema":"gpudoctor.nvml/1","source":"live","driver_version":"570.86.15",
        "unread":{"nvml_version":"Unknown Error"},"unread_kind":{"nvml_version":"other"},
        "gpus":[
          {"index":0,"bus_id":"00000000:1A:00.0","pcie":{"gen_current":5,"gen_max":5},
           "nvlinks":[{"link":0,"active":true,"remote_bus_id":"00000000:1B:00.0","remote_device_type":"gpu"},
                      {"link":1,"active":false}],
           "nvlink_errors":{"0":{"replay":0,"recovery":0,"crc_flit":0}},
           "unread":{"numa_node_id":"not supported by this GPU/driver",
                     "persistence_mode":"no permission to query NVML",
                     "retired_pending":"NVML symbol missing: x",
                     "nvlink.0.errors.crc_data":"GPU has fallen off the bus (GpuLost)"},
           "unread_kind":{"numa_node_id":"not-supported","persistence_mode":"no-permission",
                          "nvlink.0.errors.crc_data":"gpu-lost"}},
          {"index":1,"bus_id":"00000000:1B:00.0",
           "nvlinks":[{"link":0,"active":true},{"link":1,"active":true}],
           "unread":{"nvlink.2":"Unknown Error","nvlink_state":"only active links written"},
           "unread_kind":{"nvlink.2":"other"}}],
        "p2p":[{"a":"00000000:1A:00.0","b":"00000000:1B:00.0","read":"ok","write":"ok"}]}"#;

    /// The text read straight into the types (`from_json_typed`) and through a JSON tree
    /// (`from_json_value`, every file's fallback) give the same snapshot: for this module's
    /// nvml/1 example, the same GPUs without their NVLink lists, each of them written back as
    /// nvml/2, and every fixture's nvml.json laid out beside the code.
    #[test]
    fn both_ways_of_reading_agree() {
        let mut texts: Vec<(String, String)> = vec![("V1".into(), V1.to_string())];
        let mut unlisted: serde_json::Value = serde_json::from_str(V1).unwrap();
        for g in unlisted["gpus"].as_array_mut().unwrap() {
            g.as_object_mut().unwrap().remove("nvlinks");
        }
        texts.push(("V1 without nvlinks".into(), unlisted.to_string()));
        let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        for e in std::fs::read_dir(&fixtures).unwrap().flatten() {
            if let Ok(t) = std::fs::read_to_string(e.path().join("nvml.json")) {
                texts.push((e.path().display().to_string(), t));
            }
        }
        for (name, t) in texts.clone() {
            let snap = NvmlSnapshot::from_json_value(t.as_bytes()).unwrap();
            texts.push((
                format!("{name} as nvml/2"),
                serde_json::to_string(&snap).unwrap(),
            ));
        }
        let mut schemas = BTreeMap::new();
        for (name, t) in &texts {
            let slow = NvmlSnapshot::from_json_value(t.as_bytes()).unwrap();
            let fast = NvmlSnapshot::from_json_typed(t.as_bytes());
            assert_eq!(fast.as_ref(), Some(&slow), "{name}");
            let schema: serde_json::Value = serde_json::from_str(t).unwrap();
            *schemas.entry(schema["schema"].to_string()).or_insert(0) += 1;
        }
        // Both schemas were read from the fixtures, not only from this module's example.
        assert!(
            schemas.values().all(|n| *n >= 4) && schemas.len() == 2,
            "{schemas:?}"
        );
        // A file the typed reading refuses goes the old way, with its message.
        let broken = br#"{"schema":"gpudoctor.nvml/2","gpus":[{"index":"zero"}]}"#;
        assert!(NvmlSnapshot::from_json_typed(broken).is_none());
        assert_eq!(
            NvmlSnapshot::from_json(broken).unwrap_err().to_string(),
            NvmlSnapshot::from_json_value(broken)
                .unwrap_err()
                .to_string()
        );
    }

    #[test]
    fn nvml_errors_keep_their_kind() {
        use NvmlErrorKind as K;
        use nvml_wrapper::error::NvmlError;
        for (e, k) in [
            (NvmlError::GpuLost, K::GpuLost),
            (NvmlError::NoPermission, K::NoPermission),
            (NvmlError::NotSupported, K::NotSupported),
            (NvmlError::DriverNotLoaded, K::DriverNotLoaded),
            (NvmlError::LibRmVersionMismatch, K::LibRmVersionMismatch),
            (NvmlError::Unknown, K::Other),
        ] {
            assert_eq!(super::live::kind(&e), k, "{e:?}");
            assert!(!super::live::explain(&e).is_empty());
        }
        // NotSupported is absent (read, not there); any other error unknown with its kind.
        let r = super::live::read::<u32>(Err(NvmlError::NotSupported));
        assert_eq!(r, NvmlReading::absent("not supported by this GPU/driver"));
        assert_eq!(r.unread().unwrap().kind, Some(K::NotSupported));
        let r = super::live::read::<u32>(Err(NvmlError::GpuLost));
        assert_eq!(r.kind, Some(K::GpuLost));
        assert_eq!(r.why(), Some("GPU has fallen off the bus (GpuLost)"));
        // Recorded kinds round-trip; a kind this build does not know reads as Other, and an
        // nvml.json written before kinds were kept reads with none.
        let k: NvmlErrorKind = serde_json::from_str("\"gpu-lost\"").unwrap();
        assert_eq!(k, K::GpuLost);
        let k: NvmlErrorKind = serde_json::from_str("\"cosmic-ray\"").unwrap();
        assert_eq!(k, K::Other);
        let old = br#"{"schema":"gpudoctor.nvml/1","source":"live","gpus":[{"bus_id":"00000000:06:00.0","unread":{"ecc_enabled":"x"}}]}"#;
        let s = NvmlSnapshot::from_json(old).unwrap();
        assert_eq!(s.gpus[0].ecc_enabled, NvmlReading::unknown("x", None));
        assert!(s.unavailable_kind.is_none());
    }

    #[test]
    fn json_shape_is_a_reading_with_its_kind() {
        let r: NvmlReading<u32> = NvmlReading::of(5);
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"value":5}"#);
        let r: NvmlReading<u32> = NvmlReading::absent("not supported by this GPU/driver");
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"absent":"not supported by this GPU/driver"}"#
        );
        let r: NvmlReading<u32> = NvmlReading::unknown(
            "no permission to query NVML",
            Some(NvmlErrorKind::NoPermission),
        );
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"unknown":"no permission to query NVML","kind":"no-permission"}"#
        );
        let r2: NvmlReading<u32> =
            serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(r2, r);
        let r: NvmlReading<()> = NvmlReading::of(());
        assert_eq!(serde_json::to_string(&r).unwrap(), r#"{"value":null}"#);
        // A struct value and a map keyed by number round-trip inside the flattened reading.
        let f = NvmlReading::of(NvmlFabric {
            state: "completed".into(),
            status: Some(0),
        });
        let back: NvmlReading<NvmlFabric> =
            serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(back, f);
        // The whole snapshot round-trips.
        let s = NvmlSnapshot::from_json(V1.as_bytes()).unwrap();
        let again = NvmlSnapshot::from_json(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }

    /// Every fact of a `gpudoctor.nvml/1` file reads as the reading its value, reason and kind
    /// meant: a value; NotSupported as absent; another reason as unknown with its kind; nothing
    /// as not recorded; the NVLink list's reasons joined as `nvlinks_unread` joined them.
    #[test]
    fn v1_reads_as_readings() {
        let s = NvmlSnapshot::from_json(V1.as_bytes()).unwrap();
        assert_eq!(s.schema, SCHEMA);
        assert_eq!(s.driver_version, NvmlReading::of("570.86.15".to_string()));
        assert_eq!(
            s.nvml_version,
            NvmlReading::unknown("Unknown Error", Some(NvmlErrorKind::Other))
        );
        assert_eq!(s.cuda_driver_version, NvmlReading::not_recorded());
        assert_eq!(s.listed_by_nvml, NvmlReading::of(()));
        assert_eq!(s.device_count, NvmlReading::of(2));
        assert_eq!(s.p2p.value().map(Vec::len), Some(1));
        let g = &s.gpus[0];
        assert_eq!(g.bdf().unwrap().to_string(), "0000:1a:00.0");
        assert_eq!(
            g.numa_node_id,
            NvmlReading::absent("not supported by this GPU/driver")
        );
        assert_eq!(
            g.persistence_mode,
            NvmlReading::unknown(
                "no permission to query NVML",
                Some(NvmlErrorKind::NoPermission)
            )
        );
        assert_eq!(
            g.retired_pending,
            NvmlReading::unknown("NVML symbol missing: x", None)
        );
        assert_eq!(g.clock_event_reasons, NvmlReading::not_recorded());
        assert_eq!(g.pcie.gen_max, NvmlReading::of(5));
        assert_eq!(g.nvlinks_unread(), None);
        assert_eq!(
            g.nvlinks[1].remote_bus_id,
            NvmlReading::absent(LINK_NOT_ACTIVE)
        );
        assert_eq!(
            g.nvlinks[0].remote_bus_id,
            NvmlReading::of("00000000:1B:00.0".to_string())
        );
        assert_eq!(
            g.nvlink_errors[&0].crc_data,
            NvmlReading::unknown(
                "GPU has fallen off the bus (GpuLost)",
                Some(NvmlErrorKind::GpuLost)
            )
        );
        assert_eq!(
            g.lost(),
            Some((
                "nvlink.0.errors.crc_data".to_string(),
                "GPU has fallen off the bus (GpuLost)".to_string()
            ))
        );
        let g = &s.gpus[1];
        assert_eq!(
            g.nvlinks_unread().as_deref(),
            Some("nvlink.2: Unknown Error")
        );
        assert_eq!(g.nvlinks.len(), 2);
        assert_eq!(
            g.nvlink_state,
            NvmlReading::unknown("only active links written", None)
        );
        // A GPU whose list the file does not hold: not recorded, never "no NVLinks".
        let no_list = br#"{"schema":"gpudoctor.nvml/1","gpus":[{"bus_id":"00000000:1A:00.0"}]}"#;
        let s = NvmlSnapshot::from_json(no_list).unwrap();
        assert_eq!(
            s.gpus[0].nvlinks_unread().as_deref(),
            Some("nvlinks: not recorded in nvml.json")
        );
        let s2 = NvmlSnapshot::from_json(
            &serde_json::to_vec(&serde_json::json!({"schema": SCHEMA, "gpus": [{"bus_id": {"value": "00000000:1A:00.0"}}]})).unwrap(),
        )
        .unwrap();
        assert_eq!(s2.gpus[0].nvlinks_unread(), s.gpus[0].nvlinks_unread());
    }

    #[test]
    fn schema_is_checked() {
        assert!(NvmlSnapshot::from_json(br#"{"schema":"gpudoctor.nvml/9","gpus":[]}"#).is_err());
        assert!(NvmlSnapshot::from_json(b"{").is_err());
        let s = NvmlSnapshot::from_json(
            br#"{"schema":"gpudoctor.nvml/1","gpus":[{"index":0,"bus_id":"00000000:1A:00.0"}]}"#,
        )
        .unwrap();
        assert_eq!(s.gpus[0].bdf().unwrap().to_string(), "0000:1a:00.0");
        let s = NvmlSnapshot::from_json(
            br#"{"schema":"gpudoctor.nvml/2","gpus":[{"index":0,"bus_id":{"value":"00000000:1A:00.0"}}]}"#,
        )
        .unwrap();
        assert_eq!(s.gpus[0].bdf().unwrap().to_string(), "0000:1a:00.0");
        assert_eq!(s.gpus[0].uuid, NvmlReading::not_recorded());
        // A GPU without its list reads as "not recorded", unless the file says why.
        assert_eq!(
            s.gpus[0].nvlinks_unread().as_deref(),
            Some("nvlinks: not recorded in nvml.json")
        );
        let s = NvmlSnapshot::from_json(
            br#"{"schema":"gpudoctor.nvml/2","gpus":[{"nvlinks_listed":{"unknown":"device: GPU has fallen off the bus (GpuLost)","kind":"gpu-lost"}}]}"#,
        )
        .unwrap();
        assert_eq!(
            s.gpus[0].nvlinks_listed,
            NvmlReading::unknown(
                "device: GPU has fallen off the bus (GpuLost)",
                Some(NvmlErrorKind::GpuLost)
            )
        );
    }

    #[test]
    fn live_without_driver_is_a_finding() {
        // On machines without the driver this must come back unavailable, not panic.
        let s = NvmlSnapshot::collect_live();
        if s.unavailable.is_some() {
            assert!(s.gpus.is_empty());
            assert!(s.driver_version.why().is_some());
        }
    }
}
