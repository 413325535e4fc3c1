//! Defaults shared by several commands, in one place: the level-1 probe options as `probe`,
//! `check --level 1` and `baseline --level 1` start from them (the numbers themselves are in
//! `probes::options`, which the clap definitions show as defaults too).

use super::Env;
use crate::probes::ProbeKind;
use crate::probes::options::ProbeOptions;

/// The options of probe `kind` on this environment: NVRTC's search path from CUDA_HOME /
/// CUDA_PATH, progress on stderr when it is a terminal.
pub fn probe_defaults(env: &Env, kind: ProbeKind) -> ProbeOptions {
    ProbeOptions {
        cuda_homes: env.cuda_homes.clone(),
        progress: env.stderr_is_terminal,
        ..ProbeOptions::defaults(kind)
    }
}
