//! The level-0 checks for GPU-initiated RDMA (level 4): `gdr.peer-mapping` (the NVIDIA
//! driver's PeerMappingOverride registry key) and `rdma.mlx5dv` (ConnectX devices and libmlx5),
//! on the fixtures and on copies of them with one fact changed.

use crate::{gpudoctor, repo};
use std::path::{Path, PathBuf};

fn copy_fixture(name: &str, tmp: &Path) -> PathBuf {
    let tree = tmp.join("t");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(crate::fixture_tree(name))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success());
    tree
}

/// The findings of check `id` on the tree at `root`.
fn findings(root: &Path, id: &str) -> Vec<serde_json::Value> {
    let out = gpudoctor()
        .args(["check", "--json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .cloned()
        .collect()
}

fn one(root: &Path, id: &str) -> serde_json::Value {
    let f = findings(root, id);
    assert_eq!(f.len(), 1, "{f:?}");
    f[0].clone()
}

#[test]
fn peer_mapping_regkey_set_passes_and_absent_warns() {
    let f = one(&repo().join("fixtures/hgx-h100-8gpu"), "gdr.peer-mapping");
    assert_eq!(f["status"], "pass", "{f}");
    assert_eq!(
        f["evidence"][0]["value"], "\"PeerMappingOverride=1;\"",
        "{f}"
    );

    let f = one(
        &repo().join("fixtures/pcie-2socket-roce"),
        "gdr.peer-mapping",
    );
    assert_eq!(f["status"], "warn", "{f}");
    let fix = f["remediation"].as_str().unwrap();
    assert!(
        fix.contains(r#"options nvidia NVreg_RegistryDwords="PeerMappingOverride=1;""#),
        "{fix}"
    );
    assert!(fix.contains("explain gdr.peer-mapping"), "{fix}");
    assert_field_contains(&f, "message", "CPU proxy");
}

#[test]
fn peer_mapping_other_value_warns() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy_fixture("hgx-h100-8gpu", tmp.path());
    let p = tree.join("proc/driver/nvidia/params");
    let text = std::fs::read_to_string(&p).unwrap();
    let changed = text.replace("PeerMappingOverride=1;", "A=1;PeerMappingOverride=0x0;B=2");
    assert_ne!(text, changed);
    std::fs::write(&p, changed).unwrap();
    let f = one(&tree, "gdr.peer-mapping");
    assert_eq!(f["status"], "warn", "{f}");
    assert_field_contains(&f, "message", "PeerMappingOverride=0 (not 1)");
}

/// Unknown is never pass: no params file (or no RegistryDwords line in it) is a skip that
/// says why, classified unknown.
#[test]
fn peer_mapping_unreadable_is_a_skip_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy_fixture("hgx-h100-8gpu", tmp.path());
    let p = tree.join("proc/driver/nvidia/params");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::remove_file(&p).unwrap();
    let f = one(&tree, "gdr.peer-mapping");
    assert_eq!(
        (&f["status"], &f["skip"]),
        (&"skip".into(), &"unknown".into()),
        "{f}"
    );
    assert_field_contains(&f, "message", "/proc/driver/nvidia/params unreadable");

    let without: String = text
        .lines()
        .filter(|l| !l.starts_with("RegistryDwords:"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&p, without).unwrap();
    let f = one(&tree, "gdr.peer-mapping");
    assert_eq!(
        (&f["status"], &f["skip"]),
        (&"skip".into(), &"unknown".into()),
        "{f}"
    );
    assert_field_contains(&f, "message", "no RegistryDwords line");
}

#[test]
fn mlx5dv_passes_on_connectx_and_warns_without_libmlx5() {
    let f = findings(&repo().join("fixtures/hgx-h100-8gpu"), "rdma.mlx5dv");
    assert_eq!(f.len(), 12);
    assert!(f.iter().all(|x| x["status"] == "pass"), "{f:?}");

    let tmp = tempfile::tempdir().unwrap();
    let tree = copy_fixture("pcie-2socket-roce", tmp.path());
    let p = tree.join("libs.json");
    let mut libs: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    libs["libs"]["libmlx5.so.1"] = serde_json::json!({
        "loaded": false,
        "error": "libmlx5.so.1: cannot open shared object file: No such file or directory",
        "symbols": {}
    });
    std::fs::write(&p, serde_json::to_vec(&libs).unwrap()).unwrap();
    let f = findings(&tree, "rdma.mlx5dv");
    assert_eq!(f.len(), 4);
    for x in &f {
        assert_eq!(x["status"], "warn", "{x}");
        assert_field_contains(x, "message", "cannot open shared object");
        assert_field_contains(x, "remediation", "ibverbs-providers");
    }
}

/// A device on another driver is not applicable; one whose driver cannot be read is unknown.
#[test]
fn mlx5dv_other_driver_not_applicable() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy_fixture("vm-flat-4gpu", tmp.path());
    let ib = tree.join("sys/class/infiniband/mlx5_0/device");
    let dev = std::fs::canonicalize(&ib).unwrap();
    let link = dev.join("driver");
    let target = std::fs::read_link(&link).unwrap();
    assert!(target.ends_with("mlx5_core"), "{target:?}");
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(target.with_file_name("bnxt_en"), &link).unwrap();
    let f = one(&tree, "rdma.mlx5dv");
    assert_eq!(
        (&f["status"], &f["skip"]),
        (&"skip".into(), &"not-applicable".into()),
        "{f}"
    );
    assert_field_contains(&f, "message", "driver bnxt_en");

    std::fs::remove_file(&link).unwrap();
    let f = one(&tree, "rdma.mlx5dv");
    assert_eq!(
        (&f["status"], &f["skip"]),
        (&"skip".into(), &"unknown".into()),
        "{f}"
    );
    assert_field_contains(&f, "message", "no driver bound");
}

/// `f[key]` is a string containing `needle` (the whole finding in the failure message).
fn assert_field_contains(f: &serde_json::Value, key: &str, needle: &str) {
    assert!(
        f[key].as_str().is_some_and(|v| v.contains(needle)),
        "{key} lacks {needle:?}: {f}"
    );
}
