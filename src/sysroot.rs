//! The one re-rootable reader for everything under /sys and /proc.
//!
//! Call sites name the kernel's own absolute path (`/sys/bus/pci/devices/0000:17:00.0/numa_node`);
//! the root prefix is applied here and nowhere else (hwloc's HWLOC_FSROOT idea). Symlinks are
//! resolved component by component *inside* the root: an absolute link target is taken relative
//! to the root and `..` never climbs above it, so a recorded tree or bundle can never make
//! gpudoctor read a file outside it. A root may also be a tree held in memory (`memory`: a
//! record in another format laid out as the kernel's tree), walked by the same rules and
//! answering with the errors a filesystem would give.
//!
//! This module must not interpret what it reads, and must never write.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

mod directory;
mod memory;
use directory::{EntryKind, Listing};
pub use memory::{DirHandle, MemTree};

/// Largest file we read. sysfs attributes are at most a page; PCI config space is 4096 bytes;
/// /proc/modules on a big host is a few tens of KiB. Anything larger in a tree is hostile.
pub const MAX_FILE_BYTES: u64 = 1 << 20;
/// Why a recorded tree's device node, FIFO or socket is not read.
const NOT_REGULAR: &str = "not a regular file (device node, FIFO or socket): refused";

/// Largest recorded document (nvml.json, libs.json, manifest.json, probes/*.json) read from a
/// tree: a bundle's entry limit (`bundle::read::MAX_ENTRY_BYTES`); real ones are under 1 MiB.
pub const MAX_DOCUMENT_BYTES: u64 = 16 << 20;

/// Most entries one directory listing returns; a larger directory is refused with an error
/// naming it, so no tree can make a listing unbounded in memory or time. The largest real
/// listings gpudoctor makes are /proc (one entry per process: tens of thousands on the busiest
/// hosts), /sys/class/net (thousands with containers' veths) and /sys/bus/pci/devices (a few
/// thousand functions with SR-IOV); a directory with more is hostile or broken.
pub const MAX_DIR_ENTRIES: usize = 1 << 17;

/// Most bytes one recorded tree may hand out over a whole run, files and documents together.
/// Each file is capped (MAX_FILE_BYTES) and each listing too, but a tree may hard-link one
/// large file under many names (a bundle refuses hard links; a `--root` tree cannot be checked
/// for them cheaply): without a total, 131,072 NUMA nodes sharing one 1 MiB cpulist would hand
/// out 128 GiB. A whole recorded host is a few MiB; this is a bundle's own total limit.
pub const MAX_TREE_BYTES: u64 = 256 << 20;

/// Symlink hops allowed while resolving one path (the kernel's own limit is 40).
const MAX_LINK_HOPS: usize = 40;
/// Longest path (below the root) a resolution may build: the kernel's PATH_MAX.
const MAX_PATH_BYTES: usize = 4096;
/// Most components waiting to be walked at once (link targets expanded): 40 hops of 4096-byte
/// targets could queue 80k single-character components; no real path has more than a hundred.
const MAX_PATH_COMPONENTS: usize = 4096;

fn too_long(kpath: &str) -> ReadError {
    ReadError::Io {
        path: kpath.to_string(),
        message: format!(
            "path too long after following links (over {MAX_PATH_BYTES} bytes or {MAX_PATH_COMPONENTS} components): refused"
        ),
    }
}

/// Why a path could not be read. Every one of these becomes an "unknown, because ..." upstream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("{0}: not present")]
    NotFound(String),
    #[error("{0}: permission denied (needs root?)")]
    PermissionDenied(String),
    #[error("{0}: symlink loop or too many links")]
    LinkLoop(String),
    #[error("{0}: larger than {MAX_FILE_BYTES} bytes, refused")]
    TooLarge(String),
    #[error("{0}: not valid UTF-8 text")]
    NotText(String),
    #[error("{0}: invalid path (must be absolute under /sys or /proc)")]
    BadPath(String),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

impl ReadError {
    fn from_io(path: &str, e: &io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound(path.to_string()),
            io::ErrorKind::PermissionDenied => ReadError::PermissionDenied(path.to_string()),
            _ if e.raw_os_error() == Some(libc::ELOOP) => ReadError::LinkLoop(path.to_string()),
            _ => ReadError::Io {
                path: path.to_string(),
                message: e.to_string(),
            },
        }
    }

    /// A stable name for the kind of failure, as a bundle manifest records it.
    pub fn kind(&self) -> &'static str {
        match self {
            ReadError::NotFound(_) => "not-found",
            ReadError::PermissionDenied(_) => "permission-denied",
            ReadError::LinkLoop(_) => "link-loop",
            ReadError::TooLarge(_) => "too-large",
            ReadError::NotText(_) => "not-text",
            ReadError::BadPath(_) => "bad-path",
            ReadError::Io { .. } => "io",
        }
    }

    /// The OS message for `Io` errors (the other kinds carry nothing beyond the path).
    pub fn detail(&self) -> Option<&str> {
        match self {
            ReadError::Io { message, .. } => Some(message),
            _ => None,
        }
    }

    /// Rebuild an error recorded by `kind()`/`detail()` for a given path; None for an unknown kind.
    pub fn rebuild(kind: &str, path: &str, detail: Option<&str>) -> Option<ReadError> {
        let p = path.to_string();
        Some(match kind {
            "not-found" => ReadError::NotFound(p),
            "permission-denied" => ReadError::PermissionDenied(p),
            "link-loop" => ReadError::LinkLoop(p),
            "too-large" => ReadError::TooLarge(p),
            "not-text" => ReadError::NotText(p),
            "bad-path" => ReadError::BadPath(p),
            "io" => ReadError::Io {
                path: p,
                message: detail.unwrap_or("I/O error").to_string(),
            },
            _ => return None,
        })
    }

    /// The kernel path this error is about.
    pub fn path(&self) -> &str {
        match self {
            ReadError::NotFound(p)
            | ReadError::PermissionDenied(p)
            | ReadError::LinkLoop(p)
            | ReadError::TooLarge(p)
            | ReadError::NotText(p)
            | ReadError::BadPath(p) => p,
            ReadError::Io { path, .. } => path,
        }
    }
}

/// A filesystem root: `/` on a live machine, a recorded tree (fixture, unpacked bundle), or a
/// tree held in memory (a record in another format).
pub struct SysRoot {
    root: PathBuf,
    live: bool,
    /// Every kernel path handed to this reader, for the bundle capture-list assertion: one
    /// buffer of the paths as asked, repeats included, and where each ends (`touched()` splits,
    /// sorts and dedups; an append is cheaper than a hashed insert of a new String per read).
    touched: Mutex<(String, Vec<usize>)>,
    /// Whether `touched` keeps every path (the default) or the last one only
    /// (`keep_last_path_only`).
    keep_touched: std::sync::atomic::AtomicBool,
    /// Resolved prefixes (see `resolve_prefix`). Paths below the root are kept as one string,
    /// components joined by '/', no leading slash ("" is the root): one allocation per path.
    resolved: Mutex<HashMap<String, String, Fnv>>,
    /// Physical path -> its link target, or None when it is not a link: one readlink per path
    /// however many kernel paths lead through it.
    links: Mutex<HashMap<String, Option<String>, Fnv>>,
    /// Resolved directories and open handles on the recent ones, under one lock (a read takes
    /// it once: discovery's threads share this reader).
    dirs: Mutex<DirCache>,
    /// A handle on the root of a tree on disk, opened with the first directory (`directory`).
    disk: std::sync::OnceLock<directory::Root>,
    /// The subset of `touched` that was listed as a directory (a replay needs the full listing).
    listed: Mutex<BTreeSet<String>>,
    /// Reads and listings in progress (a deadline's message tells a read that never returns
    /// from time spent on what was read).
    in_flight: std::sync::atomic::AtomicUsize,
    /// Bytes this reader has handed out (recorded trees: bounded by MAX_TREE_BYTES).
    handed_out: std::sync::atomic::AtomicU64,
    /// Errors a recorded tree says the original machine gave (a bundle manifest's
    /// `unreadable`; what a record in another format does not carry), keyed by canonical
    /// location below the root (no leading slash, as `resolve` gives it): replayed so a bundle
    /// reads as the machine did.
    recorded: Recorded,
    /// Tests only (GPUDOCTOR_TEST_SLOW_READ, see `config::Env`): a read of this path sleeps
    /// this long first, as a device that stops answering would.
    slow_read: std::sync::OnceLock<(String, std::time::Duration)>,
    /// Keeps whatever backs the tree (an extracted bundle's temporary directory) alive as long
    /// as the reader; dropped with it.
    _owner: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// A tree held in memory (a record in another format, see `in_memory`): read instead of
    /// the filesystem under `root`, under the same rules.
    mem: Option<MemTree>,
    /// This reader among those of the process (`LAST_DIR` is per thread, not per reader).
    id: u64,
    /// Whether `DirCache::listings` holds anything: until it does, a read needs not take the
    /// lock to ask it.
    has_listings: std::sync::atomic::AtomicBool,
}

/// Numbers the readers of this process (`SysRoot::id`).
static NEXT_READER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// The directory handle this thread's last read went through (`kernel_dir_fd`): reader,
    /// kernel path, handle. Discovery reads a device's attributes one after another on one
    /// thread, so most reads find their directory here without taking the cache's lock. Not
    /// an owner: the handle stays open only while the cache (or a read) holds it.
    static LAST_DIR: std::cell::RefCell<(u64, String, std::sync::Weak<directory::Handle>)> =
        const { std::cell::RefCell::new((u64::MAX, String::new(), std::sync::Weak::new())) };
}

impl std::fmt::Debug for SysRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SysRoot")
            .field("root", &self.root)
            .field("live", &self.live)
            .field("in_memory", &self.mem.is_some())
            .field("recorded_errors", &self.recorded.len())
            .finish_non_exhaustive()
    }
}

