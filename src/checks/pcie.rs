//! pcie.*: ACS redirect on the bridges GPUDirect traffic crosses, link training, device
//! control, AER counters.

use super::{CheckId, Ctx, Finding, Status, ev};
use crate::inventory::PciFunction;
use crate::pci::Bdf;
use crate::pci::config::{Acs, Coverage};
use crate::topo::{BridgeRole, Device, DeviceKind};
use std::collections::{BTreeMap, BTreeSet};

/// Bridges a peer-to-peer transfer between `a` and `b` crosses (where ACS is enforced).
pub fn bridges_between(ctx: &Ctx, a: Bdf, b: Bdf) -> Vec<Bdf> {
    let (Some(fa), Some(fb)) = (ctx.inv.pci.get(&a), ctx.inv.pci.get(&b)) else {
        return Vec::new();
    };
    let mut set = Vec::with_capacity(fa.upstream.len() + fb.upstream.len());
    if fa.root_complex == fb.root_complex {
        let common = fa
            .upstream
            .iter()
            .zip(&fb.upstream)
            .take_while(|(x, y)| x == y)
            .count();
        if common > 0 {
            set.push(fa.upstream[common - 1]);
        }
        set.extend(fa.upstream[common..].iter().copied());
        set.extend(fb.upstream[common..].iter().copied());
    } else {
        set.extend(fa.upstream.iter().copied());
        set.extend(fb.upstream.iter().copied());
    }
    // In bus order, each once.
    set.sort_unstable();
    set.dedup();
    set
}

fn needs_root(f: &PciFunction) -> Option<String> {
    match &f.config {
        None => Some(
            f.unread
                .get("config")
                .cloned()
                .unwrap_or_else(|| "config unreadable".into()),
        ),
        Some(c) if c.coverage != Coverage::Extended => Some(format!(
            "only {} bytes of config space readable (needs root for the 4096-byte extended space)",
            c.length
        )),
        Some(_) => None,
    }
}

fn acs_bits(ctl: u16) -> String {
    let mut v = Vec::new();
    if ctl & Acs::P2P_REQUEST_REDIRECT != 0 {
        v.push("P2P Request Redirect");
    }
    if ctl & Acs::P2P_COMPLETION_REDIRECT != 0 {
        v.push("P2P Completion Redirect");
    }
    if ctl & Acs::UPSTREAM_FORWARDING != 0 {
        v.push("Upstream Forwarding");
    }
    v.join(", ")
}

