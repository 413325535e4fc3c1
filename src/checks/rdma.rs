//! rdma.*: the RDMA driver, port state, RoCE v2 GIDs, MTU and firmware consistency (sysfs);
//! port error counters and link flaps (sysfs counters and the kernel log); and mlx5 direct
//! verbs (`rdma.mlx5dv`: a ConnectX served by mlx5_core, and libmlx5's direct verbs load),
//! which GPU-initiated RDMA (level 4) needs.
//!
//! Every counter threshold names its published source in the evidence. Counters are cumulative
//! since the driver loaded (or were last cleared): a point-in-time check cannot take a delta, so
//! a rate threshold is judged on the average since boot (/proc/uptime), which is a lower bound
//! of the rate since the counters were last cleared.
//!
//! Pure functions of the inventory and library facts: no reads here.

use super::{CheckId, Ctx, Finding, SkipKind, Status, ev};
use crate::facts::{GidType, LinkLayer, PhysState, PortState};
use crate::inventory::{RdmaDevice, RdmaPort};
use crate::kmsg::KernelLog;
use crate::reading::Reading;
use std::collections::BTreeMap;

/// Largest RoCE MTU a netdev MTU allows: the IB MTU plus RoCE v2 headers (GRH/UDP/IP 40-ish,
/// BTH 12, RETH 16, ICRC 4) must fit; rdma-core's `ib_mtu_enum` steps are 256..4096.
pub fn roce_mtu(netdev_mtu: u32) -> u32 {
    const OVERHEAD: u32 = 96;
    [4096u32, 2048, 1024, 512, 256]
        .into_iter()
        .find(|m| m + OVERHEAD <= netdev_mtu)
        .unwrap_or(0)
}

/// One unknown skip of `id` for each gap in what is known about the NICs (an unreadable
/// /sys/class/infiniband, an RDMA device whose PCI function could not be read); true when
/// there was any. A NIC check calls this before judging, so that a NIC it cannot see is an
/// unknown, never "no RDMA devices".
pub(super) fn nic_gaps(ctx: &Ctx, id: CheckId, out: &mut Vec<Finding>) -> bool {
    let gaps = ctx.topo.nic_gaps();
    for (subject, why) in &gaps {
        let source = if subject == "host" {
            "/sys/class/infiniband".to_string()
        } else {
            format!("/sys/class/infiniband/{subject}/device")
        };
        out.push(
            Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                format!("{why}: not judged"),
            )
            .with(ev(source, why.clone())),
        );
    }
    !gaps.is_empty()
}

/// The PCI RDMA devices with their functions, after an unknown skip of `id` for each gap
/// (`nic_gaps`); None when there is none to judge, after one not-applicable skip of `id` on
/// `host` when that is a fact (no gap).
pub(super) fn pci_rdma_or_skip<'a>(
    ctx: &Ctx<'a>,
    id: CheckId,
    out: &mut Vec<Finding>,
) -> Option<Vec<(&'a RdmaDevice, crate::pci::Bdf)>> {
    let gaps = nic_gaps(ctx, id, out);
    let devices: Vec<_> = ctx
        .inv
        .rdma
        .iter()
        .filter_map(|r| r.bdf().map(|b| (r, b)))
        .collect();
    if devices.is_empty() {
        if !gaps {
            out.push(
                Finding::new(id, "host", Status::Skip, "no RDMA devices on the PCI bus")
                    .not_applicable(),
            );
        }
        return None;
    }
    Some(devices)
}

/// Every port of every PCI RDMA device as (device, port, "dev/port", its sysfs dir, link
/// layer), or one skip on `host` when there is none.
fn each_port(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&RdmaDevice, &RdmaPort, String, String, String, &mut Vec<Finding>),
) {
    let Some(devices) = pci_rdma_or_skip(ctx, id, out) else {
        return;
    };
    for (r, _) in devices {
        // A device whose ports could not be listed (or that lists none) leaves every
        // port-level check unjudged: one unknown skip on the device, never silence.
        if r.port_list().is_empty() {
            out.push(Finding::new(
                id,
                r.name.clone(),
                Status::Skip,
                format!(
                    "no ports readable: {}",
                    r.ports.why().unwrap_or("the device lists no ports")
                ),
            ));
        }
        for p in r.port_list() {
            let subject = format!("{}/{}", r.name, p.port);
            let pdir = format!("/sys/class/infiniband/{}/ports/{}", r.name, p.port);
            let ll = p.link_layer.value().cloned().unwrap_or_else(|| "?".into());
            check(r, p, subject, pdir, ll, out);
        }
    }
}

