//! The verbs side of write-bw: open a port, set up QPs and buffers, connect them, and run the
//! post/poll loop for one message size. It measures and reports facts; it must not judge them
//! (that is `crate::rdma::judge::write_bw::judge_run`, over `findings::judge`) nor print anything.

use super::error::ProbeError;
use super::memory::{Memory, Region};
use crate::inventory::{RdmaDevice, RdmaPort};
use crate::rdma::judge::path::{self, GidError};
use crate::rdma::request::write_bw::WriteBwRequest;
use crate::reading::Reading;
use crate::report::rdma::plan::Plan;
use crate::report::rdma::write_bw::{Addressing, PortFacts, Timeline};
use crate::verbs::{
    self, Context, Cq, LocalPath, Pd, PortAttr, Qp, RemoteQp, Verbs, VerbsError, sys,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One end: an open port with `qps` RC QPs, one CQ and one registered buffer.
pub struct Side {
    pub facts: PortFacts,
    lid: u16,
    gid: Option<[u8; 16]>,
    sgid_index: Option<u8>,
    mtu: u32,
    port: u8,
    // Field order is drop order: QPs before the region, CQ and PD they use (the region
    // deregisters before it frees its memory), the context last.
    qps: Vec<Qp>,
    region: Region,
    cq: Cq,
    /// The context was opened for DevX (mlx5dv_open_device).
    pub devx: bool,
    pd: Pd,
    ctx: Context,
}

/// What a poster that creates its own QP needs of a side's path (`Side::path`).
#[derive(Debug, Clone, Copy)]
pub struct PathFacts {
    pub port: u8,
    /// The IB MTU enum (1 = 256 B .. 5 = 4096 B).
    pub mtu: u32,
    pub lid: u16,
    pub gid: Option<[u8; 16]>,
    pub sgid_index: Option<u8>,
    pub psn: u32,
}

/// What the peer needs to write into a side.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Endpoint {
    pub qpns: Vec<u32>,
    pub psn: u32,
    pub lid: u16,
    /// sysfs notation; None for LID routing.
    pub gid: Option<String>,
    pub mtu: u32,
    pub addr: u64,
    pub rkey: u32,
    pub len: u64,
}

/// A fixed start PSN: both sides know it, and a stale packet of an earlier run on a recycled
/// QPN is as likely to hit it as any random one (perftest randomises; nothing here needs it).
const START_PSN: u32 = 0x1000;

fn verbs_err(device: &str) -> impl Fn(VerbsError) -> ProbeError + '_ {
    move |source| ProbeError::Verbs {
        device: device.to_string(),
        source,
    }
}

pub fn load() -> Result<Arc<Verbs>, ProbeError> {
    Verbs::load().map_err(ProbeError::Unavailable)
}

/// Open `device` (for DevX through libmlx5 when `devx` is given) and check that `port` is
/// one of its ports and active: the context and the port's attributes.
fn open_port(
    verbs: &Arc<Verbs>,
    device: &str,
    port: u8,
    devx: Option<&crate::verbs::mlx5dv_sys::Mlx5Dv>,
) -> Result<(Context, PortAttr), ProbeError> {
    let opened = match devx {
        None => verbs.open(device),
        Some(dv) => verbs.open_devx(device, dv),
    };
    let ctx = opened.map_err(|e| match e {
        VerbsError::NoDevice { .. } => ProbeError::BadDevice(e),
        other => verbs_err(device)(other),
    })?;
    let dattr = ctx.query_device().map_err(verbs_err(device))?;
    if port == 0 || port > dattr.phys_port_cnt {
        return Err(ProbeError::BadPort {
            device: device.into(),
            port,
            count: dattr.phys_port_cnt,
        });
    }
    let pattr = ctx.query_port(port).map_err(verbs_err(device))?;
    if !pattr.is_active() {
        return Err(ProbeError::PortDown {
            device: device.into(),
            port,
            state: pattr.state_name().into(),
        });
    }
    Ok((ctx, pattr))
}

