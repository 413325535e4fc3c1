//! hwloc's own recording of a ConnectX-4 host: gpudoctor's PCI tree and NUMA
//! placement must agree with hwloc's expected `lstopo` output for the same tree
//! (`hwloc-expected.console`, from hwloc's test suite), and both ConnectX-4s must be NICs even
//! though the recording holds no RDMA device for them.

use crate::{gpudoctor, repo};
use std::collections::BTreeMap;

const TREE: &str = "fixtures/hwloc-32intel64-2p8co2t-8ve";

/// busid -> (parent bridge busid, None under a host bridge; NUMA node of its package), from
/// hwloc's console output: objects nest by two-space indentation, `NUMANode L#i (P#n ...)`
/// opens each package's memory, `PCIBridge`/`PCI` lines carry `busid=`.
fn hwloc_expected() -> BTreeMap<String, (Option<String>, u32)> {
    let text = std::fs::read_to_string(repo().join(TREE).join("hwloc-expected.console")).unwrap();
    let mut out = BTreeMap::new();
    // (indent, busid) of the bridges open above the current line.
    let mut bridges: Vec<(usize, String)> = Vec::new();
    let mut node = None;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let l = line.trim_start();
        if l.starts_with("Package ") {
            bridges.clear();
        }
        if let Some(rest) = l.strip_prefix("NUMANode ") {
            let p = rest.split("(P#").nth(1).and_then(|r| r.split(' ').next());
            node = p.and_then(|p| p.parse::<u32>().ok());
        }
        bridges.retain(|(i, _)| *i < indent);
        if l.starts_with("HostBridge ") {
            bridges.clear();
        }
        let is_bridge = l.starts_with("PCIBridge ");
        if !(is_bridge || l.starts_with("PCI ")) {
            continue;
        }
        let bus = l
            .split("busid=")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .unwrap()
            .to_string();
        let parent = bridges.last().map(|(_, b)| b.clone());
        out.insert(
            bus.clone(),
            (parent, node.expect("a NUMA node before any PCI object")),
        );
        if is_bridge {
            bridges.push((indent, bus));
        }
    }
    out
}

#[test]
fn pci_tree_and_numa_agree_with_hwloc() {
    let want = hwloc_expected();
    assert_eq!(
        want.len(),
        28,
        "hwloc lists 16 PCI bridges and 12 PCI functions"
    );
    let out = gpudoctor()
        .args(["topo", "--json", "--root", TREE])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let t = &v["topology"];
    let devices = t["devices"].as_array().unwrap();
    let listed: Vec<&str> = devices.iter().map(|d| d["bdf"].as_str().unwrap()).collect();
    let mut got = BTreeMap::new();
    for d in devices {
        // hwloc hangs a function under the nearest bridge it could read: 0000:5f:03.0 is in
        // 0000:60:00.x's sysfs path but not in the recorded /sys/bus/pci/devices.
        let parent = d["upstream"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| u.as_str().unwrap())
            .rfind(|u| listed.contains(u))
            .map(str::to_string);
        let node = d["numa"]["node"].as_u64().unwrap() as u32;
        got.insert(d["bdf"].as_str().unwrap().to_string(), (parent, node));
    }
    assert_eq!(got, want);
    // Both ConnectX-4s are NICs, without RDMA devices; the i40e X722 ports are not judged.
    let bare: Vec<&str> = t["nics_without_rdma"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["bdf"].as_str().unwrap())
        .collect();
    assert_eq!(bare, ["0000:1a:00.0", "0000:3e:00.0"]);
    assert_eq!(t["nics"].as_array().unwrap().len(), 0);
    let tree = gpudoctor().args(["topo", "--root", TREE]).output().unwrap();
    let tree = String::from_utf8(tree.stdout).unwrap();
    assert!(
        !tree.contains("No GPUs, NVSwitches or RDMA NICs found"),
        "{tree}"
    );
    assert!(
        tree.contains("0000:1a:00.0 NIC (no RDMA device seen, needs mlx5_ib)"),
        "{tree}"
    );
}

/// The recording has neither /sys/class/infiniband nor the module lists: rdma.driver cannot
/// tell a missing mlx5_ib from an uncaptured one, so it says unknown for both NICs, and no
/// check passes on config space a non-root recorder could not read.
#[test]
fn foreign_recording_without_rdma_class_is_unknown() {
    let out = gpudoctor()
        .args(["check", "--json", "--root", TREE])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = v["checks"].as_array().unwrap();
    let driver: Vec<&serde_json::Value> =
        checks.iter().filter(|c| c["id"] == "rdma.driver").collect();
    assert_eq!(driver.len(), 2, "{driver:?}");
    for f in driver {
        assert_eq!(f["status"], "skip", "{f}");
        assert_eq!(f["skip"], "unknown", "{f}");
        assert!(f["message"].as_str().unwrap().contains("mlx5_ib"), "{f}");
    }
    for c in checks.iter().filter(|c| c["id"] == "pcie.devctl") {
        assert_eq!(c["skip"], "not-root", "{c}");
    }
    // Not a single check said "no RDMA devices" about the two NICs and passed.
    assert!(
        checks
            .iter()
            .filter(|c| c["status"] == "pass")
            .all(|c| !c["id"].as_str().unwrap().starts_with("rdma."))
    );
}