pub(super) fn acs_redirect(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieAcsRedirect;
    let t = ctx.topo;
    if t.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    // bridge -> the device pairs whose traffic crosses it (borrowed names: joined once per
    // bridge below, not formatted once per bridge and pair, tens of thousands of strings on a
    // large host).
    enum Pair<'a> {
        Nic(&'a str, &'a str),
        Gpus(&'a str, &'a str),
    }
    let mut users: BTreeMap<Bdf, Vec<Pair>> = BTreeMap::new();
    for c in &t.closest_nics {
        let Some(g) = t.gpu(&c.gpu) else {
            continue;
        };
        for nic_label in &c.nics {
            let Some(n) = t.nic(nic_label) else {
                continue;
            };
            for b in bridges_between(ctx, g.bdf, n.bdf) {
                users
                    .entry(b)
                    .or_default()
                    .push(Pair::Nic(&g.label, &n.rdma_device));
            }
        }
    }
    for (i, a) in t.gpus.iter().enumerate() {
        for b in &t.gpus[i + 1..] {
            for br in bridges_between(ctx, a.bdf, b.bdf) {
                users
                    .entry(br)
                    .or_default()
                    .push(Pair::Gpus(&a.label, &b.label));
            }
        }
    }
    if users.is_empty() {
        out.push(Finding::new(id, "host", Status::Pass, "no PCIe bridges between GPUs and their NICs or between GPUs (flat PCI): nothing can redirect peer traffic"));
        return;
    }
    // Every redirecting bridge, for the one boot parameter that must name them all: the kernel
    // keeps only the last `disable_acs_redir=` it is given (drivers/pci/pci.c, pci_setup) and
    // takes a semicolon-separated device list (Documentation/admin-guide/kernel-parameters.txt).
    let redirecting: Vec<String> = users
        .keys()
        .filter(|b| {
            ctx.inv.pci.get(b).is_some_and(|f| {
                needs_root(f).is_none()
                    && f.config
                        .as_ref()
                        .and_then(|c| c.acs)
                        .is_some_and(|a| a.redirect_bits() != 0)
            })
        })
        .map(Bdf::to_string)
        .collect();
    let boot_param = format!("pci=disable_acs_redir={}", redirecting.join(";"));
    let all_of_them = if redirecting.len() > 1 {
        format!(
            " (one parameter for {} flagged here: the kernel keeps only the last disable_acs_redir= it is given)",
            match redirecting.len() {
                2 => "both bridges".to_string(),
                n => format!("all {n} bridges"),
            }
        )
    } else {
        String::new()
    };
    for (b, pairs) in users {
        let Some(f) = ctx.inv.pci.get(&b) else {
            continue;
        };
        let mut named = String::new();
        let mut last: Option<(&str, &str)> = None;
        for p in &pairs {
            let (a, b) = match *p {
                Pair::Nic(a, b) | Pair::Gpus(a, b) => (a, b),
            };
            // The same pair twice in a row (two routes through one bridge) is named once.
            if last == Some((a, b)) {
                continue;
            }
            last = Some((a, b));
            if !named.is_empty() {
                named.push_str(", ");
            }
            named.push_str(a);
            named.push_str("<->");
            named.push_str(b);
        }
        let pairs_ev = ev("peer paths through this bridge", named);
        let subject = b.to_string();
        if let Some(why) = needs_root(f) {
            out.push(
                Finding::new(id, subject, Status::Skip, format!("needs root: {why}"))
                    .not_root()
                    .with(pairs_ev),
            );
            continue;
        }
        let cfg = f.config.as_ref().expect("checked by needs_root");
        match cfg.acs {
            None if cfg.ext_caps_readable => out.push(
                Finding::new(id, subject, Status::Pass, "bridge has no ACS capability: peer traffic is routed directly").with(pairs_ev),
            ),
            None => out.push(
                Finding::new(id, subject, Status::Skip, format!("extended capability list unreadable: {}", cfg.problems.join("; "))).with(pairs_ev),
            ),
            Some(a) if a.redirect_bits() != 0 => out.push(
                Finding::new(id, subject.clone(), Status::Fail, format!(
                    "ACS {} enabled: peer-to-peer traffic is bounced through the root complex (GPUDirect RDMA and GPU P2P slow or broken)",
                    acs_bits(a.control)
                ))
                .with(ev(format!("{}/config ACS Control @0x{:03x}", f.sysfs_path, a.offset + 6), format!("0x{:04x}", a.control)))
                .with(pairs_ev)
                .fix(format!(
                    "Disable ACS in the BIOS (often \"ACS Control\"/\"PCIe ACS\" or \"BIOS P2P\" settings), or at boot with `{boot_param}`{all_of_them} (kernel >= 4.19), or at run time `setpci -s {subject} ECAP_ACS+0x6.w=0000` (not persistent). Only do this where VM isolation via IOMMU groups is not needed"
                )),
            ),
            Some(a) => out.push(
                Finding::new(id, subject, Status::Pass, "ACS present, no P2P redirect bits set")
                    .with(ev(format!("{}/config ACS Control @0x{:03x}", f.sysfs_path, a.offset + 6), format!("0x{:04x}", a.control)))
                    .with(pairs_ev),
            ),
        }
    }
}

/// Devices whose upstream link we judge: GPUs, NICs and the switch upstream ports above them.
/// Each physical link is judged once, from its downstream end.
fn link_subjects(ctx: &Ctx) -> Vec<Bdf> {
    let mut set = BTreeSet::new();
    for d in &ctx.topo.devices {
        // A NIC without its RDMA device is still a NIC on the bus (issue 28).
        let is_nic = ctx.topo.nics.iter().any(|n| n.bdf == d.bdf)
            || ctx.topo.nics_without_rdma.iter().any(|n| n.bdf == d.bdf);
        if d.kind == DeviceKind::Gpu || is_nic {
            set.insert(d.bdf);
            for u in &d.upstream {
                if let Some(ud) = ctx.topo.device(*u)
                    && ud.role == Some(BridgeRole::SwitchUpstream)
                {
                    set.insert(*u);
                }
            }
        }
    }
    // A NIC whose function was not read is still a subject (judged unknown by `each_link`).
    set.extend(ctx.topo.nics.iter().map(|n| n.bdf));
    set.into_iter().collect()
}

