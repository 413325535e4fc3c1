//! The write-bw probe's plan, result model and evaluation: what to measure, what was measured,
//! and whether it passes. Pure: the verbs side is in `engine`, the TCP side in `oob`, the
//! table in `render`. Nothing here does I/O.

use super::path::{Addressing, LineRate};
use serde::{Deserialize, Serialize};

pub const WRITE_BW_SCHEMA: &str = "gpudoctor.write-bw/2";

/// perftest's default sweep for `-a`: 2 B to 8 MiB.
pub const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;
pub const DEFAULT_SIZES: [u64; 4] = [64, 4096, 65536, 1_048_576];
/// Messages at least this large must reach the line-rate threshold (small messages are
/// message-rate bound, not bandwidth bound).
pub const LARGE_MESSAGE_BYTES: u64 = 65536;
/// Pass at >= 90% of the port's data rate, the margin AzNHC and SuperBench use for
/// ib_write_bw loopback on healthy HCAs.
pub const LINE_RATE_FRACTION: f64 = 0.90;
/// Largest message: 1 GiB is far past any useful sweep and bounds the registered buffers.
pub const MAX_MESSAGE_BYTES: u64 = 1 << 30;

/// What to run, resolved from the arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub sizes: Vec<u64>,
    pub iterations: u32,
    pub tx_depth: u32,
    /// A signalled completion every this many writes.
    pub cq_moderation: u32,
    /// Writes chained into one ibv_post_send call, at most; None: `auto_post_list` per size.
    pub post_list: Option<u32>,
    pub qps: u32,
    pub validate: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("--iters must be at least 1")]
    NoIterations,
    #[error("--tx-depth must be between 1 and 8192")]
    TxDepth,
    #[error("--qps must be between 1 and 64")]
    Qps,
    #[error("message size {0} is out of range (1 B to 1 GiB)")]
    Size(u64),
    #[error("--iters {iters} is not a multiple of --qps {qps}")]
    ItersPerQp { iters: u32, qps: u32 },
}

impl Plan {
    pub fn new(
        sizes: Vec<u64>,
        iterations: u32,
        tx_depth: u32,
        cq_moderation: u32,
        post_list: Option<u32>,
        qps: u32,
        validate: bool,
    ) -> Result<Plan, PlanError> {
        if iterations == 0 {
            return Err(PlanError::NoIterations);
        }
        if !(1..=8192).contains(&tx_depth) {
            return Err(PlanError::TxDepth);
        }
        if !(1..=64).contains(&qps) {
            return Err(PlanError::Qps);
        }
        if !iterations.is_multiple_of(qps) {
            return Err(PlanError::ItersPerQp {
                iters: iterations,
                qps,
            });
        }
        if let Some(&s) = sizes.iter().find(|&&s| s == 0 || s > MAX_MESSAGE_BYTES) {
            return Err(PlanError::Size(s));
        }
        // perftest clamps CQ moderation to the TX depth the same way.
        let cq_moderation = cq_moderation.clamp(1, tx_depth);
        Ok(Plan {
            sizes,
            iterations,
            tx_depth,
            cq_moderation,
            post_list: post_list.map(|l| l.clamp(1, tx_depth)),
            qps,
            validate,
        })
    }

    /// The chain length used for `size`-byte writes.
    pub fn post_list_for(&self, size: u64) -> u32 {
        self.post_list
            .unwrap_or_else(|| auto_post_list(size))
            .clamp(1, self.tx_depth)
    }

    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(0)
    }
}

/// Chain up to 16 writes but at most 64 KiB of payload per post. Lists save a doorbell per
/// write where writes are small; a long chain of large writes gains nothing and on soft-RoCE
/// costs bandwidth, because rxe (Linux 6.1, rxe_post_send) runs the requester for user QPs inside
/// the posting call: 16 x 1 MiB measured 27-42 MB/s against 41-45 MB/s unchained in the VM
/// (scripts/bench-write-bw).
pub fn auto_post_list(size: u64) -> u32 {
    (65536 / size.max(1)).clamp(1, 16) as u32
}

pub fn all_sizes() -> Vec<u64> {
    ALL_SIZES.map(|p| 1u64 << p).collect()
}

/// One message size, measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SizeResult {
    pub bytes: u64,
    pub iterations: u64,
    /// From the first post to the last completion.
    pub elapsed_ns: u64,
    /// Best rate over any window of at least `peak_window` consecutive writes, timed between
    /// signalled completions.
    pub peak_mb_per_s: f64,
    pub peak_window: u64,
    pub average_mb_per_s: f64,
    pub average_gbps: f64,
    pub msg_rate_mpps: f64,
    /// Some(true/false) when --validate compared the written bytes.
    pub validated: Option<bool>,
    pub verdict: Verdict,
}

/// A message size's verdict: pass, fail, or unknown (small message, software device or unknown
/// line rate: measured, not judged). The project's one vocabulary (`crate::findings`).
pub use crate::findings::Verdict;

