//! Every fixture replays through the whole pipeline; tree, matrix and JSON are snapshotted.

use crate::{fixture_dirs, gpudoctor, name};

fn run(args: &[&str]) -> String {
    let out = gpudoctor().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Keep versions out of snapshots.
fn stable_json(s: &str) -> serde_json::Value {
    let mut v: serde_json::Value = serde_json::from_str(s).unwrap();
    v["gpudoctor_version"] = "[version]".into();
    v
}

#[test]
fn fixtures_exist() {
    assert!(fixture_dirs().len() >= 2);
}

#[test]
fn snapshot_every_fixture() {
    for dir in fixture_dirs() {
        let n = name(&dir);
        let root = format!("fixtures/{n}");
        let tree = run(&["topo", "--root", &root]);
        let matrix = run(&["topo", "--root", &root, "--matrix"]);
        let json = run(&["topo", "--root", &root, "--json"]);
        assert!(!matrix.contains('\x1b'), "no ANSI in the matrix");
        insta::assert_snapshot!(format!("{n}__tree"), tree);
        insta::assert_snapshot!(format!("{n}__matrix"), matrix);
        insta::assert_json_snapshot!(format!("{n}__json"), stable_json(&json));
    }
}

/// Where a fixture carries what nvidia-smi printed, our matrix must agree cell by cell.
#[test]
fn matrix_matches_recorded_nvidia_smi() {
    let mut compared = 0;
    for dir in fixture_dirs() {
        let Ok(expected) = std::fs::read_to_string(dir.join("nvidia-smi-topo-m.txt")) else {
            continue;
        };
        let root = format!("fixtures/{}", name(&dir));
        let ours = run(&["topo", "--root", &root, "--matrix"]);
        let rows = |s: &str| -> Vec<Vec<String>> {
            s.lines()
                .filter(|l| l.starts_with("GPU") || l.starts_with("NIC"))
                .filter(|l| !l.contains("Legend"))
                .map(|l| l.split_whitespace().map(str::to_string).collect())
                .collect()
        };
        let (e, o) = (rows(&expected), rows(&ours));
        // The header and GPU rows match nvidia-smi's tab layout exactly (empty field before
        // GPU NUMA ID included), not just cell for cell.
        let tabs = |s: &str| -> Vec<String> {
            s.lines()
                .take_while(|l| !l.is_empty())
                .filter(|l| l.starts_with('\t') || l.starts_with("GPU"))
                .map(|l| l.trim_end().replace(" X ", "X"))
                .collect()
        };
        assert_eq!(tabs(&expected), tabs(&ours), "{root}: layout");
        assert_eq!(e.len(), o.len(), "{root}: row count\n{ours}");
        for (er, or) in e.iter().zip(o.iter()) {
            let cells = er.len().min(o[0].len()).min(1 + e.len());
            assert_eq!(
                er[..cells],
                or[..cells],
                "{root}\nexpected {er:?}\nours {or:?}"
            );
            // CPU and NUMA affinity and GPU NUMA ID columns follow the cells.
            assert_eq!(er[cells], or[cells], "{root}: CPU affinity");
            assert_eq!(er[cells + 1], or[cells + 1], "{root}: NUMA affinity");
            assert_eq!(er.get(cells + 2), or.get(cells + 2), "{root}: GPU NUMA ID");
        }
        compared += 1;
    }
    assert!(compared >= 2, "the real captures carry nvidia-smi output");
}