/// One read in flight (see `SysRoot::in_flight`).
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Recorded errors: canonical location below the root -> (`ReadError::kind()`, detail).
type Recorded = HashMap<String, memory::Recorded, Fnv>;

/// A resolved directory: its physical path below the root (components joined by '/').
type Dir = Arc<str>;

/// An open handle on a directory (and, for a recorded tree, its listing), shared so that no
/// lock is held while the kernel opens a file relative to it.
type DirFd = Arc<directory::Handle>;

#[derive(Default)]
struct DirCache {
    /// Kernel directory path (as written by callers) -> its resolved path, shared so that a
    /// read does not copy it.
    parents: HashMap<String, Dir, Fnv>,
    /// Recently opened directory handles (see `dir_fd`), keyed by resolved path (no leading
    /// slash), or, for a directory the kernel resolved (`kernel_dir_fd`), by its kernel path
    /// (leading slash): the two never collide. At most DIR_CACHE, the oldest closed first
    /// (`opened`).
    fds: HashMap<Dir, DirFd, Fnv>,
    /// The keys of `fds`, oldest first.
    opened: std::collections::VecDeque<Dir>,
    /// What listings of recorded trees' directories showed (`list_entries`), keyed as `fds`
    /// is (a directory is found both ways), so that a read of a file in a directory already
    /// listed needs no stat before its open.
    listings: HashMap<Dir, Arc<Listing>, Fnv>,
    /// Entries held in `listings` (bounded by MAX_LISTED_ENTRIES).
    listed_entries: usize,
}

impl DirCache {
    /// What the listing of `dir` says of `name`: None when `dir` was not listed, Some(None)
    /// when it holds no such entry.
    fn listed(&self, dir: &str, name: &str) -> Option<Option<EntryKind>> {
        Some(self.listings.get(dir)?.kind(name))
    }

    fn fd(&self, dir: &str) -> Option<DirFd> {
        self.fds.get(dir).cloned()
    }
}

/// The kernel path of the entry `name` in the directory `dir` (`/` included), allocated once
/// at its length (discovery builds one for each of tens of thousands of reads).
pub fn join(dir: &str, name: &str) -> String {
    let dir = if dir == "/" { "" } else { dir };
    let mut p = String::with_capacity(dir.len() + 1 + name.len());
    p.push_str(dir);
    p.push('/');
    p.push_str(name);
    p
}

/// Append component `c` to the physical path `base`.
fn push_comp(base: &mut String, c: &str) {
    if !base.is_empty() {
        base.push('/');
    }
    base.push_str(c);
}

/// Drop the last component of `base` (the root stays the root: `..` never climbs above it).
fn pop_comp(base: &mut String) {
    match base.rfind('/') {
        Some(i) => base.truncate(i),
        None => base.clear(),
    }
}

/// (parent, last component) of a physical path; None for the root.
fn split_comp(p: &str) -> Option<(&str, &str)> {
    if p.is_empty() {
        return None;
    }
    Some(match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    })
}

/// A file opened for reading: on disk, or the content of a tree held in memory.
enum Opened<'a> {
    Disk(fs::File),
    Memory(io::Cursor<&'a [u8]>),
}

impl Read for Opened<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Opened::Disk(f) => f.read(buf),
            Opened::Memory(c) => c.read(buf),
        }
    }
}

/// What a path is, without following it when it is a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    File,
    Dir,
    Symlink,
    /// A device node, fifo or socket: never captured.
    Special,
    /// Not present in the tree, but the recorded machine gave an error reading it.
    RecordedError,
}

/// FNV-1a: the caches key on short path strings from our own reads (not attacker-chosen
/// keys worth SipHash's cost), and hashing was a visible share of discovery time.
#[derive(Clone, Copy, Default)]
struct Fnv;

struct FnvHasher(u64);

impl std::hash::BuildHasher for Fnv {
    type Hasher = FnvHasher;
    fn build_hasher(&self) -> FnvHasher {
        FnvHasher(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for FnvHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // FNV-1a over 8-byte words (then the tail bytes): a path hashes in a handful of
        // multiplications, which matters while the lock around a cache is held.
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut v = [0u8; 8];
            v.copy_from_slice(w);
            self.0 = (self.0 ^ u64::from_le_bytes(v)).wrapping_mul(0x0100_0000_01b3);
            self.0 ^= self.0 >> 29;
        }
        for b in words.remainder() {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// Placeholder that keeps an empty directory of a recorded tree in git (git stores no empty
/// directories, and an empty /sys/class/infiniband means something other than an absent one).
/// Never a kernel entry; recorded trees' listings leave it out.
pub const KEEP_FILE: &str = ".gitkeep";

/// The first read of a file asks for this much (sysfs attributes are at most a page; PCI
/// config space is 4 KiB: a full first read goes on to EOF).
const FIRST_READ: usize = 8192;

thread_local! {
    /// Each thread's buffer for first reads, zeroed once: discovery reads tens of thousands of
    /// attributes, and zeroing a fresh 8 KiB for each cost more than the reads' own copying.
    static FIRST: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; FIRST_READ]);
}

/// Directory handles kept open: discovery reads one directory at a time per thread, and opens
/// a directory below one it holds by its name alone (`kernel_dir_fd`), so the handles of a
/// device's directories stay while they are read.
const DIR_CACHE: usize = 128;

/// Descriptors a process reading with this reader may hold at once: the DIR_CACHE directory
/// handles and the files its threads have open beside them (`reserve_descriptors`).
const RESERVED_DESCRIPTORS: i32 = 256;

/// Grow this process's descriptor table to RESERVED_DESCRIPTORS entries now, before any
/// thread starts. The kernel grows a table that threads share only after an RCU grace period
/// (`synchronize_rcu` in expand_fdtable), and every thread opening a file waits for it: on a
/// 32-core machine 15 to 25 ms, once as the 65th descriptor opens and again at the 129th,
/// which a discovery holding its directory handles reaches on any host. A table grown while the
/// process has one thread costs no wait. Best effort: where no standard descriptor is open to
/// duplicate or the limit on open files is lower, nothing changes (the wait comes back, no
/// more). No descriptor in use is touched: the duplicate takes the lowest free number from
/// RESERVED_DESCRIPTORS - 1 up and is closed at once.
pub fn reserve_descriptors() {
    for fd in 0..=2 {
        // SAFETY: F_DUPFD_CLOEXEC only creates a new descriptor (never replacing one in use);
        // a failure (fd not open, limit too low) returns -1 and changes nothing.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, RESERVED_DESCRIPTORS - 1) };
        if dup >= 0 {
            // SAFETY: dup was just created here and is owned by nobody else.
            unsafe { libc::close(dup) };
            return;
        }
    }
}

/// Most directory entries kept from listings over a run (`DirCache::listings`, a few tens of
/// bytes each); past it, a file's type is asked of the kernel before its open, as for a
/// directory never listed.
const MAX_LISTED_ENTRIES: usize = 1 << 18;

/// One directory entry, as the kernel would show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub is_dir: bool,
    pub is_symlink: bool,
}

impl SysRoot {
    /// The live machine.
    pub fn live() -> Self {
        SysRoot::with_state(PathBuf::from("/"), true, None, Default::default(), 4096)
    }