/// Every link subject with what the link checks need: the device, its function, its sysfs
/// dir, who it is ("GPU3", "mlx5_0", "switch upstream port"), its link and the port above.
#[allow(clippy::type_complexity)]
fn each_link(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(&Device, &PciFunction, &str, &str, String, Option<&Device>, &mut Vec<Finding>),
) {
    let subjects = link_subjects(ctx);
    if subjects.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no GPUs or RDMA NICs").not_applicable());
        return;
    }
    for b in subjects {
        let (Some(d), Some(f)) = (ctx.topo.device(b), ctx.inv.pci.get(&b)) else {
            out.push(unlisted(id, b, &b.to_string()));
            continue;
        };
        let who = match d.kind {
            DeviceKind::Gpu => ctx
                .topo
                .gpus
                .iter()
                .find(|g| g.bdf == b)
                .map(|g| g.label.clone())
                .unwrap_or_default(),
            DeviceKind::Bridge => "switch upstream port".into(),
            _ => ctx
                .topo
                .nics
                .iter()
                .filter(|n| n.bdf == b)
                .map(|n| n.rdma_device.clone())
                .collect::<Vec<_>>()
                .join("/"),
        };
        let who = if who.is_empty() {
            "NIC without RDMA device".to_string()
        } else {
            who
        };
        if let Some(pf) = f.physfn {
            out.push(vf_not_applicable(id, b, &who, pf, "no PCIe link of its own (its link registers read 0); its physical function's link carries its traffic and is checked"));
            continue;
        }
        let parent = d.upstream.last().and_then(|p| ctx.topo.device(*p));
        check(d, f, &f.sysfs_path, &who, b.to_string(), parent, out);
    }
}

/// An SR-IOV virtual function where a check is about something only its physical function has.
fn vf_not_applicable(
    id: CheckId,
    vf: crate::pci::Bdf,
    who: &str,
    pf: crate::pci::Bdf,
    why: &str,
) -> Finding {
    Finding::new(
        id,
        vf.to_string(),
        Status::Skip,
        format!("{who} is an SR-IOV virtual function of {pf}: {why}"),
    )
    .with(ev(
        format!("/sys/bus/pci/devices/{vf}/physfn"),
        pf.to_string(),
    ))
    .not_applicable()
}

/// pcie.link-width: trained at the device's full width.
pub(super) fn link_width(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieLinkWidth;
    each_link(ctx, id, out, |d, f, dir, who, subject, _parent, out| {
        let l = &d.link;
        match (l.cur_width, l.max_width) {
            (Some(c), Some(m)) if c < m => out.push(
                Finding::new(id, subject.clone(), Status::Fail, format!("{who} link trained x{c}, capable of x{m}: bandwidth cut to {}%", u32::from(c) * 100 / u32::from(m)))
                    .with(ev(link_at(f, dir, "current_link_width"), c.to_string()))
                    .with(ev(link_at(f, dir, "max_link_width"), m.to_string()))
                    .fix("Reseat the card/cable and check the riser; confirm the slot's electrical width and BIOS lane bifurcation settings; a persistent downtrain is a hardware fault (check `dmesg` for link errors)"),
            ),
            (Some(c), Some(m)) => out.push(
                Finding::new(id, subject.clone(), Status::Pass, format!("{who} x{c} (max x{m})"))
                    .with(ev(link_at(f, dir, "current_link_width"), c.to_string())),
            ),
            _ => out.push(Finding::new(id, subject.clone(), Status::Skip, format!(
                "{who} link width unknown: {}",
                f.unread.get("current_link_width").or(f.unread.get("max_link_width")).cloned().unwrap_or_default()
            ))),
        }
    });
}

