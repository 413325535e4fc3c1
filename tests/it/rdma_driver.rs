//! rdma.driver: a NIC on the PCI bus without its RDMA device is a finding, with the
//! module that would provide it, whether that module is loaded, and the fix.

use crate::gpudoctor;
use crate::rdma_unreadable_is_unknown::{check, copy_fixture, findings};

const NO_MLX5IB: &str = "fixtures/variants/pcie-2socket-roce--no-mlx5ib/bundle.tar.gz";

/// mlx5_ib not loaded (the variant): every ConnectX function fails, naming mlx5_ib and its
/// fix; the matrix keeps nvidia-smi's rule and notes the NICs it could not list; pairing and
/// gdr.path name the RDMA-less NIC as each GPU's closest.
#[test]
fn mlx5_ib_not_loaded_fails_with_the_module_and_fix() {
    let out = gpudoctor()
        .args(["check", "--json", "--bundle", NO_MLX5IB])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let drv = findings(&v, "rdma.driver");
    let subjects: Vec<&str> = drv.iter().map(|f| f["subject"].as_str().unwrap()).collect();
    assert_eq!(
        subjects,
        [
            "0000:02:00.0",
            "0000:02:00.1",
            "0000:c2:00.0",
            "0000:c2:00.1"
        ]
    );
    for f in &drv {
        assert_eq!(f["status"], "fail", "{f}");
        assert!(
            f["message"]
                .as_str()
                .unwrap()
                .contains("mlx5_ib is not loaded"),
            "{f}"
        );
        assert!(
            f["remediation"]
                .as_str()
                .unwrap()
                .starts_with("`modprobe mlx5_ib`"),
            "{f}"
        );
    }
    for id in ["topo.gpu-nic-pairing", "gdr.path"] {
        for f in findings(&v, id) {
            assert_eq!(f["status"], "fail", "{f}");
            assert!(
                f["message"]
                    .as_str()
                    .unwrap()
                    .contains("has no RDMA device"),
                "{f}"
            );
        }
    }
    let matrix = gpudoctor()
        .args(["topo", "--matrix", "--bundle", NO_MLX5IB])
        .output()
        .unwrap();
    // Notes are prose, wrapped to the width: compared with their line breaks as spaces.
    let matrix = String::from_utf8(matrix.stdout)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        !matrix.contains("NIC0"),
        "the matrix lists RDMA devices only:\n{matrix}"
    );
    assert!(
        matrix.contains("NIC 0000:c2:00.1 (Mellanox MT2892 Family [ConnectX-6 Dx]): no RDMA device seen (mlx5_ib would provide it)"),
        "{matrix}"
    );
    let tree = gpudoctor()
        .args(["topo", "--bundle", NO_MLX5IB])
        .output()
        .unwrap();
    let tree = String::from_utf8(tree.stdout).unwrap();
    assert!(
        tree.contains("0000:02:00.0 NIC (no RDMA device seen, needs mlx5_ib) [enp2s0f0np0]"),
        "{tree}"
    );
}

/// One function's RDMA device gone while mlx5_ib is loaded: that function fails (RDMA disabled
/// or probe failed), the others pass.
#[test]
fn module_loaded_but_no_device_fails_that_function() {
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    std::fs::remove_file(tree.join("sys/class/infiniband/mlx5_3")).unwrap();
    let (_, v) = check(&tree, &[]);
    let drv = findings(&v, "rdma.driver");
    for f in &drv {
        if f["subject"] == "0000:c2:00.1" {
            assert_eq!(f["status"], "fail", "{f}");
            assert!(
                f["message"]
                    .as_str()
                    .unwrap()
                    .contains("although mlx5_ib is loaded"),
                "{f}"
            );
        } else {
            assert_eq!(f["status"], "pass", "{f}");
        }
    }
    assert_eq!(drv.len(), 4);
}

/// A recording without /sys/class/infiniband and without module lists: unknown, never a guess;
/// the same tree with its module lists (ib_core and mlx5_ib absent) fails.
#[test]
fn uncaptured_rdma_class_is_unknown() {
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    std::fs::remove_dir_all(tree.join("sys/class/infiniband")).unwrap();
    let modules = std::fs::read_to_string(tree.join("proc/modules")).unwrap();
    std::fs::write(
        tree.join("proc/modules"),
        modules
            .lines()
            .filter(|l| !l.starts_with("mlx5_ib ") && !l.starts_with("ib_core "))
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    for m in ["mlx5_ib", "ib_core"] {
        let _ = std::fs::remove_dir_all(tree.join("sys/module").join(m));
    }
    let (_, v) = check(&tree, &[]);
    for f in findings(&v, "rdma.driver") {
        assert_eq!(f["status"], "fail", "module lists read: {f}");
        assert!(
            f["message"].as_str().unwrap().contains("(nor ib_core)"),
            "{f}"
        );
    }
    std::fs::remove_file(tree.join("proc/modules")).unwrap();
    std::fs::remove_dir_all(tree.join("sys/module")).unwrap();
    let (_, v) = check(&tree, &[]);
    let drv = findings(&v, "rdma.driver");
    assert_eq!(drv.len(), 4);
    for f in drv {
        assert_eq!(f["status"], "skip", "{f}");
        assert_eq!(f["skip"], "unknown", "{f}");
    }
}
