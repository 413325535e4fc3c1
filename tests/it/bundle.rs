//! Support bundles: the capture list keeps up with discovery, a bundle replays to the same
//! report as the tree it was made from, and hostile or broken archives are refused cleanly.

use crate::{fixture_dirs, gpudoctor, name};
use gpudoctor::bundle::capture::Capture;
use gpudoctor::bundle::read::{Limits, extract_from, target_inside};
use gpudoctor::inventory::Inventory;
use gpudoctor::nvml::NvmlSnapshot;
use gpudoctor::sysroot::SysRoot;
use proptest::prelude::*;
use std::io::Write;
use std::path::Path;

pub(crate) const MANIFEST: &str = r#"{"format":"gpudoctor.bundle","format_version":1}"#;

/// Every path discovery reads on every fixture is one the capture list records.
#[test]
fn capture_list_covers_discovery_on_every_fixture() {
    for dir in fixture_dirs() {
        let sr = SysRoot::at(&dir).unwrap();
        let nvml = NvmlSnapshot::unavailable("not needed", "test");
        Inventory::collect(&sr, nvml).unwrap();
        let (touched, listed) = (sr.touched(), sr.listed());
        assert!(touched.len() > 50, "{}: discovery read little", name(&dir));
        let probe = SysRoot::at(&dir).unwrap();
        let cap = Capture::collect_all(&probe, &mut |_| {});
        let missing = cap.uncovered(&probe, &touched, &listed);
        assert!(
            missing.is_empty(),
            "{}: discovery reads paths the bundle capture list (src/bundle/capture.rs) misses: {missing:#?}",
            name(&dir)
        );
    }
}

/// Every fixture is an unpacked bundle: its manifest parses and is a format this build reads.
#[test]
fn every_fixture_has_a_manifest() {
    for dir in fixture_dirs() {
        let bytes = std::fs::read(dir.join("manifest.json"))
            .unwrap_or_else(|_| panic!("{}: no manifest.json", name(&dir)));
        let m = gpudoctor::bundle::Manifest::from_json(&bytes).unwrap();
        assert!(
            !m.recorded_by.is_empty(),
            "{}: say how it was recorded",
            name(&dir)
        );
    }
}

fn json_without_source(bytes: &[u8]) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    v.as_object_mut().unwrap().remove("source");
    v
}

