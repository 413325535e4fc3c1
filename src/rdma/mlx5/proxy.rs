//! The CPU proxy (`--nic-handler cpu-proxy`, NVSHMEM's CPU-assisted mode): a thread that
//! rings the doorbell for a GPU that cannot map it.

use super::queues::QueueMemory;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};

/// The CPU proxy (`cpu-proxy` handler): watches the send doorbell record and, when the
/// producer index moves, rings the doorbell with the last WQE's first 8 control bytes.
pub struct Proxy;

impl Proxy {
    /// `rung_up_to`: the producer index the doorbell has already covered (the poster's at the
    /// time of the call; not read on the new thread, which may start after a post).
    pub fn spawn(
        mem: Arc<QueueMemory>,
        rung_up_to: u16,
        stop: Arc<AtomicBool>,
    ) -> std::thread::JoinHandle<u64> {
        std::thread::spawn(move || {
            let mut seen = rung_up_to;
            let mut rings = 0u64;
            while !stop.load(Ordering::Acquire) {
                let pi = mem.sq_producer();
                if pi == seen {
                    std::thread::yield_now();
                    continue;
                }
                // The record was released after the WQEs: the last WQE is complete here.
                let slot = u32::from(pi.wrapping_sub(1)) & (mem.sq_size - 1);
                let ctrl = mem.wqe_bytes(slot);
                let v = u64::from_ne_bytes(ctrl[0..8].try_into().expect("8 bytes"));
                fence(Ordering::SeqCst);
                mem.bf[0].store(v, Ordering::Release);
                // A real doorbell page may be write-combining (BlueFlame): flush the store
                // now, as libmlx5's mmio_flush_writes does.
                #[cfg(target_arch = "x86_64")]
                // SAFETY: sfence has no preconditions.
                unsafe {
                    std::arch::x86_64::_mm_sfence()
                };
                seen = pi;
                rings += 1;
            }
            rings
        })
    }
}
