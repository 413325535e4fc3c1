//! The audit that damage never creates a pass (issue 13): for every recorded tree, every kind
//! of file gpudoctor reads from it is removed, filled with garbage and truncated, one at a
//! time, and the whole check pipeline runs again in-process. No (check, subject) that was not
//! `pass` may become `pass`, and the damage must show somewhere (a verdict, a message, an
//! unread note, the topology); a file whose damage legitimately changes nothing is named in
//! `UNCHANGED_OK` with the reason.
//!
//! Files are chosen per kind (the path with bus addresses, device names and numbers replaced),
//! a few of each kind per tree, in a fixed order: every parser sees every mutation on every
//! tree while the audit stays within a couple of minutes on 2 cores.

use crate::{fixture_dirs, name};
use gpudoctor::config::CheckOptions;
use gpudoctor::source::{Source, SourceSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// How many files of one kind are damaged per tree.
const PER_KIND: usize = 2;

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

#[derive(Clone, Copy, Debug)]
enum Mutation {
    Remove,
    Garbage,
    Truncate,
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

/// (check id, subject) -> (status, message), plus everything else a person would see.
struct Seen {
    verdicts: BTreeMap<(String, String), (String, String)>,
    /// The check report as JSON (what a verdict could depend on is named in it).
    check: String,
    whole: String,
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

fn look(dir: &Path) -> Option<Seen> {
    let spec = SourceSpec::Root(dir.to_path_buf());
    let source = Source::open(&spec).ok()?;
    let check = gpudoctor::run::check_report_from(&source, &CheckOptions::level0()).ok()?;
    let topo = gpudoctor::run::topo_report_from(&source).ok()?;
    let v = serde_json::to_value(&check).ok()?;
    let mut verdicts = BTreeMap::new();
    for c in v["checks"].as_array()? {
        verdicts.insert(
            (
                c["id"].as_str()?.to_string(),
                c["subject"].as_str()?.to_string(),
            ),
            (
                c["status"].as_str()?.to_string(),
                c["message"].as_str()?.to_string(),
            ),
        );
    }
    let check = serde_json::to_string(&check).ok()?;
    let whole = format!("{check}{}", serde_json::to_string(&topo).ok()?);
    Some(Seen {
        verdicts,
        check,
        whole,
    })
}

/// The kernel paths discovery and the checks read from `dir`.
fn read_paths(dir: &Path) -> Vec<String> {
    let source = Source::open(&SourceSpec::Root(dir.to_path_buf())).unwrap();
    gpudoctor::run::check_report_from(&source, &CheckOptions::level0()).unwrap();
    let mut v = source.sysroot.touched();
    v.sort();
    v
}

#[test]
fn damage_never_creates_a_pass() {
    let mut mutations = 0;
    let mut failures = Vec::new();
    for fixture in fixture_dirs() {
        let n = name(&fixture);
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join(&n);
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(&fixture)
            .arg(&tree)
            .status()
            .unwrap();
        assert!(st.success());
        let before = look(&tree).expect("the intact tree reads");
        // A few files of each kind, regular files inside the tree only.
        let mut per_kind: BTreeMap<String, usize> = BTreeMap::new();
        let mut chosen = Vec::new();
        for p in read_paths(&tree) {
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
                chosen.push((p, file));
            }
        }
        let mut seen_kinds = BTreeSet::new();
        for (p, file) in &chosen {
            seen_kinds.insert(kind_of(p));
            let original = std::fs::read(file).unwrap();
            for m in [Mutation::Remove, Mutation::Garbage, Mutation::Truncate] {
                match m {
                    Mutation::Remove => std::fs::remove_file(file).unwrap(),
                    Mutation::Garbage => {
                        std::fs::write(file, b"\xff\xfe garbage \x00\x01 ~~~\n").unwrap()
                    }
                    Mutation::Truncate => {
                        // Config space to 48 bytes (a cut-off header), text to nothing.
                        let keep = if p.ends_with("/config") {
                            original.len().min(48)
                        } else {
                            0
                        };
                        std::fs::write(file, &original[..keep]).unwrap()
                    }
                }
                mutations += 1;
                let after = look(&tree);
                std::fs::write(file, &original).unwrap();
                let Some(after) = after else {
                    // gpudoctor refused the tree (exit 2 with a message): nothing passed.
                    continue;
                };
                for (key, (status, _)) in &after.verdicts {
                    if status == "pass"
                        && before.verdicts.get(key).is_some_and(|(s, _)| s != "pass")
                    {
                        failures.push(format!(
                            "{n}: {m:?} {p}: {} {} became pass (was {})",
                            key.0, key.1, before.verdicts[key].0
                        ));
                    }
                }
                // A non-root recording's config is the 64-byte header alone (hwloc's tree): cut
                // to 48 bytes it loses the capability pointer to capabilities that were beyond
                // reach already, and the bridge's link comes from the sysfs attributes as before.
                let header_only = p.ends_with("/config")
                    && original.len() <= 64
                    && matches!(m, Mutation::Truncate);
                if after.whole == before.whole
                    && judged_from(&before, p)
                    && !header_only
                    && !UNCHANGED_OK
                        .iter()
                        .any(|(k, how, _)| *k == kind_of(p) && *how == format!("{m:?}"))
                {
                    failures.push(format!(
                        "{n}: {m:?} {p}: damage changed nothing (kind {})",
                        kind_of(p)
                    ));
                }
            }
        }
        eprintln!(
            "audit {n}: {} files of {} kinds damaged",
            chosen.len(),
            seen_kinds.len()
        );
    }
    eprintln!("audit: {mutations} mutations");
    assert!(
        mutations > 300,
        "the audit must damage a real number of files: {mutations}"
    );
    assert!(
        failures.is_empty(),
        "{} problems:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
