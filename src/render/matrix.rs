//! `gpudoctor topo --matrix`: the GPU/NIC path matrix of `nvidia-smi topo -m`. For people, laid
//! out in aligned columns within the width: a grid wider than the width is cut into column
//! blocks (GPUs, NICs, affinities; a group wider than a whole block is cut column by column),
//! each block repeating the row labels. `--tsv` prints nvidia-smi's own tab-separated layout,
//! however wide, for its parsers and for a diff against `nvidia-smi topo -m`.

use super::layout;
use crate::report::TopoReport;
use crate::topo::PathType;
use std::fmt::Write;
use std::ops::Range;

/// Spaces between two columns of the aligned grid.
const GAP: usize = 2;

/// The trailing columns nvidia-smi prints after the path cells.
const AFFINITY: [&str; 3] = ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"];

/// nvidia-smi's legend: (key, text).
const LEGEND: [(&str, &str); 7] = [
    ("X", "Self"),
    (
        "SYS",
        "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    ),
    (
        "NODE",
        "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    ),
    (
        "PHB",
        "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    ),
    (
        "PXB",
        "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    ),
    ("PIX", "Connection traversing at most a single PCIe bridge"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
];

/// The matrix as rows of text cells: the path columns (GPUs, then NICs), then the affinities.
struct Grid {
    header: Vec<String>,
    /// Column groups kept together where the width allows: GPUs, NICs, affinities.
    groups: Vec<Range<usize>>,
    /// Row label and one cell per header column ("" where a row has no value).
    rows: Vec<(String, Vec<String>)>,
}

fn grid(r: &TopoReport) -> Grid {
    let t = &r.topology;
    let m = &t.matrix;
    let gpus = m.labels.iter().filter(|l| t.gpu(l).is_some()).count();
    let n = m.labels.len();
    let mut header: Vec<String> = m.labels.clone();
    header.extend(AFFINITY.iter().map(|s| s.to_string()));
    let groups = [0..gpus, gpus..n, n..n + AFFINITY.len()]
        .into_iter()
        .filter(|g| !g.is_empty())
        .collect();
    let rows = m
        .labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let mut cells: Vec<String> = m.paths[i]
                .iter()
                .map(|p| {
                    if p.kind == PathType::X {
                        "X".to_string()
                    } else {
                        p.cell()
                    }
                })
                .collect();
            cells.push(m.cpu_affinity[i].clone());
            cells.push(m.numa_affinity[i].clone());
            cells.push(t.gpu(l).map_or_else(String::new, |g| {
                g.numa_node_id
                    .map_or_else(|| "N/A".to_string(), |n| n.to_string())
            }));
            (l.clone(), cells)
        })
        .collect();
    Grid {
        header,
        groups,
        rows,
    }
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// The columns of each block: whole groups while they fit beside the row labels, a group too
/// wide for a block of its own cut column by column.
fn blocks(
    groups: &[Range<usize>],
    widths: &[usize],
    label: usize,
    width: usize,
) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur: Vec<usize> = Vec::new();
    let mut used = label;
    let mut flush = |cur: &mut Vec<usize>, used: &mut usize| {
        if !cur.is_empty() {
            out.push(std::mem::take(cur));
        }
        *used = label;
    };
    for g in groups {
        let need: usize = g.clone().map(|c| GAP + widths[c]).sum();
        if !cur.is_empty() && used + need > width {
            flush(&mut cur, &mut used);
        }
        if used + need <= width {
            cur.extend(g.clone());
            used += need;
            continue;
        }
        for c in g.clone() {
            if !cur.is_empty() && used + GAP + widths[c] > width {
                flush(&mut cur, &mut used);
            }
            cur.push(c);
            used += GAP + widths[c];
        }
    }
    flush(&mut cur, &mut used);
    out
}

/// Lines of one block: the header, then each row; a cell wider than its column (an affinity
/// list on a narrow terminal) continues on the next line, broken after a separator.
fn block_text(g: &Grid, cols: &[usize], widths: &[usize], label: usize) -> String {
    let mut out = String::new();
    let mut row = |name: &str, cell: &dyn Fn(usize) -> String| {
        let pieces: Vec<Vec<String>> = cols
            .iter()
            .map(|&c| layout::break_word(&cell(c), widths[c]))
            .collect();
        let height = pieces.iter().map(Vec::len).max().unwrap_or(1);
        for i in 0..height {
            let mut line = format!("{:<label$}", if i == 0 { name } else { "" });
            for (k, &c) in cols.iter().enumerate() {
                let piece = pieces[k].get(i).map_or("", String::as_str);
                let _ = write!(line, "{:gap$}{piece:<w$}", "", gap = GAP, w = widths[c]);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    };
    row("", &|c| g.header[c].clone());
    for (name, cells) in &g.rows {
        row(name, &|c| cells[c].clone());
    }
    out
}

/// `gpudoctor topo --matrix`: the grid in aligned columns within `width`, then nvidia-smi's
/// legend, the NIC legend and the notes, wrapped to `width`.
pub fn topo_matrix(r: &TopoReport, width: usize) -> String {
    let g = grid(r);
    let mut out = String::new();
    if g.rows.is_empty() {
        out.push_str("No GPU or RDMA device to show.\n");
    } else {
        let label = g.rows.iter().map(|(l, _)| chars(l)).max().unwrap_or(0);
        // A column wider than a block of its own is cut to it (its cells break, see block_text).
        let room = width.saturating_sub(label + GAP).max(1);
        let widths: Vec<usize> = (0..g.header.len())
            .map(|c| {
                g.rows
                    .iter()
                    .map(|(_, cells)| chars(&cells[c]))
                    .chain([chars(&g.header[c])])
                    .max()
                    .unwrap_or(1)
                    .clamp(1, room)
            })
            .collect();
        for (i, cols) in blocks(&g.groups, &widths, label, width).iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&block_text(&g, cols, &widths, label));
        }
    }
    out.push_str(&layout::fit(&legend(r, Some(width)), width));
    out
}

/// `gpudoctor topo --matrix --tsv`: the layout of `nvidia-smi topo -m` itself (tab-separated,
/// the diagonal " X ", an empty field before GPU NUMA ID, the legend unwrapped), however wide.
pub fn topo_matrix_tsv(r: &TopoReport) -> String {
    let t = &r.topology;
    let m = &t.matrix;
    let mut out = String::new();
    out.push('\t');
    for l in &m.labels {
        out.push_str(l);
        out.push('\t');
    }
    out.push_str(&AFFINITY.join("\t"));
    out.push('\n');
    for (i, l) in m.labels.iter().enumerate() {
        out.push_str(l);
        for path in &m.paths[i] {
            out.push('\t');
            // nvidia-smi pads the diagonal.
            if path.kind == PathType::X {
                out.push_str(" X ");
            } else {
                out.push_str(&path.cell_str());
            }
        }
        // nvidia-smi's GPU NUMA ID: the NUMA node of the GPU's own memory, N/A where NVML has
        // none (every PCIe/SXM GPU of an x86 host); its rows carry an empty field before it.
        match t.gpu(l) {
            Some(g) => {
                let id = g
                    .numa_node_id
                    .map_or_else(|| "N/A".to_string(), |n| n.to_string());
                let _ = writeln!(
                    out,
                    "\t{}\t{}\t\t{id}",
                    m.cpu_affinity[i], m.numa_affinity[i]
                );
            }
            None => {
                let _ = writeln!(out, "\t{}\t{}", m.cpu_affinity[i], m.numa_affinity[i]);
            }
        }
    }
    out.push_str(&legend(r, None));
    out
}

/// nvidia-smi's legend (each entry wrapped under its text, 9 columns in, where a width is
/// given), the NIC legend and gpudoctor's notes.
fn legend(r: &TopoReport, width: Option<usize>) -> String {
    let t = &r.topology;
    let mut out = String::from("\nLegend:\n\n");
    for (key, text) in LEGEND {
        let _ = write!(out, "  {key:<4} = ");
        match width {
            Some(w) => layout::wrap(&mut out, text, 9, 9, w),
            None => {
                out.push_str(text);
                out.push('\n');
            }
        }
    }
    if !t.nics.is_empty() {
        out.push_str("\nNIC Legend:\n\n");
        for n in &t.nics {
            let _ = writeln!(out, "  {}: {}", n.label, n.rdma_device);
        }
    }
    out.push_str(&super::notes_text(r));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_stay_whole_where_they_fit_and_split_where_they_do_not() {
        // Label 5; GPUs 4 columns of 4, NICs 3 of 4, affinities 12.
        let groups = [0..4, 4..7, 7..8];
        let widths = [4, 4, 4, 4, 4, 4, 4, 12];
        // Everything: 5 + 7*6 + 14 = 61.
        assert_eq!(
            blocks(&groups, &widths, 5, 61),
            vec![(0..8).collect::<Vec<_>>()]
        );
        // One short: the affinities move to a block of their own.
        assert_eq!(
            blocks(&groups, &widths, 5, 60),
            vec![(0..7).collect::<Vec<_>>(), vec![7]]
        );
        // GPUs (29) fit, GPUs + NICs (47) do not: the NICs start a block the affinities join.
        assert_eq!(
            blocks(&groups, &widths, 5, 40),
            vec![(0..4).collect::<Vec<_>>(), (4..8).collect()]
        );
        // A group wider than a block is cut column by column, the next group joining the rest.
        assert_eq!(
            blocks(&groups, &widths, 5, 18),
            vec![vec![0, 1], vec![2, 3], vec![4, 5], vec![6], vec![7]]
        );
    }
}
