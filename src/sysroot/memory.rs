//! A tree held in memory that the reader can be rooted at (`SysRoot::in_memory`): files,
//! directories, symlinks and recorded errors, built by whoever turns a record in another format
//! into the kernel's layout (`source::synth`). The reader walks it with the rules it applies to
//! a tree on disk (links resolved inside the root, `..` clamped, regular files only) and gets
//! the errors the kernel would give for the same tree on disk (ENOENT, ENOTDIR, EISDIR, ELOOP
//! for a final link opened without following, EINVAL for readlink of what is not a link), so a
//! record reads byte for byte as the temporary tree it used to be written to. A recorded error
//! reads as a bundle's recorded errors do: whatever the tree holds at that path.
//!
//! Building it refuses what a filesystem would refuse (a NUL in a name, a name over NAME_MAX,
//! a directory over a file), so a hostile record fails here as it failed on disk. This module
//! must not interpret what it holds and touches no filesystem.

use super::Fnv;
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::io;
use std::sync::Arc;

/// The kernel's NAME_MAX: longest single name a filesystem takes.
const NAME_MAX: usize = 255;

/// A recorded error: its kind (`ReadError::kind()`) and detail.
pub(super) type Recorded = (Arc<str>, Option<Arc<str>>);

/// A directory: its entries, and the names in it whose reads give a recorded error.
#[derive(Debug, Clone, Default)]
pub(super) struct Dir {
    /// Names of its entries (sorted, as the reader lists them).
    entries: BTreeSet<Box<str>>,
    /// Name -> index into `MemTree::reasons`; a dozen or two per directory at most, so a list.
    unreadable: Vec<(Box<str>, u32)>,
}

/// One entry of the tree.
#[derive(Debug, Clone)]
pub(super) enum Node {
    File(Box<[u8]>),
    Dir(Dir),
    /// The target as written (an absolute target is taken from the tree's root).
    Link(String),
}

/// A directory of a `MemTree` found once (`MemTree::dir_handle`): directories are never
/// removed, so it stays one.
#[derive(Debug, Clone)]
pub struct DirHandle {
    /// As the builder named it (for names that are not plain, walked from it).
    kpath: String,
    /// Its physical path in the tree.
    phys: String,
}

/// A tree of files, directories and symlinks kept in memory, keyed by physical path below the
/// root (components joined by '/', no leading slash; "" is the root), and the errors reads of
/// some of its paths give (what a record does not carry), kept with their directory.
#[derive(Clone)]
pub struct MemTree {
    nodes: HashMap<String, Node, Fnv>,
    /// The distinct recorded errors (a record has one reason for all it does not carry).
    reasons: Vec<Recorded>,
    /// Paths whose reads give a recorded error.
    unreadable: usize,
    /// Bytes of file content held: bounded by what the builder was handed.
    bytes: u64,
}

impl std::fmt::Debug for MemTree {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemTree")
            .field("entries", &self.nodes.len())
            .field("unreadable", &self.unreadable)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Default for MemTree {
    fn default() -> Self {
        Self::new()
    }
}

fn err(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

/// What std's path conversion says of a NUL byte.
fn nul() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "file name contained an unexpected NUL byte",
    )
}

/// A single plain name: no separator, not `.` or `..`, within NAME_MAX, no NUL.
fn plain(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= NAME_MAX
        && name != "."
        && name != ".."
        && !name.as_bytes().iter().any(|b| *b == b'/' || *b == 0)
}

/// Split a kernel path as a filesystem would walk it while creating: `.` and empty
/// components dropped, `..` applied (the root stays the root); refuse a NUL byte (what std's
/// path conversion refuses) and a name longer than NAME_MAX. Borrowed when already clean (an
/// absolute path of plain names, as the builder writes them).
fn clean(kpath: &str) -> io::Result<Cow<'_, str>> {
    if let Some(rest) = kpath.strip_prefix('/')
        && !rest.is_empty()
        && rest.split('/').all(plain)
    {
        return Ok(Cow::Borrowed(rest));
    }
    if kpath.contains('\0') {
        return Err(nul());
    }
    let mut out = String::with_capacity(kpath.len());
    for c in kpath.split('/') {
        match c {
            "" | "." => {}
            ".." => match out.rfind('/') {
                Some(i) => out.truncate(i),
                None => out.clear(),
            },
            c if c.len() > NAME_MAX => return Err(err(libc::ENAMETOOLONG)),
            c => {
                if !out.is_empty() {
                    out.push('/');
                }
                out.push_str(c);
            }
        }
    }
    Ok(Cow::Owned(out))
}

