//! The mlx5 (ConnectX) send-queue and completion-queue formats that a GPU kernel uses to post
//! RDMA writes itself (level 4): send WQEs for RDMA WRITE (and WRITE with
//! immediate), the send doorbell-record value, the 8-byte BlueFlame doorbell, and the 64-byte
//! CQE with its error syndromes.
//!
//! Layouts follow rdma-core's `infiniband/mlx5dv.h` (Debian 12, rdma-core 44): `struct
//! mlx5_wqe_ctrl_seg`, `mlx5_wqe_raddr_seg`, `mlx5_wqe_data_seg`, `mlx5_cqe64`,
//! `mlx5_err_cqe`, the `MLX5_OPCODE_*`, `MLX5_CQE_*` and `MLX5_CQE_SYNDROME_*` values. Every
//! multi-byte field is big-endian. `tests/it/mlx5.rs` compiles a C program against that
//! header and compares its bytes with this module's, so a layout slip here fails a test.
//!
//! Pure byte layout: nothing here touches device memory, rings a doorbell or waits
//! (`mlx5_emu` is the software stand-in for the NIC that consumes these bytes).

use std::fmt;

/// One send WQE basic block (`MLX5_SEND_WQE_BB`): the SQ is an array of these.
pub const WQEBB_BYTES: usize = 64;
/// One CQE (`struct mlx5_cqe64`).
pub const CQE_BYTES: usize = 64;
/// `MLX5_OPCODE_RDMA_WRITE`.
pub const OPCODE_RDMA_WRITE: u8 = 0x08;
/// `MLX5_OPCODE_RDMA_WRITE_IMM`.
pub const OPCODE_RDMA_WRITE_IMM: u8 = 0x09;
/// `MLX5_WQE_CTRL_CQ_UPDATE`: ask for a CQE when this WQE completes (fm_ce_se bits 2-3).
pub const CTRL_CQ_UPDATE: u8 = 2 << 2;
/// `MLX5_WQE_CTRL_SOLICITED`.
pub const CTRL_SOLICITED: u8 = 1 << 1;
/// `MLX5_WQE_CTRL_FENCE` (strong fence mode, fm bits 5-7).
pub const CTRL_FENCE: u8 = 4 << 5;
/// An RDMA write WQE is ctrl + raddr + one data segment: 3 units of 16 bytes (`ds`).
pub const WRITE_DS: u8 = 3;
/// The send doorbell record is `dbrec[MLX5_SND_DBR]`: the second big-endian 32-bit word.
pub const SND_DBR_OFFSET: usize = 4;
/// `MLX5_CQE_INVALID`: what a CQE slot holds before the device has written it.
pub const CQE_OPCODE_INVALID: u8 = 15;

/// An RDMA write to post: the local buffer (`lkey`, `laddr`) is written to the remote one
/// (`rkey`, `raddr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaWrite {
    /// The WQE counter: the SQ producer index (16 bits, wraps at 65536 independent of the
    /// ring size). The WQE goes into slot `index % sq_size`.
    pub index: u16,
    /// The QP number (24 bits).
    pub qpn: u32,
    pub laddr: u64,
    pub lkey: u32,
    pub length: u32,
    pub raddr: u64,
    pub rkey: u32,
    /// `fm_ce_se`: `CTRL_CQ_UPDATE` for a signaled write, plus fence/solicited bits.
    pub flags: u8,
    /// Immediate data: `Some` makes it RDMA WRITE with immediate (the value as the remote
    /// side's CQE reports it; stored big-endian).
    pub imm: Option<u32>,
    /// The WQE signature byte (0 unless the QP was created with WQE signatures).
    pub signature: u8,
}

impl RdmaWrite {
    pub fn opcode(&self) -> u8 {
        if self.imm.is_some() {
            OPCODE_RDMA_WRITE_IMM
        } else {
            OPCODE_RDMA_WRITE
        }
    }

