//! The everyday health checks on damaged copies of the synthetic fixtures: what was not recorded
//! or could not be read is an unknown skip, never a pass; a bundle replays the kernel log.

use crate::{gpudoctor, repo};

use crate::copy_fixture_into as copy;

fn check(source: &[&str]) -> serde_json::Value {
    crate::check_json(source).1
}

/// (status, skip kind, message) of every finding of `id`.
fn findings(v: &serde_json::Value, id: &str) -> Vec<(String, String, String)> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == id)
        .map(|c| {
            (
                c["status"].as_str().unwrap().to_string(),
                c["skip"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn all_unknown(v: &serde_json::Value, id: &str, why: &str) {
    let f = findings(v, id);
    assert!(!f.is_empty(), "{id}: no findings");
    for (status, skip, msg) in &f {
        assert_eq!(
            (status.as_str(), skip.as_str()),
            ("skip", "unknown"),
            "{id}: {msg}"
        );
        assert!(msg.contains(why), "{id}: {msg}");
    }
}

/// An nvml.json recorded before the new fields, a tree without kmsg.json, /proc/uptime or
/// port counters: every new check skips as unknown with the reason (all of them pass on the
/// intact tree).
#[test]
fn unrecorded_facts_are_unknown_never_pass() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["hgx-h100-8gpu", "pcie-2socket-roce"] {
        let intact = check(&[
            "--root",
            repo().join("fixtures").join(name).to_str().unwrap(),
        ]);
        for id in [
            "rdma.port-errors",
            "rdma.link-flaps",
            "gpu.xid",
            "gpu.throttle",
        ] {
            assert!(
                findings(&intact, id).iter().all(|f| f.0 == "pass"),
                "{name} {id}"
            );
        }
        let tree = copy(name, tmp.path());
        let path = tree.join("nvml.json");
        let mut n: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for g in n["gpus"].as_array_mut().unwrap() {
            let g = g.as_object_mut().unwrap();
            g.remove("clock_event_reasons");
            g.remove("nvlink_errors");
            g.remove("fabric");
        }
        std::fs::write(&path, serde_json::to_vec(&n).unwrap()).unwrap();
        std::fs::remove_file(tree.join("kmsg.json")).unwrap();
        for e in std::fs::read_dir(tree.join("sys/class/infiniband")).unwrap() {
            let dev = std::fs::canonicalize(e.unwrap().path()).unwrap();
            std::fs::remove_dir_all(dev.join("ports/1/counters")).unwrap();
        }
        let v = check(&["--root", tree.to_str().unwrap()]);
        all_unknown(&v, "gpu.throttle", "not recorded");
        all_unknown(&v, "gpu.xid", "not recorded (no kmsg.json");
        all_unknown(&v, "rdma.port-errors", "counters unreadable");
        all_unknown(&v, "rdma.link-flaps", "both unreadable");
        if name == "hgx-h100-8gpu" {
            all_unknown(&v, "gpu.nvlink-errors", "not recorded");
            all_unknown(&v, "gpu.fabric", "not recorded");
        }
    }
}

/// Rates need the time since boot: without /proc/uptime a nonzero rate counter is not judged
/// (and never passes); a fatal counter fails whatever the uptime.
#[test]
fn rate_counters_without_uptime_are_not_judged() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy("pcie-2socket-roce", tmp.path());
    std::fs::remove_file(tree.join("proc/uptime")).unwrap();
    let port = |dev: &str| {
        std::fs::canonicalize(tree.join("sys/class/infiniband").join(dev))
            .unwrap()
            .join("ports/1")
    };
    std::fs::write(port("mlx5_0").join("counters/symbol_error"), "5000000\n").unwrap();
    std::fs::write(
        port("mlx5_1").join("counters/local_link_integrity_errors"),
        "2\n",
    )
    .unwrap();
    let v = check(&["--root", tree.to_str().unwrap()]);
    let f = findings(&v, "rdma.port-errors");
    assert_eq!(
        (f[0].0.as_str(), f[0].1.as_str()),
        ("skip", "unknown"),
        "{:?}",
        f[0]
    );
    assert!(f[0].2.contains("time since boot is unknown"), "{:?}", f[0]);
    assert_eq!(f[1].0, "fail", "{:?}", f[1]);
    assert!(
        f[1].2.contains("local_link_integrity_errors 2"),
        "{:?}",
        f[1]
    );
    assert!(f[2..].iter().all(|x| x.0 == "pass"));
}

/// `gpudoctor bundle` records the kernel log (kmsg.json) and the port counters: the Xid and
/// flap variants replay from a bundle made of their unpacked tree with the same verdicts.
#[test]
fn kernel_log_and_counters_replay_from_a_bundle() {
    let tmp = tempfile::tempdir().unwrap();
    for (variant, id) in [
        ("vm-flat-4gpu--xid", "gpu.xid"),
        ("pcie-2socket-roce--link-flaps", "rdma.link-flaps"),
        ("pcie-2socket-roce--port-errors", "rdma.port-errors"),
    ] {
        let given = repo()
            .join("fixtures/variants")
            .join(variant)
            .join("bundle.tar.gz");
        let tree = tmp.path().join(variant);
        std::fs::create_dir_all(&tree).unwrap();
        let st = std::process::Command::new("tar")
            .arg("-xzf")
            .arg(&given)
            .arg("-C")
            .arg(&tree)
            .status()
            .unwrap();
        assert!(st.success());
        let out_bundle = tmp.path().join(format!("{variant}.tar.gz"));
        let st = gpudoctor()
            .args(["bundle", "--root"])
            .arg(&tree)
            .arg("-o")
            .arg(&out_bundle)
            .output()
            .unwrap();
        assert!(
            st.status.success(),
            "{}",
            String::from_utf8_lossy(&st.stderr)
        );
        let a = check(&["--bundle", given.to_str().unwrap()]);
        let b = check(&["--bundle", out_bundle.to_str().unwrap()]);
        let fa = findings(&a, id);
        assert!(fa.iter().any(|f| f.0 == "fail"), "{variant}: {fa:?}");
        assert_eq!(fa, findings(&b, id), "{variant}");
    }
}

/// gpu.fabric on the real 4-GPU VM (h100x4-live): its GPUs are registered with an NVSwitch
/// fabric the VM does not see (no NVSwitch function on its PCI bus, no fabric manager in it):
/// the fabric is managed by the host, which is a pass (the first survey warned on every GPU of
/// this healthy machine). Where an NVSwitch is on the bus, the fabric manager must run here
/// (warn, with the switch count); where a function's class cannot be read, it might be a switch
/// (warn, never the pass).
#[test]
fn fabric_managed_outside_a_vm_passes_only_without_switches_in_it() {
    let v = check(&["--root", "fixtures/h100x4-live"]);
    let f = findings(&v, "gpu.fabric");
    assert_eq!(f.len(), 4, "{f:?}");
    for (status, _, msg) in &f {
        assert_eq!(status, "pass", "{msg}");
        assert!(msg.contains("managed outside this OS"), "{msg}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy("h100x4-live", tmp.path());
    let dev = tree.join("sys/devices/pci0000:00/0000:00:05.0");
    // A switch on the bus (a virtio function recast as an NVIDIA bridge-class 0x0680 device;
    // its config space, which would name virtio first, removed).
    std::fs::write(dev.join("vendor"), "0x10de\n").unwrap();
    std::fs::write(dev.join("class"), "0x068000\n").unwrap();
    std::fs::remove_file(dev.join("config")).unwrap();
    let v = check(&["--root", tree.to_str().unwrap()]);
    for (status, _, msg) in findings(&v, "gpu.fabric") {
        assert_eq!(status, "warn", "{msg}");
        assert!(msg.contains("nvidia-fabricmanager is not running"), "{msg}");
    }
    // A function whose class is garbage (its config space gone): it might be a switch.
    std::fs::write(dev.join("vendor"), "0x1af4\n").unwrap();
    std::fs::write(dev.join("class"), "zz\n").unwrap();
    let v = check(&["--root", tree.to_str().unwrap()]);
    for (status, _, msg) in findings(&v, "gpu.fabric") {
        assert_eq!(status, "warn", "{msg}");
    }
}

/// A guest kernel without native AER control keeps no `aer_dev_*` counters (the recorded 4x
/// H100 VM): pcie.aer is judged from the AER capability's status registers in config space.
/// Clear registers pass, an unmasked latched error warns and names it, a masked one does not,
/// 64 bytes of config space (a reader without root) is not-root, never a pass.
#[test]
fn aer_from_config_space_where_the_kernel_keeps_no_counters() {
    const GPU0: &str = "0000:00:06.0";
    let aer = |v: &serde_json::Value| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "pcie.aer" && c["subject"] == GPU0)
            .cloned()
            .unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy("h100x4-live", tmp.path());
    let src = tree.to_str().unwrap().to_string();
    let intact = aer(&check(&["--root", &src]));
    assert_eq!(intact["status"], "pass", "{intact}");
    let evidence = intact["evidence"].to_string();
    assert!(
        evidence.contains("AER capability at 0x1b8") && evidence.contains("UESta 0x00000000"),
        "{evidence}"
    );
    let config = tree.join(format!("sys/devices/pci0000:00/{GPU0}/config"));
    let clean = std::fs::read(&config).unwrap();
    let with = |ue: u32, ce: u32| {
        let mut b = clean.clone();
        b[0x1b8 + 4..0x1b8 + 8].copy_from_slice(&ue.to_le_bytes());
        b[0x1b8 + 0x10..0x1b8 + 0x14].copy_from_slice(&ce.to_le_bytes());
        std::fs::write(&config, b).unwrap();
        aer(&check(&["--root", &src]))
    };
    // Unsupported Request (uncorrectable bit 20): unmasked and non-fatal per this GPU's
    // UESvrty (0x4ef030).
    let f = with(1 << 20, 0);
    assert_eq!(f["status"], "warn", "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("UnsupReq (non-fatal)"),
        "{f}"
    );
    // Completion Timeout (bit 14) is fatal here.
    let f = with(1 << 14, 0);
    assert_eq!(f["status"], "warn", "{f}");
    assert!(
        f["message"].as_str().unwrap().contains("CmpltTO (fatal)"),
        "{f}"
    );
    // Bad TLP (correctable bit 6) is masked on this GPU (CEMsk 0xf1c1): latched, not reported,
    // and said so.
    let f = with(0, 1 << 6);
    assert_eq!(f["status"], "pass", "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("masked, so not reported: BadTLP"),
        "{f}"
    );
    // What a reader without root gets: 64 bytes.
    std::fs::write(&config, &clean[..64]).unwrap();
    let f = aer(&check(&["--root", &src]));
    assert_eq!(
        (&f["status"], &f["skip"]),
        (&"skip".into(), &"not-root".into()),
        "{f}"
    );
    // Counters the kernel keeps still decide where they exist (a copy with clean counters).
    std::fs::write(&config, &clean).unwrap();
    let dir = tree.join(format!("sys/devices/pci0000:00/{GPU0}"));
    for (name, total) in [
        ("aer_dev_correctable", "TOTAL_ERR_COR 2"),
        ("aer_dev_fatal", "TOTAL_ERR_FATAL 0"),
        ("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL 0"),
    ] {
        std::fs::write(dir.join(name), format!("{total}\n")).unwrap();
    }
    let f = aer(&check(&["--root", &src]));
    assert_eq!(f["status"], "warn", "{f}");
    assert!(
        f["message"]
            .as_str()
            .unwrap()
            .contains("2 PCIe errors counted"),
        "{f}"
    );
}

/// The README's recommended gate (`check --level 1 --fail-on-skip`) on a healthy cloud VM
/// recorded with everything it reads: exit 0, nothing unjudged (its AER counters, which the
/// guest kernel does not keep, judged from config space). The same machine read without root
/// (64 bytes of config space) is a reading the platform provides and could not be read: the
/// gate fails, naming pcie.aer.
#[test]
fn recommended_gate_passes_a_healthy_cloud_vm() {
    let gate = |root: &std::path::Path| {
        let o = gpudoctor()
            .args([
                "check",
                "--level",
                "1",
                "--fail-on-skip",
                "--json",
                "--root",
            ])
            .arg(root)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code().unwrap(), v)
    };
    for name in ["h200x2-gate", "h200x4-gate"] {
        let (code, v) = gate(&crate::fixture_tree(name));
        assert_eq!(
            (code, &v["summary"]["unjudged"]),
            (0, &0.into()),
            "{name}: {v:#}"
        );
        assert_eq!(v["status"], "pass", "{name}");
    }
    let tmp = tempfile::tempdir().unwrap();
    let copy = copy("h200x2-gate", tmp.path());
    for gpu in ["0000:00:06.0", "0000:00:07.0"] {
        let config = copy.join(format!("sys/devices/pci0000:00/{gpu}/config"));
        let b = std::fs::read(&config).unwrap();
        std::fs::write(&config, &b[..64]).unwrap();
    }
    let (code, v) = gate(&copy);
    assert_eq!(code, 1, "{v:#}");
    let aer: Vec<_> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "pcie.aer")
        .map(|c| c["skip"].clone())
        .collect();
    assert_eq!(
        aer,
        [serde_json::json!("not-root"), serde_json::json!("not-root")]
    );
}

/// What a platform cannot provide is its shape, recorded in the baseline, never a pass and
/// never a node failure: a GPU whose config space (read in full) has no AER capability and
/// whose kernel keeps no counters records PCIe errors nowhere. Against a baseline of its own
/// model recorded so, `baseline.pcie` passes saying so, `pcie.aer` stays a not-applicable skip
/// and the strict gate holds; against a model that records them in config space, the node
/// warns; a reader without root cannot tell, and says so.
#[test]
fn platform_without_aer_is_the_baselines_shape() {
    const GPU0: &str = "0000:00:06.0";
    let tmp = tempfile::tempdir().unwrap();
    let tree = copy("h100x4-live", tmp.path());
    let src = tree.to_str().unwrap().to_string();
    let baseline = |name: &str| {
        let out = tmp.path().join(name);
        let o = gpudoctor()
            .args(["baseline", "--root", &src, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        let b: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        (out.to_str().unwrap().to_string(), b)
    };
    let aer_of = |b: &serde_json::Value| b["gpus"][0]["pcie"]["aer"].clone();
    let (with_cap, b) = baseline("with-cap.json");
    assert_eq!(aer_of(&b), "config-space", "{b}");
    let expect = |file: &str| {
        let o = gpudoctor()
            .args([
                "check",
                "--fail-on-skip",
                "--json",
                "--root",
                &src,
                "--expect",
                file,
            ])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let one = |id: &str| {
            let c = v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["id"] == id && c["subject"] == GPU0)
                .unwrap_or_else(|| panic!("no {id} finding on {GPU0}: {v}"));
            let s = |k: &str| c[k].as_str().unwrap_or("").to_string();
            (s("status"), s("skip"), s("message"))
        };
        (
            o.status.code().unwrap(),
            one("baseline.pcie"),
            one("pcie.aer"),
        )
    };
    let (code, pcie, _) = expect(&with_cap);
    assert_eq!((code, pcie.0.as_str()), (0, "pass"), "{pcie:?}");
    // Take the AER capability out of GPU0's extended capability list (its header at 0x1b8 now
    // names a vendor-specific capability; the list stays whole).
    let config = tree.join(format!("sys/devices/pci0000:00/{GPU0}/config"));
    let clean = std::fs::read(&config).unwrap();
    let mut b = clean.clone();
    let header = u32::from_le_bytes(b[0x1b8..0x1bc].try_into().unwrap());
    assert_eq!(header & 0xffff, 1, "AER capability expected at 0x1b8");
    b[0x1b8..0x1bc].copy_from_slice(&((header & !0xffff) | 0x000b).to_le_bytes());
    std::fs::write(&config, &b).unwrap();
    // Against its model: this node lost the capability its model has.
    let (_, pcie, aer) = expect(&with_cap);
    assert_eq!(pcie.0, "warn", "{pcie:?}");
    assert!(
        pcie.2.contains("records PCIe errors nowhere") && pcie.2.contains("config space"),
        "{pcie:?}"
    );
    assert_eq!(
        (aer.0.as_str(), aer.1.as_str()),
        ("skip", "not-applicable"),
        "{aer:?}"
    );
    // A model that has none: the baseline records it, the node matches, the gate holds.
    let (without_cap, b) = baseline("without-cap.json");
    assert_eq!(aer_of(&b), "none", "{b}");
    let (code, pcie, aer) = expect(&without_cap);
    assert_eq!((code, pcie.0.as_str()), (0, "pass"), "{pcie:?}");
    assert!(
        pcie.2.contains("recorded nowhere") && pcie.2.contains("as on its model"),
        "{pcie:?}"
    );
    assert_eq!(
        (aer.0.as_str(), aer.1.as_str()),
        ("skip", "not-applicable"),
        "{aer:?}"
    );
    // Without root (64 bytes of config space) neither can be told: unknown, never a pass.
    std::fs::write(&config, &clean[..64]).unwrap();
    let (code, pcie, _) = expect(&without_cap);
    assert_eq!((code, pcie.0.as_str()), (1, "skip"), "{pcie:?}");
    assert!(
        pcie.2.contains("where PCIe errors are recorded"),
        "{pcie:?}"
    );
}
