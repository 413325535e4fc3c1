//! Hostile trees: hide random files, put garbage in them, break links. The pipeline must give
//! unknowns and notes (or a clean error), never a panic.

use gpudoctor::config::{CheckOptions, SourceSpec};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn copy_tree(src: &Path, dst: &Path) {
    for e in walk(src) {
        let rel = e.strip_prefix(src).unwrap();
        let to = dst.join(rel);
        let meta = std::fs::symlink_metadata(&e).unwrap();
        if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&e).unwrap(), &to).unwrap();
        } else if meta.is_dir() {
            std::fs::create_dir_all(&to).unwrap();
        } else {
            std::fs::copy(&e, &to).unwrap();
        }
    }
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let cur = out[i].clone();
        i += 1;
        let meta = std::fs::symlink_metadata(&cur).unwrap();
        if meta.is_dir() {
            let mut kids: Vec<PathBuf> = std::fs::read_dir(&cur)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            kids.sort();
            out.extend(kids);
        }
    }
    out
}

fn run_all(root: &Path) {
    let spec = SourceSpec::Root(root.to_path_buf());
    // Either a report or a clean error: both are fine, a panic is not.
    let _ = gpudoctor::run::topo_report(&spec).map(|r| {
        (
            gpudoctor::render::topo_matrix(&r, 40),
            gpudoctor::render::topo_matrix_tsv(&r),
        )
    });
    let opts = CheckOptions::level0();
    if let Ok(r) = gpudoctor::run::check_report(&spec, &opts) {
        let _ = gpudoctor::render::json(&r);
    }
}

#[derive(Debug, Clone)]
enum Damage {
    Remove,
    Garbage(Vec<u8>),
    Empty,
    DanglingLink,
    LoopLink,
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::Remove),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Damage::Garbage),
        Just(Damage::Empty),
        Just(Damage::DanglingLink),
        Just(Damage::LoopLink),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, .. ProptestConfig::default() })]
    #[test]
    fn damaged_fixture_never_panics(
        fixture in prop_oneof![Just("vm-flat-4gpu"), Just("h200x2-vm"), Just("pcie-2socket-roce")],
        picks in proptest::collection::vec((any::<proptest::sample::Index>(), damage()), 1..12),
    ) {
        let src = crate::fixture_tree(fixture);
        prop_assume!(src.join("sys").is_dir());
        let tmp = tempfile::tempdir().unwrap();
        copy_tree(&src, tmp.path());
        let files: Vec<PathBuf> = walk(&tmp.path().join("sys"))
            .into_iter()
            .filter(|p| std::fs::symlink_metadata(p).map(|m| !m.is_dir()).unwrap_or(false))
            .collect();
        for (idx, d) in picks {
            let f = idx.get(&files);
            let _ = std::fs::remove_file(f);
            match d {
                Damage::Remove => {}
                Damage::Garbage(b) => { let _ = std::fs::write(f, b); }
                Damage::Empty => { let _ = std::fs::write(f, b""); }
                Damage::DanglingLink => { let _ = std::os::unix::fs::symlink("../../nowhere/at/all", f); }
                Damage::LoopLink => { let _ = std::os::unix::fs::symlink(f.file_name().unwrap(), f); }
            }
        }
        run_all(tmp.path());
    }
}

#[test]
fn truncated_config_space_is_needs_root_not_pass() {
    let src = crate::fixture_tree("hgx-h100-8gpu");
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&src, tmp.path());
    for p in walk(&tmp.path().join("sys/devices")) {
        if p.file_name().map(|n| n == "config").unwrap_or(false) {
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, &b[..64.min(b.len())]).unwrap();
        }
    }
    let opts = CheckOptions::level0();
    let r =
        gpudoctor::run::check_report(&SourceSpec::Root(tmp.path().to_path_buf()), &opts).unwrap();
    let acs: Vec<_> = r
        .checks
        .iter()
        .filter(|c| c.id == "pcie.acs-redirect")
        .collect();
    assert!(!acs.is_empty());
    for c in acs {
        assert_eq!(c.status, gpudoctor::checks::Status::Skip, "{c:?}");
        assert!(c.message.contains("needs root"), "{}", c.message);
    }
}

