//! Resolution of every command, end to end from argv (clap) to `Config`.

use super::*;
use crate::rdma::request::write_bw::Role;
use clap::Parser;
use std::time::Duration;

fn resolve(argv: &[&str], env: &Env) -> Result<Config> {
    let mut full = vec!["gpudoctor"];
    full.extend_from_slice(argv);
    Config::resolve(Args::try_parse_from(full).expect("parses"), env)
}

fn err(argv: &[&str]) -> String {
    format!("{:#}", resolve(argv, &Env::default()).unwrap_err())
}

#[test]
fn the_environment_is_read_only_through_env() {
    let env = Env {
        stdout_width: Some(99),
        columns: None,
        no_color: false,
        stderr_is_terminal: true,
        cuda_homes: vec![PathBuf::from("/opt/cuda")],
        token: Some("s3cret".into()),
        test_slow_read: Some(("/probes/h2d.json".into(), Duration::from_secs(3))),
        today: Some("2026-07-01".into()),
        report_only: true,
    };
    let c = resolve(&["check", "--level", "1"], &env).unwrap();
    assert_eq!(c.width, Some(99));
    let Action::Check(o) = c.action else {
        panic!("check")
    };
    assert_eq!(o.probe.cuda_homes, vec![PathBuf::from("/opt/cuda")]);
    assert!(o.probe.progress);
    assert!(o.color, "a terminal gets colour");
    assert_eq!(
        o.test_slow_read,
        Some(("/probes/h2d.json".into(), Duration::from_secs(3)))
    );
    assert_eq!(o.time_budget, None);
    assert!(o.report_only, "GPUDOCTOR_REPORT_ONLY");
    assert_eq!(
        o.overrides.today.as_deref(),
        Some("2026-07-01"),
        "today from Env"
    );
    let c = resolve(&["check", "--time-budget", "2.5"], &env).unwrap();
    let Action::Check(o) = c.action else {
        panic!("check")
    };
    assert_eq!(o.time_budget, Some(Duration::from_millis(2500)));
    let c = resolve(&["check", "--color", "never"], &env).unwrap();
    let Action::Check(o) = c.action else {
        panic!("check")
    };
    assert!(!o.color);
    let no_color = Env {
        no_color: true,
        columns: Some(80),
        ..env.clone()
    };
    let c = resolve(&["check"], &no_color).unwrap();
    assert_eq!(c.width, Some(80), "COLUMNS wins over the terminal's width");
    let Action::Check(o) = c.action else {
        panic!("check")
    };
    assert!(!o.color, "NO_COLOR");
    // Progress lines are for a person: never with machine output, even on a terminal.
    let c = resolve(&["check", "--level", "1", "--json"], &env).unwrap();
    let Action::Check(o) = c.action else {
        panic!("check")
    };
    assert!(!o.probe.progress);
    let c = resolve(&["probe", "h2d", "--json"], &env).unwrap();
    let Action::Probe { options, .. } = c.action else {
        panic!("probe")
    };
    assert!(!options.progress);
    let c = resolve(&["check", "--color", "always"], &Env::default()).unwrap();
    let Action::Check(o) = c.action else {
        panic!("check")
    };
    assert!(o.color, "--color always, even in a pipe");
    let c = resolve(&["probe", "write-bw", "-d", "mlx5_0", "--peer", "h"], &env).unwrap();
    let Action::WriteBw(w) = c.action else {
        panic!("write-bw")
    };
    assert_eq!(
        w.request.role,
        Role::Client {
            peer: "h".into(),
            token: "s3cret".into()
        }
    );
}

