//! Bandwidth charts: per probe check, one bar per measured subject (its median), a whisker
//! from min to max, and its own threshold as a tick, so an outlier GPU or port stands out.
//!
//! The numbers come from the findings' evidence, which every probe check writes the same way
//! ("median 55.3 GB/s (min 55.1, max 55.4, n=20)", "threshold": "50.4 GB/s (80% of ...)";
//! RDMA writes "median 11712.3 MB/s (93.70 Gb/s), min ..., max ... (n 5)"): the same reading
//! the Prometheus exporter makes, so a replayed report and a live one draw alike. A value that
//! does not parse is left out of the chart, never guessed.

use super::{cut, esc};
use crate::findings::{Finding, Status};
use std::collections::BTreeMap;
use std::fmt::Write;

#[derive(Debug, Clone, PartialEq)]
pub(super) struct Bar {
    pub median: f64,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub n: Option<u64>,
    pub threshold: Option<f64>,
    pub threshold_basis: Option<String>,
    /// The evidence line the median came from, as written.
    pub reading: String,
}

/// A number followed by a bandwidth unit, in GB/s (decimal; MB/s / 1000, Gb/s / 8).
fn gbps_at(s: &str) -> Option<f64> {
    let s = s.trim_start();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let v: f64 = s[..end].parse().ok().filter(|v: &f64| v.is_finite())?;
    let unit = s[end..].trim_start();
    if unit.starts_with("GB/s") {
        Some(v)
    } else if unit.starts_with("MB/s") {
        Some(v / 1000.0)
    } else if unit.starts_with("Gb/s") {
        Some(v / 8.0)
    } else {
        None
    }
}

/// The number after `key` in `s` (`min 55.1`, `n=20`, `n 5`), in the median's unit.
fn number_after(s: &str, key: &str) -> Option<f64> {
    let at = s.find(key)? + key.len();
    let rest = s[at..].trim_start_matches(['=', ' ']);
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok().filter(|v: &f64| v.is_finite())
}

/// The bar a probe finding measured: the last median in its evidence (a remeasure follows the
/// first reading), its min/max/n, and the threshold.
pub(super) fn bar(f: &Finding) -> Option<Bar> {
    if !f.id.as_str().starts_with("probe.") {
        return None;
    }
    let (reading, median) = f
        .evidence
        .iter()
        .filter_map(|e| {
            let v = e.value.strip_prefix("median ")?;
            Some((e.value.clone(), gbps_at(v)?, v))
        })
        .map(|(r, m, _)| (r, m))
        .next_back()?;
    let scale = if reading.contains(" MB/s") {
        1000.0
    } else {
        1.0
    };
    let threshold_ev = f.evidence.iter().find(|e| e.source == "threshold");
    Some(Bar {
        median,
        min: number_after(&reading, "min ").map(|v| v / scale),
        max: number_after(&reading, "max ").map(|v| v / scale),
        n: number_after(&reading, "n=")
            .or_else(|| number_after(&reading, "(n "))
            .map(|v| v as u64),
        threshold: threshold_ev.and_then(|e| gbps_at(&e.value)),
        threshold_basis: threshold_ev.map(|e| e.value.clone()),
        reading,
    })
}

/// A round axis step for `max` (1, 2 or 5 times a power of ten, about 5 ticks).
fn step(max: f64) -> f64 {
    let raw = max / 5.0;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

pub(super) fn charts(findings: &[Finding]) -> String {
    let mut by_id: BTreeMap<&str, Vec<(&Finding, Bar)>> = BTreeMap::new();
    for f in findings {
        if let Some(b) = bar(f) {
            by_id.entry(f.id.as_str()).or_default().push((f, b));
        }
    }
    if by_id.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2 id=\"bandwidth\">Measured bandwidth</h2>\n<p class=\"muted\">Bar: median; \
         whisker: min to max; red tick: the subject's threshold (hover for its basis). Decimal \
         GB/s.</p>\n",
    );
    for (id, rows) in &by_id {
        chart(&mut out, id, rows);
    }
    out
}

