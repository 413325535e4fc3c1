//! Level 4's queues in GPU memory, IBGDA's placement: the send queue, the CQ and
//! both doorbell records in one cuMemAlloc allocation, registered with the adapter as DevX
//! umems (over a dma-buf, or through nvidia-peermem, as level 3 decided for the data buffers),
//! and an RC QP and CQ created on them with DevX commands (`mlx5_prm`); the doorbell register
//! is a DevX UAR page mapped for the GPU with CU_MEMHOSTREGISTER_IOMEMORY. With the queues in
//! GPU memory the kernel's fences can be GPU-scope: `gpudoctor-mlx5-kernel bench` measured the
//! post phase at 1.86-1.98 us this way against 2.85 us (H100) with libmlx5's host-memory
//! queues, which is why this exists.
//!
//! The commands are checked byte for byte against rdma-core's PRM definitions in CI
//! (tests/it/mlx5_prm.rs), the memory layout and CQ image by the unit tests below.
//! NOT RUN ON A CONNECTX: no machine here has one; on any failure before the first post,
//! `--queues auto` falls back to libmlx5's queues and says why.

use super::kernel::page_size;
use super::prm::{self as prm, Cmd, CmdFailed};
use crate::cuda::{self, HostRegistration, RdmaBuffer};
use crate::report::rdma::memory::Registration;
use crate::verbs::mlx5dv_sys as dv;
use crate::verbs::sys;
use std::ffi::c_void;
use std::rc::Rc;

/// Where each part lies in the GPU allocation: every part starts on its own host page and is
/// its own umem at offset 0 (the kernel's rule for umems registered without an offset-aware
/// page-size bitmap); the QP's doorbell record at byte 0 of the record page, the CQ's at 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub sq_entries: u32,
    pub cq_entries: u32,
    pub sq_off: usize,
    pub sq_bytes: usize,
    pub cq_off: usize,
    pub cq_bytes: usize,
    pub dbr_off: usize,
    pub dbr_bytes: usize,
    pub total: usize,
}

pub const QP_DBR_AT: usize = 0;
pub const CQ_DBR_AT: usize = 64;

/// The layout for `writes` WQEs per iteration: SQ and CQ rings of the next power of two (the
/// CQ as deep as the SQ: after an error every outstanding WQE completes with a flush error).
pub fn placement(writes: u32, page: usize) -> Result<Placement, String> {
    let entries = writes.max(1).checked_next_power_of_two().unwrap_or(0);
    // qpc.log_sq_size is 4 bits: 2^15 WQEBBs at most.
    if entries == 0 || entries > 1 << 15 {
        return Err(format!(
            "{writes} writes per iteration need more than 32768 WQEBBs"
        ));
    }
    let round = |n: usize| n.div_ceil(page) * page;
    let sq_bytes = round(entries as usize * crate::rdma::mlx5::wqe::WQEBB_BYTES);
    let cq_bytes = round(entries as usize * crate::rdma::mlx5::wqe::CQE_BYTES);
    let dbr_bytes = page;
    Ok(Placement {
        sq_entries: entries,
        cq_entries: entries,
        sq_off: 0,
        sq_bytes,
        cq_off: sq_bytes,
        cq_bytes,
        dbr_off: sq_bytes + cq_bytes,
        dbr_bytes,
        total: sq_bytes + cq_bytes + dbr_bytes,
    })
}

/// The CQ ring before first use: every CQE's op_own = MLX5_CQE_INVALID << 4 | owner 1 (as UCX
/// and DOCA initialise theirs): the kernel's poll takes none of them for a completion.
pub fn cq_image(entries: u32) -> Vec<u8> {
    let mut v = vec![0u8; entries as usize * crate::rdma::mlx5::wqe::CQE_BYTES];
    for cqe in v.chunks_mut(crate::rdma::mlx5::wqe::CQE_BYTES) {
        cqe[crate::rdma::mlx5::wqe::CQE_BYTES - 1] = 0xf1;
    }
    v
}

/// The queues' GPU memory: one allocation laid out by `placement`, zeroed, the CQ ring
/// initialised; the GPU addresses of each part. The DevX path registers its parts as umems;
/// `gpudoctor-mlx5-kernel queues` runs the posting kernel over it on a GPU without a NIC.
pub struct GpuQueueMem {
    pub buf: RdmaBuffer,
    pub place: Placement,
    pub sq: u64,
    pub dbrec: u64,
    pub cq: u64,
    pub cq_dbrec: u64,
}