    /// The control segment (16 bytes): opmod_idx_opcode, qpn_ds, signature,
    /// dci_stream_channel_id (0), fm_ce_se, imm.
    pub fn ctrl(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        let opmod_idx_opcode = (u32::from(self.index) << 8) | u32::from(self.opcode());
        b[0..4].copy_from_slice(&opmod_idx_opcode.to_be_bytes());
        b[4..8].copy_from_slice(
            &(((self.qpn & 0x00ff_ffff) << 8) | u32::from(WRITE_DS)).to_be_bytes(),
        );
        b[8] = self.signature;
        b[11] = self.flags;
        b[12..16].copy_from_slice(&self.imm.unwrap_or(0).to_be_bytes());
        b
    }

    /// The whole WQEBB: ctrl, raddr (raddr, rkey, reserved), data (byte_count, lkey, addr),
    /// then 16 bytes of zeros (the rest of the basic block; the device reads `ds` units only).
    pub fn wqe(&self) -> [u8; WQEBB_BYTES] {
        let mut b = [0u8; WQEBB_BYTES];
        b[0..16].copy_from_slice(&self.ctrl());
        b[16..24].copy_from_slice(&self.raddr.to_be_bytes());
        b[24..28].copy_from_slice(&self.rkey.to_be_bytes());
        b[32..36].copy_from_slice(&self.length.to_be_bytes());
        b[36..40].copy_from_slice(&self.lkey.to_be_bytes());
        b[40..48].copy_from_slice(&self.laddr.to_be_bytes());
        b
    }

    /// The 8-byte BlueFlame doorbell that announces this WQE (the last one posted): the first 8
    /// bytes of its control segment, as libmlx5 writes them to the UAR register (`mmio_write64_be`
    /// of `*(__be64 *)ctrl`). As a native u64 whose in-memory bytes are those 8 bytes.
    pub fn doorbell(&self) -> u64 {
        let c = self.ctrl();
        u64::from_ne_bytes(c[0..8].try_into().expect("8 bytes"))
    }
}

/// Byte offset of the WQE with producer index `index` in an SQ of `sq_size` WQEBBs (a power of
/// two): the ring wraps at its size while the 16-bit index keeps counting.
pub fn wqe_offset(index: u16, sq_size: u32) -> usize {
    debug_assert!(sq_size.is_power_of_two());
    ((u32::from(index) & (sq_size - 1)) as usize) * WQEBB_BYTES
}

/// The send doorbell record's bytes for producer index `pi`: big-endian, 16 bits significant
/// (libmlx5 writes `htobe32(cur_post & 0xffff)` to `dbrec[MLX5_SND_DBR]`).
pub fn sq_dbr(pi: u32) -> [u8; 4] {
    (pi & 0xffff).to_be_bytes()
}

/// The CQ doorbell record's bytes (`dbrec[0]`) after consuming up to consumer index `ci`:
/// big-endian, 24 bits significant.
pub fn cq_dbr(ci: u32) -> [u8; 4] {
    (ci & 0x00ff_ffff).to_be_bytes()
}

/// Why bytes are not an RDMA write WQE this module can read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    #[error("opcode {0:#04x} is not RDMA WRITE (0x08) or RDMA WRITE with immediate (0x09)")]
    Opcode(u8),
    #[error("opmod {0:#04x} is not 0")]
    Opmod(u8),
    #[error("ds {0} is not 3 (ctrl + raddr + one data segment)")]
    Ds(u8),
    #[error("data segment byte_count {0:#x} has the inline bit set")]
    Inline(u32),
}

/// Read an RDMA write WQE back from its bytes (what the device side does).
pub fn parse_write_wqe(b: &[u8; WQEBB_BYTES]) -> Result<RdmaWrite, WqeError> {
    let be32 = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let be64 = |o: usize| u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"));
    let w0 = be32(0);
    let opcode = (w0 & 0xff) as u8;
    let opmod = (w0 >> 24) as u8;
    if opcode != OPCODE_RDMA_WRITE && opcode != OPCODE_RDMA_WRITE_IMM {
        return Err(WqeError::Opcode(opcode));
    }
    if opmod != 0 {
        return Err(WqeError::Opmod(opmod));
    }
    let w1 = be32(4);
    let ds = (w1 & 0xff) as u8;
    if ds != WRITE_DS {
        return Err(WqeError::Ds(ds));
    }
    let byte_count = be32(32);
    if byte_count & 0x8000_0000 != 0 {
        return Err(WqeError::Inline(byte_count));
    }
    Ok(RdmaWrite {
        index: (w0 >> 8) as u16,
        qpn: w1 >> 8,
        signature: b[8],
        flags: b[11],
        imm: (opcode == OPCODE_RDMA_WRITE_IMM).then(|| be32(12)),
        raddr: be64(16),
        rkey: be32(24),
        length: byte_count,
        lkey: be32(36),
        laddr: be64(40),
    })
}

