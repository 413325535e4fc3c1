//! The write-bw report (schema `gpudoctor.write-bw/3`), pure data: what was measured, on
//! which ports and memory, and the judge's word. Levels 2-4 share it; `render` and the
//! exporters read it. Nothing here judges, does I/O or prints.

use crate::report::rdma::gdr::GdrFacts;
use crate::report::rdma::memory::MemoryFacts;
use crate::report::rdma::plan::Plan;
use serde::{Deserialize, Serialize};

/// /3: each size keeps its timed repetitions (`samples`) and their n/median/min/max (`stats`);
/// the run carries the judge's `judgement`.
pub const WRITE_BW_SCHEMA: &str = "gpudoctor.write-bw/3";

/// One timed repetition of a message size: `iterations` writes, from the first post to the
/// last completion.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Repetition {
    pub elapsed_ns: u64,
    /// The repetition's average (decimal MB/s): one sample of the size's bandwidth.
    pub mb_per_s: f64,
    /// Best rate over any window of at least `peak_window` consecutive writes, timed between
    /// signalled completions.
    pub peak_mb_per_s: f64,
    pub peak_window: u64,
}

/// n, median, min and max of a size's samples (decimal MB/s; the median also in Gb/s and as
/// a message rate).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeStats {
    pub n: usize,
    pub median_mb_per_s: f64,
    pub min_mb_per_s: f64,
    pub max_mb_per_s: f64,
    pub median_gbps: f64,
    pub median_msg_rate_mpps: f64,
}

/// One message size, measured: every timed repetition, and what they add up to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeResult {
    pub bytes: u64,
    /// Writes per repetition.
    pub iterations: u64,
    /// Every timed repetition, in the order taken (the raw samples).
    pub samples: Vec<Repetition>,
    /// Over the samples' rates; None when there is none. The size is judged on the median.
    pub stats: Option<SizeStats>,
    /// The best windowed rate of any repetition.
    pub peak_mb_per_s: f64,
    /// Some(true/false) when --validate compared the written bytes (after every repetition:
    /// false if any did not match).
    pub validated: Option<bool>,
    pub verdict: Verdict,
}

impl SizeResult {
    pub fn new(
        bytes: u64,
        iterations: u64,
        samples: Vec<Repetition>,
        validated: Option<bool>,
    ) -> SizeResult {
        let rates: Vec<f64> = samples.iter().map(|r| r.mb_per_s).collect();
        let finite: Vec<f64> = rates.iter().copied().filter(|x| x.is_finite()).collect();
        // Level 1's median (mean of the middle two for even n), so both levels say the same.
        let stats = crate::probes::median(&rates).map(|m| SizeStats {
            n: finite.len(),
            median_mb_per_s: m,
            min_mb_per_s: finite.iter().copied().fold(f64::INFINITY, f64::min),
            max_mb_per_s: finite.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median_gbps: m * 8.0 / 1e3,
            median_msg_rate_mpps: if bytes == 0 { 0.0 } else { m / bytes as f64 },
        });
        SizeResult {
            bytes,
            iterations,
            peak_mb_per_s: samples.iter().map(|r| r.peak_mb_per_s).fold(0.0, f64::max),
            samples,
            stats,
            validated,
            verdict: Verdict::Unknown,
        }
    }

    /// The bandwidth this size is judged on: the median over its repetitions, in Gb/s.
    pub fn rate_gbps(&self) -> Option<f64> {
        self.stats.as_ref().map(|s| s.median_gbps)
    }
}

/// Completion timestamps of one size: (ns since the first post, writes completed so far).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    pub marks: Vec<(u64, u64)>,
}

/// The rule a run is judged by, and where it comes from. The verdict is the judge's
/// (`judge_run`, over `crate::findings::judge`); this only says what the bar is.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Threshold {
    /// Bandwidth of messages >= min_bytes must reach `gbps`.
    LineRate {
        fraction: f64,
        gbps: f64,
        min_bytes: u64,
        source: String,
    },
    /// No bar could be set (the port's line rate is unknown, or its sources disagree): the run
    /// is measured and reported, and can never pass.
    Unknown { reason: String },
    /// No bar on purpose (a software device, a path NCCL would not use): measured, not judged.
    NotApplicable { reason: String },
    /// Level 4: the bar is delivery (every write of every size completed and its bytes
    /// arrived), not bandwidth: GPU-initiated posting of small messages is not line-rate bound.
    Delivery { reason: String },
}

/// The reason a software device is not judged (levels 2 and 3 alike).
pub const SOFTWARE_NOT_JUDGED: &str = "software RDMA: measured, not judged";

