//! The kernel harness's checks (`gpudoctor-mlx5-kernel`, feature `standin`): the posting
//! kernel in post-only mode over queues in host or GPU memory, the GPU-queue placement check,
//! and `emulate`, the whole posting protocol against the NIC stand-in (`emu::Nic`). A test
//! instrument on a GPU machine without a ConnectX; never part of a report.

use super::emu::{Mr, Nic};
use super::kernel::*;
use super::proxy::Proxy;
use super::queues::{QueueMemory, RawQueues};
use super::wqe::{self};
use crate::cuda::{self, CudaError, PinnedBuffer};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Page-aligned, zeroed host memory from the Rust allocator (as libmlx5's own queue buffers
/// are: ordinary process memory, not cuMemHostAlloc's), for the stand-in's queues.
pub struct PageBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl PageBuf {
    pub fn new(bytes: usize) -> Self {
        let page = page_size();
        let layout = std::alloc::Layout::from_size_align(bytes.div_ceil(page).max(1) * page, page)
            .expect("a page-aligned layout");
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        PageBuf { ptr, layout }
    }
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
    pub fn len(&self) -> usize {
        self.layout.size()
    }
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout, freed once.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmuHandler {
    /// The kernel writes the doorbell register itself.
    Gpu,
    /// A CPU thread watching the producer index rings it.
    CpuProxy,
    /// Nobody rings: the kernel must report a timeout, not hang (the bounded-wait test).
    Nobody,
}

#[derive(Debug, Clone)]
pub struct EmuPlan {
    pub handler: EmuHandler,
    pub fence: Fence,
    pub writes_per_iter: u32,
    pub iterations: u32,
    pub size: u32,
    pub sq_size: u32,
    pub cq_size: u32,
    /// Make the stand-in fail this WQE counter with a remote access error (the error path).
    pub bad_rkey_at: Option<u16>,
    pub timeout: Duration,
    /// Kernel launches over the same queues, each of `iterations`, the WQE counter and CQ
    /// consumer index carried from one to the next and each completion's time recorded (what
    /// the live path does across message sizes); the data is checked after each.
    pub launches: u32,
}

#[derive(Debug)]
pub struct EmuOutcome {
    pub result: PostResult,
    /// Posting time per iteration (GPU %globaltimer, ns): start of the iteration to the doorbell.
    pub post_ns: Vec<u64>,
    /// The same span in SM clock cycles (clock64).
    pub post_cycles: Vec<u64>,
    pub data_ok: bool,
    pub violations: Vec<String>,
    pub consumed: u64,
    pub cqes: u64,
    pub wall: Duration,
    /// Launches that ran; iterations done over all of them.
    pub launches_done: u32,
    pub iterations_done: u64,
    /// Completion times (ns since each launch started) rose within every launch, one per
    /// iteration done.
    pub timeline_ok: bool,
}

/// Where `post_only` puts the SQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqPlace {
    /// Host memory registered for the GPU (where libmlx5 puts it; the live path's choice).
    Host,
    /// The SQ and the doorbell record in GPU memory (where IBGDA puts them, through DevX and
    /// a umem); the doorbell register stays host memory.
    Device,
}

impl SqPlace {
    pub fn as_str(self) -> &'static str {
        match self {
            SqPlace::Host => "SQ in host memory",
            SqPlace::Device => "SQ+dbrec in GPU",
        }
    }
}

