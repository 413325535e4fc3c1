//! `--format html`: one self-contained page per report (check, topo, fleet). Inline CSS and
//! inline SVG only: no script, no font, no image or style sheet fetched from anywhere, and a
//! Content-Security-Policy that forbids all of them, so the page works offline as an e-mail or
//! ticket attachment.
//!
//! Every recorded string (GPU and device names, messages, evidence, file names) reaches the
//! page through `esc`: control characters are first shown escaped as the terminal renderers
//! show them (`terminal::escape_text`), then `& < > " '` become character references. Nothing
//! recorded is ever written into markup unescaped, an attribute name or a URL.
//!
//! Pure like every renderer: reports in, text out; this module must not read, judge or print.

mod chart;
mod drawing;
mod fleet;

pub use fleet::{diff_page, fleet_page};

use super::terminal;
use crate::findings::{Finding, Status};
use crate::report::{CheckReport, TopoReport};
use crate::topo::{PathType, Topology};
use std::collections::BTreeMap;
use std::fmt::Write;

/// A recorded string as page text: controls shown escaped (`\x1b`, `\u{202e}`), then HTML's
/// five special characters as references. Safe in text and in double- or single-quoted
/// attribute values. A URL scheme's colon is a reference too, so the page's source names no
/// `http:`/`https:` address (the text reads the same).
pub(crate) fn esc(s: &str) -> String {
    let shown = terminal::escape_text(s);
    let mut out = String::with_capacity(shown.len() + 8);
    let mut rest: &str = &shown;
    while let Some(c) = rest.chars().next() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            ':' if rest.starts_with("://") => out.push_str("&#58;"),
            _ => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// `s` cut to `max` characters, with an ellipsis when cut (the full text goes in a tooltip).
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The colour of a path class: green where GPUDirect RDMA stays under one PCIe switch, red
/// where it crosses the CPUs' interconnect.
pub(crate) fn path_colour(p: PathType) -> &'static str {
    match p {
        PathType::X | PathType::NV => "#1a73e8",
        PathType::PIX => "#188038",
        PathType::PXB => "#7cb342",
        PathType::PHB => "#f9ab00",
        PathType::NODE => "#e8710a",
        PathType::SYS => "#d93025",
    }
}

/// What a path class means, as `nvidia-smi topo -m`'s legend says it.
pub(crate) fn path_meaning(p: PathType) -> &'static str {
    match p {
        PathType::X => "self",
        PathType::NV => "a bonded set of NVLinks",
        PathType::PIX => "at most one PCIe bridge or switch",
        PathType::PXB => "several PCIe bridges or switches, no host bridge",
        PathType::PHB => "through a PCIe host bridge (the CPU's root complex)",
        PathType::NODE => "between host bridges within one NUMA node",
        PathType::SYS => "across the interconnect between NUMA nodes",
    }
}

