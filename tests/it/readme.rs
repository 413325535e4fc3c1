//! The examples in README.md and docs/*.md are real runs, checked here so that they cannot drift.
//!
//! Two kinds of marker precede an indented block in those pages:
//!
//! - `<!-- gpudoctor-example: ARGS [| OPTIONS] -->`: the block is `$ gpudoctor ARGS` and what it
//!   prints, run here by `readme_examples_are_real_runs` through `sh -c` in the repository (so
//!   `> $OUT/report.json` works). `ARGS` starting with `sh: ` is another command (`cat`, `grep`).
//!   Consecutive markers make one block; they share one scratch directory, `$OUT`, so a later
//!   command reads what an earlier one wrote (a baseline, a report, a textfile).
//! - `<!-- gpudoctor-output: ID [| OPTIONS] -->`: the block is what a test printed for inputs it
//!   built itself (twelve fleet nodes, scaled probe reports): the test calls [`show`] with ID,
//!   so the test that asserts the behaviour is the one that shows it. `readme_blocks_are_owned`
//!   fails on a marker no test shows, and [`show`] on an ID with no marker.
//!
//! OPTIONS cut a long output: `head=N tail=M` keep the first/last lines with a `...` line
//! between; `para=Word,Word` keeps the paragraphs (blank-line separated) whose first line starts
//! with one of the words, `...` standing for what was left out; `lines=N` keeps the first N lines
//! of each paragraph kept. A run that exits non-zero shows `# exit N` after its command. Only
//! durations ("in 1234 ms") and the textfile's run timestamp are normalised when comparing; the
//! page shows the values of the run that wrote it.
//!
//! After a deliberate change: `UPDATE_README=1 cargo nextest run -E 'test(/readme/) |
//! test(/^fleet::/)'` (the owners of output blocks) rewrites the blocks (under a lock on the page:
//! the tests run as parallel processes); read the diff.

use std::path::{Path, PathBuf};

/// The pages whose marked blocks are checked: README.md, then docs/*.md in name order.
fn pages() -> Vec<PathBuf> {
    let repo = crate::repo();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    let mut out = vec![repo.join("README.md")];
    out.extend(docs);
    out
}