/// The posting cost alone (FLAG_POST_ONLY): `iterations` x `writes` WQEs built, fenced, the
/// doorbell record and a doorbell written to host memory; nothing consumes the ring, no
/// completion is awaited. Returns the per-iteration posting times (ns). A microbenchmark for
/// the choice of SQ placement and fence, not a transfer.
pub fn post_only(
    l: &Loaded,
    place: SqPlace,
    fence: Fence,
    writes: u32,
    iterations: u32,
    size: u32,
) -> Result<Vec<u64>, CudaError> {
    let sq_size = writes.next_power_of_two().max(64);
    let sq_bytes = sq_size as usize * wqe::WQEBB_BYTES;
    let host_sq = PageBuf::new(sq_bytes);
    let dev_sq = match place {
        SqPlace::Device => Some(cuda::DeviceBuffer::new(&l.ctx, sq_bytes + 64)?),
        SqPlace::Host => None,
    };
    let misc = PageBuf::new(4096);
    let ranges = [
        (host_sq.ptr() as *const u8, host_sq.len()),
        (misc.ptr() as *const u8, misc.len()),
    ];
    // SAFETY: both buffers outlive `map`.
    let map = unsafe { HostMap::new(&l.ctx, &ranges)? };
    let dev = |p: *const u8| {
        map.device(p).ok_or_else(|| {
            CudaError::Unavailable("a queue address outside its registration".into())
        })
    };
    let misc_dev = dev(misc.ptr())?;
    // The doorbell record after the SQ in the device buffer, or in the host page.
    let (sq, dbrec) = match &dev_sq {
        Some(d) => (d.ptr, d.ptr + sq_bytes as u64),
        None => (dev(host_sq.ptr())?, misc_dev),
    };
    let q = PostQueues {
        sq,
        sq_size,
        dbrec,
        bf: misc_dev + 16,
        cq: 0,
        cq_size: 1,
        cq_dbrec: misc_dev + 8,
    };
    // SAFETY: sq (host or device) holds sq_size WQEBBs, misc the records and the doorbell;
    // all alive past the call.
    unsafe { post_over(l, &q, fence, writes, iterations, size, 0) }
}

/// The addresses `post_over` posts through (GPU addresses).
#[derive(Debug, Clone, Copy)]
pub struct PostQueues {
    pub sq: u64,
    pub sq_size: u32,
    pub dbrec: u64,
    pub bf: u64,
    pub cq: u64,
    pub cq_size: u32,
    pub cq_dbrec: u64,
}

/// The writes `post_over` builds: WQE i of an iteration writes `size` bytes from
/// POST_LBASE + i*size (POST_LKEY) to POST_RBASE + i*size (POST_RKEY) on QP POST_QPN.
pub const POST_QPN: u32 = 0x1c3;
pub const POST_LBASE: u64 = 0x7f00_0000_0000;
pub const POST_LKEY: u32 = 1;
pub const POST_RBASE: u64 = 0x7f80_0000_0000;
pub const POST_RKEY: u32 = 2;

/// Run the posting kernel in post-only mode (FLAG_POST_ONLY: no completion wait) over `q`,
/// the WQE counter starting at `pi0`; the per-iteration posting times (ns).
///
/// # Safety
/// `q`'s addresses must be GPU-visible memory of the sizes the kernel uses (the SQ of
/// `sq_size` WQEBBs, 8 bytes of record, an 8-byte doorbell word), alive until this returns.
pub unsafe fn post_over(
    l: &Loaded,
    q: &PostQueues,
    fence: Fence,
    writes: u32,
    iterations: u32,
    size: u32,
    pi0: u32,
) -> Result<Vec<u64>, CudaError> {
    let timing = PinnedBuffer::new(&l.ctx, iterations as usize * 16 + 64)?;
    let t = timing.addr();
    let a = PostArgs {
        sq: q.sq,
        sq_size: q.sq_size,
        qpn: POST_QPN,
        dbrec: q.dbrec,
        bf: q.bf,
        cq: q.cq,
        cq_size: q.cq_size,
        cq_dbrec: q.cq_dbrec,
        lbase: POST_LBASE,
        lkey: POST_LKEY,
        rbase: POST_RBASE,
        rkey: POST_RKEY,
        size,
        iterations,
        timeout_ns: 0,
        post_ns: t + 64,
        post_cycles: t + 64 + iterations as u64 * 8,
        result: t,
        flags: FLAG_POST_ONLY | fence.flag(),
        pi0,
        ci0: 0,
        done_ns: 0,
    };
    // SAFETY: the caller's contract for the queues; timing holds the result and 2 x
    // iterations u64s, alive past the call.
    unsafe { run_post(l, &a, writes)? };
    // SAFETY: iterations u64s written by the finished kernel.
    let ns = unsafe {
        std::slice::from_raw_parts(
            (timing.ptr as *const u8).add(64) as *const u64,
            iterations as usize,
        )
    };
    Ok(ns.to_vec())
}

