//! `fleet` and `diff` as text: the same content as their JSON, for people.

use crate::fleet::{BANDWIDTH_NOISE, OUTLIER_Z};
use crate::report::fleet::{DiffReport, FleetReport};
use std::fmt::Write;

fn list(v: &[String]) -> String {
    if v.len() > 8 {
        format!("{} ... (+{})", v[..8].join(" "), v.len() - 8)
    } else {
        v.join(" ")
    }
}

pub fn fleet_table(r: &FleetReport) -> String {
    let mut s = String::new();
    let st: Vec<String> = r.status.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(
        s,
        "{}: {}",
        super::layout::count(r.nodes, "node", "nodes"),
        if st.is_empty() {
            "no check reports".to_string()
        } else {
            st.join(", ")
        }
    );
    if !r.unreadable.is_empty() {
        let _ = writeln!(
            s,
            "\nUnreadable ({}; each drains its node):",
            super::layout::count(r.unreadable.len(), "report", "reports")
        );
        for u in &r.unreadable {
            let _ = writeln!(s, "  {}: {}: {}", u.node, u.source, u.reason);
        }
    }
    if !r.duplicates.is_empty() {
        let _ = writeln!(s, "\nDuplicates (several documents of one node):");
        for d in &r.duplicates {
            let _ = writeln!(s, "  warning: {}", d.describe());
        }
    }
    let _ = writeln!(s, "\nGroups (compared within, never across):");
    for g in &r.groups {
        let _ = writeln!(
            s,
            "  {}: {}, {} (reference: {})",
            g.name,
            super::layout::count(g.nodes.len(), "node", "nodes"),
            g.model,
            g.reference
        );
    }
    check_lines(&mut s, r);
    probe_lines(&mut s, r);
    shape_lines(&mut s, r);
    let _ = writeln!(
        s,
        "\nDrain ({}):",
        super::layout::count(r.drain.len(), "node", "nodes")
    );
    for d in &r.drain {
        let _ = writeln!(s, "  {}: {}", d.node, d.reasons.join("; "));
    }
    if !r.warn.is_empty() {
        let _ = writeln!(
            s,
            "\nWarn, kept in service ({}):",
            super::layout::count(r.warn.len(), "node", "nodes")
        );
        for d in &r.warn {
            let _ = writeln!(s, "  {}: {}", d.node, d.reasons.join("; "));
        }
    }
    super::layout::fit(&s, super::layout::PIPE_WIDTH)
}

/// The checks any node did not pass: how many nodes fail, warn or skip each, and which.
fn check_lines(s: &mut String, r: &FleetReport) {
    let _ = writeln!(s, "\nChecks (nodes failing / warning / skipping):");
    let mut any = false;
    for c in &r.checks {
        if c.fail.is_empty() && c.warn.is_empty() && c.skip.is_empty() && c.silenced.is_empty() {
            continue;
        }
        any = true;
        let _ = writeln!(
            s,
            "  {:<24} fail {:>4}  warn {:>4}  skip {:>4}  pass {:>4}",
            c.id,
            c.fail.len(),
            c.warn.len(),
            c.skip.len(),
            c.pass
        );
        if !c.fail.is_empty() {
            let _ = writeln!(s, "    fail: {}", list(&c.fail));
        }
        if !c.warn.is_empty() {
            let _ = writeln!(s, "    warn: {}", list(&c.warn));
        }
        if !c.silenced.is_empty() {
            let _ = writeln!(
                s,
                "    silenced (not drained for it): {}",
                list(&c.silenced)
            );
        }
    }
    if !any {
        let _ = writeln!(s, "  every check passed on every node");
    }
}