/// A page's name in messages: its path in the repository.
fn name_of(path: &Path) -> String {
    path.strip_prefix(crate::repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

const EXAMPLE: &str = "<!-- gpudoctor-example: ";
/// The page whose `## Synopsis` block names every command and flag.
const USAGE_PAGE: &str = "docs/usage.md";
const OUTPUT: &str = "<!-- gpudoctor-output: ";

/// One command shown in the README and what it printed (stdout, then stderr).
pub struct Shown {
    pub command: String,
    pub output: String,
    pub code: i32,
}

/// Run `gpudoctor ARGS` (split on whitespace) in `cwd`, as the README will show it: the test
/// builds its inputs under `cwd` with the names the README uses (`nodes/`, `h200-sku.json`).
/// Where the output names `cwd` itself, the README reads `.`.
pub fn run(cwd: &Path, args: &str) -> Shown {
    let o = crate::gpudoctor()
        .current_dir(cwd)
        .args(args.split_whitespace())
        .output()
        .unwrap();
    let mut output = String::from_utf8_lossy(&o.stdout).into_owned();
    output.push_str(&String::from_utf8_lossy(&o.stderr));
    let at = cwd.display().to_string();
    let output = output
        .replace(&format!("{at}/"), "")
        .replace(at.as_str(), ".");
    Shown {
        command: format!("gpudoctor {args}"),
        output,
        code: o.status.code().unwrap_or(-1),
    }
}

/// Check (or with UPDATE_README=1 rewrite) the README block after `<!-- gpudoctor-output: ID -->`
/// against `runs`.
pub fn show(id: &str, runs: &[Shown]) {
    // The marker is `<!-- gpudoctor-output: ID -->` or `<!-- gpudoctor-output: ID | OPTIONS -->`.
    let marks = |l: &str| {
        l.strip_prefix(OUTPUT)
            .and_then(|r| r.strip_prefix(id))
            .is_some_and(|r| r.starts_with(' '))
    };
    let page = pages()
        .into_iter()
        .find(|p| std::fs::read_to_string(p).unwrap().lines().any(marks))
        .unwrap_or_else(|| {
            panic!("no page (README.md, docs/*.md) has a `{OUTPUT}{id} -->` marker")
        });
    with_page(&page, |name, lines| {
        let markers = parse(name, lines);
        let m = markers
            .iter()
            .find(|m| matches!(&m.kind, Kind::Output(i) if i == id))
            .unwrap_or_else(|| panic!("{name} has no `{OUTPUT}{id} -->` marker"));
        let want: Vec<String> = runs
            .iter()
            .flat_map(|r| render(&r.command, &r.output, r.code, &m.cut[0]))
            .collect();
        vec![(m.block.clone(), want)]
    });
}

enum Kind {
    /// The commands of consecutive example markers, each with its own cut.
    Example(Vec<String>),
    Output(String),
}

#[derive(Default, Clone)]
struct Cut {
    head: Option<usize>,
    tail: Option<usize>,
    para: Vec<String>,
    lines: Option<usize>,
}

struct Marker {
    kind: Kind,
    /// One per command (examples) or one for all (outputs).
    cut: Vec<Cut>,
    /// 1-based line of the (first) marker, for messages.
    line: usize,
    /// Line range of the indented block (start inclusive, end exclusive).
    block: std::ops::Range<usize>,
}

/// `spec` is `COMMAND` or `COMMAND | k=v k=v`: the tail is options only when every word of it is
/// a known option (a shell command may hold a `|` of its own).
fn split_options(name: &str, spec: &str, line: usize) -> (String, Cut) {
    let mut cut = Cut::default();
    let Some((cmd, opts)) = spec.rsplit_once(" | ") else {
        return (spec.trim().to_string(), cut);
    };
    let known = opts.split_whitespace().all(|w| {
        w.split_once('=')
            .is_some_and(|(k, _)| ["head", "tail", "para", "lines"].contains(&k))
    });
    if !known {
        return (spec.trim().to_string(), cut);
    }
    for w in opts.split_whitespace() {
        let (k, v) = w.split_once('=').unwrap();
        let n = || {
            v.parse::<usize>()
                .unwrap_or_else(|_| panic!("{name}:{line}: {k}={v} is not a number"))
        };
        match k {
            "head" => cut.head = Some(n()),
            "tail" => cut.tail = Some(n()),
            "lines" => cut.lines = Some(n()),
            _ => cut.para = v.split(',').map(str::to_string).collect(),
        }
    }
    (cmd.trim().to_string(), cut)
}

fn parse(name: &str, lines: &[&str]) -> Vec<Marker> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let is_example = lines[i].starts_with(EXAMPLE);
        if !is_example && !lines[i].starts_with(OUTPUT) {
            i += 1;
            continue;
        }
        let first = i + 1;
        let prefix = if is_example { EXAMPLE } else { OUTPUT };
        let mut cmds = Vec::new();
        let mut cuts = Vec::new();
        while i < lines.len() && lines[i].starts_with(prefix) {
            let spec = lines[i][prefix.len()..]
                .strip_suffix(" -->")
                .unwrap_or_else(|| panic!("{name}:{}: marker not closed by ' -->'", i + 1));
            let (cmd, cut) = split_options(name, spec, i + 1);
            cmds.push(cmd);
            cuts.push(cut);
            i += 1;
            if !is_example {
                break;
            }
        }
        assert!(
            lines.get(i).is_some_and(|l| l.is_empty()),
            "{name}:{}: a blank line must follow the markers",
            i + 1
        );
        i += 1;
        let start = i;
        while i < lines.len() && (lines[i].starts_with("    ") || lines[i].is_empty()) {
            i += 1;
        }
        let mut end = i;
        while end > start && lines[end - 1].is_empty() {
            end -= 1;
        }
        assert!(
            end > start,
            "{name}:{start}: no indented block after the markers"
        );
        let kind = if is_example {
            Kind::Example(cmds)
        } else {
            Kind::Output(cmds.remove(0))
        };
        out.push(Marker {
            kind,
            cut: cuts,
            line: first,
            block: start..end,
        });
    }
    out
}

/// Durations vary from run to run: "in 1234 ms" reads "in N ms" on both sides; so does the
/// textfile's run timestamp, and the source revision the binary was built from (every commit
/// has its own).
fn normalise(line: &str) -> String {
    if let Some(rest) = line.strip_prefix("gpudoctor_last_run_timestamp_seconds ")
        && rest.chars().all(|c| c.is_ascii_digit())
    {
        return "gpudoctor_last_run_timestamp_seconds N".to_string();
    }
    let line = revision_free(line);
    duration_free(&line).unwrap_or(line)
}