/// pcie.link-speed: trained at the best speed both ends support.
pub(super) fn link_speed(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieLinkSpeed;
    each_link(ctx, id, out, |d, f, dir, who, subject, parent, out| {
        let l = &d.link;
        let port_max = parent.and_then(|p| p.link.max_gen);
        match (l.cur_gen, l.max_gen) {
            (Some(c), Some(m)) => {
                let best = port_max.map_or(m, |p| p.min(m));
                let evs = vec![
                    ev(link_at(f, dir, "current_link_speed"), format!("Gen{c}")),
                    ev(link_at(f, dir, "max_link_speed"), format!("Gen{m}")),
                ];
                if c >= best {
                    out.push(
                        Finding::new(
                            id,
                            subject.clone(),
                            Status::Pass,
                            format!("{who} Gen{c} (best both ends support: Gen{best})"),
                        )
                        .evidence(evs),
                    );
                } else if d.kind == DeviceKind::Gpu {
                    out.push(
                        Finding::new(id, subject.clone(), Status::Warn, format!("{who} at Gen{c}, capable of Gen{best}: idle downshift possible (GPUs lower link speed when idle); the level-1 CUDA probe re-reads it under load"))
                            .evidence(evs)
                            .fix("Run `gpudoctor check --level 1` to read the link under load; if it stays low, reseat the GPU and check BIOS PCIe speed settings"),
                    );
                } else {
                    out.push(
                        Finding::new(id, subject.clone(), Status::Fail, format!("{who} trained Gen{c}, both ends support Gen{best}"))
                            .evidence(evs)
                            .fix("Check BIOS PCIe link speed settings (Auto/GenN), reseat the card or cable, update NIC/switch firmware; `dmesg` shows link retraining errors"),
                    );
                }
            }
            _ => out.push(Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                format!(
                    "{who} link speed unknown: {}",
                    f.unread
                        .get("current_link_speed")
                        .or(f.unread.get("max_link_speed"))
                        .cloned()
                        .unwrap_or_default()
                ),
            )),
        }
    });
}

/// pcie.slot-mismatch: the port above can carry what the device can do.
pub(super) fn slot_mismatch(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieSlotMismatch;
    each_link(ctx, id, out, |d, f, dir, who, subject, parent, out| {
        let l = &d.link;
        match (parent, l.max_gen, l.max_width) {
            // A port above that was not read (left out of the topology): unknown, not "none".
            (None, _, _) if !d.upstream.is_empty() => out.push(Finding::new(id, subject.clone(), Status::Skip, format!(
                "{who}: the port above ({}) was not read: {}",
                d.upstream[d.upstream.len() - 1],
                ctx.inv.notes.iter().find(|n| d.upstream.last().is_some_and(|p| n.path.ends_with(&p.to_string()))).map_or("not among the PCI devices read", |n| n.reason.as_str())
            ))),
            (None, _, _) => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("{who} sits on the root bus (no port above to compare; typical in VMs)")).not_applicable()),
            (Some(p), Some(dg), Some(dw)) => match (p.link.max_gen, p.link.max_width) {
                (Some(pg), Some(pw)) if pg < dg || pw < dw => out.push(
                    Finding::new(id, subject.clone(), Status::Fail, format!("{who} can do Gen{dg} x{dw} but the port above ({}) tops out at Gen{pg} x{pw}", p.bdf))
                        .with(ev(link_at(f, dir, "max_link_speed, max_link_width"), format!("Gen{dg} x{dw}")))
                        .with(ev(ctx.inv.pci.get(&p.bdf).map_or_else(|| format!("{} max_link_speed, max_link_width", p.bdf), |pf| link_at(pf, &pf.sysfs_path, "max_link_speed, max_link_width")), format!("Gen{pg} x{pw}")))
                        .fix("Move the card to a slot wired for its full speed and width (check the board manual: some slots are Gen4 or x8 electrically), or check riser/retimer capability"),
                ),
                (Some(pg), Some(pw)) => out.push(
                    Finding::new(id, subject.clone(), Status::Pass, format!("{who} Gen{dg} x{dw} under a Gen{pg} x{pw} port")),
                ),
                _ => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("port above ({}) link capability unknown", p.bdf))),
            },
            _ => out.push(Finding::new(id, subject.clone(), Status::Skip, format!("{who} link capability unknown"))),
        }
    });
}