#[test]
fn usage_errors_are_found_before_anything_runs() {
    assert!(err(&["check", "--deny", "pcie.acs-redirekt"]).contains("unknown check id"));
    assert!(err(&["probe", "h2d", "--size", "1000"]).contains("at least 1 MiB"));
    assert!(err(&["--root", "/x", "probe", "h2d"]).contains("probes measure the live"));
    assert!(
        err(&["--root", "/x", "list"])
            .contains("apply to topo, check, bundle, baseline and export")
    );
    assert!(err(&["--root", "/x", "topo", "--bundle", "b"]).contains("given twice"));
    assert!(err(&["check", "--deny", "gpu.bar1", "--skip", "gpu.bar1"]).contains("at most one"));
    assert!(
        err(&["bundle", "-o", "x", "--redact-key-file", "/nonexistent"])
            .contains("cannot read the key")
    );
    assert!(err(&["probe", "write-bw", "-d", "x", "--peer", "h"]).contains("--token"));
    assert!(err(&["probe", "write-bw", "-d", "x", "--sizes", "0"]).contains("write-bw"));
}

#[test]
fn level3_options() {
    use crate::rdma::request::gdr::{GdrRequest, GpuSelect, GpuSide};
    use crate::report::rdma::gdr::GdrMode;
    let env = Env::default();
    let gdr = |argv: &[&str]| match resolve(argv, &env).unwrap().action {
        Action::WriteBw(w) => w.gdr,
        _ => panic!("write-bw"),
    };
    assert_eq!(gdr(&["probe", "write-bw", "-d", "mlx5_0"]), None);
    assert_eq!(
        gdr(&["probe", "write-bw", "--gpu", "3"]),
        Some(GdrRequest {
            gpu: GpuSelect::One(3),
            mode: GdrMode::Auto,
            gpu_side: GpuSide::Both,
            repeat: 1,
            device_given: false,
        })
    );
    let g = gdr(&[
        "probe",
        "write-bw",
        "--gpu",
        "auto",
        "-d",
        "mlx5_1",
        "--gdr",
        "peermem",
        "--gpu-side",
        "target",
        "--repeat",
        "5",
    ])
    .unwrap();
    assert_eq!(
        (g.gpu, g.mode, g.gpu_side, g.repeat, g.device_given),
        (GpuSelect::Auto, GdrMode::Peermem, GpuSide::Target, 5, true)
    );
    // --gdr without --gpu: host memory through the level-3 path.
    assert_eq!(
        gdr(&["probe", "write-bw", "-d", "rxe0", "--gdr", "dmabuf"]).map(|g| g.gpu),
        Some(GpuSelect::Host)
    );
    assert!(err(&["probe", "write-bw", "-d", "x", "--repeat", "3"]).contains("--repeat"));
    assert!(
        err(&[
            "probe",
            "write-bw",
            "--gpu",
            "0",
            "--gpu-side",
            "source",
            "--peer",
            "h",
            "--token",
            "t"
        ])
        .contains("--gpu-side is for loopback")
    );
    assert!(
        err(&[
            "probe",
            "write-bw",
            "--gpu",
            "auto",
            "--format",
            "prometheus"
        ])
        .contains("use --gpu N")
    );
    assert!(
        err(&[
            "probe", "write-bw", "--gpu", "auto", "--serve", "--token", "t"
        ])
        .contains("two-node mode takes one GPU")
    );
    // clap refuses these before resolution.
    for argv in [
        &["gpudoctor", "probe", "write-bw"][..],
        &["gpudoctor", "probe", "write-bw", "--gpu", "x"],
        &[
            "gpudoctor",
            "probe",
            "write-bw",
            "-d",
            "x",
            "--gpu-side",
            "both",
        ],
        &["gpudoctor", "check", "--level", "5"],
    ] {
        assert!(Args::try_parse_from(argv).is_err(), "{argv:?}");
    }
}