/// The GPU half of level 4's DevX path, on a GPU without a NIC: the queue memory exactly as
/// `devx::GpuQueues` lays it out (`devx::GpuQueueMem`), exported as a dma-buf as the DevX
/// umems would be, and the posting kernel run over it with the live path's flags for GPU
/// queues (GPU-scope fences) in post-only mode (nothing consumes the ring; the doorbell goes
/// to a pinned host word). Then every byte is read back: the last iteration's WQEs in the SQ
/// ring must equal the Rust builder's, the send doorbell record the producer index, the
/// doorbell the last WQE's first 8 bytes, and the CQ ring and both other records untouched.
/// Returns what it saw, line by line, or the first mismatch.
pub fn gpu_queues_check(
    l: &Loaded,
    writes: u32,
    iterations: u32,
    size: u32,
) -> Result<Vec<String>, String> {
    use super::devx::{self, GpuQueueMem};
    // A live QP's counter carries on from earlier launches: start off zero, so that the
    // doorbell record's final value cannot be the memory's initial zeros.
    const PI0: u32 = 0x1234;
    let mut said = Vec::new();
    let mem = GpuQueueMem::new(&l.ctx, writes)?;
    let p = mem.place;
    said.push(format!(
        "queue memory: {} B at {:#x}: SQ {} x 64 B @+{:#x}, CQ {} x 64 B @+{:#x}, records @+{:#x} \
         (QP +{}, CQ +{})",
        mem.buf.bytes,
        mem.buf.ptr,
        p.sq_entries,
        p.sq_off,
        p.cq_entries,
        p.cq_off,
        p.dbr_off,
        devx::QP_DBR_AT,
        devx::CQ_DBR_AT
    ));
    match mem.buf.export_dmabuf() {
        Ok(fd) => {
            use std::os::fd::AsRawFd;
            said.push(format!(
                "dma-buf export of the whole allocation: fd {} (what the DevX umems register)",
                fd.as_raw_fd()
            ));
        }
        Err(e) => return Err(format!("dma-buf export of the queue memory: {e}")),
    }
    let bell = PinnedBuffer::new(&l.ctx, 64).map_err(|e| e.to_string())?;
    let q = PostQueues {
        sq: mem.sq,
        sq_size: p.sq_entries,
        dbrec: mem.dbrec,
        bf: bell.addr(),
        cq: mem.cq,
        cq_size: p.cq_entries,
        cq_dbrec: mem.cq_dbrec,
    };
    // SAFETY: the queue memory holds the rings and records at these addresses, `bell` the
    // doorbell word; all alive past the call.
    let mut ns = unsafe { post_over(l, &q, Fence::LeaderGpuScope, writes, iterations, size, PI0) }
        .map_err(|e| format!("the posting kernel: {e}"))?;
    ns.sort_unstable();
    said.push(format!(
        "posted {iterations} iterations x {writes} WQEs (GPU-scope fences, post only): median {} ns",
        ns.get(ns.len() / 2).copied().unwrap_or(0)
    ));
    let mut got = vec![0u8; mem.buf.bytes];
    mem.buf.download(&mut got).map_err(|e| e.to_string())?;
    let total = PI0.wrapping_add(iterations.wrapping_mul(writes));
    let last = BuildCase {
        sq_size: p.sq_entries,
        qpn: POST_QPN,
        first: total.wrapping_sub(writes) as u16,
        n: writes,
        lbase: POST_LBASE,
        lkey: POST_LKEY,
        rbase: POST_RBASE,
        rkey: POST_RKEY,
        size,
    };
    let mut want = last.expected_ring();
    // Slots no WQE of the last iteration reached keep the previous ones or zeros: compare
    // only the written ones (all of them when writes fills the ring).
    for slot in 0..p.sq_entries as usize {
        let r = slot * wqe::WQEBB_BYTES..(slot + 1) * wqe::WQEBB_BYTES;
        if want[r.clone()].iter().all(|&b| b == FILL) {
            want[r.clone()].copy_from_slice(&got[p.sq_off + r.start..p.sq_off + r.end]);
        }
    }
    if let Some(d) = first_difference(&got[p.sq_off..p.sq_off + want.len()], &want) {
        return Err(format!("the SQ ring in GPU memory: {d}"));
    }
    said.push(format!(
        "SQ ring: the last iteration's {writes} WQEs (counters {}..) identical to the Rust builder's",
        last.first
    ));
    let rec = &got[p.dbr_off..p.dbr_off + 8];
    let want_rec = [0, 0, 0, 0]
        .into_iter()
        .chain((total & 0xffff).to_be_bytes())
        .collect::<Vec<u8>>();
    if rec != want_rec.as_slice() {
        return Err(format!(
            "QP doorbell record {rec:02x?}, expected {want_rec:02x?}"
        ));
    }
    said.push(format!(
        "QP doorbell record: send counter {} (big-endian), receive 0",
        total & 0xffff
    ));
    // SAFETY: `bell` is a live 64-byte pinned host buffer (allocated above, freed when it
    // drops at the end of this function) and the kernel that wrote it has finished.
    let bell_word = unsafe { std::slice::from_raw_parts(bell.ptr as *const u8, 8) }.to_vec();
    let last_wqe = last.write(writes - 1).wqe();
    if bell_word != last_wqe[..8] {
        return Err(format!(
            "doorbell {bell_word:02x?}, expected the last WQE's control bytes {:02x?}",
            &last_wqe[..8]
        ));
    }
    said.push("doorbell: the last WQE's first 8 bytes".into());
    let cq = &got[p.cq_off..p.cq_off + p.cq_entries as usize * wqe::CQE_BYTES];
    if cq != devx::cq_image(p.cq_entries).as_slice() {
        return Err("the CQ ring changed (post-only must not touch it)".into());
    }
    let cq_rec = &got[p.dbr_off + devx::CQ_DBR_AT..p.dbr_off + devx::CQ_DBR_AT + 8];
    if cq_rec.iter().any(|&b| b != 0) {
        return Err(format!("the CQ doorbell record changed: {cq_rec:02x?}"));
    }
    said.push("CQ ring (op_own 0xf1 in every CQE) and CQ record untouched".into());
    Ok(said)
}

