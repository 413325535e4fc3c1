//! The one-line reason (a Slurm drain reason, a Node Problem Detector message): check only.

use super::exporter::Exporter;
use crate::report::CheckReport;

pub struct Reason;

impl Exporter for Reason {
    fn check(&self, r: &CheckReport) -> Option<String> {
        Some(crate::render::reason(r, crate::render::REASON_MAX))
    }
}
