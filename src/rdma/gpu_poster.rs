//! Level 4's poster (issue 10): a CUDA kernel (`kernels/mlx5_post.cu`) posts the RDMA writes
//! of the write-bw engine's loopback itself, on the source side's own RC QP, through the
//! queues libmlx5 hands out with `mlx5dv_init_obj`. The engine opens the devices, creates and
//! connects the QPs, allocates and registers the GPU buffers (level 3's memory provider) and
//! validates the bytes; only who posts changes (`super::Poster`).
//!
//! - The SQ buffer, the QP doorbell record, the CQ buffer and its record are libmlx5's process
//!   memory, made visible to the GPU with cuMemHostRegister (`mlx5_kernel::HostMap`, which the
//!   NIC stand-in's runs on the GPU machines go through as well).
//! - `gpu` handler: the doorbell page (BlueFlame/UAR register) is registered with
//!   CU_MEMHOSTREGISTER_IOMEMORY (needs the driver's PeerMappingOverride=1) and the kernel
//!   writes the doorbell; `cpu-proxy`: the kernel writes WQEs and the record, a CPU thread
//!   (`mlx5_emu::Proxy`) rings.
//! - The queues stay in host memory: `gpudoctor-mlx5-kernel bench` measured what moving them
//!   into GPU memory (DevX + umem, as IBGDA does) would save; the README gives the figures.
//!
//! NOT RUN ON A CONNECTX: no machine here has a GPU and an mlx5 device together. The kernel,
//! the mapping and both handlers ran on H100/H200 against the stand-in; this file's verbs half
//! has met no adapter.

use super::engine::{Endpoint, ProbeError, Side};
use super::level4::NicHandler;
use super::mlx5::{self, Syndrome};
use super::mlx5_emu::{Proxy, QueueMemory, RawQueues};
use super::mlx5_kernel::{self as k, Fence, HostMap, PostArgs, PostResult};
use super::write_bw::{self, SizeResult, Timeline};
use super::{Poster, WriteBwRequest};
use crate::cuda::{self, CudaError, HostRegistration, PinnedBuffer};
use crate::verbs::mlx5dv_sys as dv;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The kernel's result codes (`PostResult.status`).
const POST_OK: u32 = 0;
const POST_ERROR_CQE: u32 = 1;
const POST_TIMEOUT: u32 = 2;

/// What libmlx5 reported for the QP and CQ (`mlx5dv_qp`, `mlx5dv_cq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub sq_stride: u32,
    pub sq_wqe_cnt: u32,
    pub cqe_size: u32,
    pub cqe_cnt: u32,
    pub bf_reg: bool,
    pub bf_size: u32,
}

/// Whether the kernel can post `writes` WQEs per iteration on queues of this layout.
pub fn check_layout(l: &Layout, writes: u32) -> Result<(), String> {
    if l.sq_stride != mlx5::WQEBB_BYTES as u32 {
        return Err(format!(
            "the SQ stride is {} B; the kernel writes 64-byte WQEBBs",
            l.sq_stride
        ));
    }
    if !l.sq_wqe_cnt.is_power_of_two() || l.sq_wqe_cnt < writes {
        return Err(format!(
            "the SQ holds {} WQEBBs; {writes} writes per iteration need a power of two at least as large",
            l.sq_wqe_cnt
        ));
    }
    if l.cqe_size != mlx5::CQE_BYTES as u32 {
        return Err(format!(
            "CQEs are {} B (MLX5_CQE_SIZE set?); the kernel reads 64-byte CQEs",
            l.cqe_size
        ));
    }
    // After an error every outstanding WQE completes with a flush error: room for them all.
    if !l.cqe_cnt.is_power_of_two() || l.cqe_cnt < writes {
        return Err(format!(
            "the CQ holds {} CQEs; {writes} writes per iteration need a power of two at least as large",
            l.cqe_cnt
        ));
    }
    if !l.bf_reg {
        return Err("libmlx5 gave no doorbell (BlueFlame/UAR) register for the QP".into());
    }
    Ok(())
}