/// Upper-case hex in BDFs (some tools and hand-made trees write them), a device without a
/// driver, numa_node -1 and a non-numeric numa_node: all mapped, with explicit unknowns.
#[test]
fn uppercase_bdf_and_odd_attributes() {
    let tmp = tempfile::tempdir().unwrap();
    let r = tmp.path();
    let dev = r.join("sys/devices/pci0000:1A/0000:1A:00.0");
    let nic = r.join("sys/devices/pci0000:1A/0000:1A:01.0");
    for (d, class, vendor, numa) in [
        (&dev, "0x030200", "0x10de", "-1"),
        (&nic, "0x020700", "0x15b3", "abc"),
    ] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::write(d.join("class"), format!("{class}\n")).unwrap();
        std::fs::write(d.join("vendor"), format!("{vendor}\n")).unwrap();
        std::fs::write(d.join("device"), "0x2330\n").unwrap();
        std::fs::write(d.join("numa_node"), format!("{numa}\n")).unwrap();
    }
    std::fs::create_dir_all(r.join("sys/bus/pci/devices")).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:1A/0000:1A:00.0",
        r.join("sys/bus/pci/devices/0000:1A:00.0"),
    )
    .unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:1A/0000:1A:01.0",
        r.join("sys/bus/pci/devices/0000:1A:01.0"),
    )
    .unwrap();
    let r = gpudoctor::run::topo_report(&SourceSpec::Root(tmp.path().to_path_buf())).unwrap();
    let t = &r.topology;
    assert_eq!(t.gpus.len(), 1);
    assert_eq!(t.gpus[0].bdf.to_string(), "0000:1a:00.0");
    let g = t
        .devices
        .iter()
        .find(|d| d.bdf.to_string() == "0000:1a:00.0")
        .unwrap();
    assert_eq!(g.numa.node, None);
    assert!(g.unknown["numa_node"].contains("-1"));
    assert!(g.unknown["driver"].contains("no driver"));
    let n = t
        .devices
        .iter()
        .find(|d| d.bdf.to_string() == "0000:1a:01.0")
        .unwrap();
    assert!(n.unknown["numa_node"].contains("abc"), "{:?}", n.unknown);
    // Nothing at all is known about NUMA or links: the check report says skip, never pass.
    let opts = CheckOptions::level0();
    let c =
        gpudoctor::run::check_report(&SourceSpec::Root(tmp.path().to_path_buf()), &opts).unwrap();
    for f in c
        .checks
        .iter()
        .filter(|f| f.id.as_str().starts_with("pcie.link"))
    {
        assert_eq!(f.status, gpudoctor::checks::Status::Skip, "{f:?}");
    }
}

/// A read that never returns (a hung device) cannot stall gpudoctor: discovery runs against a
/// deadline and the error names what it was reading.
#[test]
fn stalled_discovery_is_a_clear_error() {
    use std::time::Duration;
    let r = gpudoctor::run::with_deadline(
        Duration::from_millis(100),
        || std::thread::sleep(Duration::from_secs(5)),
        || "/sys/bus/pci/devices/0000:1b:00.0/config".to_string(),
    );
    let e = format!("{:#}", r.unwrap_err());
    assert!(
        e.contains("/sys/bus/pci/devices/0000:1b:00.0/config"),
        "{e}"
    );
    assert!(e.contains("hung"), "{e}");
    let ok = gpudoctor::run::with_deadline(Duration::from_secs(5), || 7, String::new).unwrap();
    assert_eq!(ok, 7);
}

/// Regression (found by `damaged_fixture_never_panics` in CI): an RDMA device whose PCI
/// function is not listed under /sys/bus/pci/devices (entry removed or unreadable) still makes
/// a NIC; building the matrix must give that NIC an unknown (N/A) affinity, not panic on a
/// missing NUMA entry. Both the topology and the level-0 checks must come back.
#[test]
fn rdma_device_on_an_unlisted_function() {
    let src = crate::fixture_tree("pcie-2socket-roce");
    let tmp = tempfile::tempdir().unwrap();
    copy_tree(&src, tmp.path());
    std::fs::remove_file(tmp.path().join("sys/bus/pci/devices/0000:02:00.0")).unwrap();
    let spec = SourceSpec::Root(tmp.path().to_path_buf());
    let r = gpudoctor::run::topo_report(&spec).unwrap();
    let t = &r.topology;
    assert!(
        t.notes
            .iter()
            .any(|n| n.contains("mlx5_0") && n.contains("not among the PCI devices")),
        "{:?}",
        t.notes
    );
    let i = t
        .matrix
        .labels
        .iter()
        .position(|l| t.nic(l).is_some_and(|n| n.rdma_device == "mlx5_0"))
        .expect("mlx5_0 is still a NIC in the matrix");
    assert_eq!(t.matrix.cpu_affinity[i], "N/A");
    assert!(gpudoctor::render::topo_matrix(&r, 100).contains("NIC"));
    let opts = CheckOptions::level0();
    let c = gpudoctor::run::check_report(&spec, &opts).unwrap();
    // Every PCIe check that judges NICs names the unread function as unknown, never a pass.
    for id in [
        "pcie.link-width",
        "pcie.link-speed",
        "pcie.devctl",
        "pcie.aer",
    ] {
        let on_it: Vec<_> = c
            .checks
            .iter()
            .filter(|f| f.id == id && f.subject == "0000:02:00.0")
            .collect();
        assert_eq!(on_it.len(), 1, "{id}: {on_it:?}");
        assert_eq!(
            on_it[0].status,
            gpudoctor::checks::Status::Skip,
            "{:?}",
            on_it[0]
        );
        assert!(
            on_it[0].message.contains("not among the PCI devices read"),
            "{:?}",
            on_it[0]
        );
    }
}

/// `check` fails by kind: a source that cannot be read is `CheckError::Failed`
/// (exit 2), never `Hung` (the one kind that exits 1 and leaves without joining a worker).
#[test]
fn check_errors_say_their_kind() {
    let opts = gpudoctor::config::CheckOptions::level0();
    let spec = SourceSpec::Root(std::path::PathBuf::from("/nonexistent/gpudoctor-tree"));
    match gpudoctor::run::check_report(&spec, &opts) {
        Err(gpudoctor::run::CheckError::Failed(e)) => {
            assert!(
                format!("{e:#}").contains("/nonexistent/gpudoctor-tree"),
                "{e:#}"
            )
        }
        other => panic!("expected CheckError::Failed, got {other:?}"),
    }
}
