//! Hostile input stays in its box: recorded trees and bundles whose documents and
//! links point outside them, at FIFOs, at device nodes or at huge files; output paths that are
//! devices; walkers over link cycles; interrupted runs. Every case exits 0/1 with findings or 2
//! with one line, within seconds, leaving nothing behind and reading nothing outside the tree.
//! Each hostile tree or bundle is built here, from a copy of a fixture.

use crate::bundle::{E, MANIFEST, archive};
use crate::{gpudoctor, repo};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const FIXTURE: &str = "fixtures/h200x1-vm";
/// What a hostile document outside the tree says; it must never reach the output.
const SECRET: &str = "HOST-SECRET-580";

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A copy of the fixture at `<tmp>/tree`, and beside it (outside the tree) `secret.json`, a
/// valid NVML snapshot whose driver version is SECRET.
fn tree_with_secret() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    copy_tree(&repo().join(FIXTURE), &tree);
    let nvml = std::fs::read_to_string(tree.join("nvml.json")).unwrap();
    std::fs::write(
        tmp.path().join("secret.json"),
        nvml.replace("580.159.04", SECRET),
    )
    .unwrap();
    (tmp, tree)
}

fn mkfifo(p: &Path) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
}

/// A character device like /dev/zero's (1:5) at `p`; false where this user may not make one.
fn mknod_zero(p: &Path) -> bool {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o644, libc::makedev(1, 5)) == 0 }
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// gpudoctor under a 2 GiB address-space limit (`prlimit --as`): a document that reads
/// without end (/dev/zero) must be refused long before memory runs out.
fn limited() -> assert_cmd::Command {
    use std::os::unix::process::CommandExt;
    #[allow(deprecated)]
    let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("gpudoctor"));
    c.current_dir(repo())
        .env_remove("COLUMNS")
        .env_remove("NO_COLOR");
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: 2 << 30,
                rlim_max: 2 << 30,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    assert_cmd::Command::from_std(c)
}

/// Run gpudoctor with `args` under `limited()`, killed after 20 s (a hang is a failure, not a
/// stuck suite).
fn run(args: &[&str], root: &Path) -> Ran {
    let t0 = Instant::now();
    let out = limited()
        .arg("--root")
        .arg(root)
        .args(args)
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    Ran {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: t0.elapsed(),
    }
}

