//! `gpudoctor check` as text for a person: what failed first, then warnings, then what could
//! not be judged, then one compact block of passes; the verdict named in the last lines.
//! Laid out as indented blocks (cargo's diagnostics, not a box table) wrapped to the width
//! given: the terminal's, or 100 columns in a pipe, so logs and snapshots read the same.

use crate::findings::{CheckId, Finding, Status};
use crate::report::CheckReport;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Width when stdout is not a terminal: reads well in a log viewer and a 100-column terminal.
pub use super::layout::PIPE_WIDTH;

/// How a check report is printed.
#[derive(Debug, Clone, Copy, Default)]
pub struct TextStyle {
    /// Wrap at this many columns (None: PIPE_WIDTH).
    pub width: Option<u16>,
    /// Passes subject by subject with their evidence (`--all`/`--verbose`).
    pub all: bool,
    /// Only the verdict lines (`--quiet`).
    pub quiet: bool,
    /// ANSI colour on status words and the verdict.
    pub color: bool,
}

thread_local! {
    /// What `paint` writes for ESC while `check_text` lays the text out: a character the text
    /// does not hold, turned into ESC once the recorded strings' controls are escaped.
    static MARK: std::cell::Cell<char> = const { std::cell::Cell::new('\u{1b}') };
}

fn paint(s: &str, status: Status, color: bool) -> String {
    if !color {
        return s.to_string();
    }
    let code = match status {
        Status::Fail => "1;31",
        Status::Warn => "1;33",
        Status::Skip => "36",
        Status::Pass => "32",
    };
    let esc = MARK.get();
    format!("{esc}[{code}m{s}{esc}[0m")
}

fn word(status: Status) -> &'static str {
    match status {
        Status::Fail => "FAIL",
        Status::Warn => "WARN",
        Status::Skip => "SKIP",
        Status::Pass => "PASS",
    }
}

use super::layout::wrap;

/// "on A, B, C" with at most `max` names, then "and N more".
fn subjects_text(subjects: &[&str], max: usize) -> String {
    if subjects.len() <= max {
        subjects.join(", ")
    } else {
        format!(
            "{} and {} more",
            subjects[..max].join(", "),
            subjects.len() - max
        )
    }
}

fn was(f: &Finding) -> String {
    match f.original_status {
        Some(o) => format!(" (was {}, by --warn/--deny/--skip)", o.as_str()),
        None => String::new(),
    }
}

/// One finding with everything that proves it and the fix. A fix word for word the same as
/// the one `prev` (an earlier block of the same check) printed is not repeated.
fn finding_block(
    out: &mut String,
    f: &Finding,
    prev: Option<&Finding>,
    st: &TextStyle,
    width: usize,
) {
    // A silenced finding keeps its status word, after one that says it does not count.
    if f.silenced.is_some() {
        out.push_str("SILENCED ");
    }
    let _ = write!(out, "{}", paint(word(f.status), f.status, st.color));
    let lead = format!(" {}  ", f.id);
    out.push_str(&lead);
    let marked = if f.silenced.is_some() { 9 } else { 0 };
    wrap(
        out,
        &format!("{}{}", f.subject, was(f)),
        marked + 4 + lead.len(),
        6,
        width,
    );
    if let Some(s) = &f.silenced {
        out.push_str("  ");
        wrap(
            out,
            &format!("{} (not in the verdict)", s.describe()),
            2,
            4,
            width,
        );
    }
    out.push_str("  ");
    wrap(out, &f.message, 2, 2, width);
    for e in &f.evidence {
        out.push_str("  - ");
        wrap(out, &format!("{}: {}", e.source, e.value), 4, 6, width);
    }
    if let Some(fix) = &f.remediation {
        match prev {
            Some(p) if p.id == f.id && p.remediation.as_ref() == Some(fix) => {
                let _ = writeln!(out, "  fix: as for {} above", p.subject);
            }
            _ => {
                out.push_str("  fix: ");
                wrap(out, fix, 7, 7, width);
            }
        }
    }
}

