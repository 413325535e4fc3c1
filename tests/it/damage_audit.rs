//! The audit that damage never creates a pass: for every recorded tree, every
//! kind of file gpudoctor reads from it is removed, filled with garbage and truncated, one at a
//! time, and the whole check pipeline runs again in-process; so are its symlinks (removed,
//! looped onto themselves, pointed out of the tree), the directories it lists (a file in their
//! place), and its recorded documents `nvml.json` and `libs.json` (removed, truncated, garbage,
//! each field removed). The faulty variants (fixtures/variants) get the same damage on what
//! their failures were read from. After each damage:
//!
//! - no (check, subject) that was not `pass` becomes `pass`;
//! - the overall verdict under `--fail-on-skip` never improves;
//! - no failing or warning (check, subject) disappears without an unknown (or not-root) skip in
//!   its place, on that subject or, where the subject itself is gone, on the check;
//! - no (check, subject) that was judged becomes "not applicable";
//! - `--fail-on-skip` never exits 0 on a damaged faulty tree (one that fails intact);
//! - the damage shows somewhere (a verdict, a message, an unread note, the topology); a file
//!   whose damage legitimately changes nothing is named in `UNCHANGED_OK` with the reason.
//!
//! Files are chosen per kind (the path with bus addresses, device names and numbers replaced),
//! a few of each kind per tree, in a fixed order (no randomness: the same trees every run), so
//! every parser sees every mutation on every tree while each test stays within a couple of
//! minutes on 2 cores.

use crate::{fixture_dirs, name, variants};
use gpudoctor::config::CheckOptions;
use gpudoctor::source::{Source, SourceSpec};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// How many files of one kind are damaged per tree.
const PER_KIND: usize = 2;

/// How many files, links and listings are damaged on each faulty variant (those its failures
/// and warnings were read from, one per kind).
const PER_VARIANT: usize = 12;

/// Damage that legitimately changes no report, by kind of file and mutation, with the reason.
const UNCHANGED_OK: &[(&str, &str, &str)] = &[
    (
        "/proc/cmdline",
        "Truncate",
        "an empty command line is a valid value: no IOMMU options, as before on these trees",
    ),
    (
        "/proc/modules",
        "Truncate",
        "an empty module list is a valid value: no nvidia_peermem, as before on these trees",
    ),
];

/// A pass that may stand on a garbled or emptied file it cites, by tree ("*": every tree), kind
/// of file, mutations and check, with the reason: the damaged content is itself a valid value,
/// or the verdict rests on other evidence and the file is shown, not judged.
const PASS_ON_DAMAGE_OK: &[(&str, &str, &[&str], &str, &str)] = &[
    (
        "*",
        "/proc/cmdline",
        &["Garbage", "Truncate"],
        "iommu.mode",
        "a command line without IOMMU options is a valid value: the mode comes from the IOMMU groups",
    ),
    (
        "*",
        "/proc/modules",
        &["Garbage", "Truncate"],
        "gdr.peermem",
        "nvidia-peermem is loaded when any of memory_peers/nv_mem, /sys/module, /proc/modules shows it; the others still do",
    ),
    (
        "*",
        "/sys/kernel/mm/memory_peers/nv_mem/version",
        &["Truncate"],
        "gdr.peermem",
        "as for /proc/modules: /sys/module/nvidia_peermem still shows the module",
    ),
    (
        "pcie-2socket-roce",
        "/proc/version",
        &["Garbage", "Truncate"],
        "gdr.dmabuf",
        "the proprietary module already rules dma-buf out and nvidia-peermem covers GPUDirect RDMA: the kernel version is shown, not needed",
    ),
    (
        "*",
        "/sys/class/infiniband/*/ports/*/rate",
        &["Garbage", "Truncate"],
        "rdma.port-state",
        "the port's state is judged from state, phys_state, link layer and LID; the rate is shown as read (or why not)",
    ),
];

