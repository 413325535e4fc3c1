//! The fuzz targets' bodies, one function per target: `fuzz/fuzz_targets/<target>.rs` calls
//! it under libFuzzer (`scripts/fuzz`), and `tests/it/fuzz.rs` replays the committed corpus and
//! regressions through the same function in the normal suite. A panic is a finding.
//!
//! Built only with the `fuzzing` feature (the fuzz crate and the tests turn it on), so the
//! release library and binary carry none of it. It must not be reached from anything the
//! binary runs.

use std::time::{Duration, Instant};

/// The bundle reader over a whole archive, with small limits (the checks are the same at any
/// size; small keeps each run fast).
pub fn bundle_limits() -> crate::bundle::read::Limits {
    crate::bundle::read::Limits {
        entries: 2000,
        entry_bytes: 1 << 20,
        total_bytes: 8 << 20,
    }
}

pub fn bundle_archive(data: &[u8]) {
    let _ = crate::bundle::read::extract_from(std::io::Cursor::new(data), bundle_limits());
}

/// The serving side of the two-node handshake: without the token no input may pass.
pub fn oob_server(data: &[u8]) {
    use crate::rdma::engine::oob::{Channel, Script, server_handshake};
    let t = Duration::from_secs(5);
    let mut chan = Channel::new(Script::new(data.to_vec()), "fuzz".into(), t);
    let r = server_handshake(&mut chan, "fuzz-token", Instant::now() + t, t);
    assert!(
        r.is_err(),
        "an input passed the handshake without the token"
    );
}

/// The PCI config-space capability walkers (standard and extended lists).
pub fn pci_config(data: &[u8]) {
    let c = crate::pci::config::ConfigSpace::parse(data);
    let _ = format!("{c:?}");
}

/// The recorded-tree documents: nvml.json, libs.json, kmsg.json, manifest.json, probe samples.
pub fn recorded_docs(data: &[u8]) {
    let _ = crate::nvml::NvmlSnapshot::from_json(data);
    if let Ok(k) = crate::kmsg::KernelLog::from_json(data) {
        let _ = k.xids();
        let _ = k.coverage();
    }
    let _ = crate::libs::LibFacts::from_json(data);
    if let Ok(m) = crate::bundle::Manifest::from_json(data) {
        let _ = m.check();
        let _ = m.recorded_errors();
    }
    let _ = serde_json::from_slice::<crate::probes::ProbeReport>(data);
}

/// Every sysfs value parser over the same arbitrary text: cpulists, numa_node, NUMA distances,
/// hex (class, vendor, device), link speed and width, resource tables, AER counters, GIDs,
/// port/phys state, link layer, GID type, BDFs, NVRM version lines.
pub fn sysfs_values(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    if let Some(set) = crate::numa::parse_cpulist(s) {
        // What parses formats back to a list that parses to the same set.
        let again = crate::numa::format_cpulist(&set);
        assert_eq!(crate::numa::parse_cpulist(&again), Some(set), "{again}");
    }
    let _ = crate::numa::parse_numa_node(s);
    let _ = crate::numa::parse_distances(s);
    let _ = crate::pci::parse_hex(s).map(crate::pci::ClassCode);
    if let Some(g) = crate::pci::gen_from_speed(s) {
        let _ = crate::pci::speed_of_gen(g);
        if let Some(w) = crate::pci::parse_width(s) {
            let _ = crate::pci::link_gbps_per_direction(g, w);
        }
    }
    let _ = crate::pci::parse_width(s);
    let _ = crate::inventory::parse_resources(s);
    let _ = crate::inventory::parse_aer_total(s);
    let _ = crate::verbs::parse_gid(s);
    let _ = crate::facts::PortState::parse(s);
    let _ = crate::facts::PhysState::parse(s);
    let _ = crate::facts::LinkLayer::parse(s);
    let _ = crate::facts::GidType::parse(s);
    let _ = s.parse::<crate::pci::Bdf>();
    let _ = crate::facts::parse_nvrm(s);
    // Kernel log records (/dev/kmsg lines): Xid and link-down parsers.
    for line in s.lines() {
        let _ = crate::kmsg::xid(line);
        let _ = crate::kmsg::link_down(line);
    }
}

/// Names a fuzzed symlink graph is built from: plain names, `.` and `..` runs, absolute and
/// nested targets, and one that names the file outside the root.
const LINK_WORDS: &[&str] = &[
    "a",
    "b",
    "s",
    "sys",
    ".",
    "..",
    "../..",
    "/",
    "/sys",
    "a/b",
    "s/s/s",
    "../secret",
    "../../secret",
    "secret",
];

