//! deploy/slurm/gpudoctor-healthcheck on a real one-machine Slurm cluster (Debian slurm-wlm and
//! munge: munged, slurmctld and slurmd on localhost, started by tests/slurm/cluster.sh). slurmd
//! itself starts the script, with the environment slurmd gives it (SLURMD_NODENAME and no PATH),
//! configured through its settings file. As a health check, a faulty recorded tree ends DRAIN
//! with a reason naming each failure and what was seen, a healthy one stays IDLE, the gate's
//! failures say so; gpudoctor is found without PATH (GPUDOCTOR_BIN, or an install location); a
//! gpudoctor that is missing, cannot judge the node (exit 2), crashes, is killed (SIGKILL told
//! apart from the GPUDOCTOR_TIMEOUT backstop) or runs past its budget drains the node (fail
//! closed) unless GPUDOCTOR_ON_ERROR=leave; a typo in the settings file drains in both modes;
//! an operator's drain reason is kept and a DOWN node left alone; GPUDOCTOR_TIMEOUT is held
//! under slurmd's 60 s kill; probes (--level 1) run on an idle node only. As a Prolog, a faulty
//! node is drained and the job requeued held before it starts, and a healthy node runs it.
//! Fails (rather than skips) when GPUDOCTOR_REQUIRE_SLURM=1 and Slurm is missing; scripts/test
//! installs it.

use crate::repo;
use std::process::Command;

fn have_slurm() -> bool {
    let found = ["slurmctld", "slurmd", "munged", "scontrol", "sinfo"]
        .iter()
        .all(|t| {
            Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if !found {
        assert!(
            std::env::var("GPUDOCTOR_REQUIRE_SLURM").as_deref() != Ok("1"),
            "Slurm missing (apt-get install slurm-wlm munge)"
        );
        eprintln!("slurm-wlm/munge not installed: skipped");
    }
    found
}

fn cluster(args: &[&str]) -> (String, String, String) {
    let r = run(env!("CARGO_BIN_EXE_gpudoctor"), &[], args);
    (r.state, r.reason, r.report)
}

/// The cluster with the script's settings in `env`; also the job line in prolog mode.
fn cluster_with(
    bin: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (String, String, String, String) {
    let r = run(bin, env, args);
    (r.state, r.reason, r.report, r.job)
}

/// What tests/slurm/cluster.sh saw once the health check (or Prolog) had run.
struct Run {
    /// sinfo's state (idle, drained, ...) and scontrol's (IDLE+DRAIN, DOWN+DRAIN, ...).
    state: String,
    node_state: String,
    reason: String,
    /// "kept" or "missing": the JSON report.
    report: String,
    /// The level the kept report was run at.
    level: String,
    job: String,
    /// The names of the variables slurmd started the script with.
    env: String,
    /// The script's own log lines.
    log: String,
}

/// The cluster with the script's settings (and the harness's CLUSTER_*) in `env`; `bin` is
/// GPUDOCTOR_BIN, or "none" for no setting.
fn run(bin: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    let o = Command::new(repo().join("tests/slurm/cluster.sh"))
        .arg(bin)
        .envs(env.iter().copied())
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{args:?}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let field = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or_default()
            .to_string()
    };
    let log: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("log=")).collect();
    Run {
        state: field("state"),
        node_state: field("node_state"),
        reason: field("reason"),
        report: field("report"),
        level: field("level"),
        job: field("job"),
        env: field("env"),
        log: log.join("\n"),
    }
}

/// `reason` with the number before "not judged" / "could not be judged" written N: it follows
/// the size of the check catalog, which grows.
fn counts_masked(reason: &str) -> String {
    let words: Vec<&str> = reason.split(' ').collect();
    let masked: Vec<&str> = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let next = words.get(i + 1).copied().unwrap_or("");
            let counted = next.starts_with("not") || next == "could";
            if counted && !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()) {
                "N"
            } else {
                w
            }
        })
        .collect();
    masked.join(" ")
}

