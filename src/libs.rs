//! Which vendor libraries this host can load, and the optional symbols that decide features
//! (ibv_reg_dmabuf_mr for GPUDirect RDMA over dma-buf). Recorded as `libs.json` in a tree or
//! bundle, so replay sees what the live run saw.
//!
//! Loading a library here only maps it and looks symbols up; no function is called.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SCHEMA: &str = "gpudoctor.libs/1";

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LibFacts {
    pub schema: String,
    pub source: String,
    /// Set when nothing is known (a recorded tree without libs.json).
    pub unavailable: Option<String>,
    pub libs: BTreeMap<String, LibProbe>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LibProbe {
    pub loaded: bool,
    /// The dlopen error when not loaded.
    pub error: Option<String>,
    /// Symbol -> present.
    pub symbols: BTreeMap<String, bool>,
}

/// (soname, symbols worth knowing about)
const PROBES: &[(&str, &[&str])] = &[
    ("libnvidia-ml.so.1", &["nvmlInit_v2"]),
    ("libcuda.so.1", &["cuInit", "cuMemGetHandleForAddressRange"]),
    (
        "libibverbs.so.1",
        &["ibv_get_device_list", "ibv_reg_dmabuf_mr"],
    ),
    // mlx5dv_init_obj hands out the SQ/CQ buffers, doorbell records and BlueFlame register
    // that GPU-initiated RDMA (level 4) writes to.
    ("libmlx5.so.1", &["mlx5dv_query_device", "mlx5dv_init_obj"]),
];

impl LibFacts {
    pub fn unavailable(reason: &str) -> Self {
        LibFacts {
            schema: SCHEMA.into(),
            source: "recorded".into(),
            unavailable: Some(reason.into()),
            libs: BTreeMap::new(),
        }
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, String> {
        let f: LibFacts = serde_json::from_slice(bytes).map_err(|e| format!("libs.json: {e}"))?;
        if f.schema != SCHEMA {
            return Err(format!("libs.json: schema '{}' is not {SCHEMA}", f.schema));
        }
        Ok(f)
    }

    pub fn probe_live() -> Self {
        let mut libs = BTreeMap::new();
        for (name, syms) in PROBES {
            // SAFETY: loading runs the library's initialisers; these are the vendor libraries
            // gpudoctor exists to use, loaded the same way their own tools load them.
            let lib = unsafe { libloading::Library::new(name) };
            let probe = match lib {
                Ok(l) => LibProbe {
                    loaded: true,
                    error: None,
                    symbols: syms
                        .iter()
                        .map(|s| {
                            // SAFETY: only the address is looked up; it is never called here.
                            let found = unsafe { l.get::<*const ()>(s.as_bytes()) }.is_ok();
                            (s.to_string(), found)
                        })
                        .collect(),
                },
                Err(e) => LibProbe {
                    loaded: false,
                    error: Some(e.to_string()),
                    symbols: BTreeMap::new(),
                },
            };
            libs.insert(name.to_string(), probe);
        }
        LibFacts {
            schema: SCHEMA.into(),
            source: "live".into(),
            unavailable: None,
            libs,
        }
    }

    /// Whether `lib` exports `sym`: Some(true/false), or None when unknown.
    pub fn has_symbol(&self, lib: &str, sym: &str) -> Option<bool> {
        if self.unavailable.is_some() {
            return None;
        }
        let p = self.libs.get(lib)?;
        if !p.loaded {
            return Some(false);
        }
        p.symbols.get(sym).copied()
    }
}
