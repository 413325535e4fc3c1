//! Absent is a fact that was read; unreadable is unknown (item 2, the RDMA side).
//! Each test damages a copy of a recorded tree the way a broken kernel or a bad recording
//! would, and checks that what could not be read becomes an unknown skip naming it, never
//! "software RDMA", "no RDMA devices" or a pass.

use crate::{gpudoctor, repo};
use std::path::{Path, PathBuf};

pub use crate::copy_fixture;

/// `gpudoctor check --json --root TREE EXTRA...`: (exit code, report).
pub fn check(tree: &Path, extra: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["--root", tree.to_str().unwrap()];
    args.extend_from_slice(extra);
    crate::check_json(&args)
}

pub fn findings<'a>(v: &'a serde_json::Value, id: &str) -> Vec<&'a serde_json::Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .collect()
}

/// The real directory behind /sys/class/infiniband/NAME in `tree`.
fn rdma_dir(tree: &Path, name: &str) -> PathBuf {
    std::fs::canonicalize(tree.join("sys/class/infiniband").join(name)).unwrap()
}

/// Replace the file or link at `p` with `damage`.
fn damage(p: &Path, how: &str) {
    std::fs::remove_file(p).unwrap();
    match how {
        "removed" => {}
        "self-loop" => std::os::unix::fs::symlink(p.file_name().unwrap(), p).unwrap(),
        "a file" => std::fs::write(p, "0000:02:00.0\n").unwrap(),
        "out of the tree" => {
            std::os::unix::fs::symlink("../../../../../../../../../../../etc", p).unwrap()
        }
        _ => unreachable!(),
    }
}

/// The checks about NICs: each must say unknown (or judge), never "not applicable". (gdr.peermem
/// and gdr.dmabuf judge host facts once a NIC is seen on the PCI bus.)
const NIC_CHECKS: &[&str] = &[
    "rdma.driver",
    "rdma.port-state",
    "rdma.roce-gid",
    "rdma.mtu",
    "rdma.fw-consistency",
    "rdma.mlx5dv",
    "numa.gpu-nic",
    "topo.gpu-nic-pairing",
    "gdr.path",
    "gdr.peer-mapping",
];

fn assert_unknown_for_nics(v: &serde_json::Value, what: &str, must_name: &str) {
    for id in NIC_CHECKS {
        let fs = findings(v, id);
        assert!(!fs.is_empty(), "{what}: no {id} finding");
        for f in &fs {
            let m = f["message"].as_str().unwrap();
            assert!(
                f["skip"] != "not-applicable",
                "{what}: {id} not applicable: {f}"
            );
            assert!(!m.contains("software RDMA"), "{what}: {id}: {f}");
            assert!(!m.contains("no RDMA devices"), "{what}: {id}: {f}");
        }
        assert!(
            fs.iter().any(|f| f["status"] == "skip"
                && f["skip"] == "unknown"
                && f.to_string().contains(must_name)),
            "{what}: {id} has no unknown skip naming {must_name}: {fs:?}"
        );
    }
}

