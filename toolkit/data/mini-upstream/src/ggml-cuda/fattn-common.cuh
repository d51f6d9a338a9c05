// Miniature fattn-common.cuh (written by the ggml-vendor authors, not taken from ggml): fattn_kernel_t and the
// combine kernel with ggml's signatures and partials layout ([seq][query][head][parallel block][D]).
#pragma once

#include "common.cuh"
#include "convert.cuh"
#include "vecdotq.cuh"

#include <cfloat>
#include <cstdint>

#define FATTN_KQ_STRIDE       256

typedef void (* fattn_kernel_t)(
        const char * __restrict__ Q,
        const char * __restrict__ K,
        const char * __restrict__ V,
        const char * __restrict__ mask,
        const char * __restrict__ sinks,
        const int  * __restrict__ KV_max,
        float      * __restrict__ dst,
        float2     * __restrict__ dst_meta,
        const float scale,
        const float max_bias,
        const float m0,
        const float m1,
        const uint32_t n_head_log2,
        const float logit_softcap,
        const int32_t ne00, const uint3   ne01, const int32_t ne02, const int32_t ne03,
                            const int32_t nb01, const int32_t nb02, const int32_t nb03,
        const int32_t ne10, const int32_t ne11, const int32_t ne12, const int32_t ne13,
                            const int32_t nb11, const int32_t nb12, const int64_t nb13,
                            const int32_t nb21, const int32_t nb22, const int64_t nb23,
                            const int32_t ne31, const int32_t ne32, const int32_t ne33,
                            const int32_t nb31, const int32_t nb32, const int64_t nb33);

template<int D> // D == head size
__launch_bounds__(D, 1)
static __global__ void flash_attn_combine_results(
        const float  * VKQ_parts,
        const float2 * VKQ_meta,
        float * dst,
        const int parallel_blocks) {
    const int col = blockIdx.x, head = blockIdx.y, seq = blockIdx.z, tid = threadIdx.x;
    const int64_t row = ((int64_t) seq * gridDim.x + col) * gridDim.y + head;  // as ggml: ne01 = gridDim.x
    VKQ_parts += row * parallel_blocks * D;
    VKQ_meta  += row * parallel_blocks;

    float kqmax = VKQ_meta[0].x;
    for (int l = 1; l < parallel_blocks; ++l) {
        kqmax = fmaxf(kqmax, VKQ_meta[l].x);
    }
    float num = 0.0f, den = 0.0f;
    for (int l = 0; l < parallel_blocks; ++l) {
        const float scale = expf(VKQ_meta[l].x - kqmax);
        num += scale * VKQ_parts[l * D + tid];
        den += scale * VKQ_meta[l].y;
    }
    dst[row * D + tid] = num / den;
}
