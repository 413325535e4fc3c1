//! The capture list: the one definition of which kernel paths a bundle records, and the walk
//! that copies them out of a `SysRoot` (live `/` or a recorded tree).
//!
//! Discovery and checks read through `SysRoot`, which remembers every path it was handed;
//! `Capture::uncovered` compares that set with what the capture took, so a check that reads a
//! path missing here fails its fixture test (and `gpudoctor bundle` in debug builds) instead of
//! silently reading "not present" on every replay.
//!
//! This module copies; it must not interpret what it reads (redaction is `redact`, the archive
//! format is `write`/`read`).

use crate::sysroot::{FileKind, ReadError, SysRoot, join};
use std::collections::{BTreeMap, BTreeSet};

/// Read by discovery but deliberately not captured: the hostname (a bundle records its
/// redaction token in manifest.json's `host` instead, and replay names the node from there).
pub const NOT_CAPTURED: &[&str] = &["/proc/sys/kernel/hostname"];

/// What a bundle records, one pattern a line. Components: a literal name; `*` (every entry,
/// the directory's whole listing is kept); a glob such as `node*`; `{a,b,c}` (alternatives,
/// each may hold `*`); `**` as the last component (the whole subtree). Symlinks on the way are
/// followed and kept as symlinks; a symlink matched by the last component is kept, not followed.
///
/// To let a new check read a path in replay, add its pattern here (one line).
pub const CAPTURE: &[&str] = &[
    // PCI functions: the bus listing (links into /sys/devices), then per-function attributes.
    "/sys/bus/pci/devices/*",
    "/sys/bus/pci/devices/*/{class,vendor,device,subsystem_vendor,subsystem_device,revision}",
    "/sys/bus/pci/devices/*/{driver,numa_node,local_cpulist,local_cpus,iommu_group,enable}",
    "/sys/bus/pci/devices/*/{current_link_speed,current_link_width,max_link_speed,max_link_width}",
    "/sys/bus/pci/devices/*/{config,resource,irq,power_state,d3cold_allowed,reset_method}",
    "/sys/bus/pci/devices/*/{sriov_numvfs,sriov_totalvfs,physfn,ari_enabled,msi_bus}",
    "/sys/bus/pci/devices/*/{secondary_bus_number,subordinate_bus_number}",
    "/sys/bus/pci/devices/*/{aer_dev_correctable,aer_dev_fatal,aer_dev_nonfatal}",
    "/sys/bus/pci/devices/*/link/*",
    "/sys/module/pcie_aspm/parameters/policy",
    // NUMA.
    "/sys/devices/system/node/*",
    "/sys/devices/system/node/node*/{cpulist,cpumap,distance}",
    // Network interfaces.
    "/sys/class/net/*",
    "/sys/class/net/*/{mtu,operstate,type,device,address,speed,carrier,ifindex,dev_port}",
    // RDMA devices, ports, GIDs.
    "/sys/class/infiniband/*",
    "/sys/class/infiniband/*/{node_type,hca_type,fw_ver,node_guid,sys_image_guid,board_id}",
    "/sys/class/infiniband/*/{node_desc,parent,device}",
    "/sys/class/infiniband/*/ports/*",
    "/sys/class/infiniband/*/ports/*/{state,phys_state,rate,link_layer,lid,sm_lid,cap_mask}",
    "/sys/class/infiniband/*/ports/*/gids/*",
    "/sys/class/infiniband/*/ports/*/gid_attrs/{types,ndevs}/*",
    "/sys/class/infiniband/*/ports/*/{counters,hw_counters}/*",
    "/sys/class/infiniband_verbs/*",
    "/sys/class/infiniband_verbs/*/{ibdev,abi_version,device}",
    // Drivers and kernel modules (GPUDirect RDMA needs nvidia_peermem or MOFED's peer memory).
    "/proc/modules",
    "/sys/module/*",
    "/proc/driver/nvidia/**",
    "/sys/module/{nvidia*,nv_peer_mem,ib_*,mlx5_*,rdma_*}/{version,srcversion,initstate,refcnt}",
    "/sys/module/{nvidia*,nv_peer_mem,ib_*,mlx5_*,rdma_*}/parameters/*",
    "/sys/kernel/mm/memory_peers/**",
    "/sys/kernel/mm/memory_peers/{nv_mem,nv_mem_nc}/version",
    // IOMMU.
    "/sys/kernel/iommu_groups",
    "/sys/kernel/iommu_groups/**",
    // Device nodes (/dev/nvidia0...): names only, recorded as empty files.
    "/dev/*",
    // The kernel.
    "/proc/cmdline",
    "/proc/version",
    "/proc/uptime",
    // Process names (gpu.fabric: is nv-fabricmanager running); read only on NVSwitch systems.
    // Only nv-fabricmanager's are kept (see ONLY_WITH).
    "/proc/*/comm",
    // Who runs it (owner and program): kept only for the processes whose name was kept.
    "/proc/*/status",
    "/proc/*/cmdline",
    "/proc/*/exe",
    "/proc/sys/kernel/osrelease",
];