/// Null out identifiers that redaction replaces, wherever they sit.
fn mask_ids(mut v: serde_json::Value) -> serde_json::Value {
    fn walk(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m.iter_mut() {
                    if k == "uuid" || k == "serial" {
                        *x = serde_json::Value::Null;
                    } else {
                        walk(x);
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    walk(&mut v);
    v
}

/// A bundle made from a fixture tree replays to the same `topo --json` as the tree itself,
/// redacted or not, and an unpacked bundle works as `--root`.
#[test]
fn fixture_bundles_replay_identically() {
    for dir in fixture_dirs() {
        let n = name(&dir);
        let root = format!("fixtures/{n}");
        let tmp = tempfile::tempdir().unwrap();
        let tree = gpudoctor()
            .args(["topo", "--json", "--root", &root])
            .output()
            .unwrap();
        assert_eq!(tree.status.code(), Some(0));
        for redact in [false, true] {
            let out = tmp.path().join(format!("{n}-{redact}.tar.gz"));
            let mut cmd = gpudoctor();
            cmd.args(["--root", &root, "bundle", "-o"]).arg(&out);
            if !redact {
                cmd.arg("--no-redact");
            }
            let made = cmd.output().unwrap();
            assert_eq!(
                made.status.code(),
                Some(0),
                "{n}: {}",
                String::from_utf8_lossy(&made.stderr)
            );
            // The self-replay found nothing to warn about.
            assert!(
                made.stderr.is_empty(),
                "{n}: {}",
                String::from_utf8_lossy(&made.stderr)
            );
            let size = std::fs::metadata(&out).unwrap().len();
            assert!(size < 1 << 20, "{n}: bundle is {size} bytes");
            let replay = gpudoctor()
                .args(["topo", "--json", "--bundle"])
                .arg(&out)
                .output()
                .unwrap();
            assert_eq!(replay.status.code(), Some(0));
            let v: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
            assert_eq!(v["source"]["kind"], "bundle");
            // Redaction replaces identifiers (GPU UUIDs here) with stable tokens; everything
            // else must replay exactly.
            let (a, b) = if redact {
                (
                    mask_ids(json_without_source(&replay.stdout)),
                    mask_ids(json_without_source(&tree.stdout)),
                )
            } else {
                (
                    json_without_source(&replay.stdout),
                    json_without_source(&tree.stdout),
                )
            };
            assert_eq!(a, b, "{n}: replay differs (redact={redact})");
            // Unpacked, the bundle is a tree for --root.
            let unpacked = tmp.path().join(format!("{n}-{redact}"));
            std::fs::create_dir(&unpacked).unwrap();
            let f = std::fs::File::open(&out).unwrap();
            tar::Archive::new(flate2::read::GzDecoder::new(f))
                .unpack(&unpacked)
                .unwrap();
            let again = gpudoctor()
                .args(["topo", "--json", "--root"])
                .arg(&unpacked)
                .output()
                .unwrap();
            assert_eq!(again.status.code(), Some(0));
            assert_eq!(
                mask_ids(json_without_source(&again.stdout)),
                mask_ids(json_without_source(&tree.stdout))
            );
            let m: serde_json::Value =
                serde_json::from_slice(&std::fs::read(unpacked.join("manifest.json")).unwrap())
                    .unwrap();
            assert_eq!(m["format"], "gpudoctor.bundle");
            assert_eq!(m["redaction"]["enabled"], redact);
            let r: Vec<&str> = m["reports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap())
                .collect();
            assert!(r.contains(&"topo") && r.contains(&"check"), "{r:?}");
        }
    }
}

/// Redaction leaves no MAC address of the fixture in the bundle.
#[test]
fn redaction_removes_macs() {
    let dir = fixture_dirs().into_iter().last().unwrap();
    let sr = SysRoot::at(&dir).unwrap();
    let mut macs = Vec::new();
    for n in sr.list_names("/sys/class/net").unwrap() {
        if let Ok(a) = sr.read_text(&format!("/sys/class/net/{n}/address"))
            && a != "00:00:00:00:00:00"
        {
            macs.push(a);
        }
    }
    assert!(!macs.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b.tar.gz");
    let root = format!("fixtures/{}", name(&dir));
    let made = gpudoctor()
        .args(["--root", &root, "bundle", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0));
    let mut all = Vec::new();
    let f = std::fs::File::open(&out).unwrap();
    let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        std::io::Read::read_to_end(&mut e, &mut all).unwrap();
    }
    let all = String::from_utf8_lossy(&all);
    for m in macs {
        assert!(!all.contains(&m), "MAC {m} left in the bundle");
    }
}

/// A short hostname ("vm", as on our GPU VMs) is not replaced inside text, so the reports'
/// own `hostname` field must be set to the manifest's token: a bundle recorded on the 4-GPU
/// VM kept `"hostname": "vm"` in report.json while its manifest said `host-...`. Long names
/// are replaced everywhere (both cases checked).
#[test]
fn redaction_replaces_the_reports_hostname_field() {
    for hostname in ["vm", "gpu-node-17.example.net"] {
        let tmp = tempfile::tempdir().unwrap();
        let tree = crate::copy_fixture_into("pcie-2socket-roce", tmp.path());
        std::fs::write(
            tree.join("proc/sys/kernel/hostname"),
            format!("{hostname}\n"),
        )
        .unwrap();
        // The reports name the node as the source does: a recorded tree's manifest `host`.
        let mpath = tree.join("manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&mpath).unwrap()).unwrap();
        m["host"] = hostname.into();
        std::fs::write(&mpath, m.to_string()).unwrap();
        let out = tmp.path().join("b.tar.gz");
        make_quiet_bundle("--root", &tree, &out);
        let mut docs = std::collections::BTreeMap::new();
        let f = std::fs::File::open(&out).unwrap();
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(f));
        for e in ar.entries().unwrap() {
            let mut e = e.unwrap();
            let p = e.path().unwrap().display().to_string();
            if p.ends_with("manifest.json") || p.ends_with("report.json") {
                let mut b = String::new();
                std::io::Read::read_to_string(&mut e, &mut b).unwrap();
                docs.insert(p.trim_start_matches("./").to_string(), b);
            }
        }
        let manifest: serde_json::Value = serde_json::from_str(&docs["manifest.json"]).unwrap();
        let token = manifest["host"].as_str().unwrap();
        assert!(token.starts_with("host-"), "{hostname}: {token}");
        let report: serde_json::Value = serde_json::from_str(&docs["report.json"]).unwrap();
        let mut fields = 0;
        for (command, r) in report["reports"].as_object().unwrap() {
            if let Some(h) = r.get("hostname") {
                assert_eq!(h, token, "{hostname}: {command}'s hostname field");
                fields += 1;
            }
        }
        assert!(fields >= 1, "{hostname}: no report carries a hostname");
        assert!(
            !docs["report.json"].contains(&format!("\"{hostname}\"")),
            "{hostname} left in report.json"
        );
    }
}

// ---- hostile and broken archives -------------------------------------------------------

pub(crate) enum E<'a> {
    File(&'a str, &'a [u8]),
    Dir(&'a str),
    Link(&'a str, &'a str),
    Hard(&'a str, &'a str),
    Kind(&'a str, tar::EntryType),
    /// A header claiming `size` bytes, followed by that many zeros.
    Sized(&'a str, u64),
}

/// A gzip'd tar written header by header, names unchecked (the tar crate's builder would
/// refuse the hostile ones).
pub(crate) fn archive(entries: &[E]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_old();
        let (name, kind, link, data): (&str, tar::EntryType, Option<&str>, Vec<u8>) = match e {
            E::File(n, d) => (n, tar::EntryType::Regular, None, d.to_vec()),
            E::Dir(n) => (n, tar::EntryType::Directory, None, vec![]),
            E::Link(n, t) => (n, tar::EntryType::Symlink, Some(t), vec![]),
            E::Hard(n, t) => (n, tar::EntryType::Link, Some(t), vec![]),
            E::Kind(n, k) => (n, *k, None, vec![]),
            E::Sized(n, s) => (n, tar::EntryType::Regular, None, vec![0; *s as usize]),
        };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        if let Some(l) = link {
            h.as_old_mut().linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append(&h, data.as_slice()).unwrap();
    }
    gz(&b.into_inner().unwrap())
}

pub(crate) fn gz(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

fn small() -> Limits {
    Limits {
        entries: 50,
        entry_bytes: 64 << 10,
        total_bytes: 1 << 20,
    }
}

fn refused(bytes: &[u8], limits: Limits) -> String {
    match extract_from(bytes, limits) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn hostile_entries_are_refused() {
    let m = E::File("manifest.json", MANIFEST.as_bytes());
    let cases: Vec<(Vec<E>, &str)> = vec![
        (vec![E::File("/etc/evil", b"x")], "absolute path"),
        (vec![E::File("sys/../../evil", b"x")], "'..'"),
        (vec![E::Link("sys/l", "/etc")], "absolute path"),
        (vec![E::Link("sys/l", "../../etc")], "outside the bundle"),
        (
            vec![E::Link("sys/l", "../sys/.."), E::File("sys/l/x", b"")],
            "below a symlink",
        ),
        (
            vec![E::Link("sys", "proc"), E::Dir("sys/x")],
            "below a symlink",
        ),
        (vec![E::File("a", b""), E::Hard("sys/h", "a")], "hard link"),
        (
            vec![E::Kind("sys/dev", tar::EntryType::Char)],
            "device file",
        ),
        (
            vec![E::Kind("sys/blk", tar::EntryType::Block)],
            "device file",
        ),
        (vec![E::Kind("sys/fifo", tar::EntryType::Fifo)], "fifo"),
        (vec![E::File("a", b"1"), E::File("a", b"2")], "duplicate"),
        (vec![E::Sized("sys/huge", (64 << 10) + 1)], "entry limit"),
        (vec![E::File("sys/x", b"1")], "no manifest.json"),
        (vec![E::File("manifest.json", b"{")], "manifest.json"),
        (
            vec![E::File(
                "manifest.json",
                br#"{"format":"gpudoctor.bundle","format_version":7,"gpudoctor_version":"9.1.0"}"#,
            )],
            "newer",
        ),
        (
            vec![E::File(
                "manifest.json",
                br#"{"format":"gpudoctor.bundle","format_version":0}"#,
            )],
            "format_version",
        ),
        (
            vec![E::File("manifest.json", br#"{"format":"other"}"#)],
            "format",
        ),
    ];
    for (entries, want) in cases {
        let mut with_manifest = vec![];
        let needs_manifest = !entries
            .iter()
            .any(|e| matches!(e, E::File(n, _) if *n == "manifest.json" || *n == "sys/x"));
        if needs_manifest {
            with_manifest.push(E::File("manifest.json", MANIFEST.as_bytes()));
        }
        with_manifest.extend(entries);
        let err = refused(&archive(&with_manifest), small());
        assert!(err.contains(want), "wanted '{want}' in: {err}");
        assert!(!err.contains('\n'), "{err}");
    }
    // Limits on the whole archive.
    let many: Vec<E> = (0..60).map(|_| E::Dir("sys")).collect();
    assert!(refused(&archive(&many), small()).contains("entries"));
    let bomb: Vec<(String, u64)> = (0..20).map(|i| (format!("f{i}"), 60 << 10)).collect();
    let bomb: Vec<E> = std::iter::once(E::File("manifest.json", MANIFEST.as_bytes()))
        .chain(bomb.iter().map(|(n, s)| E::Sized(n, *s)))
        .collect();
    assert!(refused(&archive(&bomb), small()).contains("gzip bomb"));
    // And a clean one passes.
    let ok = archive(&[
        m,
        E::Dir("sys/devices/x"),
        E::Link("sys/bus", "devices/x"),
        E::File("sys/devices/x/a", b"1\n"),
    ]);
    let x = extract_from(ok.as_slice(), small()).unwrap();
    assert_eq!(
        std::fs::read_link(x.dir.path().join("sys/bus")).unwrap(),
        Path::new("devices/x")
    );
}

/// Through the CLI: one line, exit 2, nothing left in the temporary directory.
#[test]
fn bad_bundles_exit_2_with_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let private_tmp = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", b"this is not a bundle".to_vec()),
        ("empty", vec![]),
        (
            "escape",
            archive(&[
                E::File("manifest.json", MANIFEST.as_bytes()),
                E::Link("sys", "../../.."),
            ]),
        ),
        ("truncated", {
            let a = archive(&[
                E::File("manifest.json", MANIFEST.as_bytes()),
                E::File("sys/x", &[7u8; 5000]),
            ]);
            a[..a.len() / 2].to_vec()
        }),
        ("no-manifest", archive(&[E::Dir("sys/bus/pci/devices")])),
    ];
    for (n, bytes) in cases {
        let f = tmp.path().join(format!("{n}.tar.gz"));
        std::fs::write(&f, bytes).unwrap();
        let out = gpudoctor()
            .env("TMPDIR", private_tmp.path())
            .args(["topo", "--bundle"])
            .arg(&f)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{n}");
        assert!(out.stdout.is_empty(), "{n}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{n}: {err}");
        assert!(err.starts_with("gpudoctor: error: --bundle"), "{n}: {err}");
        assert_eq!(
            std::fs::read_dir(private_tmp.path()).unwrap().count(),
            0,
            "{n}: left files in TMPDIR"
        );
    }
    let both = gpudoctor()
        .args([
            "topo",
            "--bundle",
            "x.tar.gz",
            "--root",
            "fixtures/h200x1-vm",
        ])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2));
}

/// `gpudoctor SOURCE_FLAG SOURCE bundle -o OUT` succeeds and its self-replay warns of nothing.
fn make_quiet_bundle(source_flag: &str, source: &std::path::Path, out: &std::path::Path) {
    let made = gpudoctor()
        .arg(source_flag)
        .arg(source)
        .args(["bundle", "-o"])
        .arg(out)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0));
    assert!(
        made.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
}

fn valid_bundle() -> Vec<u8> {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("v.tar.gz");
    let made = gpudoctor()
        .args(["--root", "fixtures/h200x1-vm", "bundle", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(0));
    std::fs::read(out).unwrap()
}

/// Whatever extraction accepts stays inside its directory: every symlink in it resolves,
/// lexically, inside (and `SysRoot` re-roots links on top of that).
fn stays_inside(bytes: &[u8]) {
    let Ok(x) = extract_from(bytes, small()) else {
        return;
    };
    let root = x.dir.path().to_path_buf();
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                let rel = p.strip_prefix(&root).unwrap();
                assert!(
                    target_inside(rel, &t.to_string_lossy()).is_ok(),
                    "{} -> {}",
                    rel.display(),
                    t.display()
                );
            } else if m.is_dir() {
                stack.push(p);
            } else {
                assert!(m.is_file());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        stays_inside(&bytes);
        let mut with_magic = vec![0x1f, 0x8b, 8, 0];
        with_magic.extend_from_slice(&bytes);
        stays_inside(&with_magic);
    }

    #[test]
    fn random_tar_inside_gzip_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8192)) {
        stays_inside(&gz(&bytes));
    }
}

/// Random mutations of a real bundle: flipped bytes, truncations, and the same inside a valid
/// gzip stream (so the tar layer sees the damage, not just the CRC).
#[test]
fn mutated_bundles_never_panic() {
    let valid = valid_bundle();
    let mut raw = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(valid.as_slice()),
        &mut raw,
    )
    .unwrap();
    let x = extract_from(valid.as_slice(), Limits::default()).unwrap();
    assert!(x.dir.path().join("sys/bus/pci/devices").is_dir());
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 300,
        ..ProptestConfig::default()
    });
    let strat = (
        any::<proptest::sample::Index>(),
        any::<u8>(),
        any::<bool>(),
        any::<bool>(),
    );
    runner
        .run(&strat, |(idx, byte, truncate, inner)| {
            let base = if inner { &raw } else { &valid };
            let mut m = base.clone();
            let i = idx.index(m.len());
            if truncate {
                m.truncate(i);
            } else {
                m[i] ^= byte.max(1);
            }
            let bytes = if inner { gz(&m) } else { m };
            let r = std::panic::catch_unwind(|| {
                let _ = extract_from(bytes.as_slice(), Limits::default());
            });
            prop_assert!(r.is_ok());
            Ok(())
        })
        .unwrap();
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let ft = e.file_type().unwrap();
        if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).unwrap(), &dst).unwrap();
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// An error the recorded machine gave (manifest `unreadable`) reads as the same error from the
/// tree, and survives into a bundle made from that tree and its replay.
#[test]
fn recorded_errors_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let tree = tmp.path().join("tree");
    copy_tree(&crate::repo().join("fixtures/h200x1-vm"), &tree);
    let mpath = tree.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    m["unreadable"] = serde_json::json!([
        {"path": "/sys/devices/pci0000:00/0000:00:06.0/numa_node", "kind": "permission-denied"},
        {"path": "/sys/devices/pci0000:00/0000:00:06.0/local_cpulist", "kind": "io",
         "detail": "Invalid argument (os error 22)"}
    ]);
    std::fs::write(&mpath, serde_json::to_vec(&m).unwrap()).unwrap();
    let from_tree = gpudoctor()
        .args(["topo", "--json", "--root"])
        .arg(&tree)
        .output()
        .unwrap();
    assert_eq!(from_tree.status.code(), Some(0));
    let text = String::from_utf8_lossy(&from_tree.stdout);
    assert!(text.contains("numa_node: permission denied"), "{text}");
    assert!(text.contains("Invalid argument (os error 22)"), "{text}");
    let out = tmp.path().join("b.tar.gz");
    make_quiet_bundle("--root", &tree, &out);
    let replay = gpudoctor()
        .args(["topo", "--json", "--bundle"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        json_without_source(&replay.stdout),
        json_without_source(&from_tree.stdout)
    );
    // A bundle of the bundle too.
    let out2 = tmp.path().join("b2.tar.gz");
    make_quiet_bundle("--bundle", &out, &out2);
    let replay2 = gpudoctor()
        .args(["topo", "--json", "--bundle"])
        .arg(&out2)
        .output()
        .unwrap();
    assert_eq!(
        json_without_source(&replay2.stdout),
        json_without_source(&from_tree.stdout)
    );
}

