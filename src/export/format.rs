//! The one place that chooses how a report is printed: each output format (table, JSON,
//! Prometheus, JUnit, Markdown, the one-line reason) implements `Exporter` for the reports it
//! can print, and `export` picks the format's exporter. Commands never match on a format
//! themselves.

use super::exporter::{ExportOptions, Exporter, Format};

/// The exporter of `format`.
pub fn exporter(format: Format, opts: ExportOptions) -> Box<dyn Exporter> {
    match format {
        Format::Table => Box::new(super::table::Table(opts)),
        Format::Json => Box::new(super::json::Json),
        Format::Prometheus => Box::new(super::prometheus::Prometheus {
            all_series: opts.all_series,
        }),
        Format::Junit => Box::new(super::junit::Junit),
        Format::Markdown => Box::new(super::markdown::Markdown),
        Format::Reason => Box::new(super::reason::Reason),
        Format::Html => Box::new(super::html::Html),
    }
}

/// A format this report has no exporter for (a bug: `config` refuses these).
#[derive(Debug, thiserror::Error)]
#[error("--format {format} does not print {what}")]
pub struct Unsupported {
    pub format: &'static str,
    pub what: &'static str,
}

/// Print with `format`: `what` names the report for the error, `print` calls the exporter's
/// method for it (`|e| e.check(&r)`).
pub fn export(
    format: Format,
    opts: ExportOptions,
    what: &'static str,
    print: impl FnOnce(&dyn Exporter) -> Option<String>,
) -> Result<String, Unsupported> {
    print(exporter(format, opts).as_ref()).ok_or(Unsupported {
        format: format.as_str(),
        what,
    })
}