/// An RDMA device whose `device` link cannot be read (removed with no `parent` beside it, a
/// loop, a file, a link out of the tree) is on an unknown PCI function, not software RDMA:
/// every NIC check says unknown naming it, the topology lists it as unresolved, and
/// `--strict --fail-on-skip` fails as it does on the intact tree (it exited 0 before).
#[test]
fn unreadable_device_link_is_unknown_not_software_rdma() {
    let (_g, intact) = copy_fixture("pcie-2socket-roce");
    let (code, _) = check(&intact, &["--strict", "--fail-on-skip"]);
    assert_eq!(code, 1, "control: the intact tree fails the gate");
    for how in ["removed", "self-loop", "a file", "out of the tree"] {
        let (_g, tree) = copy_fixture("pcie-2socket-roce");
        for n in 0..4 {
            damage(&rdma_dir(&tree, &format!("mlx5_{n}")).join("device"), how);
        }
        let (code, v) = check(&tree, &["--strict", "--fail-on-skip"]);
        assert_eq!(code, 1, "{how}: {}", v["status"]);
        assert_unknown_for_nics(&v, how, "mlx5_2");
        let port = findings(&v, "rdma.port-state");
        assert!(
            port.iter()
                .any(|f| f["subject"] == "mlx5_2"
                    && f["message"].as_str().unwrap().contains("/device")),
            "{how}: {port:?}"
        );
        let topo = gpudoctor()
            .args(["topo", "--json", "--root"])
            .arg(&tree)
            .output()
            .unwrap();
        let t: serde_json::Value = serde_json::from_slice(&topo.stdout).unwrap();
        let t = &t["topology"];
        assert_eq!(t["software_rdma"].as_array().unwrap().len(), 0, "{how}");
        let unresolved = t["unresolved_rdma"].as_array().unwrap();
        assert_eq!(unresolved.len(), 4, "{how}: {unresolved:?}");
        let text = gpudoctor()
            .args(["topo", "--matrix", "--root"])
            .arg(&tree)
            .output()
            .unwrap();
        let text = String::from_utf8(text.stdout).unwrap();
        assert!(
            text.contains("mlx5_2") && text.contains("PCI function unknown"),
            "{how}: {text}"
        );
    }
    // One damaged link among intact ones: the others are still judged, the one is unknown.
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    damage(&rdma_dir(&tree, "mlx5_2").join("device"), "self-loop");
    let (_, v) = check(&tree, &[]);
    let port = findings(&v, "rdma.port-state");
    assert!(
        port.iter()
            .any(|f| f["subject"] == "mlx5_0/1" && f["status"] == "pass")
    );
    assert!(
        port.iter()
            .any(|f| f["subject"] == "mlx5_2" && f["skip"] == "unknown"),
        "{port:?}"
    );
}

/// A software RDMA device read as such (a `parent` netdev, no `device` link) stays software:
/// not a NIC to judge, and not unknown.
#[test]
fn software_rdma_is_read_from_its_parent() {
    let (_g, tree) = copy_fixture("vm-flat-4gpu");
    let d = rdma_dir(&tree, "mlx5_0");
    std::fs::remove_file(d.join("device")).unwrap();
    std::fs::write(d.join("parent"), "eth0\n").unwrap();
    let (_, v) = check(&tree, &[]);
    let port = findings(&v, "rdma.port-state");
    assert_eq!(port.len(), 1, "{port:?}");
    assert_eq!(port[0]["skip"], "not-applicable", "{port:?}");
}

/// An unreadable /sys/class/infiniband (not a directory, a loop) is unknown for every NIC,
/// not "no RDMA devices"; an absent one on a host without RDMA hardware stays not applicable.
#[test]
fn unreadable_rdma_class_is_unknown_not_absent() {
    for how in ["a file", "self-loop"] {
        let (_g, tree) = copy_fixture("pcie-2socket-roce");
        let class = tree.join("sys/class/infiniband");
        std::fs::remove_dir_all(&class).unwrap();
        match how {
            "a file" => std::fs::write(&class, "").unwrap(),
            _ => std::os::unix::fs::symlink("infiniband", &class).unwrap(),
        }
        let (code, v) = check(&tree, &["--strict", "--fail-on-skip"]);
        assert_eq!(code, 1, "{how}");
        assert_unknown_for_nics(&v, how, "/sys/class/infiniband");
    }
    let (_g, tree) = copy_fixture("h200x1-vm");
    let (_, v) = check(&tree, &[]);
    let port = findings(&v, "rdma.port-state");
    assert_eq!(port.len(), 1, "{port:?}");
    assert_eq!(port[0]["skip"], "not-applicable", "control: {port:?}");
}

