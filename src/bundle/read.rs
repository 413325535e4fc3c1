//! Reading a bundle: extraction into a private temporary directory that no entry can write or
//! read outside of, with limits on entries and sizes, then the manifest check.
//!
//! Refused, each with a one-line error: absolute paths, `..`, non-UTF-8 names, symlinks whose
//! target leaves the tree (absolute, or climbing above it), entries below a symlink, duplicate
//! entries, hard links, device nodes and fifos, entries over MAX_ENTRY_BYTES, more than
//! MAX_ENTRIES entries, more than MAX_TOTAL_BYTES uncompressed (gzip bombs), a missing or
//! unreadable manifest, and a newer format. Files are created with O_EXCL, never through an
//! existing path, and `SysRoot` re-roots every link on top of all this.
//!
//! This module must not write anywhere but the temporary directory it creates.

use super::{BundleError, Manifest};
use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{self, Read};
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

/// Real bundles hold a few thousand entries (a 600-function Intel host: about 30 000).
pub const MAX_ENTRIES: usize = 200_000;
/// No recorded file is larger than SysRoot's read limit; JSON documents get some headroom.
pub const MAX_ENTRY_BYTES: u64 = 16 << 20;
/// Uncompressed total: real bundles are a few MiB.
pub const MAX_TOTAL_BYTES: u64 = 256 << 20;
const MAX_NAME_BYTES: usize = 4096;

/// The limits extraction enforces (the defaults above; tests shrink them).
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub entries: usize,
    pub entry_bytes: u64,
    pub total_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            entries: MAX_ENTRIES,
            entry_bytes: MAX_ENTRY_BYTES,
            total_bytes: MAX_TOTAL_BYTES,
        }
    }
}

/// An extracted bundle. The directory is removed when this is dropped.
pub struct Extracted {
    pub dir: ScratchDir,
    pub manifest: Manifest,
}

/// Counts decompressed bytes and fails past the limit.
struct Limited<R> {
    inner: R,
    left: u64,
    hit: Rc<Cell<bool>>,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 {
            // Allow a zero-length read at exactly the limit; anything more is a bomb.
            let mut probe = [0u8; 1];
            let n = self.inner.read(&mut probe)?;
            if n == 0 {
                return Ok(0);
            }
            self.hit.set(true);
            return Err(io::Error::other("uncompressed size limit"));
        }
        let cap = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        let n = self.inner.read(&mut buf[..cap])?;
        self.left -= n as u64;
        Ok(n)
    }
}

fn shown(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s: String = s.chars().take(200).collect();
    s.escape_debug().to_string()
}

/// A relative, clean archive path: no root, no `..`, UTF-8. `./` prefixes are dropped.
pub fn clean_path(raw: &[u8]) -> Result<PathBuf, String> {
    let s = std::str::from_utf8(raw).map_err(|_| "name is not UTF-8".to_string())?;
    if s.is_empty() {
        return Err("empty name".into());
    }
    if s.len() > MAX_NAME_BYTES {
        return Err("name too long".into());
    }
    if s.contains('\0') || s.contains('\\') {
        return Err("name contains NUL or backslash".into());
    }
    let p = Path::new(s);
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute path refused".into());
            }
            Component::ParentDir => return Err("'..' in path refused".into()),
        }
    }
    if out.as_os_str().is_empty() {
        return Err("empty name".into());
    }
    Ok(out)
}

/// Whether a symlink at `link` (relative to the tree root) with `target` resolves, lexically,
/// inside the tree. Absolute targets are refused: a bundle's links are relative.
pub fn target_inside(link: &Path, target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err("symlink with empty target".into());
    }
    if target.starts_with('/') {
        return Err(format!(
            "symlink to absolute path '{}' refused",
            shown(target.as_bytes())
        ));
    }
    let mut depth: i64 = link.components().count() as i64 - 1;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!(
                        "symlink target '{}' points outside the bundle",
                        shown(target.as_bytes())
                    ));
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Components walked, over all links of one bundle, by `Extractor::check_links`: a real
/// bundle's 30 000 links take about 300 000.
const LINK_CHECK_BUDGET: usize = 20_000_000;
/// Links followed while resolving one link (the kernel's limit).
const LINK_HOPS: usize = 40;

