//! The recorded tree's JSON documents as replay reads them: nvml.json, libs.json,
//! manifest.json (and its checks), probes/<name>.json.
#![no_main]
//! The body is gpudoctor::fuzzing::recorded_docs, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::recorded_docs(data));