/// The device and port as sysfs showed them (read by the caller before the probe started:
/// nothing here reads sysfs while probing).
fn sysfs_port<'a>(
    facts: &'a [RdmaDevice],
    device: &str,
    port: u8,
) -> Result<(&'a RdmaDevice, &'a RdmaPort), ProbeError> {
    let dev = facts
        .iter()
        .find(|d| d.name == device)
        .ok_or_else(|| ProbeError::NoSysfs {
            device: device.into(),
            port,
            reason: format!("/sys/class/infiniband/{device} does not exist"),
        })?;
    let no_sysfs = |reason: String| ProbeError::NoSysfs {
        device: device.into(),
        port,
        reason,
    };
    let sport = dev
        .port_list()
        .iter()
        .find(|p| p.port == u32::from(port))
        .ok_or_else(|| no_sysfs("port not listed".into()))?;
    Ok((dev, sport))
}

/// The GID and its index for an address vector where `addressing` routes by GID (none for
/// LID routing), once the kernel's GID at that index agrees with sysfs.
fn address_gid(
    ctx: &Context,
    device: &str,
    port: u8,
    addressing: &Addressing,
) -> Result<(Option<[u8; 16]>, Option<u8>), ProbeError> {
    match addressing {
        Addressing::Lid { .. } => Ok((None, None)),
        Addressing::Gid { index, gid, .. } => {
            let idx = u8::try_from(*index).map_err(|_| ProbeError::Gid {
                device: device.into(),
                source: GidError::BadIndex {
                    index: *index,
                    port: u32::from(port),
                    populated: "indices above 255 cannot be used in an address vector".into(),
                },
            })?;
            // The kernel's answer must agree with sysfs (a GID can vanish in between).
            let raw = ctx
                .query_gid(port, i32::from(idx))
                .map_err(verbs_err(device))?;
            if verbs::parse_gid(gid) != Some(raw) {
                return Err(ProbeError::Gid {
                    device: device.into(),
                    source: GidError::BadIndex {
                        index: *index,
                        port: u32::from(port),
                        populated: format!(
                            "sysfs says {gid}, ibv_query_gid says {}",
                            verbs::format_gid(&raw)
                        ),
                    },
                });
            }
            Ok((Some(raw), Some(idx)))
        }
    }
}

/// The port's facts for the report: state, link layer, MTU, addressing, whether it is a
/// software device, and its line rate (from verbs, agreed by sysfs `rate`) or why unknown.
fn port_facts(
    device: &str,
    port: u8,
    (dev, sport): (&RdmaDevice, &RdmaPort),
    pattr: &PortAttr,
    addressing: Addressing,
) -> PortFacts {
    // No PCI function behind it, positively read: rxe or siw on top of a netdev. A device
    // whose `device` link could not be read is not taken for one.
    let software_device = dev
        .software_parent()
        .map(|n| format!("no PCI function, on netdev {n}"));
    // The line rate from verbs (active_speed_ex for XDR), agreed by sysfs `rate`.
    let sysfs_rate = match &sport.rate {
        Reading::Value(t) => Ok(t.as_str()),
        Reading::Absent(why) | Reading::Unknown(why) => Err(why.as_str()),
    };
    let line_rate = path::port_line_rate(
        pattr.active_speed,
        pattr.active_speed_ex,
        pattr.active_width,
        sysfs_rate,
    );
    PortFacts {
        device: device.into(),
        port,
        state: pattr.state_name().into(),
        link_layer: if pattr.is_ethernet() {
            "Ethernet".into()
        } else {
            "InfiniBand".into()
        },
        mtu_bytes: pattr.active_mtu_bytes(),
        addressing,
        software_device,
        line_rate: line_rate.as_ref().ok().cloned(),
        line_rate_unknown: line_rate.err(),
    }
}

