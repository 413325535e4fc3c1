//! The mlx5 firmware commands (PRM) level 4 sends through DevX to put an RC QP and its CQ in
//! GPU memory, as NVSHMEM's IBGDA does: CREATE_CQ and CREATE_QP over DevX umems (the rings
//! and doorbell records live in memory the caller registered), and RST2INIT, INIT2RTR and
//! RTR2RTS to connect the QP. Pure Rust, no device: the commands are byte buffers of
//! big-endian 32-bit words whose fields sit at the bit offsets of the PRM, written as the
//! kernel's MLX5_SET does (bit 0 is the most significant bit of the first word).
//!
//! The offsets are the kernel's `include/linux/mlx5/mlx5_ifc.h` (qpc, ads, cqc, create_qp_in,
//! create_cq_in, rst2init_qp_in ...), with the DevX umem fields the kernel header leaves
//! reserved (create_cq_in.cq_umem_offset/cq_umem_id, cqc.dbr_umem_id, qpc.dbr_umem_id) where
//! rdma-core's own DevX test suite puts them. `tests/it/mlx5_prm.rs` compares every command
//! built here, byte for byte, with the same command built by rdma-core's
//! `tests/mlx5_prm_structs.py` (Debian's python3-pyverbs) from the same values, the way
//! rdma-core's `Mlx5DevxRcResources` (`tests/mlx5_base.py`) sets them up for its DevX RC
//! traffic tests. What no test here can show is a ConnectX accepting them: see the README.

/// Command opcodes (PRM).
pub const CREATE_CQ: u16 = 0x400;
pub const CREATE_QP: u16 = 0x500;
pub const RST2INIT_QP: u16 = 0x502;
pub const INIT2RTR_QP: u16 = 0x503;
pub const RTR2RTS_QP: u16 = 0x504;

/// Input and output lengths, bytes (create_cq_in, create_qp_in and the modify_qp commands are
/// 0x880 bits without their page lists; every output used here is 0x80 bits).
pub const CMD_IN_BYTES: usize = 0x880 / 8;
pub const CMD_OUT_BYTES: usize = 0x80 / 8;

/// qpc.st for RC, qpc.pm_state "migrated", qpc.rq_type for a QP without a receive queue.
pub const QPC_ST_RC: u32 = 0x0;
pub const QPC_PM_STATE_MIGRATED: u32 = 0x3;
pub const QPC_RQ_TYPE_ZERO_SIZE: u32 = 0x3;

/// A field: bit offset from the start of the command and width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    pub name: &'static str,
    pub off: usize,
    pub bits: usize,
}

const fn f(name: &'static str, off: usize, bits: usize) -> Field {
    Field { name, off, bits }
}

// Command header (every *_in).
const OPCODE: Field = f("opcode", 0x0, 16);
const MODIFY_QPN: Field = f("qpn", 0x48, 24);
// Every *_out.
const OUT_STATUS: Field = f("status", 0x0, 8);
const OUT_SYNDROME: Field = f("syndrome", 0x20, 32);
const OUT_ID: Field = f("cqn/qpn", 0x48, 24);

/// Where the QP context starts in create_qp_in and the modify commands, the CQ context in
/// create_cq_in.
const QPC: usize = 0xc0;
const CQC: usize = 0x80;
/// The primary address path inside the QP context.
const PAP: usize = QPC + 0xc0;

pub mod cq {
    use super::{CQC, Field, f};
    pub const DBR_UMEM_VALID: Field = f("cqc.dbr_umem_valid", CQC + 0x6, 1);
    pub const CQE_SZ: Field = f("cqc.cqe_sz", CQC + 0x8, 3);
    pub const DBR_UMEM_ID: Field = f("cqc.dbr_umem_id", CQC + 0x20, 32);
    pub const LOG_CQ_SIZE: Field = f("cqc.log_cq_size", CQC + 0x63, 5);
    pub const UAR_PAGE: Field = f("cqc.uar_page", CQC + 0x68, 24);
    pub const C_EQN: Field = f("cqc.c_eqn", CQC + 0xa0, 32);
    pub const DBR_ADDR: Field = f("cqc.dbr_addr", CQC + 0x1c0, 64);
    pub const UMEM_OFFSET: Field = f("cq_umem_offset", 0x280, 64);
    pub const UMEM_ID: Field = f("cq_umem_id", 0x2c0, 32);
    pub const UMEM_VALID: Field = f("cq_umem_valid", 0x2e0, 1);
}

