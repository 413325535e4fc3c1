//! `gpudoctor topo`, resolved.

use super::Action;
use super::output::TopoOutput;
use crate::cli::{SourceArgs, TopoArgs};

pub(super) fn resolve(t: TopoArgs) -> (Option<SourceArgs>, Action) {
    let out = if t.json {
        TopoOutput::Json
    } else if t.tsv {
        TopoOutput::MatrixTsv
    } else if t.matrix {
        TopoOutput::Matrix
    } else {
        TopoOutput::Tree
    };
    (Some(t.source), Action::Topo(out))
}