/// Completion timestamps of one size: (ns since the first post, writes completed so far).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    pub marks: Vec<(u64, u64)>,
}

/// Decimal MB/s (10^6 bytes/s): perftest 6.06 prints 2^20-byte "MB" (its MsgRate x size shows
/// it); we say decimal everywhere and convert where we compare.
pub fn mb_per_s(bytes: f64, ns: u64) -> f64 {
    if ns == 0 {
        return 0.0;
    }
    bytes / (ns as f64 / 1e9) / 1e6
}

/// Summarise one size from its timeline. The peak window is at least an eighth of the run and
/// two moderation batches, so that two completions reaped in one poll do not make a peak.
pub fn summarise(bytes: u64, iterations: u64, cq_moderation: u32, t: &Timeline) -> SizeResult {
    let elapsed_ns = t.marks.last().map(|m| m.0).unwrap_or(0);
    let total = bytes as f64 * iterations as f64;
    let average = mb_per_s(total, elapsed_ns);
    let window = (iterations / 8)
        .max(2 * u64::from(cq_moderation))
        .min(iterations)
        .max(1);
    let mut peak: f64 = 0.0;
    let marks: Vec<(u64, u64)> = std::iter::once((0, 0))
        .chain(t.marks.iter().copied())
        .collect();
    let mut j = 0;
    for i in 1..marks.len() {
        // Smallest window ending at i with at least `window` writes: advance j while it holds.
        while j + 1 < i && marks[i].1 - marks[j + 1].1 >= window {
            j += 1;
        }
        let n = marks[i].1 - marks[j].1;
        let dt = marks[i].0 - marks[j].0;
        if n >= window.min(iterations) && dt > 0 {
            peak = peak.max(mb_per_s(bytes as f64 * n as f64, dt));
        }
    }
    SizeResult {
        bytes,
        iterations,
        elapsed_ns,
        peak_mb_per_s: peak.max(average),
        peak_window: window,
        average_mb_per_s: average,
        average_gbps: average * 8.0 / 1e3,
        msg_rate_mpps: if elapsed_ns == 0 {
            0.0
        } else {
            iterations as f64 / (elapsed_ns as f64 / 1e9) / 1e6
        },
        validated: None,
        verdict: Verdict::Unknown,
    }
}

/// The pass/fail rule in force, and where it comes from.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Threshold {
    /// Average bandwidth of messages >= min_bytes must reach `gbps`.
    LineRate {
        fraction: f64,
        gbps: f64,
        min_bytes: u64,
        source: String,
    },
    NotApplicable {
        reason: String,
    },
}

pub fn threshold(software_device: Option<&str>, rate: Option<&LineRate>) -> Threshold {
    if let Some(driver) = software_device {
        return Threshold::NotApplicable {
            reason: format!(
                "software RDMA device ({driver}): its rate is set by the CPU, no line-rate threshold applies"
            ),
        };
    }
    match rate {
        Some(r) => Threshold::LineRate {
            fraction: LINE_RATE_FRACTION,
            gbps: r.gbps * LINE_RATE_FRACTION,
            min_bytes: LARGE_MESSAGE_BYTES,
            source: format!(
                "{:.0}% of {} = {:.1} Gb/s",
                LINE_RATE_FRACTION * 100.0,
                r.source,
                r.gbps * LINE_RATE_FRACTION
            ),
        },
        None => Threshold::NotApplicable {
            reason: "the port's active speed/width is unknown".into(),
        },
    }
}

/// Judge each size against the threshold; a failed validation fails its size.
pub fn evaluate(results: &mut [SizeResult], t: &Threshold) {
    for r in results {
        r.verdict = match t {
            _ if r.validated == Some(false) => Verdict::Fail,
            Threshold::LineRate {
                gbps, min_bytes, ..
            } if r.bytes >= *min_bytes => {
                if r.average_gbps >= *gbps {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                }
            }
            _ => Verdict::Unknown,
        };
    }
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
    pub line_rate: Option<LineRate>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Status {
    /// Measured; see verdicts.
    Ok,
    /// Measured and at least one size failed its threshold or validation.
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
    /// Where the buffers were (host or GPU memory, how registered); absent in reports made
    /// before level 3.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemorySides>,
    /// Level 3 (`--gpu`/`--gdr`): the GPU, its NIC and path, the registration choice, GPU
    /// memory before and after, and the cause of a failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gdr: Option<super::gdr::GdrFacts>,
}

/// Each side's buffer, as set up (None: not on this host, in two-node mode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemorySides {
    pub source: Option<super::memory::MemoryFacts>,
    pub target: Option<super::memory::MemoryFacts>,
}

pub const UNITS: &str = "bandwidth in decimal MB/s (10^6 bytes/s) and Gb/s (10^9 bits/s); message rate in Mpps (10^6 messages/s)";

