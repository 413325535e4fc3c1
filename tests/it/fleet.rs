//! `gpudoctor fleet` and `gpudoctor diff` on reports and bundles made from the fixtures.

use crate::{gpudoctor, readme, repo};
use serde_json::Value;
use std::path::Path;

pub(crate) fn write_check_report(root: &str, to: &Path) {
    let o = gpudoctor()
        .args(["--root", root, "check", "--json", "--level", "1"])
        .output()
        .unwrap();
    std::fs::write(to, o.stdout).unwrap();
}

/// A copy of a recorded probe report with every sample and median scaled.
pub(crate) fn scaled_probe(from: &Path, factor: f64, to: &Path) {
    scaled_probe_only(from, factor, to, None)
}

/// The same, keeping only the measurements of one method (`copy-engine`).
fn scaled_probe_only(from: &Path, factor: f64, to: &Path, method: Option<&str>) {
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(from).unwrap()).unwrap();
    if let Some(keep) = method {
        v["measurements"]
            .as_array_mut()
            .unwrap()
            .retain(|m| m["method"] == keep);
    }
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
    assert_eq!(r["schema"], "gpudoctor.fleet/2");
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
        // The check reports' own medians (d2h, p2p: one recording, equal on every node)
        // are compared too; only the h2d probe reports were scaled.
        if !p["measurement"].as_str().unwrap().starts_with("h2d ") {
            assert!(out.is_empty(), "{p}");
            continue;
        }
        assert_eq!(out, vec!["slow01"], "{p}");
        assert!(p["outliers"][0]["z"].as_f64().unwrap() < -3.5);
        // Every node's reading, not only the outliers'.
        let all = p["node_gbps"].as_object().unwrap();
        assert_eq!(all.len(), 21, "{p}");
        assert_eq!(all["slow01"], p["outliers"][0]["gbps"], "{p}");
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
    assert_eq!(rows[0]["node"], "node-x8");
    assert_eq!(rows[0]["field"], "gpus[*].pcie.cur_width");
    assert_eq!(
        rows[0]["subjects"],
        serde_json::json!(["pci0000:20/01.1/00.0"])
    );
    assert_eq!(rows[0]["expected"], "16");
    assert_eq!(rows[0]["got"], "8");
    assert_eq!(rows[0]["drain"], true);
}

