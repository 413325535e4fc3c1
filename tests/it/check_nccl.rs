//! `probe.nccl` inside `check --level 1`: a recorded tree's `probes/nccl.json` (what
//! `probe nccl --json` printed on a real machine) replays and is judged again; a tree without
//! one is a reasoned skip, a damaged one exit 2.

use super::{check_json, copy_fixture, gpudoctor, repo};

fn nccl_findings(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == "probe.nccl")
        .cloned()
        .collect()
}

#[test]
fn recorded_nccl_run_is_judged_at_level_1() {
    // Not recorded: a skip naming the file, never a pass.
    let (_, v) = check_json(&["--root", "fixtures/h200x2-live", "--level", "1"]);
    let f = nccl_findings(&v);
    assert_eq!(f.len(), 1, "{f:#?}");
    assert_eq!(f[0]["status"], "skip");
    assert!(
        f[0]["message"]
            .as_str()
            .unwrap()
            .contains("probes/nccl.json"),
        "{f:#?}"
    );
    // Level 0 does not run it.
    let (_, v) = check_json(&["--root", "fixtures/h200x2-live"]);
    assert!(nccl_findings(&v).is_empty());

    // A real run on two H200s with a second process loading the NVLinks: both collectives
    // fail against their bars, each re-measured first; the exit code says so.
    let (_tmp, tree) = copy_fixture("h200x2-live");
    std::fs::copy(
        repo().join("fixtures/nccl-probe/h200x2-degraded.json"),
        tree.join("probes/nccl.json"),
    )
    .unwrap();
    let root = tree.to_str().unwrap();
    let (code, v) = check_json(&["--root", root, "--level", "1"]);
    assert_eq!(code, 1);
    let f = nccl_findings(&v);
    let subjects: Vec<&str> = f.iter().map(|f| f["subject"].as_str().unwrap()).collect();
    assert_eq!(
        subjects,
        ["intra-node (all-reduce)", "intra-node (all-gather)"]
    );
    for x in &f {
        assert_eq!(x["status"], "fail", "{x:#}");
        let text = x.to_string();
        assert!(text.contains("measured again"), "{text}");
        assert!(text.contains("P2P/direct pointer x24"), "{text}");
        assert!(x["remediation"].is_string(), "{x:#}");
    }

    // The same machine idle (a real run too): both collectives pass, and so does the check.
    std::fs::copy(
        repo().join("fixtures/nccl-probe/h200x2-healthy.json"),
        tree.join("probes/nccl.json"),
    )
    .unwrap();
    let (code, v) = check_json(&["--root", root, "--level", "1"]);
    let f = nccl_findings(&v);
    assert_eq!(f.len(), 2, "{f:#?}");
    for x in &f {
        assert_eq!(x["status"], "pass", "{x:#}");
        assert!(x.to_string().contains("NCCL library"), "{x:#}");
    }
    assert_eq!(code, 0, "{:#}", v["summary"]);

    // A damaged report: one error line, exit 2.
    std::fs::write(
        tree.join("probes/nccl.json"),
        b"{\"schema\": \"gpudoctor.nccl/1\", ",
    )
    .unwrap();
    let out = gpudoctor()
        .args(["check", "--level", "1", "--root", root])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("gpudoctor: error:") && err.contains("probes/nccl.json"),
        "{err}"
    );
}
