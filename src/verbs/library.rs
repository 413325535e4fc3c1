//! Loading libibverbs (`Verbs::load`) and libmlx5 (`load_mlx5dv`) at run time: a missing
//! library or symbol is a `VerbsError`, never a crash.

use super::error::{LIBIBVERBS_SONAME, VerbsError};
use super::ffi::{mlx5dv_sys, sys};
use std::ffi::{CStr, c_int};
use std::sync::Arc;

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
    pub(super) lib: sys::IbVerbs,
}

impl std::fmt::Debug for Verbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Verbs")
    }
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
}
