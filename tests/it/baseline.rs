//! `gpudoctor baseline` and `check --expect`: every fixture against its own baseline (no
//! differences), variants against their base's (the planted fault, by position), and the base
//! fixtures against each other (snapshotted).

use crate::{all_sources, fixture_dirs, gpudoctor, name};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn baseline_of(src: &[String], dir: &Path, file: &str) -> PathBuf {
    let out = dir.join(file);
    let mut args: Vec<String> = src.to_vec();
    args.extend(["baseline".into(), "-o".into(), out.display().to_string()]);
    let o = gpudoctor().args(&args).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn check_expect(src: &[String], baseline: &Path, level: &str) -> (i32, Value) {
    let mut args: Vec<String> = src.to_vec();
    args.extend([
        "check".into(),
        "--json".into(),
        "--level".into(),
        level.into(),
        "--expect".into(),
        baseline.display().to_string(),
    ]);
    let o = gpudoctor().args(&args).output().unwrap();
    let code = o.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    (code, serde_json::from_slice(&o.stdout).unwrap())
}

/// The baseline.* findings that are not pass: (id, subject, status, message).
fn differences(report: &Value) -> Vec<(String, String, String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("baseline."))
        .filter(|c| c["status"] != "pass" && c["status"] != "skip")
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["subject"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
                c["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn ids(report: &Value) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"].as_str().unwrap().starts_with("baseline."))
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_string(),
                c["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn every_fixture_passes_its_own_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let mut passed = std::collections::BTreeSet::new();
    for (n, src) in all_sources() {
        let b = baseline_of(&src, tmp.path(), &format!("{n}.json"));
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
        assert_eq!(doc["schema"], "gpudoctor.baseline/1");
        let (_, r) = check_expect(&src, &b, "1");
        assert_eq!(differences(&r), vec![], "{n} against its own baseline");
        // Every baseline id reported, and GPUs judged where the fixture has any.
        let seen = ids(&r);
        passed.extend(
            seen.iter()
                .filter(|(_, s)| s == "pass")
                .map(|(i, _)| i.clone()),
        );
        for id in [
            "baseline.gpus",
            "baseline.nics",
            "baseline.paths",
            "baseline.pcie",
            "baseline.nvlink",
            "baseline.bar1",
            "baseline.versions",
            "baseline.bandwidth",
        ] {
            assert!(seen.iter().any(|(i, _)| i == id), "{n}: no {id} finding");
        }
        if !doc["gpus"].as_array().unwrap().is_empty() {
            assert!(
                seen.contains(&("baseline.gpus".into(), "pass".into())),
                "{n}: GPUs not judged"
            );
        }
        // Floors are recorded where probe samples are, and judged at level 1.
        if fixture_dirs()
            .iter()
            .any(|d| name(d) == n && d.join("probes/h2d.json").is_file())
        {
            assert!(
                !doc["bandwidth"].as_array().unwrap().is_empty(),
                "{n}: recorded probes give floors"
            );
            assert!(seen.contains(&("baseline.bandwidth".into(), "pass".into())));
        }
    }
    let all: std::collections::BTreeSet<String> = gpudoctor::checks::CATALOG
        .iter()
        .filter(|c| c.id.as_str().starts_with("baseline."))
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(passed, all, "every baseline id passes somewhere");
}

/// Each variant against its base fixture's baseline shows the planted difference (and only the
/// shape differences: faults that do not change the shape give none).
#[test]
fn variants_differ_from_their_base_where_the_shape_changed() {
    let tmp = tempfile::tempdir().unwrap();
    type Want<'a> = (&'a str, &'a str, &'a str, &'a str);
    let expected: &[(&str, &[Want])] = &[
        ("hgx-h100-8gpu--acs-redirect", &[]),
        (
            "hgx-h100-8gpu--nic-numa-wrong",
            &[(
                "baseline.paths",
                "GPU1-mlx5_0",
                "fail",
                "GPU1 <-> mlx5_0 is SYS, expected NODE",
            )],
        ),
        (
            "pcie-2socket-roce--fw-mismatch",
            &[(
                "baseline.versions",
                "mlx5_2",
                "fail",
                "MT4125 firmware 22.36.1010, expected 22.39.1002 (policy)",
            )],
        ),
        (
            "pcie-2socket-roce--gen4-slot",
            &[(
                "baseline.gpus",
                "0000:c1:00.0",
                "fail",
                "is NVIDIA H100 PCIe [10de:2331], expected NVIDIA A100 80GB PCIe [10de:20b5]",
            )],
        ),
        (
            "pcie-2socket-roce--gpu-x8",
            &[(
                "baseline.pcie",
                "0000:21:00.0",
                "fail",
                "GPU1 0000:21:00.0 Gen4 x8, expected Gen4 x16",
            )],
        ),
        (
            "pcie-2socket-roce--nic-gen3",
            &[(
                "baseline.pcie",
                "mlx5_0",
                "fail",
                "mlx5_0 0000:02:00.0 Gen3 x16, expected Gen4 x16",
            )],
        ),
        (
            "pcie-2socket-roce--remote-nic",
            &[(
                "baseline.nics",
                "host",
                "fail",
                "2 NICs, expected 4; missing:",
            )],
        ),
        (
            "vm-flat-4gpu--bar1-256m",
            &[(
                "baseline.bar1",
                "0000:00:04.0",
                "fail",
                "BAR1 256 MiB, expected 131072 MiB",
            )],
        ),
        (
            "vm-flat-4gpu--driver-mismatch",
            &[(
                "baseline.versions",
                "host",
                "fail",
                "NVIDIA driver 550.54.15, expected 550.90.07 (policy)",
            )],
        ),
        (
            "vm-flat-4gpu--gpu-health",
            &[
                (
                    "baseline.nvlink",
                    "0000:00:04.0",
                    "fail",
                    "GPU0 0000:00:04.0 has 11 NVLinks active, expected 12",
                ),
                (
                    "baseline.paths",
                    "GPU0-GPU1",
                    "fail",
                    "GPU0 <-> GPU1 is NV11, expected NV12",
                ),
            ],
        ),
        (
            "vm-flat-4gpu--gpu-missing",
            &[(
                "baseline.nvlink",
                "0000:00:07.0",
                "fail",
                "has 0 NVLinks active, expected 12",
            )],
        ),
        ("pcie-2socket-roce--mtu1500", &[]),
        ("pcie-2socket-roce--no-peermem", &[]),
    ];
    let sources = all_sources();
    let src_of = |n: &str| sources.iter().find(|(m, _)| m == n).unwrap().1.clone();
    let mut failed = std::collections::BTreeSet::new();
    for (variant, wants) in expected {
        let base = variant.split("--").next().unwrap();
        let b = baseline_of(&src_of(base), tmp.path(), &format!("{base}.json"));
        let (code, r) = check_expect(&src_of(variant), &b, "0");
        let diffs = differences(&r);
        failed.extend(diffs.iter().filter(|d| d.2 == "fail").map(|d| d.0.clone()));
        if wants.is_empty() {
            assert_eq!(diffs, vec![], "{variant}: the shape did not change");
        }
        for (id, subject, status, msg) in *wants {
            assert!(
                diffs.iter().any(|(i, s, st, m)| i == id
                    && s == subject
                    && st == status
                    && m.contains(msg)),
                "{variant}: expected {id} {subject} {status} '{msg}', got {diffs:#?}"
            );
            if *status == "fail" {
                assert_eq!(code, 1, "{variant}: a failed baseline check fails the run");
            }
        }
    }
    // Every level-0 baseline id fails somewhere (baseline.bandwidth: the floors test below).
    let all: std::collections::BTreeSet<String> = gpudoctor::checks::CATALOG
        .iter()
        .filter(|c| c.id.as_str().starts_with("baseline.") && c.level == 0)
        .map(|c| c.id.to_string())
        .collect();
    assert_eq!(failed, all, "every baseline id fails somewhere");
}

/// Where the facts are unknown (no driver), NVLink-dependent expectations are skips, never
/// passes or invented failures.
#[test]
fn unknown_is_skip_against_a_baseline() {
    let tmp = tempfile::tempdir().unwrap();
    let sources = all_sources();
    let src_of = |n: &str| sources.iter().find(|(m, _)| m == n).unwrap().1.clone();
    let b = baseline_of(&src_of("vm-flat-4gpu"), tmp.path(), "base.json");
    let (_, r) = check_expect(&src_of("vm-flat-4gpu--no-driver"), &b, "0");
    assert_eq!(differences(&r), vec![]);
    let skips: Vec<_> = ids(&r)
        .into_iter()
        .filter(|(i, s)| s == "skip" && (i == "baseline.nvlink" || i == "baseline.paths"))
        .collect();
    assert!(skips.len() >= 6, "{skips:?}");
}

/// The base fixtures against each other: the differences, snapshotted (reviewed on change).
#[test]
fn fixtures_against_each_other() {
    let tmp = tempfile::tempdir().unwrap();
    let bases: Vec<(String, Vec<String>)> = fixture_dirs()
        .iter()
        .map(|d| {
            (
                name(d),
                vec!["--root".to_string(), format!("fixtures/{}", name(d))],
            )
        })
        .collect();
    let mut text = String::new();
    for (bn, bsrc) in &bases {
        let b = baseline_of(bsrc, tmp.path(), &format!("{bn}.json"));
        for (n, src) in &bases {
            if n == bn {
                continue;
            }
            let (code, r) = check_expect(src, &b, "0");
            let diffs = differences(&r);
            text.push_str(&format!("== {n} against {bn}'s baseline\n"));
            for (id, subject, status, msg) in &diffs {
                text.push_str(&format!("{status} {id} {subject}: {msg}\n"));
            }
            // Identical shapes (the live and VM recordings of the same H200 pair) are the only
            // pairs allowed to match.
            let same_model = [n.as_str(), bn.as_str()]
                .iter()
                .all(|x| x.starts_with("h200x2-"));
            if !same_model {
                assert_eq!(code, 1, "{n} vs {bn}: different models must fail");
                assert!(!diffs.is_empty());
            }
        }
    }
    insta::assert_snapshot!("baseline_cross_fixture", text);
}

#[test]
fn baseline_document_snapshot_and_edits() {
    let tmp = tempfile::tempdir().unwrap();
    let src = vec![
        "--root".to_string(),
        "fixtures/pcie-2socket-roce".to_string(),
    ];
    let b = baseline_of(&src, tmp.path(), "sku.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
    let mut shown = doc.clone();
    shown["written_by"] = "[version]".into();
    insta::assert_json_snapshot!("baseline_pcie-2socket-roce", shown);

    // A person deletes what they do not care about: that part is skipped, not failed.
    doc.as_object_mut().unwrap().remove("versions");
    doc["gpus"][0].as_object_mut().unwrap().remove("pcie");
    let edited = tmp.path().join("edited.json");
    std::fs::write(&edited, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let (_, r) = check_expect(&src, &edited, "0");
    assert!(ids(&r).contains(&("baseline.versions".into(), "skip".into())));
    assert_eq!(differences(&r), vec![]);

    // A stricter hand edit: expect Gen5 on GPU0's link.
    doc["gpus"][0]["pcie"] = serde_json::json!({"max_gen": 5, "max_width": 16, "cur_width": 16});
    std::fs::write(&edited, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let (code, r) = check_expect(&src, &edited, "0");
    assert_eq!(code, 1);
    assert_eq!(
        differences(&r),
        vec![(
            "baseline.pcie".into(),
            "0000:01:00.0".into(),
            "fail".into(),
            "GPU0 0000:01:00.0 capable of Gen4 x16, expected Gen5 x16 (trained width x16)".into()
        )]
    );
}

#[test]
fn bandwidth_floors_are_judged_at_level_1() {
    let tmp = tempfile::tempdir().unwrap();
    let src = vec!["--root".to_string(), "fixtures/h200x2-live".to_string()];
    let b = baseline_of(&src, tmp.path(), "sku.json");
    let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(&b).unwrap()).unwrap();
    let (_, r) = check_expect(&src, &b, "0");
    assert!(ids(&r).contains(&("baseline.bandwidth".into(), "skip".into())));
    // Raise one floor above what was measured: that measurement fails.
    let floors = doc["bandwidth"].as_array_mut().unwrap();
    let f = floors
        .iter_mut()
        .find(|f| f["probe"] == "h2d" && f["method"] == "copy-engine")
        .unwrap();
    f["min_gbps"] = 1000.0.into();
    std::fs::write(&b, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let (code, r) = check_expect(&src, &b, "1");
    assert_eq!(code, 1);
    let d = differences(&r);
    assert_eq!(d.len(), 1, "{d:#?}");
    assert_eq!(d[0].0, "baseline.bandwidth");
    assert!(
        d[0].3.contains("below the baseline floor 1000.0 GB/s"),
        "{d:?}"
    );
}

#[test]
fn bad_baselines_are_usage_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("missing.json", None, "cannot read"),
        (
            "garbage.json",
            Some("{not json"),
            "not a gpudoctor baseline",
        ),
        (
            "future.json",
            Some(r#"{"schema":"gpudoctor.baseline/9"}"#),
            "is not gpudoctor.baseline/1",
        ),
        (
            "typo.json",
            Some(r#"{"schema":"gpudoctor.baseline/1","gpu":[]}"#),
            "unknown field `gpu`",
        ),
    ];
    for (file, body, msg) in cases {
        let p = tmp.path().join(file);
        if let Some(b) = body {
            std::fs::write(&p, b).unwrap();
        }
        let o = gpudoctor()
            .args(["--root", "fixtures/pcie-2socket-roce", "check", "--expect"])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{file}");
        assert!(o.stdout.is_empty());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(msg), "{file}: {e}");
    }
}

const PORT_DOWN: &str = "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz";

/// `check --bundle PORT_DOWN --json --expect FILE` with a baseline holding only `silences`
/// (every other field left out, so no baseline.* check judges anything): exit code and report.
fn check_with_silences(dir: &Path, silences: Value) -> (i32, Value, String) {
    let file = dir.join("silences.json");
    let doc = serde_json::json!({"schema": "gpudoctor.baseline/1", "silences": silences});
    std::fs::write(&file, doc.to_string()).unwrap();
    let o = gpudoctor()
        .args(["check", "--bundle", PORT_DOWN, "--json", "--expect"])
        .arg(&file)
        .output()
        .unwrap();
    let code = o.status.code().unwrap();
    let v = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    (code, v, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn findings<'a>(v: &'a Value, id: &str) -> Vec<&'a Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

/// A baseline's silence holds through its expiry day and silences one subject (its status and
/// evidence kept, the exit code and verdict leaving it out); from the day after, or where it
/// matches nothing, it silences nothing and is reported (`silence.stale`); a malformed entry is
/// a usage error.
#[test]
fn baseline_silences_hold_until_they_expire() {
    let dir = tempfile::tempdir().unwrap();
    let silence = |subject: &str, expires: &str| {
        serde_json::json!([{"check": "rdma.port-state", "subject": subject,
                            "reason": "RMA-1234: cable ordered", "expires": expires}])
    };
    // Without a silence the port fails the node.
    let (code, v, _) = check_with_silences(dir.path(), serde_json::json!([]));
    assert_eq!((code, v["status"].as_str()), (1, Some("fail")));

    let (code, v, err) = check_with_silences(dir.path(), silence("mlx5_2/1", "9999-12-31"));
    assert_eq!(code, 0, "{err}");
    assert_ne!(v["status"], "fail");
    assert_eq!(v["summary"]["silenced"], 1);
    assert_eq!(v["summary"]["fail"], 0);
    let port: Vec<&Value> = findings(&v, "rdma.port-state")
        .into_iter()
        .filter(|f| f["subject"] == "mlx5_2/1")
        .collect();
    assert_eq!(port.len(), 1);
    assert_eq!(port[0]["status"], "fail", "the status is kept");
    assert!(!port[0]["evidence"].as_array().unwrap().is_empty());
    assert_eq!(
        port[0]["silenced"],
        serde_json::json!({"by": "baseline", "reason": "RMA-1234: cable ordered",
                           "expires": "9999-12-31"})
    );
    // Only that subject: the other ports are judged and not silenced.
    assert!(
        findings(&v, "rdma.port-state")
            .iter()
            .filter(|f| f["subject"] != "mlx5_2/1")
            .all(|f| f.get("silenced").is_none())
    );
    let held = findings(&v, "silence.stale");
    assert_eq!(held.len(), 1, "{held:#?}");
    assert_eq!(held[0]["status"], "pass", "the silence in force is listed");
    assert_eq!(
        held[0]["message"],
        "silence of rdma.port-state on mlx5_2/1 in force until 9999-12-31: 1 finding silenced"
    );

    // Expired: the failure counts again, and the silence is named.
    let (code, v, _) = check_with_silences(dir.path(), silence("mlx5_2/1", "2000-01-01"));
    assert_eq!(code, 1);
    assert_eq!(v["status"], "fail");
    let stale = findings(&v, "silence.stale");
    assert_eq!(stale.len(), 1, "{stale:#?}");
    assert_eq!(stale[0]["status"], "warn");
    assert_eq!(stale[0]["subject"], "mlx5_2/1");
    assert!(
        stale[0]["message"]
            .as_str()
            .unwrap()
            .contains("silence of rdma.port-state on mlx5_2/1 expired on 2000-01-01"),
        "{stale:#?}"
    );
    assert_eq!(stale[0]["evidence"][0]["source"], "baseline silences[0]");
    assert!(
        findings(&v, "rdma.port-state")
            .iter()
            .all(|f| f.get("silenced").is_none())
    );

    // Matched nothing: reported, and the real failure still counts.
    let (code, v, _) = check_with_silences(dir.path(), silence("mlx5_9/1", "9999-12-31"));
    assert_eq!(code, 1);
    let stale = findings(&v, "silence.stale");
    assert_eq!(stale.len(), 1);
    assert!(
        stale[0]["message"]
            .as_str()
            .unwrap()
            .contains("matched no finding")
    );

    // Every field is required, and checked.
    for (entry, says) in [
        (
            serde_json::json!({"check": "rdma.port-state", "subject": "mlx5_2/1", "expires": "2030-01-01"}),
            "missing field `reason`",
        ),
        (
            serde_json::json!({"check": "rdma.port-state", "subject": "mlx5_2/1", "reason": "r"}),
            "missing field `expires`",
        ),
        (
            serde_json::json!({"check": "rdma.port-state", "subject": "mlx5_2/1", "reason": " ", "expires": "2030-01-01"}),
            "\"reason\" is empty",
        ),
        (
            serde_json::json!({"check": "rdma.port-state", "subject": "mlx5_2/1", "reason": "r", "expires": "2030-02-30"}),
            "\"expires\" is '2030-02-30', not a date YYYY-MM-DD",
        ),
        (
            serde_json::json!({"check": "rdma.port-stat", "subject": "mlx5_2/1", "reason": "r", "expires": "2030-01-01"}),
            "silences[0]: no check 'rdma.port-stat' (did you mean rdma.port-state?)",
        ),
    ] {
        let (code, _, err) = check_with_silences(dir.path(), serde_json::json!([entry]));
        assert_eq!(code, 2, "{entry}: {err}");
        assert!(err.contains(says), "{entry}: {err}");
    }
}
