//! deploy/kubernetes: the DaemonSet's loop (`gpudoctor-node --once`) on its volume layout with
//! stand-ins for kubectl (records every call: arguments and standard input; answers `get` with
//! the node's state) and dmesg (prints a recorded kernel log, as syslog(2) gives it): the kernel
//! log judged, the node's label, taint, condition and event for a pass, a fail, a run that could
//! not run, a run that judged nothing and a run the backstop ended; the liveness probe; what the
//! manifests grant (RBAC, capabilities, host network), the admission policy evaluated on
//! requests, the condition patch and the event validated against the Kubernetes schema, and the
//! sysfs behaviour the DaemonSet relies on for the host's netdevs.

use crate::repo;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The fixture the loop reads: 4 GPUs (GPU0 at 0000:01:00.0, GPU1 at 0000:21:00.0), warnings
/// only with its own NVML snapshot.
const FIXTURE: &str = "pcie-2socket-roce";

/// A kernel log as `dmesg --syslog --raw` prints it, from boot: an Xid 79 on GPU0 (printed by
/// the kernel, facility 0) and the same text written by a process (`<12>`: facility 1) naming
/// GPU1, which must not count.
const XID_LOG: &str = "<5>[    0.000000] Linux version 6.1.0-18-amd64\n\
<6>[    1.250000] pci 0000:01:00.0: [10de:20b5] type 00 class 0x030200\n\
<4>[ 8123.456789] NVRM: Xid (PCI:0000:01:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n\
<12>[ 8200.000000] NVRM: Xid (PCI:0000:21:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n";

/// A clean kernel log, from boot.
const CLEAN_LOG: &str = "<5>[    0.000000] Linux version 6.1.0-18-amd64\n\
<6>[    1.250000] pci 0000:01:00.0: [10de:20b5] type 00 class 0x030200\n";

/// One call of the stand-in kubectl.
#[derive(Debug)]
struct Call {
    args: Vec<String>,
    stdin: String,
}

/// One `gpudoctor-node --once`.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    calls: Vec<Call>,
    stderr: String,
}

impl Run {
    /// The calls that change something (not `get`), as command lines without the request
    /// timeout, the condition patch's body left out.
    fn changes(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|c| c.args.get(1).is_some_and(|v| v != "get"))
            .map(|c| {
                let mut a: Vec<&str> = c.args.iter().map(String::as_str).collect();
                assert_eq!(a[0], "--request-timeout=30s", "{c:?}");
                a.remove(0);
                if let Some(p) = a.iter().position(|x| *x == "-p") {
                    a.truncate(p);
                }
                a.join(" ")
            })
            .collect()
    }

    /// The condition the status patch sets.
    fn condition(&self) -> Value {
        let patches: Vec<&Call> = self
            .calls
            .iter()
            .filter(|c| c.args.iter().any(|a| a == "--subresource=status"))
            .collect();
        assert_eq!(patches.len(), 1, "{:#?}", self.calls);
        let a = &patches[0].args;
        assert_eq!(
            a[1..7],
            [
                "patch",
                "node",
                "gpu7",
                "--subresource=status",
                "--type=strategic",
                "-p"
            ]
        );
        let body: Value = serde_json::from_str(&a[7]).unwrap();
        let conds = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 1, "{body}");
        conds[0].clone()
    }

    /// The Events created (`kubectl create -f -`, the object on standard input).
    fn events(&self) -> Vec<Value> {
        self.calls
            .iter()
            .filter(|c| c.args.get(1).is_some_and(|v| v == "create"))
            .map(|c| {
                assert_eq!(c.args[2..], ["-f", "-"]);
                serde_json::from_str(&c.stdin).unwrap()
            })
            .collect()
    }
}