fn baseline_of(root: &str) -> Value {
    let o = gpudoctor()
        .args(["--root", root, "baseline"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn drained(r: &Value) -> Vec<String> {
    r["drain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["node"].as_str().unwrap().to_string())
        .collect()
}

/// The tolerance floor: in 20 nodes with +-0.3% run-to-run noise, one at 97% of the median is
/// a statistical outlier (z far below -3.5) but within the 5% SuperBench allows, and above
/// gpudoctor's bar: listed, not drained. One at 93% is drained; --min-deviation 2 drains the
/// 97% one too. A fleet that is uniformly slow has no outliers, but every node below
/// gpudoctor's bar for the measurement (the probe's threshold) is drained.
#[test]
fn fleet_outliers_need_the_tolerance_floor_and_floors_drain() {
    let top = tempfile::tempdir().unwrap();
    let nodes = top.path().join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    let h2d = repo().join("fixtures/h200x2-live/probes/h2d.json");
    for i in 0..20 {
        let jitter = 1.0 + ((i * 7 % 11) as f64 - 5.0) / 5.0 * 0.003;
        let to = nodes.join(format!("node{i:02}.h2d.json"));
        scaled_probe_only(&h2d, jitter, &to, Some("copy-engine"));
    }
    scaled_probe_only(
        &h2d,
        0.97,
        &nodes.join("near.h2d.json"),
        Some("copy-engine"),
    );
    let (code, r) = fleet_json(&[&nodes]);
    assert_eq!(code, 0, "{r:#}");
    assert!(drained(&r).is_empty(), "{r:#}");
    for p in r["probes"].as_array().unwrap() {
        let o = &p["outliers"][0];
        assert_eq!(o["node"], "near", "{p}");
        assert!(o["z"].as_f64().unwrap() < -10.0, "{p}");
        assert!(
            (o["deviation"].as_f64().unwrap() + 0.03).abs() < 0.005,
            "{p}"
        );
        assert_eq!(o["drain"], false, "{p}");
    }
    let o = gpudoctor()
        .arg("fleet")
        .arg(&nodes)
        .args(["--json", "--min-deviation", "2"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(drained(&r), vec!["near"]);
    assert_eq!(r["min_deviation"], 0.02);

    // 93%: above the bar (~51.4 against 50.4), 7% below the median.
    scaled_probe_only(
        &h2d,
        0.93,
        &nodes.join("slow.h2d.json"),
        Some("copy-engine"),
    );
    let (code, r) = fleet_json(&[&nodes]);
    assert_eq!(code, 1);
    assert_eq!(drained(&r), vec!["slow"], "{r:#}");
    let shown = readme::run(top.path(), "fleet nodes/");
    assert_eq!(shown.code, 1);
    assert!(shown.output.contains("*slow 51."), "{}", shown.output);
    readme::show("fleet-tolerance", &[shown]);
    let reasons = r["drain"][0]["reasons"].as_array().unwrap();
    assert!(
        reasons
            .iter()
            .all(|x| x.as_str().unwrap().contains("-7.0% from the median")),
        "{reasons:?}"
    );

    // Uniformly slow (85% of the recorded ~55.3 GB/s: ~47 GB/s, below the 50.4 bar): no
    // outlier, every node drained by the floor.
    let slow = top.path().join("slow");
    std::fs::create_dir(&slow).unwrap();
    for i in 0..5 {
        scaled_probe_only(
            &h2d,
            0.85,
            &slow.join(format!("s{i}.h2d.json")),
            Some("copy-engine"),
        );
    }
    let (code, r) = fleet_json(&[&slow]);
    assert_eq!(code, 1);
    assert_eq!(drained(&r).len(), 5, "{r:#}");
    for p in r["probes"].as_array().unwrap() {
        assert!(p["outliers"].as_array().unwrap().is_empty());
        assert_eq!(p["below_floor"].as_array().unwrap().len(), 5);
    }
    let shown = readme::run(top.path(), "fleet slow/");
    assert!(shown.output.contains("Drain (5 nodes)"), "{}", shown.output);
    readme::show("fleet-uniformly-slow", &[shown]);
}

/// Nodes of three server models (4 baselines each, 12 nodes): grouped by model, nothing
/// differs (the old majority-over-everything view listed every field of the two minority
/// models). Shape drift reaches the drain list with one line per node and difference: a
/// missing NIC, a port at 200G instead of 400G; a node whose NUMA nodes are unknown gets one
/// aggregated line (its paths), listed and not drained.
#[test]
fn fleet_groups_by_model_and_drains_shape_drift() {
    let top = tempfile::tempdir().unwrap();
    let dir = top.path().join("nodes");
    std::fs::create_dir(&dir).unwrap();
    for (root, prefix) in [
        ("fixtures/hgx-h100-8gpu", "hgx"),
        ("fixtures/pcie-2socket-roce", "pcie"),
        ("fixtures/vm-flat-4gpu", "vm"),
    ] {
        let b = baseline_of(root);
        for i in 0..4 {
            std::fs::write(
                dir.join(format!("{prefix}{i}.baseline.json")),
                serde_json::to_string(&b).unwrap(),
            )
            .unwrap();
        }
    }
    let (code, r) = fleet_json(&[&dir]);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["groups"].as_array().unwrap().len(), 3, "{r:#}");
    assert!(r["shape"].as_array().unwrap().is_empty(), "{r:#}");
    let o = gpudoctor().arg("fleet").arg(&dir).output().unwrap();
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(t.lines().count() < 20, "{t}");

    // Drift: hgx1 lost a NIC, hgx2 has a port at 200G.
    let mut b = baseline_of("fixtures/hgx-h100-8gpu");
    let lost = b["nics"][3]["position"].as_str().unwrap().to_string();
    b["nics"].as_array_mut().unwrap().remove(3);
    b["paths"]
        .as_array_mut()
        .unwrap()
        .retain(|p| p["a"] != lost.as_str() && p["b"] != lost.as_str());
    std::fs::write(dir.join("hgx1.baseline.json"), b.to_string()).unwrap();
    let mut b = baseline_of("fixtures/hgx-h100-8gpu");
    let slow_port = b["nics"][0]["position"].as_str().unwrap().to_string();
    b["nics"][0]["ports"][0]["rate"] = "200 Gb/sec (4X HDR)".into();
    std::fs::write(dir.join("hgx2.baseline.json"), b.to_string()).unwrap();
    // pcie3: NUMA unknown (its bundle).
    std::fs::remove_file(dir.join("pcie3.baseline.json")).unwrap();
    std::fs::copy(
        repo().join("fixtures/variants/pcie-2socket-roce--numa-unknown/bundle.tar.gz"),
        dir.join("pcie3.tar.gz"),
    )
    .unwrap();
    let (code, r) = fleet_json(&[&dir]);
    assert_eq!(code, 1);
    let shape = r["shape"].as_array().unwrap();
    let of = |n: &str| -> Vec<&Value> { shape.iter().filter(|d| d["node"] == n).collect() };
    let h1 = of("hgx1");
    assert_eq!(h1.len(), 1, "the NIC (its paths are part of it): {h1:#?}");
    assert!(h1.iter().any(|d| d["field"] == "nics[*]"
        && d["subjects"] == serde_json::json!([lost])
        && d["got"] == "(missing)"
        && d["drain"] == true));
    let h2 = of("hgx2");
    assert_eq!(h2.len(), 1, "{h2:#?}");
    assert_eq!(h2[0]["field"], "nics[*].ports[*].rate");
    assert_eq!(
        h2[0]["subjects"],
        serde_json::json!([format!("{slow_port}][port 1")])
    );
    assert_eq!(h2[0]["expected"], "400 Gb/sec (4X NDR)");
    assert_eq!(h2[0]["got"], "200 Gb/sec (4X HDR)");
    let p3 = of("pcie3");
    assert_eq!(p3.len(), 1, "{p3:#?}");
    assert_eq!(p3[0]["drain"], false);
    assert_eq!(drained(&r), vec!["hgx1", "hgx2"], "{r:#}");
    let d2 = r["drain"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["node"] == "hgx2")
        .unwrap();
    assert!(
        d2["reasons"][0].as_str().unwrap().contains("200 Gb/sec"),
        "{d2}"
    );
    // The table: one line per node and difference.
    let shown = readme::run(top.path(), "fleet nodes/");
    let t = shown.output.clone();
    let shape_lines = t
        .lines()
        .skip_while(|l| !l.ends_with("* drained):"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        // A line wider than 100 columns continues on lines indented deeper.
        .filter(|l| !l.starts_with("     "))
        .count();
    assert_eq!(shape_lines, 3, "{t}");
    readme::show("fleet-models", &[shown]);
    // Markdown for a ticket: the drain table first.
    let shown = readme::run(top.path(), "fleet nodes/ --format md");
    assert_eq!(shown.code, 1);
    let md = shown.output.clone();
    readme::show("fleet-models-md", &[shown]);
    assert!(
        md.starts_with("## gpudoctor fleet: 12 nodes, 2 to drain"),
        "{md}"
    );
    assert!(
        md.contains("| Node | Reason |\n|---|---|\n| hgx1 |"),
        "{md}"
    );
    assert!(md.contains("### Shape differences"), "{md}");
}

/// `--expect`: the nodes of the baseline's model are compared with it, not with one another:
/// three nodes alike but all on a 200G port differ from the baseline (a majority would call
/// them healthy); a node of another model keeps its majority group.
#[test]
fn fleet_expect_compares_with_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let good = baseline_of("fixtures/hgx-h100-8gpu");
    let expect = dir.path().join("hgx-sku.json");
    std::fs::write(&expect, good.to_string()).unwrap();
    let nodes = dir.path().join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    let mut b = good.clone();
    b["nics"][0]["ports"][0]["rate"] = "200 Gb/sec (4X HDR)".into();
    for i in 0..3 {
        std::fs::write(nodes.join(format!("n{i}.baseline.json")), b.to_string()).unwrap();
    }
    std::fs::write(
        nodes.join("other.baseline.json"),
        baseline_of("fixtures/vm-flat-4gpu").to_string(),
    )
    .unwrap();
    let (code, r) = fleet_json(&[&nodes]);
    assert_eq!(code, 0, "alike among themselves: {r:#}");
    let o = gpudoctor()
        .arg("fleet")
        .arg(&nodes)
        .arg("--expect")
        .arg(&expect)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(drained(&r), vec!["n0", "n1", "n2"], "{r:#}");
    let groups = r["groups"].as_array().unwrap();
    assert!(
        groups
            .iter()
            .any(|g| g["reference"] == "baseline hgx-sku"
                && g["nodes"].as_array().unwrap().len() == 3),
        "{groups:#?}"
    );
    assert!(
        groups
            .iter()
            .any(|g| g["reference"] == "majority" && g["nodes"] == serde_json::json!(["other"])),
        "{groups:#?}"
    );
}

/// Absolute floors from the `--expect` baseline: five nodes of the baseline's model all at 95%
/// of the recorded h2d bandwidth are alike (no outlier) and above gpudoctor's bar, so without
/// the baseline none is drained; the baseline's floors (tightened to 98% of the recorded
/// median, as an operator may write them) drain each of them, one line per node and
/// measurement, naming whose floor. A node at 100% stays.
#[test]
fn fleet_expect_floors_drain_a_uniformly_slow_group() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpudoctor()
        .args(["--root", "fixtures/h200x2-live", "baseline", "--level", "1"])
        .output()
        .unwrap();
    let mut sku: Value = serde_json::from_slice(&o.stdout).unwrap();
    for f in sku["bandwidth"].as_array_mut().unwrap() {
        let recorded = f["min_gbps"].as_f64().unwrap() / 0.9;
        f["min_gbps"] = ((recorded * 0.98 * 10.0).floor() / 10.0).into();
    }
    let expect = dir.path().join("h200-sku.json");
    std::fs::write(&expect, sku.to_string()).unwrap();
    let nodes = dir.path().join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    let shape = baseline_of("fixtures/h200x2-live");
    let h2d = repo().join("fixtures/h200x2-live/probes/h2d.json");
    for (name, factor) in [
        ("n0", 0.95),
        ("n1", 0.95),
        ("n2", 0.95),
        ("n3", 0.95),
        ("n4", 0.95),
        ("ok", 1.0),
    ] {
        std::fs::write(
            nodes.join(format!("{name}.baseline.json")),
            shape.to_string(),
        )
        .unwrap();
        scaled_probe_only(
            &h2d,
            factor,
            &nodes.join(format!("{name}.h2d.json")),
            Some("copy-engine"),
        );
    }
    let (code, r) = fleet_json(&[&nodes]);
    assert_eq!(code, 0, "alike, above gpudoctor's bar: {r:#}");
    for p in r["probes"].as_array().unwrap() {
        assert!(p["below_floor"].as_array().unwrap().is_empty(), "{p}");
    }

    let o = gpudoctor()
        .arg("fleet")
        .arg(&nodes)
        .arg("--expect")
        .arg(&expect)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(drained(&r), vec!["n0", "n1", "n2", "n3", "n4"], "{r:#}");
    let probes = r["probes"].as_array().unwrap();
    assert_eq!(probes.len(), 2, "host->GPU0 and host->GPU1: {probes:#?}");
    for p in probes {
        assert_eq!(p["group"], "baseline h200-sku");
        // The healthy node is the statistical outlier (high, not drained): the slow five are
        // the group's median.
        let out = p["outliers"].as_array().unwrap();
        assert!(
            out.len() == 1 && out[0]["node"] == "ok" && out[0]["drain"] == false,
            "{p}"
        );
        let below = p["below_floor"].as_array().unwrap();
        assert_eq!(below.len(), 5, "{p}");
        assert!(below.iter().all(|b| b["floor_from"] == "baseline h200-sku"));
    }
    for d in r["drain"].as_array().unwrap() {
        let reasons = d["reasons"].as_array().unwrap();
        assert_eq!(reasons.len(), 2, "one line per measurement: {d}");
        let first = reasons[0].as_str().unwrap();
        assert!(
            first.starts_with("h2d host->GPU0 copy-engine: 52.")
                && first.contains(" GB/s, below the floor 54.")
                && first.ends_with(" of baseline h200-sku"),
            "{first}"
        );
    }
    // Markdown names the floor.
    let shown = readme::run(dir.path(), "fleet nodes/ --expect h200-sku.json");
    assert_eq!(shown.code, 1);
    assert!(shown.output.contains("Drain (5 nodes)"), "{}", shown.output);
    readme::show("fleet-expect-floors", &[shown]);
    let o = gpudoctor()
        .arg("fleet")
        .arg(&nodes)
        .arg("--expect")
        .arg(&expect)
        .args(["--format", "md"])
        .output()
        .unwrap();
    let md = String::from_utf8(o.stdout).unwrap();
    assert!(
        md.contains("below the floor of baseline h200-sku 54."),
        "{md}"
    );
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
    assert_eq!(d["schema"], "gpudoctor.diff/2");
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

/// `diff`: worse verdicts first; subjects judged pass in one node and absent from the other
/// (4 GPUs against 2, a NIC only one has) are not listed unless --all, and alone do not make
/// the nodes differ.
#[test]
fn diff_lists_worse_first_and_hides_one_sided_passes() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    write_check_report("fixtures/vm-flat-4gpu", &a);
    write_check_report("fixtures/h200x2-vm", &b);
    let run = |extra: &[&str]| -> (i32, Value) {
        let o = gpudoctor()
            .arg("diff")
            .arg(&a)
            .arg(&b)
            .arg("--json")
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code().unwrap(),
            serde_json::from_slice(&o.stdout).unwrap(),
        )
    };
    let (code, d) = run(&[]);
    assert_eq!(code, 1);
    let checks = d["checks"].as_array().unwrap();
    assert!(!checks.is_empty(), "{d:#}");
    assert!(d["hidden"].as_u64().unwrap() > 0, "{d:#}");
    assert!(
        checks
            .iter()
            .all(|c| !((c["a"] == "(absent)" && c["b"] == "pass")
                || (c["a"] == "pass" && c["b"] == "(absent)"))),
        "{d:#}"
    );
    // Worse first.
    let kinds: Vec<&str> = checks
        .iter()
        .map(|c| c["change"].as_str().unwrap())
        .collect();
    let mut sorted = kinds.clone();
    sorted.sort_by_key(|k| match *k {
        "worse" => 0,
        "better" => 1,
        _ => 2,
    });
    assert_eq!(kinds, sorted, "{d:#}");
    assert_eq!(kinds[0], "worse", "{d:#}");
    let (_, all) = run(&["--all"]);
    assert_eq!(all["hidden"], 0);
    assert_eq!(
        all["checks"].as_array().unwrap().len(),
        checks.len() + d["hidden"].as_u64().unwrap() as usize
    );
    // The same GPU count on both sides with only one-sided passes would not differ: a report
    // against itself with one finding dropped.
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&a).unwrap()).unwrap();
    let checks_a = v["checks"].as_array_mut().unwrap();
    let i = checks_a.iter().position(|c| c["status"] == "pass").unwrap();
    checks_a.remove(i);
    std::fs::write(&b, v.to_string()).unwrap();
    let (code, d) = run(&[]);
    assert_eq!((code, d["hidden"].as_u64()), (0, Some(1)), "{d:#}");
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
    // Two check reports for one node: one is judged, and the other is named.
    write_check_report("fixtures/vm-flat-4gpu", &dir.path().join("n1.check.json"));
    write_check_report("fixtures/vm-flat-4gpu", &dir.path().join("n1.again.json"));
    let o = gpudoctor()
        .arg("fleet")
        .arg(dir.path().join("n1.check.json"))
        .arg(dir.path().join("n1.again.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning: node n1: 2 check reports"), "{err}");
}

/// A cluster-wide `probe nccl --ranks --json` report (built here from a real single-node report
/// of two H200s, its run renamed as a run across nodes, with eight nodes' own timings): fleet
/// takes every node of it, compares their NCCL bus bandwidth and drains the one slow node (its
/// GPUs timed half of their peers'); `diff` refuses a report of several nodes. A single-node
/// `probe nccl --json` report is one node with its bar: the degraded real run is drained.
#[test]
fn fleet_reads_nccl_reports_and_names_the_slow_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut r: Value = serde_json::from_slice(
        &std::fs::read(repo().join("fixtures/nccl-probe/h200x2-healthy.json")).unwrap(),
    )
    .unwrap();
    r["mode"] = "cluster".into();
    r["runs"][0]["name"] = "across nodes".into();
    for c in r["runs"][0]["collectives"].as_array_mut().unwrap() {
        // 70% of a 400 Gb/s NIC (50 GB/s), as the bar of a run across nodes is.
        c["evaluation"]["threshold_gbps"] = 35.0.into();
    }
    let nodes: Vec<Value> = (0..8)
        .map(|i| {
            let bw = if i == 5 {
                21.0
            } else {
                40.1 + 0.1 * f64::from(i % 3)
            };
            serde_json::json!({
                "node": format!("gpu{i:03}"), "hosts": [format!("gpu{i:03}")],
                "processes": [i], "nccl_ranks": [i],
                "network": {"Ok": {"bandwidth_gbps": 50.0, "basis": "mlx5_0:1 400 Gb/s"}},
                "busbw_gbps": {"across nodes all-reduce": bw, "across nodes all-gather": bw},
                "nics": {"mlx5_0:1": 2}
            })
        })
        .collect();
    r["cluster"] = serde_json::json!({
        "launcher": "slurm", "world_size": 8, "nranks": 8, "processes": [],
        "nodes": nodes, "rails": [], "slowest_node": "gpu005", "slowest_rail": null
    });
    let cluster = dir.path().join("nccl-cluster.json");
    std::fs::write(&cluster, serde_json::to_vec(&r).unwrap()).unwrap();
    let (code, v) = fleet_json(&[&cluster]);
    assert_eq!(code, 1);
    assert_eq!(drained(&v), ["gpu005"], "{v:#}");
    assert_eq!(v["nodes"].as_u64(), Some(8), "{:#}", v["nodes"]);

    let out = gpudoctor()
        .args(["diff"])
        .arg(&cluster)
        .arg(&cluster)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("diff compares one node"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let degraded = repo().join("fixtures/nccl-probe/h200x2-degraded.json");
    let (code, v) = fleet_json(&[&degraded]);
    assert_eq!(code, 1);
    assert_eq!(drained(&v), ["h200x2-degraded"], "{v:#}");
}

/// `--expect` honours its versions' `enforce`, as `check --expect` does: a node whose driver
/// differs from a `policy` pin is drained, naming the check, the subject `host` and the field; a
/// kernel that differs from a `fact` is a warning (kept in service); a policy pin the node does
/// not report is unknown, a warning, never a pass. Without `--expect` the same differences are
/// only listed (a majority pins nothing), and turning the driver's pin into a fact keeps that
/// node in service.
#[test]
fn fleet_expect_enforces_version_pins() {
    let dir = tempfile::tempdir().unwrap();
    let good = baseline_of("fixtures/hgx-h100-8gpu");
    assert_eq!(good["versions"]["nvidia_driver"]["enforce"], "policy");
    assert_eq!(good["versions"]["kernel"]["enforce"], "fact");
    let expect = dir.path().join("sku.json");
    std::fs::write(&expect, good.to_string()).unwrap();
    let nodes = dir.path().join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    let node = |name: &str, edit: &dyn Fn(&mut Value)| {
        let mut b = good.clone();
        edit(&mut b);
        std::fs::write(nodes.join(format!("{name}.baseline.json")), b.to_string()).unwrap();
    };
    for i in 0..3 {
        node(&format!("ok{i}"), &|_| {});
    }
    node("driver", &|b| {
        b["versions"]["nvidia_driver"]["value"] = "535.104.05".into()
    });
    node("kernel", &|b| {
        b["versions"]["kernel"]["value"] = "6.8.0-45-generic".into()
    });
    node("unknown", &|b| {
        b["versions"]
            .as_object_mut()
            .unwrap()
            .remove("nvidia_driver");
    });
    let fleet = |expect: Option<&Path>| {
        let mut c = gpudoctor();
        c.arg("fleet").arg(&nodes).arg("--json");
        if let Some(e) = expect {
            c.arg("--expect").arg(e);
        }
        let o = c.output().unwrap();
        let r: Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code().unwrap(), r)
    };
    let warned = |r: &Value| -> Vec<(String, String)> {
        r["warn"]
            .as_array()
            .map(|w| {
                w.iter()
                    .map(|d| {
                        (
                            d["node"].as_str().unwrap().to_string(),
                            d["reasons"][0].as_str().unwrap().to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };

    let (code, r) = fleet(Some(&expect));
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(drained(&r), vec!["driver"], "{r:#}");
    assert_eq!(
        r["drain"][0]["reasons"],
        serde_json::json!([
            "baseline.versions host: versions.nvidia_driver.value: 550.90.07 -> 535.104.05 (policy of baseline sku)"
        ])
    );
    assert_eq!(
        warned(&r),
        vec![
            (
                "kernel".to_string(),
                "baseline.versions host: versions.kernel.value: 5.15.0-1053-nvidia -> 6.8.0-45-generic (a fact of baseline sku: warns)".to_string()
            ),
            (
                "unknown".to_string(),
                "baseline.versions host: versions.nvidia_driver.value unknown on this node (pinned as policy by baseline sku: 550.90.07)".to_string()
            ),
        ]
    );
    let pins: Vec<(&str, &str, bool)> = r["shape"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["field"].as_str().unwrap().starts_with("versions"))
        .map(|d| {
            (
                d["node"].as_str().unwrap(),
                d["enforce"].as_str().unwrap(),
                d["drain"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        pins,
        vec![
            ("driver", "policy", true),
            ("kernel", "fact", false),
            ("unknown", "policy", false)
        ]
    );
    let table = gpudoctor()
        .arg("fleet")
        .arg(&nodes)
        .arg("--expect")
        .arg(&expect)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("Warn, kept in service (2 nodes):"), "{text}");
    assert!(
        text.contains("  driver: baseline.versions host: versions.nvidia_driver.value"),
        "{text}"
    );

    // No baseline: versions are listed, nothing is drained or warned for them.
    let (code, r) = fleet(None);
    assert_eq!(code, 0, "{r:#}");
    assert!(drained(&r).is_empty() && warned(&r).is_empty(), "{r:#}");

    // The driver recorded as a fact: a warning, the node kept in service.
    let mut fact = good.clone();
    fact["versions"]["nvidia_driver"]["enforce"] = "fact".into();
    std::fs::write(&expect, fact.to_string()).unwrap();
    let (code, r) = fleet(Some(&expect));
    assert_eq!(code, 0, "{r:#}");
    assert!(drained(&r).is_empty(), "{r:#}");
    assert!(
        warned(&r)
            .iter()
            .any(|(n, w)| n == "driver" && w.contains("(a fact of baseline sku: warns)")),
        "{r:#}"
    );
}

/// A node's silenced failure (`check --skip ID:SUBJECT`) does not drain it: fleet lists it
/// under the check as silenced; the same report without the silence drains.
#[test]
fn fleet_does_not_drain_for_a_silenced_failure() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz";
    for (name, extra) in [
        ("silenced", &["--skip", "rdma.port-state:mlx5_2/1"][..]),
        ("plain", &[][..]),
    ] {
        let o = gpudoctor()
            .args(["check", "--bundle", bundle, "--json"])
            .args(extra)
            .output()
            .unwrap();
        std::fs::write(dir.path().join(format!("{name}.check.json")), o.stdout).unwrap();
    }
    let (code, r) = fleet_json(&[dir.path()]);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(drained(&r), vec!["plain"], "{r:#}");
    let row = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "rdma.port-state")
        .unwrap();
    assert_eq!(row["fail"], serde_json::json!(["plain"]), "{row:#}");
    assert_eq!(row["silenced"], serde_json::json!(["silenced"]), "{row:#}");
    let text = gpudoctor().arg("fleet").arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("    silenced (not drained for it): silenced"),
        "{text}"
    );
    // diff: silencing the failure is not worse, lifting the silence is.
    let (plain, silenced) = (
        dir.path().join("plain.check.json"),
        dir.path().join("silenced.check.json"),
    );
    for (a, b, code, shown) in [
        (&plain, &silenced, 0, "fail -> fail (silenced)"),
        (&silenced, &plain, 1, "fail (silenced) -> fail"),
    ] {
        let o = gpudoctor().arg("diff").arg(a).arg(b).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(code), "{text}");
        assert!(text.contains(shown), "{text}");
    }
}

/// `check --level 1` reports carry their probes' medians (`bandwidth`), so a fleet of check
/// reports alone is compared on bandwidth: the planted slow node is drained, its reason names
/// the measurement, and no probe had to run a second time. The reports of another model (2x
/// H200) form their own group.
#[test]
fn fleet_compares_level1_check_reports_on_bandwidth() {
    let dir = tempfile::tempdir().unwrap();
    let h100 = crate::fixture_tree("h100x4-live");
    let h200 = crate::fixture_tree("h200x2-live");
    let base = dir.path().join("base.json");
    write_check_report(h100.to_str().unwrap(), &base);
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&base).unwrap()).unwrap();
    let bw = v["bandwidth"]
        .as_array()
        .expect("a level-1 report's medians");
    let slow_id = "h2d host->GPU2 copy-engine";
    let m = bw.iter().find(|b| b["id"] == slow_id).unwrap();
    assert_eq!(m["link"], "PCIe Gen5 x16", "{m}");
    assert!(
        m["n"].as_u64().unwrap() > 1 && m["threshold_gbps"].is_number(),
        "{m}"
    );
    std::fs::remove_file(&base).unwrap();
    // Eight H100 nodes a few tenths of a percent apart, one of them with GPU2's host link at
    // 70%; three H200 nodes.
    for i in 0..8 {
        let mut n = v.clone();
        n["hostname"] = format!("h100-{i}").into();
        for b in n["bandwidth"].as_array_mut().unwrap() {
            let f = if i == 5 && b["id"] == slow_id {
                0.7
            } else {
                1.0 + 0.001 * i as f64
            };
            b["median_gbps"] = (b["median_gbps"].as_f64().unwrap() * f).into();
        }
        let to = dir.path().join(format!("h100-{i}.json"));
        std::fs::write(to, serde_json::to_string(&n).unwrap()).unwrap();
    }
    for i in 0..3 {
        write_check_report(
            h200.to_str().unwrap(),
            &dir.path().join(format!("h200-{i}.json")),
        );
    }
    let (_, r) = fleet_json(&[dir.path()]);
    assert_eq!(r["nodes"], 11, "{r:#}");
    let slow: Vec<&Value> = r["drain"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["node"].as_str().unwrap().starts_with("h100"))
        .collect();
    assert_eq!(slow.len(), 1, "{r:#}");
    assert_eq!(slow[0]["node"], "h100-5", "{r:#}");
    assert!(slow[0].to_string().contains(slow_id), "{r:#}");
    // The comparison covered every H100 node, on the medians of their check reports alone.
    let p = r["probes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p.to_string().contains(slow_id) && p["n"] == 8)
        .unwrap_or_else(|| panic!("{r:#}"));
    assert_eq!(p["outliers"][0]["node"], "h100-5", "{p}");
}