/// Files of the capture list kept only when their whole text (trimmed) is one of the values
/// the checks look for; the others are left out, and so are their directories. Discovery
/// reads the name of every process to find nv-fabricmanager (gpu.fabric): a bundle keeps
/// that one, so its replay finds the same processes, and records no other process's name or
/// PID. The listing of /proc in a bundle therefore shows only the processes kept.
pub const ONLY_WITH: &[(&str, &[&str])] =
    &[("/proc/*/comm", &[crate::inventory::FABRIC_MANAGER_COMM])];

/// Walk limits: a hostile recorded tree must not make a capture run forever.
const MAX_ENTRIES: usize = 200_000;
const MAX_DEPTH: usize = 32;

/// One recorded thing at a canonical kernel path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    File(Vec<u8>),
    /// A symlink and its target as the kernel wrote it.
    Link(String),
    Dir,
}

/// A path that could not be read, and why (NotFound is not recorded: absence replays as is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub path: String,
    pub error: ReadError,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Lit(String),
    /// `*`: every entry; the full listing is recorded.
    All,
    /// Alternatives, some with `*`.
    Glob(Vec<String>),
    /// `**`: the whole subtree.
    Tree,
}

fn parse_pattern(p: &str) -> Vec<Seg> {
    p.split('/')
        .filter(|c| !c.is_empty())
        .map(|c| {
            if c == "**" {
                Seg::Tree
            } else if c == "*" {
                Seg::All
            } else if let Some(inner) = c.strip_prefix('{').and_then(|c| c.strip_suffix('}')) {
                Seg::Glob(inner.split(',').map(str::to_string).collect())
            } else if c.contains('*') {
                Seg::Glob(vec![c.to_string()])
            } else {
                Seg::Lit(c.to_string())
            }
        })
        .collect()
}

