//! Platform rules on altered copies of the fixtures: a GPU model without GPUDirect RDMA, a
//! model gpudoctor does not know, and a link width a VM reports as 0.

use crate::rdma_unreadable_is_unknown::findings;
use crate::{check_json, copy_fixture};
use std::path::Path;

fn finding<'a>(v: &'a serde_json::Value, id: &str, subject: &str) -> &'a serde_json::Value {
    findings(v, id)
        .into_iter()
        .find(|c| c["subject"] == subject)
        .unwrap_or_else(|| panic!("no {id} finding on {subject}"))
}

/// Gives the function at `bdf` another PCI device id, in sysfs and in its config space.
fn set_device_id(tree: &Path, bdf: &str, id: u16) {
    let dir = tree.join("sys/bus/pci/devices").join(bdf);
    std::fs::write(dir.join("device"), format!("0x{id:04x}\n")).unwrap();
    let cfg = dir.join("config");
    if let Ok(mut b) = std::fs::read(&cfg) {
        b[2..4].copy_from_slice(&id.to_le_bytes());
        std::fs::write(&cfg, b).unwrap();
    }
}

/// Renames the GPUs in nvml.json (NVML's name is the one the topology shows).
fn set_nvml_names(tree: &Path, name: &str) {
    let p = tree.join("nvml.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    for g in v["gpus"].as_array_mut().unwrap() {
        g["name"] = name.into();
    }
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
}

#[test]
fn a_geforce_gpu_is_never_gpudirect_ready() {
    let (_g, tree) = copy_fixture("hgx-h100-8gpu");
    let root = tree.display().to_string();
    // GPU0 is PIX to mlx5_0 with peermem loaded: ready on the fixture as recorded.
    let (_, v) = check_json(&["--root", &root]);
    assert_eq!(finding(&v, "gdr.path", "GPU0")["status"], "pass");
    // The same slot holding a GeForce RTX 4090 (10de:2684): no GPUDirect RDMA, whatever the path.
    // GPU0 (first NVIDIA display function in bus order).
    let gpu0 = "0000:1b:00.0";
    set_device_id(&tree, gpu0, 0x2684);
    set_nvml_names(&tree, "NVIDIA GeForce RTX 4090");
    let (code, v) = check_json(&["--root", &root]);
    assert_eq!(code, 1);
    let f = finding(&v, "gdr.path", "GPU0");
    assert_eq!(f["status"], "fail", "{f}");
    let msg = f["message"].as_str().unwrap();
    assert!(msg.contains("cannot do GPUDirect RDMA"), "{msg}");
    assert!(msg.contains("NCCL 2.30.7"), "{msg}");
    assert!(msg.contains("cudaDevAttrGPUDirectRDMASupported"), "{msg}");
    assert!(f.to_string().contains("10de:2684"), "{f}");
}

#[test]
fn an_unknown_gpu_model_is_unknown_not_ready() {
    let (_g, tree) = copy_fixture("pcie-2socket-roce");
    let root = tree.display().to_string();
    // A Blackwell-generation id the model table does not hold.
    for bdf in [
        "0000:01:00.0",
        "0000:21:00.0",
        "0000:81:00.0",
        "0000:c1:00.0",
    ] {
        set_device_id(&tree, bdf, 0x31c0);
    }
    set_nvml_names(&tree, "NVIDIA Experimental GPU");
    let (_, v) = check_json(&["--root", &root]);
    for f in findings(&v, "gdr.path") {
        assert_eq!(f["status"], "skip", "{f}");
        assert!(f["message"].as_str().unwrap().contains("unknown"), "{f}");
    }
}

#[test]
fn a_link_width_of_zero_is_unknown_never_x0() {
    let (_g, tree) = copy_fixture("vm-flat-4gpu");
    let root = tree.display().to_string();
    let dir = tree.join("sys/bus/pci/devices/0000:00:04.0");
    // Link Status from config space: width field 0 (what a virtual port may show).
    let cfg = dir.join("config");
    let mut b = std::fs::read(&cfg).unwrap();
    let mut ptr = usize::from(b[0x34]);
    let mut cap = None;
    while ptr != 0 && ptr + 2 < b.len() {
        if b[ptr] == 0x10 {
            cap = Some(ptr);
            break;
        }
        ptr = usize::from(b[ptr + 1]);
    }
    let cap = cap.expect("PCI Express capability");
    let sta = u16::from_le_bytes([b[cap + 0x12], b[cap + 0x13]]) & !0x03f0;
    b[cap + 0x12..cap + 0x14].copy_from_slice(&sta.to_le_bytes());
    std::fs::write(&cfg, &b).unwrap();
    let (_, v) = check_json(&["--root", &root]);
    let f = finding(&v, "pcie.link-width", "0000:00:04.0");
    assert_eq!(f["status"], "skip", "{f}");
    let msg = f["message"].as_str().unwrap();
    assert!(
        !msg.contains("trained x0") && !msg.contains("x0 ("),
        "{msg}"
    );
    assert!(msg.contains("link width unknown"), "{msg}");
    assert!(msg.contains("0, not a valid value"), "{msg}");
    assert!(msg.contains("VM"), "{msg}");
    // Without config space, from the kernel's attribute reading 0.
    std::fs::remove_file(&cfg).unwrap();
    std::fs::write(dir.join("current_link_width"), "0\n").unwrap();
    let (_, v) = check_json(&["--root", &root]);
    let f = finding(&v, "pcie.link-width", "0000:00:04.0");
    assert_eq!(f["status"], "skip", "{f}");
    let msg = f["message"].as_str().unwrap();
    assert!(
        msg.contains("current_link_width: unparseable value '0': no value"),
        "{msg}"
    );
    assert!(
        !msg.contains("downtrained") && !msg.contains("trained x0"),
        "{msg}"
    );
    // And the attribute missing altogether.
    std::fs::remove_file(dir.join("current_link_width")).unwrap();
    let (_, v) = check_json(&["--root", &root]);
    assert_eq!(
        finding(&v, "pcie.link-width", "0000:00:04.0")["status"],
        "skip"
    );
}
