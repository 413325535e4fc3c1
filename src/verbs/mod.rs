//! A small safe layer over libibverbs, loaded at run time (dlopen) through the generated
//! bindings in `sys` (scripts/gen-verbs-bindings.sh). The binary never links libibverbs, so it
//! starts on machines without rdma-core; `Verbs::load` failing is a finding, not a crash.
//!
//! Ownership mirrors the verbs object graph so that drop order is always right: a queue pair
//! holds its PD and CQs, a memory region its PD (and the buffer it registers), PDs and CQs
//! their context, and the context the loaded library. Each object is destroyed when its last
//! holder goes away, children before parents.
//!
//! This module must not decide anything about a measurement (no thresholds, no output); it
//! also must not read sysfs (that is `inventory`).

pub mod mlx5dv_sys;
pub mod sys;

use std::alloc::Layout;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;

/// The soname rdma-core has shipped since libibverbs 1.1 (ABI 1).
pub const LIBIBVERBS_SONAME: &str = "libibverbs.so.1";

#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    /// libibverbs could not be loaded (rdma-core not installed): a finding, reported as a skip.
    #[error("{0} (is rdma-core installed?)")]
    Unavailable(String),
    /// libibverbs loaded, but the kernel has no RDMA support (ibv_get_device_list: ENOSYS).
    #[error("the kernel has no RDMA support (ibv_get_device_list: {0}); is ib_uverbs loaded?")]
    NoKernelSupport(std::io::Error),
    #[error("{LIBIBVERBS_SONAME} lacks the symbol {0} (rdma-core too old?)")]
    MissingSymbol(&'static str),
    #[error("no RDMA device named {name} (found: {found})")]
    NoDevice { name: String, found: String },
    /// A verb failed; `source` carries errno.
    #[error("{call} failed: {source}")]
    Call {
        call: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A work completion with an error status, with libibverbs' own text for it.
    #[error("completion error: {status_str} (status {status}, vendor error {vendor_err:#x})")]
    Completion {
        status: u32,
        status_str: String,
        vendor_err: u32,
    },
}

impl VerbsError {
    fn errno(call: &'static str) -> Self {
        VerbsError::Call {
            call,
            source: std::io::Error::last_os_error(),
        }
    }
    fn device_list() -> Self {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(ENOSYS) {
            VerbsError::NoKernelSupport(e)
        } else {
            VerbsError::Call {
                call: "ibv_get_device_list",
                source: e,
            }
        }
    }
    fn rc(call: &'static str, rc: c_int) -> Self {
        VerbsError::Call {
            call,
            source: std::io::Error::from_raw_os_error(rc.abs()),
        }
    }
    /// errno of a failed verb, if that is what this is.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            VerbsError::Call { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// libmlx5's direct-verbs soname (rdma-core's mlx5 provider), for the GPU-initiated probe.
pub const LIBMLX5_SONAME: &str = "libmlx5.so.1";

/// dlopen libmlx5 for its mlx5dv_* functions (each a `Result` field: check before use).
/// Absent on machines without rdma-core's mlx5 provider: a finding like `Verbs::load`'s.
pub fn load_mlx5dv() -> Result<mlx5dv_sys::Mlx5Dv, VerbsError> {
    // SAFETY: loading libmlx5 runs its constructors, which only initialise its own state.
    unsafe { mlx5dv_sys::Mlx5Dv::new(LIBMLX5_SONAME) }
        .map_err(|e| VerbsError::Unavailable(format!("cannot load {LIBMLX5_SONAME}: {e}")))
}

/// The loaded library.
pub struct Verbs {
    lib: sys::IbVerbs,
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verbs")
    }
}

macro_rules! require {
    ($lib:expr, $($name:ident),+ $(,)?) => {
        $( if $lib.$name.is_err() { return Err(VerbsError::MissingSymbol(stringify!($name))); } )+
    };
}

impl Verbs {
    /// dlopen libibverbs. dlsym returns each symbol's default version (IBVERBS_1.1 for
    /// ibv_get_device_list, ibv_reg_mr, ibv_query_port...), the ones the headers compile against.
    pub fn load() -> Result<Arc<Verbs>, VerbsError> {
        // SAFETY: loading libibverbs runs its constructors, which only initialise its own state.
        let lib = unsafe { sys::IbVerbs::new(LIBIBVERBS_SONAME) }.map_err(|e| {
            VerbsError::Unavailable(format!("cannot load {LIBIBVERBS_SONAME}: {e}"))
        })?;
        require!(
            lib,
            ibv_get_device_list,
            ibv_free_device_list,
            ibv_get_device_name,
            ibv_open_device,
            ibv_close_device,
            ibv_query_device,
            ibv_query_port,
            ibv_query_gid,
            ibv_alloc_pd,
            ibv_dealloc_pd,
            ibv_reg_mr,
            ibv_dereg_mr,
            ibv_create_cq,
            ibv_destroy_cq,
            ibv_create_qp,
            ibv_destroy_qp,
            ibv_modify_qp,
            ibv_wc_status_str,
        );
        Ok(Arc::new(Verbs { lib }))
    }

    /// ibv_reg_dmabuf_mr arrived in rdma-core 34 (IBVERBS_1.12); check before use.
    pub fn has_reg_dmabuf_mr(&self) -> bool {
        self.lib.ibv_reg_dmabuf_mr.is_ok()
    }

    /// libibverbs' text for a completion status ("transport retry counter exceeded", ...).
    pub fn wc_status_str(&self, status: sys::ibv_wc_status) -> String {
        // SAFETY: ibv_wc_status_str returns a static string for any value ("unknown" if unknown).
        unsafe {
            let p = self.lib.ibv_wc_status_str(status);
            if p.is_null() {
                return format!("status {status}");
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }

    /// Names of the RDMA devices libibverbs sees, sorted.
    pub fn device_names(&self) -> Result<Vec<String>, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: the list is freed below; names are copied out before that.
        unsafe {
            let list = self.lib.ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(VerbsError::device_list());
            }
            let mut names = Vec::new();
            for i in 0..n.max(0) as usize {
                let d = *list.add(i);
                let p = self.lib.ibv_get_device_name(d);
                if !p.is_null() {
                    names.push(CStr::from_ptr(p).to_string_lossy().into_owned());
                }
            }
            self.lib.ibv_free_device_list(list);
            names.sort();
            Ok(names)
        }
    }

    /// Open the device called `name`.
    pub fn open(self: &Arc<Self>, name: &str) -> Result<Context, VerbsError> {
        self.open_with(name, None)
    }

    /// Open `name` through libmlx5's `mlx5dv_open_device` with MLX5DV_CONTEXT_FLAGS_DEVX, so
    /// that DevX objects can be created on it (fails rather than falling back where the
    /// device or kernel does not allow DevX). The caller checked `mlx5dv_open_device` exists.
    pub fn open_devx(
        self: &Arc<Self>,
        name: &str,
        dv: &mlx5dv_sys::Mlx5Dv,
    ) -> Result<Context, VerbsError> {
        self.open_with(name, Some(dv))
    }

    fn open_with(
        self: &Arc<Self>,
        name: &str,
        devx: Option<&mlx5dv_sys::Mlx5Dv>,
    ) -> Result<Context, VerbsError> {
        let mut n: c_int = 0;
        // SAFETY: the device pointer is used only while the list is alive; an opened context
        // stays valid after ibv_free_device_list (ibv_get_device_list(3)).
        unsafe {
            let list = self.lib.ibv_get_device_list(&mut n);
            if list.is_null() {
                return Err(VerbsError::device_list());
            }
            let mut found = Vec::new();
            let mut ctx = std::ptr::null_mut();
            let mut err = None;
            for i in 0..n.max(0) as usize {
                let d = *list.add(i);
                let p = self.lib.ibv_get_device_name(d);
                if p.is_null() {
                    continue;
                }
                let dn = CStr::from_ptr(p).to_string_lossy().into_owned();
                if dn == name {
                    match devx {
                        None => {
                            ctx = self.lib.ibv_open_device(d);
                            if ctx.is_null() {
                                err = Some(VerbsError::errno("ibv_open_device"));
                            }
                        }
                        Some(dv) => {
                            let mut attr: mlx5dv_sys::mlx5dv_context_attr = std::mem::zeroed();
                            attr.flags = mlx5dv_sys::MLX5DV_CONTEXT_FLAGS_DEVX;
                            ctx = match dv.mlx5dv_open_device.as_ref() {
                                Ok(f) => f(d, &mut attr),
                                Err(_) => std::ptr::null_mut(),
                            };
                            if ctx.is_null() {
                                err = Some(VerbsError::errno("mlx5dv_open_device(DEVX)"));
                            }
                        }
                    }
                    break;
                }
                found.push(dn);
            }
            self.lib.ibv_free_device_list(list);
            if let Some(e) = err {
                return Err(e);
            }
            let Some(ctx) = NonNull::new(ctx) else {
                found.sort();
                let found = if found.is_empty() {
                    "none".to_string()
                } else {
                    found.join(", ")
                };
                return Err(VerbsError::NoDevice {
                    name: name.to_string(),
                    found,
                });
            };
            Ok(Context(Rc::new(ContextInner {
                verbs: Arc::clone(self),
                ctx,
                name: name.to_string(),
            })))
        }
    }
}

struct ContextInner {
    verbs: Arc<Verbs>,
    ctx: NonNull<sys::ibv_context>,
    name: String,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: every PD/CQ/QP holds an Rc to this, so none is alive any more.
        unsafe {
            self.verbs.lib.ibv_close_device(self.ctx.as_ptr());
        }
    }
}

