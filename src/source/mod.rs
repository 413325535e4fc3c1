//! Where facts come from: the live machine, a recorded tree (`--root`), or a support bundle
//! (`--bundle`). Opening a source gives the re-rootable reader for its `sys/` and `proc/`,
//! and the documents recorded beside them (manifest.json, nvml.json, libs.json, kmsg.json,
//! `probes/<name>.json`), each parsed here and nowhere else.
//!
//! This module must not judge anything and must not read kernel files itself: sysfs and procfs
//! go through `SysRoot`; only the recorded documents of a tree are read here.

pub mod bug_report;
pub mod hwloc;
pub mod lspci;
pub mod nccl_xml;
pub mod record;
pub mod synth;
mod xml;

use crate::bundle;
use crate::kmsg::KernelLog;
use crate::libs::LibFacts;
use crate::nvml::NvmlSnapshot;
use crate::sysroot::{MAX_DOCUMENT_BYTES, SysRoot};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the facts came from (the report's `source`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SourceInfo {
    /// This machine, now.
    Live,
    /// A recorded tree (`--root DIR`).
    Root { path: String },
    /// A support bundle (`--bundle FILE`).
    Bundle { path: String },
    /// A record in another format (`--from FILE`): which format, what it cannot tell, and
    /// what of it could not be placed.
    From {
        path: String,
        format: record::Format,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        cannot_tell: Vec<String>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        notes: Vec<String>,
    },
}

impl SourceInfo {
    /// Lines a report header adds under the source: what the format cannot tell and what of
    /// the record could not be placed (empty for gpudoctor's own sources).
    pub fn limits(&self) -> Vec<String> {
        match self {
            SourceInfo::From {
                format,
                cannot_tell,
                notes,
                ..
            } => {
                let mut out = Vec::new();
                if !cannot_tell.is_empty() {
                    let suffix = format!(": {}", format.not_carried());
                    let items: Vec<&str> = cannot_tell
                        .iter()
                        .map(|c| c.strip_suffix(suffix.as_str()).unwrap_or(c))
                        .collect();
                    out.push(format!(
                        "{} cannot tell: {} (unknown, never a pass)",
                        format.article_name(),
                        items.join("; ")
                    ));
                }
                out.extend(notes.iter().map(|n| format!("note: {n}")));
                out
            }
            _ => Vec::new(),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            SourceInfo::Live => "live system".to_string(),
            SourceInfo::Root { path } => format!("recorded tree {path}"),
            SourceInfo::Bundle { path } => format!("bundle {path}"),
            SourceInfo::From { path, format, .. } => format!("{} {path}", format.noun()),
        }
    }
}

/// Where facts come from, as the user asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceSpec {
    Live,
    /// A recorded tree (fixture, unpacked bundle).
    Root(PathBuf),
    /// A support bundle file.
    Bundle(PathBuf),
    /// A record in another format (`--from FILE`): an nvidia-bug-report log, lspci text, hwloc
    /// XML or an NCCL topology file, recognised from its content unless `format` forces one.
    From {
        path: PathBuf,
        format: Option<record::Format>,
    },
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
    /// NVML's snapshot (`nvml()`), shared with the discovery worker thread.
    nvml: Arc<NvmlFacts>,
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
    /// Another tool's GPUDirect verdicts the source carries (NCCL's `gdr` attributes of an NCCL
    /// topology XML read with --from), handed to the inventory for `gdr.nccl-agrees`.
    pub foreign_gdr: Arc<record::ForeignVerdicts>,
}

/// NVML's snapshot as a source gives it: a recorded tree's nvml.json is parsed on a thread of
/// its own while discovery reads the tree (an 80-GPU host's is over a megabyte of JSON, and
/// its parse would otherwise hold up everything after it); every other source has it at once.
/// A file that does not parse is the same error, given where the snapshot is first asked for.
pub struct NvmlFacts {
    ready: std::sync::OnceLock<Result<Arc<NvmlSnapshot>, String>>,
    parsing: std::sync::Mutex<Option<std::thread::JoinHandle<Result<NvmlSnapshot, String>>>>,
}