/// Defects the audit finds that are known and not yet fixed, each by (audit, tree, mutation,
/// damaged path): every finding of that damage is excused, nothing else. An entry that no
/// longer reproduces fails its audit, so the list cannot go stale. Empty: the RDMA-backing
/// defects listed here while the unknown-is-never-pass work was split across branches are fixed (typed RDMA backing,
/// class directories read as listed/absent/unreadable).
const KNOWN_DEFECTS: &[(&str, &str, &str, &str)] = &[];

/// Files that feed only some checks, by file name: their damage must show only where their
/// device is a subject of one of those checks (AER counters are read and judged for GPUs and
/// the functions behind RDMA devices), or, with no checks named, only where the report names
/// the file itself (`resource` is the BAR1 fallback, read for GPUs, used only when NVML does
/// not give BAR1).
const FEEDS: &[(&str, &[&str])] = &[
    ("aer_dev_correctable", &["pcie.aer"]),
    ("aer_dev_fatal", &["pcie.aer"]),
    ("aer_dev_nonfatal", &["pcie.aer"]),
    ("resource", &[]),
];

#[derive(Clone, Debug)]
enum Mutation {
    /// A file or link removed.
    Remove,
    Garbage,
    /// Config space to 48 bytes (a cut-off header), JSON to half, other text to nothing.
    Truncate,
    /// A link pointing at itself (ELOOP).
    LinkLoop,
    /// A link pointing out of the tree (the reader must refuse it).
    LinkOut,
    /// A listed directory replaced by a file (ENOTDIR).
    Unlistable,
    /// A JSON document with the field at this pointer removed.
    DropField(String),
}

impl Mutation {
    fn name(&self) -> String {
        match self {
            Mutation::DropField(p) => format!("DropField({p})"),
            m => format!("{m:?}"),
        }
    }
}