/// `MLX5_CQE_SYNDROME_*`: why a work request completed in error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    LocalLength,
    LocalQpOperation,
    LocalProtection,
    WrFlush,
    MemoryWindowBind,
    BadResponse,
    LocalAccess,
    RemoteInvalidRequest,
    RemoteAccess,
    RemoteOperation,
    TransportRetryExceeded,
    RnrRetryExceeded,
    RemoteAborted,
    Other(u8),
}

impl Syndrome {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0x01 => Syndrome::LocalLength,
            0x02 => Syndrome::LocalQpOperation,
            0x04 => Syndrome::LocalProtection,
            0x05 => Syndrome::WrFlush,
            0x06 => Syndrome::MemoryWindowBind,
            0x10 => Syndrome::BadResponse,
            0x11 => Syndrome::LocalAccess,
            0x12 => Syndrome::RemoteInvalidRequest,
            0x13 => Syndrome::RemoteAccess,
            0x14 => Syndrome::RemoteOperation,
            0x15 => Syndrome::TransportRetryExceeded,
            0x16 => Syndrome::RnrRetryExceeded,
            0x22 => Syndrome::RemoteAborted,
            o => Syndrome::Other(o),
        }
    }

    pub fn as_u8(self) -> u8 {
        match self {
            Syndrome::LocalLength => 0x01,
            Syndrome::LocalQpOperation => 0x02,
            Syndrome::LocalProtection => 0x04,
            Syndrome::WrFlush => 0x05,
            Syndrome::MemoryWindowBind => 0x06,
            Syndrome::BadResponse => 0x10,
            Syndrome::LocalAccess => 0x11,
            Syndrome::RemoteInvalidRequest => 0x12,
            Syndrome::RemoteAccess => 0x13,
            Syndrome::RemoteOperation => 0x14,
            Syndrome::TransportRetryExceeded => 0x15,
            Syndrome::RnrRetryExceeded => 0x16,
            Syndrome::RemoteAborted => 0x22,
            Syndrome::Other(o) => o,
        }
    }

    /// The name as in mlx5dv.h, without its prefix.
    pub fn name(self) -> &'static str {
        match self {
            Syndrome::LocalLength => "local length error",
            Syndrome::LocalQpOperation => "local QP operation error",
            Syndrome::LocalProtection => "local protection error",
            Syndrome::WrFlush => "work request flushed",
            Syndrome::MemoryWindowBind => "memory window bind error",
            Syndrome::BadResponse => "bad response",
            Syndrome::LocalAccess => "local access error",
            Syndrome::RemoteInvalidRequest => "remote invalid request",
            Syndrome::RemoteAccess => "remote access error",
            Syndrome::RemoteOperation => "remote operation error",
            Syndrome::TransportRetryExceeded => "transport retry counter exceeded",
            Syndrome::RnrRetryExceeded => "RNR retry counter exceeded",
            Syndrome::RemoteAborted => "remote aborted",
            Syndrome::Other(_) => "unknown syndrome",
        }
    }

    /// What a person can do about it.
    pub fn advice(self) -> &'static str {
        match self {
            Syndrome::LocalLength => {
                "the write is longer than the local buffer or the port's limits allow; check the message size against the registered region"
            }
            Syndrome::LocalQpOperation => {
                "the WQE is malformed for this QP (opcode, ds count or QP number); compare the WQE bytes with the mlx5dv helpers"
            }
            Syndrome::LocalProtection => {
                "the lkey does not cover the local address range; register the source buffer (or fix the lkey/address in the WQE)"
            }
            Syndrome::WrFlush => {
                "the QP was already in the error state (an earlier work request failed); look at the first error completion"
            }
            Syndrome::MemoryWindowBind => {
                "a memory window bind failed; check the MR's access flags"
            }
            Syndrome::BadResponse => {
                "the responder answered with an unexpected packet; check both ends run the same transport"
            }
            Syndrome::LocalAccess => {
                "the local buffer is not accessible (permissions or a dma-buf/peer-memory mapping that went away)"
            }
            Syndrome::RemoteInvalidRequest => {
                "the responder rejected the request (size above its max message size, or an opcode it does not accept)"
            }
            Syndrome::RemoteAccess => {
                "the remote key or address range was refused: the rkey is wrong, the range lies outside the remote region, or it was registered without remote write access"
            }
            Syndrome::RemoteOperation => {
                "the responder failed to carry out the operation; look at its error completions"
            }
            Syndrome::TransportRetryExceeded => {
                "no acknowledgement from the peer: check the link, the GID/route, and that the remote QP is in RTR/RTS"
            }
            Syndrome::RnrRetryExceeded => "the receiver had no receive posted (RNR) too many times",
            Syndrome::RemoteAborted => "the responder aborted the operation",
            Syndrome::Other(_) => "look the vendor syndrome up in the adapter's documentation",
        }
    }
}