/// The kernel's outcome for one launch, as an engine error where it stopped.
pub fn outcome(
    device: &str,
    size: u64,
    writes: u32,
    iters: u32,
    timeout: Duration,
    r: &PostResult,
) -> Result<(), ProbeError> {
    match r.status {
        POST_OK => Ok(()),
        POST_ERROR_CQE => Err(ProbeError::Mlx5 {
            device: device.into(),
            reason: format!(
                "{size} B writes: error CQE for WQE {} in iteration {}: {} (syndrome 0x{:02x}, \
                 vendor syndrome 0x{:02x})",
                r.wqe_counter,
                r.iterations_done + 1,
                Syndrome::from_u8(r.syndrome as u8),
                r.syndrome,
                r.vendor_syndrome
            ),
        }),
        POST_TIMEOUT => Err(ProbeError::NoCompletion {
            device: device.into(),
            bytes: size,
            completed: u64::from(r.iterations_done) * u64::from(writes),
            iterations: u64::from(iters) * u64::from(writes),
            timeout,
        }),
        s => Err(ProbeError::Mlx5 {
            device: device.into(),
            reason: format!("{size} B writes: the kernel reported status {s}"),
        }),
    }
}

/// The timeline `write_bw::summarise` reads: iteration i's completion covers (i+1) x writes.
pub fn timeline(done_ns: &[u64], writes: u32) -> Timeline {
    Timeline {
        marks: done_ns
            .iter()
            .enumerate()
            .map(|(i, &t)| (t, (i as u64 + 1) * u64::from(writes)))
            .collect(),
    }
}

/// What the poster did, for the report.
#[derive(Debug, Clone, Default)]
pub struct PosterFacts {
    /// The handler that rang the doorbell (None before `prepare` succeeded).
    pub handler: Option<NicHandler>,
    pub why: String,
    /// Posting time of every iteration of every size (%globaltimer, ns).
    pub post_ns: Vec<u64>,
    pub post_cycles: Vec<u64>,
    pub layout: Option<Layout>,
}

/// Everything `prepare` set up; dropped by `finish`, while the QP and CQ still exist.
struct Live {
    // Field order is drop order: the proxy's queue view and the mappings before the module.
    mem: Arc<QueueMemory>,
    _uar: Option<HostRegistration>,
    map: HostMap,
    timing: PinnedBuffer,
    loaded: k::Loaded,
    _dv: dv::Mlx5Dv,
    qpn: u32,
    raw: RawQueues,
    bf_dev: u64,
    pi: u32,
    ci: u32,
}

pub struct GpuPoster {
    pub device_name: String,
    gpu: cuda::Device,
    cuda_homes: Vec<PathBuf>,
    pub writes: u32,
    pub iters: u32,
    requested: NicHandler,
    decided: NicHandler,
    live: Option<Live>,
    pub facts: PosterFacts,
}