const STYLE: &str = r#"
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;padding:16px 24px;color:#202124;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dadce0;padding-bottom:4px}
.meta{color:#5f6368;margin:0 0 12px}.meta span{margin-right:18px}
.verdict{font:600 16px/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;padding:10px 14px;border-radius:6px;border-left:8px solid}
.v-pass{background:#e6f4ea;border-color:#188038}.v-warn{background:#fef7e0;border-color:#f29900}
.v-fail{background:#fce8e6;border-color:#d93025}.v-skip{background:#f1f3f4;border-color:#80868b}
.gate{margin:6px 0 0;font-weight:400;font-size:14px}
.finding{border:1px solid #dadce0;border-left:6px solid;border-radius:6px;padding:8px 12px;margin:8px 0}
.finding.fail{border-left-color:#d93025}.finding.warn{border-left-color:#f29900}.finding.skip{border-left-color:#80868b}
.finding h3{font-size:14px;margin:0 0 4px;font-weight:600}
.badge{display:inline-block;font:700 11px/1 ui-monospace,monospace;padding:3px 6px;border-radius:4px;color:#fff;margin-right:6px;vertical-align:1px}
.b-fail{background:#d93025}.b-warn{background:#e37400}.b-pass{background:#188038}.b-skip{background:#80868b}
.fix{background:#f8f9fa;border-radius:4px;padding:6px 10px;margin:6px 0 0;white-space:pre-wrap}
.fix b{color:#188038}
ul.ev{margin:4px 0;padding-left:18px;color:#3c4043;font-size:13px}ul.ev code{word-break:break-all}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f8f9fa;padding:10px;overflow:auto;border-radius:6px}
.scroll{overflow:auto;border:1px solid #dadce0;border-radius:6px;max-width:100%}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #dadce0;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f1f3f4;position:sticky;top:0}
table.matrix td{text-align:center;font:600 12px ui-monospace,monospace}
table.matrix td.u{font-style:italic}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;margin:8px 0;font-size:13px}
.sw{display:inline-block;width:22px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:5px;border:1px solid #0003}
ol.marks{font-size:13px;padding-left:26px}ol.marks li{margin:2px 0}
.muted{color:#5f6368}.unknown{color:#a50e0e;font-style:italic}
details{margin:6px 0}summary{cursor:pointer}
.cols2{columns:2 420px}
td.gb{text-align:right;white-space:nowrap;font:12px ui-monospace,SFMono-Regular,Menlo,Consolas,monospace}
td.gb .dev{color:#5f6368;font-size:11px}.gb.amber{background:#fef7e0}.gb.red{background:#fce8e6;color:#a50e0e;font-weight:600}
.gb.fast{background:#e8f0fe}.gb.none{color:#9aa0a6;text-align:center}td.gb.drain{outline:2px solid #d93025;outline-offset:-2px}
span.sw.gb{margin-left:10px}span.sw.ok{background:#fff}
tr.drained td:first-child,tr.worse td:first-child{border-left:4px solid #d93025}tr.better td:first-child{border-left:4px solid #188038}
"#;

/// The page around `body`: a strict policy first (nothing may load or run, inline style only).
fn page(title: &str, body: &str) -> String {
    let mut out = String::with_capacity(body.len() + STYLE.len() + 512);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; img-src data:\">\n",
    );
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    let _ = writeln!(out, "<title>{}</title>", esc(title));
    let _ = write!(out, "<style>{STYLE}");
    for p in [
        PathType::NV,
        PathType::PIX,
        PathType::PXB,
        PathType::PHB,
        PathType::NODE,
        PathType::SYS,
    ] {
        let c = path_colour(p);
        let _ = write!(out, ".p-{}{{background:{c}22;color:{c}}}", p.as_str());
    }
    let _ = writeln!(out, "</style>\n</head>\n<body>");
    out.push_str(body);
    out.push_str("</body>\n</html>\n");
    out
}

fn status_word(s: Status) -> &'static str {
    match s {
        Status::Pass => "PASS",
        Status::Warn => "WARN",
        Status::Fail => "FAIL",
        Status::Skip => "SKIP",
    }
}

fn badge(s: Status) -> String {
    format!(
        "<span class=\"badge b-{}\">{}</span>",
        s.as_str(),
        status_word(s)
    )
}

/// The text report's last line, word for word (`render::check_text`).
pub(crate) fn result_line(r: &CheckReport) -> String {
    let s = &r.summary;
    let unjudged = if s.unjudged > 0 {
        format!("; {} could not be judged", s.unjudged)
    } else {
        String::new()
    };
    format!(
        "Result: {}{} {} pass, {} warn, {} fail, {} skip{} ({} findings{unjudged}).",
        r.status.as_str().to_uppercase(),
        if r.gate.decided() { " (gate):" } else { ":" },
        s.pass,
        s.warn,
        s.fail,
        s.skip,
        super::check::silenced_count(s),
        r.checks.len()
    )
}

/// `check --format html`.
pub fn check_page(r: &CheckReport) -> String {
    let mut b = String::new();
    let host = r.hostname.as_deref().unwrap_or("node");
    let _ = writeln!(b, "<h1>gpudoctor check: {}</h1>", esc(host));
    meta(&mut b, r);
    let _ = writeln!(
        b,
        "<div class=\"verdict v-{}\" id=\"verdict\">{}",
        r.status.as_str(),
        esc(&result_line(r))
    );
    if r.gate.decided() {
        let _ = write!(
            b,
            "<p class=\"gate\">Gate: {}</p>",
            esc(&r.gate.reasons.join("; "))
        );
    }
    if let Some(code) = r.would_exit {
        let _ = write!(
            b,
            "<p class=\"gate\">Report only (--report-only): exited 0; the verdict would have exited {code}.</p>"
        );
    }
    b.push_str("</div>\n");

    // Failures, then warnings, each with its fix.
    let bad: Vec<&Finding> = [Status::Fail, Status::Warn]
        .iter()
        .flat_map(|s| {
            r.checks
                .iter()
                .filter(move |f| f.status == *s && f.silenced.is_none())
        })
        .collect();
    if !bad.is_empty() {
        b.push_str("<h2 id=\"findings\">What failed and what warned</h2>\n");
        for f in &bad {
            finding_card(&mut b, f);
        }
    }
    // Silenced: each with its real status and the silence, out of the verdict.
    let silenced: Vec<&Finding> = r.checks.iter().filter(|f| f.silenced.is_some()).collect();
    if !silenced.is_empty() {
        let _ = writeln!(
            b,
            "<h2 id=\"silenced\">Silenced ({}): not in the verdict</h2>",
            silenced.len()
        );
        for f in silenced {
            finding_card(&mut b, f);
        }
    }
    let topo = r.topology.as_deref();
    if let Some(t) = topo {
        b.push_str("<h2 id=\"topology\">Topology</h2>\n");
        b.push_str(&drawing::draw(&t.topology, &r.checks));
        matrix_section(&mut b, &t.topology);
    } else {
        b.push_str(
            "<h2 id=\"topology\">Topology</h2>\n<p class=\"unknown\">unknown: discovery did \
             not finish, so there is no topology to draw</p>\n",
        );
    }
    b.push_str(&chart::charts(&r.checks));
    if let Some(t) = topo {
        device_tables(&mut b, &t.topology);
    }
    unjudged_section(&mut b, r);
    passes_section(&mut b, r);
    let mut notes: Vec<String> = Vec::new();
    if let Some(t) = topo {
        notes.extend(topo_notes(t));
    } else {
        notes.extend(r.unread.iter().map(|n| format!("{}: {}", n.path, n.reason)));
    }
    notes_section(&mut b, &notes);
    footer(&mut b, r.schema, r.gpudoctor_version);
    page(
        &format!(
            "gpudoctor check: {host}: {}",
            r.status.as_str().to_uppercase()
        ),
        &b,
    )
}

/// `topo --format html`.
pub fn topo_page(r: &TopoReport) -> String {
    let mut b = String::new();
    b.push_str("<h1>gpudoctor topo</h1>\n");
    let _ = writeln!(
        b,
        "<p class=\"meta\"><span>source: {}</span></p>",
        esc(&r.source.describe())
    );
    for l in r.source.limits() {
        let _ = writeln!(b, "<p class=\"muted\">{}</p>", esc(&l));
    }
    b.push_str("<h2 id=\"topology\">Topology</h2>\n");
    b.push_str(&drawing::draw(&r.topology, &[]));
    matrix_section(&mut b, &r.topology);
    device_tables(&mut b, &r.topology);
    notes_section(&mut b, &topo_notes(r));
    footer(&mut b, r.schema, r.gpudoctor_version);
    page("gpudoctor topo", &b)
}

fn meta(b: &mut String, r: &CheckReport) {
    b.push_str("<p class=\"meta\">");
    let _ = write!(b, "<span>source: {}</span>", esc(&r.source.describe()));
    if let Some(t) = &r.time {
        let _ = write!(b, "<span>facts read: {}</span>", esc(t));
    }
    let _ = write!(
        b,
        "<span>driver: {}</span><span>level {}</span>",
        esc(r.driver_version.as_deref().unwrap_or("none")),
        r.level
    );
    b.push_str("</p>\n");
    for l in r.source.limits() {
        let _ = writeln!(b, "<p class=\"muted\">{}</p>", esc(&l));
    }
}

fn finding_card(b: &mut String, f: &Finding) {
    let _ = write!(
        b,
        "<div class=\"finding {}\"><h3>{}<code>{}</code> on <code>{}</code></h3><div>{}</div>",
        f.status.as_str(),
        badge(f.status),
        esc(f.id.as_str()),
        esc(&f.subject),
        esc(&f.message)
    );
    if let Some(o) = f.original_status {
        let _ = write!(
            b,
            "<div class=\"muted\">(the check said {}; changed by --warn/--deny)</div>",
            o.as_str()
        );
    }
    if let Some(s) = &f.silenced {
        let _ = write!(
            b,
            "<div class=\"gate\">SILENCED ({}): {}</div>",
            s.by.as_str(),
            esc(&s.describe())
        );
    }
    if !f.evidence.is_empty() {
        b.push_str("<ul class=\"ev\">");
        for e in &f.evidence {
            let _ = write!(
                b,
                "<li><code>{}</code>: {}</li>",
                esc(&e.source),
                esc(&e.value)
            );
        }
        b.push_str("</ul>");
    }
    if let Some(fix) = &f.remediation {
        let _ = write!(b, "<div class=\"fix\"><b>Fix:</b> {}</div>", esc(fix));
    }
    let _ = writeln!(
        b,
        "<div class=\"muted\">gpudoctor explain {}</div></div>",
        esc(f.id.as_str())
    );
}

fn matrix_section(b: &mut String, t: &Topology) {
    let m = &t.matrix;
    if m.labels.is_empty() {
        return;
    }
    b.push_str("<h2 id=\"matrix\">Path matrix</h2>\n");
    b.push_str(
        "<p class=\"muted\">As <code>nvidia-smi topo -m</code> prints it; a cell in italics \
         with ? was inferred from CPU affinity (NUMA unknown).</p>\n<div class=\"scroll\">\
         <table class=\"matrix\"><tr><th></th>",
    );
    for l in &m.labels {
        let _ = write!(b, "<th>{}</th>", esc(l));
    }
    b.push_str("<th>CPU affinity</th><th>NUMA affinity</th></tr>\n");
    for (i, row) in m.labels.iter().enumerate() {
        let _ = write!(b, "<tr><th>{}</th>", esc(row));
        for path in m.paths.get(i).into_iter().flatten() {
            let cell = &*path.cell_str();
            let p = Some(path);
            // A class, not a style or a tooltip per cell: an SR-IOV host's matrix has tens of
            // thousands of cells (the legend says what each class means).
            match p {
                Some(p) if p.kind != PathType::X => {
                    let _ = write!(
                        b,
                        "<td class=\"p-{}{}\">{}{}</td>",
                        p.kind.as_str(),
                        if p.certain { "" } else { " u" },
                        esc(cell),
                        if p.certain { "" } else { "?" }
                    );
                }
                _ => {
                    let _ = write!(b, "<td>{}</td>", esc(cell));
                }
            }
        }
        let _ = writeln!(
            b,
            "<td>{}</td><td>{}</td></tr>",
            esc(m.cpu_affinity.get(i).map(String::as_str).unwrap_or("?")),
            esc(m.numa_affinity.get(i).map(String::as_str).unwrap_or("?"))
        );
    }
    b.push_str("</table></div>\n<div class=\"legend\">");
    for p in [
        PathType::NV,
        PathType::PIX,
        PathType::PXB,
        PathType::PHB,
        PathType::NODE,
        PathType::SYS,
    ] {
        let _ = write!(
            b,
            "<span><span class=\"sw\" style=\"background:{}\"></span><b>{}</b> {}</span>",
            path_colour(p),
            p.as_str(),
            path_meaning(p)
        );
    }
    b.push_str("</div>\n");
}

fn device_tables(b: &mut String, t: &Topology) {
    let by_bdf: BTreeMap<_, _> = t.devices.iter().map(|d| (d.bdf, d)).collect();
    if !t.gpus.is_empty() {
        b.push_str(
            "<h2 id=\"gpus\">GPUs</h2>\n<div class=\"scroll\"><table><tr><th>GPU</th><th>BDF</th>\
             <th>Name</th><th>NUMA</th><th>PCIe link</th><th>Memory</th><th>NVLinks</th>\
             <th>Closest NIC</th><th>Path</th></tr>\n",
        );
        for (i, g) in t.gpus.iter().enumerate() {
            let c = t.closest_nics.get(i);
            let d = by_bdf.get(&g.bdf);
            let _ = writeln!(
                b,
                "<tr><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&g.label),
                g.bdf,
                esc(&g.name),
                esc(&d
                    .map(|d| super::numa_text(d))
                    .unwrap_or_else(|| "NUMA ?".into())),
                esc(&super::link_text(&g.link)),
                g.memory_total_bytes
                    .map(|m| format!("{} GiB", m >> 30))
                    .unwrap_or_else(|| "<span class=\"unknown\">?</span>".into()),
                g.nvlinks_active
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "<span class=\"unknown\">?</span>".into()),
                c.map(|c| if c.rdma_devices.is_empty() {
                    "none".to_string()
                } else {
                    esc(&c.rdma_devices.join(", "))
                })
                .unwrap_or_default(),
                c.and_then(|c| c.path.map(|p| format!(
                    "<span style=\"color:{};font-weight:600\">{}</span>{}",
                    path_colour(p),
                    p.as_str(),
                    if c.certain { "" } else { " (inferred)" }
                )))
                .unwrap_or_else(|| "-".into())
            );
        }
        b.push_str("</table></div>\n");
    }
    if t.nics.is_empty() && t.nics_without_rdma.is_empty() {
        return;
    }
    b.push_str(
        "<h2 id=\"nics\">NICs</h2>\n<div class=\"scroll\"><table><tr><th>NIC</th>\
         <th>RDMA device</th><th>BDF</th><th>Name</th><th>Netdevs</th><th>NUMA</th>\
         <th>PCIe link</th><th>Ports</th></tr>\n",
    );
    for n in &t.nics {
        let d = by_bdf.get(&n.bdf);
        let ports = n
            .ports
            .iter()
            .map(|p| {
                esc(&format!(
                    "{}: {} {} {}",
                    p.port,
                    p.state.as_deref().unwrap_or("state ?"),
                    p.link_layer.as_deref().unwrap_or("link layer ?"),
                    p.rate.as_deref().unwrap_or("rate ?")
                ))
            })
            .collect::<Vec<_>>()
            .join("<br>");
        let _ = writeln!(
            b,
            "<tr><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td>{}</td>\
             <td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&n.label),
            esc(&n.rdma_device),
            n.bdf,
            esc(&n.name),
            esc(&n.netdevs.join(", ")),
            esc(&d
                .map(|d| super::numa_text(d))
                .unwrap_or_else(|| "NUMA ?".into())),
            esc(&d.map(|d| super::link_text(&d.link)).unwrap_or_default()),
            ports
        );
    }
    for n in &t.nics_without_rdma {
        let d = by_bdf.get(&n.bdf);
        let _ = writeln!(
            b,
            "<tr><td>-</td><td class=\"unknown\">{}</td><td class=\"mono\">{}</td><td>{}</td>\
             <td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>driver {}</td></tr>",
            esc(&match &n.unknown {
                Some(_) => format!("unknown ({})", n.rdma_module),
                None => format!("none seen (needs {})", n.rdma_module),
            }),
            n.bdf,
            esc(&n.name),
            esc(&n.netdevs.join(", ")),
            esc(&d
                .map(|d| super::numa_text(d))
                .unwrap_or_else(|| "NUMA ?".into())),
            esc(&d.map(|d| super::link_text(&d.link)).unwrap_or_default()),
            esc(n.driver.as_deref().unwrap_or("none"))
        );
    }
    b.push_str("</table></div>\n");
}

/// Skips of something that should have been judged: unknowns, said as such.
fn unjudged_section(b: &mut String, r: &CheckReport) {
    let un: Vec<&Finding> = r
        .checks
        .iter()
        .filter(|f| f.status == Status::Skip && f.skip.is_some_and(|k| k.unjudged()))
        .filter(|f| f.silenced.is_none())
        .collect();
    if un.is_empty() {
        return;
    }
    let _ = writeln!(
        b,
        "<h2 id=\"unjudged\">Could not be judged ({})</h2>\n<table><tr><th>Check</th>\
         <th>Subject</th><th>Why</th></tr>",
        un.len()
    );
    for f in un {
        let _ = writeln!(
            b,
            "<tr><td class=\"mono\">{}</td><td class=\"mono\">{}</td><td class=\"unknown\">{}</td></tr>",
            esc(f.id.as_str()),
            esc(&f.subject),
            esc(&f.message)
        );
    }
    b.push_str("</table>\n");
}

/// Passing checks, one line each, folded away (a `<details>` needs no script).
fn passes_section(b: &mut String, r: &CheckReport) {
    let mut by_id: BTreeMap<&str, Vec<&Finding>> = BTreeMap::new();
    for f in r
        .checks
        .iter()
        .filter(|f| f.status == Status::Pass && f.silenced.is_none())
    {
        by_id.entry(f.id.as_str()).or_default().push(f);
    }
    if by_id.is_empty() {
        return;
    }
    let _ = writeln!(
        b,
        "<h2 id=\"passes\">Passed</h2>\n<details><summary>{} passing findings of {} checks</summary>\
         <table><tr><th>Check</th><th>Subjects</th></tr>",
        r.summary.pass,
        by_id.len()
    );
    for (id, fs) in by_id {
        let _ = writeln!(
            b,
            "<tr><td class=\"mono\">{}</td><td>{}</td></tr>",
            esc(id),
            fs.iter()
                .map(|f| format!(
                    "<span title=\"{}\">{}</span>",
                    esc(&f.message),
                    esc(&f.subject)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    b.push_str("</table></details>\n");
}

fn topo_notes(r: &TopoReport) -> Vec<String> {
    let t = &r.topology;
    let mut notes = Vec::new();
    if let (Some(u), true) = (&r.nvml.unavailable, t.gpus.is_empty()) {
        notes.push(format!("NVML: {u}"));
    }
    if let Some(u) = &t.rdma_unknown {
        notes.push(format!("RDMA devices unknown: {u}"));
    }
    for u in &t.unresolved_rdma {
        notes.push(format!(
            "RDMA device {}: hardware unknown ({})",
            u.rdma_device, u.reason
        ));
    }
    notes.extend(t.notes.iter().cloned());
    notes.extend(r.unread.iter().map(|n| format!("{}: {}", n.path, n.reason)));
    notes
}

fn notes_section(b: &mut String, notes: &[String]) {
    if notes.is_empty() {
        return;
    }
    b.push_str("<h2 id=\"notes\">Notes</h2>\n<ul>");
    for n in notes {
        let _ = write!(b, "<li>{}</li>", esc(n));
    }
    b.push_str("</ul>\n");
}

fn footer(b: &mut String, schema: &str, version: &str) {
    let _ = writeln!(
        b,
        "<p class=\"muted\" style=\"margin-top:32px\">gpudoctor {} ({}). Bandwidth in decimal \
         GB/s (10<sup>9</sup> bytes/s), as perftest and nvbandwidth print it. \
         <code>--format json</code> has every value of this page.</p>",
        esc(version),
        esc(schema)
    );
}

#[cfg(test)]
mod tests;
