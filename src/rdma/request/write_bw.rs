//! What a write-bw run is asked to do (levels 2 and 3): the device, port, GID, the plan of
//! sizes and repetitions (`crate::report::rdma::plan`, which the report records), and the role
//! (loopback, `--serve`, `--peer`). Plain data: the command line is resolved into these by
//! `config`; nothing here knows about clap.

use crate::report::rdma::plan::Plan;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Loopback,
    /// Wait on `listen` for one `--peer` client presenting `token`.
    Serve {
        listen: String,
        token: String,
    },
    /// Write into the `--serve` side at `peer`.
    Client {
        peer: String,
        token: String,
    },
}

#[derive(Debug, Clone)]
pub struct WriteBwRequest {
    pub device: String,
    pub port: u8,
    pub gid_index: Option<u32>,
    pub plan: Plan,
    pub role: Role,
    /// Deadline for each step: TCP connect/accept/answer, and the wait for any completion.
    pub timeout: Duration,
    /// Draw a progress line on stderr (a person at a terminal; never with machine output).
    pub progress: bool,
}

/// perftest's default sweep for `-a`: 2 B to 8 MiB.
pub const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;

pub const DEFAULT_SIZES: [u64; 4] = [64, 4096, 65536, 1_048_576];

/// Messages at least this large must reach the line-rate threshold (small messages are
/// message-rate bound, not bandwidth bound).
pub const LARGE_MESSAGE_BYTES: u64 = 65536;

pub fn all_sizes() -> Vec<u64> {
    ALL_SIZES.map(|p| 1u64 << p).collect()
}
