//! A software STAND-IN for the device side of one mlx5 send queue and its completion queue,
//! and the poster that drives it: the protocol a CUDA kernel runs to post RDMA writes itself
//! (level 4), testable without a ConnectX.
//!
//! The stand-in (`Nic`) does what the adapter does with libmlx5's queue memory: on a doorbell
//! (the 8-byte BlueFlame write) it reads the send doorbell record, consumes the WQEs from its
//! consumer index up to that producer index, validates each strictly (opcode, ds, QP number,
//! the WQE counter against the slot, lkey/rkey against its memory-region table and their
//! bounds), performs the write (a copy inside this process) and writes CQEs with the owner bit
//! of the pass; a failing WQE gets an error CQE with the syndrome a ConnectX gives for it, and
//! every WQE after it a flush error, as a QP in the error state does. Protocol violations that a
//! real adapter would silently mis-execute (a doorbell rung before the record moved, a doorbell
//! value that is not the last WQE's control segment, a CQ overrun) are recorded.
//!
//! It is a test instrument: anything measured against it is the poster's side only, and it
//! must never make a check pass (`probe.gpu-write-bw` needs a real adapter). It never touches
//! a device, and its memory regions are slices it was given, never raw addresses.
//!
//! The poster (`Poster`, `Proxy`) is the logic the CUDA kernel runs, in Rust against the same
//! memory: fill the WQEs, order them before the doorbell record, the record before the doorbell;
//! ring it itself (`Handler::Direct`, the `gpu` handler) or leave it to a CPU thread that
//! watches the producer index (`Handler::CpuProxy`, NVSHMEM's CPU-assisted mode); then poll the
//! CQ with a deadline.

use super::queues::{QueueMemory, Shared, load, store};
use super::wqe::{self, CQE_BYTES, CqeError, CqeFields, CqePoll, RdmaWrite, Syndrome, WQEBB_BYTES};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering, fence};
use std::time::{Duration, Instant};

/// `MLX5_CQE_REQ`, `MLX5_CQE_REQ_ERR`.
const CQE_REQ: u8 = 0;
const CQE_REQ_ERR: u8 = 13;
/// The largest message the stand-in accepts (a ConnectX port's max_msg_sz is 1 GiB).
pub const MAX_MESSAGE_BYTES: u32 = 1 << 30;

/// A registered memory region: what `ibv_reg_mr` gives (lkey, rkey, address range, access).
/// Its addresses are the ones WQEs carry; `mem` is the memory they name.
#[derive(Clone)]
pub struct Mr {
    pub lkey: u32,
    pub rkey: u32,
    pub addr: u64,
    pub mem: Arc<Shared<AtomicU8>>,
    pub remote_write: bool,
}

impl Mr {
    pub fn new(lkey: u32, rkey: u32, addr: u64, len: usize, remote_write: bool) -> Self {
        Mr {
            lkey,
            rkey,
            addr,
            mem: Arc::new(Shared::owned((0..len).map(|_| AtomicU8::new(0)).collect())),
            remote_write,
        }
    }
    /// A region over caller-owned memory (pinned host memory a GPU kernel also sees).
    ///
    /// # Safety
    /// `ptr` must be valid for `len` bytes for the life of the result (and its clones).
    pub unsafe fn from_raw(
        lkey: u32,
        rkey: u32,
        addr: u64,
        ptr: *mut u8,
        len: usize,
        remote_write: bool,
    ) -> Self {
        Mr {
            lkey,
            rkey,
            addr,
            // SAFETY: the caller's contract; AtomicU8 has the layout of u8.
            mem: Arc::new(unsafe { Shared::borrowed(ptr as *const AtomicU8, len) }),
            remote_write,
        }
    }
    /// The offset of `[addr, addr + len)` inside this region, if it lies inside.
    fn offset(&self, addr: u64, len: u32) -> Option<usize> {
        let off = addr.checked_sub(self.addr)?;
        let end = off.checked_add(u64::from(len))?;
        (end <= self.mem.len() as u64).then_some(off as usize)
    }
    pub fn read(&self) -> Vec<u8> {
        self.mem.iter().map(|b| b.load(Ordering::Relaxed)).collect()
    }
    pub fn write(&self, off: usize, data: &[u8]) {
        for (d, s) in self.mem[off..off + data.len()].iter().zip(data) {
            d.store(*s, Ordering::Relaxed);
        }
    }
}