pub(super) fn port_state(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaPortState;
    each_port(ctx, id, out, |_r, p, subject, pdir, ll, out| {
        // Text that is not the kernel's exact form (Other) is unknown, like an unreadable file:
        // it neither passes nor fails the port, unless the other file is a fact that fails it.
        let active = p
            .state_kind
            .filter(|k| *k != PortState::Other)
            .map(|k| k == PortState::Active);
        let up = p
            .phys_state_kind
            .filter(|k| *k != PhysState::Other)
            .map(|k| k == PhysState::LinkUp);
        let not_kernel_text =
            p.state_kind == Some(PortState::Other) || p.phys_state_kind == Some(PhysState::Other);
        let ib = p.link_layer_kind == Some(LinkLayer::InfiniBand);
        let evs = vec![
            ev(format!("{pdir}/state"), evidence_text(&p.state)),
            ev(format!("{pdir}/phys_state"), evidence_text(&p.phys_state)),
            ev(format!("{pdir}/rate"), evidence_text(&p.rate)),
            ev(format!("{pdir}/link_layer"), ll.clone()),
        ];
        // Whether the LID matters hangs on the link layer, and an InfiniBand port's LID 0 fails:
        // neither may be guessed (unreadable passed before).
        let unread = |r: &Reading<String>| r.why().unwrap_or("not read").to_string();
        let lid_value = p
            .lid
            .value()
            .map(|l| u32::from_str_radix(l.trim_start_matches("0x"), 16).ok());
        let unknown = if p.link_layer_kind.is_none() {
            Some(format!(
                "link layer unreadable ({}): whether the port needs a LID from a subnet manager is unknown",
                unread(&p.link_layer)
            ))
        } else if p.link_layer_kind == Some(LinkLayer::Other) {
            Some(format!(
                "link layer '{}' not recognised (neither InfiniBand nor Ethernet): whether the port needs a LID from a subnet manager is unknown",
                p.link_layer
                    .value()
                    .map(String::as_str)
                    .unwrap_or_default()
                    .chars()
                    .take(40)
                    .collect::<String>()
            ))
        } else if ib && lid_value.is_none() {
            Some(format!(
                "InfiniBand port's LID unreadable ({}): whether a subnet manager configured it is unknown",
                unread(&p.lid)
            ))
        } else if ib && lid_value == Some(None) {
            Some(format!(
                "InfiniBand port's LID unparseable ('{}'): whether a subnet manager configured it is unknown",
                p.lid.value().map(String::as_str).unwrap_or_default()
            ))
        } else {
            None
        };
        let ib_no_lid = ib && lid_value == Some(Some(0));
        match (active, up) {
                (Some(true), Some(true)) if unknown.is_some() => out.push(
                    Finding::new(id, subject.clone(), Status::Skip, unknown.unwrap_or_default())
                        .evidence(evs)
                        .with(ev(format!("{pdir}/lid"), p.lid.value().cloned().unwrap_or_else(|| unread(&p.lid)))),
                ),
                (Some(true), Some(true)) if ib_no_lid => out.push(
                    Finding::new(id, subject.clone(), Status::Fail, "InfiniBand port ACTIVE but LID 0: no subnet manager has configured it")
                        .evidence(evs)
                        .with(ev(format!("{pdir}/lid"), p.lid.value().cloned().unwrap_or_default()))
                        .fix("Make sure a subnet manager (opensm or the switch's SM) runs on the fabric; `sminfo` shows it"),
                ),
                (Some(true), Some(true)) => out.push(
                    Finding::new(id, subject.clone(), Status::Pass, format!("ACTIVE, LinkUp, {} {ll}", p.rate.value().map(String::as_str).unwrap_or("rate ?"))).evidence(evs),
                ),
                (Some(false), _) | (_, Some(false)) => out.push(
                    Finding::new(id, subject.clone(), Status::Fail, format!(
                        "port not usable: state {}, physical state {}",
                        p.state.value().map(String::as_str).unwrap_or("?"),
                        p.phys_state.value().map(String::as_str).unwrap_or("?")
                    ))
                    .evidence(evs)
                    .fix(if ib {
                        "Check the cable and switch port (`ibstat`, `iblinkinfo`); INIT means no subnet manager has brought the port up (start opensm or check the fabric SM); Polling/Disabled means no physical link"
                    } else {
                        "Check the cable, the switch port and the netdev (`ip link set <dev> up`); `ethtool <dev>` shows link and speed"
                    }),
                ),
                _ if not_kernel_text => out.push(Finding::new(id, subject.clone(), Status::Skip, format!(
                    "port state not in the kernel's form (state '{}', physical state '{}'): unknown",
                    p.state.value().map(String::as_str).unwrap_or("?").chars().take(40).collect::<String>(),
                    p.phys_state.value().map(String::as_str).unwrap_or("?").chars().take(40).collect::<String>()
                )).evidence(evs)),
                _ => out.push(Finding::new(id, subject.clone(), Status::Skip, "port state unreadable").evidence(evs)),
            }
    });
}

/// rdma.roce-gid: a RoCE (Ethernet) port has a RoCE v2 GID.
pub(super) fn roce_gid(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaRoceGid;
    each_port(ctx, id, out, |_r, p, subject, pdir, _ll, out| {
        if p.link_layer_kind != Some(LinkLayer::Ethernet) {
            return;
        }
        let v2: Vec<_> = p
            .gid_list()
            .iter()
            .filter(|g| g.gid_type_kind == Some(GidType::RoceV2))
            .collect();
        let types_known = p.gid_list().iter().any(|g| g.gid_type.is_value());
        // A GID table that could not be listed (absent, denied, or over MAX_GID_ENTRIES) is
        // unknown: its emptiness is no evidence that the port lacks a RoCE v2 GID.
        let unlisted = p.gids.why();
        if let Some(why) = unlisted {
            out.push(Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                format!("GID table unreadable: {why}"),
            ));
        } else if !v2.is_empty() {
            let ipv4 = v2
                .iter()
                .find(|g| g.gid.starts_with("0000:0000:0000:0000:0000:ffff:"));
            out.push(
                Finding::new(
                    id,
                    subject.clone(),
                    Status::Pass,
                    format!(
                        "{}{}",
                        crate::words::count(v2.len(), "RoCE v2 GID", "RoCE v2 GIDs"),
                        ipv4.map(|g| format!("; IPv4-mapped at index {}", g.index))
                            .unwrap_or_else(|| {
                                "; no IPv4-mapped GID (routable RoCE needs an IP on the netdev)"
                                    .into()
                            })
                    ),
                )
                .with(ev(
                    format!("{pdir}/gid_attrs/types/{}", v2[0].index),
                    "RoCE v2",
                )),
            );
        } else if types_known || p.gid_list().is_empty() {
            out.push(Finding::new(id, subject.clone(), Status::Fail, "no RoCE v2 GID on this RoCE port: NCCL and most RDMA apps need RoCE v2 for routable traffic")
                    .with(ev(format!("{pdir}/gid_attrs/types/*"), if p.gid_list().is_empty() { "no populated GIDs".to_string() } else { p.gid_list().iter().map(|g| format!("{}={}", g.index, g.gid_type.value().cloned().unwrap_or_default())).collect::<Vec<_>>().join(", ") }))
                    .fix("Assign an IP address to the port's netdev (GIDs are derived from its addresses) and make sure RoCE v2 is enabled (`cma_roce_mode -d <dev> -p 1 -m 2`; on ConnectX check `mlxconfig ... ROCE_CONTROL`)"));
        } else {
            out.push(Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                "GID types not exposed by this kernel (no gid_attrs)",
            ));
        }
    });
}

