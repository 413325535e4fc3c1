//! NVML facts as a plain, serializable snapshot (`nvml.json` in a recorded tree or bundle).
//!
//! Live collection loads libnvidia-ml at run time through `nvml-wrapper`; a missing library,
//! a missing driver, or a failing call is recorded as the reason a fact is unknown, never as a
//! crash and never as a default value. This module must not look at sysfs: the join with
//! sysfs devices happens in `topo`, on the numeric BDF.

use crate::pci::Bdf;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: &str = "gpudoctor.nvml/1";

/// The `unread` key of a snapshot whose GPU list says nothing of NVML answering (a record
/// whose GPUs are only its PCI devices): NVML is not judged on it.
pub const NVML_ANSWERED: &str = "nvml_answered";

/// The `unread` key of a GPU whose NVLinks were listed without their state (only the active
/// ones written): a down link cannot be seen.
pub const NVLINK_STATE: &str = "nvlink_state";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlSnapshot {
    pub schema: String,
    /// "live", "synthetic", "derived from nvidia-smi -q", ...
    pub source: String,
    pub driver_version: Option<String>,
    pub nvml_version: Option<String>,
    pub cuda_driver_version: Option<i32>,
    /// Set when NVML could not be used at all (library missing, driver not loaded...).
    pub unavailable: Option<String>,
    /// What kind of failure `unavailable` is, so checks can judge on it (absent in nvml.json
    /// files recorded before kinds were kept: unknown).
    pub unavailable_kind: Option<NvmlErrorKind>,
    /// Facts that could not be read, with the reason.
    pub unread: BTreeMap<String, String>,
    /// The kind of each failure in `unread`, by the same key.
    pub unread_kind: BTreeMap<String, NvmlErrorKind>,
    pub gpus: Vec<NvmlGpu>,
    /// nvmlDeviceGetP2PStatus for every ordered GPU pair (read and write capability).
    pub p2p: Vec<NvmlP2p>,
}

/// NVML's error, as a kind checks can branch on (nvml-wrapper's typed errors, kept beside the
/// prose in the snapshot rather than flattened into it).
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
    /// NVML form, `00000000:1A:00.0`.
    pub bus_id: String,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub serial: Option<String>,
    pub memory_total_bytes: Option<u64>,
    pub bar1_total_bytes: Option<u64>,
    pub pcie: NvmlPcie,
    pub nvlinks: Vec<NvmlLink>,
    pub persistence_mode: Option<bool>,
    pub ecc_enabled: Option<bool>,
    pub ecc_volatile_uncorrected: Option<u64>,
    pub retired_pending: Option<bool>,
    pub remapped_rows_pending: Option<bool>,
    /// The kind of each failure in `unread`, by the same key, where NVML said (files recorded
    /// before kinds were kept have none: unknown).
    pub unread_kind: BTreeMap<String, NvmlErrorKind>,
    /// The NUMA node of the GPU's own memory (nvmlDeviceGetNumaNodeId: coherent systems such as
    /// Grace Hopper); absent on PCIe/SXM GPUs of x86 hosts, where NVML does not support it.
    pub numa_node_id: Option<u32>,
    /// nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons): the bit mask of
    /// `nvmlClocksEventReason*` (0x8 HW slowdown, 0x20 SW thermal, 0x40 HW thermal, 0x80 HW
    /// power brake...). Absent in nvml.json files recorded before it was kept: not recorded.
    pub clock_event_reasons: Option<u64>,
    /// NVLink error counters by link number (nvmlDeviceGetNvLinkErrorCounter), for the links
    /// in `nvlinks` that are active; a link missing here was not read (why:
    /// `unread["nvlink.N.errors"]`) or not recorded.
    pub nvlink_errors: BTreeMap<u32, NvLinkErrors>,
    /// nvmlDeviceGetGpuFabricInfo: the GPU's registration with the NVSwitch fabric (fabric
    /// manager). None: not read (why: `unread["fabric"]`) or not recorded.
    pub fabric: Option<NvmlFabric>,
    pub unread: BTreeMap<String, String>,
}

