// Miniature fattn-vec.cuh (written by the ggml-vendor authors): a one-thread-per-channel decode attention
// with ggml's kernel name, template parameters and fattn_kernel_t parameter list (f16 K/V only).
#include "common.cuh"
#include "fattn-common.cuh"

template<int D, int ncols, ggml_type type_K, ggml_type type_V, bool use_logit_softcap> // D == head size
__launch_bounds__(128, 1)
static __global__ void flash_attn_ext_vec(
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
                            const int32_t nb31, const int32_t nb32, const int64_t nb33) {
    static_assert(type_K == GGML_TYPE_F16 && type_V == GGML_TYPE_F16, "the miniature supports f16 K/V only");
    const int ic   = blockIdx.x * ncols;
    const int head = blockIdx.z % ne02;
    const int seq  = blockIdx.z / ne02;
    const int kv_head = head / (ne02 / ne12);  // grouped GQA, as ggml
    const int tid  = threadIdx.x;
    if (ic >= (int) ne01.z || tid >= D) {
        return;
    }
    const float * q = (const float *) (Q + seq*nb03 + head*nb02 + ic*nb01);
    const char  * k = K + seq*nb13 + kv_head*nb12;
    const char  * v = V + seq*nb23 + kv_head*nb22;
    const half  * m = mask ? (const half *) (mask + (seq % ne33)*nb33 + ic*nb31) : nullptr;

    // The split over blockIdx.y (parallel blocks) walks a strided share of the KV positions.
    float kqmax = -INFINITY, kqsum = 0.0f, acc = 0.0f;
    for (int j = blockIdx.y; j < ne11; j += gridDim.y) {
        const half * kj = (const half *) (k + j*nb11);
        float s = 0.0f;
        for (int d = 0; d < D; ++d) {
            s += q[d] * __half2float(kj[d]);
        }
        s *= scale;
        if (use_logit_softcap) {
            s = logit_softcap * tanhf(s);
        }
        if (m) {
            s += __half2float(m[j]);
        }
        const float new_max = fmaxf(kqmax, s);
        const float corr = expf(kqmax - new_max);
        const float p    = expf(s - new_max);
        acc   = acc*corr + p*__half2float(((const half *) (v + j*nb21))[tid]);
        kqsum = kqsum*corr + p;
        kqmax = new_max;
    }
    const int64_t row = ((int64_t) seq*ne02 + head)*ne01.z + ic;
    if (gridDim.y == 1) {
        dst[row*D + tid] = acc / kqsum;
    } else {
        dst[(row*gridDim.y + blockIdx.y)*D + tid] = acc;
        if (tid == 0) {
            dst_meta[row*gridDim.y + blockIdx.y] = make_float2(kqmax, kqsum);
        }
    }
    (void) sinks; (void) KV_max; (void) max_bias; (void) m0; (void) m1; (void) n_head_log2;
    (void) ne00; (void) ne03; (void) ne10; (void) ne13; (void) ne31; (void) ne32; (void) nb32;
}
