//! The topology as one SVG: a tree per root complex, root complexes in columns grouped by NUMA
//! node, rows by depth; each GPU's path to its closest NIC drawn below the tree in its path
//! class's colour; every subject of a warn or fail marked with a numbered badge that the
//! legend under the drawing explains.
//!
//! Deterministic: the order is the topology's (root complexes as listed, functions by BDF), and
//! positions are whole pixels. Long runs of SR-IOV virtual functions of one physical function
//! fold into one box ("N virtual functions").

use super::{cut, esc, path_colour, path_meaning};
use crate::findings::{Finding, Status};
use crate::pci::Bdf;
use crate::topo::{DeviceKind, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

const W: i64 = 176;
const H: i64 = 54;
const GAP_X: i64 = 14;
const ROW: i64 = 84;
const TOP: i64 = 34;
/// More virtual functions of one physical function than this under one parent fold into one
/// box.
const FOLD_OVER: usize = 3;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Item {
    RootComplex(String),
    Device(Bdf),
    /// Virtual functions of one physical function.
    Folded(Bdf, Vec<Bdf>),
}

struct Node {
    item: Item,
    depth: i64,
    x: i64,
    kids: Vec<usize>,
}

/// A finding to mark on the drawing: its number in the legend.
struct Mark<'a> {
    n: usize,
    f: &'a Finding,
}

/// Which drawn function a finding's subject names: a BDF, a GPU label (`GPU3`, `GPU3
/// (copy-engine)`), an RDMA device or port (`mlx5_2`, `mlx5_2/1`), a netdev, or a pair
/// (`GPU0-GPU1`, `GPU0->GPU1`). Empty for `host` and anything not on the PCI bus.
fn subject_bdfs(subject: &str, t: &Topology) -> Vec<Bdf> {
    let head = subject.split(' ').next().unwrap_or(subject);
    let parts: Vec<&str> = if let Some((a, b)) = head.split_once("->") {
        vec![a, b]
    } else if head.starts_with("GPU") && head.contains('-') {
        head.split('-').collect()
    } else {
        vec![head]
    };
    let mut out = Vec::new();
    for p in parts {
        let dev = p.split('/').next().unwrap_or(p);
        if let Some(g) = t.gpus.iter().find(|g| g.label == dev) {
            out.push(g.bdf);
        } else if let Some(n) = t
            .nics
            .iter()
            .find(|n| n.rdma_device == dev || n.label == dev || n.netdevs.iter().any(|d| d == dev))
        {
            out.push(n.bdf);
        } else if let Some(n) = t
            .nics_without_rdma
            .iter()
            .find(|n| n.netdevs.iter().any(|d| d == dev))
        {
            out.push(n.bdf);
        } else if let Ok(b) = dev.parse::<Bdf>()
            && t.devices.iter().any(|d| d.bdf == b)
        {
            out.push(b);
        }
    }
    out
}

