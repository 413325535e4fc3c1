//! `gpudoctor fleet` and `gpudoctor diff`, resolved.

use super::Action;
use super::output::FleetOutput;
use crate::cli::{DiffFormat, FleetFormat};
use crate::export::Format;
use anyhow::{Result, bail};
use std::path::PathBuf;

pub(super) fn resolve(
    inputs: Vec<PathBuf>,
    json: bool,
    format: Option<FleetFormat>,
    min_deviation: f64,
    expect: Vec<PathBuf>,
) -> Result<Action> {
    if !(0.0..100.0).contains(&min_deviation) {
        bail!("--min-deviation is a percentage from 0 to below 100, not {min_deviation}");
    }
    Ok(Action::Fleet {
        inputs,
        format: FleetOutput::resolve(json, format),
        min_deviation: min_deviation / 100.0,
        expect,
    })
}

/// `--json` and `--format` resolved (clap has already refused both together).
pub(super) fn resolve_diff(
    a: PathBuf,
    b: PathBuf,
    json: bool,
    format: Option<DiffFormat>,
    all: bool,
) -> Action {
    let format = match (json, format) {
        (_, Some(DiffFormat::Table)) => Format::Table,
        (_, Some(DiffFormat::Json)) => Format::Json,
        (_, Some(DiffFormat::Html)) => Format::Html,
        (true, None) => Format::Json,
        (false, None) => Format::Table,
    };
    Action::Diff { a, b, format, all }
}