/// Whether an archive name is the tree's root itself (`.`, `./`, `.//.`).
fn is_root_name(raw: &[u8]) -> bool {
    !raw.is_empty() && raw.split(|b| *b == b'/').all(|c| c.is_empty() || c == b".")
}

/// Resolve the link at `link` (relative to the root) with `target`, following the bundle's
/// other links (`links`), and fail if any step climbs above the root.
fn resolve_inside(
    links: &BTreeMap<PathBuf, String>,
    link: &Path,
    target: &str,
    budget: &mut usize,
) -> Result<(), String> {
    let outside = || {
        format!(
            "symlink target '{}' resolves outside the bundle",
            shown(target.as_bytes())
        )
    };
    let mut base: Vec<String> = link
        .parent()
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut pending: Vec<String> = Vec::new();
    let push_target = |pending: &mut Vec<String>, t: &str| {
        pending.extend(
            t.split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .rev()
                .map(str::to_string),
        );
    };
    if target.starts_with('/') {
        return Err(outside());
    }
    push_target(&mut pending, target);
    let mut hops = 0usize;
    while let Some(c) = pending.pop() {
        *budget = budget
            .checked_sub(1)
            .ok_or_else(|| "links too many or too deep to check: refused".to_string())?;
        if c == ".." {
            if base.pop().is_none() {
                return Err(outside());
            }
            continue;
        }
        base.push(c);
        let here: PathBuf = base.iter().collect();
        if let Some(t) = links.get(&here) {
            hops += 1;
            if hops > LINK_HOPS {
                // A loop: the kernel and SysRoot fail it (ELOOP) before it leads anywhere, as
                // a recorded tree's damaged links may (fixtures/variants/*--garbage).
                return Ok(());
            }
            if t.starts_with('/') {
                return Err(outside());
            }
            base.pop();
            push_target(&mut pending, t);
            if pending.len() > 1 << 16 {
                return Err("symlink target too long once resolved: refused".into());
            }
        }
    }
    Ok(())
}

/// The links of `links` (relative path -> target) that extraction would refuse as leading
/// outside the tree, by text or once resolved through the others (`Extractor::check_links`'s
/// rule): what `bundle` must not write.
pub(crate) fn links_outside(links: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    let mut budget = LINK_CHECK_BUDGET;
    links
        .iter()
        .filter(|(link, target)| {
            target_inside(link, target).is_err()
                || resolve_inside(links, link, target, &mut budget).is_err()
        })
        .map(|(link, _)| link.clone())
        .collect()
}

/// The manifest's `contents` against what the archive held: a bundle that lost or gained
/// files since it was written is refused (all zeros: a hand-made manifest that records none).
/// Directories may be more than recorded (a repacked bundle lists every one).
fn check_contents(recorded: &super::Contents, found: &super::Contents) -> Result<(), BundleError> {
    if *recorded == super::Contents::default() {
        return Ok(());
    }
    let bad = |what: &str, r: u64, f: u64| {
        Err(BundleError::BadManifest(format!(
            "contents.{what} is {r} but the archive holds {f}: refused (altered or incomplete bundle)"
        )))
    };
    if recorded.files != found.files {
        return bad("files", recorded.files as u64, found.files as u64);
    }
    if recorded.links != found.links {
        return bad("links", recorded.links as u64, found.links as u64);
    }
    if recorded.file_bytes != found.file_bytes {
        return bad("file_bytes", recorded.file_bytes, found.file_bytes);
    }
    if found.dirs < recorded.dirs {
        return bad("dirs", recorded.dirs as u64, found.dirs as u64);
    }
    Ok(())
}

/// Open a file named by the user for reading, refusing anything but a regular file (a FIFO
/// would block, a device node could be /dev/zero) without blocking on the open.
pub fn open_regular(p: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let refused =
        || io::Error::other("not a regular file (device node, FIFO, socket or directory): refused");
    // Looked at before the open (opening a device node can itself act), and again after.
    if !fs::metadata(p)?.is_file() {
        return Err(refused());
    }
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)?;
    if !f.metadata()?.is_file() {
        return Err(refused());
    }
    Ok(f)
}