pub mod qp {
    use super::{Field, PAP, QPC, f};
    pub const ST: Field = f("qpc.st", QPC + 0x8, 8);
    pub const PM_STATE: Field = f("qpc.pm_state", QPC + 0x13, 2);
    pub const PD: Field = f("qpc.pd", QPC + 0x28, 24);
    pub const MTU: Field = f("qpc.mtu", QPC + 0x40, 3);
    pub const LOG_MSG_MAX: Field = f("qpc.log_msg_max", QPC + 0x43, 5);
    pub const LOG_RQ_SIZE: Field = f("qpc.log_rq_size", QPC + 0x49, 4);
    pub const LOG_RQ_STRIDE: Field = f("qpc.log_rq_stride", QPC + 0x4d, 3);
    pub const NO_SQ: Field = f("qpc.no_sq", QPC + 0x50, 1);
    pub const LOG_SQ_SIZE: Field = f("qpc.log_sq_size", QPC + 0x51, 4);
    pub const TS_FORMAT: Field = f("qpc.ts_format", QPC + 0x58, 2);
    pub const UAR_PAGE: Field = f("qpc.uar_page", QPC + 0x68, 24);
    pub const REMOTE_QPN: Field = f("qpc.remote_qpn", QPC + 0xa8, 24);
    pub const PKEY_INDEX: Field = f("pap.pkey_index", PAP + 0x10, 16);
    pub const GRH: Field = f("pap.grh", PAP + 0x28, 1);
    pub const RLID: Field = f("pap.rlid", PAP + 0x30, 16);
    pub const ACK_TIMEOUT: Field = f("pap.ack_timeout", PAP + 0x40, 5);
    pub const SRC_ADDR_INDEX: Field = f("pap.src_addr_index", PAP + 0x48, 8);
    pub const HOP_LIMIT: Field = f("pap.hop_limit", PAP + 0x58, 8);
    /// 128 bits, four words.
    pub const RGID_RIP: Field = f("pap.rgid_rip", PAP + 0x80, 128);
    pub const UDP_SPORT: Field = f("pap.udp_sport", PAP + 0x110, 16);
    pub const VHCA_PORT_NUM: Field = f("pap.vhca_port_num", PAP + 0x128, 8);
    pub const RMAC_47_32: Field = f("pap.rmac_47_32", PAP + 0x130, 16);
    pub const RMAC_31_0: Field = f("pap.rmac_31_0", PAP + 0x140, 32);
    pub const LOG_SRA_MAX: Field = f("qpc.log_sra_max", QPC + 0x388, 3);
    pub const RETRY_COUNT: Field = f("qpc.retry_count", QPC + 0x38d, 3);
    pub const RNR_RETRY: Field = f("qpc.rnr_retry", QPC + 0x390, 3);
    pub const NEXT_SEND_PSN: Field = f("qpc.next_send_psn", QPC + 0x3c8, 24);
    pub const CQN_SND: Field = f("qpc.cqn_snd", QPC + 0x3e8, 24);
    pub const LOG_RRA_MAX: Field = f("qpc.log_rra_max", QPC + 0x488, 3);
    pub const RRE: Field = f("qpc.rre", QPC + 0x490, 1);
    pub const RWE: Field = f("qpc.rwe", QPC + 0x491, 1);
    pub const MIN_RNR_NAK: Field = f("qpc.min_rnr_nak", QPC + 0x4a3, 5);
    pub const NEXT_RCV_PSN: Field = f("qpc.next_rcv_psn", QPC + 0x4a8, 24);
    pub const CQN_RCV: Field = f("qpc.cqn_rcv", QPC + 0x4e8, 24);
    pub const DBR_ADDR: Field = f("qpc.dbr_addr", QPC + 0x500, 64);
    pub const RQ_TYPE: Field = f("qpc.rq_type", QPC + 0x565, 3);
    pub const DBR_UMEM_VALID: Field = f("qpc.dbr_umem_valid", QPC + 0x683, 1);
    pub const DBR_UMEM_ID: Field = f("qpc.dbr_umem_id", QPC + 0x720, 32);
    pub const WQ_UMEM_OFFSET: Field = f("wq_umem_offset", 0x800, 64);
    pub const WQ_UMEM_ID: Field = f("wq_umem_id", 0x840, 32);
    pub const WQ_UMEM_VALID: Field = f("wq_umem_valid", 0x860, 1);
}

