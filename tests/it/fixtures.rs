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
    v["gpudoctor_revision"] = "[revision]".into();
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
        let tsv = run(&["topo", "--root", &root, "--matrix", "--tsv"]);
        let json = run(&["topo", "--root", &root, "--json"]);
        assert!(!matrix.contains('\x1b'), "no ANSI in the matrix");
        insta::assert_snapshot!(format!("{n}__tree"), tree);
        insta::assert_snapshot!(format!("{n}__matrix"), matrix);
        insta::assert_snapshot!(format!("{n}__matrix_tsv"), tsv);
        insta::assert_json_snapshot!(format!("{n}__json"), stable_json(&json));
    }
}

/// Where a fixture carries what nvidia-smi printed, `--matrix --tsv` must agree cell by cell,
/// and where no NIC legend differs, byte for byte up to gpudoctor's notes.
#[test]
fn matrix_matches_recorded_nvidia_smi() {
    let mut compared = 0;
    let mut identical = 0;
    for dir in fixture_dirs() {
        let Ok(expected) = std::fs::read_to_string(dir.join("nvidia-smi-topo-m.txt")) else {
            continue;
        };
        let root = format!("fixtures/{}", name(&dir));
        let ours = run(&["topo", "--root", &root, "--matrix", "--tsv"]);
        // gpudoctor's notes (what it could not read) follow nvidia-smi's text.
        let theirs_part = ours.split("\nNotes:\n").next().unwrap();
        if !ours.contains("NIC Legend:") {
            assert_eq!(expected, theirs_part, "{root}: byte for byte");
            identical += 1;
        }
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
    assert!(
        identical >= 2,
        "the recorded VMs' output is reproduced whole"
    );
}

/// The aligned matrix (`--matrix`, cut into column blocks to fit the width) carries exactly the
/// cells of nvidia-smi's layout (`--tsv`): reassembled from its blocks at every width, the grid
/// is the same, and every line fits.
#[test]
fn matrix_blocks_hold_the_whole_grid() {
    // The grid of --tsv: header cells, then each row's label and cells (" X " read as "X").
    fn tsv_grid(s: &str) -> (Vec<String>, Vec<Vec<String>>) {
        let mut lines = s.lines().take_while(|l| !l.is_empty());
        let header: Vec<String> = lines
            .next()
            .unwrap()
            .split('\t')
            .skip(1)
            .map(str::to_string)
            .collect();
        let rows = lines
            .map(|l| {
                let mut f: Vec<String> = l.split('\t').map(|c| c.trim().to_string()).collect();
                // GPU rows carry an empty field before GPU NUMA ID; NIC rows end after NUMA Affinity.
                if f.len() == header.len() + 2 {
                    f.remove(f.len() - 2);
                } else {
                    f.push(String::new());
                }
                f
            })
            .collect();
        (header, rows)
    }
    // The aligned blocks: column starts from the header line (headers hold single spaces,
    // columns are two apart), each row's cells cut at those starts; rows of the same label
    // concatenated across blocks.
    fn aligned_grid(s: &str) -> (Vec<String>, Vec<Vec<String>>) {
        let grid = s.split("\n\nLegend:").next().unwrap();
        let mut header = Vec::new();
        let mut rows: Vec<Vec<String>> = Vec::new();
        for block in grid.split("\n\n") {
            let lines: Vec<&str> = block.lines().collect();
            let head = lines[0];
            let mut starts = Vec::new();
            let b = head.as_bytes();
            for i in 0..b.len() {
                if b[i] != b' ' && (i < 2 || (b[i - 1] == b' ' && b[i - 2] == b' ')) {
                    starts.push(i);
                }
            }
            let cut = |l: &str| -> Vec<String> {
                (0..starts.len())
                    .map(|k| {
                        let end = starts
                            .get(k + 1)
                            .copied()
                            .unwrap_or(usize::MAX)
                            .min(l.len());
                        l.get(starts[k].min(l.len())..end)
                            .unwrap_or("")
                            .trim()
                            .to_string()
                    })
                    .collect()
            };
            header.extend(cut(head));
            for (i, l) in lines[1..].iter().enumerate() {
                let label = l.split(' ').next().unwrap().to_string();
                if rows.len() <= i {
                    rows.push(vec![label.clone()]);
                }
                assert_eq!(rows[i][0], label, "row order differs between blocks");
                rows[i].extend(cut(l));
            }
        }
        (header, rows)
    }
    let mut split = 0;
    for dir in fixture_dirs() {
        let root = format!("fixtures/{}", name(&dir));
        let tsv = run(&["topo", "--root", &root, "--matrix", "--tsv"]);
        if tsv.starts_with("\tCPU Affinity") {
            continue;
        }
        let want = tsv_grid(&tsv);
        for width in ["100", "80", "60", "40"] {
            let out = gpudoctor()
                .args(["topo", "--root", &root, "--matrix"])
                .env("COLUMNS", width)
                .output()
                .unwrap();
            let text = String::from_utf8(out.stdout).unwrap();
            let w: usize = width.parse().unwrap();
            for l in text.lines() {
                assert!(l.chars().count() <= w, "{root} at {w}: {l}");
            }
            // Affinity lists broken over lines at narrow widths are compared at 100 and 80.
            if w >= 80 {
                assert_eq!(aligned_grid(&text), want, "{root} at {w}:\n{text}");
            }
            split += usize::from(text.split("\n\nLegend:").next().unwrap().contains("\n\n"));
        }
    }
    assert!(
        split >= 2,
        "some fixture is wide enough to be cut into blocks"
    );
}