/// The path with what varies between instances of one kind of file replaced by `*`.
fn kind_of(path: &str) -> String {
    path.split('/')
        .map(|seg| {
            let digits = seg.chars().any(|c| c.is_ascii_digit());
            if digits && !seg.contains('_') || seg.starts_with("mlx5_") || seg.contains(':') {
                "*".to_string()
            } else {
                seg.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// One finding as the audit compares it.
#[derive(Clone, Debug)]
struct Verdict {
    status: String,
    /// The skip kind (`unknown`, `not-root`, `not-applicable`), empty unless a skip.
    skip: String,
    /// The sources its evidence cites (a kernel path, an NVML call).
    sources: Vec<String>,
}

impl Verdict {
    /// A fail, a warn, or a skip of something that should have been judged.
    fn holds_a_fault(&self) -> bool {
        matches!(self.status.as_str(), "fail" | "warn")
            || (self.status == "skip" && matches!(self.skip.as_str(), "unknown" | "not-root"))
    }
}

/// (check id, subject) -> verdict, plus everything else a person would see.
struct Seen {
    verdicts: BTreeMap<(String, String), Verdict>,
    /// The node's verdict before the gate, and under `--fail-on-skip`.
    status: String,
    gated: String,
    /// The check report as JSON (what a verdict could depend on is named in it).
    check: String,
    whole: String,
}

fn rank(status: &str) -> u8 {
    match status {
        "pass" => 0,
        "skip" => 1,
        "warn" => 2,
        _ => 3,
    }
}

/// Did any check judge something this file feeds? The file is named in some evidence, or its
/// device (the last PCI address in its path) is a subject or named in evidence. A file that
/// feeds nothing judged (a netdev no RDMA port uses, a bridge off every GPU-NIC path) may be
/// damaged without any report changing.
fn judged_from(seen: &Seen, path: &str) -> bool {
    if seen.check.contains(path) {
        return true;
    }
    let Some(bdf) = path
        .rsplit('/')
        .find(|seg| seg.parse::<gpudoctor::pci::Bdf>().is_ok())
    else {
        return false;
    };
    let file = path.rsplit('/').next().unwrap_or_default();
    match FEEDS.iter().find(|(f, _)| *f == file) {
        Some((_, ids)) => ids.iter().any(|id| {
            seen.verdicts
                .contains_key(&(id.to_string(), bdf.to_string()))
        }),
        None => {
            seen.check.contains(&format!("\"{bdf}\"")) || seen.check.contains(&format!("{bdf}/"))
        }
    }
}

/// A level-0 check of `dir` under `--fail-on-skip`, in process; None when gpudoctor refuses the
/// tree (exit 2 with a message: nothing passed).
fn look(dir: &Path) -> Option<Seen> {
    let spec = SourceSpec::Root(dir.to_path_buf());
    let source = Source::open(&spec).ok()?;
    let opts = CheckOptions {
        fail_on_skip: true,
        ..CheckOptions::level0()
    };
    let check = gpudoctor::run::check_report_from(&source, &opts).ok()?;
    let topo = gpudoctor::run::topo_report_from(&source).ok()?;
    let v = serde_json::to_value(&check).ok()?;
    let mut verdicts = BTreeMap::new();
    for c in v["checks"].as_array()? {
        verdicts.insert(
            (
                c["id"].as_str()?.to_string(),
                c["subject"].as_str()?.to_string(),
            ),
            Verdict {
                status: c["status"].as_str()?.to_string(),
                skip: c["skip"].as_str().unwrap_or_default().to_string(),
                sources: c["evidence"]
                    .as_array()
                    .map(|e| {
                        e.iter()
                            .filter_map(|x| x["source"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            },
        );
    }
    let status = v["gate"]["findings_status"].as_str()?.to_string();
    let gated = v["status"].as_str()?.to_string();
    let check = serde_json::to_string(&check).ok()?;
    let whole = format!("{check}{}", serde_json::to_string(&topo).ok()?);
    Some(Seen {
        verdicts,
        status,
        gated,
        check,
        whole,
    })
}

/// What reading `dir` touched: the kernel paths read and the directories listed.
fn read_paths(dir: &Path) -> (Vec<String>, Vec<String>) {
    let source = Source::open(&SourceSpec::Root(dir.to_path_buf())).unwrap();
    gpudoctor::run::check_report_from(&source, &CheckOptions::level0()).unwrap();
    let mut v = source.sysroot.touched();
    v.sort();
    v.dedup();
    let mut l = source.sysroot.listed();
    l.sort();
    l.dedup();
    (v, l)
}

/// One tree under audit: its intact verdicts, and the rules checked after each damage.
struct Audit {
    tree_name: String,
    tree: PathBuf,
    before: Seen,
    mutations: usize,
    failures: Vec<String>,
}

/// What one damage did to a path, to undo it.
enum Undo {
    File(Vec<u8>),
    Link(PathBuf),
    Dir(PathBuf),
}

impl Audit {
    fn new(tree_name: String, tree: PathBuf) -> Audit {
        let before = look(&tree).expect("the intact tree reads");
        Audit {
            tree_name,
            tree,
            before,
            mutations: 0,
            failures: Vec::new(),
        }
    }

    fn faulty(&self) -> bool {
        self.before.status == "fail"
    }

    /// Damage `kpath` (a kernel path, or a document's name beside sys/) with `m`, check the
    /// rules, undo.
    fn damage(&mut self, kpath: &str, m: &Mutation) {
        let file = self.tree.join(kpath.trim_start_matches('/'));
        // A non-root recording's config is the 64-byte header alone (hwloc's tree): cut to 48
        // bytes or garbled, it loses the capability pointer to capabilities that were beyond
        // reach already, IDs and class come from the sysfs attributes (read for a short config
        // space) and the bridge's link from the sysfs link attributes, as before.
        let header_only = kpath.ends_with("/config")
            && matches!(m.name().as_str(), "Truncate" | "Garbage")
            && std::fs::metadata(&file).is_ok_and(|md| md.len() <= 64);
        let Ok(undo) = apply(&file, kpath, m) else {
            return;
        };
        self.mutations += 1;
        let after = look(&self.tree);
        restore(&file, undo);
        self.judge(kpath, m, after, header_only);
    }

    fn judge(&mut self, kpath: &str, m: &Mutation, after: Option<Seen>, header_only: bool) {
        // gpudoctor refused the tree (exit 2 with a message): nothing passed.
        let Some(after) = after else { return };
        let kind = kind_of(kpath);
        let before = &self.before;
        let mut found = Vec::new();
        for (key, v) in &after.verdicts {
            if v.status == "pass" && before.verdicts.get(key).is_some_and(|b| b.status != "pass") {
                found.push(format!(
                    "{} {} became pass (was {})",
                    key.0, key.1, before.verdicts[key].status
                ));
            }
        }
        if rank(&after.gated) < rank(&before.gated) {
            found.push(format!(
                "the verdict under --fail-on-skip improved: {} -> {}",
                before.gated, after.gated
            ));
        }
        for (key, v) in &before.verdicts {
            if !matches!(v.status.as_str(), "fail" | "warn") {
                continue;
            }
            let kept = match after.verdicts.get(key) {
                Some(a) => a.holds_a_fault(),
                // The subject is gone: the check must say it could not judge something.
                None => after
                    .verdicts
                    .iter()
                    .any(|((id, _), a)| *id == key.0 && a.holds_a_fault()),
            };
            if !kept {
                found.push(format!(
                    "{} {} was {}, now {} without an unknown skip in its place",
                    key.0,
                    key.1,
                    v.status,
                    after.verdicts.get(key).map_or_else(
                        || "gone".to_string(),
                        |a| format!("{} {}", a.status, a.skip)
                    )
                ));
            }
        }
        // Damage is never a reason for nothing to judge: a subject that was judged (or could
        // not be) does not become not applicable.
        for (key, v) in &after.verdicts {
            if v.skip == "not-applicable"
                && before
                    .verdicts
                    .get(key)
                    .is_some_and(|b| b.status != "skip" || b.skip != "not-applicable")
            {
                found.push(format!(
                    "{} {} became not applicable (was {} {})",
                    key.0, key.1, before.verdicts[key].status, before.verdicts[key].skip
                ));
            }
        }
        // A pass never rests on a damaged file: a check that still passes after the file it
        // cites was garbled or emptied, and still cites it, judged garbage (an
        // empty /proc/driver/nvidia/version passed driver.nvidia-loaded).
        if matches!(m, Mutation::Garbage | Mutation::Truncate) && !header_only {
            for (key, v) in &after.verdicts {
                let cited = |x: &Verdict| x.sources.iter().any(|s| s == kpath);
                if v.status == "pass"
                    && cited(v)
                    && before
                        .verdicts
                        .get(key)
                        .is_some_and(|b| b.status == "pass" && cited(b))
                    && !PASS_ON_DAMAGE_OK.iter().any(|(tree, k, how, id, _)| {
                        (*tree == "*" || *tree == self.tree_name)
                            && *k == kind
                            && how.contains(&m.name().as_str())
                            && *id == key.0
                    })
                {
                    found.push(format!(
                        "{} {} still passes on the damaged file it cites",
                        key.0, key.1
                    ));
                }
            }
        }
        if self.faulty() && after.gated != "fail" {
            found.push(format!(
                "a faulty tree exits 0 under --fail-on-skip (verdict {})",
                after.gated
            ));
        }
        // A field dropped from nvml.json or libs.json that nothing reads (a serial number, an
        // index where sysfs names the GPU) legitimately changes nothing; the rules above still
        // hold for every dropped field.
        if after.whole == before.whole
            && judged_from(before, kpath)
            && !header_only
            && !m.name().starts_with("DropField")
            && !UNCHANGED_OK
                .iter()
                .any(|(k, how, _)| *k == kind && *how == m.name())
        {
            found.push(format!("damage changed nothing (kind {kind})"));
        }
        for f in found {
            self.failures
                .push(format!("{}: {} {kpath}: {f}", self.tree_name, m.name()));
        }
    }

    /// Every field of `nvml.json` and `libs.json` removed in turn (at every level, through the
    /// first element of each list: the first GPU, its first NVLink, the first P2P pair, every
    /// library and symbol), then each document removed, truncated and garbled.
    fn documents(&mut self) {
        for doc in ["nvml.json", "libs.json"] {
            let Ok(bytes) = std::fs::read(self.tree.join(doc)) else {
                continue;
            };
            let Ok(v) = serde_json::from_slice::<Value>(&bytes) else {
                continue;
            };
            let mut pointers = Vec::new();
            fields(&v, "", &mut pointers, 0);
            for p in pointers {
                self.damage(doc, &Mutation::DropField(p));
            }
            for m in [Mutation::Remove, Mutation::Truncate, Mutation::Garbage] {
                self.damage(doc, &m);
            }
        }
    }
}

/// JSON pointers worth removing: every key of an object, recursing into the first element of
/// arrays and into objects, six levels deep at most.
fn fields(v: &Value, at: &str, out: &mut Vec<String>, depth: usize) {
    if depth > 5 {
        return;
    }
    match v {
        Value::Object(o) => {
            for (k, x) in o {
                let p = format!("{at}/{k}");
                if p != "/schema" {
                    out.push(p.clone());
                }
                fields(x, &p, out, depth + 1);
            }
        }
        Value::Array(a) => {
            if let Some(x) = a.first() {
                fields(x, &format!("{at}/0"), out, depth + 1);
            }
        }
        _ => {}
    }
}

fn drop_field(v: &mut Value, pointer: &str) -> bool {
    let (parent, key) = pointer.rsplit_once('/').unwrap_or(("", pointer));
    match v.pointer_mut(parent) {
        Some(Value::Object(o)) => o.remove(key).is_some(),
        _ => false,
    }
}

/// Damage `file` (the path in the tree of `kpath`) with `m`; Err when this damage does not apply
/// to what is there (a link mutation on a file, ...).
fn apply(file: &Path, kpath: &str, m: &Mutation) -> Result<Undo, ()> {
    let meta = std::fs::symlink_metadata(file).map_err(|_| ())?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(file).map_err(|_| ())?;
        let new = match m {
            Mutation::Remove => None,
            Mutation::LinkLoop => Some(PathBuf::from(file.file_name().ok_or(())?)),
            // Far enough up to leave any tree, then somewhere real.
            Mutation::LinkOut => Some(PathBuf::from(format!("{}etc", "../".repeat(24)))),
            _ => return Err(()),
        };
        std::fs::remove_file(file).map_err(|_| ())?;
        if let Some(t) = new {
            std::os::unix::fs::symlink(t, file).map_err(|_| ())?;
        }
        return Ok(Undo::Link(target));
    }
    if meta.is_dir() {
        if !matches!(m, Mutation::Unlistable) {
            return Err(());
        }
        let away = file.with_extension("audit-away");
        std::fs::rename(file, &away).map_err(|_| ())?;
        std::fs::write(file, b"\xff garbage, not a directory\n").map_err(|_| ())?;
        return Ok(Undo::Dir(away));
    }
    let original = std::fs::read(file).map_err(|_| ())?;
    match m {
        Mutation::Remove => std::fs::remove_file(file).map_err(|_| ())?,
        Mutation::Garbage => {
            std::fs::write(file, b"\xff\xfe garbage \x00\x01 ~~~\n").map_err(|_| ())?
        }
        Mutation::Truncate => {
            let keep = if kpath.ends_with("/config") {
                original.len().min(48)
            } else if kpath.ends_with(".json") {
                original.len() / 2
            } else {
                0
            };
            std::fs::write(file, &original[..keep]).map_err(|_| ())?
        }
        Mutation::DropField(p) => {
            let mut v: Value = serde_json::from_slice(&original).map_err(|_| ())?;
            if !drop_field(&mut v, p) {
                return Err(());
            }
            std::fs::write(file, serde_json::to_vec_pretty(&v).map_err(|_| ())?).map_err(|_| ())?
        }
        _ => return Err(()),
    }
    Ok(Undo::File(original))
}

fn restore(file: &Path, undo: Undo) {
    match undo {
        Undo::File(b) => std::fs::write(file, b).unwrap(),
        Undo::Link(t) => {
            let _ = std::fs::remove_file(file);
            std::os::unix::fs::symlink(t, file).unwrap();
        }
        Undo::Dir(away) => {
            std::fs::remove_file(file).unwrap();
            std::fs::rename(away, file).unwrap();
        }
    }
}

/// A copy of `src` (a fixture directory) under `tmp`.
fn copy(src: &Path, tmp: &Path, n: &str) -> PathBuf {
    let tree = tmp.join(n);
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success());
    tree
}

/// What the audit found, less the known defects of other branches (those of `audit`); a known
/// defect that no longer shows is a failure too (empty the list).
fn report(audit: &str, mutations: usize, failures: Vec<String>, at_least: usize) {
    eprintln!("audit: {mutations} mutations");
    assert!(
        mutations >= at_least,
        "the audit must damage a real number of things: {mutations}"
    );
    let known: Vec<String> = KNOWN_DEFECTS
        .iter()
        .filter(|k| k.0 == audit)
        .map(|k| format!("{}: {} {}: ", k.1, k.2, k.3))
        .collect();
    let mut problems: Vec<String> = failures
        .iter()
        .filter(|f| !known.iter().any(|k| f.starts_with(k.as_str())))
        .cloned()
        .collect();
    for k in &known {
        let n = failures
            .iter()
            .filter(|f| f.starts_with(k.as_str()))
            .count();
        if n == 0 {
            problems.push(format!(
                "known defect no longer seen: remove ({audit}) '{k}' from KNOWN_DEFECTS"
            ));
        } else {
            eprintln!("audit: known defect of another branch, {n} findings: {k}");
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// Regular files, by kind: the damage of hostile trees, with the rules of unknown-is-never-pass.
#[test]
fn damage_never_creates_a_pass() {
    let mut mutations = 0;
    let mut failures = Vec::new();
    for fixture in fixture_dirs() {
        let n = name(&fixture);
        let tmp = tempfile::tempdir().unwrap();
        let tree = copy(&fixture, tmp.path(), &n);
        let mut a = Audit::new(n.clone(), tree.clone());
        // A few files of each kind, regular files inside the tree only.
        let mut per_kind: BTreeMap<String, usize> = BTreeMap::new();
        let mut chosen = Vec::new();
        for p in read_paths(&tree).0 {
            let file = tree.join(p.trim_start_matches('/'));
            let Ok(meta) = std::fs::symlink_metadata(&file) else {
                continue;
            };
            if !meta.is_file() {
                continue;
            }
            let k = per_kind.entry(kind_of(&p)).or_default();
            if *k < PER_KIND {
                *k += 1;
                chosen.push(p);
            }
        }
        let kinds: BTreeSet<String> = chosen.iter().map(|p| kind_of(p)).collect();
        for p in &chosen {
            for m in [Mutation::Remove, Mutation::Garbage, Mutation::Truncate] {
                a.damage(p, &m);
            }
        }
        eprintln!(
            "audit {n}: {} files of {} kinds damaged",
            chosen.len(),
            kinds.len()
        );
        mutations += a.mutations;
        failures.append(&mut a.failures);
    }
    report("files", mutations, failures, 300);
}

/// Symlinks (removed, looped, pointing out of the tree) and listed directories (a file in
/// their place), a few of each kind per tree.
#[test]
fn damaged_links_and_listings_never_create_a_pass() {
    let mut mutations = 0;
    let mut failures = Vec::new();
    for fixture in fixture_dirs() {
        let n = name(&fixture);
        let tmp = tempfile::tempdir().unwrap();
        let tree = copy(&fixture, tmp.path(), &n);
        let mut a = Audit::new(n.clone(), tree.clone());
        let (touched, listed) = read_paths(&tree);
        let mut per_kind: BTreeMap<String, usize> = BTreeMap::new();
        let mut links = Vec::new();
        for p in touched {
            let file = tree.join(p.trim_start_matches('/'));
            let Ok(meta) = std::fs::symlink_metadata(&file) else {
                continue;
            };
            if !meta.file_type().is_symlink() {
                continue;
            }
            let k = per_kind.entry(kind_of(&p)).or_default();
            if *k < PER_KIND {
                *k += 1;
                links.push(p);
            }
        }
        let mut dirs = Vec::new();
        for p in listed {
            let k = per_kind.entry(format!("dir {}", kind_of(&p))).or_default();
            if *k < 1 {
                *k += 1;
                dirs.push(p);
            }
        }
        for p in &links {
            for m in [Mutation::Remove, Mutation::LinkLoop, Mutation::LinkOut] {
                a.damage(p, &m);
            }
        }
        for p in &dirs {
            a.damage(p, &Mutation::Unlistable);
        }
        eprintln!(
            "audit {n}: {} links, {} listed directories damaged",
            links.len(),
            dirs.len()
        );
        mutations += a.mutations;
        failures.append(&mut a.failures);
    }
    report("links", mutations, failures, 150);
}

/// `nvml.json` and `libs.json`: removed, truncated, garbled, each field removed.
#[test]
fn damaged_documents_never_create_a_pass() {
    let mut mutations = 0;
    let mut failures = Vec::new();
    for fixture in fixture_dirs() {
        let n = name(&fixture);
        let tmp = tempfile::tempdir().unwrap();
        let tree = copy(&fixture, tmp.path(), &n);
        let mut a = Audit::new(n.clone(), tree);
        a.documents();
        mutations += a.mutations;
        failures.append(&mut a.failures);
    }
    report("documents", mutations, failures, 100);
}

/// The faulty variants (those that fail or warn intact): what each failure and warning was read
/// from (files, links, listings of the devices it names), and the documents, damaged;
/// `--fail-on-skip` must still fail where the intact tree fails.
#[test]
fn damaged_faulty_trees_still_fail() {
    let mut mutations = 0;
    let mut failures = Vec::new();
    let mut faulty = 0;
    for (n, _, dir) in variants() {
        let x = gpudoctor::bundle::read::extract(&dir.join("bundle.tar.gz")).unwrap();
        let tree = x.dir.path().to_path_buf();
        let mut a = Audit::new(n.clone(), tree.clone());
        if !matches!(a.before.status.as_str(), "fail" | "warn") {
            continue;
        }
        faulty += 1;
        // The failures and warnings, to find the paths and devices they name.
        let named: Vec<String> = {
            let v: Value = serde_json::from_str(&a.before.check).unwrap();
            v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|c| c["status"] == "fail" || c["status"] == "warn")
                .map(|c| c.to_string())
                .collect()
        };
        let (touched, listed) = read_paths(&tree);
        let mut per_kind: BTreeSet<String> = BTreeSet::new();
        let mut chosen = Vec::new();
        for p in touched.iter().chain(&listed) {
            let bdf = p
                .rsplit('/')
                .find(|seg| seg.parse::<gpudoctor::pci::Bdf>().is_ok());
            let relevant = named.iter().any(|f| {
                f.contains(p.as_str()) || bdf.is_some_and(|b| f.contains(&format!("\"{b}\"")))
            });
            if relevant && chosen.len() < PER_VARIANT && per_kind.insert(kind_of(p)) {
                chosen.push(p.clone());
            }
        }
        for p in &chosen {
            for m in [
                Mutation::Remove,
                Mutation::Garbage,
                Mutation::Truncate,
                Mutation::LinkLoop,
                Mutation::LinkOut,
                Mutation::Unlistable,
            ] {
                a.damage(p, &m);
            }
        }
        for doc in ["nvml.json", "libs.json"] {
            for m in [Mutation::Remove, Mutation::Truncate, Mutation::Garbage] {
                a.damage(doc, &m);
            }
        }
        eprintln!("audit {n}: {} paths damaged", chosen.len());
        mutations += a.mutations;
        failures.append(&mut a.failures);
    }
    assert!(faulty >= 15, "faulty variants audited: {faulty}");
    report("faulty", mutations, failures, 150);
}

/// What the pass-on-damage rule found: an NVRM version line that makes no sense
/// passed driver.nvidia-loaded, and a link layer that is neither InfiniBand nor Ethernet passed
/// rdma.port-state. Now the first passes only where the module lists show `nvidia`, else is
/// unknown; the second is unknown.
#[test]
fn garbled_driver_version_and_link_layer_are_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy(&crate::fixture_tree("hgx-h100-8gpu"), tmp.path(), "t");
    let finding = |id: &str, subject: &str| -> (String, String, String) {
        let spec = SourceSpec::Root(tree.clone());
        let source = Source::open(&spec).unwrap();
        let r = gpudoctor::run::check_report_from(&source, &CheckOptions::level0()).unwrap();
        let v = serde_json::to_value(&r).unwrap();
        let c = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id && c["subject"] == subject)
            .unwrap_or_else(|| panic!("{id} {subject}"))
            .clone();
        (
            c["status"].as_str().unwrap().to_string(),
            c["skip"].as_str().unwrap_or_default().to_string(),
            c["message"].as_str().unwrap().to_string(),
        )
    };
    let version = tree.join("proc/driver/nvidia/version");
    let modules = tree.join("proc/modules");
    std::fs::write(&version, "garbage\n").unwrap();
    let (status, _, message) = finding("driver.nvidia-loaded", "host");
    assert_eq!(status, "pass", "nvidia is in /proc/modules: {message}");
    assert!(message.contains("its version is unknown"), "{message}");
    // Neither list shows the module: unknown, never pass (and not "not loaded" either: the
    // version file is there).
    let listed = std::fs::read_to_string(&modules).unwrap();
    let without: String = listed
        .lines()
        .filter(|l| !l.starts_with("nvidia "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&modules, without).unwrap();
    let _ = std::fs::remove_dir_all(tree.join("sys/module/nvidia"));
    for garbled in ["garbage\n", ""] {
        std::fs::write(&version, garbled).unwrap();
        let (status, skip, message) = finding("driver.nvidia-loaded", "host");
        assert_eq!(
            (status.as_str(), skip.as_str()),
            ("skip", "unknown"),
            "{garbled:?}: {message}"
        );
    }
    // Absent, and no list shows it: not loaded.
    std::fs::remove_file(&version).unwrap();
    assert_eq!(finding("driver.nvidia-loaded", "host").0, "fail");
    let ll = tree.join("sys/class/infiniband/mlx5_0/ports/1/link_layer");
    for garbled in ["", "Infini\n"] {
        std::fs::write(&ll, garbled).unwrap();
        let (status, skip, message) = finding("rdma.port-state", "mlx5_0/1");
        assert_eq!(
            (status.as_str(), skip.as_str()),
            ("skip", "unknown"),
            "{garbled:?}: {message}"
        );
    }
}