impl GpuPoster {
    /// `decided`/`why`: the handler `level4::choose_handler` picked; `gpu` falls back to
    /// cpu-proxy only when `requested` was auto and the doorbell page does not map.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        device_name: &str,
        gpu: cuda::Device,
        cuda_homes: Vec<PathBuf>,
        writes: u32,
        iters: u32,
        requested: NicHandler,
        decided: NicHandler,
        why: String,
    ) -> Self {
        GpuPoster {
            device_name: device_name.into(),
            gpu,
            cuda_homes,
            writes,
            iters,
            requested,
            decided,
            live: None,
            facts: PosterFacts {
                why,
                ..PosterFacts::default()
            },
        }
    }

    fn err(&self, reason: String) -> ProbeError {
        ProbeError::Mlx5 {
            device: self.device_name.clone(),
            reason,
        }
    }

    fn cuda_err(&self, what: &str, e: CudaError) -> ProbeError {
        self.err(format!("{what}: {e}"))
    }

    fn setup(&mut self, source: &Side) -> Result<Live, ProbeError> {
        let lib = crate::verbs::load_mlx5dv().map_err(|e| self.err(e.to_string()))?;
        if lib.mlx5dv_init_obj.is_err() {
            return Err(self.err(format!(
                "{} has no mlx5dv_init_obj",
                crate::verbs::LIBMLX5_SONAME
            )));
        }
        let (qp, cq) = source.raw_qp_cq();
        // SAFETY: plain C structs, filled by mlx5dv_init_obj.
        let mut dqp: dv::mlx5dv_qp = unsafe { std::mem::zeroed() };
        let mut dcq: dv::mlx5dv_cq = unsafe { std::mem::zeroed() };
        let mut obj: dv::mlx5dv_obj = unsafe { std::mem::zeroed() };
        obj.qp.in_ = qp;
        obj.qp.out = &mut dqp;
        obj.cq.in_ = cq;
        obj.cq.out = &mut dcq;
        // SAFETY: qp and cq are live objects of an mlx5 context (the device was checked to be
        // served by mlx5_core); the out structs live on this frame.
        let rc = unsafe {
            lib.mlx5dv_init_obj(&mut obj, u64::from(dv::MLX5DV_OBJ_QP | dv::MLX5DV_OBJ_CQ))
        };
        if rc != 0 {
            return Err(self.err(format!(
                "mlx5dv_init_obj failed ({}): not an mlx5 QP?",
                std::io::Error::from_raw_os_error(rc.abs())
            )));
        }
        let layout = Layout {
            sq_stride: dqp.sq.stride,
            sq_wqe_cnt: dqp.sq.wqe_cnt,
            cqe_size: dcq.cqe_size,
            cqe_cnt: dcq.cqe_cnt,
            bf_reg: !dqp.bf.reg.is_null(),
            bf_size: dqp.bf.size,
        };
        self.facts.layout = Some(layout);
        check_layout(&layout, self.writes).map_err(|e| self.err(e))?;
        let loaded = k::load_on(self.gpu.clone(), &self.cuda_homes)
            .map_err(|e| self.cuda_err("the level-4 kernel", e))?;
        let raw = RawQueues {
            sq: dqp.sq.buf as *mut u8,
            sq_size: layout.sq_wqe_cnt,
            dbrec: dqp.dbrec,
            cq: dcq.buf as *mut u8,
            cq_size: layout.cqe_cnt,
            cq_dbrec: dcq.dbrec,
            bf: dqp.bf.reg as *mut u64,
        };
        // SAFETY: libmlx5's buffers of the sizes it reported, alive as long as the QP and CQ,
        // which outlive `Live` (finish drops it before the sides go).
        let map = unsafe {
            HostMap::new(
                &loaded.ctx,
                &[
                    (
                        raw.sq as *const u8,
                        layout.sq_wqe_cnt as usize * mlx5::WQEBB_BYTES,
                    ),
                    (raw.dbrec as *const u8, 8),
                    (
                        raw.cq as *const u8,
                        layout.cqe_cnt as usize * mlx5::CQE_BYTES,
                    ),
                    (raw.cq_dbrec as *const u8, 4),
                ],
            )
        }
        .map_err(|e| self.cuda_err("cuMemHostRegister of the mlx5 queues", e))?;
        let (uar, bf_dev) = self.map_doorbell(&loaded, raw.bf)?;
        let timing = PinnedBuffer::new(&loaded.ctx, 64 + self.iters as usize * 24)
            .map_err(|e| self.cuda_err("pinned timing buffer", e))?;
        // SAFETY: as for `map`; the proxy (cpu-proxy) is the only writer of the register.
        let mem = Arc::new(unsafe { QueueMemory::attach(raw) });
        // SAFETY: qp is alive (above).
        let qpn = unsafe { (*qp).qp_num };
        Ok(Live {
            mem,
            _uar: uar,
            map,
            timing,
            loaded,
            _dv: lib,
            qpn,
            raw,
            bf_dev,
            pi: 0,
            ci: 0,
        })
    }

    /// The doorbell register for the `gpu` handler (IOMEMORY registration of its page), or
    /// nothing for `cpu-proxy`; sets the handler used and why.
    fn map_doorbell(
        &mut self,
        loaded: &k::Loaded,
        bf: *mut u64,
    ) -> Result<(Option<HostRegistration>, u64), ProbeError> {
        if self.decided != NicHandler::Gpu {
            self.facts.handler = Some(NicHandler::CpuProxy);
            return Ok((None, 0));
        }
        let page = k::page_size();
        let base = (bf as usize & !(page - 1)) as *mut c_void;
        // SAFETY: the UAR page libmlx5 mapped for this context, alive as long as the QP.
        match unsafe { HostRegistration::new(&loaded.ctx, base, page, true) } {
            Ok(r) => {
                let dev = r.device_addr(bf as *const c_void).unwrap_or(0);
                self.facts.handler = Some(NicHandler::Gpu);
                Ok((Some(r), dev))
            }
            Err(e) if self.requested == NicHandler::Auto => {
                self.facts.handler = Some(NicHandler::CpuProxy);
                self.facts.why = format!(
                    "auto: the GPU could not map the doorbell page (cuMemHostRegister \
                     IOMEMORY: {e}); a CPU thread rings the doorbell"
                );
                Ok((None, 0))
            }
            Err(e) => Err(self.err(format!(
                "--nic-handler gpu: the GPU could not map the doorbell page (cuMemHostRegister \
                 IOMEMORY: {e}); it needs the NVIDIA driver's PeerMappingOverride=1 \
                 (gdr.peer-mapping), or use --nic-handler cpu-proxy"
            ))),
        }
    }
}