/// Per group and measurement: the median and the outliers and nodes below a floor.
fn probe_lines(s: &mut String, r: &FleetReport) {
    if !r.probes.is_empty() {
        let _ = writeln!(
            s,
            "\nProbes (median per group, GB/s = 10^9 B/s; outliers |modified z| > {OUTLIER_Z}, drained when also more than {:.1}% below the median; * drained):",
            r.min_deviation * 100.0
        );
        let groups: std::collections::BTreeSet<&str> =
            r.probes.iter().map(|p| p.group.as_str()).collect();
        for p in &r.probes {
            let mut notes: Vec<String> = p
                .outliers
                .iter()
                .map(|o| {
                    format!(
                        "{}{} {:.1} ({:+.1}%, z {:.1})",
                        if o.drain { "*" } else { "" },
                        o.node,
                        o.gbps,
                        o.deviation * 100.0,
                        o.z
                    )
                })
                .collect();
            notes.extend(p.below_floor.iter().map(|b| {
                format!(
                    "*{} {:.1} below {} {:.1}",
                    b.node,
                    b.gbps,
                    floor_word(&b.floor_from),
                    b.floor_gbps
                )
            }));
            let _ = writeln!(
                s,
                "  {}{:<36} n {:>4}  median {:>7.1}  {}",
                if groups.len() > 1 {
                    format!("[{}] ", p.group)
                } else {
                    String::new()
                },
                p.measurement,
                p.n,
                p.median_gbps,
                if notes.is_empty() {
                    "no outliers".to_string()
                } else {
                    notes.join(", ")
                }
            );
        }
    }
}

/// Each node's differences from its group's reference, and the fields with no majority.
fn shape_lines(s: &mut String, r: &FleetReport) {
    if r.shape_nodes > 0 {
        let _ = writeln!(
            s,
            "\nShape ({} nodes from bundles and baselines; one line per node and difference from its group's reference; * drained):",
            r.shape_nodes
        );
        if r.shape.is_empty() && r.undecided.is_empty() {
            let _ = writeln!(s, "  all alike");
        }
        let width = r.shape.iter().map(|d| d.node.len()).max().unwrap_or(0);
        for d in &r.shape {
            let _ = writeln!(
                s,
                "  {}{:<width$}  {}",
                if d.drain { "*" } else { " " },
                d.node,
                d.describe()
            );
        }
        for u in &r.undecided {
            let v: Vec<String> = u
                .values
                .iter()
                .map(|(k, n)| format!("{k}: {}", list(n)))
                .collect();
            let _ = writeln!(
                s,
                "   no majority in {}: {} ({}); not judged",
                u.group,
                u.field,
                v.join("; ")
            );
        }
    }
}

/// Markdown for a ticket: the nodes to drain and why first, then what the fleet looked like.
pub fn fleet_markdown(r: &FleetReport) -> String {
    // Every recorded string (node, check id, group, message) reaches the document as cell
    // text, never raw and never in a code span: see `terminal::markdown_cell`.
    let cell = super::terminal::markdown_cell;
    let mut s = String::new();
    let st: Vec<String> = r
        .status
        .iter()
        .map(|(k, v)| format!("{v} {}", cell(k)))
        .collect();
    let _ = writeln!(
        s,
        "## gpudoctor fleet: {}, {} to drain\n",
        super::layout::count(r.nodes, "node", "nodes"),
        r.drain.len()
    );
    if !st.is_empty() {
        let _ = writeln!(s, "Check verdicts: {}.\n", st.join(", "));
    }
    let _ = writeln!(s, "### Drain\n");
    if r.drain.is_empty() {
        let _ = writeln!(s, "No node to drain.\n");
    } else {
        let _ = writeln!(s, "| Node | Reason |\n|---|---|");
        for d in &r.drain {
            for reason in &d.reasons {
                let _ = writeln!(s, "| {} | {} |", cell(&d.node), cell(reason));
            }
        }
        s.push('\n');
    }
    if !r.warn.is_empty() {
        let _ = writeln!(
            s,
            "### Warn (kept in service)\n\n| Node | Reason |\n|---|---|"
        );
        for d in &r.warn {
            for reason in &d.reasons {
                let _ = writeln!(s, "| {} | {} |", cell(&d.node), cell(reason));
            }
        }
        s.push('\n');
    }
    let silenced: Vec<_> = r.checks.iter().filter(|c| !c.silenced.is_empty()).collect();
    if !silenced.is_empty() {
        let _ = writeln!(
            s,
            "### Silenced (not drained for it)\n\n| Check | Nodes |\n|---|---|"
        );
        for c in silenced {
            let _ = writeln!(s, "| {} | {} |", cell(&c.id), cell(&list(&c.silenced)));
        }
        s.push('\n');
    }
    let _ = writeln!(
        s,
        "### Groups\n\n| Group | Nodes | Model | Reference |\n|---|---|---|---|"
    );
    for g in &r.groups {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} |",
            cell(&g.name),
            g.nodes.len(),
            cell(&g.model),
            cell(&g.reference)
        );
    }
    let failing: Vec<_> = r
        .checks
        .iter()
        .filter(|c| !c.fail.is_empty() || !c.warn.is_empty())
        .collect();
    if !failing.is_empty() {
        let _ = writeln!(
            s,
            "\n### Checks\n\n| Check | Fail | Warn | Pass |\n|---|---|---|---|"
        );
        for c in failing {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                cell(&c.id),
                cell(&list(&c.fail)),
                cell(&list(&c.warn)),
                c.pass
            );
        }
    }
    let flagged: Vec<_> = r
        .probes
        .iter()
        .filter(|p| !p.outliers.is_empty() || !p.below_floor.is_empty())
        .collect();
    if !flagged.is_empty() {
        let _ = writeln!(
            s,
            "\n### Bandwidth (GB/s)\n\n| Group | Measurement | Median | Node | GB/s | From median | z | Drained |\n|---|---|---|---|---|---|---|---|"
        );
        for p in flagged {
            for o in &p.outliers {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.1} | {} | {:.1} | {:+.1}% | {:.1} | {} |",
                    cell(&p.group),
                    cell(&p.measurement),
                    p.median_gbps,
                    cell(&o.node),
                    o.gbps,
                    o.deviation * 100.0,
                    o.z,
                    if o.drain { "yes" } else { "no" }
                );
            }
            for b in &p.below_floor {
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.1} | {} | {:.1} | below {} {:.1} | | yes |",
                    cell(&p.group),
                    cell(&p.measurement),
                    p.median_gbps,
                    cell(&b.node),
                    b.gbps,
                    cell(&floor_word(&b.floor_from)),
                    b.floor_gbps
                );
            }
        }
    }
    if !r.shape.is_empty() {
        let _ = writeln!(
            s,
            "\n### Shape differences\n\n| Node | Difference | Drained |\n|---|---|---|"
        );
        for d in &r.shape {
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                cell(&d.node),
                cell(&d.describe()),
                if d.drain { "yes" } else { "no" }
            );
        }
    }
    s
}