    /// A reader of `root` with empty caches (`capacity` entries reserved in the path maps) and
    /// `touched`, the log of paths read, as given.
    fn with_state(
        root: PathBuf,
        live: bool,
        mem: Option<MemTree>,
        touched: (String, Vec<usize>),
        capacity: usize,
    ) -> Self {
        SysRoot {
            root,
            live,
            touched: Mutex::new(touched),
            keep_touched: std::sync::atomic::AtomicBool::new(true),
            resolved: Mutex::new(HashMap::with_capacity_and_hasher(capacity, Fnv)),
            links: Mutex::new(HashMap::with_capacity_and_hasher(capacity, Fnv)),
            dirs: Mutex::new(DirCache::default()),
            disk: std::sync::OnceLock::new(),
            listed: Mutex::new(BTreeSet::new()),
            in_flight: std::sync::atomic::AtomicUsize::new(0),
            handed_out: std::sync::atomic::AtomicU64::new(0),
            recorded: Recorded::default(),
            slow_read: std::sync::OnceLock::new(),
            _owner: None,
            mem,
            id: NEXT_READER.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            has_listings: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A recorded tree. The directory must exist and contain `sys/`.
    pub fn at(dir: &Path) -> Result<Self, ReadError> {
        let shown = dir.display().to_string();
        let meta = fs::metadata(dir).map_err(|e| ReadError::from_io(&shown, &e))?;
        if !meta.is_dir() {
            return Err(ReadError::Io {
                path: shown,
                message: "not a directory".into(),
            });
        }
        let root = fs::canonicalize(dir).map_err(|e| ReadError::from_io(&shown, &e))?;
        if !root.join("sys").is_dir() {
            return Err(ReadError::Io {
                path: shown,
                message: "no sys/ directory inside (not a recorded tree)".into(),
            });
        }
        Ok(SysRoot::with_state(
            root,
            false,
            None,
            Default::default(),
            4096,
        ))
    }

    /// A recorded tree held in memory (a record in another format turned into the kernel's
    /// layout): read like a tree on disk, nothing written anywhere. `shown` stands for its
    /// root in messages (`root_dir`).
    pub fn in_memory(tree: MemTree, shown: PathBuf) -> Self {
        // Room for the paths a discovery reads (about one per entry and recorded error, some
        // twice), so the log of them is not copied as it grows: reserved, not touched.
        let reads = (tree.len() + tree.unreadable_count()).saturating_mul(2);
        let touched = (
            String::with_capacity(reads.saturating_mul(64)),
            Vec::with_capacity(reads),
        );
        SysRoot::with_state(shown, false, Some(tree), touched, 1024)
    }

    /// Whether dropping this reader only frees memory: no extracted bundle directory (or other
    /// owner) to remove. Such a reader may be left to the process's exit (`run::release`).
    pub fn owns_nothing_outside(&self) -> bool {
        self._owner.is_none()
    }

    /// A record held in memory (`in_memory`): its reads are memory lookups that never wait on
    /// a device, so spreading them over threads or watching them with a deadline gains nothing.
    pub fn is_in_memory(&self) -> bool {
        self.mem.is_some()
    }

    pub fn is_live(&self) -> bool {
        self.live
    }

    /// The directory standing in for `/` (for a tree in memory, what stands for it in messages).
    pub fn root_dir(&self) -> &Path {
        &self.root
    }

    /// Kernel paths read so far (sorted); only the last one after `keep_last_path_only`.
    pub fn touched(&self) -> Vec<String> {
        let t = match self.touched.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        let (buf, ends) = &*t;
        let mut start = 0;
        let mut v: Vec<String> = Vec::with_capacity(ends.len());
        for &end in ends {
            v.push(buf[start..end].to_string());
            start = end;
        }
        drop(t);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Keep only the last path read from now on (what `last_path` names when discovery
    /// stalls): for a command that never asks `touched()`, whose log of every read (tens of
    /// thousands of paths on a large host) would only cost memory.
    pub fn keep_last_path_only(&self) {
        self.keep_touched
            .store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Kernel paths listed as directories so far (sorted); a subset of `touched()`.
    pub fn listed(&self) -> Vec<String> {
        match self.listed.lock() {
            Ok(t) => t.iter().cloned().collect(),
            Err(p) => p.into_inner().iter().cloned().collect(),
        }
    }

    /// Replay errors recorded on the original machine: canonical kernel path -> (kind, detail)
    /// as `ReadError::kind()`/`detail()` gave them (added to those a tree in memory carries).
    /// Only for recorded trees.
    pub fn with_recorded_errors(
        mut self,
        errors: BTreeMap<String, (String, Option<String>)>,
    ) -> Self {
        if !self.live {
            for (path, (kind, detail)) in errors {
                // A key that is not an absolute path names no location a read can reach.
                if let Some(loc) = path.strip_prefix('/') {
                    self.recorded.insert(
                        loc.to_string(),
                        (Arc::from(kind), detail.map(|d| Arc::from(d.as_str()))),
                    );
                }
            }
        }
        self
    }

    /// Keep `owner` (e.g. the temporary directory a bundle was extracted into) alive as long as
    /// this reader.
    pub fn holding<T: Send + Sync + 'static>(mut self, owner: T) -> Self {
        self._owner = Some(Box::new(owner));
        self
    }

    /// For a process about to end: release what backs the tree now (an extracted bundle's
    /// scratch directory, removed as it is dropped) and leave the rest, caches of tens of
    /// thousands of entries on a large host, to the exit instead of freeing it piece by piece.
    pub fn dismiss(mut self) {
        drop(self._owner.take());
        std::mem::forget(self);
    }

    /// Whether this reader replays recorded errors (a bundle's, or a tree in memory's).
    fn replays_errors(&self) -> bool {
        !self.recorded.is_empty() || self.mem.as_ref().is_some_and(|m| m.unreadable_count() > 0)
    }

    /// The recorded error for a canonical location, rebuilt for the caller's path.
    fn recorded_error(&self, kpath: &str, comps: &str) -> Result<(), ReadError> {
        let hit = match &self.mem {
            Some(m) => m.recorded(comps).or_else(|| self.recorded.get(comps)),
            None if self.recorded.is_empty() => return Ok(()),
            None => self.recorded.get(comps),
        };
        match hit {
            Some((kind, detail)) => Err(ReadError::rebuild(kind, kpath, detail.as_deref())
                .unwrap_or_else(|| ReadError::Io {
                    path: kpath.to_string(),
                    message: format!("recorded error of unknown kind '{kind}'"),
                })),
            None => Ok(()),
        }
    }

    /// Where `kpath` lives: every link resolved except the last component, which is kept as
    /// named. Never fails: a part that cannot be resolved is kept as written. For the bundle's
    /// capture-list coverage check.
    pub fn location(&self, kpath: &str) -> String {
        if let Ok(c) = self.resolve(kpath, false) {
            return format!("/{c}");
        }
        let Ok(comps) = Self::components(kpath) else {
            return kpath.to_string();
        };
        match split_comp(&comps) {
            None => "/".to_string(),
            Some((parent, last)) => {
                let p = self.location(&format!("/{parent}"));
                format!("{}/{last}", p.trim_end_matches('/'))
            }
        }
    }

    /// What `kpath` is, without following a final symlink (intermediate links are followed).
    pub fn kind_of(&self, kpath: &str) -> Result<FileKind, ReadError> {
        self.note(kpath);
        let comps = self.resolve(kpath, false)?;
        if self.recorded_error(kpath, &comps).is_err() {
            return Ok(FileKind::RecordedError);
        }
        if let Some(m) = &self.mem {
            return match m.lstat(&comps) {
                Ok(memory::Node::File(_)) => Ok(FileKind::File),
                Ok(memory::Node::Dir(_)) => Ok(FileKind::Dir),
                Ok(memory::Node::Link(_)) => Ok(FileKind::Symlink),
                Err(e) => Err(ReadError::from_io(kpath, &e)),
            };
        }
        let host = self.host_path(&comps);
        let meta = fs::symlink_metadata(&host).map_err(|e| ReadError::from_io(kpath, &e))?;
        let ft = meta.file_type();
        Ok(if ft.is_symlink() {
            FileKind::Symlink
        } else if ft.is_dir() {
            FileKind::Dir
        } else if ft.is_file() {
            FileKind::File
        } else {
            FileKind::Special
        })
    }

    /// Resolve `kpath` like `canonical`, also returning every symlink crossed on the way as
    /// (canonical location of the link, target as written), so a copy can reproduce the walk.
    /// Deliberately apart from `resolve` (same rules, no caching): only the bundle capture
    /// needs the trace.
    pub fn canonical_with_links(
        &self,
        kpath: &str,
    ) -> Result<(String, Vec<(String, String)>), ReadError> {
        self.note(kpath);
        let mut links = Vec::new();
        let mut pending: Vec<String> = Self::components(kpath)?
            .split('/')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect();
        pending.reverse();
        let mut done: Vec<String> = Vec::new();
        let mut hops = 0usize;
        while let Some(c) = pending.pop() {
            match c.as_str() {
                ".." => {
                    done.pop();
                    continue;
                }
                "." | "" => continue,
                _ => done.push(c),
            }
            let Some(target) = self
                .lstat_link(&done.join("/"))
                .map_err(|e| ReadError::from_io(kpath, &e))?
            else {
                continue;
            };
            hops += 1;
            if hops > MAX_LINK_HOPS {
                return Err(ReadError::LinkLoop(kpath.to_string()));
            }
            links.push((format!("/{}", done.join("/")), target.clone()));
            done.pop();
            if target.starts_with('/') {
                done.clear();
            }
            pending.extend(
                target
                    .split('/')
                    .filter(|s| !s.is_empty())
                    .rev()
                    .map(str::to_string),
            );
        }
        Ok((format!("/{}", done.join("/")), links))
    }

    /// Whether the physical path `phys` is a link (lstat, then readlink): its target, or None.
    fn lstat_link(&self, phys: &str) -> io::Result<Option<String>> {
        if let Some(m) = &self.mem {
            return match m.lstat(phys)? {
                memory::Node::Link(t) => Ok(Some(t.clone())),
                _ => Ok(None),
            };
        }
        let host = self.host_path(phys);
        if !fs::symlink_metadata(&host)?.file_type().is_symlink() {
            return Ok(None);
        }
        Ok(Some(fs::read_link(&host)?.to_string_lossy().into_owned()))
    }

    /// Whether the resolved physical path `phys` is a directory (following a link on disk, as
    /// `Path::is_dir` does; `phys` is resolved, so there is none to follow).
    fn is_dir_phys(&self, phys: &str) -> bool {
        match &self.mem {
            Some(m) => m.is_dir(phys),
            None => self.host_path(phys).is_dir(),
        }
    }

    /// The path most recently handed to this reader: what a stalled discovery is stuck on.
    pub fn last_path(&self) -> String {
        let t = match self.touched.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        let (buf, ends) = &*t;
        let start = match ends.len() {
            0 | 1 => 0,
            n => ends[n - 2],
        };
        buf[start..].to_string()
    }

    /// Tests only: every later read of `path` sleeps `delay` first (see `slow_read`).
    pub fn delay_reads_of(&self, path: String, delay: std::time::Duration) {
        let _ = self.slow_read.set((path, delay));
    }

    fn maybe_delay(&self, path: &str) {
        if let Some((p, d)) = self.slow_read.get()
            && p == path
        {
            std::thread::sleep(*d);
        }
    }

    /// Whether a read or listing is in progress now (see `in_flight`).
    pub fn reading_now(&self) -> bool {
        self.in_flight.load(std::sync::atomic::Ordering::Relaxed) > 0
    }

    /// Count a read or listing in progress until the returned guard drops.
    fn in_flight(&self) -> InFlight<'_> {
        self.in_flight
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    fn note(&self, kpath: &str) {
        let mut t = match self.touched.lock() {
            Ok(t) => t,
            Err(p) => p.into_inner(),
        };
        if !self.keep_touched.load(std::sync::atomic::Ordering::Relaxed) {
            t.0.clear();
            t.1.clear();
        }
        t.0.push_str(kpath);
        let end = t.0.len();
        t.1.push(end);
    }

    /// An absolute kernel path as clean components joined by '/' (no leading slash, `.` and
    /// empty components dropped, `..` applied); refuse relative paths.
    fn components(kpath: &str) -> Result<String, ReadError> {
        if !kpath.starts_with('/') || kpath.contains('\0') {
            return Err(ReadError::BadPath(kpath.to_string()));
        }
        let mut out = String::with_capacity(kpath.len());
        for c in kpath.split('/') {
            match c {
                "" | "." => {}
                ".." => pop_comp(&mut out),
                c => push_comp(&mut out, c),
            }
        }
        Ok(out)
    }

    fn host_path(&self, comps: &str) -> PathBuf {
        let mut p = self.root.clone();
        if !comps.is_empty() {
            p.push(comps);
        }
        p
    }

    /// Resolve every symlink in `kpath` inside the root and return the canonical kernel path
    /// (e.g. `/sys/bus/pci/devices/0000:00:06.0` -> `/sys/devices/pci0000:00/0000:00:06.0`).
    pub fn canonical(&self, kpath: &str) -> Result<String, ReadError> {
        self.note(kpath);
        let comps = self.resolve(kpath, true)?;
        Ok(format!("/{comps}"))
    }

    /// Resolve symlinks in all components (the last one too when `follow_last`); the physical
    /// path below the root.
    fn resolve(&self, kpath: &str, follow_last: bool) -> Result<String, ReadError> {
        // A last component that is a plain name: its parent, as written, is worth memoising.
        let named = kpath
            .rsplit_once('/')
            .filter(|(_, last)| !last.is_empty() && *last != "." && *last != "..");
        if !follow_last && let Some((parent, last)) = named {
            // Fast path: the parent directory was resolved before (discovery reads many
            // attributes per directory).
            let hit = self.lock_dirs().parents.get(parent).cloned();
            if let Some(r) = hit {
                let mut r = String::from(&*r);
                push_comp(&mut r, last);
                return Ok(r);
            }
        }
        let comps = Self::components(kpath)?;
        let mut hops = 0usize;
        if follow_last {
            self.resolve_prefix(&comps, kpath, &mut hops)
        } else {
            let Some((parent, last)) = split_comp(&comps) else {
                return Ok(String::new());
            };
            let mut r = self.resolve_prefix(parent, kpath, &mut hops)?;
            if let Some((p, _)) = named {
                self.lock_dirs()
                    .parents
                    .insert(p.to_string(), Arc::from(r.as_str()));
            }
            push_comp(&mut r, last);
            Ok(r)
        }
    }

    /// Resolve a path (components joined by '/', possibly with `.` and `..` from link
    /// targets), following every link inside the root, memoised per prefix of `comps`:
    /// discovery reads dozens of attributes in each device directory, and each would otherwise
    /// pay one readlink per path component.
    ///
    /// Iterative, never recursive: a link target's components go on a work list, so no input
    /// can grow the stack (a recorded tree once held targets of 2000 `.` components that
    /// overflowed the discovery thread's stack). Bounded: at most MAX_LINK_HOPS links, a target
    /// is at most 4096 bytes (readlink_in), and the path being built at most MAX_PATH_BYTES.
    fn resolve_prefix(
        &self,
        comps: &str,
        kpath: &str,
        hops: &mut usize,
    ) -> Result<String, ReadError> {
        if comps.is_empty() {
            return Ok(String::new());
        }
        if comps.len() > MAX_PATH_BYTES {
            return Err(too_long(kpath));
        }
        // The longest prefix of `comps` resolved before; `start` is where the rest begins.
        let mut base = String::new();
        let mut start = 0usize;
        {
            let cache = self.lock_cache();
            if let Some(hit) = cache.get(comps) {
                return Ok(hit.clone());
            }
            let mut end = comps.len();
            while let Some(i) = comps[..end].rfind('/') {
                if let Some(hit) = cache.get(&comps[..i]) {
                    base = hit.clone();
                    start = i + 1;
                    break;
                }
                end = i;
            }
        }
        // Components of link targets still to walk, last first.
        let mut pending: Vec<String> = Vec::new();
        let mut pos = start;
        for c in comps[start..].split('/') {
            self.step(&mut base, c, &mut pending, kpath, hops)?;
            while let Some(t) = pending.pop() {
                self.step(&mut base, &t, &mut pending, kpath, hops)?;
            }
            // The prefix of `comps` up to this component is resolved: remember it.
            let end = pos + c.len();
            self.lock_cache()
                .insert(comps[..end].to_string(), base.clone());
            pos = end + 1;
        }
        Ok(base)
    }

    /// Walk one component `c` from the physical path `base`; a link's target components go on
    /// `pending` (last first) for the caller to walk next.
    fn step(
        &self,
        base: &mut String,
        c: &str,
        pending: &mut Vec<String>,
        kpath: &str,
        hops: &mut usize,
    ) -> Result<(), ReadError> {
        match c {
            "" | "." => {}
            ".." => pop_comp(base),
            name => {
                push_comp(base, name);
                if base.len() > MAX_PATH_BYTES {
                    return Err(too_long(kpath));
                }
                if let Some(target) = self.link_target(base, kpath)? {
                    *hops += 1;
                    if *hops > MAX_LINK_HOPS {
                        return Err(ReadError::LinkLoop(kpath.to_string()));
                    }
                    pop_comp(base);
                    if target.starts_with('/') {
                        // An absolute target means "from the root of this tree", never the
                        // host's /.
                        base.clear();
                    }
                    pending.extend(
                        target
                            .split('/')
                            .filter(|t| !t.is_empty() && *t != ".")
                            .rev()
                            .map(str::to_string),
                    );
                    if pending.len() > MAX_PATH_COMPONENTS {
                        return Err(too_long(kpath));
                    }
                }
            }
        }
        Ok(())
    }

    /// The link target of the physical path `phys` (already resolved: no links before its last
    /// component), or None when it is not a link; memoised.
    fn link_target(&self, phys: &str, kpath: &str) -> Result<Option<String>, ReadError> {
        let lock = || match self.links.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        };
        if let Some(m) = &self.mem {
            // A lookup in memory costs less than the cache would.
            return match m.readlink(phys) {
                Ok(t) => Ok(Some(t)),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
                Err(e) => Err(ReadError::from_io(kpath, &e)),
            };
        }
        if let Some(hit) = lock().get(phys) {
            return Ok(hit.clone());
        }
        // One readlink answers both questions: EINVAL is "present, not a link" (what an lstat
        // would say), any other error is what the lstat would have failed with.
        // Relative to the root's handle where it is open (the kernel walks only the tree's
        // part of the path), else by the host path.
        let read = match self.disk().raw_fd().filter(|_| !phys.is_empty()) {
            Some(root) => Self::with_cname(phys, |c| directory::readlink_at(root, c)),
            None => fs::read_link(self.host_path(phys)).map(|t| t.to_string_lossy().into_owned()),
        };
        let target = match read {
            Ok(t) => Some(t),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => None,
            Err(e) => return Err(ReadError::from_io(kpath, &e)),
        };
        lock().insert(phys.to_string(), target.clone());
        Ok(target)
    }

    /// A handle on the resolved directory `dir` (O_PATH, not following a link), from a small
    /// cache: discovery reads a dozen attributes per directory, and opening each relative to
    /// its directory spares the kernel a full path walk.
    fn dir_fd(&self, dir: &Dir) -> io::Result<DirFd> {
        if let Some(fd) = self.lock_dirs().fd(dir) {
            return Ok(fd);
        }
        let owned = Arc::new(
            self.disk()
                .open_resolved(dir, &self.host_path(dir), !self.live)?,
        );
        Ok(self.keep_dir_fd(dir, owned))
    }

    /// The handle on the root of this tree on disk.
    fn disk(&self) -> &directory::Root {
        self.disk.get_or_init(|| directory::Root::open(&self.root))
    }

    /// A handle on the directory named by the kernel path `kdir` (a recorded tree on disk, a
    /// path of plain names), resolved by the kernel inside the root (`directory`): one
    /// openat2 instead of a readlink per component. None where the kernel cannot (no
    /// openat2) or the walk fails: the caller then resolves `kdir` itself, which gives the
    /// error this reader has always given.
    fn kernel_dir_fd(&self, kdir: &str) -> Option<DirFd> {
        if self.live || self.mem.is_some() || self.replays_errors() {
            return None;
        }
        if let Some(fd) = self.last_dir(kdir) {
            return Some(fd);
        }
        let rel = kdir.strip_prefix('/')?;
        if rel.split('/').any(|c| matches!(c, "" | "." | "..")) {
            // This reader applies `..` to the path as written (`components`), the kernel to
            // where a link led: such a path, rare, is walked here.
            return None;
        }
        let parent = {
            let dirs = self.lock_dirs();
            if let Some(fd) = dirs.fd(kdir) {
                drop(dirs);
                self.set_last_dir(kdir, &fd);
                return Some(fd);
            }
            // A kernel path's parent as written; "" (a directory just below the root) is the
            // root's own resolved key, the same directory.
            kdir.rsplit_once('/')
                .and_then(|(p, name)| Some((dirs.fd(p)?, name)))
        };
        // Below a directory already open, a name that its listing shows as a directory (or,
        // unlisted, one that opens without following a link) is the directory the kernel's
        // walk from the root would reach: one lookup instead of a walk of the whole path.
        let below = match parent {
            Some((p, name)) => match p.listed().map(|l| l.kind(name)) {
                Some(Some(EntryKind::Dir)) | None => p.open_below(name, true).ok(),
                Some(Some(EntryKind::Link)) => None,
                // Not there, or not a directory: the walk says how.
                Some(_) => return None,
            },
            None => None,
        };
        let owned = match below {
            Some(h) => h,
            None => self.disk().open_kernel(rel, true).ok()?,
        };
        let fd = self.keep_dir_fd(&Arc::from(kdir), Arc::new(owned));
        self.set_last_dir(kdir, &fd);
        Some(fd)
    }

    /// The handle `kernel_dir_fd` gave this thread last, if it was for `kdir` of this reader
    /// and is still open.
    fn last_dir(&self, kdir: &str) -> Option<DirFd> {
        LAST_DIR.with(|l| {
            let l = l.borrow();
            (l.0 == self.id && l.1 == kdir)
                .then(|| l.2.upgrade())
                .flatten()
        })
    }

    fn set_last_dir(&self, kdir: &str, fd: &DirFd) {
        LAST_DIR.with(|l| {
            let mut l = l.borrow_mut();
            l.0 = self.id;
            l.1.clear();
            l.1.push_str(kdir);
            l.2 = Arc::downgrade(fd);
        });
    }

    /// Keep `fd` among the recent directory handles under `key`, closing the oldest.
    fn keep_dir_fd(&self, key: &Dir, owned: DirFd) -> DirFd {
        let evicted = {
            let mut cache = self.lock_dirs();
            if let Some(held) = cache.fds.get(key) {
                // Another thread opened it meanwhile: keep one.
                return held.clone();
            }
            let evicted = if cache.opened.len() >= DIR_CACHE {
                cache
                    .opened
                    .pop_front()
                    .and_then(|old| cache.fds.remove(&old))
            } else {
                None
            };
            cache.opened.push_back(key.clone());
            cache.fds.insert(key.clone(), owned.clone());
            evicted
        };
        // Closed (when no reader still holds it) after the lock is released.
        drop(evicted);
        owned
    }

    /// `name` as a C string, on the stack when it is short (every sysfs attribute name is).
    fn with_cname<R>(
        name: &str,
        f: impl FnOnce(&std::ffi::CStr) -> io::Result<R>,
    ) -> io::Result<R> {
        let mut buf = [0u8; 256];
        if name.len() < buf.len() {
            buf[..name.len()].copy_from_slice(name.as_bytes());
            let c = std::ffi::CStr::from_bytes_with_nul(&buf[..=name.len()])
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            f(c)
        } else {
            let c = std::ffi::CString::new(name)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            f(&c)
        }
    }

    /// Open `name` inside the resolved directory `dir` (no symlink following, non-blocking so
    /// a FIFO planted in a recorded tree cannot hang the open).
    fn open_in(&self, dir: &str, fd: Option<DirFd>, name: &str) -> io::Result<Opened<'_>> {
        use std::os::fd::{AsRawFd, FromRawFd};
        if let Some(m) = &self.mem {
            let mut p = String::with_capacity(dir.len() + name.len() + 1);
            p.push_str(dir);
            push_comp(&mut p, name);
            return m.open(&p).map(|b| Opened::Memory(io::Cursor::new(b)));
        }
        let dirfd = match fd {
            Some(fd) => fd,
            None => self.dir_fd(&Arc::from(dir))?,
        };
        let live = self.live;
        // A recorded tree is files, directories and links: never open anything else (a device
        // node planted in it could be /dev/zero's, or a tape's that rewinds on open). Its type
        // is known before any open: from the listing of its directory when it was listed,
        // else looked at without following.
        let listed = if live {
            None
        } else if let Some(l) = dirfd.listed() {
            Some(l.kind(name))
        } else if self.has_listings.load(std::sync::atomic::Ordering::Acquire) {
            self.lock_dirs().listed(dir, name)
        } else {
            None
        };
        match listed {
            Some(Some(EntryKind::File)) | None => {}
            Some(None) => return Err(io::Error::from_raw_os_error(libc::ENOENT)),
            Some(Some(EntryKind::Link)) => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
            Some(Some(EntryKind::Dir)) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
            Some(Some(EntryKind::Special)) => return Err(io::Error::other(NOT_REGULAR)),
        }
        Self::with_cname(name, |c| {
            if !live && listed.is_none() {
                // SAFETY: an all-zero stat is a valid value for the kernel to fill in.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: dirfd is live; c is NUL-terminated; st is writable.
                let r = unsafe {
                    libc::fstatat(
                        dirfd.as_raw_fd(),
                        c.as_ptr(),
                        &mut st,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                };
                if r < 0 {
                    return Err(io::Error::last_os_error());
                }
                match st.st_mode & libc::S_IFMT {
                    libc::S_IFREG => {}
                    libc::S_IFLNK => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
                    libc::S_IFDIR => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
                    _ => return Err(io::Error::other(NOT_REGULAR)),
                }
            }
            // SAFETY: dirfd is a live descriptor (we hold a reference); c is NUL-terminated.
            let fd = unsafe {
                libc::openat(
                    dirfd.as_raw_fd(),
                    c.as_ptr(),
                    libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC,
                )
            };
            if fd < 0 {
                return Err(io::Error::last_os_error());
            }
            // SAFETY: fd was just returned by openat(2) and is owned by nobody else.
            Ok(Opened::Disk(unsafe { fs::File::from_raw_fd(fd) }))
        })
    }

    /// The target of the link `name` inside the resolved directory `dir`.
    fn readlink_in(&self, dir: &str, fd: Option<DirFd>, name: &str) -> io::Result<String> {
        use std::os::fd::AsRawFd;
        if let Some(m) = &self.mem {
            let mut p = String::with_capacity(dir.len() + name.len() + 1);
            p.push_str(dir);
            push_comp(&mut p, name);
            return m.readlink(&p);
        }
        let dirfd = match fd {
            Some(fd) => fd,
            None => self.dir_fd(&Arc::from(dir))?,
        };
        Self::with_cname(name, |c| directory::readlink_at(dirfd.as_raw_fd(), c))
    }

    fn lock_dirs(&self) -> std::sync::MutexGuard<'_, DirCache> {
        match self.dirs.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        }
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, String, Fnv>> {
        match self.resolved.lock() {
            Ok(c) => c,
            Err(p) => p.into_inner(),
        }
    }

    /// `kpath`'s directory, resolved (memoised), its handle when one is open, and its last
    /// component as named: what a read needs, under one lock, without copying the components.
    /// None for a path without a last name ("/").
    #[allow(clippy::type_complexity)]
    fn resolve_dir<'k>(
        &self,
        kpath: &'k str,
    ) -> Result<Option<(Dir, Option<DirFd>, std::borrow::Cow<'k, str>)>, ReadError> {
        if let Some((parent, last)) = kpath.rsplit_once('/')
            && !last.is_empty()
            && last != "."
            && last != ".."
        {
            let hit = {
                let c = self.lock_dirs();
                c.parents.get(parent).map(|d| (d.clone(), c.fd(d)))
            };
            if let Some((d, fd)) = hit {
                return Ok(Some((d, fd, std::borrow::Cow::Borrowed(last))));
            }
        }
        let comps = self.resolve(kpath, false)?;
        Ok(split_comp(&comps).map(|(dir, last)| {
            (
                Arc::from(dir),
                None,
                std::borrow::Cow::Owned(last.to_string()),
            )
        }))
    }

    /// Open the file at `kpath` for reading: its directory resolved (memoised), the last
    /// component opened relative to a cached directory handle without following it; only when
    /// that component is itself a link (ELOOP) is it resolved inside the root.
    fn open_file(&self, kpath: &str) -> Result<Opened<'_>, ReadError> {
        if let Some(m) = &self.mem {
            return self.open_in_memory(m, kpath);
        }
        if self.replays_errors() {
            // A bundle says the recorded machine gave an error here: give the same one.
            self.recorded_error(kpath, &self.resolve(kpath, false)?)?;
            self.recorded_error(kpath, &self.resolve(kpath, true)?)?;
        }
        if let Some((kdir, last)) = kpath.rsplit_once('/')
            && let Some(fd) = self.kernel_dir_fd(kdir)
            && !matches!(last, "" | "." | "..")
        {
            // The directory as the kernel resolved it: its entry `last` is what the walk below
            // would find. Only a last component that is itself a link (ELOOP) is left to it.
            match self.open_in(kdir, Some(fd), last) {
                Ok(f) => return Ok(f),
                Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {}
                Err(e) => return Err(ReadError::from_io(kpath, &e)),
            }
        }
        let Some((dir, fd, last)) = self.resolve_dir(kpath)? else {
            return Err(ReadError::BadPath(kpath.to_string()));
        };
        match self.open_in(&dir, fd, &last) {
            Ok(f) => Ok(f),
            Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
                let comps = self.resolve(kpath, true)?;
                let (dir, last) =
                    split_comp(&comps).ok_or_else(|| ReadError::BadPath(kpath.to_string()))?;
                self.open_in(dir, None, last)
                    .map_err(|e| ReadError::from_io(kpath, &e))
            }
            Err(e) => Err(ReadError::from_io(kpath, &e)),
        }
    }

    /// `open_file` in a tree held in memory: the same checks in the same order, and the same
    /// outcome (the recorded error where the path leads, else the file, EISDIR, ENOENT or
    /// ENOTDIR), without the directory handles a tree on disk needs.
    fn open_in_memory<'m>(&self, m: &'m MemTree, kpath: &str) -> Result<Opened<'m>, ReadError> {
        let loc = self.resolve(kpath, false)?;
        self.recorded_error(kpath, &loc)?;
        let full = if m.is_link(&loc) {
            let full = self.resolve(kpath, true)?;
            self.recorded_error(kpath, &full)?;
            full
        } else {
            loc
        };
        if full.is_empty() {
            // "/" names no file (as `resolve_dir` says on disk).
            return Err(ReadError::BadPath(kpath.to_string()));
        }
        m.open(&full)
            .map(|b| Opened::Memory(io::Cursor::new(b)))
            .map_err(|e| ReadError::from_io(kpath, &e))
    }

    /// Count `n` bytes handed out of a recorded tree; past MAX_TREE_BYTES in all, an error
    /// naming the file (the live machine is not limited: its files are the kernel's own).
    fn charge(&self, path: &str, n: usize) -> Result<(), ReadError> {
        if self.live {
            return Ok(());
        }
        let before = self
            .handed_out
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        if before.saturating_add(n as u64) > MAX_TREE_BYTES {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: format!(
                    "this recorded tree has already handed out {MAX_TREE_BYTES} bytes in all (hard-linked or repeated large files?): refused"
                ),
            });
        }
        Ok(())
    }

    /// Read a whole file (bounded by MAX_FILE_BYTES), following links inside the root, and
    /// hand its bytes to `f` (from the thread's buffer when they fit in one read).
    fn read_with<R>(
        &self,
        kpath: &str,
        f: impl FnOnce(&[u8]) -> Result<R, ReadError>,
    ) -> Result<R, ReadError> {
        self.note(kpath);
        let _reading = self.in_flight();
        self.maybe_delay(kpath);
        let file = self.open_file(kpath)?;
        // The thread's buffer, or a fresh one where `f` itself reads (it is borrowed then).
        FIRST.with(|cell| match cell.try_borrow_mut() {
            Ok(mut first) => self.read_first(kpath, file, &mut first, f),
            Err(_) => self.read_first(kpath, file, &mut vec![0; FIRST_READ], f),
        })
    }

    /// `read_with` from the opened file, its first read into `first` (FIRST_READ bytes).
    fn read_first<R>(
        &self,
        kpath: &str,
        mut file: Opened<'_>,
        first: &mut [u8],
        f: impl FnOnce(&[u8]) -> Result<R, ReadError>,
    ) -> Result<R, ReadError> {
        // A directory fails the read below with EISDIR; no fstat needed.
        // sysfs reports 4096 for every attribute: read to EOF, not by the reported size. A
        // sysfs attribute gives its whole value to one read, and a regular file of a recorded
        // tree gives a short read only at its end, so there one read that does not fill the
        // buffer is the whole file (half the read calls of discovery). procfs (seq_file) may
        // return less than asked before its end: it is read to EOF.
        let n = loop {
            match file.read(first) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ReadError::from_io(kpath, &e)),
            }
        };
        let whole = n < FIRST_READ && (!self.live || kpath.starts_with("/sys/"));
        if whole || n == 0 {
            self.charge(kpath, n)?;
            return f(&first[..n]);
        }
        let mut buf = first[..n].to_vec();
        file.take(MAX_FILE_BYTES + 1 - n as u64)
            .read_to_end(&mut buf)
            .map_err(|e| ReadError::from_io(kpath, &e))?;
        if buf.len() as u64 > MAX_FILE_BYTES {
            return Err(ReadError::TooLarge(kpath.to_string()));
        }
        self.charge(kpath, buf.len())?;
        f(&buf)
    }

    /// A document recorded beside `sys/` and `proc/` (`/nvml.json`, `/probes/h2d.json`), read
    /// under the rules of every other read (links resolved inside the root, regular files
    /// only, no blocking open) with its own size cap; None when absent. Not a kernel path: not
    /// noted among the paths read. Only for recorded trees.
    pub fn read_document(&self, path: &str, cap: u64) -> Result<Option<Vec<u8>>, ReadError> {
        if self.live {
            return Err(ReadError::BadPath(path.to_string()));
        }
        self.maybe_delay(path);
        let file = match self.open_file(path) {
            Ok(f) => f,
            Err(ReadError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut buf = Vec::new();
        file.take(cap.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| ReadError::from_io(path, &e))?;
        if buf.len() as u64 > cap {
            return Err(ReadError::Io {
                path: path.to_string(),
                message: format!("larger than {cap} bytes, refused"),
            });
        }
        self.charge(path, buf.len())?;
        Ok(Some(buf))
    }

    /// Read a record device such as `/dev/kmsg` without blocking: one record per read(2),
    /// until the device has no more (EAGAIN), at most `max_records` records or MAX_FILE_BYTES
    /// in all (`truncated` then). Records overwritten while reading (EPIPE: the ring buffer
    /// wrapped) are skipped, as dmesg(1) does. A regular file (a recorded tree) gives its
    /// lines. Returns (records, truncated).
    pub fn read_records(
        &self,
        kpath: &str,
        max_records: usize,
    ) -> Result<(Vec<String>, bool), ReadError> {
        self.note(kpath);
        let mut file = self.open_file(kpath)?;
        let mut out = Vec::new();
        let mut total = 0u64;
        // kmsg records are at most 1 KiB of text plus their prefix; a larger buffer never
        // gets EINVAL (record does not fit).
        let mut buf = vec![0u8; FIRST_READ];
        // A device gives one newline-terminated record per read; a regular file gives lines
        // that may straddle two reads.
        let mut pending: Vec<u8> = Vec::new();
        let flush = |pending: &mut Vec<u8>, out: &mut Vec<String>| {
            let line = String::from_utf8_lossy(pending).trim_end().to_string();
            if !line.trim().is_empty() {
                out.push(line);
            }
            pending.clear();
        };
        loop {
            if out.len() >= max_records || total > MAX_FILE_BYTES {
                return Ok((out, true));
            }
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    total += n as u64;
                    for &b in &buf[..n] {
                        if b == b'\n' {
                            flush(&mut pending, &mut out);
                        } else {
                            pending.push(b);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
                Err(e) => return Err(ReadError::from_io(kpath, &e)),
            }
        }
        flush(&mut pending, &mut out);
        Ok((out, false))
    }

    /// Read a whole file as bytes (bounded by MAX_FILE_BYTES), following links inside the root.
    pub fn read_bytes(&self, kpath: &str) -> Result<Vec<u8>, ReadError> {
        self.read_with(kpath, |b| Ok(b.to_vec()))
    }

    /// Read a text attribute, trimmed of surrounding whitespace.
    pub fn read_text(&self, kpath: &str) -> Result<String, ReadError> {
        self.read_with(kpath, |b| {
            std::str::from_utf8(b)
                .map(|s| s.trim().to_string())
                .map_err(|_| ReadError::NotText(kpath.to_string()))
        })
    }

    /// The target of a symlink, as written (the kernel writes relative targets).
    pub fn read_link(&self, kpath: &str) -> Result<String, ReadError> {
        self.note(kpath);
        if self.replays_errors() {
            self.recorded_error(kpath, &self.resolve(kpath, false)?)?;
        }
        if let Some((kdir, last)) = kpath.rsplit_once('/')
            && let Some(fd) = self.kernel_dir_fd(kdir)
            && !matches!(last, "" | "." | "..")
        {
            // The directory as the kernel resolved it: the same entry the walk below finds.
            return self
                .readlink_in(kdir, Some(fd), last)
                .map_err(|e| ReadError::from_io(kpath, &e));
        }
        let Some((dir, fd, last)) = self.resolve_dir(kpath)? else {
            // "/" is never a link.
            return Err(ReadError::Io {
                path: kpath.to_string(),
                message: io::Error::from_raw_os_error(libc::EINVAL).to_string(),
            });
        };
        self.readlink_in(&dir, fd, &last)
            .map_err(|e| ReadError::from_io(kpath, &e))
    }

    /// Where the link at `kpath` leads as this reader follows it: its target's directory
    /// resolved inside the root (canonical, links followed, `..` clamped at the root) and the
    /// target's last component as written (so `link_name` reads the same). For a copy of a
    /// recorded tree whose link climbs above the tree's root, which a bundle cannot hold: a
    /// link to `dir/last` leads in the copy where this one led in the tree. Fails when the
    /// target's directory does not resolve, or its last component is `.` or `..`.
    pub fn link_destination(&self, kpath: &str) -> Result<(String, String), ReadError> {
        let phys = self.resolve(kpath, false)?;
        let target = {
            let (dir, last) = split_comp(&phys).ok_or_else(|| ReadError::BadPath(kpath.into()))?;
            self.readlink_in(dir, None, last)
                .map_err(|e| ReadError::from_io(kpath, &e))?
        };
        let mut comps: Vec<&str> = target.split('/').filter(|c| !c.is_empty()).collect();
        let last = match comps.pop() {
            Some(l) if l != "." && l != ".." => l.to_string(),
            _ => {
                return Err(ReadError::Io {
                    path: kpath.to_string(),
                    message: format!("link target '{target}' names no entry"),
                });
            }
        };
        let mut base = if target.starts_with('/') {
            String::new()
        } else {
            split_comp(&phys)
                .map(|(d, _)| d.to_string())
                .unwrap_or_default()
        };
        let (mut pending, mut hops) = (Vec::new(), 0usize);
        for c in comps {
            self.step(&mut base, c, &mut pending, kpath, &mut hops)?;
            while let Some(t) = pending.pop() {
                self.step(&mut base, &t, &mut pending, kpath, &mut hops)?;
            }
        }
        if !self.is_dir_phys(&base) {
            return Err(ReadError::NotFound(kpath.to_string()));
        }
        Ok((format!("/{base}"), last))
    }

    /// The last component of a symlink's target (e.g. a `driver` link's driver name).
    pub fn link_name(&self, kpath: &str) -> Result<String, ReadError> {
        let t = self.read_link(kpath)?;
        t.rsplit('/')
            .find(|s| !s.is_empty())
            .map(str::to_string)
            .ok_or_else(|| ReadError::Io {
                path: kpath.to_string(),
                message: format!("link target '{t}' has no name"),
            })
    }

    /// Directory entries, sorted by name; more than MAX_DIR_ENTRIES is an error.
    pub fn list(&self, kpath: &str) -> Result<Vec<Entry>, ReadError> {
        self.list_entries(kpath, true, MAX_DIR_ENTRIES)
    }

    /// `list`; `kinds`: whether to find out if each link leads to a directory (one stat per
    /// link: /sys/bus/pci/devices holds a link per PCI function, and `list_names` needs none).
    /// More than `max` entries (KEEP_FILE not counted) is refused naming the directory, after
    /// reading at most `max + 1` of them.
    fn list_entries(&self, kpath: &str, kinds: bool, max: usize) -> Result<Vec<Entry>, ReadError> {
        self.note(kpath);
        {
            let mut l = match self.listed.lock() {
                Ok(l) => l,
                Err(p) => p.into_inner(),
            };
            l.insert(kpath.to_string());
        }
        if self.replays_errors() {
            self.recorded_error(kpath, &self.resolve(kpath, false)?)?;
        }
        let _reading = self.in_flight();
        if let Some(h) = self.kernel_dir_fd(kpath)
            && let Some(l) = h.listing()
        {
            // A recorded tree's directory, resolved by the kernel and listed through its
            // handle (once: reads in it then need no stat).
            return self.entries_of(kpath, l, kinds, max);
        }
        let comps = self.resolve(kpath, true)?;
        self.recorded_error(kpath, &comps)?;
        if let Some(m) = &self.mem {
            let mut ents = m
                .read_dir(&comps)
                .map_err(|e| ReadError::from_io(kpath, &e))?;
            ents.retain(|(name, _, _)| *name != KEEP_FILE);
            if ents.len() > max {
                return Err(Self::too_many(kpath, max));
            }
            let mut out = Vec::with_capacity(ents.len());
            for (name, is_dir, is_symlink) in ents {
                let is_dir = if is_symlink && kinds {
                    self.link_leads_to_dir(kpath, name)
                } else {
                    is_dir
                };
                out.push(Entry {
                    name: name.to_string(),
                    is_dir,
                    is_symlink,
                });
            }
            // Already sorted by name (the tree keeps its entries so).
            return Ok(out);
        }
        let host = self.host_path(&comps);
        let rd = fs::read_dir(&host).map_err(|e| ReadError::from_io(kpath, &e))?;
        let mut out = Vec::new();
        // Every entry and its type, for reads in this directory (recorded trees; None once a
        // name is not UTF-8: such a listing cannot answer for every name).
        let mut typed: Option<Vec<(String, EntryKind)>> = (!self.live).then(Vec::new);
        for ent in rd {
            let ent = ent.map_err(|e| ReadError::from_io(kpath, &e))?;
            let ft = ent.file_type().map_err(|e| ReadError::from_io(kpath, &e))?;
            let raw = ent.file_name();
            if let Some(t) = &mut typed {
                match raw.to_str() {
                    Some(n) => t.push((n.to_string(), Self::entry_kind(ft))),
                    None => typed = None,
                }
            }
            let name = raw.to_string_lossy().into_owned();
            if !self.live && name == KEEP_FILE {
                continue;
            }
            if out.len() >= max {
                return Err(Self::too_many(kpath, max));
            }
            let is_dir = if ft.is_symlink() && !kinds {
                false
            } else if ft.is_symlink() {
                self.link_leads_to_dir(kpath, &name)
            } else {
                ft.is_dir()
            };
            out.push(Entry {
                name,
                is_dir,
                is_symlink: ft.is_symlink(),
            });
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(t) = typed {
            self.keep_listing(kpath, &comps, t);
        }
        Ok(out)
    }

    /// `list_entries` from the listing `l` of the directory at `kpath`, as a listing of the
    /// directory itself gives them.
    fn entries_of(
        &self,
        kpath: &str,
        l: &Listing,
        kinds: bool,
        max: usize,
    ) -> Result<Vec<Entry>, ReadError> {
        let mut out = Vec::with_capacity(l.len());
        for (name, kind) in l.iter() {
            if name == KEEP_FILE {
                continue;
            }
            if out.len() >= max {
                return Err(Self::too_many(kpath, max));
            }
            let is_symlink = kind == EntryKind::Link;
            let is_dir = if is_symlink && kinds {
                self.link_leads_to_dir(kpath, name)
            } else {
                kind == EntryKind::Dir
            };
            out.push(Entry {
                name: name.to_string(),
                is_dir,
                is_symlink,
            });
        }
        out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Whether the link `name` in the directory `kpath` counts as a directory in a listing: it
    /// resolves inside the root, to a directory.
    fn link_leads_to_dir(&self, kpath: &str, name: &str) -> bool {
        let child = format!("{}/{}", kpath.trim_end_matches('/'), name);
        self.resolve(&child, true)
            .is_ok_and(|c| self.is_dir_phys(&c))
    }

    /// What a directory entry's type (from d_type, or an lstat where the filesystem gives
    /// none) says it is.
    fn entry_kind(ft: fs::FileType) -> EntryKind {
        if ft.is_symlink() {
            EntryKind::Link
        } else if ft.is_dir() {
            EntryKind::Dir
        } else if ft.is_file() {
            EntryKind::File
        } else {
            EntryKind::Special
        }
    }

    /// Keep the complete listing of the directory at `kpath` (resolved: `comps`) for reads in
    /// it, under both names a read may find it by (see `DirCache::fds`), within
    /// MAX_LISTED_ENTRIES.
    fn keep_listing(&self, kpath: &str, comps: &str, kinds: Vec<(String, EntryKind)>) {
        let Some(l) = Listing::new(kinds) else {
            return;
        };
        let kdir = kpath.trim_end_matches('/');
        let mut c = self.lock_dirs();
        let n = l.len();
        if c.listed_entries.saturating_add(2 * n) > MAX_LISTED_ENTRIES {
            return;
        }
        c.listed_entries += 2 * n;
        self.has_listings
            .store(true, std::sync::atomic::Ordering::Release);
        let l = Arc::new(l);
        c.listings.insert(Arc::from(comps), l.clone());
        if !kdir.is_empty() {
            c.listings.insert(Arc::from(kdir), l);
        }
    }

    /// The refusal of a listing of more than `max` entries.
    fn too_many(kpath: &str, max: usize) -> ReadError {
        ReadError::Io {
            path: kpath.to_string(),
            message: format!(
                "more than {max} directory entries: refused (no real directory here has so many)"
            ),
        }
    }

    /// Names in a directory (sorted); a missing directory is an empty list only when the caller
    /// says absence is normal, so this returns the error and lets the caller decide. More than
    /// MAX_DIR_ENTRIES is an error naming the directory.
    pub fn list_names(&self, kpath: &str) -> Result<Vec<String>, ReadError> {
        self.list_names_max(kpath, MAX_DIR_ENTRIES)
    }

    /// `list_names` with a tighter cap where the kernel bounds a directory far below
    /// MAX_DIR_ENTRIES (a port's GID table).
    pub fn list_names_max(&self, kpath: &str, max: usize) -> Result<Vec<String>, ReadError> {
        Ok(self
            .list_entries(kpath, false, max)?
            .into_iter()
            .map(|e| e.name)
            .collect())
    }

    /// Whether a path exists (following links inside the root).
    pub fn exists(&self, kpath: &str) -> bool {
        self.note(kpath);
        if let Ok(c) = self.resolve(kpath, false)
            && self.recorded_error(kpath, &c).is_err()
        {
            return true; // it existed on the recorded machine, it just could not be read
        }
        match self.resolve(kpath, true) {
            Ok(c) => match &self.mem {
                Some(m) => m.exists(&c),
                None => self.host_path(&c).exists(),
            },
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_recorded_tree_hands_out_at_most_max_tree_bytes() {
        // One 1 MiB file hard-linked under 300 names (as a hostile --root tree could): every
        // read is within MAX_FILE_BYTES, the total is not.
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("sys/devices/system/node");
        fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big");
        fs::write(&big, vec![b'0'; MAX_FILE_BYTES as usize]).unwrap();
        for i in 0..300 {
            fs::hard_link(&big, dir.join(format!("n{i}"))).unwrap();
        }
        let root = SysRoot::at(d.path()).unwrap();
        let mut ok = 0u64;
        let mut refused = None;
        for i in 0..300 {
            match root.read_bytes(&format!("/sys/devices/system/node/n{i}")) {
                Ok(b) => ok += b.len() as u64,
                Err(e) => {
                    refused = Some(e.to_string());
                    break;
                }
            }
        }
        assert_eq!(ok, MAX_TREE_BYTES, "handed out up to the budget, no more");
        let msg = refused.expect("the read past the budget is refused");
        assert!(
            msg.contains("/sys/devices/system/node/n256") && msg.contains("handed out"),
            "{msg}"
        );
        // The live machine is not limited by it (its files are the kernel's own).
        assert!(SysRoot::live().charge("/sys/x", usize::MAX).is_ok());
    }

    fn tree() -> (tempfile::TempDir, SysRoot) {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        fs::create_dir_all(r.join("sys/devices/pci0000:00/0000:00:01.0")).unwrap();
        fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        fs::write(
            r.join("sys/devices/pci0000:00/0000:00:01.0/numa_node"),
            "-1\n",
        )
        .unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            r.join("sys/bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        symlink("/sys/devices/pci0000:00", r.join("sys/abs")).unwrap();
        symlink("../../../../../../../../etc", r.join("sys/escape")).unwrap();
        symlink("loop2", r.join("sys/loop1")).unwrap();
        symlink("loop1", r.join("sys/loop2")).unwrap();
        let s = SysRoot::at(r).unwrap();
        (d, s)
    }

    /// The descriptor table this process's kernel keeps (`FDSize` of /proc/self/status).
    fn descriptor_table_size() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("FDSize in /proc/self/status")
    }

    /// The table has room for RESERVED_DESCRIPTORS after the call, and no descriptor is kept.
    /// (A process inherits its parent's table size, which may be that large already: the
    /// integration test `the_descriptor_table_grows_before_any_thread_starts` watches the
    /// binary's own call with strace.)
    #[test]
    fn descriptors_are_reserved_without_taking_one() {
        let before = descriptor_table_size();
        // The lowest free descriptor before and after: the duplicate is closed, none is taken.
        let probe = || std::os::fd::AsRawFd::as_raw_fd(&fs::File::open("/").unwrap());
        let free = probe();
        reserve_descriptors();
        assert!(
            descriptor_table_size() >= RESERVED_DESCRIPTORS as usize,
            "table of {} entries (was {before})",
            descriptor_table_size()
        );
        assert_eq!(probe(), free);
    }

    #[test]
    fn keeping_the_last_path_only_still_names_it() {
        let (_d, s) = tree();
        let a = "/sys/bus/pci/devices/0000:00:01.0/numa_node";
        let b = "/sys/devices/pci0000:00/0000:00:01.0/numa_node";
        s.read_text(a).unwrap();
        s.read_text(b).unwrap();
        assert_eq!(s.touched(), vec![a.to_string(), b.to_string()]);
        s.keep_last_path_only();
        s.read_text(b).unwrap();
        let _ = s.read_text("/sys/missing");
        assert_eq!(s.touched(), vec!["/sys/missing".to_string()]);
        assert_eq!(s.last_path(), "/sys/missing");
        s.read_text(a).unwrap();
        assert_eq!(s.last_path(), a);
    }

    #[test]
    fn follows_relative_links_inside_root() {
        let (_d, s) = tree();
        assert_eq!(
            s.read_text("/sys/bus/pci/devices/0000:00:01.0/numa_node")
                .unwrap(),
            "-1"
        );
        assert_eq!(
            s.canonical("/sys/bus/pci/devices/0000:00:01.0").unwrap(),
            "/sys/devices/pci0000:00/0000:00:01.0"
        );
    }

    #[test]
    fn absolute_links_are_rerooted() {
        let (_d, s) = tree();
        assert!(s.exists("/sys/abs/0000:00:01.0/numa_node"));
    }

    #[test]
    fn listings_and_opens_below_held_directories_keep_every_rule() {
        let (_d, s) = tree();
        let r = s.root_dir().to_path_buf();
        let dev = r.join("sys/devices/pci0000:00/0000:00:01.0");
        fs::create_dir_all(dev.join("power")).unwrap();
        fs::write(dev.join(KEEP_FILE), "").unwrap();
        fs::write(r.join("sys/devices/pci0000:00/shallow"), "1\n").unwrap();
        symlink("power", dev.join("power_link")).unwrap();
        symlink("numa_node", dev.join("numa_link")).unwrap();
        symlink("../../../../..", dev.join("up")).unwrap();
        let fifo =
            std::ffi::CString::new(dev.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: fifo is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let want = [
            ("fifo", false, false),
            ("numa_link", false, true),
            ("numa_node", false, false),
            ("power", true, false),
            ("power_link", true, true),
            ("up", true, true),
        ];
        // The same entries however the directory is named, listed through its handle or not.
        for via in [
            "/sys/bus/pci/devices/0000:00:01.0",
            "/sys/devices/pci0000:00/0000:00:01.0",
            "/sys/abs/0000:00:01.0",
            "/sys/abs/0000:00:01.0/up/sys/abs/0000:00:01.0",
        ] {
            let got: Vec<(String, bool, bool)> = s
                .list(via)
                .unwrap()
                .into_iter()
                .map(|e| (e.name, e.is_dir, e.is_symlink))
                .collect();
            let want: Vec<(String, bool, bool)> = want
                .iter()
                .map(|(n, d, l)| (n.to_string(), *d, *l))
                .collect();
            assert_eq!(got, want, "{via}");
            assert_eq!(s.read_text(&format!("{via}/numa_link")).unwrap(), "-1");
            let e = s.read_text(&format!("{via}/fifo")).unwrap_err().to_string();
            assert!(e.contains(NOT_REGULAR), "{e}");
            // A directory below the held one: by its name where it is one, through the walk
            // where it is a link (`up` climbs to the tree's root, never above it).
            assert!(matches!(
                s.read_text(&format!("{via}/power/absent")),
                Err(ReadError::NotFound(_))
            ));
            assert_eq!(
                s.read_text(&format!("{via}/up/sys/devices/pci0000:00/shallow"))
                    .unwrap(),
                "1"
            );
            assert!(matches!(
                s.read_text(&format!("{via}/numa_node/x")),
                Err(ReadError::NotFound(_)) | Err(ReadError::Io { .. })
            ));
        }
        // Past the tree's root, nothing: the host's /etc is never reached from a held handle.
        assert!(matches!(
            s.read_text("/sys/abs/0000:00:01.0/up/up/etc/passwd"),
            Err(ReadError::NotFound(_))
        ));
    }

    #[test]
    fn dotdot_never_escapes() {
        let (_d, s) = tree();
        // Clamped at the tree's root: the link lands on the tree's own /etc, never the host's.
        assert!(matches!(
            s.canonical("/sys/escape"),
            Err(ReadError::NotFound(_))
        ));
        assert!(matches!(
            s.read_text("/sys/escape/passwd"),
            Err(ReadError::NotFound(_))
        ));
        fs::create_dir_all(s.root_dir().join("etc")).unwrap();
        fs::write(s.root_dir().join("etc/passwd"), "inside the tree\n").unwrap();
        assert_eq!(
            s.read_text("/sys/escape/passwd").unwrap(),
            "inside the tree"
        );
        assert_eq!(s.canonical("/sys/escape").unwrap(), "/etc");
        assert!(matches!(
            s.read_text("/../../../etc/hostname"),
            Err(ReadError::NotFound(_))
        ));
    }

    #[test]
    fn loops_are_errors() {
        let (_d, s) = tree();
        assert!(matches!(
            s.read_text("/sys/loop1"),
            Err(ReadError::LinkLoop(_))
        ));
    }

    /// Resolution is iterative and bounded: thousands of `.` components, `s -> .` chains and
    /// targets that grow the path past PATH_MAX neither overflow the stack nor escape.
    #[test]
    fn long_and_growing_targets_are_bounded() {
        let (_d, s) = tree();
        let r = s.root_dir().to_path_buf();
        let dots = format!("{}devices/pci0000:00", "./".repeat(2000));
        symlink(&dots, r.join("sys/dots")).unwrap();
        assert_eq!(
            s.read_text("/sys/dots/0000:00:01.0/numa_node").unwrap(),
            "-1"
        );
        symlink(".", r.join("sys/s")).unwrap();
        let climb = format!("{}{}etc/passwd", "s/".repeat(20), "../".repeat(20));
        symlink(&climb, r.join("sys/climb")).unwrap();
        assert!(matches!(
            s.read_text("/sys/climb"),
            Err(ReadError::NotFound(_))
        ));
        // Each hop appends a long target to the path: refused once past PATH_MAX.
        let long = "x".repeat(200);
        fs::create_dir_all(r.join("sys/g")).unwrap();
        symlink(
            format!("{long}/{long}/{long}/{long}/../../../../g/g"),
            r.join("sys/g/g"),
        )
        .unwrap();
        for i in 0..30 {
            symlink(format!("../g{i}/{long}"), r.join(format!("sys/g{}", i + 1))).unwrap();
        }
        assert!(
            s.read_text("/sys/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/g/x")
                .is_err()
        );
        let deep = format!("/sys{}", "/g".repeat(3000));
        assert!(s.read_text(&deep).is_err());
        // The document reader follows the same rules and refuses what is not a regular file.
        fs::write(r.join("doc.json"), "{}").unwrap();
        assert_eq!(s.read_document("/doc.json", 16).unwrap().unwrap(), b"{}");
        assert!(s.read_document("/doc.json", 1).is_err());
        assert!(s.read_document("/absent.json", 16).unwrap().is_none());
        assert!(s.read_document("/sys", 16).is_err());
    }

    /// Reads whose directory the kernel resolves (openat2) and reads in a directory listed
    /// before (no stat before the open) keep every rule: links rerooted and clamped at the
    /// root, a final link followed inside it, nothing but a regular file opened.
    #[test]
    fn fast_reads_keep_every_rule() {
        let (_d, s) = tree();
        let r = s.root_dir().to_path_buf();
        let dev = r.join("sys/devices/pci0000:00/0000:00:01.0");
        symlink("/etc/passwd", dev.join("abs_file")).unwrap();
        symlink("../../../../../../etc/passwd", dev.join("climb_file")).unwrap();
        let fifo =
            std::ffi::CString::new(dev.join("fifo").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: fifo is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        for listed in [false, true] {
            if listed {
                let names = s.list_names("/sys/bus/pci/devices/0000:00:01.0").unwrap();
                assert!(names.contains(&"fifo".to_string()), "{names:?}");
            }
            for via in ["/sys/bus/pci/devices/0000:00:01.0", "/sys/abs/0000:00:01.0"] {
                assert_eq!(s.read_text(&format!("{via}/numa_node")).unwrap(), "-1");
                for f in ["abs_file", "climb_file", "absent"] {
                    assert!(
                        matches!(
                            s.read_text(&format!("{via}/{f}")),
                            Err(ReadError::NotFound(_))
                        ),
                        "{via}/{f} (listed: {listed})"
                    );
                }
                let e = s.read_text(&format!("{via}/fifo")).unwrap_err().to_string();
                assert!(e.contains(NOT_REGULAR), "{e}");
            }
            assert!(matches!(
                s.read_text("/sys/escape/passwd"),
                Err(ReadError::NotFound(_))
            ));
        }
        fs::create_dir_all(r.join("etc")).unwrap();
        fs::write(r.join("etc/passwd"), "inside the tree\n").unwrap();
        for f in ["abs_file", "climb_file"] {
            assert_eq!(
                s.read_text(&format!("/sys/bus/pci/devices/0000:00:01.0/{f}"))
                    .unwrap(),
                "inside the tree"
            );
        }
    }

    #[test]
    fn relative_paths_refused() {
        let (_d, s) = tree();
        assert!(matches!(s.read_text("sys/x"), Err(ReadError::BadPath(_))));
    }

    #[test]
    fn missing_root_is_error() {
        assert!(SysRoot::at(Path::new("/nonexistent/gpudoctor")).is_err());
    }
}
