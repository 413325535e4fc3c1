//! Markdown (for a ticket): the fleet summary.

use super::exporter::Exporter;
use crate::report::fleet::FleetReport;

pub struct Markdown;

impl Exporter for Markdown {
    fn fleet(&self, r: &FleetReport) -> Option<String> {
        Some(crate::render::fleet_markdown(r))
    }
}
