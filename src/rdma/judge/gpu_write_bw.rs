//! Level 4's judgements, pure functions over facts gathered before the run: whether a device
//! can take an mlx5 direct-verbs run (`device_refusal`), which handler rings the doorbell
//! (`choose_handler`), and the run's view for the one judge (`judge_run`).

use crate::facts::PortState;
use crate::rdma::judge::write_bw::RunView;
use crate::report::rdma::gpu_write_bw::{GpuWriteBwReport, NicHandler};
use crate::verbs::LIBMLX5_SONAME as LIBMLX5;

/// What the preconditions look at, gathered from the inventory and the library probe (so the
/// decision is a pure function, tested on hand-made facts).
#[derive(Debug, Clone, Default)]
pub struct DeviceFacts {
    pub name: String,
    /// Kernel driver of the PCI function (mlx5_core); None for software devices.
    pub driver: Option<String>,
    /// Some("rxe") / Some("siw") for software devices.
    pub software: Option<String>,
    /// The port's state (outer None: no such port; inner None: state unreadable).
    pub port_state: Option<Option<PortState>>,
}

/// Why an mlx5 direct-verbs run cannot happen on this device, or None when it can; the flag
/// says there is nothing for level 4 to judge there (not an mlx5 device, port not ACTIVE) as
/// against a gap (driver unknown, libmlx5 missing on a ConnectX).
pub fn device_refusal(
    d: &DeviceFacts,
    port: u8,
    libmlx5: &crate::reading::Reading<()>,
) -> Option<(String, bool)> {
    if let Some(sw) = &d.software {
        return Some((
            format!(
                "{} is not an mlx5 device: no direct verbs ({sw} is a software RDMA provider; \
             level 4 needs a ConnectX served by mlx5_core)",
                d.name
            ),
            true,
        ));
    }
    match d.driver.as_deref() {
        Some("mlx5_core") => {}
        Some(other) => {
            return Some((
                format!(
                    "{} is not an mlx5 device: no direct verbs (driver {other}; level 4 needs a \
                 ConnectX served by mlx5_core)",
                    d.name
                ),
                true,
            ));
        }
        None => {
            return Some((
                format!(
                    "{}: its kernel driver is unknown, so whether it is an mlx5 device is unknown",
                    d.name
                ),
                false,
            ));
        }
    }
    if let Some(why) = libmlx5.why() {
        return Some((
            format!(
                "{LIBMLX5} does not load ({why}): no mlx5 direct verbs (install rdma-core's \
             libibverbs providers, e.g. Debian's ibverbs-providers)"
            ),
            false,
        ));
    }
    match &d.port_state {
        None => Some((format!("{} has no port {port}", d.name), true)),
        Some(Some(PortState::Active)) => None,
        Some(s) => Some((
            format!(
                "{}/{port} is not ACTIVE ({}): no RDMA traffic can flow",
                d.name,
                s.map(|s| format!("{s:?}"))
                    .unwrap_or_else(|| "state unknown".into())
            ),
            true,
        )),
    }
}

/// `auto`: gpu when the driver allows the peer mapping (PeerMappingOverride=1), else cpu-proxy;
/// the mapping itself is tried by the live path, which falls back and says so.
pub fn choose_handler(requested: NicHandler, peer_mapping: Option<bool>) -> (NicHandler, String) {
    match (requested, peer_mapping) {
        (NicHandler::Gpu, _) => (NicHandler::Gpu, "--nic-handler gpu".into()),
        (NicHandler::CpuProxy, _) => (NicHandler::CpuProxy, "--nic-handler cpu-proxy".into()),
        (NicHandler::Auto, Some(true)) => (
            NicHandler::Gpu,
            "auto: PeerMappingOverride=1, so the GPU may map the doorbell page".into(),
        ),
        (NicHandler::Auto, Some(false)) => (
            NicHandler::CpuProxy,
            "auto: PeerMappingOverride is not 1 (gdr.peer-mapping): a CPU thread rings the doorbell".into(),
        ),
        (NicHandler::Auto, None) => (
            NicHandler::CpuProxy,
            "auto: whether PeerMappingOverride is set is unknown (gdr.peer-mapping): a CPU thread rings the doorbell".into(),
        ),
    }
}

impl GpuWriteBwReport {
    /// The facts of this run as the judge (`crate::rdma::judge::write_bw::judge_run`) reads them. Level 4's bar
    /// is delivery, not bandwidth: a software device never gets this far (refused as not mlx5).
    pub fn view(&self) -> RunView<'_> {
        RunView {
            status: &self.status,
            results: &self.results,
            threshold: Some(&self.threshold),
            software: false,
            planned_sizes: self.plan.sizes.len(),
            served: None,
        }
    }
}

pub use crate::inventory::parse_mac;
