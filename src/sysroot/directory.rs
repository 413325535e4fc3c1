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
//! It also keeps what a listing of a directory showed (`Listing`: each entry's type, as the
//! listing's d_type gave it), so that reading a file in a directory already listed needs no
//! stat to know it is a regular file before opening it.
//!
//! Where openat2 is refused (ENOSYS on older kernels, EPERM or ENOSYS from a seccomp filter)
//! `open_kernel` says so (`Unsupported`) and the reader walks the path itself as it always
//! has; `open_resolved` opens the resolved path under the root, not following a final link.
//!
//! This module must not follow a link out of the root, read or list what it opens, or write.
//! A listing is a hint that spares a system call, never the last word: every open still
//! refuses to follow a link (O_NOFOLLOW).

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

/// The entries a complete listing of a directory showed, with their types, sorted by name.
#[derive(Debug, Default)]
pub(super) struct Listing {
    /// Every name, one after another.
    names: String,
    /// (start in `names`, length, type), sorted by name.
    entries: Vec<(u32, u32, EntryKind)>,
}

impl Listing {
    /// A listing of `entries` (every entry of the directory: a name absent from it is absent
    /// from the directory); None when it would not fit the offsets.
    pub(super) fn new(mut entries: Vec<(String, EntryKind)>) -> Option<Listing> {
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut l = Listing {
            names: String::with_capacity(entries.iter().map(|e| e.0.len()).sum()),
            entries: Vec::with_capacity(entries.len()),
        };
        for (name, kind) in entries {
            let start = u32::try_from(l.names.len()).ok()?;
            let len = u32::try_from(name.len()).ok()?;
            l.names.push_str(&name);
            l.entries.push((start, len, kind));
        }
        Some(l)
    }

    /// The type of `name`: None when the directory holds no such entry.
    pub(super) fn kind(&self, name: &str) -> Option<EntryKind> {
        self.entries
            .binary_search_by(|e| self.names[e.0 as usize..(e.0 + e.1) as usize].cmp(name))
            .ok()
            .map(|i| self.entries[i].2)
    }

    /// Entries held.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The root of a tree on disk, as a handle opened once.
#[derive(Debug)]
pub(super) struct Root {
    /// None when the root could not be opened (then nothing is opened with openat2).
    fd: Option<OwnedFd>,
    /// Cleared once openat2 is refused (old kernel, seccomp): not asked again.
    openat2: AtomicBool,
}

/// Flags for a directory handle: a place to open files from, never read itself.
const DIR_FLAGS: i32 = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;

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

    /// The directory `rel` (below the root, no leading slash; "" is the root), resolved by
    /// the kernel inside the root, links followed. `Unsupported` when openat2 cannot be used.
    pub(super) fn open_kernel(&self, rel: &str) -> io::Result<OwnedFd> {
        self.openat2(rel, libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS)
    }

    /// The resolved directory `phys` (below the root, no link among its components; "" is
    /// the root), opened without following any link; `host` is the same directory as a host
    /// path, for kernels without openat2.
    pub(super) fn open_resolved(&self, phys: &str, host: &Path) -> io::Result<OwnedFd> {
        match self.openat2(
            phys,
            libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        ) {
            Err(e) if e.kind() == io::ErrorKind::Unsupported => {}
            r => return r,
        }
        let c = CString::new(host.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: c is a valid NUL-terminated path; a descriptor returned is owned by the
        // OwnedFd below.
        let fd = unsafe { libc::open(c.as_ptr(), DIR_FLAGS | libc::O_NOFOLLOW) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by open(2) and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn openat2(&self, rel: &str, resolve: u64) -> io::Result<OwnedFd> {
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
        how.flags = DIR_FLAGS as u64;
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
    fn where_is(fd: &OwnedFd) -> std::path::PathBuf {
        std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap()
    }

    #[test]
    fn the_kernel_walk_stays_inside_the_root() {
        let (_d, r) = tree();
        let root = Root::open(&r);
        let r = std::fs::canonicalize(&r).unwrap();
        match root.open_kernel("sys/bus/pci/devices/0000:00:01.0") {
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
        assert_eq!(where_is(&root.open_kernel("sys/up").unwrap()), r);
        assert_eq!(
            root.open_kernel("sys/away").unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        // An absolute target starts from the root.
        assert_eq!(
            where_is(&root.open_kernel("sys/top/sys").unwrap()),
            r.join("sys")
        );
        assert_eq!(where_is(&root.open_kernel("../../..").unwrap()), r);
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
            assert!(root.open_resolved(phys, &r.join(phys)).is_err(), "{phys}");
        }
        assert!(root.open_resolved("sys", &r.join("sys")).is_ok());
        assert!(root.open_resolved("", &r).is_ok());
    }
}