/// A command or its output: big-endian words, fields set and read as MLX5_SET/MLX5_GET do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd(pub Vec<u8>);

impl Cmd {
    pub fn new(bytes: usize) -> Self {
        Cmd(vec![0; bytes])
    }

    fn with_opcode(op: u16) -> Self {
        let mut c = Cmd::new(CMD_IN_BYTES);
        c.set(OPCODE, u64::from(op));
        c
    }

    /// Set `field` to `v` (masked to its width). Fields of up to 32 bits lie inside one word;
    /// wider ones start on a word boundary and span whole words (big-endian as a whole).
    /// Panics on a field outside the buffer: the fields are this module's constants, and the
    /// buffers sized for them.
    pub fn set(&mut self, field: Field, v: u64) {
        let (off, bits) = (field.off, field.bits);
        if bits <= 32 {
            let word = off / 32;
            let shift = 32 - bits - off % 32;
            let mask: u32 = if bits == 32 {
                u32::MAX
            } else {
                ((1u32 << bits) - 1) << shift
            };
            let i = word * 4;
            let old = u32::from_be_bytes(self.0[i..i + 4].try_into().unwrap_or([0; 4]));
            let new = (old & !mask) | (((v as u32) << shift) & mask);
            self.0[i..i + 4].copy_from_slice(&new.to_be_bytes());
        } else {
            let i = off / 8;
            let n = bits / 8;
            let b = v.to_be_bytes();
            self.0[i..i + n].copy_from_slice(&b[8 - n..]);
        }
    }

    /// Set a field wider than 64 bits (a GID) from its bytes, most significant first.
    pub fn set_bytes(&mut self, field: Field, bytes: &[u8]) {
        let i = field.off / 8;
        let n = (field.bits / 8).min(bytes.len());
        self.0[i..i + n].copy_from_slice(&bytes[..n]);
    }

    /// Read `field`; None where it lies outside the buffer (a short output).
    pub fn get(&self, field: Field) -> Option<u64> {
        let (off, bits) = (field.off, field.bits);
        if bits <= 32 {
            let i = off / 32 * 4;
            let w = u32::from_be_bytes(self.0.get(i..i + 4)?.try_into().ok()?);
            let shift = 32 - bits - off % 32;
            let mask = if bits == 32 {
                u32::MAX
            } else {
                (1u32 << bits) - 1
            };
            Some(u64::from((w >> shift) & mask))
        } else {
            let i = off / 8;
            let n = bits / 8;
            let mut b = [0u8; 8];
            b[8 - n..].copy_from_slice(self.0.get(i..i + n)?);
            Some(u64::from_be_bytes(b))
        }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// What CREATE_CQ needs: a ring of 2^log_size 64-byte CQEs at `umem_offset` in umem `umem_id`,
/// its doorbell record at byte `dbr_offset` of umem `dbr_umem_id`, the UAR page it arms
/// through and the event queue it would report to (never armed here: the kernel polls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CqParams {
    pub log_size: u32,
    pub uar_page: u32,
    pub eqn: u32,
    pub umem_id: u32,
    pub umem_offset: u64,
    pub dbr_umem_id: u32,
    pub dbr_offset: u64,
}

/// A buffer inside a DevX umem, named by one command's (valid bit, umem id, offset) fields.
fn set_umem(c: &mut Cmd, [valid, id, offset]: [Field; 3], umem_id: u32, at: u64) {
    c.set(valid, 1);
    c.set(id, u64::from(umem_id));
    c.set(offset, at);
}

pub fn create_cq_in(p: &CqParams) -> Cmd {
    let mut c = Cmd::with_opcode(CREATE_CQ);
    c.set(cq::CQE_SZ, 0); // 64-byte CQEs
    c.set(cq::LOG_CQ_SIZE, u64::from(p.log_size));
    c.set(cq::UAR_PAGE, u64::from(p.uar_page));
    c.set(cq::C_EQN, u64::from(p.eqn));
    let dbr = [cq::DBR_UMEM_VALID, cq::DBR_UMEM_ID, cq::DBR_ADDR];
    set_umem(&mut c, dbr, p.dbr_umem_id, p.dbr_offset);
    let ring = [cq::UMEM_VALID, cq::UMEM_ID, cq::UMEM_OFFSET];
    set_umem(&mut c, ring, p.umem_id, p.umem_offset);
    c
}

/// What CREATE_QP needs for an RC QP that only sends: a send queue of 2^log_sq_size 64-byte
/// WQEBBs at `umem_offset` in umem `umem_id` (no receive queue: rq_type zero-size), its
/// doorbell record at byte `dbr_offset` of umem `dbr_umem_id`, the PD and CQ numbers and the
/// UAR page whose register rings it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QpParams {
    pub pdn: u32,
    pub cqn: u32,
    pub uar_page: u32,
    pub log_sq_size: u32,
    pub umem_id: u32,
    pub umem_offset: u64,
    pub dbr_umem_id: u32,
    pub dbr_offset: u64,
}

