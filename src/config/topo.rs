//! `gpudoctor topo`, resolved.

use super::Action;
use super::output::TopoOutput;
use crate::cli::{SourceArgs, TopoArgs, TopoFormat};

pub(super) fn resolve(t: TopoArgs) -> (Option<SourceArgs>, Action) {
    // clap refuses --format with --json or --matrix.
    let out = if t.json || t.format == Some(TopoFormat::Json) {
        TopoOutput::Json
    } else if t.format == Some(TopoFormat::Html) {
        TopoOutput::Html
    } else if t.tsv {
        TopoOutput::MatrixTsv
    } else if t.matrix {
        TopoOutput::Matrix
    } else {
        TopoOutput::Tree
    };
    (Some(t.source), Action::Topo(out))
}