/// An open device.
#[derive(Clone)]
pub struct Context(Rc<ContextInner>);

/// The port facts a probe needs, copied out of `ibv_port_attr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    pub state: u32,
    pub active_mtu: u32,
    pub lid: u16,
    pub gid_tbl_len: i32,
    pub active_width: u8,
    /// The 8-bit speed code: NDR (128) on a faster port, whose speed is in `active_speed_ex`.
    pub active_speed: u8,
    /// The 32-bit speed code (XDR = 256), 0 where the library or kernel does not fill it
    /// ("if it is 0 refer to active_speed instead", ibv_query_port(3)).
    pub active_speed_ex: u32,
    pub link_layer: u8,
}

/// `struct ibv_port_attr` as rdma-core >= 49 declares it: the generated bindings are from
/// Debian 12's libibverbs-dev 44, which ends at `port_cap_flags2`; rdma-core 91b4ed8dd
/// ("verbs: Add support for XDR speed in ibv_query_port", v49.0) appended `uint32_t
/// active_speed_ex`. The extended query_port takes the caller's struct size; a library that
/// knows the shorter struct zeroes the whole buffer first and fills its part
/// (libibverbs/verbs.c `__lib_query_port`), so `active_speed_ex` reads 0 there.
#[repr(C)]
#[derive(Clone, Copy)]
struct PortAttrEx {
    attr: sys::ibv_port_attr,
    active_speed_ex: u32,
}

