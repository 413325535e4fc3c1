//! Writing a bundle: capture, redact, then one deterministic `.tar.gz` (entries sorted, owner
//! root, mtime 0) written beside the output and renamed into place, so a failed run never
//! leaves half a bundle.
//!
//! This module must not read anything but through the `SysRoot` it is given.

use super::capture::{Capture, Failure, Item};
use super::read;
use super::redact::Redactor;
use super::{BundleError, Contents, FORMAT, FORMAT_VERSION, Kernel, Manifest, REPORTS_SCHEMA};
use super::{Unreadable, rfc3339};
use crate::nvml::NvmlSnapshot;
use crate::sysroot::ReadError;
use crate::sysroot::SysRoot;
use flate2::Compression;
use flate2::write::GzEncoder;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub struct Options {
    pub redact: bool,
    /// A site's own key (`--redact-key-file`) instead of a fresh random one.
    pub redact_key: Option<crate::bundle::redact::SiteKey>,
    /// Draw a progress line on stderr (only when stderr is a terminal).
    pub progress: bool,
    /// "live" or "recorded tree".
    pub source: String,
    /// Free-text notes for the manifest.
    pub notes: Vec<String>,
}

/// What discovery read, for the capture-list coverage check.
pub struct Discovery<'a> {
    pub touched: &'a [String],
    pub listed: &'a [String],
}

pub struct Written {
    pub manifest: Manifest,
    pub archive_bytes: u64,
    /// The reports as stored (redacted), for comparing with the replay.
    pub reports: BTreeMap<String, serde_json::Value>,
    /// The archive written, open for reading (the self-replay reads this, not the path).
    pub file: std::fs::File,
    /// Links of the recorded tree that climb above its root, (path, target as written): each
    /// is recorded leading where gpudoctor read it, inside the tree (or left out as unreadable
    /// when it led nowhere).
    pub clamped_links: Vec<(String, String)>,
}

/// `bundle -o` writes a regular file or atomically replaces one; anything else already at the
/// path (a device node such as /dev/null, a FIFO, a directory, a symlink) is refused: as root,
/// a rename over /dev/null would replace the system's.
pub fn check_output(out: &Path) -> Result<(), BundleError> {
    check_output_of("bundle -o", out)
}

/// The same rule for any output gpudoctor replaces by renaming over it (`bundle -o`, `check
/// --textfile`, `check --report`); `option` names it in the refusal.
pub fn check_output_of(option: &str, out: &Path) -> Result<(), BundleError> {
    let m = match std::fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("checking", out, e)),
    };
    use std::os::unix::fs::FileTypeExt;
    let ft = m.file_type();
    let what = if ft.is_file() {
        return Ok(());
    } else if ft.is_symlink() {
        "a symlink"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device node"
    } else if ft.is_fifo() {
        "a FIFO"
    } else {
        "a socket"
    };
    Err(BundleError::Io(format!(
        "{} exists and is {what}: refused ({option} writes only a regular file)",
        out.display()
    )))
}

fn io_err(what: &str, p: &Path, e: std::io::Error) -> BundleError {
    BundleError::Io(format!("{what} {}: {e}", p.display()))
}

/// Capture `sr`, redact, and write the bundle to `out`. `extra` holds further top-level JSON
/// documents a replay reads besides nvml.json (e.g. "libs.json"); `reports` are stored in
/// report.json by command.
pub fn write_bundle(
    sr: &SysRoot,
    nvml: &NvmlSnapshot,
    mut extra: BTreeMap<String, serde_json::Value>,
    mut reports: BTreeMap<String, serde_json::Value>,
    discovery: Discovery<'_>,
    out: &Path,
    opts: &Options,
) -> Result<Written, BundleError> {
    let mut cap = capture(sr, opts);
    let clamped = clamp_escaping_links(sr, &mut cap);
    let uncovered = cap.uncovered(sr, discovery.touched, discovery.listed);
    let Redacted {
        mut red,
        host,
        nvml,
    } = redact(sr, nvml, &mut cap, &mut extra, &mut reports, opts);
    let manifest = manifest_of(&cap, &mut red, opts, host, &clamped, &uncovered, &reports);
    let top = top_documents(&manifest, &nvml, &reports, &extra)?;
    let file = write_in_place(out, &top, &cap.items)?;
    let archive_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok(Written {
        manifest,
        archive_bytes,
        reports,
        file,
        clamped_links: clamped,
    })
}