/// Open `device`/`port`, check the port, choose the addressing, and create `qps` QPs and a
/// buffer of `buf_len` bytes in `memory`; the context opened for DevX through libmlx5 when
/// `devx` is given (level 4's queues in GPU memory).
#[allow(clippy::too_many_arguments)]
pub fn open_side(
    verbs: &Arc<Verbs>,
    facts: &[RdmaDevice],
    device: &str,
    port: u8,
    gid_index: Option<u32>,
    plan: &Plan,
    buf_len: u64,
    memory: &Memory,
    devx: Option<&crate::verbs::mlx5dv_sys::Mlx5Dv>,
) -> Result<Side, ProbeError> {
    let (ctx, pattr) = open_port(verbs, device, port, devx)?;
    let (dev, sport) = sysfs_port(facts, device, port)?;
    let addressing = path::choose_addressing(sport, pattr.is_ethernet(), pattr.lid, gid_index)
        .map_err(|source| ProbeError::Gid {
            device: device.into(),
            source,
        })?;
    let (gid, sgid_index) = address_gid(&ctx, device, port, &addressing)?;
    let facts = port_facts(device, port, (dev, sport), &pattr, addressing);

    let pd = ctx.alloc_pd().map_err(verbs_err(device))?;
    let cqe = (plan.tx_depth * plan.qps + 1) as i32;
    let cq = ctx.create_cq(cqe).map_err(verbs_err(device))?;
    let mut qps = Vec::new();
    for _ in 0..plan.qps {
        qps.push(
            pd.create_rc_qp(&cq, plan.tx_depth)
                .map_err(verbs_err(device))?,
        );
    }
    let region = Region::new(&pd, memory, buf_len).map_err(|source| ProbeError::Memory {
        device: device.into(),
        source,
    })?;
    Ok(Side {
        facts,
        lid: pattr.lid,
        gid,
        sgid_index,
        mtu: pattr.active_mtu,
        port,
        qps,
        region,
        cq,
        devx: devx.is_some(),
        pd,
        ctx,
    })
}