impl fmt::Display for Syndrome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:#04x})", self.name(), self.as_u8())
    }
}

/// The CQE opcode (`op_own >> 4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeOpcode {
    /// `MLX5_CQE_REQ`: a send-side work request completed.
    Requester,
    /// `MLX5_CQE_RESP_WR_IMM`: an RDMA write with immediate arrived.
    ResponderWriteImm,
    /// `MLX5_CQE_RESP_SEND`, `_SEND_IMM`, `_SEND_INV`.
    ResponderSend,
    /// `MLX5_CQE_REQ_ERR`.
    RequesterError,
    /// `MLX5_CQE_RESP_ERR`.
    ResponderError,
    Other(u8),
}

impl CqeOpcode {
    pub fn from_u8(v: u8) -> Self {
        match v {
            0 => CqeOpcode::Requester,
            1 => CqeOpcode::ResponderWriteImm,
            2..=4 => CqeOpcode::ResponderSend,
            13 => CqeOpcode::RequesterError,
            14 => CqeOpcode::ResponderError,
            o => CqeOpcode::Other(o),
        }
    }
}

/// The error part of an error CQE (`struct mlx5_err_cqe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqeError {
    pub syndrome: Syndrome,
    pub vendor_syndrome: u8,
    /// The opcode of the WQE that failed (`s_wqe_opcode_qpn >> 24`).
    pub wqe_opcode: u8,
}

impl fmt::Display for CqeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (vendor syndrome {:#04x}): {}",
            self.syndrome,
            self.vendor_syndrome,
            self.syndrome.advice()
        )
    }
}

/// A CQE the device has handed to software.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cqe {
    pub opcode: CqeOpcode,
    /// The raw opcode nibble.
    pub raw_opcode: u8,
    pub owner: u8,
    /// The WQE counter (`index`) of the work request this CQE completes.
    pub wqe_counter: u16,
    pub qpn: u32,
    /// Bytes transferred (`byte_cnt`; meaningful on responder completions).
    pub byte_cnt: u32,
    pub error: Option<CqeError>,
}

/// What a CQ slot holds from the consumer's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqePoll {
    /// The device has not written this slot for the current pass (owner bit or invalid opcode).
    Empty,
    Ready(Cqe),
}

/// The owner bit the device writes on pass `index / cq_size` of a CQ of `cq_size` entries (a
/// power of two): it flips each time the ring wraps, so a stale CQE from the previous pass is
/// never mistaken for a new one.
pub fn owner_for(index: u32, cq_size: u32) -> u8 {
    debug_assert!(cq_size.is_power_of_two());
    u8::from(index & cq_size != 0)
}

