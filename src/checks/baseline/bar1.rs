//! `baseline.bar1`: each GPU's BAR1 size against the baseline's.

use super::{FIX_SHAPE, ID_BAR1};
use crate::checks::{Finding, Status, ev};
use crate::topo::Gpu;

/// GPU `who` (finding subject `subject`) with a BAR1 of `w` bytes expected.
pub(super) fn judge(who: &str, subject: &str, w: u64, g: &Gpu) -> Finding {
    let gib = |v: u64| format!("{:.0} MiB", v as f64 / (1u64 << 20) as f64);
    match g.bar1_total_bytes {
                None => Finding::new(
                    ID_BAR1,
                    subject,
                    Status::Skip,
                    format!("{who}: BAR1 size unknown (NVML)"),
                ),
                Some(h) if h < w => Finding::new(
                    ID_BAR1,
                    subject,
                    Status::Fail,
                    format!("{who} BAR1 {}, expected {}", gib(h), gib(w)),
                )
                .with(ev("nvmlDeviceGetBAR1MemoryInfo", gib(h)))
                .fix("Enable Above 4G decoding and Resizable BAR in the BIOS (for a VM: the hypervisor's MMIO window for the passed-through GPU)"),
                Some(h) if h != w => Finding::new(
                    ID_BAR1,
                    subject,
                    Status::Warn,
                    format!("{who} BAR1 {}, the baseline recorded {}", gib(h), gib(w)),
                )
                .fix(FIX_SHAPE),
                Some(h) => Finding::new(
                    ID_BAR1,
                    subject,
                    Status::Pass,
                    format!("{who} BAR1 {}, as expected", gib(h)),
                ),
            }
}