fn assert_one_line_error(r: &Ran, want: &[&str], case: &str) {
    assert_eq!(r.code, Some(2), "{case}: {}{}", r.stdout, r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{case}: {}", r.stderr);
    for w in want {
        assert!(
            r.stderr.contains(w),
            "{case}: wanted '{w}' in: {}",
            r.stderr
        );
    }
    assert!(
        r.took < Duration::from_secs(10),
        "{case}: took {:?}",
        r.took
    );
}

/// Documents (nvml.json, libs.json, manifest.json) whose links climb out of the tree are read
/// inside it (clamped at its root, so here: absent), never the host's file; `s -> .` makes a
/// target that only looks like it stays inside.
#[test]
fn document_links_never_leave_the_tree() {
    for (case, target) in [
        ("dotdot", "../secret.json"),
        ("dot-link", "s/s/s/../secret.json"),
        ("absolute", "/secret.json"),
    ] {
        let (tmp, tree) = tree_with_secret();
        symlink(".", tree.join("s")).unwrap();
        std::fs::remove_file(tree.join("nvml.json")).unwrap();
        symlink(target, tree.join("nvml.json")).unwrap();
        // Sanity: the host would follow this link to the secret.
        if case != "absolute" {
            assert!(
                std::fs::read_to_string(tree.join("nvml.json"))
                    .unwrap()
                    .contains(SECRET)
            );
        }
        let r = run(&["check", "--json"], &tree);
        assert_eq!(r.code, Some(0), "{case}: {}", r.stderr);
        assert!(!r.stdout.contains(SECRET), "{case}: read the host's file");
        assert!(r.stdout.contains("no nvml.json"), "{case}: {}", r.stdout);
        drop(tmp);
    }
}

/// A FIFO, a device node or a huge file as a document is refused at once, naming the file.
#[test]
fn special_and_huge_documents_are_refused() {
    let (_tmp, tree) = tree_with_secret();
    std::fs::remove_file(tree.join("nvml.json")).unwrap();
    mkfifo(&tree.join("nvml.json"));
    let r = run(&["topo"], &tree);
    assert_one_line_error(&r, &["nvml.json", "not a regular file"], "fifo");

    let (_tmp, tree) = tree_with_secret();
    let big = std::fs::File::create(tree.join("libs.json")).unwrap();
    big.set_len((16 << 20) + 1).unwrap();
    let r = run(&["topo"], &tree);
    assert_one_line_error(&r, &["libs.json", "larger than"], "huge");

    // The host's /dev/zero by an absolute link: re-rooted (this tree has no dev/zero).
    let (_tmp, tree) = tree_with_secret();
    std::fs::remove_file(tree.join("libs.json")).ok();
    symlink("/dev/zero", tree.join("libs.json")).unwrap();
    let r = run(&["topo"], &tree);
    assert_eq!(r.code, Some(0), "{}", r.stderr);

    let (_tmp, tree) = tree_with_secret();
    std::fs::remove_file(tree.join("manifest.json")).unwrap();
    if mknod_zero(&tree.join("zero")) {
        symlink("zero", tree.join("manifest.json")).unwrap();
        let r = run(&["topo"], &tree);
        assert_one_line_error(&r, &["manifest.json", "not a regular file"], "device");
    }
}

/// A device node or FIFO planted as a sysfs attribute is never opened: the value is unknown
/// with the reason, and the run finishes.
#[test]
fn special_files_in_sys_are_never_opened() {
    let (_tmp, tree) = tree_with_secret();
    let gpu = tree.join("sys/devices/pci0000:00/0000:00:06.0/numa_node");
    std::fs::remove_file(&gpu).unwrap();
    mkfifo(&gpu);
    let other = tree.join("sys/devices/pci0000:00/0000:00:01.0/numa_node");
    std::fs::remove_file(&other).unwrap();
    if !mknod_zero(&other) {
        mkfifo(&other);
    }
    let r = run(&["topo", "--json"], &tree);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    for f in ["0000:00:06.0", "0000:00:01.0"] {
        let why = format!(
            "/sys/devices/pci0000:00/{f}/numa_node: not a regular file (device node, FIFO or socket): refused"
        );
        assert!(r.stdout.contains(&why), "{f}: {}", r.stdout);
    }
}

/// Link targets of thousands of `.` components (which once overflowed the discovery thread's
/// stack, exit 134) resolve like their plain form: same report as the untouched tree.
#[test]
fn long_dot_link_targets_resolve_without_recursion() {
    let (_tmp, tree) = tree_with_secret();
    let plain = run(&["topo", "--json"], &tree);
    assert_eq!(plain.code, Some(0), "{}", plain.stderr);
    let devs = tree.join("sys/bus/pci/devices");
    let mut changed = 0;
    for e in std::fs::read_dir(&devs).unwrap() {
        let p = e.unwrap().path();
        let t = std::fs::read_link(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        symlink(format!("{}{}", "./".repeat(2000), t.display()), &p).unwrap();
        changed += 1;
    }
    assert!(changed >= 3);
    let dotted = run(&["topo", "--json"], &tree);
    assert_eq!(dotted.code, Some(0), "{}", dotted.stderr);
    assert_eq!(dotted.stdout, plain.stdout);
    // And links that go nowhere but round: a clean unknown, not a crash.
    std::fs::remove_file(tree.join("sys/bus/pci/devices/0000:00:06.0")).unwrap();
    let target = format!("{}0000:00:06.0", "../0000:00:06.0/".repeat(250));
    symlink(&target, tree.join("sys/bus/pci/devices/0000:00:06.0")).unwrap();
    let r = run(&["topo", "--json"], &tree);
    assert!(matches!(r.code, Some(0 | 2)), "{}", r.stderr);
    assert!(!r.stderr.contains("overflow"), "{}", r.stderr);
}

/// A bundle whose link targets are inside the tree as text but outside once resolved
/// (`s -> .`, `nvml.json -> s/s/s/../../../...`) is refused at extraction.
#[test]
fn bundle_links_are_checked_resolved() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("b.tar.gz");
    std::fs::write(
        &f,
        archive(&[
            E::File("manifest.json", MANIFEST.as_bytes()),
            E::Dir("sys/bus/pci/devices"),
            E::Link("s", "."),
            E::Link("nvml.json", "s/s/s/s/s/s/../../../../../../etc/passwd"),
        ]),
    )
    .unwrap();
    let out = gpudoctor()
        .args(["topo", "--bundle"])
        .arg(&f)
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("nvml.json") && err.contains("resolves outside the bundle"),
        "{err}"
    );
    // A link loop leads nowhere (every reader fails it with ELOOP): accepted, as the damaged
    // trees of fixtures/variants hold them.
    let looped = archive(&[
        E::File("manifest.json", MANIFEST.as_bytes()),
        E::Link("sys/l1", "l2"),
        E::Link("sys/l2", "../sys/l1"),
    ]);
    let limits = gpudoctor::bundle::read::Limits::default();
    assert!(gpudoctor::bundle::read::extract_from(looped.as_slice(), limits).is_ok());
}

