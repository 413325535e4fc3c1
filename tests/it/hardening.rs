//! Nobody on the node or in the fleet can bend the verdict: forged kernel records, a look-alike
//! fabric manager, duplicate and broken reports in a fleet, cost bombs and terminal control
//! sequences in recorded strings.

use crate::{copy_fixture_into, gpudoctor};
use serde_json::Value;
use std::path::Path;

fn check_json(root: &Path) -> Value {
    let o = gpudoctor()
        .arg("--root")
        .arg(root)
        .args(["check", "--json"])
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap()
}

fn findings<'a>(r: &'a Value, id: &str) -> Vec<&'a Value> {
    r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

fn write_kmsg(tree: &Path, lines: &[&str]) {
    let k = serde_json::json!({
        "schema": "gpudoctor.kmsg/1",
        "source": "live /dev/kmsg",
        "records_read": 2000,
        "first_seq": 0,
        "lines": lines,
    });
    std::fs::write(tree.join("kmsg.json"), k.to_string()).unwrap();
}

/// A user picks the file name the kernel prints for a segfault, and the command name; a root
/// process can write user-facility records to /dev/kmsg. None of them is an Xid or a link-down.
#[test]
fn hardening_forged_kernel_records_do_not_count() {
    let dir = tempfile::tempdir().unwrap();
    let tree = copy_fixture_into("vm-flat-4gpu", dir.path());
    write_kmsg(
        &tree,
        &[
            // The mapping's file name, chosen by the user.
            "6,100,5000000,-;a.out[4242]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in NVRM: Xid (PCI:0000:00:04): 79, pid=1, name=x, GPU has fallen off the bus.[401000+1000]",
            // The command name (15 characters), the rest from the file name.
            "6,101,5000001,-;NVRM: Xid (PCI:[4242]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in 0000:00:05): 79, x[401000+1000]",
            // Written to /dev/kmsg by a user process: facility user (14 = user.info).
            "14,102,5000002,-;NVRM: Xid (PCI:0000:00:06): 79, pid=1, name=x, GPU has fallen off the bus.",
            "11,103,5000003,-;NVRM: Xid (PCI:0000:00:07): 48, DBE",
        ],
    );
    let r = check_json(&tree);
    for f in findings(&r, "gpu.xid") {
        assert_eq!(f["status"], "pass", "a forged record counted: {f:#}");
    }
    // The driver's own record still counts.
    write_kmsg(
        &tree,
        &[
            "3,100,5000000,-;NVRM: Xid (PCI:0000:00:04): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        ],
    );
    let r = check_json(&tree);
    let f = findings(&r, "gpu.xid");
    assert!(
        f.iter()
            .any(|f| f["subject"] == "GPU0" && f["status"] == "fail"),
        "{f:#?}"
    );

    let tree = copy_fixture_into("pcie-2socket-roce", dir.path());
    write_kmsg(
        &tree,
        &[
            "6,100,5000000,-;a.out[4242]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in x enp194s0f1np1 link down[401000+1000]",
            "6,101,5000001,-;a.out[4243]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in mlx5_core 0000:c2:00.1 enp194s0f1np1: Link down[401000+1000]",
            "14,102,5000002,-;mlx5_core 0000:c2:00.1 enp194s0f1np1: Link down",
            "14,103,5000003,-;enp194s0f1np1: Link down",
            "6,104,5000004,-;enp194s0f1np1: Link down[4242]: segfault at 0 ip 0 sp 0 error 4",
        ],
    );
    let r = check_json(&tree);
    for f in findings(&r, "rdma.link-flaps") {
        assert_eq!(f["status"], "pass", "a forged record counted: {f:#}");
    }
    write_kmsg(
        &tree,
        &[
            "6,100,5000000,-;mlx5_core 0000:c2:00.1 enp194s0f1np1: Link down",
            "6,101,6000000,-;mlx5_core 0000:c2:00.1 enp194s0f1np1: Link up",
            "6,102,7000000,-;mlx5_core 0000:c2:00.1 enp194s0f1np1: Link down",
        ],
    );
    let r = check_json(&tree);
    assert!(
        findings(&r, "rdma.link-flaps")
            .iter()
            .any(|f| f["subject"] == "mlx5_3/1" && f["status"] != "pass"),
        "the driver's own link-down records no longer count"
    );
}

/// A bug-report log's kernel messages: a user program's syslog line or a segfault naming a
/// forged file is no Xid; the kernel's own line (dmesg or the journal's `kernel:`) is.
#[test]
fn hardening_bug_report_forged_xid_does_not_count() {
    let log = std::fs::read_to_string(
        crate::repo().join("fixtures/records/bugreport-gp108m/nvidia-bug-report.log"),
    )
    .unwrap();
    let genuine: Vec<&str> = log.lines().filter(|l| l.contains("NVRM: Xid")).collect();
    assert!(!genuine.is_empty());
    // Without the genuine lines, plus forged ones in the dmesg section and the journal scan.
    let mut forged = String::new();
    for l in log.lines() {
        if l.contains("NVRM: Xid") {
            continue;
        }
        forged.push_str(l);
        forged.push('\n');
        if l.trim() == "dmesg:" {
            forged.push_str("[ 1772.511204] a.out[4242]: segfault at 0 ip 0000000000401000 sp 00007ffc00000000 error 4 in NVRM: Xid (PCI:0000:02:00): 79, pid=1, name=x, GPU has fallen off the bus.[401000+1000]\n");
        }
    }
    forged.push_str("May 21 17:31:40 laptop someprog[4242]: NVRM: Xid (PCI:0000:02:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("nvidia-bug-report.log");
    std::fs::write(&p, forged).unwrap();
    let o = gpudoctor()
        .arg("--from")
        .arg(&p)
        .args(["check", "--json"])
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    for f in findings(&r, "gpu.xid") {
        assert_ne!(f["status"], "fail", "a forged record counted: {f:#}");
    }
}

fn fabric(tree: &Path) -> Vec<(String, String)> {
    let r = check_json(tree);
    findings(&r, "gpu.fabric")
        .iter()
        .map(|f| (f["status"].as_str().unwrap().to_string(), f.to_string()))
        .collect()
}

/// A user process named nv-fabricmanager is not the fabric manager: the daemon runs as root
/// from the installed binary. When that cannot be read, whether it runs is unknown.
#[test]
fn hardening_fabric_manager_look_alike() {
    let dir = tempfile::tempdir().unwrap();
    let tree = copy_fixture_into("hgx-h100-8gpu", dir.path());
    let p = tree.join("proc/2817");
    // The real daemon: passes.
    for (s, f) in fabric(&tree) {
        assert_eq!(s, "pass", "{f}");
    }
    // An unprivileged look-alike.
    std::fs::write(
        p.join("status"),
        "Name:\tnv-fabricmanage\nState:\tS (sleeping)\nUid:\t1000\t1000\t1000\t1000\nGid:\t1000\t1000\t1000\t1000\n",
    )
    .unwrap();
    std::fs::write(p.join("cmdline"), "/home/user/nv-fabricmanager\0").unwrap();
    let _ = std::fs::remove_file(p.join("exe"));
    for (s, f) in fabric(&tree) {
        assert_eq!(
            s, "warn",
            "an unprivileged look-alike counted as the daemon: {f}"
        );
        assert!(f.contains("not running"), "{f}");
    }
    // Root, but not the fabric manager's binary.
    std::fs::write(
        p.join("status"),
        "Name:\tnv-fabricmanage\nUid:\t0\t0\t0\t0\n",
    )
    .unwrap();
    std::fs::write(p.join("cmdline"), "/tmp/nv-fabricmanager\0").unwrap();
    for (s, f) in fabric(&tree) {
        assert_eq!(s, "warn", "{f}");
    }
    // Only the name can be read: unknown, never running.
    std::fs::remove_file(p.join("status")).unwrap();
    std::fs::remove_file(p.join("cmdline")).unwrap();
    for (s, f) in fabric(&tree) {
        assert_eq!(s, "skip", "a process name alone counted: {f}");
        assert!(f.contains("could not be read"), "{f}");
    }
}

fn check_report(args: &[&str]) -> Value {
    let o = gpudoctor()
        .args(args)
        .args(["check", "--json"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap()
}

fn fleet(args: &[&Path]) -> (i32, Value, String) {
    let o = gpudoctor()
        .arg("fleet")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|_| panic!("exit {:?}: {stderr}", o.status.code()));
    (o.status.code().unwrap(), v, stderr)
}

/// Yesterday's and today's report of one node in one directory: the newest is judged,
/// whatever the argument order, and the duplicate is said.
#[test]
fn hardening_fleet_duplicate_reports_keep_the_newest() {
    let healthy = check_report(&["--root", "fixtures/vm-flat-4gpu"]);
    let failing = check_report(&[
        "--bundle",
        "fixtures/variants/vm-flat-4gpu--xid/bundle.tar.gz",
    ]);
    assert_eq!(failing["status"], "fail");
    for (newest_fails, names) in [
        (true, ["node17.json", "node17.old.json"]),
        (false, ["node17.json", "node17.old.json"]),
        (true, ["node17.monday.json", "node17.tuesday.json"]),
        (false, ["node17.tuesday.json", "node17.monday.json"]),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (mut new, mut old) = if newest_fails {
            (failing.clone(), healthy.clone())
        } else {
            (healthy.clone(), failing.clone())
        };
        new["hostname"] = "node17".into();
        old["hostname"] = "node17".into();
        new["time"] = "2025-03-02T08:00:00Z".into();
        old["time"] = "2025-03-01T08:00:00Z".into();
        std::fs::write(dir.path().join(names[0]), old.to_string()).unwrap();
        std::fs::write(dir.path().join(names[1]), new.to_string()).unwrap();
        let (code, r, stderr) = fleet(&[dir.path()]);
        assert_eq!(r["nodes"], 1, "one host, one node: {r:#}");
        let want = if newest_fails { "fail" } else { "warn" };
        assert_eq!(r["status"][want], 1, "the newest report is judged: {r:#}");
        assert_eq!(code, if newest_fails { 1 } else { 0 });
        let dups = r["duplicates"].as_array().expect("duplicates in JSON");
        assert_eq!(dups.len(), 1, "{r:#}");
        assert!(
            dups[0]["dropped"].to_string().contains(names[0]),
            "{dups:#?}"
        );
        assert!(
            stderr.contains("warning") && stderr.contains(names[0]),
            "{stderr}"
        );
    }
}

/// One truncated report (a node still writing) is that node's problem: every other node is
/// judged, the broken one is named and counted.
#[test]
fn hardening_fleet_truncated_report_is_one_node() {
    let dir = tempfile::tempdir().unwrap();
    let report = check_report(&["--root", "fixtures/vm-flat-4gpu"]).to_string();
    std::fs::write(dir.path().join("n1.json"), &report).unwrap();
    std::fs::write(dir.path().join("n2.json"), &report).unwrap();
    std::fs::write(dir.path().join("n3.json"), &report[..report.len() / 2]).unwrap();
    std::fs::write(dir.path().join("n4.tar.gz"), [0x1f, 0x8b, 8, 0, 0, 0]).unwrap();
    let (code, r, _) = fleet(&[dir.path()]);
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["status"]["warn"], 2, "{r:#}");
    let bad: Vec<&str> = r["unreadable"]
        .as_array()
        .expect("unreadable in JSON")
        .iter()
        .map(|u| u["node"].as_str().unwrap())
        .collect();
    assert_eq!(bad, ["n3", "n4"]);
    let drained: Vec<&str> = r["drain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["node"].as_str().unwrap())
        .collect();
    assert_eq!(drained, ["n3", "n4"], "{r:#}");
    // The table says so too.
    let o = gpudoctor().arg("fleet").arg(dir.path()).output().unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("unreadable") && t.contains("n3"), "{t}");
}

const FORGED: &str = "550.54.15\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}\u{9b}31m";

fn no_raw_controls(what: &str, s: &str) {
    for c in ['\u{1b}', '\u{7}', '\u{202e}', '\u{9b}'] {
        assert!(
            !s.contains(c),
            "{what}: raw {c:?} reaches the terminal:\n{s:?}"
        );
    }
}

/// Control sequences in recorded strings are shown escaped wherever text leaves for a
/// terminal or a drain reason; JSON keeps them exact.
#[test]
fn hardening_terminal_escapes_recorded_strings() {
    let dir = tempfile::tempdir().unwrap();
    let tree = copy_fixture_into("vm-flat-4gpu", dir.path());
    let p = tree.join("nvml.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["driver_version"] = FORGED.into();
    v["gpus"][0]["name"] = format!("NVIDIA H100 {FORGED}").into();
    std::fs::write(&p, v.to_string()).unwrap();
    let run = |args: &[&str]| {
        let o = gpudoctor()
            .arg("--root")
            .arg(&tree)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    for args in [
        &["check", "--color", "never"][..],
        &["check", "--format", "reason"],
        &["topo"],
    ] {
        let out = run(args);
        no_raw_controls(&format!("{args:?}"), &out);
        // The reason cuts the message before the forged part.
        if args.get(1) != Some(&"--format") {
            assert!(
                out.contains("\\x1b"),
                "{args:?} shows the escape visibly: {out}"
            );
        }
    }
    // In colour, gpudoctor's own SGR sequences are the only ESC.
    let coloured = run(&["check", "--color", "always"]);
    assert!(
        coloured.contains("\u{1b}[1;31mFAIL\u{1b}[0m"),
        "gpudoctor's own colour stays"
    );
    let ours = coloured
        .replace("\u{1b}[1;31m", "")
        .replace("\u{1b}[1;33m", "")
        .replace("\u{1b}[36m", "")
        .replace("\u{1b}[32m", "")
        .replace("\u{1b}[0m", "");
    no_raw_controls("check --color always", &ours);
    assert!(coloured.contains("\\x1b]0;owned"), "{coloured}");
    let json = run(&["check", "--json"]);
    let r: Value = serde_json::from_str(&json).unwrap();
    assert!(r.to_string().contains("owned\\u0007"), "JSON stays exact");
    assert_eq!(r["nvml"]["driver_version"], FORGED, "JSON stays exact");

    // fleet and diff: names and messages from the reports.
    let rep = check_report(&["--root", tree.to_str().unwrap()]);
    let fdir = tempfile::tempdir().unwrap();
    let a = fdir.path().join("n\u{1b}[2Jx.json");
    std::fs::write(&a, rep.to_string()).unwrap();
    let b = fdir.path().join("ok.json");
    std::fs::write(
        &b,
        check_report(&["--root", "fixtures/vm-flat-4gpu"]).to_string(),
    )
    .unwrap();
    let o = gpudoctor().arg("fleet").arg(fdir.path()).output().unwrap();
    no_raw_controls("fleet", &String::from_utf8_lossy(&o.stdout));
    let o = gpudoctor().arg("diff").arg(&b).arg(&a).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    no_raw_controls("diff", &out);
    assert!(out.contains("owned"), "{out}");
}

/// Copy `fixtures/hgx-h100-8gpu` into `dir` and add `extra` GPU functions of unknown NUMA node
/// (numa_node -1), each behind its own root port on its own root complex: every pair of them
/// is classified from CPU affinity only, so every cell of the matrix is uncertain.
fn many_gpu_tree(dir: &Path, extra: usize) -> std::path::PathBuf {
    let tree = copy_fixture_into("hgx-h100-8gpu", dir);
    let devs = tree.join("sys/bus/pci/devices");
    let gpu = std::fs::canonicalize(devs.join("0000:1b:00.0")).unwrap();
    let bridge = gpu.parent().unwrap().to_path_buf();
    let clone = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
        std::fs::write(to.join("numa_node"), "-1\n").unwrap();
    };
    for k in 0..extra {
        let (domain, bus) = (1 + k / 100, 2 * (k % 100));
        let rc = tree.join(format!("sys/devices/pci{domain:04x}:{bus:02x}"));
        let port_bdf = format!("{domain:04x}:{bus:02x}:01.0");
        let gpu_bdf = format!("{domain:04x}:{:02x}:00.0", bus + 1);
        let port = rc.join(&port_bdf);
        let g = port.join(&gpu_bdf);
        clone(&bridge, &port);
        clone(&gpu, &g);
        for (bdf, at) in [(&port_bdf, &port), (&gpu_bdf, &g)] {
            let rel = Path::new("../../..").join(at.strip_prefix(tree.join("sys")).unwrap());
            std::os::unix::fs::symlink(rel, devs.join(bdf)).unwrap();
        }
    }
    tree
}

/// A command that must finish within `secs` (debug build), exit 0 or 1.
fn within(secs: u64, what: &str, cmd: &mut assert_cmd::Command) -> std::process::Output {
    let t0 = std::time::Instant::now();
    let o = cmd
        .timeout(std::time::Duration::from_secs(secs))
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{what}: exit {:?} after {:.1} s (limit {secs} s): {}",
        o.status.code(),
        t0.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

/// Hundreds of GPU functions of unknown NUMA node on many root complexes: `baseline`, `fleet`
/// and `check --expect` stay within the cost of the matrix (pairs), not pairs times pairs.
#[test]
fn hardening_cost_many_gpus_of_unknown_numa() {
    let dir = tempfile::tempdir().unwrap();
    let tree = many_gpu_tree(dir.path(), 400);
    let base = dir.path().join("base.json");
    within(
        20,
        "baseline",
        gpudoctor()
            .arg("--root")
            .arg(&tree)
            .args(["baseline", "-o"])
            .arg(&base),
    );
    within(
        20,
        "check --expect",
        gpudoctor()
            .arg("--root")
            .arg(&tree)
            .args(["check", "--json", "--expect"])
            .arg(&base),
    );
    let bundle = dir.path().join("node.tar.gz");
    let o = gpudoctor()
        .arg("--root")
        .arg(&tree)
        .args(["bundle", "-o"])
        .arg(&bundle)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() == Some(2) {
        // A bundle whose reports are too large to replay is refused and removed, never
        // left behind with exit 0.
        assert!(err.contains("does not replay, removed"), "{err}");
        assert!(!bundle.exists(), "a bundle that does not replay was kept");
        return;
    }
    assert_eq!(o.status.code(), Some(0), "{err}");
    within(
        20,
        "fleet",
        gpudoctor().arg("fleet").arg(&bundle).arg("--json"),
    );
}

/// Every PCI device's `link/` leading back to the bus listing: the capture expands the
/// listing once, not once per link (quadratic in time and in the paths the reader logs, which
/// grew past 8 GB from a 360 KB bundle).
#[test]
fn hardening_cost_links_back_to_the_bus_listing() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("t");
    let devs = tree.join("sys/bus/pci/devices");
    std::fs::create_dir_all(tree.join("proc")).unwrap();
    for i in 0..3000 {
        let d = devs.join(format!("x{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink("..", d.join("link")).unwrap();
    }
    let out = dir.path().join("b.tar.gz");
    within(
        20,
        "bundle",
        gpudoctor()
            .arg("--root")
            .arg(&tree)
            .args(["bundle", "-o"])
            .arg(&out),
    );
    // Re-packing the bundle is bounded the same way, and leaves no extraction behind.
    let again = dir.path().join("c.tar.gz");
    within(
        20,
        "bundle --bundle",
        gpudoctor()
            .arg("--bundle")
            .arg(&out)
            .args(["bundle", "-o"])
            .arg(&again),
    );
}

/// 20,000 dangling PCI links: findings per check and kind of subject are capped with one
/// finding saying how many were folded (never hiding a failure or an unknown), the Prometheus
/// series stay bounded, and the bundle written replays.
#[test]
fn hardening_cost_dangling_links_fold() {
    let dir = tempfile::tempdir().unwrap();
    let tree = copy_fixture_into("vm-flat-4gpu", dir.path());
    let devs = tree.join("sys/bus/pci/devices");
    for i in 0..20_000u32 {
        let (bus, dev, func) = (i / 256, (i % 256) / 8, i % 8);
        std::os::unix::fs::symlink(
            format!("../../../devices/pci0001:00/0001:{bus:02x}:{dev:02x}.{func}"),
            devs.join(format!("0001:{bus:02x}:{dev:02x}.{func}")),
        )
        .unwrap();
    }
    let o = within(
        20,
        "check",
        gpudoctor()
            .arg("--root")
            .arg(&tree)
            .args(["check", "--json"]),
    );
    let r: Value = serde_json::from_slice(&o.stdout).unwrap();
    let checks = r["checks"].as_array().unwrap();
    assert!(
        checks.len() < 10_000,
        "{} findings from 20,000 dangling links",
        checks.len()
    );
    let folded = checks
        .iter()
        .find(|f| {
            f["subject"]
                .as_str()
                .unwrap()
                .ends_with("more PCI functions")
        })
        .expect("a finding that folds the rest");
    assert_eq!(folded["status"], "skip", "{folded:#}");
    assert_eq!(
        folded["skip"], "unknown",
        "folding keeps the unknown: {folded:#}"
    );
    assert!(
        folded["message"].as_str().unwrap().contains("folded"),
        "{folded:#}"
    );
    let o = within(
        20,
        "check --format prometheus",
        gpudoctor().arg("--root").arg(&tree).args([
            "check",
            "--format",
            "prometheus",
            "--all-series",
        ]),
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(series.len() < 20_000, "{} series", series.len());
    let mut seen = std::collections::BTreeSet::new();
    for s in &series {
        let name = s.rsplit_once(' ').unwrap().0;
        assert!(seen.insert(name), "duplicate series {name}");
    }
    let out = dir.path().join("n.tar.gz");
    let o = within(
        60,
        "bundle",
        gpudoctor()
            .arg("--root")
            .arg(&tree)
            .args(["bundle", "-o"])
            .arg(&out),
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("does not replay"), "{stderr}");
    within(
        20,
        "replay",
        gpudoctor()
            .arg("--bundle")
            .arg(&out)
            .args(["check", "--json"]),
    );
}

/// Only the kernel's exact "N: NAME" with the number that belongs to the name is a port state:
/// "9: ACTIVE" or a bare "ACTIVE" is unknown, never a pass.
#[test]
fn hardening_rdma_port_state_only_kernel_text() {
    let dir = tempfile::tempdir().unwrap();
    let tree = copy_fixture_into("pcie-2socket-roce", dir.path());
    let port = tree.join("sys/class/infiniband/mlx5_3/ports/1");
    let before = check_json(&tree);
    let f = findings(&before, "rdma.port-state");
    let f = f.iter().find(|f| f["subject"] == "mlx5_3/1").unwrap();
    assert_eq!(f["status"], "pass", "{f:#}");
    for (state, phys) in [
        ("9: ACTIVE", "5: LinkUp"),
        ("ACTIVE", "5: LinkUp"),
        ("4: ACTIVE", "LinkUp"),
        ("4: ACTIVE", "3: LinkUp"),
    ] {
        std::fs::write(port.join("state"), format!("{state}\n")).unwrap();
        std::fs::write(port.join("phys_state"), format!("{phys}\n")).unwrap();
        let r = check_json(&tree);
        let f = findings(&r, "rdma.port-state");
        let f = f.iter().find(|f| f["subject"] == "mlx5_3/1").unwrap();
        assert_eq!(f["status"], "skip", "{state:?} / {phys:?}: {f:#}");
        assert_eq!(f["skip"], "unknown", "{f:#}");
    }
    // A known state that is not active still fails, whatever the other file says.
    std::fs::write(port.join("state"), "1: DOWN\n").unwrap();
    std::fs::write(port.join("phys_state"), "LinkUp\n").unwrap();
    let r = check_json(&tree);
    let f = findings(&r, "rdma.port-state");
    let f = f.iter().find(|f| f["subject"] == "mlx5_3/1").unwrap();
    assert_eq!(f["status"], "fail", "{f:#}");
}

/// Outputs replace only regular files or create new ones (never through a symlink, never into
/// a FIFO); inputs named by the user are regular files read with a size cap.
#[test]
fn hardening_outputs_and_inputs_follow_one_rule() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    let fifo = dir.path().join("fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let mandir = dir.path().join("man");
    std::fs::create_dir(&mandir).unwrap();
    std::os::unix::fs::symlink(&victim, mandir.join("gpudoctor.1")).unwrap();
    let refused = |args: &[&std::ffi::OsStr]| {
        let o = gpudoctor()
            .args(args)
            .timeout(std::time::Duration::from_secs(20))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("gpudoctor: error:"), "{args:?}: {err}");
    };
    let root = std::ffi::OsStr::new("fixtures/vm-flat-4gpu");
    for out in [&link, &fifo] {
        let out = out.as_os_str();
        refused(&[
            "--root".as_ref(),
            root,
            "baseline".as_ref(),
            "-o".as_ref(),
            out,
        ]);
        refused(&[
            "--root".as_ref(),
            root,
            "export".as_ref(),
            "nccl-topo".as_ref(),
            "-o".as_ref(),
            out,
        ]);
    }
    refused(&["man".as_ref(), mandir.as_os_str()]);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    // Inputs: a FIFO blocks, /dev/zero never ends.
    let report = dir.path().join("n1.json");
    std::fs::write(
        &report,
        check_report(&["--root", "fixtures/vm-flat-4gpu"]).to_string(),
    )
    .unwrap();
    for bad in [fifo.as_os_str(), "/dev/zero".as_ref()] {
        refused(&[
            "fleet".as_ref(),
            report.as_os_str(),
            "--expect".as_ref(),
            bad,
        ]);
        let out = dir.path().join("b.tar.gz");
        refused(&[
            "--root".as_ref(),
            root,
            "bundle".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            "--redact-key-file".as_ref(),
            bad,
        ]);
    }
}

/// `fleet` and `diff` stopped by SIGINT or SIGTERM leave no extracted bundle behind.
#[test]
fn hardening_interrupted_fleet_leaves_no_extraction() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = crate::repo().join("fixtures/variants/vm-flat-4gpu--xid/bundle.tar.gz");
    for i in 0..60 {
        std::fs::copy(&bundle, dir.path().join(format!("n{i}.tar.gz"))).unwrap();
    }
    let bin = assert_cmd::cargo::cargo_bin("gpudoctor");
    for (sig, args) in [
        (libc::SIGINT, vec![dir.path().to_path_buf()]),
        (libc::SIGTERM, vec![dir.path().to_path_buf()]),
    ] {
        let mut child = std::process::Command::new(&bin)
            .arg("fleet")
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(700));
        // SAFETY: a signal to the child this test started.
        unsafe { libc::kill(child.id() as i32, sig) };
        let _ = child.wait().unwrap();
        let mine = format!("gpudoctor-bundle-{}-", child.id());
        let left: Vec<String> = std::fs::read_dir("/dev/shm")
            .into_iter()
            .flatten()
            .chain(
                std::fs::read_dir(std::env::temp_dir())
                    .into_iter()
                    .flatten(),
            )
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&mine))
            .collect();
        assert!(left.is_empty(), "signal {sig}: left {left:?}");
    }
}

/// The cells of each Markdown table row: `|` ends a cell unless a backslash precedes it (GitHub
/// Flavored Markdown's table rule, whatever precedes that backslash).
fn md_cells(line: &str) -> usize {
    let b = line.as_bytes();
    (0..b.len())
        .filter(|&i| b[i] == b'|' && (i == 0 || b[i - 1] != b'\\'))
        .count()
}

/// A node name and a check id from a forged report carry `|`, backticks, HTML and control
/// bytes: `fleet --format md` keeps every table's shape, opens no code span and writes no HTML
/// of theirs.
#[test]
fn hardening_markdown_escapes_recorded_strings() {
    let mut forged = check_report(&[
        "--bundle",
        "fixtures/variants/vm-flat-4gpu--xid/bundle.tar.gz",
    ]);
    for f in forged["checks"].as_array_mut().unwrap() {
        if f["status"] == "fail" {
            f["id"] = "gpu.xid|`<script>alert(1)</script>`\n# h\u{1b}[2J*x*".into();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path()
            .join("a|b`<img src=x onerror=alert(1)>\u{1b}[2Jc.json"),
        forged.to_string(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("ok.json"),
        check_report(&["--root", "fixtures/vm-flat-4gpu"]).to_string(),
    )
    .unwrap();
    let o = gpudoctor()
        .arg("fleet")
        .arg(dir.path())
        .args(["--format", "md"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let md = String::from_utf8(o.stdout).unwrap();
    no_raw_controls("fleet --format md", &md);
    for html in ["<script", "<img", "</script"] {
        assert!(!md.contains(html), "{html} reaches the document:\n{md}");
    }
    let mut header = None;
    for line in md.lines() {
        if !line.starts_with('|') {
            header = None;
            continue;
        }
        let n = md_cells(line);
        let want = *header.get_or_insert(n);
        assert_eq!(n, want, "a row of another shape: {line:?}\n{md}");
        let b = line.as_bytes();
        for i in 0..b.len() {
            assert!(
                b[i] != b'`' || (i > 0 && b[i - 1] == b'\\'),
                "a code span opens: {line:?}"
            );
        }
    }
    assert!(
        md.contains("a\\|b\\`&lt;img src=x onerror=alert(1)>\\x1b\\[2Jc"),
        "{md}"
    );
    assert!(
        md.contains("gpu.xid\\|\\`&lt;script>alert(1)&lt;/script>\\`<br># h\\x1b\\[2J\\*x\\*"),
        "{md}"
    );
}

/// A driver version with characters XML 1.0 cannot carry (C0 controls, U+FFFE, U+FFFF) reaches
/// a JUnit failure message: the file still parses with a strict parser and shows them escaped.
#[test]
fn hardening_junit_is_xml_whatever_was_recorded() {
    let (_tmp, tree) = crate::copy_fixture("vm-flat-4gpu");
    let p = tree.join("nvml.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    let forged = "550.54.15\u{1}\u{1b}[2J\u{ffff}\u{fffe}\u{b}<x>&\"'\u{202e}";
    v["driver_version"] = forged.into();
    v["gpus"][0]["name"] = format!("NVIDIA H100 {forged}").into();
    std::fs::write(&p, v.to_string()).unwrap();
    let o = gpudoctor()
        .arg("--root")
        .arg(&tree)
        .args(["check", "--format", "junit"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let xml = String::from_utf8(o.stdout).unwrap();
    let doc = roxmltree::Document::parse(&xml)
        .unwrap_or_else(|e| panic!("JUnit XML does not parse: {e}\n{xml}"));
    no_raw_controls("check --format junit", &xml);
    let message = doc
        .descendants()
        .filter_map(|n| n.attribute("message"))
        .find(|m| m.contains("550.54.15"))
        .unwrap_or_else(|| panic!("no message names the driver version:\n{xml}"));
    assert!(
        message.contains("550.54.15\\x01\\x1b[2J\\u{ffff}\\u{fffe}\\x0b<x>&\"'\\u{202e}"),
        "{message}"
    );
}
