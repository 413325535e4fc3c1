//! SIGINT and SIGTERM: the one place gpudoctor's long-running work learns it should stop.
//!
//! The handler only records which signal arrived (async-signal-safe: two atomic stores); the
//! probes poll [`interrupted`] between samples and posting rounds, leave through their normal
//! drops (memory regions deregistered before their memory is freed, CUDA and pinned memory
//! given back, QPs destroyed) and the command exits 2 with a one-line message naming the signal.
//! A second signal while the first is being honoured ends the process at once (exit 128+sig),
//! for the operator whose cleanup is itself stuck.
//!
//! The binary calls [`guard`] first thing: SIGINT, SIGTERM and SIGHUP are then taken by one
//! thread (sigwait) instead of a handler, so that a command that does not poll (discovery,
//! bundle extraction and writing) still leaves nothing behind: that thread removes every
//! registered [`Temporary`] (an extracted bundle in /dev/shm, a `.NAME.partial-PID` beside a
//! bundle's output) and exits 2 naming the signal. A crash or SIGKILL cannot be caught: those
//! temporaries carry their owner's PID and the next run sweeps those of dead processes
//! (`bundle::read::sweep_stale`).
//!
//! This module must not do anything in a signal handler but atomic stores and `_exit`.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

/// The signal that asked us to stop (0: none yet).
static STOP: AtomicI32 = AtomicI32::new(0);
/// Whether the running command polls [`interrupted`] (probes): then the first signal only asks.
static POLLING: AtomicBool = AtomicBool::new(false);
/// Whether [`guard`]'s thread takes the signals (the binary); library users get the handler.
static GUARDED: AtomicBool = AtomicBool::new(false);
/// Files and directories to remove if the process is stopped: (id, path, is a directory).
static TEMPS: Mutex<Vec<(u64, PathBuf, bool)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Held (shared) by code creating files in a registered temporary, one entry at a time; the
/// signal thread takes it exclusively before removing them, so that nothing is created in a
/// directory after its removal (which would strand it half-removed).
static CREATING: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Set once the signal thread is about to remove the temporaries: no new [`hold`] starts, so
/// that threads creating files back to back (several bundles extracted at once) cannot keep
/// the removal waiting until its patience runs out.
static QUIESCING: AtomicBool = AtomicBool::new(false);

/// Hold while creating one file or directory inside a registered temporary.
pub fn hold() -> std::sync::RwLockReadGuard<'static, ()> {
    while QUIESCING.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    match CREATING.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Wait (at most 2 s: a writer stuck in the kernel must not keep us) until no one is creating
/// files in a temporary; keep them from starting again.
fn quiesce() -> Option<std::sync::RwLockWriteGuard<'static, ()>> {
    QUIESCING.store(true, Ordering::SeqCst);
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(2) {
        match CREATING.try_write() {
            Ok(g) => return Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => {
                std::thread::sleep(std::time::Duration::from_millis(1))
            }
        }
    }
    None
}

/// A registered temporary path: removed by [`remove_temporaries`] (on a signal or at exit)
/// until this is dropped. Dropping it only unregisters; its owner removes the path itself.
#[derive(Debug)]
pub struct Temporary(u64);

impl Temporary {
    /// Register `path` (a directory when `dir`).
    pub fn new(path: PathBuf, dir: bool) -> Temporary {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        lock_temps().push((id, path, dir));
        Temporary(id)
    }
}

impl Drop for Temporary {
    fn drop(&mut self) {
        lock_temps().retain(|(id, _, _)| *id != self.0);
    }
}

fn lock_temps() -> std::sync::MutexGuard<'static, Vec<(u64, PathBuf, bool)>> {
    match TEMPS.lock() {
        Ok(t) => t,
        Err(p) => p.into_inner(),
    }
}

/// Remove every registered temporary now (the process is about to end without running
/// destructors: a signal, or an exit that leaves a stuck worker thread behind).
///
/// The list stays locked until every path is gone: the signal thread and the exit path may
/// both call this, and the one that finds the list empty must not end the process while the
/// other is still removing a directory (it would be left half removed).
pub fn remove_temporaries() {
    let mut temps = lock_temps();
    for (_, p, dir) in temps.drain(..) {
        if dir {
            // Another thread may still be creating files in it: a few tries.
            for _ in 0..3 {
                if std::fs::remove_dir_all(&p).is_ok() || !p.exists() {
                    break;
                }
            }
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// Take SIGINT, SIGTERM and SIGHUP on a dedicated thread for the rest of the process. Call
/// before any other thread starts (they inherit the blocked mask; spawned programs get a clean
/// one from std::process).
pub fn guard() {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: set is a valid sigset_t; the signal numbers are valid.
    unsafe {
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, sig);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return;
        }
    }
    let spawned = std::thread::Builder::new()
        .name("gpudoctor-signals".into())
        .stack_size(64 << 10)
        .spawn(move || {
            loop {
                let mut sig: libc::c_int = 0;
                // SAFETY: set is a valid, initialised sigset_t; sig is writable.
                if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
                    continue;
                }
                let first = STOP.swap(sig, Ordering::SeqCst) == 0;
                if first && POLLING.load(Ordering::SeqCst) {
                    continue; // the probe polls `interrupted` and leaves through its drops
                }
                let _quiet = quiesce();
                remove_temporaries();
                use std::io::Write;
                let _ = writeln!(
                    std::io::stderr(),
                    "gpudoctor: error: interrupted by {}",
                    name(sig)
                );
                // SAFETY: _exit ends the process without running exit handlers (other threads
                // may hold locks that those would take).
                unsafe { libc::_exit(if first { 2 } else { 128 + sig }) };
            }
        });
    match spawned {
        Ok(_) => GUARDED.store(true, Ordering::SeqCst),
        Err(_) => {
            // No thread: unblock again so that the signals keep their default action.
            // SAFETY: set is a valid sigset_t.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        }
    }
}

extern "C" fn on_signal(sig: libc::c_int) {
    if STOP.swap(sig, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Install the handler for SIGINT and SIGTERM (idempotent). Called by every command that runs
/// probes; the fact-only commands keep the default (they finish in well under a second).
pub fn install() {
    POLLING.store(true, Ordering::SeqCst);
    if GUARDED.load(Ordering::SeqCst) {
        return; // guard's thread takes the signals
    }
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
        libc::SIGHUP => "SIGHUP",
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
