//! The output sanitisers (terminal text and line, Markdown table cell, XML text) over arbitrary
//! bytes: no raw control character reaches any output, no Markdown cell opens markup or HTML,
//! and the XML always parses.
#![no_main]
//! The body is gpudoctor::fuzzing::sanitisers, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::sanitisers(data));