/// Is this skip one a person asked for (`--skip ID`)?
fn skipped_by_request(f: &Finding) -> bool {
    f.status == Status::Skip && f.original_status.is_some()
}

/// The check report as text. Recorded strings' control characters are shown escaped
/// (`super::terminal`); gpudoctor's own colour is laid out with a mark the plain text does
/// not hold (a private-use character), so that no recorded string can pass as it.
pub fn check_text(r: &CheckReport, st: &TextStyle) -> String {
    use super::terminal::escape_text;
    let plain = check_text_laid_out(
        r,
        &TextStyle {
            color: false,
            ..*st
        },
    );
    if !st.color {
        return escape_text(&plain).into_owned();
    }
    let held: std::collections::BTreeSet<char> = plain
        .chars()
        .filter(|c| ('\u{e000}'..='\u{f8ff}').contains(c))
        .collect();
    let Some(mark) = ('\u{e000}'..='\u{f8ff}').find(|c| !held.contains(c)) else {
        return escape_text(&plain).into_owned();
    };
    MARK.set(mark);
    let coloured = check_text_laid_out(r, st);
    MARK.set('\u{1b}');
    escape_text(&coloured).replace(mark, "\u{1b}")
}

fn check_text_laid_out(r: &CheckReport, st: &TextStyle) -> String {
    let width = super::layout::width(st.width);
    let mut out = String::new();
    if !st.quiet {
        header_lines(&mut out, r, st, width);
        problem_blocks(&mut out, r, st, width);
        skip_blocks(&mut out, r, st, width);
        // Silenced: each with its real status, evidence and the silence (out of the verdict).
        for f in r.checks.iter().filter(|f| f.silenced.is_some()) {
            finding_block(&mut out, f, None, st, width);
            out.push('\n');
        }
        pass_lines(&mut out, r, st, width);
    }
    verdict_lines(&mut out, r, st, width);
    out
}

/// The head: what was checked, at which level, the source's limits, and a note where not
/// running as root left findings unjudged.
fn header_lines(out: &mut String, r: &CheckReport, st: &TextStyle, width: usize) {
    let head = format!(
        "gpudoctor check (level {}): {}",
        r.level,
        r.source.describe()
    );
    wrap(out, &head, 0, 2, width);
    for l in r.source.limits() {
        wrap(out, &format!("  {l}"), 2, 4, width);
    }
    if r.summary.not_root > 0 {
        let _ = write!(out, "{} ", paint("not root:", Status::Warn, st.color));
        let line = format!(
            "{} could not be judged (unprivileged readers see 64 bytes of PCI config space); run as root",
            super::layout::count(r.summary.not_root, "finding", "findings")
        );
        wrap(out, &line, 10, 2, width);
    }
    out.push('\n');
}

/// A block per failure, then per warning, each with its evidence; the first block of a run
/// of same-check, same-fix findings carries the fix.
fn problem_blocks(out: &mut String, r: &CheckReport, st: &TextStyle, width: usize) {
    for status in [Status::Fail, Status::Warn] {
        // The first block of a run of same-check, same-fix findings carries the fix.
        let mut anchor: Option<&Finding> = None;
        for f in r
            .checks
            .iter()
            .filter(|f| f.status == status && f.silenced.is_none())
        {
            finding_block(out, f, anchor, st, width);
            out.push('\n');
            let same = anchor.is_some_and(|a| a.id == f.id && a.remediation == f.remediation);
            if !same {
                anchor = Some(f);
            }
        }
    }
}