/// `revision="abc"`, `"gpudoctor_revision": "abc"` and `(revision abc)` read `REV`.
fn revision_free(line: &str) -> String {
    let mut out = line.to_string();
    for (open, close) in [
        ("revision=\"", '"'),
        ("\"gpudoctor_revision\": \"", '"'),
        ("(revision ", ')'),
    ] {
        if let Some(at) = out.find(open) {
            let from = at + open.len();
            if let Some(len) = out[from..].find(close) {
                out.replace_range(from..from + len, "REV");
            }
        }
    }
    out
}

fn duration_free(line: &str) -> Option<String> {
    let at = line.find(" in ")?;
    let rest = &line[at + 4..];
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    (digits > 0 && rest[digits..].starts_with(" ms"))
        .then(|| format!("{} in N ms{}", &line[..at], &rest[digits + 3..]))
}

/// The paragraphs kept so far end in a `...` line already.
fn ends_cut(kept: &[Vec<String>]) -> bool {
    kept.last()
        .and_then(|p| p.last())
        .is_some_and(|l| l == "...")
}

/// `lines` cut as `cut` says.
fn apply_cut(lines: Vec<String>, cut: &Cut) -> Vec<String> {
    let mut lines = lines;
    if !cut.para.is_empty() || cut.lines.is_some() {
        let mut paras: Vec<Vec<String>> = vec![Vec::new()];
        for l in lines {
            if l.is_empty() {
                if !paras.last().unwrap().is_empty() {
                    paras.push(Vec::new());
                }
            } else {
                paras.last_mut().unwrap().push(l);
            }
        }
        paras.retain(|p| !p.is_empty());
        let mut kept: Vec<Vec<String>> = Vec::new();
        let mut dropped = false;
        for mut p in paras {
            let wanted = cut.para.is_empty()
                || cut
                    .para
                    .iter()
                    .any(|w| p[0].trim_start().starts_with(w.as_str()));
            if !wanted {
                dropped = true;
                continue;
            }
            if dropped && !ends_cut(&kept) {
                kept.push(vec!["...".to_string()]);
            }
            dropped = false;
            if let Some(n) = cut.lines
                && p.len() > n
            {
                p.truncate(n);
                p.push("...".to_string());
            }
            kept.push(p);
        }
        if dropped && !ends_cut(&kept) {
            kept.push(vec!["...".to_string()]);
        }
        lines = kept.join(&String::new());
    }
    let (h, t) = (cut.head.unwrap_or(lines.len()), cut.tail.unwrap_or(0));
    if h + t < lines.len() {
        let mut out = lines[..h].to_vec();
        out.push("...".to_string());
        out.extend(lines[lines.len() - t..].iter().cloned());
        lines = out;
    }
    lines
}

/// A command's lines in the block: `$ COMMAND` (with `# exit N` when it failed), then its
/// output cut.
fn render(command: &str, output: &str, code: i32, cut: &Cut) -> Vec<String> {
    let mut out = vec![if code == 0 {
        format!("$ {command}")
    } else {
        format!("$ {command}    # exit {code}")
    }];
    let lines: Vec<String> = output.lines().map(str::to_string).collect();
    out.extend(apply_cut(lines, cut));
    while out.last().is_some_and(|l| l.is_empty()) {
        out.pop();
    }
    out
}

/// Run an example's commands in the repository, in one scratch directory `$OUT`.
fn run_example(cmds: &[String], cuts: &[Cut]) -> Vec<String> {
    let out_dir = tempfile::tempdir().unwrap();
    let bin = assert_cmd::cargo::cargo_bin("gpudoctor");
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut want = Vec::new();
    for (cmd, cut) in cmds.iter().zip(cuts) {
        let shown = match cmd.strip_prefix("sh: ") {
            Some(c) => c.to_string(),
            None => format!("gpudoctor {cmd}"),
        };
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(&shown)
            .current_dir(crate::repo())
            .env("PATH", &path)
            .env("OUT", out_dir.path())
            .env_remove("COLUMNS")
            .env_remove("NO_COLOR")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&o.stderr));
        let text = text.replace(&out_dir.path().display().to_string(), "$OUT");
        want.extend(render(&shown, &text, o.status.code().unwrap_or(-1), cut));
    }
    want
}

