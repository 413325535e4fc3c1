//! The poster protocol (what the level-4 CUDA kernel runs) driven against the NIC stand-in
//! (`gpudoctor::rdma::mlx5::emu`, a software model of an mlx5 SQ/CQ, not an adapter): data
//! lands, CQEs carry the right owner bit over many ring wraps, both doorbell handlers work,
//! bad keys come back as decoded error CQEs, and a lost completion is a timeout, not a hang.

use gpudoctor::rdma::mlx5::emu::{Handler, Mr, Nic, PostError, Poster, WaitError, Write};
use gpudoctor::rdma::mlx5::proxy::Proxy;
use gpudoctor::rdma::mlx5::queues::QueueMemory;
use gpudoctor::rdma::mlx5::wqe::Syndrome;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const QPN: u32 = 0x1c3;
const SRC: u64 = 0x7f00_0000_0000;
const DST: u64 = 0x7f80_0000_0000;

/// A source region (lkey 0x100) and a remotely writable destination (rkey 0x2222).
fn regions(len: usize) -> (Mr, Mr) {
    let src = Mr::new(0x100, 0x1111, SRC, len, false);
    let dst = Mr::new(0x200, 0x2222, DST, len, true);
    (src, dst)
}

fn fill(mr: &Mr, seed: u64) {
    let data: Vec<u8> = (0..mr.mem.len() as u64)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) >> 3) as u8)
        .collect();
    mr.write(0, &data);
}

/// `n` writes of `size` bytes, each into its own slice of both regions.
fn batch(n: usize, size: u32) -> Vec<Write> {
    (0..n as u64)
        .map(|i| Write {
            laddr: SRC + i * u64::from(size),
            lkey: 0x100,
            raddr: DST + i * u64::from(size),
            rkey: 0x2222,
            length: size,
        })
        .collect()
}

#[test]
fn a_batch_lands_and_only_the_signaled_write_completes() {
    let mem = Arc::new(QueueMemory::new(16, 8));
    let (src, dst) = regions(4 * 64);
    fill(&src, 1);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src.clone(), dst.clone()]);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(4, 64), Handler::Direct).unwrap();
    assert_eq!(last, 3);
    assert_eq!(mem.sq_producer(), 4);
    assert_eq!(nic.poll_doorbell(), Some(4));
    assert_eq!(nic.poll_doorbell(), None, "one doorbell, consumed once");
    poster.wait(last, Duration::from_secs(5)).unwrap();
    assert_eq!(dst.read(), src.read());
    assert_eq!((nic.consumed, nic.cqes, nic.bytes), (4, 1, 256));
    assert!(nic.violations.is_empty(), "{:?}", nic.violations);
}

/// Many iterations over a small SQ and CQ on threads: the WQE ring wraps, the 16-bit WQE
/// counter wraps past 65535, the CQ wraps hundreds of times (owner bit flips), and each
/// iteration's data is checked.
fn run_many(handler: Handler) {
    let (iters, per_iter, size) = (1200usize, 60usize, 64u32);
    let mem = Arc::new(QueueMemory::new(64, 16));
    let (src, dst) = regions(per_iter * size as usize);
    let stop = Arc::new(AtomicBool::new(false));
    let nic = Nic::new(mem.clone(), QPN, vec![src.clone(), dst.clone()]).spawn(stop.clone());
    let mut poster = Poster::new(mem.clone(), QPN);
    let proxy = (handler == Handler::CpuProxy)
        .then(|| Proxy::spawn(mem.clone(), poster.producer(), stop.clone()));
    let writes = batch(per_iter, size);
    for it in 0..iters {
        fill(&src, it as u64);
        let last = poster.post(&writes, handler).unwrap();
        poster
            .wait(last, Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("iteration {it}: {e}"));
        assert_eq!(dst.read(), src.read(), "iteration {it}");
    }
    stop.store(true, Ordering::Release);
    let nic = nic.join().unwrap();
    let total = (iters * per_iter) as u64;
    assert!(total > 65536, "the WQE counter must wrap");
    assert_eq!(nic.consumed, total);
    assert_eq!(nic.cqes, iters as u64);
    assert!(nic.violations.is_empty(), "{:?}", nic.violations);
    if let Some(p) = proxy {
        assert_eq!(
            p.join().unwrap(),
            iters as u64,
            "the proxy rang once per iteration"
        );
    }
}

