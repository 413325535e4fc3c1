//! Renderers: pure functions from report models to text. No I/O, no environment lookups
//! (terminal width is passed in by the caller).

use crate::pci::Bdf;
use crate::report::TopoReport;
use crate::topo::{Device, DeviceKind, LinkState, Topology};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

mod check;
mod fleet;
pub mod html;
pub mod layout;
mod matrix;
mod probe;
pub mod terminal;
mod write_bw;

pub use check::{PIPE_WIDTH, REASON_MAX, TextStyle, check_text, reason};

// Every text renderer's output leaves through `terminal::escape_text`: recorded strings are
// the node's and the fleet's, and their control characters must not drive the operator's
// terminal (`check_text` and `reason` escape inside, where gpudoctor's own colour and the
// reason's length cap are applied).
fn shown(s: String) -> String {
    match terminal::escape_text(&s) {
        std::borrow::Cow::Borrowed(_) => s,
        std::borrow::Cow::Owned(o) => o,
    }
}

pub fn fleet_table(r: &crate::report::fleet::FleetReport) -> String {
    shown(fleet::fleet_table(r))
}

pub fn fleet_markdown(r: &crate::report::fleet::FleetReport) -> String {
    shown(fleet::fleet_markdown(r))
}

pub fn diff_table(d: &crate::report::fleet::DiffReport) -> String {
    shown(fleet::diff_table(d))
}

pub fn topo_matrix(r: &TopoReport, width: usize) -> String {
    shown(matrix::topo_matrix(r, width))
}

pub fn topo_matrix_tsv(r: &TopoReport) -> String {
    shown(matrix::topo_matrix_tsv(r))
}

pub fn probe_table(r: &crate::probes::ProbeReport, style: Style) -> String {
    shown(probe::table(r, style))
}

pub fn write_bw_table(r: &crate::report::rdma::write_bw::WriteBwReport, width: usize) -> String {
    shown(write_bw::write_bw_table(r, width))
}

pub fn gpu_write_bw_table(
    r: &crate::report::rdma::gpu_write_bw::GpuWriteBwReport,
    width: usize,
) -> String {
    shown(write_bw::gpu_write_bw_table(r, width))
}

/// `gpudoctor topo`: the PCIe tree of every root complex holding a GPU, NIC or NVSwitch,
/// then GPU and NIC tables.
pub fn topo_tree(r: &TopoReport, style: Style) -> String {
    shown(topo_tree_text(r, style))
}

/// How to lay out human tables.
#[derive(Debug, Clone, Copy)]
pub struct Style {
    /// Terminal width; None for fixed-width output (pipes, files, snapshots).
    pub width: Option<u16>,
    /// Show every row (passes too) instead of collapsing passes per check.
    pub all_rows: bool,
}

impl Style {
    /// The columns to lay out in: the terminal's (or COLUMNS), else layout::PIPE_WIDTH.
    pub fn columns(&self) -> usize {
        layout::width(self.width)
    }
}

fn gen_width(g: Option<u8>, w: Option<u8>) -> String {
    let g = g
        .map(|g| format!("Gen{g}"))
        .unwrap_or_else(|| "Gen?".into());
    let w = w.map(|w| format!("x{w}")).unwrap_or_else(|| "x?".into());
    format!("{g} {w}")
}

pub fn link_text(l: &LinkState) -> String {
    if l.cur_gen.is_none() && l.cur_width.is_none() && l.max_gen.is_none() && l.max_width.is_none()
    {
        return "no link info".into();
    }
    let cur = gen_width(l.cur_gen, l.cur_width);
    let max = gen_width(l.max_gen, l.max_width);
    if cur == max {
        cur
    } else {
        format!("{cur} (max {max})")
    }
}

