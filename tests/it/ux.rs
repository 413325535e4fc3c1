//! Issue 26, the first hour: flags that mean one thing, output that fits, explain for a
//! terminal, man pages and completions, README examples that cannot drift.

use crate::gpudoctor;
use std::collections::{BTreeMap, BTreeSet};

/// Every option in the command tree: (command path without "gpudoctor", long names, short
/// letters, help text). Aliases, hidden ones included, count as spellings.
fn options() -> Vec<(String, Vec<String>, Vec<char>, String)> {
    fn walk(
        c: &clap::Command,
        path: &str,
        out: &mut Vec<(String, Vec<String>, Vec<char>, String)>,
    ) {
        for a in c.get_arguments() {
            let mut longs: Vec<String> = a.get_long().into_iter().map(str::to_string).collect();
            longs.extend(
                a.get_all_aliases()
                    .unwrap_or_default()
                    .iter()
                    .map(|s| s.to_string()),
            );
            let mut shorts: Vec<char> = a.get_short().into_iter().collect();
            shorts.extend(a.get_all_short_aliases().unwrap_or_default());
            if longs.is_empty() && shorts.is_empty() {
                continue;
            }
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            out.push((path.trim().to_string(), longs, shorts, help));
        }
        for s in c.get_subcommands() {
            walk(s, &format!("{path} {}", s.get_name()), out);
        }
    }
    let mut v = Vec::new();
    walk(&gpudoctor::cli::command(), "", &mut v);
    v
}

/// Long names that several commands define with different help texts (an option flattened
/// from one struct has one text and so one meaning), each with its one meaning and the commands
/// allowed to use it. A new use of one of these names, or a new name shared with a different
/// text, fails `flags_mean_one_thing` until it is added here: say what it means first.
const SHARED: &[(&str, &str, &[&str])] = &[
    ("all", "also list what passed", &["check", "diff"]),
    (
        "deadline",
        "give up after SECONDS",
        &["probe h2d", "probe d2h", "probe p2p", "probe dmabuf-export"],
    ),
    (
        "device",
        "the RDMA device",
        &["probe write-bw", "probe gpu-write-bw"],
    ),
    ("expect", "a baseline to compare with", &["check", "fleet"]),
    (
        "format",
        "the output format",
        &[
            "check",
            "probe h2d",
            "probe d2h",
            "probe p2p",
            "probe dmabuf-export",
            "probe write-bw",
            "fleet",
        ],
    ),
    (
        "gpu",
        "which GPU (GPU<N> as topo labels it)",
        &[
            "probe h2d",
            "probe d2h",
            "probe p2p",
            "probe dmabuf-export",
            "probe write-bw",
            "probe gpu-write-bw",
        ],
    ),
    (
        "iters",
        "iterations per measurement",
        &[
            "probe h2d",
            "probe d2h",
            "probe p2p",
            "probe write-bw",
            "probe gpu-write-bw",
        ],
    ),
    (
        "json",
        "print one JSON document",
        &[
            "topo",
            "check",
            "list",
            "probe h2d",
            "probe d2h",
            "probe p2p",
            "probe dmabuf-export",
            "probe write-bw",
            "probe gpu-write-bw",
            "fleet",
            "diff",
        ],
    ),
    ("level", "how far to probe", &["check", "baseline"]),
    (
        "output",
        "the file to write",
        &["bundle", "baseline", "export nccl-topo"],
    ),
    (
        "port",
        "the RDMA port number",
        &["probe write-bw", "probe gpu-write-bw"],
    ),
    (
        "sizes",
        "message sizes in bytes",
        &["probe write-bw", "probe gpu-write-bw"],
    ),
];

/// No letter and no long name with two meanings across commands (issue 26: `-q` was `--quiet`
/// in check and `--qps` in write-bw; `--all` listed passes in check and swept sizes in
/// write-bw).
#[test]
fn flags_mean_one_thing() {
    let opts = options();
    // A short letter stands for one long name everywhere.
    let mut by_short: BTreeMap<char, BTreeSet<String>> = BTreeMap::new();
    for (path, longs, shorts, _) in &opts {
        for s in shorts {
            let long = longs
                .first()
                .cloned()
                .unwrap_or_else(|| format!("(none, in {path})"));
            by_short.entry(*s).or_default().insert(long);
        }
    }
    let mut problems: Vec<String> = by_short
        .iter()
        .filter(|(_, l)| l.len() > 1)
        .map(|(s, l)| format!("-{s} means {l:?}"))
        .collect();
    // A long name (or alias) with different help texts is in SHARED, used by exactly its commands.
    let mut by_long: BTreeMap<&str, (BTreeSet<&str>, BTreeSet<&str>)> = BTreeMap::new();
    for (path, longs, _, help) in &opts {
        for l in longs {
            let e = by_long.entry(l.as_str()).or_default();
            e.0.insert(path.as_str());
            e.1.insert(help.as_str());
        }
    }
    for (long, (paths, helps)) in &by_long {
        let shared = SHARED.iter().find(|(n, _, _)| n == long);
        match shared {
            None if helps.len() > 1 => problems.push(format!(
                "--{long} is defined with {} help texts in {paths:?}: one meaning? add it to SHARED",
                helps.len()
            )),
            Some((_, meaning, allowed)) => {
                let allowed: BTreeSet<&str> = allowed.iter().copied().collect();
                if *paths != allowed {
                    problems.push(format!(
                        "--{long} ({meaning}) is used by {paths:?}, SHARED allows {allowed:?}"
                    ));
                }
            }
            None => {}
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

/// The renamed write-bw options parse, and the old spellings are refused (no alias that would
/// read as check's meaning).
#[test]
fn write_bw_all_sizes_and_qps() {
    let parse = |args: &[&str]| {
        gpudoctor::cli::command()
            .try_get_matches_from(
                ["gpudoctor", "probe", "write-bw", "-d", "mlx5_0"]
                    .iter()
                    .chain(args),
            )
            .is_ok()
    };
    assert!(parse(&["--all-sizes", "--qps", "2"]));
    assert!(parse(&["-a"]));
    assert!(!parse(&["--all"]));
    assert!(!parse(&["-q", "2"]));
    let o = gpudoctor()
        .args(["probe", "write-bw", "-d", "mlx5_0", "--all"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("gpudoctor: error: "), "{err}");
    assert!(
        err.contains("--all-sizes"),
        "clap suggests the new name: {err}"
    );
}
