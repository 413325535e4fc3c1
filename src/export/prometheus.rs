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
//! Pure: `&Report -> String`. `--format prometheus` carries no timestamps (node_exporter adds
//! the file's mtime as `node_textfile_mtime_seconds`), so its output is deterministic; the
//! `--textfile` document adds the run's time, exit code and `gpudoctor_up` (`RunRecord`).

use crate::findings::Status;
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
    if pairs.is_empty() {
        return String::new();
    }
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
        ("revision", crate::REVISION),
        ("command", command),
        ("schema", schema),
        ("source", source),
    ];
    l.extend_from_slice(extra);
    sample(out, "gpudoctor_info", &l, 1.0);
}

/// `gpudoctor check --format prometheus` (and the body of `--textfile`).
///
/// By default: the node's verdict, counts per status and per check, and one series per finding
/// that is not a pass (`gpudoctor_finding`), labelled as DCGM exporter labels GPUs where the
/// subject is one, so an alert joins both. A healthy DGX-class node is a few dozen lines and a
/// failing one a few more per problem. `all_series` adds every finding's state set
/// (`gpudoctor_check_status`: four series per finding, over a thousand on an 8-GPU node).
pub fn check(r: &CheckReport, all_series: bool) -> String {
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
    verdict_series(r, &mut out);
    per_check_series(r, &mut out);
    finding_series(r, &mut out);
    silenced_series(r, &mut out);
    measured_series(r, &mut out);
    if all_series {
        check_state_sets(r, &mut out);
    }
    out
}

/// The node's verdict and its counts: status, whether the gate decided it, findings per
/// status, unjudged and silenced findings, and what `--report-only` and `--time-budget` did.
fn verdict_series(r: &CheckReport, out: &mut String) {
    family(
        out,
        "gpudoctor_status",
        "Overall verdict of the node (state set: 1 for the current status), the gate (--strict, --fail-on-skip) applied.",
    );
    for s in CHECK_STATUSES {
        sample(
            out,
            "gpudoctor_status",
            &[("status", s.as_str())],
            f64::from(u8::from(r.status == s)),
        );
    }
    family(
        out,
        "gpudoctor_gate_decided",
        "1 when --strict or --fail-on-skip, not a failing check, made the verdict a failure.",
    );
    sample(
        out,
        "gpudoctor_gate_decided",
        &[],
        f64::from(u8::from(r.gate.decided())),
    );
    family(
        out,
        "gpudoctor_checks",
        "Number of check findings with each status.",
    );
    for (s, n) in [
        (Status::Pass, r.summary.pass),
        (Status::Skip, r.summary.skip),
        (Status::Warn, r.summary.warn),
        (Status::Fail, r.summary.fail),
    ] {
        sample(out, "gpudoctor_checks", &[("status", s.as_str())], n as f64);
    }
    family(
        out,
        "gpudoctor_checks_unjudged",
        "Number of skips of something that should have been judged (not root, or a fact unknown): what --fail-on-skip fails on.",
    );
    sample(
        out,
        "gpudoctor_checks_unjudged",
        &[],
        r.summary.unjudged as f64,
    );
    family(
        out,
        "gpudoctor_checks_silenced",
        "Number of findings a silence matched (--skip ID:SUBJECT, the baseline's silences): left out of the verdict and of the counts above, listed in gpudoctor_finding_silenced.",
    );
    sample(
        out,
        "gpudoctor_checks_silenced",
        &[],
        r.summary.silenced as f64,
    );
    if let Some(code) = r.would_exit {
        family(
            out,
            "gpudoctor_report_only_would_exit_code",
            "--report-only: the exit code the verdict would have given (the run exited 0).",
        );
        sample(
            out,
            "gpudoctor_report_only_would_exit_code",
            &[],
            f64::from(code),
        );
    }
    if let Some(t) = &r.time_budget {
        family(
            out,
            "gpudoctor_time_budget_seconds",
            "The run's --time-budget (present only when one was given).",
        );
        sample(out, "gpudoctor_time_budget_seconds", &[], t.seconds);
        family(
            out,
            "gpudoctor_time_budget_spent",
            "1 when the --time-budget ran out and the steps it cut were left unjudged (unknown skips).",
        );
        sample(
            out,
            "gpudoctor_time_budget_spent",
            &[],
            f64::from(u8::from(t.spent_during.is_some())),
        );
    }
}

