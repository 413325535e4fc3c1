//! Reports as Prometheus text exposition (node_exporter's textfile collector reads it from a
//! `*.prom` file; `promtool check metrics` lints it).
//!
//! Label names are API, like check ids: `check`, `subject`, `status` for checks; `probe`,
//! `method`, `src`, `dst` for probe measurements; `device`, `port`, `size_bytes` for write-bw.
//! Statuses are state sets (one series per possible status, 1 for the current one, 0 for the
//! others: kube-state-metrics' habit) so a query `== 1` needs no regex and a status that
//! disappears leaves a 0 rather than a gap. Bandwidth is in bytes per second (Prometheus base
//! units; decimal, as the reports are).
//!
//! Pure: `&Report -> String`. No timestamps (node_exporter adds the file's mtime as
//! `node_textfile_mtime_seconds`), so output is deterministic.

use crate::checks::Status;
use crate::probes::ProbeReport;
use crate::report::CheckReport;
use std::fmt::Write;

const CHECK_STATUSES: [Status; 4] = [Status::Pass, Status::Skip, Status::Warn, Status::Fail];
const PROBE_STATUSES: [crate::probes::Status; 5] = [
    crate::probes::Status::Pass,
    crate::probes::Status::Skip,
    crate::probes::Status::Warn,
    crate::probes::Status::Unknown,
    crate::probes::Status::Fail,
];

/// A label value as the exposition format wants it: backslash, double quote and line feed
/// escaped.
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
}

fn sample(out: &mut String, name: &str, l: &[(&str, &str)], v: f64) {
    let _ = writeln!(out, "{name}{} {}", labels(l), number(v));
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

fn info(out: &mut String, command: &str, schema: &str, source: &str, extra: &[(&str, &str)]) {
    family(
        out,
        "gpudoctor_info",
        "gpudoctor version and what the report covers (always 1).",
    );
    let mut l: Vec<(&str, &str)> = vec![
        ("version", env!("CARGO_PKG_VERSION")),
        ("command", command),
        ("schema", schema),
        ("source", source),
    ];
    l.extend_from_slice(extra);
    sample(out, "gpudoctor_info", &l, 1.0);
}

/// `gpudoctor check --format prometheus`.
pub fn check(r: &CheckReport) -> String {
    let mut out = String::new();
    let level = r.level.to_string();
    let source = source_kind(&r.source);
    info(
        &mut out,
        "check",
        r.schema,
        source,
        &[("level", level.as_str())],
    );
    family(
        &mut out,
        "gpudoctor_status",
        "Overall verdict of the node (state set: 1 for the current status).",
    );
    for s in CHECK_STATUSES {
        sample(
            &mut out,
            "gpudoctor_status",
            &[("status", s.as_str())],
            f64::from(u8::from(r.status == s)),
        );
    }
    family(
        &mut out,
        "gpudoctor_checks",
        "Number of check findings with each status.",
    );
    for (s, n) in [
        (Status::Pass, r.summary.pass),
        (Status::Skip, r.summary.skip),
        (Status::Warn, r.summary.warn),
        (Status::Fail, r.summary.fail),
    ] {
        sample(
            &mut out,
            "gpudoctor_checks",
            &[("status", s.as_str())],
            n as f64,
        );
    }
    family(
        &mut out,
        "gpudoctor_check_status",
        "Verdict of one check on one subject (state set: 1 for the current status). `gpudoctor explain CHECK` documents each check.",
    );
    // One series per (check, subject): where a check reports one subject twice (rare: a port
    // and its device), the worst verdict stands.
    let mut worst: std::collections::BTreeMap<(&str, &str), Status> = Default::default();
    let mut order: Vec<(&str, &str)> = Vec::new();
    for f in &r.checks {
        let k = (f.id.as_str(), f.subject.as_str());
        match worst.get_mut(&k) {
            Some(s) => *s = (*s).max(f.status),
            None => {
                worst.insert(k, f.status);
                order.push(k);
            }
        }
    }
    for k in order {
        let st = worst[&k];
        for s in CHECK_STATUSES {
            sample(
                &mut out,
                "gpudoctor_check_status",
                &[("check", k.0), ("subject", k.1), ("status", s.as_str())],
                f64::from(u8::from(st == s)),
            );
        }
    }
    out
}

fn source_kind(s: &crate::report::SourceInfo) -> &'static str {
    match s {
        crate::report::SourceInfo::Live => "live",
        crate::report::SourceInfo::Root { .. } => "root",
        crate::report::SourceInfo::Bundle { .. } => "bundle",
    }
}