/// Shell-style match with `*` only.
fn glob_match(pat: &str, name: &str) -> bool {
    let parts: Vec<&str> = pat.split('*').collect();
    if parts.len() == 1 {
        return pat == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the concrete `path` is one that `pattern` names (no `**`).
fn path_matches(pattern: &str, path: &str) -> bool {
    let segs = parse_pattern(pattern);
    let comps: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    segs.len() == comps.len()
        && segs.iter().zip(&comps).all(|(s, c)| match s {
            Seg::Lit(l) => l == c,
            Seg::All => true,
            Seg::Glob(alts) => alts.iter().any(|a| glob_match(a, c)),
            Seg::Tree => false,
        })
}

fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

/// Everything a capture took from a tree.
#[derive(Debug, Default)]
pub struct Capture {
    /// Canonical kernel path -> what is there.
    pub items: BTreeMap<String, Item>,
    /// Paths that could not be read (other than "not present").
    pub failures: Vec<Failure>,
    /// Canonical locations the patterns named, present or not.
    wanted: BTreeSet<String>,
    /// Directories whose complete listing is recorded (or that were absent where listed).
    listed: BTreeSet<String>,
    /// Stopped early at MAX_ENTRIES.
    pub truncated: bool,
    /// Device nodes, fifos and sockets recorded as empty files.
    pub special: usize,
    /// (canonical directory, pattern, segments left) already expanded: links that lead into
    /// one directory from many places (every device's `link/` pointing back at the bus
    /// listing) expand it once, not once per link, which was quadratic in the links in time
    /// and in the reader's log of the paths it was handed (gigabytes from a small bundle).
    expanded: std::collections::HashSet<(String, usize, usize)>,
    /// The pattern being expanded (an index into the list `run_patterns` was given).
    pattern: usize,
    /// Paths in `failures`, for a dedup that is not a search of them.
    failed: BTreeSet<String>,
}

impl Capture {
    /// Run every pattern of `CAPTURE` against `sr`. `progress` is called with the number of
    /// items so far, now and then.
    pub fn collect_all(sr: &SysRoot, progress: &mut dyn FnMut(usize)) -> Capture {
        Self::run_patterns(sr, CAPTURE, progress)
    }

    pub fn run_patterns(
        sr: &SysRoot,
        patterns: &[&str],
        progress: &mut dyn FnMut(usize),
    ) -> Capture {
        let mut c = Capture::default();
        for (i, p) in patterns.iter().enumerate() {
            c.pattern = i;
            let segs = parse_pattern(p);
            c.expand(sr, "/", &segs, 0, progress);
        }
        c.add_parent_dirs();
        progress(c.items.len());
        c
    }

    fn full(&mut self) -> bool {
        if self.items.len() >= MAX_ENTRIES {
            self.truncated = true;
        }
        self.truncated
    }

    fn fail(&mut self, path: &str, e: ReadError) {
        if matches!(e, ReadError::NotFound(_)) {
            return;
        }
        if !self.failed.insert(path.to_string()) {
            return;
        }
        self.failures.push(Failure {
            path: path.to_string(),
            error: e,
        });
    }

    /// Expand `segs` below the canonical directory `dir`.
    fn expand(
        &mut self,
        sr: &SysRoot,
        dir: &str,
        segs: &[Seg],
        depth: usize,
        progress: &mut dyn FnMut(usize),
    ) {
        if self.full() || depth > MAX_DEPTH {
            return;
        }
        if !self
            .expanded
            .insert((dir.to_string(), self.pattern, segs.len()))
        {
            return;
        }
        let Some((seg, rest)) = segs.split_first() else {
            return;
        };
        match seg {
            Seg::Lit(name) => self.visit(sr, &join(dir, name), rest, depth, progress),
            Seg::Glob(alts) if alts.iter().all(|a| !a.contains('*')) => {
                for a in alts {
                    self.visit(sr, &join(dir, a), rest, depth, progress);
                }
            }
            Seg::All | Seg::Glob(_) => {
                let entries = match sr.list(dir) {
                    Ok(e) => e,
                    Err(e) => {
                        if *seg == Seg::All {
                            self.listed.insert(dir.to_string());
                        }
                        self.fail(dir, e);
                        return;
                    }
                };
                if *seg == Seg::All {
                    self.listed.insert(dir.to_string());
                    self.items.entry(dir.to_string()).or_insert(Item::Dir);
                }
                for e in entries {
                    let keep = match seg {
                        Seg::Glob(alts) => alts.iter().any(|a| glob_match(a, &e.name)),
                        _ => true,
                    };
                    if keep {
                        self.visit(sr, &join(dir, &e.name), rest, depth, progress);
                    }
                }
            }
            Seg::Tree => self.walk(sr, dir, depth, progress),
        }
    }

    /// One concrete path named by a pattern (`path`'s parent is canonical).
    fn visit(
        &mut self,
        sr: &SysRoot,
        path: &str,
        rest: &[Seg],
        depth: usize,
        progress: &mut dyn FnMut(usize),
    ) {
        if self.full() {
            return;
        }
        self.wanted.insert(path.to_string());
        // A process's owner and program only where its name was kept (gpu.fabric tells the
        // fabric manager from a look-alike by them); no other process is recorded.
        if ["/proc/*/status", "/proc/*/cmdline", "/proc/*/exe"]
            .iter()
            .any(|p| path_matches(p, path))
            && let Some((dir, _)) = path.rsplit_once('/')
            && !self.items.contains_key(&format!("{dir}/comm"))
        {
            return;
        }
        let kind = match sr.kind_of(path) {
            Ok(k) => k,
            Err(e) => {
                // An absent directory whose listing was wanted replays as absent: covered.
                if matches!(e, ReadError::NotFound(_))
                    && matches!(rest.first(), Some(Seg::All | Seg::Tree))
                {
                    self.listed.insert(path.to_string());
                }
                self.fail(path, e);
                return;
            }
        };
        match kind {
            FileKind::Symlink => {
                let target = self.link(sr, path);
                if let Some(t) = target
                    && !rest.is_empty()
                {
                    self.expand(sr, &t, rest, depth + 1, progress);
                }
            }
            FileKind::Dir => {
                if rest.is_empty() {
                    self.items.entry(path.to_string()).or_insert(Item::Dir);
                } else {
                    self.expand(sr, path, rest, depth + 1, progress);
                }
            }
            FileKind::File | FileKind::RecordedError if rest.is_empty() => self.file(sr, path),
            FileKind::RecordedError => {
                if let Err(e) = sr.list(path) {
                    self.fail(path, e);
                }
            }
            FileKind::File => {}
            // A device node, fifo or socket is never opened: its name is the fact (e.g. that
            // /dev/nvidia0 exists), kept as an empty file.
            FileKind::Special => {
                if rest.is_empty() {
                    self.items.insert(path.to_string(), Item::File(Vec::new()));
                    self.special += 1;
                }
            }
        }
        if self.items.len().is_multiple_of(512) {
            progress(self.items.len());
        }
    }

    fn file(&mut self, sr: &SysRoot, path: &str) {
        let only = ONLY_WITH
            .iter()
            .find(|(pattern, _)| path_matches(pattern, path));
        match sr.read_bytes(path) {
            Ok(b) => {
                if let Some((_, values)) = only
                    && !values
                        .iter()
                        .any(|v| String::from_utf8_lossy(&b).trim() == *v)
                {
                    return;
                }
                self.items.insert(path.to_string(), Item::File(b));
            }
            // Which process could not be read says nothing the checks use, and names a PID.
            Err(_) if only.is_some() => {}
            Err(e) => self.fail(path, e),
        }
    }

    /// Record the link at `path` and every link crossed resolving it; the target directory
    /// is recorded too so the link resolves in the copy. Returns the canonical target.
    fn link(&mut self, sr: &SysRoot, path: &str) -> Option<String> {
        match sr.canonical_with_links(path) {
            Ok((target, links)) => {
                // Only sysfs is followed: a link out of it (/dev/fd -> /proc/self/fd) would
                // record this process's open files, which are no fact about the machine.
                for (at, to) in links {
                    if at == path || at.starts_with("/sys/") {
                        self.items.entry(at).or_insert(Item::Link(to));
                    }
                }
                if target.starts_with("/sys/") && sr.kind_of(&target) == Ok(FileKind::Dir) {
                    self.items.entry(target.clone()).or_insert(Item::Dir);
                }
                Some(target)
            }
            Err(e) => {
                // A dangling link is still a fact: keep it as written.
                match sr.read_link(path) {
                    Ok(t) => {
                        self.items.insert(path.to_string(), Item::Link(t));
                    }
                    Err(e2) => self.fail(path, e2),
                }
                if !matches!(e, ReadError::NotFound(_)) {
                    self.fail(path, e);
                }
                None
            }
        }
    }

    /// `**`: everything below `dir`, links kept and not followed.
    fn walk(&mut self, sr: &SysRoot, dir: &str, depth: usize, progress: &mut dyn FnMut(usize)) {
        if self.full() || depth > MAX_DEPTH {
            return;
        }
        self.wanted.insert(dir.to_string());
        self.listed.insert(dir.to_string());
        let entries = match sr.list(dir) {
            Ok(e) => e,
            Err(e) => {
                self.fail(dir, e);
                return;
            }
        };
        self.items.entry(dir.to_string()).or_insert(Item::Dir);
        for e in entries {
            let path = join(dir, &e.name);
            self.wanted.insert(path.clone());
            if e.is_symlink {
                self.link(sr, &path);
            } else if e.is_dir {
                self.walk(sr, &path, depth + 1, progress);
            } else {
                match sr.kind_of(&path) {
                    Ok(FileKind::File) | Ok(FileKind::RecordedError) => self.file(sr, &path),
                    Ok(FileKind::Special) => {
                        self.items.insert(path.clone(), Item::File(Vec::new()));
                        self.special += 1;
                    }
                    Ok(_) => {}
                    Err(err) => self.fail(&path, err),
                }
            }
            if self.items.len().is_multiple_of(512) {
                progress(self.items.len());
            }
        }
    }

    /// Every ancestor of a recorded item or failure is a directory in the copy.
    fn add_parent_dirs(&mut self) {
        let mut dirs = BTreeSet::new();
        let paths = self
            .items
            .keys()
            .cloned()
            .chain(self.failures.iter().map(|f| f.path.clone()))
            .collect::<Vec<_>>();
        for p in paths {
            let mut cur = p.as_str();
            while let Some(par) = parent(cur) {
                if par == "/" || !dirs.insert(par.to_string()) {
                    break;
                }
                cur = par;
            }
        }
        for d in dirs {
            self.items.entry(d).or_insert(Item::Dir);
        }
    }

    /// Paths `sr` was asked for (as `SysRoot::touched` and `listed` report them) that this
    /// capture does not cover: each would read differently in a replay. `sr` must read the same
    /// tree the capture was taken from.
    /// A path under a directory the capture asked for but the machine does not have (e.g.
    /// /sys/kernel/iommu_groups/N when /sys/kernel/iommu_groups is absent) replays as absent.
    fn absent_ancestor_wanted(&self, sr: &SysRoot, at: &str) -> bool {
        let mut p = at;
        while let Some((parent, _)) = p.rsplit_once('/') {
            if parent.is_empty() {
                return false;
            }
            if self.wanted.contains(parent) && !sr.exists(parent) {
                return true;
            }
            p = parent;
        }
        false
    }

    /// Paths discovery read that are deliberately not captured (see `NOT_CAPTURED`) are not
    /// reported.
    pub fn uncovered(&self, sr: &SysRoot, touched: &[String], listed: &[String]) -> Vec<String> {
        let listed_set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();
        let mut out = Vec::new();
        for t in touched
            .iter()
            .filter(|t| !NOT_CAPTURED.contains(&t.as_str()))
        {
            let ok = if listed_set.contains(t.as_str()) {
                let at = sr.canonical(t).unwrap_or_else(|_| sr.location(t));
                self.listed.contains(&at) || self.absent_ancestor_wanted(sr, &at)
            } else {
                let at = sr.location(t);
                at == "/"
                    || self.wanted.contains(&at)
                    || self.listed.contains(&at)
                    || self.items.contains_key(&at)
                    || self.absent_ancestor_wanted(sr, &at)
            };
            if !ok {
                out.push(t.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn patterns_parse() {
        assert_eq!(
            parse_pattern("/sys/bus/*/{a,b*}/**"),
            vec![
                Seg::Lit("sys".into()),
                Seg::Lit("bus".into()),
                Seg::All,
                Seg::Glob(vec!["a".into(), "b*".into()]),
                Seg::Tree
            ]
        );
        assert!(glob_match("node*", "node12"));
        assert!(!glob_match("node*", "has_cpu"));
        assert!(glob_match("nvidia*", "nvidia"));
        assert!(glob_match("*_core", "ib_core"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxc"));
        assert!(!glob_match("ab*ba", "aba"));
    }

    #[test]
    fn every_pattern_is_absolute_and_well_formed() {
        for p in CAPTURE {
            assert!(
                p.starts_with("/sys/") || p.starts_with("/proc/") || p.starts_with("/dev/"),
                "{p}"
            );
            let segs = parse_pattern(p);
            if let Some(i) = segs.iter().position(|s| *s == Seg::Tree) {
                assert_eq!(i, segs.len() - 1, "** only last: {p}");
            }
        }
    }

    #[test]
    fn links_kept_and_coverage_checked() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path();
        let dev = r.join("sys/devices/pci0000:00/0000:00:01.0");
        fs::create_dir_all(&dev).unwrap();
        fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
        fs::create_dir_all(r.join("sys/bus/pci/drivers/nvidia")).unwrap();
        fs::write(dev.join("class"), "0x030200\n").unwrap();
        fs::write(dev.join("secret"), "nope\n").unwrap();
        symlink("../../../bus/pci/drivers/nvidia", dev.join("driver")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:00:01.0",
            r.join("sys/bus/pci/devices/0000:00:01.0"),
        )
        .unwrap();
        let sr = SysRoot::at(r).unwrap();
        let c = Capture::run_patterns(
            &sr,
            &[
                "/sys/bus/pci/devices/*",
                "/sys/bus/pci/devices/*/{class,driver,numa_node}",
            ],
            &mut |_| {},
        );
        assert_eq!(
            c.items.get("/sys/devices/pci0000:00/0000:00:01.0/class"),
            Some(&Item::File(b"0x030200\n".to_vec()))
        );
        assert_eq!(
            c.items.get("/sys/bus/pci/devices/0000:00:01.0"),
            Some(&Item::Link(
                "../../../devices/pci0000:00/0000:00:01.0".into()
            ))
        );
        assert!(matches!(
            c.items.get("/sys/devices/pci0000:00/0000:00:01.0/driver"),
            Some(Item::Link(_))
        ));
        assert_eq!(c.items.get("/sys/bus/pci/drivers/nvidia"), Some(&Item::Dir));
        assert!(
            !c.items
                .contains_key("/sys/devices/pci0000:00/0000:00:01.0/secret")
        );
        let probe = SysRoot::at(r).unwrap();
        let _ = probe.list("/sys/bus/pci/devices");
        let _ = probe.read_text("/sys/bus/pci/devices/0000:00:01.0/class");
        let _ = probe.read_text("/sys/bus/pci/devices/0000:00:01.0/numa_node"); // absent: fine
        let _ = probe.link_name("/sys/bus/pci/devices/0000:00:01.0/driver");
        assert_eq!(
            c.uncovered(&sr, &probe.touched(), &probe.listed()),
            Vec::<String>::new()
        );
        let _ = probe.read_text("/sys/bus/pci/devices/0000:00:01.0/secret");
        let _ = probe.list("/sys/devices/pci0000:00/0000:00:01.0");
        assert_eq!(
            c.uncovered(&sr, &probe.touched(), &probe.listed()),
            vec![
                "/sys/bus/pci/devices/0000:00:01.0/secret".to_string(),
                "/sys/devices/pci0000:00/0000:00:01.0".to_string()
            ]
        );
    }
}