/// Read a page under an exclusive lock, let `f` say what each block must hold, and compare
/// (or with UPDATE_README=1 write them).
fn with_page(
    path: &Path,
    f: impl FnOnce(&str, &[&str]) -> Vec<(std::ops::Range<usize>, Vec<String>)>,
) {
    let name = name_of(path);
    let lock = std::fs::File::open(path).unwrap();
    lock.lock().unwrap();
    let readme = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = readme.lines().collect();
    let mut blocks = f(&name, &lines);
    blocks.sort_by_key(|(r, _)| r.start);
    let update = std::env::var("UPDATE_README").as_deref() == Ok("1");
    let mut stale = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let mut at = 0;
    for (range, want) in &blocks {
        let have: Vec<String> = lines[range.clone()]
            .iter()
            .map(|l| normalise(l.strip_prefix("    ").unwrap_or(l)))
            .collect();
        let want: Vec<String> = want.iter().map(|l| normalise(l)).collect();
        if have != want {
            let first = have
                .iter()
                .zip(&want)
                .position(|(a, b)| a != b)
                .unwrap_or(have.len().min(want.len()));
            stale.push(format!(
                "{name}:{}: line {} of the block reads\n    {:?}\n  the run prints\n    {:?}",
                range.start + 1 + first,
                first + 1,
                have.get(first),
                want.get(first)
            ));
        }
        out.extend(lines[at..range.start].iter().map(|l| l.to_string()));
        out.extend(want.iter().map(|l| {
            if l.is_empty() {
                String::new()
            } else {
                format!("    {l}")
            }
        }));
        at = range.end;
    }
    out.extend(lines[at..].iter().map(|l| l.to_string()));
    if update {
        if !stale.is_empty() {
            let mut text = out.join("\n");
            text.push('\n');
            std::fs::write(path, text).unwrap();
            eprintln!("{name}: {} blocks regenerated", stale.len());
        }
        return;
    }
    assert!(
        stale.is_empty(),
        "{} blocks of {name} drifted (regenerate: UPDATE_README=1 cargo nextest run -E 'test(/readme/) | test(/^fleet::/)'):\n{}",
        stale.len(),
        stale.join("\n")
    );
}

/// The pages' `gpudoctor-example` blocks are exactly what their commands print here (a pipe,
/// so 100 columns).
#[test]
fn readme_examples_are_real_runs() {
    let mut count = 0;
    for page in pages() {
        with_page(&page, |name, lines| {
            let markers = parse(name, lines);
            let examples: Vec<&Marker> = markers
                .iter()
                .filter(|m| matches!(m.kind, Kind::Example(_)))
                .collect();
            count += examples.len();
            examples
                .iter()
                .map(|m| {
                    let Kind::Example(cmds) = &m.kind else {
                        unreachable!()
                    };
                    (m.block.clone(), run_example(cmds, &m.cut))
                })
                .collect()
        });
    }
    assert!(count >= 8, "the pages' examples are marked");
}

/// Every `gpudoctor-output` block is shown by exactly one test, and every ID a test shows has
/// its block: a block nobody checks would drift unseen.
#[test]
fn readme_blocks_are_owned() {
    let mut in_readme = Vec::new();
    for page in pages() {
        let name = name_of(&page);
        let text = std::fs::read_to_string(&page).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for m in parse(&name, &lines) {
            if let Kind::Output(id) = m.kind {
                assert!(
                    !in_readme.contains(&id),
                    "{name}:{}: {id} is shown twice",
                    m.line
                );
                in_readme.push(id);
            }
        }
    }
    let mut shown = Vec::new();
    for e in std::fs::read_dir(crate::repo().join("tests/it")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("readme.rs") {
            let src = std::fs::read_to_string(&p).unwrap();
            for part in src.split("readme::show(\"").skip(1) {
                shown.push(part[..part.find('"').unwrap()].to_string());
            }
        }
    }
    in_readme.sort();
    shown.sort();
    assert!(in_readme.len() >= 5, "{in_readme:?}");
    assert_eq!(
        in_readme, shown,
        "output blocks of README.md and docs/*.md and the tests that show them"
    );
}

#[test]
fn readme_cuts_paragraphs_and_lines() {
    let lines: Vec<String> = "A 1\na\n\nB 2\nb\nbb\n\nC 3\n\nD 4\nd"
        .lines()
        .map(str::to_string)
        .collect();
    let cut = Cut {
        para: vec!["B".into(), "D".into()],
        lines: Some(1),
        ..Cut::default()
    };
    assert_eq!(
        apply_cut(lines.clone(), &cut).join("|"),
        "...||B 2|...||D 4|..."
    );
    let cut = Cut {
        head: Some(1),
        tail: Some(1),
        ..Cut::default()
    };
    assert_eq!(apply_cut(lines, &cut).join("|"), "A 1|...|d");
    assert_eq!(
        split_options("t", "fleet a | head=3", 1).0,
        "fleet a",
        "options after ' | '"
    );
    assert_eq!(
        split_options("t", "sh: grep x f | wc -l", 1).0,
        "sh: grep x f | wc -l",
        "a shell pipe is part of the command"
    );
}

