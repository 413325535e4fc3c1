//! `baseline.pcie`: each GPU's and NIC's PCIe link (capability and trained width/speed)
//! against the baseline's.

use super::schema::PcieShape;
use super::{FIX_SHAPE, ID_PCIE, gen_width, trained};
use crate::checks::{Finding, Status, ev};

pub(super) fn compare(
    who: &str,
    subject: &str,
    want: &PcieShape,
    have: &PcieShape,
    out: &mut Vec<Finding>,
) -> bool {
    let mut differs = false;
    let mut unknown = Vec::new();
    let mut worse = false;
    let mut check = |name: &str, w: Option<u8>, h: Option<u8>| {
        if let Some(w) = w {
            match h {
                None => unknown.push(name.to_string()),
                Some(h) if h != w => {
                    differs = true;
                    if h < w {
                        worse = true;
                    }
                }
                _ => {}
            }
        }
    };
    check("max link speed", want.max_gen, have.max_gen);
    check("max link width", want.max_width, have.max_width);
    check("link width", want.cur_width, have.cur_width);
    check("link speed", want.cur_gen, have.cur_gen);
    let evidence = vec![
        ev(
            "baseline",
            format!(
                "capable {}, trained {}",
                gen_width(want.max_gen, want.max_width),
                trained(want.cur_gen, want.cur_width)
            ),
        ),
        ev(
            "PCIe link: LnkCap/LnkSta (sysfs link attributes when config space is short), capped by the port above",
            format!(
                "capable {}, trained {}",
                gen_width(have.max_gen, have.max_width),
                trained(have.cur_gen, have.cur_width)
            ),
        ),
    ];
    if differs {
        let (status, expect_text) = if worse {
            (Status::Fail, "expected")
        } else {
            (Status::Warn, "better than the baseline's")
        };
        let trained_have = gen_width(have.cur_gen.or(have.max_gen), have.cur_width);
        let trained_want = gen_width(want.cur_gen.or(want.max_gen), want.cur_width);
        let msg = if have.max_gen != want.max_gen || have.max_width != want.max_width {
            format!(
                "{who} capable of {}, {expect_text} {} (trained width x{})",
                gen_width(have.max_gen, have.max_width),
                gen_width(want.max_gen, want.max_width),
                have.cur_width.map_or("?".into(), |w| w.to_string())
            )
        } else {
            format!("{who} {trained_have}, {expect_text} {trained_want}")
        };
        out.push(
            Finding::new(ID_PCIE, subject, status, msg)
                .evidence(evidence)
                .fix(FIX_SHAPE),
        );
    } else if !unknown.is_empty() {
        out.push(
            Finding::new(
                ID_PCIE,
                subject,
                Status::Skip,
                format!("{who}: {} unreadable", unknown.join(", ")),
            )
            .evidence(evidence),
        );
    } else {
        out.push(
            Finding::new(
                ID_PCIE,
                subject,
                Status::Pass,
                format!("{who} link as in the baseline"),
            )
            .evidence(evidence),
        );
    }
    differs
}
