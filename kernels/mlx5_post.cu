// GPU-initiated RDMA writes on an mlx5 (ConnectX) send queue (level 4), compiled at
// run time by NVRTC for the GPU's exact sm_XX. No headers.
//
// The layout is src/rdma/mlx5.rs's (itself checked byte for byte against libmlx5's
// mlx5dv_set_ctrl_seg / mlx5dv_set_data_seg / struct mlx5_wqe_raddr_seg in CI): one 64-byte
// WQEBB per RDMA WRITE = control segment (opmod_idx_opcode, qpn_ds, signature, fm_ce_se, imm),
// remote-address segment (raddr, rkey), one data segment (byte_count, lkey, addr), 16 zero
// bytes; every field big-endian. The GPU is little-endian, so each 32-bit word is byte-swapped
// before it is stored.
//
// gpudoctor_mlx5_build: one thread per WQE, nothing else (the byte-comparison harness).
// gpudoctor_mlx5_post: the protocol, per iteration: every thread builds its WQE, fences
// (__threadfence_system: the stores are visible to the NIC, which reads host/peer memory
// over PCIe), the block synchronises, thread 0 writes the send doorbell record, fences again,
// and (gpu handler) writes the 8-byte doorbell to the BlueFlame/UAR register; then thread 0
// polls the CQ for the last (signaled) WQE's completion, with a bound on the wait.

#define MLX5_OPCODE_RDMA_WRITE 0x08u
#define MLX5_WQE_CTRL_CQ_UPDATE 0x08u
#define MLX5_WRITE_DS 3u
#define MLX5_CQE_INVALID 15u
#define MLX5_CQE_REQ_ERR 13u
#define MLX5_CQE_RESP_ERR 14u

// gpudoctor_mlx5_post's flags.
// FLAG_LEADER_FENCE: the WQE stores are ordered before the doorbell record by one system-scope
//   fence in thread 0 after the block barrier (bar.sync orders the other threads' stores before
//   thread 0's fence, which is cumulative), not by a fence in every thread (NVSHMEM's IBGDA
//   and DOCA GPUNetIO post this way: the threads write, the group synchronises, one thread
//   fences and rings).
// FLAG_POST_ONLY: no completion wait (the posting-cost microbenchmark: nothing consumes the
//   ring, which is simply overwritten; the CQ is never read).
// FLAG_GPU_SCOPE_FENCE: with FLAG_LEADER_FENCE, thread 0's two fences (WQEs before the record,
//   the record before the doorbell) are __threadfence() (GPU scope): enough where the SQ and
//   the doorbell record are in GPU memory, whose point of coherence (L2) is what the NIC
//   reads through the BAR (IBGDA's placement); never with either in host memory.
#define FLAG_LEADER_FENCE 1u
#define FLAG_POST_ONLY 2u
#define FLAG_GPU_SCOPE_FENCE 4u
// FLAG_RELEASE_FENCE: with FLAG_LEADER_FENCE, thread 0's fences are fence.acq_rel (release
//   ordering: every earlier store before every later one, which is all the doorbell protocol
//   needs) instead of __threadfence*()'s fence.sc (sequentially consistent).
#define FLAG_RELEASE_FENCE 8u

__device__ __forceinline__ void leader_fence(unsigned int flags)
{
    if (flags & FLAG_RELEASE_FENCE) {
        if (flags & FLAG_GPU_SCOPE_FENCE) {
            asm volatile("fence.acq_rel.gpu;" ::: "memory");
        } else {
            asm volatile("fence.acq_rel.sys;" ::: "memory");
        }
    } else if (flags & FLAG_GPU_SCOPE_FENCE) {
        __threadfence();
    } else {
        __threadfence_system();
    }
}

// Result codes in PostResult.status.
#define POST_OK 0u
#define POST_ERROR_CQE 1u
#define POST_TIMEOUT 2u

__device__ __forceinline__ unsigned int be32(unsigned int x)
{
    return __byte_perm(x, 0, 0x0123);
}

