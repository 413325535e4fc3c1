//! `probe nccl`, resolved: sizes checked, where libnccl may be (NCCL_HOME, the Python
//! environments), and the NCCL_* variables present, read here once.

use super::Env;
use crate::cli::NcclArgs;
use crate::nccl::cluster::ClusterOptions;
use crate::nccl::launcher::{Launcher, Overrides, RanksFrom};
use crate::nccl::library::Search;
use crate::nccl::live::NcclOptions;
use crate::report::nccl::{Mode, NcclPolicy};
use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct NcclConfig {
    pub options: NcclOptions,
    pub json: bool,
    /// A skip (no libnccl, fewer than two GPUs) exits 1.
    pub fail_on_skip: bool,
    /// `--ranks`: this process is one rank of a run across nodes.
    pub cluster: Option<ClusterOptions>,
}

/// Longest token file read (a token is a few dozen bytes).
const MAX_TOKEN_FILE_BYTES: u64 = 4096;

/// `--ranks` resolved: the launcher's variables read here, the token from --token,
/// --token-file or GPUDOCTOR_TOKEN.
fn cluster_options(a: &NcclArgs, env: &Env) -> Result<Option<ClusterOptions>> {
    let Some(from) = &a.ranks else {
        return Ok(None);
    };
    let from = match from.as_str() {
        "slurm" => RanksFrom::Only(Launcher::Slurm),
        "torchrun" => RanksFrom::Only(Launcher::Torchrun),
        "k8s" => RanksFrom::Only(Launcher::K8s),
        _ => RanksFrom::Auto,
    };
    let overrides = Overrides {
        rank: a.rank,
        world_size: a.world_size,
        rendezvous: a.rendezvous.clone(),
    };
    let ranks = crate::nccl::launcher::resolve(from, &overrides, &|k| {
        std::env::var_os(k).and_then(|v| v.into_string().ok())
    })
    .map_err(|e| anyhow::anyhow!("probe nccl --ranks: {e}"))?;
    let token = match (&a.token, &a.token_file) {
        (Some(t), _) => Some(t.clone()),
        (None, Some(f)) => {
            use std::io::Read;
            let mut s = String::new();
            std::fs::File::open(f)
                .and_then(|h| h.take(MAX_TOKEN_FILE_BYTES).read_to_string(&mut s))
                .with_context(|| format!("--token-file {}", f.display()))?;
            let t = s.trim_end_matches(['\n', '\r']).to_string();
            if t.is_empty() {
                bail!("--token-file {}: empty", f.display());
            }
            Some(t)
        }
        (None, None) => env.token.clone(),
    }
    .filter(|t| !t.is_empty());
    let token = match token {
        Some(t) => t,
        None if ranks.world_size == 1 => String::new(),
        None => bail!(
            "probe nccl --ranks: every process needs the same --token, --token-file or GPUDOCTOR_TOKEN"
        ),
    };
    Ok(Some(ClusterOptions {
        ranks,
        token,
        wait: Duration::from_secs(a.rendezvous_timeout),
    }))
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
    let (search, environment) = search_and_environment();
    let cluster = cluster_options(&a, env)?;
    Ok(NcclConfig {
        options: NcclOptions {
            mode: if cluster.is_some() {
                Mode::Cluster
            } else if a.net {
                Mode::Net
            } else {
                Mode::Intra
            },
            min_bytes: a.min_size,
            max_bytes: a.max_size,
            iters: a.iters,
            warmup: a.warmup,
            samples: a.samples,
            deadline: Duration::from_secs(a.deadline),
            hca: a.hca,
            search,
            environment,
            policy: NcclPolicy::default(),
            progress: env.stderr_is_terminal && !a.json,
        },
        json: a.json,
        fail_on_skip: a.gate.fail_on_skip,
        cluster,
    })
}

/// Where libnccl may be (NCCL_HOME, the Python environments) and the NCCL_* variables present.
fn search_and_environment() -> (Search, BTreeMap<String, String>) {
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
    (
        Search {
            nccl_home: nonempty("NCCL_HOME").map(PathBuf::from),
            python_prefixes,
        },
        environment,
    )
}

/// `check --level 1`'s NCCL run: inside the node, 64 MiB to 1 GiB (the sizes where NCCL's bus
/// bandwidth has settled; judged at 1 GiB as `probe nccl` is), nccl-tests' iterations.
pub fn for_check(deadline: Duration, progress: bool) -> NcclOptions {
    let (search, environment) = search_and_environment();
    NcclOptions {
        mode: Mode::Intra,
        min_bytes: CHECK_MIN_BYTES,
        max_bytes: crate::nccl::live::DEFAULT_MAX_BYTES,
        iters: crate::nccl::live::DEFAULT_ITERS,
        warmup: crate::nccl::live::DEFAULT_WARMUP,
        samples: crate::nccl::live::DEFAULT_SAMPLES,
        deadline,
        hca: None,
        search,
        environment,
        policy: NcclPolicy::default(),
        progress,
    }
}

/// The smallest size `check --level 1` measures NCCL at.
pub const CHECK_MIN_BYTES: u64 = 64 << 20;