#[test]
fn direct_doorbell_over_many_ring_wraps() {
    run_many(Handler::Direct);
}

#[test]
fn cpu_proxy_rings_the_doorbell() {
    run_many(Handler::CpuProxy);
}

#[test]
fn bad_rkey_is_a_decoded_error_and_later_writes_flush() {
    let mem = Arc::new(QueueMemory::new(16, 16));
    let (src, dst) = regions(4 * 64);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst.clone()]);
    let mut poster = Poster::new(mem.clone(), QPN);
    let mut w = batch(4, 64);
    w[1].rkey = 0xbad;
    let last = poster.post(&w, Handler::Direct).unwrap();
    nic.poll_doorbell();
    let e = poster.wait(last, Duration::from_secs(5)).unwrap_err();
    let WaitError::Completion { index, error } = &e else {
        panic!("{e}")
    };
    assert_eq!((*index, error.syndrome), (1, Syndrome::RemoteAccess));
    let text = e.to_string();
    assert!(
        text.starts_with("RDMA write 1 completed in error: remote access error (0x13)"),
        "{text}"
    );
    assert!(text.contains("rkey is wrong"), "{text}");
    // Write 0 landed; 1 failed; 2 and 3 were flushed (each with its own error CQE).
    assert_eq!(
        &dst.read()[..64],
        &vec![0u8; 64][..],
        "zeros: src was never filled"
    );
    for want in [2u16, 3] {
        match poster.wait(last, Duration::from_secs(5)) {
            Err(WaitError::Completion { index, error }) => {
                assert_eq!((index, error.syndrome), (want, Syndrome::WrFlush))
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(nic.cqes, 3);
}

#[test]
fn local_bounds_and_injected_errors() {
    let mem = Arc::new(QueueMemory::new(16, 16));
    let (src, dst) = regions(64);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    let mut poster = Poster::new(mem.clone(), QPN);
    // One byte past the source region.
    let mut w = batch(1, 64);
    w[0].laddr += 1;
    let last = poster.post(&w, Handler::Direct).unwrap();
    nic.poll_doorbell();
    match poster.wait(last, Duration::from_secs(5)) {
        Err(WaitError::Completion { error, .. }) => {
            assert_eq!(error.syndrome, Syndrome::LocalProtection);
            assert!(error.to_string().contains("lkey"), "{error}");
        }
        other => panic!("{other:?}"),
    }

    let mem = Arc::new(QueueMemory::new(16, 16));
    let (src, dst) = regions(64 * 3);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    nic.inject_error(2, Syndrome::TransportRetryExceeded);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(3, 64), Handler::Direct).unwrap();
    nic.poll_doorbell();
    let e = poster.wait(last, Duration::from_secs(5)).unwrap_err();
    assert!(
        e.to_string()
            .contains("transport retry counter exceeded (0x15)"),
        "{e}"
    );
}

#[test]
fn a_lost_completion_is_a_timeout_not_a_hang() {
    let mem = Arc::new(QueueMemory::new(16, 16));
    let mut poster = Poster::new(mem.clone(), QPN);
    // No NIC consumes anything: the poster must give up by its deadline.
    let last = poster.post(&batch(2, 64), Handler::Direct).unwrap();
    let t = Instant::now();
    let e = poster.wait(last, Duration::from_millis(200)).unwrap_err();
    assert!(t.elapsed() < Duration::from_secs(10));
    assert!(
        matches!(
            e,
            WaitError::Timeout {
                index: 1,
                producer: 2,
                cq_ci: 0,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("doorbell was not rung"), "{e}");
    // With the proxy handler and no proxy running, the NIC never hears the doorbell either.
    let mem = Arc::new(QueueMemory::new(16, 16));
    let (src, dst) = regions(128);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(2, 64), Handler::CpuProxy).unwrap();
    assert_eq!(nic.poll_doorbell(), None);
    assert!(matches!(
        poster.wait(last, Duration::from_millis(50)),
        Err(WaitError::Timeout { .. })
    ));
}

#[test]
fn the_sq_cannot_be_overrun() {
    let mem = Arc::new(QueueMemory::new(8, 8));
    let mut poster = Poster::new(mem, QPN);
    assert_eq!(
        poster.post(&batch(9, 64), Handler::Direct),
        Err(PostError::SqFull {
            want: 9,
            free: 8,
            size: 8
        })
    );
    poster.post(&batch(5, 64), Handler::Direct).unwrap();
    // Nothing completed yet: only 3 slots are free.
    assert!(matches!(
        poster.post(&batch(4, 64), Handler::Direct),
        Err(PostError::SqFull { free: 3, .. })
    ));
}

#[test]
fn ordering_mistakes_are_caught() {
    // The doorbell rung before the doorbell record moved.
    let mem = Arc::new(QueueMemory::new(16, 16));
    let (src, dst) = regions(64);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    assert_eq!(nic.doorbell(0x0803_0000_0800_0000), 0);
    assert!(
        nic.violations[0].contains("before the doorbell"),
        "{:?}",
        nic.violations
    );

    // A slot whose WQE was not (re)written: after 16 WQEs into a ring of 16, a buggy poster
    // moves the record to 17 without writing WQE 16, so slot 0 still holds WQE 0.
    let mem = Arc::new(QueueMemory::new(16, 32));
    let (src, dst) = regions(16 * 64);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(16, 64), Handler::Direct).unwrap();
    nic.poll_doorbell();
    poster.wait(last, Duration::from_secs(5)).unwrap();
    mem.write_sq_dbr(17);
    let stale = u64::from_ne_bytes(mem.wqe_bytes(0)[0..8].try_into().unwrap());
    mem.ring(stale);
    assert_eq!(nic.poll_doorbell(), Some(1));
    assert!(
        nic.violations[0].contains("index 0, expected QP 0x1c3 index 16"),
        "{:?}",
        nic.violations
    );
    match poster.wait(16, Duration::from_secs(5)) {
        Err(WaitError::Completion { index: 16, error }) => {
            assert_eq!(error.syndrome, Syndrome::LocalQpOperation)
        }
        other => panic!("{other:?}"),
    }

    // A WQE for another QP.
    let mem = Arc::new(QueueMemory::new(16, 32));
    let (src, dst) = regions(2 * 64);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    let mut poster = Poster::new(mem.clone(), 0x1c4);
    let last = poster.post(&batch(2, 64), Handler::Direct).unwrap();
    nic.poll_doorbell();
    let e = poster.wait(last, Duration::from_secs(5)).unwrap_err();
    assert!(
        e.to_string().contains("local QP operation error (0x02)"),
        "{e}"
    );
    assert!(
        nic.violations[0].contains("QP 0x1c4"),
        "{:?}",
        nic.violations
    );
}

/// Queue memory the caller owns (what the GPU harness passes: pinned host memory) holds the
/// device layout at the offsets a kernel writes: WQEs in their slots, the send doorbell record
/// big-endian in the second word, CQEs with op_own in byte 63, the doorbell's 8 bytes.
#[test]
fn caller_owned_memory_has_the_device_layout() {
    use gpudoctor::rdma::mlx5::queues::RawQueues;
    use gpudoctor::rdma::mlx5::wqe::{self as mlx5, CqePoll};
    let mut sq = vec![0xa5a5_a5a5u32; 8 * 16];
    let mut cq = vec![0u32; 4 * 16];
    let mut dbrec = [7u32; 2];
    let mut cq_dbrec = [7u32; 1];
    let mut bf = [7u64; 1];
    let src = vec![0x5au8; 128];
    let mut dst = vec![0u8; 128];
    let mut srcbuf = src.clone();
    // SAFETY: every buffer outlives `mem` and the regions (dropped at the end of the test),
    // and is touched only through them until then.
    let (mem, mrs) = unsafe {
        let mem = Arc::new(QueueMemory::from_raw(RawQueues {
            sq: sq.as_mut_ptr() as *mut u8,
            sq_size: 8,
            dbrec: dbrec.as_mut_ptr(),
            cq: cq.as_mut_ptr() as *mut u8,
            cq_size: 4,
            cq_dbrec: cq_dbrec.as_mut_ptr(),
            bf: bf.as_mut_ptr(),
        }));
        let mrs = vec![
            Mr::from_raw(0x100, 0x1111, SRC, srcbuf.as_mut_ptr(), 128, false),
            Mr::from_raw(0x200, 0x2222, DST, dst.as_mut_ptr(), 128, true),
        ];
        (mem, mrs)
    };
    let mut nic = Nic::new(mem.clone(), QPN, mrs);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(2, 64), Handler::Direct).unwrap();
    assert_eq!(nic.poll_doorbell(), Some(2));
    poster.wait(last, Duration::from_secs(5)).unwrap();
    drop((nic, poster, mem));
    let bytes = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|x| x.to_ne_bytes()).collect() };
    let sq_bytes = bytes(&sq);
    let w1 = gpudoctor::rdma::mlx5::wqe::RdmaWrite {
        index: 1,
        qpn: QPN,
        laddr: SRC + 64,
        lkey: 0x100,
        length: 64,
        raddr: DST + 64,
        rkey: 0x2222,
        flags: mlx5::CTRL_CQ_UPDATE,
        imm: None,
        signature: 0,
    };
    assert_eq!(&sq_bytes[64..128], &w1.wqe());
    assert!(
        sq_bytes[128..].iter().all(|&b| b == 0),
        "reset zeroes the ring"
    );
    assert_eq!(bytes(&dbrec), [0, 0, 0, 0, 0, 0, 0, 2]);
    assert_eq!(bf[0].to_ne_bytes(), w1.wqe()[0..8]);
    let cq_bytes = bytes(&cq);
    let first: [u8; 64] = cq_bytes[0..64].try_into().unwrap();
    let CqePoll::Ready(c) = mlx5::poll_cqe(&first, 0, 4) else {
        panic!("CQE 0 written")
    };
    assert_eq!((c.wqe_counter, c.qpn), (1, QPN));
    assert_eq!(cq_bytes[64 + 63], 0xf0, "the next slot is still invalid");
    assert_eq!(bytes(&cq_dbrec), [0, 0, 0, 1]);
    assert_eq!(dst, src);
}

