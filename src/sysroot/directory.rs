//! Directories of a recorded tree on disk, opened from a handle on its root with openat2(2)
//! (Linux 5.6+), so that the kernel itself keeps every walk inside the root: `..` stops at the
//! root, an absolute link target starts from it (RESOLVE_IN_ROOT, the rules the reader's own
//! walk applies), and no /proc magic link is followed (RESOLVE_NO_MAGICLINKS). Two uses:
//!
//! - `open_resolved`: a directory the reader has already resolved (no link left in its path)
//!   is opened with RESOLVE_NO_SYMLINKS as well, so a link that appeared since is refused
//!   (ELOOP), never followed.
//! - `open_kernel`: a directory named as a kernel path (`sys/bus/pci/devices/0000:17:00.0`)
//!   is resolved by the kernel in one system call instead of one readlink per component.
//!
//! A directory of a recorded tree is opened once for a while (`Handle`) and listed through the
//! same handle when a listing is asked for (each entry's type, as the listing's d_type gave
//! it), so that reading a file in a listed directory needs no stat to know it is a regular
//! file before opening it, and a listing needs no walk and no second open; a directory below
//! one held open is opened by its one name instead of a walk from the root.
//!
//! Where openat2 is refused (ENOSYS on older kernels, EPERM or ENOSYS from a seccomp filter)
//! `open_kernel` says so (`Unsupported`) and the reader walks the path itself as it always
//! has; `open_resolved` opens the resolved path under the root, not following a final link.
//!
//! This module must not follow a link out of the root, read what it opens, or write; it lists
//! only the directories of recorded trees (never the live machine's), at most
//! MAX_HANDLE_ENTRIES entries each, and only where asked. A listing is a hint that spares a
//! system call, never the last word: every open still refuses to follow a link (O_NOFOLLOW).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

/// What an entry of a listed directory is (a link is not followed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EntryKind {
    File,
    Dir,
    Link,
    /// A device node, FIFO or socket.
    Special,
}

/// The entries a complete listing of a directory showed, with their types.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Every name, one after another.
    names: String,
    /// (start in `names`, length, type): sorted by name when `sorted`, else in the order the
    /// directory gave them (a few tens, looked through faster than sorted).
    entries: Vec<(u32, u32, EntryKind)>,
    sorted: bool,
}

/// A listing of at most this many entries is looked through rather than sorted.
const SCAN_ENTRIES: usize = 64;

impl Listing {
    /// A listing of `entries` (every entry of the directory: a name absent from it is absent
    /// from the directory); None when it would not fit the offsets.
    pub(super) fn new(entries: Vec<(String, EntryKind)>) -> Option<Listing> {
        let mut l = Listing {
            names: String::with_capacity(entries.iter().map(|e| e.0.len()).sum()),
            entries: Vec::with_capacity(entries.len()),
            sorted: false,
        };
        for (name, kind) in entries {
            l.push(&name, kind)?;
        }
        Some(l.sorted())
    }

    /// Add `name` (not yet in order); None when it would not fit the offsets.
    fn push(&mut self, name: &str, kind: EntryKind) -> Option<()> {
        let start = u32::try_from(self.names.len()).ok()?;
        let len = u32::try_from(name.len()).ok()?;
        start.checked_add(len)?;
        self.names.push_str(name);
        self.entries.push((start, len, kind));
        Some(())
    }

    /// The entries put in order by name.
    fn sorted(mut self) -> Listing {
        let names = &self.names;
        self.entries.sort_unstable_by(|a, b| {
            names[a.0 as usize..(a.0 + a.1) as usize]
                .cmp(&names[b.0 as usize..(b.0 + b.1) as usize])
        });
        self.sorted = true;
        self
    }

    /// The entries as they are, or sorted where a listing is too long to look through.
    fn searchable(self) -> Listing {
        if self.entries.len() > SCAN_ENTRIES {
            self.sorted()
        } else {
            self
        }
    }

    fn name(&self, e: &(u32, u32, EntryKind)) -> &str {
        &self.names[e.0 as usize..(e.0 + e.1) as usize]
    }

    /// The type of `name`: None when the directory holds no such entry.
    pub(super) fn kind(&self, name: &str) -> Option<EntryKind> {
        if self.sorted {
            return self
                .entries
                .binary_search_by(|e| self.name(e).cmp(name))
                .ok()
                .map(|i| self.entries[i].2);
        }
        self.entries
            .iter()
            .find(|e| e.1 as usize == name.len() && self.name(e) == name)
            .map(|e| e.2)
    }

