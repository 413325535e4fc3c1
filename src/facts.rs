//! Typed facts: the kernel's and NVML's enumerated strings, parsed once at the inventory edge.
//! Each keeps nothing of the raw text itself (the inventory keeps that beside it, for
//! evidence); text that is not one of the known values parses to `Other`, never to a default.
//!
//! This module must not read files: it turns text into values.

use serde::{Deserialize, Serialize};

/// An RDMA port's logical state, sysfs `ports/N/state` ("4: ACTIVE"; `enum ib_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PortState {
    Down,
    Init,
    Armed,
    Active,
    ActiveDefer,
    Other,
}

impl PortState {
    pub fn parse(raw: &str) -> PortState {
        // The kernel prints "%d: %s\n" from `enum ib_port_state` (drivers/infiniband/core/
        // sysfs.c, state_show): only that exact form, with the number that belongs to the
        // name, is a fact. "9: ACTIVE" or a bare "ACTIVE" is text we do not understand.
        match kernel_pair(raw) {
            Some((1, "DOWN")) => PortState::Down,
            Some((2, "INIT")) => PortState::Init,
            Some((3, "ARMED")) => PortState::Armed,
            Some((4, "ACTIVE")) => PortState::Active,
            Some((5, "ACTIVE_DEFER")) => PortState::ActiveDefer,
            _ => PortState::Other,
        }
    }
}

/// "<number>: <name>" exactly as the kernel prints a numbered state (one trailing newline
/// allowed; no sign, no leading zero, no other space): (number, name).
fn kernel_pair(raw: &str) -> Option<(u32, &str)> {
    let line = raw.strip_suffix('\n').unwrap_or(raw);
    let (n, name) = line.split_once(": ")?;
    if n.is_empty()
        || n.len() > 3
        || !n.bytes().all(|b| b.is_ascii_digit())
        || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    Some((n.parse().ok()?, name))
}

/// An RDMA port's physical state, sysfs `ports/N/phys_state` ("5: LinkUp"; IBTA PortPhysicalState).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhysState {
    Sleep,
    Polling,
    Disabled,
    Training,
    LinkUp,
    LinkErrorRecovery,
    PhyTest,
    Other,
}

impl PhysState {
    pub fn parse(raw: &str) -> PhysState {
        // phys_state_show: "%u: %s\n", names from phys_state_to_str (IBTA numbering).
        match kernel_pair(raw) {
            Some((1, "Sleep")) => PhysState::Sleep,
            Some((2, "Polling")) => PhysState::Polling,
            Some((3, "Disabled")) => PhysState::Disabled,
            Some((4, "PortConfigurationTraining")) => PhysState::Training,
            Some((5, "LinkUp")) => PhysState::LinkUp,
            Some((6, "LinkErrorRecovery")) => PhysState::LinkErrorRecovery,
            Some((7, "Phy Test")) => PhysState::PhyTest,
            _ => PhysState::Other,
        }
    }
}

/// sysfs `ports/N/link_layer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LinkLayer {
    InfiniBand,
    Ethernet,
    Other,
}

impl LinkLayer {
    pub fn parse(raw: &str) -> LinkLayer {
        match raw.trim() {
            "InfiniBand" => LinkLayer::InfiniBand,
            "Ethernet" => LinkLayer::Ethernet,
            _ => LinkLayer::Other,
        }
    }
}

/// sysfs `ports/N/gid_attrs/types/I`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GidType {
    /// "IB/RoCE v1".
    IbRoceV1,
    /// "RoCE v2".
    RoceV2,
    Other,
}

impl GidType {
    pub fn parse(raw: &str) -> GidType {
        match raw.trim() {
            "IB/RoCE v1" => GidType::IbRoceV1,
            "RoCE v2" => GidType::RoceV2,
            _ => GidType::Other,
        }
    }
}

/// sysfs `ports/N/rate` ("400 Gb/sec (4X NDR)", "25 Gb/sec (1X EDR)", "2.5 Gb/sec (1X SDR)"):
/// the rate in Gb/s; None for text that does not say.
pub fn rate_gbps(raw: &str) -> Option<f64> {
    let mut it = raw.split_whitespace();
    let n: f64 = it.next()?.parse().ok()?;
    (it.next()? == "Gb/sec" && n.is_finite() && n >= 0.0).then_some(n)
}