pub fn create_qp_in(p: &QpParams) -> Cmd {
    let mut c = Cmd::with_opcode(CREATE_QP);
    c.set(qp::ST, u64::from(QPC_ST_RC));
    c.set(qp::PM_STATE, u64::from(QPC_PM_STATE_MIGRATED));
    c.set(qp::PD, u64::from(p.pdn));
    c.set(qp::UAR_PAGE, u64::from(p.uar_page));
    c.set(qp::TS_FORMAT, 1);
    c.set(qp::LOG_SQ_SIZE, u64::from(p.log_sq_size));
    c.set(qp::RQ_TYPE, u64::from(QPC_RQ_TYPE_ZERO_SIZE));
    c.set(qp::CQN_SND, u64::from(p.cqn));
    c.set(qp::CQN_RCV, u64::from(p.cqn));
    let dbr = [qp::DBR_UMEM_VALID, qp::DBR_UMEM_ID, qp::DBR_ADDR];
    set_umem(&mut c, dbr, p.dbr_umem_id, p.dbr_offset);
    let ring = [qp::WQ_UMEM_VALID, qp::WQ_UMEM_ID, qp::WQ_UMEM_OFFSET];
    set_umem(&mut c, ring, p.umem_id, p.umem_offset);
    c
}

/// How the peer is reached: by LID (InfiniBand) or by GID with the port's source GID index and
/// the next hop's MAC (RoCE; on a loopback the port's own MAC). `udp_sport` only for RoCE v2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Route {
    Lid {
        rlid: u16,
    },
    Gid {
        rgid: [u8; 16],
        sgid_index: u8,
        rmac: [u8; 6],
        hop_limit: u8,
        udp_sport: Option<u16>,
    },
}

/// The connection: port, path MTU (the IB enum: 1 = 256 B .. 5 = 4096 B), the peer QP and
/// PSNs, timeouts and retries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Connect {
    pub qpn: u32,
    pub port: u8,
    pub mtu: u32,
    pub remote_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub route: Route,
    pub min_rnr_nak: u32,
    pub ack_timeout: u32,
    pub retry_count: u32,
    pub rnr_retry: u32,
    pub log_msg_max: u32,
}

fn modify(op: u16, qpn: u32) -> Cmd {
    let mut c = Cmd::with_opcode(op);
    c.set(MODIFY_QPN, u64::from(qpn));
    c
}

/// RESET to INIT: the port, P_Key index 0, remote write allowed (the QP only sends; the
/// setting is libibverbs' usual one).
pub fn rst2init_in(k: &Connect) -> Cmd {
    let mut c = modify(RST2INIT_QP, k.qpn);
    c.set(qp::RRE, 1);
    c.set(qp::RWE, 1);
    c.set(qp::VHCA_PORT_NUM, u64::from(k.port));
    c
}

/// INIT to RTR: the peer's QP number and start PSN, path MTU, and the route to it.
pub fn init2rtr_in(k: &Connect) -> Cmd {
    let mut c = modify(INIT2RTR_QP, k.qpn);
    c.set(qp::MTU, u64::from(k.mtu));
    c.set(qp::LOG_MSG_MAX, u64::from(k.log_msg_max));
    c.set(qp::REMOTE_QPN, u64::from(k.remote_qpn));
    c.set(qp::MIN_RNR_NAK, u64::from(k.min_rnr_nak));
    c.set(qp::NEXT_RCV_PSN, u64::from(k.rq_psn));
    c.set(qp::VHCA_PORT_NUM, u64::from(k.port));
    match k.route {
        Route::Lid { rlid } => c.set(qp::RLID, u64::from(rlid)),
        Route::Gid {
            rgid,
            sgid_index,
            rmac,
            hop_limit,
            udp_sport,
        } => {
            c.set_bytes(qp::RGID_RIP, &rgid);
            let mac = rmac.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
            c.set(qp::RMAC_47_32, mac >> 32);
            c.set(qp::RMAC_31_0, mac & 0xffff_ffff);
            c.set(qp::SRC_ADDR_INDEX, u64::from(sgid_index));
            c.set(qp::HOP_LIMIT, u64::from(hop_limit));
            if let Some(s) = udp_sport {
                c.set(qp::UDP_SPORT, u64::from(s));
            }
        }
    }
    c
}

