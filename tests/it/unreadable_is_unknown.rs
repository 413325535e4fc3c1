//! Absent is a fact that was read; unreadable is unknown (item 2): each test damages a
//! copy of a fixture the way a dying device, a garbled file or a failed NVML call would, checks
//! first that the intact copy is judged (a control), and then that the damaged copy gives an
//! unknown skip naming what could not be read, never a pass or "not applicable".

use gpudoctor::config::CheckOptions;
use gpudoctor::source::{Source, SourceSpec};
use serde_json::Value;
use std::path::{Path, PathBuf};

use crate::copy_fixture as copy;

/// Every finding of a level-0 check of `tree`, in process.
fn findings(tree: &Path) -> Vec<Value> {
    let source = Source::open(&SourceSpec::Root(tree.to_path_buf())).unwrap();
    let r = gpudoctor::run::check_report_from(&source, &CheckOptions::level0()).unwrap();
    serde_json::to_value(&r).unwrap()["checks"]
        .as_array()
        .unwrap()
        .clone()
}

fn find(v: &[Value], id: &str, subject: &str) -> Value {
    v.iter()
        .find(|c| c["id"] == id && c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {id} finding on {subject}"))
        .clone()
}

/// The finding is an unknown skip whose message names `why`.
fn assert_unknown(f: &Value, why: &str) {
    assert_eq!(f["status"], "skip", "{f}");
    assert_eq!(f["skip"], "unknown", "{f}");
    assert!(f["message"].as_str().unwrap().contains(why), "{why}: {f}");
}

/// A device's directory in the tree (its canonical path, where its files are).
fn dev_dir(tree: &Path, bdf: &str) -> PathBuf {
    std::fs::canonicalize(tree.join("sys/bus/pci/devices").join(bdf)).unwrap()
}

/// The config-space offset of the standard capability `id`.
fn cap(b: &[u8], id: u8) -> usize {
    let mut p = b[0x34] as usize & 0xfc;
    while p != 0 {
        if b[p] == id {
            return p;
        }
        p = b[p + 1] as usize & 0xfc;
    }
    panic!("no capability 0x{id:02x}");
}

/// The extended capabilities: (offset, id).
fn ext_caps(b: &[u8]) -> Vec<(usize, u16)> {
    let mut out = Vec::new();
    let mut off = 0x100;
    loop {
        let h = u32::from_le_bytes(b[off..off + 4].try_into().unwrap());
        if h == 0 {
            return out;
        }
        out.push((off, (h & 0xffff) as u16));
        let next = ((h >> 20) & 0xffc) as usize;
        if next == 0 {
            return out;
        }
        off = next;
    }
}

/// GPU0 of hgx-h100-8gpu.
const HGX_GPU0: &str = "0000:1b:00.0";

/// `pcie.aer` passed on a counter file with one garbled line (`TOTAL_ERR_FATAL 7 garbage`): the
/// other two files' zeros made "no errors". Any line that does not parse makes the file's count
/// unknown, and so "no errors" unknown.
#[test]
fn garbled_aer_counter_file_is_unknown() {
    for (what, garble) in [
        (
            "TOTAL_ERR_FATAL 7 garbage",
            (|s: &str| s.replace("TOTAL_ERR_FATAL 0", "TOTAL_ERR_FATAL 7 garbage"))
                as fn(&str) -> String,
        ),
        ("a garbled counter line", |s: &str| {
            format!("Undefined x7\n{s}")
        }),
        ("two totals", |s: &str| format!("{s}TOTAL_ERR_FATAL 0\n")),
    ] {
        let (_tmp, tree) = copy("hgx-h100-8gpu");
        let before = find(&findings(&tree), "pcie.aer", HGX_GPU0);
        assert_eq!(before["status"], "pass", "control: {before}");
        let file = dev_dir(&tree, HGX_GPU0).join("aer_dev_fatal");
        let s = std::fs::read_to_string(&file).unwrap();
        let garbled = garble(&s);
        assert_ne!(garbled, s, "{what}");
        std::fs::write(&file, garbled).unwrap();
        let f = find(&findings(&tree), "pcie.aer", HGX_GPU0);
        assert_unknown(&f, "aer_dev_fatal");
    }
}

/// `iommu.mode` passed on an IOMMU group whose `type` is empty or garbage.
#[test]
fn garbage_iommu_group_type_is_unknown() {
    for garbage in ["", "garbage", "\u{1}DMA-ish"] {
        let (_tmp, tree) = copy("hgx-h100-8gpu");
        let before = find(&findings(&tree), "iommu.mode", "host");
        assert_eq!(before["status"], "pass", "control: {before}");
        // GPU0 is in group 6.
        std::fs::write(tree.join("sys/kernel/iommu_groups/6/type"), garbage).unwrap();
        let f = find(&findings(&tree), "iommu.mode", "host");
        assert_unknown(&f, "not a domain type");
    }
}

/// Link Status 0xffff (a dead or absent device reads all ones) said "x63" and passed
/// `pcie.link-width`; its speed field says Gen15. Neither is a value a link can report.
#[test]
fn link_status_all_ones_is_unknown() {
    let (_tmp, tree) = copy("hgx-h100-8gpu");
    let v = findings(&tree);
    assert_eq!(find(&v, "pcie.link-width", HGX_GPU0)["status"], "pass");
    assert_eq!(find(&v, "pcie.link-speed", HGX_GPU0)["status"], "pass");
    let file = dev_dir(&tree, HGX_GPU0).join("config");
    let mut b = std::fs::read(&file).unwrap();
    let p = cap(&b, 0x10);
    b[p + 0x12..p + 0x14].copy_from_slice(&[0xff, 0xff]);
    std::fs::write(&file, b).unwrap();
    let v = findings(&tree);
    assert_unknown(&find(&v, "pcie.link-width", HGX_GPU0), "x63");
    assert_unknown(&find(&v, "pcie.link-speed", HGX_GPU0), "Gen15");
}

/// The same from the sysfs attributes (read when config space stops at the header): a width
/// no link has (x24 was taken, anything 1..=32 was) or a speed past Gen6 (128 GT/s was Gen7)
/// is unknown.
#[test]
fn impossible_link_attributes_are_unknown() {
    let (_tmp, tree) = copy("hgx-h100-8gpu");
    let dir = dev_dir(&tree, HGX_GPU0);
    let b = std::fs::read(dir.join("config")).unwrap();
    std::fs::write(dir.join("config"), &b[..64]).unwrap();
    let v = findings(&tree);
    assert_eq!(
        find(&v, "pcie.link-width", HGX_GPU0)["status"],
        "pass",
        "control"
    );
    std::fs::write(dir.join("current_link_width"), "24\n").unwrap();
    std::fs::write(dir.join("current_link_speed"), "128.0 GT/s PCIe\n").unwrap();
    let v = findings(&tree);
    assert_unknown(&find(&v, "pcie.link-width", HGX_GPU0), "'24'");
    assert_unknown(&find(&v, "pcie.link-speed", HGX_GPU0), "128.0 GT/s");
}

/// A device's `numa_node` that names no node of the host (4095 on a two-node host) is unknown,
/// with why, not a placement.
#[test]
fn numa_node_not_on_the_host_is_unknown() {
    let (_tmp, tree) = copy("hgx-h100-8gpu");
    std::fs::write(dev_dir(&tree, HGX_GPU0).join("numa_node"), "4095\n").unwrap();
    let source = Source::open(&SourceSpec::Root(tree.clone())).unwrap();
    let inv =
        gpudoctor::inventory::Inventory::collect(&source.sysroot, source.nvml().unwrap()).unwrap();
    let f = &inv.pci[&HGX_GPU0.parse().unwrap()];
    let gpudoctor::reading::Reading::Unknown(why) = &f.numa_node else {
        panic!("numa_node 4095 read as {:?}", f.numa_node);
    };
    assert!(
        why.contains("node 4095 is not one of the host's NUMA nodes (0, 1)"),
        "{why}"
    );
}

/// A second ACS capability after the first hid the first's redirect bits (the walker kept the
/// last one seen). A list that names a capability twice is malformed: the bridge is unknown.
#[test]
fn duplicate_acs_capability_is_unknown() {
    let (_tmp, tree) = copy("hgx-h100-8gpu");
    let v = findings(&tree);
    // A bridge on a GPU peer path with ACS and no redirect bits.
    let bridge = v
        .iter()
        .find(|c| {
            c["id"] == "pcie.acs-redirect"
                && c["status"] == "pass"
                && c["message"].as_str().unwrap().starts_with("ACS present")
        })
        .expect("a bridge with ACS")["subject"]
        .as_str()
        .unwrap()
        .to_string();
    let file = dev_dir(&tree, &bridge).join("config");
    let mut b = std::fs::read(&file).unwrap();
    let caps = ext_caps(&b);
    let (acs, _) = *caps.iter().find(|(_, id)| *id == 0x000d).unwrap();
    // Control: with redirect bits set in its one ACS capability, the bridge fails.
    b[acs + 6..acs + 8].copy_from_slice(&0x001du16.to_le_bytes());
    std::fs::write(&file, &b).unwrap();
    assert_eq!(
        find(&findings(&tree), "pcie.acs-redirect", &bridge)["status"],
        "fail"
    );
    // A second ACS capability, all bits clear, chained after the last one.
    let (last, _) = *caps.last().unwrap();
    let top = caps.iter().map(|(o, _)| *o).max().unwrap();
    let free = (top + 0x40..0xff8)
        .step_by(4)
        .rev()
        .find(|o| b[*o..*o + 8].iter().all(|x| *x == 0))
        .expect("8 free bytes in extended space");
    let h = u32::from_le_bytes(b[last..last + 4].try_into().unwrap());
    b[last..last + 4].copy_from_slice(&((h & 0x000f_ffff) | ((free as u32) << 20)).to_le_bytes());
    b[free..free + 4].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
    b[free + 4..free + 6].copy_from_slice(&0x005fu16.to_le_bytes());
    std::fs::write(&file, &b).unwrap();
    let f = find(&findings(&tree), "pcie.acs-redirect", &bridge);
    assert_unknown(&f, "appears twice");
}

/// A standard capability list that loops or points into the header: the PCI Express capability
/// read from it is not a fact, so neither are Device Control or the link.
#[test]
fn malformed_capability_list_is_unknown() {
    for (what, damage) in [
        (
            "a loop",
            (|b: &mut Vec<u8>, p: usize| b[p + 1] = p as u8) as fn(&mut Vec<u8>, usize),
        ),
        ("a pointer into the header", |b, p| b[p + 1] = 0x20),
    ] {
        let (_tmp, tree) = copy("hgx-h100-8gpu");
        assert_eq!(
            find(&findings(&tree), "pcie.devctl", HGX_GPU0)["status"],
            "pass"
        );
        let file = dev_dir(&tree, HGX_GPU0).join("config");
        let mut b = std::fs::read(&file).unwrap();
        let p = cap(&b, 0x10);
        damage(&mut b, p);
        std::fs::write(&file, &b).unwrap();
        let f = find(&findings(&tree), "pcie.devctl", HGX_GPU0);
        assert_unknown(&f, "capability");
        assert!(
            f["message"].as_str().unwrap().contains("loops")
                || f["message"].as_str().unwrap().contains("header"),
            "{what}: {f}"
        );
    }
}

/// A failed NVLink query on an NVSwitch GPU read as "PCIe GPU or NVLink not supported"
/// (not applicable). An NVLink list that could not be read, or that nvml.json does not hold,
/// is unknown; a list positively read as empty stays "no NVLinks".
#[test]
fn unreadable_nvlink_list_is_unknown() {
    for (what, damage) in [
        (
            "nvlink.0 failed",
            (|g: &mut Value| {
                g["nvlinks"] = Value::Array(Vec::new());
                g["unread"]["nvlink.0"] = "Unknown Error".into();
                g["unread_kind"]["nvlink.0"] = "other".into();
            }) as fn(&mut Value),
        ),
        ("nvlinks not recorded", |g: &mut Value| {
            g.as_object_mut().unwrap().remove("nvlinks");
        }),
    ] {
        let (_tmp, tree) = copy("hgx-h100-8gpu");
        assert_eq!(
            find(&findings(&tree), "gpu.nvlink-down", "GPU0")["status"],
            "pass"
        );
        let path = tree.join("nvml.json");
        let mut n: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        damage(&mut n["gpus"][0]);
        std::fs::write(&path, serde_json::to_vec(&n).unwrap()).unwrap();
        let f = find(&findings(&tree), "gpu.nvlink-down", "GPU0");
        assert_unknown(&f, "NVLink list unreadable");
        assert!(
            f.to_string().contains(what.split(' ').next().unwrap()),
            "{what}: {f}"
        );
    }
    // Positively none: NVML read link 0 as unsupported (an empty list, nothing unread).
    let (_tmp, tree) = copy("hgx-h100-8gpu");
    let path = tree.join("nvml.json");
    let mut n: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    n["gpus"][0]["nvlinks"] = Value::Array(Vec::new());
    std::fs::write(&path, serde_json::to_vec(&n).unwrap()).unwrap();
    let f = find(&findings(&tree), "gpu.nvlink-down", "GPU0");
    assert_eq!(f["skip"], "not-applicable", "{f}");
}

/// Found by the damage audit (tests/it/damage_audit.rs): a GPU whose config space is garbage (its
/// first bytes read as a vendor ID that is not NVIDIA's) or whose function could not be read
/// vanished from every GPU check; a `driver` link that loops or leaves the tree named a driver
/// ("driver", "etc") and made rdma.mlx5dv not applicable; a port above a GPU that could not be
/// read made pcie.slot-mismatch "on the root bus".
#[test]
fn unidentified_functions_and_links_are_unknown() {
    // pcie-2socket-roce: GPU 0000:21:00.0 under port 0000:20:01.1; mlx5_0 on 0000:02:00.0.
    let (_tmp, tree) = copy("pcie-2socket-roce");
    let gpu = "0000:21:00.0";
    let v = findings(&tree);
    for id in ["pcie.link-width", "pcie.slot-mismatch", "pcie.aer"] {
        assert_eq!(find(&v, id, gpu)["status"], "pass", "control {id}");
    }
    assert_eq!(
        find(&v, "rdma.mlx5dv", "mlx5_0")["status"],
        "pass",
        "control"
    );
    let dir = dev_dir(&tree, gpu);
    let config = std::fs::read(dir.join("config")).unwrap();
    std::fs::write(dir.join("config"), b"\xff\xfe garbage\n").unwrap();
    let _ = std::fs::remove_file(dir.join("vendor"));
    let v = findings(&tree);
    for id in ["pcie.link-width", "pcie.aer", "gpu.bar1"] {
        assert_unknown(&find(&v, id, gpu), "may be a GPU or NIC");
    }
    std::fs::write(dir.join("config"), config).unwrap();
    // The port above, unreadable (a link to itself).
    let port = tree.join("sys/bus/pci/devices/0000:20:01.1");
    std::fs::remove_file(&port).unwrap();
    std::os::unix::fs::symlink("0000:20:01.1", &port).unwrap();
    let v = findings(&tree);
    assert_unknown(
        &find(&v, "pcie.slot-mismatch", gpu),
        "port above (0000:20:01.1) was not read",
    );
    // The NIC's driver link, looped and pointing out of the tree.
    let link = dev_dir(&tree, "0000:02:00.0").join("driver");
    for target in ["driver", "../../../../../../../../../../../../etc"] {
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(target, &link).unwrap();
        let f = find(&findings(&tree), "rdma.mlx5dv", "mlx5_0");
        assert_unknown(&f, "names no PCI driver");
    }
}