/// Everything the capture list names under `sr`, with a progress line on stderr where asked
/// for (cleared when done).
fn capture(sr: &SysRoot, opts: &Options) -> Capture {
    let mut last_drawn = 0usize;
    let mut progress = |n: usize| {
        if opts.progress && (n == 0 || n >= last_drawn + 512) {
            last_drawn = n;
            let _ = write!(std::io::stderr(), "\rgpudoctor bundle: {n} paths captured");
        }
    };
    let cap = Capture::collect_all(sr, &mut progress);
    if opts.progress {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
    cap
}

/// The redactor after redaction (its record goes into the manifest, and it still redacts the
/// manifest's own texts), the hostname as the manifest gives it, and the redacted NVML
/// snapshot.
struct Redacted {
    red: Redactor,
    host: Option<String>,
    nvml: NvmlSnapshot,
}

/// Redacts the capture, NVML snapshot, extra documents and reports in place where
/// `opts.redact` asks for it (always the recording's own root path).
///
/// Redaction by value: every identifier is first collected from everything the bundle will
/// hold (contents, member names, link targets, documents), then replaced everywhere.
fn redact(
    sr: &SysRoot,
    nvml: &NvmlSnapshot,
    cap: &mut Capture,
    extra: &mut BTreeMap<String, serde_json::Value>,
    reports: &mut BTreeMap<String, serde_json::Value>,
    opts: &Options,
) -> Redacted {
    let mut red = match (opts.redact, opts.redact_key) {
        (true, Some(key)) => Redactor::with_site_key(key),
        (redact, _) => Redactor::new(redact),
    };
    red.set_structure(cap.items.keys().map(String::as_str));
    // Read for redaction only; the hostname file itself is not captured.
    let host_name = sr.read_text("/proc/sys/kernel/hostname").ok();
    let host = match &host_name {
        Some(h) if opts.redact => red.hostname(h),
        Some(h) => Some(h.clone()),
        None => None,
    };
    if !sr.is_live() {
        // Where the recording was kept (`--root DIR`, a bundle's extraction) names a person
        // or a site as often as not.
        let root = sr.root_dir();
        red.root_path(&root.to_string_lossy());
        if let Ok(c) = std::fs::canonicalize(root) {
            red.root_path(&c.to_string_lossy());
        }
    }
    if opts.redact {
        for (path, item) in &cap.items {
            red.collect_name(path);
            match item {
                Item::File(bytes) => red.collect_file(path, bytes),
                Item::Link(target) => red.collect_name(target),
                Item::Dir => {}
            }
        }
        for f in &cap.failures {
            red.collect_name(&f.path);
        }
        red.collect_nvml(nvml);
        for (name, v) in extra.iter() {
            red.collect_json(name, v);
        }
        for v in reports.values() {
            red.collect_json("report.json", v);
        }
        for n in &opts.notes {
            red.collect_name(n);
        }
        red.finish_collection();
        let items = std::mem::take(&mut cap.items);
        for (path, mut item) in items {
            match &mut item {
                Item::File(bytes) => red.file(&path, bytes),
                Item::Link(target) => *target = red.member_name(target, false),
                Item::Dir => {}
            }
            let renamed = red.member_name(&path, true);
            cap.items.insert(renamed, item);
        }
        for f in &mut cap.failures {
            f.path = red.member_name(&f.path, false);
        }
    }
    let mut nvml = nvml.clone();
    red.nvml(&mut nvml);
    for v in reports.values_mut().chain(extra.values_mut()) {
        red.json(v);
    }
    // A short or generic hostname ("vm") is not replaced inside text (it would match unrelated
    // words), so the reports' own field is set to its token here, as the manifest's is.
    if let (Some(name), Some(token), true) = (host_name.as_deref(), host.as_ref(), opts.redact) {
        for v in reports.values_mut() {
            if let Some(h) = v.get_mut("hostname")
                && h.as_str() == Some(name.trim())
            {
                *h = serde_json::Value::String(token.clone());
            }
        }
    }
    Redacted { red, host, nvml }
}

/// The manifest of the (redacted) capture: kernel, counts, unreadable paths, notes on what
/// was recorded specially, and the redaction record.
fn manifest_of(
    cap: &Capture,
    red: &mut Redactor,
    opts: &Options,
    host: Option<String>,
    clamped: &[(String, String)],
    uncovered: &[String],
    reports: &BTreeMap<String, serde_json::Value>,
) -> Manifest {
    let text_of = |p: &str| match cap.items.get(p) {
        Some(Item::File(b)) => Some(String::from_utf8_lossy(b).trim().to_string()),
        _ => None,
    };
    let kernel = Kernel {
        osrelease: text_of("/proc/sys/kernel/osrelease"),
        version: text_of("/proc/version"),
    };
    let mut contents = Contents::default();
    for item in cap.items.values() {
        match item {
            Item::File(b) => {
                contents.files += 1;
                contents.file_bytes += b.len() as u64;
            }
            Item::Link(_) => contents.links += 1,
            Item::Dir => contents.dirs += 1,
        }
    }
    let mut unreadable: Vec<Unreadable> = cap
        .failures
        .iter()
        .map(|f| {
            // The error's detail may name the path as read, before its names were redacted.
            let mut u = Unreadable::from_error(&f.path, &f.error);
            u.detail = u.detail.map(|d| red.text(&d));
            u
        })
        .collect();
    unreadable.sort();
    let mut notes = opts.notes.clone();
    if cap.special > 0 {
        notes.push(format!(
            "{} device nodes, fifos or sockets (under /dev) are recorded as empty files: only their names are facts",
            cap.special
        ));
    }
    if let Some((p, t)) = clamped.first() {
        notes.push(format!(
            "{} symlink(s) of the recorded tree climb above its root (first: {p} -> {}): recorded leading where gpudoctor read them, inside the tree",
            clamped.len(),
            t.chars().take(120).collect::<String>()
        ));
    }
    if cap.truncated {
        notes.push(
            "capture stopped at its entry limit: the tree is larger than any real /sys".into(),
        );
    }
    let notes: Vec<String> = notes.iter().map(|n| red.text(n)).collect();
    let uncovered: Vec<String> = uncovered.iter().map(|u| red.text(u)).collect();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Manifest {
        format: FORMAT.to_string(),
        format_version: FORMAT_VERSION,
        gpudoctor_version: env!("CARGO_PKG_VERSION").to_string(),
        gpudoctor_revision: crate::REVISION.to_string(),
        created: Some(rfc3339(now)),
        recorded_by: "gpudoctor bundle".to_string(),
        source: opts.source.clone(),
        kernel,
        host,
        reports: reports.keys().cloned().collect(),
        redaction: red.record(),
        unreadable,
        uncovered,
        contents,
        notes,
    }
}

/// The top-level documents, serialized: manifest.json, nvml.json, report.json, then each extra
/// document (refused where its name is taken, has a directory or is not `.json`).
fn top_documents<'a>(
    manifest: &Manifest,
    nvml: &NvmlSnapshot,
    reports: &BTreeMap<String, serde_json::Value>,
    extra: &'a BTreeMap<String, serde_json::Value>,
) -> Result<Vec<(&'a str, Vec<u8>)>, BundleError> {
    let json = |v: &dyn erased::Json| -> Result<Vec<u8>, BundleError> {
        let mut b = v
            .to_pretty()
            .map_err(|e| BundleError::Io(format!("serializing: {e}")))?;
        b.push(b'\n');
        Ok(b)
    };
    let report_doc = serde_json::json!({ "schema": REPORTS_SCHEMA, "reports": reports });
    let mut top: Vec<(&str, Vec<u8>)> = vec![
        ("manifest.json", json(manifest)?),
        ("nvml.json", json(nvml)?),
        ("report.json", json(&report_doc)?),
    ];
    for (name, v) in extra {
        if top.iter().any(|(n, _)| n == name) || name.contains('/') || !name.ends_with(".json") {
            return Err(BundleError::Io(format!("bad extra document name '{name}'")));
        }
        top.push((name, json(v)?));
    }
    Ok(top)
}