impl Side {
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qpns: self.qps.iter().map(|q| q.qpn()).collect(),
            psn: START_PSN,
            lid: self.lid,
            gid: self.gid.as_ref().map(verbs::format_gid),
            mtu: self.mtu,
            addr: self.region.addr(),
            rkey: self.region.rkey(),
            len: self.region.len() as u64,
        }
    }

    /// Connect QP i to the peer's QP i, at the smaller of the two path MTUs.
    pub fn connect(&self, peer: &Endpoint) -> Result<(), ProbeError> {
        let device = self.facts.device.as_str();
        let bad = |reason: String| ProbeError::Peer {
            peer: "endpoint".into(),
            reason,
        };
        if peer.qpns.len() != self.qps.len() {
            return Err(bad(format!(
                "has {} QPs, this side {}",
                peer.qpns.len(),
                self.qps.len()
            )));
        }
        let gid = match (&peer.gid, self.gid) {
            (Some(g), Some(_)) => {
                Some(verbs::parse_gid(g).ok_or_else(|| bad(format!("malformed GID {g:?}")))?)
            }
            (None, None) => None,
            _ => {
                return Err(bad(
                    "one side routes by GID, the other by LID (different link layers?)".into(),
                ));
            }
        };
        let local = LocalPath {
            port: self.port,
            mtu: self.mtu.min(peer.mtu),
            sgid_index: self.sgid_index,
            psn: START_PSN,
        };
        for (qp, &qpn) in self.qps.iter().zip(&peer.qpns) {
            let remote = RemoteQp {
                qpn,
                psn: peer.psn,
                lid: peer.lid,
                gid,
            };
            qp.connect(&local, &remote).map_err(verbs_err(device))?;
        }
        Ok(())
    }

    /// This side's port, MTU and addressing, for a QP created outside the engine.
    pub fn path(&self) -> PathFacts {
        PathFacts {
            port: self.port,
            mtu: self.mtu,
            lid: self.lid,
            gid: self.gid,
            sgid_index: self.sgid_index,
            psn: START_PSN,
        }
    }

    /// The context and PD, for libmlx5's direct verbs (DevX objects of level 4).
    pub fn raw_ctx_pd(
        &self,
    ) -> (
        *mut crate::verbs::sys::ibv_context,
        *mut crate::verbs::sys::ibv_pd,
    ) {
        (self.ctx.as_raw(), self.pd.as_raw())
    }

    /// The first QP and the CQ, for libmlx5's `mlx5dv_init_obj` (level 4 posts on them itself).
    pub fn raw_qp_cq(
        &self,
    ) -> (
        *mut crate::verbs::sys::ibv_qp,
        *mut crate::verbs::sys::ibv_cq,
    ) {
        (self.qps[0].as_raw(), self.cq.as_raw())
    }

    /// The registered buffer: address and lkey.
    pub fn local_buffer(&self) -> (u64, u32) {
        (self.region.addr(), self.region.lkey())
    }

    /// What this side's buffer is (host or GPU memory, how registered).
    pub fn memory(&self) -> &crate::report::rdma::memory::MemoryFacts {
        self.region.facts()
    }

    fn cuda_err(&self) -> impl Fn(crate::cuda::CudaError) -> ProbeError + '_ {
        move |source| ProbeError::Cuda {
            device: self.facts.device.clone(),
            source,
        }
    }

    /// Write the validation pattern for `size` into this side's buffer.
    pub fn fill(&mut self, size: u64, seed: u64) -> Result<(), ProbeError> {
        let r = self.region.fill(size, seed);
        r.map_err(self.cuda_err())
    }

    /// Zero the first `n` bytes of this side's buffer (before the peer writes into it).
    pub fn zero(&mut self, n: u64) -> Result<(), ProbeError> {
        let r = self.region.zero(n);
        r.map_err(self.cuda_err())
    }

    /// First offset of the first `size` bytes that does not hold the pattern.
    pub fn check(&mut self, size: u64, seed: u64) -> Result<Option<u64>, ProbeError> {
        let r = self.region.check(size, seed);
        r.map_err(self.cuda_err())
    }

    /// Write `size` bytes from this side's buffer to the peer's, `plan.iterations` times spread
    /// over the QPs, keeping up to tx_depth writes in flight per QP, chaining up to post_list
    /// writes per post and signalling every cq_moderation-th (and each QP's last).
    /// `stall` bounds the wait for any completion.
    pub fn write_size(
        &self,
        peer: &Endpoint,
        plan: &Plan,
        size: u64,
        stall: Duration,
    ) -> Result<Timeline, ProbeError> {
        let device = self.facts.device.as_str();
        let n = self.qps.len();
        let per_qp = u64::from(plan.iterations / plan.qps);
        let iterations = per_qp * n as u64;
        let tx_depth = u64::from(plan.tx_depth);
        let cq_mod = u64::from(plan.cq_moderation);
        let post_list = plan.post_list_for(size) as usize;
        let fit = (self.region.len() as u64).min(peer.len);
        let len = u32::try_from(size).map_err(|_| ProbeError::TooLarge {
            bytes: size,
            len: fit,
        })?;
        if size > fit {
            return Err(ProbeError::TooLarge {
                bytes: size,
                len: fit,
            });
        }

        // SAFETY: plain data; every field used is set below.
        let mut wrs: Vec<Vec<sys::ibv_send_wr>> =
            vec![vec![unsafe { std::mem::zeroed() }; post_list]; n];
        let mut sges: Vec<Vec<sys::ibv_sge>> = vec![
            vec![
                sys::ibv_sge {
                    addr: self.region.addr(),
                    length: len,
                    lkey: self.region.lkey(),
                };
                post_list
            ];
            n
        ];
        let mut posted = vec![0u64; n];
        let mut done = vec![0u64; n];
        let mut total_done = 0u64;
        let mut wc = [verbs::empty_wc(); 16];
        let mut marks = Vec::with_capacity((iterations / cq_mod + n as u64 + 1) as usize);
        let start = Instant::now();
        let mut last_progress = start;
        let mut idle: u32 = 0;

        while total_done < iterations {
            // SIGINT/SIGTERM (the write-bw commands install the handler): leave between posts; the caller's drops
            // deregister the regions before their memory is freed. One atomic load per round.
            if crate::signals::interrupted() {
                return Err(ProbeError::Interrupted);
            }
            for q in 0..n {
                loop {
                    let room = tx_depth - (posted[q] - done[q]);
                    let left = per_qp - posted[q];
                    let k = room.min(left).min(post_list as u64) as usize;
                    if k == 0 {
                        break;
                    }
                    let chain = wrs[q].as_mut_ptr();
                    for j in 0..k {
                        let idx = posted[q] + j as u64 + 1;
                        let signalled = idx.is_multiple_of(cq_mod) || idx == per_qp;
                        // SAFETY: j < k <= post_list = wrs[q].len() = sges[q].len(); the
                        // vectors are not resized while the chain is in use.
                        unsafe {
                            let wr = &mut *chain.add(j);
                            wr.wr_id = q as u64;
                            wr.sg_list = sges[q].as_mut_ptr().add(j);
                            wr.num_sge = 1;
                            wr.opcode = sys::IBV_WR_RDMA_WRITE;
                            wr.send_flags = if signalled { sys::IBV_SEND_SIGNALED } else { 0 };
                            wr.wr.rdma.remote_addr = peer.addr;
                            wr.wr.rdma.rkey = peer.rkey;
                            wr.next = if j + 1 < k {
                                chain.add(j + 1)
                            } else {
                                std::ptr::null_mut()
                            };
                        }
                    }
                    // SAFETY: a null-terminated chain of k WRs whose SGEs point into self.region,
                    // which stays registered until this function returns (after all complete,
                    // or with an error after which the QP is in the error state).
                    unsafe { self.qps[q].post_send(chain) }.map_err(verbs_err(device))?;
                    posted[q] += k as u64;
                }
            }
            let got = self.cq.poll(&mut wc).map_err(verbs_err(device))?;
            if got == 0 {
                idle += 1;
                if idle >= 4096 {
                    idle = 0;
                    if last_progress.elapsed() > stall {
                        return Err(ProbeError::NoCompletion {
                            device: device.into(),
                            bytes: size,
                            completed: total_done,
                            iterations,
                            timeout: stall,
                        });
                    }
                }
                continue;
            }
            idle = 0;
            let now = Instant::now();
            for c in &wc[..got] {
                if c.status != sys::IBV_WC_SUCCESS {
                    return Err(ProbeError::Completion {
                        device: device.into(),
                        bytes: size,
                        source: self.cq.completion_error(c),
                    });
                }
                let q = c.wr_id as usize;
                if q >= n {
                    continue;
                }
                // Signals sit at multiples of cq_mod and at per_qp: this one completes every
                // write up to the next such point.
                let next = ((done[q] / cq_mod + 1) * cq_mod).min(per_qp);
                total_done += next - done[q];
                done[q] = next;
            }
            marks.push((now.duration_since(start).as_nanos() as u64, total_done));
            last_progress = now;
        }
        Ok(Timeline { marks })
    }
}

/// This request's side: its device, port and GID choice, a buffer of `len` bytes in `memory`
/// (the context opened for DevX when `devx` is given).
pub fn open_for(
    verbs: &std::sync::Arc<crate::verbs::Verbs>,
    facts: &[RdmaDevice],
    req: &WriteBwRequest,
    memory: &Memory,
    len: u64,
    devx: Option<&crate::verbs::mlx5dv_sys::Mlx5Dv>,
) -> Result<Side, ProbeError> {
    open_side(
        verbs,
        facts,
        &req.device,
        req.port,
        req.gid_index,
        &req.plan,
        len,
        memory,
        devx,
    )
}
