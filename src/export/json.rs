//! JSON: every report as its serde model; a probe's runs in the one envelope
//! (`gpudoctor.probe-runs/1`) whatever the flags.

use super::exporter::Exporter;
use crate::probes::ProbeReport;
use crate::render::json;
use crate::report::fleet::{DiffReport, FleetReport};
use crate::report::rdma::gpu_write_bw::GpuWriteBwReport;
use crate::report::rdma::write_bw::WriteBwReport;
use crate::report::{CatalogReport, CheckReport, ProbeRuns, TopoReport};

pub struct Json;

impl Exporter for Json {
    fn check(&self, r: &CheckReport) -> Option<String> {
        Some(json(r))
    }
    fn probe(&self, r: &ProbeReport) -> Option<String> {
        Some(json(&ProbeRuns::new([r])))
    }
    fn write_bw(&self, runs: &[&WriteBwReport]) -> Option<String> {
        Some(json(&ProbeRuns::new(runs.iter().copied())))
    }
    fn gpu_write_bw(&self, runs: &[&GpuWriteBwReport]) -> Option<String> {
        Some(json(&ProbeRuns::new(runs.iter().copied())))
    }
    fn topo(&self, r: &TopoReport) -> Option<String> {
        Some(json(r))
    }
    fn catalog(&self, r: &CatalogReport) -> Option<String> {
        Some(json(r))
    }
    fn fleet(&self, r: &FleetReport) -> Option<String> {
        Some(json(r))
    }
    fn diff(&self, r: &DiffReport) -> Option<String> {
        Some(json(r))
    }
}