/// (parent, name) of a physical path; None for the root.
fn split(p: &str) -> Option<(&str, &str)> {
    if p.is_empty() {
        return None;
    }
    Some(match p.rfind('/') {
        Some(i) => (&p[..i], &p[i + 1..]),
        None => ("", p),
    })
}

/// `dir/name` as a physical path.
fn join(dir: &str, name: &str) -> String {
    let mut p = String::with_capacity(dir.len() + 1 + name.len());
    p.push_str(dir);
    if !dir.is_empty() {
        p.push('/');
    }
    p.push_str(name);
    p
}

impl MemTree {
    /// An empty tree: only its root directory.
    pub fn new() -> Self {
        let mut nodes = HashMap::with_capacity_and_hasher(1024, Fnv);
        nodes.insert(String::new(), Node::Dir(Dir::default()));
        MemTree {
            nodes,
            reasons: Vec::new(),
            unreadable: 0,
            bytes: 0,
        }
    }

    /// Paths whose reads give a recorded error.
    pub fn unreadable_count(&self) -> usize {
        self.unreadable
    }

    /// Bytes of file content held.
    pub fn content_bytes(&self) -> u64 {
        self.bytes
    }

    /// Entries held (directories, files and links; the root counts).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// Add `node` as `name` in the directory `parent` (which exists); EEXIST when taken. A
    /// directory's entries and the tree's nodes are added together, so a name among its
    /// entries is a node of the tree.
    fn insert(&mut self, parent: &str, name: &str, node: Node) -> io::Result<()> {
        match self.nodes.get_mut(parent) {
            Some(Node::Dir(d)) => {
                if d.entries.contains(name) {
                    return Err(err(libc::EEXIST));
                }
                d.entries.insert(name.into());
            }
            Some(_) => return Err(err(libc::ENOTDIR)),
            None => return Err(err(libc::ENOENT)),
        }
        if let Node::File(b) = &node {
            self.bytes += b.len() as u64;
        }
        self.nodes.insert(join(parent, name), node);
        Ok(())
    }

    /// The directory at a kernel path, made when missing (`mkdir -p`), as a handle for adding
    /// many entries to it without finding it again by its path each time.
    pub fn dir_handle(&mut self, kpath: &str) -> io::Result<DirHandle> {
        let p = clean(kpath)?;
        self.make_dirs(&p)?;
        Ok(DirHandle {
            kpath: kpath.to_string(),
            phys: p.into_owned(),
        })
    }

    /// `file_in` of the directory behind `dir`.
    pub fn file_at(&mut self, dir: &DirHandle, name: &str, content: &[u8]) -> io::Result<()> {
        if !plain(name) {
            return self.file(&format!("{}/{name}", dir.kpath), content);
        }
        self.put_file(&dir.phys, name, content)
    }