/// RTR to RTS: this side's start PSN, the ACK timeout and retry counts.
pub fn rtr2rts_in(k: &Connect) -> Cmd {
    let mut c = modify(RTR2RTS_QP, k.qpn);
    c.set(qp::RETRY_COUNT, u64::from(k.retry_count));
    c.set(qp::RNR_RETRY, u64::from(k.rnr_retry));
    c.set(qp::NEXT_SEND_PSN, u64::from(k.sq_psn));
    c.set(qp::VHCA_PORT_NUM, u64::from(k.port));
    c.set(qp::ACK_TIMEOUT, u64::from(k.ack_timeout));
    c
}

/// A command's outcome as the firmware wrote it in the output: the object number of a create
/// (cqn or qpn), or the status with its syndrome.
pub fn outcome(out: &[u8]) -> Result<u32, CmdFailed> {
    let o = Cmd(out.to_vec());
    let (Some(status), Some(syndrome)) = (o.get(OUT_STATUS), o.get(OUT_SYNDROME)) else {
        return Err(CmdFailed {
            status: 0xff,
            syndrome: 0,
        });
    };
    if status != 0 {
        return Err(CmdFailed {
            status: status as u8,
            syndrome: syndrome as u32,
        });
    }
    Ok(o.get(OUT_ID).unwrap_or(0) as u32)
}

/// A failed command: PRM status and the firmware's syndrome (which NVIDIA support decodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdFailed {
    pub status: u8,
    pub syndrome: u32,
}

impl std::fmt::Display for CmdFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (status 0x{:02x}, syndrome 0x{:08x})",
            status_name(self.status),
            self.status,
            self.syndrome
        )
    }
}

