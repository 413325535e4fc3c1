//! `baseline.versions`: driver, CUDA, kernel and NIC firmware versions against the pinned ones.

use super::node::{Node, kernel_release};
use super::schema::{Baseline, Pinned, Versions};
use super::{ID_VERSIONS, skip};
use crate::checks::{Finding, Status, ev};
use crate::findings::Enforce;

pub(super) fn compare(b: &Baseline, node: &Node, out: &mut Vec<Finding>) {
    let empty = Versions::default();
    let v = b.versions.as_ref().unwrap_or(&empty);
    let before = out.len();
    let mut one = |subject: String,
                   what: &str,
                   want: &Pinned,
                   have: Option<String>,
                   source: &str| {
        out.push(match have {
            None => Finding::new(
                ID_VERSIONS,
                subject,
                Status::Skip,
                format!("{what} unknown on this node"),
            ),
            Some(h) if h == want.value => Finding::new(
                ID_VERSIONS,
                subject,
                Status::Pass,
                format!("{what} {h}, as expected"),
            ),
            Some(h) => Finding::new(
                ID_VERSIONS,
                subject,
                match want.enforce {
                    Enforce::Policy => Status::Fail,
                    Enforce::Fact => Status::Warn,
                },
                format!(
                    "{what} {h}, expected {} ({})",
                    want.value,
                    match want.enforce {
                        Enforce::Policy => "policy",
                        Enforce::Fact => "recorded fact",
                    }
                ),
            )
            .with(ev(source, h))
            .fix(format!("Install the fleet's {what} {} (or, if the change is intended, update the baseline)", want.value)),
        });
    };
    if let Some(p) = &v.nvidia_driver {
        one(
            "host".into(),
            "NVIDIA driver",
            p,
            node.inv.nvml.driver_version.cloned(),
            "nvmlSystemGetDriverVersion",
        );
    }
    if let Some(p) = &v.cuda_driver {
        one(
            "host".into(),
            "CUDA driver API version",
            p,
            node.inv
                .nvml
                .cuda_driver_version
                .value()
                .map(|v| v.to_string()),
            "nvmlSystemGetCudaDriverVersion",
        );
    }
    if let Some(p) = &v.kernel {
        one(
            "host".into(),
            "kernel",
            p,
            kernel_release(node.inv),
            "/proc/version",
        );
    }
    for (model, p) in &v.nic_firmware {
        let nics: Vec<&str> = node
            .topo
            .nics
            .iter()
            .map(|n| n.rdma_device.as_str())
            .filter(|n| node.nic_model(n).as_deref() == Some(model))
            .collect();
        for n in nics {
            one(
                n.to_string(),
                &format!("{model} firmware"),
                p,
                node.nic_fw(n),
                "/sys/class/infiniband/*/fw_ver",
            );
        }
    }
    for want in b.nics.iter().flatten() {
        let Some(p) = &want.firmware else { continue };
        let Some(n) = node
            .topo
            .nics
            .iter()
            .find(|n| node.position(n.bdf) == want.position)
        else {
            continue; // missing: baseline.nics says so
        };
        one(
            n.rdma_device.clone(),
            "NIC firmware",
            p,
            node.nic_fw(&n.rdma_device),
            "/sys/class/infiniband/*/fw_ver",
        );
    }
    if out.len() == before {
        out.push(skip(
            ID_VERSIONS,
            if b.versions.is_none() {
                "no \"versions\" in the baseline"
            } else {
                "nothing to compare"
            },
        ));
    }
}