// The C layout: 52 bytes up to port_cap_flags2's padding, then the u32 at offset 52.
const _: () = assert!(std::mem::size_of::<sys::ibv_port_attr>() == 52);
const _: () = assert!(std::mem::offset_of!(PortAttrEx, active_speed_ex) == 52);
const _: () = assert!(std::mem::size_of::<PortAttrEx>() == 56);

impl PortAttr {
    pub fn is_active(&self) -> bool {
        self.state == sys::IBV_PORT_ACTIVE
    }
    pub fn is_ethernet(&self) -> bool {
        u32::from(self.link_layer) == sys::IBV_LINK_LAYER_ETHERNET
    }
    pub fn state_name(&self) -> &'static str {
        match self.state {
            sys::IBV_PORT_NOP => "NOP",
            sys::IBV_PORT_DOWN => "DOWN",
            sys::IBV_PORT_INIT => "INIT",
            sys::IBV_PORT_ARMED => "ARMED",
            sys::IBV_PORT_ACTIVE => "ACTIVE",
            sys::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
            _ => "unknown",
        }
    }
    /// Path MTU in bytes (256..4096).
    pub fn active_mtu_bytes(&self) -> u32 {
        if (1..=5).contains(&self.active_mtu) {
            128 << self.active_mtu
        } else {
            0
        }
    }
}

/// `__VERBS_ABI_IS_EXTENDED` in verbs.h: `((void *)UINTPTR_MAX)`.
const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

