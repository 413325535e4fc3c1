//! Level 4's poster: a CUDA kernel (`kernels/mlx5_post.cu`) posts the RDMA writes
//! of the write-bw engine's loopback itself, on the source side's own RC QP, through the
//! queues libmlx5 hands out with `mlx5dv_init_obj`. The engine opens the devices, creates and
//! connects the QPs, allocates and registers the GPU buffers (level 3's memory provider) and
//! validates the bytes; only who posts changes (`super::Poster`).
//!
//! - Queues in GPU memory (`--queues gpu|auto`, IBGDA's placement, `super::devx`): the poster
//!   creates its own DevX RC QP and CQ over umems in GPU memory before the sides connect
//!   (`own_source_qp`), the doorbell is a DevX UAR page the GPU maps (IOMEMORY), and the kernel
//!   fences at GPU scope. Needs the gpu handler.
//! - Queues in host memory (`--queues host`, and auto's fallback): the SQ buffer, the QP
//!   doorbell record, the CQ buffer and its record are libmlx5's process memory from
//!   `mlx5dv_init_obj` on the engine's own QP, made visible to the GPU with cuMemHostRegister
//!   (`crate::rdma::mlx5::kernel::HostMap`, which the NIC stand-in's runs on the GPU machines go through as
//!   well); system-scope fences.
//! - `gpu` handler: the doorbell page (BlueFlame/UAR register) is registered with
//!   CU_MEMHOSTREGISTER_IOMEMORY (needs the driver's PeerMappingOverride=1) and the kernel
//!   writes the doorbell; `cpu-proxy`: the kernel writes WQEs and the record, a CPU thread
//!   (`crate::rdma::mlx5::emu::Proxy`) rings.
//!
//! NOT RUN ON A CONNECTX: no machine here has a GPU and an mlx5 device together. The kernel,
//! the mapping and both handlers ran on H100/H200 against the stand-in; this file's verbs half
//! has met no adapter.