/// A bundle recorded live on a GPU machine replays here to the reports that machine produced
/// when it wrote the bundle (report.json), except for where the data came from.
#[test]
fn live_recorded_bundles_replay_to_their_live_reports() {
    let mut seen = 0;
    for dir in fixture_dirs() {
        let Ok(bytes) = std::fs::read(dir.join("report.json")) else {
            continue;
        };
        let stored: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let n = name(&dir);
        for (command, args) in [
            ("topo", vec!["topo", "--json"]),
            ("check", vec!["check", "--json"]),
        ] {
            let Some(live) = stored["reports"].get(command) else {
                continue;
            };
            let out = gpudoctor()
                .args(&args)
                .args(["--root", &format!("fixtures/{n}")])
                .output()
                .unwrap();
            let mut live = live.clone();
            live.as_object_mut().unwrap().remove("source");
            // Which build wrote it: the recording's, not this one.
            let revision = live.as_object_mut().unwrap().remove("gpudoctor_revision");
            // The recording is from an older gpudoctor: fields added since (the schema string
            // is unchanged, additions are compatible) are not in it; everything it has must
            // replay the same.
            let mut replayed = json_without_source(&out.stdout);
            replayed
                .as_object_mut()
                .unwrap()
                .remove("gpudoctor_revision");
            // Likewise checks added since (gdr.peer-mapping, rdma.mlx5dv): the recording has
            // no finding for them (nor counts them in its summary); every finding it has must
            // replay the same.
            if let (Some(had), Some(now)) = (
                live["checks"].as_array(),
                replayed.get_mut("checks").and_then(|c| c.as_array_mut()),
            ) {
                let known: Vec<&serde_json::Value> = had.iter().map(|c| &c["id"]).collect();
                let (kept, added): (Vec<_>, Vec<_>) =
                    now.drain(..).partition(|c| known.contains(&&c["id"]));
                *now = kept;
                for c in added {
                    let status = c["status"].as_str().unwrap().to_string();
                    let n = &mut replayed["summary"][status.as_str()];
                    *n = (n.as_u64().unwrap() - 1).into();
                }
            }
            // Checks judged differently since: a recording older than the revision field
            // (the builds before it) skipped pcie.aer where the kernel keeps no AER counters;
            // it is now judged from config space. Those findings are compared in
            // health::aer_from_config_space_where_the_kernel_keeps_no_counters instead.
            if revision.is_none() {
                for doc in [&mut live, &mut replayed] {
                    drop_findings(doc, &["pcie.aer"]);
                }
            }
            if let Some(at) = recorded_differs(&live, &replayed, String::new()) {
                panic!(
                    "{n}: {command} replays differently from the live run recorded in report.json at {at}"
                );
            }
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "live-recorded bundles with topo and check reports ({seen})"
    );
}

/// A check report without the findings of `ids`, its summary counted without them.
fn drop_findings(doc: &mut serde_json::Value, ids: &[&str]) {
    let Some(checks) = doc.get_mut("checks").and_then(|c| c.as_array_mut()) else {
        return;
    };
    let (dropped, kept): (Vec<_>, Vec<_>) = checks
        .drain(..)
        .partition(|c| ids.iter().any(|id| c["id"] == *id));
    *checks = kept;
    for c in dropped {
        let mut less = |key: &str| {
            if let Some(n) = doc["summary"].get_mut(key) {
                *n = (n.as_u64().unwrap() - 1).into();
            }
        };
        less(c["status"].as_str().unwrap());
        if matches!(c["skip"].as_str(), Some("unknown" | "not-root")) {
            less("unjudged");
        }
        if c["skip"] == "not-root" {
            less("not_root");
        }
    }
}

/// Every `.../address` file (netdev MACs, redacted) of a bundle, by path.
fn bundle_addresses(b: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    use std::io::Read;
    let gz = flate2::read::GzDecoder::new(std::fs::File::open(b).unwrap());
    let mut ar = tar::Archive::new(gz);
    let mut out = std::collections::BTreeMap::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let p = e.path().unwrap().display().to_string();
        if p.ends_with("/address") && e.header().entry_type().is_file() {
            let mut s = String::new();
            e.read_to_string(&mut s).unwrap();
            out.insert(p, s);
        }
    }
    out
}