/// A temporary layout for gpudoctor-node: root/ (a fixture's sys and proc, and its NVML and
/// library snapshots), textfile/, report/, and bin/ with the stand-ins.
struct Node {
    dir: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let dir = tempfile::tempdir().unwrap();
        for d in ["root", "textfile", "report", "bin"] {
            std::fs::create_dir(dir.path().join(d)).unwrap();
        }
        let fixture = crate::fixture_tree(FIXTURE);
        for d in ["sys", "proc"] {
            let st = Command::new("cp")
                .arg("-a")
                .arg(fixture.join(d))
                .arg(dir.path().join("root"))
                .status()
                .unwrap();
            assert!(st.success());
        }
        for f in ["nvml.json", "libs.json"] {
            std::fs::copy(fixture.join(f), dir.path().join("root").join(f)).unwrap();
        }
        let d = dir.path().display();
        // Each call: a record separator line, the arguments one per line, "stdin:" and what
        // `create -f -` read. `get` prints the node's state: uid, condition status, message.
        let kubectl = format!(
            "#!/bin/sh\n\
             {{ printf '\\036\\n'; for a in \"$@\"; do printf '%s\\n' \"$a\"; done; echo stdin:\n\
             case \" $* \" in *' create '*) cat ;; esac; }} >> {d}/kubectl.log\n\
             case \" $* \" in *' get '*) cat {d}/node-state 2>/dev/null || echo uid-7 ;; esac\n"
        );
        let dmesg = format!(
            "#!/bin/sh\ncat {d}/dmesg.out\ncat {d}/dmesg.err >&2 2>/dev/null\nexit $(cat {d}/dmesg.rc 2>/dev/null || echo 0)\n"
        );
        write_exe(&dir.path().join("bin/kubectl"), &kubectl);
        write_exe(&dir.path().join("bin/dmesg"), &dmesg);
        let node = Node { dir };
        node.kernel_log(CLEAN_LOG);
        node
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// What the stand-in dmesg prints (exit 0).
    fn kernel_log(&self, text: &str) {
        std::fs::write(self.path("dmesg.out"), text).unwrap();
        let _ = std::fs::remove_file(self.path("dmesg.rc"));
        let _ = std::fs::remove_file(self.path("dmesg.err"));
    }

    /// The node's GpudoctorProblem condition as `kubectl get` will answer (None: not set yet).
    fn node_state(&self, condition: Option<(&str, &str)>) {
        let text = match condition {
            Some((status, message)) => format!("uid-7\n{status}\n{message}\n"),
            None => "uid-7\n".to_string(),
        };
        std::fs::write(self.path("node-state"), text).unwrap();
    }

