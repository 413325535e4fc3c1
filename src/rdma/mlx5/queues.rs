//! The memory an mlx5 SQ and its CQ live in, as libmlx5 lays it out (`mlx5dv_init_obj`):
//! shared by the level-4 poster, the CPU proxy that rings the doorbell, and the NIC stand-in.
//! Held as 32-bit atomics so either side may be another thread or a GPU.

use super::wqe::{self, CQE_BYTES, CQE_OPCODE_INVALID, WQEBB_BYTES};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

/// A slice of atomics the stand-in and the poster share: owned here, or memory the caller
/// owns (pinned host memory a GPU kernel writes through its mapping).
pub struct Shared<T: 'static> {
    ptr: *const T,
    len: usize,
    _owned: Option<Box<[T]>>,
}

impl<T> Shared<T> {
    pub(crate) fn owned(v: Box<[T]>) -> Self {
        Shared {
            ptr: v.as_ptr(),
            len: v.len(),
            _owned: Some(v),
        }
    }
    /// # Safety
    /// `ptr` must be aligned for `T`, valid for `len` elements, and outlive the result.
    pub unsafe fn borrowed(ptr: *const T, len: usize) -> Self {
        Shared {
            ptr,
            len,
            _owned: None,
        }
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: owned: the box's buffer, which does not move; borrowed: the caller's promise.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

// SAFETY: the elements are atomics (Sync), reached only through shared references.
unsafe impl<T: Sync> Send for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for Shared<T> {}

/// Memory shared by the poster and the NIC, laid out as libmlx5 hands it out through
/// `mlx5dv_init_obj`: the SQ ring (WQEBBs), the QP doorbell record (`dbrec[MLX5_RCV_DBR]`,
/// `dbrec[MLX5_SND_DBR]`), the CQ ring (64-byte CQEs), the CQ doorbell record, and the
/// BlueFlame register. Held as 32-bit atomics whose in-memory bytes are the big-endian device
/// layout, so both sides can run on different threads (or a GPU) without a data race.
pub struct QueueMemory {
    pub(crate) sq: Shared<AtomicU32>,
    pub(crate) sq_size: u32,
    pub(crate) dbrec: Shared<AtomicU32>,
    pub(crate) cq: Shared<AtomicU32>,
    pub(crate) cq_size: u32,
    pub(crate) cq_dbrec: Shared<AtomicU32>,
    /// The BlueFlame/UAR doorbell register (its in-memory bytes are the 8 doorbell bytes).
    pub(crate) bf: Shared<AtomicU64>,
}

fn words(n: usize) -> Shared<AtomicU32> {
    Shared::owned((0..n).map(|_| AtomicU32::new(0)).collect())
}

/// Raw pointers to caller-owned queue memory (`QueueMemory::from_raw`).
#[derive(Debug, Clone, Copy)]
pub struct RawQueues {
    /// `sq_size` * 64 bytes, 4-aligned.
    pub sq: *mut u8,
    pub sq_size: u32,
    /// 8 bytes: the receive and send doorbell records.
    pub dbrec: *mut u32,
    /// `cq_size` * 64 bytes, 4-aligned.
    pub cq: *mut u8,
    pub cq_size: u32,
    /// 4 bytes.
    pub cq_dbrec: *mut u32,
    /// 8 bytes, 8-aligned.
    pub bf: *mut u64,
}

impl QueueMemory {
    /// An SQ of `sq_size` WQEBBs and a CQ of `cq_size` CQEs (powers of two). CQEs start as
    /// libmlx5 initialises them: opcode `MLX5_CQE_INVALID`.
    pub fn new(sq_size: u32, cq_size: u32) -> Self {
        assert!(sq_size.is_power_of_two() && cq_size.is_power_of_two());
        let m = QueueMemory {
            sq: words(sq_size as usize * WQEBB_BYTES / 4),
            sq_size,
            dbrec: words(2),
            cq: words(cq_size as usize * CQE_BYTES / 4),
            cq_size,
            cq_dbrec: words(1),
            bf: Shared::owned(Box::new([AtomicU64::new(0)])),
        };
        m.reset();
        m
    }

    /// Queue memory the caller owns (pinned host memory mapped for a GPU), reset as `new`'s.
    ///
    /// # Safety
    /// Every pointer in `raw` must be valid and aligned for the sizes given there, and stay so
    /// for the life of the result; nothing but atomics may touch that memory meanwhile.
    pub unsafe fn from_raw(raw: RawQueues) -> Self {
        // SAFETY: the caller's contract.
        let m = unsafe { Self::attach(raw) };
        m.reset();
        m
    }

    /// A live QP's queues as libmlx5 set them up (`mlx5dv_init_obj`), left as they are: no
    /// reset, and `bf` is the device's doorbell register (only the proxy writes it).
    ///
    /// # Safety
    /// As `from_raw`; the QP and CQ must outlive the result.
    pub unsafe fn attach(raw: RawQueues) -> Self {
        assert!(raw.sq_size.is_power_of_two() && raw.cq_size.is_power_of_two());
        // SAFETY: the caller's contract; AtomicU32/AtomicU64 have the layout of u32/u64.
        unsafe {
            QueueMemory {
                sq: Shared::borrowed(
                    raw.sq as *const AtomicU32,
                    raw.sq_size as usize * WQEBB_BYTES / 4,
                ),
                sq_size: raw.sq_size,
                dbrec: Shared::borrowed(raw.dbrec as *const AtomicU32, 2),
                cq: Shared::borrowed(
                    raw.cq as *const AtomicU32,
                    raw.cq_size as usize * CQE_BYTES / 4,
                ),
                cq_size: raw.cq_size,
                cq_dbrec: Shared::borrowed(raw.cq_dbrec as *const AtomicU32, 1),
                bf: Shared::borrowed(raw.bf as *const AtomicU64, 1),
            }
        }
    }

    /// Empty rings: zero WQEs and records, every CQE `MLX5_CQE_INVALID` with owner 0.
    fn reset(&self) {
        for w in self
            .sq
            .iter()
            .chain(self.dbrec.iter())
            .chain(self.cq_dbrec.iter())
        {
            w.store(0, Ordering::Relaxed);
        }
        self.bf[0].store(0, Ordering::Relaxed);
        for i in 0..self.cq_size as usize {
            let mut b = [0u8; CQE_BYTES];
            b[63] = CQE_OPCODE_INVALID << 4;
            store(&self.cq, i * CQE_BYTES, &b);
        }
        fence(Ordering::SeqCst);
    }
    pub fn sq_size(&self) -> u32 {
        self.sq_size
    }
    pub fn cq_size(&self) -> u32 {
        self.cq_size
    }
    /// The send doorbell record's producer index (16 bits).
    pub fn sq_producer(&self) -> u16 {
        u32::from_be_bytes(self.dbrec[1].load(Ordering::Acquire).to_ne_bytes()) as u16
    }
    /// Write the send doorbell record directly, as a (buggy) poster could: lets tests show
    /// what the stand-in does with a record that does not match the ring.
    pub fn write_sq_dbr(&self, pi: u16) {
        let rec = u32::from_ne_bytes(wqe::sq_dbr(u32::from(pi)));
        self.dbrec[1].store(rec, Ordering::Release);
    }
    /// Write the BlueFlame register directly (what a doorbell is).
    pub fn ring(&self, doorbell: u64) {
        self.bf[0].store(doorbell, Ordering::Release);
    }
    /// The raw bytes of the WQEBB in slot `slot`.
    pub fn wqe_bytes(&self, slot: u32) -> [u8; WQEBB_BYTES] {
        load(&self.sq, slot as usize * WQEBB_BYTES)
    }
}

/// Store `bytes` at byte offset `off` (4-aligned) of a word array, relaxed.
pub(crate) fn store<const N: usize>(w: &[AtomicU32], off: usize, bytes: &[u8; N]) {
    for (i, c) in bytes.chunks_exact(4).enumerate() {
        let v = u32::from_ne_bytes(c.try_into().expect("4 bytes"));
        w[off / 4 + i].store(v, Ordering::Relaxed);
    }
}

pub(crate) fn load<const N: usize>(w: &[AtomicU32], off: usize) -> [u8; N] {
    let mut b = [0u8; N];
    for (i, c) in b.chunks_exact_mut(4).enumerate() {
        c.copy_from_slice(&w[off / 4 + i].load(Ordering::Relaxed).to_ne_bytes());
    }
    b
}
