//! How each command prints, resolved from `--json`/`--format`/`--matrix` (one enum per family
//! of outputs; `export::Exporter` turns a format into text).

use crate::cli::{FleetFormat, FormatArg};
use crate::export::Format;
use anyhow::{Result, bail};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopoOutput {
    Tree,
    /// Aligned, within the width.
    Matrix,
    /// nvidia-smi's tab-separated layout.
    MatrixTsv,
    Json,
    /// One self-contained HTML page.
    Html,
}

/// How a report is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Human table.
    Table,
    /// One JSON document.
    Json,
    /// Prometheus text exposition (node_exporter textfile collector).
    Prometheus,
    /// JUnit XML (check only).
    Junit,
    /// One line naming what failed, subject and observation (check only): a Slurm drain
    /// reason, a Node Problem Detector condition message.
    Reason,
    /// One self-contained HTML page (check only).
    Html,
}

impl From<FormatArg> for OutputFormat {
    fn from(f: FormatArg) -> OutputFormat {
        match f {
            FormatArg::Table => OutputFormat::Table,
            FormatArg::Json => OutputFormat::Json,
            FormatArg::Prometheus => OutputFormat::Prometheus,
            FormatArg::Junit => OutputFormat::Junit,
            FormatArg::Reason => OutputFormat::Reason,
            FormatArg::Html => OutputFormat::Html,
        }
    }
}

impl OutputFormat {
    /// `--json` and `--format` resolved (clap has already refused both together).
    pub(super) fn resolve(json: bool, format: Option<FormatArg>) -> OutputFormat {
        match (json, format) {
            (_, Some(f)) => f.into(),
            (true, None) => OutputFormat::Json,
            (false, None) => OutputFormat::Table,
        }
    }
}

impl From<OutputFormat> for Format {
    fn from(f: OutputFormat) -> Format {
        match f {
            OutputFormat::Table => Format::Table,
            OutputFormat::Json => Format::Json,
            OutputFormat::Prometheus => Format::Prometheus,
            OutputFormat::Junit => Format::Junit,
            OutputFormat::Reason => Format::Reason,
            OutputFormat::Html => Format::Html,
        }
    }
}

/// How `fleet` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetOutput {
    Table,
    Json,
    /// Markdown (for a ticket).
    Markdown,
    /// One self-contained HTML page.
    Html,
}

impl FleetOutput {
    /// `--json` and `--format` resolved (clap has already refused both together).
    pub(super) fn resolve(json: bool, format: Option<FleetFormat>) -> FleetOutput {
        match (json, format) {
            (_, Some(FleetFormat::Table)) => FleetOutput::Table,
            (_, Some(FleetFormat::Json)) => FleetOutput::Json,
            (_, Some(FleetFormat::Md)) => FleetOutput::Markdown,
            (_, Some(FleetFormat::Html)) => FleetOutput::Html,
            (true, None) => FleetOutput::Json,
            (false, None) => FleetOutput::Table,
        }
    }
}

impl From<FleetOutput> for Format {
    fn from(f: FleetOutput) -> Format {
        match f {
            FleetOutput::Table => Format::Table,
            FleetOutput::Json => Format::Json,
            FleetOutput::Markdown => Format::Markdown,
            FleetOutput::Html => Format::Html,
        }
    }
}

/// `--json` alone: JSON or the human table (list, diff, gpu-write-bw).
pub fn json_or_table(json: bool) -> Format {
    if json { Format::Json } else { Format::Table }
}

/// A probe's `--json`/`--format`: table, json or prometheus.
pub(super) fn probe_format(json: bool, format: Option<FormatArg>) -> Result<OutputFormat> {
    let f = OutputFormat::resolve(json, format);
    if matches!(
        f,
        OutputFormat::Junit | OutputFormat::Reason | OutputFormat::Html
    ) {
        bail!(
            "--format {} is for `check` (probes print table, json or prometheus)",
            Format::from(f).as_str()
        );
    }
    Ok(f)
}
