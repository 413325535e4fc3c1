//! deploy/kubernetes/*.yaml (the DaemonSet, RBAC, the ValidatingAdmissionPolicy and its
//! binding, the Jobs) validated with kubernetes-validate (PyPI) against a current Kubernetes
//! schema, strictly (unknown fields rejected), and the Node Problem Detector plugin. Fails
//! (rather than skips) when GPUDOCTOR_REQUIRE_KUBERNETES_VALIDATE=1 and the tool is missing;
//! scripts/test installs it. The DaemonSet's loop: tests/it/kubernetes.rs.
//! For deploy/prometheus/: the measured bandwidth that `check --level 1 --textfile` exports.

use crate::{gpudoctor, repo};
use std::path::Path;
use std::process::Command;

/// A current Kubernetes release (kubernetes-validate ships its schemas).
const KUBERNETES_VERSION: &str = "1.32.0";

/// kubernetes-validate, strict, for KUBERNETES_VERSION: a function of one file giving (passed,
/// output); None (said) where the tool is missing, a failure with
/// GPUDOCTOR_REQUIRE_KUBERNETES_VALIDATE=1.
pub fn kubernetes_validate() -> Option<impl Fn(&Path) -> (bool, String)> {
    let have = Command::new("kubernetes-validate")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var("GPUDOCTOR_REQUIRE_KUBERNETES_VALIDATE").as_deref() != Ok("1"),
            "kubernetes-validate missing (python3 -m pip install kubernetes-validate)"
        );
        eprintln!("kubernetes-validate not installed: skipped");
        return None;
    }
    Some(|f: &Path| {
        let o = Command::new("kubernetes-validate")
            .args(["--strict", "-k", KUBERNETES_VERSION])
            .arg(f)
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        (o.status.success() && out.contains("passed"), out)
    })
}

/// The Python that runs kubernetes-validate (its virtual environment, where scripts/test made
/// one), else python3.
pub fn kubernetes_validate_python() -> String {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("kubernetes-validate"))
            .find(|p| p.is_file())
    });
    found
        .and_then(|p| std::fs::canonicalize(p).ok())
        .map(|p| p.with_file_name("python"))
        .filter(|p| p.is_file())
        .map_or_else(|| "python3".to_string(), |p| p.display().to_string())
}

#[test]
fn manifests_validate_against_kubernetes() {
    let Some(validate) = kubernetes_validate() else {
        return;
    };
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let names: Vec<String> = files.iter().map(|f| crate::name(f)).collect();
    for want in [
        "admission-policy.yaml",
        "daemonset.yaml",
        "rbac.yaml",
        "job.yaml",
    ] {
        assert!(names.iter().any(|n| n == want), "{names:?}");
    }
    for f in &files {
        let (passed, out) = validate(f);
        assert!(passed, "{}: {out}", f.display());
    }
    // The validator itself rejects a broken manifest (the test can fail): a misspelt field of
    // the DaemonSet, and of the admission policy.
    let tmp = tempfile::tempdir().unwrap();
    for (file, from, to) in [
        (
            "daemonset.yaml",
            "readOnlyRootFilesystem",
            "readOnlyRootFileSystem",
        ),
        (
            "admission-policy.yaml",
            "validationActions",
            "validationAction",
        ),
        ("admission-policy.yaml", "matchConditions", "matchCondition"),
    ] {
        let bad = tmp.path().join(file);
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(text.contains(from));
        std::fs::write(&bad, text.replace(from, to)).unwrap();
        let (passed, _) = validate(&bad);
        assert!(!passed, "{file}: a misspelt {from} must not validate");
    }
}

