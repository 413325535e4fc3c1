//! Ranks across nodes from the environment of a launcher that already started the processes:
//! Slurm's `srun`, torchrun (or anything setting its variables), a Kubernetes indexed Job. The
//! flags `--rank`, `--world-size` and `--rendezvous` override whatever the launcher says.
//!
//! Pure: the environment comes in as a lookup function, so every launcher and every malformed
//! value is a unit test. This module must not read the process environment itself, open
//! sockets or guess: a variable that is missing or unreadable is an error naming it.

use serde::{Deserialize, Serialize};

/// gpudoctor's rendezvous port where the launcher names none (Slurm, Kubernetes): next to
/// write-bw's 18516.
pub const DEFAULT_PORT: u16 = 18517;
/// Most processes one run accepts (a bound for every list sized by the world).
pub const MAX_WORLD: u32 = 4096;
/// Most hosts a Slurm hostlist expands to here; longer lists are refused, not truncated.
pub const MAX_HOSTS: usize = 65_536;
/// Longest hostlist text read.
const MAX_HOSTLIST_CHARS: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Launcher {
    Slurm,
    Torchrun,
    K8s,
}

impl Launcher {
    pub fn as_str(self) -> &'static str {
        match self {
            Launcher::Slurm => "slurm",
            Launcher::Torchrun => "torchrun",
            Launcher::K8s => "k8s",
        }
    }
}

/// `--ranks`: which launcher's variables to read (auto: the first whose variables are set,
/// torchrun's before Slurm's, since torchrun under srun sets both and its own are the workers').
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RanksFrom {
    Auto,
    Only(Launcher),
}

/// Flags that override the launcher.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub rank: Option<u32>,
    pub world_size: Option<u32>,
    /// `HOST[:PORT]` as given.
    pub rendezvous: Option<String>,
}

/// This process's place in the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ranks {
    pub launcher: Launcher,
    /// This process among all (0 listens).
    pub rank: u32,
    pub world_size: u32,
    /// This process among those of its node, and how many its node has: more than one means
    /// one process per GPU (it drives the GPU of its local rank), one means it drives every
    /// GPU it sees.
    pub local_rank: u32,
    pub local_world_size: u32,
    /// Where rank 0 listens: host and port.
    pub host: String,
    pub port: u16,
    /// Where each value came from, for the report (`RANK`, `SLURM_PROCID`, `--rank`...).
    pub sources: Vec<String>,
}

impl Ranks {
    pub fn one_per_gpu(&self) -> bool {
        self.local_world_size > 1
    }
}

type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;
/// Rank, world size (None where a flag gives them), local rank and size, rendezvous.
type FromLauncher = (Option<u32>, Option<u32>, u32, u32, Option<(String, u16)>);

fn get(env: Lookup, k: &str) -> Option<String> {
    env(k)
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

fn number(env: Lookup, k: &str) -> Result<Option<u32>, String> {
    match get(env, k) {
        None => Ok(None),
        Some(v) => v
            .parse::<u32>()
            .map(Some)
            .map_err(|_| format!("{k}={v}: not a non-negative integer")),
    }
}

fn need(env: Lookup, k: &str, launcher: Launcher) -> Result<u32, String> {
    number(env, k)?.ok_or_else(|| format!("--ranks {}: {k} is not set", launcher.as_str()))
}

/// `HOST[:PORT]`, `[v6]:PORT`, a bare IPv6 address: host and port (`default` where none).
pub fn host_port(s: &str, default: u16) -> Result<(String, u16), String> {
    let s = s.trim();
    let bad = || format!("'{s}': expected HOST or HOST:PORT");
    if s.is_empty() {
        return Err(bad());
    }
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad)?;
        if h.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad());
        }
        return match after.strip_prefix(':') {
            None if after.is_empty() => Ok((h.to_string(), default)),
            Some(p) => Ok((h.to_string(), port(p).ok_or_else(bad)?)),
            None => Err(bad()),
        };
    }
    if s.parse::<std::net::Ipv6Addr>().is_ok() {
        return Ok((s.to_string(), default));
    }
    let (h, p) = match s.rsplit_once(':') {
        Some((h, p)) => (h, Some(port(p).ok_or_else(bad)?)),
        None => (s, None),
    };
    if h.is_empty()
        || !h
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err(bad());
    }
    Ok((h.to_string(), p.unwrap_or(default)))
}

fn port(p: &str) -> Option<u16> {
    p.parse::<u16>().ok().filter(|p| *p > 0)
}

