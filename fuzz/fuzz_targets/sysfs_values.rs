//! Every sysfs value parser over the same arbitrary text: cpulists, numa_node, NUMA distances,
//! hex (class, vendor, device), link speed and width, resource tables, AER counters, GIDs,
//! port/phys state, link layer, GID type, BDFs, NVRM version lines.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let s = String::from_utf8_lossy(data);
    let s = s.as_ref();
    if let Some(set) = gpudoctor::numa::parse_cpulist(s) {
        // What parses formats back to a list that parses to the same set.
        let again = gpudoctor::numa::format_cpulist(&set);
        assert_eq!(gpudoctor::numa::parse_cpulist(&again), Some(set), "{again}");
    }
    let _ = gpudoctor::numa::parse_numa_node(s);
    let _ = gpudoctor::numa::parse_distances(s);
    let _ = gpudoctor::pci::parse_hex(s).map(gpudoctor::pci::ClassCode);
    if let Some(g) = gpudoctor::pci::gen_from_speed(s) {
        let _ = gpudoctor::pci::speed_of_gen(g);
        if let Some(w) = gpudoctor::pci::parse_width(s) {
            let _ = gpudoctor::pci::link_gbps_per_direction(g, w);
        }
    }
    let _ = gpudoctor::pci::parse_width(s);
    let _ = gpudoctor::inventory::parse_resources(s);
    let _ = gpudoctor::inventory::parse_aer_total(s);
    let _ = gpudoctor::verbs::parse_gid(s);
    let _ = gpudoctor::facts::PortState::parse(s);
    let _ = gpudoctor::facts::PhysState::parse(s);
    let _ = gpudoctor::facts::LinkLayer::parse(s);
    let _ = gpudoctor::facts::GidType::parse(s);
    let _ = s.parse::<gpudoctor::pci::Bdf>();
    let _ = gpudoctor::checks::parse_nvrm(s);
});
