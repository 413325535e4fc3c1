//! What GPU-initiated RDMA (level 4: a CUDA kernel posts mlx5 work requests and rings the
//! doorbell itself) needs from the host: `gdr.peer-mapping` (the NVIDIA driver's
//! PeerMappingOverride registry key, which lets CUDA map the NIC's doorbell page for the GPU)
//! and `rdma.mlx5dv` (the RDMA device is a ConnectX served by mlx5_core, and libmlx5's direct
//! verbs load). Kept apart from gdr.rs and rdma.rs because both exist only for level 4.
//!
//! Pure functions of the inventory and library facts: no reads here.

use super::{CheckId, Ctx, Finding, Status, ev};

const PARAMS: &str = "/proc/driver/nvidia/params";
const REGKEY: &str = "PeerMappingOverride";
const MLX5DV: &str = "libmlx5.so.1";

/// The `RegistryDwords` value in /proc/driver/nvidia/params (`RegistryDwords: "K=V;K=V"`):
/// None when the driver prints no such line.
pub fn registry_dwords(params: &str) -> Option<&str> {
    params.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == "RegistryDwords").then(|| v.trim().trim_matches('"'))
    })
}

/// The value given to `key` in a RegistryDwords string (`K=V;K=V;`, values decimal or 0x
/// hex). The key must be spelled as NVIDIA spells it: a differently-cased key is not trusted
/// to take effect (a false warn is cheaper than a false pass). None when absent or not a number.
pub fn registry_value(dwords: &str, key: &str) -> Option<u32> {
    dwords.split(';').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        if k.trim() != key {
            return None;
        }
        let v = v.trim();
        match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u32::from_str_radix(h, 16).ok(),
            None => v.parse().ok(),
        }
    })
}

const PEER_MAPPING_FIX: &str = "Add `options nvidia NVreg_RegistryDwords=\"PeerMappingOverride=1;\"` to /etc/modprobe.d/nvidia.conf (append to an existing NVreg_RegistryDwords string, keys separated by ';'), then reload the driver (stop GPU users and nvidia-persistenced, `rmmod nvidia_peermem nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia`, or reboot; update the initramfs if the module loads from it). It lets any CUDA process map other devices' MMIO for its GPU: see `gpudoctor explain gdr.peer-mapping` for the trade-off. Without it, GPU-initiated RDMA uses a CPU proxy thread to ring the doorbell";

/// gdr.peer-mapping: PeerMappingOverride=1, which `cuMemHostRegister(...,
/// CU_MEMHOSTREGISTER_IOMEMORY)` of the NIC's UAR page needs for the `gpu` doorbell handler.
pub(super) fn peer_mapping(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::GdrPeerMapping;
    let h = &ctx.inv.host;
    if ctx.topo.gpus.is_empty() {
        out.push(Finding::new(id, "host", Status::Skip, "no NVIDIA GPUs").not_applicable());
        return;
    }
    if ctx.topo.nics.is_empty() {
        // No NIC seen: not applicable only when none can hide.
        if !super::rdma::nic_gaps(ctx, id, out) {
            out.push(
                Finding::new(
                    id,
                    "host",
                    Status::Skip,
                    "no RDMA NICs: GPU-initiated RDMA not applicable",
                )
                .not_applicable(),
            );
        }
        return;
    }
    let Some(params) = &h.nvidia_params else {
        let why = h
            .unread
            .get("nvidia_params")
            .cloned()
            .unwrap_or_else(|| "not read".into());
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!(
                    "{PARAMS} unreadable ({why}): whether the driver allows peer mappings is \
                     unknown (is the NVIDIA driver loaded? see driver.nvidia-loaded)"
                ),
            )
            .with(ev(PARAMS, why)),
        );
        return;
    };
    let Some(dwords) = registry_dwords(params) else {
        out.push(
            Finding::new(
                id,
                "host",
                Status::Skip,
                format!("{PARAMS} has no RegistryDwords line: the regkey state is unknown"),
            )
            .with(ev(PARAMS, "no RegistryDwords line")),
        );
        return;
    };
    let evidence = ev(format!("{PARAMS} RegistryDwords"), format!("\"{dwords}\""));
    let f = match registry_value(dwords, REGKEY) {
        Some(1) => Finding::new(
            id,
            "host",
            Status::Pass,
            "PeerMappingOverride=1: a GPU kernel can ring the NIC's doorbell itself (gpu handler)",
        ),
        Some(v) => Finding::new(
            id,
            "host",
            Status::Warn,
            format!(
                "PeerMappingOverride={v} (not 1): the driver refuses to map the NIC's doorbell \
                 for the GPU in processes that are not root; GPU-initiated RDMA there falls back \
                 to a CPU proxy thread ringing it"
            ),
        )
        .fix(PEER_MAPPING_FIX),
        None => Finding::new(
            id,
            "host",
            Status::Warn,
            "PeerMappingOverride is not set: the driver refuses to map the NIC's doorbell for \
             the GPU in processes that are not root; GPU-initiated RDMA there falls back to a \
             CPU proxy thread ringing it",
        )
        .fix(PEER_MAPPING_FIX),
    };
    out.push(f.with(evidence));
}

/// rdma.mlx5dv: each PCI RDMA device is a ConnectX (driver mlx5_core) and libmlx5 loads with
/// the direct-verbs entry points; other devices are not applicable.
pub(super) fn mlx5dv(ctx: &Ctx, out: &mut Vec<Finding>) {
    let id = CheckId::RdmaMlx5dv;
    let Some(devices) = super::rdma::pci_rdma_or_skip(ctx, id, out) else {
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
            Some(p) => match p.driver.as_deref() {
                None => {
                    let why = p
                        .unread
                        .get("driver")
                        .cloned()
                        .unwrap_or_else(|| "unknown".into());
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
    use super::*;

    #[test]
    fn registry_dwords_parse() {
        let p =
            "EnableMSI: 1\nRegistryDwords: \"PeerMappingOverride=1;RMForceX=0x10\"\nRmMsg: \"\"\n";
        let d = registry_dwords(p).unwrap();
        assert_eq!(d, "PeerMappingOverride=1;RMForceX=0x10");
        assert_eq!(registry_value(d, REGKEY), Some(1));
        assert_eq!(registry_value(d, "RMForceX"), Some(16));
        assert_eq!(registry_value(d, "rmforcex"), None);
        assert_eq!(registry_value(d, "Other"), None);
        assert_eq!(registry_dwords("RegistryDwords: \"\"\n"), Some(""));
        assert_eq!(registry_value("", REGKEY), None);
        assert_eq!(
            registry_value(" PeerMappingOverride = 0x0 ;", REGKEY),
            Some(0)
        );
        assert_eq!(registry_value("PeerMappingOverride=yes;", REGKEY), None);
        // A per-device line is not the global one.
        assert_eq!(
            registry_dwords(
                "RegistryDwordsPerDevice: \"pci=0000:1b:00.0;PeerMappingOverride=1\"\n"
            ),
            None
        );
    }
}