/// Findings of each check that reported anything, per status.
fn per_check_series(r: &CheckReport, out: &mut String) {
    family(
        out,
        "gpudoctor_check_findings",
        "Number of findings of one check with each status (checks that reported anything).",
    );
    let mut per_check: Vec<(&str, [usize; 4])> = Vec::new();
    for f in r.checks.iter().filter(|f| f.silenced.is_none()) {
        let id = f.id.as_str();
        let i = match per_check.iter().position(|(c, _)| *c == id) {
            Some(i) => i,
            None => {
                per_check.push((id, [0; 4]));
                per_check.len() - 1
            }
        };
        per_check[i].1[CHECK_STATUSES
            .iter()
            .position(|s| *s == f.status)
            .unwrap_or(0)] += 1;
    }
    for (id, counts) in &per_check {
        for (s, n) in CHECK_STATUSES.iter().zip(counts) {
            sample(
                out,
                "gpudoctor_check_findings",
                &[("check", id), ("status", s.as_str())],
                *n as f64,
            );
        }
    }
}

/// One series per label set of the findings that are not a pass, at most MAX_FINDING_SERIES
/// of them; the rest counted in gpudoctor_findings_not_listed.
fn finding_series(r: &CheckReport, out: &mut String) {
    family(
        out,
        "gpudoctor_finding",
        "Findings that are not a pass (1, or how many findings share these labels): a warning, a failure, or a skip of something that should have been judged (skip=\"unknown\"|\"not-root\"), with its fault class (category, action). GPU subjects carry DCGM exporter's labels (gpu, UUID, pci_bus_id) so that alerts join both. `gpudoctor explain CHECK` documents each check.",
    );
    // One series per label set (equal findings are counted, not repeated: a scrape refuses a
    // duplicate series), and at most MAX_FINDING_SERIES per node: the rest are counted in
    // gpudoctor_findings_not_listed.
    let mut series: Vec<(Vec<(&str, String)>, usize)> = Vec::new();
    let mut at: std::collections::HashMap<Vec<(&str, String)>, usize> = Default::default();
    let mut not_listed = 0usize;
    for f in r.checks.iter().filter(|f| f.silenced.is_none()) {
        let unjudged = f.skip.filter(|k| k.unjudged());
        if f.status == Status::Pass || (f.status == Status::Skip && unjudged.is_none()) {
            continue;
        }
        let mut l: Vec<(&str, String)> = vec![
            ("check", f.id.as_str().to_string()),
            ("subject", f.subject.clone()),
            ("status", f.status.as_str().to_string()),
        ];
        if let Some(k) = unjudged {
            l.push(("skip", k.as_str().to_string()));
        }
        l.push(("category", f.id.category().as_str().to_string()));
        l.push(("action", f.action().as_str().to_string()));
        if let Some(g) = r.gpu_of(&f.subject) {
            if let Some(i) = g.index {
                l.push(("gpu", i.to_string()));
            }
            if let Some(u) = &g.uuid {
                l.push(("UUID", u.clone()));
            }
            l.push(("pci_bus_id", g.pci_bus_id.clone()));
        }
        if let Some(&i) = at.get(&l) {
            series[i].1 += 1;
        } else if series.len() < MAX_FINDING_SERIES {
            at.insert(l.clone(), series.len());
            series.push((l, 1));
        } else {
            not_listed += 1;
        }
    }
    for (l, n) in &series {
        sample(out, "gpudoctor_finding", &borrow(l), *n as f64);
    }
    if not_listed > 0 {
        family(
            out,
            "gpudoctor_findings_not_listed",
            "Findings that are not a pass left out of gpudoctor_finding: a node reports at most that many series (the JSON report lists every finding).",
        );
        sample(out, "gpudoctor_findings_not_listed", &[], not_listed as f64);
    }
}

/// The bandwidth a probe finding measured (level 1: `probe.h2d`, `.d2h`, `.p2p`, `.nccl`) and
/// the bar it was judged against, one series each per (check, subject), passes included, so a
/// dashboard sees a link wear down before it fails. Nothing at level 0.
fn measured_series(r: &CheckReport, out: &mut String) {
    let found: Vec<(&crate::findings::Finding, f64, Option<f64>)> = r
        .checks
        .iter()
        .filter_map(|f| measured(f).map(|(m, t)| (f, m, t)))
        .collect();
    if found.is_empty() {
        return;
    }
    family(
        out,
        "gpudoctor_measured_bandwidth_bytes_per_second",
        "Median bandwidth a probe measured for one finding (decimal bytes per second, to 0.1 GB/s; the measurement it settled on where it measured again). `gpudoctor explain CHECK` documents each probe.",
    );
    for (f, m, _) in &found {
        sample(
            out,
            "gpudoctor_measured_bandwidth_bytes_per_second",
            &[("check", f.id.as_str()), ("subject", &f.subject)],
            m * 1e9,
        );
    }
    family(
        out,
        "gpudoctor_measured_threshold_bytes_per_second",
        "The bandwidth that finding's measurement had to reach (decimal bytes per second; the JSON report's evidence says where the bar comes from).",
    );
    for (f, _, t) in &found {
        if let Some(t) = t {
            sample(
                out,
                "gpudoctor_measured_threshold_bytes_per_second",
                &[("check", f.id.as_str()), ("subject", &f.subject)],
                t * 1e9,
            );
        }
    }
}