/// The NIC stand-in: the device side of one RC QP's SQ and its CQ.
pub struct Nic {
    mem: Arc<QueueMemory>,
    qpn: u32,
    mrs: Vec<Mr>,
    /// SQ consumer index (16 bits significant, as the WQE counter).
    ci: u16,
    /// CQ producer index (full count; the owner bit is its pass parity).
    cq_pi: u32,
    last_doorbell: u64,
    error_state: bool,
    inject: Option<(u16, Syndrome)>,
    /// Protocol violations seen (what a real adapter would mis-execute without saying).
    pub violations: Vec<String>,
    /// WQEs consumed, CQEs written, bytes written.
    pub consumed: u64,
    pub cqes: u64,
    pub bytes: u64,
}

impl Nic {
    pub fn new(mem: Arc<QueueMemory>, qpn: u32, mrs: Vec<Mr>) -> Self {
        Nic {
            last_doorbell: mem.bf[0].load(Ordering::Acquire),
            mem,
            qpn: qpn & 0x00ff_ffff,
            mrs,
            ci: 0,
            cq_pi: 0,
            error_state: false,
            inject: None,
            violations: Vec::new(),
            consumed: 0,
            cqes: 0,
            bytes: 0,
        }
    }

    /// Fail the WQE whose counter is `index` with `syndrome` (a test of the error path).
    pub fn inject_error(&mut self, index: u16, syndrome: Syndrome) {
        self.inject = Some((index, syndrome));
    }

    /// Look at the BlueFlame register; if a new doorbell was written, act on it. Returns the
    /// number of WQEs consumed, None when no doorbell was rung since the last look.
    pub fn poll_doorbell(&mut self) -> Option<usize> {
        let v = self.mem.bf[0].load(Ordering::Acquire);
        if v == self.last_doorbell {
            return None;
        }
        Some(self.doorbell(v))
    }

    /// A doorbell with value `v` (the first 8 bytes of the last posted WQE's control segment):
    /// consume WQEs up to the doorbell record's producer index.
    pub fn doorbell(&mut self, v: u64) -> usize {
        self.last_doorbell = v;
        let pi = self.mem.sq_producer();
        let pending = pi.wrapping_sub(self.ci);
        if pending == 0 {
            self.violations.push(format!(
                "doorbell rung with the send doorbell record at {pi}, nothing new: the record \
                 must be written (and fenced) before the doorbell"
            ));
            return 0;
        }
        if u32::from(pending) > self.mem.sq_size {
            self.violations.push(format!(
                "doorbell record {pi} is {pending} WQEs ahead of the consumer index {}, more \
                 than the SQ holds ({}): the poster overran the ring",
                self.ci, self.mem.sq_size
            ));
            return 0;
        }
        let last_slot = u32::from(pi.wrapping_sub(1)) & (self.mem.sq_size - 1);
        let ctrl = self.mem.wqe_bytes(last_slot);
        if v.to_ne_bytes() != ctrl[0..8] {
            self.violations.push(format!(
                "doorbell value {:02x?} is not the first 8 bytes of the last WQE's control \
                 segment {:02x?} (index {})",
                v.to_ne_bytes(),
                &ctrl[0..8],
                pi.wrapping_sub(1)
            ));
        }
        let mut n = 0;
        while self.ci != pi {
            self.execute(self.ci);
            self.ci = self.ci.wrapping_add(1);
            n += 1;
        }
        self.consumed += n as u64;
        n
    }

    fn execute(&mut self, index: u16) {
        let slot = u32::from(index) & (self.mem.sq_size - 1);
        let bytes = self.mem.wqe_bytes(slot);
        let wqe_opcode = (u32::from_be_bytes(bytes[0..4].try_into().expect("4")) & 0xff) as u8;
        if self.error_state {
            self.complete_err(index, Syndrome::WrFlush, wqe_opcode);
            return;
        }
        match self.validate(index, &bytes) {
            Ok(w) => {
                if let Some((i, s)) = self.inject
                    && i == index
                {
                    self.inject = None;
                    self.fail(index, s, wqe_opcode);
                    return;
                }
                self.copy(&w);
                if w.flags & wqe::CTRL_CQ_UPDATE != 0 {
                    self.write_cqe(CqeFields {
                        raw_opcode: CQE_REQ,
                        owner: 0,
                        wqe_counter: index,
                        qpn: self.qpn,
                        byte_cnt: 0,
                        error: None,
                    });
                }
            }
            Err(s) => self.fail(index, s, wqe_opcode),
        }
    }

    /// A WQE failed: its error CQE (always, signaled or not) and the QP enters the error state.
    fn fail(&mut self, index: u16, s: Syndrome, wqe_opcode: u8) {
        self.complete_err(index, s, wqe_opcode);
        self.error_state = true;
    }

