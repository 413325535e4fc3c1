//! `gpudoctor baseline`, resolved.

use super::defaults::probe_defaults;
use super::{Action, Env};
use crate::cli::{BaselineArgs, SourceArgs};
use crate::probes::ProbeKind;

pub(super) fn resolve(b: BaselineArgs, env: &Env) -> (Option<SourceArgs>, Action) {
    (
        Some(b.source),
        Action::Baseline {
            output: b.output,
            level: b.level,
            probe: probe_defaults(env, ProbeKind::H2d),
        },
    )
}
