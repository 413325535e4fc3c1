//! The fleet and diff pages: `fleet --format html` as one table (a row per node, drained nodes
//! first with their reasons and failed checks, a column per probe measurement, each cell the
//! node's GB/s coloured by its deviation from its group's median), and `diff --format html`
//! (A and B, the verdicts that differ, worse first, the bandwidth that moved, B's shape against
//! A's).
//!
//! Pure: the summary in, a page out; no statistics are computed here beyond the deviation of a
//! reading from the median the summary gives, and nothing is judged again.

use super::{badge, esc, footer, page};
use crate::findings::Status;
use crate::report::fleet::{DiffReport, FleetReport, ProbeRow};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// Within this fraction of its group's median a reading is the group's normal spread (the copy
/// probes' run-to-run spread on the recorded machines is within 2%).
const NEUTRAL: f64 = 0.02;

/// A reading's cell class: `red` below its floor or more than the outlier rule's tolerance
/// (`--min-deviation`) under the median, `amber` more than NEUTRAL under, `fast` more than
/// NEUTRAL over, `ok` otherwise.
fn cell_class(deviation: f64, below_floor: bool, min_deviation: f64) -> &'static str {
    if below_floor || deviation < -min_deviation.max(NEUTRAL) {
        "red"
    } else if deviation < -NEUTRAL {
        "amber"
    } else if deviation > NEUTRAL {
        "fast"
    } else {
        "ok"
    }
}