impl GpuQueueMem {
    pub fn new(gpu: &Rc<cuda::Context>, writes: u32) -> Result<GpuQueueMem, String> {
        let place = placement(writes, page_size())?;
        let buf = RdmaBuffer::new(gpu, place.total).map_err(|e| format!("queue memory: {e}"))?;
        buf.upload_at(place.cq_off, &cq_image(place.cq_entries))
            .map_err(|e| format!("queue memory: {e}"))?;
        let base = buf.ptr;
        Ok(GpuQueueMem {
            sq: base + place.sq_off as u64,
            dbrec: base + (place.dbr_off + QP_DBR_AT) as u64,
            cq: base + place.cq_off as u64,
            cq_dbrec: base + (place.dbr_off + CQ_DBR_AT) as u64,
            buf,
            place,
        })
    }
}

fn last_os_error(call: &str) -> String {
    format!("{call}: {}", std::io::Error::last_os_error())
}

fn missing(lib: &dv::Mlx5Dv) -> Option<&'static str> {
    let checks: [(&'static str, bool); 11] = [
        ("mlx5dv_init_obj", lib.mlx5dv_init_obj.is_ok()),
        ("mlx5dv_devx_obj_create", lib.mlx5dv_devx_obj_create.is_ok()),
        ("mlx5dv_devx_obj_modify", lib.mlx5dv_devx_obj_modify.is_ok()),
        (
            "mlx5dv_devx_obj_destroy",
            lib.mlx5dv_devx_obj_destroy.is_ok(),
        ),
        ("mlx5dv_devx_umem_reg", lib.mlx5dv_devx_umem_reg.is_ok()),
        (
            "mlx5dv_devx_umem_reg_ex",
            lib.mlx5dv_devx_umem_reg_ex.is_ok(),
        ),
        ("mlx5dv_devx_umem_dereg", lib.mlx5dv_devx_umem_dereg.is_ok()),
        ("mlx5dv_devx_alloc_uar", lib.mlx5dv_devx_alloc_uar.is_ok()),
        ("mlx5dv_devx_free_uar", lib.mlx5dv_devx_free_uar.is_ok()),
        ("mlx5dv_devx_query_eqn", lib.mlx5dv_devx_query_eqn.is_ok()),
        ("mlx5dv_open_device", lib.mlx5dv_open_device.is_ok()),
    ];
    checks.iter().find(|(_, ok)| !ok).map(|(n, _)| *n)
}

/// Whether this libmlx5 has every DevX entry point the GPU queues use.
pub fn devx_entry_points(lib: &dv::Mlx5Dv) -> Result<(), String> {
    match missing(lib) {
        Some(n) => Err(format!("{} has no {n}", crate::verbs::LIBMLX5_SONAME)),
        None => Ok(()),
    }
}

struct Obj {
    lib: Rc<dv::Mlx5Dv>,
    obj: *mut dv::mlx5dv_devx_obj,
}

impl Drop for Obj {
    fn drop(&mut self) {
        // SAFETY: created by mlx5dv_devx_obj_create, destroyed once, before the context.
        unsafe { self.lib.mlx5dv_devx_obj_destroy(self.obj) };
    }
}

struct Umem {
    lib: Rc<dv::Mlx5Dv>,
    umem: *mut dv::mlx5dv_devx_umem,
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: registered by mlx5dv_devx_umem_reg(_ex), deregistered once, after the
        // objects that use it and before the memory goes.
        unsafe { self.lib.mlx5dv_devx_umem_dereg(self.umem) };
    }
}

struct Uar {
    lib: Rc<dv::Mlx5Dv>,
    uar: *mut dv::mlx5dv_devx_uar,
}

impl Drop for Uar {
    fn drop(&mut self) {
        // SAFETY: allocated by mlx5dv_devx_alloc_uar, freed once, after its GPU mapping.
        unsafe { self.lib.mlx5dv_devx_free_uar(self.uar) };
    }
}

