//! Host side of the level-4 CUDA kernel (`kernels/mlx5_post.cu`) for what a GPU machine
//! without a ConnectX can verify (issue 10, "verified in halves"):
//!
//! - `build`: N threads build N RDMA-write WQEs into pinned host memory; the bytes must equal
//!   `mlx5::RdmaWrite::wqe` (which CI compares with libmlx5's own helpers), slot for slot,
//!   and nothing else in the ring may change.
//! - `emulate`: the posting kernel runs its whole protocol (WQEs, fence, doorbell record,
//!   fence, doorbell or CPU proxy, CQ polling with a deadline) against `mlx5_emu::Nic`, the
//!   software stand-in for the adapter, over many iterations (ring and CQ wrap), and the
//!   written data is checked. EMULATED: it measures only the GPU's side and never stands in
//!   for `probe.gpu-write-bw`.
//!
//! Nothing here runs without a GPU; `src/bin/gpudoctor-mlx5-kernel.rs` is the entry point.

use super::mlx5::{self, RdmaWrite};
use super::mlx5_emu::{Mr, Nic, Proxy, QueueMemory, RawQueues};
use crate::cuda::{self, Context, CudaError, Module, PinnedBuffer, Stream};
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const SRC: &str = include_str!("../../kernels/mlx5_post.cu");

/// What PinnedBuffer fills new memory with: ring slots no WQE was written to keep it.
const FILL: u8 = 0xa5;

/// The cases `gpudoctor_mlx5_build` builds: WQE i writes `size` bytes from `lbase + i*size`
/// to `rbase + i*size` with counter `first + i`; only the last asks for a completion.
#[derive(Debug, Clone, Copy)]
pub struct BuildCase {
    pub sq_size: u32,
    pub qpn: u32,
    pub first: u16,
    pub n: u32,
    pub lbase: u64,
    pub lkey: u32,
    pub rbase: u64,
    pub rkey: u32,
    pub size: u32,
}

impl BuildCase {
    pub fn write(&self, i: u32) -> RdmaWrite {
        RdmaWrite {
            index: self.first.wrapping_add(i as u16),
            qpn: self.qpn,
            laddr: self.lbase + u64::from(i) * u64::from(self.size),
            lkey: self.lkey,
            length: self.size,
            raddr: self.rbase + u64::from(i) * u64::from(self.size),
            rkey: self.rkey,
            flags: if i + 1 == self.n {
                mlx5::CTRL_CQ_UPDATE
            } else {
                0
            },
            imm: None,
            signature: 0,
        }
    }

    /// The whole SQ ring as it must look afterwards.
    pub fn expected_ring(&self) -> Vec<u8> {
        let mut ring = vec![FILL; self.sq_size as usize * mlx5::WQEBB_BYTES];
        for i in 0..self.n {
            let w = self.write(i);
            let off = mlx5::wqe_offset(w.index, self.sq_size);
            ring[off..off + mlx5::WQEBB_BYTES].copy_from_slice(&w.wqe());
        }
        ring
    }
}

/// The first difference between two rings, as a sentence naming the WQE slot and byte.
pub fn first_difference(got: &[u8], want: &[u8]) -> Option<String> {
    if got.len() != want.len() {
        return Some(format!(
            "ring is {} bytes, expected {}",
            got.len(),
            want.len()
        ));
    }
    let at = got.iter().zip(want).position(|(a, b)| a != b)?;
    let slot = at / mlx5::WQEBB_BYTES;
    let s = slot * mlx5::WQEBB_BYTES;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!(
        "slot {slot} byte {} differs:\n  gpu:  {}\n  rust: {}",
        at - s,
        hex(&got[s..s + mlx5::WQEBB_BYTES]),
        hex(&want[s..s + mlx5::WQEBB_BYTES])
    ))
}

/// CUDA up, NVRTC found, the kernel compiled and loaded on driver ordinal `gpu`.
pub struct Loaded {
    pub ctx: Rc<Context>,
    pub module: Module,
    pub device: cuda::Device,
}

