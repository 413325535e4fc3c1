//! `baseline.nvlink`: each GPU's active NVLinks against the baseline's count.

use super::{FIX_SHAPE, ID_NVLINK};
use crate::checks::{Finding, Status, ev};
use crate::topo::Gpu;

/// GPU `who` (finding subject `subject`) with `w` NVLinks expected active.
pub(super) fn judge(who: &str, subject: &str, w: u32, g: &Gpu) -> Finding {
    match g.nvlinks_active {
                None => Finding::new(
                    ID_NVLINK,
                    subject,
                    Status::Skip,
                    format!(
                        "{who}: NVLink state unknown ({})",
                        g.nvml_missing.as_deref().unwrap_or("NVML gave no link state")
                    ),
                ),
                Some(h) if h < w => Finding::new(
                    ID_NVLINK,
                    subject,
                    Status::Fail,
                    format!("{who} has {h} NVLinks active, expected {w}"),
                )
                .with(ev("nvmlDeviceGetNvLinkState", format!("{h} active")))
                .fix("Check `nvidia-smi nvlink -s` and the NVSwitch/fabric manager state; a link that stays down after a reboot is a hardware fault (baseboard, GPU)"),
                Some(h) if h > w => Finding::new(
                    ID_NVLINK,
                    subject,
                    Status::Warn,
                    format!("{who} has {h} NVLinks active, the baseline expected only {w}"),
                )
                .fix(FIX_SHAPE),
                Some(h) => Finding::new(
                    ID_NVLINK,
                    subject,
                    Status::Pass,
                    format!("{who}: {h} NVLinks active, as expected"),
                ),
            }
}