// Build WQE `index` (the 16-bit WQE counter) into its slot of the ring `sq` (sq_size WQEBBs, a
// power of two): three 16-byte stores, and a fourth of zeros when `pad` (the byte-comparison
// harness fills the whole WQEBB; the NIC reads only ds x 16 = 48 bytes, and libmlx5's own
// post_send does not write the rest either, so the posting kernel leaves it).
__device__ __forceinline__ void build_write(unsigned char* sq, unsigned int sq_size, unsigned int index,
                                            unsigned int qpn, unsigned int fm_ce_se,
                                            unsigned long long laddr, unsigned int lkey,
                                            unsigned long long raddr, unsigned int rkey,
                                            unsigned int length, bool pad)
{
    uint4* w = (uint4*)(sq + (size_t)(index & (sq_size - 1)) * 64);
    uint4 ctrl, rseg, dseg, zero;
    ctrl.x = be32(((index & 0xffffu) << 8) | MLX5_OPCODE_RDMA_WRITE);
    ctrl.y = be32(((qpn & 0xffffffu) << 8) | MLX5_WRITE_DS);
    ctrl.z = fm_ce_se << 24;  // bytes 8..11: signature 0, dci_stream_channel_id 0, fm_ce_se
    ctrl.w = 0;               // imm
    rseg.x = be32((unsigned int)(raddr >> 32));
    rseg.y = be32((unsigned int)raddr);
    rseg.z = be32(rkey);
    rseg.w = 0;
    dseg.x = be32(length);
    dseg.y = be32(lkey);
    dseg.z = be32((unsigned int)(laddr >> 32));
    dseg.w = be32((unsigned int)laddr);
    zero.x = zero.y = zero.z = zero.w = 0;
    w[0] = ctrl;
    w[1] = rseg;
    w[2] = dseg;
    if (pad) {
        w[3] = zero;
    }
}

// WQE i (0..n-1) is the write of `size` bytes from lbase + i*size to rbase + i*size, with WQE
// counter first + i; only the last one asks for a completion. The same cases as
// src/rdma/mlx5_kernel.rs's `expected_wqes`.
extern "C" __global__ void gpudoctor_mlx5_build(unsigned char* sq, unsigned int sq_size,
                                                unsigned int qpn, unsigned int first,
                                                unsigned int n, unsigned long long lbase,
                                                unsigned int lkey, unsigned long long rbase,
                                                unsigned int rkey, unsigned int size)
{
    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    build_write(sq, sq_size, first + i, qpn, i + 1 == n ? MLX5_WQE_CTRL_CQ_UPDATE : 0,
                lbase + (unsigned long long)i * size, lkey, rbase + (unsigned long long)i * size,
                rkey, size, true);
}

struct PostResult {
    unsigned int status;           // POST_OK, POST_ERROR_CQE, POST_TIMEOUT
    unsigned int iterations_done;
    unsigned int syndrome;         // error CQE: syndrome, vendor syndrome, its WQE counter
    unsigned int vendor_syndrome;
    unsigned int wqe_counter;
    unsigned int producer;         // the producer index reached
    unsigned int cq_consumer;      // the CQ consumer index reached
    unsigned int pad;
};