pub(super) fn draw(t: &Topology, findings: &[Finding]) -> String {
    let by_bdf: BTreeMap<Bdf, &crate::topo::Device> =
        t.devices.iter().map(|d| (d.bdf, d)).collect();
    let marks = marks_of(findings);
    let (marked, off_drawing) = mark_places(&marks, t);
    let (mut nodes, groups) = tree_of(t, &by_bdf, &marked);
    if nodes.is_empty() {
        return "<p class=\"muted\">No GPUs, NVSwitches or RDMA NICs found on the PCI bus.</p>\n"
            .into();
    }
    let (bands, width) = place_bands(&mut nodes, &groups);
    let max_depth = nodes.iter().map(|n| n.depth).max().unwrap_or(0);
    let tree_bottom = TOP + max_depth * ROW + H;
    let (arcs, arc_depth, classes) = closest_nic_arcs(t, &nodes, tree_bottom);
    let height = tree_bottom + arc_depth + 24;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<div class=\"scroll\"><svg id=\"topology-drawing\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"ui-monospace,SFMono-Regular,Menlo,Consolas,monospace\" \
         font-size=\"11\" role=\"img\" aria-label=\"PCIe topology\">"
    );
    for (label, x0, x1) in &bands {
        let _ = writeln!(
            svg,
            "<g><rect x=\"{x0}\" y=\"4\" width=\"{}\" height=\"{}\" rx=\"8\" fill=\"#f8f9fa\" stroke=\"#dadce0\"/>\
             <text x=\"{}\" y=\"22\" font-size=\"13\" font-weight=\"700\" fill=\"#3c4043\">{}</text></g>",
            x1 - x0,
            height - 8,
            x0 + 10,
            esc(label)
        );
    }
    // Edges first, boxes over them.
    for n in &nodes {
        for &k in &n.kids {
            let c = &nodes[k];
            let (x1, y1) = (n.x + W / 2, y_of(n) + H);
            let (x2, y2) = (c.x + W / 2, y_of(c));
            let mid = (y1 + y2) / 2;
            let _ = writeln!(
                svg,
                "<path d=\"M{x1} {y1} V{mid} H{x2} V{y2}\" fill=\"none\" stroke=\"#9aa0a6\" stroke-width=\"1.5\"/>"
            );
        }
    }
    svg.push_str(&arcs);
    for n in &nodes {
        node_box(&mut svg, n, t, &by_bdf, &marked, &marks);
    }
    svg.push_str("</svg></div>\n");
    legend(&mut svg, &classes, &marks, &marked, &off_drawing, t);
    svg
}

/// Root complexes by NUMA node: (affinity unknown, NUMA nodes) -> node indices, unknown last.
type NumaGroups = BTreeMap<(bool, Vec<u32>), Vec<usize>>;

/// Findings to mark, failures first, numbered in that order.
fn marks_of(findings: &[Finding]) -> Vec<Mark<'_>> {
    let mut marks: Vec<Mark> = Vec::new();
    for s in [Status::Fail, Status::Warn] {
        for f in findings.iter().filter(|f| f.status == s) {
            marks.push(Mark {
                n: marks.len() + 1,
                f,
            });
        }
    }
    marks
}

/// Where each mark goes: function -> the marks on it, and the marks whose subject is on no
/// drawn function (listed under the drawing only).
fn mark_places(marks: &[Mark], t: &Topology) -> (BTreeMap<Bdf, Vec<usize>>, Vec<usize>) {
    let mut marked: BTreeMap<Bdf, Vec<usize>> = BTreeMap::new();
    let mut off_drawing: Vec<usize> = Vec::new();
    for (i, m) in marks.iter().enumerate() {
        let bdfs = subject_bdfs(&m.f.subject, t);
        if bdfs.is_empty() {
            off_drawing.push(i);
        }
        for b in bdfs {
            marked.entry(b).or_default().push(i);
        }
    }
    (marked, off_drawing)
}

/// The tree as nodes: GPUs, NVSwitches, NICs, every marked function, and everything above
/// them, under their root complexes; and the root complexes grouped by NUMA node (unknown
/// last). No nodes where none of those is on the bus.
fn tree_of(
    t: &Topology,
    by_bdf: &BTreeMap<Bdf, &crate::topo::Device>,
    marked: &BTreeMap<Bdf, Vec<usize>>,
) -> (Vec<Node>, NumaGroups) {
    let nic_bdfs: BTreeSet<Bdf> = t
        .nics
        .iter()
        .map(|n| n.bdf)
        .chain(t.nics_without_rdma.iter().map(|n| n.bdf))
        .collect();
    let mut keep: BTreeSet<Bdf> = BTreeSet::new();
    for d in &t.devices {
        if matches!(d.kind, DeviceKind::Gpu | DeviceKind::NvSwitch)
            || nic_bdfs.contains(&d.bdf)
            || marked.contains_key(&d.bdf)
        {
            keep.insert(d.bdf);
            keep.extend(d.upstream.iter().copied());
        }
    }
    let mut children: BTreeMap<Bdf, Vec<Bdf>> = BTreeMap::new();
    let mut rc_top: BTreeMap<&str, Vec<Bdf>> = BTreeMap::new();
    for d in t.devices.iter().filter(|d| keep.contains(&d.bdf)) {
        match d.upstream.last() {
            Some(p) => children.entry(*p).or_default().push(d.bdf),
            None => rc_top
                .entry(d.root_complex.as_str())
                .or_default()
                .push(d.bdf),
        }
    }

    let mut nodes: Vec<Node> = Vec::new();
    let mut groups: NumaGroups = BTreeMap::new();
    for rc in &t.root_complexes {
        let Some(top) = rc_top.get(rc.id.as_str()) else {
            continue;
        };
        let id = nodes.len();
        nodes.push(Node {
            item: Item::RootComplex(rc.id.clone()),
            depth: 0,
            x: 0,
            kids: Vec::new(),
        });
        let kids = items_of(top, by_bdf);
        for k in kids {
            let c = build(&mut nodes, k, 1, &children, by_bdf);
            nodes[id].kids.push(c);
        }
        groups
            .entry((rc.numa_affinity.is_empty(), rc.numa_affinity.clone()))
            .or_default()
            .push(id);
    }
    (nodes, groups)
}

