//! The one write-bw engine: `run` (entry points and the `Poster` seam), `loopback` and
//! `two_node` (the loops), `side` (a port's QPs, CQ and buffer), `memory` (where buffers live),
//! `pattern` (validation bytes), `oob` (two-node framing and handshake), `error`.

pub mod error;
pub mod loopback;
pub mod memory;
pub mod oob;
pub mod pattern;
pub mod poster;
pub mod run;
pub mod side;
pub mod two_node;
