//! Probe evaluation from recorded samples: the JSON that `gpudoctor probe ... --json` wrote on
//! the real 2 x H200 machine (fixtures/*/probes/) re-evaluates to the same verdicts, and
//! altered samples move the verdicts the way the thresholds say. No GPU needed.

use crate::repo;
use gpudoctor::probes::{Method, ProbeReport, Status};
use gpudoctor::reading::Reading;
use std::path::PathBuf;

pub fn recorded() -> Vec<(PathBuf, ProbeReport)> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(repo().join("fixtures"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("probes"))
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    for d in dirs {
        for name in ["h2d", "d2h", "p2p", "dmabuf-export"] {
            let p = d.join(format!("{name}.json"));
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let v: serde_json::Value =
                serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            // Older recordings hold a bare gpudoctor.probe/1 report (readings in serde's
            // Ok/Err shape), newer ones what `probe ... --json` prints: a
            // gpudoctor.probe-runs/1 envelope of gpudoctor.probe/2 reports. Both read back.
            let runs = match v.get("runs") {
                Some(runs) => runs.as_array().unwrap().clone(),
                None => vec![v],
            };
            for run in runs {
                let r: ProbeReport =
                    serde_json::from_value(run).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                assert!(
                    gpudoctor::probes::is_probe_schema(&r.schema),
                    "{}: {}",
                    p.display(),
                    r.schema
                );
                out.push((p.clone(), r));
            }
        }
    }
    assert!(
        !out.is_empty(),
        "no recorded probe runs under fixtures/*/probes"
    );
    out
}

fn load(probe: &str) -> ProbeReport {
    recorded()
        .into_iter()
        .find(|(p, _)| p.ends_with(format!("h200x2-vm/probes/{probe}.json")))
        .map(|(_, r)| r)
        .unwrap()
}

#[test]
fn recorded_runs_reevaluate_to_the_recorded_verdicts() {
    for (path, rec) in recorded() {
        let mut again = rec.clone();
        again.evaluate();
        let at = path.display();
        // serde_json reads floats to within an ulp, so compare numbers with a tolerance.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(1.0);
        assert_eq!(again.status, rec.status, "{at}");
        for (a, b) in again.measurements.iter().zip(&rec.measurements) {
            let (ea, eb) = (&a.evaluation, &b.evaluation);
            if a.method == gpudoctor::probes::Method::SmKernel {
                // Recorded before SM kernels were judged against the copy engine's reading on
                // the same path: the bar is now 80% of that reading, so it moved.
                let ce = again
                    .measurements
                    .iter()
                    .find(|c| {
                        c.method == gpudoctor::probes::Method::CopyEngine
                            && (c.src.as_str(), c.dst.as_str()) == (a.src.as_str(), a.dst.as_str())
                    })
                    .unwrap();
                let t = 0.8 * ce.settled_median_gbps().unwrap();
                assert!(close(ea.threshold_gbps.unwrap(), t), "{at} {}", a.id);
                assert!(
                    ea.threshold_basis
                        .as_deref()
                        .unwrap()
                        .contains("copy engine's median"),
                    "{at} {}",
                    a.id
                );
                assert_eq!(ea.status, eb.status, "{at} {}: {}", a.id, ea.reason);
                continue;
            }
            assert_eq!(ea.status, eb.status, "{at} {}", a.id);
            assert_eq!(ea.reason, eb.reason, "{at} {}", a.id);
            assert_eq!(ea.threshold_basis, eb.threshold_basis, "{at} {}", a.id);
            assert!(close(
                ea.threshold_gbps.unwrap(),
                eb.threshold_gbps.unwrap()
            ));
            let (sa, sb) = (ea.stats.as_ref().unwrap(), eb.stats.as_ref().unwrap());
            assert_eq!(sa.n, sb.n);
            assert!(close(sa.median_gbps, sb.median_gbps), "{at} {}", a.id);
            assert!(close(sa.min_gbps, sb.min_gbps) && close(sa.max_gbps, sb.max_gbps));
        }
        assert_eq!(again.measurements.len(), rec.measurements.len());
        assert_eq!(again.peers, rec.peers, "{at}");
        assert_eq!(again.dmabuf, rec.dmabuf, "{at}");
        assert_eq!(again.link_under_load, rec.link_under_load, "{at}");
    }
}

