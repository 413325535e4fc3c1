//! Two-node write-bw, serving side: arbitrary bytes as the client's half of the connection,
//! through the framing and the whole handshake. It faces the network.
#![no_main]
use gpudoctor::rdma::oob::{Channel, Script, server_handshake};
use libfuzzer_sys::fuzz_target;
use std::time::{Duration, Instant};

fuzz_target!(|data: &[u8]| {
    let t = Duration::from_secs(5);
    let mut chan = Channel::new(Script::new(data.to_vec()), "fuzz".into(), t);
    // Without the token no input can pass: anything that does is a finding.
    let r = server_handshake(&mut chan, "fuzz-token", Instant::now() + t, t);
    assert!(r.is_err(), "an input passed the handshake without the token");
});
