//! The human format: tables and indented text, drawn by `render`.

use super::exporter::{ExportOptions, Exporter};
use crate::probes::ProbeReport;
use crate::render::{self, Style, TextStyle};
use crate::report::fleet::{DiffReport, FleetReport};
use crate::report::rdma::gpu_write_bw::GpuWriteBwReport;
use crate::report::rdma::write_bw::WriteBwReport;
use crate::report::{CatalogReport, CheckReport, TopoReport};

pub struct Table(pub ExportOptions);

impl Table {
    fn style(&self) -> Style {
        Style {
            width: self.0.width,
            all_rows: self.0.all_rows,
        }
    }
}

impl Exporter for Table {
    fn check(&self, r: &CheckReport) -> Option<String> {
        Some(render::check_text(
            r,
            &TextStyle {
                width: self.0.width,
                all: self.0.all_rows,
                quiet: self.0.quiet,
                color: self.0.color,
            },
        ))
    }
    fn probe(&self, r: &ProbeReport) -> Option<String> {
        Some(render::probe_table(r, self.style()))
    }
    fn write_bw(&self, runs: &[&WriteBwReport]) -> Option<String> {
        Some(
            runs.iter()
                .map(|r| render::write_bw_table(r, self.style().columns()))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
    fn gpu_write_bw(&self, runs: &[&GpuWriteBwReport]) -> Option<String> {
        Some(
            runs.iter()
                .map(|r| render::gpu_write_bw_table(r, self.style().columns()))
                .collect::<Vec<_>>()
                .join("\n"),
        )
    }
    fn topo(&self, r: &TopoReport) -> Option<String> {
        Some(render::topo_tree(r, self.style()))
    }
    fn catalog(&self, _r: &CatalogReport) -> Option<String> {
        Some(render::catalog_table(self.style()))
    }
    fn fleet(&self, r: &FleetReport) -> Option<String> {
        Some(render::fleet_table(r))
    }
    fn diff(&self, r: &DiffReport) -> Option<String> {
        Some(render::diff_table(r))
    }
}
