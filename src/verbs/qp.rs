//! RC queue pairs (`Qp`, from `Pd::create_rc_qp`): the state transitions to RTS and posting.

use super::cq::Cq;
use super::error::{VerbsError, libc_enosys};
use super::ffi::sys;
use super::pd::Pd;
use std::ffi::c_int;
use std::ptr::NonNull;

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

impl Pd {
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