/// A stand-in gpudoctor: a shell script in a temporary directory.
fn stand_in(dir: &tempfile::TempDir, name: &str, body: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn slurm_health_check_drains_faulty_nodes_only() {
    if !have_slurm() {
        return;
    }
    let (state, reason, report) = cluster(&[
        "--bundle",
        "fixtures/variants/vm-flat-4gpu--gpu-health/bundle.tar.gz",
    ]);
    assert!(state.starts_with("drain"), "state {state}");
    // Subject and observation, within the reason's length.
    assert!(
        reason.starts_with("gpudoctor: gpu.ecc GPU2 [reset] 3 volatile uncorrectable ECC errors"),
        "{reason}"
    );
    assert!(reason.contains("; gpu.row-remap GPU3 [reset] "), "{reason}");
    assert!(reason.ends_with("(+3 more)"), "{reason}");
    assert!(reason.len() <= 250, "{reason}");
    assert_eq!(report, "kept");

    let (state, reason, report) = cluster(&["--root", "fixtures/pcie-2socket-roce"]);
    assert_eq!(state, "idle", "a node with warnings only stays in service");
    assert_eq!(reason, "");
    assert_eq!(report, "kept");

    // gpudoctor cannot judge the node (exit 2): drained by default (fail closed), with why.
    let (state, reason, report) = cluster(&["--root", "fixtures/does-not-exist"]);
    assert!(state.starts_with("drain"), "state {state}");
    assert!(
        reason.starts_with("gpudoctor: could not run: exit 2: gpudoctor: error: --root "),
        "{reason}"
    );
    assert_eq!(report, "missing");
    // GPUDOCTOR_ON_ERROR=leave: logged, nothing else.
    let r = run(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("GPUDOCTOR_ON_ERROR", "leave")],
        &["--root", "fixtures/does-not-exist"],
    );
    assert_eq!(r.state, "idle");
    assert_eq!(r.reason, "");
    assert!(
        r.log
            .contains("left in service unchecked (GPUDOCTOR_ON_ERROR=leave)"),
        "{}",
        r.log
    );
}

/// GPUDOCTOR_TIMEOUT's kill is the backstop for a gpudoctor that ignores its budget (here a
/// stand-in binary that sleeps), with a reason; GPUDOCTOR_ON_ERROR=drain drains on it, and a
/// gate failure names the gate.
#[test]
fn slurm_timeout_on_error_and_gate_reasons() {
    if !have_slurm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("gpudoctor-that-hangs");
    std::fs::write(&slow, "#!/bin/sh\nsleep 60\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&slow, std::fs::Permissions::from_mode(0o755)).unwrap();
    let t0 = std::time::Instant::now();
    let (state, reason, report, _) = cluster_with(
        slow.to_str().unwrap(),
        &[("GPUDOCTOR_TIMEOUT", "2"), ("GPUDOCTOR_ON_ERROR", "drain")],
        &["--root", "fixtures/pcie-2socket-roce"],
    );
    assert!(state.starts_with("drain"), "state {state}");
    assert_eq!(
        reason,
        "gpudoctor: could not run: killed at GPUDOCTOR_TIMEOUT=2s (the backstop): its own --time-budget of 1s did not end it"
    );
    assert_eq!(report, "missing");
    assert!(t0.elapsed().as_secs() < 50, "the budget cut the run");

    // --strict on a node with warnings only: the gate drains it and says so.
    let (state, reason, _, _) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("GPUDOCTOR_ARGS", "--strict")],
        &["--root", "fixtures/pcie-2socket-roce"],
    );
    assert!(state.starts_with("drain"), "state {state}");
    assert!(
        reason.starts_with(
            "gpudoctor: gate: 9 warnings (--strict): gdr.path GPU0 GPU0 reaches mlx5_0"
        ),
        "{reason}"
    );
}