pub fn load(gpu: usize, cuda_homes: &[std::path::PathBuf]) -> Result<Loaded, CudaError> {
    cuda::driver_presence()?;
    cuda::init()?;
    let devs = cuda::devices()?;
    let device = devs.into_iter().nth(gpu).ok_or_else(|| {
        CudaError::Unavailable(format!("no CUDA device with driver ordinal {gpu}"))
    })?;
    load_on(device, cuda_homes)
}

/// Compile and load the kernel on `device` (found by the caller, by PCI address).
pub fn load_on(
    device: cuda::Device,
    cuda_homes: &[std::path::PathBuf],
) -> Result<Loaded, CudaError> {
    cuda::find_nvrtc(&cuda::nvrtc_search_dirs(cuda_homes))?;
    let ctx = Context::retain(device.handle)?;
    let cubin = cuda::compile_cubin(SRC, "mlx5_post.cu", &device.arch())?;
    let module = Module::load(&ctx, &cubin)?;
    Ok(Loaded {
        ctx,
        module,
        device,
    })
}

fn arg<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

/// Run `gpudoctor_mlx5_build` for `case` into a pinned ring and return the ring's bytes.
pub fn build_on_gpu(l: &Loaded, case: &BuildCase) -> Result<Vec<u8>, CudaError> {
    let f = l.module.function("gpudoctor_mlx5_build")?;
    let bytes = case.sq_size as usize * mlx5::WQEBB_BYTES;
    let ring = PinnedBuffer::new(&l.ctx, bytes)?;
    let stream = Stream::new(&l.ctx)?;
    let mut sq = ring.addr();
    let (mut sq_size, mut qpn, mut first, mut n) =
        (case.sq_size, case.qpn, u32::from(case.first), case.n);
    let (mut lbase, mut lkey, mut rbase, mut rkey, mut size) =
        (case.lbase, case.lkey, case.rbase, case.rkey, case.size);
    let mut params = [
        arg(&mut sq),
        arg(&mut sq_size),
        arg(&mut qpn),
        arg(&mut first),
        arg(&mut n),
        arg(&mut lbase),
        arg(&mut lkey),
        arg(&mut rbase),
        arg(&mut rkey),
        arg(&mut size),
    ];
    let block = 256u32;
    let grid = case.n.div_ceil(block);
    // SAFETY: the parameters match gpudoctor_mlx5_build's signature (pointer, 4 x u32, u64,
    // u32, u64, u32, u32); the ring holds sq_size WQEBBs and lives past the synchronize.
    unsafe { cuda::launch(f, grid, block, &mut params, &stream)? };
    stream.synchronize()?;
    // SAFETY: `bytes` bytes at ring.ptr, written by the finished kernel.
    let got = unsafe { std::slice::from_raw_parts(ring.ptr as *const u8, bytes) }.to_vec();
    Ok(got)
}

/// What the kernel reports (`struct PostResult` in mlx5_post.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct PostResult {
    pub status: u32,
    pub iterations_done: u32,
    pub syndrome: u32,
    pub vendor_syndrome: u32,
    pub wqe_counter: u32,
    pub producer: u32,
    pub cq_consumer: u32,
    pub pad: u32,
}

/// `gpudoctor_mlx5_post`'s flags (mlx5_post.cu).
pub const FLAG_LEADER_FENCE: u32 = 1;
pub const FLAG_POST_ONLY: u32 = 2;
pub const FLAG_GPU_SCOPE_FENCE: u32 = 4;
pub const FLAG_RELEASE_FENCE: u32 = 8;

/// How the WQE stores are ordered before the doorbell record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// `__threadfence_system()` in every thread after its WQE, then the block barrier.
    PerThread,
    /// The block barrier, then one `__threadfence_system()` in thread 0 (IBGDA's pattern).
    Leader,
    /// The block barrier, then `__threadfence()` (GPU scope) in thread 0 before the record
    /// and before the doorbell: only for an SQ and doorbell record in GPU memory.
    LeaderGpuScope,
    /// As `Leader` with `fence.acq_rel.sys` (release ordering) instead of fence.sc.
    LeaderRelease,
    /// As `LeaderGpuScope` with `fence.acq_rel.gpu`.
    LeaderReleaseGpuScope,
}

