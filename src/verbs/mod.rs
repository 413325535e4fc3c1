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

/// `require!(lib, sym, ...)`: return `VerbsError::MissingSymbol` from the enclosing function
/// when one of libibverbs' symbols did not resolve (defined before the modules that use it).
macro_rules! require {
    ($lib:expr, $($name:ident),+ $(,)?) => {
        $( if $lib.$name.is_err() { return Err(VerbsError::MissingSymbol(stringify!($name))); } )+
    };
}

mod context;
mod cq;
mod error;
pub mod ffi;
mod gid;
mod library;
mod mr;
mod pd;
mod qp;

pub use context::{Context, DeviceAttr, PortAttr};
pub use cq::{Cq, empty_wc};
pub use error::{LIBIBVERBS_SONAME, VerbsError};
pub use ffi::{mlx5dv_sys, sys};
pub use gid::{format_gid, parse_gid};
pub use library::{LIBMLX5_SONAME, Verbs, load_mlx5dv};
pub use mr::{AlignedBuf, Mr, RawMr};
pub use pd::{DmabufProbe, Pd};
pub use qp::{ACCESS_RDMA_TARGET, LocalPath, Qp, RemoteQp};

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
