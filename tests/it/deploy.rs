//! deploy/kubernetes/*.yaml validated with kubernetes-validate (PyPI) against a current
//! Kubernetes schema, strictly (unknown fields rejected); and what the DaemonSet relies on:
//! the commands it runs exist and take the arguments it gives. Fails (rather than skips) when
//! GPUDOCTOR_REQUIRE_KUBERNETES_VALIDATE=1 and the tool is missing; scripts/test installs it.
//! For deploy/prometheus/: the measured bandwidth that `check --level 1 --textfile` exports.

use crate::{gpudoctor, repo};
use std::process::Command;

/// A current Kubernetes release (kubernetes-validate ships its schemas).
const KUBERNETES_VERSION: &str = "1.32.0";

#[test]
fn manifests_validate_against_kubernetes() {
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
        return;
    }
    let dir = repo().join("deploy/kubernetes");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "{files:?}");
    for f in &files {
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
        assert!(o.status.success(), "{}: {out}", f.display());
        assert!(out.contains("passed"), "{}: {out}", f.display());
    }
    // The validator itself rejects a broken manifest (the test can fail).
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("bad.yaml");
    let text = std::fs::read_to_string(dir.join("daemonset.yaml"))
        .unwrap()
        .replace("readOnlyRootFilesystem", "readOnlyRootFileSystem");
    std::fs::write(&bad, text).unwrap();
    let o = Command::new("kubernetes-validate")
        .args(["--strict", "-k", KUBERNETES_VERSION])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!o.status.success(), "a misspelt field must not validate");
}