/// The stand-in's host memory, allocated in this order: the queues (page-aligned process
/// memory), the misc page, both data buffers, and the per-iteration posting times. Fields
/// drop in declaration order: the reverse.
struct EmuHost {
    cycles: PinnedBuffer,
    post: PinnedBuffer,
    dst: PinnedBuffer,
    src: PinnedBuffer,
    _misc: PinnedBuffer,
    _recs: PageBuf,
    cq: PageBuf,
    sq: PageBuf,
    /// The BlueFlame register (8 bytes at 16 in `misc`).
    bf: *mut u64,
    /// The kernel's PostResult (at 64 in `misc`).
    result: *mut PostResult,
    /// The QP's doorbell record (8 bytes at 0 in `recs`) and the CQ's (4, at 8).
    dbrec: *mut u32,
    cq_dbrec: *mut u32,
}

impl EmuHost {
    /// Allocate it all for `plan`, with `data_bytes` in each data buffer.
    fn new(l: &Loaded, plan: &EmuPlan, data_bytes: usize) -> Result<EmuHost, CudaError> {
        let sq = PageBuf::new(plan.sq_size as usize * wqe::WQEBB_BYTES);
        let cq = PageBuf::new(plan.cq_size as usize * wqe::CQE_BYTES);
        // dbrec (8), cq dbrec (4, at 8): one page, as libmlx5's doorbell-record pages hold several.
        let recs = PageBuf::new(64);
        // The BlueFlame register (8, at 16) and PostResult (at 64).
        let misc = PinnedBuffer::new(&l.ctx, 4096)?;
        let src = PinnedBuffer::new(&l.ctx, data_bytes.max(1))?;
        let dst = PinnedBuffer::new(&l.ctx, data_bytes.max(1))?;
        let post = PinnedBuffer::new(&l.ctx, plan.iterations as usize * 8)?;
        let cycles = PinnedBuffer::new(&l.ctx, plan.iterations as usize * 8)?;
        let base = misc.ptr as *mut u8;
        // SAFETY: misc is 4096 bytes, page-aligned: the offsets below are inside and aligned.
        let (bf, result) = unsafe { (base.add(16) as *mut u64, base.add(64) as *mut PostResult) };
        let (dbrec, cq_dbrec) = (
            recs.ptr() as *mut u32,
            recs.ptr().wrapping_add(8) as *mut u32,
        );
        Ok(EmuHost {
            cycles,
            post,
            dst,
            src,
            _misc: misc,
            _recs: recs,
            cq,
            sq,
            bf,
            result,
            dbrec,
            cq_dbrec,
        })
    }
}