/// Writes the archive beside `out` and renames it into place (a failed run leaves nothing
/// behind); the archive written, open for reading.
fn write_in_place(
    out: &Path,
    top: &[(&str, Vec<u8>)],
    items: &BTreeMap<String, Item>,
) -> Result<std::fs::File, BundleError> {
    check_output(out)?;
    let tmp = temp_path(out);
    if let Some(dir) = tmp.parent() {
        // What a crashed or killed run left beside this output.
        let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
        let name = name.unwrap_or_else(|| "bundle".into());
        read::sweep_stale(dir, &format!(".{name}.partial-"), "", false);
    }
    // Removed if a signal stops the process before the rename.
    let registered = crate::signals::Temporary::new(tmp.clone(), false);
    let fail = |e| {
        let _ = std::fs::remove_file(&tmp);
        e
    };
    write_archive(&tmp, top, items).map_err(fail)?;
    // Our own bytes, whatever lands at `out` later (another run writing the same path).
    let file = read::open_regular(&tmp).map_err(|e| fail(io_err("reopening", &tmp, e)))?;
    // Checked again just before: the rename must never replace a device, FIFO or directory.
    check_output(out).map_err(fail)?;
    std::fs::rename(&tmp, out).map_err(|e| fail(io_err("renaming into", out, e)))?;
    drop(registered);
    Ok(file)
}