/// Where a link value was read: the sysfs attribute `attr` ("current_link_width", ...), or,
/// when the link came from config space, the register behind it (Link Status for the current
/// values, Link Capabilities for the maximum).
fn link_at(f: &PciFunction, dir: &str, attr: &str) -> String {
    match f.link.pcie_cap {
        None => format!("{dir}/{attr}"),
        Some(o) if attr.starts_with("current") => {
            format!("{dir}/config Link Status @0x{:02x}", o + 0x12)
        }
        Some(o) => format!("{dir}/config Link Capabilities @0x{:02x}", o + 0x0c),
    }
}

/// A subject (an RDMA device's function) that is not among the PCI devices read: nothing of
/// it can be judged.
fn unlisted(id: CheckId, b: Bdf, who: &str) -> Finding {
    Finding::new(
        id,
        b.to_string(),
        Status::Skip,
        format!(
            "{who}: PCI function {b} is not among the PCI devices read (/sys/bus/pci/devices/{b} missing or unreadable): cannot be judged"
        ),
    )
}

/// GPUs and NIC functions (a dual-port NIC's function once), each with who it is and whether
/// it is a NIC; or one skip on `host` when there are none.
fn each_endpoint(
    ctx: &Ctx,
    id: CheckId,
    out: &mut Vec<Finding>,
    mut check: impl FnMut(Bdf, &PciFunction, String, bool, &mut Vec<Finding>),
) {
    let t = ctx.topo;
    let mut subjects: Vec<(Bdf, String, bool)> = t
        .gpus
        .iter()
        .map(|g| (g.bdf, g.label.clone(), false))
        .collect();
    let mut seen = BTreeSet::new();
    for n in &t.nics {
        if seen.insert(n.bdf) {
            let names: Vec<String> = t
                .nics
                .iter()
                .filter(|x| x.bdf == n.bdf)
                .map(|x| x.rdma_device.clone())
                .collect();
            subjects.push((n.bdf, names.join("/"), true));
        }
    }
    // A NIC without its RDMA device is still a NIC on the bus (issue 28).
    for n in &t.nics_without_rdma {
        if seen.insert(n.bdf) {
            subjects.push((n.bdf, "NIC without RDMA device".into(), true));
        }
    }
    if subjects.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no GPUs or RDMA NICs").not_applicable());
        return;
    }
    for (b, who, is_nic) in subjects {
        match ctx.inv.pci.get(&b) {
            Some(f) => check(b, f, who, is_nic, out),
            None => out.push(unlisted(id, b, &who)),
        }
    }
}