impl WriteBwReport {
    pub fn new(mode: Mode, plan: Plan) -> Self {
        WriteBwReport {
            schema: WRITE_BW_SCHEMA,
            gpudoctor_version: env!("CARGO_PKG_VERSION"),
            mode,
            units: UNITS,
            plan,
            local: None,
            remote: None,
            threshold: None,
            results: Vec::new(),
            notes: Vec::new(),
            status: Status::Ok,
            memory: None,
            gdr: None,
        }
    }

    /// Set the overall status from the verdicts (after `evaluate`).
    pub fn conclude(&mut self) {
        if !matches!(self.status, Status::Ok) {
            return;
        }
        let failed: Vec<String> = self
            .results
            .iter()
            .filter(|r| r.verdict == Verdict::Fail)
            .map(|r| {
                if r.validated == Some(false) {
                    format!("{} B: written data did not match", r.bytes)
                } else {
                    format!("{} B: {:.2} Gb/s", r.bytes, r.average_gbps)
                }
            })
            .collect();
        if !failed.is_empty() {
            let mut reason = failed.join("; ");
            if let Some(Threshold::LineRate { source, .. }) = &self.threshold {
                reason = format!("{reason} (threshold {source})");
            }
            self.status = Status::Failed { reason };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_checks() {
        assert_eq!(
            Plan::new(vec![64], 0, 128, 100, None, 1, false),
            Err(PlanError::NoIterations)
        );
        assert_eq!(
            Plan::new(vec![0], 10, 128, 100, None, 1, false),
            Err(PlanError::Size(0))
        );
        assert_eq!(
            Plan::new(vec![64], 10, 128, 100, None, 3, false),
            Err(PlanError::ItersPerQp { iters: 10, qps: 3 })
        );
        let p = Plan::new(vec![64], 10, 16, 100, Some(64), 1, false).unwrap();
        assert_eq!(p.cq_moderation, 16);
        assert_eq!(p.post_list_for(64), 16);
        let p = Plan::new(vec![64], 10, 128, 100, None, 1, false).unwrap();
        assert_eq!(p.post_list_for(64), 16);
        assert_eq!(p.post_list_for(8192), 8);
        assert_eq!(p.post_list_for(65536), 1);
        assert_eq!(p.post_list_for(1 << 20), 1);
        assert_eq!(all_sizes().first(), Some(&2));
        assert_eq!(all_sizes().last(), Some(&(8 << 20)));
    }

    #[test]
    fn summary_numbers() {
        // 1000 writes of 1 MB (decimal) in 1 s: 1000 MB/s, 8 Gb/s, 0.001 Mpps.
        let marks = (1..=10).map(|i| (i * 100_000_000, i * 100)).collect();
        let r = summarise(1_000_000, 1000, 100, &Timeline { marks });
        assert!((r.average_mb_per_s - 1000.0).abs() < 1e-6);
        assert!((r.average_gbps - 8.0).abs() < 1e-9);
        assert!((r.msg_rate_mpps - 0.001).abs() < 1e-12);
        assert!((r.peak_mb_per_s - 1000.0).abs() < 1e-6);
        assert_eq!(r.peak_window, 200);
    }

    #[test]
    fn peak_ignores_bunched_completions() {
        // Two completions 1 ns apart must not make a huge peak: the window is >= 1/8 of the run.
        let marks = vec![(500, 50), (501, 100), (1000, 150), (1500, 200)];
        let r = summarise(1000, 200, 50, &Timeline { marks });
        // 50 writes 1 ns apart would be a 50000x peak; over >= 100 writes it stays near average.
        assert_eq!(r.peak_window, 100);
        assert!(r.peak_mb_per_s <= 2.0 * r.average_mb_per_s, "{r:?}");
        assert!(r.peak_mb_per_s >= r.average_mb_per_s);
    }

    #[test]
    fn verdicts() {
        let t = threshold(
            None,
            Some(&LineRate {
                gbps: 200.0,
                source: "4X HDR".into(),
            }),
        );
        let mk = |bytes, gbps| SizeResult {
            bytes,
            iterations: 1,
            elapsed_ns: 1,
            peak_mb_per_s: 0.0,
            peak_window: 1,
            average_mb_per_s: 0.0,
            average_gbps: gbps,
            msg_rate_mpps: 0.0,
            validated: None,
            verdict: Verdict::Unknown,
        };
        let mut rs = vec![mk(64, 1.0), mk(65536, 185.0), mk(1 << 20, 170.0)];
        evaluate(&mut rs, &t);
        assert_eq!(
            rs.iter().map(|r| r.verdict).collect::<Vec<_>>(),
            vec![Verdict::Unknown, Verdict::Pass, Verdict::Fail]
        );
        let soft = threshold(Some("rxe"), None);
        let mut rs = vec![mk(1 << 20, 0.4)];
        evaluate(&mut rs, &soft);
        assert_eq!(rs[0].verdict, Verdict::Unknown);
        rs[0].validated = Some(false);
        evaluate(&mut rs, &soft);
        assert_eq!(rs[0].verdict, Verdict::Fail);
    }
}