/// Read a whole file named by the user (a report, a baseline), refusing anything but a regular
/// file and anything over `cap` bytes, with an error naming neither (the caller names it).
pub fn read_regular(p: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let f = open_regular(p)?;
    let mut buf = Vec::new();
    f.take(cap.saturating_add(1)).read_to_end(&mut buf)?;
    if buf.len() as u64 > cap {
        return Err(io::Error::other(format!(
            "larger than {cap} bytes: refused"
        )));
    }
    Ok(buf)
}

/// Extract `archive` into a fresh private temporary directory and check its manifest.
pub fn extract(archive: &Path) -> Result<Extracted, BundleError> {
    let f = open_regular(archive)
        .map_err(|e| BundleError::Io(format!("opening {}: {e}", archive.display())))?;
    extract_open(f, archive)
}

/// `extract` from an open file (`archive` names it in errors).
pub fn extract_open(mut f: fs::File, archive: &Path) -> Result<Extracted, BundleError> {
    io::Seek::seek(&mut f, io::SeekFrom::Start(0))
        .map_err(|e| BundleError::Io(format!("reading {}: {e}", archive.display())))?;
    let mut r = io::BufReader::new(f);
    let mut magic = [0u8; 2];
    match r.read_exact(&mut magic) {
        Ok(()) if magic == [0x1f, 0x8b] => {}
        Ok(()) => return Err(BundleError::NotGzip),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(BundleError::NotGzip),
        Err(e) => {
            return Err(BundleError::Io(format!(
                "reading {}: {e}",
                archive.display()
            )));
        }
    }
    let chained = io::Cursor::new(magic).chain(r);
    extract_from(chained, Limits::default())
}

/// Names of extraction directories: the PID of their owner follows, so that the next run can
/// remove those a crashed or killed run left behind.
const SCRATCH_PREFIX: &str = "gpudoctor-bundle-";

/// A private directory for the extracted tree. A bundle is thousands of tiny files, and
/// creating inodes on a disk file system dominated replay time (most of `gpudoctor bundle`'s
/// self-replay on ext4), so prefer the RAM-backed /dev/shm unless the user chose TMPDIR.
/// Registered for removal on a signal; stale ones of dead processes are swept first.
fn scratch_dir() -> io::Result<ScratchDir> {
    let shm = Path::new("/dev/shm");
    if std::env::var_os("TMPDIR").is_none()
        && shm.is_dir()
        && let Ok(d) = ScratchDir::new_in(shm)
    {
        return Ok(d);
    }
    ScratchDir::new_in(&std::env::temp_dir())
}

/// A private (0700) directory named `gpudoctor-bundle-<pid>-<random>`, removed when dropped,
/// on a signal (registered with `signals` before it is created, so no signal falls between
/// the two), or by the next run once this process is dead (`sweep_stale`).
pub struct ScratchDir {
    path: PathBuf,
    _registered: crate::signals::Temporary,
}