/// `bundle -o` over a device node, FIFO, directory or symlink is refused (exit 2, one line)
/// and the thing at the path is untouched; a regular file is replaced.
#[test]
fn bundle_output_is_only_a_regular_file() {
    use std::os::unix::fs::FileTypeExt;
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let dev = d.join("null");
    let c = CString::new(dev.as_os_str().as_bytes()).unwrap();
    // SAFETY: c is a valid NUL-terminated path.
    let have_dev =
        unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) } == 0;
    mkfifo(&d.join("fifo"));
    std::fs::create_dir(d.join("dir")).unwrap();
    symlink("elsewhere", d.join("link")).unwrap();
    let mut cases = vec!["fifo", "dir", "link"];
    if have_dev {
        cases.push("null");
    }
    for case in cases {
        let out = d.join(case);
        let r = gpudoctor()
            .args(["--root", FIXTURE, "bundle", "-o"])
            .arg(&out)
            .timeout(Duration::from_secs(20))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.status.code(), Some(2), "{case}: {err}");
        assert_eq!(err.lines().count(), 1, "{case}: {err}");
        assert!(err.contains("refused"), "{case}: {err}");
        let ft = std::fs::symlink_metadata(&out).unwrap().file_type();
        let kept = match case {
            "fifo" => ft.is_fifo(),
            "dir" => ft.is_dir(),
            "link" => ft.is_symlink(),
            _ => ft.is_char_device(),
        };
        assert!(kept, "{case} was replaced");
    }
    let file = d.join("old.tar.gz");
    std::fs::write(&file, b"old").unwrap();
    let r = gpudoctor()
        .args(["--root", FIXTURE, "bundle", "-o"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0));
    assert!(std::fs::metadata(&file).unwrap().len() > 1000);
}

/// What a process `pid` left: extraction directories in /dev/shm and the temporary directory,
/// and partial files in `beside`.
fn leftovers(pid: u32, beside: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let shm_prefix = format!("gpudoctor-bundle-{pid}-");
    for d in [PathBuf::from("/dev/shm"), std::env::temp_dir()] {
        if let Ok(rd) = std::fs::read_dir(&d) {
            out.extend(
                rd.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&shm_prefix))
                    .map(|e| e.path()),
            );
        }
    }
    let partial = format!(".partial-{pid}");
    out.extend(
        std::fs::read_dir(beside)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(&partial))
            .map(|e| e.path()),
    );
    out
}

/// Whether process `pid` blocks SIGTERM (what `signals::guard` does first thing).
fn signals_blocked(pid: u32) -> bool {
    let Ok(st) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return true; // gone, or no /proc: go on
    };
    st.lines()
        .find_map(|l| l.strip_prefix("SigBlk:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & (1 << (libc::SIGTERM - 1)) != 0)
}

/// SIGTERM, SIGINT or SIGHUP at any point of `bundle` (discovery, capture, writing, the
/// self-replay's extraction in /dev/shm) or of a `--bundle` replay: exit 2 naming the signal,
/// nothing left in /dev/shm or beside the output.
#[test]
fn signalled_runs_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let big = "fixtures/hgx-h100-8gpu";
    let made = tmp.path().join("made.tar.gz");
    let t0 = Instant::now();
    let r = gpudoctor()
        .args(["--root", big, "bundle", "-o"])
        .arg(&made)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0));
    let full = t0.elapsed();
    let mut caught = 0;
    for (i, sig) in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP]
        .iter()
        .cycle()
        .take(12)
        .enumerate()
    {
        let out = tmp.path().join(format!("b{i}.tar.gz"));
        let replay = i % 4 == 3;
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpudoctor"));
        cmd.current_dir(repo());
        if replay {
            cmd.arg("--bundle").arg(&made).arg("check");
        } else {
            cmd.args(["--root", big, "bundle", "-o"]).arg(&out);
        }
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // Past startup (a signal before main() runs has its default action): the signals
        // are blocked for the signal thread once /proc shows them in SigBlk.
        let started = Instant::now();
        while !signals_blocked(pid) && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(full.mul_f64(i as f64 / 14.0));
        // SAFETY: pid is our own child, not yet reaped.
        unsafe { libc::kill(pid as i32, *sig) };
        let t = Instant::now();
        let o = child.wait_with_output().unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "run {i} did not stop"
        );
        let err = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(2) => {
                caught += 1;
                assert!(err.contains("interrupted by SIG"), "run {i}: {err}");
                assert_eq!(err.lines().count(), 1, "run {i}: {err}");
            }
            Some(0 | 1) => {} // finished before the signal
            other => panic!("run {i}: exit {other:?}: {err}"),
        }
        let left = leftovers(pid, tmp.path());
        assert!(
            left.is_empty(),
            "run {i} ({:?}: {err}) left {left:?}",
            o.status
        );
    }
    assert!(
        caught >= 6,
        "only {caught} runs were still going when signalled"
    );
}