fn percent(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Every node of the summary: drained ones first (in the drain list's order), then the rest
/// by name.
fn node_order(r: &FleetReport) -> Vec<String> {
    let drained: Vec<String> = r.drain.iter().map(|d| d.node.clone()).collect();
    let mut rest: BTreeSet<String> = r.groups.iter().flat_map(|g| g.nodes.clone()).collect();
    rest.extend(r.probes.iter().flat_map(|p| p.node_gbps.keys().cloned()));
    rest.extend(
        r.checks
            .iter()
            .flat_map(|c| c.fail.iter().chain(&c.warn).cloned()),
    );
    for d in &drained {
        rest.remove(d);
    }
    drained.into_iter().chain(rest).collect()
}

/// One node's cell for one measurement.
fn cell(b: &mut String, node: &str, p: &ProbeRow, min_deviation: f64) {
    let Some(v) = p.node_gbps.get(node) else {
        b.push_str("<td class=\"gb none\" title=\"not measured\">-</td>");
        return;
    };
    let deviation = if p.median_gbps > 0.0 {
        (v - p.median_gbps) / p.median_gbps
    } else {
        0.0
    };
    let floor = p.below_floor.iter().find(|f| f.node == node);
    let outlier = p.outliers.iter().find(|o| o.node == node);
    let class = cell_class(deviation, floor.is_some(), min_deviation);
    let mut title = format!(
        "{node} {}: {v:.1} GB/s, {:+.1}% from its group's median {:.1} ({} nodes; group {})",
        p.measurement,
        deviation * 100.0,
        p.median_gbps,
        p.n,
        p.group
    );
    if let Some(o) = outlier {
        let _ = write!(
            title,
            "\noutlier: z {:.1}{}",
            o.z,
            if o.drain { ", drained" } else { "" }
        );
    }
    if let Some(f) = floor {
        let _ = write!(
            title,
            "\nbelow {} {:.1} GB/s",
            if f.floor_from == "gpudoctor's bar" {
                "gpudoctor's bar".to_string()
            } else {
                format!("the floor of {}", f.floor_from)
            },
            f.floor_gbps
        );
    }
    let marked = outlier.is_some_and(|o| o.drain) || floor.is_some();
    let _ = write!(
        b,
        "<td class=\"gb {class}{}\" title=\"{}\">{v:.1} <span class=\"dev\">{:+.1}%</span></td>",
        if marked { " drain" } else { "" },
        esc(&title),
        deviation * 100.0
    );
}

/// `fleet --format html`.
pub fn fleet_page(r: &FleetReport) -> String {
    let mut b = String::new();
    verdict_lines(&mut b, r);
    node_table(&mut b, r);

    // Shape, groups, duplicates, unreadable files: as the table prints them.
    b.push_str(
        "<h2 id=\"summary\">Summary</h2>\n<details><summary>The fleet summary as the table \
         prints it (groups, shape differences, duplicates)</summary>\n",
    );
    let _ = writeln!(
        b,
        "<pre>{}</pre></details>",
        esc(&super::super::fleet::fleet_table(r))
    );
    footer(&mut b, r.schema, r.gpudoctor_version);
    page(&format!("gpudoctor fleet: {} nodes", r.nodes), &b)
}

/// The heading and verdict: the nodes to drain, those warned about, silenced checks, and the
/// nodes by check verdict.
fn verdict_lines(b: &mut String, r: &FleetReport) {
    let _ = writeln!(b, "<h1>gpudoctor fleet: {} nodes</h1>", r.nodes);
    let (class, line) = if r.drain.is_empty() {
        ("pass", "Nothing to drain.".to_string())
    } else {
        (
            "fail",
            format!(
                "Drain {}: {}",
                super::super::layout::count(r.drain.len(), "node", "nodes"),
                r.drain
                    .iter()
                    .map(|d| d.node.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    };
    let _ = writeln!(
        b,
        "<div class=\"verdict v-{class}\" id=\"verdict\">{}</div>",
        esc(&line)
    );
    for d in &r.warn {
        let _ = writeln!(
            b,
            "<p class=\"gate\">Warn, kept in service: {}: {}</p>",
            esc(&d.node),
            esc(&d.reasons.join("; "))
        );
    }
    for c in r.checks.iter().filter(|c| !c.silenced.is_empty()) {
        let _ = writeln!(
            b,
            "<p class=\"muted\">Silenced (not drained for it): {} on {}</p>",
            esc(&c.id),
            esc(&c.silenced.join(", "))
        );
    }
    if !r.status.is_empty() {
        let _ = writeln!(
            b,
            "<p class=\"meta\"><span>nodes by check verdict:</span>{}</p>",
            r.status
                .iter()
                .map(|(s, n)| format!("<span>{n} {}</span>", esc(s)))
                .collect::<String>()
        );
    }
}

/// One row per node, drained nodes first: why it is drained, the checks it failed or warned
/// on, and a cell per probe measurement.
fn node_table(b: &mut String, r: &FleetReport) {
    // Per node: the checks it failed or warned on.
    let mut failed: BTreeMap<&str, (Vec<&str>, Vec<&str>)> = BTreeMap::new();
    for c in &r.checks {
        for n in &c.fail {
            failed.entry(n).or_default().0.push(&c.id);
        }
        for n in &c.warn {
            failed.entry(n).or_default().1.push(&c.id);
        }
    }
    let reasons: BTreeMap<&str, &Vec<String>> = r
        .drain
        .iter()
        .map(|d| (d.node.as_str(), &d.reasons))
        .collect();
    let groups = r
        .probes
        .iter()
        .map(|p| p.group.as_str())
        .collect::<BTreeSet<_>>()
        .len();

    b.push_str("<h2 id=\"nodes\">Nodes</h2>\n");
    let _ = writeln!(
        b,
        "<p class=\"muted\">One row per node, drained nodes first. Per probe measurement the \
         node's median in decimal GB/s and its deviation from its group's median: \
         <span class=\"sw gb ok\"></span>within {n} <span class=\"sw gb amber\"></span>{n} to \
         {t} below <span class=\"sw gb red\"></span>more than {t} below, or below its floor \
         <span class=\"sw gb fast\"></span>more than {n} above; an outlined cell drained its \
         node (hover a cell for its numbers).</p>",
        n = percent(NEUTRAL),
        t = percent(r.min_deviation.max(NEUTRAL))
    );
    b.push_str(
        "<div class=\"scroll\"><table class=\"fleet\"><tr><th>Node</th><th>Drain: why</th>\
         <th>Checks failed or warned</th>",
    );
    for p in &r.probes {
        let _ = write!(
            b,
            "<th class=\"mono\">{}{}<br><span class=\"muted\">median {:.1}, n {}</span></th>",
            esc(&p.measurement),
            if groups > 1 {
                format!("<br><span class=\"muted\">{}</span>", esc(&p.group))
            } else {
                String::new()
            },
            p.median_gbps,
            p.n
        );
    }
    b.push_str("</tr>\n");
    for node in node_order(r) {
        let why = reasons.get(node.as_str());
        let _ = write!(
            b,
            "<tr class=\"{}\"><td class=\"mono\">{}{}</td><td>{}</td><td class=\"mono\">",
            if why.is_some() { "drained" } else { "kept" },
            if why.is_some() {
                badge(Status::Fail).replace(">FAIL<", ">DRAIN<")
            } else {
                String::new()
            },
            esc(&node),
            why.map(|w| w.iter().map(|s| esc(s)).collect::<Vec<_>>().join("<br>"))
                .unwrap_or_default()
        );
        if let Some((fail, warn)) = failed.get(node.as_str()) {
            let list = |ids: &[&str]| ids.iter().map(|i| esc(i)).collect::<Vec<_>>().join(", ");
            if !fail.is_empty() {
                let _ = write!(b, "{}{}", badge(Status::Fail), list(fail));
            }
            if !warn.is_empty() {
                if !fail.is_empty() {
                    b.push_str("<br>");
                }
                let _ = write!(b, "{}{}", badge(Status::Warn), list(warn));
            }
        }
        b.push_str("</td>");
        for p in &r.probes {
            cell(b, &node, p, r.min_deviation);
        }
        b.push_str("</tr>\n");
    }
    b.push_str("</table></div>\n");
}

fn verdict_badge(s: &str) -> String {
    match s {
        "pass" => badge(Status::Pass),
        "warn" => badge(Status::Warn),
        "fail" => badge(Status::Fail),
        "skip" => badge(Status::Skip),
        other => format!("<span class=\"muted\">{}</span>", esc(other)),
    }
}

/// `diff --format html`.
pub fn diff_page(d: &DiffReport) -> String {
    let mut b = String::new();
    b.push_str("<h1>gpudoctor diff</h1>\n");
    let st = |x: &Option<String>| x.clone().unwrap_or_else(|| "(no check report)".into());
    b.push_str("<table id=\"nodes\"><tr><th></th><th>Node</th><th>Verdict</th></tr>\n");
    for (name, path, status) in [("A", &d.a, &d.status[0]), ("B", &d.b, &d.status[1])] {
        let _ = writeln!(
            b,
            "<tr><th>{name}</th><td class=\"mono\">{}</td><td>{}</td></tr>",
            esc(path),
            verdict_badge(&st(status))
        );
    }
    b.push_str("</table>\n");
    let shape_n = d.shape.as_ref().map_or(0, Vec::len);
    let worse = d.checks.iter().filter(|c| c.change == "worse").count();
    let same = d.checks.is_empty() && d.bandwidth.is_empty() && shape_n == 0;
    let line = if same {
        "Same: no verdict, bandwidth or shape differs.".to_string()
    } else {
        format!(
            "B differs from A: {} ({worse} worse), {}, {}.",
            super::super::layout::count(d.checks.len(), "verdict", "verdicts"),
            super::super::layout::count(d.bandwidth.len(), "bandwidth change", "bandwidth changes"),
            super::super::layout::count(shape_n, "shape difference", "shape differences"),
        )
    };
    let _ = writeln!(
        b,
        "<div class=\"verdict v-{}\" id=\"verdict\">{}</div>",
        if same {
            "pass"
        } else if worse > 0 || shape_n > 0 {
            "fail"
        } else {
            "warn"
        },
        esc(&line)
    );

    b.push_str("<h2 id=\"checks\">Checks whose verdict differs</h2>\n");
    if d.checks.is_empty() {
        b.push_str("<p class=\"muted\">None.</p>\n");
    } else {
        b.push_str(
            "<table class=\"diff\"><tr><th>Change</th><th>Check</th><th>Subject</th><th>A</th>\
             <th>B</th><th>B says</th></tr>\n",
        );
        for c in &d.checks {
            let _ = writeln!(
                b,
                "<tr class=\"{}\"><td>{}</td><td class=\"mono\">{}</td><td class=\"mono\">{}</td>\
                 <td>{}</td><td>{}</td><td>{}</td></tr>",
                c.change,
                c.change,
                esc(&c.id),
                esc(&c.subject),
                verdict_badge(&c.a),
                verdict_badge(&c.b),
                esc(&c.message_b)
            );
        }
        b.push_str("</table>\n");
    }
    if d.hidden > 0 {
        let _ = writeln!(
            b,
            "<p class=\"muted\">{} judged pass in one node and not at all in the other not \
             shown (<code>diff --all</code> lists them).</p>",
            super::super::layout::count(d.hidden, "subject", "subjects")
        );
    }

    b.push_str("<h2 id=\"shape\">Shape</h2>\n");
    match &d.shape {
        None => b.push_str("<p class=\"muted\">Not compared: that needs two bundles.</p>\n"),
        Some(f) if f.is_empty() => b.push_str(
            "<p>B matches A's shape (GPUs, NICs, paths, links, versions by PCI position).</p>\n",
        ),
        Some(f) => {
            b.push_str(
                "<p class=\"muted\">B judged against A's shape, by PCI position.</p>\n<table \
                 class=\"diff\"><tr><th>Verdict</th><th>Check</th><th>Subject</th><th>Message</th></tr>\n",
            );
            for x in f {
                let _ = writeln!(
                    b,
                    "<tr class=\"worse\"><td>{}</td><td class=\"mono\">{}</td><td \
                     class=\"mono\">{}</td><td>{}</td></tr>",
                    verdict_badge(&x.status),
                    esc(&x.id),
                    esc(&x.subject),
                    esc(&x.message)
                );
            }
            b.push_str("</table>\n");
        }
    }

    if !d.bandwidth.is_empty() {
        let _ = writeln!(
            b,
            "<h2 id=\"bandwidth\">Bandwidth changes of {} or more</h2>\n<table><tr>\
             <th>Measurement</th><th>A (GB/s)</th><th>B (GB/s)</th><th>Change</th></tr>",
            percent(crate::fleet::BANDWIDTH_NOISE)
        );
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        for x in &d.bandwidth {
            let class = match x.change {
                Some(c) => cell_class(c, false, crate::fleet::BANDWIDTH_NOISE),
                None => "none",
            };
            let _ = writeln!(
                b,
                "<tr><td class=\"mono\">{}</td><td class=\"gb\">{}</td><td class=\"gb\">{}</td>\
                 <td class=\"gb {class}\">{}</td></tr>",
                esc(&x.measurement),
                f(x.a_gbps),
                f(x.b_gbps),
                x.change
                    .map_or("-".to_string(), |c| format!("{:+.1}%", c * 100.0))
            );
        }
        b.push_str("</table>\n");
    }
    footer(&mut b, d.schema, d.gpudoctor_version);
    page("gpudoctor diff", &b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_colour_by_deviation() {
        assert_eq!(cell_class(-0.01, false, 0.05), "ok");
        assert_eq!(cell_class(-0.03, false, 0.05), "amber");
        assert_eq!(cell_class(-0.06, false, 0.05), "red");
        assert_eq!(cell_class(0.0, true, 0.05), "red");
        assert_eq!(cell_class(0.04, false, 0.05), "fast");
    }

    /// Hostile node names, check ids, messages and measurements stay text in both pages.
    #[test]
    fn hostile_strings_stay_text() {
        use super::super::tests::{HOSTILE, assert_inert};
        use crate::fleet::NodeData;
        use crate::report::fleet::FindingIn;
        let finding = |i: usize, status: &str| FindingIn {
            id: HOSTILE[i % HOSTILE.len()].into(),
            subject: HOSTILE[(i + 1) % HOSTILE.len()].into(),
            status: status.into(),
            message: HOSTILE[(i + 2) % HOSTILE.len()].into(),
            silenced: false,
        };
        let nodes: Vec<NodeData> = (0..8)
            .map(|i| {
                let mut n = NodeData {
                    name: format!("{}{i}", HOSTILE[i % HOSTILE.len()]),
                    status: Some(if i == 0 { "fail" } else { "pass" }.into()),
                    findings: vec![finding(i, if i == 0 { "fail" } else { "pass" })],
                    ..Default::default()
                };
                let v = if i == 1 { 30.0 } else { 55.0 + i as f64 * 0.05 };
                n.bandwidth_gbps.insert(HOSTILE[5].into(), v);
                n.floor_gbps.insert(HOSTILE[5].into(), 50.0);
                n
            })
            .collect();
        let r = crate::fleet::summarize(&nodes, &crate::fleet::FleetOptions::default());
        assert!(!r.drain.is_empty() && !r.probes.is_empty());
        let page = fleet_page(&r);
        assert_inert(&page);
        assert!(
            page.contains("class=\"gb red drain\""),
            "the slow node marked"
        );
        assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;0"));
        let shape = vec![finding(3, "fail")];
        let mut d = crate::fleet::diff(&nodes[0], &nodes[1], Some(shape), true);
        d.a = HOSTILE[1].into();
        d.b = HOSTILE[4].into();
        let page = diff_page(&d);
        assert_inert(&page);
        assert!(page.contains("<tr class=\"worse\">"));
    }
}
