//! Two-node write-bw, serving side: arbitrary bytes as the client's half of the connection,
//! through the framing and the whole handshake. It faces the network.
#![no_main]
//! The body is gpudoctor::fuzzing::oob_server, which tests/it/fuzz.rs replays too.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| gpudoctor::fuzzing::oob_server(data));