impl Context {
    pub fn name(&self) -> &str {
        &self.0.name
    }
    pub fn verbs(&self) -> &Arc<Verbs> {
        &self.0.verbs
    }
    fn lib(&self) -> &sys::IbVerbs {
        &self.0.verbs.lib
    }
    fn ptr(&self) -> *mut sys::ibv_context {
        self.0.ctx.as_ptr()
    }
    /// The raw context, for libmlx5's direct verbs (alive as long as this handle).
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.ptr()
    }

    /// verbs.h's `static inline ___ibv_query_port`, by hand: use the extended context's
    /// query_port when the provider has one (it fills the whole struct, `active_speed_ex`
    /// included from rdma-core 49 on: `PortAttrEx`), else the exported compat ibv_query_port,
    /// which fills the leading `_compat_ibv_port_attr` part.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, VerbsError> {
        // SAFETY: PortAttrEx is plain data (all-zero is valid) laid out as rdma-core 49+ declares
        // ibv_port_attr (checked above), and its size is what we pass. verbs_context embeds
        // ibv_context as its last member; abi_compat == VERBS_ABI_IS_EXTENDED says this context
        // was allocated as a verbs_context (verbs.h verbs_get_ctx), and `sz` says how much of it
        // the provider knows about (verbs_get_ctx_op).
        unsafe {
            let mut ex: PortAttrEx = std::mem::zeroed();
            let ctx = self.ptr();
            let mut rc = None;
            if (*ctx).abi_compat as usize == VERBS_ABI_IS_EXTENDED {
                let off = std::mem::offset_of!(sys::verbs_context, context);
                let vctx = (ctx as *mut u8).sub(off) as *mut sys::verbs_context;
                let need = std::mem::size_of::<sys::verbs_context>()
                    - std::mem::offset_of!(sys::verbs_context, query_port);
                if (*vctx).sz >= need
                    && let Some(f) = (*vctx).query_port
                {
                    rc = Some(f(
                        ctx,
                        port,
                        &mut ex as *mut PortAttrEx as *mut sys::ibv_port_attr,
                        std::mem::size_of::<PortAttrEx>(),
                    ));
                }
            }
            let rc = match rc {
                Some(rc) => rc,
                None => self.lib().ibv_query_port(
                    ctx,
                    port,
                    &mut ex.attr as *mut _ as *mut sys::_compat_ibv_port_attr,
                ),
            };
            if rc != 0 {
                return Err(VerbsError::rc("ibv_query_port", rc));
            }
            let attr = ex.attr;
            Ok(PortAttr {
                state: attr.state,
                active_mtu: attr.active_mtu,
                lid: attr.lid,
                gid_tbl_len: attr.gid_tbl_len,
                active_width: attr.active_width,
                active_speed: attr.active_speed,
                active_speed_ex: ex.active_speed_ex,
                link_layer: attr.link_layer,
            })
        }
    }

    pub fn query_gid(&self, port: u8, index: i32) -> Result<[u8; 16], VerbsError> {
        // SAFETY: ibv_gid is 16 bytes of plain data.
        unsafe {
            let mut gid: sys::ibv_gid = std::mem::zeroed();
            let rc = self.lib().ibv_query_gid(self.ptr(), port, index, &mut gid);
            if rc != 0 {
                return Err(VerbsError::rc("ibv_query_gid", rc));
            }
            Ok(gid.raw)
        }
    }

    /// Number of physical ports and the device's work-request limit.
    pub fn query_device(&self) -> Result<DeviceAttr, VerbsError> {
        // SAFETY: ibv_device_attr is plain data.
        unsafe {
            let mut a: sys::ibv_device_attr = std::mem::zeroed();
            let rc = self.lib().ibv_query_device(self.ptr(), &mut a);
            if rc != 0 {
                return Err(VerbsError::rc("ibv_query_device", rc));
            }
            Ok(DeviceAttr {
                phys_port_cnt: a.phys_port_cnt,
                max_qp_wr: a.max_qp_wr,
                vendor_id: a.vendor_id,
            })
        }
    }

    pub fn alloc_pd(&self) -> Result<Pd, VerbsError> {
        // SAFETY: the context is open; the PD is freed by PdInner's Drop.
        let pd = unsafe { self.lib().ibv_alloc_pd(self.ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| VerbsError::errno("ibv_alloc_pd"))?;
        Ok(Pd(Rc::new(PdInner {
            ctx: self.clone(),
            pd,
        })))
    }

    /// A completion queue with at least `cqe` entries, without a completion channel (polled).
    pub fn create_cq(&self, cqe: i32) -> Result<Cq, VerbsError> {
        // SAFETY: the context is open; the CQ is destroyed by CqInner's Drop.
        let cq = unsafe {
            self.lib().ibv_create_cq(
                self.ptr(),
                cqe,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        let cq = NonNull::new(cq).ok_or_else(|| VerbsError::errno("ibv_create_cq"))?;
        Ok(Cq(Rc::new(CqInner {
            ctx: self.clone(),
            cq,
        })))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct DeviceAttr {
    pub phys_port_cnt: u8,
    pub max_qp_wr: i32,
    pub vendor_id: u32,
}

struct PdInner {
    ctx: Context,
    pd: NonNull<sys::ibv_pd>,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Rc to this, so none is alive any more.
        unsafe {
            self.ctx.lib().ibv_dealloc_pd(self.pd.as_ptr());
        }
    }
}

/// A protection domain.
#[derive(Clone)]
pub struct Pd(Rc<PdInner>);

impl Pd {
    /// Register `buf` (which the region then owns, so it outlives the registration).
    pub fn reg_mr(&self, buf: AlignedBuf, access: u32) -> Result<Mr, VerbsError> {
        // SAFETY: buf is a live allocation of buf.len() bytes that Mr keeps until after
        // ibv_dereg_mr. ibv_reg_mr here is the exported IBVERBS_1.1 function (the header's
        // __ibv_reg_mr macro only adds IBV_ACCESS_OPTIONAL_RANGE handling, unused here).
        let mr = unsafe {
            self.0.ctx.lib().ibv_reg_mr(
                self.0.pd.as_ptr(),
                buf.ptr.as_ptr() as *mut c_void,
                buf.len,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_mr"))?;
        Ok(Mr {
            pd: self.clone(),
            mr,
            buf,
        })
    }

    /// An RC queue pair using `cq` for both send and receive completions.
    pub fn create_rc_qp(&self, cq: &Cq, max_send_wr: u32) -> Result<Qp, VerbsError> {
        // SAFETY: ibv_qp_init_attr is plain data; pd and cq are alive (the Qp holds both).
        unsafe {
            let mut a: sys::ibv_qp_init_attr = std::mem::zeroed();
            a.send_cq = cq.0.cq.as_ptr();
            a.recv_cq = cq.0.cq.as_ptr();
            a.cap.max_send_wr = max_send_wr;
            a.cap.max_recv_wr = 1;
            a.cap.max_send_sge = 1;
            a.cap.max_recv_sge = 1;
            a.qp_type = sys::IBV_QPT_RC;
            a.sq_sig_all = 0;
            let qp = self.0.ctx.lib().ibv_create_qp(self.0.pd.as_ptr(), &mut a);
            let qp = NonNull::new(qp).ok_or_else(|| VerbsError::errno("ibv_create_qp"))?;
            Ok(Qp {
                _pd: self.clone(),
                cq: cq.clone(),
                qp,
            })
        }
    }
}

/// What NCCL's dma-buf probe learnt about a provider: `ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0)`
/// (NCCL src/transport/net_ib.cc, `ncclIbDmaBufSupport`; src/transport/net_ib/gdr.cc in later
/// releases) fails with EOPNOTSUPP or EPROTONOSUPPORT where the provider or kernel lacks dma-buf
/// MRs, and with EBADF (the fd) where it would try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DmabufProbe {
    /// libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34).
    NoSymbol,
    /// The call failed with this errno.
    Errno(i32),
    /// The call succeeded on fd -1 (never seen; the region was deregistered at once).
    Registered,
}

impl Pd {
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }
    /// The raw PD, for libmlx5's direct verbs (alive as long as this handle).
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.0.pd.as_ptr()
    }

    /// Register `len` bytes at `addr`, which the caller owns (host memory, or a GPU pointer
    /// that nvidia-peermem resolves). The region does not own the memory.
    ///
    /// # Safety
    /// `addr..addr+len` must stay allocated until the returned region is dropped.
    pub unsafe fn reg_mr_at(
        &self,
        addr: u64,
        len: usize,
        access: u32,
    ) -> Result<RawMr, VerbsError> {
        // SAFETY: the caller vouches for the range; ibv_reg_mr is the exported IBVERBS_1.1
        // function (as in `reg_mr`).
        let mr = unsafe {
            self.0.ctx.lib().ibv_reg_mr(
                self.0.pd.as_ptr(),
                addr as *mut c_void,
                len,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_mr"))?;
        Ok(RawMr {
            pd: self.clone(),
            mr,
            addr,
            len,
        })
    }

    /// Register `len` bytes at `offset` of the dma-buf `fd`, addressed by the peer as `iova`.
    /// The kernel holds its own reference to the dma-buf: `fd` may be closed afterwards.
    pub fn reg_dmabuf_mr(
        &self,
        offset: u64,
        len: usize,
        iova: u64,
        fd: i32,
        access: u32,
    ) -> Result<RawMr, VerbsError> {
        require!(self.0.ctx.lib(), ibv_reg_dmabuf_mr);
        // SAFETY: a live PD; the kernel validates fd, offset and length against the dma-buf.
        let mr = unsafe {
            self.0.ctx.lib().ibv_reg_dmabuf_mr(
                self.0.pd.as_ptr(),
                offset,
                len,
                iova,
                fd,
                access as c_int,
            )
        };
        let mr = NonNull::new(mr).ok_or_else(|| VerbsError::errno("ibv_reg_dmabuf_mr"))?;
        Ok(RawMr {
            pd: self.clone(),
            mr,
            addr: iova,
            len,
        })
    }

    /// NCCL's dma-buf support probe on this PD's device (see `DmabufProbe`).
    pub fn probe_dmabuf(&self) -> DmabufProbe {
        if !self.0.ctx.verbs().has_reg_dmabuf_mr() {
            return DmabufProbe::NoSymbol;
        }
        match self.reg_dmabuf_mr(0, 0, 0, -1, 0) {
            Ok(mr) => {
                drop(mr);
                DmabufProbe::Registered
            }
            Err(e) => DmabufProbe::Errno(e.raw_os_error().unwrap_or(0)),
        }
    }
}

/// A registered region over memory it does not own (see `Pd::reg_mr_at`,
/// `Pd::reg_dmabuf_mr`): deregistered on drop, which its owner must order before freeing the
/// memory.
pub struct RawMr {
    pd: Pd,
    mr: NonNull<sys::ibv_mr>,
    addr: u64,
    len: usize,
}

impl RawMr {
    /// The address work requests and the peer use for this region.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered for as long as self lives.
        unsafe { (*self.mr.as_ptr()).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
}

impl Drop for RawMr {
    fn drop(&mut self) {
        // SAFETY: registered by this PD, deregistered once.
        unsafe {
            self.pd.0.ctx.lib().ibv_dereg_mr(self.mr.as_ptr());
        }
    }
}

/// A page-aligned, zeroed buffer for registration.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

impl AlignedBuf {
    const ALIGN: usize = 4096;
    pub fn zeroed(len: usize) -> Option<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), Self::ALIGN).ok()?;
        // SAFETY: layout has non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        Some(AlignedBuf {
            ptr: NonNull::new(p)?,
            len,
        })
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The buffer's address (for `Pd::reg_mr_at`; the buffer must outlive the region).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: len bytes allocated and initialised (zeroed) in `zeroed`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above; &mut self makes this the only CPU view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `zeroed` with this layout.
        unsafe {
            std::alloc::dealloc(
                self.ptr.as_ptr(),
                Layout::from_size_align_unchecked(self.len.max(1), Self::ALIGN),
            )
        }
    }
}