/// Skips: one block per (check, reason), the subjects named together, evidence only with
/// --all; then the checks not judged because --skip asked so.
fn skip_blocks(out: &mut String, r: &CheckReport, st: &TextStyle, width: usize) {
    // Skips: one block per (check, reason), the subjects named together.
    let mut skips: BTreeMap<(CheckId, &str), Vec<&Finding>> = BTreeMap::new();
    let mut requested: BTreeMap<CheckId, usize> = BTreeMap::new();
    for f in r.checks.iter().filter(|f| f.silenced.is_none()) {
        if skipped_by_request(f) {
            *requested.entry(f.id).or_default() += 1;
        } else if f.status == Status::Skip {
            skips.entry((f.id, f.message.as_str())).or_default().push(f);
        }
    }
    // One wrapped entry per (check, reason); evidence only with --all.
    for group in skips.values() {
        let f = group[0];
        let subjects: Vec<&str> = group.iter().map(|f| f.subject.as_str()).collect();
        let _ = write!(out, "{}", paint("SKIP", Status::Skip, st.color));
        let lead = format!(" {}  ", f.id);
        out.push_str(&lead);
        let text = format!("{}: {}", subjects_text(&subjects, 8), f.message);
        wrap(out, &text, 4 + lead.len(), 6, width);
        if st.all {
            for f in group {
                for e in &f.evidence {
                    out.push_str("  - ");
                    wrap(out, &format!("{}: {}", e.source, e.value), 4, 6, width);
                }
            }
        }
    }
    if !skips.is_empty() {
        out.push('\n');
    }
    if !requested.is_empty() {
        let list: Vec<String> = requested
            .iter()
            .map(|(id, n)| format!("{id} ({n})"))
            .collect();
        out.push_str("not judged, as asked (--skip): ");
        wrap(out, &list.join(", "), 31, 2, width);
        out.push('\n');
    }
}

/// Passes: one line per check id, or with --all every subject with its evidence.
fn pass_lines(out: &mut String, r: &CheckReport, st: &TextStyle, width: usize) {
    // Passes: one line per check id, or every subject with evidence.
    let mut passes: BTreeMap<CheckId, Vec<&Finding>> = BTreeMap::new();
    for f in r
        .checks
        .iter()
        .filter(|f| f.status == Status::Pass && f.silenced.is_none())
    {
        passes.entry(f.id).or_default().push(f);
    }
    if !passes.is_empty() {
        if st.all {
            for group in passes.values() {
                for f in group {
                    finding_block(out, f, None, st, width);
                }
            }
            out.push('\n');
        } else {
            let idw = passes.keys().map(|id| id.as_str().len()).max().unwrap_or(0);
            for group in passes.values() {
                let f = group[0];
                let subjects: Vec<&str> = group.iter().map(|f| f.subject.as_str()).collect();
                let what = if subjects.len() == 1 {
                    subjects[0].to_string()
                } else {
                    format!(
                        "{} subjects: {}",
                        subjects.len(),
                        subjects_text(&subjects, 4)
                    )
                };
                let _ = write!(out, "{}", paint("PASS", Status::Pass, st.color));
                let lead = format!(" {:<idw$}  ", f.id.as_str());
                out.push_str(&lead);
                wrap(out, &what, 4 + lead.len(), 7 + idw, width);
            }
            out.push_str("(--all shows each passing subject with its evidence)\n\n");
        }
    }
}

