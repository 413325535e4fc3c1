//! Who posts the writes of one message size (`Poster`): the CPU (`CpuPoster`, levels 2 and 3)
//! or level 4's CUDA kernel (`mlx5::gpu_poster`). The seam of the one write-bw engine.

use super::error::ProbeError;
use super::side::{Endpoint, Side};
use crate::rdma::request::write_bw::WriteBwRequest;
use crate::report::rdma::write_bw::Repetition;

/// Who posts the writes of one message size on the loopback's source side: the CPU through
/// ibv_post_send (levels 2 and 3, `CpuPoster`) or a CUDA kernel on the QP's own mlx5 queues
/// (level 4, `gpu_poster::GpuPoster`). Everything else (devices, QPs, buffers and their
/// registration, the connection, validation, the report) is the one engine's.
pub trait Poster {
    /// Bytes each side's buffer needs for `size`-byte messages.
    fn buffer_len(&self, size: u64) -> u64 {
        size
    }
    /// libmlx5, when the source side's context must be opened for DevX (level 4's queues in
    /// GPU memory); None for an ordinary context.
    fn source_devx(&mut self) -> Option<&crate::verbs::mlx5dv_sys::Mlx5Dv> {
        None
    }
    /// The DevX open of the source side failed with `why` and it was opened plainly.
    fn devx_refused(&mut self, _why: String) {}
    /// Before the sides connect: a poster that posts on a QP of its own creates and connects
    /// it to `peer` here and returns the endpoint the peer must connect to; None: the
    /// source side's own QP is used (connected by the engine).
    fn own_source_qp(
        &mut self,
        _source: &Side,
        _peer: &Endpoint,
    ) -> Result<Option<Endpoint>, ProbeError> {
        Ok(None)
    }
    /// Once, after both sides are connected and before the first size.
    fn prepare(&mut self, _source: &Side) -> Result<(), ProbeError> {
        Ok(())
    }
    /// Once, after the last size or the error that stopped the run, while both sides (their
    /// QPs, CQ and buffers) are still alive: undo what `prepare` set up on them.
    fn finish(&mut self) {}
    /// Post and complete every write of one timed repetition of one size from `source` into
    /// `peer` (the engine repeats it `plan.repetitions` times).
    fn write_size(
        &mut self,
        source: &Side,
        peer: &Endpoint,
        req: &WriteBwRequest,
        size: u64,
    ) -> Result<Repetition, ProbeError>;
    /// Writes per repetition of `size`, as the report states them.
    fn iterations(&self, req: &WriteBwRequest) -> u64 {
        u64::from(req.plan.iterations / req.plan.qps * req.plan.qps)
    }
}

/// The CPU posts (ibv_post_send with the plan's TX depth, CQ moderation and post lists).
pub struct CpuPoster;

impl Poster for CpuPoster {
    fn write_size(
        &mut self,
        source: &Side,
        peer: &Endpoint,
        req: &WriteBwRequest,
        size: u64,
    ) -> Result<Repetition, ProbeError> {
        measure_one(source, peer, req, size)
    }
}

pub fn measure_one(
    side: &Side,
    peer: &Endpoint,
    req: &WriteBwRequest,
    size: u64,
) -> Result<Repetition, ProbeError> {
    let t = side.write_size(peer, &req.plan, size, req.timeout)?;
    let per_qp = u64::from(req.plan.iterations / req.plan.qps);
    Ok(crate::rdma::judge::write_bw::summarise(
        size,
        per_qp * u64::from(req.plan.qps),
        req.plan.cq_moderation,
        &t,
    ))
}