/// What a crash or SIGKILL left (an extraction directory named after a dead process) is swept
/// by the next run.
#[test]
fn stale_extractions_of_dead_processes_are_swept() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let stale = PathBuf::from("/dev/shm").join(format!("gpudoctor-bundle-{dead}-stale"));
    if std::fs::create_dir(&stale).is_err() {
        return; // no /dev/shm here: extraction uses TMPDIR, swept the same way
    }
    std::fs::write(stale.join("x"), b"17 MB of a bundle").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let b = tmp.path().join("b.tar.gz");
    let r = gpudoctor()
        .args(["--root", FIXTURE, "bundle", "-o"])
        .arg(&b)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0));
    assert!(!stale.exists(), "{} left", stale.display());
}

/// The write end of a pipe whose read end is closed: every write to it fails (EPIPE).
fn closed_pipe() -> std::process::Stdio {
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: fds is writable for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is ours and closed once; fds[1] is handed to Stdio, which owns it.
    unsafe {
        libc::close(fds[0]);
        std::process::Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

/// `bundle` with a warning to print (a link that climbs out of the tree, which the bundle
/// records clamped) and stderr, stdout or both closed pipes: no panic (exit 101), the bundle
/// is written and the exit code is the run's.
#[test]
fn closed_output_pipes_never_panic() {
    let (tmp, tree) = tree_with_secret();
    let gpu = tree.join("sys/bus/pci/devices/0000:00:06.0");
    std::fs::remove_file(&gpu).unwrap();
    symlink(
        "../../../../../../../sys/devices/pci0000:00/0000:00:06.0",
        &gpu,
    )
    .unwrap();
    let out = tmp.path().join("w.tar.gz");
    let warned = gpudoctor()
        .arg("--root")
        .arg(&tree)
        .args(["bundle", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(warned.status.code(), Some(0));
    let err = String::from_utf8_lossy(&warned.stderr);
    assert!(
        err.contains("warning") && err.contains("climb above"),
        "{err}"
    );
    for (case, stdout, stderr) in [
        ("stderr", false, true),
        ("stdout", true, false),
        ("both", true, true),
    ] {
        std::fs::remove_file(&out).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_gpudoctor"));
        cmd.current_dir(repo())
            .arg("--root")
            .arg(&tree)
            .args(["bundle", "-o"])
            .arg(&out)
            .stdout(if stdout {
                closed_pipe()
            } else {
                std::process::Stdio::null()
            })
            .stderr(if stderr {
                closed_pipe()
            } else {
                std::process::Stdio::null()
            });
        let st = cmd.status().unwrap();
        assert_eq!(st.code(), Some(0), "{case}");
        assert!(out.is_file(), "{case}");
    }
}

/// A recorded tree whose links climb above its root (read clamped at the root) bundles into
/// one that replays as the tree read: the same reports, no false "please report this"
/// (the links were once left out of the bundle, so its GPU went missing in the replay), a
/// warning and a manifest note naming the links.
#[test]
fn escaping_links_are_bundled_as_read() {
    let (tmp, tree) = tree_with_secret();
    let gpu = tree.join("sys/bus/pci/devices/0000:00:06.0");
    std::fs::remove_file(&gpu).unwrap();
    symlink(
        "../../../../../../../sys/devices/pci0000:00/0000:00:06.0",
        &gpu,
    )
    .unwrap();
    let driver = tree.join("sys/devices/pci0000:00/0000:00:06.0/driver");
    std::fs::remove_file(&driver).unwrap();
    symlink(
        "../../../../../../../../../sys/bus/pci/drivers/nvidia",
        &driver,
    )
    .unwrap();
    let out = tmp.path().join("b.tar.gz");
    let made = gpudoctor()
        .arg("--root")
        .arg(&tree)
        .args(["bundle", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&made.stderr);
    assert_eq!(made.status.code(), Some(0), "{err}");
    assert!(!err.contains("please report"), "{err}");
    assert!(!err.contains("does not replay"), "{err}");
    assert!(
        err.contains("2 symlink(s) of the recorded tree climb above its root"),
        "{err}"
    );
    let check = |src: &[&std::ffi::OsStr]| {
        let o = gpudoctor()
            .args(src)
            .args(["check", "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (o.status.code(), v)
    };
    let (code_tree, mut from_tree) = check(&["--root".as_ref(), tree.as_os_str()]);
    let (code_bundle, mut from_bundle) = check(&["--bundle".as_ref(), out.as_os_str()]);
    assert_eq!(code_tree, code_bundle);
    // The GPU behind the clamped link is seen.
    assert!(from_tree.to_string().contains("GPU0 x16"), "{from_tree}");
    let diff = gpudoctor::bundle::first_difference(&mut from_tree, &mut from_bundle);
    assert_eq!(diff, None);
}

/// `fleet DIR` over link cycles (two `up -> ..` links once made it run for ever) and over
/// fixtures/ (whose recorded trees hold sysfs's own cycles) finishes in seconds, each report
/// read once; a FIFO named like a report is skipped, not waited on.
#[test]
fn fleet_walk_enters_each_directory_once() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().join("reports");
    std::fs::create_dir_all(d.join("a/b")).unwrap();
    let check = gpudoctor()
        .args(["--root", FIXTURE, "check", "--json"])
        .output()
        .unwrap();
    std::fs::write(d.join("a/b/node1.check.json"), &check.stdout).unwrap();
    std::fs::write(d.join("node2.check.json"), &check.stdout).unwrap();
    symlink("..", d.join("a/up")).unwrap();
    symlink("..", d.join("a/b/up")).unwrap();
    symlink("../..", d.join("a/b/up2")).unwrap();
    mkfifo(&d.join("node3.check.json"));
    let t0 = Instant::now();
    let r = gpudoctor()
        .args(["fleet", "--json"])
        .arg(&d)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(matches!(r.status.code(), Some(0 | 1)), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(10));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(v["nodes"], 2, "{v}");

    let t0 = Instant::now();
    let r = gpudoctor()
        .args(["fleet", "--json", "fixtures"])
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(
        matches!(r.status.code(), Some(0..=2)),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}

/// A 64 KiB cpulist naming 500 million CPUs (38 s once; 1 MiB ran into the 60 s deadline)
/// and a 60 000-CPU node list: parsed in linear time, the oversized one refused as unknown.
#[test]
fn huge_cpulists_are_refused_quickly() {
    let (_tmp, tree) = tree_with_secret();
    let gpu = tree.join("sys/devices/pci0000:00/0000:00:06.0/local_cpulist");
    std::fs::write(&gpu, vec!["0-65535"; 8000].join(",")).unwrap();
    let big: Vec<String> = (0..60000).map(|i| i.to_string()).collect();
    std::fs::write(
        tree.join("sys/devices/system/node/node0/cpulist"),
        big.join(","),
    )
    .unwrap();
    let r = run(&["topo", "--json"], &tree);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    assert!(
        r.stdout
            .contains("0000:00:06.0/local_cpulist: unparseable value"),
        "{}",
        r.stdout
    );
}

/// A deadline reached with no read in flight blames the processing, not a hung device.
#[test]
fn deadline_message_names_what_took_the_time() {
    let busy = gpudoctor::run::with_deadline(
        Duration::from_millis(50),
        || std::thread::sleep(Duration::from_secs(2)),
        || gpudoctor::run::Stall {
            path: "/sys/devices/system/node/node0/cpulist".into(),
            in_read: false,
        },
    );
    let e = format!("{:#}", busy.unwrap_err());
    assert!(
        e.contains("processing") && e.contains("node0/cpulist"),
        "{e}"
    );
    assert!(e.starts_with("discovery did not finish"), "{e}");
    assert!(!e.contains("hung"), "{e}");
    // A read still in progress: the path it waits on, and who waited.
    let hung = gpudoctor::run::with_deadline_of(
        "the bundle capture",
        Duration::from_millis(50),
        || std::thread::sleep(Duration::from_secs(2)),
        || gpudoctor::run::Stall {
            path: "/sys/bus/pci/devices/0000:17:00.0/config".into(),
            in_read: true,
        },
    );
    let e = format!("{:#}", hung.unwrap_err());
    assert!(
        e.starts_with("reading /sys/bus/pci/devices/0000:17:00.0/config did not finish")
            && e.contains("the bundle capture waited on it")
            && e.contains("not answering"),
        "{e}"
    );
    assert!(!e.contains("processing"), "{e}");
}

/// `tar ARGS`, which must succeed.
fn run_tar(args: &[&std::ffi::OsStr]) {
    let st = std::process::Command::new("tar")
        .args(args)
        .status()
        .unwrap();
    assert!(st.success());
}

/// A bundle of FIXTURE in `tmp` (orig.tar.gz) and the same bundle unpacked with tar
/// (unpacked/): (bundle, directory).
fn bundle_unpacked(tmp: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let orig = tmp.join("orig.tar.gz");
    let r = gpudoctor()
        .args(["--root", FIXTURE, "bundle", "-o"])
        .arg(&orig)
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(0));
    let dir = tmp.join("unpacked");
    std::fs::create_dir(&dir).unwrap();
    run_tar(&[
        "xzf".as_ref(),
        orig.as_os_str(),
        "-C".as_ref(),
        dir.as_os_str(),
    ]);
    (orig, dir)
}

/// `tar czf X -C DIR .` of an unpacked bundle (members `./`, `./sys/...`, a directory entry
/// for every directory) replays like the original; the manifest's `contents` counts are
/// checked against the archive (one file more or less is refused).
#[test]
fn repacked_bundles_replay_and_contents_are_checked() {
    let tmp = tempfile::tempdir().unwrap();
    let (orig, dir) = bundle_unpacked(tmp.path());
    let repacked = tmp.path().join("repacked.tar.gz");
    run_tar(&[
        "czf".as_ref(),
        repacked.as_os_str(),
        "-C".as_ref(),
        dir.as_os_str(),
        ".".as_ref(),
    ]);
    let check = |b: &Path| {
        gpudoctor()
            .args(["check", "--json", "--bundle"])
            .arg(b)
            .output()
            .unwrap()
    };
    let a = check(&orig);
    let b = check(&repacked);
    assert_eq!(
        b.status.code(),
        a.status.code(),
        "{}",
        String::from_utf8_lossy(&b.stderr)
    );
    let strip = |o: &std::process::Output| {
        let mut v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v.as_object_mut().unwrap().remove("source");
        v
    };
    assert_eq!(strip(&a), strip(&b));

    // One file more than the manifest records.
    std::fs::write(dir.join("sys/extra"), b"planted\n").unwrap();
    let planted = tmp.path().join("planted.tar.gz");
    run_tar(&[
        "czf".as_ref(),
        planted.as_os_str(),
        "-C".as_ref(),
        dir.as_os_str(),
        ".".as_ref(),
    ]);
    let r = check(&planted);
    let err = String::from_utf8_lossy(&r.stderr);
    assert_eq!(r.status.code(), Some(2), "{err}");
    assert!(err.contains("contents.files"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Two runs writing one bundle path at once: each replays its own file, so neither warns
/// "please report this" (each once replayed whatever the other had renamed into place).
#[test]
fn concurrent_bundles_to_one_path_do_not_warn() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("same.tar.gz");
    for _ in 0..3 {
        let spawn = |src: &str| {
            std::process::Command::new(env!("CARGO_BIN_EXE_gpudoctor"))
                .current_dir(repo())
                .args(["--root", src, "bundle", "-o"])
                .arg(&out)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let a = spawn(FIXTURE);
        let b = spawn("fixtures/vm-flat-4gpu");
        for c in [a, b] {
            let o = c.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(0), "{err}");
            assert!(!err.contains("please report"), "{err}");
        }
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("same.tar.gz")]);
    }
}

/// A temporary directory on tmpfs where there is one: the listing tests below create a hundred
/// thousand entries, which takes seconds on a disk file system and a fraction of one in RAM.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir()
        && let Ok(d) = tempfile::tempdir_in(shm)
    {
        return d;
    }
    tempfile::tempdir().unwrap()
}

/// A directory listing with more entries than any real one (here /sys/module, one over
/// MAX_DIR_ENTRIES) and a port's GID table over its own cap (4097 entries) end, within
/// seconds, as unknowns whose reason names the directory, instead of growing without bound.
#[test]
fn directory_listings_are_capped() {
    let tmp = scratch();
    let tree = crate::copy_fixture_into("pcie-2socket-roce", tmp.path());
    let gids = tree
        .join("sys/devices/pci0000:00/0000:00:01.2/0000:02:00.0/infiniband/mlx5_0/ports/1/gids");
    assert!(gids.is_dir());
    for i in 16..=gpudoctor::inventory::MAX_GID_ENTRIES {
        std::fs::write(
            gids.join(i.to_string()),
            "fe80:0000:0000:0000:0000:0000:0000:0001\n",
        )
        .unwrap();
    }
    let modules = tree.join("sys/module");
    let have = std::fs::read_dir(&modules).unwrap().count();
    for i in have..=gpudoctor::sysroot::MAX_DIR_ENTRIES {
        symlink("x", modules.join(format!("m{i}"))).unwrap();
    }
    let r = run(&["check", "--json"], &tree);
    assert!(matches!(r.code, Some(0 | 1)), "{}", r.stderr);
    assert!(r.took < Duration::from_secs(15), "took {:?}", r.took);
    for dir in [
        format!(
            "/sys/class/infiniband/mlx5_0/ports/1/gids: more than {} directory entries: refused",
            gpudoctor::inventory::MAX_GID_ENTRIES
        ),
        format!(
            "/sys/module: more than {} directory entries: refused",
            gpudoctor::sysroot::MAX_DIR_ENTRIES
        ),
    ] {
        assert!(r.stdout.contains(&dir), "wanted '{dir}' in: {}", r.stdout);
    }
}

/// Every member of a bundle and its bytes, decompressed.
fn members(bundle: &Path) -> Vec<(String, Vec<u8>)> {
    let f = std::fs::File::open(bundle).unwrap();
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let mut b = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut b).unwrap();
            (name, b)
        })
        .collect()
}

/// A bundle records the name of no process but nv-fabricmanager's (discovery reads every
/// process's name to find it): other processes of the tree leave neither their names nor
/// their PIDs in it, and the replay finds the same fabric manager as the tree.
#[test]
fn bundles_carry_no_other_process_names() {
    let tmp = scratch();
    let tree = crate::copy_fixture_into("hgx-h100-8gpu", tmp.path());
    for (pid, comm) in [(4242, "secret-daemon"), (777, "payroll-batch")] {
        std::fs::create_dir_all(tree.join(format!("proc/{pid}"))).unwrap();
        std::fs::write(tree.join(format!("proc/{pid}/comm")), format!("{comm}\n")).unwrap();
    }
    let out = tmp.path().join("b.tar.gz");
    // A fixed redaction key: with a fresh random one, a redaction token ("redacted-<12 hex>")
    // holds "4242" about once in a few hundred runs, and the search below would fail on it.
    // This key's tokens hold none of the searched strings.
    let key = tmp.path().join("site.key");
    std::fs::write(&key, "00112233445566778899aabbccddeeff\n").unwrap();
    let made = gpudoctor()
        .arg("--root")
        .arg(&tree)
        .args(["bundle", "-o"])
        .arg(&out)
        .arg("--redact-key-file")
        .arg(&key)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&made.stderr);
    assert_eq!(made.status.code(), Some(0), "{err}");
    assert!(!err.contains("warning"), "{err}");
    let all = members(&out);
    let procs: Vec<&str> = all
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| n.starts_with("proc/") && n[5..].starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(
        procs,
        [
            "proc/2817/",
            "proc/2817/cmdline",
            "proc/2817/comm",
            "proc/2817/status"
        ],
        "{procs:?}"
    );
    for (name, bytes) in &all {
        let text = String::from_utf8_lossy(bytes);
        for secret in [
            "secret-daemon",
            "payroll-batch",
            "systemd\n",
            "4242",
            "\"/proc/777",
        ] {
            assert!(!text.contains(secret), "{name} holds {secret}");
        }
    }
    let fabric = |src: &[&std::ffi::OsStr]| {
        let o = gpudoctor()
            .args(src)
            .args(["check", "--json"])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let fabric: Vec<serde_json::Value> = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["id"] == "gpu.fabric")
            .cloned()
            .collect();
        serde_json::Value::from(fabric)
    };
    let want = fabric(&["--root".as_ref(), tree.as_os_str()]);
    assert!(want.to_string().contains("2817"), "{want}");
    assert_eq!(fabric(&["--bundle".as_ref(), out.as_os_str()]), want);
}