/// gpudoctor's own budget (GPUDOCTOR_TIMEOUT less the margin) ends a run whose discovery does
/// not answer (GPUDOCTOR_TEST_SLOW_READ: one read sleeps 30 s) before the backstop's kill: the
/// report is kept, and the node is drained (GPUDOCTOR_ON_ERROR=drain) with a reason naming the
/// budget, or left in service (leave); with --fail-on-skip the gate drains it, naming the
/// budget first.
#[test]
fn slurm_budget_cut_run_is_named() {
    if !have_slurm() {
        return;
    }
    let slow = (
        "GPUDOCTOR_TEST_SLOW_READ",
        "/sys/devices/pci0000:00/0000:00:01.0/class=30",
    );
    let root = ["--root", "fixtures/pcie-2socket-roce"];
    let t0 = std::time::Instant::now();
    let (state, reason, report, _) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[
            slow,
            ("GPUDOCTOR_TIMEOUT", "4"),
            ("GPUDOCTOR_ON_ERROR", "drain"),
        ],
        &root,
    );
    assert!(state.starts_with("drain"), "state {state}");
    assert_eq!(
        counts_masked(&reason),
        "gpudoctor: not finished: time budget of 3 s spent during discovery, N not judged"
    );
    assert_eq!(report, "kept", "the budget, not the kill, ended the run");
    assert!(t0.elapsed().as_secs() < 50);

    let (state, reason, report, _) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[
            slow,
            ("GPUDOCTOR_TIMEOUT", "4"),
            ("GPUDOCTOR_ON_ERROR", "leave"),
        ],
        &root,
    );
    assert_eq!(state, "idle", "GPUDOCTOR_ON_ERROR=leave");
    assert_eq!(reason, "");
    assert_eq!(report, "kept");

    let (state, reason, _, _) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[
            slow,
            ("GPUDOCTOR_TIMEOUT", "4"),
            ("GPUDOCTOR_ARGS", "--fail-on-skip"),
        ],
        &root,
    );
    assert!(state.starts_with("drain"), "state {state}");
    assert!(
        counts_masked(&reason).starts_with(
            "gpudoctor: time budget of 3 s spent during discovery, N not judged; gate: N could not be judged (--fail-on-skip): "
        ),
        "{reason}"
    );
}

/// As a Prolog (GPUDOCTOR_MODE=prolog): a faulty node is drained with gpudoctor's reason and the
/// job is requeued held instead of starting there; a healthy node runs the job.
#[test]
fn slurm_prolog_requeues_the_job_and_drains() {
    if !have_slurm() {
        return;
    }
    let (state, reason, report, job) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("GPUDOCTOR_MODE", "prolog")],
        &[
            "--bundle",
            "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz",
        ],
    );
    assert!(state.starts_with("drain"), "state {state}");
    assert_eq!(
        reason,
        "gpudoctor: rdma.port-state mlx5_2/1 [reseat] port not usable: state 1: DOWN, physical state 3: Disabled"
    );
    assert_eq!(report, "kept");
    assert_eq!(job, "PENDING held=yes started=no", "requeued and held");

    let (state, reason, _, job) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("GPUDOCTOR_MODE", "prolog")],
        &["--root", "fixtures/pcie-2socket-roce"],
    );
    assert!(!state.starts_with("drain"), "state {state}");
    assert_eq!(reason, "");
    assert_eq!(job, "COMPLETED held=no started=yes");
}

/// slurmd gives a health check no PATH: the script finds gpudoctor as GPUDOCTOR_BIN (the tests
/// above) or in an install location (here /opt/gpudoctor/bin, in a private mount namespace),
/// and with neither drains the node saying so.
#[test]
fn slurm_finds_gpudoctor_without_path() {
    if !have_slurm() {
        return;
    }
    let r = run("none", &[], &["--root", "fixtures/pcie-2socket-roce"]);
    assert_eq!(r.env, "PWD SLURMD_NODENAME ", "slurmd's environment");
    assert!(r.state.starts_with("drain"), "state {}", r.state);
    assert_eq!(
        r.reason,
        "gpudoctor: could not run: gpudoctor not found in /usr/local/bin, /usr/bin or /opt/gpudoctor/bin (set GPUDOCTOR_BIN)"
    );
    assert_eq!(r.report, "missing");

    let installed = ["/usr/local/bin/gpudoctor", "/usr/bin/gpudoctor"]
        .iter()
        .any(|p| std::path::Path::new(p).exists());
    let unshare = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if installed || !unshare {
        eprintln!("gpudoctor installed here, or no mount namespace: /opt lookup not tried");
        return;
    }
    let r = run(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("CLUSTER_INSTALL_OPT", "1")],
        &["--root", "fixtures/pcie-2socket-roce"],
    );
    assert_eq!(r.env, "PWD SLURMD_NODENAME ");
    assert_eq!(r.state, "idle", "{}", r.log);
    assert_eq!(r.report, "kept", "found in /opt/gpudoctor/bin and ran");
}

