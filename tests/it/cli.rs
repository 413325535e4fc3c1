//! Exit codes, stdout/stderr separation and clear errors.

use crate::gpudoctor;

#[test]
fn missing_root_is_exit_2_with_one_line() {
    let out = gpudoctor()
        .args(["topo", "--root", "/nonexistent/tree"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("gpudoctor: error:"), "{err}");
    assert!(err.contains("/nonexistent/tree"), "{err}");
}

#[test]
fn empty_tree_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let out = gpudoctor()
        .args(["topo", "--root"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("no sys/"), "{err}");
    // A sys/ without a PCI bus is also not a tree we can map.
    std::fs::create_dir_all(d.path().join("sys")).unwrap();
    let out = gpudoctor()
        .args(["topo", "--root"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("/sys/bus/pci/devices"), "{err}");
}

#[test]
fn corrupt_nvml_json_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("sys/bus/pci/devices")).unwrap();
    std::fs::write(d.path().join("nvml.json"), "{not json").unwrap();
    let out = gpudoctor()
        .args(["topo", "--root"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("nvml.json"), "{err}");
}

#[test]
fn usage_error_is_exit_2() {
    let out = gpudoctor().args(["topo", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn live_run_never_panics() {
    // This machine may have no GPU, no driver and no RDMA stack: still exit 0 with a topology.
    let out = gpudoctor().args(["topo", "--json"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "gpudoctor.topo/1");
    assert_eq!(v["source"]["kind"], "live");
}