/// The PRM command status values (the kernel's cmd_status_str).
pub fn status_name(s: u8) -> &'static str {
    match s {
        0x00 => "OK",
        0x01 => "internal error",
        0x02 => "bad operation",
        0x03 => "bad parameter",
        0x04 => "bad system state",
        0x05 => "bad resource",
        0x06 => "resource busy",
        0x08 => "limits exceeded",
        0x09 => "bad resource state",
        0x0a => "bad index",
        0x0f => "no resources",
        0x50 => "bad input length",
        0x51 => "bad output length",
        0x10 => "bad QP state",
        0x30 => "bad packet (discarded)",
        0x40 => "bad size (too many outstanding CQEs)",
        0xff => "output too short to hold a status",
        _ => "unknown status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_get_follow_mlx5_set() {
        let mut c = Cmd::new(16);
        // opcode: the first 16 bits, big-endian.
        c.set(OPCODE, 0x0500);
        assert_eq!(&c.0[..4], &[0x05, 0x00, 0, 0]);
        // A 24-bit field at bit 0x48: the low three bytes of word 2.
        c.set(MODIFY_QPN, 0x123456);
        assert_eq!(&c.0[8..12], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(c.get(MODIFY_QPN), Some(0x123456));
        // Masked to the width, neighbours untouched.
        c.set(f("x", 0x40, 8), 0x1ff);
        assert_eq!(&c.0[8..12], &[0xff, 0x12, 0x34, 0x56]);
        c.set(f("y", 0x61, 3), 0b101);
        assert_eq!(c.0[12], 0b0101_0000);
        assert_eq!(c.get(f("y", 0x61, 3)), Some(0b101));
        // 64-bit fields span two words.
        let mut d = Cmd::new(16);
        d.set(f("z", 0x40, 64), 0x0102_0304_0506_0708);
        assert_eq!(&d.0[8..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(d.get(f("z", 0x40, 64)), Some(0x0102_0304_0506_0708));
        assert_eq!(d.get(f("far", 0x400, 8)), None);
    }

    #[test]
    fn fields_fit_their_commands_and_do_not_overlap() {
        let cq_fields = [
            cq::DBR_UMEM_VALID,
            cq::CQE_SZ,
            cq::DBR_UMEM_ID,
            cq::LOG_CQ_SIZE,
            cq::UAR_PAGE,
            cq::C_EQN,
            cq::DBR_ADDR,
            cq::UMEM_OFFSET,
            cq::UMEM_ID,
            cq::UMEM_VALID,
            OPCODE,
        ];
        let qp_fields = [
            qp::ST,
            qp::PM_STATE,
            qp::PD,
            qp::MTU,
            qp::LOG_MSG_MAX,
            qp::LOG_RQ_SIZE,
            qp::LOG_RQ_STRIDE,
            qp::NO_SQ,
            qp::LOG_SQ_SIZE,
            qp::TS_FORMAT,
            qp::UAR_PAGE,
            qp::REMOTE_QPN,
            qp::PKEY_INDEX,
            qp::GRH,
            qp::RLID,
            qp::ACK_TIMEOUT,
            qp::SRC_ADDR_INDEX,
            qp::HOP_LIMIT,
            qp::RGID_RIP,
            qp::UDP_SPORT,
            qp::VHCA_PORT_NUM,
            qp::RMAC_47_32,
            qp::RMAC_31_0,
            qp::LOG_SRA_MAX,
            qp::RETRY_COUNT,
            qp::RNR_RETRY,
            qp::NEXT_SEND_PSN,
            qp::CQN_SND,
            qp::LOG_RRA_MAX,
            qp::RRE,
            qp::RWE,
            qp::MIN_RNR_NAK,
            qp::NEXT_RCV_PSN,
            qp::CQN_RCV,
            qp::DBR_ADDR,
            qp::RQ_TYPE,
            qp::DBR_UMEM_VALID,
            qp::DBR_UMEM_ID,
            qp::WQ_UMEM_OFFSET,
            qp::WQ_UMEM_ID,
            qp::WQ_UMEM_VALID,
            OPCODE,
            MODIFY_QPN,
        ];
        for set in [&cq_fields[..], &qp_fields[..]] {
            for (i, a) in set.iter().enumerate() {
                assert!(a.off + a.bits <= CMD_IN_BYTES * 8, "{a:?}");
                if a.bits <= 32 {
                    assert!(a.off % 32 + a.bits <= 32, "{a:?} crosses a word");
                } else {
                    assert!(a.off % 32 == 0 && a.bits % 32 == 0, "{a:?}");
                }
                for b in &set[i + 1..] {
                    let apart = a.off + a.bits <= b.off || b.off + b.bits <= a.off;
                    assert!(apart, "{a:?} overlaps {b:?}");
                }
            }
        }
    }

    #[test]
    fn outputs_are_read_and_failures_named() {
        let mut out = Cmd::new(CMD_OUT_BYTES);
        out.set(OUT_ID, 0xabcdef);
        assert_eq!(outcome(out.bytes()), Ok(0xabcdef));
        out.set(OUT_STATUS, 0x03);
        out.set(OUT_SYNDROME, 0x1234_5678);
        let e = outcome(out.bytes()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "bad parameter (status 0x03, syndrome 0x12345678)"
        );
        assert_eq!(outcome(&[0; 3]).unwrap_err().status, 0xff);
    }

    #[test]
    fn route_fields_land_in_the_address_path() {
        let k = Connect {
            qpn: 0x77,
            port: 1,
            mtu: 5,
            remote_qpn: 0x88,
            rq_psn: 0x1000,
            sq_psn: 0x1000,
            route: Route::Gid {
                rgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 2],
                sgid_index: 3,
                rmac: [0x02, 0x11, 0x22, 0x33, 0x44, 0x55],
                hop_limit: 64,
                udp_sport: Some(0xc000),
            },
            min_rnr_nak: 12,
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            log_msg_max: 30,
        };
        let c = init2rtr_in(&k);
        assert_eq!(c.get(OPCODE), Some(u64::from(INIT2RTR_QP)));
        assert_eq!(c.get(qp::RMAC_47_32), Some(0x0211));
        assert_eq!(c.get(qp::RMAC_31_0), Some(0x2233_4455));
        assert_eq!(
            &c.0[(PAP + 0x80) / 8 + 12..(PAP + 0x80) / 8 + 16],
            &[192, 168, 1, 2]
        );
        assert_eq!(c.get(qp::SRC_ADDR_INDEX), Some(3));
        assert_eq!(c.get(qp::RLID), Some(0));
        let lid = init2rtr_in(&Connect {
            route: Route::Lid { rlid: 0x1234 },
            ..k
        });
        assert_eq!(lid.get(qp::RLID), Some(0x1234));
        assert_eq!(lid.get(qp::RMAC_31_0), Some(0));
    }
}
