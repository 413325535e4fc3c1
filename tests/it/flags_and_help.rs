//! The first hour: flags that mean one thing, output that fits, explain for a
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
        &[
            "probe h2d",
            "probe d2h",
            "probe p2p",
            "probe dmabuf-export",
            "probe nccl",
        ],
    ),
    (
        "device",
        "the RDMA device",
        &["probe write-bw", "probe gpu-write-bw"],
    ),
    ("expect", "a baseline to compare with", &["check", "fleet"]),
    (
        "token",
        "the shared secret of a run across machines",
        &["probe write-bw", "probe nccl"],
    ),
    (
        "warmup",
        "untimed operations before the timed ones",
        &["probe h2d", "probe d2h", "probe p2p", "probe nccl"],
    ),
    (
        "format",
        "the output format",
        &[
            "explain",
            "check",
            "probe h2d",
            "probe d2h",
            "probe p2p",
            "probe dmabuf-export",
            "probe write-bw",
            "fleet",
            "diff",
            "topo",
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
            "probe nccl",
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
            "probe nccl",
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

/// No letter and no long name with two meanings across commands (`-q` was `--quiet`
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

/// Lines of `text` wider than `width` columns (characters; a tab counts 8).
fn too_wide(text: &str, width: usize) -> Vec<String> {
    text.lines()
        .filter(|l| {
            l.chars()
                .map(|c| if c == '\t' { 8 } else { 1 })
                .sum::<usize>()
                > width
        })
        .map(str::to_string)
        .collect()
}

/// Runs `gpudoctor ARGS` (COLUMNS set when given) and returns its stdout, any exit code but a
/// crash.
fn text_of(args: &[String], columns: Option<usize>) -> String {
    let mut c = gpudoctor();
    c.args(args);
    if let Some(n) = columns {
        c.env("COLUMNS", n.to_string());
    }
    let o = c.output().unwrap();
    assert!(o.status.code().is_some(), "{args:?} was killed");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Every command's text output keeps within 100 columns in a pipe and within COLUMNS=80 where
/// a width applies (check, topo, list, probes), on every fixture: check (default, --all,
/// --quiet), topo, topo --matrix (`--tsv`, nvidia-smi's own tab-separated layout for its
/// parsers, is a format for programs), list, explain of every id, diff of every fixture against the HGX
/// one (check reports and bundles), fleet over all of them, baseline and bundle summaries, the
/// probes' renderers on every recorded report and on this machine (skips), and the help of
/// every subcommand. Export (NCCL XML), JSON, Prometheus and JUnit are formats for programs and
/// are not measured.
#[test]
fn every_command_fits_the_width() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    let tmp = tempfile::tempdir().unwrap();
    let mut runs: Vec<(Vec<String>, Option<usize>, usize)> = Vec::new();
    let sources = crate::all_sources();
    let reports = tmp.path().join("reports");
    std::fs::create_dir(&reports).unwrap();
    for (name, src) in &sources {
        // The faulty variants differ from their base in findings: check's text is what varies.
        let variant = src[0] == "--bundle";
        for extra in [&[][..], &["--all"], &["--quiet"]] {
            let mut a = s(&["check"]);
            a.extend(src.iter().cloned());
            a.extend(s(extra));
            runs.push((a.clone(), None, 100));
            if !variant {
                runs.push((a, Some(80), 80));
            }
        }
        if variant {
            continue;
        }
        let mut topo = s(&["topo"]);
        topo.extend(src.iter().cloned());
        runs.push((topo.clone(), None, 100));
        runs.push((topo.clone(), Some(80), 80));
        topo.push("--matrix".into());
        runs.push((topo.clone(), None, 100));
        runs.push((topo, Some(80), 80));
        // A check report per fixture, for diff and fleet.
        let mut a = s(&["check", "--json"]);
        a.extend(src.iter().cloned());
        let json = text_of(&a, None);
        std::fs::write(reports.join(format!("{name}.check.json")), json).unwrap();
        let mut b = s(&["baseline", "-o"]);
        b.push(
            tmp.path()
                .join(format!("{name}.baseline.json"))
                .display()
                .to_string(),
        );
        b.extend(src.iter().cloned());
        runs.push((b, None, 100));
    }
    let hgx = reports
        .join("hgx-h100-8gpu.check.json")
        .display()
        .to_string();
    for (name, _) in sources.iter().filter(|(_, src)| src[0] == "--root") {
        let other = reports
            .join(format!("{name}.check.json"))
            .display()
            .to_string();
        runs.push((vec!["diff".into(), hgx.clone(), other], None, 100));
    }
    let bundles = [
        "fixtures/variants/hgx-h100-8gpu--acs-redirect/bundle.tar.gz",
        "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz",
    ];
    runs.push((s(&["diff", bundles[0], bundles[1]]), None, 100));
    runs.push((s(&["diff", bundles[0], bundles[1], "--all"]), None, 100));
    runs.push((
        vec!["fleet".into(), reports.display().to_string()],
        None,
        100,
    ));
    runs.push((s(&["list"]), None, 100));
    runs.push((s(&["list"]), Some(80), 80));
    for c in gpudoctor::checks::CATALOG {
        runs.push((s(&["explain", c.id.as_str()]), None, 100));
        runs.push((s(&["explain", c.id.as_str()]), Some(80), 80));
    }
    for probe in ["h2d", "d2h", "p2p", "dmabuf-export", "gpu-write-bw"] {
        runs.push((s(&["probe", probe]), None, 100));
        runs.push((s(&["probe", probe]), Some(80), 80));
    }
    runs.push((s(&["probe", "write-bw", "-d", "mlx5_0"]), None, 100));
    runs.push((
        s(&["bundle", "--root", "fixtures/hgx-h100-8gpu", "-o"])
            .into_iter()
            .chain([tmp.path().join("b.tar.gz").display().to_string()])
            .collect(),
        None,
        100,
    ));
    // The help of every command, at every depth.
    fn paths(c: &clap::Command, at: Vec<String>, out: &mut Vec<Vec<String>>) {
        out.push(at.clone());
        for sub in c.get_subcommands() {
            let mut p = at.clone();
            p.push(sub.get_name().to_string());
            paths(sub, p, out);
        }
    }
    let mut helps = Vec::new();
    paths(&gpudoctor::cli::command(), Vec::new(), &mut helps);
    for p in helps {
        let mut a = p.clone();
        a.push("--help".into());
        runs.push((a, None, 100));
    }
    let mut problems = Vec::new();
    for (args, columns, width) in &runs {
        let text = text_of(args, *columns);
        assert!(!text.contains('\t'), "{args:?}: a tab in text for people");
        for l in too_wide(&text, *width) {
            problems.push(format!(
                "{args:?} COLUMNS={columns:?}: {} > {width}: {l}",
                l.chars().count()
            ));
        }
    }
    // The probes' renderers on every recorded report (no GPU here).
    for (path, r) in crate::probes::recorded() {
        for (w, max) in [(None, 100), (Some(80), 80)] {
            let style = gpudoctor::render::Style {
                width: w,
                all_rows: false,
            };
            let text = gpudoctor::render::probe_table(&r, style);
            for l in too_wide(&text, max) {
                problems.push(format!(
                    "{}: {} > {max}: {l}",
                    path.display(),
                    l.chars().count()
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{} lines too wide:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `explain ID` reads as text in a terminal: no Markdown markers, headings underlined,
/// paragraphs wrapped to COLUMNS; `--format md` prints the document as written.
#[test]
fn explain_renders_for_a_terminal() {
    for c in gpudoctor::checks::CATALOG {
        let id = c.id.as_str();
        let text = text_of(&[String::from("explain"), id.into()], Some(72));
        for l in text.lines() {
            assert!(!l.starts_with('#'), "{id}: heading marker: {l}");
            assert!(
                !l.contains("**") && !l.contains('`'),
                "{id}: inline marker: {l}"
            );
        }
        assert!(
            too_wide(&text, 72).is_empty(),
            "{id}: {:?}",
            too_wide(&text, 72)
        );
        assert!(
            text.contains("\nWhy it matters\n--------------\n"),
            "{id}:\n{text}"
        );
        let md = text_of(
            &["explain".into(), id.into(), "--format".into(), "md".into()],
            Some(72),
        );
        assert!(
            md.contains("## Why it matters"),
            "{id}: --format md is the document"
        );
        assert!(
            md.contains(c.doc.trim()),
            "{id}: --format md is the document as written"
        );
    }
    // A list item keeps its marker and hangs its continuation under its text.
    let t = text_of(&["explain".into(), "pcie.acs-redirect".into()], Some(60));
    let item = t
        .lines()
        .position(|l| l.starts_with("  - Bridges judged:"))
        .expect(&t);
    assert!(t.lines().nth(item + 1).unwrap().starts_with("    "), "{t}");
    // Code stays indented by 4, as written.
    assert!(t.contains("\n    nvidia-smi topo -m\n"), "{t}");
}

/// `gpudoctor man DIR` (documented in --help and the README) writes one page per command at
/// every depth, and says how many.
#[test]
fn man_writes_a_page_per_command() {
    let help = text_of(&["--help".into()], None);
    assert!(
        help.lines().any(|l| l.trim_start().starts_with("man ")),
        "{help}"
    );
    let readme = std::fs::read_to_string(crate::repo().join("README.md")).unwrap();
    assert!(readme.contains("gpudoctor man /usr/local/share/man/man1"));
    let tmp = tempfile::tempdir().unwrap();
    let out = text_of(&["man".into(), tmp.path().display().to_string()], None);
    fn pages(c: &clap::Command, name: &str, out: &mut Vec<String>) {
        out.push(format!("{name}.1"));
        for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(s, &format!("{name}-{}", s.get_name()), out);
        }
    }
    let mut want = Vec::new();
    pages(&gpudoctor::cli::command(), "gpudoctor", &mut want);
    want.sort();
    let mut got: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    assert_eq!(got, want);
    for p in [
        "gpudoctor-check.1",
        "gpudoctor-probe-write-bw.1",
        "gpudoctor-explain.1",
    ] {
        assert!(want.iter().any(|w| w == p), "{p}");
    }
    assert!(
        out.starts_with(&format!("wrote {} man pages into ", want.len())),
        "{out}"
    );
}

/// Completions offer the check ids after `explain` and for --skip/--warn/--deny (bash, zsh,
/// fish); bash's completion function, sourced in bash, completes `explain pcie.` to the pcie
/// checks.
#[test]
fn completions_offer_check_ids() {
    let ids: Vec<&str> = gpudoctor::checks::CATALOG
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    for shell in ["bash", "zsh", "fish"] {
        let script = text_of(&["completions".into(), shell.into()], None);
        for id in &ids {
            assert!(script.contains(id), "{shell}: {id} not offered");
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("gpudoctor.bash");
    std::fs::write(&path, text_of(&["completions".into(), "bash".into()], None)).unwrap();
    let complete = |words: &[&str]| -> Option<Vec<String>> {
        let line = words.join(" ");
        let script = format!(
            "source {}; COMP_WORDS=({line}); COMP_CWORD={}; COMP_LINE='{line}'; \
             COMP_POINT=${{#COMP_LINE}}; _gpudoctor gpudoctor {} {}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path.display(),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let o = std::process::Command::new("bash")
            .args(["--norc", "-c", &script])
            .output()
            .ok()?;
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Some(
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect(),
        )
    };
    let Some(got) = complete(&["gpudoctor", "explain", "pcie."]) else {
        eprintln!("bash not installed: the sourced completion is not exercised");
        return;
    };
    let want: Vec<String> = ids
        .iter()
        .filter(|i| i.starts_with("pcie."))
        .map(|i| i.to_string())
        .collect();
    assert!(!want.is_empty());
    assert_eq!(got, want);
    let got = complete(&["gpudoctor", "check", "--skip", "gdr.p"]).unwrap();
    let want: Vec<String> = ids
        .iter()
        .filter(|i| i.starts_with("gdr.p"))
        .map(|i| i.to_string())
        .collect();
    assert_eq!(got, want);
}

/// The README's setup paragraph names every package scripts/test and vm/build.sh install, and
/// both install them without recommends (a bare Debian 12 must get everything the
/// tests need from `./scripts/test` alone).
#[test]
fn readme_setup_names_what_scripts_test_installs() {
    let repo = crate::repo();
    let test = std::fs::read_to_string(repo.join("scripts/test")).unwrap();
    let vm = std::fs::read_to_string(repo.join("vm/build.sh")).unwrap();
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let setup = &readme[readme.find("## Quick start").unwrap()..readme.find("## Usage").unwrap()];
    let mut pkgs: Vec<String> = Vec::new();
    for part in test.split("need_pkgs+=(").skip(1) {
        let list = &part[..part.find(')').unwrap()];
        pkgs.extend(list.split_whitespace().map(str::to_string));
    }
    let vm_list = vm.split("PKGS=\"").nth(1).unwrap();
    let vm_pkgs: Vec<&str> = vm_list[..vm_list.find('"').unwrap()]
        .split_whitespace()
        .collect();
    assert!(
        pkgs.len() >= 15 && vm_pkgs.len() >= 8,
        "{pkgs:?} {vm_pkgs:?}"
    );
    for p in [
        "ca-certificates",
        "gcc",
        "libc6-dev",
        "g++",
        "python3",
        "python3-pip",
        "python3-venv",
    ] {
        assert!(
            pkgs.iter().any(|x| x == p),
            "scripts/test installs {p} on a bare Debian 12"
        );
    }
    for p in &pkgs {
        assert!(
            setup.contains(p.as_str()),
            "README's setup lines do not name {p}"
        );
    }
    // vm/build.sh's packages: named in the README, rdma-core's userspace as such.
    for p in vm_pkgs {
        let named = match p {
            "libibverbs-dev" | "ibverbs-providers" | "ibverbs-utils" => "rdma-core's userspace",
            "qemu-system-x86" => "QEMU",
            p => p,
        };
        assert!(
            setup.contains(named),
            "README's setup lines do not name {p} ({named})"
        );
    }
    for script in [&test, &vm] {
        for l in script.lines().filter(|l| l.contains("apt-get install")) {
            assert!(l.contains("--no-install-recommends"), "{l}");
        }
    }
}