/// pcie.devctl: MaxReadReq and relaxed ordering in Device Control.
pub(super) fn devctl(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieDevctl;
    each_endpoint(ctx, id, out, |b, f, who, is_nic, out| {
        let subject = b.to_string();
        match f.config.as_ref().and_then(|c| c.pcie.clone()) {
            Some(p) => {
                let src = ev(
                    format!(
                        "{}/config Device Control @0x{:02x}",
                        f.sysfs_path,
                        p.offset + 8
                    ),
                    format!(
                        "MaxReadReq {} B, MaxPayload {} B, relaxed ordering {}",
                        p.max_read_request_bytes,
                        p.max_payload_bytes,
                        if p.relaxed_ordering { "on" } else { "off" }
                    ),
                );
                if is_nic && !p.relaxed_ordering {
                    out.push(Finding::new(id, subject, Status::Warn, format!("{who}: relaxed ordering disabled in Device Control: RDMA writes into GPU memory lose bandwidth on hosts that need it (AMD EPYC, Grace, some Intel)"))
                        .with(src)
                        .fix("Relaxed ordering is off in the NIC's Device Control register (bit 4), so no write it makes can be relaxed, whatever the firmware asks: the BIOS or the kernel's quirk list for this root complex turned it off. Check the BIOS PCIe relaxed-ordering setting; `setpci -s BDF CAP_EXP+8.w` shows the register. On ConnectX, `mlxconfig -d <dev> query PCI_WR_ORDERING` shows the firmware policy: per_mkey(0), the default, relaxes the writes of memory regions registered with IBV_ACCESS_RELAXED_ORDERING (NCCL asks for it); force_relax(1) relaxes every write"));
                } else if is_nic && p.max_read_request_bytes < 512 {
                    out.push(Finding::new(id, subject, Status::Warn, format!("{who}: MaxReadReq {} B: small read requests limit RDMA read/send bandwidth", p.max_read_request_bytes))
                        .with(src)
                        .fix("Raise MaxReadReq (ConnectX: `mlxconfig ... set MAX_ACC_OUT_READ`/`setpci -s BDF CAP_EXP+8.w=5000:7000` for 4096 B), or check the BIOS `MaxReadRequest` setting"));
                } else {
                    out.push(
                        Finding::new(
                            id,
                            subject,
                            Status::Pass,
                            format!(
                                "{who}: MaxReadReq {} B, relaxed ordering {}",
                                p.max_read_request_bytes,
                                if p.relaxed_ordering { "on" } else { "off" }
                            ),
                        )
                        .with(src),
                    );
                }
            }
            None => {
                let root = f
                    .config
                    .as_ref()
                    .is_some_and(|c| c.coverage == Coverage::Header);
                let why = match &f.config {
                    Some(c) if c.coverage == Coverage::Header => format!(
                        "needs root: only {} bytes of config space readable",
                        c.length
                    ),
                    Some(c) => format!("PCIe capability not found ({})", c.problems.join("; ")),
                    None => f.unread.get("config").cloned().unwrap_or_default(),
                };
                let skip = Finding::new(id, subject, Status::Skip, format!("{who}: {why}"));
                out.push(if root { skip.not_root() } else { skip });
            }
        }
    });
}

/// pcie.aer: no errors in the AER counters.
pub(super) fn aer(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::PcieAer;
    each_endpoint(ctx, id, out, |b, f, who, _is_nic, out| {
        let subject = b.to_string();
        let counted = ctx
            .inv
            .extras
            .get(&b)
            .map(|x| &x.aer)
            .filter(|a| !a.is_empty());
        // A counter file that could not be read or parsed: its count is unknown, and so is
        // "no errors" (only errors that were counted are a fact).
        let unread: Vec<String> = crate::inventory::AER_FILES
            .iter()
            .filter(|n| counted.is_none_or(|a| !a.contains_key(**n)))
            .map(|n| {
                f.unread
                    .get(*n)
                    .cloned()
                    .unwrap_or_else(|| format!("{n}: not read"))
            })
            .collect();
        match counted {
            Some(aer) => {
                let total: u64 = aer.values().sum();
                let evs = aer
                    .iter()
                    .map(|(k, v)| ev(format!("{}/{k} TOTAL", f.sysfs_path), v.to_string()))
                    .chain(
                        unread
                            .iter()
                            .map(|w| ev("unreadable AER counters", w.clone())),
                    )
                    .collect();
                if total > 0 {
                    out.push(Finding::new(id, subject, Status::Warn, format!("{who}: {total} PCIe errors counted since boot"))
                        .evidence(evs)
                        .fix("Check `dmesg` for AER reports; correctable errors that keep growing mean a marginal link (reseat, replace riser/cable, update firmware); any fatal/non-fatal error needs hardware service"));
                } else if !unread.is_empty() {
                    out.push(
                        Finding::new(
                            id,
                            subject,
                            Status::Skip,
                            format!(
                                "{who}: AER counters partly unreadable ({})",
                                unread.join("; ")
                            ),
                        )
                        .evidence(evs),
                    );
                } else {
                    out.push(
                        Finding::new(
                            id,
                            subject,
                            Status::Pass,
                            format!("{who}: no AER errors counted"),
                        )
                        .evidence(evs),
                    );
                }
            }
            // A VF without the files: no AER capability of its own (a read error is still unknown).
            _ if f.physfn.is_some()
                && f.unread
                    .get("aer_dev_correctable")
                    .is_none_or(|r| r.ends_with("not present")) =>
            {
                let pf = f.physfn.unwrap_or(b);
                out.push(vf_not_applicable(id, b, &who, pf, "no AER capability of its own; errors on its link are counted on its physical function"));
            }
            _ => out.push(Finding::new(
                id,
                subject,
                Status::Skip,
                format!(
                    "{who}: AER counters unavailable ({})",
                    f.unread
                        .get("aer_dev_correctable")
                        .cloned()
                        .unwrap_or_else(|| "not read".into())
                ),
            )),
        }
    });
}