    fn complete_err(&mut self, index: u16, s: Syndrome, wqe_opcode: u8) {
        // The vendor syndrome is adapter-specific and not modelled: always 0 here.
        self.write_cqe(CqeFields {
            raw_opcode: CQE_REQ_ERR,
            owner: 0,
            wqe_counter: index,
            qpn: self.qpn,
            byte_cnt: 0,
            error: Some((s.as_u8(), 0, wqe_opcode)),
        });
    }

    fn validate(&mut self, index: u16, bytes: &[u8; WQEBB_BYTES]) -> Result<RdmaWrite, Syndrome> {
        let w = wqe::parse_write_wqe(bytes).map_err(|_| Syndrome::LocalQpOperation)?;
        if w.qpn != self.qpn || w.index != index {
            // A WQE counter that is not the slot's index is a stale WQE: the doorbell record
            // moved before the WQE was written.
            self.violations.push(format!(
                "WQE in slot {} carries QP {:#x} index {}, expected QP {:#x} index {index}",
                u32::from(index) & (self.mem.sq_size - 1),
                w.qpn,
                w.index,
                self.qpn
            ));
            return Err(Syndrome::LocalQpOperation);
        }
        if w.length > MAX_MESSAGE_BYTES {
            return Err(Syndrome::LocalLength);
        }
        let local = self
            .mrs
            .iter()
            .find(|m| m.lkey == w.lkey)
            .and_then(|m| m.offset(w.laddr, w.length));
        if local.is_none() {
            return Err(Syndrome::LocalProtection);
        }
        let remote = self
            .mrs
            .iter()
            .find(|m| m.rkey == w.rkey && m.remote_write)
            .and_then(|m| m.offset(w.raddr, w.length));
        if remote.is_none() {
            return Err(Syndrome::RemoteAccess);
        }
        Ok(w)
    }

    fn copy(&mut self, w: &RdmaWrite) {
        let src = self
            .mrs
            .iter()
            .find(|m| m.lkey == w.lkey)
            .expect("validated");
        let dst = self
            .mrs
            .iter()
            .find(|m| m.rkey == w.rkey && m.remote_write)
            .expect("validated");
        let (so, d_o) = (
            src.offset(w.laddr, w.length).expect("validated"),
            dst.offset(w.raddr, w.length).expect("validated"),
        );
        for i in 0..w.length as usize {
            let b = src.mem[so + i].load(Ordering::Relaxed);
            dst.mem[d_o + i].store(b, Ordering::Relaxed);
        }
        // The data lands before the completion that reports it (the CQE store releases).
        self.bytes += u64::from(w.length);
    }

    fn write_cqe(&mut self, mut c: CqeFields) {
        let n = self.mem.cq_size;
        let consumer =
            u32::from_be_bytes(self.mem.cq_dbrec[0].load(Ordering::Acquire).to_ne_bytes());
        if (self.cq_pi.wrapping_sub(consumer) & 0x00ff_ffff) >= n {
            self.violations.push(format!(
                "CQ overrun: {} CQEs written, the consumer's record says {consumer}, the CQ \
                 holds {n}",
                self.cq_pi
            ));
        }
        c.owner = wqe::owner_for(self.cq_pi, n);
        let b = c.bytes();
        let off = (self.cq_pi & (n - 1)) as usize * CQE_BYTES;
        // Everything but the last word, then the word with op_own, released: a poller that
        // sees the owner bit flip sees the whole CQE (and the data written before it).
        let mut head = [0u8; 60];
        head.copy_from_slice(&b[0..60]);
        store(&self.mem.cq, off, &head);
        let last = u32::from_ne_bytes(b[60..64].try_into().expect("4"));
        self.mem.cq[off / 4 + 15].store(last, Ordering::Release);
        self.cq_pi = self.cq_pi.wrapping_add(1);
        self.cqes += 1;
    }

    /// Run on a thread, watching the BlueFlame register until `stop`; returns the NIC (its
    /// counters and violations) when stopped.
    pub fn spawn(mut self, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Nic> {
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                if self.poll_doorbell().is_none() {
                    std::thread::yield_now();
                }
            }
            self
        })
    }
}

/// Who rings the doorbell after the poster has written the doorbell record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handler {
    /// The poster writes the BlueFlame register itself (the `gpu` handler: the UAR mapped for
    /// the GPU).
    Direct,
    /// A `Proxy` thread that watches the producer index rings it (`cpu-proxy`).
    CpuProxy,
}

/// One RDMA write to post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Write {
    pub laddr: u64,
    pub lkey: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub length: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PostError {
    #[error("{want} WQEs do not fit: {free} of the SQ's {size} slots are free")]
    SqFull { want: usize, free: u32, size: u32 },
    #[error("nothing to post")]
    Empty,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WaitError {
    #[error(
        "no completion for RDMA write {index} within {waited_ms} ms (posted up to producer \
         index {producer}, CQ consumer index {cq_ci}): the doorbell was not rung, the NIC \
         stopped, or the QP is not in RTS"
    )]
    Timeout {
        index: u16,
        waited_ms: u128,
        producer: u16,
        cq_ci: u32,
    },
    #[error("RDMA write {index} completed in error: {error}")]
    Completion { index: u16, error: CqeError },
}

