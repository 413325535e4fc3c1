//! No import cycle among the hand-written modules of src/, at file level and between the
//! top-level folders. An edge is a reference that reaches out of a file by name:
//! `use crate::...` and `crate::` paths anywhere, and `super::` paths (resolved against the
//! module they are written in, inline `mod tests { ... }` included). A module's own
//! submodules are its contents, not its imports: `mod x;` and a bare `x::` path in the parent
//! are not edges (a child reaching its parent with `super::` is one, upward).
//!
//! The generated bindings (src/verbs/sys.rs, src/verbs/mlx5dv_sys.rs) and the binaries
//! (src/main.rs, src/bin/) are left out: the bindings import nothing of the crate, the
//! binaries import it as `gpudoctor::`.

use crate::repo;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Edges known to close a cycle, left out of the graph while they are being removed; each is
/// named, so the list can only shrink (an entry whose edge no longer exists fails the test).
/// Empty since src/rdma was reorganised by concern.
const PENDING: &[(&str, &str)] = &[];

/// Files never parsed: generated code.
const GENERATED: &[&str] = &["src/verbs/ffi/sys.rs", "src/verbs/ffi/mlx5dv_sys.rs"];

/// Rust source with comments, string and char literals blanked (braces inside them must not
/// count), lifetimes kept.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // Raw string r"..." / r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&b'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let rest = &src[i + 1..];
            let close = if let Some(esc) = rest.strip_prefix('\\') {
                esc.find('\'').map(|k| k + 2)
            } else {
                rest.chars()
                    .next()
                    .filter(|ch| rest[ch.len_utf8()..].starts_with('\''))
                    .map(|ch| ch.len_utf8())
            };
            match close {
                Some(k) => {
                    out.push_str("' '");
                    i += k + 2;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

/// The module path of a file under src/ ("checks::baseline::gpus"; lib.rs is "").
fn module_of(rel: &Path) -> String {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    parts.join("::")
}

/// Every path of a `use` tree ("crate::{a::X, b::{c, d}}" -> crate::a::X, crate::b::c, ...).
fn expand_use(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    fn go(prefix: &str, t: &str, out: &mut Vec<String>) {
        match t.find('{') {
            None => out.push(format!("{prefix}{t}")),
            Some(open) => {
                let head = &t[..open];
                let inner = &t[open + 1..t.rfind('}').unwrap_or(t.len())];
                // Split `inner` at top-level commas.
                let (mut depth, mut start) = (0, 0);
                let mut items = Vec::new();
                for (k, ch) in inner.char_indices() {
                    match ch {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            items.push(&inner[start..k]);
                            start = k + 1;
                        }
                        _ => {}
                    }
                }
                items.push(&inner[start..]);
                for it in items.into_iter().filter(|s| !s.is_empty()) {
                    go(&format!("{prefix}{head}"), it, out);
                }
            }
        }
    }
    go("", &tree, &mut out);
    out
}

/// The module a path names: `base` (the module it is written in) resolved against `crate::` and
/// `super::`, then the longest prefix that is a file of the crate. None for other roots
/// (std, serde, a child's bare name).
fn resolve(path: &str, base: &[String], modules: &BTreeSet<String>) -> Option<String> {
    let segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut full: Vec<String> = match segs.first() {
        Some(&"crate") => Vec::new(),
        Some(&"super") => base.to_vec(),
        _ => return None,
    };
    let mut rest = &segs[..];
    if rest.first() == Some(&"crate") {
        rest = &rest[1..];
    }
    while rest.first() == Some(&"super") {
        full.pop()?;
        rest = &rest[1..];
    }
    full.extend(rest.iter().map(|s| s.to_string()));
    // The file holding that module: drop inline-module and item segments from the end.
    (0..=full.len())
        .rev()
        .map(|n| full[..n].join("::"))
        .find(|m| modules.contains(m))
}

/// File-level edges: module -> modules it names.
fn edges() -> BTreeMap<String, BTreeSet<String>> {
    let src = repo().join("src");
    let mut files = Vec::new();
    let mut stack = vec![src.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let rel = p
                .strip_prefix(repo())
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if p.is_dir() {
                if rel != "src/bin" {
                    stack.push(p);
                }
            } else if rel.ends_with(".rs")
                && rel != "src/main.rs"
                && !GENERATED.contains(&rel.as_str())
            {
                files.push(p);
            }
        }
    }
    let modules: BTreeSet<String> = files
        .iter()
        .map(|p| module_of(p.strip_prefix(&src).unwrap()))
        .chain(GENERATED.iter().map(|g| module_of(Path::new(&g[4..]))))
        .collect();
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for p in &files {
        let me = module_of(p.strip_prefix(&src).unwrap());
        let text = strip(&std::fs::read_to_string(p).unwrap());
        let file_mod: Vec<String> = if me.is_empty() {
            Vec::new()
        } else {
            me.split("::").map(str::to_string).collect()
        };
        // Inline modules: (brace depth at which it opened, name).
        let mut inline: Vec<(usize, String)> = Vec::new();
        let mut depth = 0usize;
        let mut pending_mod: Option<String> = None;
        let mut targets = BTreeSet::new();
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let at_word_start = i == 0 || !word(chars[i - 1]);
            let here: String = chars[i..chars.len().min(i + 6)].iter().collect();
            if c == '{' {
                depth += 1;
                if let Some(name) = pending_mod.take() {
                    inline.push((depth, name));
                }
            } else if c == '}' {
                if inline.last().is_some_and(|(d, _)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            } else if c == ';' {
                pending_mod = None;
            }
            let base: Vec<String> = file_mod
                .iter()
                .cloned()
                .chain(inline.iter().map(|(_, n)| n.clone()))
                .collect();
            if at_word_start && here.starts_with("mod ") {
                let name: String = chars[i + 4..]
                    .iter()
                    .skip_while(|c| c.is_whitespace())
                    .take_while(|c| word(**c))
                    .collect();
                pending_mod = Some(name);
                i += 4;
                continue;
            }
            if at_word_start && here.starts_with("use ") {
                let end = chars[i..]
                    .iter()
                    .position(|c| *c == ';')
                    .map_or(chars.len(), |k| i + k);
                let tree: String = chars[i + 4..end].iter().collect();
                for path in expand_use(&tree) {
                    if let Some(t) = resolve(&path, &base, &modules) {
                        targets.insert(t);
                    }
                }
                i = end;
                continue;
            }
            if at_word_start && (here.starts_with("crate:") || here.starts_with("super:")) {
                let path: String = chars[i..]
                    .iter()
                    .take_while(|c| word(**c) || **c == ':')
                    .collect();
                if let Some(t) = resolve(&path, &base, &modules) {
                    targets.insert(t);
                }
                i += path.len().max(1);
                continue;
            }
            i += 1;
        }
        targets.remove(&me);
        graph.entry(me).or_default().extend(targets);
    }
    graph
}