impl Fence {
    pub fn as_str(self) -> &'static str {
        match self {
            Fence::PerThread => "fence in every thread",
            Fence::Leader => "barrier + one fence",
            Fence::LeaderGpuScope => "barrier + one GPU-scope fence",
            Fence::LeaderRelease => "barrier + acq_rel.sys fence",
            Fence::LeaderReleaseGpuScope => "barrier + acq_rel.gpu fence",
        }
    }
    pub fn flag(self) -> u32 {
        match self {
            Fence::PerThread => 0,
            Fence::Leader => FLAG_LEADER_FENCE,
            Fence::LeaderGpuScope => FLAG_LEADER_FENCE | FLAG_GPU_SCOPE_FENCE,
            Fence::LeaderRelease => FLAG_LEADER_FENCE | FLAG_RELEASE_FENCE,
            Fence::LeaderReleaseGpuScope => {
                FLAG_LEADER_FENCE | FLAG_GPU_SCOPE_FENCE | FLAG_RELEASE_FENCE
            }
        }
    }
}

/// `gpudoctor_mlx5_post`'s arguments: every address one the GPU can use.
#[derive(Debug, Clone, Copy)]
pub struct PostArgs {
    pub sq: u64,
    pub sq_size: u32,
    pub qpn: u32,
    /// The QP doorbell record (8 bytes: receive, send).
    pub dbrec: u64,
    /// The doorbell register; 0: the kernel does not ring (a CPU proxy does, or nobody).
    pub bf: u64,
    pub cq: u64,
    pub cq_size: u32,
    pub cq_dbrec: u64,
    pub lbase: u64,
    pub lkey: u32,
    pub rbase: u64,
    pub rkey: u32,
    pub size: u32,
    pub iterations: u32,
    pub timeout_ns: u64,
    /// `iterations` u64s each.
    pub post_ns: u64,
    pub post_cycles: u64,
    /// A `PostResult`.
    pub result: u64,
    pub flags: u32,
    /// The first WQE counter and CQ consumer index (where the previous launch left them).
    pub pi0: u32,
    pub ci0: u32,
    /// `iterations` u64s: when each iteration's completion came (ns since the kernel started);
    /// 0: not recorded.
    pub done_ns: u64,
}

/// Launch `gpudoctor_mlx5_post` on one block of `threads` (one WQE each per iteration) and
/// wait for it; returns the wall time from launch to the end of the synchronize.
///
/// # Safety
/// Every address in `a` must be GPU-visible memory of the size the kernel uses (see
/// mlx5_post.cu), alive until this returns; nothing else may post on that SQ meanwhile.
pub unsafe fn run_post(l: &Loaded, a: &PostArgs, threads: u32) -> Result<Duration, CudaError> {
    let f = l.module.function("gpudoctor_mlx5_post")?;
    let stream = Stream::new(&l.ctx)?;
    let mut a = *a;
    let mut params = [
        arg(&mut a.sq),
        arg(&mut a.sq_size),
        arg(&mut a.qpn),
        arg(&mut a.dbrec),
        arg(&mut a.bf),
        arg(&mut a.cq),
        arg(&mut a.cq_size),
        arg(&mut a.cq_dbrec),
        arg(&mut a.lbase),
        arg(&mut a.lkey),
        arg(&mut a.rbase),
        arg(&mut a.rkey),
        arg(&mut a.size),
        arg(&mut a.iterations),
        arg(&mut a.timeout_ns),
        arg(&mut a.post_ns),
        arg(&mut a.post_cycles),
        arg(&mut a.result),
        arg(&mut a.flags),
        arg(&mut a.pi0),
        arg(&mut a.ci0),
        arg(&mut a.done_ns),
    ];
    let t = Instant::now();
    // SAFETY: the parameters match gpudoctor_mlx5_post's signature; the caller's contract
    // covers the memory behind them.
    unsafe { cuda::launch(f, 1, threads, &mut params, &stream)? };
    stream.synchronize()?;
    Ok(t.elapsed())
}

/// The host's page size (4096 where sysconf cannot say).
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

/// Host memory that something other than CUDA allocated (libmlx5's SQ and CQ buffers and
/// doorbell records) made visible to the GPU: each page range registered once with
/// cuMemHostRegister, since libmlx5 puts the doorbell records of several queues on one page
/// and CUDA refuses to register a page twice. The live path and the stand-in share this.
pub struct HostMap {
    regs: Vec<cuda::HostRegistration>,
}