/// rdma.mtu: the RoCE port's netdev MTU allows a 4096-byte RoCE MTU.
pub(super) fn mtu(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaMtu;
    let inv = ctx.inv;
    each_port(ctx, id, out, |r, p, subject, _pdir, _ll, out| {
        if p.link_layer_kind != Some(LinkLayer::Ethernet) {
            return;
        }
        let ndev = p
            .gid_list()
            .iter()
            .find_map(|g| g.ndev.value().cloned())
            .or_else(|| {
                inv.netdevs
                    .iter()
                    .find(|n| n.bdf.value().is_some() && n.bdf.value().copied() == r.bdf())
                    .map(|n| n.name.clone())
            });
        match ndev.as_ref().and_then(|n| inv.netdevs.iter().find(|x| &x.name == n)) {
                Some(nd) => match nd.mtu.value().copied() {
                    Some(m) if roce_mtu(m) >= 4096 => out.push(Finding::new(id, subject.clone(), Status::Pass, format!("{} MTU {m} allows RoCE MTU 4096", nd.name)).with(ev(format!("/sys/class/net/{}/mtu", nd.name), m.to_string()))),
                    Some(m) => out.push(Finding::new(id, subject.clone(), Status::Warn, format!("{} MTU {m} limits RoCE MTU to {}: more packets per message, lower large-message bandwidth", nd.name, roce_mtu(m)))
                        .with(ev(format!("/sys/class/net/{}/mtu", nd.name), m.to_string()))
                        .fix(format!("Raise the netdev MTU to 9000 (`ip link set {} mtu 9000`, and on the switch ports) so the active RoCE MTU becomes 4096", nd.name))),
                    None => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("{} MTU unreadable", nd.name))),
                },
                None => out.push(Finding::new(id, subject.clone(), Status::Skip, match inv.net_class.unreadable() {
                    // Unknown, not absent: the netdevs could not be listed.
                    Some(why) => format!("no netdev found for this RoCE port: /sys/class/net could not be listed ({why})"),
                    None => "no netdev found for this RoCE port".to_string(),
                })),
            }
    });
}

/// rdma.fw-consistency: one firmware version per NIC model. A NIC whose model or firmware
/// cannot be read is unknown, and a model it may belong to is not said to run one firmware
/// (the unread NIC may differ).
pub(super) fn fw_consistency(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaFwConsistency;
    let Some(pci_rdma) = pci_rdma_or_skip(ctx, id, out) else {
        return;
    };
    let mut by_model: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    // NICs left out, with the model they are known to be (None: unknown, could be any).
    let mut unread: Vec<(Option<String>, String)> = Vec::new();
    for (r, _) in &pci_rdma {
        let model = r.hca_type.value().or(r.board_id.value()).cloned();
        let dir = format!("/sys/class/infiniband/{}", r.name);
        let why = |f: &Reading<String>| f.why().unwrap_or("not read").to_string();
        match (&model, r.fw_ver.value()) {
            (Some(m), Some(fw)) => {
                by_model
                    .entry(m.clone())
                    .or_default()
                    .entry(fw.clone())
                    .or_default()
                    .push(r.name.clone());
            }
            (m, fw) => {
                let what = if fw.is_none() {
                    format!("fw_ver unreadable ({})", why(&r.fw_ver))
                } else {
                    format!(
                        "model unreadable (hca_type: {}; board_id: {})",
                        why(&r.hca_type),
                        why(&r.board_id)
                    )
                };
                out.push(
                    Finding::new(
                        id,
                        r.name.clone(),
                        Status::Skip,
                        format!("{}: {what}: its firmware cannot be compared", r.name),
                    )
                    .with(ev(
                        format!("{dir}/{}", if fw.is_none() { "fw_ver" } else { "hca_type" }),
                        what.clone(),
                    )),
                );
                unread.push((m.clone(), r.name.clone()));
            }
        }
    }
    for (model, fws) in by_model {
        let desc = fws
            .iter()
            .map(|(fw, devs)| format!("{fw}: {}", devs.join(",")))
            .collect::<Vec<_>>()
            .join("; ");
        let unknown: Vec<&str> = unread
            .iter()
            .filter(|(m, _)| m.as_ref().is_none_or(|m| *m == model))
            .map(|(_, n)| n.as_str())
            .collect();
        if fws.len() > 1 {
            out.push(Finding::new(id, model.clone(), Status::Warn, format!("{model} NICs run different firmware ({desc})"))
                .with(ev("/sys/class/infiniband/*/fw_ver", desc))
                .fix("Update all NICs of a model to the same firmware (`mlxfwmanager --online -u` or the vendor's tool) so behaviour and bugs are uniform"));
        } else if !unknown.is_empty() {
            out.push(
                Finding::new(
                    id,
                    model.clone(),
                    Status::Skip,
                    format!(
                        "{model}: one firmware among the NICs read ({desc}), but {} may be of this model and its firmware is unknown",
                        unknown.join(", ")
                    ),
                )
                .with(ev("/sys/class/infiniband/*/fw_ver", desc)),
            );
        } else {
            out.push(Finding::new(
                id,
                model.clone(),
                Status::Pass,
                format!("{model}: one firmware ({desc})"),
            ));
        }
    }
}

