//! Hostile input stays in its box (issue 22): recorded trees and bundles whose documents and
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

/// Run gpudoctor with `args`, killed after 20 s (a hang is a failure, not a stuck suite).
fn run(args: &[&str], root: &Path) -> Ran {
    let t0 = Instant::now();
    let out = gpudoctor()
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
}