impl HostMap {
    /// # Safety
    /// Every range must be mapped host memory that outlives the result.
    pub unsafe fn new(ctx: &Rc<Context>, ranges: &[(*const u8, usize)]) -> Result<Self, CudaError> {
        let page = page_size();
        let mut spans: Vec<(usize, usize)> = ranges
            .iter()
            .filter(|(_, len)| *len > 0)
            .map(|&(p, len)| {
                let start = p as usize & !(page - 1);
                let end = (p as usize + len).div_ceil(page) * page;
                (start, end)
            })
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::new();
        for (s, e) in spans {
            match merged.last_mut() {
                // Overlapping ranges only: neighbours may be different allocations.
                Some(last) if s < last.1 => last.1 = last.1.max(e),
                _ => merged.push((s, e)),
            }
        }
        let mut regs = Vec::new();
        for (s, e) in merged {
            // SAFETY: whole pages of the caller's mapped ranges.
            regs.push(unsafe { cuda::HostRegistration::new(ctx, s as *mut c_void, e - s, false)? });
        }
        Ok(HostMap { regs })
    }

    /// The GPU's address for host address `p` (inside one of the ranges given to `new`).
    pub fn device(&self, p: *const u8) -> Option<u64> {
        self.regs
            .iter()
            .find_map(|r| r.device_addr(p as *const c_void))
    }
}

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
    let sq_bytes = sq_size as usize * mlx5::WQEBB_BYTES;
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
        let r = slot * mlx5::WQEBB_BYTES..(slot + 1) * mlx5::WQEBB_BYTES;
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
    let bell_word = unsafe { std::slice::from_raw_parts(bell.ptr as *const u8, 8) }.to_vec();
    let last_wqe = last.write(writes - 1).wqe();
    if bell_word != last_wqe[..8] {
        return Err(format!(
            "doorbell {bell_word:02x?}, expected the last WQE's control bytes {:02x?}",
            &last_wqe[..8]
        ));
    }
    said.push("doorbell: the last WQE's first 8 bytes".into());
    let cq = &got[p.cq_off..p.cq_off + p.cq_entries as usize * mlx5::CQE_BYTES];
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

