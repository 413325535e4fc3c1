//! A whole bundle archive (gzip'ed tar) as `--bundle` hands it to the reader: path escapes,
//! links, sizes and counts must be refused or bounded, never panic.
#![no_main]
//! The body is gpudoctor::fuzzing::bundle_archive, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::bundle_archive(data));