/// What is at the far end of an NVLink (NVML's `nvmlIntNvLinkDeviceType_t`); serialized as
/// the words nvml.json has always used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NvLinkRemote {
    Gpu,
    Switch,
    Ibmnpu,
    #[serde(other)]
    Unknown,
}

/// Parse `/proc/driver/nvidia/version`'s first line:
/// `NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build ...`
/// or `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 ...`.
pub fn parse_nvrm(line: &str) -> (Option<String>, Option<bool>) {
    let version = line
        .split_whitespace()
        .find(|t| {
            t.split('.').count() >= 2
                && t.split('.')
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string);
    let open = if line.contains("Open Kernel Module") {
        Some(true)
    } else if line.contains("Kernel Module") {
        Some(false)
    } else {
        None
    };
    (version, open)
}

/// `Linux version 6.18.44-fc ...` -> (6, 18).
pub fn kernel_major_minor(proc_version: &str) -> Option<(u32, u32)> {
    let v = proc_version.split_whitespace().nth(2)?;
    let mut it = v.split(|c: char| !c.is_ascii_digit());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_states_and_unknown_text() {
        assert_eq!(PortState::parse("4: ACTIVE"), PortState::Active);
        assert_eq!(PortState::parse("1: DOWN\n"), PortState::Down);
        assert_eq!(PortState::parse("2: INIT"), PortState::Init);
        assert_eq!(PortState::parse("5: ACTIVE_DEFER"), PortState::ActiveDefer);
        // Not "ends with ACTIVE": INACTIVE or garbage is not active.
        assert_eq!(PortState::parse("9: INACTIVE"), PortState::Other);
        assert_eq!(PortState::parse("\u{fffd}\u{0}"), PortState::Other);
        assert_eq!(PhysState::parse("5: LinkUp"), PhysState::LinkUp);
        assert_eq!(PhysState::parse("2: Polling"), PhysState::Polling);
        assert_eq!(PhysState::parse("LinkUpish"), PhysState::Other);
    }

    #[test]
    fn rdma_states_only_in_the_kernels_exact_form() {
        for raw in [
            "9: ACTIVE",
            "ACTIVE",
            "ACTIVE\n",
            " 4: ACTIVE",
            "4:ACTIVE",
            "4: ACTIVE ",
            "04: ACTIVE",
            "+4: ACTIVE",
            "4: ACTIVE\n\n",
            "4: active",
            "x: ACTIVE",
        ] {
            assert_eq!(PortState::parse(raw), PortState::Other, "{raw:?}");
        }
        assert_eq!(PortState::parse("4: ACTIVE\n"), PortState::Active);
        for raw in [
            "LinkUp",
            "3: LinkUp",
            "5:LinkUp",
            "5: LinkUp\t",
            "7: PhyTest",
        ] {
            assert_eq!(PhysState::parse(raw), PhysState::Other, "{raw:?}");
        }
        assert_eq!(PhysState::parse("5: LinkUp\n"), PhysState::LinkUp);
        assert_eq!(PhysState::parse("7: Phy Test"), PhysState::PhyTest);
    }

    #[test]
    fn link_layers_gid_types_rates() {
        assert_eq!(LinkLayer::parse("InfiniBand\n"), LinkLayer::InfiniBand);
        assert_eq!(LinkLayer::parse("Ethernet"), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::parse("ethernet"), LinkLayer::Other);
        assert_eq!(GidType::parse("RoCE v2"), GidType::RoceV2);
        assert_eq!(GidType::parse("IB/RoCE v1"), GidType::IbRoceV1);
        assert_eq!(GidType::parse("RoCE v3"), GidType::Other);
        assert_eq!(rate_gbps("400 Gb/sec (4X NDR)"), Some(400.0));
        assert_eq!(rate_gbps("2.5 Gb/sec (1X SDR)"), Some(2.5));
        assert_eq!(rate_gbps("400 Mb/sec"), None);
        assert_eq!(rate_gbps("fast"), None);
        assert_eq!(rate_gbps("-1 Gb/sec"), None);
    }

    #[test]
    fn nvlink_remote_keeps_nvml_json_words() {
        let v: NvLinkRemote = serde_json::from_str("\"switch\"").unwrap();
        assert_eq!(v, NvLinkRemote::Switch);
        let v: NvLinkRemote = serde_json::from_str("\"quantum-gizmo\"").unwrap();
        assert_eq!(v, NvLinkRemote::Unknown);
        assert_eq!(
            serde_json::to_string(&NvLinkRemote::Gpu).unwrap(),
            "\"gpu\""
        );
    }
}
