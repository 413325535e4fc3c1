//! deploy/slurm/gpudoctor-healthcheck on a real one-machine Slurm cluster (Debian slurm-wlm and
//! munge: munged, slurmctld and slurmd on localhost, started by tests/slurm/cluster.sh): as a
//! health check, a faulty recorded tree ends DRAIN with a reason naming each failure and what
//! was seen, a healthy one stays IDLE, the gate's failures say so, a gpudoctor that cannot run
//! changes nothing (or drains with GPUDOCTOR_ON_ERROR=drain), and one that runs past
//! GPUDOCTOR_TIMEOUT is cut with a reason; as a Prolog, a faulty node is drained and the job
//! requeued held before it starts, and a healthy node runs it. Fails (rather than skips) when
//! GPUDOCTOR_REQUIRE_SLURM=1 and Slurm is missing; scripts/test installs it.

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
    let (state, reason, report, _) = cluster_with(env!("CARGO_BIN_EXE_gpudoctor"), &[], args);
    (state, reason, report)
}

/// The cluster with the script's settings in `env`; also the job line in prolog mode.
fn cluster_with(
    bin: &str,
    env: &[(&str, &str)],
    args: &[&str],
) -> (String, String, String, String) {
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
    (
        field("state"),
        field("reason"),
        field("report"),
        field("job"),
    )
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

    // gpudoctor cannot run (exit 2): nothing destructive.
    let (state, reason, report) = cluster(&["--root", "fixtures/does-not-exist"]);
    assert_eq!(state, "idle");
    assert_eq!(reason, "");
    assert_eq!(report, "missing");
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
        reason,
        "gpudoctor: not finished: time budget of 3 s spent during discovery, 35 not judged"
    );
    assert_eq!(report, "kept", "the budget, not the kill, ended the run");
    assert!(t0.elapsed().as_secs() < 50);

    let (state, reason, report, _) = cluster_with(
        env!("CARGO_BIN_EXE_gpudoctor"),
        &[slow, ("GPUDOCTOR_TIMEOUT", "4")],
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
        reason.starts_with(
            "gpudoctor: time budget of 3 s spent during discovery, 35 not judged; gate: 35 could not be judged (--fail-on-skip): "
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