/// (median GB/s, threshold GB/s) from a probe finding's evidence: the probes' findings carry
/// them as text only ("median 55.3 GB/s (min 55.1, max 55.4, n=20)", and "threshold":
/// "50.4 GB/s (80% of ...)"). The last median is the one the measurement settled on (a
/// remeasure's evidence follows the first reading's).
fn measured(f: &crate::findings::Finding) -> Option<(f64, Option<f64>)> {
    if !f.id.as_str().starts_with("probe.") {
        return None;
    }
    let gbps = |v: &str| -> Option<f64> {
        let (n, _) = v.split_once(" GB/s")?;
        n.trim().parse::<f64>().ok().filter(|x| x.is_finite())
    };
    let median = f
        .evidence
        .iter()
        .filter_map(|e| e.value.strip_prefix("median ").and_then(gbps))
        .next_back()?;
    let threshold = f
        .evidence
        .iter()
        .find(|e| e.source == "threshold")
        .and_then(|e| gbps(&e.value));
    Some((median, threshold))
}

/// Every silenced finding with its real status (`gpudoctor_finding_silenced`): out of
/// `gpudoctor_finding`, so an alert on it stops, but never shown as healthy.
fn silenced_series(r: &CheckReport, out: &mut String) {
    let silenced: Vec<&crate::findings::Finding> =
        r.checks.iter().filter(|f| f.silenced.is_some()).collect();
    if silenced.is_empty() {
        return;
    }
    family(
        out,
        "gpudoctor_finding_silenced",
        "Findings a silence matched (1, or how many share these labels), with their real status and where the silence came from (by=\"command-line\"|\"baseline\", expires: its last day, empty on the command line). Not in the verdict or gpudoctor_finding.",
    );
    let mut counted: std::collections::BTreeMap<Vec<(&str, String)>, usize> = Default::default();
    for f in silenced.into_iter().take(MAX_FINDING_SERIES) {
        let s = f.silenced.as_ref().expect("filtered");
        let l = vec![
            ("check", f.id.as_str().to_string()),
            ("subject", f.subject.clone()),
            ("status", f.status.as_str().to_string()),
            ("by", s.by.as_str().to_string()),
            ("expires", s.expires.clone().unwrap_or_default()),
        ];
        *counted.entry(l).or_default() += 1;
    }
    for (l, n) in &counted {
        sample(out, "gpudoctor_finding_silenced", &borrow(l), *n as f64);
    }
}

/// Series of `gpudoctor_finding` per node, and (check, subject)s of `--all-series`: a
/// scrape of one node stays bounded whatever the report holds.
pub const MAX_FINDING_SERIES: usize = 2000;

/// Every (check, subject)'s state set (`--all-series`).
fn check_state_sets(r: &CheckReport, out: &mut String) {
    family(
        out,
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
            None if order.len() >= MAX_FINDING_SERIES => {}
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
                out,
                "gpudoctor_check_status",
                &[("check", k.0), ("subject", k.1), ("status", s.as_str())],
                f64::from(u8::from(st == s)),
            );
        }
    }
}

/// What `--textfile` adds to a run's series: when it ran, how it ended, whether it judged.
pub struct RunRecord<'a> {
    /// Seconds since the epoch, when the run ended.
    pub timestamp_seconds: f64,
    pub exit_code: i32,
    /// Why gpudoctor could not run (exit 2) or did not finish; None when it judged the node.
    pub error: Option<&'a str>,
}