/// A destination registered without remote write is refused like a bad rkey; a doorbell whose
/// 8 bytes are not the last WQE's control segment is recorded (the WQEs still run: the adapter
/// goes by the doorbell record).
#[test]
fn remote_write_access_and_doorbell_value_are_checked() {
    let mem = Arc::new(QueueMemory::new(16, 16));
    let src = Mr::new(0x100, 0x1111, SRC, 64, false);
    let dst = Mr::new(0x200, 0x2222, DST, 64, false);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(1, 64), Handler::Direct).unwrap();
    nic.poll_doorbell();
    match poster.wait(last, Duration::from_secs(5)) {
        Err(WaitError::Completion { error, .. }) => {
            assert_eq!(error.syndrome, Syndrome::RemoteAccess)
        }
        other => panic!("{other:?}"),
    }

    let mem = Arc::new(QueueMemory::new(16, 16));
    let (src, dst) = regions(2 * 64);
    let mut nic = Nic::new(mem.clone(), QPN, vec![src, dst]);
    let mut poster = Poster::new(mem.clone(), QPN);
    let last = poster.post(&batch(2, 64), Handler::CpuProxy).unwrap();
    // The first WQE's control bytes instead of the last one's.
    mem.ring(u64::from_ne_bytes(
        mem.wqe_bytes(0)[0..8].try_into().unwrap(),
    ));
    assert_eq!(nic.poll_doorbell(), Some(2));
    poster.wait(last, Duration::from_secs(5)).unwrap();
    assert_eq!(nic.violations.len(), 1, "{:?}", nic.violations);
    assert!(
        nic.violations[0].contains("not the first 8 bytes of the last WQE's control segment"),
        "{:?}",
        nic.violations
    );
}
