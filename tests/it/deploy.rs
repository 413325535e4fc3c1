//! deploy/kubernetes/*.yaml validated with kubernetes-validate (PyPI) against a current
//! Kubernetes schema, strictly (unknown fields rejected); and what the DaemonSet relies on:
//! the commands it runs exist and take the arguments it gives. Fails (rather than skips) when
//! GPUDOCTOR_REQUIRE_KUBERNETES_VALIDATE=1 and the tool is missing; scripts/test installs it.

use crate::{gpudoctor, repo};
use std::process::Command;

/// A current Kubernetes release (kubernetes-validate ships its schemas).
const KUBERNETES_VERSION: &str = "1.32.0";

#[test]
fn manifests_validate_against_kubernetes() {
    let have = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var("GPUDOCTOR_REQUIRE_KUBERNETES_VALIDATE").as_deref() != Ok("1"),
            "kubernetes-validate missing (python3 -m pip install kubernetes-validate)"
        );
        eprintln!("kubernetes-validate not installed: skipped");
        return;
    }
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for f in &files {
        let o = Command::new("kubernetes-validate")
            .args(["--strict", "-k", KUBERNETES_VERSION])
            .arg(f)
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "{}: {out}", f.display());
        assert!(out.contains("passed"), "{}: {out}", f.display());
    }
    // The validator itself rejects a broken manifest (the test can fail).
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    let text = std::fs::read_to_string(dir.join("daemonset.yaml"))
        .unwrap()
        .replace("readOnlyRootFilesystem", "readOnlyRootFileSystem");
    std::fs::write(&bad, text).unwrap();
    let o = Command::new("kubernetes-validate")
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success(), "a misspelt field must not validate");
}

/// The DaemonSet's loop runs `snapshot nvml`, `snapshot libs` and `--root DIR check --format
/// prometheus|--json` on a tree laid out like its volumes (DIR/sys, DIR/proc, DIR/nvml.json,
/// DIR/libs.json): here a fixture's sys/ and proc/ with freshly taken snapshots beside them.
#[test]
fn daemonset_commands_work_on_its_layout() {
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    for cmd in [
        "gpudoctor snapshot nvml > /gpudoctor-root/nvml.json",
        "gpudoctor snapshot libs > /gpudoctor-root/libs.json",
        "gpudoctor --root /gpudoctor-root check --json --textfile /textfile",
    ] {
        assert!(ds.contains(cmd), "daemonset.yaml no longer runs `{cmd}`");
    }
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    for d in ["sys", "proc"] {
        copy_tree(
            &repo().join("fixtures/pcie-2socket-roce").join(d),
            &root.join(d),
        );
    }
    for what in ["nvml", "libs"] {
        let o = gpudoctor().args(["snapshot", what]).output().unwrap();
        assert_eq!(o.status.code(), Some(0));
        std::fs::write(root.join(format!("{what}.json")), o.stdout).unwrap();
    }
    let textfile = tmp.path().join("textfile");
    std::fs::create_dir(&textfile).unwrap();
    let o = gpudoctor()
        .arg("--root")
        .arg(root)
        .args(["check", "--json", "--textfile"])
        .arg(&textfile)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let prom = std::fs::read_to_string(textfile.join("gpudoctor.prom")).unwrap();
    let status = report["status"].as_str().unwrap();
    assert!(
        prom.contains(&format!("gpudoctor_status{{status=\"{status}\"}} 1")),
        "{prom}"
    );
    assert!(prom.contains("gpudoctor_up 1"), "{prom}");
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        let dst = to.join(e.file_name());
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}