    /// Every entry and its type (sorted by name only where `sorted`).
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, EntryKind)> {
        self.entries.iter().map(|e| (self.name(e), e.2))
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Most entries a handle's listing may hold (`Handle`); a larger directory has none (then
/// each read in it asks its file's type first, and a listing of it is made, and bounded, by
/// the caller). sysfs directories hold tens of entries; mlx5's hw_counters about a hundred.
const MAX_HANDLE_ENTRIES: usize = 4096;

/// An open directory: a place to open files from (`fd`), and, for a recorded tree, what it
/// holds once somebody asks (`listing`, made once: None for the live machine's, for a
/// directory too large or not readable, or where the filesystem gives no entry types).
#[derive(Debug)]
pub(super) struct Handle {
    fd: OwnedFd,
    /// Whether `fd` may be listed (opened with READ_FLAGS).
    readable: bool,
    listing: std::sync::OnceLock<Option<Listing>>,
}

impl AsRawFd for Handle {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.fd.as_raw_fd()
    }
}

impl Handle {
    fn new(fd: OwnedFd, readable: bool) -> Handle {
        Handle {
            fd,
            readable,
            listing: std::sync::OnceLock::new(),
        }
    }

    /// What the directory holds, listed on the first call (once: later calls, from any
    /// thread, get the same listing). None where it cannot be listed (see `Handle`).
    pub(super) fn listing(&self) -> Option<&Listing> {
        if !self.readable {
            return None;
        }
        self.listing.get_or_init(|| list_fd(&self.fd)).as_ref()
    }

    /// The listing if one was made already (never lists).
    pub(super) fn listed(&self) -> Option<&Listing> {
        self.listing.get()?.as_ref()
    }

    /// The plain directory `name` below this one (no link followed: a link, or anything that
    /// is not a directory, fails), readable when `readable`. A name that is a directory here
    /// is the directory a walk from the root would find below this one, whatever that walk
    /// followed to get here.
    pub(super) fn open_below(&self, name: &str, readable: bool) -> io::Result<Handle> {
        let c = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        open_handle(readable, |flags| {
            open_nofollow(self.fd.as_raw_fd(), &c, flags)
        })
    }
}

/// `path` opened relative to `dirfd` (AT_FDCWD: as written) with `flags`, never following a
/// final link.
fn open_nofollow(
    dirfd: std::os::fd::RawFd,
    path: &std::ffi::CStr,
    flags: i32,
) -> io::Result<OwnedFd> {
    // SAFETY: dirfd is a live descriptor or AT_FDCWD; path is NUL-terminated; a descriptor
    // returned is owned by the OwnedFd below.
    let fd = unsafe { libc::openat(dirfd, path.as_ptr(), flags | libc::O_NOFOLLOW) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by openat(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A handle from `open` (given the flags to open with): one that may be listed when
/// `readable` and the directory may be read; a directory that may only be searched is opened
/// as a place to open files from.
fn open_handle(readable: bool, open: impl Fn(i32) -> io::Result<OwnedFd>) -> io::Result<Handle> {
    if !readable {
        return open(DIR_FLAGS).map(|fd| Handle::new(fd, false));
    }
    match open(READ_FLAGS) {
        Ok(fd) => Ok(Handle::new(fd, true)),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            open(DIR_FLAGS).map(|fd| Handle::new(fd, false))
        }
        Err(e) => Err(e),
    }
}

/// Every entry of the directory open on `fd` (from its start: the handle lists it once, and
/// nothing else reads it), with its type; None when there are more than MAX_HANDLE_ENTRIES, a
/// name is not UTF-8, the filesystem gives an entry without a type, or the listing fails.
fn list_fd(fd: &OwnedFd) -> Option<Listing> {
    // linux_dirent64 records are 8-byte aligned. Not zeroed first: the kernel writes the
    // records, and only the bytes it says it wrote are read.
    let mut buf = std::mem::MaybeUninit::<[u64; 2048]>::uninit();
    let mut l = Listing::default();
    loop {
        // SAFETY: fd is a live directory descriptor; buf is writable for its whole length,
        // which is what we pass.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd.as_raw_fd(),
                buf.as_mut_ptr(),
                std::mem::size_of_val(&buf),
            )
        };
        let n = usize::try_from(n).ok()?.min(std::mem::size_of_val(&buf));
        if n == 0 {
            return Some(l.searchable());
        }
        // SAFETY: getdents64(2) wrote the first n bytes of buf (n <= its size).
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        let mut at = 0usize;
        while at < n {
            // struct linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
            let rec = bytes.get(at..)?;
            let reclen = usize::from(u16::from_ne_bytes([*rec.get(16)?, *rec.get(17)?]));
            if reclen == 0 {
                return None;
            }
            let name = rec.get(19..reclen)?;
            let name = &name[..name.iter().position(|b| *b == 0)?];
            at += reclen;
            let kind = match *rec.get(18)? {
                libc::DT_REG => EntryKind::File,
                libc::DT_DIR => EntryKind::Dir,
                libc::DT_LNK => EntryKind::Link,
                libc::DT_UNKNOWN => return None,
                _ => EntryKind::Special,
            };
            if name == b"." || name == b".." {
                continue;
            }
            if l.entries.len() >= MAX_HANDLE_ENTRIES {
                return None;
            }
            l.push(std::str::from_utf8(name).ok()?, kind)?;
        }
    }
}