/// A registered memory region that owns its buffer.
pub struct Mr {
    pd: Pd,
    mr: NonNull<sys::ibv_mr>,
    buf: AlignedBuf,
}

impl Mr {
    pub fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }
    pub fn len(&self) -> usize {
        self.buf.len
    }
    pub fn is_empty(&self) -> bool {
        self.buf.len == 0
    }
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is registered for as long as self lives.
        unsafe { (*self.mr.as_ptr()).lkey }
    }
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr.as_ptr()).rkey }
    }
    /// The CPU view of the buffer. The device may write into it (it was registered for remote
    /// writes): read it only when no RDMA write to it is in flight.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: len bytes allocated and initialised (zeroed) in AlignedBuf.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr(), self.buf.len) }
    }
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above; &mut self makes this the only CPU view.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr(), self.buf.len) }
    }
}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: deregistered before `buf` (a field) is freed.
        unsafe {
            self.pd.0.ctx.lib().ibv_dereg_mr(self.mr.as_ptr());
        }
    }
}

struct CqInner {
    ctx: Context,
    cq: NonNull<sys::ibv_cq>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: QPs using this CQ hold an Rc to it, so none is alive any more.
        unsafe {
            self.ctx.lib().ibv_destroy_cq(self.cq.as_ptr());
        }
    }
}