/// Run a DevX command that creates an object; its number (cqn, qpn) from the output.
fn create(
    lib: &Rc<dv::Mlx5Dv>,
    ctx: *mut sys::ibv_context,
    what: &str,
    cmd: &Cmd,
) -> Result<(Obj, u32), String> {
    let mut out = vec![0u8; prm::CMD_OUT_BYTES];
    // SAFETY: in/out are live buffers of the lengths passed; ctx is an open DevX context.
    let obj = unsafe {
        lib.mlx5dv_devx_obj_create(
            ctx,
            cmd.bytes().as_ptr() as *const c_void,
            cmd.bytes().len(),
            out.as_mut_ptr() as *mut c_void,
            out.len(),
        )
    };
    let errno = std::io::Error::last_os_error();
    if obj.is_null() {
        return Err(command_failed(what, &out, errno));
    }
    let obj = Obj {
        lib: lib.clone(),
        obj,
    };
    let id = prm::outcome(&out).map_err(|e| format!("{what}: {e}"))?;
    Ok((obj, id))
}

/// The firmware's status where it wrote one (the kernel copies the output back on a firmware
/// error), the errno otherwise.
fn command_failed(what: &str, out: &[u8], errno: std::io::Error) -> String {
    match prm::outcome(out) {
        Err(CmdFailed { status, .. }) if status != 0xff => {
            format!("{what}: {} ({errno})", prm::outcome(out).unwrap_err())
        }
        _ => format!("{what}: {errno}"),
    }
}

fn modify(lib: &dv::Mlx5Dv, obj: &Obj, what: &str, cmd: &Cmd) -> Result<(), String> {
    let mut out = vec![0u8; prm::CMD_OUT_BYTES];
    // SAFETY: as for create; obj is a live QP object.
    let rc = unsafe {
        lib.mlx5dv_devx_obj_modify(
            obj.obj,
            cmd.bytes().as_ptr() as *const c_void,
            cmd.bytes().len(),
            out.as_mut_ptr() as *mut c_void,
            out.len(),
        )
    };
    if rc != 0 {
        let errno = std::io::Error::from_raw_os_error(rc.abs());
        return Err(command_failed(what, &out, errno));
    }
    prm::outcome(&out)
        .map(|_| ())
        .map_err(|e| format!("{what}: {e}"))
}

/// The queues, alive: dropped QP first, then the CQ, the umems, the GPU mapping of the
/// doorbell page, the UAR and the GPU memory (field order).
pub struct GpuQueues {
    qp: Obj,
    _cq: Obj,
    _umems: Vec<Umem>,
    _doorbell_map: HostRegistration,
    _uar: Uar,
    /// The rings and records: their layout and GPU addresses.
    pub mem: GpuQueueMem,
    lib: Rc<dv::Mlx5Dv>,
    pub qpn: u32,
    pub cqn: u32,
    /// The GPU's address of the doorbell register.
    pub doorbell: u64,
    /// "non-cached" or "BlueFlame": the UAR type libmlx5 gave.
    pub uar_kind: &'static str,
    pub registration: Registration,
}

/// What `GpuQueues::create` needs from the engine's source side.
pub struct DevxTarget {
    pub ctx: *mut sys::ibv_context,
    pub pd: *mut sys::ibv_pd,
}

/// The PD's number, through mlx5dv_init_obj.
///
/// # Safety
/// `pd` must be a live PD of an mlx5 context.
unsafe fn pd_number(lib: &dv::Mlx5Dv, pd: *mut sys::ibv_pd) -> Result<u32, String> {
    // SAFETY: plain C structs (integers and pointers; all-zero is valid), filled in by
    // mlx5dv_init_obj below.
    let mut dpd: dv::mlx5dv_pd = unsafe { std::mem::zeroed() };
    // SAFETY: as above, a plain C struct of integers and pointers.
    let mut o: dv::mlx5dv_obj = unsafe { std::mem::zeroed() };
    o.pd.in_ = pd;
    o.pd.out = &mut dpd;
    // SAFETY: pd is a live PD of an mlx5 context; the out struct lives on this frame.
    let rc = unsafe { lib.mlx5dv_init_obj(&mut o, u64::from(dv::MLX5DV_OBJ_PD)) };
    if rc != 0 {
        return Err(format!(
            "mlx5dv_init_obj(PD): {}",
            std::io::Error::from_raw_os_error(rc.abs())
        ));
    }
    Ok(dpd.pdn)
}