/// Places the nodes left to right, NUMA group by group: leaves take the next slot, a parent
/// sits over the middle of its children. The NUMA bands (label, x from, x to) and the width.
fn place_bands(nodes: &mut [Node], groups: &NumaGroups) -> (Vec<(String, i64, i64)>, i64) {
    let mut bands: Vec<(String, i64, i64)> = Vec::new();
    let mut px = 16i64;
    for ((unknown, numa), rcs) in groups {
        let start = px;
        px += 10;
        for rc in rcs {
            place(nodes, *rc, &mut px);
            px += 12;
        }
        let label = if *unknown {
            "NUMA ? (unknown)".to_string()
        } else {
            format!(
                "NUMA {}",
                numa.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        bands.push((label, start, px));
        px += 20;
    }
    (bands, px)
}

/// GPU -> closest NIC arcs, below the tree, in each path class's colour: the SVG, how far
/// below the tree they reach, and the path classes drawn (for the legend).
fn closest_nic_arcs(
    t: &Topology,
    nodes: &[Node],
    tree_bottom: i64,
) -> (String, i64, BTreeSet<crate::topo::PathType>) {
    // Where each function is drawn: its own box, or the fold box of its virtual functions.
    let mut pos: BTreeMap<Bdf, usize> = BTreeMap::new();
    for (i, n) in nodes.iter().enumerate() {
        match &n.item {
            Item::Device(b) => {
                pos.insert(*b, i);
            }
            Item::Folded(_, vfs) => pos.extend(vfs.iter().map(|v| (*v, i))),
            Item::RootComplex(_) => {}
        }
    }
    let mut arcs = String::new();
    let mut arc_depth = 0i64;
    let mut classes: BTreeSet<crate::topo::PathType> = BTreeSet::new();
    let mut drawn: BTreeSet<(usize, usize)> = BTreeSet::new();
    for (g, c) in t.gpus.iter().zip(&t.closest_nics) {
        let (Some(p), Some(&gi)) = (c.path, pos.get(&g.bdf)) else {
            continue;
        };
        for label in &c.nics {
            let Some(nic) = t.nics.iter().find(|n| &n.label == label) else {
                continue;
            };
            // Ties into one fold box of virtual functions draw one arc.
            let Some(&ni) = pos.get(&nic.bdf) else {
                continue;
            };
            if !drawn.insert((gi, ni)) {
                continue;
            }
            classes.insert(p);
            let (gx, gy) = (nodes[gi].x + W / 2, y_of(&nodes[gi]) + H);
            let (nx, ny) = (nodes[ni].x + W / 2 + 6, y_of(&nodes[ni]) + H);
            let dip = tree_bottom + 26 + ((gx - nx).abs() / 12).min(140);
            arc_depth = arc_depth.max(dip - tree_bottom);
            let title = format!(
                "{} to its closest NIC {} {}: {} ({}){}",
                g.label,
                nic.label,
                nic.rdma_device,
                p.as_str(),
                path_meaning(p),
                if c.certain {
                    ""
                } else {
                    "; inferred: NUMA unknown"
                }
            );
            let _ = writeln!(
                arcs,
                "<g class=\"arc\"><title>{}</title><path d=\"M{gx} {gy} C{gx} {dip} {nx} {dip} {nx} {ny}\" \
                 fill=\"none\" stroke=\"{}\" stroke-width=\"3\" stroke-opacity=\"0.85\"{}/>\
                 <text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"{}\" text-anchor=\"middle\">{}</text></g>",
                esc(&title),
                path_colour(p),
                if c.certain {
                    ""
                } else {
                    " stroke-dasharray=\"6 4\""
                },
                (gx + nx) / 2,
                dip - 4 - (dip - tree_bottom) / 4,
                path_colour(p),
                p.as_str()
            );
        }
    }
    (arcs, arc_depth, classes)
}

fn y_of(n: &Node) -> i64 {
    TOP + n.depth * ROW
}

/// A parent's children as items: VFs of one PF fold when there are more than FOLD_OVER.
fn items_of(kids: &[Bdf], by_bdf: &BTreeMap<Bdf, &crate::topo::Device>) -> Vec<Item> {
    let mut vfs: BTreeMap<Bdf, Vec<Bdf>> = BTreeMap::new();
    for k in kids {
        if let Some(pf) = by_bdf.get(k).and_then(|d| d.physfn) {
            vfs.entry(pf).or_default().push(*k);
        }
    }
    let mut out = Vec::new();
    let mut folded: BTreeSet<Bdf> = BTreeSet::new();
    for k in kids {
        let pf = by_bdf.get(k).and_then(|d| d.physfn);
        match pf.and_then(|pf| vfs.get(&pf).map(|v| (pf, v))) {
            Some((pf, v)) if v.len() > FOLD_OVER => {
                if folded.insert(pf) {
                    out.push(Item::Folded(pf, v.clone()));
                }
            }
            _ => out.push(Item::Device(*k)),
        }
    }
    out
}

fn build(
    nodes: &mut Vec<Node>,
    item: Item,
    depth: i64,
    children: &BTreeMap<Bdf, Vec<Bdf>>,
    by_bdf: &BTreeMap<Bdf, &crate::topo::Device>,
) -> usize {
    let id = nodes.len();
    let kids = match &item {
        Item::Device(b) => children.get(b).cloned().unwrap_or_default(),
        _ => Vec::new(),
    };
    nodes.push(Node {
        item,
        depth,
        x: 0,
        kids: Vec::new(),
    });
    for k in items_of(&kids, by_bdf) {
        let c = build(nodes, k, depth + 1, children, by_bdf);
        nodes[id].kids.push(c);
    }
    id
}

fn place(nodes: &mut [Node], id: usize, px: &mut i64) {
    let kids = nodes[id].kids.clone();
    if kids.is_empty() {
        nodes[id].x = *px;
        *px += W + GAP_X;
        return;
    }
    for k in &kids {
        place(nodes, *k, px);
    }
    let first = nodes[kids[0]].x;
    let last = nodes[kids[kids.len() - 1]].x;
    nodes[id].x = (first + last) / 2;
}

/// What one box says: its lines (the first three are drawn), its hover title, its fill,
/// whether a fact of it is unknown (a dashed border), and the marks on it.
struct BoxText {
    lines: Vec<String>,
    title: Vec<String>,
    fill: &'static str,
    unknown: bool,
    /// Indices into the marks of the findings whose subject is in this box.
    mine: Vec<usize>,
}

impl BoxText {
    fn new(fill: &'static str) -> BoxText {
        BoxText {
            lines: Vec::new(),
            title: Vec::new(),
            fill,
            unknown: false,
            mine: Vec::new(),
        }
    }
}

fn node_box(
    svg: &mut String,
    n: &Node,
    t: &Topology,
    by_bdf: &BTreeMap<Bdf, &crate::topo::Device>,
    marked: &BTreeMap<Bdf, Vec<usize>>,
    marks: &[Mark],
) {
    let (x, y) = (n.x, y_of(n));
    let BoxText {
        lines,
        mut title,
        fill,
        unknown,
        mut mine,
    } = match &n.item {
        Item::RootComplex(id) => root_complex_text(id, t),
        Item::Folded(pf, vfs) => folded_text(*pf, vfs, t, marked),
        Item::Device(b) => device_text(*b, t, by_bdf, marked),
    };
    mine.sort_unstable();
    mine.dedup();
    let worst = mine.iter().map(|i| marks[*i].f.status).max();
    let (stroke, sw) = match worst {
        Some(Status::Fail) => ("#d93025", 3),
        Some(_) => ("#f29900", 3),
        None => ("#80868b", 1),
    };
    for i in &mine {
        let m = &marks[*i];
        title.push(format!(
            "[{}] {} {}: {}",
            m.n,
            m.f.status.as_str().to_uppercase(),
            m.f.id.as_str(),
            m.f.message
        ));
    }
    if unknown {
        title.push("some facts unknown (dashed border)".into());
    }
    let _ = write!(
        svg,
        "<g class=\"box{}\"><title>{}</title><rect x=\"{x}\" y=\"{y}\" width=\"{W}\" height=\"{H}\" rx=\"5\" \
         fill=\"{fill}\" stroke=\"{stroke}\" stroke-width=\"{sw}\"{}/>",
        match worst {
            Some(Status::Fail) => " fail",
            Some(_) => " warn",
            None => "",
        },
        esc(&title.join("\n")),
        if unknown && worst.is_none() {
            " stroke-dasharray=\"4 3\""
        } else {
            ""
        }
    );
    for (i, l) in lines.iter().take(3).enumerate() {
        let _ = write!(
            svg,
            "<text x=\"{}\" y=\"{}\"{}>{}</text>",
            x + 7,
            y + 16 + 15 * i as i64,
            if i == 0 { " font-weight=\"700\"" } else { "" },
            esc(&cut(l, 26))
        );
    }
    // Badges: the legend numbers of the findings on this box.
    for (k, i) in mine.iter().take(4).enumerate() {
        let m = &marks[*i];
        let cx = x + W - 10 - 20 * k as i64;
        let _ = write!(
            svg,
            "<circle cx=\"{cx}\" cy=\"{y}\" r=\"9\" fill=\"{}\"/><text x=\"{cx}\" y=\"{}\" \
             font-size=\"10\" font-weight=\"700\" fill=\"#fff\" text-anchor=\"middle\">{}</text>",
            if m.f.status == Status::Fail {
                "#d93025"
            } else {
                "#e37400"
            },
            y + 4,
            m.n
        );
    }
    svg.push_str("</g>\n");
}

/// A root complex's box: its id and NUMA affinity (unknown where it has none).
fn root_complex_text(id: &str, t: &Topology) -> BoxText {
    let mut bx = BoxText::new("#e8eaed");
    let rc = t.root_complexes.iter().find(|r| r.id == id);
    bx.lines.push("root complex".into());
    bx.lines.push(id.to_string());
    let numa = rc.map(|r| &r.numa_affinity);
    match numa {
        Some(a) if !a.is_empty() => bx.lines.push(format!(
            "NUMA {}",
            a.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        )),
        _ => {
            bx.lines.push("NUMA ?".into());
            bx.unknown = true;
        }
    }
    bx.title.push(format!(
        "root complex {id}: {} functions",
        rc.map(|r| r.functions).unwrap_or(0)
    ));
    bx
}

/// The fold box of a physical function's virtual functions: how many, their RDMA devices, and
/// the marks on any of them.
fn folded_text(pf: Bdf, vfs: &[Bdf], t: &Topology, marked: &BTreeMap<Bdf, Vec<usize>>) -> BoxText {
    let mut bx = BoxText::new("#fff8e1");
    bx.lines.push(format!("{} virtual functions", vfs.len()));
    let rdma: Vec<&str> = t
        .nics
        .iter()
        .filter(|n| vfs.contains(&n.bdf))
        .map(|n| n.rdma_device.as_str())
        .collect();
    bx.lines.push(format!("of {pf}"));
    if !rdma.is_empty() {
        bx.lines.push(format!(
            "{}..{}",
            rdma.first().copied().unwrap_or(""),
            rdma.last().copied().unwrap_or("")
        ));
    }
    bx.title.push(format!(
        "{} SR-IOV virtual functions of {pf}: {} ... {}",
        vfs.len(),
        vfs.first().map(|b| b.to_string()).unwrap_or_default(),
        vfs.last().map(|b| b.to_string()).unwrap_or_default()
    ));
    if !rdma.is_empty() {
        bx.title.push(format!("RDMA devices: {}", rdma.join(", ")));
    }
    for v in vfs {
        if let Some(m) = marked.get(v) {
            bx.mine.extend(m);
        }
    }
    bx
}

/// One function's box: a GPU, a NIC with or without its RDMA device, an NVSwitch, a bridge or
/// any other function; its BDF and link, and what about it is unknown.
fn device_text(
    b: Bdf,
    t: &Topology,
    by_bdf: &BTreeMap<Bdf, &crate::topo::Device>,
    marked: &BTreeMap<Bdf, Vec<usize>>,
) -> BoxText {
    let mut bx = BoxText::new("#ffffff");
    let d = by_bdf.get(&b);
    let gpu = t.gpus.iter().find(|g| g.bdf == b);
    let nics: Vec<&crate::topo::Nic> = t.nics.iter().filter(|n| n.bdf == b).collect();
    let plain = t.nics_without_rdma.iter().find(|n| n.bdf == b);
    let link = d
        .map(|d| match d.physfn {
            Some(pf) => format!("VF of {pf}"),
            None => super::super::link_text(&d.link),
        })
        .unwrap_or_default();
    if let Some(g) = gpu {
        bx.fill = "#e6f4ea";
        bx.lines.push(format!(
            "{}{}",
            g.label,
            g.nvlinks_active
                .map(|n| if n > 0 {
                    format!("  NVLink x{n}")
                } else {
                    String::new()
                })
                .unwrap_or_default()
        ));
        bx.lines.push(g.name.clone());
        bx.title.push(format!("{} {} {}", g.label, b, g.name));
        if let Some(m) = &g.nvml_missing {
            bx.title.push(format!("NVML: unknown ({m})"));
            bx.unknown = true;
        }
    } else if !nics.is_empty() {
        nics_text(&nics, &mut bx);
    } else if let Some(n) = plain {
        bx.fill = "#e8f0fe";
        bx.lines.push(format!(
            "NIC, RDMA device {}",
            if n.unknown.is_some() { "?" } else { "none" }
        ));
        bx.unknown = n.unknown.is_some();
        bx.lines.push(if n.netdevs.is_empty() {
            "no netdev".into()
        } else {
            n.netdevs.join(",")
        });
        bx.title.push(format!(
            "NIC {}: {} (needs {}){}",
            n.name,
            match &n.unknown {
                Some(u) => format!("RDMA device unknown: {u}"),
                None => "no RDMA device seen".into(),
            },
            n.rdma_module,
            if n.netdevs.is_empty() {
                String::new()
            } else {
                format!(" netdevs [{}]", n.netdevs.join(","))
            }
        ));
    } else if let Some(d) = d {
        if d.kind == DeviceKind::NvSwitch {
            bx.fill = "#f3e8fd";
            bx.lines.push("NVSwitch".into());
        } else {
            bx.lines.push(match d.role {
                Some(r) => serde_json::to_value(r)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_else(|| "bridge".into()),
                None if d.kind == DeviceKind::Bridge => "bridge".into(),
                None => "function".into(),
            });
            bx.fill = "#f1f3f4";
        }
        bx.lines.push(d.name.clone());
        bx.title.push(format!("{} {}", b, d.name));
    }
    bx.lines.push(format!("{b}  {link}"));
    if let Some(d) = d {
        if d.numa.node.is_none() {
            bx.title.push("NUMA node unknown".into());
        }
        if d.link.cur_gen.is_none() && d.physfn.is_none() {
            bx.unknown = true;
        }
        if !link.is_empty() && d.physfn.is_none() {
            bx.title.push(format!("PCIe link: {link}"));
        }
        for (k, v) in &d.unknown {
            bx.title.push(format!("unknown {k}: {v}"));
            bx.unknown = true;
        }
    }
    if let Some(m) = marked.get(&b) {
        bx.mine.extend(m);
    }
    bx
}

/// The RDMA devices of one NIC function: labels and devices, netdevs, and each port's state.
fn nics_text(nics: &[&crate::topo::Nic], bx: &mut BoxText) {
    bx.fill = "#e8f0fe";
    bx.lines.push(
        nics.iter()
            .map(|n| format!("{} {}", n.label, n.rdma_device))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let nd: Vec<&str> = nics
        .iter()
        .flat_map(|n| n.netdevs.iter().map(String::as_str))
        .collect();
    bx.lines.push(if nd.is_empty() {
        "no netdev".into()
    } else {
        nd.join(",")
    });
    for n in nics {
        bx.title.push(format!(
            "{} RDMA device {} netdevs [{}] {}",
            n.label,
            n.rdma_device,
            n.netdevs.join(","),
            n.name
        ));
        for p in &n.ports {
            bx.title.push(format!(
                "port {}: {} {} {}",
                p.port,
                p.state.as_deref().unwrap_or("state ?"),
                p.link_layer.as_deref().unwrap_or("link layer ?"),
                p.rate.as_deref().unwrap_or("rate ?")
            ));
        }
    }
}

fn legend(
    out: &mut String,
    classes: &BTreeSet<crate::topo::PathType>,
    marks: &[Mark],
    marked: &BTreeMap<Bdf, Vec<usize>>,
    off_drawing: &[usize],
    t: &Topology,
) {
    out.push_str("<div class=\"legend\">");
    for (fill, what) in [
        ("#e6f4ea", "GPU"),
        ("#e8f0fe", "NIC (label, RDMA device; netdevs)"),
        ("#f3e8fd", "NVSwitch"),
        ("#f1f3f4", "PCIe bridge or switch port"),
        ("#e8eaed", "root complex"),
        ("#fff8e1", "folded SR-IOV virtual functions"),
    ] {
        let _ = write!(
            out,
            "<span><span class=\"sw\" style=\"background:{fill}\"></span>{what}</span>"
        );
    }
    out.push_str(
        "<span><span class=\"sw\" style=\"border:1px dashed #80868b;background:#fff\"></span>\
         some facts unknown (hover for which)</span></div>\n",
    );
    if !classes.is_empty() {
        out.push_str("<div class=\"legend\"><b>GPU to closest NIC:</b>");
        for p in classes {
            let _ = write!(
                out,
                "<span><span class=\"sw\" style=\"background:{}\"></span><b>{}</b> {}</span>",
                path_colour(*p),
                p.as_str(),
                path_meaning(*p)
            );
        }
        out.push_str("<span>(dashed: inferred, NUMA unknown)</span></div>\n");
    } else if !t.gpus.is_empty() {
        out.push_str("<p class=\"muted\">No GPU has an RDMA NIC to reach.</p>\n");
    }
    if marks.is_empty() {
        return;
    }
    let on: BTreeSet<usize> = marked.values().flatten().copied().collect();
    out.push_str("<ol class=\"marks\" id=\"marks\">\n");
    for (i, m) in marks.iter().enumerate() {
        let _ = writeln!(
            out,
            "<li value=\"{}\">{} <code>{}</code> on <code>{}</code>: {}{}</li>",
            m.n,
            super::badge(m.f.status),
            esc(m.f.id.as_str()),
            esc(&m.f.subject),
            esc(&m.f.message),
            if off_drawing.contains(&i) || !on.contains(&i) {
                " <span class=\"muted\">(not on the drawing)</span>"
            } else {
                ""
            }
        );
    }
    out.push_str("</ol>\n");
}
