//! The readers of other nodes' reports: a baseline file, and one file as `fleet` and `diff` read
//! it (a check, probe or NCCL report, or anything else): an error, never a panic.
#![no_main]
//! The body is gpudoctor::fuzzing::fleet_reports, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::fleet_reports(data));
