//! Pairing a GPU with an RDMA port, the facts levels 3 and 4 both gather before they measure:
//! which GPUs a request selects, the CUDA device of each (by PCI address, never by index), the
//! PCIe path to a port, NCCL's dma-buf probe of the port's provider, and how GPU memory is
//! registered with it (`judge::gdr::choose_registration` over those facts).
//!
//! It must not measure, print or fold anything into a report: the level runners do that; and
//! it must not decide anything `judge::gdr` decides.

use super::engine::error::ProbeError;
use super::judge::gdr::{self, GpuRegFacts, RegistrationFacts};
use super::request::gdr::{GpuSelect, Machine};
use crate::cuda;
use crate::inventory::{Inventory, RdmaBacking};
use crate::reading::Reading;
use crate::report::rdma::gdr::Decision;
use crate::report::rdma::gdr::GdrMode;
use crate::topo::{PathType, Topology};
use crate::verbs::DmabufProbe;

/// The GPUs `sel` names, by label, in PCI order. An unknown `--gpu N` is the caller's usage
/// error (checked against the topology before this runs).
pub fn gpu_labels(topo: &Topology, sel: GpuSelect) -> Vec<String> {
    match sel {
        GpuSelect::Host => Vec::new(),
        GpuSelect::One(n) => vec![format!("GPU{n}")],
        GpuSelect::Auto => topo.gpus.iter().map(|g| g.label.clone()).collect(),
    }
}

/// nvidia-peermem as NCCL finds it (src/transport/net_ib.cc `ncclIbGdrSupport`: the
/// memory_peers version files, or /sys/module/nvidia_peermem).
pub fn peermem_loaded(inv: &Inventory) -> Option<bool> {
    let h = &inv.host;
    if h.memory_peers.values().any(Reading::is_value) {
        return Some(true);
    }
    h.sys_modules.value().map(|m| {
        m.iter()
            .any(|n| n == "nvidia_peermem" || n == "nv_peer_mem")
    })
}

/// "mlx5_0 (mlx5_core)", "rxe0 (soft-RoCE on rxenet0)": the provider behind an RDMA device.
pub fn provider_name(m: &Machine, device: &str) -> String {
    match m.inv.rdma.iter().find(|d| d.name == device) {
        Some(d) => match &d.backing {
            RdmaBacking::Pci { bdf } => match m.topo.device(*bdf).and_then(|x| x.driver.clone()) {
                Some(drv) => format!("{device} ({drv})"),
                None => device.to_string(),
            },
            RdmaBacking::Software { parent_netdev } => {
                format!("{device} (soft-RoCE on {parent_netdev})")
            }
            RdmaBacking::Unresolved { .. } => format!("{device} (hardware unknown)"),
        },
        None => device.to_string(),
    }
}

/// The PCIe path between a GPU and an RDMA device, from the topology matrix.
pub fn path_between(topo: &Topology, gpu: &str, device: &str) -> Option<(PathType, bool)> {
    let nic = topo.nics.iter().find(|n| n.rdma_device == device)?;
    let m = &topo.matrix;
    let gi = m.labels.iter().position(|l| l == gpu)?;
    let ni = m.labels.iter().position(|l| *l == nic.label)?;
    let p = m.paths.get(gi)?.get(ni)?;
    Some((p.pcie, p.certain))
}

/// NCCL's dma-buf probe on `device` (its own context and PD, closed again).
pub fn probe_provider(device: &str) -> Result<DmabufProbe, ProbeError> {
    let verbs = crate::rdma::engine::side::load()?;
    let ctx = verbs.open(device).map_err(|e| match e {
        crate::verbs::VerbsError::NoDevice { .. } => ProbeError::BadDevice(e),
        other => ProbeError::Verbs {
            device: device.into(),
            source: other,
        },
    })?;
    let pd = ctx.alloc_pd().map_err(|source| ProbeError::Verbs {
        device: device.into(),
        source,
    })?;
    Ok(pd.probe_dmabuf())
}