use super::devx::{DevxTarget, GpuQueues};
use super::kernel::{self as k, Fence, HostMap, PostArgs, PostResult};
use super::prm;
use super::proxy::Proxy;
use super::queues::{QueueMemory, RawQueues};
use super::wqe::{self, Syndrome};
use crate::cuda::{self, CudaError, HostRegistration, PinnedBuffer};
use crate::rdma::engine::error::ProbeError;
use crate::rdma::engine::poster::Poster;
use crate::rdma::engine::side::{Endpoint, Side};
use crate::rdma::judge::write_bw;
use crate::rdma::request::write_bw::WriteBwRequest;
use crate::report::rdma::gpu_write_bw::{NicHandler, QueuePlace};
use crate::report::rdma::memory::Registration;
use crate::report::rdma::write_bw::{Addressing, Repetition, Timeline};
use crate::verbs::mlx5dv_sys as dv;
use std::ffi::c_void;
use std::path::PathBuf;
use std::rc::Rc;
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
    if l.sq_stride != wqe::WQEBB_BYTES as u32 {
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
    if l.cqe_size != wqe::CQE_BYTES as u32 {
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
    /// Where the queues the kernel posted on lived, why, and what they were.
    pub queues: Option<QueuePlace>,
    pub queues_why: String,
    pub queues_note: Option<String>,
}

/// Where the kernel's queues are and what it is given.
#[derive(Debug, Clone, Copy)]
struct QueueAddrs {
    sq: u64,
    sq_size: u32,
    dbrec: u64,
    cq: u64,
    cq_size: u32,
    cq_dbrec: u64,
}

/// What `--queues gpu|auto` needs beyond the handler: the GPU's context (the queue memory is
/// allocated there), how level 3 registers its memory with the NIC (the umems go the same
/// way), and the MAC of each GID's netdev on the port (RoCE's next hop on a loopback).
pub struct QueueChoice {
    pub requested: QueuePlace,
    pub gpu_ctx: Rc<cuda::Context>,
    pub registration: Registration,
    pub macs: Vec<(u32, [u8; 6])>,
}

/// Everything `prepare` set up; dropped by `finish`, while the QP and CQ still exist.
struct Live {
    // Field order is drop order: the proxy's queue view and the mappings before the module.
    /// Host queues only: the CPU proxy's view of them.
    mem: Option<Arc<QueueMemory>>,
    _uar: Option<HostRegistration>,
    /// Host queues only: libmlx5's buffers mapped for the GPU.
    _map: Option<HostMap>,
    timing: PinnedBuffer,
    loaded: k::Loaded,
    _dv: Option<dv::Mlx5Dv>,
    qpn: u32,
    q: QueueAddrs,
    bf_dev: u64,
    flags: u32,
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
    choice: Option<QueueChoice>,
    /// libmlx5 for the DevX context and queues (`source_devx`).
    devx_lib: Option<Rc<dv::Mlx5Dv>>,
    devx_refused: Option<String>,
    /// The queues in GPU memory, when they were set up; dropped by `finish` after `live`.
    devx: Option<GpuQueues>,
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
            choice: None,
            devx_lib: None,
            devx_refused: None,
            devx: None,
            facts: PosterFacts {
                why,
                ..PosterFacts::default()
            },
        }
    }

    /// Where the queues may go (without this: libmlx5's host-memory queues, as `--queues host`).
    pub fn with_queues(mut self, choice: QueueChoice) -> Self {
        self.choice = Some(choice);
        self
    }

    fn requested_queues(&self) -> QueuePlace {
        self.choice
            .as_ref()
            .map_or(QueuePlace::Host, |c| c.requested)
    }

    /// Whether GPU-memory queues are to be tried; the reason when not.
    fn gpu_queues_wanted(&self) -> Result<(), String> {
        match self.requested_queues() {
            QueuePlace::Host => Err("--queues host: libmlx5's queues in host memory".into()),
            _ if self.decided != NicHandler::Gpu => Err(format!(
                "the {} handler rings: a CPU proxy cannot read a doorbell record in GPU memory, \
                 so libmlx5's queues in host memory",
                self.decided.as_str()
            )),
            _ => Ok(()),
        }
    }

    /// Create the DevX queues in GPU memory and connect their QP to `peer`.
    fn make_gpu_queues(
        &self,
        source: &Side,
        peer: &Endpoint,
    ) -> Result<(GpuQueues, Endpoint), String> {
        if let Some(why) = &self.devx_refused {
            return Err(format!("the device did not open for DevX ({why})"));
        }
        let (Some(lib), Some(choice)) = (self.devx_lib.clone(), self.choice.as_ref()) else {
            return Err("libmlx5 was not loaded for DevX".into());
        };
        if !source.devx {
            return Err("the device was not opened for DevX".into());
        }
        let path = source.path();
        let route = match (path.gid, path.sgid_index, &peer.gid) {
            (Some(_), Some(sgid_index), Some(g)) => {
                let rgid = crate::verbs::parse_gid(g)
                    .ok_or_else(|| format!("the peer's GID {g:?} is malformed"))?;
                let rmac = choice
                    .macs
                    .iter()
                    .find(|(i, _)| *i == u32::from(sgid_index))
                    .map(|(_, m)| *m)
                    .ok_or_else(|| {
                        format!(
                            "no MAC address read for the netdev of GID index {sgid_index} \
                             (the loopback's next hop)"
                        )
                    })?;
                let v2 = matches!(
                    &source.facts.addressing,
                    Addressing::Gid { gid_type: Some(t), .. } if t.contains("v2")
                );
                prm::Route::Gid {
                    rgid,
                    sgid_index,
                    rmac,
                    hop_limit: 64,
                    udp_sport: v2.then_some(0xc000),
                }
            }
            (None, None, None) => prm::Route::Lid { rlid: peer.lid },
            _ => return Err("the two sides address each other differently".into()),
        };
        let remote_qpn = *peer.qpns.first().ok_or("the peer has no QP")?;
        let (ctx, pd) = source.raw_ctx_pd();
        // SAFETY: the source side's context was opened with DevX and its PD belongs to it;
        // both outlive the queues (`finish` drops them before the sides go).
        let q = unsafe {
            GpuQueues::create(
                lib,
                &DevxTarget { ctx, pd },
                &choice.gpu_ctx,
                choice.registration,
                self.writes,
            )
        }?;
        q.connect(&prm::Connect {
            qpn: q.qpn,
            port: path.port,
            mtu: path.mtu.min(peer.mtu),
            remote_qpn,
            rq_psn: peer.psn,
            sq_psn: path.psn,
            route,
            min_rnr_nak: 12,
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            log_msg_max: 30,
        })?;
        let ep = Endpoint {
            qpns: vec![q.qpn],
            ..source.endpoint()
        };
        Ok((q, ep))
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

    /// The kernel over the DevX queues in GPU memory: its addresses are GPU memory, the
    /// doorbell page is mapped already, and the fences are GPU-scope.
    fn setup_gpu_queues(&mut self) -> Result<Option<Live>, ProbeError> {
        let Some(q) = self.devx.as_ref() else {
            return Ok(None);
        };
        let layout = Layout {
            sq_stride: wqe::WQEBB_BYTES as u32,
            sq_wqe_cnt: q.mem.place.sq_entries,
            cqe_size: wqe::CQE_BYTES as u32,
            cqe_cnt: q.mem.place.cq_entries,
            bf_reg: true,
            bf_size: 8,
        };
        let (qpn, addrs, bf) = (
            q.qpn,
            QueueAddrs {
                sq: q.mem.sq,
                sq_size: q.mem.place.sq_entries,
                dbrec: q.mem.dbrec,
                cq: q.mem.cq,
                cq_size: q.mem.place.cq_entries,
                cq_dbrec: q.mem.cq_dbrec,
            },
            q.doorbell,
        );
        self.facts.layout = Some(layout);
        check_layout(&layout, self.writes).map_err(|e| self.err(e))?;
        let loaded = k::load_on(self.gpu.clone(), &self.cuda_homes)
            .map_err(|e| self.cuda_err("the level-4 kernel", e))?;
        let timing = PinnedBuffer::new(&loaded.ctx, 64 + self.iters as usize * 24)
            .map_err(|e| self.cuda_err("pinned timing buffer", e))?;
        self.facts.handler = Some(NicHandler::Gpu);
        Ok(Some(Live {
            mem: None,
            _uar: None,
            _map: None,
            timing,
            loaded,
            _dv: None,
            qpn,
            q: addrs,
            bf_dev: bf,
            flags: Fence::LeaderGpuScope.flag(),
            pi: 0,
            ci: 0,
        }))
    }

    fn setup(&mut self, source: &Side) -> Result<Live, ProbeError> {
        if let Some(live) = self.setup_gpu_queues()? {
            return Ok(live);
        }
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
        // SAFETY: as above, a plain C struct filled by mlx5dv_init_obj.
        let mut dcq: dv::mlx5dv_cq = unsafe { std::mem::zeroed() };
        // SAFETY: as above, a plain C struct of integers and pointers.
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
                        layout.sq_wqe_cnt as usize * wqe::WQEBB_BYTES,
                    ),
                    (raw.dbrec as *const u8, 8),
                    (
                        raw.cq as *const u8,
                        layout.cqe_cnt as usize * wqe::CQE_BYTES,
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
        let dev = |p: *const u8| map.device(p).unwrap_or(0);
        let q = QueueAddrs {
            sq: dev(raw.sq),
            sq_size: raw.sq_size,
            dbrec: dev(raw.dbrec as *const u8),
            cq: dev(raw.cq),
            cq_size: raw.cq_size,
            cq_dbrec: dev(raw.cq_dbrec as *const u8),
        };
        if [q.sq, q.dbrec, q.cq, q.cq_dbrec].contains(&0) {
            return Err(self.err("a queue address is outside its GPU mapping".into()));
        }
        Ok(Live {
            mem: Some(mem),
            _uar: uar,
            _map: Some(map),
            timing,
            loaded,
            _dv: Some(lib),
            qpn,
            q,
            bf_dev,
            flags: Fence::Leader.flag(),
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

    fn source_devx(&mut self) -> Option<&dv::Mlx5Dv> {
        if let Err(why) = self.gpu_queues_wanted() {
            self.facts.queues_why = why;
            return None;
        }
        let loaded = crate::verbs::load_mlx5dv()
            .map_err(|e| e.to_string())
            .and_then(|l| crate::rdma::mlx5::devx::devx_entry_points(&l).map(|()| l));
        match loaded {
            Ok(l) => {
                self.devx_lib = Some(Rc::new(l));
                self.devx_lib.as_deref()
            }
            Err(why) => {
                self.devx_refused = Some(why);
                None
            }
        }
    }

    fn devx_refused(&mut self, why: String) {
        self.devx_refused = Some(why);
    }

    fn own_source_qp(
        &mut self,
        source: &Side,
        peer: &Endpoint,
    ) -> Result<Option<Endpoint>, ProbeError> {
        if let Err(why) = self.gpu_queues_wanted() {
            self.facts.queues = Some(QueuePlace::Host);
            self.facts.queues_why = why;
            return Ok(None);
        }
        match self.make_gpu_queues(source, peer) {
            Ok((q, ep)) => {
                self.facts.queues = Some(QueuePlace::Gpu);
                self.facts.queues_why = format!(
                    "{}: the gpu handler rings and DevX created the queues in GPU memory",
                    self.requested_queues().as_str()
                );
                self.facts.queues_note = Some(q.describe());
                self.devx = Some(q);
                Ok(Some(ep))
            }
            Err(why) if self.requested_queues() == QueuePlace::Gpu => {
                Err(self.err(format!("--queues gpu: {why}")))
            }
            Err(why) => {
                self.facts.queues = Some(QueuePlace::Host);
                self.facts.queues_why = format!(
                    "auto: the queues in GPU memory could not be set up ({why}); libmlx5's \
                     queues in host memory"
                );
                Ok(None)
            }
        }
    }

    fn prepare(&mut self, source: &Side) -> Result<(), ProbeError> {
        let live = self.setup(source)?;
        self.live = Some(live);
        Ok(())
    }

    fn finish(&mut self) {
        // The kernel's module and mappings first, then the DevX objects, umems and memory,
        // all while the source side's context is still open.
        self.live = None;
        self.devx = None;
    }

    fn write_size(
        &mut self,
        source: &Side,
        peer: &Endpoint,
        req: &WriteBwRequest,
        size: u64,
    ) -> Result<Repetition, ProbeError> {
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
        let a = PostArgs {
            sq: live.q.sq,
            sq_size: live.q.sq_size,
            qpn: live.qpn,
            dbrec: live.q.dbrec,
            bf: live.bf_dev,
            cq: live.q.cq,
            cq_size: live.q.cq_size,
            cq_dbrec: live.q.cq_dbrec,
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
            flags: live.flags,
            pi0: live.pi,
            ci0: live.ci,
            done_ns: t + 64 + n * 16,
        };
        let stop = Arc::new(AtomicBool::new(false));
        let proxy = match (&live.mem, live.bf_dev) {
            (Some(mem), 0) => Some(Proxy::spawn(mem.clone(), live.pi as u16, stop.clone())),
            _ => None,
        };
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
        assert!((r.mb_per_s - 1536.0 * 4096.0 / 3000.0 * 1000.0).abs() < 1.0);
        assert_eq!(r.elapsed_ns, 3000);
    }
}
