//! deploy/slurm/gpudoctor-healthcheck on a real one-machine Slurm cluster (Debian slurm-wlm and
//! munge: munged, slurmctld and slurmd on localhost, started by tests/slurm/cluster.sh): a
//! faulty recorded tree ends DRAIN with the failing check ids as the reason, a healthy one
//! stays IDLE, and a gpudoctor that cannot run (exit 2) changes nothing. Fails (rather than
//! skips) when GPUDOCTOR_REQUIRE_SLURM=1 and Slurm is missing; scripts/test installs it.

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
    let o = Command::new(repo().join("tests/slurm/cluster.sh"))
        .arg(env!("CARGO_BIN_EXE_gpudoctor"))
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
    (field("state"), field("reason"), field("report"))
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
    assert_eq!(
        reason,
        "gpudoctor: gpu.ecc,gpu.row-remap,gpu.p2p,gpu.nvlink-down"
    );
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
