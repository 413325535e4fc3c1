//! See gpudoctor::fuzzing::recorded_tree, which tests/it/fuzz.rs replays too.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::recorded_tree(data));
