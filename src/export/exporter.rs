//! The output formats and the trait each implements (`Exporter`) for the reports it can print.
//! A leaf of `export`: the formats' files import it, `format` chooses among them.
//!
//! Pure: reports in, text out; nothing here reads, judges or prints.

use crate::probes::ProbeReport;
use crate::report::fleet::{DiffReport, FleetReport};
use crate::report::rdma::gpu_write_bw::GpuWriteBwReport;
use crate::report::rdma::write_bw::WriteBwReport;
use crate::report::{CatalogReport, CheckReport, TopoReport};

/// An output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Human text: tables and indented blocks.
    Table,
    /// One JSON document (probes: the `gpudoctor.probe-runs/1` envelope).
    Json,
    /// Prometheus text exposition (node_exporter textfile collector).
    Prometheus,
    /// JUnit XML (CI test reports).
    Junit,
    /// Markdown (a ticket).
    Markdown,
    /// One line naming what failed (a Slurm drain reason).
    Reason,
    /// One self-contained HTML page (inline SVG and CSS, nothing fetched).
    Html,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Table => "table",
            Format::Json => "json",
            Format::Prometheus => "prometheus",
            Format::Junit => "junit",
            Format::Markdown => "md",
            Format::Reason => "reason",
            Format::Html => "html",
        }
    }
}

/// What the text formats need besides the report (the others ignore it).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExportOptions {
    /// Width for human output; None in a pipe (stable output).
    pub width: Option<u16>,
    /// Every passing subject with its evidence (`check --all`).
    pub all_rows: bool,
    /// Only the verdict lines (`check --quiet`).
    pub quiet: bool,
    /// ANSI colour in the check text.
    pub color: bool,
    /// Prometheus: every finding's state set (`--all-series`).
    pub all_series: bool,
}

/// A format, for each report it can print. A report a format does not print is None (the
/// default): `config` refuses those combinations before anything runs, so `export` turns one
/// that slips through into an error rather than another format's text.
pub trait Exporter {
    fn check(&self, _r: &CheckReport) -> Option<String> {
        None
    }
    /// A CUDA probe (h2d, d2h, p2p, dmabuf-export): one run.
    fn probe(&self, _r: &ProbeReport) -> Option<String> {
        None
    }
    /// `probe write-bw`: one run, or one per GPU (`--gpu auto`).
    fn write_bw(&self, _runs: &[&WriteBwReport]) -> Option<String> {
        None
    }
    /// `probe gpu-write-bw`: one run per GPU.
    fn gpu_write_bw(&self, _runs: &[&GpuWriteBwReport]) -> Option<String> {
        None
    }
    fn topo(&self, _r: &TopoReport) -> Option<String> {
        None
    }
    fn catalog(&self, _r: &CatalogReport) -> Option<String> {
        None
    }
    fn fleet(&self, _r: &FleetReport) -> Option<String> {
        None
    }
    fn diff(&self, _r: &DiffReport) -> Option<String> {
        None
    }
}