/// A directory holding `root/` (a recorded tree, `sys/` inside) and, beside it, `secret`: what
/// no read through the reader may ever return.
fn scratch_tree() -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    let d = tempfile::tempdir().ok()?;
    let root = d.path().join("root");
    std::fs::create_dir_all(root.join("sys")).ok()?;
    std::fs::write(d.path().join("secret"), "SECRET-OUTSIDE").ok()?;
    // A valid NVML snapshot: were it read, its driver version would show.
    std::fs::write(
        d.path().join("secret.json"),
        r#"{"schema":"gpudoctor.nvml/1","driver_version":"SECRET-OUTSIDE","gpus":[]}"#,
    )
    .ok()?;
    Some((d, root))
}

/// A path below the tree from fuzz bytes: up to 6 components from `LINK_WORDS`, or a long run
/// of one of them (thousands of `.` or `s` components).
fn fuzzed_path(bytes: &[u8]) -> String {
    let mut p = String::new();
    for b in bytes.iter().take(6) {
        let w = LINK_WORDS[*b as usize % LINK_WORDS.len()];
        if b & 0x80 != 0 {
            p.push_str(&format!("{w}/").repeat(1 + (*b as usize & 0x7f) * 16));
        } else {
            p.push_str(w);
            p.push('/');
        }
    }
    p.trim_end_matches('/').to_string()
}

/// The path resolver over a random symlink graph inside a temporary root: every read either
/// fails or returns what is inside the root (never the secret beside it), and nothing
/// overflows the stack or runs unbounded however long or cyclic the links.
pub fn sysroot_links(data: &[u8]) {
    let Some((_d, root)) = scratch_tree() else {
        return;
    };
    // Ops of 4 bytes: kind, where (a path), what (a link target or file text).
    for op in data.chunks(4).take(24) {
        // Where: one plain word (no long runs: creating thousands of nested directories per
        // input would make each run slow; the long runs go into targets and queries).
        let at = fuzzed_path(&[op.get(1).copied().unwrap_or(0) & 0x7f]);
        if at.is_empty() || at.starts_with('/') {
            continue;
        }
        let host = root.join("sys").join(&at);
        if let Some(parent) = host.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let what = fuzzed_path(op.get(2..).unwrap_or(&[]));
        let _ = match op[0] % 4 {
            0 => std::os::unix::fs::symlink(&what, &host),
            1 => std::fs::create_dir_all(&host),
            2 => std::fs::write(&host, "inside"),
            _ => std::os::unix::fs::symlink(format!("/{what}"), &host),
        };
    }
    let Ok(sr) = crate::sysroot::SysRoot::at(&root) else {
        return;
    };
    for q in data.chunks(3).rev().take(8) {
        let p = format!("/sys/{}", fuzzed_path(q));
        if let Ok(t) = sr.read_text(&p) {
            assert!(!t.contains("SECRET"), "{p} read the file outside the root");
        }
        if let Ok(c) = sr.canonical(&p) {
            assert!(
                c.starts_with('/') && !c.split('/').any(|x| x == ".."),
                "{p} -> {c}"
            );
        }
        let _ = sr.list(&p);
        let _ = sr.exists(&p);
        let _ = sr.kind_of(&p);
        let _ = sr.canonical_with_links(&p);
        if let Ok(Some(b)) = sr.read_document(&p, 4096) {
            assert!(!String::from_utf8_lossy(&b).contains("SECRET"), "{p}");
        }
    }
}

/// Opening a recorded tree (`--root`) whose documents are fuzzed: each of manifest.json,
/// nvml.json and libs.json is absent, the input's text, a link with a fuzzed target (inside,
/// climbing out towards a valid document beside the tree, looping) or a FIFO. Opening returns at once
/// with the facts or an error, and never shows what is outside the tree.
pub fn recorded_tree(data: &[u8]) {
    let Some((_d, root)) = scratch_tree() else {
        return;
    };
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let _ = std::os::unix::fs::symlink(".", root.join("s"));
    // Two bits per document: absent, the input's text, a link with a fuzzed target, a link
    // through a fuzzed path to the valid document beside the tree; the top two bits make one
    // of them a FIFO instead.
    let fifo = (mode >> 6) as usize;
    for (i, name) in ["manifest.json", "nvml.json", "libs.json"]
        .iter()
        .enumerate()
    {
        let p = root.join(name);
        if fifo == i + 1 {
            let Ok(c) = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()) else {
                continue;
            };
            // SAFETY: c is a valid NUL-terminated path.
            unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
            continue;
        }
        let _ = match (mode >> (2 * i)) & 3 {
            0 => Ok(()),
            1 => std::fs::write(&p, rest),
            2 => std::os::unix::fs::symlink(fuzzed_path(rest), &p),
            _ => std::os::unix::fs::symlink(format!("{}/secret.json", fuzzed_path(rest)), &p),
        };
    }
    let spec = crate::source::SourceSpec::Root(root.clone());
    if let Ok(s) = crate::source::Source::open(&spec) {
        let shown = format!("{:?} {:?} {:?}", s.nvml().ok(), s.libs, s.hostname);
        assert!(
            !shown.contains("SECRET"),
            "a document outside the tree was read"
        );
    }
}