/// The posting side of one QP (what the kernel's threads and thread 0 do).
pub struct Poster {
    mem: Arc<QueueMemory>,
    qpn: u32,
    /// Producer index: the next WQE's counter.
    pi: u16,
    /// The WQE counter after the last one known complete.
    done: u16,
    cq_ci: u32,
}

impl Poster {
    pub fn new(mem: Arc<QueueMemory>, qpn: u32) -> Self {
        Poster {
            mem,
            qpn,
            pi: 0,
            done: 0,
            cq_ci: 0,
        }
    }

    pub fn producer(&self) -> u16 {
        self.pi
    }

    /// Post `writes`, the last one signaled: WQE stores, a release fence, the doorbell
    /// record, a full fence, then (Direct) the doorbell. Returns the last WQE's index.
    pub fn post(&mut self, writes: &[Write], handler: Handler) -> Result<u16, PostError> {
        if writes.is_empty() {
            return Err(PostError::Empty);
        }
        let size = self.mem.sq_size;
        let free = size - u32::from(self.pi.wrapping_sub(self.done));
        if writes.len() > free as usize {
            return Err(PostError::SqFull {
                want: writes.len(),
                free,
                size,
            });
        }
        let mut last = None;
        for (i, w) in writes.iter().enumerate() {
            // On the GPU, thread i builds WQE pi + i.
            let wqe = RdmaWrite {
                index: self.pi.wrapping_add(i as u16),
                qpn: self.qpn,
                laddr: w.laddr,
                lkey: w.lkey,
                length: w.length,
                raddr: w.raddr,
                rkey: w.rkey,
                flags: if i + 1 == writes.len() {
                    wqe::CTRL_CQ_UPDATE
                } else {
                    0
                },
                imm: None,
                signature: 0,
            };
            store(&self.mem.sq, wqe::wqe_offset(wqe.index, size), &wqe.wqe());
            last = Some(wqe);
        }
        let last = last.expect("not empty");
        self.pi = self.pi.wrapping_add(writes.len() as u16);
        // WQEs before the record (the kernel: __threadfence_system, then __syncthreads).
        fence(Ordering::Release);
        let rec = u32::from_ne_bytes(wqe::sq_dbr(u32::from(self.pi)));
        self.mem.dbrec[1].store(rec, Ordering::Release);
        // The record before the doorbell (libmlx5: udma_to_device_barrier, then the MMIO).
        fence(Ordering::SeqCst);
        if handler == Handler::Direct {
            self.mem.bf[0].store(last.doorbell(), Ordering::Release);
        }
        Ok(last.index)
    }

    /// Poll the CQ until the completion of WQE `index` arrives, an error CQE arrives, or
    /// `timeout` passes. Updates the CQ doorbell record as it consumes.
    pub fn wait(&mut self, index: u16, timeout: Duration) -> Result<(), WaitError> {
        let start = Instant::now();
        let n = self.mem.cq_size;
        loop {
            let off = (self.cq_ci & (n - 1)) as usize * CQE_BYTES;
            // The word holding op_own first (acquire), then the rest.
            let last = self.mem.cq[off / 4 + 15].load(Ordering::Acquire);
            let mut b: [u8; CQE_BYTES] = load(&self.mem.cq, off);
            b[60..64].copy_from_slice(&last.to_ne_bytes());
            match wqe::poll_cqe(&b, self.cq_ci, n) {
                CqePoll::Ready(c) => {
                    self.cq_ci = self.cq_ci.wrapping_add(1);
                    let rec = u32::from_ne_bytes(wqe::cq_dbr(self.cq_ci));
                    self.mem.cq_dbrec[0].store(rec, Ordering::Release);
                    if let Some(error) = c.error {
                        return Err(WaitError::Completion {
                            index: c.wqe_counter,
                            error,
                        });
                    }
                    // Everything up to a signaled WQE has completed (RC orders them).
                    self.done = c.wqe_counter.wrapping_add(1);
                    if c.wqe_counter == index {
                        return Ok(());
                    }
                }
                CqePoll::Empty => {
                    if start.elapsed() >= timeout {
                        return Err(WaitError::Timeout {
                            index,
                            waited_ms: start.elapsed().as_millis(),
                            producer: self.pi,
                            cq_ci: self.cq_ci,
                        });
                    }
                    std::thread::yield_now();
                }
            }
        }
    }
}