/// Whether kernel module `name` is loaded: listed in /proc/modules, or a directory in
/// /sys/module (built-in modules show only there). None when neither list could be read.
fn module_loaded(h: &crate::inventory::Host, name: &str) -> Option<bool> {
    let listed = |v: &Reading<Vec<String>>| v.value().map(|v| v.iter().any(|m| m == name));
    match (listed(&h.modules), listed(&h.sys_modules)) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (None, None) => None,
        _ => Some(false),
    }
}

/// rdma.driver: each NIC of an RDMA-capable family (`crate::nic`) on the PCI bus has its RDMA
/// device; one without names the module that would provide it, whether that module is loaded,
/// and the fix. A recording with neither /sys/class/infiniband nor the module lists
/// cannot tell a missing module from one it did not capture: unknown.
pub(super) fn driver(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaDriver;
    let t = ctx.topo;
    let gaps = nic_gaps(ctx, id, out);
    if t.nics.is_empty() && t.nics_without_rdma.is_empty() {
        if !gaps {
            out.push(
                Finding::new(
                    id,
                    "host",
                    Status::Skip,
                    "no RDMA-capable NICs on the PCI bus",
                )
                .not_applicable(),
            );
        }
        return;
    }
    for n in &t.nics {
        let driver = ctx
            .inv
            .pci
            .get(&n.bdf)
            .and_then(|f| f.driver.value().cloned());
        out.push(
            Finding::new(
                id,
                n.bdf.to_string(),
                Status::Pass,
                format!(
                    "RDMA device {}{}",
                    n.rdma_device,
                    driver.map(|d| format!(" on {d}")).unwrap_or_default()
                ),
            )
            .with(ev(
                format!("/sys/class/infiniband/{}/device", n.rdma_device),
                n.bdf.to_string(),
            )),
        );
    }
    for n in &t.nics_without_rdma {
        out.push(rdmaless_finding(ctx, n));
    }
}

/// Whether module `m` is loaded, as evidence (unknown with why where the lists were not read).
fn modules_evidence(h: &crate::inventory::Host, m: &str) -> super::Evidence {
    ev(
        format!("/proc/modules, /sys/module/{m}"),
        match module_loaded(h, m) {
            Some(true) => "loaded".to_string(),
            Some(false) => "not loaded".to_string(),
            None => format!(
                "unknown ({}; {})",
                h.modules.why().unwrap_or("not read"),
                h.sys_modules.why().unwrap_or("not read")
            ),
        },
    )
}

/// A NIC of an RDMA-capable family without its RDMA device: unknown where the source cannot
/// tell, else failed with what is missing (its PCI driver, the RDMA module, or RDMA on the
/// function) and the fix.
fn rdmaless_finding(ctx: &Ctx, n: &crate::topo::RdmalessNic) -> Finding {
    let id = CheckId::RdmaDriver;
    let h = &ctx.inv.host;
    let subject = n.bdf.to_string();
    let m = n.rdma_module.as_str();
    let who = format!("{} ({})", n.bdf, n.name);
    let driver_path = format!("/sys/bus/pci/devices/{}/driver", n.bdf);
    let driver_ev = ev(
        driver_path,
        n.driver.clone().unwrap_or_else(|| "no driver bound".into()),
    );
    if let Some(why) = &n.unknown {
        return Finding::new(
            id,
            subject,
            Status::Skip,
            format!("{who}: whether it has an RDMA device is unknown ({why})"),
        )
        .with(driver_ev);
    }
    let pci_driver = crate::nic::FAMILIES
        .iter()
        .find(|f| f.rdma_module == m && f.name == n.family)
        .map(|f| f.pci_driver)
        .unwrap_or("its driver");
    let fix = format!(
        "`modprobe {m}` (and make it persistent: `echo {m} > /etc/modules-load.d/{m}.conf`); if it does not load, the RDMA stack is incomplete or built for another kernel: install the RDMA kernel modules for the running kernel (inbox: the distribution's rdma-core and kernel modules package, e.g. linux-modules-extra on Ubuntu; MLNX_OFED/DOCA-OFED: reinstall for `uname -r`, `ofed_info -s`) and read `dmesg | grep -i {m}` for unknown-symbol or probe errors"
    );
    let Some(drv) = &n.driver else {
        return Finding::new(
            id,
            subject,
            Status::Fail,
            format!(
                "{who} ({}): no driver bound, so no RDMA device: {pci_driver} does not run it and {m} cannot provide one",
                n.family
            ),
        )
        .with(driver_ev)
        .with(modules_evidence(h, pci_driver))
        .fix(format!(
            "`modprobe {pci_driver} {m}`; if {pci_driver} does not bind, read `dmesg | grep -i {pci_driver}` (firmware or probe errors). {fix}"
        ));
    };
    let loaded = module_loaded(h, m);
    let core = module_loaded(h, "ib_core");
    let class_absent = ctx.inv.rdma_class == crate::inventory::ClassListing::Absent;
    let f = match (class_absent, loaded, core) {
        // A recording without the class directory or the module lists (hwloc's
        // hwloc-gather-topology saves neither): a missing module and an uncaptured one look
        // the same.
        (true, None, _) => Finding::new(
            id,
            subject,
            Status::Skip,
            format!(
                "{who} on {drv}: no RDMA device seen, but this tree has neither /sys/class/infiniband nor the module lists (/proc/modules, /sys/module): whether {m} is loaded is unknown (a recording that did not capture them)"
            ),
        ),
        (true, _, Some(true)) => Finding::new(
            id,
            subject,
            Status::Skip,
            format!(
                "{who} on {drv}: ib_core is loaded, yet /sys/class/infiniband is absent: the recording did not capture it, so whether it has an RDMA device is unknown"
            ),
        ),
        (_, Some(false), _) => Finding::new(
            id,
            subject,
            Status::Fail,
            format!(
                "{who} on {drv} has no RDMA device: {m} is not loaded{}; no RDMA and no GPUDirect RDMA through it",
                if core == Some(false) { " (nor ib_core)" } else { "" }
            ),
        )
        .fix(fix),
        (_, Some(true), _) => Finding::new(
            id,
            subject,
            Status::Fail,
            format!(
                "{who} on {drv} has no RDMA device although {m} is loaded: RDMA is disabled for this function or {m} failed to probe it"
            ),
        )
        .fix(format!(
            "Read `dmesg | grep -i {m}` for probe errors; on ConnectX check `devlink dev param show pci/{} name enable_rdma` (set it true and `devlink dev reload`) and that the port is not in a mode without RDMA; reload with `modprobe -r {m}; modprobe {m}`",
            n.bdf
        )),
        (_, None, _) => Finding::new(
            id,
            subject,
            Status::Fail,
            format!(
                "{who} on {drv} has no RDMA device (other RDMA devices are listed); whether {m} is loaded is unknown (module lists unreadable)"
            ),
        )
        .fix(fix),
    };
    f.with(driver_ev).with(modules_evidence(h, m)).with(ev(
        "/sys/class/infiniband",
        match &ctx.inv.rdma_class {
            crate::inventory::ClassListing::Absent => "not present".to_string(),
            _ => format!("no device links to {}", n.bdf),
        },
    ))
}