/// The posting kernel's arguments over the stand-in's queues (their GPU addresses through
/// `map`), with `done` for each iteration's completion time.
fn emu_post_args(
    plan: &EmuPlan,
    h: &EmuHost,
    map: &HostMap,
    done: &PinnedBuffer,
    qpn: u32,
    (lkey, rkey): (u32, u32),
) -> Result<PostArgs, CudaError> {
    let dev = |p: *const u8| {
        map.device(p).ok_or_else(|| {
            CudaError::Unavailable("a queue address outside its registration".into())
        })
    };
    Ok(PostArgs {
        sq: dev(h.sq.ptr())?,
        sq_size: plan.sq_size,
        qpn,
        dbrec: dev(h.dbrec as *const u8)?,
        bf: match plan.handler {
            EmuHandler::Gpu => h.bf as u64,
            EmuHandler::CpuProxy | EmuHandler::Nobody => 0,
        },
        cq: dev(h.cq.ptr())?,
        cq_size: plan.cq_size,
        cq_dbrec: dev(h.cq_dbrec as *const u8)?,
        lbase: h.src.addr(),
        lkey,
        rbase: h.dst.addr(),
        rkey,
        size: plan.size,
        iterations: plan.iterations,
        timeout_ns: plan.timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
        post_ns: h.post.addr(),
        post_cycles: h.cycles.addr(),
        result: h.result as u64,
        flags: plan.fence.flag(),
        pi0: 0,
        ci0: 0,
        done_ns: done.addr(),
    })
}

/// An outcome before any launch: nothing measured, nothing wrong yet.
fn emu_outcome_before() -> EmuOutcome {
    EmuOutcome {
        result: PostResult::default(),
        post_ns: Vec::new(),
        post_cycles: Vec::new(),
        data_ok: true,
        violations: Vec::new(),
        consumed: 0,
        cqes: 0,
        wall: Duration::ZERO,
        launches_done: 0,
        iterations_done: 0,
        timeline_ok: true,
    }
}

/// Launch the posting kernel `plan.launches` times (at least once), each carrying on from the
/// last one's counters, into `out`: its result, timings and whether `dst` then holds the
/// pattern. Stops after a launch that failed (its error) or reported a non-zero status.
fn emu_launches(
    l: &Loaded,
    plan: &EmuPlan,
    h: &EmuHost,
    done_buf: &PinnedBuffer,
    a: &mut PostArgs,
    (dst_mr, pattern): (&Mr, &[u8]),
    out: &mut EmuOutcome,
) -> Option<CudaError> {
    for _ in 0..plan.launches.max(1) {
        dst_mr.write(0, &vec![0u8; pattern.len()]);
        // SAFETY: pinned memory owned above; no kernel is running.
        unsafe { h.result.write(PostResult::default()) };
        // SAFETY: every address above is registered or pinned memory alive until after the call.
        let ran = unsafe { run_post(l, a, plan.writes_per_iter) };
        let wall = match ran {
            Ok(w) => w,
            Err(e) => return Some(e),
        };
        out.wall += wall;
        out.launches_done += 1;
        // SAFETY: written by the finished kernel.
        let r = unsafe { h.result.read_volatile() };
        let done = (r.iterations_done as usize).min(plan.iterations as usize);
        out.iterations_done += done as u64;
        // SAFETY: iterations u64s each, the first `done` written by the finished kernel.
        let (p, c, d) = unsafe {
            (
                std::slice::from_raw_parts(h.post.ptr as *const u64, done),
                std::slice::from_raw_parts(h.cycles.ptr as *const u64, done),
                std::slice::from_raw_parts(done_buf.ptr as *const u64, done),
            )
        };
        out.post_ns.extend_from_slice(p);
        out.post_cycles.extend_from_slice(c);
        out.timeline_ok &= d.windows(2).all(|w| w[0] <= w[1]) && d.iter().all(|&t| t > 0);
        out.result = r;
        if r.status != 0 {
            break;
        }
        out.data_ok &= dst_mr.read() == pattern;
        // The next launch carries on where this one stopped, as on a live QP.
        a.pi0 = r.producer;
        a.ci0 = r.cq_consumer;
    }
    None
}