/// What `strace` shows `gpudoctor check --bundle` opening, reading as a link or looking at
/// outside the bundle's extraction directory, for a bundle whose links and documents lead at
/// this process's own files (`/proc/self/environ`, `/proc/self/maps`) and that has no kernel
/// log (kmsg.json): nothing but the binary, its libraries and the places the extraction
/// directory is made in. Once std's `available_parallelism` read the cgroup's CPU quota under
/// /sys/fs/cgroup on every replay. Needs strace (skipped, saying so, without it).
#[test]
fn bundle_replay_reads_nothing_of_the_host() {
    if !crate::have_strace() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let (_, dir) = bundle_unpacked(tmp.path());
    let numa = dir.join("sys/devices/pci0000:00/0000:00:06.0/numa_node");
    std::fs::remove_file(&numa).unwrap();
    symlink("../../../../proc/self/environ", &numa).unwrap();
    std::fs::remove_file(dir.join("libs.json")).unwrap();
    symlink("proc/self/maps", dir.join("libs.json")).unwrap();
    std::fs::remove_file(dir.join("kmsg.json")).unwrap();
    let mpath = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("contents");
    std::fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
    let hostile = tmp.path().join("hostile.tar.gz");
    run_tar(&[
        "czf".as_ref(),
        hostile.as_os_str(),
        "-C".as_ref(),
        dir.as_os_str(),
        ".".as_ref(),
    ]);
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_gpudoctor"));
    let trace = crate::strace_gpudoctor(
        "open,openat,openat2,readlink,readlinkat,stat,lstat,newfstatat,statx,access,faccessat,faccessat2",
        &["check".as_ref(), "--bundle".as_ref(), hostile.as_os_str()],
    );
    let scratch: Vec<String> = [PathBuf::from("/dev/shm"), std::env::temp_dir()]
        .iter()
        .map(|d| format!("{}/gpudoctor-bundle-", d.display()))
        .collect();
    let host_ok = |p: &str| {
        scratch.iter().any(|s| p.starts_with(s.as_str()))
            || p == hostile.to_str().unwrap()
            || p == bin.to_str().unwrap()
            // Where the extraction directory is made, and its ancestors (canonicalized).
            || ["/dev/shm", "/dev"].contains(&p)
            || std::env::temp_dir().starts_with(p)
            // The dynamic loader, the C library, this process's own maps (glibc's stack
            // bounds for the main thread).
            || p.starts_with("/etc/ld.so")
            || p.starts_with("/lib")
            || p.starts_with("/usr/lib")
            || p == "/proc/self/maps"
    };
    let mut outside = Vec::new();
    for line in trace.lines() {
        for (i, part) in line.split('"').enumerate() {
            if i % 2 == 1
                && (part.starts_with('/') || line.contains(&format!("AT_FDCWD, \"{part}\"")))
                && !host_ok(part)
            {
                outside.push(line.to_string());
            }
        }
    }
    assert!(
        outside.is_empty(),
        "read outside the bundle:\n{}",
        outside.join("\n")
    );
    assert!(trace.contains("gpudoctor-bundle-"), "no extraction seen");
}

/// Live `topo` reads no kernel log: /dev/kmsg is read when a check needs it (the health checks,
/// `bundle`), not when the source is opened. Runs on this machine's own /sys and /proc.
#[test]
fn live_topo_reads_no_kernel_log() {
    use gpudoctor::source::{Source, SourceSpec};
    let source = Source::open(&SourceSpec::Live).unwrap();
    let _ = gpudoctor::run::topo_report_from(&source);
    let touched = source.sysroot.touched();
    assert!(
        !touched.iter().any(|p| p == "/dev/kmsg"),
        "topo read the kernel log"
    );
    let _ = gpudoctor::run::check_report_from(&source, &gpudoctor::config::CheckOptions::level0());
    assert!(
        source.sysroot.touched().iter().any(|p| p == "/dev/kmsg"),
        "check reads it (the health checks judge Xid and link-down records)"
    );
}