/// deploy/kubernetes/npd-gpudoctor-plugin.json: a Node Problem Detector custom plugin whose rule
/// runs `gpudoctor-node --npd` (one check, the DaemonSet's verdict in NPD's custom-plugin
/// protocol: exit 0 OK, 1 NonOK, other Unknown; the first `max_output_length` bytes of standard
/// output are the condition message): a failing node gives NonOK with a one-line message naming
/// the failing check and subject, a node with warnings only OK, a tree gpudoctor cannot read
/// Unknown with gpudoctor's error. The file passes the checks NPD's own
/// `CustomPluginConfig.ApplyConfiguration` and `Validate` make (pkg/custompluginmonitor/types/
/// config.go: Go durations, a rule's timeout within the global one, a permanent rule's condition
/// among the defaults), and the rule's time budget ends gpudoctor before NPD's timeout kills it
/// (a kill is Unknown with no message; a budget-cut run says what it did not judge). (No
/// node-problem-detector binary can be had here: not in Debian bookworm, PyPI, npm or
/// crates.io; its Go module needs Go 1.26, and this machine has no Go: see the README.)
#[test]
fn npd_plugin_speaks_the_custom_plugin_protocol() {
    let cfg = npd_config();
    assert_eq!(cfg["plugin"], "custom");
    // Go's time.ParseDuration, for the forms NPD's examples use ("10m", "55s").
    let go_duration = |v: &serde_json::Value| -> f64 {
        let s = v.as_str().unwrap();
        let (n, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap());
        let n: f64 = n.parse().unwrap();
        n * match unit {
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => panic!("unit {u}"),
        }
    };
    let global = go_duration(&cfg["pluginConfig"]["timeout"]);
    assert!(go_duration(&cfg["pluginConfig"]["invoke_interval"]) >= global);
    for r in cfg["rules"].as_array().unwrap() {
        assert!(go_duration(&r["timeout"]) <= global, "NPD refuses: {r}");
        if r["type"] == "permanent" {
            assert!(
                cfg["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["type"] == r["condition"]),
                "NPD refuses a permanent rule without a default condition: {r}"
            );
        }
        // gpudoctor ends itself before NPD kills it, with a margin for its start and output.
        let a = npd_args(r);
        assert_eq!(a[0], "--npd");
        let budget: f64 = a[1].parse().unwrap();
        assert!(budget + 3.0 <= go_duration(&r["timeout"]), "{r}");
    }
    let max = cfg["pluginConfig"]["max_output_length"].as_u64().unwrap() as usize;
    let condition = cfg["conditions"][0]["type"].as_str().unwrap();
    assert_eq!(condition, "GpudoctorProblem", "the DaemonSet's condition");
    let rule = &cfg["rules"][0];
    assert_eq!(rule["type"], "permanent");
    assert_eq!(rule["condition"], condition);
    assert_eq!(
        rule["path"], "/usr/local/bin/gpudoctor-node",
        "the image's loop"
    );
    let args = npd_args(rule);
    let run = |source: &str| npd_run(&args, source, None);
    let (code, out) = run("--bundle fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz");
    assert_eq!(code, Some(1), "NonOK");
    assert_eq!(out.lines().count(), 1, "{out}");
    let shown = &out[..out.len().min(max)];
    assert!(
        shown.starts_with("failing: rdma.port-state mlx5_2/1 (1 fail, "),
        "{out}"
    );
    assert!(
        out.contains("gpudoctor: rdma.port-state mlx5_2/1 [reseat] "),
        "{out}"
    );
    let (code, out) = run("--root fixtures/pcie-2socket-roce");
    assert_eq!(code, Some(0), "OK: {out}");
    assert!(
        out.starts_with("gpudoctor: warn (") && out.contains(" 0 fail, "),
        "{out}"
    );
    let (code, out) = run("--root fixtures/no-such-tree");
    assert_eq!(code, Some(2), "Unknown");
    assert!(
        out.starts_with("gpudoctor could not run (exit 2): gpudoctor: error: "),
        "{out}"
    );
}

fn npd_config() -> serde_json::Value {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes/npd-gpudoctor-plugin.json"))
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

fn npd_args(rule: &serde_json::Value) -> Vec<String> {
    rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

/// The NPD rule's command (deploy/kubernetes/gpudoctor-node with `args`) reading `source`
/// (GPUDOCTOR_SOURCE), the repository as its directory: (exit code, standard output).
fn npd_run(args: &[String], source: &str, slow_read: Option<&str>) -> (Option<i32>, String) {
    let bin = Path::new(env!("CARGO_BIN_EXE_gpudoctor")).parent().unwrap();
    let mut c = Command::new(repo().join("deploy/kubernetes/gpudoctor-node"));
    c.args(args)
        .current_dir(repo())
        .env(
            "PATH",
            format!(
                "{}:{}",
                bin.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("GPUDOCTOR_SOURCE", source)
        .env_remove("GPUDOCTOR_TEST_SLOW_READ")
        .env_remove("GPUDOCTOR_CHECK_ARGS");
    if let Some(s) = slow_read {
        c.env("GPUDOCTOR_TEST_SLOW_READ", s);
    }
    let o = c.output().unwrap();
    (o.status.code(), String::from_utf8(o.stdout).unwrap())
}

/// The NPD rule on a node whose discovery does not answer (a read sleeping 30 s,
/// GPUDOCTOR_TEST_SLOW_READ) and with the budget shortened to 1 s: gpudoctor ends by itself
/// having judged nothing, and the rule says Unknown (never OK) with a message that says the
/// budget was spent and how much was not judged.
#[test]
fn npd_rule_budget_cut_is_unknown() {
    let cfg = npd_config();
    let mut args = npd_args(&cfg["rules"][0]);
    args[1] = "1".into();
    let t0 = std::time::Instant::now();
    let (code, out) = npd_run(
        &args,
        "--root fixtures/pcie-2socket-roce",
        Some("/sys/devices/pci0000:00/0000:00:01.0/class=30"),
    );
    assert!(t0.elapsed().as_secs() < 10);
    assert_eq!(code, Some(2), "Unknown, not OK: {out}");
    let rest = out
        .strip_prefix("nothing judged: gpudoctor: time budget of 1 s spent during discovery, ")
        .unwrap_or_else(|| panic!("{out}"));
    let (n, _) = rest.split_once(" not judged; ").unwrap();
    assert!(
        rest.contains(&format!("(0 pass, 0 warn, 0 fail, {n} skip)")),
        "{out}"
    );
}

/// `check --level 1 --textfile` on the recorded H200 pair exports each probe finding's median
/// and threshold (what deploy/prometheus/ graphs and docs/slurm-prometheus.md counts): one pair
/// per measured finding, equal to the JSON evidence, and `promtool check metrics` accepts it.
#[test]
fn textfile_exports_measured_bandwidth() {
    let dir = tempfile::tempdir().unwrap();
    let o = gpudoctor()
        .args(["--root", "fixtures/h200x2-live", "check", "--level", "1"])
        .args(["--quiet", "--textfile"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let prom = std::fs::read_to_string(dir.path().join("gpudoctor.prom")).unwrap();
    let value = |name: &str, check: &str, subject: &str| -> Option<f64> {
        let head = format!("{name}{{check=\"{check}\",subject=\"{subject}\"}} ");
        prom.lines()
            .find_map(|l| l.strip_prefix(&head))
            .map(|v| v.parse().unwrap())
    };
    let json = gpudoctor()
        .args([
            "--root",
            "fixtures/h200x2-live",
            "check",
            "--level",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let mut measured = 0;
    for f in report["checks"].as_array().unwrap() {
        let (check, subject) = (f["id"].as_str().unwrap(), f["subject"].as_str().unwrap());
        let median = f["evidence"].as_array().unwrap().iter().find_map(|e| {
            e["value"]
                .as_str()?
                .strip_prefix("median ")?
                .split(' ')
                .next()?
                .parse::<f64>()
                .ok()
        });
        let got = value(
            "gpudoctor_measured_bandwidth_bytes_per_second",
            check,
            subject,
        );
        match median {
            Some(m) => {
                measured += 1;
                assert_eq!(got, Some(m * 1e9), "{check} {subject}");
                let t = value(
                    "gpudoctor_measured_threshold_bytes_per_second",
                    check,
                    subject,
                )
                .unwrap();
                assert!(
                    t > 0.0 && t < m * 1e9,
                    "{check} {subject}: passes, so under"
                );
            }
            None => assert_eq!(got, None, "{check} {subject}"),
        }
    }
    assert_eq!(
        measured, 12,
        "h2d, d2h, p2p: 2 GPUs or directions x 2 methods"
    );
    let have = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        let mut p = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        p.stdin.take().unwrap().write_all(prom.as_bytes()).unwrap();
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success() && out.stderr.is_empty() && out.stdout.is_empty(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