    /// `unreadable_in` of the directory behind `dir`.
    pub fn unreadable_at<'n>(
        &mut self,
        dir: &DirHandle,
        names: impl IntoIterator<Item = &'n str>,
        kind: &str,
        detail: Option<&str>,
    ) -> io::Result<()> {
        // One kind and detail for all: the order names are recorded in changes nothing.
        let (names, odd): (Vec<&str>, Vec<&str>) = names.into_iter().partition(|n| plain(n));
        self.put_unreadable(&dir.phys, names.into_iter(), kind, detail)?;
        for name in odd {
            self.unreadable(&format!("{}/{name}", dir.kpath), kind, detail)?;
        }
        Ok(())
    }

    /// Make the directory at physical path `p` and every missing one above it (`mkdir -p`): a
    /// file or link in the way is EEXIST at the end of the path and ENOTDIR above it, as the
    /// kernel says.
    fn make_dirs(&mut self, p: &str) -> io::Result<()> {
        match self.nodes.get(p) {
            Some(Node::Dir(_)) => return Ok(()),
            Some(_) => return Err(err(libc::EEXIST)),
            None => {}
        }
        // The deepest existing ancestor, then each missing level below it.
        let mut missing = vec![p];
        let mut at = p;
        while let Some((parent, _)) = split(at) {
            match self.nodes.get(parent) {
                Some(Node::Dir(_)) => break,
                Some(_) => return Err(err(libc::ENOTDIR)),
                None => {
                    missing.push(parent);
                    at = parent;
                }
            }
        }
        for d in missing.into_iter().rev() {
            if let Some((parent, name)) = split(d) {
                self.insert(parent, name, Node::Dir(Dir::default()))?;
            }
        }
        Ok(())
    }

    /// `mkdir -p` of a kernel path.
    pub fn dir(&mut self, kpath: &str) -> io::Result<()> {
        let p = clean(kpath)?;
        self.make_dirs(&p)
    }

    /// A file with `content` at a kernel path, its directories made; an existing file is
    /// replaced, an existing directory is EISDIR and a link in the way EEXIST (never followed).
    pub fn file(&mut self, kpath: &str, content: &[u8]) -> io::Result<()> {
        let p = clean(kpath)?;
        match split(&p) {
            Some((dir, name)) => self.put_file(dir, name, content),
            None => Err(err(libc::EISDIR)),
        }
    }

    /// The file `name` in the physical directory `dir` (made when missing).
    fn put_file(&mut self, dir: &str, name: &str, content: &[u8]) -> io::Result<()> {
        self.make_dirs(dir)?;
        let taken = matches!(self.nodes.get(dir), Some(Node::Dir(d)) if d.entries.contains(name));
        if !taken {
            return self.insert(dir, name, Node::File(content.into()));
        }
        match self.nodes.get_mut(&join(dir, name)) {
            Some(Node::File(old)) => {
                self.bytes = self.bytes - old.len() as u64 + content.len() as u64;
                *old = content.into();
                Ok(())
            }
            Some(Node::Dir(_)) => Err(err(libc::EISDIR)),
            _ => Err(err(libc::EEXIST)),
        }
    }

    /// A symlink at a kernel path pointing at `target` (as written), its directories made;
    /// EEXIST (`io::ErrorKind::AlreadyExists`) when the name is taken, as symlink(2) says.
    pub fn link(&mut self, kpath: &str, target: &str) -> io::Result<()> {
        if target.contains('\0') {
            return Err(nul());
        }
        if target.len() >= libc::PATH_MAX as usize {
            return Err(err(libc::ENAMETOOLONG));
        }
        let p = clean(kpath)?;
        let Some((parent, name)) = split(&p) else {
            return Err(err(libc::EEXIST));
        };
        self.make_dirs(parent)?;
        self.insert(parent, name, Node::Link(target.to_string()))
    }

    /// A read of this kernel path gives the error `kind` (`ReadError::kind()`) with `detail`,
    /// whatever the tree holds there (as a bundle replays the errors of its machine). Its
    /// directory is made, never a placeholder file: the reader consults the error once the
    /// path's directory resolves. The root itself cannot be made unreadable.
    pub fn unreadable(&mut self, kpath: &str, kind: &str, detail: Option<&str>) -> io::Result<()> {
        let p = clean(kpath)?;
        match split(&p) {
            Some((dir, name)) => self.put_unreadable(dir, std::iter::once(name), kind, detail),
            None => Ok(()),
        }
    }

    /// Record (kind, detail) for each plain name in the physical directory `dir`.
    fn put_unreadable<'n>(
        &mut self,
        dir: &str,
        names: impl Iterator<Item = &'n str>,
        kind: &str,
        detail: Option<&str>,
    ) -> io::Result<()> {
        self.make_dirs(dir)?;
        let r = self.reason(kind, detail);
        let Some(Node::Dir(d)) = self.nodes.get_mut(dir) else {
            return Err(err(libc::ENOTDIR));
        };
        for name in names {
            match d.unreadable.iter_mut().find(|(n, _)| **n == *name) {
                // The later error for one path wins, as a map's insert would have it.
                Some((_, old)) => *old = r,
                None => {
                    d.unreadable.push((name.into(), r));
                    self.unreadable += 1;
                }
            }
        }
        Ok(())
    }

    /// The index of (kind, detail) in `reasons`, added when new.
    fn reason(&mut self, kind: &str, detail: Option<&str>) -> u32 {
        let same = |(k, d): &Recorded| **k == *kind && d.as_deref() == detail;
        if let Some(i) = self.reasons.iter().position(same) {
            return i as u32;
        }
        self.reasons
            .push((Arc::from(kind), detail.map(Arc::<str>::from)));
        (self.reasons.len() - 1) as u32
    }

    /// The recorded error at a physical path, if any.
    pub(super) fn recorded(&self, phys: &str) -> Option<&Recorded> {
        let (dir, name) = split(phys)?;
        let Some(Node::Dir(d)) = self.nodes.get(dir) else {
            return None;
        };
        let (_, i) = d.unreadable.iter().find(|(n, _)| **n == *name)?;
        self.reasons.get(*i as usize)
    }

    /// The entry at a physical path, its last component not followed (an `lstat`); the
    /// kernel's error when there is none: ENOTDIR when something above it is not a directory,
    /// ENAMETOOLONG for a name over NAME_MAX, else ENOENT. Callers hand paths whose components
    /// above the last are resolved (no links).
    pub(super) fn lstat(&self, phys: &str) -> io::Result<&Node> {
        if let Some(n) = self.nodes.get(phys) {
            return Ok(n);
        }
        if phys.split('/').any(|c| c.len() > NAME_MAX) {
            return Err(err(libc::ENAMETOOLONG));
        }
        let mut at = phys;
        while let Some((parent, _)) = split(at) {
            match self.nodes.get(parent) {
                Some(Node::Dir(_)) => return Err(err(libc::ENOENT)),
                Some(_) => return Err(err(libc::ENOTDIR)),
                None => at = parent,
            }
        }
        Err(err(libc::ENOENT))
    }

    /// readlink(2): the target, EINVAL when the entry is not a link.
    pub(super) fn readlink(&self, phys: &str) -> io::Result<String> {
        match self.lstat(phys)? {
            Node::Link(t) => Ok(t.clone()),
            _ => Err(err(libc::EINVAL)),
        }
    }

    /// open(2) with O_NOFOLLOW for reading a regular file: its content; ELOOP for a link,
    /// EISDIR for a directory.
    pub(super) fn open(&self, phys: &str) -> io::Result<&[u8]> {
        match self.lstat(phys)? {
            Node::File(b) => Ok(b),
            Node::Link(_) => Err(err(libc::ELOOP)),
            Node::Dir(_) => Err(err(libc::EISDIR)),
        }
    }

    /// Whether a physical path is a link.
    pub(super) fn is_link(&self, phys: &str) -> bool {
        matches!(self.nodes.get(phys), Some(Node::Link(_)))
    }

    /// Whether a (resolved) physical path is a directory.
    pub(super) fn is_dir(&self, phys: &str) -> bool {
        matches!(self.nodes.get(phys), Some(Node::Dir(_)))
    }

    /// Whether a (resolved) physical path exists.
    pub(super) fn exists(&self, phys: &str) -> bool {
        self.nodes.contains_key(phys)
    }

    /// A directory's entries, sorted by name: (name, is a directory, is a link); ENOTDIR for
    /// what is not a directory.
    pub(super) fn read_dir(&self, phys: &str) -> io::Result<Vec<(&str, bool, bool)>> {
        let Node::Dir(d) = self.lstat(phys)? else {
            return Err(err(libc::ENOTDIR));
        };
        let mut child = String::with_capacity(phys.len() + 64);
        Ok(d.entries
            .iter()
            .map(|name| {
                child.clear();
                child.push_str(phys);
                if !phys.is_empty() {
                    child.push('/');
                }
                child.push_str(name);
                let (is_dir, is_link) = match self.nodes.get(&child) {
                    Some(Node::Dir(_)) => (true, false),
                    Some(Node::Link(_)) => (false, true),
                    _ => (false, false),
                };
                (&**name, is_dir, is_link)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_as_a_filesystem_would_and_refuses_what_it_would() {
        let mut t = MemTree::new();
        t.file("/sys/a/b/attr", b"1\n").unwrap();
        t.file("/sys/a/b/attr", b"2\n").unwrap();
        t.link("/sys/l", "/sys/a").unwrap();
        assert!(t.is_dir("sys/a/b"));
        assert_eq!(t.open("sys/a/b/attr").unwrap(), b"2\n");
        assert_eq!(t.readlink("sys/l").unwrap(), "/sys/a");
        assert_eq!(
            t.link("/sys/l", "/x").unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        let code = |r: io::Result<&[u8]>| r.unwrap_err().raw_os_error();
        assert_eq!(code(t.open("sys/l")), Some(libc::ELOOP));
        assert_eq!(code(t.open("sys/a")), Some(libc::EISDIR));
        assert_eq!(code(t.open("sys/a/b/attr/x")), Some(libc::ENOTDIR));
        assert_eq!(code(t.open("sys/none/x")), Some(libc::ENOENT));
        assert_eq!(
            t.readlink("sys/a").unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert!(t.dir("/sys/a/b/attr").is_err());
        assert!(t.file("/sys/a", b"").is_err());
        assert!(t.dir(&format!("/sys/{}", "x".repeat(256))).is_err());
        assert!(t.dir("/sys/x\0y").is_err());
        let a = t.dir_handle("/sys/a").unwrap();
        assert!(t.file_at(&a, "x\0y", b"").is_err());
        // `.` and `..` are walked as a filesystem walks them.
        let c = t.dir_handle("/sys/a/./b/..").unwrap();
        t.file_at(&c, "c", b"22").unwrap();
        assert_eq!(t.open("sys/a/c").unwrap(), b"22");
        let h = t.dir_handle("/sys/h").unwrap();
        t.file_at(&h, "f", b"").unwrap();
        t.file_at(&h, "../g", b"").unwrap();
        assert!(t.open("sys/h/f").is_ok() && t.open("sys/g").is_ok());
        assert_eq!(
            t.file_at(&h, "f", b"")
                .and(t.link("/sys/h/f", "x"))
                .unwrap_err()
                .kind(),
            io::ErrorKind::AlreadyExists
        );
        let names: Vec<_> = t.read_dir("sys").unwrap().into_iter().collect();
        assert_eq!(
            names,
            vec![
                ("a", true, false),
                ("g", false, false),
                ("h", true, false),
                ("l", false, true)
            ]
        );
        assert_eq!(t.content_bytes(), 4);
    }

    #[test]
    fn recorded_errors_sit_beside_what_the_tree_holds() {
        let mut t = MemTree::new();
        t.unreadable("/sys/class/net", "io", Some("not in lspci text"))
            .unwrap();
        let x = t.dir_handle("/sys/devices/x").unwrap();
        t.unreadable_at(&x, ["mtu", "../y/z"], "io", Some("not in lspci text"))
            .unwrap();
        t.unreadable_at(&x, ["mtu"], "not-found", None).unwrap();
        t.file("/proc/sys/kernel/hostname", b"h\n").unwrap();
        t.unreadable("/proc", "io", Some("not in lspci text"))
            .unwrap();
        assert_eq!(t.unreadable_count(), 4);
        assert!(t.recorded("sys/devices/y/z").is_some());
        let (k, d) = t.recorded("sys/class/net").unwrap();
        assert_eq!((&**k, d.as_deref()), ("io", Some("not in lspci text")));
        // The later error for one path wins.
        assert_eq!(&*t.recorded("sys/devices/x/mtu").unwrap().0, "not-found");
        // A directory the tree holds can carry an error too (a record's /proc).
        assert!(t.is_dir("proc") && t.recorded("proc").is_some());
        assert!(!t.exists("sys/class/net") && t.is_dir("sys/class"));
        assert!(t.recorded("sys/devices/x/speed").is_none());
        assert!(t.recorded("").is_none());
    }
}
