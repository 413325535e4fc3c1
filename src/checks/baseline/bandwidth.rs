//! `baseline.bandwidth`: level-1 probe medians against the baseline's bandwidth floors.

use super::node::Node;
use super::schema::Baseline;
use super::{ID_BANDWIDTH, skip};
use crate::checks::{Finding, Status, ev};
use crate::probes::ProbeReport;
use std::collections::BTreeMap;

pub(super) fn compare(
    b: &Baseline,
    node: &Node,
    probes: Option<&[ProbeReport]>,
    out: &mut Vec<Finding>,
) {
    let Some(floors) = &b.bandwidth else {
        out.push(skip(
            ID_BANDWIDTH,
            "no \"bandwidth\" floors in the baseline",
        ));
        return;
    };
    let Some(probes) = probes else {
        out.push(skip(
            ID_BANDWIDTH,
            "bandwidth floors are compared at --level 1 (probe samples)",
        ));
        return;
    };
    let ends = node.ends();
    let pos_label: BTreeMap<&str, &str> = ends
        .iter()
        .map(|(l, (p, _))| (p.as_str(), l.as_str()))
        .collect();
    let label = |p: &str| -> Option<String> {
        if p == "host" {
            Some("host".into())
        } else {
            pos_label.get(p).map(|s| s.to_string())
        }
    };
    for f in floors {
        let subject = format!("{} {}", f.probe, f.method);
        let (Some(src), Some(dst)) = (label(&f.src), label(&f.dst)) else {
            out.push(Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Skip,
                format!(
                    "{} {} {} -> {}: an end is not on this node (see baseline.gpus)",
                    f.probe, f.method, f.src, f.dst
                ),
            ));
            continue;
        };
        let subject = format!("{} {}->{} {}", f.probe, src, dst, f.method);
        let m = probes.iter().flat_map(|r| &r.measurements).find(|m| {
            m.probe.as_str() == f.probe
                && m.method.as_str() == f.method
                && m.src == src
                && m.dst == dst
        });
        let Some(stats) = m.and_then(|m| m.evaluation.stats.as_ref()) else {
            out.push(Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Skip,
                format!(
                    "no measurement ({})",
                    m.map(|m| m.evaluation.reason.clone())
                        .unwrap_or_else(|| "probe not run or not recorded".into())
                ),
            ));
            continue;
        };
        let e = ev(
            "probe samples",
            format!(
                "median {:.1} GB/s (n={}, min {:.1}, max {:.1})",
                stats.median_gbps, stats.n, stats.min_gbps, stats.max_gbps
            ),
        );
        let basis = f.basis.clone().unwrap_or_else(|| "baseline".into());
        out.push(if stats.median_gbps < f.min_gbps {
            Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Fail,
                format!(
                    "median {:.1} GB/s below the baseline floor {:.1} GB/s",
                    stats.median_gbps, f.min_gbps
                ),
            )
            .with(e)
            .with(ev("baseline floor", format!("{:.1} GB/s: {basis}", f.min_gbps)))
            .fix("Compare with the probe's own check (probe.h2d/d2h/p2p) and the link state under load; a drop against the model's floor with a healthy link points at host settings (IOMMU, NUMA placement of the process, clocks)")
        } else {
            Finding::new(
                ID_BANDWIDTH,
                subject,
                Status::Pass,
                format!(
                    "median {:.1} GB/s >= floor {:.1} GB/s",
                    stats.median_gbps, f.min_gbps
                ),
            )
            .with(e)
        });
    }
}
