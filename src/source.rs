//! Where facts come from: the live machine, a recorded tree (`--root`), or a support bundle
//! (`--bundle`). Opening a source gives the re-rootable reader for its `sys/` and `proc/`,
//! and the documents recorded beside them (manifest.json, nvml.json, libs.json, kmsg.json,
//! probes/<name>.json), each parsed here and nowhere else.
//!
//! This module must not judge anything and must not read kernel files itself: sysfs and procfs
//! go through `SysRoot`; only the recorded documents of a tree are read here.

use crate::bundle;
use crate::kmsg::KernelLog;
use crate::libs::LibFacts;
use crate::nvml::NvmlSnapshot;
use crate::probes::{ProbeKind, ProbeReport};
use crate::report::SourceInfo;
use crate::sysroot::{MAX_DOCUMENT_BYTES, SysRoot};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where facts come from, as the user asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    Live,
    /// A recorded tree (fixture, unpacked bundle).
    Root(PathBuf),
    /// A support bundle file.
    Bundle(PathBuf),
}

impl SourceSpec {
    pub fn is_live(&self) -> bool {
        matches!(self, SourceSpec::Live)
    }
}

/// An opened source: the reader and the snapshots that go with it.
pub struct Source {
    pub spec: SourceSpec,
    /// Shared with the discovery worker thread.
    pub sysroot: Arc<SysRoot>,
    pub nvml: Arc<NvmlSnapshot>,
    pub libs: LibFacts,
    /// The kernel log's Xid and link-down records: `kmsg.json` of a recorded tree (read when
    /// it is opened), live /dev/kmsg when first asked for (`kernel_log()`: only the checks and
    /// `bundle` need it, so `topo` never reads the kernel log).
    kernel_log: std::sync::OnceLock<Arc<KernelLog>>,
    pub info: SourceInfo,
    /// The node's name: live from /proc/sys/kernel/hostname (through the reader), recorded
    /// from the manifest (a redaction token in a redacted bundle).
    pub hostname: Option<String>,
    /// When the facts were read (UTC, RFC 3339): now, or the recording's time.
    pub time: Option<String>,
}

/// What a recorded tree holds for one probe.
#[derive(Debug)]
pub enum RecordedProbe {
    /// `probes/<name>.json`, parsed (not yet re-evaluated).
    Report(Box<ProbeReport>),
    /// No such file: the probe was not recorded.
    Absent { file: String },
}

impl Source {
    /// The kernel log: the recorded one, or live /dev/kmsg read now (once) through the reader.
    pub fn kernel_log(&self) -> Arc<KernelLog> {
        self.kernel_log
            .get_or_init(|| Arc::new(KernelLog::collect(&self.sysroot)))
            .clone()
    }

    /// Open the source: the reader and the NVML/library snapshots that go with it.
    pub fn open(spec: &SourceSpec) -> Result<Source> {
        match spec {
            SourceSpec::Live => {
                let sysroot = SysRoot::live();
                let hostname = sysroot
                    .read_text("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
                    .filter(|h| !h.is_empty());
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0);
                Ok(Source {
                    spec: spec.clone(),
                    sysroot: Arc::new(sysroot),
                    nvml: NvmlSnapshot::collect_live().into(),
                    libs: LibFacts::probe_live(),
                    kernel_log: std::sync::OnceLock::new(),
                    info: SourceInfo::Live,
                    hostname,
                    time: Some(bundle::rfc3339(now)),
                })
            }
            SourceSpec::Root(dir) => {
                let label = format!("--root {}", dir.display());
                let (sysroot, nvml, libs, manifest) = open_tree(dir, &label)?;
                let kernel_log = recorded_kernel_log(&sysroot, &label)?;
                Ok(Source {
                    spec: spec.clone(),
                    sysroot: Arc::new(sysroot),
                    nvml: nvml.into(),
                    libs,
                    kernel_log: kernel_log.into(),
                    info: SourceInfo::Root {
                        path: dir.display().to_string(),
                    },
                    hostname: manifest.as_ref().and_then(|m| m.host.clone()),
                    time: manifest.and_then(|m| m.created),
                })
            }
            SourceSpec::Bundle(file) => {
                let label = format!("--bundle {}", file.display());
                let x = bundle::read::extract(file).with_context(|| label.clone())?;
                Self::from_extracted(spec, x, file, &label)
            }
        }
    }

    /// A bundle already open (the one `bundle` just wrote, read from its own file whatever
    /// another run may since have renamed over its path).
    pub fn open_bundle_file(f: std::fs::File, path: &Path) -> Result<Source> {
        let label = format!("--bundle {}", path.display());
        let x = bundle::read::extract_open(f, path).with_context(|| label.clone())?;
        Self::from_extracted(&SourceSpec::Bundle(path.to_path_buf()), x, path, &label)
    }

