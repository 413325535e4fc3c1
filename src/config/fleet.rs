//! `gpudoctor fleet` and `gpudoctor diff`, resolved.

use super::Action;
use super::output::FleetOutput;
use crate::cli::FleetFormat;
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

pub(super) fn resolve_diff(a: PathBuf, b: PathBuf, json: bool, all: bool) -> Action {
    Action::Diff { a, b, json, all }
}
