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
    cuda::find_nvrtc(&cuda::nvrtc_search_dirs(cuda_homes))?;
    let devs = cuda::devices()?;
    let device = devs.into_iter().nth(gpu).ok_or_else(|| {
        CudaError::Unavailable(format!("no CUDA device with driver ordinal {gpu}"))
    })?;
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
    pub writes_per_iter: u32,
    pub iterations: u32,
    pub size: u32,
    pub sq_size: u32,
    pub cq_size: u32,
    /// Make the stand-in fail this WQE counter with a remote access error (the error path).
    pub bad_rkey_at: Option<u16>,
    pub timeout: Duration,
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
}

/// Run `gpudoctor_mlx5_post` against the NIC stand-in. The queues, the doorbell register and
/// both data buffers are pinned host memory the kernel reaches through its mapping.
pub fn emulate(l: &Loaded, plan: &EmuPlan) -> Result<EmuOutcome, CudaError> {
    const QPN: u32 = 0x1c3;
    let (lkey, rkey) = (0x100u32, 0x2222u32);
    let f = l.module.function("gpudoctor_mlx5_post")?;
    let data_bytes = plan.writes_per_iter as usize * plan.size as usize;
    let sq = PinnedBuffer::new(&l.ctx, plan.sq_size as usize * mlx5::WQEBB_BYTES)?;
    let cq = PinnedBuffer::new(&l.ctx, plan.cq_size as usize * mlx5::CQE_BYTES)?;
    // dbrec (8), cq dbrec (4, at 8), BlueFlame register (8, at 16), PostResult (at 64).
    let misc = PinnedBuffer::new(&l.ctx, 4096)?;
    let src = PinnedBuffer::new(&l.ctx, data_bytes.max(1))?;
    let dst = PinnedBuffer::new(&l.ctx, data_bytes.max(1))?;
    let post = PinnedBuffer::new(&l.ctx, plan.iterations as usize * 8)?;
    let cycles = PinnedBuffer::new(&l.ctx, plan.iterations as usize * 8)?;
    let base = misc.ptr as *mut u8;
    // SAFETY: misc is 4096 bytes, page-aligned: the offsets below are inside and aligned.
    let (dbrec, cq_dbrec, bf, result) = unsafe {
        (
            base as *mut u32,
            base.add(8) as *mut u32,
            base.add(16) as *mut u64,
            base.add(64) as *mut PostResult,
        )
    };
    // SAFETY: all of it is pinned memory owned by the buffers above, which outlive `mem`,
    // the NIC and the proxy (joined before the buffers drop).
    let mem = Arc::new(unsafe {
        QueueMemory::from_raw(RawQueues {
            sq: sq.ptr as *mut u8,
            sq_size: plan.sq_size,
            dbrec,
            cq: cq.ptr as *mut u8,
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
    dst_mr.write(0, &vec![0u8; data_bytes]);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src_mr, dst_mr.clone()]);
    if let Some(at) = plan.bad_rkey_at {
        nic.inject_error(at, mlx5::Syndrome::RemoteAccess);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let nic = nic.spawn(stop.clone());
    let proxy =
        (plan.handler == EmuHandler::CpuProxy).then(|| Proxy::spawn(mem.clone(), 0, stop.clone()));

    let stream = Stream::new(&l.ctx)?;
    let mut a_sq = sq.addr();
    let mut a_sq_size = plan.sq_size;
    let mut a_qpn = QPN;
    let mut a_dbrec = dbrec as u64;
    let mut a_bf: u64 = match plan.handler {
        EmuHandler::Gpu => bf as u64,
        EmuHandler::CpuProxy | EmuHandler::Nobody => 0,
    };
    let mut a_cq = cq.addr();
    let mut a_cq_size = plan.cq_size;
    let mut a_cq_dbrec = cq_dbrec as u64;
    let (mut a_lbase, mut a_lkey, mut a_rbase, mut a_rkey) = (lbase, lkey, rbase, rkey);
    let mut a_size = plan.size;
    let mut a_iters = plan.iterations;
    let mut a_timeout = plan.timeout.as_nanos().min(u128::from(u64::MAX)) as u64;
    let mut a_post = post.addr();
    let mut a_cycles = cycles.addr();
    let mut a_result = result as u64;
    let mut params = [
        arg(&mut a_sq),
        arg(&mut a_sq_size),
        arg(&mut a_qpn),
        arg(&mut a_dbrec),
        arg(&mut a_bf),
        arg(&mut a_cq),
        arg(&mut a_cq_size),
        arg(&mut a_cq_dbrec),
        arg(&mut a_lbase),
        arg(&mut a_lkey),
        arg(&mut a_rbase),
        arg(&mut a_rkey),
        arg(&mut a_size),
        arg(&mut a_iters),
        arg(&mut a_timeout),
        arg(&mut a_post),
        arg(&mut a_cycles),
        arg(&mut a_result),
    ];
    let t = Instant::now();
    // SAFETY: the parameters match gpudoctor_mlx5_post's signature; every pointer is pinned
    // host memory (UVA) alive until after the synchronize.
    let launched = unsafe { cuda::launch(f, 1, plan.writes_per_iter, &mut params, &stream) };
    let synced = launched.and_then(|()| stream.synchronize());
    let wall = t.elapsed();
    stop.store(true, Ordering::Release);
    let nic = nic.join().expect("the NIC stand-in thread");
    if let Some(p) = proxy {
        p.join().expect("the proxy thread");
    }
    synced?;
    // SAFETY: written by the finished kernel.
    let result = unsafe { result.read_volatile() };
    // SAFETY: iterations u64s written by the finished kernel.
    let done = (result.iterations_done as usize).min(plan.iterations as usize);
    let post_ns =
        unsafe { std::slice::from_raw_parts(post.ptr as *const u64, plan.iterations as usize) }
            [..done]
            .to_vec();
    // SAFETY: as above.
    let post_cycles =
        unsafe { std::slice::from_raw_parts(cycles.ptr as *const u64, plan.iterations as usize) }
            [..done]
            .to_vec();
    Ok(EmuOutcome {
        result,
        post_ns,
        post_cycles,
        data_ok: dst_mr.read() == pattern,
        violations: nic.violations.clone(),
        consumed: nic.consumed,
        cqes: nic.cqes,
        wall,
    })
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