    fn from_extracted(
        spec: &SourceSpec,
        x: bundle::read::Extracted,
        file: &Path,
        label: &str,
    ) -> Result<Source> {
        let (sysroot, nvml, libs, manifest) = open_tree(x.dir.path(), label)?;
        let kernel_log = recorded_kernel_log(&sysroot, label)?;
        Ok(Source {
            spec: spec.clone(),
            sysroot: Arc::new(sysroot.holding(x.dir)),
            nvml: nvml.into(),
            libs,
            kernel_log: kernel_log.into(),
            info: SourceInfo::Bundle {
                path: file.display().to_string(),
            },
            hostname: manifest.as_ref().and_then(|m| m.host.clone()),
            time: manifest.and_then(|m| m.created),
        })
    }

    pub fn is_live(&self) -> bool {
        self.spec.is_live()
    }

    /// A probe's recorded samples (`probes/<name>.json` of a recorded tree). Meaningless for
    /// the live machine, which measures instead: callers ask only of recorded sources.
    pub fn recorded_probe(&self, kind: ProbeKind) -> Result<RecordedProbe> {
        recorded_probe_in(&self.sysroot, kind)
    }
}

/// `Source::recorded_probe` by the tree's reader alone (for a worker thread that may be
/// abandoned at a deadline).
pub fn recorded_probe_in(sr: &SysRoot, kind: ProbeKind) -> Result<RecordedProbe> {
    let name = kind.as_str();
    let file = format!("probes/{name}.json");
    let label = format!(
        "{}: not a probe report",
        sr.root_dir().join(&file).display()
    );
    recorded(
        sr,
        &file,
        &label,
        |b| {
            // `probe NAME --json` prints one run in a `gpudoctor.probe-runs/1` envelope;
            // older recordings hold the bare report.
            let runs = crate::report::probe_runs_in(serde_json::from_slice(b)?)
                .context("\"runs\" is not an array")?;
            let [run] = <[serde_json::Value; 1]>::try_from(runs)
                .map_err(|runs| anyhow::anyhow!("{} runs, expected one", runs.len()))?;
            Ok(RecordedProbe::Report(Box::new(serde_json::from_value(
                run,
            )?)))
        },
        || RecordedProbe::Absent { file: file.clone() },
    )
}

/// Read one recorded document (`file`, relative to the tree's root) through the tree's reader:
/// links resolved inside the tree, regular files only, at most MAX_DOCUMENT_BYTES. Absent
/// means "not recorded"; anything else unreadable or malformed is an error naming the file.
fn recorded<T>(
    sr: &SysRoot,
    file: &str,
    label: &str,
    parse: impl FnOnce(&[u8]) -> Result<T>,
    absent: impl FnOnce() -> T,
) -> Result<T> {
    match sr.read_document(&format!("/{file}"), MAX_DOCUMENT_BYTES) {
        Ok(Some(bytes)) => parse(&bytes).with_context(|| label.to_string()),
        Ok(None) => Ok(absent()),
        Err(e) => Err(anyhow::anyhow!("{label}: {file}: {}", error_reason(&e))),
    }
}

/// What went wrong, without the path (the caller names the file).
fn error_reason(e: &crate::sysroot::ReadError) -> String {
    let full = e.to_string();
    full.strip_prefix(&format!("{}: ", e.path()))
        .unwrap_or(&full)
        .to_string()
}

/// A recorded tree's kmsg.json; absent: not recorded (unknown, never an empty log).
fn recorded_kernel_log(sr: &SysRoot, label: &str) -> Result<Arc<KernelLog>> {
    let k = recorded(
        sr,
        "kmsg.json",
        label,
        |b| KernelLog::from_json(b).map_err(anyhow::Error::msg),
        || KernelLog::not_recorded("not recorded (no kmsg.json in the tree)"),
    )?;
    Ok(Arc::new(k))
}

/// A recorded tree (fixture, unpacked bundle): its sys/ and proc/, its nvml.json and
/// libs.json, and the errors its manifest.json says the recorded machine gave (replayed as
/// the same errors).
fn open_tree(
    dir: &Path,
    label: &str,
) -> Result<(SysRoot, NvmlSnapshot, LibFacts, Option<bundle::Manifest>)> {
    let sr = SysRoot::at(dir).with_context(|| label.to_string())?;
    let manifest = recorded(
        &sr,
        "manifest.json",
        label,
        |b| Ok(Some(bundle::Manifest::from_json(b)?)),
        || None,
    )?;
    let sr = match &manifest {
        Some(m) => sr.with_recorded_errors(m.recorded_errors()),
        None => sr,
    };
    let nvml = recorded(
        &sr,
        "nvml.json",
        label,
        |b| Ok(NvmlSnapshot::from_json(b)?),
        || NvmlSnapshot::unavailable("not recorded (no nvml.json in the tree)", "recorded"),
    )?;
    let libs = recorded(
        &sr,
        "libs.json",
        label,
        |b| LibFacts::from_json(b).map_err(anyhow::Error::msg),
        || LibFacts::unavailable("not recorded (no libs.json in the tree)"),
    )?;
    Ok((sr, nvml, libs, manifest))
}
