//! The fuzz targets' inputs replayed in the normal suite (stable toolchain, no libFuzzer): the
//! committed seed corpus `fuzz/corpus/<target>/` and every crash the fuzzer found,
//! `fuzz/regressions/<target>/`, committed before its fix. Each input goes through the same
//! calls as the target in `fuzz/fuzz_targets/<target>.rs`; a panic fails the test.

use crate::repo;
use std::time::{Duration, Instant};

/// Every input of `target`: corpus and regressions.
fn inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in ["corpus", "regressions"] {
        let d = repo().join("fuzz").join(dir).join(target);
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            out.push((
                p.strip_prefix(repo()).unwrap().display().to_string(),
                std::fs::read(&p).unwrap(),
            ));
        }
    }
    out.sort();
    out
}

fn replay(target: &str, min: usize, f: impl Fn(&[u8])) {
    let all = inputs(target);
    assert!(all.len() >= min, "{target}: only {} inputs", all.len());
    for (name, data) in &all {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(data)));
        assert!(r.is_ok(), "{name} panics");
    }
}

#[test]
fn fuzz_inputs_pci_config() {
    replay("pci_config", 10, |d| {
        let _ = format!("{:?}", gpudoctor::pci::config::ConfigSpace::parse(d));
    });
}

#[test]
fn fuzz_inputs_sysfs_values() {
    replay("sysfs_values", 20, |d| {
        let s = String::from_utf8_lossy(d);
        let s = s.as_ref();
        if let Some(set) = gpudoctor::numa::parse_cpulist(s) {
            let again = gpudoctor::numa::format_cpulist(&set);
            assert_eq!(gpudoctor::numa::parse_cpulist(&again), Some(set), "{again}");
        }
        let _ = gpudoctor::numa::parse_numa_node(s);
        let _ = gpudoctor::numa::parse_distances(s);
        let _ = gpudoctor::pci::parse_hex(s);
        if let Some(g) = gpudoctor::pci::gen_from_speed(s) {
            let _ = gpudoctor::pci::speed_of_gen(g);
        }
        let _ = gpudoctor::pci::parse_width(s);
        let _ = gpudoctor::inventory::parse_resources(s);
        let _ = gpudoctor::inventory::parse_aer_total(s);
        let _ = gpudoctor::verbs::parse_gid(s);
        let _ = gpudoctor::facts::PortState::parse(s);
        let _ = gpudoctor::facts::LinkLayer::parse(s);
        let _ = s.parse::<gpudoctor::pci::Bdf>();
        let _ = gpudoctor::checks::parse_nvrm(s);
    });
}

#[test]
fn fuzz_inputs_recorded_docs() {
    replay("recorded_docs", 10, |d| {
        let _ = gpudoctor::nvml::NvmlSnapshot::from_json(d);
        let _ = gpudoctor::libs::LibFacts::from_json(d);
        if let Ok(m) = gpudoctor::bundle::Manifest::from_json(d) {
            let _ = m.check();
        }
        let _ = serde_json::from_slice::<gpudoctor::probes::ProbeReport>(d);
    });
    // The seeds are real documents: each parses as at least one of them.
    for (name, d) in inputs("recorded_docs") {
        let any = gpudoctor::nvml::NvmlSnapshot::from_json(&d).is_ok()
            || gpudoctor::libs::LibFacts::from_json(&d).is_ok()
            || gpudoctor::bundle::Manifest::from_json(&d).is_ok()
            || serde_json::from_slice::<gpudoctor::probes::ProbeReport>(&d).is_ok();
        assert!(
            any || name.contains("regressions"),
            "{name} parses as nothing"
        );
    }
}

#[test]
fn fuzz_inputs_bundle_archive() {
    use gpudoctor::bundle::read::{Limits, extract_from};
    let limits = || Limits {
        entries: 2000,
        entry_bytes: 1 << 20,
        total_bytes: 8 << 20,
    };
    replay("bundle_archive", 1, |d| {
        let _ = extract_from(std::io::Cursor::new(d), limits());
    });
    // The seeds are real bundles: they extract.
    for (name, d) in inputs("bundle_archive") {
        if name.contains("corpus") {
            assert!(
                extract_from(std::io::Cursor::new(&d), limits()).is_ok(),
                "{name}"
            );
        }
    }
}

#[test]
fn fuzz_inputs_oob_server() {
    use gpudoctor::rdma::oob::{Channel, Script, server_handshake};
    replay("oob_server", 2, |d| {
        let t = Duration::from_secs(5);
        let mut chan = Channel::new(Script::new(d.to_vec()), "fuzz".into(), t);
        let r = server_handshake(&mut chan, "fuzz-token", Instant::now() + t, t);
        assert!(r.is_err(), "passed the handshake without the token");
    });
}