fn run_series(out: &mut String, run: &RunRecord) {
    family(
        out,
        "gpudoctor_up",
        "1 when gpudoctor ran and judged the node, 0 when it could not run (gpudoctor_error_info says why).",
    );
    sample(
        out,
        "gpudoctor_up",
        &[],
        f64::from(u8::from(run.error.is_none())),
    );
    family(
        out,
        "gpudoctor_last_run_timestamp_seconds",
        "When the run that wrote this file ended (seconds since the epoch).",
    );
    sample(
        out,
        "gpudoctor_last_run_timestamp_seconds",
        &[],
        run.timestamp_seconds.floor(),
    );
    family(
        out,
        "gpudoctor_exit_code",
        "The run's exit code: 0 healthy, 1 a check failed, 2 gpudoctor could not run.",
    );
    sample(out, "gpudoctor_exit_code", &[], f64::from(run.exit_code));
    if let Some(e) = run.error {
        family(
            out,
            "gpudoctor_error_info",
            "Why the last run could not judge the node (always 1).",
        );
        let reason: String = e.chars().take(300).collect();
        sample(out, "gpudoctor_error_info", &[("reason", &reason)], 1.0);
    }
}

/// The whole `--textfile` document for a run that produced a report.
pub fn textfile(r: &CheckReport, all_series: bool, run: &RunRecord) -> String {
    let mut out = check(r, all_series);
    run_series(&mut out, run);
    out
}

/// The whole `--textfile` document for a run that produced no report (exit 2, or a hung
/// device): `gpudoctor_up 0` and the reason, so that a node that cannot be checked alerts
/// instead of serving the last verdict for ever.
pub fn textfile_without_report(run: &RunRecord) -> String {
    let mut out = String::new();
    info(&mut out, "check", crate::report::CHECK_SCHEMA, "none", &[]);
    run_series(&mut out, run);
    out
}

fn source_kind(s: &crate::report::SourceInfo) -> &'static str {
    match s {
        crate::report::SourceInfo::Live => "live",
        crate::report::SourceInfo::Root { .. } => "root",
        crate::report::SourceInfo::Bundle { .. } => "bundle",
        crate::report::SourceInfo::From { .. } => "from",
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

fn borrow<'a>(k: &'a [(&'a str, String)]) -> Vec<(&'a str, &'a str)> {
    k.iter().map(|(a, b)| (*a, b.as_str())).collect()
}

/// `gpudoctor probe write-bw --format prometheus`.
pub fn write_bw(r: &crate::report::rdma::write_bw::WriteBwReport) -> String {
    use crate::report::rdma::write_bw::Verdict;
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
    use crate::findings::Judgement;
    let now = match crate::rdma::judge::write_bw::judge_run(&r.view()).status {
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

/// Prometheus text exposition: the check report, a CUDA probe, a write-bw run (one: `config`
/// refuses `--gpu auto` with it).
pub struct Prometheus {
    /// Every finding's state set (`--all-series`).
    pub all_series: bool,
}

impl super::exporter::Exporter for Prometheus {
    fn check(&self, r: &CheckReport) -> Option<String> {
        Some(check(r, self.all_series))
    }
    fn probe(&self, r: &ProbeReport) -> Option<String> {
        Some(probe(r))
    }
    fn write_bw(&self, runs: &[&crate::report::rdma::write_bw::WriteBwReport]) -> Option<String> {
        match runs {
            [one] => Some(write_bw(one)),
            _ => None,
        }
    }
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

    /// The medians and thresholds read back from probe findings, probe.nccl's included; other
    /// checks and evidence without a median give nothing.
    #[test]
    fn measured_bandwidth_from_evidence() {
        use crate::findings::{CheckId, Finding, ev};
        let copy = Finding::new(CheckId::ProbeH2d, "GPU0 (copy-engine)", Status::Warn, "x")
            .with(ev(
                "copy-engine x 268435456 B, CUDA events",
                "median 41.0 GB/s (min 40.0, max 42.0, n=20)",
            ))
            .with(ev(
                "copy-engine x 268435456 B, measured again (the first reading was below the bar)",
                "median 52.5 GB/s (min 52.0, max 53.0, n=60)",
            ))
            .with(ev(
                "threshold",
                "50.4 GB/s (80% of PCIe Gen5 x16 = 63.0 GB/s)",
            ));
        assert_eq!(measured(&copy), Some((52.5, Some(50.4))));
        let nccl =
            Finding::new(CheckId::ProbeNccl, "nvlink (all_reduce)", Status::Pass, "x").with(ev(
                "bus bandwidth, 5 warm-up + 20 x 10 iterations, CUDA events",
                "median 350.2 GB/s (min 349.0, max 351.0, n=20)",
            ));
        assert_eq!(measured(&nccl), Some((350.2, None)));
        let dmabuf = Finding::new(CheckId::ProbeDmabufExport, "GPU0", Status::Pass, "x")
            .with(ev("CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED", "true"));
        assert_eq!(measured(&dmabuf), None);
    }

    #[test]
    fn recorded_probe_reports_render() {
        let dir = crate::fixture_trees::tree("h200x2-live").join("probes");
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