fn numa_text(d: &Device) -> String {
    match (d.numa.node, d.numa.affinity.is_empty()) {
        (Some(n), _) => format!("NUMA {n}"),
        (None, false) => format!(
            "NUMA ? (-1; CPUs local to node {})",
            d.numa
                .affinity
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
        (None, true) => "NUMA ?".into(),
    }
}

fn topo_tree_text(r: &TopoReport, style: Style) -> String {
    let t = &r.topology;
    let mut out = String::new();
    let _ = writeln!(out, "gpudoctor topo: {}", r.source.describe());
    for l in r.source.limits() {
        let _ = writeln!(out, "  {l}");
    }
    let by_bdf: BTreeMap<Bdf, &Device> = t.devices.iter().map(|d| (d.bdf, d)).collect();
    let gpu_label: BTreeMap<Bdf, &str> = t.gpus.iter().map(|g| (g.bdf, g.label.as_str())).collect();
    let mut nic_labels: BTreeMap<Bdf, Vec<String>> = BTreeMap::new();
    for n in &t.nics {
        let nd = if n.netdevs.is_empty() {
            String::new()
        } else {
            format!(" [{}]", n.netdevs.join(","))
        };
        nic_labels
            .entry(n.bdf)
            .or_default()
            .push(format!("{} {}{}", n.label, n.rdma_device, nd));
    }
    // NICs without an RDMA device are NICs all the same.
    for n in &t.nics_without_rdma {
        let nd = if n.netdevs.is_empty() {
            String::new()
        } else {
            format!(" [{}]", n.netdevs.join(","))
        };
        nic_labels.entry(n.bdf).or_default().push(format!(
            "NIC ({}, needs {}){nd}",
            if n.unknown.is_some() {
                "RDMA device unknown"
            } else {
                "no RDMA device seen"
            },
            n.rdma_module
        ));
    }
    // Interesting functions and everything above them.
    let mut keep: BTreeSet<Bdf> = BTreeSet::new();
    for d in &t.devices {
        let interesting = matches!(d.kind, DeviceKind::Gpu | DeviceKind::NvSwitch)
            || nic_labels.contains_key(&d.bdf);
        if interesting {
            keep.insert(d.bdf);
            keep.extend(d.upstream.iter().copied());
        }
    }
    let mut children: BTreeMap<Option<Bdf>, Vec<Bdf>> = BTreeMap::new();
    let mut rc_top: BTreeMap<&str, Vec<Bdf>> = BTreeMap::new();
    for d in &t.devices {
        if !keep.contains(&d.bdf) {
            continue;
        }
        match d.upstream.last() {
            Some(p) => children.entry(Some(*p)).or_default().push(d.bdf),
            None => rc_top
                .entry(d.root_complex.as_str())
                .or_default()
                .push(d.bdf),
        }
    }
    if keep.is_empty() {
        let _ = writeln!(
            out,
            "\nNo GPUs, NVSwitches or RDMA NICs found on the PCI bus."
        );
    }
    for rc in &t.root_complexes {
        let Some(top) = rc_top.get(rc.id.as_str()) else {
            continue;
        };
        let numa = if rc.numa_affinity.is_empty() {
            "NUMA ?".to_string()
        } else {
            format!(
                "NUMA {}",
                rc.numa_affinity
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        let hidden = rc.functions
            - t.devices
                .iter()
                .filter(|d| d.root_complex == rc.id && keep.contains(&d.bdf))
                .count();
        let _ = writeln!(
            out,
            "\n{} (root complex, {numa}{})",
            rc.id,
            if hidden > 0 {
                format!(
                    ", {} not shown",
                    layout::count(hidden, "other function", "other functions")
                )
            } else {
                String::new()
            }
        );
        let n = top.len();
        for (i, b) in top.iter().enumerate() {
            tree_node(
                &mut out,
                *b,
                "",
                i + 1 == n,
                &by_bdf,
                &children,
                &gpu_label,
                &nic_labels,
            );
        }
    }
    if !t.software_rdma.is_empty() {
        let _ = writeln!(out, "\nSoftware RDMA devices (no PCI function):");
        for s in &t.software_rdma {
            let _ = writeln!(
                out,
                "  {} on netdev {}",
                s.rdma_device,
                s.parent_netdev.as_deref().unwrap_or("?")
            );
        }
    }
    out.push('\n');
    out.push_str(&gpu_table(t, &by_bdf, style));
    if !t.nics.is_empty() || !t.nics_without_rdma.is_empty() {
        out.push('\n');
        out.push_str(&nic_table(t, &by_bdf, style));
    }
    out.push_str(&notes_text(r));
    layout::fit(&out, style.columns())
}

#[allow(clippy::too_many_arguments)]
fn tree_node(
    out: &mut String,
    b: Bdf,
    prefix: &str,
    last: bool,
    by_bdf: &BTreeMap<Bdf, &Device>,
    children: &BTreeMap<Option<Bdf>, Vec<Bdf>>,
    gpu_label: &BTreeMap<Bdf, &str>,
    nic_labels: &BTreeMap<Bdf, Vec<String>>,
) {
    let Some(d) = by_bdf.get(&b) else { return };
    let what = if let Some(l) = gpu_label.get(&b) {
        format!("{l} ")
    } else if let Some(ls) = nic_labels.get(&b) {
        format!("{} ", ls.join(" + "))
    } else if let Some(r) = d.role {
        let r = serde_json::to_value(r)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        format!("{r} ")
    } else if d.kind == DeviceKind::NvSwitch {
        "NVSwitch ".into()
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{prefix}{}{b} {what}{} | {} | {}",
        if last { "└─ " } else { "├─ " },
        d.name,
        match d.physfn {
            // A VF's link registers read 0: its PF's link carries it.
            Some(pf) => format!("VF of {pf}"),
            None => link_text(&d.link),
        },
        numa_text(d)
    );
    let kids = children.get(&Some(b)).cloned().unwrap_or_default();
    let child_prefix = format!("{prefix}{}", if last { "   " } else { "│  " });
    for (i, k) in kids.iter().enumerate() {
        tree_node(
            out,
            *k,
            &child_prefix,
            i + 1 == kids.len(),
            by_bdf,
            children,
            gpu_label,
            nic_labels,
        );
    }
}

fn gpu_table(t: &Topology, by_bdf: &BTreeMap<Bdf, &Device>, style: Style) -> String {
    if t.gpus.is_empty() {
        return "No NVIDIA GPUs found.\n".into();
    }
    let header = [
        "GPU",
        "BDF",
        "Name",
        "NUMA",
        "PCIe link",
        "Memory",
        "BAR1",
        "NVLinks",
        "Closest NIC",
        "Path",
    ];
    let mut rows = Vec::new();
    for (g, c) in t.gpus.iter().zip(t.closest_nics.iter()) {
        let d = by_bdf.get(&g.bdf);
        let gib = |b: Option<u64>| {
            b.map(|b| format!("{} GiB", b >> 30))
                .unwrap_or_else(|| "?".into())
        };
        rows.push(vec![
            g.label.clone(),
            g.bdf.to_string(),
            g.name.clone(),
            d.map(|d| numa_text(d).trim_start_matches("NUMA ").to_string())
                .unwrap_or_default(),
            d.map(|d| link_text(&d.link)).unwrap_or_default(),
            gib(g.memory_total_bytes),
            gib(g.bar1_total_bytes),
            g.nvlinks_active
                .map(|n| n.to_string())
                .unwrap_or_else(|| "?".into()),
            if c.rdma_devices.is_empty() {
                "none".into()
            } else {
                c.rdma_devices.join(", ")
            },
            c.path
                .map(|p| {
                    format!(
                        "{}{}",
                        p.as_str(),
                        if c.certain { "" } else { " (inferred)" }
                    )
                })
                .unwrap_or_else(|| "-".into()),
        ]);
    }
    format!("{}\n", layout::table(&header, &rows, style.columns()))
}

fn nic_table(t: &Topology, by_bdf: &BTreeMap<Bdf, &Device>, style: Style) -> String {
    let header = [
        "NIC",
        "RDMA device",
        "BDF",
        "Name",
        "Netdevs",
        "NUMA",
        "PCIe link",
        "Ports",
    ];
    let mut rows = Vec::new();
    for n in &t.nics {
        let d = by_bdf.get(&n.bdf);
        let ports = n
            .ports
            .iter()
            .map(|p| {
                format!(
                    "{}: {} {} {}",
                    p.port,
                    p.state.as_deref().unwrap_or("state ?"),
                    p.link_layer.as_deref().unwrap_or("link layer ?"),
                    p.rate.as_deref().unwrap_or("rate ?")
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        rows.push(vec![
            n.label.clone(),
            n.rdma_device.clone(),
            n.bdf.to_string(),
            n.name.clone(),
            n.netdevs.join(", "),
            d.map(|d| numa_text(d).trim_start_matches("NUMA ").to_string())
                .unwrap_or_default(),
            d.map(|d| link_text(&d.link)).unwrap_or_default(),
            ports,
        ]);
    }
    for n in &t.nics_without_rdma {
        let d = by_bdf.get(&n.bdf);
        rows.push(vec![
            "-".to_string(),
            match &n.unknown {
                Some(_) => format!("unknown ({})", n.rdma_module),
                None => format!("none seen (needs {})", n.rdma_module),
            },
            n.bdf.to_string(),
            n.name.clone(),
            n.netdevs.join(", "),
            d.map(|d| numa_text(d).trim_start_matches("NUMA ").to_string())
                .unwrap_or_default(),
            d.map(|d| link_text(&d.link)).unwrap_or_default(),
            format!("driver {}", n.driver.as_deref().unwrap_or("none")),
        ]);
    }
    format!("{}\n", layout::table(&header, &rows, style.columns()))
}

pub(super) fn notes_text(r: &TopoReport) -> String {
    let mut out = String::new();
    let t = &r.topology;
    if !t.notes.is_empty() || r.nvml.unavailable.is_some() || !r.unread.is_empty() {
        out.push_str("\nNotes:\n");
        if let (Some(u), true) = (&r.nvml.unavailable, t.gpus.is_empty()) {
            let _ = writeln!(out, "  - NVML: {u}");
        }
        for n in &t.notes {
            let _ = writeln!(out, "  - {n}");
        }
        for n in &r.unread {
            let _ = writeln!(out, "  - {}: {}", n.path, n.reason);
        }
    }
    out
}

/// `--json`: the whole report, pretty-printed, newline-terminated.
pub fn json<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_string_pretty(v) {
        Ok(mut s) => {
            s.push('\n');
            s
        }
        // Serializing our own plain data types cannot fail; say so loudly if it ever does.
        Err(e) => format!("{{\"error\": \"serialization failed: {e}\"}}\n"),
    }
}

pub fn catalog_table(style: Style) -> String {
    let rows: Vec<Vec<String>> = crate::checks::CATALOG
        .iter()
        .map(|c| {
            vec![
                c.id.to_string(),
                c.level.to_string(),
                c.severity.as_str().to_string(),
                c.title.to_string(),
            ]
        })
        .collect();
    format!(
        "{}\n",
        layout::table(
            &["Check", "Level", "Severity", "What it checks"],
            &rows,
            style.columns()
        )
    )
}

/// `explain ID --format md`: the document as written.
pub fn explain_markdown(c: &crate::checks::CheckInfo) -> String {
    let mut s = format!(
        "{}  (level {}, default severity {})\n\n{}",
        c.id,
        c.level,
        c.severity.as_str(),
        c.doc
    );
    if !s.ends_with('\n') {
        s.push('\n');
    }
    s
}

/// Inline Markdown as plain text: `code` and **strong** lose their markers, [text](url) reads
/// "text (url)".
fn plain_inline(s: &str) -> String {
    let s = s.replace("**", "").replace('`', "");
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        match after
            .find("](")
            .and_then(|m| after[m + 2..].find(')').map(|e| (m, m + 2 + e)))
        {
            Some((m, e)) => {
                out.push_str(&rest[..open]);
                out.push_str(&after[..m]);
                out.push_str(" (");
                out.push_str(&after[m + 2..e]);
                out.push(')');
                rest = &after[e + 1..];
            }
            None => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// `explain ID`: the document for a terminal, `width` columns: headings underlined,
/// paragraphs and list items wrapped at words (items hang under their text), code blocks
/// indented 4 and kept as written (a line wider than the width continues, indented 6, on the
/// next; `--format md` gives the text to copy).
pub fn explain(c: &crate::checks::CheckInfo, width: usize) -> String {
    enum Block {
        Heading(usize, String),
        Para(String),
        Item(String),
        Code(Vec<String>),
    }
    let mut blocks: Vec<Block> = Vec::new();
    let mut in_fence = false;
    for line in c.doc.lines() {
        let t = line.trim_end();
        if t.trim_start().starts_with("```") {
            in_fence = !in_fence;
            if in_fence {
                blocks.push(Block::Code(Vec::new()));
            }
            continue;
        }
        if in_fence || (t.starts_with("    ") && !matches!(blocks.last(), Some(Block::Item(_)))) {
            let code = if in_fence { t } else { &t[4..] };
            match blocks.last_mut() {
                Some(Block::Code(v)) => v.push(code.to_string()),
                _ => blocks.push(Block::Code(vec![code.to_string()])),
            }
            continue;
        }
        if t.is_empty() {
            // Blank lines end paragraphs and items; inside code they are kept.
            if let Some(Block::Code(v)) = blocks.last_mut() {
                v.push(String::new());
            }
            blocks.push(Block::Para(String::new()));
            continue;
        }
        let hashes = t.chars().take_while(|c| *c == '#').count();
        if hashes > 0 && t[hashes..].starts_with(' ') {
            blocks.push(Block::Heading(hashes, plain_inline(t[hashes..].trim())));
            continue;
        }
        let lead = t.trim_start();
        let numbered = lead
            .split_once(". ")
            .is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if lead.starts_with("- ") || lead.starts_with("* ") || numbered {
            blocks.push(Block::Item(lead.to_string()));
            continue;
        }
        match blocks.last_mut() {
            Some(Block::Item(s)) | Some(Block::Para(s)) if !s.is_empty() || !t.starts_with(' ') => {
                if !s.is_empty() {
                    s.push(' ');
                }
                s.push_str(lead);
            }
            _ => blocks.push(Block::Para(lead.to_string())),
        }
    }
    let mut out = format!(
        "{}  (level {}, default severity {})\n",
        c.id,
        c.level,
        c.severity.as_str()
    );
    // One blank line between blocks; list items follow each other directly.
    let blank = |out: &mut String| {
        if !out.ends_with("\n\n") {
            out.push('\n');
        }
    };
    let mut last_was_item = false;
    for b in blocks {
        match b {
            Block::Heading(level, text) => {
                let text = if level == 1 {
                    text.split_once(": ")
                        .map_or(text.clone(), |(_, t)| t.to_string())
                } else {
                    text
                };
                blank(&mut out);
                layout::wrap(&mut out, &text, 0, 0, width);
                let n = text.chars().count().min(width);
                out.push_str(&(if level == 1 { "=" } else { "-" }).repeat(n));
                out.push('\n');
                last_was_item = false;
            }
            Block::Para(text) if text.is_empty() => {}
            Block::Para(text) => {
                blank(&mut out);
                layout::wrap(&mut out, &plain_inline(&text), 0, 0, width);
                last_was_item = false;
            }
            Block::Item(text) => {
                if !last_was_item {
                    blank(&mut out);
                }
                let (marker, body) = match text.split_once(' ') {
                    Some((m, b)) if m == "-" || m == "*" => ("  - ".to_string(), b.to_string()),
                    Some((m, b)) => (format!("  {m} "), b.to_string()),
                    None => ("  - ".to_string(), text.clone()),
                };
                let hang = marker.chars().count();
                out.push_str(&marker);
                layout::wrap(&mut out, &plain_inline(&body), hang, hang, width);
                last_was_item = true;
            }
            Block::Code(lines) => {
                blank(&mut out);
                let end = lines
                    .iter()
                    .rposition(|l| !l.is_empty())
                    .map_or(0, |i| i + 1);
                let mut code = String::new();
                for l in &lines[..end] {
                    code.push_str("    ");
                    code.push_str(l);
                    code.push('\n');
                }
                out.push_str(&layout::fit(&code, width));
                last_was_item = false;
            }
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// What `gpudoctor bundle` prints once the bundle is written.
pub fn bundle_summary(
    output: &std::path::Path,
    w: &crate::bundle::write::Written,
    elapsed: std::time::Duration,
) -> String {
    let m = &w.manifest;
    let mut s = format!(
        "wrote {}: {} KiB, {} files, {} links, {} directories ({} KiB uncompressed) in {} ms\n",
        output.display(),
        w.archive_bytes.div_ceil(1024),
        m.contents.files,
        m.contents.links,
        m.contents.dirs,
        m.contents.file_bytes.div_ceil(1024),
        elapsed.as_millis()
    );
    if m.redaction.enabled {
        let classes: Vec<String> = m
            .redaction
            .distinct_values
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect();
        let _ = writeln!(
            s,
            "redacted: {} (in {} files; --no-redact keeps them)",
            if classes.is_empty() {
                "nothing found".to_string()
            } else {
                classes.join(", ")
            },
            m.redaction.files.len()
        );
    } else {
        s.push_str("not redacted (--no-redact): serials, UUIDs, GUIDs, MACs and the hostname are in the bundle\n");
    }
    if !m.unreadable.is_empty() {
        let _ = writeln!(
            s,
            "{} could not be read (listed in manifest.json, replayed as the same errors)",
            layout::count(m.unreadable.len(), "path", "paths")
        );
    }
    layout::fit(&s, layout::PIPE_WIDTH)
}