/// The strongly connected components with more than one node (Tarjan).
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'g> {
        g: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on: BTreeSet<&'g str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    impl<'g> T<'g> {
        fn visit(&mut self, v: &'g str) {
            self.index.insert(v, self.next);
            self.low.insert(v, self.next);
            self.next += 1;
            self.stack.push(v);
            self.on.insert(v);
            for w in self.g.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    scc.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    scc.sort();
                    self.out.push(scc);
                }
            }
        }
    }
    let mut t = T {
        g: graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !t.index.contains_key(v.as_str()) {
            t.visit(v);
        }
    }
    t.out
}

/// One edge of each cycle, for the message: the edges inside the component.
fn describe(graph: &BTreeMap<String, BTreeSet<String>>, scc: &[String]) -> String {
    let inside: BTreeSet<&String> = scc.iter().collect();
    let mut lines = Vec::new();
    for a in scc {
        for b in graph.get(a).into_iter().flatten() {
            if inside.contains(b) {
                lines.push(format!("  {a} -> {b}"));
            }
        }
    }
    lines.join("\n")
}

/// The top-level folder (or file) of a module: "checks" for checks::baseline::gpus.
fn top(m: &str) -> String {
    match m.split("::").next() {
        Some("") | None => "lib".to_string(),
        Some(t) => t.to_string(),
    }
}

