//! Exit codes, stdout/stderr separation and clear errors.

use crate::gpudoctor;

/// `gpudoctor topo --root ROOT` fails as gpudoctor itself: exit 2, nothing on stdout, one
/// `gpudoctor: error:` line on stderr, which is returned.
fn topo_root_error(root: &std::path::Path) -> String {
    let out = gpudoctor()
        .args(["topo", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("gpudoctor: error:"), "{err}");
    err
}

#[test]
fn missing_root_is_exit_2_with_one_line() {
    let err = topo_root_error(std::path::Path::new("/nonexistent/tree"));
    assert!(err.contains("/nonexistent/tree"), "{err}");
}

#[test]
fn empty_tree_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let err = topo_root_error(d.path());
    assert!(err.contains("no sys/"), "{err}");
    // A sys/ without a PCI bus is also not a tree we can map.
    std::fs::create_dir_all(d.path().join("sys")).unwrap();
    let err = topo_root_error(d.path());
    assert!(err.contains("/sys/bus/pci/devices"), "{err}");
}

#[test]
fn corrupt_nvml_json_is_exit_2() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(d.path().join("sys/bus/pci/devices")).unwrap();
    std::fs::write(d.path().join("nvml.json"), "{not json").unwrap();
    let err = topo_root_error(d.path());
    assert!(err.contains("nvml.json"), "{err}");
}

