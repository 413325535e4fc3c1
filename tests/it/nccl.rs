//! `probe nccl` without a GPU: the reasoned skips (no libnccl; a libnccl but fewer than two
//! GPUs), their exit codes, and usage errors; across nodes (`--ranks`), processes on
//! localhost that meet, skip alike, refuse mismatched NCCL versions and wrong tokens, and name
//! a rank that never arrives. The measurement itself runs on GPU machines
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
    assert_eq!(v["schema"], "gpudoctor.nccl/2");
    assert_eq!(v["status"], "skip");
    assert!(v["looked_in"].as_array().unwrap().len() >= 2);
}

/// A stand-in libnccl reporting `version` (exporting the symbols the probe resolves; every
/// call but ncclGetVersion fails), built here with cc under `dir/lib`.
fn fake_nccl(dir: &std::path::Path, version: i32) {
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let c = dir.join("fake_nccl.c");
    let mut src = format!("int ncclGetVersion(int *v) {{ *v = {version}; return 0; }}\n");
    for f in [
        "ncclGetUniqueId",
        "ncclCommInitAll",
        "ncclCommInitRank",
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
}

/// A libnccl (a stand-in exporting the symbols the probe resolves, built here with cc) on a
/// machine without two GPUs: its version is reported and the probe skips with the reason.
#[test]
fn a_libnccl_without_two_gpus_is_a_skip_with_its_version() {
    let dir = tempfile::tempdir().unwrap();
    fake_nccl(dir.path(), 22809);
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

/// A port nobody listens on now (the OS's pick, released).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `probe nccl --ranks torchrun` as rank `rank` of `world` on localhost (gpudoctor listens on
/// MASTER_PORT+1), with `env` and `extra` arguments; started, not waited for.
fn torchrun_rank(
    rank: u32,
    world: u32,
    port: u16,
    env: &[(&str, &str)],
    extra: &[&str],
) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_gpudoctor"))
        .args(["probe", "nccl", "--ranks", "torchrun"])
        .args(extra)
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", "0")
        .env("LOCAL_WORLD_SIZE", "1")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", (port - 1).to_string())
        .env("NCCL_HOSTID", format!("node{rank}"))
        .env("GPUDOCTOR_TOKEN", "shared-secret")
        .env_remove("VIRTUAL_ENV")
        .env_remove("CONDA_PREFIX")
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn ended(c: std::process::Child) -> Ended {
    let o = c.wait_with_output().unwrap();
    Ended {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn world(n: u32, env: &[(&str, &str)], extra: &[&str]) -> Vec<Ended> {
    let port = free_port();
    let kids: Vec<_> = (0..n)
        .map(|r| torchrun_rank(r, n, port, env, extra))
        .collect();
    kids.into_iter().map(ended).collect()
}

/// Three torchrun-style ranks on localhost: they meet, each runs its discovery worker, and
/// the run ends in the same reasoned skip on every rank (no libnccl, no GPU here): rank 0
/// prints the report with each rank's reason, the others one line; exit 0, 1 with
/// --fail-on-skip. The JSON is a gpudoctor.nccl/1 report with the processes.
#[test]
fn torchrun_ranks_meet_and_skip_alike() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap().to_string();
    let env = [
        ("NCCL_HOME", "/nonexistent-nccl"),
        ("LD_LIBRARY_PATH", "/nonexistent-lib"),
        ("HOME", home.as_str()),
    ];
    let e = world(3, &env, &[]);
    for (r, x) in e.iter().enumerate() {
        assert_eq!(x.code, Some(0), "rank {r}: {}{}", x.stdout, x.stderr);
    }
    assert!(
        e[0].stdout
            .contains("across nodes (torchrun): 3 process(es)"),
        "{}",
        e[0].stdout
    );
    for r in 0..3 {
        assert!(
            e[0].stdout.contains(&format!("rank {r} (")),
            "{}",
            e[0].stdout
        );
        assert!(
            e[0].stdout.contains(&format!("node node{r}")),
            "{}",
            e[0].stdout
        );
    }
    assert!(e[0].stdout.contains("status: SKIP"), "{}", e[0].stdout);
    for (r, x) in e.iter().enumerate().skip(1) {
        assert!(
            x.stdout.starts_with(&format!(
                "gpudoctor probe nccl: rank {r} reported to rank 0: SKIP"
            )),
            "{}",
            x.stdout
        );
        assert_eq!(x.stdout.lines().count(), 1);
    }
    let e = world(2, &env, &["--fail-on-skip", "--json"]);
    assert!(
        e.iter().all(|x| x.code == Some(1)),
        "{}{}",
        e[0].stderr,
        e[1].stderr
    );
    let v: serde_json::Value = serde_json::from_str(&e[0].stdout).unwrap();
    assert_eq!(v["schema"], "gpudoctor.nccl/2");
    assert_eq!(v["mode"], "cluster");
    assert_eq!(v["status"], "skip");
    assert_eq!(v["cluster"]["world_size"], 2);
    assert_eq!(v["cluster"]["processes"].as_array().unwrap().len(), 2);
}

/// Mismatched NCCL versions (stand-ins 2.28.9 and 2.19.3): refused before anything runs, one
/// error naming each host and version, exit 2 on both ranks.
#[test]
fn mismatched_nccl_versions_are_refused_on_every_rank() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fake_nccl(a.path(), 22809);
    fake_nccl(b.path(), 21903);
    let port = free_port();
    let r0 = torchrun_rank(
        0,
        2,
        port,
        &[("NCCL_HOME", a.path().to_str().unwrap())],
        &[],
    );
    let r1 = torchrun_rank(
        1,
        2,
        port,
        &[("NCCL_HOME", b.path().to_str().unwrap())],
        &[],
    );
    for (r, x) in [ended(r0), ended(r1)].into_iter().enumerate() {
        assert_eq!(x.code, Some(2), "rank {r}: {}{}", x.stdout, x.stderr);
        let line = x.stderr.lines().last().unwrap_or_default();
        assert!(line.starts_with("gpudoctor: error:"), "rank {r}: {line}");
        assert!(line.contains("different NCCL versions"), "rank {r}: {line}");
        assert!(
            line.contains("rank 0 (") && line.contains("NCCL 2.28.9"),
            "{line}"
        );
        assert!(
            line.contains("rank 1 (") && line.contains("NCCL 2.19.3"),
            "{line}"
        );
    }
}

/// A rank that never arrives: rank 0 gives up after --rendezvous-timeout, one error naming the
/// missing ranks, exit 2. A rank with the wrong token is turned away (exit 2 there too) and
/// rank 0 names it as missing, with why.
#[test]
fn missing_ranks_and_wrong_tokens_end_in_one_error() {
    let start = std::time::Instant::now();
    let x = ended(torchrun_rank(
        0,
        3,
        free_port(),
        &[],
        &["--rendezvous-timeout", "2"],
    ));
    assert_eq!(x.code, Some(2), "{}{}", x.stdout, x.stderr);
    let line = x.stderr.lines().last().unwrap_or_default();
    assert!(
        line.starts_with("gpudoctor: error: probe nccl --ranks: rank(s) 1, 2 of 3 never joined"),
        "{line}"
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    let port = free_port();
    let r0 = torchrun_rank(0, 2, port, &[], &["--rendezvous-timeout", "3"]);
    let r1 = torchrun_rank(
        1,
        2,
        port,
        &[("GPUDOCTOR_TOKEN", "another")],
        &["--rendezvous-timeout", "3"],
    );
    let (x0, x1) = (ended(r0), ended(r1));
    assert_eq!(
        (x0.code, x1.code),
        (Some(2), Some(2)),
        "{}{}",
        x0.stderr,
        x1.stderr
    );
    assert!(
        x1.stderr.contains("refused by rank 0: wrong token"),
        "{}",
        x1.stderr
    );
    assert!(
        x0.stderr.contains("rank(s) 1 of 2 never joined"),
        "{}",
        x0.stderr
    );
    assert!(x0.stderr.contains("proof does not match"), "{}", x0.stderr);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["probe", "nccl", "--hca", "mlx5_0"][..],
        &["probe", "nccl", "-b", "1G", "-e", "8M"],
        &["probe", "nccl", "-b", "8X"],
        // --ranks without a token, with a malformed launcher value, or without a world size.
        &[
            "probe",
            "nccl",
            "--ranks",
            "torchrun",
            "--rank",
            "0",
            "--world-size",
            "2",
            "--rendezvous",
            "h",
        ],
        &["probe", "nccl", "--ranks", "slurm", "--rank", "0"],
        &["probe", "nccl", "--ranks", "mpi"],
        &["probe", "nccl", "--ranks", "auto", "--net"],
        &["probe", "nccl", "--world-size", "2"],
    ] {
        let o = gpudoctor()
            .args(args)
            .env_remove("GPUDOCTOR_TOKEN")
            .env_remove("SLURM_PROCID")
            .env_remove("SLURM_NTASKS")
            .env("SLURM_JOB_NODELIST", "gpu[01-")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.starts_with("gpudoctor: error:"), "{args:?}: {err}");
    }
}

/// The recipes across nodes: the sbatch script parses (`bash -n`) and asks srun for --ranks
/// slurm; the indexed Job's fields agree with its headless Service and token Secret (python3's
/// yaml where installed; deploy.rs validates every manifest against Kubernetes' schema).
#[test]
fn recipes_across_nodes_hold_together() {
    let sbatch = crate::repo().join("deploy/slurm/gpudoctor-nccl.sbatch");
    let o = std::process::Command::new("bash")
        .arg("-n")
        .arg(&sbatch)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&sbatch).unwrap();
    assert!(text.contains("probe nccl --ranks slurm"), "{text}");
    let check = r#"
import sys, yaml
svc, job = list(yaml.safe_load_all(open(sys.argv[1])))
assert svc['kind'] == 'Service' and svc['spec']['clusterIP'] == 'None'
js = job['spec']; t = js['template']['spec']
assert js['completionMode'] == 'Indexed' and js['completions'] == js['parallelism']
assert t['subdomain'] == svc['metadata']['name']
c = t['containers'][0]; a = c['args']
assert a[:4] == ['probe', 'nccl', '--ranks', 'k8s'], a
assert a[a.index('--world-size') + 1] == str(js['completions'])
host = a[a.index('--rendezvous') + 1]
assert host.startswith(job['metadata']['name'] + '-0.' + svc['metadata']['name'] + ':')
assert int(host.rsplit(':', 1)[1]) == svc['spec']['ports'][0]['port'] == c['ports'][0]['containerPort']
tf = a[a.index('--token-file') + 1]
m = [v for v in c['volumeMounts'] if tf.startswith(v['mountPath'] + '/')][0]
assert 'secret' in [v for v in t['volumes'] if v['name'] == m['name']][0]
assert svc['spec']['selector']['batch.kubernetes.io/job-name'] == job['metadata']['name']
print('ok')
"#;
    let job = crate::repo().join("deploy/kubernetes/nccl-job.yaml");
    match std::process::Command::new("python3")
        .args(["-c", check])
        .arg(&job)
        .output()
    {
        Ok(o) if String::from_utf8_lossy(&o.stderr).contains("No module named 'yaml'") => {
            eprintln!("python3 without yaml: the Job's fields were not checked");
        }
        Ok(o) => assert!(
            o.status.success() && o.stdout.starts_with(b"ok"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("no python3 ({e}): the Job's fields were not checked"),
    }
}