/// Slurm's compressed hostlist (`gpu[001-004,010],login1`, `rack[1-2]-n[01-02]`) expanded in
/// order, zero padding kept; at most `limit` hosts (more is an error, never a truncation).
pub fn expand_hostlist(list: &str, limit: usize) -> Result<Vec<String>, String> {
    if list.len() > MAX_HOSTLIST_CHARS {
        return Err(format!(
            "hostlist of {} characters: longer than {MAX_HOSTLIST_CHARS}",
            list.len()
        ));
    }
    let mut out = Vec::new();
    for item in split_top(list)? {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let mut hosts = vec![String::new()];
        let mut rest = item;
        while !rest.is_empty() {
            match rest.find('[') {
                None => {
                    for h in &mut hosts {
                        h.push_str(rest);
                    }
                    rest = "";
                }
                Some(i) => {
                    let (lit, after) = rest.split_at(i);
                    let close = after
                        .find(']')
                        .ok_or_else(|| format!("'{item}': '[' without ']'"))?;
                    let ranges = &after[1..close];
                    let values = expand_ranges(ranges, item, limit)?;
                    let mut next = Vec::new();
                    for h in &hosts {
                        for v in &values {
                            if out.len() + next.len() >= limit {
                                return Err(format!("hostlist expands to more than {limit} hosts"));
                            }
                            next.push(format!("{h}{lit}{v}"));
                        }
                    }
                    hosts = next;
                    rest = &after[close + 1..];
                }
            }
        }
        for h in hosts {
            if h.is_empty()
                || !h
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            {
                return Err(format!("'{item}': '{h}' is not a host name"));
            }
            if out.len() >= limit {
                return Err(format!("hostlist expands to more than {limit} hosts"));
            }
            out.push(h);
        }
    }
    if out.is_empty() {
        return Err("empty hostlist".into());
    }
    Ok(out)
}

/// Commas outside brackets separate items.
fn split_top(list: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' => {
                depth += 1;
                if depth > 1 {
                    return Err(format!("'{list}': nested '['"));
                }
            }
            ']' => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!("'{list}': ']' without '['"));
                }
            }
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("'{list}': '[' without ']'"));
    }
    out.push(&list[start..]);
    Ok(out)
}

/// `001-004,010` -> 001 002 003 004 010 (the width of the lower bound kept).
fn expand_ranges(ranges: &str, item: &str, limit: usize) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for r in ranges.split(',') {
        let r = r.trim();
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let digits =
            |s: &str| !s.is_empty() && s.len() <= 18 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(format!("'{item}': range '{r}' is not N or N-M"));
        }
        let (a, b): (u64, u64) = (
            lo.parse().map_err(|_| format!("'{item}': '{lo}'"))?,
            hi.parse().map_err(|_| format!("'{item}': '{hi}'"))?,
        );
        if b < a {
            return Err(format!("'{item}': range '{r}' runs backwards"));
        }
        if (b - a) as usize >= limit.saturating_sub(out.len()) {
            return Err(format!("hostlist expands to more than {limit} hosts"));
        }
        let width = lo.len();
        for v in a..=b {
            out.push(format!("{v:0width$}"));
        }
    }
    Ok(out)
}

/// Slurm's tasks-per-node list (`2(x3),1`): the count of node `node` (SLURM_NODEID).
pub fn tasks_on_node(list: &str, node: u32) -> Result<u32, String> {
    let mut seen: u64 = 0;
    for part in list.split(',') {
        let part = part.trim();
        let (n, times) = match part.split_once("(x") {
            Some((n, t)) => (
                n,
                t.strip_suffix(')')
                    .and_then(|t| t.parse::<u64>().ok())
                    .ok_or_else(|| format!("'{list}': '{part}' is not N or N(xM)"))?,
            ),
            None => (part, 1),
        };
        let n: u32 = n
            .parse()
            .map_err(|_| format!("'{list}': '{part}' is not N or N(xM)"))?;
        seen = seen.saturating_add(times);
        if u64::from(node) < seen {
            return Ok(n);
        }
    }
    Err(format!("'{list}' has no node {node}"))
}

fn detect(env: Lookup) -> Option<Launcher> {
    if get(env, "RANK").is_some() && get(env, "WORLD_SIZE").is_some() {
        Some(Launcher::Torchrun)
    } else if get(env, "SLURM_PROCID").is_some() && get(env, "SLURM_NTASKS").is_some() {
        Some(Launcher::Slurm)
    } else if get(env, "JOB_COMPLETION_INDEX").is_some() {
        Some(Launcher::K8s)
    } else {
        None
    }
}

/// torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, and the rendezvous
/// next to its store (MASTER_ADDR, MASTER_PORT + 1).
fn from_torchrun(
    o: &Overrides,
    env: Lookup,
    sources: &mut Vec<String>,
) -> Result<FromLauncher, String> {
    let port = match number(env, "MASTER_PORT")? {
        // MASTER_PORT itself is torchrun's own store, held by its agent on the first
        // node: gpudoctor listens on the next port.
        Some(p) => Some(
            u16::try_from(p)
                .ok()
                .filter(|p| *p > 0 && *p < u16::MAX)
                .ok_or(format!("MASTER_PORT={p}: not a port below 65535"))?
                + 1,
        ),
        None => None,
    };
    let host = get(env, "MASTER_ADDR");
    let rdv = match (host, port) {
        (Some(h), p) => Some((host_port(&h, DEFAULT_PORT)?.0, p.unwrap_or(DEFAULT_PORT))),
        (None, _) => None,
    };
    sources.push("RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT+1".into());
    Ok((
        match o.rank {
            Some(_) => None,
            None => Some(need(env, "RANK", Launcher::Torchrun)?),
        },
        match o.world_size {
            Some(_) => None,
            None => Some(need(env, "WORLD_SIZE", Launcher::Torchrun)?),
        },
        number(env, "LOCAL_RANK")?.unwrap_or(0),
        number(env, "LOCAL_WORLD_SIZE")?.unwrap_or(1),
        rdv,
    ))
}

/// Slurm's variables: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the tasks on this node, and
/// the rendezvous on the first host of the step's (else the job's) node list.
fn from_slurm(
    o: &Overrides,
    env: Lookup,
    sources: &mut Vec<String>,
) -> Result<FromLauncher, String> {
    let node_list = get(env, "SLURM_STEP_NODELIST")
        .map(|v| ("SLURM_STEP_NODELIST", v))
        .or_else(|| get(env, "SLURM_JOB_NODELIST").map(|v| ("SLURM_JOB_NODELIST", v)));
    let rdv = match node_list {
        Some((k, v)) => {
            let hosts = expand_hostlist(&v, MAX_HOSTS).map_err(|e| format!("{k}: {e}"))?;
            sources.push(format!("first host of {k}"));
            hosts.into_iter().next().map(|h| (h, DEFAULT_PORT))
        }
        None => None,
    };
    let local_world = if let Some(n) = number(env, "SLURM_NTASKS_PER_NODE")? {
        n
    } else {
        let node = number(env, "SLURM_NODEID")?;
        let list = get(env, "SLURM_STEP_TASKS_PER_NODE")
            .map(|v| ("SLURM_STEP_TASKS_PER_NODE", v))
            .or_else(|| get(env, "SLURM_TASKS_PER_NODE").map(|v| ("SLURM_TASKS_PER_NODE", v)));
        match (node, list) {
            (Some(node), Some((k, v))) => {
                tasks_on_node(&v, node).map_err(|e| format!("{k}: {e}"))?
            }
            _ => 1,
        }
    };
    sources.push("SLURM_PROCID SLURM_NTASKS SLURM_LOCALID".into());
    Ok((
        match o.rank {
            Some(_) => None,
            None => Some(need(env, "SLURM_PROCID", Launcher::Slurm)?),
        },
        match o.world_size {
            Some(_) => None,
            None => Some(need(env, "SLURM_NTASKS", Launcher::Slurm)?),
        },
        number(env, "SLURM_LOCALID")?.unwrap_or(0),
        local_world,
        rdv,
    ))
}

/// A Kubernetes indexed Job's JOB_COMPLETION_INDEX: the rank alone.
fn from_k8s(o: &Overrides, env: Lookup, sources: &mut Vec<String>) -> Result<FromLauncher, String> {
    sources.push("JOB_COMPLETION_INDEX".into());
    Ok((
        match o.rank {
            Some(_) => None,
            None => Some(need(env, "JOB_COMPLETION_INDEX", Launcher::K8s)?),
        },
        None,
        0,
        1,
        None,
    ))
}