__device__ __forceinline__ unsigned long long globaltimer_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One block of n threads (n <= sq_size). Each iteration posts n writes (WQE counters
// pi .. pi+n-1, starting at pi0: a live QP's counter carries on from the previous launch, as
// does the CQ consumer index from ci0), rings, waits for the completion of the last (and, when
// done_ns is not null, records when it came, ns since the kernel started). `dbrec` is the QP's doorbell
// record (dbrec[1] the send one), `bf` the BlueFlame register (or nothing to ring: bf == 0,
// the cpu-proxy handler, where a CPU thread watching dbrec[1] rings it), `cq`/`cq_dbrec` the
// CQ ring (cq_size CQEs) and its record. post_ns[it] receives the time from the iteration's
// start to the doorbell (the posting cost, completion wait excluded) by %globaltimer, whose
// update granularity is the GPU's (possibly coarser than 1 ns), and post_cycles[it] the same
// span in SM clock cycles (clock64). A completion that does
// not arrive within timeout_ns stops the kernel with POST_TIMEOUT: never a hang.
extern "C" __global__ void gpudoctor_mlx5_post(unsigned char* sq, unsigned int sq_size,
                                               unsigned int qpn, unsigned int* dbrec,
                                               unsigned long long* bf, unsigned char* cq,
                                               unsigned int cq_size, unsigned int* cq_dbrec,
                                               unsigned long long lbase, unsigned int lkey,
                                               unsigned long long rbase, unsigned int rkey,
                                               unsigned int size, unsigned int iterations,
                                               unsigned long long timeout_ns,
                                               unsigned long long* post_ns,
                                               unsigned long long* post_cycles, PostResult* result,
                                               unsigned int flags, unsigned int pi0, unsigned int ci0,
                                               unsigned long long* done_ns)
{
    __shared__ unsigned int stop;
    __shared__ unsigned int pi_shared;
    const unsigned int n = blockDim.x;
    const unsigned int i = threadIdx.x;
    unsigned int ci = ci0;  // thread 0's CQ consumer index
    unsigned long long t_kernel = 0;
    if (i == 0) {
        stop = 0;
        pi_shared = pi0;
        result->status = POST_OK;
        t_kernel = globaltimer_ns();
    }
    __syncthreads();
    for (unsigned int it = 0; it < iterations; ++it) {
        const unsigned int pi = pi_shared;
        unsigned long long t0 = 0, c0 = 0;
        if (i == 0) {
            t0 = globaltimer_ns();
            c0 = clock64();
        }
        build_write(sq, sq_size, pi + i, qpn, i + 1 == n ? MLX5_WQE_CTRL_CQ_UPDATE : 0,
                    lbase + (unsigned long long)i * size, lkey, rbase + (unsigned long long)i * size,
                    rkey, size, false);
        // The WQE stores before the doorbell record, as seen from outside the GPU.
        if (!(flags & FLAG_LEADER_FENCE)) {
            __threadfence_system();
        }
        __syncthreads();
        if (i == 0) {
            if (flags & FLAG_LEADER_FENCE) {
                leader_fence(flags);
            }
            const unsigned int next = pi + n;
            *(volatile unsigned int*)&dbrec[1] = be32(next & 0xffffu);
            // The record before the doorbell.
            if (flags & FLAG_LEADER_FENCE) {
                leader_fence(flags);
            } else {
                __threadfence_system();
            }
            if (bf != 0) {
                // The doorbell: the first 8 bytes of the last WQE's control segment.
                const unsigned int last = pi + n - 1;
                const unsigned long long lo = be32(((last & 0xffffu) << 8) | MLX5_OPCODE_RDMA_WRITE);
                const unsigned long long hi = be32(((qpn & 0xffffffu) << 8) | MLX5_WRITE_DS);
                // The last store of the post: no fence after it (it would only make the kernel
                // wait for the write to leave the GPU; the next post reuses a slot only after
                // its completion was seen, which orders it after this doorbell).
                *(volatile unsigned long long*)bf = lo | (hi << 32);
            }
            post_cycles[it] = clock64() - c0;
            post_ns[it] = globaltimer_ns() - t0;
            // Completion of the last WQE of this iteration (earlier CQEs, if any, are consumed).
            const unsigned int want = (pi + n - 1) & 0xffffu;
            const unsigned long long deadline = globaltimer_ns() + timeout_ns;
            for (; !(flags & FLAG_POST_ONLY);) {
                volatile unsigned char* cqe = (volatile unsigned char*)(cq + (size_t)(ci & (cq_size - 1)) * 64);
                const unsigned int op_own = cqe[63];
                const unsigned int owner = (ci & cq_size) ? 1u : 0u;
                if ((op_own >> 4) != MLX5_CQE_INVALID && (op_own & 1u) == owner) {
                    __threadfence_system();
                    const unsigned int counter = ((unsigned int)cqe[60] << 8) | cqe[61];
                    ++ci;
                    *(volatile unsigned int*)cq_dbrec = be32(ci & 0xffffffu);
                    const unsigned int opcode = op_own >> 4;
                    if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
                        result->status = POST_ERROR_CQE;
                        result->syndrome = cqe[55];
                        result->vendor_syndrome = cqe[54];
                        result->wqe_counter = counter;
                        stop = 1;
                        break;
                    }
                    if (counter == want) {
                        if (done_ns != 0) {
                            done_ns[it] = globaltimer_ns() - t_kernel;
                        }
                        break;
                    }
                } else if (globaltimer_ns() > deadline) {
                    result->status = POST_TIMEOUT;
                    result->wqe_counter = want;
                    stop = 1;
                    break;
                }
            }
            pi_shared = pi + n;
            result->iterations_done = stop ? it : it + 1;
            result->producer = pi + n;
            result->cq_consumer = ci;
        }
        __syncthreads();
        if (stop) {
            break;
        }
    }
}