/// One NVLink's error counters since the driver loaded (None: that counter failed to read).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvLinkErrors {
    /// NVML_NVLINK_ERROR_DL_REPLAY: data link transmit replays.
    pub replay: Option<u64>,
    /// NVML_NVLINK_ERROR_DL_RECOVERY: data link recoveries (link retraining).
    pub recovery: Option<u64>,
    /// NVML_NVLINK_ERROR_DL_CRC_FLIT: flow-control digit CRC errors received.
    pub crc_flit: Option<u64>,
    /// NVML_NVLINK_ERROR_DL_CRC_DATA: data CRC errors received.
    pub crc_data: Option<u64>,
}

/// The GPU's fabric registration (nvmlGpuFabricInfo_t).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlFabric {
    /// "not-supported" (no NVSwitch fabric), "not-started", "in-progress", "completed", or
    /// "unknown-N" for a value this build does not know.
    pub state: String,
    /// The NVML return code of the registration once completed (0: success).
    pub status: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlPcie {
    pub gen_current: Option<u32>,
    pub gen_max: Option<u32>,
    pub width_current: Option<u32>,
    pub width_max: Option<u32>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NvmlLink {
    pub link: u32,
    pub active: bool,
    pub remote_bus_id: Option<String>,
    /// What is at the far end ("gpu", "switch", "ibmnpu", "unknown" in nvml.json).
    pub remote_device_type: Option<crate::facts::NvLinkRemote>,
}

impl NvmlGpu {
    pub fn bdf(&self) -> Option<Bdf> {
        self.bus_id.parse().ok()
    }

    /// Why the NVLink list is not the whole truth, if it is not: the GPU's handle or a link's
    /// state could not be read (`device`, `nvlink.N`), or nvml.json recorded no list. An empty
    /// list with no such reason is "no NVLinks", positively read (NVML said NotSupported or
    /// InvalidArg for link 0).
    pub fn nvlinks_unread(&self) -> Option<String> {
        let why: Vec<String> = self
            .unread
            .iter()
            .filter(|(k, _)| {
                *k == "device"
                    || *k == "nvlinks"
                    || k.strip_prefix("nvlink.")
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .map(|(k, v)| format!("{k}: {v}"))
            .collect();
        (!why.is_empty()).then(|| why.join("; "))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("nvml.json: {0}")]
    Parse(String),
    #[error("nvml.json: schema '{0}' is not one this gpudoctor reads ({SCHEMA})")]
    Schema(String),
}

impl NvmlSnapshot {
    pub fn unavailable(reason: impl Into<String>, source: &str) -> Self {
        NvmlSnapshot {
            schema: SCHEMA.to_string(),
            source: source.to_string(),
            unavailable: Some(reason.into()),
            ..Default::default()
        }
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, SnapshotError> {
        let raw: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| SnapshotError::Parse(e.to_string()))?;
        let mut snap: NvmlSnapshot =
            serde_json::from_value(raw.clone()).map_err(|e| SnapshotError::Parse(e.to_string()))?;
        if snap.schema != SCHEMA {
            return Err(SnapshotError::Schema(snap.schema));
        }
        // A list the file does not hold reads as empty (serde's default): say it was not
        // recorded, so that "no NVLinks" is never inferred from a list that is not there.
        if let Some(gpus) = raw.get("gpus").and_then(|g| g.as_array()) {
            for (g, r) in snap.gpus.iter_mut().zip(gpus) {
                if r.get("nvlinks").is_none() && !g.unread.contains_key("device") {
                    g.unread
                        .insert("nvlinks".into(), "not recorded in nvml.json".into());
                }
            }
        }
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

    fn put<T>(
        unread: &mut BTreeMap<String, String>,
        kinds: &mut BTreeMap<String, NvmlErrorKind>,
        key: &str,
        r: Result<T, NvmlError>,
    ) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                unread.insert(key.to_string(), explain(&e));
                kinds.insert(key.to_string(), kind(&e));
                None
            }
        }
    }

    pub(super) fn collect() -> NvmlSnapshot {
        let nvml = match Nvml::init() {
            Ok(n) => n,
            Err(e) => {
                return NvmlSnapshot {
                    unavailable_kind: Some(kind(&e)),
                    ..NvmlSnapshot::unavailable(explain(&e), "live")
                };
            }
        };
        let mut snap = NvmlSnapshot {
            schema: SCHEMA.to_string(),
            source: "live".to_string(),
            ..Default::default()
        };
        let mut unread = BTreeMap::new();
        let mut unread_kind = BTreeMap::new();
        snap.driver_version = put(
            &mut unread,
            &mut unread_kind,
            "driver_version",
            nvml.sys_driver_version(),
        );
        snap.nvml_version = put(
            &mut unread,
            &mut unread_kind,
            "nvml_version",
            nvml.sys_nvml_version(),
        );
        snap.cuda_driver_version = put(
            &mut unread,
            &mut unread_kind,
            "cuda_driver_version",
            nvml.sys_cuda_driver_version(),
        );
        let count = match nvml.device_count() {
            Ok(c) => c,
            Err(e) => {
                unread.insert("device_count".into(), explain(&e));
                unread_kind.insert("device_count".into(), kind(&e));
                0
            }
        };
        for i in 0..count {
            let mut g = NvmlGpu {
                index: i,
                ..Default::default()
            };
            let mut u = BTreeMap::new();
            let mut k = BTreeMap::new();
            let dev = match nvml.device_by_index(i) {
                Ok(d) => d,
                Err(e) => {
                    u.insert("device".into(), explain(&e));
                    k.insert("device".into(), kind(&e));
                    g.unread = u;
                    g.unread_kind = k;
                    snap.gpus.push(g);
                    continue;
                }
            };
            if let Some(pci) = put(&mut u, &mut k, "bus_id", dev.pci_info()) {
                g.bus_id = pci.bus_id;
            }
            g.uuid = put(&mut u, &mut k, "uuid", dev.uuid());
            g.name = put(&mut u, &mut k, "name", dev.name());
            g.serial = put(&mut u, &mut k, "serial", dev.serial());
            g.memory_total_bytes =
                put(&mut u, &mut k, "memory_total_bytes", dev.memory_info()).map(|m| m.total);
            g.bar1_total_bytes =
                put(&mut u, &mut k, "bar1_total_bytes", dev.bar1_memory_info()).map(|m| m.total);
            g.pcie.gen_current = put(
                &mut u,
                &mut k,
                "pcie.gen_current",
                dev.current_pcie_link_gen(),
            );
            g.pcie.gen_max = put(&mut u, &mut k, "pcie.gen_max", dev.max_pcie_link_gen());
            g.pcie.width_current = put(
                &mut u,
                &mut k,
                "pcie.width_current",
                dev.current_pcie_link_width(),
            );
            g.pcie.width_max = put(&mut u, &mut k, "pcie.width_max", dev.max_pcie_link_width());
            g.persistence_mode = put(
                &mut u,
                &mut k,
                "persistence_mode",
                dev.is_in_persistent_mode(),
            );
            g.numa_node_id = put(&mut u, &mut k, "numa_node_id", dev.numa_node_id());
            g.ecc_enabled = put(&mut u, &mut k, "ecc_enabled", dev.is_ecc_enabled())
                .map(|e| e.currently_enabled);
            g.ecc_volatile_uncorrected = put(
                &mut u,
                &mut k,
                "ecc_volatile_uncorrected",
                dev.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            );
            g.retired_pending = put(
                &mut u,
                &mut k,
                "retired_pending",
                dev.are_pages_pending_retired(),
            );
            g.remapped_rows_pending = remapped_pending(&nvml, &dev, &mut u);
            nvlinks(&nvml, &dev, &mut g, &mut u, &mut k);
            health(&nvml, &dev, &mut g, &mut u, &mut k);
            g.unread = u;
            g.unread_kind = k;
            snap.gpus.push(g);
        }
        collect_p2p(&nvml, count, &mut snap);
        snap.unread = unread;
        snap.unread_kind = unread_kind;
        snap
    }

    /// Each NVLink of `dev`: whether it is active, and the bus id and kind of its remote end;
    /// what could not be read goes to `u` and `k`.
    fn nvlinks(
        nvml: &Nvml,
        dev: &nvml_wrapper::Device,
        g: &mut NvmlGpu,
        u: &mut BTreeMap<String, String>,
        k: &mut BTreeMap<String, NvmlErrorKind>,
    ) {
        // NVML_NVLINK_MAX_LINKS is 18 on Hopper; ask each link and stop at the first
        // InvalidArg (no such link).
        for link in 0..18u32 {
            let l = dev.link_wrapper_for(link);
            match l.is_active() {
                Ok(active) => {
                    let remote_bus_id = if active {
                        put(
                            u,
                            k,
                            &format!("nvlink.{link}.remote_bus_id"),
                            l.remote_pci_info(),
                        )
                        .map(|p| p.bus_id)
                    } else {
                        None
                    };
                    let remote_device_type = if active {
                        remote_type(nvml, dev, link, u)
                    } else {
                        None
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
                    u.insert(format!("nvlink.{link}"), explain(&e));
                    k.insert(format!("nvlink.{link}"), kind(&e));
                    break;
                }
            }
        }
    }

    /// The health facts of `gpu.throttle`, `gpu.nvlink-errors` and `gpu.fabric`: clock event
    /// reasons, error counters of the active NVLinks, fabric registration.
    fn health(
        nvml: &Nvml,
        dev: &nvml_wrapper::Device,
        g: &mut NvmlGpu,
        u: &mut BTreeMap<String, String>,
        k: &mut BTreeMap<String, NvmlErrorKind>,
    ) {
        use nvml_wrapper::enum_wrappers::nv_link::ErrorCounter as E;
        g.clock_event_reasons = put(
            u,
            k,
            "clock_event_reasons",
            dev.current_throttle_reasons().map(|r| r.bits()),
        );
        let active: Vec<u32> = g
            .nvlinks
            .iter()
            .filter(|l| l.active)
            .map(|l| l.link)
            .collect();
        for link in active {
            let l = dev.link_wrapper_for(link);
            let key = format!("nvlink.{link}.errors");
            let mut one =
                |c: E, name: &str| put(u, k, &format!("{key}.{name}"), l.error_counter(c));
            let e = NvLinkErrors {
                replay: one(E::DlReplay, "replay"),
                recovery: one(E::DlRecovery, "recovery"),
                crc_flit: one(E::DlCrcFlit, "crc_flit"),
                crc_data: one(E::DlCrcData, "crc_data"),
            };
            g.nvlink_errors.insert(link, e);
        }
        g.fabric = fabric(nvml, dev, u, k);
    }

    /// nvmlDeviceGetGpuFabricInfo (not wrapped by nvml-wrapper 0.13), through the loaded
    /// library's function pointer as `remote_type` does.
    fn fabric(
        nvml: &Nvml,
        dev: &nvml_wrapper::Device,
        u: &mut BTreeMap<String, String>,
        k: &mut BTreeMap<String, NvmlErrorKind>,
    ) -> Option<NvmlFabric> {
        let sym = match nvml.lib().nvmlDeviceGetGpuFabricInfo.as_ref() {
            Ok(s) => s,
            Err(e) => {
                u.insert("fabric".into(), format!("symbol missing: {e}"));
                k.insert("fabric".into(), NvmlErrorKind::SymbolMissing);
                return None;
            }
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
            0 => Some(NvmlFabric {
                state: match info.state {
                    0 => "not-supported".into(),
                    1 => "not-started".into(),
                    2 => "in-progress".into(),
                    3 => "completed".into(),
                    n => format!("unknown-{n}"),
                },
                status: Some(info.status),
            }),
            // NVML_ERROR_NOT_SUPPORTED: a GPU without fabric support (PCIe-only).
            3 => Some(NvmlFabric {
                state: "not-supported".into(),
                status: None,
            }),
            rc => {
                u.insert("fabric".into(), format!("NVML error {rc}"));
                k.insert(
                    "fabric".into(),
                    if rc == 4 {
                        NvmlErrorKind::NoPermission
                    } else if rc == 15 {
                        NvmlErrorKind::GpuLost
                    } else {
                        NvmlErrorKind::Other
                    },
                );
                None
            }
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

    fn collect_p2p(nvml: &Nvml, count: u32, snap: &mut NvmlSnapshot) {
        use nvml_wrapper::enum_wrappers::device::P2pCapabilitiesIndex as I;
        let devs: Vec<_> = (0..count)
            .filter_map(|i| nvml.device_by_index(i).ok())
            .collect();
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
                snap.p2p.push(e);
            }
        }
    }

    /// nvml-wrapper 0.13's `remote_device_type` writes its answer into a temporary and always
    /// returns Unknown, so call nvmlDeviceGetNvLinkRemoteDeviceType ourselves.
    fn remote_type(
        nvml: &Nvml,
        dev: &nvml_wrapper::Device,
        link: u32,
        u: &mut BTreeMap<String, String>,
    ) -> Option<crate::facts::NvLinkRemote> {
        use crate::facts::NvLinkRemote;
        let sym = match nvml.lib().nvmlDeviceGetNvLinkRemoteDeviceType.as_ref() {
            Ok(s) => s,
            Err(e) => {
                u.insert(
                    format!("nvlink.{link}.remote_device_type"),
                    format!("symbol missing: {e}"),
                );
                return None;
            }
        };
        let mut t: nvml_wrapper_sys::bindings::nvmlIntNvLinkDeviceType_t = 0xff;
        // SAFETY: the handle comes from a live Device of this Nvml; `t` outlives the call.
        let rc = unsafe { sym(dev.handle(), link, &mut t) };
        if rc != 0 {
            u.insert(
                format!("nvlink.{link}.remote_device_type"),
                format!("NVML error {rc}"),
            );
            return None;
        }
        Some(match t {
            0 => NvLinkRemote::Gpu,
            1 => NvLinkRemote::Ibmnpu,
            2 => NvLinkRemote::Switch,
            _ => NvLinkRemote::Unknown,
        })
    }

    /// nvmlDeviceGetRemappedRows (not wrapped by nvml-wrapper 0.13): pending remaps need a
    /// GPU reset before the memory is usable at full capacity.
    fn remapped_pending(
        nvml: &Nvml,
        dev: &nvml_wrapper::Device,
        u: &mut BTreeMap<String, String>,
    ) -> Option<bool> {
        let sym = match nvml.lib().nvmlDeviceGetRemappedRows.as_ref() {
            Ok(s) => s,
            Err(e) => {
                u.insert(
                    "remapped_rows_pending".into(),
                    format!("symbol missing: {e}"),
                );
                return None;
            }
        };
        let (mut corr, mut unc, mut pending, mut failed) = (0u32, 0u32, 0u32, 0u32);
        // SAFETY: valid handle; four out-pointers to locals.
        let rc = unsafe { sym(dev.handle(), &mut corr, &mut unc, &mut pending, &mut failed) };
        match rc {
            0 => Some(pending != 0),
            3 => {
                u.insert(
                    "remapped_rows_pending".into(),
                    "not supported by this GPU".into(),
                );
                None
            }
            rc => {
                u.insert("remapped_rows_pending".into(), format!("NVML error {rc}"));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
        // Recorded kinds round-trip; a kind this build does not know reads as Other, and an
        // nvml.json written before kinds were kept reads with none.
        let k: NvmlErrorKind = serde_json::from_str("\"gpu-lost\"").unwrap();
        assert_eq!(k, K::GpuLost);
        let k: NvmlErrorKind = serde_json::from_str("\"cosmic-ray\"").unwrap();
        assert_eq!(k, K::Other);
        let old = br#"{"schema":"gpudoctor.nvml/1","source":"live","gpus":[{"bus_id":"00000000:06:00.0","unread":{"ecc_enabled":"x"}}]}"#;
        let s = NvmlSnapshot::from_json(old).unwrap();
        assert!(s.gpus[0].unread_kind.is_empty() && s.unavailable_kind.is_none());
    }

    use super::*;

    #[test]
    fn schema_is_checked() {
        assert!(NvmlSnapshot::from_json(br#"{"schema":"gpudoctor.nvml/9","gpus":[]}"#).is_err());
        assert!(NvmlSnapshot::from_json(b"{").is_err());
        let s = NvmlSnapshot::from_json(
            br#"{"schema":"gpudoctor.nvml/1","gpus":[{"index":0,"bus_id":"00000000:1A:00.0"}]}"#,
        )
        .unwrap();
        assert_eq!(s.gpus[0].bdf().unwrap().to_string(), "0000:1a:00.0");
    }

    #[test]
    fn live_without_driver_is_a_finding() {
        // On machines without the driver this must come back unavailable, not panic.
        let s = NvmlSnapshot::collect_live();
        if s.unavailable.is_some() {
            assert!(s.gpus.is_empty());
        }
    }
}