impl NvmlFacts {
    fn ready(s: impl Into<Arc<NvmlSnapshot>>) -> NvmlFacts {
        NvmlFacts {
            ready: std::sync::OnceLock::from(Ok(s.into())),
            parsing: Default::default(),
        }
    }

    /// `bytes` (a recorded nvml.json), parsed on another thread; here where no thread starts.
    fn parse(bytes: Vec<u8>, label: &str) -> NvmlFacts {
        let parse = |bytes: &[u8], label: &str| {
            NvmlSnapshot::from_json(bytes)
                .map_err(|e| format!("{:#}", anyhow::Error::from(e).context(label.to_string())))
        };
        let bytes = Arc::new(bytes);
        let on_thread = (bytes.clone(), label.to_string());
        let spawned = std::thread::Builder::new()
            .name("nvml.json".into())
            .spawn(move || parse(&on_thread.0, &on_thread.1));
        match spawned {
            Ok(h) => NvmlFacts {
                ready: std::sync::OnceLock::new(),
                parsing: std::sync::Mutex::new(Some(h)),
            },
            Err(_) => NvmlFacts {
                ready: std::sync::OnceLock::from(parse(&bytes, label).map(Arc::new)),
                parsing: Default::default(),
            },
        }
    }

    /// The snapshot, once its parse is done.
    pub fn get(&self) -> Result<Arc<NvmlSnapshot>> {
        self.ready
            .get_or_init(|| {
                let handle = match self.parsing.lock() {
                    Ok(mut h) => h.take(),
                    Err(p) => p.into_inner().take(),
                };
                match handle.map(std::thread::JoinHandle::join) {
                    Some(Ok(r)) => r.map(Arc::new),
                    Some(Err(_)) => Err("nvml.json: its parse failed unexpectedly".into()),
                    None => Err("nvml.json: not parsed".into()),
                }
            })
            .clone()
            .map_err(anyhow::Error::msg)
    }
}

impl Source {
    /// NVML's snapshot: live NVML's, or the one recorded with the tree (waiting for its parse
    /// where it is still under way). An nvml.json that does not parse is an error naming it.
    pub fn nvml(&self) -> Result<Arc<NvmlSnapshot>> {
        self.nvml.get()
    }

    /// For a process about to end (the command line's `check`): what backs the tree is
    /// released now (an extracted bundle's scratch directory is removed), the rest is left to
    /// the exit. A reader another thread still holds (discovery abandoned at its deadline) is
    /// left as it is: its scratch directory is removed at exit (`signals`).
    pub fn dismiss(self) {
        let Source {
            spec,
            sysroot,
            nvml,
            libs,
            kernel_log,
            info,
            hostname,
            time,
            foreign_gdr,
        } = self;
        std::mem::forget((
            spec,
            nvml,
            libs,
            kernel_log,
            info,
            hostname,
            time,
            foreign_gdr,
        ));
        match Arc::try_unwrap(sysroot) {
            Ok(sr) => sr.dismiss(),
            Err(shared) => std::mem::forget(shared),
        }
    }

