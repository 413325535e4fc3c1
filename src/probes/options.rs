//! What a level-1 probe run is asked to do, and `gpudoctor probe`'s defaults.
//!
//! Plain data, no CUDA: the command line (`cli`) takes its defaults from here and the config
//! (`config`) fills it in, without either depending on the CUDA code in `live`.

use super::{Policy, ProbeKind};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ProbeOptions {
    pub kind: ProbeKind,
    /// Only this GPU (its label number, PCI order: GPU0, GPU1...).
    pub gpu: Option<u32>,
    pub size_bytes: u64,
    pub iters: u32,
    pub warmup: u32,
    /// For the whole probe run.
    pub deadline: Duration,
    /// CUDA_HOME / CUDA_PATH, where NVRTC may live.
    pub cuda_homes: Vec<PathBuf>,
    /// Show progress on stderr (a terminal).
    pub progress: bool,
    pub policy: Policy,
}

pub const DEFAULT_SIZE_BYTES: u64 = 256 << 20;
pub const DEFAULT_ITERS: u32 = 20;
pub const DEFAULT_WARMUP: u32 = 3;
pub const DEFAULT_DEADLINE_S: u64 = 300;

/// The smallest timed transfer: below 1 MiB launch and DMA set-up costs dominate a copy and
/// the bandwidth says little about the link.
pub const MIN_SIZE_BYTES: u64 = 1 << 20;

impl ProbeOptions {
    /// `gpudoctor probe`'s defaults for `kind` (what `check --level 1` runs), with no
    /// environment applied: the config adds CUDA homes and progress.
    pub fn defaults(kind: ProbeKind) -> Self {
        ProbeOptions {
            kind,
            gpu: None,
            size_bytes: DEFAULT_SIZE_BYTES,
            iters: DEFAULT_ITERS,
            warmup: DEFAULT_WARMUP,
            deadline: Duration::from_secs(DEFAULT_DEADLINE_S),
            cuda_homes: Vec::new(),
            progress: false,
            policy: Policy::default(),
        }
    }

    /// Arguments that can be judged without the machine (the GPU number is checked against
    /// the topology when the probe runs).
    pub fn validate(&self) -> Result<(), String> {
        if self.size_bytes < MIN_SIZE_BYTES || !self.size_bytes.is_multiple_of(16) {
            return Err(format!(
                "--size {}: must be a multiple of 16 bytes and at least 1 MiB ({MIN_SIZE_BYTES})",
                self.size_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_below_a_mebibyte_or_unaligned_are_refused() {
        let mut o = ProbeOptions::defaults(ProbeKind::H2d);
        assert!(o.validate().is_ok());
        o.size_bytes = MIN_SIZE_BYTES - 16;
        assert!(o.validate().unwrap_err().contains("at least 1 MiB"));
        o.size_bytes = MIN_SIZE_BYTES + 8;
        assert!(o.validate().unwrap_err().contains("multiple of 16"));
        o.size_bytes = MIN_SIZE_BYTES;
        assert!(o.validate().is_ok());
    }
}
