//! `baseline.pcie`: each GPU's and NIC's PCIe link (capability and trained width/speed), and
//! where its PCIe errors are recorded, against the baseline's.

use super::schema::{AerSource, PcieShape};
use super::{FIX_SHAPE, ID_PCIE, gen_width, trained};
use crate::checks::{Finding, Status, ev};
use crate::reading::Reading;

pub(super) fn compare(
    who: &str,
    subject: &str,
    want: &PcieShape,
    have: &PcieShape,
    have_aer: &Reading<AerSource>,
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
    // Where errors are recorded is the platform's shape, not the link's health: a node that
    // records them elsewhere than its model (counters lost to `pci=noaer` or firmware-first, a
    // capability gone) warns; one that records them nowhere, as its model does, is the model.
    let mut aer_differs = None;
    let mut aer_evidence = Vec::new();
    if let Some(w) = want.aer {
        aer_evidence.push(ev("baseline: PCIe errors recorded", w.describe()));
        match have_aer {
            Reading::Value(h) => {
                aer_evidence.push(ev(
                    "PCIe errors recorded (aer_dev_* counters, else the AER capability in config space)",
                    h.describe(),
                ));
                if *h != w {
                    aer_differs = Some(*h);
                }
            }
            Reading::Absent(why) | Reading::Unknown(why) => {
                unknown.push(format!("where PCIe errors are recorded ({why})"));
            }
        }
    }
    let mut evidence = vec![
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
    evidence.extend(aer_evidence);
    if let (false, Some(h)) = (differs, aer_differs) {
        let w = want.aer.map_or("", AerSource::describe);
        out.push(
            Finding::new(
                ID_PCIE,
                subject,
                Status::Warn,
                format!("{who} records PCIe errors {}, its model {w}", h.describe()),
            )
            .evidence(evidence)
            .fix("Compare the kernel command line (pci=noaer, pcie_ports=compat) and the firmware's AER / firmware-first setting with a node of this model; if the model changed, record a new baseline"),
        );
        return true;
    }
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
                match want.aer {
                    Some(w) => format!(
                        "{who} link as in the baseline; PCIe errors recorded {}, as on its model",
                        w.describe()
                    ),
                    None => format!("{who} link as in the baseline"),
                },
            )
            .evidence(evidence),
        );
    }
    differs
}