/// The doorbell page: a DevX UAR mapped for the GPU. Fields drop in order: the GPU mapping
/// before the UAR.
struct DoorbellPage {
    map: HostRegistration,
    uar: Uar,
    /// "non-cached" or "BlueFlame": the UAR type libmlx5 gave.
    kind: &'static str,
    /// The GPU's address of the doorbell register.
    doorbell: u64,
    /// The UAR's page, for the CQ's and QP's contexts.
    page_id: u32,
}

impl DoorbellPage {
    /// Allocate the UAR (non-cached first: an 8-byte doorbell, no BlueFlame copy; else
    /// BlueFlame) and map its page (`page` bytes) for the GPU.
    ///
    /// # Safety
    /// `ctx` must be an open context with DevX, alive until the result is dropped.
    unsafe fn alloc(
        lib: &Rc<dv::Mlx5Dv>,
        ctx: *mut sys::ibv_context,
        gpu: &Rc<cuda::Context>,
        page: usize,
    ) -> Result<DoorbellPage, String> {
        let (uar, kind) = {
            // SAFETY: open context.
            let nc = unsafe { lib.mlx5dv_devx_alloc_uar(ctx, dv::MLX5_IB_UAPI_UAR_ALLOC_TYPE_NC) };
            if !nc.is_null() {
                (nc, "non-cached")
            } else {
                // SAFETY: as above.
                let bf =
                    unsafe { lib.mlx5dv_devx_alloc_uar(ctx, dv::MLX5_IB_UAPI_UAR_ALLOC_TYPE_BF) };
                if bf.is_null() {
                    return Err(last_os_error("mlx5dv_devx_alloc_uar"));
                }
                (bf, "BlueFlame")
            }
        };
        let uar = Uar {
            lib: lib.clone(),
            uar,
        };
        // SAFETY: a live UAR.
        let (reg_addr, page_id) = unsafe { ((*uar.uar).reg_addr, (*uar.uar).page_id) };
        if reg_addr.is_null() {
            return Err("mlx5dv_devx_alloc_uar gave no register address".into());
        }
        let base = (reg_addr as usize & !(page - 1)) as *mut c_void;
        // SAFETY: the UAR page stays mapped until `uar` drops, after this registration.
        let map = unsafe { HostRegistration::new(gpu, base, page, true) }.map_err(|e| {
            format!(
                "the GPU could not map the DevX doorbell page (cuMemHostRegister IOMEMORY: {e}); \
                 it needs the NVIDIA driver's PeerMappingOverride=1 (gdr.peer-mapping)"
            )
        })?;
        let doorbell = map
            .device_addr(reg_addr as *const c_void)
            .ok_or("the doorbell register is outside its page")?;
        Ok(DoorbellPage {
            map,
            uar,
            kind,
            doorbell,
            page_id,
        })
    }
}

/// Register the send queue, the CQ and the doorbell records of `mem` as three umems (over a
/// dma-buf of it, or through nvidia-peermem, as `registration` says): the umems and their ids
/// in that order.
///
/// # Safety
/// `ctx` must be an open context with DevX, alive until the umems are dropped.
unsafe fn register_umems(
    lib: &Rc<dv::Mlx5Dv>,
    ctx: *mut sys::ibv_context,
    mem: &GpuQueueMem,
    registration: Registration,
    page: usize,
) -> Result<(Vec<Umem>, [u32; 3]), String> {
    let (buf, place) = (&mem.buf, mem.place);
    let mut umems = Vec::new();
    let dmabuf = match registration {
        Registration::Dmabuf => Some(
            buf.export_dmabuf()
                .map_err(|e| format!("queue memory: {e}"))?,
        ),
        Registration::Peermem => None,
    };
    let mut reg = |off: usize, len: usize, what: &str| -> Result<u32, String> {
        let access = sys::IBV_ACCESS_LOCAL_WRITE;
        let umem = match &dmabuf {
            Some(fd) => {
                use std::os::fd::AsRawFd;
                let mut uin = dv::mlx5dv_devx_umem_in {
                    // With a dma-buf, the offset into it.
                    addr: off as *mut c_void,
                    size: len,
                    access,
                    pgsz_bitmap: page as u64,
                    comp_mask: u64::from(dv::MLX5DV_UMEM_MASK_DMABUF),
                    dmabuf_fd: fd.as_raw_fd(),
                };
                // SAFETY: open context; the dma-buf covers off..off+len.
                unsafe { lib.mlx5dv_devx_umem_reg_ex(ctx, &mut uin) }
            }
            // SAFETY: GPU memory nvidia-peermem resolves; alive until the umem goes.
            None => unsafe {
                lib.mlx5dv_devx_umem_reg(ctx, (buf.ptr as usize + off) as *mut c_void, len, access)
            },
        };
        if umem.is_null() {
            return Err(last_os_error(&format!(
                "mlx5dv_devx_umem_reg{} ({what}, {len} B of GPU memory via {})",
                if dmabuf.is_some() { "_ex" } else { "" },
                registration.as_str()
            )));
        }
        // SAFETY: a live umem.
        let id = unsafe { (*umem).umem_id };
        umems.push(Umem {
            lib: lib.clone(),
            umem,
        });
        Ok(id)
    };
    let sq_umem = reg(place.sq_off, place.sq_bytes, "send queue")?;
    let cq_umem = reg(place.cq_off, place.cq_bytes, "CQ")?;
    let dbr_umem = reg(place.dbr_off, place.dbr_bytes, "doorbell records")?;
    drop(dmabuf); // each umem holds its own reference to the dma-buf
    Ok((umems, [sq_umem, cq_umem, dbr_umem]))
}