/// Read the CQE slot for consumer index `ci` (slot `ci % cq_size`) as libmlx5's poll does: it
/// is ready when its opcode is not `MLX5_CQE_INVALID` and its owner bit matches the pass.
pub fn poll_cqe(b: &[u8; CQE_BYTES], ci: u32, cq_size: u32) -> CqePoll {
    let op_own = b[63];
    let raw_opcode = op_own >> 4;
    let owner = op_own & 1;
    if raw_opcode == CQE_OPCODE_INVALID || owner != owner_for(ci, cq_size) {
        return CqePoll::Empty;
    }
    CqePoll::Ready(parse_cqe(b))
}

/// Decode a CQE's fields regardless of ownership.
pub fn parse_cqe(b: &[u8; CQE_BYTES]) -> Cqe {
    let be32 = |o: usize| u32::from_be_bytes(b[o..o + 4].try_into().expect("4 bytes"));
    let op_own = b[63];
    let raw_opcode = op_own >> 4;
    let opcode = CqeOpcode::from_u8(raw_opcode);
    let w56 = be32(56);
    let error = matches!(
        opcode,
        CqeOpcode::RequesterError | CqeOpcode::ResponderError
    )
    .then(|| CqeError {
        syndrome: Syndrome::from_u8(b[55]),
        vendor_syndrome: b[54],
        wqe_opcode: (w56 >> 24) as u8,
    });
    Cqe {
        opcode,
        raw_opcode,
        owner: op_own & 1,
        wqe_counter: u16::from_be_bytes([b[60], b[61]]),
        qpn: w56 & 0x00ff_ffff,
        byte_cnt: be32(44),
        error,
    }
}

/// A CQE as the device writes it (used by the NIC stand-in, `mlx5_emu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CqeFields {
    pub raw_opcode: u8,
    pub owner: u8,
    pub wqe_counter: u16,
    pub qpn: u32,
    pub byte_cnt: u32,
    /// For an error CQE: syndrome, vendor syndrome, the failed WQE's opcode.
    pub error: Option<(u8, u8, u8)>,
}