/// This process's ranks from `env` (the launcher's variables) and the flags.
pub fn resolve(from: RanksFrom, o: &Overrides, env: Lookup) -> Result<Ranks, String> {
    let launcher = match from {
        RanksFrom::Only(l) => l,
        RanksFrom::Auto => detect(env).ok_or(
            "--ranks auto: no launcher's variables found (torchrun's RANK and WORLD_SIZE, Slurm's SLURM_PROCID and SLURM_NTASKS, or a Kubernetes indexed Job's JOB_COMPLETION_INDEX)",
        )?,
    };
    let mut sources = vec![format!("launcher {}", launcher.as_str())];
    let (rank, world, local_rank, local_world, rendezvous): FromLauncher = match launcher {
        Launcher::Torchrun => from_torchrun(o, env, &mut sources)?,
        Launcher::Slurm => from_slurm(o, env, &mut sources)?,
        Launcher::K8s => from_k8s(o, env, &mut sources)?,
    };
    let rank = match o.rank {
        Some(r) => {
            sources.push("--rank".into());
            r
        }
        None => rank.ok_or("no rank")?,
    };
    let world_size = match o.world_size {
        Some(w) => {
            sources.push("--world-size".into());
            w
        }
        None => world.ok_or(format!(
            "--ranks {}: the world size is not in the environment: give --world-size N",
            launcher.as_str()
        ))?,
    };
    let (host, port) = match &o.rendezvous {
        Some(r) => {
            sources.push("--rendezvous".into());
            let default = rendezvous.as_ref().map_or(DEFAULT_PORT, |x| x.1);
            host_port(r, default).map_err(|e| format!("--rendezvous {e}"))?
        }
        None => rendezvous.ok_or(format!(
            "--ranks {}: no rendezvous host in the environment: give --rendezvous HOST[:PORT]",
            launcher.as_str()
        ))?,
    };
    if world_size == 0 || world_size > MAX_WORLD {
        return Err(format!(
            "world size {world_size}: between 1 and {MAX_WORLD}"
        ));
    }
    if rank >= world_size {
        return Err(format!(
            "rank {rank} is not below the world size {world_size}"
        ));
    }
    if local_world == 0 || local_world > world_size || local_rank >= local_world {
        return Err(format!(
            "local rank {local_rank} of {local_world} processes on this node (world {world_size}): inconsistent"
        ));
    }
    Ok(Ranks {
        launcher,
        rank,
        world_size,
        local_rank,
        local_world_size: local_world,
        host,
        port,
        sources,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn from(pairs: &[(&str, &str)], r: RanksFrom, o: &Overrides) -> Result<Ranks, String> {
        let m = env(pairs);
        resolve(r, o, &|k| m.get(k).cloned())
    }

    #[test]
    fn hostlists_expand_in_order_with_padding() {
        assert_eq!(
            expand_hostlist("gpu[001-004,010],login1", 100).unwrap(),
            ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010", "login1"]
        );
        assert_eq!(
            expand_hostlist("rack[1-2]-n[01-02]", 100).unwrap(),
            ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]
        );
        assert_eq!(expand_hostlist("node7", 1).unwrap(), ["node7"]);
        assert_eq!(
            expand_hostlist("a[9-11]", 10).unwrap(),
            ["a9", "a10", "a11"]
        );
    }

    #[test]
    fn malformed_hostlists_are_errors_not_panics() {
        for bad in [
            "",
            ",",
            "gpu[",
            "gpu]",
            "gpu[1-",
            "gpu[2-1]",
            "gpu[a-b]",
            "gpu[[1]]",
            "gpu[1-2",
            "g pu",
            "gpu[-]",
            "gpu[1--2]",
            "x[99999999999999999999]",
            "é[1]",
        ] {
            assert!(expand_hostlist(bad, 100).is_err(), "{bad}");
        }
        // Bounded: a huge range is refused before anything is built.
        let e = expand_hostlist("n[0-999999999999]", MAX_HOSTS).unwrap_err();
        assert!(e.contains("more than"), "{e}");
        assert!(expand_hostlist("n[0-10]", 5).is_err());
        assert!(expand_hostlist(&"a,".repeat(40_000), MAX_HOSTS).is_err());
    }

    #[test]
    fn tasks_per_node_lists() {
        assert_eq!(tasks_on_node("2(x3),1", 0).unwrap(), 2);
        assert_eq!(tasks_on_node("2(x3),1", 2).unwrap(), 2);
        assert_eq!(tasks_on_node("2(x3),1", 3).unwrap(), 1);
        assert!(tasks_on_node("2(x3),1", 4).is_err());
        assert!(tasks_on_node("2(x,1", 0).is_err());
        assert!(tasks_on_node("x", 0).is_err());
    }

    #[test]
    fn host_ports() {
        assert_eq!(host_port("node1", 7).unwrap(), ("node1".into(), 7));
        assert_eq!(host_port("node1:80", 7).unwrap(), ("node1".into(), 80));
        assert_eq!(host_port("10.0.0.1:9", 7).unwrap(), ("10.0.0.1".into(), 9));
        assert_eq!(host_port("[fe80::1]:9", 7).unwrap(), ("fe80::1".into(), 9));
        assert_eq!(host_port("fe80::1", 7).unwrap(), ("fe80::1".into(), 7));
        for bad in [
            "",
            ":80",
            "node:0",
            "node:x",
            "node:70000",
            "[zz]:1",
            "a b",
            "[::1]x",
        ] {
            assert!(host_port(bad, 7).is_err(), "{bad}");
        }
    }

    #[test]
    fn torchrun_variables() {
        let r = from(
            &[
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("LOCAL_WORLD_SIZE", "1"),
                ("MASTER_ADDR", "127.0.0.1"),
                ("MASTER_PORT", "29511"),
                // Slurm's too (torchrun under srun): torchrun's win under auto.
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "1"),
            ],
            RanksFrom::Auto,
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(r.launcher, Launcher::Torchrun);
        assert_eq!((r.rank, r.world_size), (1, 2));
        assert_eq!((r.host.as_str(), r.port), ("127.0.0.1", 29512));
        assert!(!r.one_per_gpu());
        // Malformed values name the variable.
        let e = from(
            &[("RANK", "one"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
            RanksFrom::Only(Launcher::Torchrun),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("RANK=one"), "{e}");
        let e = from(
            &[("RANK", "2"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")],
            RanksFrom::Auto,
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("not below the world size"), "{e}");
        let e = from(
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "65535"),
            ],
            RanksFrom::Auto,
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("MASTER_PORT"), "{e}");
        let e = from(
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "3"),
                ("LOCAL_WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
            ],
            RanksFrom::Auto,
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("inconsistent"), "{e}");
    }

    #[test]
    fn slurm_variables() {
        let r = from(
            &[
                ("SLURM_PROCID", "5"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_NODEID", "2"),
                ("SLURM_STEP_TASKS_PER_NODE", "4,2(x2)"),
                ("SLURM_STEP_NODELIST", "gpu[007-009]"),
                ("SLURM_JOB_NODELIST", "gpu[001-009],login1"),
            ],
            RanksFrom::Only(Launcher::Slurm),
            &Overrides::default(),
        )
        .unwrap();
        assert_eq!(
            (r.rank, r.world_size, r.local_rank, r.local_world_size),
            (5, 8, 1, 2)
        );
        assert_eq!((r.host.as_str(), r.port), ("gpu007", DEFAULT_PORT));
        assert!(r.one_per_gpu());
        let e = from(
            &[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "2"),
                ("SLURM_JOB_NODELIST", "gpu[01-"),
            ],
            RanksFrom::Auto,
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.starts_with("SLURM_JOB_NODELIST:"), "{e}");
        let e = from(
            &[("SLURM_NTASKS", "2")],
            RanksFrom::Only(Launcher::Slurm),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("SLURM_PROCID is not set"), "{e}");
    }

    #[test]
    fn indexed_job_needs_world_and_rendezvous_which_override_everything() {
        let o = Overrides {
            rank: None,
            world_size: Some(4),
            rendezvous: Some("gpudoctor-0.gpudoctor-nccl:7000".into()),
        };
        let r = from(&[("JOB_COMPLETION_INDEX", "3")], RanksFrom::Auto, &o).unwrap();
        assert_eq!(r.launcher, Launcher::K8s);
        assert_eq!((r.rank, r.world_size), (3, 4));
        assert_eq!(
            (r.host.as_str(), r.port),
            ("gpudoctor-0.gpudoctor-nccl", 7000)
        );
        let e = from(
            &[("JOB_COMPLETION_INDEX", "3")],
            RanksFrom::Auto,
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(e.contains("--world-size"), "{e}");
        // Flags override a launcher's values.
        let o = Overrides {
            rank: Some(0),
            world_size: Some(3),
            rendezvous: Some("other".into()),
        };
        let r = from(
            &[
                ("RANK", "1"),
                ("WORLD_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "100"),
            ],
            RanksFrom::Auto,
            &o,
        )
        .unwrap();
        assert_eq!(
            (r.rank, r.world_size, r.host.as_str(), r.port),
            (0, 3, "other", 101)
        );
        assert!(from(&[], RanksFrom::Auto, &Overrides::default()).is_err());
        let o = Overrides { rank: None, ..o };
        let e = from(&[("JOB_COMPLETION_INDEX", "-1")], RanksFrom::Auto, &o).unwrap_err();
        assert!(e.contains("JOB_COMPLETION_INDEX=-1"), "{e}");
    }
}