/// rdma.port-state on an InfiniBand port: LID 0 fails (control); an unreadable `lid` or
/// `link_layer` is unknown (both passed before).
#[test]
fn port_state_unreadable_lid_or_link_layer_is_unknown() {
    let port = |tree: &Path| -> serde_json::Value {
        let (_, v) = check(tree, &[]);
        findings(&v, "rdma.port-state")
            .into_iter()
            .find(|f| f["subject"] == "mlx5_0/1")
            .unwrap()
            .clone()
    };
    let (_g, tree) = copy_fixture("vm-flat-4gpu");
    let p = rdma_dir(&tree, "mlx5_0").join("ports/1");
    std::fs::write(p.join("lid"), "0x0\n").unwrap();
    assert_eq!(port(&tree)["status"], "fail", "control: LID 0");
    for file in ["lid", "link_layer"] {
        for how in ["removed", "self-loop"] {
            let (_g, tree) = copy_fixture("vm-flat-4gpu");
            let p = rdma_dir(&tree, "mlx5_0").join("ports/1").join(file);
            damage(&p, how);
            let f = port(&tree);
            assert_eq!(f["status"], "skip", "{file} {how}: {f}");
            assert_eq!(f["skip"], "unknown", "{file} {how}: {f}");
            assert!(f.to_string().contains(file), "{file} {how}: {f}");
        }
    }
}

/// rdma.fw-consistency: a NIC whose `fw_ver` cannot be read is unknown, and its model is not
/// said to run "one firmware" (the unread NIC may differ).
#[test]
fn fw_consistency_unreadable_fw_is_unknown() {
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    damage(&rdma_dir(&tree, "mlx5_2").join("fw_ver"), "self-loop");
    let (_, v) = check(&tree, &[]);
    let fw = findings(&v, "rdma.fw-consistency");
    assert!(
        fw.iter().all(|f| f["status"] != "pass"),
        "a model with an unread firmware passed: {fw:?}"
    );
    assert!(
        fw.iter().any(|f| f["subject"] == "mlx5_2"
            && f["skip"] == "unknown"
            && f["message"].as_str().unwrap().contains("fw_ver")),
        "{fw:?}"
    );
    // The fixture's variant with differing firmware still warns with one NIC unread.
    let (_, intact) = check(&repo().join("fixtures/pcie-2socket-roce"), &[]);
    assert!(
        findings(&intact, "rdma.fw-consistency")
            .iter()
            .any(|f| f["status"] == "pass"),
        "control: the intact tree passes"
    );
}

/// rdma.mlx5dv: libmlx5 loads but the direct-verbs symbols were never looked up (a libs.json
/// without them): unknown, not a pass.
#[test]
fn mlx5dv_unrecorded_symbols_are_unknown() {
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    let path = tree.join("libs.json");
    let mut libs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    libs["libs"]["libmlx5.so.1"]["symbols"] = serde_json::json!({});
    std::fs::write(&path, serde_json::to_vec(&libs).unwrap()).unwrap();
    let (_, v) = check(&tree, &[]);
    let fs = findings(&v, "rdma.mlx5dv");
    assert!(!fs.is_empty());
    for f in fs {
        assert_eq!(f["status"], "skip", "{f}");
        assert_eq!(f["skip"], "unknown", "{f}");
        assert!(
            f["message"].as_str().unwrap().contains("not recorded"),
            "{f}"
        );
    }
    let (_, intact) = check(&repo().join("fixtures/pcie-2socket-roce"), &[]);
    assert!(
        findings(&intact, "rdma.mlx5dv")
            .iter()
            .all(|f| f["status"] == "pass"),
        "control"
    );
}

/// An unreadable /sys/class/net leaves a RoCE port's netdev unknown: rdma.mtu says so and
/// names the directory (it said only "no netdev found" before).
#[test]
fn unreadable_net_class_is_named() {
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    let class = tree.join("sys/class/net");
    std::fs::remove_dir_all(&class).unwrap();
    std::fs::write(&class, "").unwrap();
    let (_, v) = check(&tree, &[]);
    let mtu = findings(&v, "rdma.mtu");
    assert!(!mtu.is_empty());
    for f in mtu {
        assert_eq!(f["skip"], "unknown", "{f}");
        assert!(
            f["message"].as_str().unwrap().contains("/sys/class/net"),
            "{f}"
        );
    }
}