/// The target of the link `name` relative to `dirfd` (non-UTF-8 bytes replaced), or the error
/// readlinkat(2) gave: EINVAL where `name` is not a link.
pub(super) fn readlink_at(dirfd: std::os::fd::RawFd, name: &std::ffi::CStr) -> io::Result<String> {
    // Not zeroed first (a zeroed page per readlink was a fifteenth of discovery's
    // instructions): the kernel writes the target's bytes, and only those are read.
    let mut buf = std::mem::MaybeUninit::<[u8; 4096]>::uninit();
    // SAFETY: dirfd is a live descriptor or AT_FDCWD; name is NUL-terminated; buf is writable
    // for its whole length, which is what we pass.
    let n = unsafe { libc::readlinkat(dirfd, name.as_ptr(), buf.as_mut_ptr().cast(), 4096) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    if n >= 4096 {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    // SAFETY: readlinkat(2) wrote the first n bytes of buf (n < its length).
    let target = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
    Ok(String::from_utf8_lossy(target).into_owned())
}

/// The root of a tree on disk, as a handle opened once.
#[derive(Debug)]
pub(super) struct Root {
    /// None when the root could not be opened (then nothing is opened with openat2).
    fd: Option<OwnedFd>,
    /// Cleared once openat2 is refused (old kernel, seccomp): not asked again.
    openat2: AtomicBool,
}

/// Flags for a directory handle that is never listed: a place to open files from.
const DIR_FLAGS: i32 = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
/// Flags for a directory handle of a recorded tree, listed once as it is opened.
const READ_FLAGS: i32 = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;

impl Root {
    pub(super) fn open(root: &Path) -> Root {
        let fd = CString::new(root.as_os_str().as_encoded_bytes())
            .ok()
            .and_then(|c| {
                // SAFETY: c is a valid NUL-terminated path; a descriptor returned is owned by
                // the OwnedFd below.
                let fd = unsafe { libc::open(c.as_ptr(), DIR_FLAGS) };
                // SAFETY: fd was just returned by open(2) and is owned by nobody else.
                (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
            });
        Root {
            openat2: AtomicBool::new(fd.is_some()),
            fd,
        }
    }

    /// The root's handle, for reads relative to it (`readlink_at`: the kernel walks only the
    /// path inside the tree). None when the root could not be opened.
    pub(super) fn raw_fd(&self) -> Option<std::os::fd::RawFd> {
        self.fd.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The directory `rel` (below the root, no leading slash; "" is the root), resolved by
    /// the kernel inside the root, links followed; one that may be listed when `readable`.
    /// `Unsupported` when openat2 cannot be used.
    pub(super) fn open_kernel(&self, rel: &str, readable: bool) -> io::Result<Handle> {
        open_handle(readable, |flags| {
            self.openat2(
                rel,
                flags,
                libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS,
            )
        })
    }

    /// The resolved directory `phys` (below the root, no link among its components; "" is
    /// the root), opened without following any link; one that may be listed when `readable`;
    /// `host` is the same directory as a host path, for kernels without openat2.
    pub(super) fn open_resolved(
        &self,
        phys: &str,
        host: &Path,
        readable: bool,
    ) -> io::Result<Handle> {
        open_handle(readable, |flags| {
            match self.openat2(
                phys,
                flags,
                libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
            ) {
                Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
                r => return r,
            }
            let c = CString::new(host.as_os_str().as_encoded_bytes())
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            open_nofollow(libc::AT_FDCWD, &c, flags)
        })
    }

    fn openat2(&self, rel: &str, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
        let unsupported = || io::Error::from(io::ErrorKind::Unsupported);
        let Some(root) = self
            .fd
            .as_ref()
            .filter(|_| self.openat2.load(Ordering::Relaxed))
        else {
            return Err(unsupported());
        };
        let rel = CString::new(if rel.is_empty() { "." } else { rel })
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: open_how is plain integers; all zero is its default.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = flags as u64;
        how.resolve = resolve;
        // SAFETY: root is a live descriptor; rel is NUL-terminated; how is a valid open_how and
        // its size is what we pass.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                rel.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            let fd = i32::try_from(fd).map_err(|_| unsupported())?;
            // SAFETY: fd was just returned by openat2(2) and is owned by nobody else.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Not this kernel's, or a seccomp filter's refusal: not asked again.
            Some(libc::ENOSYS | libc::EPERM | libc::E2BIG) => {
                self.openat2.store(false, Ordering::Relaxed);
                Err(unsupported())
            }
            // A rename raced a `..` of the walk (RESOLVE_IN_ROOT): the caller's own way.
            Some(libc::EAGAIN) => Err(unsupported()),
            _ => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, std::path::PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().join("root");
        std::fs::create_dir_all(r.join("sys/devices/pci0000:00/0000:00:01.0")).unwrap();
        std::fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        std::fs::create_dir_all(d.path().join("outside")).unwrap();
        std::fs::write(d.path().join("outside/secret"), "host\n").unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            r.join("sys/bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        symlink("../../outside", r.join("sys/away")).unwrap();
        symlink("../../../..", r.join("sys/up")).unwrap();
        symlink("/", r.join("sys/top")).unwrap();
        (d, r)
    }

    /// The directory a handle from `open_kernel` is on, as a host path.
    fn where_is(fd: &impl AsRawFd) -> std::path::PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    #[test]
    fn the_kernel_walk_stays_inside_the_root() {
        let (_d, r) = tree();
        let root = Root::open(&r);
        let r = std::fs::canonicalize(&r).unwrap();
        match root.open_kernel("sys/bus/pci/devices/0000:00:01.0", true) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {
                eprintln!("openat2 not available here: the reader walks paths itself");
                return;
            }
            r2 => assert_eq!(
                where_is(&r2.unwrap()),
                r.join("sys/devices/pci0000:00/0000:00:01.0")
            ),
        }
        // `..` stops at the root: a link lands on the tree's own root, never beside it.
        assert_eq!(where_is(&root.open_kernel("sys/up", true).unwrap()), r);
        assert_eq!(
            root.open_kernel("sys/away", false)
                .unwrap_err()
                .raw_os_error(),
            Some(libc::ENOENT)
        );
        // An absolute target starts from the root.
        assert_eq!(
            where_is(&root.open_kernel("sys/top/sys", false).unwrap()),
            r.join("sys")
        );
        assert_eq!(where_is(&root.open_kernel("../../..", true).unwrap()), r);
    }

    #[test]
    fn a_listing_answers_for_every_name() {
        let l = Listing::new(vec![
            ("numa_node".into(), EntryKind::File),
            ("driver".into(), EntryKind::Link),
            ("power".into(), EntryKind::Dir),
            ("fifo".into(), EntryKind::Special),
        ])
        .unwrap();
        assert_eq!(l.len(), 4);
        assert_eq!(l.kind("numa_node"), Some(EntryKind::File));
        assert_eq!(l.kind("driver"), Some(EntryKind::Link));
        assert_eq!(l.kind("power"), Some(EntryKind::Dir));
        assert_eq!(l.kind("fifo"), Some(EntryKind::Special));
        assert_eq!(l.kind("absent"), None);
        assert_eq!(Listing::new(Vec::new()).unwrap().kind(""), None);
    }

    #[test]
    fn a_resolved_directory_is_never_opened_through_a_link() {
        let (_d, r) = tree();
        let root = Root::open(&r);
        for phys in [
            "sys/away",
            "sys/top",
            "sys/up",
            "sys/bus/pci/devices/0000:00:01.0",
        ] {
            assert!(
                root.open_resolved(phys, &r.join(phys), true).is_err(),
                "{phys}"
            );
        }
        assert!(root.open_resolved("sys", &r.join("sys"), true).is_ok());
        assert!(root.open_resolved("", &r, false).is_ok());
    }
}
