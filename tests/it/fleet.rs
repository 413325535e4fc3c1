//! `gpudoctor fleet` and `gpudoctor diff` on reports and bundles made from the fixtures.

use crate::{gpudoctor, repo};
use serde_json::Value;
use std::path::Path;

fn write_check_report(root: &str, to: &Path) {
    let o = gpudoctor()
        .args(["--root", root, "check", "--json", "--level", "1"])
        .output()
        .unwrap();
    std::fs::write(to, o.stdout).unwrap();
}

/// A copy of a recorded probe report with every sample and median scaled.
fn scaled_probe(from: &Path, factor: f64, to: &Path) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(from).unwrap()).unwrap();
    for m in v["measurements"].as_array_mut().unwrap() {
        for s in m["samples_gbps"].as_array_mut().unwrap() {
            *s = (s.as_f64().unwrap() * factor).into();
        }
        if let Some(st) = m["evaluation"]["stats"].as_object_mut() {
            for k in ["median_gbps", "min_gbps", "max_gbps"] {
                let x = st[k].as_f64().unwrap() * factor;
                st.insert(k.into(), x.into());
            }
        }
    }
    std::fs::write(to, serde_json::to_string(&v).unwrap()).unwrap();
}

fn fleet_json(args: &[&Path]) -> (i32, Value) {
    let o = gpudoctor()
        .arg("fleet")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let code = o.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (code, serde_json::from_slice(&o.stdout).unwrap())
}