/// The verdict, last: what failed, what warned, what was silenced, the gate's reasons and
/// the Result line with the counts.
fn verdict_lines(out: &mut String, r: &CheckReport, st: &TextStyle, width: usize) {
    // The verdict, last: what failed, what warned, then the counts.
    for status in [Status::Fail, Status::Warn] {
        let mut by_id: BTreeMap<CheckId, Vec<&str>> = BTreeMap::new();
        for f in r
            .checks
            .iter()
            .filter(|f| f.status == status && f.silenced.is_none())
        {
            by_id.entry(f.id).or_default().push(&f.subject);
        }
        for (id, subjects) in &by_id {
            let _ = write!(out, "{}", paint(word(status), status, st.color));
            let lead = format!("  {id} on ");
            out.push_str(&lead);
            wrap(out, &subjects_text(subjects, 6), 4 + lead.len(), 6, width);
        }
    }
    let s = &r.summary;
    let verdict = r.status.as_str().to_uppercase();
    let unjudged = if s.unjudged > 0 {
        format!("; {} could not be judged", s.unjudged)
    } else {
        String::new()
    };
    if s.silenced > 0 {
        let mut by_id: BTreeMap<CheckId, Vec<String>> = BTreeMap::new();
        for f in r.checks.iter().filter(|f| f.silenced.is_some()) {
            by_id
                .entry(f.id)
                .or_default()
                .push(format!("{} ({})", f.subject, f.status.as_str()));
        }
        for (id, subjects) in &by_id {
            let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
            let lead = format!("SILENCED  {id} on ");
            out.push_str(&lead);
            wrap(out, &subjects_text(&subjects, 6), lead.len(), 6, width);
        }
    }
    if let Some(code) = r.would_exit {
        wrap(
            out,
            &format!(
                "Report only (--report-only): exited 0; the verdict would have exited {code}."
            ),
            0,
            6,
            width,
        );
    }
    // The gate's reasons when it, not a failing check, decided the verdict: on a line of their
    // own, so that the Result line stays one line within 100 columns (scripts read the last).
    let gate = if r.gate.decided() {
        wrap(
            out,
            &format!("Gate: {}", r.gate.reasons.join("; ")),
            0,
            6,
            width,
        );
        " (gate):"
    } else {
        ":"
    };
    // "Result: VERDICT" stays on the first line (scripts look for it); the counts wrap.
    let line = format!(
        "Result: {}{gate} {} pass, {} warn, {} fail, {} skip{} ({} findings{unjudged}).",
        verdict,
        s.pass,
        s.warn,
        s.fail,
        s.skip,
        silenced_count(s),
        r.checks.len()
    );
    let mut wrapped = String::new();
    wrap(&mut wrapped, &line, 0, 8, width);
    out.push_str(&wrapped.replacen(&verdict, &paint(&verdict, r.status, st.color), 1));
}

/// ", 2 silenced" after the counts where a silence matched anything; nothing otherwise.
pub(crate) fn silenced_count(s: &crate::report::Summary) -> String {
    if s.silenced > 0 {
        format!(", {} silenced", s.silenced)
    } else {
        String::new()
    }
}

/// The longest `--format reason` line. Slurm keeps any length, but `sinfo -R` and
/// `scontrol show node` are read by people and NHC-style reasons stay short.
pub const REASON_MAX: usize = 200;

/// A finding's message as a short observation: one line, no double quotes, at most `max`
/// characters cut at a word boundary.
fn observation(message: &str, max: usize) -> String {
    let flat: String = message
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('"', "'");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    let at = cut.rfind(' ').unwrap_or(cut.len());
    format!("{}...", cut[..at].trim_end_matches([',', ';', ':']))
}