#[test]
fn gpu_write_bw_options() {
    use crate::rdma::request::gdr::GpuSelect;
    use crate::report::rdma::gpu_write_bw::NicHandler;
    let env = Env::default();
    let c = |argv: &[&str]| match resolve(argv, &env).unwrap().action {
        Action::GpuWriteBw(w) => w,
        _ => panic!("gpu-write-bw"),
    };
    let d = c(&["probe", "gpu-write-bw"]);
    assert_eq!(d.request.gpu, GpuSelect::Auto);
    assert_eq!(d.request.device, None);
    assert_eq!(d.request.sizes, vec![64, 256, 1024, 4096]);
    assert_eq!((d.request.iters, d.request.writes_per_iter), (2048, 512));
    assert_eq!(d.request.handler, NicHandler::Auto);
    let g = c(&[
        "probe",
        "gpu-write-bw",
        "--gpu",
        "2",
        "-d",
        "mlx5_3",
        "--port",
        "2",
        "--nic-handler",
        "cpu-proxy",
        "--sizes",
        "64,128",
        "--validate",
        "--fail-on-skip",
    ]);
    assert_eq!(g.request.gpu, GpuSelect::One(2));
    assert_eq!(g.request.device.as_deref(), Some("mlx5_3"));
    assert_eq!(g.request.port, 2);
    assert_eq!(g.request.handler, NicHandler::CpuProxy);
    assert!(g.request.validate && g.fail_on_skip);
    let err = |argv: &[&str]| format!("{:#}", resolve(argv, &env).unwrap_err());
    assert!(err(&["probe", "gpu-write-bw", "--writes-per-iter", "3"]).contains("power of two"));
    assert!(err(&["--root", "r", "probe", "gpu-write-bw"]).contains("probes measure the live"));
}

#[test]
fn sources() {
    let env = Env::default();
    assert_eq!(resolve(&["topo"], &env).unwrap().source, SourceSpec::Live);
    assert_eq!(
        resolve(&["--bundle", "b.tgz", "topo"], &env)
            .unwrap()
            .source,
        SourceSpec::Bundle("b.tgz".into())
    );
    assert_eq!(
        resolve(&["topo", "--root", "/t"], &env).unwrap().source,
        SourceSpec::Root("/t".into())
    );
    assert_eq!(
        resolve(&["--root", "/t", "bundle", "-o", "x"], &env)
            .unwrap()
            .source,
        SourceSpec::Root("/t".into())
    );
}

fn check_options(argv: &[&str], env: &Env) -> Box<CheckOptions> {
    match resolve(argv, env).unwrap().action {
        Action::Check(o) => o,
        other => panic!("{other:?}"),
    }
}

#[test]
fn report_only_from_the_flag_or_the_environment() {
    assert!(!check_options(&["check"], &Env::default()).report_only);
    assert!(check_options(&["check", "--report-only"], &Env::default()).report_only);
    for (word, on) in [
        ("1", true),
        ("true", true),
        ("YES", true),
        ("on", true),
        ("0", false),
        ("no", false),
        ("2", false),
        ("", false),
    ] {
        assert_eq!(report_only_word(word), on, "{word:?}");
    }
}

#[test]
fn skip_takes_a_check_or_one_subject_of_it() {
    let o = check_options(
        &[
            "check",
            "--skip",
            "pcie.aer:0000:17:00.0",
            "--skip",
            "rdma.port-state:mlx5_3/1",
            "--skip",
            "gpu.ecc",
        ],
        &Env::default(),
    );
    assert_eq!(o.overrides.skip, vec![crate::checks::CheckId::GpuEcc]);
    let s: Vec<(String, String)> = o
        .overrides
        .silences
        .iter()
        .map(|s| (s.id.to_string(), s.subject.clone()))
        .collect();
    assert_eq!(
        s,
        [
            ("pcie.aer".to_string(), "0000:17:00.0".to_string()),
            ("rdma.port-state".to_string(), "mlx5_3/1".to_string())
        ]
    );
    assert!(
        err(&["check", "--skip", "pcie.aerr:0000:17:00.0"])
            .contains("unknown check id pcie.aerr (did you mean pcie.aer?)")
    );
    assert!(err(&["check", "--skip", "pcie.aer:"]).contains("names no subject"));
    assert!(
        err(&[
            "check",
            "--skip",
            "pcie.aer",
            "--skip",
            "pcie.aer:0000:17:00.0"
        ])
        .contains("already leaves every subject of pcie.aer unjudged")
    );
    // --deny of a check and a silence of one of its subjects do not contradict each other.
    let o = check_options(
        &[
            "check",
            "--deny",
            "pcie.aer",
            "--skip",
            "pcie.aer:0000:17:00.0",
        ],
        &Env::default(),
    );
    assert_eq!(o.overrides.silences.len(), 1);
}