/// `--redact-key-file`: two bundles of one node redact alike (compare GPU by GPU); without
/// it each bundle has its own random key. A bad key file is exit 2 and writes nothing.
#[test]
fn site_key_redacts_consistently_across_bundles() {
    let tmp = tempfile::tempdir().unwrap();
    let key = tmp.path().join("site.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").unwrap();
    let make = |name: &str, with_key: bool| {
        let out = tmp.path().join(name);
        let mut cmd = gpudoctor();
        cmd.args(["--root", "fixtures/h200x2-vm", "bundle", "-o"])
            .arg(&out);
        if with_key {
            cmd.arg("--redact-key-file").arg(&key);
        }
        let made = cmd.output().unwrap();
        assert_eq!(made.status.code(), Some(0));
        bundle_addresses(&out)
    };
    let (k1, k2, r1, r2) = (
        make("k1.tgz", true),
        make("k2.tgz", true),
        make("r1.tgz", false),
        make("r2.tgz", false),
    );
    assert!(!k1.is_empty());
    assert_eq!(k1, k2, "same site key, same tokens");
    assert_ne!(r1, r2, "random keys differ per bundle");
    assert_ne!(k1, r1);
    std::fs::write(&key, "not a key").unwrap();
    let out = tmp.path().join("bad.tgz");
    let made = gpudoctor()
        .args(["--root", "fixtures/h200x2-vm", "bundle", "-o"])
        .arg(&out)
        .arg("--redact-key-file")
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(made.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&made.stderr).contains("32 hex digits"));
    assert!(!out.exists());
}