const NVSENTINEL: &str = "NVIDIA NVSentinel NIC health monitor defaults (docs/nic-health-monitor/link-counter-detection.md, Appendix A)";
const IBTA_SYMBOL: &str = "IBTA BER 10^-12 limit as 120 symbol errors per hour (Oracle/Sun InfiniBand docs 820-7751, cited by NVSentinel)";
const AZNHC_FLAP: &str = "AzNHC check_ib_link_flapping: more than one link-down event within 6 hours fails (azurehpc-health-checks, NHC2005)";

/// Counters whose any increment means the workload has failed or will (NVSentinel's "fatal"
/// counters), with the directory they live in.
const FATAL_COUNTERS: [(&str, &str); 3] = [
    ("counters", "excessive_buffer_overrun_errors"),
    ("counters", "local_link_integrity_errors"),
    ("hw_counters", "rnr_nak_retry_err"),
];

/// Rate thresholds (per second) and their source: symbol errors from the IBTA BER limit, the
/// rest NVSentinel's non-fatal defaults.
const RATE_COUNTERS: [(&str, &str, f64, &str); 5] = [
    ("counters", "symbol_error", 120.0 / 3600.0, IBTA_SYMBOL),
    ("counters", "link_error_recovery", 5.0 / 60.0, NVSENTINEL),
    ("counters", "port_rcv_errors", 10.0, NVSENTINEL),
    ("counters", "port_xmit_discards", 100.0, NVSENTINEL),
    ("hw_counters", "local_ack_timeout_err", 1.0, NVSENTINEL),
];

/// Shown with their values but not judged: no published threshold for a cumulative value.
const SHOWN_COUNTERS: [(&str, &str); 3] = [
    ("hw_counters", "out_of_buffer"),
    ("hw_counters", "packet_seq_err"),
    ("hw_counters", "rnr_nak_retry_err"),
];

/// Counter `name` of port `p`'s `dir` (`counters`, `hw_counters`) as read; None where the
/// directory was not listed or does not list it.
fn counter_reading<'a>(p: &'a RdmaPort, dir: &str, name: &str) -> Option<&'a Reading<u64>> {
    let m = if dir == "counters" {
        &p.counters
    } else {
        &p.hw_counters
    };
    m.as_ref()?.value()?.get(name)
}

fn counter(p: &RdmaPort, dir: &str, name: &str) -> Option<u64> {
    counter_reading(p, dir, name)?.value().copied()
}

/// Why port `p`'s `counters/` has no listing: unknown with why; None where it was listed or
/// not looked for.
fn counters_why(p: &RdmaPort) -> Option<&str> {
    p.counters.as_ref().and_then(Reading::why)
}

/// A text reading as evidence: the text, or why there is none.
fn evidence_text(r: &Reading<String>) -> String {
    match r {
        Reading::Value(v) => v.clone(),
        Reading::Absent(why) | Reading::Unknown(why) => why.clone(),
    }
}