/// A recorded tree may hold links that climb above its root (`..` past it, or through `s -> .`
/// links), which SysRoot reads clamped at the root; a bundle never holds one (extraction
/// refuses it). Each such link is rewritten to lead, inside the copy, where it led in the tree
/// (`SysRoot::link_destination`), so the bundle replays as the tree read; one that leads
/// nowhere even so is left out and recorded as unreadable. Returns (link, target as written in
/// the tree) of every link rewritten or left out.
fn clamp_escaping_links(sr: &SysRoot, cap: &mut Capture) -> Vec<(String, String)> {
    let rel = |p: &str| PathBuf::from(p.trim_start_matches('/'));
    let links = |cap: &Capture| -> BTreeMap<PathBuf, String> {
        cap.items
            .iter()
            .filter_map(|(p, it)| match it {
                Item::Link(t) => Some((rel(p), relative_target(p, t))),
                _ => None,
            })
            .collect()
    };
    let outside = read::links_outside(&links(cap));
    if outside.is_empty() {
        return Vec::new();
    }
    let mut clamped = Vec::new();
    for l in &outside {
        let p = format!("/{}", l.display());
        let Some(Item::Link(was)) = cap.items.get(&p).cloned() else {
            continue;
        };
        clamped.push((p.clone(), was.clone()));
        let to = match sr.link_destination(&p) {
            Ok((dir, last)) => format!("{}/{last}", dir.trim_end_matches('/')),
            // Leads nowhere in the tree (a dangling `driver` link still names its driver):
            // the same text without the `..` that climb above the root, dangling as well.
            Err(_) => clamp_text(&p, &relative_target(&p, &was)),
        };
        cap.items.insert(p, Item::Link(to));
    }
    // What still leads outside (a destination that did not resolve, or one that leads through
    // another escaping link): left out, as unreadable.
    for l in read::links_outside(&links(cap)) {
        let p = format!("/{}", l.display());
        cap.items.remove(&p);
        cap.failures.push(Failure {
            path: p.clone(),
            error: ReadError::Io {
                path: p,
                message: "symlink leads outside the recorded tree: not captured".into(),
            },
        });
    }
    clamped
}

