//! Bounds on hostile input: every command that reads facts, run on deep, huge or garbage
//! input under a hard address-space limit, ends with exit 0, 1 or 2 (a refusal says so on a
//! `gpudoctor: error:` line), never killed by a signal or aborted on a failed allocation; and
//! `diff` stopped by a signal while it extracts leaves nothing behind.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

/// The address-space ceiling (RLIMIT_AS) for each command: 768 MiB. Measured on the debug
/// build with `prlimit --as` (the smallest limit a run passes, found by bisection): 54 MiB for
/// `check`, `topo`, `fleet` and `diff` of `fixtures/hgx-h100-8gpu` and its bundle, 174 MiB for
/// `bundle` (its capture and self-replay threads each reserve an allocator arena); the peak
/// resident set of that `bundle` is 35 MiB (`/usr/bin/time -f %M`). 768 MiB is over 4 times
/// the largest healthy need: a hostile input that needs more is unbounded, not unlucky.
const CEILING_BYTES: u64 = 768 << 20;

/// Run `gpudoctor ARGS` under the ceiling; it must end by itself with 0, 1 or 2.
fn bounded(what: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let bin = assert_cmd::cargo::cargo_bin("gpudoctor");
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args).current_dir(crate::repo());
    // SAFETY: setrlimit is async-signal-safe; this runs in the child between fork and exec
    // and touches nothing but its own limit.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: CEILING_BYTES,
                rlim_max: CEILING_BYTES,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t0 = std::time::Instant::now();
    let o = assert_cmd::Command::from_std(cmd)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    {
        use std::os::unix::process::ExitStatusExt;
        assert!(
            o.status.signal().is_none(),
            "{what}: killed by signal {:?} after {:.1} s (ceiling {} MiB): {err}",
            o.status.signal(),
            t0.elapsed().as_secs_f64(),
            CEILING_BYTES >> 20
        );
    }
    let code = o.status.code();
    assert!(matches!(code, Some(0..=2)), "{what}: exit {code:?}: {err}");
    assert!(
        !err.contains("panicked") && !err.contains("memory allocation of"),
        "{what}: {err}"
    );
    if code == Some(2) {
        assert!(
            err.lines().any(|l| l.starts_with("gpudoctor: error:")),
            "{what}: exit 2 without a `gpudoctor: error:` line: {err}"
        );
    }
    o
}