/// A completion queue.
#[derive(Clone)]
pub struct Cq(Rc<CqInner>);

/// An all-zero work completion, for poll buffers.
pub fn empty_wc() -> sys::ibv_wc {
    // SAFETY: ibv_wc is plain data.
    unsafe { std::mem::zeroed() }
}

impl Cq {
    /// The provider's CQ (for libmlx5's direct verbs); valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.0.cq.as_ptr()
    }

    /// verbs.h's `static inline ibv_poll_cq`, by hand: through the context's ops table.
    /// Returns how many entries of `wc` were filled.
    #[inline]
    pub fn poll(&self, wc: &mut [sys::ibv_wc]) -> Result<usize, VerbsError> {
        // SAFETY: cq->context is the context the CQ was created on (alive: we hold it); its
        // ops.poll_cq is set by every provider; wc has room for wc.len() entries.
        unsafe {
            let cq = self.0.cq.as_ptr();
            let Some(poll) = (*(*cq).context).ops.poll_cq else {
                return Err(VerbsError::rc(
                    "ibv_poll_cq (no provider op)",
                    libc_enosys(),
                ));
            };
            let n = poll(
                cq,
                wc.len().min(i32::MAX as usize) as c_int,
                wc.as_mut_ptr(),
            );
            if n < 0 {
                return Err(VerbsError::rc("ibv_poll_cq", n));
            }
            Ok(n as usize)
        }
    }

    /// An error for a completion `wc` with a non-success status.
    pub fn completion_error(&self, wc: &sys::ibv_wc) -> VerbsError {
        VerbsError::Completion {
            status: wc.status,
            status_str: self.0.ctx.verbs().wc_status_str(wc.status),
            vendor_err: wc.vendor_err,
        }
    }
}