/// Every port of every PCI RDMA device as (device, port, "dev/port", its sysfs dir), or one
/// not-applicable skip on `host` when there is none.
fn each_pci_port(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&RdmaDevice, &RdmaPort, String, String, &mut Vec<Finding>),
) {
    let Some(devices) = pci_rdma_or_skip(ctx, id, out) else {
        return;
    };
    for (r, _) in devices {
        for p in r.port_list() {
            let subject = format!("{}/{}", r.name, p.port);
            let pdir = format!("/sys/class/infiniband/{}/ports/{}", r.name, p.port);
            check(r, p, subject, pdir, out);
        }
    }
}

/// rdma.port-errors: IB port counters and RoCE/mlx5 hw_counters against published thresholds.
pub(super) fn port_errors(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaPortErrors;
    let uptime = ctx.inv.host.uptime_s.value().copied();
    each_pci_port(ctx, id, out, |_r, p, subject, pdir, out| {
        let Some(Reading::Value(_)) = &p.counters else {
            out.push(Finding::new(
                id,
                subject,
                Status::Skip,
                format!(
                    "port counters unreadable: {}",
                    counters_why(p).unwrap_or("not read")
                ),
            ));
            return;
        };
        let PortCounters {
            evs,
            unreadable,
            fatal,
            fast,
            unjudged,
        } = port_counters(p, &pdir, uptime);
        if !fatal.is_empty() {
            out.push(
                Finding::new(id, subject, Status::Fail, format!("fatal error counters nonzero: {}{}", fatal.join(", "), if fast.is_empty() { String::new() } else { format!("; also {}", fast.join(", ")) }))
                    .evidence(evs)
                    .fix("Drain the node. excessive_buffer_overrun_errors / local_link_integrity_errors mean a physical link outside spec: reseat or replace the cable/transceiver, check the switch port (`ibdiagnet`, `mlxlink -d <dev> -m`); rnr_nak_retry_err means connections were severed (receiver not ready): check the peers and the application. Clear the counters after the repair (`perfquery -x -R`) so a recurrence shows"),
            );
        } else if !fast.is_empty() {
            out.push(
                Finding::new(id, subject, Status::Warn, format!("error counters above their published rates: {}", fast.join(", ")))
                    .evidence(evs)
                    .fix("A degrading link: check the cable/transceiver and switch port (`mlxlink -d <dev> -m -c` shows BER and FEC), reseat or replace it; clear the counters (`perfquery -x -R`) and re-check to see whether they still grow"),
            );
        } else if !unreadable.is_empty() {
            out.push(
                Finding::new(
                    id,
                    subject,
                    Status::Skip,
                    format!("error counters unreadable: {}", unreadable.join("; ")),
                )
                .evidence(evs),
            );
        } else if !unjudged.is_empty() {
            out.push(
                Finding::new(id, subject, Status::Skip, format!("nonzero error counters ({}) but the time since boot is unknown (/proc/uptime: {}): rates not judged", unjudged.join(", "), ctx.inv.host.uptime_s.why().unwrap_or("not read")))
                    .evidence(evs),
            );
        } else {
            let judged = FATAL_COUNTERS
                .iter()
                .map(|(d, n)| (*d, *n))
                .chain(RATE_COUNTERS.iter().map(|(d, n, _, _)| (*d, *n)))
                .filter(|(d, n)| counter(p, d, n).is_some())
                .count();
            if judged == 0 {
                out.push(
                    Finding::new(
                        id,
                        subject,
                        Status::Skip,
                        format!("none of the judged error counters is present in {pdir}/counters or hw_counters"),
                    )
                    .evidence(evs),
                );
                return;
            }
            out.push(
                Finding::new(
                    id,
                    subject,
                    Status::Pass,
                    format!("{judged} error counters within limits"),
                )
                .with(ev(
                    format!("{pdir}/counters"),
                    "fatal counters 0; rate counters within limits",
                ))
                .evidence(evs),
            );
        }
    });
}

/// A port's error counters read for judging: the evidence of each nonzero one, and which are
/// unreadable, fatal (any increment), above their published rate, or not judged for want of
/// the time since boot.
struct PortCounters {
    evs: Vec<super::Evidence>,
    unreadable: Vec<String>,
    fatal: Vec<String>,
    fast: Vec<String>,
    unjudged: Vec<String>,
}

/// Reads the judged and shown error counters of port `p` (`pdir` its sysfs directory, for
/// evidence); rates are per second since boot (`uptime`).
fn port_counters(p: &RdmaPort, pdir: &str, uptime: Option<f64>) -> PortCounters {
    let mut evs = Vec::new();
    // A judged counter that could not be read (garbled), or a standard IB port counter
    // missing from a listed `counters/` (the IB core exposes them all for every port):
    // the port cannot pass. Driver `hw_counters` may legitimately be absent.
    let unreadable: Vec<String> = FATAL_COUNTERS
        .iter()
        .map(|(d, n)| (*d, *n))
        .chain(RATE_COUNTERS.iter().map(|(d, n, _, _)| (*d, *n)))
        .filter(|(d, n)| counter(p, d, n).is_none())
        .filter_map(
            |(d, n)| match counter_reading(p, d, n).and_then(Reading::why) {
                Some(why) => Some(format!("{d}/{n}: {why}")),
                None if d == "counters" => Some(format!("{d}/{n}: missing")),
                None => None,
            },
        )
        .collect();
    let mut fatal = Vec::new();
    for (dir, name) in FATAL_COUNTERS {
        if let Some(v) = counter(p, dir, name)
            && v > 0
        {
            fatal.push(format!("{name} {v}"));
            evs.push(ev(
                format!("{pdir}/{dir}/{name}"),
                format!("{v} (any increment is fatal: {NVSENTINEL})"),
            ));
        }
    }
    let mut fast = Vec::new();
    let mut unjudged = Vec::new();
    for (dir, name, limit, source) in RATE_COUNTERS {
        let Some(v) = counter(p, dir, name) else {
            continue;
        };
        if v == 0 {
            continue;
        }
        match uptime {
            Some(up) => {
                let rate = super::per_second(v, up);
                let shown = format!(
                    "{v} in {:.0} s since boot = at least {rate:.3}/s (limit {limit:.3}/s: {source})",
                    up
                );
                if rate > limit {
                    fast.push(format!("{name} {rate:.3}/s > {limit:.3}/s"));
                }
                evs.push(ev(format!("{pdir}/{dir}/{name}"), shown));
            }
            None => {
                unjudged.push(format!("{name} {v}"));
                evs.push(ev(
                    format!("{pdir}/{dir}/{name}"),
                    format!("{v} (time since boot unknown: rate not judged)"),
                ));
            }
        }
    }
    for (dir, name) in SHOWN_COUNTERS {
        if let Some(v) = counter(p, dir, name)
            && v > 0
            && !FATAL_COUNTERS.contains(&(dir, name))
        {
            evs.push(ev(
                format!("{pdir}/{dir}/{name}"),
                format!("{v} (no published threshold for a cumulative value: shown, not judged)"),
            ));
        }
    }
    PortCounters {
        evs,
        unreadable,
        fatal,
        fast,
        unjudged,
    }
}