/// The DaemonSet runs deploy/kubernetes/gpudoctor-node (the image holds it); that loop runs
/// `snapshot nvml`, `snapshot libs` and `--root DIR check --json --textfile` on a tree laid out
/// like its volumes (DIR/sys, DIR/proc, DIR/nvml.json, DIR/libs.json): here a fixture's sys/ and
/// proc/ with freshly taken snapshots beside them (this machine has no NVIDIA driver, so the node
/// fails), one run (--once) with a stand-in kubectl that records what it is asked: the report
/// and textfile written, the node labelled gpudoctor.io/status=fail and tainted.
#[test]
fn daemonset_commands_work_on_its_layout() {
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    assert!(ds.contains(r#"command: ["/usr/local/bin/gpudoctor-node"]"#));
    assert!(ds.contains("serviceAccountName: gpudoctor"));
    assert!(ds.contains("fieldPath: spec.nodeName"));
    assert!(
        ds.contains("key: gpudoctor.io/problem"),
        "tolerates its own taint"
    );
    let image = std::fs::read_to_string(repo().join("deploy/kubernetes/Containerfile")).unwrap();
    assert!(image.contains("COPY deploy/kubernetes/gpudoctor-node /usr/local/bin/gpudoctor-node"));
    assert!(image.contains("/usr/local/bin/kubectl"));
    let script = std::fs::read_to_string(repo().join("deploy/kubernetes/gpudoctor-node")).unwrap();
    for cmd in [
        r#"gpudoctor snapshot nvml > "$ROOT/nvml.json""#,
        r#"gpudoctor snapshot libs > "$ROOT/libs.json""#,
        r#"gpudoctor --root "$ROOT" check --json --textfile "$TEXTFILE""#,
    ] {
        assert!(
            script.contains(cmd),
            "gpudoctor-node no longer runs `{cmd}`"
        );
    }
    let node = NodeLoop::new("pcie-2socket-roce");
    let (code, kubectl) = node.once(&[]);
    assert_eq!(code, Some(1), "no driver here: driver.* fail");
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(node.dir.path().join("report/check.json")).unwrap(),
    )
    .unwrap();
    let prom = std::fs::read_to_string(node.dir.path().join("textfile/gpudoctor.prom")).unwrap();
    let status = report["status"].as_str().unwrap();
    assert_eq!(status, "fail");
    assert!(
        prom.contains(&format!("gpudoctor_status{{status=\"{status}\"}} 1")),
        "{prom}"
    );
    assert!(prom.contains("gpudoctor_up 1"), "{prom}");
    assert_eq!(
        kubectl,
        "label node gpu7 gpudoctor.io/status=fail --overwrite\n\
         taint node gpu7 gpudoctor.io/problem=fail:NoSchedule --overwrite\n"
    );
}

/// gpudoctor-node marks the node with each verdict: a healthy run (the fixture's own NVML
/// snapshot, warnings only) labels pass and leaves the taint alone unless GPUDOCTOR_UNTAINT=1;
/// a tree gpudoctor cannot read labels unknown and taints nothing; GPUDOCTOR_MARK_NODE=0 calls
/// no kubectl.
#[test]
fn daemonset_loop_marks_the_node() {
    let node = NodeLoop::new("pcie-2socket-roce");
    for f in ["nvml.json", "libs.json"] {
        std::fs::copy(
            repo().join("fixtures/pcie-2socket-roce").join(f),
            node.dir.path().join("root").join(f),
        )
        .unwrap();
    }
    let keep = [("GPUDOCTOR_SNAPSHOTS", "0")];
    let (code, kubectl) = node.once(&keep);
    assert_eq!(code, Some(0));
    assert_eq!(
        kubectl,
        "label node gpu7 gpudoctor.io/status=pass --overwrite\n"
    );
    let (_, kubectl) = node.once(&[keep[0], ("GPUDOCTOR_UNTAINT", "1")]);
    assert_eq!(
        kubectl,
        "label node gpu7 gpudoctor.io/status=pass --overwrite\n\
         taint node gpu7 gpudoctor.io/problem:NoSchedule-\n"
    );
    let (_, kubectl) = node.once(&[keep[0], ("GPUDOCTOR_MARK_NODE", "0")]);
    assert_eq!(kubectl, "");

    std::fs::remove_dir_all(node.dir.path().join("root/sys")).unwrap();
    let (code, kubectl) = node.once(&keep);
    assert_eq!(code, Some(2));
    assert_eq!(
        kubectl,
        "label node gpu7 gpudoctor.io/status=unknown --overwrite\n"
    );
    let prom = std::fs::read_to_string(node.dir.path().join("textfile/gpudoctor.prom")).unwrap();
    assert!(prom.contains("gpudoctor_up 0"), "{prom}");
}

/// A temporary layout for gpudoctor-node: root/ (a fixture's sys and proc), textfile/, report/,
/// and bin/kubectl that appends its arguments to kubectl.log.
struct NodeLoop {
    dir: tempfile::TempDir,
}

impl NodeLoop {
    fn new(fixture: &str) -> NodeLoop {
        let dir = tempfile::tempdir().unwrap();
        for d in ["root", "textfile", "report", "bin"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        for d in ["sys", "proc"] {
            copy_tree(
                &repo().join("fixtures").join(fixture).join(d),
                &dir.path().join("root").join(d),
            );
        }
        let kubectl = dir.path().join("bin/kubectl");
        std::fs::write(
            &kubectl,
            format!(
                "#!/bin/sh\necho \"$*\" >> {}\n",
                dir.path().join("kubectl.log").display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
        NodeLoop { dir }
    }

    /// One run (--once) with `env`: (exit code, what kubectl was asked).
    fn once(&self, env: &[(&str, &str)]) -> (Option<i32>, String) {
        let log = self.dir.path().join("kubectl.log");
        let _ = std::fs::remove_file(&log);
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_gpudoctor"))
            .parent()
            .unwrap()
            .to_path_buf();
        let path = format!(
            "{}:{}:{}",
            self.dir.path().join("bin").display(),
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let o = Command::new(repo().join("deploy/kubernetes/gpudoctor-node"))
            .arg("--once")
            .env("PATH", path)
            .env("NODE_NAME", "gpu7")
            .env("GPUDOCTOR_ROOT", self.dir.path().join("root"))
            .env("GPUDOCTOR_TEXTFILE_DIR", self.dir.path().join("textfile"))
            .env("GPUDOCTOR_REPORT_DIR", self.dir.path().join("report"))
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (
            o.status.code(),
            std::fs::read_to_string(&log).unwrap_or_default(),
        )
    }
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let ty = e.file_type().unwrap();
        let dst = to.join(e.file_name());
        if ty.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dst).unwrap();
        } else if ty.is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            std::fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// deploy/kubernetes/npd-gpudoctor-plugin.json: a Node Problem Detector custom plugin whose rule
/// runs gpudoctor, and gpudoctor speaks NPD's custom-plugin protocol (exit 0 OK, 1 NonOK, other
/// Unknown; the first `max_output_length` bytes of standard output are the condition message):
/// a failing node gives NonOK with a one-line message naming the failure, a node with warnings
/// only OK, a tree gpudoctor cannot read Unknown. The file passes the checks NPD's own
/// `CustomPluginConfig.ApplyConfiguration` and `Validate` make (pkg/custompluginmonitor/types/
/// config.go: Go durations, a rule's timeout within the global one, a permanent rule's condition
/// among the defaults), and the rule's --time-budget ends gpudoctor before NPD's timeout kills it
/// (a kill is Unknown with no message; a budget-cut run says what it did not judge). (No
/// node-problem-detector binary can be had here: not in Debian bookworm, PyPI, npm or
/// crates.io; its Go module needs Go 1.26, and this machine has no Go: see the README.)
#[test]
fn npd_plugin_speaks_the_custom_plugin_protocol() {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes/npd-gpudoctor-plugin.json"))
        .unwrap();
    let cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
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
        let a: Vec<&str> = r["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        let budget: f64 = a[a.iter().position(|x| *x == "--time-budget").unwrap() + 1]
            .parse()
            .unwrap();
        assert!(budget + 3.0 <= go_duration(&r["timeout"]), "{r}");
    }
    let max = cfg["pluginConfig"]["max_output_length"].as_u64().unwrap() as usize;
    let condition = cfg["conditions"][0]["type"].as_str().unwrap();
    let rule = &cfg["rules"][0];
    assert_eq!(rule["type"], "permanent");
    assert_eq!(rule["condition"], condition);
    assert!(rule["path"].as_str().unwrap().ends_with("/gpudoctor"));
    let args: Vec<&str> = rule["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let run = |source: &[&str]| {
        let o = gpudoctor().args(source).args(&args).output().unwrap();
        (o.status.code(), String::from_utf8(o.stdout).unwrap())
    };
    let (code, out) = run(&[
        "--bundle",
        "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz",
    ]);
    assert_eq!(code, Some(1), "NonOK");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.len() <= max, "{out}");
    assert!(
        out.starts_with("gpudoctor: rdma.port-state mlx5_2/1 [reseat] "),
        "{out}"
    );
    let (code, out) = run(&["--root", "fixtures/pcie-2socket-roce"]);
    assert_eq!(code, Some(0), "OK: {out}");
    assert!(
        out.starts_with("gpudoctor: warn (") && out.contains(" 0 fail, "),
        "{out}"
    );
    let (code, out) = run(&["--root", "fixtures/no-such-tree"]);
    assert_eq!(code, Some(2), "Unknown");
    assert_eq!(out, "");
}

/// The NPD rule's --time-budget on a node whose discovery does not answer (a read sleeping 30 s,
/// GPUDOCTOR_TEST_SLOW_READ) and with the budget shortened to 1 s: gpudoctor ends by itself, OK
/// or NonOK by the gate as always, with a message that says the budget was spent.
#[test]
fn npd_rule_budget_cut_says_so() {
    let text = std::fs::read_to_string(repo().join("deploy/kubernetes/npd-gpudoctor-plugin.json"))
        .unwrap();
    let cfg: serde_json::Value = serde_json::from_str(&text).unwrap();
    let max = cfg["pluginConfig"]["max_output_length"].as_u64().unwrap() as usize;
    let mut args: Vec<String> = cfg["rules"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let at = args.iter().position(|x| x == "--time-budget").unwrap();
    args[at + 1] = "1".into();
    let t0 = std::time::Instant::now();
    let o = gpudoctor()
        .env(
            "GPUDOCTOR_TEST_SLOW_READ",
            "/sys/devices/pci0000:00/0000:00:01.0/class=30",
        )
        .args(["--root", "fixtures/pcie-2socket-roce"])
        .args(&args)
        .output()
        .unwrap();
    assert!(t0.elapsed().as_secs() < 10);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(o.status.code(), Some(0), "OK by the gate: {out}");
    assert!(
        out.starts_with("gpudoctor: time budget of 1 s spent during discovery, 36 not judged; "),
        "{out}"
    );
    assert!(out.len() <= max, "{out}");
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