/// ENOSYS on Linux.
const ENOSYS: i32 = 38;

fn libc_enosys() -> c_int {
    ENOSYS
}

/// What the remote side of an RC connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQp {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    /// Some: route with a GRH (RoCE, or IB across subnets); None: LID routing (IB).
    pub gid: Option<[u8; 16]>,
}

/// How this side sends: port, path MTU, source GID index when routed with a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalPath {
    pub port: u8,
    pub mtu: u32,
    pub sgid_index: Option<u8>,
    pub psn: u32,
}

/// An RC queue pair.
pub struct Qp {
    _pd: Pd,
    cq: Cq,
    qp: NonNull<sys::ibv_qp>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        // SAFETY: destroyed before its PD and CQ (the Rcs in the fields drop after this).
        unsafe {
            self.cq.0.ctx.lib().ibv_destroy_qp(self.qp.as_ptr());
        }
    }
}

/// What a peer may do to a write-bw buffer and QP: write, nothing else. Remote read is not
/// granted (write-bw never reads), so a two-node client cannot read the server's memory.
pub const ACCESS_RDMA_TARGET: u32 = sys::IBV_ACCESS_LOCAL_WRITE | sys::IBV_ACCESS_REMOTE_WRITE;

impl Qp {
    /// The provider's QP (for libmlx5's direct verbs); valid while `self` lives.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.qp.as_ptr()
    }
    pub fn qpn(&self) -> u32 {
        // SAFETY: the QP is alive for as long as self.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    fn modify(
        &self,
        attr: &mut sys::ibv_qp_attr,
        mask: u32,
        step: &'static str,
    ) -> Result<(), VerbsError> {
        // SAFETY: attr is a valid ibv_qp_attr; the QP is alive.
        let rc = unsafe {
            self.cq
                .0
                .ctx
                .lib()
                .ibv_modify_qp(self.qp.as_ptr(), attr, mask as c_int)
        };
        if rc != 0 {
            return Err(VerbsError::rc(step, rc));
        }
        Ok(())
    }

    /// RESET -> INIT -> RTR -> RTS, connected to `remote`. The retry settings bound how long a
    /// write to a vanished peer takes to fail: timeout 14 (4.096 us * 2^14 = 67 ms) x 7 retries.
    pub fn connect(&self, local: &LocalPath, remote: &RemoteQp) -> Result<(), VerbsError> {
        // SAFETY: ibv_qp_attr is plain data.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = local.port;
        a.qp_access_flags = ACCESS_RDMA_TARGET;
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;

        // SAFETY: as above.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTR;
        a.path_mtu = local.mtu;
        a.dest_qp_num = remote.qpn;
        a.rq_psn = remote.psn;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.port_num = local.port;
        a.ah_attr.dlid = remote.lid;
        if let (Some(dgid), Some(sgid_index)) = (remote.gid, local.sgid_index) {
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid.raw = dgid;
            a.ah_attr.grh.sgid_index = sgid_index;
            a.ah_attr.grh.hop_limit = 64;
        }
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_AV
                | sys::IBV_QP_PATH_MTU
                | sys::IBV_QP_DEST_QPN
                | sys::IBV_QP_RQ_PSN
                | sys::IBV_QP_MAX_DEST_RD_ATOMIC
                | sys::IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(RTR)",
        )?;

        // SAFETY: as above.
        let mut a: sys::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = sys::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = local.psn;
        a.max_rd_atomic = 1;
        self.modify(
            &mut a,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    /// verbs.h's `static inline ibv_post_send`, by hand: through the context's ops table.
    ///
    /// # Safety
    /// `wr` must be a valid, null-terminated chain of work requests whose SGEs point into
    /// memory registered on this QP's PD that stays registered until they complete.
    #[inline]
    pub unsafe fn post_send(&self, wr: *mut sys::ibv_send_wr) -> Result<(), VerbsError> {
        // SAFETY: qp->context is alive (we hold it); ops.post_send is set by every provider;
        // the caller vouches for wr.
        unsafe {
            let qp = self.qp.as_ptr();
            let Some(post) = (*(*qp).context).ops.post_send else {
                return Err(VerbsError::rc(
                    "ibv_post_send (no provider op)",
                    libc_enosys(),
                ));
            };
            let mut bad: *mut sys::ibv_send_wr = std::ptr::null_mut();
            let rc = post(qp, wr, &mut bad);
            if rc != 0 {
                return Err(VerbsError::rc("ibv_post_send", rc));
            }
            Ok(())
        }
    }
}

