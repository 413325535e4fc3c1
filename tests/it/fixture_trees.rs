//! Lays out the fixture trees before a test reads one: `fixtures/NAME`, a link to
//! `target/fixtures/NAME`, for every recorded machine (stored packed under `fixtures/recorded/`)
//! and every synthetic one (written by `scripts/synth-fixtures.py`); `scripts/fixtures` does the
//! work. Shared by the integration tests (`tests/it/main.rs`) and the unit tests in `src/`.
//! Must not: write anywhere but `target/fixtures/` and those links, or lay the trees out more than
//! once for a set of inputs (nextest runs every test in its own process; the first one to find
//! them stale does it, under a lock, and the others wait or find them done).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The inputs the trees are made from, with sizes and modification times: when one changes, the
/// trees are laid out again.
fn inputs_key(repo: &Path) -> String {
    let mut inputs = vec![
        repo.join("scripts/fixtures"),
        repo.join("scripts/synth-fixtures.py"),
    ];
    if let Ok(dirs) = std::fs::read_dir(repo.join("fixtures/recorded")) {
        for d in dirs.flatten() {
            if let Ok(files) = std::fs::read_dir(d.path()) {
                inputs.extend(files.flatten().map(|f| f.path()));
            }
        }
    }
    inputs.sort();
    let mut key = String::new();
    for p in inputs {
        let (len, mtime_ns) = std::fs::metadata(&p)
            .map(|m| {
                let t = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos());
                (m.len(), t)
            })
            .unwrap_or((0, 0));
        let rel = p.strip_prefix(repo).unwrap_or(&p);
        let _ = writeln!(key, "{} {len} {mtime_ns}", rel.display());
    }
    key
}

/// Every tree laid out and current (done once per process).
pub fn ensure() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let key = inputs_key(&repo);
        let out = repo.join("target/fixtures");
        let current = std::fs::read_to_string(out.join(".stamp")).is_ok_and(|s| s == key)
            && std::fs::read_dir(&out).is_ok_and(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.starts_with('.'))
                    .all(|n| repo.join("fixtures").join(n).is_dir())
            });
        if current {
            return;
        }
        let run = std::process::Command::new("python3")
            .arg(repo.join("scripts/fixtures"))
            .arg("--stamp")
            .arg(&key)
            .output()
            .expect("python3 runs scripts/fixtures (it lays out the fixture trees)");
        assert!(
            run.status.success(),
            "scripts/fixtures failed: {}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
    });
}

/// `fixtures/NAME`, relative to the repository (where tests run), laid out.
#[allow(dead_code)]
pub fn tree(name: &str) -> PathBuf {
    ensure();
    Path::new("fixtures").join(name)
}