pub fn diff_table(d: &DiffReport) -> String {
    let mut s = String::new();
    let st = |x: &Option<String>| x.clone().unwrap_or_else(|| "(no check report)".into());
    let _ = writeln!(
        s,
        "A = {} ({}), B = {} ({})",
        d.a,
        st(&d.status[0]),
        d.b,
        st(&d.status[1])
    );
    match &d.shape {
        Some(f) if f.is_empty() => {
            let _ = writeln!(
                s,
                "\nShape: B matches A (GPUs, NICs, paths, links, versions)"
            );
        }
        Some(f) => {
            let _ = writeln!(s, "\nShape (B against A's baseline):");
            for x in f {
                let _ = writeln!(s, "  {} {} {}: {}", x.status, x.id, x.subject, x.message);
            }
        }
        None => {
            let _ = writeln!(s, "\nShape: not compared (needs two bundles)");
        }
    }
    let _ = writeln!(
        s,
        "\nChecks whose verdict differs ({}, worse first){}:",
        d.checks.len(),
        if d.hidden > 0 {
            format!(
                "; {} judged pass in one node only not shown (--all)",
                super::layout::count(d.hidden, "subject", "subjects")
            )
        } else {
            String::new()
        }
    );
    for c in &d.checks {
        let _ = writeln!(
            s,
            "  {:<24} {:<16} {} -> {}{}",
            c.id,
            c.subject,
            c.a,
            c.b,
            if c.message_b.is_empty() {
                String::new()
            } else {
                format!(": {}", c.message_b)
            }
        );
    }
    if !d.bandwidth.is_empty() {
        let _ = writeln!(
            s,
            "\nBandwidth changes of {:.0}% or more (GB/s):",
            BANDWIDTH_NOISE * 100.0
        );
        for b in &d.bandwidth {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
            let _ = writeln!(
                s,
                "  {:<36} {:>8} -> {:>8}{}",
                b.measurement,
                f(b.a_gbps),
                f(b.b_gbps),
                b.change
                    .map(|c| format!("  ({:+.0}%)", c * 100.0))
                    .unwrap_or_default()
            );
        }
    }
    super::layout::fit(&s, super::layout::PIPE_WIDTH)
}

/// "the bar" (gpudoctor's own) or "the floor of baseline NAME".
fn floor_word(from: &str) -> String {
    match from {
        "gpudoctor's bar" => "the bar".to_string(),
        other => format!("the floor of {other}"),
    }
}