/// Where `replayed` differs from `recorded`, ignoring object keys `recorded` lacks (fields
/// added to the schema after the recording).
/// "2026-11-27T02:09:25Z" -> seconds since midnight (0 where it does not parse).
fn seconds_of_day(t: &str) -> u32 {
    let n = |r: std::ops::Range<usize>| t.get(r).and_then(|x| x.parse::<u32>().ok());
    match (n(11..13), n(14..16), n(17..19)) {
        (Some(h), Some(m), Some(s)) => h * 3600 + m * 60 + s,
        _ => 0,
    }
}

fn recorded_differs(
    recorded: &serde_json::Value,
    replayed: &serde_json::Value,
    at: String,
) -> Option<String> {
    use serde_json::Value;
    match (recorded, replayed) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| match b.get(k) {
            Some(w) => recorded_differs(v, w, format!("{at}/{k}")),
            None => Some(format!("{at}/{k} (missing)")),
        }),
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| recorded_differs(v, w, format!("{at}/{i}"))),
        _ if recorded == replayed => None,
        // The live report's time is when discovery read the facts; a replay's is the bundle's
        // `created`, written after the capture that follows: within a minute, not the same
        // second.
        (Value::String(a), Value::String(b))
            if at == "/time"
                && a.get(..10) == b.get(..10)
                && seconds_of_day(b) >= seconds_of_day(a)
                && seconds_of_day(b) - seconds_of_day(a) <= 60 =>
        {
            None
        }
        // Recorded before the link came from config space: the same value, cited from the
        // register the kernel's link attribute is computed from.
        (Value::String(a), Value::String(b))
            if at.ends_with("/source") && link_attribute_became_register(a, b) =>
        {
            None
        }
        // Recorded before nouns were put in their number ("1 GPU(s)" reads "1 GPU" now):
        // the same message but for that.
        (Value::String(a), Value::String(b))
            if at.ends_with("/message")
                && a.contains("(s)")
                && plural_free(a) == plural_free(b) =>
        {
            None
        }
        _ => Some(format!("{at}: {recorded} vs {replayed}")),
    }
}

