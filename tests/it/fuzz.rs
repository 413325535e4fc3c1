//! The fuzz targets' inputs replayed in the normal suite (stable toolchain, no libFuzzer): the
//! committed seed corpus `fuzz/corpus/<target>/` and every crash the fuzzer found,
//! `fuzz/regressions/<target>/`, committed before its fix. Each input goes through
//! `gpudoctor::fuzzing::<target>`, the function the fuzz target calls; a panic fails the test.

use crate::repo;

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
    replay("pci_config", 10, gpudoctor::fuzzing::pci_config);
}

#[test]
fn fuzz_inputs_sysfs_values() {
    replay("sysfs_values", 20, gpudoctor::fuzzing::sysfs_values);
}

#[test]
fn fuzz_inputs_recorded_docs() {
    replay("recorded_docs", 10, gpudoctor::fuzzing::recorded_docs);
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
    use gpudoctor::bundle::read::extract_from;
    let limits = gpudoctor::fuzzing::bundle_limits;
    replay("bundle_archive", 1, gpudoctor::fuzzing::bundle_archive);
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
    replay("oob_server", 2, gpudoctor::fuzzing::oob_server);
}

#[test]
fn fuzz_inputs_sysroot_links() {
    replay("sysroot_links", 5, gpudoctor::fuzzing::sysroot_links);
}

#[test]
fn fuzz_inputs_recorded_tree() {
    replay("recorded_tree", 5, gpudoctor::fuzzing::recorded_tree);
}

#[test]
fn fuzz_inputs_record_lspci() {
    replay("record_lspci", 3, gpudoctor::fuzzing::record_lspci);
}

#[test]
fn fuzz_inputs_record_bug_report() {
    replay(
        "record_bug_report",
        3,
        gpudoctor::fuzzing::record_bug_report,
    );
}

#[test]
fn fuzz_inputs_record_hwloc() {
    replay("record_hwloc", 3, gpudoctor::fuzzing::record_hwloc);
}

#[test]
fn fuzz_inputs_record_nccl() {
    replay("record_nccl", 3, gpudoctor::fuzzing::record_nccl);
}

#[test]
fn fuzz_inputs_sanitisers() {
    replay("sanitisers", 5, gpudoctor::fuzzing::sanitisers);
}

#[test]
fn fuzz_inputs_fleet_reports() {
    replay("fleet_reports", 5, gpudoctor::fuzzing::fleet_reports);
}
