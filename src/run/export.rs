//! `export nccl-topo`: the topology in the format of another tool.

use super::{EXIT_OK, Outcome, inventory};
use crate::inventory::Scope;
use crate::source::{Source, SourceSpec};
use anyhow::Result;
use std::path::Path;

pub fn nccl_topo(spec: &SourceSpec, output: Option<&Path>) -> Result<Outcome> {
    let source = Source::open(spec)?;
    let inv = inventory(&source, Scope::Checks)?;
    let topo = crate::topo::build(&inv);
    let text = crate::export::nccl::topo_xml(&inv, &topo);
    match output {
        None => Ok(Outcome::new(text, EXIT_OK)),
        Some(p) => {
            // Replaces only a regular file (never through a symlink, never into a FIFO).
            super::write_atomically("export nccl-topo -o", p, &text)?;
            Ok(Outcome::new(
                format!(
                    "wrote {} ({}, {})\n",
                    p.display(),
                    crate::render::layout::count(topo.gpus.len(), "GPU", "GPUs"),
                    crate::render::layout::count(topo.nics.len(), "NIC", "NICs")
                ),
                EXIT_OK,
            ))
        }
    }
}