/// Run `gpudoctor_mlx5_post` against the NIC stand-in. The queues are page-aligned process
/// memory registered for the GPU with cuMemHostRegister (`HostMap`, as the live path maps
/// libmlx5's), the doorbell register and both data buffers pinned host memory.
pub fn emulate(l: &Loaded, plan: &EmuPlan) -> Result<EmuOutcome, CudaError> {
    const QPN: u32 = 0x1c3;
    let (lkey, rkey) = (0x100u32, 0x2222u32);
    let data_bytes = plan.writes_per_iter as usize * plan.size as usize;
    let h = EmuHost::new(l, plan, data_bytes)?;
    // SAFETY: the buffers outlive `map` (declared after them, dropped before).
    let map = unsafe {
        HostMap::new(
            &l.ctx,
            &[
                (h.sq.ptr() as *const u8, h.sq.len()),
                (h.cq.ptr() as *const u8, h.cq.len()),
                (h.dbrec as *const u8, 8),
                (h.cq_dbrec as *const u8, 4),
            ],
        )?
    };
    // SAFETY: all of it is memory owned by the buffers above, which outlive `mem`, the NIC and
    // the proxy (joined before the buffers drop).
    let mem = Arc::new(unsafe {
        QueueMemory::from_raw(RawQueues {
            sq: h.sq.ptr(),
            sq_size: plan.sq_size,
            dbrec: h.dbrec,
            cq: h.cq.ptr(),
            cq_size: plan.cq_size,
            cq_dbrec: h.cq_dbrec,
            bf: h.bf,
        })
    });
    // SAFETY: as above.
    unsafe { h.result.write(PostResult::default()) };
    let (lbase, rbase) = (h.src.addr(), h.dst.addr());
    // SAFETY: src/dst are data_bytes of pinned memory that outlive the NIC.
    let (src_mr, dst_mr) = unsafe {
        (
            Mr::from_raw(lkey, 0x1111, lbase, h.src.ptr as *mut u8, data_bytes, false),
            Mr::from_raw(0x200, rkey, rbase, h.dst.ptr as *mut u8, data_bytes, true),
        )
    };
    let pattern: Vec<u8> = (0..data_bytes)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[3])
        .collect();
    src_mr.write(0, &pattern);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src_mr, dst_mr.clone()]);
    if let Some(at) = plan.bad_rkey_at {
        nic.inject_error(at, wqe::Syndrome::RemoteAccess);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let nic = nic.spawn(stop.clone());
    let proxy =
        (plan.handler == EmuHandler::CpuProxy).then(|| Proxy::spawn(mem.clone(), 0, stop.clone()));
    let done_buf = PinnedBuffer::new(&l.ctx, plan.iterations as usize * 8)?;
    let mut a = emu_post_args(plan, &h, &map, &done_buf, QPN, (lkey, rkey))?;
    let mut out = emu_outcome_before();
    let failed = emu_launches(
        l,
        plan,
        &h,
        &done_buf,
        &mut a,
        (&dst_mr, &pattern),
        &mut out,
    );
    stop.store(true, Ordering::Release);
    let nic = nic.join().expect("the NIC stand-in thread");
    if let Some(p) = proxy {
        p.join().expect("the proxy thread");
    }
    if let Some(e) = failed {
        return Err(e);
    }
    out.violations = nic.violations.clone();
    out.consumed = nic.consumed;
    out.cqes = nic.cqes;
    Ok(out)
}
