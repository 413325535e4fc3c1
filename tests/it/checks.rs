//! `gpudoctor check` on every fixture: snapshots, per-variant expectations, catalog.

use crate::{all_sources, gpudoctor, repo, variants};
use std::collections::BTreeSet;

fn check_json(source: &[String], extra: &[&str]) -> (i32, serde_json::Value) {
    let root = source.join(" ");
    let out = gpudoctor()
        .args(["check", "--json"])
        .args(source)
        .args(extra)
        .output()
        .unwrap();
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "{root}: exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["gpudoctor_version"] = "[version]".into();
    v["gpudoctor_revision"] = "[revision]".into();
    (code, v)
}

fn ids_with(v: &serde_json::Value, status: &str) -> BTreeSet<String> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == status)
        .map(|c| c["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn snapshot_check_every_fixture() {
    for (n, src) in all_sources() {
        let root = src.join(" ");
        let (code, json) = check_json(&src, &[]);
        // Exit code follows the overall status.
        let failed = json["status"] == "fail";
        assert_eq!(code, if failed { 1 } else { 0 }, "{root}");
        // Every warn/fail names a fix; every item has the documented fields.
        for c in json["checks"].as_array().unwrap() {
            for k in ["id", "status", "subject", "message", "evidence"] {
                assert!(!c[k].is_null(), "{root}: {k} missing in {c}");
            }
            if c["status"] == "warn" || c["status"] == "fail" {
                assert!(c["remediation"].is_string(), "{root}: no fix in {c}");
            }
        }
        let table = gpudoctor().arg("check").args(&src).output().unwrap();
        assert_eq!(table.status.code(), Some(code), "{root}");
        let table = String::from_utf8(table.stdout).unwrap();
        insta::assert_json_snapshot!(format!("{n}__check_json"), json);
        insta::assert_snapshot!(format!("{n}__check_table"), table);
    }
}

/// Each faulty variant fails (and warns) exactly the checks its expect.json names, beyond what
/// its base tree already shows.
#[test]
fn variants_fail_exactly_their_checks() {
    let mut seen = 0;
    for (n, bundle, dir) in variants() {
        let text = std::fs::read_to_string(dir.join("expect.json")).unwrap();
        let expect: serde_json::Value = serde_json::from_str(&text).unwrap();
        let base = expect["base"].as_str().unwrap();
        let (_, v) = check_json(&["--bundle".into(), bundle.display().to_string()], &[]);
        let (_, b) = check_json(&["--root".into(), format!("fixtures/{base}")], &[]);
        let want = |k: &str| -> BTreeSet<String> {
            expect[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect()
        };
        let fails = ids_with(&v, "fail");
        assert_eq!(fails, want("fail"), "{n}: failing checks");
        let base_warns = ids_with(&b, "warn");
        let new_warns: BTreeSet<String> = ids_with(&v, "warn")
            .difference(&base_warns)
            .cloned()
            .collect();
        assert_eq!(new_warns, want("warn"), "{n}: new warnings");
        seen += 1;
    }
    assert!(seen >= 10, "faulty variants present ({seen})");
}

/// Every check id fails in at least one fixture and passes in at least one (severity warn
/// checks: warns in one).
#[test]
fn every_check_both_fails_and_passes_somewhere() {
    let mut bad: BTreeSet<String> = BTreeSet::new();
    let mut good: BTreeSet<String> = BTreeSet::new();
    for (_, src) in all_sources() {
        let (_, v) = check_json(&src, &[]);
        bad.extend(ids_with(&v, "fail"));
        bad.extend(ids_with(&v, "warn"));
        good.extend(ids_with(&v, "pass"));
    }
    // Level-1 verdicts come from recorded probe samples; tests/it/probes.rs alters those
    // samples to make each probe fail.
    // baseline.* judge only against a baseline (--expect): tests/it/baseline.rs makes each of
    // them fail and pass.
    // gdr.nccl-agrees judges only a record that carries NCCL's own verdict (`--from` an NCCL
    // dump): tests/it/records.rs makes it pass (ibm-vpc-h100) and warn (a GeForce with gdr=1).
    // silence.stale judges only the silences given (--skip ID:SUBJECT, a baseline's):
    // tests/it/baseline.rs makes it pass and warn.
    for c in gpudoctor::checks::CATALOG.iter().filter(|c| {
        c.level == 0
            && !c.id.as_str().starts_with("baseline.")
            && c.id != gpudoctor::checks::CheckId::GdrNcclAgrees
            && c.id != gpudoctor::checks::CheckId::SilenceStale
    }) {
        assert!(
            bad.contains(c.id.as_str()),
            "no fixture fails/warns {}",
            c.id
        );
        assert!(good.contains(c.id.as_str()), "no fixture passes {}", c.id);
    }
}

#[test]
fn catalog_docs_and_man_page_in_step() {
    let ids: BTreeSet<&str> = gpudoctor::checks::CATALOG
        .iter()
        .map(|c| c.id.as_str())
        .collect();
    assert_eq!(ids.len(), gpudoctor::checks::CATALOG.len(), "duplicate ids");
    let docs: BTreeSet<String> = std::fs::read_dir(repo().join("checks"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".md")
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        docs,
        ids.iter().map(|s| s.to_string()).collect(),
        "checks/*.md vs catalog"
    );
    let man = std::fs::read_to_string(repo().join("man/gpudoctor-check.1")).unwrap();
    for c in gpudoctor::checks::CATALOG {
        for section in ["## What it checks", "## Why it matters", "## How to fix"] {
            assert!(c.doc.contains(section), "{}: doc lacks '{section}'", c.id);
        }
        assert!(
            c.doc.starts_with(&format!("# {}", c.id)),
            "{}: doc title",
            c.id
        );
        assert!(
            man.contains(&c.id.as_str().replace('-', "\\-")),
            "{} missing from man/gpudoctor-check.1",
            c.id
        );
    }
    // The catalog itself is API: snapshot it.
    let list = gpudoctor().args(["list", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(v["schema"], "gpudoctor.catalog/1");
    assert_eq!(
        v["checks"].as_array().unwrap().len(),
        gpudoctor::checks::CATALOG.len()
    );
    // The revision changes with every commit; `version_names_the_release_and_the_revision`
    // checks its value.
    let text = String::from_utf8(list.stdout).unwrap().replace(
        &format!("\"gpudoctor_revision\": \"{}\"", gpudoctor::REVISION),
        "\"gpudoctor_revision\": \"[revision]\"",
    );
    insta::assert_snapshot!("catalog", text);
}

#[test]
fn overrides_change_status_and_exit_code() {
    // The ACS variant fails pcie.acs-redirect; --warn turns that into a warning (exit 0),
    // --strict makes the warning fail again, --skip removes it.
    let root = &[
        "--bundle".to_string(),
        "fixtures/variants/hgx-h100-8gpu--acs-redirect/bundle.tar.gz".to_string(),
    ];
    let (code, _) = check_json(root, &[]);
    assert_eq!(code, 1);
    let (code, v) = check_json(root, &["--warn", "pcie.acs-redirect"]);
    assert_eq!(code, 0);
    assert!(ids_with(&v, "fail").is_empty());
    let acs: Vec<_> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "pcie.acs-redirect" && c["status"] == "warn")
        .collect();
    assert!(!acs.is_empty());
    assert_eq!(acs[0]["original_status"], "fail");
    let (code, _) = check_json(root, &["--warn", "pcie.acs-redirect", "--strict"]);
    assert_eq!(code, 1);
    let (code, v) = check_json(root, &["--skip", "pcie.acs-redirect"]);
    assert_eq!(code, 0);
    assert!(ids_with(&v, "fail").is_empty());
    let out = gpudoctor()
        .arg("check")
        .args(root)
        .args(["--warn", "no.such-check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn explain_and_list() {
    let out = gpudoctor()
        .args(["explain", "pcie.acs-redirect"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ACS"));
    let out = gpudoctor().args(["explain", "nope"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = gpudoctor().args(["list"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("gdr.peermem"));
}

#[test]
fn live_check_exit_code_documented() {
    // No GPU here: every check is a skip with a reason, nothing fails, exit 0, no panic.
    let out = gpudoctor().args(["check", "--json"]).output().unwrap();
    let code = out.status.code().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(code, if v["status"] == "fail" { 1 } else { 0 });
    for c in v["checks"].as_array().unwrap() {
        if c["status"] == "skip" {
            assert!(!c["message"].as_str().unwrap().is_empty());
        }
    }
}

/// Recorded probe samples (fixtures/*/probes/*.json) replay through `check --level 1`: the
/// verdicts are recomputed from the raw samples with the current thresholds.
#[test]
fn level1_replays_recorded_probes() {
    let mut seen = 0;
    for dir in crate::fixture_dirs() {
        if !dir.join("probes").is_dir() {
            continue;
        }
        let n = crate::name(&dir);
        let (code, v) = check_json(
            &[
                "--root".into(),
                format!("fixtures/{n}"),
                "--level".into(),
                "1".into(),
            ],
            &[],
        );
        assert_eq!(v["level"], 1);
        assert_eq!(code, if v["status"] == "fail" { 1 } else { 0 });
        let probes: Vec<_> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["id"].as_str().unwrap().starts_with("probe."))
            .collect();
        assert!(!probes.is_empty(), "{n}");
        insta::assert_json_snapshot!(format!("{n}__check_level1_json"), v);
        seen += 1;
    }
    assert!(seen >= 2);
}

/// Fix texts that are right: one combined ACS boot parameter (the kernel keeps only
/// the last `disable_acs_redir=`), each copy probe's fix names its own probe, and the relaxed-
/// ordering fix gives mlxconfig's PCI_WR_ORDERING values as documented.
#[test]
fn fix_texts_name_the_right_remedy() {
    let acs = "fixtures/variants/hgx-h100-8gpu--acs-redirect/bundle.tar.gz".to_string();
    let (_, v) = check_json(&["--bundle".into(), acs], &[]);
    let fixes: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["id"] == "pcie.acs-redirect" && c["status"] == "fail")
        .map(|c| c["remediation"].as_str().unwrap())
        .collect();
    assert_eq!(fixes.len(), 2);
    for f in fixes {
        assert!(
            f.contains("`pci=disable_acs_redir=0000:5d:00.0;0000:5d:03.0`"),
            "{f}"
        );
    }
    let ro = "fixtures/variants/pcie-2socket-roce--no-relaxed-ordering/bundle.tar.gz".to_string();
    let (_, v) = check_json(&["--bundle".into(), ro], &[]);
    let f = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "pcie.devctl" && c["status"] == "warn")
        .expect("relaxed ordering warning");
    let fix = f["remediation"].as_str().unwrap();
    assert!(
        fix.contains("per_mkey(0)") && fix.contains("force_relax(1)"),
        "{fix}"
    );
    assert!(!fix.contains("PCI_WR_ORDERING=1` (per-mkey"), "{fix}");
    let (_, v) = check_json(
        &["--root".into(), "fixtures/h100x1-live".into()],
        &["--level", "1"],
    );
    let mut seen = 0;
    for c in v["checks"].as_array().unwrap() {
        let (Some(id), Some(fix)) = (c["id"].as_str(), c["remediation"].as_str()) else {
            continue;
        };
        if let Some(probe) = id
            .strip_prefix("probe.")
            .filter(|p| ["h2d", "d2h"].contains(p))
        {
            assert!(
                fix.contains(&format!("probe {probe} --json")),
                "{id}: {fix}"
            );
            seen += 1;
        }
    }
    assert!(seen > 0, "h100x1-live records a failing d2h probe");
}

/// The check report names the node, when its facts were read and the driver at top level; the
/// topo report's GPUs carry their link and NUMA placement (no join on devices[] needed).
#[test]
fn reports_name_node_time_driver_and_gpu_placement() {
    let (_, v) = check_json(&["--root".into(), "fixtures/h200x2-live".into()], &[]);
    assert!(
        v["hostname"].as_str().unwrap().starts_with("host-"),
        "redacted token: {}",
        v["hostname"]
    );
    assert!(v["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(v["driver_version"], "580.159.04");
    // Without a driver there is no version, and it says null rather than guessing.
    let (_, v) = check_json(
        &[
            "--bundle".into(),
            "fixtures/variants/vm-flat-4gpu--no-driver/bundle.tar.gz".into(),
        ],
        &[],
    );
    assert!(v["driver_version"].is_null());
    let out = gpudoctor()
        .args(["topo", "--json", "--root", "fixtures/hgx-h100-8gpu"])
        .output()
        .unwrap();
    let t: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for g in t["topology"]["gpus"].as_array().unwrap() {
        assert_eq!(g["link"]["cur_width"], 16, "{g}");
        assert!(g["numa"]["node"].is_u64(), "{g}");
    }
}

/// A GPU the driver lost is named by driver.gpu-count (the topology knows it), and the NVLink
/// finding of its peer points at it.
#[test]
fn a_lost_gpu_is_named_and_its_peer_points_at_it() {
    let b = "fixtures/variants/vm-flat-4gpu--gpu-missing/bundle.tar.gz".to_string();
    let (code, v) = check_json(&["--bundle".into(), b], &[]);
    assert_eq!(code, 1);
    let find = |id: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id && c["status"] == "fail")
            .unwrap_or_else(|| panic!("{id} fails"))["message"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let count = find("driver.gpu-count");
    assert!(
        count.contains("GPU2 (0000:00:06.0) is on the PCI bus but missing from NVML"),
        "{count}"
    );
    let link = find("gpu.nvlink-down");
    assert!(link.contains("far end GPU2 (0000:00:06.0)"), "{link}");
}

/// An IOMMU group whose `type` cannot be read is unknown, not "none": iommu.mode must not
/// pass (it passed before the fix, recording the group as absent).
#[test]
fn iommu_type_unreadable_is_not_pass() {
    let tmp = tempfile::tempdir().unwrap();
    let src = crate::fixture_tree("hgx-h100-8gpu");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(tmp.path().join("t"))
        .status()
        .unwrap();
    assert!(st.success());
    let groups = tmp.path().join("t/sys/kernel/iommu_groups");
    for g in std::fs::read_dir(&groups).unwrap() {
        let _ = std::fs::remove_file(g.unwrap().path().join("type"));
    }
    let root = tmp.path().join("t").display().to_string();
    let (_, v) = check_json(&["--root".into(), root], &[]);
    let f = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "iommu.mode")
        .expect("iommu.mode finding");
    assert_eq!(f["status"], "skip", "{f}");
    assert!(
        f["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("unreadable")
            || f.to_string().contains("unreadable"),
        "{f}"
    );
}

/// Checks judge on NVML's error kind: a GPU NVML reports lost fails its gpu.* checks with the
/// fix for a GPU off the bus; a fact refused for permission is a not-root skip. Both shapes of
/// nvml.json: the kind in `unread_kind` (`gpudoctor.nvml/1`), and in the fact's reading
/// (`gpudoctor.nvml/2`).
#[test]
fn nvml_error_kinds_are_judged() {
    nvml_error_kinds_judged_in(false);
    nvml_error_kinds_judged_in(true);
}

fn nvml_error_kinds_judged_in(readings: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("t");
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(crate::fixture_tree("h200x2-live"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(st.success());
    let path = tree.join("nvml.json");
    let mut n: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    if readings {
        let snap =
            gpudoctor::nvml::NvmlSnapshot::from_json(&serde_json::to_vec(&n).unwrap()).unwrap();
        n = serde_json::to_value(&snap).unwrap();
        assert_eq!(n["schema"], "gpudoctor.nvml/2");
        n["gpus"][0]["ecc_enabled"] = serde_json::json!(
            {"unknown": "GPU has fallen off the bus (GpuLost)", "kind": "gpu-lost"});
        n["gpus"][1]["persistence_mode"] = serde_json::json!(
            {"unknown": "no permission to query NVML", "kind": "no-permission"});
    } else {
        let g0 = &mut n["gpus"][0];
        g0["ecc_enabled"] = serde_json::Value::Null;
        g0["unread"]["ecc_enabled"] = "GPU has fallen off the bus (GpuLost)".into();
        g0["unread_kind"]["ecc_enabled"] = "gpu-lost".into();
        let g1 = &mut n["gpus"][1];
        g1["persistence_mode"] = serde_json::Value::Null;
        g1["unread"]["persistence_mode"] = "no permission to query NVML".into();
        g1["unread_kind"]["persistence_mode"] = "no-permission".into();
    }
    std::fs::write(&path, serde_json::to_vec(&n).unwrap()).unwrap();
    let (code, v) = check_json(&["--root".into(), tree.display().to_string()], &[]);
    assert_eq!(code, 1);
    let find = |id: &str, subject: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id && c["subject"] == subject)
            .unwrap()
            .clone()
    };
    let lost = find("gpu.ecc", "GPU0");
    assert_eq!(lost["status"], "fail", "{lost}");
    assert!(
        lost["remediation"].as_str().unwrap().contains("Xid 79"),
        "{lost}"
    );
    assert_eq!(find("gpu.persistence", "GPU0")["status"], "fail");
    let denied = find("gpu.persistence", "GPU1");
    assert_eq!(denied["status"], "skip");
    assert_eq!(denied["skip"], "not-root", "{denied}");
}

/// Every fixture's nvml.json (`gpudoctor.nvml/1`) read and written again as `gpudoctor.nvml/2`
/// judges the same: the conversion on load and the reader of the new shape agree, finding for
/// finding.
#[test]
fn nvml_json_rewritten_as_readings_judges_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for dir in crate::fixture_dirs() {
        let path = dir.join("nvml.json");
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let name = dir.file_name().unwrap().to_string_lossy().to_string();
        let tree = tmp.path().join(&name);
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(&dir)
            .arg(&tree)
            .status()
            .unwrap();
        assert!(st.success());
        let snap = gpudoctor::nvml::NvmlSnapshot::from_json(&bytes).unwrap();
        let v2 = serde_json::to_vec_pretty(&snap).unwrap();
        assert_eq!(
            gpudoctor::nvml::NvmlSnapshot::from_json(&v2).unwrap(),
            snap,
            "{name}"
        );
        std::fs::write(tree.join("nvml.json"), &v2).unwrap();
        let (_, before) = check_json(&["--root".into(), dir.display().to_string()], &[]);
        let (_, after) = check_json(&["--root".into(), tree.display().to_string()], &[]);
        assert_eq!(before["checks"], after["checks"], "{name}");
        assert_eq!(before["nvml"], after["nvml"], "{name}");
        seen += 1;
    }
    assert!(seen >= 5, "fixtures with nvml.json: {seen}");
}

/// A GPU whose `iommu_group` link cannot be read (a damaged tree: a file in its place, or a
/// link naming no group number) is in an unknown group: iommu.mode must not pass saying "no
/// group", and says which device and why.
#[test]
fn iommu_group_link_unreadable_is_not_pass() {
    for (what, damage) in [
        ("a file", None),
        (
            "a link to a non-number",
            Some("../../../../kernel/iommu_groups/six"),
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let tree = tmp.path().join("t");
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(crate::fixture_tree("hgx-h100-8gpu"))
            .arg(&tree)
            .status()
            .unwrap();
        assert!(st.success());
        // GPU0 (0000:1b:00.0) is in group 6.
        let link = tree.join("sys/bus/pci/devices/0000:1b:00.0/iommu_group");
        let link = std::fs::canonicalize(link.parent().unwrap())
            .unwrap()
            .join("iommu_group");
        std::fs::remove_file(&link).unwrap();
        match damage {
            None => std::fs::write(&link, "6\n").unwrap(),
            Some(t) => std::os::unix::fs::symlink(t, &link).unwrap(),
        }
        let (_, v) = check_json(&["--root".into(), tree.display().to_string()], &[]);
        let f = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == "iommu.mode")
            .unwrap()
            .clone();
        assert_eq!(f["status"], "skip", "{what}: {f}");
        assert!(
            f["message"]
                .as_str()
                .unwrap()
                .contains("GPU0 (group unknown"),
            "{what}: {f}"
        );
    }
}