impl Poster for GpuPoster {
    /// One message per thread, side by side: writes x size bytes.
    fn buffer_len(&self, size: u64) -> u64 {
        size.saturating_mul(u64::from(self.writes))
    }

    fn prepare(&mut self, source: &Side) -> Result<(), ProbeError> {
        let live = self.setup(source)?;
        self.live = Some(live);
        Ok(())
    }

    fn finish(&mut self) {
        self.live = None;
    }

    fn write_size(
        &mut self,
        source: &Side,
        peer: &Endpoint,
        req: &WriteBwRequest,
        size: u64,
    ) -> Result<SizeResult, ProbeError> {
        let (writes, iters) = (self.writes, self.iters);
        let span = self.buffer_len(size);
        if span > peer.len {
            return Err(ProbeError::TooLarge {
                bytes: span,
                len: peer.len,
            });
        }
        let size32 = u32::try_from(size).map_err(|_| self.err(format!("{size} B: too large")))?;
        let device = self.device_name.clone();
        let Some(live) = self.live.as_mut() else {
            return Err(ProbeError::Mlx5 {
                device,
                reason: "the GPU poster was not prepared".into(),
            });
        };
        let (lbase, lkey) = source.local_buffer();
        let t = live.timing.addr();
        let n = u64::from(iters);
        // SAFETY: 64 bytes of the timing buffer hold the PostResult.
        unsafe { (live.timing.ptr as *mut PostResult).write(PostResult::default()) };
        let dev = |p: *const u8| live.map.device(p).unwrap_or(0);
        let a = PostArgs {
            sq: dev(live.raw.sq),
            sq_size: live.raw.sq_size,
            qpn: live.qpn,
            dbrec: dev(live.raw.dbrec as *const u8),
            bf: live.bf_dev,
            cq: dev(live.raw.cq),
            cq_size: live.raw.cq_size,
            cq_dbrec: dev(live.raw.cq_dbrec as *const u8),
            lbase,
            lkey,
            rbase: peer.addr,
            rkey: peer.rkey,
            size: size32,
            iterations: iters,
            timeout_ns: req.timeout.as_nanos().min(u128::from(u64::MAX)) as u64,
            post_ns: t + 64,
            post_cycles: t + 64 + n * 8,
            result: t,
            flags: Fence::Leader.flag(),
            pi0: live.pi,
            ci0: live.ci,
            done_ns: t + 64 + n * 16,
        };
        if [a.sq, a.dbrec, a.cq, a.cq_dbrec].contains(&0) {
            return Err(ProbeError::Mlx5 {
                device,
                reason: "a queue address is outside its GPU mapping".into(),
            });
        }
        let stop = Arc::new(AtomicBool::new(false));
        let proxy = (live.bf_dev == 0)
            .then(|| Proxy::spawn(live.mem.clone(), live.pi as u16, stop.clone()));
        // SAFETY: the queues are mapped (HostMap), the buffers registered GPU memory of at
        // least `span` bytes on both sides, the timing buffer pinned; all alive past the call.
        let ran = unsafe { k::run_post(&live.loaded, &a, writes) };
        stop.store(true, Ordering::Release);
        if let Some(p) = proxy {
            let _ = p.join();
        }
        ran.map_err(|e| ProbeError::Cuda {
            device: device.clone(),
            source: e,
        })?;
        // SAFETY: written by the finished kernel.
        let r = unsafe { (live.timing.ptr as *const PostResult).read_volatile() };
        live.pi = r.producer;
        live.ci = r.cq_consumer;
        let done = (r.iterations_done as usize).min(iters as usize);
        let base = live.timing.ptr as *const u8;
        // SAFETY: 3 x iters u64s after the result, the first `done` written by the kernel.
        let (post, cycles, done_ns) = unsafe {
            (
                std::slice::from_raw_parts(base.add(64) as *const u64, done),
                std::slice::from_raw_parts(base.add(64 + iters as usize * 8) as *const u64, done),
                std::slice::from_raw_parts(base.add(64 + iters as usize * 16) as *const u64, done),
            )
        };
        self.facts.post_ns.extend_from_slice(post);
        self.facts.post_cycles.extend_from_slice(cycles);
        outcome(&device, size, writes, iters, req.timeout, &r)?;
        Ok(write_bw::summarise(
            size,
            n * u64::from(writes),
            writes,
            &timeline(done_ns, writes),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            sq_stride: 64,
            sq_wqe_cnt: 1024,
            cqe_size: 64,
            cqe_cnt: 1024,
            bf_reg: true,
            bf_size: 256,
        }
    }

    #[test]
    fn layouts_the_kernel_cannot_use_are_refused() {
        assert_eq!(check_layout(&layout(), 512), Ok(()));
        assert_eq!(check_layout(&layout(), 1024), Ok(()));
        let e = |l: Layout| check_layout(&l, 512).unwrap_err();
        assert!(
            e(Layout {
                sq_stride: 128,
                ..layout()
            })
            .contains("stride")
        );
        assert!(
            e(Layout {
                sq_wqe_cnt: 256,
                ..layout()
            })
            .contains("SQ holds 256")
        );
        assert!(
            e(Layout {
                sq_wqe_cnt: 768,
                ..layout()
            })
            .contains("power of two")
        );
        assert!(
            e(Layout {
                cqe_size: 128,
                ..layout()
            })
            .contains("MLX5_CQE_SIZE")
        );
        assert!(
            e(Layout {
                cqe_cnt: 256,
                ..layout()
            })
            .contains("CQ holds 256")
        );
        assert!(
            e(Layout {
                bf_reg: false,
                ..layout()
            })
            .contains("doorbell")
        );
    }

    #[test]
    fn kernel_outcomes_become_engine_errors() {
        let t = Duration::from_secs(1);
        let ok = PostResult::default();
        assert!(outcome("mlx5_0", 64, 512, 2048, t, &ok).is_ok());
        let cqe = PostResult {
            status: POST_ERROR_CQE,
            iterations_done: 3,
            syndrome: 0x13,
            vendor_syndrome: 0x88,
            wqe_counter: 1700,
            ..PostResult::default()
        };
        let e = outcome("mlx5_0", 64, 512, 2048, t, &cqe)
            .unwrap_err()
            .to_string();
        assert!(e.contains("WQE 1700") && e.contains("iteration 4"), "{e}");
        assert!(
            e.contains("remote access error") && e.contains("0x13"),
            "{e}"
        );
        let to = PostResult {
            status: POST_TIMEOUT,
            iterations_done: 2,
            ..PostResult::default()
        };
        match outcome("mlx5_0", 64, 512, 2048, t, &to).unwrap_err() {
            ProbeError::NoCompletion {
                completed,
                iterations,
                ..
            } => assert_eq!((completed, iterations), (1024, 2048 * 512)),
            other => panic!("{other}"),
        }
        let odd = PostResult {
            status: 9,
            ..PostResult::default()
        };
        assert!(outcome("mlx5_0", 64, 1, 1, t, &odd).is_err());
    }

    #[test]
    fn timeline_counts_writes_per_iteration() {
        let t = timeline(&[1000, 2000, 3000], 512);
        assert_eq!(t.marks, vec![(1000, 512), (2000, 1024), (3000, 1536)]);
        let r = write_bw::summarise(4096, 1536, 512, &t);
        // 1536 x 4096 B in 3 us.
        assert!((r.average_mb_per_s - 1536.0 * 4096.0 / 3000.0 * 1000.0).abs() < 1.0);
        assert_eq!(r.elapsed_ns, 3000);
    }
}
