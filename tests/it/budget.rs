//! `check --time-budget`: a run whose budget is spent keeps what it judged, reports the rest
//! as unknown skips naming the budget and the step that was running, ends within the budget,
//! and is gated as usual. Slowness comes from GPUDOCTOR_TEST_SLOW_READ (test-only: a read of
//! one path sleeps, as a device that stops answering would).

use crate::gpudoctor;
use serde_json::Value;
use std::time::{Duration, Instant};

/// `check --json ARGS` with a read of `slow` taking 30 s: (exit code, report, how long).
fn slow_check(slow: &str, args: &[&str]) -> (i32, Value, Duration) {
    let t0 = Instant::now();
    let out = gpudoctor()
        .env("GPUDOCTOR_TEST_SLOW_READ", format!("{slow}=30"))
        .args(["check", "--json"])
        .args(args)
        .output()
        .unwrap();
    let took = t0.elapsed();
    let code = out.status.code().unwrap();
    assert!(
        code == 0 || code == 1,
        "exit {code}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (code, serde_json::from_slice(&out.stdout).unwrap(), took)
}

fn findings(r: &Value) -> &Vec<Value> {
    r["checks"].as_array().unwrap()
}

fn key(f: &Value) -> (String, String) {
    (
        f["id"].as_str().unwrap().to_string(),
        f["subject"].as_str().unwrap().to_string(),
    )
}

const CLASS: &str = "/sys/devices/pci0000:00/0000:00:01.0/class";

/// Discovery that does not answer: the run ends at its budget (not the 60 s discovery
/// deadline, not the 30 s read) with every check of the run an unknown skip saying why.
#[test]
fn budget_spent_in_discovery_leaves_every_check_unknown() {
    let (code, r, took) = slow_check(
        CLASS,
        &["--root", "fixtures/pcie-2socket-roce", "--time-budget", "1"],
    );
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert_eq!(code, 0, "nothing failed; unknown is judged by the gate");
    assert_eq!(r["status"], "skip");
    assert_eq!(r["time_budget"]["seconds"], 1.0);
    let during = r["time_budget"]["spent_during"].as_str().unwrap();
    assert!(
        during.starts_with("discovery (a read not answering; last path asked for: /sys/"),
        "{during}"
    );
    let f = findings(&r);
    // Every level-0 check, once (silence.stale judges only the silences given, none here).
    let level0 = gpudoctor()
        .args(["list", "--json"])
        .output()
        .unwrap()
        .stdout;
    let level0: Value = serde_json::from_slice(&level0).unwrap();
    let ids: Vec<&str> = level0["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| {
            let id = c["id"].as_str().unwrap();
            c["level"] == 0 && !id.starts_with("baseline.") && id != "silence.stale"
        })
        .map(|c| c["id"].as_str().unwrap())
        .collect();
    assert_eq!(f.len(), ids.len());
    for x in f {
        assert!(ids.contains(&x["id"].as_str().unwrap()), "{x}");
        assert_eq!(x["status"], "skip");
        assert_eq!(x["skip"], "unknown", "unknown, never not applicable: {x}");
        assert_eq!(
            x["message"],
            format!("not judged: time budget of 1 s spent during {during}")
        );
    }

    // --fail-on-skip fails the node, and the reason line says the budget ran out.
    let out = gpudoctor()
        .env("GPUDOCTOR_TEST_SLOW_READ", format!("{CLASS}=30"))
        .args(["check", "--root", "fixtures/pcie-2socket-roce"])
        .args(["--time-budget", "1", "--fail-on-skip", "--format", "reason"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(
        line.starts_with(&format!(
            "gpudoctor: time budget of 1 s spent during discovery, {} not judged; gate: ",
            ids.len()
        )),
        "{line}"
    );

    // Prometheus says the budget ran out (and what it was); without a budget, no such series.
    let prom = |budget: &[&str]| {
        let out = gpudoctor()
            .env("GPUDOCTOR_TEST_SLOW_READ", format!("{CLASS}=30"))
            .args(["check", "--root", "fixtures/pcie-2socket-roce"])
            .args(budget)
            .args(["--format", "prometheus"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let cut = prom(&["--time-budget", "1"]);
    assert!(cut.contains("\ngpudoctor_time_budget_seconds 1\n"), "{cut}");
    assert!(cut.contains("\ngpudoctor_time_budget_spent 1\n"), "{cut}");
    let whole = gpudoctor()
        .args([
            "check",
            "--root",
            "fixtures/pcie-2socket-roce",
            "--format",
            "prometheus",
        ])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&whole.stdout).contains("gpudoctor_time_budget"));
}

/// A probe that does not answer (level 1, replayed from probes/*.json): every level-0 finding
/// and the probes before it are kept as judged (d2h's failure included: the verdict stays
/// fail); that probe and the ones after it are unknown.
#[test]
fn budget_spent_in_a_probe_keeps_what_was_judged() {
    let args = ["--root", "fixtures/h100x1-live", "--level", "1"];
    let (full_code, full) = crate::check_json(&args);
    assert_eq!(full_code, 1, "probe.d2h fails on this tree");
    let mut cut_args = args.to_vec();
    cut_args.extend(["--time-budget", "2"]);
    let (code, r, took) = slow_check("/probes/p2p.json", &cut_args);
    assert!(took < Duration::from_secs(12), "took {took:?}");
    let during = r["time_budget"]["spent_during"].as_str().unwrap();
    assert_eq!(
        during,
        "probe.p2p (reading /probes/p2p.json: a read not answering)"
    );
    let cut_ids = ["probe.p2p", "probe.dmabuf-export"];
    let mut kept = 0;
    for x in findings(&full) {
        if cut_ids.contains(&x["id"].as_str().unwrap()) {
            continue;
        }
        let same = findings(&r).iter().find(|y| key(y) == key(x));
        assert_eq!(same, Some(x), "kept as judged: {x}");
        kept += 1;
    }
    assert!(kept > 10, "{kept}");
    for id in cut_ids {
        let mine: Vec<_> = findings(&r).iter().filter(|y| y["id"] == id).collect();
        assert_eq!(mine.len(), 1, "{id}");
        // One GPU: p2p has nothing to measure whatever the budget.
        let kind = if id == "probe.p2p" {
            "not-applicable"
        } else {
            "unknown"
        };
        assert_eq!(mine[0]["skip"], kind, "{id}");
        assert_eq!(
            mine[0]["message"],
            format!("not judged: time budget of 2 s spent during {during}")
        );
    }
    assert_eq!(code, 1, "the failure judged before the cut stands");
    assert_eq!(r["status"], "fail");

    // Cut in the failing probe itself: unknown, never pass. The verdict no longer fails
    // without --fail-on-skip (the reason line says the budget ran out), and does with it.
    let (code, r, _) = slow_check("/probes/d2h.json", &cut_args);
    assert_eq!(code, 0);
    let d2h: Vec<_> = findings(&r)
        .iter()
        .filter(|y| y["id"] == "probe.d2h")
        .collect();
    assert_eq!(d2h.len(), 1);
    assert_eq!(d2h[0]["skip"], "unknown");
    let (code, r, _) = slow_check(
        "/probes/d2h.json",
        &[&cut_args[..], &["--fail-on-skip"]].concat(),
    );
    assert_eq!(code, 1);
    assert_eq!(r["status"], "fail");
}

/// A budget that is not spent changes nothing but says it was there.
#[test]
fn an_unspent_budget_changes_nothing() {
    let (code, full) = crate::check_json(&["--root", "fixtures/hgx-h100-8gpu"]);
    let (bcode, mut with) =
        crate::check_json(&["--root", "fixtures/hgx-h100-8gpu", "--time-budget", "300"]);
    assert_eq!(code, bcode);
    assert_eq!(
        with["time_budget"],
        serde_json::json!({"seconds": 300.0, "spent_during": null})
    );
    with.as_object_mut().unwrap().remove("time_budget");
    assert_eq!(with, full);
}

#[test]
fn time_budget_must_be_positive_seconds() {
    for bad in ["0", "abc", "inf", "NaN", "86401"] {
        let out = gpudoctor()
            .args([
                "check",
                "--root",
                "fixtures/hgx-h100-8gpu",
                "--time-budget",
                bad,
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("expected seconds"),
            "{bad}"
        );
    }
}