#[test]
fn fleet_finds_failing_checks_and_slow_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let h2d = repo().join("fixtures/h200x2-live/probes/h2d.json");
    // 20 healthy nodes with run-to-run spread within 1%, one 30% slower.
    for i in 0..20 {
        let jitter = 1.0 + ((i * 7 % 11) as f64 - 5.0) / 500.0;
        write_check_report(
            "fixtures/h200x2-live",
            &dir.path().join(format!("node{i:02}.check.json")),
        );
        scaled_probe(
            &h2d,
            jitter,
            &dir.path().join(format!("node{i:02}.h2d.json")),
        );
    }
    scaled_probe(&h2d, 0.7, &dir.path().join("slow01.h2d.json"));
    write_check_report(
        "fixtures/h200x2-live",
        &dir.path().join("slow01.check.json"),
    );
    // A node that fails a check.
    let o = gpudoctor()
        .args([
            "--bundle",
            "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz",
            "check",
            "--json",
        ])
        .output()
        .unwrap();
    std::fs::write(dir.path().join("x8node.check.json"), o.stdout).unwrap();
    // Not a gpudoctor document: ignored inside a directory.
    std::fs::write(dir.path().join("other.json"), "{\"hello\": 1}").unwrap();

    let (code, r) = fleet_json(&[dir.path()]);
    assert_eq!(code, 1, "a node to drain");
    assert_eq!(r["schema"], "gpudoctor.fleet/1");
    assert_eq!(r["nodes"], 22);
    let width = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "pcie.link-width")
        .unwrap();
    assert_eq!(width["fail"], serde_json::json!(["x8node"]));
    let probes = r["probes"].as_array().unwrap();
    assert!(!probes.is_empty());
    for p in probes {
        assert_eq!(p["n"], 21, "{p}");
        let out: Vec<&str> = p["outliers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["node"].as_str().unwrap())
            .collect();
        assert_eq!(out, vec!["slow01"], "{p}");
        assert!(p["outliers"][0]["z"].as_f64().unwrap() < -3.5);
    }
    let drain: Vec<&str> = r["drain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["node"].as_str().unwrap())
        .collect();
    assert_eq!(drain, vec!["slow01", "x8node"]);

    // The table says the same.
    let o = gpudoctor().arg("fleet").arg(dir.path()).output().unwrap();
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(t.contains("22 nodes"), "{t}");
    assert!(t.contains("slow01:"), "{t}");
    assert!(t.contains("x8node: pcie.link-width failed"), "{t}");
}

#[test]
fn fleet_shape_majority_from_bundles() {
    let dir = tempfile::tempdir().unwrap();
    for n in ["a", "b", "c"] {
        let o = gpudoctor()
            .args(["--root", "fixtures/pcie-2socket-roce", "bundle", "-o"])
            .arg(dir.path().join(format!("node-{n}.tar.gz")))
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    std::fs::copy(
        repo().join("fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz"),
        dir.path().join("node-x8.tar.gz"),
    )
    .unwrap();
    let (_, r) = fleet_json(&[dir.path()]);
    assert_eq!(r["shape_nodes"], 4);
    let rows = r["shape"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    assert_eq!(
        rows[0]["field"],
        "gpus[pci0000:20/01.1/00.0].pcie.cur_width"
    );
    assert_eq!(rows[0]["majority"], "16");
    assert_eq!(rows[0]["differ"], serde_json::json!({"node-x8": "8"}));
}

#[test]
fn diff_two_bundles_and_two_reports() {
    let base = "fixtures/variants/pcie-2socket-roce--gpu-x8/bundle.tar.gz";
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("before.tar.gz");
    let o = gpudoctor()
        .args(["--root", "fixtures/pcie-2socket-roce", "bundle", "-o"])
        .arg(&a)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let o = gpudoctor()
        .arg("diff")
        .arg(&a)
        .arg(repo().join(base))
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["schema"], "gpudoctor.diff/1");
    let shape = d["shape"].as_array().unwrap();
    assert_eq!(shape.len(), 1, "{shape:#?}");
    assert_eq!(
        shape[0]["message"],
        "GPU1 0000:21:00.0 Gen4 x8, expected Gen4 x16"
    );
    assert!(
        d["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["id"] == "pcie.link-width"
                && c["subject"] == "0000:21:00.0"
                && c["a"] == "pass"
                && c["b"] == "fail"),
        "{d:#}"
    );
    // A node against itself: nothing differs, exit 0.
    let o = gpudoctor().arg("diff").arg(&a).arg(&a).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(t.contains("Shape: B matches A"), "{t}");
    // Two check reports: verdicts only.
    let ra = dir.path().join("a.json");
    let rb = dir.path().join("b.json");
    write_check_report("fixtures/vm-flat-4gpu", &ra);
    let o = gpudoctor()
        .args([
            "--bundle",
            "fixtures/variants/vm-flat-4gpu--bar1-256m/bundle.tar.gz",
            "check",
            "--json",
            "--level",
            "1",
        ])
        .output()
        .unwrap();
    std::fs::write(&rb, o.stdout).unwrap();
    let o = gpudoctor().arg("diff").arg(&ra).arg(&rb).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(t.contains("gpu.bar1"), "{t}");
    assert!(t.contains("Shape: not compared"), "{t}");
}

#[test]
fn fleet_and_diff_refuse_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("x.json");
    std::fs::write(&other, "{\"schema\": \"something/1\"}").unwrap();
    for args in [
        vec!["fleet".to_string(), other.display().to_string()],
        vec!["fleet".to_string(), "/nonexistent/dir".to_string()],
        vec![
            "diff".to_string(),
            other.display().to_string(),
            other.display().to_string(),
        ],
        vec![
            "--root".into(),
            "fixtures/vm-flat-4gpu".into(),
            "fleet".into(),
            other.display().to_string(),
        ],
    ] {
        let o = gpudoctor().args(&args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(o.stdout.is_empty());
        assert!(!o.stderr.is_empty());
    }
    // Two check reports for one node.
    write_check_report("fixtures/vm-flat-4gpu", &dir.path().join("n1.check.json"));
    write_check_report("fixtures/vm-flat-4gpu", &dir.path().join("n1.again.json"));
    let o = gpudoctor()
        .arg("fleet")
        .arg(dir.path().join("n1.check.json"))
        .arg(dir.path().join("n1.again.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("two check reports for node n1"));
}