/// A reason gpudoctor did not set is kept (an operator's RMA note), its own is replaced, and a
/// healthy run resumes (GPUDOCTOR_RESUME=1) only a node it drained itself.
#[test]
fn slurm_keeps_an_operators_reason() {
    if !have_slurm() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_gpudoctor");
    let faulty = [
        "--bundle",
        "fixtures/variants/vm-flat-4gpu--gpu-health/bundle.tar.gz",
    ];
    let note = (
        "CLUSTER_NODE_UPDATE",
        r#"state=drain reason="RMA-1234 GPU3 replaced, burn-in pending""#,
    );
    let r = run(bin, &[note], &faulty);
    assert!(r.state.starts_with("drain"), "state {}", r.state);
    assert_eq!(r.reason, "RMA-1234 GPU3 replaced, burn-in pending");
    assert_eq!(r.report, "kept");
    assert!(
        r.log.contains("with a reason gpudoctor did not set ('RMA-1234 GPU3 replaced, burn-in pending'): kept; gpudoctor found: gpudoctor: gpu.ecc GPU2 "),
        "{}",
        r.log
    );
    let healthy = ["--root", "fixtures/pcie-2socket-roce"];
    let r = run(bin, &[note, ("GPUDOCTOR_RESUME", "1")], &healthy);
    assert!(r.state.starts_with("drain"), "not resumed: {}", r.state);
    assert_eq!(r.reason, "RMA-1234 GPU3 replaced, burn-in pending");

    let own = (
        "CLUSTER_NODE_UPDATE",
        r#"state=drain reason="gpudoctor: an earlier failure""#,
    );
    let r = run(bin, &[own], &faulty);
    assert!(
        r.reason.starts_with("gpudoctor: gpu.ecc GPU2 [reset] "),
        "its own reason is replaced: {}",
        r.reason
    );
    let r = run(bin, &[own, ("GPUDOCTOR_RESUME", "1")], &healthy);
    assert_eq!(r.state, "idle", "{}", r.log);
    assert_eq!(r.reason, "");
}

/// A DOWN node is neither drained nor resumed; its reason stays.
#[test]
fn slurm_leaves_down_nodes_alone() {
    if !have_slurm() {
        return;
    }
    let r = run(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[
            ("CLUSTER_RETURN_TO_SERVICE", "0"),
            (
                "CLUSTER_NODE_UPDATE",
                r#"state=down reason="RMA-5678 PSU swap""#,
            ),
        ],
        &[
            "--bundle",
            "fixtures/variants/vm-flat-4gpu--gpu-health/bundle.tar.gz",
        ],
    );
    assert!(r.node_state.starts_with("DOWN"), "{}", r.node_state);
    assert_eq!(r.reason, "RMA-5678 PSU swap");
    assert!(
        r.log.contains(
            "(reason: RMA-5678 PSU swap): left as it is; gpudoctor found: gpudoctor: gpu.ecc GPU2 "
        ),
        "{}",
        r.log
    );
}

/// A typo in the settings file (an unknown key, a bad value) drains the node in both modes.
#[test]
fn slurm_settings_typo_fails_closed() {
    if !have_slurm() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_gpudoctor");
    let healthy = ["--root", "fixtures/pcie-2socket-roce"];
    let r = run(
        bin,
        &[("CLUSTER_SETTINGS", "GPUDOCTOR_TIMOUT=30")],
        &healthy,
    );
    assert!(r.state.starts_with("drain"), "state {}", r.state);
    assert!(
        r.reason
            .starts_with("gpudoctor: could not run: bad settings: /tmp/")
            && r.reason.ends_with(": unknown setting 'GPUDOCTOR_TIMOUT'"),
        "{}",
        r.reason
    );
    let r = run(
        bin,
        &[
            ("GPUDOCTOR_MODE", "prolog"),
            ("CLUSTER_SETTINGS", "GPUDOCTOR_ON_ERROR=leeve"),
        ],
        &healthy,
    );
    assert!(r.state.starts_with("drain"), "state {}", r.state);
    assert_eq!(
        r.reason,
        "gpudoctor: could not run: bad settings: GPUDOCTOR_ON_ERROR=leeve: expected drain or leave"
    );
    assert_eq!(r.job, "PENDING held=yes started=no");
    let r = run(
        bin,
        &[("CLUSTER_SETTINGS", "GPUDOCTOR_ARGS=--expect /etc/x.json")],
        &healthy,
    );
    assert!(
        r.reason.ends_with(
            ": GPUDOCTOR_ARGS: unexpected '/etc/x.json' after the value (quote a value with spaces)"
        ),
        "{}",
        r.reason
    );
}

