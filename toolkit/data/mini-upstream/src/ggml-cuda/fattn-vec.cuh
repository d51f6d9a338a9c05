// Miniature fattn-vec.cuh (written by the ggml-vendor authors, not taken from ggml): a plain decode
// attention with ggml's kernel name, template parameters, fattn_kernel_t parameter list, launch geometry
// (blocks of 32 x 4 threads, ncols queries per block, gridDim.y parallel blocks over the KV positions) and
// output layout (dst [seq][query][head][D], or per-block partials + (max, sum) meta when gridDim.y > 1),
// so bindings written against ggml compile and run here. f16 and bf16 K/V.
#include "common.cuh"
#include "fattn-common.cuh"

static int ggml_cuda_fattn_vec_get_nthreads_host(const int cc) {
    return 128;
    (void) cc;
}

template <ggml_type type>
static __device__ __forceinline__ float ggml_vendor_mini_load(const char * row, int i) {
    if constexpr (type == GGML_TYPE_BF16) {
        return __bfloat162float(((const nv_bfloat16 *) row)[i]);
    } else {
        return __half2float(((const half *) row)[i]);
    }
}

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
    static_assert(type_K == type_V, "the miniature needs one K/V type");
    const int seq     = blockIdx.z / ne02;
    const int head    = blockIdx.z - seq*ne02;
    const int kv_head = head / (ne02 / ne12);  // grouped GQA, as ggml
    const int tid     = threadIdx.y*WARP_SIZE + threadIdx.x;
    const char * k = K + seq*nb13 + kv_head*nb12;
    const char * v = V + seq*nb23 + kv_head*nb22;

    for (int j = 0; j < ncols; ++j) {
        const int iq = blockIdx.x*ncols + j;
        if (iq >= (int) ne01.z) {
            break;
        }
        const float * q = (const float *) (Q + seq*nb03 + head*nb02 + iq*nb01);
        // Like ggml: the row of query ic0 is at nb31, the next query of the block at +ne11 elements.
        const half * m = mask ? (const half *) (mask + (seq % ne33)*nb33 + blockIdx.x*ncols*nb31) + j*ne11 : nullptr;
        for (int d = tid; d < D; d += blockDim.x*blockDim.y) {
            float kqmax = -INFINITY, kqsum = 0.0f, acc = 0.0f;
            for (int p = blockIdx.y; p < ne11; p += gridDim.y) {
                float s = 0.0f;
                for (int c = 0; c < D; ++c) {
                    s += q[c] * ggml_vendor_mini_load<type_K>(k + p*nb11, c);
                }
                s *= scale;
                if (use_logit_softcap) {
                    s = logit_softcap * tanhf(s);
                }
                if (m) {
                    s += __half2float(m[p]);
                }
                if (s == -INFINITY) {
                    continue;
                }
                const float new_max = fmaxf(kqmax, s);
                const float corr = expf(kqmax - new_max);
                const float w    = expf(s - new_max);
                acc   = acc*corr + w*ggml_vendor_mini_load<type_V>(v + p*nb21, d);
                kqsum = kqsum*corr + w;
                kqmax = new_max;
            }
            const int64_t row = ((int64_t) seq*ne01.z + iq)*ne02 + head;
            if (gridDim.y == 1) {
                dst[row*D + d] = acc / kqsum;
            } else {
                dst[(row*gridDim.y + blockIdx.y)*D + d] = acc;
                if (d == 0) {
                    dst_meta[row*gridDim.y + blockIdx.y] = make_float2(kqsum > 0.0f ? kqmax : -FLT_MAX/2.0f, kqsum);
                }
            }
        }
    }
    (void) sinks; (void) KV_max; (void) max_bias; (void) m0; (void) m1; (void) n_head_log2;
    (void) ne00; (void) ne03; (void) ne10; (void) ne13; (void) ne31; (void) ne32; (void) nb32;
}