    /// NVML's snapshot as it comes (for a thread that waits for it while it reads the tree).
    pub fn nvml_facts(&self) -> Arc<NvmlFacts> {
        self.nvml.clone()
    }

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
                    nvml: Arc::new(NvmlFacts::ready(NvmlSnapshot::collect_live())),
                    libs: LibFacts::probe_live(),
                    kernel_log: std::sync::OnceLock::new(),
                    info: SourceInfo::Live,
                    hostname,
                    time: Some(bundle::rfc3339(now)),
                    foreign_gdr: not_carried(OWN_SOURCES),
                })
            }
            SourceSpec::Root(dir) => {
                let label = format!("--root {}", dir.display());
                let (sysroot, nvml, libs, manifest) = open_tree(dir, &label)?;
                let kernel_log = recorded_kernel_log(&sysroot, &label)?;
                Ok(Source {
                    spec: spec.clone(),
                    sysroot: Arc::new(sysroot),
                    nvml: Arc::new(nvml),
                    libs,
                    kernel_log: kernel_log.into(),
                    info: SourceInfo::Root {
                        path: dir.display().to_string(),
                    },
                    hostname: manifest.as_ref().and_then(|m| m.host.clone()),
                    time: manifest.and_then(|m| m.created),
                    foreign_gdr: not_carried(OWN_SOURCES),
                })
            }
            SourceSpec::From { path, format } => Self::open_record(spec, path, *format),
            SourceSpec::Bundle(file) => {
                let label = format!("--bundle {}", file.display());
                let x = bundle::read::extract(file).with_context(|| label.clone())?;
                Self::from_extracted(spec, x, file, &label)
            }
        }
    }

    /// A record in another format: parsed, laid out as a recorded tree in memory (see `synth`)
    /// and read like one, with what the format does not carry replayed as unreadable.
    fn open_record(
        spec: &SourceSpec,
        path: &Path,
        forced: Option<record::Format>,
    ) -> Result<Source> {
        let label = format!("--from {}", path.display());
        let text = read_record_file(path).with_context(|| label.clone())?;
        let rec = parse_record(&text, forced).with_context(|| label.clone())?;
        Self::from_record(spec, path, rec)
    }

    /// A parsed record opened as a source (`open_record`'s second half; tests build records).
    pub fn from_record(
        spec: &SourceSpec,
        path: &Path,
        rec: record::MachineRecord,
    ) -> Result<Source> {
        let label = format!("--from {}", path.display());
        if rec.functions.is_empty() {
            anyhow::bail!(
                "{label}: {} lists no PCI function",
                rec.format.article_name()
            );
        }
        let w = synth::build(&rec)
            .with_context(|| format!("{label}: laying out its facts as a tree"))?;
        // Served from memory: nothing is written to disk, whatever the temporary directory is.
        let shown = PathBuf::from(format!("{} (in memory)", path.display()));
        let sr = SysRoot::in_memory(w.tree, shown);
        let foreign_gdr = Arc::new(record::ForeignVerdicts::of_record(&rec));
        let mut notes = rec.notes;
        notes.extend(w.notes);
        Ok(Source {
            spec: spec.clone(),
            sysroot: Arc::new(sr),
            nvml: Arc::new(NvmlFacts::ready(w.nvml)),
            libs: LibFacts::unavailable(&rec.format.not_carried()),
            kernel_log: Arc::new(w.kernel_log).into(),
            info: SourceInfo::From {
                path: path.display().to_string(),
                format: rec.format,
                cannot_tell: rec.cannot_tell,
                notes,
            },
            hostname: rec.hostname,
            time: None,
            foreign_gdr,
        })
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
            nvml: Arc::new(nvml),
            libs,
            kernel_log: kernel_log.into(),
            info: SourceInfo::Bundle {
                path: file.display().to_string(),
            },
            hostname: manifest.as_ref().and_then(|m| m.host.clone()),
            time: manifest.and_then(|m| m.created),
            foreign_gdr: not_carried(OWN_SOURCES),
        })
    }

    pub fn is_live(&self) -> bool {
        self.spec.is_live()
    }

    /// A document recorded beside the tree's sys/ and proc/ (`probes/h2d.json`), read through
    /// the tree's reader: None when not recorded.
    pub fn recorded_document(&self, file: &str) -> Result<Option<Vec<u8>>> {
        recorded_document_in(&self.sysroot, file)
    }
}

/// gpudoctor's own sources, named alike so that a bundle replays with the words of the live
/// run it was captured from.
const OWN_SOURCES: &str = "the live system, a recorded tree or a bundle";

/// Why a source of gpudoctor's own carries no NCCL verdict.
fn not_carried(what: &str) -> Arc<record::ForeignVerdicts> {
    Arc::new(record::ForeignVerdicts::NotCarried(format!(
        "{what} carry no NCCL GPUDirect verdict (an NCCL_TOPO_DUMP_FILE dump read with --from does)"
    )))
}

/// Largest record file read (compressed or not), and the most its gzip may expand to: the
/// biggest nvidia-bug-report logs of 8-GPU hosts are tens of MiB; beyond this the input is
/// refused rather than read without bound.
pub const MAX_RECORD_BYTES: u64 = 128 << 20;