/// The synopsis in docs/usage.md is hand-written (shorter than `--help`), so a test keeps it
/// true: every command it names exists, every `--flag` it gives a command is one of that
/// command's (or a global one), and every visible flag of every command is in it.
#[test]
fn readme_usage_names_every_flag_and_only_real_ones() {
    let readme = std::fs::read_to_string(crate::repo().join(USAGE_PAGE)).unwrap();
    let usage = &readme[readme.find("## Synopsis\n").unwrap()..];
    let block: Vec<&str> = usage
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with("    "))
        .collect();
    assert!(block.len() > 20, "{block:?}");
    let root = gpudoctor::cli::command();
    let flags_of = |c: &clap::Command| -> Vec<String> {
        c.get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .filter(|l| l != "--help" && l != "--version")
            .collect()
    };
    let global: Vec<String> = flags_of(&root);
    // The commands each line gives flags to (`probe h2d|d2h|p2p ...` gives them to three, a
    // continuation line to those of the line above); `-d`, `-o` stand for their long names.
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut current: Vec<(Vec<String>, &clap::Command)> = Vec::new();
    for l in &block {
        let body = &l[4..];
        if !body.starts_with(' ') {
            current = vec![(Vec::new(), &root)];
            for w in body.split_whitespace() {
                let mut next = Vec::new();
                for (p, c) in &current {
                    for name in w.split('|') {
                        if let Some(s) = c.find_subcommand(name) {
                            let mut p = p.clone();
                            p.push(name.to_string());
                            next.push((p, s));
                        }
                    }
                }
                if next.is_empty() {
                    break;
                }
                current = next;
            }
            if current[0].0.is_empty() && body.starts_with("help ") {
                continue; // clap's own, not in the command tree
            }
            assert!(
                !current[0].0.is_empty(),
                "{USAGE_PAGE} synopsis: no command in {body:?}"
            );
        }
        for (p, c) in &current {
            let words = body
                .split(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '-'))
                .filter_map(|w| {
                    if w.starts_with("--") && w.len() > 2 {
                        Some(w.to_string())
                    } else if w.len() == 2 && w.starts_with('-') {
                        let short = w.chars().nth(1).unwrap();
                        c.get_arguments()
                            .find(|a| a.get_short() == Some(short))
                            .and_then(|a| a.get_long())
                            .map(|l| format!("--{l}"))
                    } else {
                        None
                    }
                });
            seen.entry(p.join(" ")).or_default().extend(words);
        }
    }
    let mut missing = Vec::new();
    fn walk<'a>(c: &'a clap::Command, at: Vec<String>, out: &mut Vec<(String, &'a clap::Command)>) {
        for s in c.get_subcommands().filter(|s| !s.is_hide_set()) {
            let mut p = at.clone();
            p.push(s.get_name().to_string());
            out.push((p.join(" "), s));
            walk(s, p, out);
        }
    }
    let mut cmds = Vec::new();
    walk(&root, Vec::new(), &mut cmds);
    for (path, c) in &cmds {
        let real = flags_of(c);
        let below: Vec<String> = cmds
            .iter()
            .filter(|(p, _)| p.starts_with(&format!("{path} ")))
            .flat_map(|(_, d)| flags_of(d))
            .collect();
        if let Some(given) = seen.get(path) {
            for f in given {
                // `probe ... --format`: a flag of the commands below.
                assert!(
                    real.contains(f) || global.contains(f) || below.contains(f),
                    "{USAGE_PAGE} synopsis gives `{path}` the flag {f}, which it does not have"
                );
            }
        }
        // A flag may be shown on the parent's line (`probe ... --format`) or the command's own.
        let shown: Vec<&String> = seen
            .iter()
            .filter(|(k, _)| *k == path || path.starts_with(&format!("{k} ")))
            .flat_map(|(_, v)| v)
            .collect();
        for f in real {
            if !global.contains(&f) && !shown.contains(&&f) {
                missing.push(format!("{path} {f}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "{USAGE_PAGE} synopsis does not name: {missing:?}"
    );
}