#[test]
fn no_import_cycles_between_files_or_top_level_folders() {
    let mut graph = edges();
    assert!(
        graph.contains_key("checks::baseline::gpus") && graph.contains_key("cli"),
        "the walk found the crate's files"
    );
    for (a, b) in PENDING {
        let removed = graph.get_mut(*a).is_some_and(|s| s.remove(*b));
        assert!(
            removed,
            "{a} -> {b} is in PENDING but no longer an edge: remove it from the list"
        );
    }
    let files = cycles(&graph);
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (a, bs) in &graph {
        for b in bs {
            if top(a) != top(b) {
                folders.entry(top(a)).or_default().insert(top(b));
            }
        }
    }
    let tops = cycles(&folders);
    let mut msg = String::new();
    for c in &files {
        msg.push_str(&format!("file cycle {c:?}:\n{}\n", describe(&graph, c)));
    }
    for c in &tops {
        msg.push_str(&format!("folder cycle {c:?}:\n{}\n", describe(&folders, c)));
        // The file edges behind each folder edge of the cycle.
        let inside: BTreeSet<&String> = c.iter().collect();
        for (a, bs) in &graph {
            for b in bs {
                if top(a) != top(b) && inside.contains(&top(a)) && inside.contains(&top(b)) {
                    msg.push_str(&format!("    {a} -> {b}\n"));
                }
            }
        }
    }
    assert!(msg.is_empty(), "import cycles:\n{msg}");
}

/// The parser itself: each form of reference is an edge, and a cycle is found.
#[test]
fn import_parser_sees_every_form_and_finds_cycles() {
    let modules: BTreeSet<String> = ["", "a", "a::b", "c"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let base = vec!["a".to_string(), "b".to_string()];
    assert_eq!(resolve("super::X", &base, &modules).as_deref(), Some("a"));
    assert_eq!(
        resolve("super::super::c::Y", &base, &modules).as_deref(),
        Some("c")
    );
    assert_eq!(
        resolve("crate::a::b::f", &base, &modules).as_deref(),
        Some("a::b")
    );
    assert_eq!(resolve("std::fs", &base, &modules), None);
    assert_eq!(
        expand_use("crate::{a::{b::X, Y}, c}"),
        ["crate::a::b::X", "crate::a::Y", "crate::c"]
    );
    assert_eq!(
        strip("let s = \"crate::x { \"; // crate::y\nlet c = '{'; fn f<'a>() {}"),
        "let s = \"\"; \nlet c = ' '; fn f<'a>() {}"
    );
    let g: BTreeMap<String, BTreeSet<String>> = [
        ("x", vec!["y"]),
        ("y", vec!["z"]),
        ("z", vec!["x"]),
        ("w", vec!["x"]),
    ]
    .into_iter()
    .map(|(a, bs)| (a.to_string(), bs.into_iter().map(str::to_string).collect()))
    .collect();
    assert_eq!(cycles(&g), vec![vec!["x", "y", "z"]]);
}

/// Nothing under `src/rdma/` (the probes and their engine) reads the machine while probing: the
/// facts it needs (RDMA devices, ports, GIDs, netdev MACs) are read by the caller before any
/// probe starts and handed over. Outside `#[cfg(test)]` code, no file there names the reader
/// (`SysRoot`, `sysroot::`) or a function that reads through it (`read_rdma_device`,
/// `read_text`, `netdev_macs(`).
#[test]
fn nothing_under_rdma_reads_the_source_while_probing() {
    let mut stack = vec![repo().join("src/rdma")];
    let mut seen = 0;
    let mut offending = Vec::new();
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            seen += 1;
            let code = strip(&std::fs::read_to_string(&p).unwrap());
            // Test modules come last in a file: cut at the first #[cfg(test)].
            let code = code.split("#[cfg(test)]").next().unwrap_or_default();
            for word in [
                "SysRoot",
                "sysroot::",
                "read_rdma_device",
                "read_text(",
                "netdev_macs(",
            ] {
                if code.contains(word) {
                    offending.push(format!("{}: {word}", p.display()));
                }
            }
        }
    }
    assert!(seen > 20, "{seen} files under src/rdma");
    assert!(offending.is_empty(), "{offending:#?}");
}