/// Checks that judge GPUs, NICs or the bridges between them one device at a time: a PCI
/// function that could be one of those but could not be identified is a subject none of them
/// judged.
const DEVICE_CHECKS: [CheckId; 16] = [
    CheckId::PcieAcsRedirect,
    CheckId::IommuMode,
    CheckId::GpuBar1,
    CheckId::PcieLinkWidth,
    CheckId::PcieLinkSpeed,
    CheckId::PcieSlotMismatch,
    CheckId::NumaGpuNic,
    CheckId::TopoGpuNicPairing,
    CheckId::GdrPath,
    CheckId::PcieDevctl,
    CheckId::PcieAer,
    CheckId::GpuPersistence,
    CheckId::GpuEcc,
    CheckId::GpuRowRemap,
    CheckId::GpuP2p,
    CheckId::GpuNvlinkDown,
];

/// PCI functions that may be a GPU or a NIC but are not known to be either, with why: the
/// function could not be read at all (left out of the topology), it is an NVIDIA function whose
/// class could not be read, a display controller whose vendor could not be read, or NVML names
/// a GPU at an address the PCI device list does not hold. "Is there any GPU" is unknown while any of these remain.
pub(super) fn unidentified(ctx: &Ctx) -> Vec<(Bdf, String)> {
    let mut out = BTreeMap::new();
    for f in ctx.inv.pci.values() {
        // GPUs are NVIDIA display controllers; a function of another vendor is none, whatever
        // its class (NICs are found from their RDMA devices, not their class).
        let unread = |k: &str| {
            f.unread
                .get(k)
                .map_or("not read", String::as_str)
                .to_string()
        };
        let why = match (f.class.map(crate::pci::ClassCode), f.vendor) {
            (_, Some(v)) if v != crate::pci::VENDOR_NVIDIA => None,
            (None, Some(_)) => Some(format!(
                "an NVIDIA function whose class could not be read ({})",
                unread("class")
            )),
            (None, None) => Some(format!(
                "neither its vendor nor its class could be read ({}; {})",
                unread("vendor"),
                unread("class")
            )),
            (Some(c), None) if c.is_display() => Some(format!(
                "a display controller whose vendor could not be read ({})",
                unread("vendor")
            )),
            _ => None,
        };
        if let Some(why) = why {
            out.insert(f.bdf, why);
        }
    }
    for n in &ctx.inv.notes {
        let Some(b) = n
            .path
            .strip_prefix("/sys/bus/pci/devices/")
            .and_then(|b| b.parse::<Bdf>().ok())
        else {
            continue;
        };
        if !ctx.inv.pci.contains_key(&b) {
            out.insert(b, format!("it could not be read ({})", n.reason));
        }
    }
    for g in &ctx.inv.nvml.gpus {
        if let Some(b) = g.bdf().filter(|b| !ctx.inv.pci.contains_key(b)) {
            out.entry(b).or_insert_with(|| {
                "NVML names a GPU there, and /sys/bus/pci/devices does not list it".to_string()
            });
        }
    }
    out.into_iter().collect()
}

/// An unknown skip from every device check for every unidentified function it has no finding
/// on (`found`: every finding so far).
pub(super) fn unidentified_skips(ctx: &Ctx, found: &[Finding]) -> Vec<Finding> {
    let mut out = Vec::new();
    for (b, why) in unidentified(ctx) {
        let subject = b.to_string();
        for id in DEVICE_CHECKS {
            if found.iter().any(|f| f.id == id && f.subject == subject) {
                continue;
            }
            out.push(Finding::new(
                id,
                subject.clone(),
                Status::Skip,
                format!("PCI function {b} may be a GPU or NIC this check did not judge: {why}"),
            ));
        }
    }
    out
}
