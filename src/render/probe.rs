//! Level-1 probe reports as text: pure functions of a `ProbeReport` (JSON goes through
//! `render::json`).

use super::{Style, layout};
use crate::probes::{ProbeKind, ProbeReport, Status};
use crate::reading::Reading;
use std::fmt::Write;

fn opt_gbps(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.1}"))
}

/// The human report: a header, the measurement table (median, min, max, n, expected,
/// threshold, status), p2p matrix, peer/dma-buf/link-under-load lines, notes.
pub fn table(r: &ProbeReport, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "probe {} ({})", r.probe.as_str(), r.units);
    if let Some(why) = &r.skipped {
        let _ = writeln!(out, "status: skip: {why}");
        return layout::fit(&out, style.columns());
    }
    if let Some(c) = &r.cuda {
        let drv = c.driver_version.map_or("?".to_string(), |v| {
            format!("{}.{}", v / 1000, (v % 1000) / 10)
        });
        let nvrtc = match &c.nvrtc {
            Reading::Value(s) => s.clone(),
            Reading::Absent(e) | Reading::Unknown(e) => format!("unavailable: {e}"),
        };
        let _ = writeln!(out, "CUDA driver {drv}; {nvrtc}");
    }
    for g in &r.gpus {
        let _ = writeln!(
            out,
            "{} {} {} ({}, {} SMs, CUDA device {})",
            g.label, g.bdf, g.name, g.arch, g.sm_count, g.cuda_ordinal
        );
        if !g.host_memory.is_empty() {
            let _ = writeln!(out, "  host memory: {}", g.host_memory);
        }
    }
    if !r.measurements.is_empty() {
        let header = [
            "transfer",
            "method",
            "median",
            "min",
            "max",
            "n",
            "expected",
            "threshold",
            "status",
        ];
        let mut rows = Vec::new();
        for m in &r.measurements {
            let s = m.evaluation.stats.as_ref();
            let expected = match &m.expected {
                Reading::Value(e) => format!("{:.1}", e.bandwidth_gbps),
                Reading::Absent(_) | Reading::Unknown(_) => "?".to_string(),
            };
            rows.push(vec![
                format!("{} -> {}", m.src, m.dst),
                m.method.as_str().to_string(),
                opt_gbps(s.map(|s| s.median_gbps)),
                opt_gbps(s.map(|s| s.min_gbps)),
                opt_gbps(s.map(|s| s.max_gbps)),
                s.map_or("0".to_string(), |s| s.n.to_string()),
                expected,
                opt_gbps(m.evaluation.threshold_gbps),
                m.evaluation.status.as_str().to_string(),
            ]);
        }
        let _ = writeln!(out, "{}", layout::table(&header, &rows, style.columns()));
        let size = r.measurements.first().map(|m| m.size_bytes).unwrap_or(0);
        let warm = r.measurements.first().map(|m| m.warmup).unwrap_or(0);
        let _ = writeln!(
            out,
            "GB/s; each sample one transfer of {size} bytes between its own CUDA events, all enqueued back to back after {warm} warm-up transfers"
        );
        let mut bases: Vec<&str> = r
            .measurements
            .iter()
            .filter_map(|m| m.evaluation.threshold_basis.as_deref())
            .collect();
        bases.dedup();
        for b in bases {
            let _ = writeln!(out, "threshold: {b}");
        }
        for m in &r.measurements {
            if m.evaluation.status != Status::Pass {
                let _ = writeln!(
                    out,
                    "{} {}: {}",
                    m.id,
                    m.evaluation.status.as_str(),
                    m.evaluation.reason
                );
            }
        }
    }
    if r.probe == ProbeKind::P2p && !r.measurements.is_empty() {
        out.push_str(&p2p_matrix(r));
    }
    for p in &r.peers {
        let attrs: Vec<String> = p
            .attributes
            .iter()
            .map(|(k, v)| match v {
                Reading::Value(v) => format!("{k}={v}"),
                Reading::Absent(_) | Reading::Unknown(_) => format!("{k}=?"),
            })
            .collect();
        let _ = writeln!(
            out,
            "peer {}->{} ({}): {}: {}; {}",
            p.src,
            p.dst,
            p.path.as_deref().unwrap_or("?"),
            p.status.as_str(),
            p.reason,
            attrs.join(" ")
        );
    }
    for d in &r.dmabuf {
        let attr = match &d.attribute_supported {
            Reading::Value(b) => b.to_string(),
            Reading::Absent(e) => format!("absent ({e})"),
            Reading::Unknown(e) => format!("unknown ({e})"),
        };
        let _ = writeln!(
            out,
            "dmabuf-export {}: {}: {} (DMA_BUF_SUPPORTED={attr})",
            d.gpu,
            d.status.as_str(),
            d.reason
        );
    }
    for l in &r.link_under_load {
        let _ = writeln!(
            out,
            "link under load {} {} during {}: {}: {}",
            l.gpu,
            l.bdf,
            l.during,
            l.status.as_str(),
            l.reason
        );
    }
    for n in &r.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if let Some(e) = &r.error {
        let _ = writeln!(out, "error: {e}");
    }
    let _ = writeln!(out, "status: {}", r.status.as_str());
    layout::fit(&out, style.columns())
}

/// Copy-engine medians as a src (rows) x dst (columns) matrix, like nvbandwidth prints.
fn p2p_matrix(r: &ProbeReport) -> String {
    let mut labels: Vec<&str> = r.gpus.iter().map(|g| g.label.as_str()).collect();
    labels.dedup();
    let mut out = String::new();
    for method in [
        crate::probes::Method::CopyEngine,
        crate::probes::Method::SmKernel,
    ] {
        let any = r.measurements.iter().any(|m| m.method == method);
        if !any {
            continue;
        }
        let _ = writeln!(out, "p2p {} median GB/s (row = source):", method.as_str());
        let _ = write!(out, "{:>8}", "");
        for l in &labels {
            let _ = write!(out, " {l:>8}");
        }
        out.push('\n');
        for a in &labels {
            let _ = write!(out, "{a:>8}");
            for b in &labels {
                let cell = if a == b {
                    "-".to_string()
                } else {
                    r.measurements
                        .iter()
                        .find(|m| m.method == method && m.src == *a && m.dst == *b)
                        .and_then(|m| m.evaluation.stats.as_ref())
                        .map_or("?".to_string(), |s| format!("{:.1}", s.median_gbps))
                };
                let _ = write!(out, " {cell:>8}");
            }
            out.push('\n');
        }
    }
    out
}
