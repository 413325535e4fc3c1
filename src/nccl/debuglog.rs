//! NCCL's debug output (`NCCL_DEBUG=INFO`) read back: which transport each channel of each
//! GPU pair took, the network NCCL chose, the variables it says it read, its warnings.
//!
//! Pure text in, values out; never panics on arbitrary bytes. Formats as NCCL 2.28.9 prints
//! them (fixtures/nccl-2.28.9/):
//!
//! ```text
//! vm:1375:1394 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer
//! vm:1396:1414 [1] NCCL INFO Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0
//! ... NCCL INFO Channel 00/0 : 0[0] -> 1[1] via NET/IB/0/GDRDMA
//! ... NCCL INFO Using network Socket
//! ... NCCL INFO ncclCommInitRankConfig comm 0x.. rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 60 commId 0x.. - Init START
//! ... NCCL INFO NCCL_P2P_DISABLE set by environment to 1
//! ```

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The family of a transport, the first word after `via`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TransportKind {
    /// Direct GPU-to-GPU (NVLink or PCIe peer access): P2P/direct pointer, P2P/CUMEM, P2P/IPC.
    P2p,
    /// Through host shared memory.
    Shm,
    /// Through a network plugin (IB, Socket), also between GPUs of one node.
    Net,
    /// NVLink SHARP / CollNet and anything newer.
    Other(String),
}

/// One `Channel NN/N : a[da] -> b[db] via ...` line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelLine {
    pub channel: u32,
    pub from_rank: u32,
    pub from_dev: u32,
    pub to_rank: u32,
    pub to_dev: u32,
    /// `send`/`receive` for network connections (NET lines name the side), else None.
    pub side: Option<String>,
    /// Verbatim after `via `: `P2P/direct pointer`, `NET/IB/0/GDRDMA`.
    pub via: String,
    pub kind: TransportKind,
    /// NET: the plugin's network (`IB`, `Socket`).
    pub net: Option<String>,
    /// NET: GPUDirect RDMA in use on this connection (`/GDRDMA`).
    pub gdr: bool,
}

/// A rank as its `Init START`/`Init COMPLETE` line describes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankLine {
    pub rank: u32,
    pub nranks: u32,
    pub cuda_dev: u32,
    /// NCCL's busId, hex as printed (`60` is 0000:00:06.0, `1b000` is 0000:1b:00.0).
    pub bus_id: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DebugLog {
    /// `NCCL version 2.28.9+cuda13.0`.
    pub version: Option<String>,
    /// `Using network X`, each distinct X.
    pub networks: BTreeSet<String>,
    /// Socket transport: the interfaces `NET/Socket : Using [0]eth0:...` names.
    pub socket_interfaces: BTreeSet<String>,
    /// IB/RoCE transport: the devices `NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE` names,
    /// by the index that `via NET/IB/<index>` refers to (`mlx5_0:1`).
    #[serde(default)]
    pub ib_devices: BTreeMap<u32, String>,
    pub ranks: BTreeMap<u32, RankLine>,
    pub channels: Vec<ChannelLine>,
    /// `NCCL_X set by environment to Y`.
    pub env: BTreeMap<String, String>,
    /// `NCCL WARN ...` lines, the message only.
    pub warnings: Vec<String>,
}

/// Parse the text of one or more debug files (lines of other processes are fine: ranks and
/// channels are keyed by rank).
pub fn parse(text: &str) -> DebugLog {
    let mut log = DebugLog::default();
    let mut seen_channels = BTreeSet::new();
    for line in text.lines() {
        if let Some((_, w)) = line.split_once(" NCCL WARN ") {
            log.warnings.push(w.trim().to_string());
            continue;
        }
        let Some((_, msg)) = line.split_once(" NCCL INFO ") else {
            continue;
        };
        let msg = msg.trim();
        if let Some(v) = msg.strip_prefix("NCCL version ") {
            log.version.get_or_insert_with(|| v.trim().to_string());
        } else if let Some(n) = msg.strip_prefix("Using network ") {
            log.networks.insert(n.trim().to_string());
        } else if let Some(rest) = msg.strip_prefix("NET/Socket : Using ") {
            for tok in rest.split_whitespace() {
                // [0]eth0:192.0.2.2<0>
                if let Some((_, after)) = tok.split_once(']')
                    && let Some((ifname, _)) = after.split_once(':')
                    && !ifname.is_empty()
                {
                    log.socket_interfaces.insert(ifname.to_string());
                }
            }
        } else if let Some(rest) = msg.strip_prefix("NET/IB : Using ") {
            for tok in rest.split_whitespace() {
                // [1]mlx5_1:1/RoCE
                if let Some(t) = tok.strip_prefix('[')
                    && let Some((i, dev)) = t.split_once(']')
                    && let Ok(i) = i.parse::<u32>()
                {
                    let dev = dev.split('/').next().unwrap_or("");
                    if !dev.is_empty() {
                        log.ib_devices.insert(i, dev.to_string());
                    }
                }
            }
        } else if msg.starts_with("Channel ") {
            if let Some(c) = channel_line(msg)
                && seen_channels.insert((
                    c.channel,
                    c.from_rank,
                    c.to_rank,
                    c.side.clone(),
                    c.via.clone(),
                ))
            {
                log.channels.push(c);
            }
        } else if msg.contains(" Init START") || msg.contains(" Init COMPLETE") {
            if let Some(r) = rank_line(msg) {
                log.ranks.insert(r.rank, r);
            }
        } else if let Some((name, value)) = msg.split_once(" set by environment to ")
            && name.starts_with("NCCL_")
            && !name.contains(' ')
        {
            log.env.insert(
                name.to_string(),
                value.trim().trim_end_matches('.').to_string(),
            );
        }
    }
    log.channels.sort_by(|a, b| {
        (a.from_rank, a.to_rank, a.channel, &a.side).cmp(&(
            b.from_rank,
            b.to_rank,
            b.channel,
            &b.side,
        ))
    });
    log
}