/// The kernel log's link-down records naming this port's netdev or its PCI function.
fn log_link_downs<'a>(ctx: &Ctx, log: &'a KernelLog, r: &RdmaDevice, p: &RdmaPort) -> Vec<&'a str> {
    let mut names: Vec<String> = p
        .gid_list()
        .iter()
        .filter_map(|g| g.ndev.value().cloned())
        .collect();
    names.extend(
        ctx.inv
            .netdevs
            .iter()
            .filter(|n| n.bdf.value().is_some() && n.bdf.value().copied() == r.bdf())
            .map(|n| n.name.clone()),
    );
    names.sort();
    names.dedup();
    let bdf = r.bdf().map(|b| b.to_string());
    log.lines
        .iter()
        .filter_map(|l| crate::kmsg::link_down(l))
        .filter(|t| {
            names.iter().any(|n| {
                t.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
                    .any(|w| w == n)
            }) || bdf.as_deref().is_some_and(|b| t.contains(b)) && names.is_empty()
        })
        .collect()
}

/// rdma.link-flaps: link-down events from `link_downed` and the kernel log.
pub(super) fn link_flaps(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaLinkFlaps;
    let log = &*ctx.inv.kernel_log;
    each_pci_port(ctx, id, out, |r, p, subject, pdir, out| {
        let downed = counter(p, "counters", "link_downed");
        let logged = log
            .unavailable
            .is_none()
            .then(|| log_link_downs(ctx, log, r, p));
        let mut evs = vec![ev(
            format!("{pdir}/counters/link_downed"),
            match downed {
                Some(v) => v.to_string(),
                None => counter_reading(p, "counters", "link_downed")
                    .and_then(Reading::why)
                    .or(counters_why(p))
                    .unwrap_or("not present")
                    .to_string(),
            },
        )];
        match &logged {
            Some(lines) => {
                evs.push(ev(
                    log.origin(),
                    format!(
                        "{} link-down records for this port; {}",
                        lines.len(),
                        log.coverage()
                    ),
                ));
                for l in lines.iter().take(5) {
                    evs.push(ev(log.origin(), l.to_string()));
                }
            }
            None => evs.push(ev(
                log.origin(),
                log.unavailable.clone().unwrap_or_default(),
            )),
        }
        let events = downed
            .unwrap_or(0)
            .max(logged.as_ref().map_or(0, |l| l.len() as u64));
        if downed.is_none() && logged.is_none() {
            let mut f = Finding::new(
                id,
                subject,
                Status::Skip,
                "link-down history unknown: link_downed counter and kernel log both unreadable",
            )
            .evidence(evs);
            if log.needs_root {
                f.skip = Some(SkipKind::NotRoot);
            }
            out.push(f);
        } else if events >= 2 {
            out.push(
                Finding::new(id, subject, Status::Fail, format!("link went down {events} times since the counters were cleared / boot: a flapping link"))
                    .evidence(evs)
                    .with(ev("threshold", format!("{AZNHC_FLAP}; {NVSENTINEL}: any link_downed increment is fatal")))
                    .fix("Drain the node: every link-down kills the RDMA connections over it. Reseat or replace the cable/transceiver, check the switch port's log and `mlxlink -d <dev> -m`; clear the counters (`perfquery -x -R`) after the repair"),
            );
        } else if events == 1 {
            out.push(
                Finding::new(id, subject, Status::Warn, "link went down once since the counters were cleared / boot")
                    .evidence(evs)
                    .with(ev("threshold", format!("{NVSENTINEL}: any link_downed increment is fatal to running jobs; {AZNHC_FLAP}")))
                    .fix("If nobody replugged the cable or rebooted the switch, check the cable/transceiver and switch port; clear the counter (`perfquery -x -R`) and watch for a recurrence"),
            );
        } else if downed.is_none() {
            // The kernel log shows no link-down, but the port's own counter (which also counts
            // events from before the log's start) could not be read: not a pass.
            out.push(
                Finding::new(
                    id,
                    subject,
                    Status::Skip,
                    "link-down history incomplete: no link-down in the kernel log, link_downed counter unreadable",
                )
                .evidence(evs),
            );
        } else {
            out.push(Finding::new(id, subject, Status::Pass, "no link-down events").evidence(evs));
        }
    });
}