/// GPUDOCTOR_TIMEOUT above what slurmd allows a health check is lowered to 50 s, logged (the
/// stand-in records the budget it was given); a Prolog keeps its own.
#[test]
fn slurm_timeout_is_held_under_slurmds_kill() {
    if !have_slurm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let args = dir.path().join("args");
    let bin = stand_in(
        &dir,
        "gpudoctor",
        &format!("echo \"$*\" >{}", args.display()),
    );
    let r = run(&bin, &[("GPUDOCTOR_TIMEOUT", "120")], &["--root", "x"]);
    assert_eq!(r.state, "idle");
    assert!(
        r.log.contains("GPUDOCTOR_TIMEOUT=120 is more than a health check may take (slurmd kills it at 60 s; the backstop adds 5 s): using 50"),
        "{}",
        r.log
    );
    let got = std::fs::read_to_string(&args).unwrap();
    assert!(got.contains("--time-budget 45 "), "{got}");
    let r = run(
        &bin,
        &[("GPUDOCTOR_TIMEOUT", "120"), ("GPUDOCTOR_MODE", "prolog")],
        &["--root", "x"],
    );
    assert_eq!(r.job, "COMPLETED held=no started=yes");
    let got = std::fs::read_to_string(&args).unwrap();
    assert!(got.contains("--time-budget 115 "), "{got}");
}

/// How gpudoctor ended is told apart: SIGKILL from elsewhere (the OOM killer) is not the
/// backstop; a gpudoctor that ignores SIGTERM is killed by the backstop 5 s later; a crash names
/// its signal.
#[test]
fn slurm_exit_causes_are_told_apart() {
    if !have_slurm() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = ["--root", "fixtures/pcie-2socket-roce"];
    let oom = stand_in(&dir, "oom", "kill -KILL $$");
    let r = run(&oom, &[], &root);
    assert!(r.state.starts_with("drain"), "state {}", r.state);
    assert!(
        r.reason
            .starts_with("gpudoctor: could not run: killed by SIGKILL after ")
            && r.reason
                .ends_with("s, not by the backstop (the kernel's OOM killer? see dmesg)"),
        "{}",
        r.reason
    );
    let deaf = stand_in(&dir, "deaf", "trap '' TERM\nsleep 30");
    let r = run(&deaf, &[("GPUDOCTOR_TIMEOUT", "2")], &root);
    assert_eq!(
        r.reason,
        "gpudoctor: could not run: killed at GPUDOCTOR_TIMEOUT=2s (the backstop, SIGKILL after SIGTERM was ignored): its own --time-budget of 1s did not end it"
    );
    // In its own directory, so that a core it dumps lands there, not in the repository.
    let segv = stand_in(&dir, "segv", "cd \"$(dirname \"$0\")\" && kill -SEGV $$");
    let r = run(&segv, &[], &root);
    assert!(
        r.reason
            .starts_with("gpudoctor: could not run: crashed: killed by SIGSEGV after "),
        "{}",
        r.reason
    );
}

/// --level 1 in the settings: the probes run on an idle node (replayed from the recorded H200
/// pair), and a node with a job running is checked at level 0 instead, logged.
#[test]
fn slurm_probes_only_on_an_idle_node() {
    if !have_slurm() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_gpudoctor");
    let tree = ["--root", "fixtures/h200x2-live"];
    let r = run(bin, &[("GPUDOCTOR_ARGS", "--level 1")], &tree);
    assert_eq!(r.level, "1");
    let r = run(
        bin,
        &[("GPUDOCTOR_ARGS", "--level 1"), ("CLUSTER_BUSY", "1")],
        &tree,
    );
    assert_eq!(r.state, "allocated");
    assert_eq!(r.level, "0");
    assert!(
        r.log.contains(": level 0 instead of --level 1 (no probes)"),
        "{}",
        r.log
    );
}