/// `a[da]` -> (a, da).
fn rank_dev(s: &str) -> Option<(u32, u32)> {
    let (r, d) = s.trim().split_once('[')?;
    let d = d.strip_suffix(']')?;
    Some((r.parse().ok()?, d.parse().ok()?))
}

fn channel_line(msg: &str) -> Option<ChannelLine> {
    // Channel 00/0 : 0[0] -> 1[1] [receive] via NET/Socket/0
    let rest = msg.strip_prefix("Channel ")?;
    let (chan, rest) = rest.split_once(" : ")?;
    let channel: u32 = chan.split('/').next()?.trim().parse().ok()?;
    let (pair, via) = rest.split_once(" via ")?;
    let (from, to) = pair.split_once(" -> ")?;
    let (to, side) = match to.trim().split_once(' ') {
        Some((t, s)) => (
            t,
            Some(
                s.trim()
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            ),
        ),
        None => (to, None),
    };
    let (from_rank, from_dev) = rank_dev(from)?;
    let (to_rank, to_dev) = rank_dev(to)?;
    let via = via.trim().to_string();
    let mut parts = via.split('/');
    let family = parts.next().unwrap_or("");
    let kind = match family {
        "P2P" => TransportKind::P2p,
        "SHM" => TransportKind::Shm,
        "NET" => TransportKind::Net,
        other => TransportKind::Other(other.to_string()),
    };
    let net = (kind == TransportKind::Net)
        .then(|| parts.next().map(str::to_string))
        .flatten();
    let gdr = kind == TransportKind::Net && via.split('/').any(|p| p == "GDRDMA");
    Some(ChannelLine {
        channel,
        from_rank,
        from_dev,
        to_rank,
        to_dev,
        side,
        via,
        kind,
        net,
        gdr,
    })
}

fn rank_line(msg: &str) -> Option<RankLine> {
    let words: Vec<&str> = msg.split_whitespace().collect();
    let after = |key: &str| {
        words
            .iter()
            .position(|w| *w == key)
            .and_then(|i| words.get(i + 1))
            .copied()
    };
    Some(RankLine {
        rank: after("rank")?.parse().ok()?,
        nranks: after("nranks")?.parse().ok()?,
        cuda_dev: after("cudaDev")?.parse().ok()?,
        bus_id: after("busId")?.to_string(),
    })
}

/// NCCL's busId for a sysfs BDF: the address's hex digits as one number (0000:00:06.0 -> 60,
/// 0000:1b:00.0 -> 1b000), as NCCL prints it.
pub fn bus_id_of(bdf: &str) -> Option<String> {
    let digits: String = bdf.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    let v = u64::from_str_radix(&digits, 16).ok()?;
    Some(format!("{v:x}"))
}

/// One direction between two ranks: the transports its channels took, with channel counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairTransports {
    pub from_rank: u32,
    pub to_rank: u32,
    /// `via` text -> number of channels (a connection's send and receive halves count once).
    pub via: BTreeMap<String, u32>,
}

impl PairTransports {
    pub fn kinds(&self) -> BTreeSet<String> {
        self.via
            .keys()
            .map(|v| v.split('/').next().unwrap_or("").to_string())
            .collect()
    }
}