/// Read a record file, gunzipped when it is gzip (by its magic bytes), as text. Regular files
/// only (a FIFO or device would block or never end).
fn read_record_file(path: &Path) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    // Never blocks on a FIFO or a device: checked before opening, opened non-blocking, and
    // what was opened is checked again.
    if !std::fs::metadata(path).context("cannot open")?.is_file() {
        anyhow::bail!("not a regular file: refused");
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .context("cannot open")?;
    let meta = f.metadata().context("cannot stat")?;
    if !meta.is_file() {
        anyhow::bail!("not a regular file: refused");
    }
    if meta.len() > MAX_RECORD_BYTES {
        anyhow::bail!(
            "{} bytes, larger than the {} MiB a record may be: refused",
            meta.len(),
            MAX_RECORD_BYTES >> 20
        );
    }
    let mut raw = Vec::new();
    f.take(MAX_RECORD_BYTES + 1)
        .read_to_end(&mut raw)
        .context("cannot read")?;
    let bytes = if raw.starts_with(&[0x1f, 0x8b]) {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .take(MAX_RECORD_BYTES + 1)
            .read_to_end(&mut out)
            .context("not a valid gzip file (truncated or corrupt)")?;
        if out.len() as u64 > MAX_RECORD_BYTES {
            anyhow::bail!(
                "expands past the {} MiB a record may be: refused",
                MAX_RECORD_BYTES >> 20
            );
        }
        out
    } else {
        raw
    };
    if bytes.is_empty() {
        anyhow::bail!("empty file");
    }
    // Logs carry the odd byte that is not UTF-8 (a BIOS string): replaced, not refused.
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

/// Which format a text is, from its content: the most specific first (a bug-report log holds
/// lspci text; an NCCL file and an hwloc file are both XML).
pub fn detect_format(text: &str) -> Option<record::Format> {
    use record::Format;
    if bug_report::looks_like(text) {
        Some(Format::BugReport)
    } else if hwloc::looks_like(text) {
        Some(Format::Hwloc)
    } else if nccl_xml::looks_like(text) {
        Some(Format::Nccl)
    } else if lspci::looks_like(text) {
        Some(Format::Lspci)
    } else {
        None
    }
}

/// Parse a record's text in the given or recognised format.
pub fn parse_record(text: &str, forced: Option<record::Format>) -> Result<record::MachineRecord> {
    use record::Format;
    let format = match forced.or_else(|| detect_format(text)) {
        Some(f) => f,
        None => anyhow::bail!(
            "not a format gpudoctor reads (an nvidia-bug-report log, lspci text, hwloc XML or an NCCL topology file); --from-format forces one"
        ),
    };
    let rec = match format {
        Format::BugReport => bug_report::parse(text),
        Format::Lspci => lspci::parse(text),
        Format::Hwloc => hwloc::parse(text),
        Format::Nccl => nccl_xml::parse(text),
    }
    .map_err(|e| anyhow::anyhow!("as {}: {e}", format.article_name()))?;
    Ok(rec)
}

/// `Source::recorded_document` by the tree's reader alone (for a worker thread that may be
/// abandoned at a deadline): links resolved inside the tree, regular files only, at most
/// MAX_DOCUMENT_BYTES. None: not recorded.
pub fn recorded_document_in(sr: &SysRoot, file: &str) -> Result<Option<Vec<u8>>> {
    match sr.read_document(&format!("/{file}"), MAX_DOCUMENT_BYTES) {
        Ok(b) => Ok(b),
        Err(e) => Err(anyhow::anyhow!(
            "{}: {}",
            sr.root_dir().join(file).display(),
            error_reason(&e)
        )),
    }
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
) -> Result<(SysRoot, NvmlFacts, LibFacts, Option<bundle::Manifest>)> {
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
    let nvml = match sr.read_document("/nvml.json", MAX_DOCUMENT_BYTES) {
        Ok(Some(bytes)) => NvmlFacts::parse(bytes, label),
        Ok(None) => NvmlFacts::ready(NvmlSnapshot::unavailable(
            "not recorded (no nvml.json in the tree)",
            "recorded",
        )),
        Err(e) => anyhow::bail!("{label}: nvml.json: {}", error_reason(&e)),
    };
    let libs = recorded(
        &sr,
        "libs.json",
        label,
        |b| LibFacts::from_json(b).map_err(anyhow::Error::msg),
        || LibFacts::unavailable("not recorded (no libs.json in the tree)"),
    )?;
    Ok((sr, nvml, libs, manifest))
}