/// A record in one of `--from`'s formats: the parser returns a record or an error, and a
/// small record goes on through the tree writer and topology. Never a panic, never unbounded.
pub fn record(format: crate::source::record::Format, data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = crate::source::detect_format(&text);
    let Ok(rec) = crate::source::parse_record(&text, Some(format)) else {
        return;
    };
    if rec.functions.is_empty() || rec.functions.len() > 64 {
        return;
    }
    let spec = crate::source::SourceSpec::From {
        path: "fuzz".into(),
        format: Some(format),
    };
    if let Ok(s) = crate::source::Source::from_record(&spec, std::path::Path::new("fuzz"), rec) {
        let _ = crate::run::topo_report_from(&s);
    }
}

pub fn record_lspci(data: &[u8]) {
    record(crate::source::record::Format::Lspci, data)
}
pub fn record_bug_report(data: &[u8]) {
    record(crate::source::record::Format::BugReport, data)
}
pub fn record_hwloc(data: &[u8]) {
    record(crate::source::record::Format::Hwloc, data)
}
pub fn record_nccl(data: &[u8]) {
    record(crate::source::record::Format::Nccl, data)
}

/// A character no sanitised output may carry as itself: the C0 and C1 controls and DEL
/// (`char::is_control`, Unicode's Cc), the bidirectional overrides, embeddings, isolates and
/// marks, and U+FFFE/U+FFFF (not XML 1.0 characters). Written apart from the sanitisers' own
/// list, so the two can disagree.
fn raw_control(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            | '\u{200e}' | '\u{200f}' | '\u{61c}' | '\u{fffe}' | '\u{ffff}')
}

fn assert_no_raw(what: &str, out: &str, allowed: &[char]) {
    if let Some(c) = out
        .chars()
        .find(|&c| raw_control(c) && !allowed.contains(&c))
    {
        panic!("{what}: raw {c:?} in {out:?}");
    }
}

/// The output sanitisers of `render::terminal` over arbitrary text: the terminal text keeps
/// only newline and tab, the one-line form and the Markdown cell no control at all; the cell
/// holds no unescaped `|` or inline markup and no HTML but its own `<br>`; the XML text, in
/// character data and in an attribute, always parses and reads back with no raw control.
pub fn sanitisers(data: &[u8]) {
    use crate::render::terminal::{escape, escape_text, markdown_cell, xml_text};
    let s = String::from_utf8_lossy(data);
    assert_no_raw("terminal text", &escape_text(&s), &['\n', '\t']);
    assert_no_raw("terminal line", &escape(&s), &[]);

    let cell = markdown_cell(&s);
    assert_no_raw("markdown cell", &cell, &[]);
    let mut chars = cell.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // CommonMark: a backslash escapes the ASCII punctuation character after it.
            '\\' if chars.peek().is_some_and(|n| n.is_ascii_punctuation()) => {
                chars.next();
            }
            '|' | '`' | '*' | '_' | '~' | '[' | ']' | '\n' => {
                panic!("markdown cell: unescaped {c:?} in {cell:?}")
            }
            _ => {}
        }
    }
    assert!(
        !cell.replace("<br>", "").contains('<'),
        "markdown cell: HTML in {cell:?}"
    );

    let x = xml_text(&s);
    assert_no_raw("xml text", &x, &['\n', '\t']);
    let doc = format!("<?xml version=\"1.0\"?>\n<r a=\"{x}\" b='{x}'>{x}</r>");
    let parsed = roxmltree::Document::parse(&doc)
        .unwrap_or_else(|e| panic!("xml text does not parse: {e}: {doc:?}"));
    let root = parsed.root_element();
    let text = root.text().unwrap_or("");
    assert_no_raw("xml text read back", text, &['\n', '\t']);
    assert_no_raw(
        "xml attribute read back",
        root.attribute("a").unwrap_or(""),
        &[],
    );
    // Nothing dropped: the characters a parser gives back are the sanitised ones.
    assert_eq!(
        text,
        x.replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&")
    );
}

/// The readers of reports other nodes wrote: a baseline (`check --expect`, `fleet --expect`),
/// and one file as `fleet` and `diff` read it (check, probe, NCCL report or garbage). Whatever
/// the bytes, each returns a result or an error, never a panic.
pub fn fleet_reports(data: &[u8]) {
    let _ = crate::checks::baseline::Baseline::parse(&String::from_utf8_lossy(data));
    let Ok(dir) = tempfile::tempdir() else {
        return;
    };
    let path = dir.path().join("node.json");
    if std::fs::write(&path, data).is_err() {
        return;
    }
    let _ = crate::run::fleet::load(std::slice::from_ref(&path));
    let _ = crate::run::fleet::diff(&path, &path, crate::export::Format::Json, false);
}