/// The channels grouped per ordered rank pair.
pub fn pairs(log: &DebugLog) -> Vec<PairTransports> {
    let mut m: BTreeMap<(u32, u32), BTreeMap<String, BTreeSet<u32>>> = BTreeMap::new();
    for c in &log.channels {
        m.entry((c.from_rank, c.to_rank))
            .or_default()
            .entry(c.via.clone())
            .or_default()
            .insert(c.channel);
    }
    m.into_iter()
        .map(|((from_rank, to_rank), via)| PairTransports {
            from_rank,
            to_rank,
            via: via.into_iter().map(|(k, v)| (k, v.len() as u32)).collect(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/nccl-2.28.9")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// 2x H200 over NV18, one process: every channel both ways via P2P/direct pointer.
    #[test]
    fn p2p_log_of_two_h200s() {
        let log = parse(&fixture("h200x2/p2p.vm.1375.log"));
        assert_eq!(log.version.as_deref(), Some("2.28.9+cuda13.0"));
        assert_eq!(log.networks, BTreeSet::from(["Socket".to_string()]));
        assert_eq!(log.ranks.len(), 2);
        assert_eq!(log.ranks[&0].bus_id, "60");
        assert_eq!(log.ranks[&1].bus_id, "70");
        assert_eq!(bus_id_of("0000:00:06.0").as_deref(), Some("60"));
        assert_eq!(bus_id_of("0000:1b:00.0").as_deref(), Some("1b000"));
        let p = pairs(&log);
        assert_eq!(p.len(), 2, "{p:?}");
        for pt in &p {
            assert_eq!(pt.kinds(), BTreeSet::from(["P2P".to_string()]));
            assert_eq!(pt.via.len(), 1);
            assert!(pt.via["P2P/direct pointer"] >= 16, "{pt:?}");
        }
        assert!(
            log.channels
                .iter()
                .all(|c| c.kind == TransportKind::P2p && !c.gdr)
        );
        assert_eq!(
            log.env.get("NCCL_NVLS_ENABLE").map(String::as_str),
            Some("0")
        );
    }

    /// P2P and SHM disabled: NET/Socket between the two GPUs, with both sides' lines.
    #[test]
    fn net_log_uses_the_socket_transport() {
        let log = parse(&fixture("h200x2/net.vm.1396.log"));
        assert_eq!(log.networks, BTreeSet::from(["Socket".to_string()]));
        assert_eq!(log.socket_interfaces, BTreeSet::from(["eth0".to_string()]));
        assert_eq!(
            log.env.get("NCCL_P2P_DISABLE").map(String::as_str),
            Some("1")
        );
        assert_eq!(
            log.env.get("NCCL_SHM_DISABLE").map(String::as_str),
            Some("1")
        );
        let c = &log.channels[0];
        assert_eq!(c.kind, TransportKind::Net);
        assert_eq!(c.net.as_deref(), Some("Socket"));
        assert!(!c.gdr);
        assert!(
            log.channels
                .iter()
                .any(|c| c.side.as_deref() == Some("receive"))
        );
        for pt in pairs(&log) {
            assert_eq!(pt.kinds(), BTreeSet::from(["NET".to_string()]));
            assert_eq!(pt.via["NET/Socket/0"], 2, "{pt:?}");
        }
    }

    /// 4x H200 behind NVSwitches: a ring 0->1->2->3->0 (and back), all P2P.
    #[test]
    fn four_gpu_ring() {
        for f in [
            "h200x4/ar-none.log",
            "h200x4/ar-gd.log",
            "h200x2/ag.vm.1423.log",
        ] {
            let log = parse(&fixture(f));
            assert!(!log.channels.is_empty(), "{f}");
            assert!(
                log.channels.iter().all(|c| c.kind == TransportKind::P2p),
                "{f}"
            );
        }
        let log = parse(&fixture("h200x4/ar-none.log"));
        assert_eq!(log.ranks.len(), 4);
        let p = pairs(&log);
        assert!(p.iter().any(|x| (x.from_rank, x.to_rank) == (3, 0)));
    }

    #[test]
    fn other_transports_and_gdr() {
        let t = "h:1:2 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via NET/IB/0/GDRDMA\n\
                 h:1:2 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via SHM/direct/direct\n\
                 h:1:2 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n\
                 h:1:2 [0] NCCL WARN NET/IB : Got async event : port error\n";
        let log = parse(t);
        assert_eq!(log.channels.len(), 3);
        assert!(log.channels[0].gdr && log.channels[0].net.as_deref() == Some("IB"));
        assert_eq!(log.channels[1].kind, TransportKind::Shm);
        assert_eq!(log.channels[2].kind, TransportKind::P2p);
        assert_eq!(log.warnings.len(), 1);
        let log = parse(
            "h:1:2 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>\n",
        );
        assert_eq!(log.ib_devices.get(&0).map(String::as_str), Some("mlx5_0:1"));
        assert_eq!(log.ib_devices.get(&1).map(String::as_str), Some("mlx5_1:1"));
        assert_eq!(log.ib_devices.len(), 2);
    }

    #[test]
    fn garbage_never_panics() {
        for t in [
            "NCCL INFO Channel",
            " NCCL INFO Channel : -> via",
            " NCCL INFO Channel 0x/0 : a[b] -> c[d] via ",
            " NCCL INFO Channel 00/0 : 0[0 -> 1[1] via P2P",
            " NCCL INFO rank nranks Init START",
            "\u{0}\u{ff} NCCL INFO  set by environment to ",
        ] {
            let _ = parse(t);
        }
    }
}