/// The QP's and CQ's numbers and umems, for their DevX commands.
struct QueueIds {
    pdn: u32,
    eqn: u32,
    uar_page: u32,
    /// Send queue, CQ and doorbell records, as `register_umems` gives them.
    umems: [u32; 3],
}

/// The CQ and the QP on it, with their numbers. Fields drop in declaration order: the QP
/// first.
struct QueueObjs {
    qp: Obj,
    qpn: u32,
    cq: Obj,
    cqn: u32,
}

/// CREATE_CQ, then CREATE_QP on it.
fn create_cq_qp(
    lib: &Rc<dv::Mlx5Dv>,
    ctx: *mut sys::ibv_context,
    place: Placement,
    ids: &QueueIds,
) -> Result<QueueObjs, String> {
    let [sq_umem, cq_umem, dbr_umem] = ids.umems;
    let log2 = |n: u32| n.trailing_zeros();
    let (cq, cqn) = create(
        lib,
        ctx,
        "CREATE_CQ",
        &prm::create_cq_in(&prm::CqParams {
            log_size: log2(place.cq_entries),
            uar_page: ids.uar_page,
            eqn: ids.eqn,
            umem_id: cq_umem,
            umem_offset: 0,
            dbr_umem_id: dbr_umem,
            dbr_offset: CQ_DBR_AT as u64,
        }),
    )?;
    let (qp, qpn) = create(
        lib,
        ctx,
        "CREATE_QP",
        &prm::create_qp_in(&prm::QpParams {
            pdn: ids.pdn,
            cqn,
            uar_page: ids.uar_page,
            log_sq_size: log2(place.sq_entries),
            umem_id: sq_umem,
            umem_offset: 0,
            dbr_umem_id: dbr_umem,
            dbr_offset: QP_DBR_AT as u64,
        }),
    )?;
    Ok(QueueObjs { qp, qpn, cq, cqn })
}

