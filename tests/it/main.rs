//! The one integration-test binary (ripgrep's habit): fixtures, CLI, man page.

mod audit;
mod baseline;
mod budget;
mod bundle;
mod check_nccl;
mod checks;
mod cli;
mod contained;
mod deploy;
mod export;
mod fixtures;
mod fleet;
mod from;
mod fuzz;
mod gpu_initiated;
mod hardening;
mod health;
mod hostile;
mod html;
mod hwloc_tree;
mod imports;
mod kernels;
mod lstopo;
mod man;
mod mlx5;
mod mlx5_emu;
mod mlx5_prm;
mod nccl;
mod platform;
mod probes;
mod rdma_driver;
pub mod rdma_unknown;
mod readme;
mod records;
mod slurm;
mod sriov;
mod unreadable;
mod ux;
mod vm;

use std::path::{Path, PathBuf};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every fixture directory (each holds a recorded `sys/` tree).
pub fn fixture_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures"))
        .expect("fixtures/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("sys").is_dir())
        .collect();
    v.sort();
    v
}

/// Faulty variants, stored packed as support bundles: (name, bundle path, variant dir).
pub fn variants() -> Vec<(String, PathBuf, PathBuf)> {
    let mut v: Vec<(String, PathBuf, PathBuf)> =
        std::fs::read_dir(repo().join("fixtures/variants"))
            .expect("fixtures/variants exists")
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.join("bundle.tar.gz").is_file())
            // Relative to the repository (commands run there): snapshots must not hold a path
            // that differs between checkouts.
            .map(|p| {
                let rel = PathBuf::from("fixtures/variants")
                    .join(name(&p))
                    .join("bundle.tar.gz");
                (name(&p), rel, p)
            })
            .collect();
    v.sort();
    v
}

/// Every fixture as the arguments that select it: base trees by --root, variants by --bundle.
pub fn all_sources() -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = fixture_dirs()
        .iter()
        .map(|d| {
            (
                name(d),
                vec!["--root".to_string(), format!("fixtures/{}", name(d))],
            )
        })
        .collect();
    for (n, b, _) in variants() {
        out.push((n, vec!["--bundle".to_string(), b.display().to_string()]));
    }
    out
}

pub fn name(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

pub fn gpudoctor() -> assert_cmd::Command {
    let mut c = assert_cmd::Command::cargo_bin("gpudoctor").unwrap();
    c.current_dir(repo());
    // Output must not depend on the caller's terminal settings.
    c.env_remove("COLUMNS").env_remove("NO_COLOR");
    c
}

/// A copy of `fixtures/NAME` (links, modes and all: `cp -a`) made inside `dir`.
pub fn copy_fixture_into(name: &str, dir: &Path) -> PathBuf {
    let tree = dir.join(name);
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(repo().join("fixtures").join(name))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a fixtures/{name}");
    tree
}

/// A copy of `fixtures/NAME` in a temporary directory: (guard, tree).
pub fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy_fixture_into(name, tmp.path());
    (tmp, tree)
}

/// `gpudoctor check --json ARGS...` (source options included in ARGS): (exit code, report).
/// The run must judge (exit 0 or 1); exit 2 fails the test with gpudoctor's message.
pub fn check_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = gpudoctor()
        .args(["check", "--json"])
        .args(args)
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{args:?}: exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code, serde_json::from_slice(&out.stdout).unwrap())
}
