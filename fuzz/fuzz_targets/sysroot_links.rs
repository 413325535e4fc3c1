//! See gpudoctor::fuzzing::sysroot_links, which tests/it/fuzz.rs replays too.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::sysroot_links(data));
