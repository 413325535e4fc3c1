//! One self-contained HTML page (`render::html`): the check report with its topology drawn,
//! the topology alone, the fleet summary, or a diff of two nodes.

use super::exporter::Exporter;
use crate::report::fleet::{DiffReport, FleetReport};
use crate::report::{CheckReport, TopoReport};

pub struct Html;

impl Exporter for Html {
    fn check(&self, r: &CheckReport) -> Option<String> {
        Some(crate::render::html::check_page(r))
    }
    fn topo(&self, r: &TopoReport) -> Option<String> {
        Some(crate::render::html::topo_page(r))
    }
    fn fleet(&self, r: &FleetReport) -> Option<String> {
        Some(crate::render::html::fleet_page(r))
    }
    fn diff(&self, r: &DiffReport) -> Option<String> {
        Some(crate::render::html::diff_page(r))
    }
}
