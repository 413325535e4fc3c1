//! The one integration-test binary (ripgrep's habit): fixtures, CLI, man page.

// `baseline` and `check --expect`: fixtures against baselines
mod baseline;
// hostile input under a memory limit: exit 0, 1 or 2, never a signal or an abort
mod bounds;
// `check --time-budget`: what a spent budget keeps and reports
mod budget;
// support bundles: capture list, replay equals the tree, broken archives refused
mod bundle;
// `probe.nccl` inside `check --level 1` from recorded samples
mod check_nccl;
// `check` on every fixture: snapshots, variant expectations, the catalog
mod checks;
// exit codes, stdout/stderr separation, clear errors
mod cli;
// every file a verdict reads, damaged one at a time: never a new pass
mod damage_audit;
// random damage to trees (hidden files, garbage, broken links): no panic
mod damage_never_panics;
// deploy/kubernetes manifests validated, the DaemonSet's node loop
mod deploy;
// `--format prometheus`, JUnit and `export nccl-topo` checked by their own tools
mod export;
// lays out the fixture trees (fixtures/NAME) that tests read
mod fixture_trees;
// every fixture through the pipeline: tree, matrix and JSON snapshotted
mod fixtures;
// flags that mean one thing, output width, explain, man pages, completions
mod flags_and_help;
// a new user's first errors: hints for paths of the wrong kind, misspelt ids, whole messages
mod front_door;
// `fleet` and `diff` on reports and bundles made from the fixtures
mod fleet;
// `fleet` over many reports and mixed models, `diff` telling every change apart
mod fleet_scale;
// `--from`: records in other formats through the pipeline
mod from;
// fuzz inputs and regressions replayed on the stable toolchain
mod fuzz;
// level-0 checks for GPU-initiated RDMA (`gdr.peer-mapping`, `rdma.mlx5dv`)
mod gpu_initiated;
// forged records and look-alikes cannot bend the verdict
mod hardening;
// everyday health checks on damaged copies of the synthetic fixtures
mod health;
// hostile trees and bundles stay in their box: links out, FIFOs, huge files, signals
mod hostile_input;
// `--format html` rendered in a real browser
mod html;
// hwloc's recorded ConnectX-4 host against hwloc's own lstopo output
mod hwloc_tree;
// the DaemonSet's loop on its layout: kernel log, label, taint, condition, event, liveness
mod kubernetes;
// no import cycle among the modules of src/
mod imports;
// every CUDA kernel compiles with NVRTC
mod kernels;
// gpudoctor's placement of GPUs and NICs agrees with lstopo's
mod lstopo;
// man/ is current with the clap definition
mod man;
// the mlx5 WQE/CQE layer against libmlx5's inline helpers
mod mlx5;
// the level-4 poster protocol against the NIC stand-in
mod mlx5_emu;
// level 4's DevX commands against rdma-core's PRM layouts
mod mlx5_prm;
// `probe nccl` without a GPU: skips, reasons, the Job manifest
mod nccl;
// platform rules on altered copies of the fixtures
mod platform;
// probe evaluation from recorded samples
mod probes;
// `rdma.driver`: a NIC without its RDMA device
mod rdma_driver;
// unreadable RDMA facts are unknown skips, never absent or pass
pub mod rdma_unreadable_is_unknown;
// README and docs examples are real runs
mod readme;
// every record under fixtures/records/ through the pipeline
mod records;
// redaction by value of every identifier a recorded tree holds
mod redaction;
// the Slurm health check on a real one-machine cluster
mod slurm;
// an SR-IOV host generated at test time
mod sriov;
// unreadable PCI and GPU facts are unknown skips, never pass
mod unreadable_is_unknown;
// verbs code for real in the soft-RoCE VM
mod vm;

use std::path::{Path, PathBuf};

/// The repository, where the tests run, with the fixture trees laid out (`fixtures/NAME`, see
/// `fixture_trees`): every test that reaches the repository or runs gpudoctor comes through here.
/// Whether strace can run here; false (the caller skips, saying so) only where it is not
/// installed and the run does not require it: scripts/test installs strace and sets
/// GPUDOCTOR_REQUIRE_STRACE=1, and there a test must run, not skip.
pub fn have_strace() -> bool {
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_ok()
    {
        return true;
    }
    assert!(
        std::env::var("GPUDOCTOR_REQUIRE_STRACE").as_deref() != Ok("1"),
        "strace is required (GPUDOCTOR_REQUIRE_STRACE=1) but not installed"
    );
    eprintln!("strace not installed: skipped");
    false
}

/// The system calls of `set` (strace's `-e trace=`) that `gpudoctor ARGS` made, every thread's,
/// as strace writes them (strings up to 8 KiB); the run must end in a verdict (exit 0 or 1).
pub fn strace_gpudoctor(set: &str, args: &[&std::ffi::OsStr]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    let st = std::process::Command::new("strace")
        .args(["-f", "-qq", "-s", "8192", "-o"])
        .arg(&trace)
        .arg("-e")
        .arg(format!("trace={set}"))
        .arg(env!("CARGO_BIN_EXE_gpudoctor"))
        // cargo's library path would have the loader search target/ first.
        .env_remove("LD_LIBRARY_PATH")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(matches!(st.code(), Some(0 | 1)), "{st:?}");
    std::fs::read_to_string(&trace).unwrap()
}

pub fn repo() -> PathBuf {
    fixture_trees::ensure();
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where the tree `fixtures/NAME` is laid out (`target/fixtures/NAME`): the path to copy from
/// (`fixtures/NAME` itself is a link, which a copy would copy as a link).
pub fn fixture_tree(name: &str) -> PathBuf {
    let link = repo().join("fixtures").join(name);
    std::fs::canonicalize(&link).unwrap_or_else(|e| panic!("{}: {e}", link.display()))
}

/// Every fixture tree (each holds a recorded `sys/` tree), where it is laid out.
pub fn fixture_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures"))
        .expect("fixtures/ exists")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("sys").is_dir())
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
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
        .arg(fixture_tree(name))
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
