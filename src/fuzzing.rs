//! The fuzz targets' bodies, one function per target: `fuzz/fuzz_targets/<target>.rs` calls
//! it under libFuzzer (`scripts/fuzz`), and `tests/it/fuzz.rs` replays the committed corpus and
//! regressions through the same function in the normal suite. A panic is a finding.

use std::time::{Duration, Instant};

/// The bundle reader over a whole archive, with small limits (the checks are the same at any
/// size; small keeps each run fast).
pub fn bundle_limits() -> crate::bundle::read::Limits {
    crate::bundle::read::Limits {
        entries: 2000,
        entry_bytes: 1 << 20,
        total_bytes: 8 << 20,
    }
}

pub fn bundle_archive(data: &[u8]) {
    let _ = crate::bundle::read::extract_from(std::io::Cursor::new(data), bundle_limits());
}

/// The serving side of the two-node handshake: without the token no input may pass.
pub fn oob_server(data: &[u8]) {
    use crate::rdma::oob::{Channel, Script, server_handshake};
    let t = Duration::from_secs(5);
    let mut chan = Channel::new(Script::new(data.to_vec()), "fuzz".into(), t);
    let r = server_handshake(&mut chan, "fuzz-token", Instant::now() + t, t);
    assert!(
        r.is_err(),
        "an input passed the handshake without the token"
    );
}

/// The PCI config-space capability walkers (standard and extended lists).
pub fn pci_config(data: &[u8]) {
    let c = crate::pci::config::ConfigSpace::parse(data);
    let _ = format!("{c:?}");
}

/// The recorded-tree documents: nvml.json, libs.json, kmsg.json, manifest.json, probe samples.
pub fn recorded_docs(data: &[u8]) {
    let _ = crate::nvml::NvmlSnapshot::from_json(data);
    if let Ok(k) = crate::kmsg::KernelLog::from_json(data) {
        let _ = k.xids();
        let _ = k.coverage();
    }
    let _ = crate::libs::LibFacts::from_json(data);
    if let Ok(m) = crate::bundle::Manifest::from_json(data) {
        let _ = m.check();
        let _ = m.recorded_errors();
    }
    let _ = serde_json::from_slice::<crate::probes::ProbeReport>(data);
}

/// Every sysfs value parser over the same arbitrary text: cpulists, numa_node, NUMA distances,
/// hex (class, vendor, device), link speed and width, resource tables, AER counters, GIDs,
/// port/phys state, link layer, GID type, BDFs, NVRM version lines.
pub fn sysfs_values(data: &[u8]) {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    if let Some(set) = crate::numa::parse_cpulist(s) {
        // What parses formats back to a list that parses to the same set.
        let again = crate::numa::format_cpulist(&set);
        assert_eq!(crate::numa::parse_cpulist(&again), Some(set), "{again}");
    }
    let _ = crate::numa::parse_numa_node(s);
    let _ = crate::numa::parse_distances(s);
    let _ = crate::pci::parse_hex(s).map(crate::pci::ClassCode);
    if let Some(g) = crate::pci::gen_from_speed(s) {
        let _ = crate::pci::speed_of_gen(g);
        if let Some(w) = crate::pci::parse_width(s) {
            let _ = crate::pci::link_gbps_per_direction(g, w);
        }
    }
    let _ = crate::pci::parse_width(s);
    let _ = crate::inventory::parse_resources(s);
    let _ = crate::inventory::parse_aer_total(s);
    let _ = crate::verbs::parse_gid(s);
    let _ = crate::facts::PortState::parse(s);
    let _ = crate::facts::PhysState::parse(s);
    let _ = crate::facts::LinkLayer::parse(s);
    let _ = crate::facts::GidType::parse(s);
    let _ = s.parse::<crate::pci::Bdf>();
    let _ = crate::facts::parse_nvrm(s);
    // Kernel log records (/dev/kmsg lines): Xid and link-down parsers.
    for line in s.lines() {
        let _ = crate::kmsg::xid(line);
        let _ = crate::kmsg::link_down(line);
    }
}