    fn report(&self) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.path("report/check.json")).unwrap())
            .unwrap()
    }

    fn textfile(&self) -> String {
        std::fs::read_to_string(self.path("textfile/gpudoctor.prom")).unwrap()
    }

    fn command(&self, arg: &str, env: &[(&str, &str)]) -> Command {
        let bin = Path::new(env!("CARGO_BIN_EXE_gpudoctor")).parent().unwrap();
        let path = format!(
            "{}:{}:{}",
            self.path("bin").display(),
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new(repo().join("deploy/kubernetes/gpudoctor-node"));
        c.arg(arg)
            .env("PATH", path)
            .env("NODE_NAME", "gpu7")
            .env("GPUDOCTOR_ROOT", self.path("root"))
            .env("GPUDOCTOR_TEXTFILE_DIR", self.path("textfile"))
            .env("GPUDOCTOR_REPORT_DIR", self.path("report"))
            .env("GPUDOCTOR_HEARTBEAT", self.path("heartbeat"))
            .env("GPUDOCTOR_SNAPSHOTS", "0")
            .env_remove("GPUDOCTOR_TEST_SLOW_READ")
            // The loop's settings come from each test, never from the caller's environment.
            .env_remove("INTERVAL_SECONDS")
            .env_remove("GPUDOCTOR_TIME_BUDGET")
            .env_remove("GPUDOCTOR_BACKSTOP_MARGIN")
            .env_remove("GPUDOCTOR_LIVENESS_MARGIN")
            .env_remove("GPUDOCTOR_CHECK_ARGS")
            .env_remove("GPUDOCTOR_MARK_NODE")
            .env_remove("GPUDOCTOR_UNTAINT")
            .env_remove("GPUDOCTOR_CONDITION")
            .env_remove("GPUDOCTOR_KERNEL_LOG")
            .envs(env.iter().copied());
        c
    }

    /// One run (--once) with `env`.
    fn once(&self, env: &[(&str, &str)]) -> Run {
        let log = self.path("kubectl.log");
        let _ = std::fs::remove_file(&log);
        let o = self.command("--once", env).output().unwrap();
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let calls = text
            .split("\u{1e}\n")
            .filter(|r| !r.is_empty())
            .map(|r| {
                let (args, stdin) = r.split_once("stdin:\n").unwrap();
                Call {
                    args: args.lines().map(str::to_string).collect(),
                    stdin: stdin.to_string(),
                }
            })
            .collect();
        Run {
            code: o.status.code(),
            calls,
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// `gpudoctor-node --alive`: its exit code.
    fn alive(&self, env: &[(&str, &str)]) -> Option<i32> {
        self.command("--alive", env).output().unwrap().status.code()
    }
}

fn write_exe(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The findings of one check in a report: (subject, status).
fn findings(report: &Value, id: &str) -> Vec<(String, String)> {
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .map(|f| {
            (
                f["subject"].as_str().unwrap().to_string(),
                f["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// What the DaemonSet runs and holds: the loop, its livenessProbe, the image's tools.
#[test]
fn daemonset_runs_the_loop_with_budget_and_liveness() {
    let ds = std::fs::read_to_string(repo().join("deploy/kubernetes/daemonset.yaml")).unwrap();
    assert!(ds.contains(r#"command: ["/usr/local/bin/gpudoctor-node"]"#));
    assert!(ds.contains(r#"command: ["/usr/local/bin/gpudoctor-node", "--alive"]"#));
    assert!(ds.contains("fieldPath: spec.nodeName"));
    assert!(ds.contains("- name: GPUDOCTOR_TIME_BUDGET"));
    let image = std::fs::read_to_string(repo().join("deploy/kubernetes/Containerfile")).unwrap();
    assert!(image.contains("COPY deploy/kubernetes/gpudoctor-node /usr/local/bin/gpudoctor-node"));
    assert!(image.contains("/usr/local/bin/kubectl"));
    assert!(image.starts_with("# ") && image.contains("FROM debian:12-slim"));
    let script = std::fs::read_to_string(repo().join("deploy/kubernetes/gpudoctor-node")).unwrap();
    for cmd in [
        r#"gpudoctor snapshot "$1" >"$ROOT/$1.json.tmp""#,
        r#""$DMESG" --syslog --raw"#,
        r#"timeout -k 10 "$BACKSTOP" gpudoctor --root "$ROOT" check --format reason --time-budget "$BUDGET""#,
        r#"--report "$REPORT/check.json" --textfile "$TEXTFILE""#,
    ] {
        assert!(
            script.contains(cmd),
            "gpudoctor-node no longer runs `{cmd}`"
        );
    }
    // No tool the image lacks (debian:12-slim has no jq, python or curl).
    for tool in ["jq ", "python", "curl "] {
        assert!(!script.contains(tool), "gpudoctor-node uses {tool}");
    }
}

/// The host's kernel log reaches gpu.xid: a kernel Xid 79 on GPU0 fails the node (label,
/// taint, condition True naming gpu.xid GPU0, a Warning event about the Node); the same text
/// written by a process (facility 1) does not count against GPU1; a clean log passes gpu.xid.
#[test]
fn kernel_log_xid_fails_the_node() {
    let node = Node::new();
    node.kernel_log(XID_LOG);
    let run = node.once(&[]);
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let kmsg: Value =
        serde_json::from_str(&std::fs::read_to_string(node.path("root/kmsg.json")).unwrap())
            .unwrap();
    assert_eq!(kmsg["schema"], "gpudoctor.kmsg/1");
    assert_eq!(kmsg["records_read"], 4);
    assert_eq!(kmsg["first_seq"], 0, "the log reaches back to boot");
    assert_eq!(kmsg["lines"].as_array().unwrap().len(), 2, "{kmsg}");
    let report = node.report();
    let xid = findings(&report, "gpu.xid");
    assert!(
        xid.contains(&("GPU0".into(), "fail".into())),
        "{xid:?}: the kernel's Xid 79 on GPU0"
    );
    assert!(
        xid.contains(&("GPU1".into(), "pass".into())),
        "{xid:?}: a process's record is not the kernel's"
    );
    assert_eq!(
        run.changes(),
        [
            "label node gpu7 gpudoctor.io/status=fail --overwrite",
            "taint node gpu7 gpudoctor.io/problem=fail:NoSchedule --overwrite",
            "patch node gpu7 --subresource=status --type=strategic",
            "create -f -",
        ]
    );
    let c = run.condition();
    assert_eq!(c["type"], "GpudoctorProblem");
    assert_eq!(c["status"], "True");
    assert_eq!(c["reason"], "GpudoctorCheckFailed");
    let message = c["message"].as_str().unwrap();
    assert!(message.contains("gpu.xid GPU0"), "{message}");
    assert!(!message.contains("GPU1"), "{message}");
    assert!(c["lastTransitionTime"].is_string(), "a new condition: {c}");
    let events = run.events();
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["type"], "Warning");
    assert_eq!(e["reason"], "GpudoctorCheckFailed");
    assert_eq!(e["metadata"]["namespace"], "default");
    assert_eq!(e["involvedObject"]["kind"], "Node");
    assert_eq!(e["involvedObject"]["name"], "gpu7");
    assert_eq!(e["involvedObject"]["uid"], "uid-7");
    assert_eq!(e["message"], c["message"]);

    // The same log with the Xid gone: gpu.xid passes on every GPU.
    node.kernel_log(CLEAN_LOG);
    let run = node.once(&[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let xid = findings(&node.report(), "gpu.xid");
    assert!(
        xid.iter().filter(|(s, _)| s.starts_with("GPU")).count() == 4
            && xid.iter().all(|(_, st)| st == "pass"),
        "{xid:?}"
    );
}

/// No kernel log is never a pass: a log the kernel refuses (no CAP_SYSLOG under
/// kernel.dmesg_restrict=1) is recorded as unreadable and gpu.xid is an unknown skip; with
/// reading turned off and no kmsg.json, the same; and a refusal leaves no earlier kmsg.json.
#[test]
fn no_kernel_log_is_never_a_pass() {
    let node = Node::new();
    node.once(&[]);
    assert!(node.path("root/kmsg.json").is_file());
    std::fs::write(
        node.path("dmesg.err"),
        "dmesg: read kernel buffer failed: Operation not permitted\n",
    )
    .unwrap();
    std::fs::write(node.path("dmesg.rc"), "1").unwrap();
    std::fs::write(node.path("dmesg.out"), "").unwrap();
    let run = node.once(&[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let kmsg: Value =
        serde_json::from_str(&std::fs::read_to_string(node.path("root/kmsg.json")).unwrap())
            .unwrap();
    assert_eq!(kmsg["needs_root"], true, "{kmsg}");
    assert!(
        kmsg["unavailable"]
            .as_str()
            .unwrap()
            .contains("Operation not permitted"),
        "{kmsg}"
    );
    let xid = findings(&node.report(), "gpu.xid");
    assert!(!xid.is_empty());
    assert!(xid.iter().all(|(_, st)| st == "skip"), "{xid:?}");

    std::fs::remove_file(node.path("root/kmsg.json")).unwrap();
    let run = node.once(&[("GPUDOCTOR_KERNEL_LOG", "0")]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let xid = findings(&node.report(), "gpu.xid");
    assert!(
        !xid.is_empty() && xid.iter().all(|(_, st)| st == "skip"),
        "{xid:?}"
    );
}

/// A healthy run: label pass, condition False (GpudoctorHealthy), no taint and no event; the
/// taint removed only with GPUDOCTOR_UNTAINT=1; a node that was failing gets a Normal event
/// and a transition time, one that was healthy neither; GPUDOCTOR_MARK_NODE=0 calls nothing.
#[test]
fn healthy_run_marks_pass() {
    let node = Node::new();
    let run = node.once(&[]);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(
        run.changes(),
        [
            "label node gpu7 gpudoctor.io/status=pass --overwrite",
            "patch node gpu7 --subresource=status --type=strategic",
        ]
    );
    let c = run.condition();
    assert_eq!(
        (c["status"].as_str(), c["reason"].as_str()),
        (Some("False"), Some("GpudoctorHealthy"))
    );
    assert!(
        c["message"]
            .as_str()
            .unwrap()
            .starts_with("gpudoctor: warn ("),
        "{c}"
    );

    node.node_state(Some(("False", "gpudoctor: warn")));
    let run = node.once(&[("GPUDOCTOR_UNTAINT", "1")]);
    assert_eq!(
        run.changes(),
        [
            "label node gpu7 gpudoctor.io/status=pass --overwrite",
            "taint node gpu7 gpudoctor.io/problem:NoSchedule-",
            "patch node gpu7 --subresource=status --type=strategic",
        ]
    );
    assert!(
        run.condition().get("lastTransitionTime").is_none(),
        "status unchanged: the transition time stays"
    );

    node.node_state(Some(("True", "failing: gpu.xid GPU0")));
    let run = node.once(&[]);
    let events = run.events();
    assert_eq!(events.len(), 1, "{:#?}", run.calls);
    assert_eq!(events[0]["type"], "Normal");
    assert_eq!(events[0]["reason"], "GpudoctorRecovered");
    assert!(run.condition()["lastTransitionTime"].is_string());

    let run = node.once(&[("GPUDOCTOR_MARK_NODE", "0")]);
    assert!(run.calls.is_empty(), "{:#?}", run.calls);
}

/// A failing node gets one Warning event per new failure, not one per run: the same message as
/// the node's condition already has creates none, a changed one does.
#[test]
fn failing_run_events_only_on_change() {
    let node = Node::new();
    node.kernel_log(XID_LOG);
    let first = node.once(&[]);
    let message = first.condition()["message"].as_str().unwrap().to_string();
    node.node_state(Some(("True", &message)));
    let again = node.once(&[]);
    assert_eq!(again.code, Some(1));
    assert!(again.events().is_empty(), "{:#?}", again.calls);
    assert!(again.condition().get("lastTransitionTime").is_none());
    node.node_state(Some(("True", "failing: rdma.port-state mlx5_2/1")));
    let changed = node.once(&[]);
    assert_eq!(changed.events().len(), 1, "{:#?}", changed.calls);
}

/// gpudoctor could not run (the tree has no sys/: exit 2): label unknown, condition Unknown
/// (GpudoctorCouldNotRun) with gpudoctor's error, no taint, no event, `gpudoctor_up 0`.
#[test]
fn could_not_run_is_unknown() {
    let node = Node::new();
    std::fs::remove_dir_all(node.path("root/sys")).unwrap();
    let run = node.once(&[]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_eq!(
        run.changes(),
        [
            "label node gpu7 gpudoctor.io/status=unknown --overwrite",
            "patch node gpu7 --subresource=status --type=strategic",
        ]
    );
    let c = run.condition();
    assert_eq!(c["status"], "Unknown");
    assert_eq!(c["reason"], "GpudoctorCouldNotRun");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.starts_with("gpudoctor could not run (exit 2): gpudoctor: error: "),
        "{m}"
    );
    assert!(node.textfile().contains("gpudoctor_up 0"));
}

/// A run that judged nothing (discovery not answering, the budget of 1 s spent before any
/// check: every finding an unknown skip; gpudoctor exits 0) is unknown, never pass: label
/// unknown, condition Unknown (GpudoctorNothingJudged) saying the budget was spent.
#[test]
fn nothing_judged_is_unknown() {
    let node = Node::new();
    let t0 = std::time::Instant::now();
    let run = node.once(&[
        ("GPUDOCTOR_TIME_BUDGET", "1"),
        (
            "GPUDOCTOR_TEST_SLOW_READ",
            "/sys/devices/pci0000:00/0000:00:01.0/class=30",
        ),
    ]);
    assert!(t0.elapsed().as_secs() < 20);
    assert_eq!(run.code, Some(0), "gpudoctor's own exit: {}", run.stderr);
    assert_eq!(node.report()["status"], "skip");
    assert_eq!(
        run.changes(),
        [
            "label node gpu7 gpudoctor.io/status=unknown --overwrite",
            "patch node gpu7 --subresource=status --type=strategic",
        ]
    );
    let c = run.condition();
    assert_eq!(c["status"], "Unknown");
    assert_eq!(c["reason"], "GpudoctorNothingJudged");
    let m = c["message"].as_str().unwrap();
    assert!(
        m.starts_with("nothing judged: gpudoctor: time budget of 1 s spent during discovery"),
        "{m}"
    );
}

/// A check that hangs past its budget and past the backstop (a stand-in gpudoctor whose
/// `check` sleeps): the loop ends it, labels unknown, sets Unknown (GpudoctorTimedOut), writes
/// `gpudoctor_up 0` itself (gpudoctor never wrote the textfile), and still writes its heartbeat.
#[test]
fn backstop_ends_a_hung_run() {
    let node = Node::new();
    let real = env!("CARGO_BIN_EXE_gpudoctor");
    write_exe(
        &node.path("bin/gpudoctor"),
        &format!(
            "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = check ] && exec sleep 120; done\nexec {real} \"$@\"\n"
        ),
    );
    let t0 = std::time::Instant::now();
    let run = node.once(&[
        ("GPUDOCTOR_TIME_BUDGET", "1"),
        ("GPUDOCTOR_BACKSTOP_MARGIN", "1"),
    ]);
    assert!(t0.elapsed().as_secs() < 30, "{:?}", t0.elapsed());
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert_eq!(
        run.changes()[0],
        "label node gpu7 gpudoctor.io/status=unknown --overwrite"
    );
    let c = run.condition();
    assert_eq!(c["status"], "Unknown");
    assert_eq!(c["reason"], "GpudoctorTimedOut");
    let prom = node.textfile();
    assert!(
        prom.contains("gpudoctor_up 0\n") && prom.contains("gpudoctor_exit_code 2\n"),
        "{prom}"
    );
    assert!(node.path("heartbeat").is_file());
    let have = Command::new("promtool")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if have {
        let o = Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::fs::File::open(node.path("textfile/gpudoctor.prom")).unwrap())
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

/// The livenessProbe (`gpudoctor-node --alive`): fails with no heartbeat, passes after a run,
/// fails once no run has ended for INTERVAL_SECONDS + GPUDOCTOR_TIME_BUDGET + the margin.
#[test]
fn liveness_follows_the_heartbeat() {
    let node = Node::new();
    assert_eq!(node.alive(&[]), Some(1), "no run yet");
    node.once(&[]);
    assert_eq!(node.alive(&[]), Some(0));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let env = [
        ("INTERVAL_SECONDS", "600"),
        ("GPUDOCTOR_TIME_BUDGET", "120"),
        ("GPUDOCTOR_LIVENESS_MARGIN", "300"),
    ];
    std::fs::write(node.path("heartbeat"), format!("{}\n", now - 1000)).unwrap();
    assert_eq!(node.alive(&env), Some(0), "1000 s < 600 + 120 + 300");
    std::fs::write(node.path("heartbeat"), format!("{}\n", now - 1100)).unwrap();
    assert_eq!(node.alive(&env), Some(1), "1100 s > 600 + 120 + 300");
    // The DaemonSet's own settings, the margin by default: 1100 s < 600 + 120 + 420 < 1200 s.
    let ds = [
        ("INTERVAL_SECONDS", "600"),
        ("GPUDOCTOR_TIME_BUDGET", "120"),
    ];
    assert_eq!(node.alive(&ds), Some(0));
    std::fs::write(node.path("heartbeat"), format!("{}\n", now - 1200)).unwrap();
    assert_eq!(node.alive(&ds), Some(1));
}

/// The condition patch and the Event the loop sends are valid Kubernetes objects: the Node
/// status the patch gives and the Event, strictly (unknown fields rejected), by
/// kubernetes-validate (as `deploy::manifests_validate_against_kubernetes`); and the condition's
/// reason is CamelCase, its message bounded.
#[test]
fn condition_patch_and_event_validate() {
    let node = Node::new();
    node.kernel_log(XID_LOG);
    let run = node.once(&[]);
    let c = run.condition();
    let reason = c["reason"].as_str().unwrap();
    assert!(
        reason.chars().next().unwrap().is_ascii_uppercase()
            && reason.chars().all(|ch| ch.is_ascii_alphanumeric()),
        "{reason}"
    );
    assert!(c["message"].as_str().unwrap().len() <= 1000);
    let Some(validate) = crate::deploy::kubernetes_validate() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let n = serde_json::json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu7"},
        "status": {"conditions": [c]},
    });
    // The API server names the Event from its generateName; the validator needs a name.
    let mut event = run.events()[0].clone();
    assert_eq!(event["metadata"]["generateName"], "gpudoctor-");
    event["metadata"]["name"] = "gpudoctor-x7k2p".into();
    let mut bad = n.clone();
    bad["status"]["conditions"][0]["lastTransitionTim"] = "x".into();
    for (name, doc, ok) in [
        ("node.json", n, true),
        ("event.json", event, true),
        ("bad.json", bad, false),
    ] {
        let f = tmp.path().join(name);
        std::fs::write(&f, doc.to_string()).unwrap();
        let (passed, out) = validate(&f);
        assert_eq!(passed, ok, "{name}: {out}");
    }
}

/// What the manifests grant, read as YAML (python3's yaml, as `nccl::job_manifest`): RBAC is
/// exactly nodes get/patch, nodes/status patch and events create in default; the DaemonSet adds
/// SYS_ADMIN and SYSLOG only, is not privileged, mounts the host's trees read-only and has a
/// livenessProbe; the Jobs that read /sys live run in the host's network namespace; the
/// admission policy's binding names it and matches the DaemonSet's service account.
#[test]
fn manifests_grant_least_privilege() {
    let check = r#"
import sys, yaml
d = sys.argv[1]
def load(f): return list(yaml.safe_load_all(open(d + '/' + f)))
rbac = load('rbac.yaml')
kinds = {(o['kind'], o['metadata']['name']): o for o in rbac}
rules = [(r['apiGroups'], r['resources'], r['verbs']) for r in kinds[('ClusterRole', 'gpudoctor-node-marker')]['rules']]
assert rules == [([''], ['nodes'], ['get', 'patch']), ([''], ['nodes/status'], ['patch'])], rules
role = kinds[('Role', 'gpudoctor-node-events')]
assert role['metadata']['namespace'] == 'default'
assert [(r['apiGroups'], r['resources'], r['verbs']) for r in role['rules']] == [([''], ['events'], ['create'])]
assert sorted(k for k, _ in kinds) == ['ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'ServiceAccount'], kinds
for b in ('ClusterRoleBinding', 'RoleBinding'):
    o = [v for (k, _), v in kinds.items() if k == b][0]
    assert o['subjects'] == [{'kind': 'ServiceAccount', 'name': 'gpudoctor', 'namespace': 'gpudoctor'}]
ds = load('daemonset.yaml')[0]
t = ds['spec']['template']['spec']
c = t['containers'][0]
sc = c['securityContext']
assert sc['privileged'] is False and sc['allowPrivilegeEscalation'] is False and sc['readOnlyRootFilesystem']
assert sc['capabilities'] == {'drop': ['ALL'], 'add': ['SYS_ADMIN', 'SYSLOG']}, sc
assert not t.get('hostNetwork') and not t.get('hostPID')
assert c['livenessProbe']['exec']['command'] == ['/usr/local/bin/gpudoctor-node', '--alive']
vols = {v['name']: v for v in t['volumes']}
for m in c['volumeMounts']:
    hp = vols[m['name']].get('hostPath')
    if hp and hp['path'] in ('/sys', '/proc'):
        assert m.get('readOnly') is True and m['mountPath'].startswith('/gpudoctor-root/'), m
assert sorted(v['hostPath']['path'] for v in t['volumes'] if 'hostPath' in v) == ['/proc', '/sys', '/var/lib/gpudoctor', '/var/lib/node_exporter/textfile_collector']
env = {e['name']: e.get('value') for e in c['env']}
assert int(env['GPUDOCTOR_TIME_BUDGET']) < int(env['INTERVAL_SECONDS'])
assert t['serviceAccountName'] == 'gpudoctor'
for f in ('job.yaml', 'nccl-job.yaml'):
    job = [o for o in load(f) if o['kind'] == 'Job'][0]['spec']['template']['spec']
    assert job.get('hostNetwork') is True and job['dnsPolicy'] == 'ClusterFirstWithHostNet', f
# The validation Job reads the kernel log live through syslog(2) (no /dev/kmsg in a container).
job = [o for o in load('job.yaml') if o['kind'] == 'Job'][0]['spec']['template']['spec']
jc = job['containers'][0]['securityContext']
assert jc['capabilities'] == {'drop': ['ALL'], 'add': ['SYS_ADMIN', 'SYSLOG']}, jc
pol = load('admission-policy.yaml')
p = [o for o in pol if o['kind'] == 'ValidatingAdmissionPolicy'][0]
b = [o for o in pol if o['kind'] == 'ValidatingAdmissionPolicyBinding'][0]
assert b['spec']['policyName'] == p['metadata']['name'] and b['spec']['validationActions'] == ['Deny']
assert p['spec']['failurePolicy'] == 'Fail'
assert p['spec']['matchConditions'][0]['expression'] == "request.userInfo.username == 'system:serviceaccount:gpudoctor:gpudoctor'"
print('ok')
"#;
    python_check(check, &[&repo().join("deploy/kubernetes")], "python3");
}

/// The admission policy evaluated on requests by a CEL interpreter (cel-python, where the
/// Python that runs kubernetes-validate has it): the service account may label, taint and set
/// the condition of its own node and create events about it; it is refused another node, a
/// token without a node name, a foreign label or taint, a cordon, another condition, a changed
/// capacity and an event about another object; another user is not matched at all.
#[test]
fn admission_policy_confines_to_own_node() {
    let python = crate::deploy::kubernetes_validate_python();
    let has_cel = Command::new(&python)
        .args(["-c", "import celpy, yaml"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_cel {
        assert!(
            std::env::var_os("GPUDOCTOR_REQUIRE_CEL").is_none(),
            "{python}: no celpy, and GPUDOCTOR_REQUIRE_CEL is set (scripts/test installs it)"
        );
        eprintln!("{python}: no celpy (pip install cel-python): the policy was not evaluated");
        return;
    }
    python_check(
        ADMISSION_CASES,
        &[&repo().join("deploy/kubernetes/admission-policy.yaml")],
        &python,
    );
}

const ADMISSION_CASES: &str = r#"
import sys, copy, yaml, celpy
docs = list(yaml.safe_load_all(open(sys.argv[1])))
pol = [d for d in docs if d['kind'] == 'ValidatingAdmissionPolicy'][0]['spec']
env = celpy.Environment()
def run(expr, act):
    return env.program(env.compile(expr)).evaluate(act)
def admit(req, obj, old):
    act = {k: celpy.json_to_cel(v) for k, v in {'request': req, 'object': obj, 'oldObject': old}.items()}
    if not all(bool(run(m['expression'], act)) for m in pol['matchConditions']):
        return 'not matched'
    var = celpy.celtypes.MapType({})
    for v in pol['variables']:
        var[celpy.celtypes.StringType(v['name'])] = run(v['expression'], {**act, 'variables': var})
    return [i for i, v in enumerate(pol['validations']) if not bool(run(v['expression'], {**act, 'variables': var}))]
SA = 'system:serviceaccount:gpudoctor:gpudoctor'
def req(res, name, sub='', node='gpu7', user=SA):
    extra = {'authentication.kubernetes.io/pod-name': ['gpudoctor-x']}
    if node:
        extra['authentication.kubernetes.io/node-name'] = [node]
    return {'userInfo': {'username': user, 'extra': extra}, 'resource': {'group': '', 'version': 'v1', 'resource': res}, 'subResource': sub, 'name': name}
node = {'metadata': {'name': 'gpu7', 'labels': {'kubernetes.io/hostname': 'gpu7', 'gpudoctor.io/status': 'pass'}},
        'spec': {'taints': [{'key': 'nvidia.com/gpu', 'effect': 'NoSchedule'}]},
        'status': {'capacity': {'cpu': '64'}, 'allocatable': {'cpu': '63'}, 'conditions': [{'type': 'Ready', 'status': 'True'}]}}
def edit(f, base=node):
    n = copy.deepcopy(base); f(n); return n
labelled = edit(lambda n: n['metadata']['labels'].update({'gpudoctor.io/status': 'fail'}))
tainted = edit(lambda n: n['spec']['taints'].insert(0, {'key': 'gpudoctor.io/problem', 'value': 'fail', 'effect': 'NoSchedule'}))
bare = edit(lambda n: n['spec'].pop('taints'))
condition = edit(lambda n: n['status']['conditions'].append({'type': 'GpudoctorProblem', 'status': 'True'}))
# (what, verdict: [] admitted, else the indexes of the validations that refuse)
cases = [
    ('own node label', admit(req('nodes', 'gpu7'), labelled, node), []),
    ('another node', admit(req('nodes', 'gpu8'), labelled, node), [1]),
    ('no node name in the token', admit(req('nodes', 'gpu7', node=None), labelled, node), [0, 1]),
    ('another user', admit(req('nodes', 'gpu8', user='alice'), labelled, node), 'not matched'),
    ('a foreign label', admit(req('nodes', 'gpu7'), edit(lambda n: n['metadata']['labels'].update({'role': 'x'})), node), [3]),
    ('a label removed', admit(req('nodes', 'gpu7'), edit(lambda n: n['metadata']['labels'].pop('kubernetes.io/hostname')), node), [3]),
    ('own taint', admit(req('nodes', 'gpu7'), tainted, node), []),
    ('own taint removed', admit(req('nodes', 'gpu7'), node, tainted), []),
    ('own taint on a node without taints', admit(req('nodes', 'gpu7'), edit(lambda n: n['spec'].update({'taints': [{'key': 'gpudoctor.io/problem', 'effect': 'NoSchedule'}]}), bare), bare), []),
    ('another taint removed', admit(req('nodes', 'gpu7'), bare, node), [4]),
    ('cordon', admit(req('nodes', 'gpu7'), edit(lambda n: n['spec'].update({'unschedulable': True})), node), [5]),
    ('own condition', admit(req('nodes', 'gpu7', 'status'), condition, node), []),
    ('own condition on another node', admit(req('nodes', 'gpu8', 'status'), condition, node), [1]),
    ('Ready changed', admit(req('nodes', 'gpu7', 'status'), edit(lambda n: n['status']['conditions'][0].update({'status': 'False'})), node), [6]),
    ('capacity changed', admit(req('nodes', 'gpu7', 'status'), edit(lambda n: n['status']['capacity'].update({'cpu': '128'})), node), [7]),
    ('event about own node', admit(req('events', ''), {'involvedObject': {'kind': 'Node', 'name': 'gpu7'}}, None), []),
    ('event about another node', admit(req('events', ''), {'involvedObject': {'kind': 'Node', 'name': 'gpu8'}}, None), [2]),
    ('event about a pod', admit(req('events', ''), {'involvedObject': {'kind': 'Pod', 'name': 'gpu7'}}, None), [2]),
]
wrong = [(what, got, want) for what, got, want in cases if got != want]
assert not wrong, wrong
print('ok')
"#;

/// Run a Python check that prints "ok"; without python3's yaml the check is skipped (said).
fn python_check(script: &str, args: &[&Path], python: &str) {
    match Command::new(python)
        .args(["-c", script])
        .args(args)
        .output()
    {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named 'yaml'") => {
            eprintln!("{python} without yaml: not checked");
        }
        Ok(o) => assert!(
            o.status.success() && o.stdout.starts_with(b"ok"),
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("no {python} ({e}): not checked"),
    }
}

/// What the DaemonSet relies on to read the host's netdevs without hostNetwork, and why the
/// Jobs need it: in a new network namespace, a sysfs mounted there lists only that namespace's
/// netdevs (lo), while a bind mount of the host's /sys (what a hostPath volume is) lists the
/// host's. Needs root (unshare); skipped, and said, where it cannot run.
#[test]
fn hostpath_sysfs_shows_the_hosts_netdevs() {
    let host: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            let mut v: Vec<String> = d
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        })
        .unwrap_or_default();
    if host.iter().all(|n| n == "lo") {
        eprintln!("no netdev but lo here: nothing to tell apart");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (fresh, bind) = (tmp.path().join("fresh"), tmp.path().join("bind"));
    std::fs::create_dir(&fresh).unwrap();
    std::fs::create_dir(&bind).unwrap();
    let script = format!(
        "mount -t sysfs sysfs {f} && mount --bind /sys {b} && echo fresh $(ls {f}/class/net) && echo bind $(ls {b}/class/net)",
        f = fresh.display(),
        b = bind.display()
    );
    let o = Command::new("unshare")
        .args(["--net", "--mount", "sh", "-c", &script])
        .output();
    let o = match o {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            eprintln!(
                "unshare --net --mount refused here: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            return;
        }
        Err(e) => {
            eprintln!("no unshare: {e}");
            return;
        }
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let line = |what: &str| -> Vec<String> {
        let mut v: Vec<String> = out
            .lines()
            .find_map(|l| l.strip_prefix(what))
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    assert_eq!(line("fresh"), ["lo"], "{out}");
    assert_eq!(line("bind"), host, "{out}");
}