impl GpuQueues {
    /// Allocate, register and create; every failure names its step.
    ///
    /// # Safety
    /// `t.ctx` must be a context opened with DevX (mlx5dv_open_device) and `t.pd` a PD of it,
    /// both alive until the result is dropped.
    pub unsafe fn create(
        lib: Rc<dv::Mlx5Dv>,
        t: &DevxTarget,
        gpu: &Rc<cuda::Context>,
        registration: Registration,
        writes: u32,
    ) -> Result<GpuQueues, String> {
        devx_entry_points(&lib)?;
        let page = page_size();
        // SAFETY: t.pd is a live PD of an mlx5 context (this function's contract).
        let pdn = unsafe { pd_number(&lib, t.pd) }?;
        let mut eqn: u32 = 0;
        // SAFETY: open context, out-pointer to a local.
        if unsafe { lib.mlx5dv_devx_query_eqn(t.ctx, 0, &mut eqn) } != 0 {
            return Err(last_os_error("mlx5dv_devx_query_eqn"));
        }
        // SAFETY: t.ctx is open with DevX and outlives the result, which holds the page.
        let db = unsafe { DoorbellPage::alloc(&lib, t.ctx, gpu, page) }?;

        // GPU memory: rings and records, zeroed, the CQ initialised.
        let mem = GpuQueueMem::new(gpu, writes)?;
        // SAFETY: t.ctx is open with DevX and outlives the result, which holds the umems.
        let (umems, umem_ids) = unsafe { register_umems(&lib, t.ctx, &mem, registration, page) }?;
        let ids = QueueIds {
            pdn,
            eqn,
            uar_page: db.page_id,
            umems: umem_ids,
        };
        let QueueObjs { qp, qpn, cq, cqn } = create_cq_qp(&lib, t.ctx, mem.place, &ids)?;
        Ok(GpuQueues {
            qp,
            _cq: cq,
            _umems: umems,
            _doorbell_map: db.map,
            _uar: db.uar,
            lib,
            qpn,
            cqn,
            mem,
            doorbell: db.doorbell,
            uar_kind: db.kind,
            registration,
        })
    }

    /// RESET -> INIT -> RTR -> RTS towards the peer (`k.qpn` is set here).
    pub fn connect(&self, k: &prm::Connect) -> Result<(), String> {
        let k = prm::Connect {
            qpn: self.qpn,
            ..*k
        };
        modify(&self.lib, &self.qp, "RST2INIT_QP", &prm::rst2init_in(&k))?;
        modify(&self.lib, &self.qp, "INIT2RTR_QP", &prm::init2rtr_in(&k))?;
        modify(&self.lib, &self.qp, "RTR2RTS_QP", &prm::rtr2rts_in(&k))
    }

    /// For the report.
    pub fn describe(&self) -> String {
        format!(
            "DevX QP 0x{:x} and CQ 0x{:x} in GPU memory (SQ {} x 64 B, CQ {} x 64 B, doorbell \
             records; umems via {}), {} doorbell page mapped for the GPU; GPU-scope fences",
            self.qpn,
            self.cqn,
            self.mem.place.sq_entries,
            self.mem.place.cq_entries,
            self.registration.as_str(),
            self.uar_kind
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placement_pages_every_part_and_sizes_rings_by_powers_of_two() {
        let p = placement(512, 4096).unwrap();
        assert_eq!((p.sq_entries, p.cq_entries), (512, 512));
        assert_eq!((p.sq_off, p.sq_bytes), (0, 32768));
        assert_eq!((p.cq_off, p.cq_bytes), (32768, 32768));
        assert_eq!((p.dbr_off, p.dbr_bytes, p.total), (65536, 4096, 69632));
        let q = placement(3, 4096).unwrap();
        assert_eq!(q.sq_entries, 4);
        assert_eq!(
            (q.sq_bytes, q.cq_off, q.dbr_off, q.total),
            (4096, 4096, 8192, 12288)
        );
        let big = placement(4096, 65536).unwrap();
        assert!(big.cq_off.is_multiple_of(65536) && big.dbr_off.is_multiple_of(65536));
        assert!(placement(1 << 15, 4096).is_ok());
        assert!(placement((1 << 15) + 1, 4096).is_err());
        const { assert!(CQ_DBR_AT.is_multiple_of(8) && CQ_DBR_AT >= QP_DBR_AT + 8) };
    }

    #[test]
    fn the_cq_image_holds_no_completion_for_the_poll() {
        let img = cq_image(16);
        assert_eq!(img.len(), 16 * 64);
        // crate::rdma::mlx5::wqe::poll_cqe reads op_own as the kernel does (tests/it/mlx5.rs): nothing ready at
        // any consumer index of the first two passes.
        for ci in 0..32u32 {
            let at = (ci % 16) as usize * 64;
            let b: &[u8; 64] = img[at..at + 64].try_into().unwrap();
            assert_eq!(
                crate::rdma::mlx5::wqe::poll_cqe(b, ci, 16),
                crate::rdma::mlx5::wqe::CqePoll::Empty,
                "ci {ci}"
            );
        }
        for cqe in img.chunks(64) {
            assert_eq!(cqe[63] >> 4, 0xf, "opcode MLX5_CQE_INVALID");
            assert!(cqe[..63].iter().all(|&b| b == 0));
        }
    }
}