/// `probe nccl --ranks slurm` started by a real `srun` (two tasks of one job step on the
/// one-node cluster): each task takes its rank from Slurm's own variables and rank 0's host from
/// the step's node list, the two meet over the authenticated rendezvous, and on this machine
/// (no GPU, no libnccl) both end in the same reasoned skip: rank 0 prints the merged report,
/// rank 1 says it reported to rank 0, exit 0 on both.
#[test]
fn slurm_srun_starts_nccl_ranks() {
    if !have_slurm() {
        return;
    }
    let bin = env!("CARGO_BIN_EXE_gpudoctor");
    let cmd = format!("{bin} probe nccl --ranks slurm --json --rendezvous-timeout 60");
    let o = Command::new(repo().join("tests/slurm/cluster.sh"))
        .arg(bin)
        .env("CLUSTER_SRUN", &cmd)
        .env("GPUDOCTOR_TOKEN", "a-shared-secret-of-the-job")
        .args(["--root", "fixtures/pcie-2socket-roce"])
        .current_dir(repo())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("srun_rc=0"), "{out}");
    let task = |n: u32| -> String {
        out.lines()
            .filter_map(|l| l.strip_prefix("srun="))
            .filter_map(|l| l.trim_start().strip_prefix(&format!("{n}: ")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let r0: serde_json::Value = serde_json::from_str(&task(0))
        .unwrap_or_else(|e| panic!("rank 0 printed no report ({e}): {out}"));
    assert_eq!(r0["mode"], "cluster", "{r0:#}");
    assert_eq!(r0["status"], "skip", "{r0:#}");
    assert_eq!(r0["cluster"]["launcher"], "slurm", "{r0:#}");
    assert_eq!(r0["cluster"]["world_size"], 2, "{r0:#}");
    assert!(
        task(1).contains("rank 1 reported to rank 0"),
        "rank 1: {}\n{out}",
        task(1)
    );
}

/// Report only (GPUDOCTOR_REPORT_ONLY=1 in the settings file, for canaries): a faulty node is
/// neither drained nor its job held; the script logs the reason it would have used, and the
/// kept report says what the exit code would have been. The same node without the setting is
/// drained (slurm_health_check_drains_faulty_nodes_only, slurm_prolog_requeues_the_job_and_drains).
#[test]
fn slurm_report_only_never_drains_or_holds() {
    if !have_slurm() {
        return;
    }
    let faulty = [
        "--bundle",
        "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz",
    ];
    let would = "gpudoctor: rdma.port-state mlx5_2/1 [reseat] port not usable: state 1: DOWN, physical state 3: Disabled";
    let r = run(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("CLUSTER_SETTINGS", "GPUDOCTOR_REPORT_ONLY=1")],
        &faulty,
    );
    assert_eq!(r.state, "idle", "report only: not drained ({})", r.log);
    assert_eq!(r.reason, "");
    assert_eq!(r.report, "kept");
    assert!(
        r.log
            .contains("report only (GPUDOCTOR_REPORT_ONLY=1): would drain "),
        "{}",
        r.log
    );
    assert!(
        r.log.contains(would),
        "the reason it would have used: {}",
        r.log
    );

    // As a Prolog: the job runs, and the log says it would have been held.
    let r = run(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[
            ("GPUDOCTOR_MODE", "prolog"),
            ("CLUSTER_SETTINGS", "GPUDOCTOR_REPORT_ONLY=1"),
        ],
        &faulty,
    );
    assert!(!r.state.starts_with("drain"), "state {}", r.state);
    assert_eq!(r.reason, "");
    assert_eq!(r.job, "COMPLETED held=no started=yes");
    assert!(r.log.contains(would), "{}", r.log);
    assert!(r.log.contains("would hold job"), "{}", r.log);

    // A bad value is a settings error: fail closed, drained.
    let r = run(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[("CLUSTER_SETTINGS", "GPUDOCTOR_REPORT_ONLY=yes")],
        &["--root", "fixtures/pcie-2socket-roce"],
    );
    assert!(r.state.starts_with("drain"), "state {}", r.state);
    assert!(
        r.reason
            .contains("bad settings: GPUDOCTOR_REPORT_ONLY=yes: expected 0 or 1"),
        "{}",
        r.reason
    );
}
