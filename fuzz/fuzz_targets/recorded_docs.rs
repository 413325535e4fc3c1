//! The recorded tree's JSON documents as replay reads them: nvml.json, libs.json,
//! manifest.json (and its checks), probes/<name>.json.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gpudoctor::nvml::NvmlSnapshot::from_json(data);
    let _ = gpudoctor::libs::LibFacts::from_json(data);
    if let Ok(m) = gpudoctor::bundle::Manifest::from_json(data) {
        let _ = m.check();
        let _ = m.recorded_errors();
    }
    let _ = serde_json::from_slice::<gpudoctor::probes::ProbeReport>(data);
});
