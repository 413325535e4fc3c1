//! The one place the probe ladder prints while it runs: the write-bw progress line on stderr
//! (a person at a terminal; `WriteBwRequest::progress` is false with machine output). Every
//! other module under `rdma` returns data and prints nothing.

use super::request::write_bw::WriteBwRequest;

/// The progress line for message size `i` of `n` (overwritten in place; cleared at the end).
pub fn show_progress(req: &WriteBwRequest, i: usize, size: u64) {
    if req.progress {
        use std::io::Write;
        let mut e = std::io::stderr().lock();
        let _ = write!(
            e,
            "\r\x1b[2Kwrite-bw {}/{}: {size} B messages ({}/{})",
            req.device,
            req.port,
            i + 1,
            req.plan.sizes.len()
        );
        let _ = e.flush();
    }
}

pub fn clear_progress(req: &WriteBwRequest) {
    if req.progress {
        use std::io::Write;
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[2K");
        let _ = e.flush();
    }
}