#[test]
fn h200x2_recorded_verdicts() {
    let h2d = load("h2d");
    assert_eq!(h2d.status, Status::Pass);
    assert_eq!(h2d.measurements.len(), 4);
    for m in &h2d.measurements {
        let s = m.evaluation.stats.as_ref().unwrap();
        assert_eq!(s.n, 20);
        assert_eq!(m.samples_gbps.len(), 20);
        // 80% of Gen5 x16 (63.0 GB/s per direction).
        assert!((m.evaluation.threshold_gbps.unwrap() - 50.41).abs() < 0.01);
    }
    assert!(h2d.link_under_load.iter().all(|l| l.status == Status::Pass));
    let p2p = load("p2p");
    assert_eq!(p2p.status, Status::Pass);
    assert_eq!(p2p.peers.len(), 2);
    assert!(p2p.peers.iter().all(|p| p.path.as_deref() == Some("NV18")));
    let ce: Vec<_> = p2p
        .measurements
        .iter()
        .filter(|m| m.method == Method::CopyEngine)
        .collect();
    assert_eq!(ce.len(), 2);
    for m in ce {
        let e = m.expected.value().unwrap();
        assert!((e.bandwidth_gbps - 478.125).abs() < 1e-9, "{}", e.basis);
    }
    assert_eq!(load("dmabuf-export").status, Status::Pass);
}

fn scaled(mut r: ProbeReport, method: Method, factor: f64) -> ProbeReport {
    for m in r.measurements.iter_mut().filter(|m| m.method == method) {
        for s in &mut m.samples_gbps {
            *s *= factor;
        }
    }
    r.evaluate();
    r
}

#[test]
fn halved_copy_engine_bandwidth_fails() {
    for probe in ["h2d", "d2h", "p2p"] {
        let r = scaled(load(probe), Method::CopyEngine, 0.5);
        assert_eq!(r.status, Status::Fail, "{probe}");
        assert!(
            r.measurements
                .iter()
                .filter(|m| m.method == Method::CopyEngine)
                .all(|m| m.evaluation.status == Status::Fail)
        );
    }
}

#[test]
fn slow_sm_kernel_warns_but_does_not_fail() {
    let r = scaled(load("h2d"), Method::SmKernel, 0.5);
    assert_eq!(r.status, Status::Pass);
    assert!(
        r.measurements
            .iter()
            .filter(|m| m.method == Method::SmKernel)
            .all(|m| m.evaluation.status == Status::Warn)
    );
}

#[test]
fn downtrained_link_under_load_fails_and_unknown_expectation_is_not_a_pass() {
    let mut r = load("h2d");
    r.link_under_load[0].nvml_gen_current = Reading::Value(1);
    r.evaluate();
    assert_eq!(r.link_under_load[0].status, Status::Fail);
    assert_eq!(r.status, Status::Fail);

    let mut r = load("d2h");
    for m in &mut r.measurements {
        m.expected = Reading::unknown("max link width unreadable");
    }
    r.evaluate();
    assert!(
        r.measurements
            .iter()
            .all(|m| m.evaluation.status == Status::Unknown)
    );
    assert_eq!(r.status, Status::Unknown);
}

#[test]
fn no_peer_access_over_nvlink_fails() {
    let mut r = load("p2p");
    r.peers[0].can_access_peer = Reading::Value(false);
    r.evaluate();
    assert_eq!(r.peers[0].status, Status::Fail);
    assert_eq!(r.status, Status::Fail);
}

/// A recorded report in the envelope `probe NAME --json` prints now (schema
/// gpudoctor.probe-runs/1).
fn enveloped(report: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({"schema": "gpudoctor.probe-runs/1", "runs": [report]})
}