/// Pseudo-random bytes (a fixed LCG: the same garbage every run).
fn garbage(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

/// A gzip'd tar: a bundle manifest, then one member of `mib` MiB of zeros (a gzip bomb: a
/// few hundred KiB on disk).
fn bomb(path: &Path, mib: u64) {
    let f = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    let mut tb = tar::Builder::new(gz);
    let manifest = crate::bundle::MANIFEST.as_bytes();
    let mut h = tar::Header::new_gnu();
    h.set_size(manifest.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tb.append_data(&mut h, "manifest.json", manifest).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(mib << 20);
    h.set_mode(0o644);
    h.set_cksum();
    let zeros = std::io::Read::take(std::io::repeat(0), mib << 20);
    tb.append_data(&mut h, "sys/zeros", zeros).unwrap();
    tb.into_inner().unwrap().finish().unwrap();
}

/// A gzip'd file of `mib` MiB of one repeated line.
fn gz_of_lines(path: &Path, line: &str, mib: usize) {
    let f = std::fs::File::create(path).unwrap();
    let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    let chunk = line.repeat((1 << 20) / line.len().max(1));
    for _ in 0..mib {
        gz.write_all(chunk.as_bytes()).unwrap();
    }
    gz.finish().unwrap();
}

/// An NCCL topology XML of `n` PCI functions of `class` side by side under one CPU.
fn wide_nccl(n: u32, class: &str) -> String {
    let mut x = String::from("<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\">");
    for i in 0..n {
        x.push_str(&format!(
            "<pci busid=\"{:04x}:{:02x}:00.0\" class=\"{class}\" link_speed=\"16.0 GT/s PCIe\" link_width=\"16\"/>",
            i >> 8,
            i & 0xff
        ));
    }
    x.push_str("</cpu></system>\n");
    x
}

/// Every PCI device's `link/` leading back to the bus listing, 3,000 of them (the capture's
/// cost bomb of tests/it/hardening.rs).
fn link_tree(dir: &Path) -> PathBuf {
    let tree = dir.join("links");
    let devs = tree.join("sys/bus/pci/devices");
    std::fs::create_dir_all(tree.join("proc")).unwrap();
    for i in 0..3000 {
        let d = devs.join(format!("x{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink("..", d.join("link")).unwrap();
    }
    tree
}

/// Each reading command on deep, huge and garbage input, under the address-space ceiling.
#[test]
fn bounds_every_command_on_hostile_input_under_a_memory_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let junk = d.join("junk.tar.gz");
    std::fs::write(&junk, garbage(4 << 20)).unwrap();
    let boom = d.join("bomb.tar.gz");
    bomb(&boom, 300);
    let links = link_tree(d);
    // Records in other formats: huge, deep, gzip bombs.
    let lspci = d.join("lspci.txt");
    std::fs::write(
        &lspci,
        "0000:17:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:2330] (rev a1)\n\
         \tSubsystem: NVIDIA Corporation Device [10de:16c1]\n\
         \tNUMA node: 0\n\n"
            .repeat(200_000),
    )
    .unwrap();
    let hwloc = d.join("deep-hwloc.xml");
    std::fs::write(
        &hwloc,
        format!(
            "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">{}{}</topology>\n",
            "<object type=\"Bridge\" os_index=\"0\">".repeat(100_000),
            "</object>".repeat(100_000)
        ),
    )
    .unwrap();
    let nccl = d.join("wide-nccl.xml");
    std::fs::write(&nccl, wide_nccl(20_000, "0x060400")).unwrap();
    let bug = d.join("nvidia-bug-report.log.gz");
    gz_of_lines(
        &bug,
        "[ 1.0] NVRM: Xid (PCI:0000:17:00): 79, pid=1, name=x, GPU has fallen off the bus.\n",
        300,
    );
    let garbage_text = d.join("garbage.txt");
    std::fs::write(&garbage_text, garbage(4 << 20)).unwrap();
    // A fleet directory: deep, with garbage and the bomb at the bottom.
    let mut deep = d.join("fleet");
    for i in 0..40 {
        deep = deep.join(format!("d{i}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::copy(&junk, deep.join("a.tar.gz")).unwrap();
    std::fs::copy(&boom, deep.join("b.tar.gz")).unwrap();
    let out = d.join("out");

    let p = |p: &Path| p.as_os_str().to_owned();
    let s = |s: &str| std::ffi::OsString::from(s);
    let runs: Vec<(&str, Vec<std::ffi::OsString>)> = vec![
        (
            "check --bundle garbage",
            vec![s("check"), s("--bundle"), p(&junk)],
        ),
        (
            "check --bundle bomb",
            vec![s("check"), s("--bundle"), p(&boom)],
        ),
        (
            "topo --bundle bomb",
            vec![s("topo"), s("--bundle"), p(&boom)],
        ),
        (
            "bundle --bundle bomb",
            vec![s("bundle"), s("--bundle"), p(&boom), s("-o"), p(&out)],
        ),
        (
            "baseline --bundle bomb",
            vec![s("baseline"), s("--bundle"), p(&boom), s("-o"), p(&out)],
        ),
        (
            "export nccl-topo --bundle bomb",
            vec![s("export"), s("nccl-topo"), s("--bundle"), p(&boom)],
        ),
        (
            "check --root links",
            vec![s("--root"), p(&links), s("check")],
        ),
        ("topo --root links", vec![s("--root"), p(&links), s("topo")]),
        (
            "bundle --root links",
            vec![s("--root"), p(&links), s("bundle"), s("-o"), p(&out)],
        ),
        (
            "baseline --root links",
            vec![s("--root"), p(&links), s("baseline"), s("-o"), p(&out)],
        ),
        (
            "export nccl-topo --root links",
            vec![s("--root"), p(&links), s("export"), s("nccl-topo")],
        ),
        ("fleet deep", vec![s("fleet"), p(&d.join("fleet"))]),
        ("fleet bomb garbage", vec![s("fleet"), p(&boom), p(&junk)]),
        ("diff bomb bomb", vec![s("diff"), p(&boom), p(&boom)]),
        ("diff garbage bomb", vec![s("diff"), p(&junk), p(&boom)]),
        (
            "topo --from lspci",
            vec![
                s("topo"),
                s("--from"),
                p(&lspci),
                s("--from-format"),
                s("lspci"),
            ],
        ),
        (
            "topo --from deep hwloc",
            vec![
                s("topo"),
                s("--from"),
                p(&hwloc),
                s("--from-format"),
                s("hwloc"),
            ],
        ),
        (
            "topo --from wide nccl",
            vec![
                s("topo"),
                s("--from"),
                p(&nccl),
                s("--from-format"),
                s("nccl"),
            ],
        ),
        (
            "topo --from bug-report bomb",
            vec![
                s("topo"),
                s("--from"),
                p(&bug),
                s("--from-format"),
                s("bug-report"),
            ],
        ),
        (
            "topo --from garbage",
            vec![s("topo"), s("--from"), p(&garbage_text)],
        ),
        (
            "check --from bug-report bomb",
            vec![s("check"), s("--from"), p(&bug)],
        ),
        (
            "check --from lspci",
            vec![s("check"), s("--from"), p(&lspci)],
        ),
    ];
    for (what, args) in &runs {
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        bounded(what, &args);
    }
}

/// An NCCL topology XML of 200,000 PCI functions (26 MB, under the 128 MiB record cap): the
/// reader places at most `MAX_FUNCTIONS` (4,096) `<pci>` and notes the rest, so `topo --from`
/// stays under the ceiling instead of allocating without bound.
#[test]
fn bounds_nccl_record_of_200k_functions_under_the_ceiling() {
    let dir = tempfile::tempdir().unwrap();
    let nccl = dir.path().join("wide-nccl.xml");
    std::fs::write(&nccl, wide_nccl(200_000, "0x060400")).unwrap();
    bounded(
        "topo --from nccl of 200,000 functions",
        &["topo".as_ref(), "--from".as_ref(), nccl.as_os_str()],
    );
}

/// Files of this process's extraction left in /dev/shm or the temporary directory.
fn left_by(pid: u32) -> Vec<String> {
    let mine = format!("gpudoctor-bundle-{pid}-");
    std::fs::read_dir("/dev/shm")
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
        .collect()
}

/// A valid-looking bundle of many small members: extracting it takes a moment.
fn many_members(path: &Path, n: usize) {
    let f = std::fs::File::create(path).unwrap();
    let gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
    let mut tb = tar::Builder::new(gz);
    let manifest = crate::bundle::MANIFEST.as_bytes();
    let mut h = tar::Header::new_gnu();
    h.set_size(manifest.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tb.append_data(&mut h, "manifest.json", manifest).unwrap();
    for i in 0..n {
        let mut h = tar::Header::new_gnu();
        h.set_size(2);
        h.set_mode(0o644);
        h.set_cksum();
        tb.append_data(&mut h, format!("sys/m/{:03}/{i}", i % 997), &b"1\n"[..])
            .unwrap();
    }
    tb.into_inner().unwrap().finish().unwrap();
}

/// `diff` stopped by SIGINT or SIGTERM while it extracts its two bundles leaves no extraction
/// directory behind (in /dev/shm or the temporary directory).
#[test]
fn bounds_interrupted_diff_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.tar.gz"), dir.path().join("b.tar.gz"));
    many_members(&a, 150_000);
    std::fs::copy(&a, &b).unwrap();
    let bin = assert_cmd::cargo::cargo_bin("gpudoctor");
    let mut caught_extracting = 0;
    for (sig, after_ms) in [
        (libc::SIGINT, 300),
        (libc::SIGTERM, 600),
        (libc::SIGINT, 1200),
    ] {
        let child = std::process::Command::new(&bin)
            .arg("diff")
            .arg(&a)
            .arg(&b)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        std::thread::sleep(std::time::Duration::from_millis(after_ms));
        let extracting = !left_by(pid).is_empty();
        // SAFETY: a signal to the child this test started (not yet waited for).
        unsafe { libc::kill(pid as i32, sig) };
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        let left = left_by(pid);
        assert!(
            left.is_empty(),
            "signal {sig} after {after_ms} ms: left {left:?}"
        );
        if extracting {
            // Stopped mid-extraction: it says so and fails, never a verdict.
            assert_eq!(o.status.code(), Some(2), "signal {sig}: {err}");
            caught_extracting += 1;
        }
    }
    // At least one signal arrived while an extraction directory existed (else this proved
    // nothing about cleanup).
    assert!(
        caught_extracting >= 1,
        "no signal arrived during extraction"
    );
}
