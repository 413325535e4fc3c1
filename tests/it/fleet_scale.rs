//! `fleet` over many reports and mixed server models, and `diff` telling every change apart.

use crate::fleet::write_check_report;
use crate::{gpudoctor, repo};
use serde_json::Value;
use std::path::Path;

fn fleet_json(dir: &Path) -> (i32, Value) {
    let o = gpudoctor()
        .arg("fleet")
        .arg(dir)
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

/// An h2d report of `gpus` GPUs named `name` whose PCIe link is `link` ("Gen4 x16"), every
/// copy-engine median at `gbps`: the recorded H100 report's first measurement, repeated.
fn h2d_report(name: &str, gpus: usize, link: &str, gbps: f64) -> String {
    let from = repo().join("fixtures/h100x1-live/probes/h2d.json");
    let mut r: Value = serde_json::from_slice(&std::fs::read(from).unwrap()).unwrap();
    let g0 = r["gpus"][0].clone();
    let m0 = r["measurements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "copy-engine")
        .unwrap()
        .clone();
    let f = gbps / m0["evaluation"]["stats"]["median_gbps"].as_f64().unwrap();
    let (mut gs, mut ms) = (Vec::new(), Vec::new());
    for i in 0..gpus {
        let mut g = g0.clone();
        g["label"] = format!("GPU{i}").into();
        g["name"] = name.into();
        gs.push(g);
        let mut m = m0.clone();
        m["id"] = format!("h2d GPU{i} copy-engine").into();
        m["dst"] = format!("GPU{i}").into();
        for s in m["samples_gbps"].as_array_mut().unwrap() {
            *s = (s.as_f64().unwrap() * f).into();
        }
        for k in ["median_gbps", "min_gbps", "max_gbps"] {
            let x = m["evaluation"]["stats"][k].as_f64().unwrap() * f;
            m["evaluation"]["stats"][k] = x.into();
        }
        let basis = format!("PCIe {link} = 31.5 GB/s per direction after line encoding");
        m["expected"]["Ok"]["basis"] = basis.into();
        // gpudoctor's bar well below every node here: only the comparison among peers judges.
        m["evaluation"]["threshold_gbps"] = 10.0.into();
        ms.push(m);
    }
    r["gpus"] = gs.into();
    r["measurements"] = ms.into();
    serde_json::to_string(&r).unwrap()
}

/// Healthy A100 nodes among H100 nodes were drained as outliers of the H100 fleet. Nodes are
/// grouped by GPU model, count and link basis from their reports: 12 H100-like nodes (8 GPUs,
/// Gen5) and 8 A100-like ones (4 GPUs, Gen4), one 30% slow in each; exactly those two are
/// drained, each with the probe and the GPU in its reason. A node whose reports name no GPU
/// model is a group of its own, not an outlier of the H100 nodes it is 5% below.
#[test]
fn fleet_scale_groups_reports_by_gpu_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let h100_check = d.join("h100.check");
    let a100_check = d.join("a100.check");
    write_check_report("fixtures/hgx-h100-8gpu", &h100_check);
    write_check_report("fixtures/pcie-2socket-roce", &a100_check);
    let nodes = d.join("nodes");
    std::fs::create_dir(&nodes).unwrap();
    for i in 0..20 {
        let (model, check, gpus, link, base) = if i < 12 {
            ("NVIDIA H100 80GB HBM3", &h100_check, 8, "Gen5 x16", 54.7)
        } else {
            ("NVIDIA A100 80GB PCIe", &a100_check, 4, "Gen4 x16", 24.0)
        };
        let name = format!("n{i:02}");
        let slow = i == 5 || i == 15;
        let jitter = 1.0 + f64::from(i % 5) / 1000.0;
        let gbps = base * if slow { 0.7 } else { jitter };
        std::fs::copy(check, nodes.join(format!("{name}.check.json"))).unwrap();
        std::fs::write(
            nodes.join(format!("{name}.h2d.json")),
            h2d_report(model, gpus, link, gbps),
        )
        .unwrap();
    }
    // No check report, and a probe report that names no GPU.
    let mut anon: Value = serde_json::from_str(&h2d_report(
        "NVIDIA H100 80GB HBM3",
        8,
        "Gen5 x16",
        54.7 * 0.94,
    ))
    .unwrap();
    anon["gpus"] = Value::Array(Vec::new());
    std::fs::write(nodes.join("anon.h2d.json"), anon.to_string()).unwrap();

    let (code, r) = fleet_json(&nodes);
    assert_eq!(code, 1, "{r:#}");
    let drain = r["drain"].as_array().unwrap();
    let names: Vec<&str> = drain.iter().map(|d| d["node"].as_str().unwrap()).collect();
    assert_eq!(names, ["n05", "n15"], "{r:#}");
    for d in drain {
        let reasons = d["reasons"].to_string();
        assert!(
            reasons.contains("h2d host->GPU0 copy-engine") && reasons.contains("-30."),
            "{reasons}"
        );
    }
    let groups = r["groups"].as_array().unwrap();
    let of = |node: &str| -> &Value {
        groups
            .iter()
            .find(|g| g["nodes"].as_array().unwrap().iter().any(|n| n == node))
            .unwrap()
    };
    assert_eq!(
        of("n00")["nodes"].as_array().unwrap().len(),
        12,
        "{groups:#?}"
    );
    assert_eq!(
        of("n12")["nodes"].as_array().unwrap().len(),
        8,
        "{groups:#?}"
    );
    let h100 = of("n00")["model"].as_str().unwrap();
    assert!(
        h100.contains("8x NVIDIA H100 80GB HBM3") && h100.contains("PCIe Gen5 x16"),
        "{h100}"
    );
    let a100 = of("n12")["model"].as_str().unwrap();
    assert!(
        a100.contains("4x NVIDIA A100 80GB PCIe") && a100.contains("PCIe Gen4 x16"),
        "{a100}"
    );
    let anon = of("anon");
    assert_eq!(anon["nodes"], serde_json::json!(["anon"]));
    assert!(
        anon["model"]
            .as_str()
            .unwrap()
            .contains("name no GPU model"),
        "{anon:#}"
    );
    // Each group's own median: no probe row mixes the models.
    for p in r["probes"].as_array().unwrap() {
        let nodes = p["node_gbps"].as_object().unwrap();
        let h = nodes.keys().filter(|n| n.as_str() < "n12").count();
        assert!(h == 0 || h == nodes.len(), "{p:#}");
    }
    // The text names the groups and the drained nodes alike.
    let o = gpudoctor().arg("fleet").arg(&nodes).output().unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("Drain (2 nodes)"), "{t}");
    assert!(t.contains("node anon (model unknown)"), "{t}");
}

