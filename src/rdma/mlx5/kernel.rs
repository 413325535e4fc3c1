//! Host side of the level-4 CUDA kernel (`kernels/mlx5_post.cu`) for what a GPU machine
//! without a ConnectX can verify ("verified in halves"):
//!
//! - `build`: N threads build N RDMA-write WQEs into pinned host memory; the bytes must equal
//!   `crate::rdma::mlx5::wqe::RdmaWrite::wqe` (which CI compares with libmlx5's own helpers), slot for slot,
//!   and nothing else in the ring may change.
//! - `emulate`: the posting kernel runs its whole protocol (WQEs, fence, doorbell record,
//!   fence, doorbell or CPU proxy, CQ polling with a deadline) against `crate::rdma::mlx5::emu::Nic`, the
//!   software stand-in for the adapter, over many iterations (ring and CQ wrap), and the
//!   written data is checked. EMULATED: it measures only the GPU's side and never stands in
//!   for `probe.gpu-write-bw`.
//!
//! Nothing here runs without a GPU; `src/bin/gpudoctor-mlx5-kernel.rs` is the entry point.

use super::wqe::{self, RdmaWrite};
use crate::cuda::{self, Context, CudaError, Module, PinnedBuffer, Stream};
use std::ffi::c_void;
use std::rc::Rc;
use std::time::{Duration, Instant};

pub const SRC: &str = include_str!("../../../kernels/mlx5_post.cu");

/// What PinnedBuffer fills new memory with: ring slots no WQE was written to keep it.
pub(crate) const FILL: u8 = 0xa5;

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
                wqe::CTRL_CQ_UPDATE
            } else {
                0
            },
            imm: None,
            signature: 0,
        }
    }

    /// The whole SQ ring as it must look afterwards.
    pub fn expected_ring(&self) -> Vec<u8> {
        let mut ring = vec![FILL; self.sq_size as usize * wqe::WQEBB_BYTES];
        for i in 0..self.n {
            let w = self.write(i);
            let off = wqe::wqe_offset(w.index, self.sq_size);
            ring[off..off + wqe::WQEBB_BYTES].copy_from_slice(&w.wqe());
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
    let slot = at / wqe::WQEBB_BYTES;
    let s = slot * wqe::WQEBB_BYTES;
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    Some(format!(
        "slot {slot} byte {} differs:\n  gpu:  {}\n  rust: {}",
        at - s,
        hex(&got[s..s + wqe::WQEBB_BYTES]),
        hex(&want[s..s + wqe::WQEBB_BYTES])
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
    let bytes = case.sq_size as usize * wqe::WQEBB_BYTES;
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
        assert_eq!(r[11], wqe::CTRL_CQ_UPDATE);
        assert_eq!(r[2 * 64 + 11], 0);
        assert_eq!(&r[40..48], &(0x1000u64 + 128).to_be_bytes());
        let mut g = r.clone();
        g[64 * 3 + 37] ^= 1;
        let d = first_difference(&g, &r).unwrap();
        assert!(d.starts_with("slot 3 byte 37 differs"), "{d}");
        assert_eq!(first_difference(&r, &r), None);
    }
}
