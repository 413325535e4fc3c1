//! `fleet` and `diff` as text: the same content as their JSON, for people.

use crate::fleet::{BANDWIDTH_NOISE, DiffReport, FleetReport, OUTLIER_Z};
use std::fmt::Write;

pub fn fleet_table(r: &FleetReport) -> String {
    let mut s = String::new();
    let st: Vec<String> = r.status.iter().map(|(k, v)| format!("{v} {k}")).collect();
    let _ = writeln!(s, "{} nodes: {}", r.nodes, st.join(", "));
    let list = |v: &[String]| -> String {
        if v.len() > 8 {
            format!("{} ... (+{})", v[..8].join(" "), v.len() - 8)
        } else {
            v.join(" ")
        }
    };
    let _ = writeln!(s, "\nChecks (nodes failing / warning / skipping):");
    let mut any = false;
    for c in &r.checks {
        if c.fail.is_empty() && c.warn.is_empty() && c.skip.is_empty() {
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
    }
    if !any {
        let _ = writeln!(s, "  every check passed on every node");
    }
    if !r.probes.is_empty() {
        let _ = writeln!(
            s,
            "\nProbes (median over nodes, GB/s = 10^9 B/s; outliers |modified z| > {OUTLIER_Z}):"
        );
        for p in &r.probes {
            let o: Vec<String> = p
                .outliers
                .iter()
                .map(|o| format!("{} {:.1} (z {:.1})", o.node, o.gbps, o.z))
                .collect();
            let _ = writeln!(
                s,
                "  {:<36} n {:>4}  median {:>7.1}  {}",
                p.measurement,
                p.n,
                p.median_gbps,
                if o.is_empty() {
                    "no outliers".to_string()
                } else {
                    format!("outliers: {}", o.join(", "))
                }
            );
        }
    }
    if r.shape_nodes > 0 {
        let _ = writeln!(
            s,
            "\nShape ({} nodes from bundles; fields where nodes differ from the majority):",
            r.shape_nodes
        );
        if r.shape.is_empty() {
            let _ = writeln!(s, "  all alike");
        }
        for f in &r.shape {
            let d: Vec<String> = f.differ.iter().map(|(n, v)| format!("{n}={v}")).collect();
            let _ = writeln!(
                s,
                "  {}: majority {} ({} nodes); differ: {}",
                f.field,
                f.majority,
                f.majority_nodes,
                list(&d)
            );
        }
    }
    let _ = writeln!(s, "\nDrain ({} nodes):", r.drain.len());
    for d in &r.drain {
        let _ = writeln!(s, "  {}: {}", d.node, d.reasons.join("; "));
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
    let _ = writeln!(s, "\nChecks whose verdict differs ({}):", d.checks.len());
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
    s
}