/// The running kernel's major and minor version, where the inventory read it (dma-buf
/// registration needs a kernel that has it).
pub fn kernel_version(inv: &Inventory) -> Option<(u32, u32)> {
    inv.host
        .kernel_version
        .value()
        .and_then(|v| crate::facts::kernel_major_minor(v))
}

/// The CUDA device of `label` found by its PCI address (never by index); Err: why it cannot
/// be used here (no driver, CUDA does not list it), a skip's reason (levels 3 and 4 alike).
pub fn cuda_device(label: &str, bdf: crate::pci::Bdf) -> Result<cuda::Device, String> {
    cuda::driver_presence().map_err(|e| e.to_string())?;
    let devices = cuda::init()
        .and_then(|_| cuda::devices())
        .map_err(|e| e.to_string())?;
    let seen: Vec<String> = devices.iter().map(|d| d.bdf.clone()).collect();
    devices
        .into_iter()
        .find(|d| d.bdf.parse::<crate::pci::Bdf>().ok() == Some(bdf))
        .ok_or_else(|| {
            format!(
                "CUDA does not list {label} ({bdf}); it lists {}",
                if seen.is_empty() {
                    "no device".to_string()
                } else {
                    seen.join(", ")
                }
            )
        })
}

/// How GPU memory of `dev` is registered with `device`, as NCCL decides (level 3 and 4 alike).
pub fn decide_registration(
    m: &Machine,
    mode: GdrMode,
    label: &str,
    dev: &cuda::Device,
    device: &str,
    probe: DmabufProbe,
) -> Decision {
    gdr::choose_registration(
        mode,
        &RegistrationFacts {
            provider: provider_name(m, device),
            provider_probe: probe,
            kernel: kernel_version(m.inv),
            gpu: Some(GpuRegFacts {
                label: label.into(),
                cuda_dmabuf: dev.dma_buf_supported.clone(),
                open_module: m
                    .inv
                    .host
                    .nvidia_version_line
                    .value()
                    .and_then(|l| crate::facts::parse_nvrm(l).1),
                peermem_loaded: peermem_loaded(m.inv),
            }),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysroot::SysRoot;

    #[test]
    fn peermem_as_nccl_finds_it() {
        let sr = SysRoot::at(&crate::fixture_trees::tree("hgx-h100-8gpu")).unwrap();
        let mut inv =
            Inventory::collect(&sr, crate::nvml::NvmlSnapshot::unavailable("t", "t")).unwrap();
        inv.host.memory_peers.clear();
        inv.host.sys_modules = Reading::Value(vec!["nvidia".into()]);
        assert_eq!(peermem_loaded(&inv), Some(false));
        inv.host.sys_modules = Reading::Value(vec!["nvidia_peermem".into()]);
        assert_eq!(peermem_loaded(&inv), Some(true));
        inv.host.sys_modules = Reading::unknown("permission denied");
        assert_eq!(peermem_loaded(&inv), None);
        inv.host.memory_peers.insert(
            "/sys/kernel/mm/memory_peers/nv_mem_nc/version".into(),
            Reading::unknown("permission denied"),
        );
        assert_eq!(peermem_loaded(&inv), None);
        inv.host.memory_peers.insert(
            "/sys/kernel/mm/memory_peers/nv_mem/version".into(),
            Reading::Value("1.3".into()),
        );
        assert_eq!(peermem_loaded(&inv), Some(true));
    }

    #[test]
    fn gpu_selection() {
        let sr = SysRoot::at(&crate::fixture_trees::tree("hgx-h100-8gpu")).unwrap();
        let inv =
            Inventory::collect(&sr, crate::nvml::NvmlSnapshot::unavailable("t", "t")).unwrap();
        let topo = crate::topo::build(&inv);
        assert!(gpu_labels(&topo, GpuSelect::Host).is_empty());
        assert_eq!(gpu_labels(&topo, GpuSelect::One(3)), ["GPU3"]);
        assert_eq!(gpu_labels(&topo, GpuSelect::Auto).len(), topo.gpus.len());
        assert_eq!(
            path_between(&topo, "GPU0", "mlx5_0").map(|p| p.0),
            Some(PathType::PIX)
        );
        assert_eq!(path_between(&topo, "GPU0", "rxe0"), None);
    }
}