/// `probe ... --json` prints one envelope, `{"schema": "gpudoctor.probe-runs/1", "runs": [...]}`,
/// whatever the flags: before it, `gpu-write-bw` and `write-bw --gpu` printed an object for
/// `--gpu N` and an array for `--gpu auto`. On this host (no GPU, no RDMA device: CI) each is a
/// skip; where GPUs are present the GPU cases are left out (they would run for real).
#[test]
fn probe_json_is_one_envelope_whatever_the_flags() {
    let gpus = std::fs::read_dir("/proc/driver/nvidia/gpus").is_ok_and(|mut d| d.next().is_some());
    let mut cases: Vec<Vec<&str>> = vec![
        vec!["probe", "h2d", "--json"],
        vec!["probe", "dmabuf-export", "--json"],
        vec![
            "probe", "write-bw", "-d", "nosuch0", "--iters", "8", "--json",
        ],
        vec![
            "probe", "write-bw", "-d", "nosuch0", "--gdr", "auto", "--json",
        ],
    ];
    if !gpus {
        cases.extend([
            vec!["probe", "h2d", "--gpu", "0", "--json"],
            vec!["probe", "write-bw", "--gpu", "auto", "--json"],
            vec!["probe", "gpu-write-bw", "--json"],
            vec!["probe", "gpu-write-bw", "--gpu", "auto", "--json"],
            vec!["probe", "gpu-write-bw", "--gpu", "0", "--json"],
        ]);
    }
    for args in cases {
        let out = crate::gpudoctor().args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "{args:?}: {stderr}"
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {stderr}"));
        let keys: Vec<&String> = v.as_object().expect("an object").keys().collect();
        assert_eq!(keys, ["runs", "schema"], "{args:?}: {v}");
        assert_eq!(v["schema"], "gpudoctor.probe-runs/1", "{args:?}");
        let runs = v["runs"].as_array().expect("runs is an array");
        assert!(!runs.is_empty(), "{args:?}: {v}");
        for r in runs {
            let schema = r["schema"].as_str().unwrap_or_default();
            assert!(
                [
                    "gpudoctor.probe/2",
                    "gpudoctor.write-bw/3",
                    "gpudoctor.gpu-write-bw/1"
                ]
                .contains(&schema),
                "{args:?}: run schema {schema}"
            );
        }
    }
}