/// The one-pass reader (schema first, typed) and the general one (any key order) judge alike:
/// the same check reports with their keys sorted (`checks` before `schema`) give the same
/// fleet summary, groups included.
#[test]
fn fleet_scale_fast_and_general_readers_agree() {
    let dir = tempfile::tempdir().unwrap();
    let (fast, sorted) = (dir.path().join("fast"), dir.path().join("sorted"));
    std::fs::create_dir(&fast).unwrap();
    std::fs::create_dir(&sorted).unwrap();
    let report = dir.path().join("report");
    write_check_report("fixtures/pcie-2socket-roce", &report);
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.trim_start()[1..]
            .trim_start()
            .starts_with("\"schema\"")
    );
    let mut v: Value = serde_json::from_str(&text).unwrap();
    for i in 0..6 {
        let name = format!("n{i}.check.json");
        if i == 3 {
            // From here on the nodes fail a check on another subject than its first.
            v["status"] = "fail".into();
            v["checks"][7]["status"] = "fail".into();
        }
        // Keys sorted: "checks" comes first.
        let mut keys: std::collections::BTreeMap<String, Value> =
            serde_json::from_value(v.clone()).unwrap();
        let s = serde_json::to_string(&keys).unwrap();
        assert!(s.starts_with("{\"checks\""));
        std::fs::write(sorted.join(&name), s).unwrap();
        // The same with `schema` moved to the front, as gpudoctor writes it.
        let schema = keys.remove("schema").unwrap();
        let rest = serde_json::to_string(&keys).unwrap();
        std::fs::write(
            fast.join(&name),
            format!("{{\"schema\":{schema},{}", &rest[1..]),
        )
        .unwrap();
    }
    let (ca, a) = fleet_json(&fast);
    let (cb, b) = fleet_json(&sorted);
    assert_eq!(ca, 1);
    assert_eq!((ca, &a), (cb, &b));
    assert_eq!(a["groups"].as_array().unwrap().len(), 1, "{a:#}");
    assert_eq!(a["status"]["fail"], 3, "{a:#}");
}