/// The judge's word on a run, with its reason.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judged {
    pub status: crate::findings::Judgement,
    pub reason: String,
}

/// What a server checked of its client's writes (two-node mode): facts, judged by `judge_run`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Served {
    pub peer: String,
    pub sizes: u32,
    pub validated: u32,
    /// "65536 B (first difference at offset 12)".
    pub mismatched: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Two QPs on one device connected to each other.
    Loopback,
    /// This host writes into a `--serve` peer.
    Client,
    /// This host is written into by a `--peer` client.
    Server,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PortFacts {
    pub device: String,
    pub port: u8,
    pub state: String,
    pub link_layer: String,
    pub mtu_bytes: u32,
    pub addressing: Addressing,
    /// Some(driver) for software devices (no PCI function behind them).
    pub software_device: Option<String>,
    /// The line rate verbs and sysfs agree on; None: see `line_rate_unknown`.
    pub line_rate: Option<LineRate>,
    /// Why the line rate is unknown (unreadable, undefined, or verbs and sysfs disagree).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line_rate_unknown: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Status {
    /// Measured; see verdicts.
    Ok,
    /// Measured, and the judge failed it (a size below its threshold, or data that did not
    /// match): set by `WriteBwReport::conclude`, never by the engine.
    Failed { reason: String },
    /// The probe could not run on this machine (no libibverbs, no device, port down...).
    Skipped { reason: String },
    /// The probe started and the machine made it fail (completion error, peer gone...).
    Error { reason: String },
}

#[derive(Debug, Clone, Serialize)]
pub struct WriteBwReport {
    pub schema: &'static str,
    pub gpudoctor_version: &'static str,
    /// The source revision the binary was built from (`--version`'s; see build.rs).
    pub gpudoctor_revision: &'static str,
    pub mode: Mode,
    pub units: &'static str,
    pub plan: Plan,
    pub local: Option<PortFacts>,
    /// In two-node mode: what the peer reported about its port.
    pub remote: Option<PortFacts>,
    pub threshold: Option<Threshold>,
    pub results: Vec<SizeResult>,
    /// Plain statements about the run (e.g. what a server served).
    pub notes: Vec<String>,
    pub status: Status,
    /// The judge's verdict on the run (`judge_run`); None until judged.
    pub judgement: Option<Judged>,
    /// Server mode: what this side checked of the client's writes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served: Option<Served>,
    /// Where the buffers were (host or GPU memory, how registered); absent in reports made
    /// before level 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySides>,
    /// Level 3 (`--gpu`/`--gdr`): the GPU, its NIC and path, the registration choice, GPU
    /// memory before and after, and the cause of a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gdr: Option<GdrFacts>,
}

/// Each side's buffer, as set up (None: not on this host, in two-node mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemorySides {
    pub source: Option<MemoryFacts>,
    pub target: Option<MemoryFacts>,
}

pub const UNITS: &str = "bandwidth in decimal MB/s (10^6 bytes/s) and Gb/s (10^9 bits/s); message rate in Mpps (10^6 messages/s)";

/// How the probe routes to the remote QP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Addressing {
    /// InfiniBand link layer, no GID: LID routing.
    Lid { lid: u16 },
    /// A GRH with this source GID (always on Ethernet / RoCE).
    Gid {
        index: u32,
        gid: String,
        gid_type: Option<String>,
        /// Why this entry (auto choice) or "given with --gid-index".
        why: String,
    },
}

/// The data rate a port should carry, from ibv_port_attr's speed and width codes, agreed by
/// sysfs `ports/N/rate` (`port_line_rate`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LineRate {
    pub gbps: f64,
    /// e.g. "4X HDR: 4 lanes x 50 Gb/s data rate (53.125 Gb/s signalling, 64b/66b)".
    pub source: String,
}

/// A message size's verdict (`size_verdicts`, by the one judge): pass, fail, unknown (a small
/// message, an unknown line rate, data not validated) or skip (a software device: measured,
/// not judged). The project's one vocabulary (`crate::findings`).
pub use crate::findings::Verdict;

impl WriteBwReport {
    pub fn new(mode: Mode, plan: Plan) -> Self {
        WriteBwReport {
            schema: WRITE_BW_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            gpudoctor_revision: crate::REVISION,
            mode,
            units: UNITS,
            plan,
            local: None,
            remote: None,
            threshold: None,
            results: Vec::new(),
            notes: Vec::new(),
            status: Status::Ok,
            judgement: None,
            served: None,
            memory: None,
            gdr: None,
        }
    }
}