/// A tree recorded with the envelope (`probe h2d --json > probes/h2d.json` today) replays as
/// the bare reports of the fixtures do: the same `check --level 1` report. An envelope with
/// two runs is refused, naming the file.
#[test]
fn recorded_envelopes_replay_like_bare_reports() {
    let (_tmp, tree) = crate::copy_fixture("h200x2-live");
    for name in ["h2d", "d2h", "p2p", "dmabuf-export"] {
        let p = tree.join(format!("probes/{name}.json"));
        let bare: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        std::fs::write(&p, serde_json::to_string(&enveloped(&bare)).unwrap()).unwrap();
    }
    let root = tree.display().to_string();
    let (code_env, env) = crate::check_json(&["--root", &root, "--level", "1"]);
    let (code_bare, bare) = crate::check_json(&["--root", "fixtures/h200x2-live", "--level", "1"]);
    assert_eq!(code_env, code_bare);
    assert_eq!(env["checks"], bare["checks"]);
    let p = tree.join("probes/h2d.json");
    let one: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let run = one["runs"][0].clone();
    let two = serde_json::json!({"schema": "gpudoctor.probe-runs/1", "runs": [run, run]});
    std::fs::write(&p, serde_json::to_string(&two).unwrap()).unwrap();
    let out = crate::gpudoctor()
        .args(["--root", &root, "check", "--level", "1", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("probes/h2d.json: not a probe report") && stderr.contains("2 runs"),
        "{stderr}"
    );
}

/// `fleet` reads a probe report in the envelope as it reads the bare one: the same summary.
#[test]
fn fleet_reads_enveloped_probe_reports() {
    let h2d = repo().join("fixtures/h200x2-live/probes/h2d.json");
    let bare: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&h2d).unwrap()).unwrap();
    let summary = |wrap: bool| {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..3 {
            let doc = if wrap { enveloped(&bare) } else { bare.clone() };
            std::fs::write(
                dir.path().join(format!("node{i}.h2d.json")),
                serde_json::to_string(&doc).unwrap(),
            )
            .unwrap();
        }
        let o = crate::gpudoctor()
            .args(["fleet", "--json"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        serde_json::json!({"probes": v["probes"], "drain": v["drain"]})
    };
    let (wrapped, plain) = (summary(true), summary(false));
    assert!(
        wrapped["probes"].as_array().is_some_and(|p| !p.is_empty()),
        "{wrapped}"
    );
    assert_eq!(wrapped, plain);
}

/// Every key of a JSON document, at any depth, that is serde's `Result` encoding.
fn result_keys(v: &serde_json::Value, at: &str, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                if k == "Ok" || k == "Err" {
                    out.push(format!("{at}.{k}"));
                }
                result_keys(x, &format!("{at}.{k}"), out);
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                result_keys(x, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// No report carries serde's `{"Ok": ..}` / `{"Err": ..}`: every recorded probe and NCCL
/// report (written as /1, in that shape) re-evaluates and serializes with readings only, and
/// no snapshot holds such a key.
#[test]
fn no_report_carries_ok_or_err_keys() {
    let mut bad = Vec::new();
    let (mut old, mut current) = (0, 0);
    for (path, rec) in recorded() {
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let mut before = Vec::new();
        result_keys(&raw, "", &mut before);
        if rec.schema == gpudoctor::probes::PROBE_SCHEMA_V1 {
            old += before.len();
        } else {
            // Recorded by `probe ... --json` of a build with readings, on the GPU machine.
            assert_eq!(rec.schema, gpudoctor::probes::PROBE_SCHEMA);
            assert!(before.is_empty(), "{}: {before:?}", path.display());
            current += 1;
        }
        let mut r = rec.clone();
        r.evaluate();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["schema"], rec.schema, "{}", path.display());
        // Written again by this build: a current report.
        r.schema = gpudoctor::probes::PROBE_SCHEMA.to_string();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["schema"], gpudoctor::probes::PROBE_SCHEMA);
        result_keys(&v, &path.display().to_string(), &mut bad);
    }
    assert!(
        old > 0,
        "the /1 fixtures hold Ok/Err keys: the walk would see them"
    );
    assert!(current > 0, "no probe report recorded as /2");
    let mut nccl = 0;
    for e in std::fs::read_dir(repo().join("fixtures/nccl-probe")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let mut r: gpudoctor::report::nccl::NcclReport =
            serde_json::from_slice(&std::fs::read(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        r.schema = gpudoctor::report::nccl::NCCL_SCHEMA.to_string();
        r.evaluate();
        result_keys(
            &serde_json::to_value(&r).unwrap(),
            &p.display().to_string(),
            &mut bad,
        );
        nccl += 1;
    }
    assert!(
        nccl > 0,
        "no recorded NCCL report under fixtures/nccl-probe"
    );
    let mut snaps = 0;
    for e in std::fs::read_dir(repo().join("tests/it/snapshots")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "snap") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        // insta's header, then the snapshot; JSON ones walk as JSON, the rest by their text.
        let body = text.splitn(3, "---\n").nth(2).unwrap_or(&text);
        match serde_json::from_str::<serde_json::Value>(body) {
            Ok(v) => result_keys(&v, &p.display().to_string(), &mut bad),
            Err(_) => {
                for k in ["\"Ok\":", "\"Err\":"] {
                    if body.contains(k) {
                        bad.push(format!("{}: {k}", p.display()));
                    }
                }
            }
        }
        snaps += 1;
    }
    assert!(snaps > 0, "no snapshots under tests/it/snapshots");
    assert!(
        bad.is_empty(),
        "serde Result keys in reports:\n{}",
        bad.join("\n")
    );
}

/// A `gpudoctor.probe/1` report (readings as `{"Ok": ..}` / `{"Err": ..}`) reads as the same
/// facts as its `gpudoctor.probe/2` form, and `fleet` takes either: the same medians.
#[test]
fn probe_v1_reports_read_like_v2() {
    let p = repo().join("fixtures/h200x2-live/probes/h2d.json");
    let raw = std::fs::read_to_string(&p).unwrap();
    assert!(raw.contains("\"gpudoctor.probe/1\"") && raw.contains("\"Ok\""));
    let v1: ProbeReport = serde_json::from_str(&raw).unwrap();
    assert!(v1.measurements.iter().all(|m| m.expected.is_value()));
    assert!(
        v1.link_under_load
            .iter()
            .all(|l| l.nvml_gen_current.is_value())
    );
    let mut v2 = v1.clone();
    v2.schema = gpudoctor::probes::PROBE_SCHEMA.to_string();
    let text = serde_json::to_string(&v2).unwrap();
    assert!(text.contains("{\"value\":") && !text.contains("\"Ok\""));
    let back: ProbeReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back.measurements, v1.measurements);
    assert_eq!(back.link_under_load, v1.link_under_load);

    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.h2d.json"), dir.path().join("b.h2d.json"));
    std::fs::write(&a, &raw).unwrap();
    std::fs::write(&b, &text).unwrap();
    let o = crate::gpudoctor()
        .arg("fleet")
        .arg(&a)
        .arg(&b)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(matches!(o.status.code(), Some(0 | 1)), "{stderr}");
    let f: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(f["nodes"].as_u64(), Some(2), "{f:#}");
    let probes = f["probes"].as_array().expect("probe rows");
    assert!(!probes.is_empty(), "{f:#}");
    for row in probes {
        let by_node = row["node_gbps"].as_object().expect("node_gbps");
        assert_eq!(by_node.len(), 2, "{row}");
        let vals: Vec<&serde_json::Value> = by_node.values().collect();
        assert_eq!(vals[0], vals[1], "{row}");
    }
    assert!(!f.to_string().contains("malformed"), "{f:#}");
}