impl CqeFields {
    pub fn bytes(&self) -> [u8; CQE_BYTES] {
        let mut b = [0u8; CQE_BYTES];
        match self.error {
            None => {
                b[44..48].copy_from_slice(&self.byte_cnt.to_be_bytes());
                b[56..60].copy_from_slice(&(self.qpn & 0x00ff_ffff).to_be_bytes());
            }
            Some((syndrome, vendor, wqe_opcode)) => {
                b[54] = vendor;
                b[55] = syndrome;
                let w = (u32::from(wqe_opcode) << 24) | (self.qpn & 0x00ff_ffff);
                b[56..60].copy_from_slice(&w.to_be_bytes());
            }
        }
        b[60..62].copy_from_slice(&self.wqe_counter.to_be_bytes());
        b[63] = (self.raw_opcode << 4) | (self.owner & 1);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> RdmaWrite {
        RdmaWrite {
            index: 0x1234,
            qpn: 0x00ab_cdef,
            laddr: 0x0102_0304_0506_0708,
            lkey: 0x1122_3344,
            length: 4096,
            raddr: 0x7f00_dead_beef_0000,
            rkey: 0xcafe_f00d,
            flags: CTRL_CQ_UPDATE,
            imm: None,
            signature: 0,
        }
    }

    #[test]
    fn write_wqe_bytes_by_hand() {
        // opmod 0 | idx 0x1234 | opcode 0x08; qpn 0xabcdef << 8 | ds 3; sig 0; dci 0 0;
        // fm_ce_se 0x08; imm 0.
        let want: [u8; 64] = [
            0x00, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03, 0x00, 0x00, 0x00, 0x08, 0, 0, 0, 0,
            // raddr, rkey, reserved
            0x7f, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x00, 0xca, 0xfe, 0xf0, 0x0d, 0, 0, 0, 0,
            // byte_count 4096, lkey, addr
            0x00, 0x00, 0x10, 0x00, 0x11, 0x22, 0x33, 0x44, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(sample().wqe(), want);
        assert_eq!(parse_write_wqe(&want), Ok(sample()));
    }

    #[test]
    fn write_with_immediate_and_flags() {
        let w = RdmaWrite {
            imm: Some(0xdead_beef),
            flags: CTRL_CQ_UPDATE | CTRL_SOLICITED | CTRL_FENCE,
            signature: 0x5a,
            ..sample()
        };
        let b = w.wqe();
        assert_eq!(&b[0..4], &[0x00, 0x12, 0x34, 0x09]);
        assert_eq!(b[8], 0x5a);
        assert_eq!(b[11], 0x80 | 0x08 | 0x02);
        assert_eq!(&b[12..16], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(parse_write_wqe(&b), Ok(w));
    }

    #[test]
    fn doorbell_is_the_first_eight_ctrl_bytes() {
        let w = sample();
        assert_eq!(
            w.doorbell().to_ne_bytes(),
            [0x00, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03]
        );
    }

    #[test]
    fn ring_wraps_but_index_keeps_counting() {
        assert_eq!(wqe_offset(0, 256), 0);
        assert_eq!(wqe_offset(255, 256), 255 * 64);
        assert_eq!(wqe_offset(256, 256), 0);
        assert_eq!(wqe_offset(0xffff, 1024), 1023 * 64);
        assert_eq!(sq_dbr(0x1_0005), [0, 0, 0, 5]);
        assert_eq!(sq_dbr(0x1234), [0, 0, 0x12, 0x34]);
        assert_eq!(cq_dbr(0x0123_4567), [0, 0x23, 0x45, 0x67]);
    }

    #[test]
    fn malformed_wqes_are_named() {
        let mut b = sample().wqe();
        b[3] = 0x0a;
        assert_eq!(parse_write_wqe(&b), Err(WqeError::Opcode(0x0a)));
        let mut b = sample().wqe();
        b[7] = 4;
        assert_eq!(parse_write_wqe(&b), Err(WqeError::Ds(4)));
        let mut b = sample().wqe();
        b[0] = 1;
        assert_eq!(parse_write_wqe(&b), Err(WqeError::Opmod(1)));
        let mut b = sample().wqe();
        b[32] = 0x80;
        assert!(matches!(parse_write_wqe(&b), Err(WqeError::Inline(_))));
    }

    #[test]
    fn cqe_owner_flips_each_pass() {
        let n = 8;
        let mut c = CqeFields {
            raw_opcode: 0,
            owner: 0,
            wqe_counter: 0x0102,
            qpn: 0x12,
            byte_cnt: 64,
            error: None,
        };
        // First pass: owner 0 is ready, owner 1 is last pass's leftover (or never written).
        assert!(matches!(poll_cqe(&c.bytes(), 3, n), CqePoll::Ready(_)));
        assert_eq!(poll_cqe(&c.bytes(), 11, n), CqePoll::Empty);
        c.owner = 1;
        assert_eq!(poll_cqe(&c.bytes(), 3, n), CqePoll::Empty);
        assert!(matches!(poll_cqe(&c.bytes(), 11, n), CqePoll::Ready(_)));
        // A slot the device never wrote (opcode INVALID) is empty on every pass.
        let mut b = [0u8; 64];
        b[63] = 0xf0;
        assert_eq!(poll_cqe(&b, 0, n), CqePoll::Empty);
        b[63] = 0xf1;
        assert_eq!(poll_cqe(&b, 8, n), CqePoll::Empty);
    }

    #[test]
    fn cqe_fields_by_hand() {
        let mut b = [0u8; 64];
        b[44..48].copy_from_slice(&[0, 0, 0x10, 0]);
        b[56..60].copy_from_slice(&[0, 0, 0x01, 0x2a]);
        b[60] = 0xbe;
        b[61] = 0xef;
        b[63] = 0x01;
        let CqePoll::Ready(c) = poll_cqe(&b, 16, 16) else {
            panic!("owner 1 on pass 1 is ready")
        };
        assert_eq!(c.opcode, CqeOpcode::Requester);
        assert_eq!(c.wqe_counter, 0xbeef);
        assert_eq!(c.byte_cnt, 4096);
        assert_eq!(c.qpn, 0x12a);
        assert_eq!(c.error, None);
    }

    #[test]
    fn error_cqe_syndrome_decoded() {
        let mut b = [0u8; 64];
        b[54] = 0x88;
        b[55] = 0x13;
        b[56..60].copy_from_slice(&[0x08, 0, 0x01, 0x2a]);
        b[60..62].copy_from_slice(&[0, 7]);
        b[63] = 0xd0;
        let c = parse_cqe(&b);
        assert_eq!(c.opcode, CqeOpcode::RequesterError);
        let e = c.error.expect("an error CQE");
        assert_eq!(e.syndrome, Syndrome::RemoteAccess);
        assert_eq!(e.vendor_syndrome, 0x88);
        assert_eq!(e.wqe_opcode, OPCODE_RDMA_WRITE);
        assert_eq!(c.qpn, 0x12a);
        assert_eq!(c.wqe_counter, 7);
        let text = e.to_string();
        assert!(text.starts_with("remote access error (0x13)"), "{text}");
        assert!(text.contains("rkey"), "{text}");
        // The builder writes what the parser reads.
        let f = CqeFields {
            raw_opcode: 13,
            owner: 0,
            wqe_counter: 7,
            qpn: 0x12a,
            byte_cnt: 0,
            error: Some((0x13, 0x88, OPCODE_RDMA_WRITE)),
        };
        assert_eq!(f.bytes(), b);
    }

    proptest::proptest! {
        /// What the builder writes, the device-side parser reads back (the QP number is 24
        /// bits on the wire).
        #[test]
        fn wqe_round_trips(index: u16, qpn: u32, laddr: u64, lkey: u32, length in 0u32..0x8000_0000,
                           raddr: u64, rkey: u32, flags: u8, imm: Option<u32>, signature: u8) {
            let w = RdmaWrite { index, qpn: qpn & 0x00ff_ffff, laddr, lkey, length, raddr, rkey, flags, imm, signature };
            proptest::prop_assert_eq!(parse_write_wqe(&w.wqe()), Ok(w));
            proptest::prop_assert_eq!(&w.doorbell().to_ne_bytes()[..], &w.wqe()[0..8]);
        }

        /// Any slot bytes: polling and parsing never panic, and a CQE built from fields
        /// reads back as those fields.
        #[test]
        fn cqe_fields_round_trip(op in 0u8..15, owner in 0u8..2, wqe_counter: u16, qpn in 0u32..0x0100_0000,
                                 byte_cnt: u32, synd: u8, vendor: u8, wop: u8, ci: u32, shift in 0u32..24) {
            let err = op == 13 || op == 14;
            let f = CqeFields { raw_opcode: op, owner, wqe_counter, qpn, byte_cnt: if err { 0 } else { byte_cnt },
                                error: err.then_some((synd, vendor, wop)) };
            let n = 1u32 << shift;
            let c = parse_cqe(&f.bytes());
            proptest::prop_assert_eq!((c.raw_opcode, c.owner, c.wqe_counter, c.qpn), (op, owner, wqe_counter, qpn));
            proptest::prop_assert_eq!(c.error.map(|e| (e.syndrome.as_u8(), e.vendor_syndrome, e.wqe_opcode)), f.error);
            let ready = matches!(poll_cqe(&f.bytes(), ci, n), CqePoll::Ready(_));
            proptest::prop_assert_eq!(ready, owner == owner_for(ci, n));
        }
    }

    #[test]
    fn every_named_syndrome_round_trips() {
        for v in 0..=255u8 {
            let s = Syndrome::from_u8(v);
            assert_eq!(s.as_u8(), v);
            assert_eq!(
                matches!(s, Syndrome::Other(_)),
                s.name() == "unknown syndrome"
            );
        }
        // The values from mlx5dv.h's MLX5_CQE_SYNDROME_*.
        let named: Vec<u8> = (0..=255u8)
            .filter(|&v| !matches!(Syndrome::from_u8(v), Syndrome::Other(_)))
            .collect();
        assert_eq!(
            named,
            [
                0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22
            ]
        );
    }
}