fn chart(out: &mut String, id: &str, rows: &[(&Finding, Bar)]) {
    const LABEL: i64 = 230;
    const PLOT: i64 = 520;
    const ROW: i64 = 24;
    let top = 28i64;
    let max = rows
        .iter()
        .flat_map(|(_, b)| [Some(b.median), b.max, b.threshold])
        .flatten()
        .fold(0.0f64, f64::max)
        * 1.08;
    let max = if max > 0.0 { max } else { 1.0 };
    let st = step(max);
    let xs = |v: f64| LABEL + ((v / max) * PLOT as f64).round() as i64;
    let height = top + ROW * rows.len() as i64 + 26;
    let width = LABEL + PLOT + 150;
    let _ = writeln!(
        out,
        "<h3 class=\"mono\" style=\"font-size:14px\">{}</h3><div class=\"scroll\" style=\"border:0\">\
         <svg class=\"chart\" width=\"{width}\" height=\"{height}\" viewBox=\"0 0 {width} {height}\" \
         font-family=\"ui-monospace,SFMono-Regular,Menlo,Consolas,monospace\" font-size=\"11\" role=\"img\" \
         aria-label=\"{} bandwidth\">",
        esc(id),
        esc(id)
    );
    // Axis and grid.
    let mut v = 0.0;
    while v <= max + 1e-9 {
        let x = xs(v);
        let _ = write!(
            out,
            "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#e8eaed\"/>\
             <text x=\"{x}\" y=\"{}\" text-anchor=\"middle\" fill=\"#5f6368\">{}</text>",
            top - 4,
            height - 22,
            height - 8,
            if st >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        );
        v += st;
    }
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"14\" fill=\"#5f6368\">GB/s</text>",
        LABEL + PLOT + 8
    );
    for (i, (f, b)) in rows.iter().enumerate() {
        let y = top + ROW * i as i64;
        let colour = match f.status {
            Status::Fail => "#d93025",
            Status::Warn => "#f29900",
            Status::Pass => "#34a853",
            Status::Skip => "#9aa0a6",
        };
        let mut title = format!(
            "{} {}: {}\n{}",
            f.subject,
            f.status.as_str().to_uppercase(),
            f.message,
            b.reading
        );
        if let Some(t) = &b.threshold_basis {
            let _ = write!(title, "\nthreshold: {t}");
        }
        let _ = write!(
            out,
            "<g class=\"bar\"><title>{}</title><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\
             <rect x=\"{LABEL}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{colour}\" fill-opacity=\"0.8\"/>",
            esc(&title),
            LABEL - 8,
            y + 15,
            esc(&cut(&f.subject, 30)),
            y + 5,
            (xs(b.median) - LABEL).max(1),
            ROW - 10
        );
        if let (Some(lo), Some(hi)) = (b.min, b.max) {
            let (x1, x2, ym) = (xs(lo), xs(hi), y + ROW / 2);
            let _ = write!(
                out,
                "<path d=\"M{x1} {ym} H{x2} M{x1} {} V{} M{x2} {} V{}\" stroke=\"#202124\" stroke-width=\"1.2\"/>",
                ym - 4,
                ym + 4,
                ym - 4,
                ym + 4
            );
        }
        if let Some(t) = b.threshold {
            let x = xs(t);
            let _ = write!(
                out,
                "<line x1=\"{x}\" y1=\"{}\" x2=\"{x}\" y2=\"{}\" stroke=\"#d93025\" stroke-width=\"2.5\"/>",
                y + 1,
                y + ROW - 1
            );
        }
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"#3c4043\">{:.1}{}</text></g>",
            LABEL + PLOT + 8,
            y + 15,
            b.median,
            match b.threshold {
                Some(t) => format!(" / {t:.1}"),
                None => " (no bar)".into(),
            }
        );
    }
    out.push_str("</svg></div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::CheckId;
    use crate::findings::ev;

    #[test]
    fn probe_evidence_reads_as_bars() {
        let f = Finding::new(CheckId::ProbeH2d, "GPU0 (copy-engine)", Status::Pass, "ok")
            .with(ev(
                "copy-engine x 268435456 B, CUDA events",
                "median 55.3 GB/s (min 55.1, max 55.4, n=20)",
            ))
            .with(ev("threshold", "50.4 GB/s (80% of PCIe Gen5 x16)"));
        let b = bar(&f).unwrap();
        assert_eq!(
            (b.median, b.min, b.max, b.n, b.threshold),
            (55.3, Some(55.1), Some(55.4), Some(20), Some(50.4))
        );
        let w = Finding::new(CheckId::ProbeWriteBw, "mlx5_0/1", Status::Pass, "ok").with(ev(
            "1048576 B x 500 writes",
            "median 11712.3 MB/s (93.70 Gb/s), min 11700.0, max 11720.5 (n 5), data validated",
        ));
        let b = bar(&w).unwrap();
        assert!((b.median - 11.7123).abs() < 1e-9);
        assert_eq!((b.min, b.n, b.threshold), (Some(11.7), Some(5), None));
        // Not a probe, or no median: no bar.
        let s = Finding::new(CheckId::ProbeNccl, "host", Status::Skip, "not recorded");
        assert!(bar(&s).is_none());
        assert_eq!(step(440.0), 100.0);
        assert_eq!(step(60.0), 20.0);
    }
}