/// Parse a GID as sysfs writes it ("fe80:0000:0000:0000:0000:00ff:fe00:0001").
pub fn parse_gid(s: &str) -> Option<[u8; 16]> {
    let groups: Vec<&str> = s.trim().split(':').collect();
    if groups.len() != 8 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, g) in groups.iter().enumerate() {
        if g.is_empty() || g.len() > 4 {
            return None;
        }
        let v = u16::from_str_radix(g, 16).ok()?;
        out[2 * i..2 * i + 2].copy_from_slice(&v.to_be_bytes());
    }
    Some(out)
}

/// Format a GID the way sysfs does.
pub fn format_gid(g: &[u8; 16]) -> String {
    g.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_round_trip() {
        let s = "fe80:0000:0000:0000:0000:00ff:fe00:0001";
        let g = parse_gid(s).unwrap();
        assert_eq!(g[0], 0xfe);
        assert_eq!(g[15], 1);
        assert_eq!(format_gid(&g), s);
        assert_eq!(parse_gid("fe80::1"), None);
        assert_eq!(parse_gid("zz80:0000:0000:0000:0000:00ff:fe00:0001"), None);
    }

    #[test]
    fn mtu_bytes() {
        let mut p = PortAttr {
            state: sys::IBV_PORT_ACTIVE,
            active_mtu: 3,
            lid: 0,
            gid_tbl_len: 1,
            active_width: 1,
            active_speed: 1,
            active_speed_ex: 0,
            link_layer: 2,
        };
        assert_eq!(p.active_mtu_bytes(), 1024);
        p.active_mtu = 9;
        assert_eq!(p.active_mtu_bytes(), 0);
        assert!(p.is_ethernet() && p.is_active());
    }

    #[test]
    fn load_never_panics() {
        // On a machine without rdma-core this is an Unavailable finding; with it, Ok.
        match Verbs::load() {
            Ok(v) => {
                let _ = v.has_reg_dmabuf_mr();
                let _ = v.wc_status_str(sys::IBV_WC_RETRY_EXC_ERR);
            }
            Err(e) => assert!(matches!(e, VerbsError::Unavailable(_)), "{e}"),
        }
        match load_mlx5dv() {
            Ok(m) => assert!(m.mlx5dv_query_device.is_ok()),
            Err(e) => assert!(matches!(e, VerbsError::Unavailable(_)), "{e}"),
        }
    }
}