/// Run `gpudoctor_mlx5_post` against the NIC stand-in. The queues are page-aligned process
/// memory registered for the GPU with cuMemHostRegister (`HostMap`, as the live path maps
/// libmlx5's), the doorbell register and both data buffers pinned host memory.
pub fn emulate(l: &Loaded, plan: &EmuPlan) -> Result<EmuOutcome, CudaError> {
    const QPN: u32 = 0x1c3;
    let (lkey, rkey) = (0x100u32, 0x2222u32);
    let data_bytes = plan.writes_per_iter as usize * plan.size as usize;
    let sq = PageBuf::new(plan.sq_size as usize * mlx5::WQEBB_BYTES);
    let cq = PageBuf::new(plan.cq_size as usize * mlx5::CQE_BYTES);
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
    // SAFETY: the buffers outlive `map` (declared after them, dropped before).
    let map = unsafe {
        HostMap::new(
            &l.ctx,
            &[
                (sq.ptr() as *const u8, sq.len()),
                (cq.ptr() as *const u8, cq.len()),
                (dbrec as *const u8, 8),
                (cq_dbrec as *const u8, 4),
            ],
        )?
    };
    let dev = |p: *const u8| {
        map.device(p).ok_or_else(|| {
            CudaError::Unavailable("a queue address outside its registration".into())
        })
    };
    // SAFETY: all of it is memory owned by the buffers above, which outlive `mem`, the NIC and
    // the proxy (joined before the buffers drop).
    let mem = Arc::new(unsafe {
        QueueMemory::from_raw(RawQueues {
            sq: sq.ptr(),
            sq_size: plan.sq_size,
            dbrec,
            cq: cq.ptr(),
            cq_size: plan.cq_size,
            cq_dbrec,
            bf,
        })
    });
    // SAFETY: as above.
    unsafe { result.write(PostResult::default()) };
    let (lbase, rbase) = (src.addr(), dst.addr());
    // SAFETY: src/dst are data_bytes of pinned memory that outlive the NIC.
    let (src_mr, dst_mr) = unsafe {
        (
            Mr::from_raw(lkey, 0x1111, lbase, src.ptr as *mut u8, data_bytes, false),
            Mr::from_raw(0x200, rkey, rbase, dst.ptr as *mut u8, data_bytes, true),
        )
    };
    let pattern: Vec<u8> = (0..data_bytes)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[3])
        .collect();
    src_mr.write(0, &pattern);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src_mr, dst_mr.clone()]);
    if let Some(at) = plan.bad_rkey_at {
        nic.inject_error(at, mlx5::Syndrome::RemoteAccess);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let nic = nic.spawn(stop.clone());
    let proxy =
        (plan.handler == EmuHandler::CpuProxy).then(|| Proxy::spawn(mem.clone(), 0, stop.clone()));
    let done_buf = PinnedBuffer::new(&l.ctx, plan.iterations as usize * 8)?;
    let mut a = PostArgs {
        sq: dev(sq.ptr())?,
        sq_size: plan.sq_size,
        qpn: QPN,
        dbrec: dev(dbrec as *const u8)?,
        bf: match plan.handler {
            EmuHandler::Gpu => bf as u64,
            EmuHandler::CpuProxy | EmuHandler::Nobody => 0,
        },
        cq: dev(cq.ptr())?,
        cq_size: plan.cq_size,
        cq_dbrec: dev(cq_dbrec as *const u8)?,
        lbase,
        lkey,
        rbase,
        rkey,
        size: plan.size,
        iterations: plan.iterations,
        timeout_ns: plan.timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
        post_ns: post.addr(),
        post_cycles: cycles.addr(),
        result: result as u64,
        flags: plan.fence.flag(),
        pi0: 0,
        ci0: 0,
        done_ns: done_buf.addr(),
    };
    let mut out = EmuOutcome {
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
    };
    let mut failed = None;
    for _ in 0..plan.launches.max(1) {
        dst_mr.write(0, &vec![0u8; data_bytes]);
        // SAFETY: pinned memory owned above; no kernel is running.
        unsafe { result.write(PostResult::default()) };
        // SAFETY: every address above is registered or pinned memory alive until after the call.
        let ran = unsafe { run_post(l, &a, plan.writes_per_iter) };
        let wall = match ran {
            Ok(w) => w,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        out.wall += wall;
        out.launches_done += 1;
        // SAFETY: written by the finished kernel.
        let r = unsafe { result.read_volatile() };
        let done = (r.iterations_done as usize).min(plan.iterations as usize);
        out.iterations_done += done as u64;
        // SAFETY: iterations u64s each, the first `done` written by the finished kernel.
        let (p, c, d) = unsafe {
            (
                std::slice::from_raw_parts(post.ptr as *const u64, done),
                std::slice::from_raw_parts(cycles.ptr as *const u64, done),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_ring_places_wqes_by_counter() {
        let c = BuildCase {
            sq_size: 4,
            qpn: 0x12,
            first: 0xfffe,
            n: 3,
            lbase: 0x1000,
            lkey: 1,
            rbase: 0x2000,
            rkey: 2,
            size: 64,
        };
        let r = c.expected_ring();
        // Counters 0xfffe, 0xffff, 0x0000 go to slots 2, 3, 0; slot 1 is untouched.
        assert_eq!(&r[2 * 64..2 * 64 + 4], &[0x00, 0xff, 0xfe, 0x08]);
        assert_eq!(&r[3 * 64..3 * 64 + 4], &[0x00, 0xff, 0xff, 0x08]);
        assert_eq!(&r[0..4], &[0x00, 0x00, 0x00, 0x08]);
        assert!(r[64..128].iter().all(|&b| b == FILL));
        // Only the last is signaled; addresses step by size.
        assert_eq!(r[11], mlx5::CTRL_CQ_UPDATE);
        assert_eq!(r[2 * 64 + 11], 0);
        assert_eq!(&r[40..48], &(0x1000u64 + 128).to_be_bytes());
        let mut g = r.clone();
        g[64 * 3 + 37] ^= 1;
        let d = first_difference(&g, &r).unwrap();
        assert!(d.starts_with("slot 3 byte 37 differs"), "{d}");
        assert_eq!(first_difference(&r, &r), None);
    }
}