fn check_json(args: &[&str]) -> Value {
    let o = gpudoctor().args(args).output().unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn diff_json(a: &Path, b: &Path) -> (i32, Value) {
    let o = gpudoctor()
        .arg("diff")
        .arg(a)
        .arg(b)
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

/// `baseline.versions` judges the NVIDIA driver, the CUDA driver and the kernel, three
/// findings on `host`: a node whose driver differs from the baseline's diffs as that one
/// finding worse (`host #1`), exit 1, where a key of check and subject alone kept only the
/// kernel's and said nothing differs (exit 0). The other way round it is better: exit 0.
#[test]
fn diff_scale_tells_findings_of_one_check_and_subject_apart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (sku, other) = (d.join("sku.json"), d.join("other-driver.json"));
    let root = "fixtures/vm-flat-4gpu";
    let o = gpudoctor()
        .args(["--root", root, "baseline", "-o"])
        .arg(&sku)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let mut b: Value = serde_json::from_slice(&std::fs::read(&sku).unwrap()).unwrap();
    b["versions"]["nvidia_driver"]["value"] = "535.104.05".into();
    std::fs::write(&other, b.to_string()).unwrap();
    let (ra, rb) = (d.join("a.json"), d.join("b.json"));
    let report = |expect: &Path| {
        let e = expect.to_str().unwrap();
        check_json(&["--root", root, "check", "--expect", e, "--json"])
    };
    let a = report(&sku);
    let versions = |r: &Value| -> Vec<String> {
        r["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["id"] == "baseline.versions" && f["subject"] == "host")
            .map(|f| f["status"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(versions(&a), ["pass", "pass", "pass"], "{a:#}");
    std::fs::write(&ra, a.to_string()).unwrap();
    let b = report(&other);
    assert_eq!(versions(&b), ["fail", "pass", "pass"], "{b:#}");
    std::fs::write(&rb, b.to_string()).unwrap();

    let (code, diff) = diff_json(&ra, &rb);
    assert_eq!(code, 1, "{diff:#}");
    let changes = diff["checks"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{diff:#}");
    let c = &changes[0];
    assert_eq!(
        (&c["id"], &c["subject"], &c["a"], &c["b"], &c["change"]),
        (
            &"baseline.versions".into(),
            &"host #1".into(),
            &"pass".into(),
            &"fail".into(),
            &"worse".into()
        ),
        "{diff:#}"
    );
    assert!(
        c["message_b"].as_str().unwrap().contains("535.104.05"),
        "{c:#}"
    );
    let o = gpudoctor().arg("diff").arg(&ra).arg(&rb).output().unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.contains("baseline.versions") && t.contains("host #1"),
        "{t}"
    );

    let (code, back) = diff_json(&rb, &ra);
    assert_eq!(code, 0, "better only: {back:#}");
    assert_eq!(back["checks"][0]["change"], "better", "{back:#}");
}

/// Exit 1 exactly when B is worse than A: a finding that appears failing is worse (exit 1);
/// the same reports the other way round (the failure gone) and a report against itself exit 0.
#[test]
fn diff_scale_exits_1_only_when_b_is_worse() {
    let dir = tempfile::tempdir().unwrap();
    let (ra, rb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    write_check_report("fixtures/vm-flat-4gpu", &ra);
    let mut b: Value = serde_json::from_slice(&std::fs::read(&ra).unwrap()).unwrap();
    let mut extra = b["checks"][0].clone();
    extra["id"] = "gpu.ecc".into();
    extra["subject"] = "GPU9".into();
    extra["status"] = "fail".into();
    extra["message"] = "3 volatile uncorrectable ECC errors".into();
    b["checks"].as_array_mut().unwrap().push(extra);
    b["status"] = "fail".into();
    std::fs::write(&rb, b.to_string()).unwrap();

    let (code, d) = diff_json(&ra, &rb);
    assert_eq!(code, 1, "{d:#}");
    let c = &d["checks"][0];
    assert_eq!(
        (&c["subject"], &c["a"], &c["b"], &c["change"]),
        (
            &"GPU9".into(),
            &"(absent)".into(),
            &"fail".into(),
            &"worse".into()
        ),
        "{d:#}"
    );
    let (code, d) = diff_json(&rb, &ra);
    assert_eq!(code, 0, "the failure gone is better: {d:#}");
    assert_eq!(d["checks"][0]["change"], "better", "{d:#}");
    let (code, d) = diff_json(&ra, &ra);
    assert_eq!(code, 0, "{d:#}");
    assert!(d["checks"].as_array().unwrap().is_empty(), "{d:#}");
}