#[test]
fn usage_error_is_exit_2() {
    let out = gpudoctor().args(["topo", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn live_run_never_panics() {
    // This machine may have no GPU, no driver and no RDMA stack: still exit 0 with a topology.
    let out = gpudoctor().args(["topo", "--json"]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "gpudoctor.topo/1");
    assert_eq!(v["source"]["kind"], "live");
}

/// Without CUDA (this machine, CI) every probe is a clean skip: exit 0, the reason on stdout,
/// nothing on stderr, no panic. On a machine with CUDA the probe runs instead; then only the
/// exit code convention is checked.
#[test]
fn probe_without_cuda_is_a_clean_skip() {
    for probe in ["h2d", "d2h", "p2p", "dmabuf-export"] {
        let out = gpudoctor()
            .args(["probe", probe, "--json"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{stderr}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["schema"], "gpudoctor.probe-runs/1");
        assert_eq!(doc["runs"].as_array().map(Vec::len), Some(1), "{doc}");
        let v = &doc["runs"][0];
        assert_eq!(v["schema"], "gpudoctor.probe/2");
        assert_eq!(v["probe"], probe);
        if v["skipped"].is_string() {
            assert_eq!(out.status.code(), Some(0), "{stderr}");
            assert_eq!(v["status"], "skip");
            assert!(stderr.is_empty(), "{stderr}");
            let table = gpudoctor().args(["probe", probe]).output().unwrap();
            assert_eq!(table.status.code(), Some(0));
            let text = String::from_utf8(table.stdout).unwrap();
            assert!(text.contains("status: skip: "), "{text}");
        } else {
            assert!(matches!(out.status.code(), Some(0) | Some(1)), "{stderr}");
        }
    }
}

#[test]
fn probe_rejects_bad_sizes_and_replay_roots() {
    let out = gpudoctor()
        .args(["probe", "h2d", "--size", "1000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size 1000"));
    // Probes do not offer --root/--bundle; before the subcommand they are refused clearly.
    let out = gpudoctor()
        .args(["probe", "h2d", "--root", "fixtures/h200x2-vm"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unexpected argument '--root'"));
    let out = gpudoctor()
        .args(["--root", "fixtures/h200x2-vm", "probe", "h2d"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("live machine"));
    let out = gpudoctor().args(["probe", "nvme"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// `list`, `explain` and the probes do not offer --root/--bundle (they would ignore them);
/// `probe dmabuf-export` does not offer the copy options it does not use.
#[test]
fn options_are_offered_only_where_they_work() {
    for argv in [
        &["list", "--root", "fixtures/h200x2-vm"][..],
        &["explain", "gpu.bar1", "--bundle", "x.tar.gz"],
        &[
            "probe",
            "write-bw",
            "-d",
            "mlx5_0",
            "--root",
            "fixtures/h200x2-vm",
        ],
        &["probe", "dmabuf-export", "--size", "1048576"],
        &["probe", "dmabuf-export", "--iters", "3"],
    ] {
        let out = gpudoctor().args(argv).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{argv:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("unexpected argument"),
            "{argv:?}"
        );
    }
    let out = gpudoctor()
        .args(["--root", "fixtures/h200x2-vm", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("apply to topo, check, bundle, baseline and export")
    );
    // Contradictory overrides are refused, not settled silently.
    let out = gpudoctor()
        .args([
            "check",
            "--root",
            "fixtures/h200x2-vm",
            "--deny",
            "gpu.bar1",
            "--skip",
            "gpu.bar1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--deny gpu.bar1 and --skip gpu.bar1"));
}

/// A gate must not pass a node that proves nothing: a probe that could not run exits 1 with
/// --fail-on-skip (0 without).
#[test]
fn fail_on_skip_fails_a_probe_that_proved_nothing() {
    for argv in [
        &["probe", "h2d", "--fail-on-skip"][..],
        &["probe", "write-bw", "-d", "mlx5_0", "--fail-on-skip"],
    ] {
        let out = gpudoctor()
            .env("LD_LIBRARY_PATH", "/nonexistent")
            .args(argv)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        if stdout.contains("skip") {
            assert_eq!(out.status.code(), Some(1), "{argv:?}: {stdout}");
            let without: Vec<&str> = argv
                .iter()
                .copied()
                .filter(|a| *a != "--fail-on-skip")
                .collect();
            let out = gpudoctor().args(&without).output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{without:?}");
        }
    }
}

#[test]
fn completions_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F _gpudoctor"),
        ("zsh", "#compdef gpudoctor"),
        ("fish", "complete -c gpudoctor"),
    ] {
        let out = gpudoctor().args(["completions", shell]).output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains(marker), "{shell}");
        assert!(
            text.contains("write-bw") && text.contains("fail-on-skip"),
            "{shell}"
        );
    }
}

/// The check report for a person: failures first, the verdict named last, at most 100 columns
/// in a pipe (COLUMNS narrows it) except for words that cannot be broken, colour only when
/// asked for or on a terminal, `--quiet` only the verdict.
#[test]
fn check_text_reads_at_a_glance() {
    let bundle = "fixtures/variants/hgx-h100-8gpu--acs-redirect/bundle.tar.gz";
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut c = gpudoctor();
        c.args(["check", "--bundle", bundle]).args(extra);
        for (k, v) in env {
            c.env(k, v);
        }
        let out = c.output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&[], &[]);
    let lines: Vec<&str> = text.lines().collect();
    // The first finding shown is a failure; passes come after every fail and warn.
    let first = lines.iter().position(|l| l.starts_with("FAIL ")).unwrap();
    let first_pass = lines.iter().position(|l| l.starts_with("PASS ")).unwrap();
    let last_warn = lines
        .iter()
        .rposition(|l| l.starts_with("WARN pcie"))
        .unwrap();
    assert!(first < first_pass && last_warn < first_pass, "{text}");
    assert_eq!(first, 2, "{text}");
    let tail = &lines[lines.len() - 3..];
    assert_eq!(
        tail[0],
        "FAIL  pcie.acs-redirect on 0000:5d:00.0, 0000:5d:03.0"
    );
    assert_eq!(tail[1], "WARN  pcie.link-speed on 0000:c3:00.0");
    assert!(
        tail[2].starts_with("Result: FAIL: 354 pass, 1 warn, 2 fail"),
        "{}",
        tail[2]
    );
    assert!(!text.contains('\x1b'), "no colour in a pipe");
    for (width, t) in [(100, text.clone()), (80, run(&[], &[("COLUMNS", "80")]))] {
        for l in t.lines().filter(|l| l.chars().count() > width) {
            // Only a line that is one unbreakable word after its indent may be longer.
            let words: Vec<&str> = l.split_whitespace().collect();
            assert!(
                words.iter().any(|w| w.chars().count() > width - 10),
                "line over {width} columns: {l}"
            );
        }
    }
    let quiet = run(&["--quiet"], &[]);
    assert_eq!(
        quiet.lines().collect::<Vec<_>>(),
        tail,
        "--quiet is the verdict only"
    );
    let colored = run(&["--quiet", "--color", "always"], &[]);
    assert!(colored.contains("\x1b[1;31mFAIL\x1b[0m"), "{colored}");
    let never = run(&["--quiet", "--color", "never"], &[("NO_COLOR", "1")]);
    assert!(!never.contains('\x1b'));
}

/// `check --fail-on-skip` is a gate: a node where something that should have been judged was
/// not (not root here) exits 1, and says so in the header; a node where every applicable check
/// was judged exits as it would without the switch; skips of what does not exist do not count.
#[test]
fn fail_on_skip_gates_a_node_that_proved_nothing() {
    let run = |src: &[&str], extra: &[&str]| {
        let out = gpudoctor()
            .arg("check")
            .args(src)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    };
    let nonroot = [
        "--bundle",
        "fixtures/variants/pcie-2socket-roce--nonroot/bundle.tar.gz",
    ];
    let (code, text) = run(&nonroot, &[]);
    assert_eq!(code, 0, "warnings only: passes without the gate");
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .starts_with("not root: 18 findings could not be judged"),
        "{text}"
    );
    assert!(text.contains("18 could not be judged"), "{text}");
    assert_eq!(run(&nonroot, &["--fail-on-skip"]).0, 1);
    // Every applicable check judged (the HGX fixture): the gate changes nothing.
    assert_eq!(
        run(&["--root", "fixtures/hgx-h100-8gpu"], &["--fail-on-skip"]).0,
        0
    );
    // No RDMA device on a GPU-only node is not a gap, nor AER counters the guest kernel does
    // not keep (the status registers in config space are read instead); the facts this
    // recording predates are (kernel log, clock event reasons, NVLink error counters, fabric
    // state), until skipped by request.
    let h200 = ["--root", "fixtures/h200x2-live"];
    assert_eq!(run(&h200, &["--fail-on-skip"]).0, 1);
    let mut skips = vec!["--fail-on-skip"];
    for id in ["gpu.xid", "gpu.throttle", "gpu.nvlink-errors", "gpu.fabric"] {
        skips.extend(["--skip", id]);
    }
    assert_eq!(run(&h200, &skips).0, 0);
    // The JSON says why each skip is one.
    let (_, json) = run(&h200, &["--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let kind = |id: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["id"] == id)
            .unwrap()["skip"]
            .clone()
    };
    assert_eq!(kind("rdma.port-state"), "not-applicable");
    assert_eq!(kind("pcie.aer"), serde_json::Value::Null, "AER judged: {v}");
    assert_eq!(kind("gpu.xid"), "unknown");
    // 2 GPUs x 4 facts not recorded in this 2025 capture.
    assert_eq!(v["summary"]["unjudged"], 8);
}

/// `--skip ID` is one line, not a block of evidence per subject, and is not counted as
/// "could not be judged"; the result line counts findings.
#[test]
fn skipped_by_request_is_one_line_and_not_unjudged() {
    let out = gpudoctor()
        .args([
            "check",
            "--root",
            "fixtures/hgx-h100-8gpu",
            "--skip",
            "gpu.ecc",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.matches("gpu.ecc").count(), 1, "{text}");
    assert!(
        text.contains("not judged, as asked (--skip): gpu.ecc (8)"),
        "{text}"
    );
    let last = text.lines().last().unwrap();
    assert!(last.ends_with("(358 findings)."), "{last}");
    assert!(!text.contains("could not be judged"), "{text}");
}

/// One gate: when `--strict` or `--fail-on-skip` decides the exit code, the text's last line,
/// the JSON's `status` and `gate`, JUnit and Prometheus all say the same verdict (a pipeline
/// reading any of them sees what the exit code says), and without the flags nothing changes.
#[test]
fn gate_verdict_is_the_same_in_every_output() {
    let run = |src: &[&str], extra: &[&str]| {
        let out = gpudoctor()
            .arg("check")
            .args(src)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    };
    let nonroot = [
        "--bundle",
        "fixtures/variants/pcie-2socket-roce--nonroot/bundle.tar.gz",
    ];
    for (flags, code, status, reason) in [
        (&[][..], 0, "warn", None),
        (
            &["--fail-on-skip"][..],
            1,
            "fail",
            Some("could not be judged (--fail-on-skip)"),
        ),
        (&["--strict"][..], 1, "fail", Some("(--strict)")),
    ] {
        let (c, text) = run(&nonroot, flags);
        assert_eq!(c, code, "{flags:?}");
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with(&format!("Result: {}", status.to_uppercase())),
            "{flags:?}: {last}"
        );
        assert_eq!(last.contains("(gate)"), reason.is_some(), "{last}");
        let (c, json) = run(&nonroot, &[flags, &["--json"]].concat());
        assert_eq!(c, code);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["status"], status, "{flags:?}");
        assert_eq!(v["gate"]["findings_status"], "warn");
        let reasons = v["gate"]["reasons"].as_array().unwrap();
        match reason {
            Some(r) => assert!(
                reasons.iter().any(|x| x.as_str().unwrap().contains(r)),
                "{reasons:?}"
            ),
            None => assert!(reasons.is_empty()),
        }
        let (c, prom) = run(&nonroot, &[flags, &["--format", "prometheus"]].concat());
        assert_eq!(c, code);
        assert!(
            prom.contains(&format!("gpudoctor_status{{status=\"{status}\"}} 1")),
            "{prom}"
        );
        let (c, xml) = run(&nonroot, &[flags, &["--format", "junit"]].concat());
        assert_eq!(c, code);
        let doc = roxmltree::Document::parse(&xml).unwrap();
        let failures: u64 = doc
            .root_element()
            .attribute("failures")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(failures > 0, code == 1, "{flags:?}: {xml}");
    }
}

/// Every usage error is one line `gpudoctor: error: ...` on stderr, exit 2, nothing on stdout,
/// with a hint: clap's suggestion where it has one, else the command's help; `gpudoctor help
/// [COMMAND...]` is `--help` (exit 0); `explain` suggests the nearest check id.
#[test]
fn usage_errors_are_one_line_with_a_hint() {
    let cases: &[(&[&str], &str)] = &[
        (&["chek"], "(a similar subcommand exists: 'check')"),
        (
            &["check", "--levle", "1"],
            "(a similar argument exists: '--level')",
        ),
        (&["check", "--level", "9"], "9 is not in 0..=4"),
        (
            &["probe", "h2d", "--root", "F"],
            "(see `gpudoctor help probe h2d`)",
        ),
        (
            &["probe"],
            "`gpudoctor probe` needs a command (see `gpudoctor help probe`)",
        ),
        (&[], "`gpudoctor` needs a command (see `gpudoctor help`)"),
        (
            &["explain", "acs"],
            "no check 'acs' (did you mean pcie.acs-redirect?)",
        ),
    ];
    for (args, want) in cases {
        let o = gpudoctor().args(*args).output().unwrap();
        let err = String::from_utf8(o.stderr).unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("gpudoctor: error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    for args in [&["help"][..], &["help", "probe", "h2d"], &["help", "check"]] {
        let o = gpudoctor().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let out = String::from_utf8(o.stdout).unwrap();
        assert!(out.contains("Usage: gpudoctor"), "{args:?}: {out}");
    }
}

/// The level-4 harness answers --help and --version without CUDA (this machine has none).
#[test]
fn harness_help_needs_no_gpu() {
    for (arg, want) in [
        (
            "--help",
            "gpudoctor-mlx5-kernel: the level-4 CUDA kernel's test harness",
        ),
        ("--version", "gpudoctor-mlx5-kernel 0.1.0"),
    ] {
        for args in [
            vec![arg],
            vec!["build", arg],
            vec!["emulate", "--gpu", "0", arg],
        ] {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpudoctor-mlx5-kernel"))
                .args(&args)
                .output()
                .unwrap();
            assert_eq!(o.status.code(), Some(0), "{args:?}");
            assert!(
                String::from_utf8_lossy(&o.stdout).starts_with(want),
                "{args:?}"
            );
        }
    }
    // Usage errors are answered before CUDA is looked for: one line, exit 2, no CUDA message.
    for args in [
        &["bogus"][..],
        &[],
        &["bench", "--iters", "x"],
        &["build", "--frob", "1"],
    ] {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_gpudoctor-mlx5-kernel"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(!err.to_lowercase().contains("cuda"), "{args:?}: {err}");
    }
}

/// `check --report FILE` and `--textfile DIR` replace only regular files, as `bundle -o` does: a
/// directory (or device node, FIFO, symlink) at the path is refused, exit 2, one line.
#[test]
fn report_and_textfile_replace_only_regular_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    std::fs::create_dir(tmp.path().join("gpudoctor.prom")).unwrap();
    for (flag, path) in [
        ("--report", dir.clone()),
        ("--textfile", tmp.path().to_path_buf()),
    ] {
        let o = gpudoctor()
            .args([
                "--root",
                "fixtures/pcie-2socket-roce",
                "check",
                "--quiet",
                flag,
            ])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag}: {err}");
        assert!(
            err.lines()
                .next()
                .is_some_and(|l| l.contains("exists and is a directory: refused")
                    && l.contains(&format!("({flag} writes only a regular file)"))),
            "{flag}: {err}"
        );
    }
}

/// `--version` names the source revision it was built from (the checkout's HEAD; "unknown"
/// outside a git checkout), `-V` the release alone (as the man pages do).
#[test]
fn version_names_the_release_and_the_revision() {
    let long = crate::gpudoctor().arg("--version").output().unwrap();
    assert!(long.status.success());
    let long = String::from_utf8(long.stdout).unwrap();
    let short = crate::gpudoctor().arg("-V").output().unwrap();
    let short = String::from_utf8(short.stdout).unwrap();
    assert_eq!(
        short.trim(),
        format!("gpudoctor {}", env!("CARGO_PKG_VERSION"))
    );
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(crate::repo())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    let want = match (std::env::var("GPUDOCTOR_REVISION"), head) {
        (Ok(r), _) if !r.trim().is_empty() => r,
        (_, Some(h)) => h,
        _ => "unknown".to_string(),
    };
    assert_eq!(
        long.trim(),
        format!("gpudoctor {} (revision {want})", env!("CARGO_PKG_VERSION"))
    );
    // Every report carries the same revision beside the release: JSON and the metrics.
    let tree = crate::fixture_tree("vm-flat-4gpu");
    for cmd in ["topo", "check", "list"] {
        let mut c = crate::gpudoctor();
        c.arg(cmd).arg("--json");
        if cmd != "list" {
            c.arg("--root").arg(&tree);
        }
        let out = c.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["gpudoctor_revision"], want.as_str(), "{cmd}");
        assert_eq!(v["gpudoctor_version"], env!("CARGO_PKG_VERSION"), "{cmd}");
    }
    let out = crate::gpudoctor()
        .args(["check", "--format", "prometheus", "--root"])
        .arg(&tree)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("revision=\"{want}\"")), "{text}");
}

/// `--report-only` (and GPUDOCTOR_REPORT_ONLY): exit 0 whatever the verdict, the verdict's code
/// kept in the report (`would_exit`), the table and the textfile; gpudoctor's own failure still
/// exits 2.
#[test]
fn report_only_exits_0_and_says_what_it_would_have_done() {
    let bundle = "fixtures/variants/pcie-2socket-roce--port-down/bundle.tar.gz";
    let json = |extra: &[&str], env: Option<&str>| {
        let mut c = gpudoctor();
        c.args(["check", "--bundle", bundle, "--json"]).args(extra);
        c.env_remove("GPUDOCTOR_REPORT_ONLY");
        if let Some(v) = env {
            c.env("GPUDOCTOR_REPORT_ONLY", v);
        }
        let o = c.output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code().unwrap(), v)
    };
    let (code, v) = json(&[], None);
    assert_eq!((code, v.get("would_exit")), (1, None));
    let (code, v) = json(&["--report-only"], None);
    assert_eq!(code, 0);
    assert_eq!(v["would_exit"], 1);
    assert_eq!(v["status"], "fail", "the verdict is reported as it is");
    let (code, v) = json(&[], Some("1"));
    assert_eq!((code, &v["would_exit"]), (0, &serde_json::json!(1)));
    let (code, v) = json(&[], Some("0"));
    assert_eq!((code, v.get("would_exit")), (1, None));
    // A healthy verdict would have exited 0 too.
    let o = gpudoctor()
        .args([
            "check",
            "--root",
            "fixtures/pcie-2socket-roce",
            "--json",
            "--report-only",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (o.status.code(), &v["would_exit"]),
        (Some(0), &serde_json::json!(0))
    );

    let dir = tempfile::tempdir().unwrap();
    let o = gpudoctor()
        .args(["check", "--bundle", bundle, "--report-only", "--textfile"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[lines.len() - 2],
        "Report only (--report-only): exited 0; the verdict would have exited 1."
    );
    assert!(
        lines[lines.len() - 1].starts_with("Result: FAIL: "),
        "{text}"
    );
    let prom = std::fs::read_to_string(dir.path().join("gpudoctor.prom")).unwrap();
    assert!(prom.contains("\ngpudoctor_exit_code 0\n"), "{prom}");
    assert!(
        prom.contains("\ngpudoctor_report_only_would_exit_code 1\n"),
        "{prom}"
    );

    // gpudoctor itself could not run: 2, report only or not.
    let o = gpudoctor()
        .args(["check", "--root", "/nonexistent", "--report-only"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}
