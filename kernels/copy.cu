// SM copy kernel for the bandwidth probes (src/probes/live.rs), compiled at run time by NVRTC
// for the GPU's exact sm_XX. No headers: NVRTC knows uint4 without them.
//
// Each thread moves 16-byte words, UNROLL words in flight per loop turn, so that a read from
// host memory (over PCIe) or from a peer GPU (over NVLink) keeps enough requests outstanding
// to fill the link. The pointers are unified virtual addresses: a device allocation, a
// peer's allocation (peer access enabled), or pinned host memory mapped with
// CU_MEMHOSTALLOC_DEVICEMAP.

#define UNROLL 4

extern "C" __global__ void gpudoctor_copy_u4(const uint4* __restrict__ src,
                                             uint4* __restrict__ dst,
                                             unsigned long long words)
{
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;

    // Full turns: UNROLL independent loads before the stores.
    for (; i + (UNROLL - 1) * stride < words; i += UNROLL * stride) {
        uint4 v[UNROLL];
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            v[k] = src[i + k * stride];
        }
#pragma unroll
        for (int k = 0; k < UNROLL; ++k) {
            dst[i + k * stride] = v[k];
        }
    }
    // The tail.
    for (; i < words; i += stride) {
        dst[i] = src[i];
    }
}
