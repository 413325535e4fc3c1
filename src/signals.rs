//! SIGINT and SIGTERM: the one place gpudoctor's long-running work learns it should stop.
//!
//! The handler only records which signal arrived (async-signal-safe: two atomic stores); the
//! probes poll [`interrupted`] between samples and posting rounds, leave through their normal
//! drops (memory regions deregistered before their memory is freed, CUDA and pinned memory
//! given back, QPs destroyed) and the command exits 2 with a one-line message naming the signal.
//! A second signal while the first is being honoured ends the process at once (exit 128+sig),
//! for the operator whose cleanup is itself stuck.

use std::sync::atomic::{AtomicI32, Ordering};

/// The signal that asked us to stop (0: none yet).
static STOP: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    if STOP.swap(sig, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Install the handler for SIGINT and SIGTERM (idempotent). Called by every command that runs
/// probes; the fact-only commands keep the default (they finish in well under a second).
pub fn install() {
    let handler: extern "C" fn(libc::c_int) = on_signal;
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: installs an async-signal-safe handler that only touches an atomic.
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
}

/// Whether SIGINT or SIGTERM has arrived.
pub fn interrupted() -> bool {
    STOP.load(Ordering::SeqCst) != 0
}

/// The signal that arrived, as an operator would name it ("SIGINT (Ctrl-C)", "SIGTERM").
pub fn which() -> &'static str {
    name(STOP.load(Ordering::SeqCst))
}

fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT (Ctrl-C)",
        libc::SIGTERM => "SIGTERM",
        0 => "no signal",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::name(libc::SIGINT), "SIGINT (Ctrl-C)");
        assert_eq!(super::name(libc::SIGTERM), "SIGTERM");
        assert_eq!(super::name(0), "no signal");
    }
}
