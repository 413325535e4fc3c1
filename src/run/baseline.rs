//! `baseline`: record this node's shape as a gpudoctor.baseline/1 document.

use super::{EXIT_OK, Outcome, inventory};
use crate::config::CheckOptions;
use crate::inventory::Scope;
use crate::probes::options::ProbeOptions;
use crate::source::Source;
use crate::source::SourceSpec;
use anyhow::Result;
use std::path::Path;

pub fn write(
    spec: &SourceSpec,
    output: Option<&Path>,
    level: u8,
    probe: &ProbeOptions,
) -> Result<Outcome> {
    let source = Source::open(spec)?;
    let inv = inventory(&source, Scope::Checks)?;
    let topo = crate::topo::build(&inv);
    // Replayed sources carry their probe samples (when recorded); the live machine measures
    // only when asked (--level 1), since that moves data through every GPU.
    let probes = if !source.is_live() || level >= 1 {
        let opts = CheckOptions {
            probe: probe.clone(),
            level: 1,
            ..CheckOptions::level0()
        };
        super::check::level1_reports(&source, &topo, &opts)?
    } else {
        Vec::new()
    };
    let b = crate::checks::baseline::capture(&inv, &topo, &probes, &source.info.describe());
    let text = crate::render::json(&b);
    match output {
        None => Ok(Outcome::new(text, EXIT_OK)),
        Some(p) => {
            // Replaces only a regular file (never through a symlink, never into a FIFO).
            super::write_atomically("baseline -o", p, &text)?;
            Ok(Outcome::new(
                crate::render::layout::fit(
                    &format!(
                        "wrote {} ({}, {}, {}, {})\n",
                        p.display(),
                        crate::render::layout::count(
                            b.gpus.as_ref().map_or(0, Vec::len),
                            "GPU",
                            "GPUs"
                        ),
                        crate::render::layout::count(
                            b.nics.as_ref().map_or(0, Vec::len),
                            "NIC",
                            "NICs"
                        ),
                        crate::render::layout::count(
                            b.paths.as_ref().map_or(0, Vec::len),
                            "path",
                            "paths"
                        ),
                        crate::render::layout::count(
                            b.bandwidth.as_ref().map_or(0, Vec::len),
                            "bandwidth floor",
                            "bandwidth floors"
                        )
                    ),
                    crate::render::layout::PIPE_WIDTH,
                ),
                EXIT_OK,
            ))
        }
    }
}
