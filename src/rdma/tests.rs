//! The probe ladder's import graph: every `use crate::rdma::...` / `super::...` path in a file
//! under src/rdma names the file it reaches; the arrows between files must have no cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every .rs file under `dir`, as its module path under `rdma` ("engine/side", "mod").
fn files(dir: &Path, rel: &str, out: &mut BTreeMap<String, PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            files(&p, &format!("{rel}{name}/"), out);
        } else if let Some(stem) = name.strip_suffix(".rs") {
            out.insert(format!("{rel}{stem}"), p);
        }
    }
}

/// The module a file is (its folder's for mod.rs): "engine/side" -> ["engine", "side"].
fn module_of(file: &str) -> Vec<String> {
    let mut m: Vec<String> = file.split('/').map(str::to_string).collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

/// The file (key) an absolute module path under rdma reaches: the longest prefix that is a
/// file; a folder's own items are its mod.rs.
fn file_of(path: &[String], known: &BTreeMap<String, PathBuf>) -> Option<String> {
    for n in (0..=path.len()).rev() {
        let p = path[..n].join("/");
        if known.contains_key(&p) {
            return Some(p);
        }
        let m = if p.is_empty() {
            "mod".to_string()
        } else {
            format!("{p}/mod")
        };
        if known.contains_key(&m) {
            return Some(m);
        }
    }
    None
}

/// The paths a source text names: `crate::rdma::a::b` and `super::...` (resolved from `me`,
/// the module the file is), including inside `use` groups' first segment.
fn targets(src: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code: String = src
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = i == 0 || !ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let rest = &code[i..];
        let (mut base, skip) = if starts && rest.starts_with("crate::rdma::") {
            (Vec::new(), "crate::rdma::".len())
        } else if starts && rest.starts_with("super::") {
            // super (repeated) relative to the module this file is.
            let mut m = me.to_vec();
            let mut k = 0;
            while code[i + k..].starts_with("super::") {
                m.pop();
                k += "super::".len();
            }
            (m, k)
        } else {
            i += 1;
            continue;
        };
        let mut j = i + skip;
        // Segments: idents separated by ::, stopping at anything else ({, *, ;, space).
        loop {
            let s = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            if s == j {
                break;
            }
            base.push(code[s..j].to_string());
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        out.push(base);
        i = j.max(i + 1);
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/rdma");
    let mut known = BTreeMap::new();
    files(&root, "", &mut known);
    let mut g = BTreeMap::new();
    for (f, p) in &known {
        let src = std::fs::read_to_string(p).expect("read a source file");
        // Test modules may reach anywhere (`use super::*` in a file's own tests).
        let src = src.split("#[cfg(test)]").next().unwrap_or("");
        let me = module_of(f);
        let mut to = BTreeSet::new();
        for t in targets(src, &me) {
            if let Some(file) = file_of(&t, &known)
                && file != *f
            {
                to.insert(file);
            }
        }
        g.insert(f.clone(), to);
    }
    g
}

/// A cycle in `g`, as the files along it, or None.
fn cycle(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            match state.get(m.as_str()).copied().unwrap_or(0) {
                1 => {
                    let at = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut c = stack[at..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                0 => {
                    if let Some(c) = visit(m, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in g.keys() {
        if state.get(n.as_str()).copied().unwrap_or(0) == 0 {
            let mut stack = Vec::new();
            if let Some(c) = visit(n, g, &mut state, &mut stack) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_import_cycle() {
    let g = graph();
    assert!(g.len() > 20, "src/rdma not found: {g:?}");
    // The graph is read: the runners reach the engine, the engine the requests.
    assert!(g["level4"].contains("engine/run"), "{:?}", g["level4"]);
    assert!(g["engine/side"].contains("request/write_bw"));
    if let Some(c) = cycle(&g) {
        panic!("import cycle among src/rdma files: {}", c.join(" -> "));
    }
}

#[test]
fn a_cycle_is_found() {
    // The detector itself: a file naming `super::b` and b naming `crate::rdma::a` is a cycle.
    let known: BTreeMap<String, PathBuf> = ["mod", "a", "b", "c/mod", "c/d"]
        .iter()
        .map(|s| (s.to_string(), PathBuf::new()))
        .collect();
    let mut g = BTreeMap::new();
    let edges = |src: &str, me: &str| -> BTreeSet<String> {
        targets(src, &module_of(me))
            .iter()
            .filter_map(|t| file_of(t, &known))
            .filter(|f| f != me)
            .collect()
    };
    g.insert("a".to_string(), edges("use super::b::X;", "a"));
    g.insert(
        "b".to_string(),
        edges("let x = crate::rdma::c::d::f();", "b"),
    );
    g.insert(
        "c/d".to_string(),
        edges("use super::super::a::{Y, Z};", "c/d"),
    );
    assert_eq!(g["b"], BTreeSet::from(["c/d".to_string()]));
    assert_eq!(
        cycle(&g),
        Some(vec!["a".into(), "b".into(), "c/d".into(), "a".into()])
    );
    g.insert("c/d".to_string(), edges("use super::E;", "c/d"));
    assert_eq!(g["c/d"], BTreeSet::from(["c/mod".to_string()]));
    assert_eq!(cycle(&g), None);
}

/// The NIC stand-in (`mlx5/emu.rs`) and the kernel harness's checks (`mlx5/harness.rs`) are
/// compiled only with the `standin` feature, which no default build turns on, the harness
/// binary requires it, and no live file under src/rdma reaches either: nothing `cargo install`
/// builds can emulate an adapter. (`nm -C target/release/gpudoctor | grep -ci emu` is 0.)
#[test]
fn the_stand_in_is_behind_its_feature() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let m = std::fs::read_to_string(dir.join("src/rdma/mlx5/mod.rs")).expect("mlx5/mod.rs");
    let lines: Vec<&str> = m.lines().collect();
    for name in ["emu", "harness"] {
        let at = lines
            .iter()
            .position(|l| *l == format!("pub mod {name};"))
            .unwrap_or_else(|| panic!("mlx5/mod.rs declares no {name}"));
        assert_eq!(
            lines.get(at.wrapping_sub(1)).copied(),
            Some("#[cfg(feature = \"standin\")]"),
            "mlx5::{name} must be behind the standin feature"
        );
    }
    let g = graph();
    for (from, to) in &g {
        if from == "mlx5/emu" || from == "mlx5/harness" {
            continue;
        }
        for gated in ["mlx5/emu", "mlx5/harness"] {
            assert!(!to.contains(gated), "{from} reaches the stand-in ({gated})");
        }
    }
    let cargo = std::fs::read_to_string(dir.join("Cargo.toml")).expect("Cargo.toml");
    let bin = cargo
        .split("[[bin]]")
        .find(|b| b.contains("name = \"gpudoctor-mlx5-kernel\""))
        .expect("the harness's [[bin]]");
    assert!(
        bin.contains("required-features = [\"standin\"]"),
        "the harness must require the standin feature: {bin}"
    );
    let features = cargo
        .split("[features]")
        .nth(1)
        .and_then(|f| f.split("\n[").next())
        .expect("a [features] table");
    assert!(
        !features
            .lines()
            .any(|l| l.starts_with("default") && l.contains("standin")),
        "standin must not be a default feature"
    );
}