/// `check --format reason`: one line for a Slurm drain reason or a Node Problem Detector
/// message. A failing node names each failure as `check subject [action] observation`
/// (`gpudoctor: rdma.port-state mlx5_2/1 [reseat] port not usable: state 1: DOWN, ...;
/// pcie.link-width 0000:21:00.0 [reseat] GPU1 link trained x8, capable of x16...`); a node the gate failed says so and
/// names what it counted (`gpudoctor: gate: 3 could not be judged (--fail-on-skip): ...`);
/// otherwise the verdict and the counts. At most `max` characters, then `(+N more)`.
pub fn reason(r: &CheckReport, max: usize) -> String {
    let s = &r.summary;
    let counts = format!(
        "{} pass, {} warn, {} fail, {} skip{}",
        s.pass,
        s.warn,
        s.fail,
        s.skip,
        silenced_count(s)
    );
    // A run its --time-budget cut says so first: part of the node was not judged.
    let cut = match r
        .time_budget
        .as_ref()
        .and_then(|b| Some((b.seconds, b.spent_during.as_deref()?)))
    {
        Some((secs, during)) => {
            let step = during.split(" (").next().unwrap_or(during);
            let n = r
                .checks
                .iter()
                .filter(|f| f.message.starts_with("not judged: time budget of"))
                .count();
            super::terminal::escape(&format!(
                "time budget of {secs} s spent during {step}, {n} not judged; "
            ))
        }
        None => String::new(),
    };
    // Silenced findings are named on every line, so a silenced failure is never read as
    // health: `silenced: rdma.port-state mlx5_3/1 fail`.
    let silenced: Vec<String> = r
        .checks
        .iter()
        .filter(|f| f.silenced.is_some())
        .take(3)
        .map(|f| super::terminal::escape(&format!("{} {} {}", f.id, f.subject, f.status.as_str())))
        .collect();
    let silenced = if silenced.is_empty() {
        String::new()
    } else {
        let more = s.silenced.saturating_sub(silenced.len());
        format!(
            "; silenced: {}{}",
            silenced.join(", "),
            if more > 0 {
                format!(" (+{more} more)")
            } else {
                String::new()
            }
        )
    };
    if r.status != Status::Fail {
        return format!(
            "gpudoctor: {cut}{} ({counts}){silenced}\n",
            r.status.as_str()
        );
    }
    // Escaped before the length cap, so that the cap holds for what is shown.
    let item = |f: &Finding, what: String| {
        super::terminal::escape(&format!("{} {} {}", f.id, f.subject, what))
    };
    let mut head = format!("gpudoctor: {cut}");
    let items: Vec<String> = if s.fail > 0 {
        r.checks
            .iter()
            .filter(|f| f.status == Status::Fail && f.silenced.is_none())
            .map(|f| {
                item(
                    f,
                    format!("[{}] {}", f.action().as_str(), observation(&f.message, 60)),
                )
            })
            .collect()
    } else {
        // The gate decided: what it counted (warnings under --strict, unjudged skips under
        // --fail-on-skip).
        head.push_str(&super::terminal::escape(&format!(
            "gate: {}: ",
            r.gate.reasons.join(", ")
        )));
        r.checks
            .iter()
            .filter(|f| f.silenced.is_none())
            .filter(|f| {
                (r.gate.strict && f.status == Status::Warn)
                    || (r.gate.fail_on_skip && f.skip.is_some_and(|k| k.unjudged()))
            })
            .map(|f| {
                let what = match f.status {
                    Status::Warn => observation(&f.message, 40),
                    _ => f.skip.map_or("", |k| k.as_str()).to_string(),
                };
                item(f, what)
            })
            .collect()
    };
    let mut line = head;
    for (i, it) in items.iter().enumerate() {
        let sep = if i == 0 || line.ends_with(": ") {
            ""
        } else {
            "; "
        };
        let more = items.len() - i;
        // Room for this item, and for the "(+N more)" that would follow a later cut.
        let tail = if more > 1 { 12 } else { 0 };
        if line.len() + sep.len() + it.len() + tail > max && i > 0 {
            line.push_str(&format!(" (+{more} more)"));
            break;
        }
        line.push_str(sep);
        if line.len() + it.len() > max {
            let room = max.saturating_sub(line.len() + 3);
            let cut: String = it.chars().take(room).collect();
            line.push_str(&cut);
            line.push_str("...");
            if more > 1 {
                line.push_str(&format!(" (+{} more)", more - 1));
            }
            break;
        }
        line.push_str(it);
    }
    // Where it fits, what was silenced too (a failing node drains for what is not).
    if !silenced.is_empty() && line.len() + silenced.len() <= max {
        line.push_str(&silenced);
    } else if s.silenced > 0 && line.len() + 14 <= max {
        line.push_str(&format!("; {} silenced", s.silenced));
    }
    line.push('\n');
    line
}
