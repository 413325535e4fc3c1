//! `probe nccl` without a GPU: the reasoned skips (no libnccl; a libnccl but fewer than two
//! GPUs), their exit codes, and usage errors. The measurement itself runs on GPU machines
//! (scripts/gpu-nccl-check).

use crate::gpudoctor;

/// No libnccl anywhere: a skip naming every place looked, exit 0; 1 with --fail-on-skip.
#[test]
fn no_libnccl_is_a_skip_naming_every_place_looked() {
    let home = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        gpudoctor()
            .args(["probe", "nccl"])
            .args(extra)
            .env("NCCL_HOME", "/nonexistent-nccl")
            .env("HOME", home.path())
            .env("LD_LIBRARY_PATH", "/nonexistent-lib")
            .env_remove("VIRTUAL_ENV")
            .env_remove("CONDA_PREFIX")
            .output()
            .unwrap()
    };
    let o = run(&[]);
    let out = String::from_utf8_lossy(&o.stdout);
    if out.contains("NCCL 2.") {
        // A machine with a real libnccl on its loader path or in a system Python: the absent
        // case cannot be shown here.
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("skipped: libnccl.so.2 not found; looked in:"),
        "{out}"
    );
    assert!(out.contains("/nonexistent-nccl/lib/libnccl.so.2"), "{out}");
    assert!(out.contains("on the loader path"), "{out}");
    assert_eq!(run(&["--fail-on-skip"]).status.code(), Some(1));
    let j = run(&["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&j.stdout).unwrap();
    assert_eq!(v["schema"], "gpudoctor.nccl/1");
    assert_eq!(v["status"], "skip");
    assert!(v["looked_in"].as_array().unwrap().len() >= 2);
}

/// A libnccl (a stand-in exporting the symbols the probe resolves, built here with cc) on a
/// machine without two GPUs: its version is reported and the probe skips with the reason.
#[test]
fn a_libnccl_without_two_gpus_is_a_skip_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let c = dir.path().join("fake_nccl.c");
    let mut src = String::from("int ncclGetVersion(int *v) { *v = 22809; return 0; }\n");
    for f in [
        "ncclGetUniqueId",
        "ncclCommInitAll",
        "ncclAllReduce",
        "ncclAllGather",
        "ncclGroupStart",
        "ncclGroupEnd",
        "ncclCommDestroy",
        "ncclCommAbort",
        "ncclCommGetAsyncError",
    ] {
        src.push_str(&format!("int {f}(void) {{ return 1; }}\n"));
    }
    src.push_str("const char *ncclGetErrorString(int r) { (void)r; return \"fake\"; }\n");
    std::fs::write(&c, src).unwrap();
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o"])
        .arg(lib.join("libnccl.so.2"))
        .arg(&c)
        .status()
        .expect("cc runs (scripts/test installs gcc)");
    assert!(built.success());
    let o = gpudoctor()
        .args(["probe", "nccl", "--json"])
        .env("NCCL_HOME", dir.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    assert_eq!(v["library"]["version"], "2.28.9", "{v}");
    if v["status"] != "skip" {
        // Two GPUs here: the stand-in fails to init instead; nothing to show about skips.
        return;
    }
    let why = v["skipped"].as_str().unwrap();
    assert!(why.starts_with("NCCL collectives need two GPUs"), "{why}");
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["probe", "nccl", "--hca", "mlx5_0"][..],
        &["probe", "nccl", "-b", "1G", "-e", "8M"],
        &["probe", "nccl", "-b", "8X"],
    ] {
        let o = gpudoctor().args(args).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("gpudoctor: error:"), "{args:?}: {err}");
    }
}