/// `gpudoctor probe h2d|d2h|p2p|dmabuf-export --format prometheus`.
pub fn probe(r: &ProbeReport) -> String {
    let mut out = String::new();
    info(
        &mut out,
        "probe",
        &r.schema,
        "live",
        &[("probe", r.probe.as_str())],
    );
    family(
        &mut out,
        "gpudoctor_probe_status",
        "Verdict of the probe as a whole (state set: 1 for the current status).",
    );
    for s in PROBE_STATUSES {
        sample(
            &mut out,
            "gpudoctor_probe_status",
            &[("probe", r.probe.as_str()), ("status", s.as_str())],
            f64::from(u8::from(r.status == s)),
        );
    }
    let ms: Vec<_> = r.measurements.iter().collect();
    if !ms.is_empty() {
        family(
            &mut out,
            "gpudoctor_probe_bandwidth_bytes_per_second",
            "Median copy bandwidth of a measurement (decimal bytes per second).",
        );
        for m in &ms {
            if let Some(st) = &m.evaluation.stats {
                let k = measurement_labels(m);
                let l = borrow(&k);
                sample(
                    &mut out,
                    "gpudoctor_probe_bandwidth_bytes_per_second",
                    &l,
                    st.median_gbps * 1e9,
                );
            }
        }
        family(
            &mut out,
            "gpudoctor_probe_threshold_bytes_per_second",
            "The bandwidth a measurement must reach (a fraction of the link rate; see the JSON report's threshold_basis).",
        );
        for m in &ms {
            if let Some(t) = m.evaluation.threshold_gbps {
                let k = measurement_labels(m);
                let l = borrow(&k);
                sample(
                    &mut out,
                    "gpudoctor_probe_threshold_bytes_per_second",
                    &l,
                    t * 1e9,
                );
            }
        }
        family(
            &mut out,
            "gpudoctor_probe_samples",
            "Number of timed samples behind a measurement.",
        );
        for m in &ms {
            let k = measurement_labels(m);
            let l = borrow(&k);
            sample(
                &mut out,
                "gpudoctor_probe_samples",
                &l,
                m.samples_gbps.len() as f64,
            );
        }
        family(
            &mut out,
            "gpudoctor_probe_measurement_status",
            "Verdict of one measurement (state set: 1 for the current status).",
        );
        for m in &ms {
            let k = measurement_labels(m);
            for s in PROBE_STATUSES {
                let mut l = borrow(&k);
                l.push(("status", s.as_str()));
                sample(
                    &mut out,
                    "gpudoctor_probe_measurement_status",
                    &l,
                    f64::from(u8::from(m.evaluation.status == s)),
                );
            }
        }
    }
    out
}

/// The stable labels of a measurement: probe, method, src, dst.
fn measurement_labels(m: &crate::probes::Measurement) -> [(&'static str, String); 4] {
    [
        ("probe", m.probe.as_str().to_string()),
        ("method", m.method.as_str().to_string()),
        ("src", m.src.clone()),
        ("dst", m.dst.clone()),
    ]
}

fn borrow<'a>(k: &'a [(&'static str, String)]) -> Vec<(&'a str, &'a str)> {
    k.iter().map(|(a, b)| (*a, b.as_str())).collect()
}

/// `gpudoctor probe write-bw --format prometheus`.
pub fn write_bw(r: &crate::rdma::write_bw::WriteBwReport) -> String {
    use crate::rdma::write_bw::Verdict;
    let mut out = String::new();
    info(
        &mut out,
        "probe",
        r.schema,
        "live",
        &[("probe", "write-bw")],
    );
    let device = r
        .local
        .as_ref()
        .map(|l| l.device.clone())
        .unwrap_or_default();
    let port = r
        .local
        .as_ref()
        .map(|l| l.port.to_string())
        .unwrap_or_default();
    family(
        &mut out,
        "gpudoctor_probe_status",
        "Verdict of the probe as a whole (state set: 1 for the current status).",
    );
    // The judge's word (`judge_run`), not how the run ended: a completed run whose line rate
    // is unknown, or a software device, is a skip here, never a pass.
    use crate::verdict::Judgement;
    let now = match crate::rdma::write_bw::judge_run(&r.view()).status {
        Judgement::Pass => "pass",
        Judgement::Fail | Judgement::Warn => "fail",
        Judgement::Unknown | Judgement::NotApplicable => "skip",
    };
    for s in ["pass", "skip", "fail"] {
        sample(
            &mut out,
            "gpudoctor_probe_status",
            &[("probe", "write-bw"), ("status", s)],
            f64::from(u8::from(now == s)),
        );
    }
    if !r.results.is_empty() {
        family(
            &mut out,
            "gpudoctor_write_bw_bytes_per_second",
            "RDMA-write bandwidth for one message size (median over its timed repetitions, decimal bytes per second).",
        );
        for x in &r.results {
            let size = x.bytes.to_string();
            let Some(st) = &x.stats else { continue };
            sample(
                &mut out,
                "gpudoctor_write_bw_bytes_per_second",
                &[("device", &device), ("port", &port), ("size_bytes", &size)],
                st.median_mb_per_s * 1e6,
            );
        }
        family(
            &mut out,
            "gpudoctor_write_bw_size_status",
            "Verdict for one message size (state set: pass, fail, unknown).",
        );
        for x in &r.results {
            let size = x.bytes.to_string();
            // A size is judged pass or fail, or not judged (unknown); never skip or warn.
            let now = match x.verdict {
                Verdict::Pass => "pass",
                Verdict::Fail => "fail",
                Verdict::Unknown | Verdict::Skip | Verdict::Warn => "unknown",
            };
            for s in ["pass", "fail", "unknown"] {
                sample(
                    &mut out,
                    "gpudoctor_write_bw_size_status",
                    &[
                        ("device", &device),
                        ("port", &port),
                        ("size_bytes", &size),
                        ("status", s),
                    ],
                    f64::from(u8::from(now == s)),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
        assert_eq!(
            labels(&[("check", "pcie.aer"), ("subject", "q\"")]),
            r#"{check="pcie.aer",subject="q\""}"#
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(number(1.0), "1");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(25.5e9), "25500000000");
        assert_eq!(number(1.5), "1.5");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn recorded_probe_reports_render() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/h200x2-live/probes");
        let r: ProbeReport =
            serde_json::from_str(&std::fs::read_to_string(dir.join("p2p.json")).unwrap()).unwrap();
        let text = probe(&r);
        assert!(text.contains(
            "gpudoctor_probe_bandwidth_bytes_per_second{probe=\"p2p\",method=\"copy-engine\",src=\"GPU0\",dst=\"GPU1\"} "
        ));
        // One HELP/TYPE per family.
        let helps = text.lines().filter(|l| l.starts_with("# HELP")).count();
        let types = text.lines().filter(|l| l.starts_with("# TYPE")).count();
        assert_eq!(helps, types);
        assert_eq!(helps, 6);
    }
}
