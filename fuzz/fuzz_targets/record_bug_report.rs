//! A `--from` record parsed as this format (and, when small, written as a tree and mapped):
//! an error or a record, never a panic, bounded time and memory.
#![no_main]
//! The body is gpudoctor::fuzzing::record_bug_report, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::record_bug_report(data));
