//! Pure decisions about how a probe addresses a port: which GID to use (NCCL's automatic
//! choice) and what rate the port should reach. No I/O here: the facts come from the inventory
//! (sysfs) and from ibv_query_port.

use crate::inventory::RdmaPort;
use crate::report::rdma::write_bw::{Addressing, LineRate};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GidError {
    #[error("GID index {index} is not populated on port {port} (populated: {populated})")]
    BadIndex {
        index: u32,
        port: u32,
        populated: String,
    },
    #[error("port {port} has no populated GID (RoCE needs one: is the netdev up with an address?)")]
    NoGid { port: u32 },
}

fn ipv4_mapped(gid: &str) -> bool {
    // ::ffff:a.b.c.d as sysfs writes it.
    gid.starts_with("0000:0000:0000:0000:0000:ffff:")
}

fn link_local(gid: &str) -> bool {
    gid.starts_with("fe80:")
}

fn populated(port: &RdmaPort) -> String {
    if port.gid_list().is_empty() {
        return "none".into();
    }
    port.gid_list()
        .iter()
        .map(|g| g.index.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Choose the addressing for a port, like NCCL's automatic GID selection (NCCL_IB_GID_INDEX
/// unset; src/transport/net_ib.cc ncclIbGetGidIndex): on Ethernet prefer RoCE v2 over v1 and an
/// IPv4-mapped address (NCCL_IB_ADDR_FAMILY defaults to AF_INET) over IPv6, then a global IPv6
/// over link-local, then the lowest index. On InfiniBand use the LID unless an index is given.
/// `given` (--gid-index) overrides and must name a populated entry.
pub fn choose_addressing(
    port: &RdmaPort,
    ethernet: bool,
    lid: u16,
    given: Option<u32>,
) -> Result<Addressing, GidError> {
    if let Some(index) = given {
        let Some(g) = port.gid_list().iter().find(|g| g.index == index) else {
            return Err(GidError::BadIndex {
                index,
                port: port.port,
                populated: populated(port),
            });
        };
        return Ok(Addressing::Gid {
            index,
            gid: g.gid.clone(),
            gid_type: g.gid_type.value().cloned(),
            why: "given with --gid-index".into(),
        });
    }
    if !ethernet {
        return Ok(Addressing::Lid { lid });
    }
    let rank = |g: &crate::inventory::Gid| {
        let v2 = g.gid_type_kind == Some(crate::facts::GidType::RoceV2);
        let family = if ipv4_mapped(&g.gid) {
            0
        } else if !link_local(&g.gid) {
            1
        } else {
            2
        };
        (u8::from(!v2), family, g.index)
    };
    let best = port
        .gid_list()
        .iter()
        .min_by_key(|g| rank(g))
        .ok_or(GidError::NoGid { port: port.port })?;
    let (not_v2, family, _) = rank(best);
    let why = format!(
        "auto: {} {}",
        if not_v2 == 0 { "RoCE v2" } else { "RoCE v1" },
        match family {
            0 => "IPv4-mapped",
            1 => "global IPv6",
            _ => "link-local IPv6 (no IPv4 address on the netdev)",
        }
    );
    Ok(Addressing::Gid {
        index: best.index,
        gid: best.gid.clone(),
        gid_type: best.gid_type.value().cloned(),
        why,
    })
}

/// One speed code (`enum ib_port_speed`): its name, data rate per lane after line coding, the
/// rate the kernel's sysfs `rate` prints per lane, and the signalling note.
fn speed(code: u32) -> Option<(&'static str, f64, f64, &'static str)> {
    // Data rates from the IBTA spec (vol. 2, physical layer); the sysfs column is the kernel's
    // rate_show (drivers/infiniband/core/sysfs.c: SDR 25 ... NDR 1000, XDR 2000, in 0.1 Gb/s).
    // RoCE ports report the same codes (100GbE = 4X EDR).
    Some(match code {
        1 => ("SDR", 2.0, 2.5, "2.5 Gb/s signalling, 8b/10b"),
        2 => ("DDR", 4.0, 5.0, "5 Gb/s signalling, 8b/10b"),
        4 => ("QDR", 8.0, 10.0, "10 Gb/s signalling, 8b/10b"),
        8 => ("FDR10", 10.0, 10.0, "10.3125 Gb/s signalling, 64b/66b"),
        16 => ("FDR", 13.64, 14.0, "14.0625 Gb/s signalling, 64b/66b"),
        32 => ("EDR", 25.0, 25.0, "25.78125 Gb/s signalling, 64b/66b"),
        64 => ("HDR", 50.0, 50.0, "53.125 Gb/s signalling, PAM4 64b/66b"),
        128 => ("NDR", 100.0, 100.0, "106.25 Gb/s signalling, PAM4"),
        // active_speed_ex only (rdma-core >= 49, Linux >= 6.6): the 8-bit field says NDR.
        256 => ("XDR", 200.0, 200.0, "212.5 Gb/s signalling, PAM4"),
        _ => return None,
    })
}

fn lanes(active_width: u8) -> Option<u32> {
    Some(match active_width {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => return None,
    })
}

/// The data rate from the speed code in force (active_speed_ex where filled, else
/// active_speed, as rdma-core's ibv_devinfo reads them) and the width code; None for codes no
/// spec defines.
pub fn line_rate(speed_code: u32, active_width: u8) -> Option<LineRate> {
    let (name, lane_gbps, _, note) = speed(speed_code)?;
    let lanes = lanes(active_width)?;
    let gbps = lane_gbps * f64::from(lanes);
    Some(LineRate {
        gbps,
        source: format!("{lanes}X {name}: {lanes} lane(s) x {lane_gbps} Gb/s data rate ({note})"),
    })
}

/// The port's line rate, from verbs and cross-checked with sysfs: both must say the same
/// speed and width, else the rate is unknown (Err: why), never guessed. `sysfs_rate` is the
/// `ports/N/rate` text (Err: why it could not be read). The kernel prints an undefined speed
/// code as SDR there, so a garbage code cannot agree by accident with a real one.
pub fn port_line_rate(
    active_speed: u8,
    active_speed_ex: u32,
    active_width: u8,
    sysfs_rate: Result<&str, &str>,
) -> Result<LineRate, String> {
    let code = if active_speed_ex != 0 {
        active_speed_ex
    } else {
        u32::from(active_speed)
    };
    let codes = format!(
        "ibv_query_port active_speed {active_speed}, active_speed_ex {active_speed_ex}, active_width {active_width}"
    );
    let (Some((name, _, sysfs_lane, _)), Some(n)) = (speed(code), lanes(active_width)) else {
        return Err(format!("{codes}: not a speed and width the IBTA defines"));
    };
    let rate = line_rate(code, active_width).ok_or_else(|| codes.clone())?;
    let text = sysfs_rate
        .map_err(|why| format!("sysfs rate unreadable ({why}): no cross-check for {codes}"))?;
    let text = text.trim();
    let want_gbps = sysfs_lane * f64::from(n);
    let label = format!("({n}X {name})");
    let agrees = crate::facts::rate_gbps(text).is_some_and(|g| (g - want_gbps).abs() < 0.01)
        && text.ends_with(&label);
    if !agrees {
        return Err(format!(
            "ibv_query_port says {n}X {name} ({want_gbps} Gb/s), sysfs rate says {text:?} ({codes})"
        ));
    }
    Ok(LineRate {
        gbps: rate.gbps,
        source: format!("{}; sysfs rate {text:?} agrees", rate.source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::{Gid, RdmaPort};
    use crate::reading::Reading;

    fn port(gids: &[(u32, &str, &str)]) -> RdmaPort {
        RdmaPort {
            port: 1,
            state: Reading::Value("4: ACTIVE".into()),
            phys_state: Reading::unknown("not read"),
            rate: Reading::unknown("not read"),
            link_layer: Reading::Value("Ethernet".into()),
            state_kind: Some(crate::facts::PortState::Active),
            phys_state_kind: None,
            link_layer_kind: Some(crate::facts::LinkLayer::Ethernet),
            rate_gbps: None,
            lid: Reading::unknown("not read"),
            gids: Reading::Value(
                gids.iter()
                    .map(|(i, g, t)| Gid {
                        index: *i,
                        gid: g.to_string(),
                        gid_type: Reading::Value(t.to_string()),
                        gid_type_kind: Some(crate::facts::GidType::parse(t)),
                        ndev: Reading::unknown("not read"),
                    })
                    .collect(),
            ),
            counters: None,
            hw_counters: None,
        }
    }

    const LL: &str = "fe80:0000:0000:0000:0000:00ff:fe00:0001";
    const V4: &str = "0000:0000:0000:0000:0000:ffff:a9fe:0001";
    const G6: &str = "2001:0db8:0000:0000:0000:0000:0000:0001";

    #[test]
    fn prefers_roce_v2_ipv4() {
        let p = port(&[
            (0, LL, "IB/RoCE v1"),
            (1, LL, "RoCE v2"),
            (2, V4, "IB/RoCE v1"),
            (3, V4, "RoCE v2"),
            (4, G6, "RoCE v2"),
        ]);
        match choose_addressing(&p, true, 0, None).unwrap() {
            Addressing::Gid { index, why, .. } => {
                assert_eq!(index, 3);
                assert_eq!(why, "auto: RoCE v2 IPv4-mapped");
            }
            other => panic!("{other:?}"),
        }
        // Without IPv4: global IPv6 before link-local.
        let p = port(&[(0, LL, "RoCE v2"), (1, G6, "RoCE v2")]);
        assert!(matches!(
            choose_addressing(&p, true, 0, None).unwrap(),
            Addressing::Gid { index: 1, .. }
        ));
        // rxe with no address: the link-local v2 entry.
        let p = port(&[(0, LL, "RoCE v2")]);
        assert!(matches!(
            choose_addressing(&p, true, 0, None).unwrap(),
            Addressing::Gid { index: 0, .. }
        ));
    }

    #[test]
    fn ib_uses_lid_unless_given() {
        let p = port(&[(0, LL, "IB/RoCE v1")]);
        assert_eq!(
            choose_addressing(&p, false, 7, None).unwrap(),
            Addressing::Lid { lid: 7 }
        );
        assert!(matches!(
            choose_addressing(&p, false, 7, Some(0)).unwrap(),
            Addressing::Gid { index: 0, .. }
        ));
    }

    #[test]
    fn bad_index_and_empty_table() {
        let p = port(&[(0, LL, "RoCE v2"), (1, V4, "RoCE v2")]);
        let e = choose_addressing(&p, true, 0, Some(9)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GID index 9 is not populated on port 1 (populated: 0, 1)"
        );
        let p = port(&[]);
        assert_eq!(
            choose_addressing(&p, true, 0, None).unwrap_err(),
            GidError::NoGid { port: 1 }
        );
    }

    #[test]
    fn rates() {
        assert_eq!(line_rate(64, 2).unwrap().gbps, 200.0);
        assert_eq!(line_rate(128, 2).unwrap().gbps, 400.0);
        assert_eq!(line_rate(256, 2).unwrap().gbps, 800.0);
        assert_eq!(line_rate(1, 1).unwrap().gbps, 2.0);
        assert!(line_rate(3, 2).is_none());
        assert!(line_rate(64, 3).is_none());
    }

    /// Verbs and sysfs must agree; XDR comes from active_speed_ex (the 8-bit field says NDR);
    /// anything else is unknown with both readings in the reason.
    #[test]
    fn line_rate_cross_check() {
        let r = port_line_rate(64, 0, 2, Ok("200 Gb/sec (4X HDR)\n")).unwrap();
        assert_eq!(r.gbps, 200.0);
        assert!(
            r.source
                .contains("sysfs rate \"200 Gb/sec (4X HDR)\" agrees"),
            "{}",
            r.source
        );
        // XDR: active_speed 128 (NDR) with active_speed_ex 256.
        let r = port_line_rate(128, 256, 2, Ok("800 Gb/sec (4X XDR)")).unwrap();
        assert_eq!(r.gbps, 800.0);
        assert!(r.source.starts_with("4X XDR"), "{}", r.source);
        // An old rdma-core on an XDR port: verbs says NDR, sysfs says XDR: unknown.
        let e = port_line_rate(128, 0, 2, Ok("800 Gb/sec (4X XDR)")).unwrap_err();
        assert!(
            e.contains(
                "ibv_query_port says 4X NDR (400 Gb/s), sysfs rate says \"800 Gb/sec (4X XDR)\""
            ),
            "{e}"
        );
        // FDR, QDR: sysfs prints the signalling-era nominal rate (14, 10 per lane).
        assert_eq!(
            port_line_rate(16, 0, 2, Ok("56 Gb/sec (4X FDR)"))
                .unwrap()
                .gbps,
            54.56
        );
        assert_eq!(
            port_line_rate(4, 0, 2, Ok("40 Gb/sec (4X QDR)"))
                .unwrap()
                .gbps,
            32.0
        );
        assert!(port_line_rate(4, 0, 2, Ok("40 Gb/sec (4X FDR10)")).is_err());
        assert_eq!(
            port_line_rate(1, 0, 1, Ok("2.5 Gb/sec (1X SDR)"))
                .unwrap()
                .gbps,
            2.0
        );
        // Width disagrees, sysfs unreadable or garbage, codes undefined: unknown.
        assert!(port_line_rate(64, 0, 1, Ok("200 Gb/sec (4X HDR)")).is_err());
        let e = port_line_rate(64, 0, 2, Err("Permission denied")).unwrap_err();
        assert!(
            e.starts_with("sysfs rate unreadable (Permission denied)"),
            "{e}"
        );
        assert!(port_line_rate(64, 0, 2, Ok("fast")).is_err());
        let e = port_line_rate(3, 0, 2, Ok("2.5 Gb/sec (1X SDR)")).unwrap_err();
        assert!(e.contains("not a speed and width the IBTA defines"), "{e}");
        assert!(port_line_rate(64, 512, 2, Ok("200 Gb/sec (4X HDR)")).is_err());
    }
}