const MLX5DV: &str = "libmlx5.so.1";

/// rdma.mlx5dv: each PCI RDMA device is a ConnectX (driver mlx5_core) and libmlx5 loads with
/// the direct-verbs entry points; other devices are not applicable.
pub(super) fn mlx5dv(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaMlx5dv;
    let Some(devices) = pci_rdma_or_skip(ctx, id, out) else {
        return;
    };
    for (r, bdf) in devices {
        let driver_path = format!("/sys/bus/pci/devices/{bdf}/driver");
        let f = match ctx.inv.pci.get(&bdf) {
            None => Finding::new(
                id,
                r.name.clone(),
                Status::Skip,
                format!("PCI function {bdf} behind {} was not read", r.name),
            ),
            Some(p) => match p.driver.value().map(String::as_str) {
                None => {
                    let why = p.driver.why().unwrap_or("unknown");
                    Finding::new(
                        id,
                        r.name.clone(),
                        Status::Skip,
                        format!("driver of {bdf} unknown ({why})"),
                    )
                    .with(ev(driver_path, why))
                }
                Some(d) if d != "mlx5_core" => Finding::new(
                    id,
                    r.name.clone(),
                    Status::Skip,
                    format!("driver {d}: mlx5 direct verbs are for ConnectX/BlueField (mlx5_core)"),
                )
                .not_applicable()
                .with(ev(driver_path, d)),
                Some(d) => library_verdict(ctx, id, &r.name).with(ev(driver_path, d)),
            },
        };
        out.push(f);
    }
}

/// The verdict for an mlx5_core device from what is known about libmlx5.
fn library_verdict(ctx: &Ctx, id: CheckId, subject: &str) -> Finding {
    const FIX: &str = "Install rdma-core's mlx5 provider (Debian/Ubuntu: `apt install ibverbs-providers libibverbs1`; RHEL: `dnf install libibverbs`; or MLNX_OFED/DOCA-OFED), which ships libmlx5.so.1";
    if let Some(why) = &ctx.libs.unavailable {
        return Finding::new(
            id,
            subject,
            Status::Skip,
            format!("mlx5_core device; whether {MLX5DV} loads is unknown ({why})"),
        );
    }
    let Some(lib) = ctx.libs.libs.get(MLX5DV) else {
        return Finding::new(
            id,
            subject,
            Status::Skip,
            format!("mlx5_core device; {MLX5DV} was not probed"),
        );
    };
    if !lib.loaded {
        let err = lib.error.clone().unwrap_or_else(|| "not loaded".into());
        return Finding::new(
            id,
            subject,
            Status::Warn,
            format!(
                "mlx5_core device, but {MLX5DV} does not load ({err}): no direct verbs, so no \
                 GPU-initiated RDMA (levels 0-2 are unaffected)"
            ),
        )
        .with(ev(MLX5DV, err))
        .fix(FIX);
    }
    let missing: Vec<&str> = ["mlx5dv_query_device", "mlx5dv_init_obj"]
        .into_iter()
        .filter(|s| lib.symbols.get(*s) == Some(&false))
        .collect();
    let unrecorded: Vec<&str> = ["mlx5dv_query_device", "mlx5dv_init_obj"]
        .into_iter()
        .filter(|s| !lib.symbols.contains_key(*s))
        .collect();
    if !missing.is_empty() {
        return Finding::new(
            id,
            subject,
            Status::Warn,
            format!(
                "{MLX5DV} loads but lacks {}: too old for direct verbs",
                missing.join(", ")
            ),
        )
        .with(ev(MLX5DV, format!("missing {}", missing.join(", "))))
        .fix(FIX);
    }
    // Loading proves the library, not its entry points: a lookup never recorded (a libs.json
    // written without it) is unknown, not a pass.
    if !unrecorded.is_empty() {
        let what = format!("{} not recorded", unrecorded.join(", "));
        return Finding::new(
            id,
            subject,
            Status::Skip,
            format!(
                "mlx5_core device and {MLX5DV} loads, but whether it has the direct-verbs entry points is unknown ({what})"
            ),
        )
        .with(ev(MLX5DV, format!("loaded; {what}")));
    }
    Finding::new(
        id,
        subject,
        Status::Pass,
        format!("mlx5_core device and {MLX5DV} loads: mlx5 direct verbs available"),
    )
    .with(ev(MLX5DV, "loaded"))
}

#[cfg(test)]
mod tests {
    /// Discovery reads only the counters named in `inventory::PORT_COUNTERS` and
    /// `PORT_HW_COUNTERS`: each one judged or shown here must be among them, or it would never
    /// be read.
    #[test]
    fn every_judged_counter_is_read() {
        use crate::inventory::{PORT_COUNTERS, PORT_HW_COUNTERS};
        let read = |d: &str, n: &str| match d {
            "counters" => PORT_COUNTERS.contains(&n),
            _ => PORT_HW_COUNTERS.contains(&n),
        };
        for (d, n) in super::FATAL_COUNTERS
            .iter()
            .copied()
            .chain(super::RATE_COUNTERS.iter().map(|(d, n, _, _)| (*d, *n)))
            .chain(super::SHOWN_COUNTERS.iter().copied())
            .chain([("counters", "link_downed")])
        {
            assert!(read(d, n), "{d}/{n} is judged but never read");
        }
    }

    #[test]
    fn roce_mtus() {
        assert_eq!(super::roce_mtu(9000), 4096);
        assert_eq!(super::roce_mtu(1500), 1024);
        assert_eq!(super::roce_mtu(4200), 4096);
        assert_eq!(super::roce_mtu(100), 0);
    }
}
