//! `probe nccl`, resolved: sizes checked, where libnccl may be (NCCL_HOME, the Python
//! environments), and the NCCL_* variables present, read here once.

use super::Env;
use crate::cli::NcclArgs;
use crate::nccl::library::Search;
use crate::nccl::live::NcclOptions;
use crate::nccl::report::{Mode, NcclPolicy};
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct NcclConfig {
    pub options: NcclOptions,
    pub json: bool,
    /// A skip (no libnccl, fewer than two GPUs) exits 1.
    pub fail_on_skip: bool,
}

pub(super) fn resolve(a: NcclArgs, env: &Env) -> Result<NcclConfig> {
    if a.min_size > a.max_size {
        bail!(
            "--min-size {} is larger than --max-size {}",
            a.min_size,
            a.max_size
        );
    }
    if a.min_size < 16 {
        bail!("--min-size {}: at least 16 bytes", a.min_size);
    }
    let nonempty = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let mut python_prefixes: Vec<PathBuf> = ["VIRTUAL_ENV", "CONDA_PREFIX"]
        .iter()
        .filter_map(|k| nonempty(k))
        .map(PathBuf::from)
        .collect();
    if let Some(h) = nonempty("HOME") {
        python_prefixes.push(PathBuf::from(h).join(".local"));
    }
    let environment: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("NCCL_"))
        .collect();
    Ok(NcclConfig {
        options: NcclOptions {
            mode: if a.net { Mode::Net } else { Mode::Intra },
            min_bytes: a.min_size,
            max_bytes: a.max_size,
            iters: a.iters,
            warmup: a.warmup,
            samples: a.samples,
            deadline: Duration::from_secs(a.deadline),
            hca: a.hca,
            search: Search {
                nccl_home: nonempty("NCCL_HOME").map(PathBuf::from),
                python_prefixes,
            },
            environment,
            policy: NcclPolicy::default(),
            progress: env.stderr_is_terminal && !a.json,
        },
        json: a.json,
        fail_on_skip: a.gate.fail_on_skip,
    })
}