impl ScratchDir {
    fn new_in(parent: &Path) -> io::Result<ScratchDir> {
        use std::os::unix::fs::DirBuilderExt;
        sweep_stale(parent, SCRATCH_PREFIX, "-", true);
        let prefix = format!("{SCRATCH_PREFIX}{}-", std::process::id());
        loop {
            let mut rnd = [0u8; 6];
            getrandom::fill(&mut rnd).map_err(|e| io::Error::other(e.to_string()))?;
            let name: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
            let path = parent.join(format!("{prefix}{name}"));
            // No signal's removal may fall between registering and creating it (it would run
            // before the directory exists and leave it behind).
            let _creating = crate::signals::hold();
            let registered = crate::signals::Temporary::new(path.clone(), true);
            match fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => {
                    return Ok(ScratchDir {
                        path,
                        _registered: registered,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Then `_registered` unregisters it.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// Whether process `pid` is gone (so nothing of its can still be in use).
fn dead(pid: i32) -> bool {
    // SAFETY: signal 0 checks existence and permission only; nothing is delivered.
    pid > 0
        && unsafe { libc::kill(pid, 0) } != 0
        && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Remove entries of `dir` named `<prefix><pid><sep>...` (or ending in the PID when `sep` is
/// empty) owned by this user whose process is dead: what a crash or SIGKILL left behind.
pub fn sweep_stale(dir: &Path, prefix: &str, sep: &str, dirs: bool) {
    use std::os::unix::fs::MetadataExt;
    let Ok(rd) = fs::read_dir(dir) else {
        return;
    };
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let pid = if sep.is_empty() {
            rest
        } else {
            rest.split(sep).next().unwrap_or("")
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        let Ok(meta) = e.path().symlink_metadata() else {
            continue;
        };
        if meta.uid() != me || !dead(pid) {
            continue;
        }
        if dirs && meta.is_dir() {
            let _ = fs::remove_dir_all(e.path());
        } else if !dirs && meta.is_file() {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Extract from a gzip stream (the whole file, magic included).
pub fn extract_from<R: Read>(gz: R, limits: Limits) -> Result<Extracted, BundleError> {
    let dir = scratch_dir()
        .map_err(|e| BundleError::Io(format!("creating a temporary directory: {e}")))?;
    let hit = Rc::new(Cell::new(false));
    let limited = Limited {
        inner: flate2::read::GzDecoder::new(gz),
        left: limits.total_bytes,
        hit: hit.clone(),
    };
    let corrupt = |e: io::Error| {
        if hit.get() {
            BundleError::TooBig(limits.total_bytes.div_ceil(1 << 20))
        } else {
            BundleError::Corrupt(e.to_string().replace('\n', " "))
        }
    };
    let mut ar = tar::Archive::new(limited);
    let manifest = {
        let mut x = Extractor {
            root: dir.path().to_path_buf(),
            links: BTreeMap::new(),
            contents: super::Contents::default(),
            seen: BTreeSet::new(),
            count: 0,
            manifest: None,
            limits,
        };
        for entry in ar.entries().map_err(corrupt)? {
            let entry = entry.map_err(corrupt)?;
            x.entry(entry, &corrupt)?;
        }
        x.check_links()?;
        if let Some(m) = &x.manifest {
            check_contents(&m.contents, &x.contents)?;
        }
        x.manifest
    };
    // Drain to the gzip trailer so its CRC and length are checked.
    let mut rest = ar.into_inner();
    io::copy(&mut rest, &mut io::sink()).map_err(corrupt)?;
    let manifest = manifest.ok_or(BundleError::MissingManifest)?;
    Ok(Extracted { dir, manifest })
}

struct Extractor {
    root: PathBuf,
    /// Symlinks created so far (relative paths) and their targets: nothing may be written
    /// below one, and each must resolve inside the tree through the others (checked at the end).
    links: BTreeMap<PathBuf, String>,
    /// Counted as the manifest's `contents` counts them (everything but top-level documents).
    contents: super::Contents,
    seen: BTreeSet<PathBuf>,
    count: usize,
    manifest: Option<Manifest>,
    limits: Limits,
}

impl Extractor {
    fn entry<R: Read>(
        &mut self,
        mut e: tar::Entry<'_, R>,
        corrupt: &dyn Fn(io::Error) -> BundleError,
    ) -> Result<(), BundleError> {
        // No signal removes the directory while this entry is being created in it.
        let _creating = crate::signals::hold();
        self.count += 1;
        if self.count > self.limits.entries {
            return Err(BundleError::TooManyEntries(self.limits.entries));
        }
        let raw = e.path_bytes().into_owned();
        let name = shown(&raw);
        let bad = |why: String| BundleError::Entry(name.clone(), why);
        let kind = e.header().entry_type();
        if kind == tar::EntryType::Directory && is_root_name(&raw) {
            // `tar czf X -C DIR .` starts with the tree's own root, "./".
            return Ok(());
        }
        let rel = clean_path(&raw).map_err(bad)?;
        let size = e.header().size().map_err(corrupt)?;
        if size > self.limits.entry_bytes {
            return Err(bad(format!(
                "{size} bytes is over the {}-byte entry limit: refused",
                self.limits.entry_bytes
            )));
        }
        // Any proper ancestor of the entry that is a symlink (ancestors() yields the path
        // itself first).
        if rel.ancestors().skip(1).any(|a| self.links.contains_key(a)) {
            return Err(bad("entry below a symlink refused".into()));
        }
        let dest = self.root.join(&rel);
        match kind {
            tar::EntryType::Directory => {
                if self.links.contains_key(&rel) {
                    return Err(bad("directory over a symlink refused".into()));
                }
                self.mkdirs(&rel).map_err(bad)?;
                self.contents.dirs += 1;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if !self.seen.insert(rel.clone()) {
                    return Err(bad("duplicate entry refused".into()));
                }
                if let Some(p) = rel.parent() {
                    self.mkdirs(p).map_err(bad)?;
                }
                let mut buf = Vec::with_capacity(size.min(1 << 20) as usize);
                (&mut e).take(size).read_to_end(&mut buf).map_err(corrupt)?;
                if (buf.len() as u64) < size {
                    return Err(BundleError::Corrupt(format!("entry {name} is truncated")));
                }
                if rel == Path::new("manifest.json") {
                    self.manifest = Some(Manifest::from_json(&buf)?);
                }
                if rel.components().count() > 1 {
                    self.contents.files += 1;
                    self.contents.file_bytes += buf.len() as u64;
                }
                let mut f = fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&dest)
                    .map_err(|err| bad(format!("cannot create: {err}")))?;
                io::Write::write_all(&mut f, &buf).map_err(|err| bad(err.to_string()))?;
            }
            tar::EntryType::Symlink => {
                let target = e
                    .link_name_bytes()
                    .ok_or_else(|| bad("symlink without a target".into()))?;
                let target = std::str::from_utf8(&target)
                    .map_err(|_| bad("symlink target is not UTF-8".into()))?
                    .to_string();
                if target.contains('\0') || target.len() > MAX_NAME_BYTES {
                    return Err(bad("bad symlink target".into()));
                }
                target_inside(&rel, &target).map_err(bad)?;
                if !self.seen.insert(rel.clone()) {
                    return Err(bad("duplicate entry refused".into()));
                }
                if let Some(p) = rel.parent() {
                    self.mkdirs(p).map_err(bad)?;
                }
                std::os::unix::fs::symlink(&target, &dest)
                    .map_err(|err| bad(format!("cannot create symlink: {err}")))?;
                self.links.insert(rel, target);
                self.contents.links += 1;
            }
            tar::EntryType::Link => return Err(bad("hard link refused".into())),
            tar::EntryType::Char | tar::EntryType::Block => {
                return Err(bad("device file refused".into()));
            }
            tar::EntryType::Fifo => return Err(bad("fifo refused".into())),
            other => return Err(bad(format!("entry type {other:?} refused"))),
        }
        Ok(())
    }

    /// Every link's target, resolved through the tree's other links as the kernel would
    /// follow them, stays inside the tree. Checking the text alone let `s -> .` plus
    /// `nvml.json -> s/s/s/../../../etc/passwd` through: each `s` is a step down as text and
    /// none as resolved. Iterative with a hop cap per link and a total budget, whatever the
    /// links (a loop is let be: every reader fails it as the kernel would, with ELOOP).
    fn check_links(&self) -> Result<(), BundleError> {
        let mut budget = LINK_CHECK_BUDGET;
        for (link, target) in &self.links {
            let name = link.display().to_string();
            resolve_inside(&self.links, link, target, &mut budget)
                .map_err(|why| BundleError::Entry(shown(name.as_bytes()), why))?;
        }
        Ok(())
    }

    /// Create `rel` and its parents as real directories inside the root (never through a link).
    fn mkdirs(&mut self, rel: &Path) -> Result<(), String> {
        let mut cur = PathBuf::new();
        for c in rel.components() {
            cur.push(c);
            if self.links.contains_key(&cur) {
                return Err("path goes through a symlink: refused".into());
            }
            let host = self.root.join(&cur);
            match fs::symlink_metadata(&host) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(format!("{} is not a directory", cur.display())),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fs::create_dir(&host).map_err(|e| format!("cannot create directory: {e}"))?;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(clean_path(b"./sys/a").unwrap(), PathBuf::from("sys/a"));
        assert!(clean_path(b"/etc/passwd").is_err());
        assert!(clean_path(b"sys/../../x").is_err());
        assert!(clean_path(b"").is_err());
        assert!(clean_path(b"\xff").is_err());
    }

    #[test]
    fn link_targets() {
        let l = Path::new("sys/bus/pci/devices/0000:00:01.0");
        assert!(target_inside(l, "../../../devices/pci0000:00/0000:00:01.0").is_ok());
        assert!(target_inside(l, "../../../../../etc").is_err());
        assert!(target_inside(l, "/etc").is_err());
        assert!(target_inside(Path::new("a"), "..").is_err());
        assert!(target_inside(Path::new("a/b"), "..").is_ok());
    }
}