/// `target` of the link at `link_path` without the `..` components that would climb above the
/// root (as written: links on the way are not followed).
fn clamp_text(link_path: &str, target: &str) -> String {
    let mut depth = link_path
        .trim_start_matches('/')
        .split('/')
        .filter(|c| !c.is_empty())
        .count()
        .saturating_sub(1);
    let mut out: Vec<&str> = Vec::new();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." if depth == 0 => {}
            ".." => {
                depth -= 1;
                out.push(c);
            }
            _ => {
                depth += 1;
                out.push(c);
            }
        }
    }
    if out.is_empty() {
        ".".to_string()
    } else {
        out.join("/")
    }
}

/// serde_json over a few concrete types without generics in the closure above.
mod erased {
    pub trait Json {
        fn to_pretty(&self) -> serde_json::Result<Vec<u8>>;
    }
    impl<T: serde::Serialize> Json for T {
        fn to_pretty(&self) -> serde_json::Result<Vec<u8>> {
            serde_json::to_vec_pretty(self)
        }
    }
}

fn temp_path(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bundle".into());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h
}

fn write_archive(
    tmp: &Path,
    top: &[(&str, Vec<u8>)],
    items: &BTreeMap<String, Item>,
) -> Result<(), BundleError> {
    let f = {
        // Not created after a signal's cleanup removed it (see signals::hold).
        let _creating = crate::signals::hold();
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(tmp)
            .map_err(|e| io_err("creating", tmp, e))?
    };
    let gz = GzEncoder::new(std::io::BufWriter::new(f), Compression::default());
    let mut tb = tar::Builder::new(gz);
    tb.mode(tar::HeaderMode::Deterministic);
    let werr = |e: std::io::Error| io_err("writing", tmp, e);
    // The manifest first: a reader checks the format version before anything else.
    for (name, bytes) in top {
        let mut h = header(tar::EntryType::Regular, 0o644, bytes.len() as u64);
        tb.append_data(&mut h, name, bytes.as_slice())
            .map_err(werr)?;
    }
    for (kpath, item) in items {
        let rel = kpath.trim_start_matches('/');
        if rel.is_empty() {
            continue;
        }
        match item {
            Item::Dir => {
                let mut h = header(tar::EntryType::Directory, 0o755, 0);
                tb.append_data(&mut h, format!("{rel}/"), std::io::empty())
                    .map_err(werr)?;
            }
            Item::File(b) => {
                let mut h = header(tar::EntryType::Regular, 0o644, b.len() as u64);
                tb.append_data(&mut h, rel, b.as_slice()).map_err(werr)?;
            }
            Item::Link(target) => {
                let target = relative_target(kpath, target);
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                tb.append_link(&mut h, rel, &target).map_err(werr)?;
            }
        }
    }
    let gz = tb.into_inner().map_err(werr)?;
    let mut bw = gz.finish().map_err(werr)?;
    bw.flush().map_err(werr)?;
    let f = bw.into_inner().map_err(|e| werr(e.into_error()))?;
    f.sync_all().map_err(werr)?;
    Ok(())
}

/// The kernel writes relative link targets; a recorded tree may hold absolute ones (meaning
/// "from the tree's root"). A bundle only holds relative ones.
fn relative_target(link_path: &str, target: &str) -> String {
    if !target.starts_with('/') {
        return target.to_string();
    }
    let depth = link_path
        .trim_start_matches('/')
        .split('/')
        .filter(|c| !c.is_empty())
        .count()
        .saturating_sub(1);
    let up = "../".repeat(depth);
    format!("{up}{}", target.trim_start_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamped_text_stays_inside() {
        assert_eq!(
            clamp_text("/sys/a/b", "../../../../../sys/x/y"),
            "../../sys/x/y"
        );
        assert_eq!(clamp_text("/sys/a", "../b/../c"), "../b/../c");
        assert_eq!(clamp_text("/a", ".."), ".");
    }

    #[test]
    fn absolute_targets_become_relative() {
        assert_eq!(
            relative_target("/sys/bus/pci/devices/x", "/sys/devices/pci0000:00/x"),
            "../../../../sys/devices/pci0000:00/x"
        );
        assert_eq!(relative_target("/sys/a", "../b"), "../b");
    }
}
