//! `gpudoctor check`, resolved: overrides parsed, the baseline read, output and colour chosen.

use super::defaults::probe_defaults;
use super::output::OutputFormat;
use super::{Action, Env};
use crate::checks::Overrides;
use crate::cli::{CheckArgs, ColorChoice, SourceArgs};
use crate::probes::ProbeKind;
use crate::probes::options::ProbeOptions;
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Options for the level-1 probes (defaults of `gpudoctor probe`).
    pub probe: ProbeOptions,
    pub json: bool,
    /// Every passing subject with its evidence (`--all`).
    pub all_rows: bool,
    /// Only the verdict lines (`--quiet`).
    pub quiet: bool,
    /// ANSI colour in the text report.
    pub color: bool,
    pub strict: bool,
    pub level: u8,
    pub overrides: Overrides,
    /// `--expect FILE`: the baseline to compare with, parsed.
    pub expect: Option<crate::checks::baseline::Baseline>,
    pub format: OutputFormat,
    /// Exit 1 when something that should have been judged was not (`--fail-on-skip`).
    pub fail_on_skip: bool,
    /// `--textfile DIR`: where gpudoctor.prom is written, whatever the verdict.
    pub textfile: Option<PathBuf>,
    /// `--all-series`: every finding's state set in Prometheus output.
    pub all_series: bool,
    /// `--report FILE`: the JSON report written there too, whatever the verdict.
    pub report: Option<PathBuf>,
    /// `--time-budget SECONDS`: the whole run's deadline (see `run::budget`).
    pub time_budget: Option<Duration>,
    /// GPUDOCTOR_TEST_SLOW_READ (tests only): a read of this path takes this long.
    pub test_slow_read: Option<(String, Duration)>,
    /// `--report-only` (or GPUDOCTOR_REPORT_ONLY=1): everything reported and written as
    /// always, the verdict's exit code kept in the report (`would_exit`), exit 0. gpudoctor's
    /// own failures still exit 2.
    pub report_only: bool,
}

impl CheckOptions {
    /// A plain level-0 check with no overrides and no environment (what a bundle stores, what
    /// tests run).
    pub fn level0() -> Self {
        CheckOptions {
            probe: ProbeOptions::defaults(ProbeKind::H2d),
            json: true,
            all_rows: false,
            quiet: false,
            color: false,
            strict: false,
            level: 0,
            overrides: Overrides::default(),
            expect: None,
            format: OutputFormat::Json,
            fail_on_skip: false,
            textfile: None,
            all_series: false,
            report: None,
            time_budget: None,
            test_slow_read: None,
            report_only: false,
        }
    }
}

pub(super) fn resolve(c: CheckArgs, env: &Env) -> Result<(Option<SourceArgs>, Action)> {
    let mut overrides = Overrides::parse(&c.warn, &c.deny, &c.skip).map_err(anyhow::Error::msg)?;
    let expect = match &c.expect {
        Some(p) => Some(read_baseline(p)?),
        None => None,
    };
    // The baseline's silences join `--skip ID:SUBJECT`'s, judged against today's date.
    let from_baseline = expect
        .as_ref()
        .map(|b| b.resolved_silences())
        .unwrap_or_default();
    for s in &from_baseline {
        if overrides.skip.contains(&s.id) {
            anyhow::bail!(
                "--skip {} and the baseline's silence of {} on {}: --skip {} already leaves every subject unjudged",
                s.id,
                s.id,
                s.subject,
                s.id
            );
        }
    }
    overrides = overrides.with_silences(from_baseline, env.today.clone());
    let format = OutputFormat::resolve(c.json, c.format);
    Ok((
        Some(c.source),
        Action::Check(Box::new(CheckOptions {
            // Progress is for a person at a terminal: silent for machine output.
            probe: ProbeOptions {
                progress: env.stderr_is_terminal && format == OutputFormat::Table,
                ..probe_defaults(env, ProbeKind::H2d)
            },
            json: format == OutputFormat::Json,
            format,
            all_rows: c.all,
            quiet: c.quiet,
            color: match c.color {
                ColorChoice::Always => true,
                ColorChoice::Never => false,
                ColorChoice::Auto => env.stdout_width.is_some() && !env.no_color,
            },
            strict: c.strict,
            level: c.level,
            overrides,
            fail_on_skip: c.gate.fail_on_skip,
            expect,
            textfile: c.textfile,
            all_series: c.all_series,
            report: c.report,
            time_budget: c.time_budget.map(Duration::from_secs_f64),
            test_slow_read: env.test_slow_read.clone(),
            report_only: c.report_only || env.report_only,
        })),
    ))
}

/// Read and parse a baseline file (a usage error when it is missing or malformed).
fn read_baseline(p: &std::path::Path) -> Result<crate::checks::baseline::Baseline> {
    // A baseline may come from elsewhere: a regular file only, capped, never a blocking open.
    let bytes = crate::bundle::read::read_regular(p, 64 << 20)
        .with_context(|| format!("--expect {}: cannot read", p.display()))?;
    let text =
        String::from_utf8(bytes).with_context(|| format!("--expect {}: not UTF-8", p.display()))?;
    crate::checks::baseline::Baseline::parse(&text)
        .with_context(|| format!("--expect {}", p.display()))
}
