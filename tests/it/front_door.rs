//! What a new user meets first: a path of the wrong kind gets a hint naming the right flag, a
//! misspelt check id gets the nearest one, the table keeps every message whole, and the shell
//! completion offers only the commands `--help` shows.

use crate::gpudoctor;

const VARIANT: &str = "fixtures/variants/hgx-h100-8gpu--acs-redirect";

/// Runs gpudoctor with `args`, expects exit 2 with nothing on stdout and one error line on
/// stderr, and returns that line.
fn one_line_error(args: &[&str]) -> String {
    let out = gpudoctor().args(args).output().unwrap();
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(err.starts_with("gpudoctor: error: "), "{err}");
    err.trim_end().to_string()
}

#[test]
fn root_given_a_variant_directory_names_its_bundle() {
    for dir in [VARIANT.to_string(), format!("{VARIANT}/")] {
        let err = one_line_error(&["check", "--root", &dir]);
        assert!(
            err.ends_with(&format!(
                "(hint: this directory holds a support bundle: use --bundle {VARIANT}/bundle.tar.gz)"
            )),
            "{err}"
        );
    }
}

#[test]
fn bundle_given_a_directory_gets_a_hint() {
    let err = one_line_error(&["check", "--bundle", VARIANT]);
    assert!(
        err.ends_with(&format!(
            "(hint: this directory holds a support bundle: use --bundle {VARIANT}/bundle.tar.gz)"
        )),
        "{err}"
    );
    // A recorded tree: --root.
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir(tree.path().join("sys")).unwrap();
    let t = tree.path().display().to_string();
    let err = one_line_error(&["topo", &format!("--bundle={t}")]);
    assert!(
        err.ends_with(&format!(
            "(hint: {t} is a directory with sys/ (a recorded tree): use --root {t})"
        )),
        "{err}"
    );
    // Anything else: what --bundle takes.
    let empty = tempfile::tempdir().unwrap();
    let e = empty.path().display().to_string();
    let err = one_line_error(&["check", "--bundle", &e]);
    assert!(
        err.ends_with(&format!(
            "(hint: {e} is a directory: --bundle takes the .tar.gz file `gpudoctor bundle -o FILE` writes)"
        )),
        "{err}"
    );
}

#[test]
fn diff_given_a_directory_gets_a_hint() {
    let bundle = format!("{VARIANT}/bundle.tar.gz");
    let err = one_line_error(&["diff", VARIANT, &bundle]);
    assert!(
        err.ends_with(&format!(
            "(hint: this directory holds a support bundle: use {VARIANT}/bundle.tar.gz)"
        )),
        "{err}"
    );
    let empty = tempfile::tempdir().unwrap();
    let e = empty.path().display().to_string();
    let err = one_line_error(&["diff", &bundle, &e]);
    assert!(
        err.ends_with(&format!(
            "(hint: {e} is a directory: diff compares two files (check reports or bundles); for a directory of them use `gpudoctor fleet {e}`)"
        )),
        "{err}"
    );
}

#[test]
fn misspelt_check_ids_get_the_nearest_id() {
    let bundle = format!("{VARIANT}/bundle.tar.gz");
    for flag in ["--skip", "--warn", "--deny"] {
        let err = one_line_error(&["check", "--bundle", &bundle, flag, "pcie.acs-redirct"]);
        assert_eq!(
            err,
            "gpudoctor: error: unknown check id pcie.acs-redirct (did you mean pcie.acs-redirect?): `gpudoctor list` shows them all"
        );
    }
    let err = one_line_error(&[
        "check",
        "--bundle",
        &bundle,
        "--skip",
        "gpu.ec",
        "--warn",
        "no-such-thing-at-all",
    ]);
    assert_eq!(
        err,
        "gpudoctor: error: unknown check ids no-such-thing-at-all, gpu.ec (did you mean gpu.ecc?): `gpudoctor list` shows them all"
    );
    let err = one_line_error(&["explain", "pcie.acs-redirct"]);
    assert_eq!(
        err,
        "gpudoctor: error: no check 'pcie.acs-redirct' (did you mean pcie.acs-redirect?)"
    );
}

/// The default table wraps a long message but never shortens it: every failing or warning
/// finding's message, evidence and fix are all there, as in `--json`.
#[test]
fn table_keeps_every_message_whole() {
    let bundle = format!("{VARIANT}/bundle.tar.gz");
    let table = gpudoctor()
        .args(["check", "--bundle", &bundle])
        .env("COLUMNS", "80")
        .output()
        .unwrap();
    assert_eq!(table.status.code(), Some(1));
    let json = gpudoctor()
        .args(["check", "--bundle", &bundle, "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let table = squeeze(&String::from_utf8(table.stdout).unwrap());
    let mut judged = 0;
    for f in report["checks"].as_array().unwrap() {
        if !matches!(f["status"].as_str(), Some("fail" | "warn")) {
            continue;
        }
        judged += 1;
        let mut parts = vec![f["message"].as_str().unwrap().to_string()];
        parts.extend(f["remediation"].as_str().map(str::to_string));
        for e in f["evidence"].as_array().into_iter().flatten() {
            parts.push(format!(
                "{}: {}",
                e["source"].as_str().unwrap(),
                e["value"].as_str().unwrap()
            ));
        }
        for p in parts {
            assert!(table.contains(&squeeze(&p)), "the table lacks: {p}");
        }
    }
    assert!(judged >= 2, "the variant fails pcie.acs-redirect twice");
}

#[test]
fn completion_offers_only_visible_commands() {
    for shell in ["bash", "zsh", "fish"] {
        let out = gpudoctor().args(["completions", shell]).output().unwrap();
        assert!(out.status.success());
        let script = String::from_utf8(out.stdout).unwrap();
        for hidden in ["snapshot", "nccl-worker"] {
            assert!(
                !script.contains(hidden),
                "{shell} completion offers {hidden}"
            );
        }
        for shown in [
            "check",
            "explain",
            "completions",
            "write-bw",
            "pcie.acs-redirect",
        ] {
            assert!(script.contains(shown), "{shell} completion lacks {shown}");
        }
    }
}

/// The README's quick start does what the README says it does: the command it shows runs, prints
/// a verdict of WARN with one warning, and exits 0.
#[test]
fn readme_quick_start_says_what_to_expect() {
    let readme = std::fs::read_to_string(crate::repo().join("README.md")).unwrap();
    let quick = readme
        .split("## Quick start")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("README has a Quick start section");
    let command = quick
        .lines()
        .find_map(|l| l.strip_prefix("    cargo run --release -- "))
        .expect("the quick start shows `cargo run --release -- ...`");
    assert!(
        quick.contains("`Result: WARN: ...`, and exits 0"),
        "the quick start says what the run prints and how it exits"
    );
    let args: Vec<&str> = command.split_whitespace().collect();
    let out = gpudoctor().args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{command}");
    let text = String::from_utf8(out.stdout).unwrap();
    let verdict = text.lines().last().unwrap_or_default();
    assert!(verdict.starts_with("Result: WARN: "), "{verdict}");
    assert!(verdict.contains(" 1 warn, 0 fail,"), "{verdict}");
    assert!(text.contains("WARN pcie.link-speed"), "{text}");
}