/// `s` with every word's plural ending dropped ("GPU(s)", "GPUs" and "GPU" all read "GPU").
fn plural_free(s: &str) -> String {
    s.split(' ')
        .map(|w| {
            let w = w.replace("(s)", "");
            let end = w.trim_end_matches(|c: char| !c.is_alphanumeric()).len();
            let (word, tail) = w.split_at(end);
            format!("{}{tail}", word.strip_suffix('s').unwrap_or(word))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `a` names a link attribute (`.../current_link_width`) and `b` the config-space register
/// behind it in the same directory (`.../config Link Status @0x..`).
fn link_attribute_became_register(a: &str, b: &str) -> bool {
    let Some((dir, attr)) = a.rsplit_once('/') else {
        return false;
    };
    let register = match attr {
        "current_link_speed" | "current_link_width" => "Link Status",
        "max_link_speed" | "max_link_width" | "max_link_speed, max_link_width" => {
            "Link Capabilities"
        }
        _ => return false,
    };
    b.strip_prefix(dir)
        .and_then(|r| r.strip_prefix(&format!("/config {register} @0x")))
        .is_some_and(|off| off.len() == 2 && off.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A bundle of this very machine (whatever it has) is written without warnings and replays:
/// discovery reads nothing the capture list misses (a debug build refuses to write otherwise),
/// and the replay names the node by its redaction token.
#[test]
fn live_bundle_of_this_machine_is_quiet_and_replays() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("live.tar.gz");
    let made = gpudoctor()
        .args(["bundle", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(
        made.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert!(
        made.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let r = gpudoctor()
        .args(["check", "--json", "--bundle"])
        .arg(&out)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert!(
        v["hostname"]
            .as_str()
            .is_some_and(|h| h.starts_with("host-")),
        "{}",
        v["hostname"]
    );
}
