//! The verbs layer's typed error (`VerbsError`): callers branch on it (a missing library or
//! kernel support is a skip, a failed verb an error, a completion error the machine's).

use std::ffi::c_int;

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
    pub(super) fn errno(call: &'static str) -> Self {
        VerbsError::Call {
            call,
            source: std::io::Error::last_os_error(),
        }
    }
    pub(super) fn device_list() -> Self {
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
    pub(super) fn rc(call: &'static str, rc: c_int) -> Self {
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

/// ENOSYS on Linux.
pub(super) const ENOSYS: i32 = 38;

pub(super) fn libc_enosys() -> c_int {
    ENOSYS
}
