//! An open device (`Context`, from `Verbs::open`): its ports, GIDs and limits.

use super::error::VerbsError;
use super::ffi::{mlx5dv_sys, sys};
use super::library::Verbs;
use std::ffi::{CStr, c_int};
use std::ptr::NonNull;
use std::rc::Rc;
use std::sync::Arc;

pub(super) struct ContextInner {
    pub(super) verbs: Arc<Verbs>,
    pub(super) ctx: NonNull<sys::ibv_context>,
    pub(super) name: String,
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
pub struct Context(pub(super) Rc<ContextInner>);

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
    pub(super) fn lib(&self) -> &sys::IbVerbs {
        &self.0.verbs.lib
    }
    pub(super) fn ptr(&self) -> *mut sys::ibv_context {
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
}

#[derive(Debug, Clone, Copy)]
pub struct DeviceAttr {
    pub phys_port_cnt: u8,
    pub max_qp_wr: i32,
    pub vendor_id: u32,
}

impl Verbs {
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
