// Launches upstream's vector flash-attention kernel (f16 K/V, one query column, no softcap) and, when the
// KV range is split, its combine kernel, through ggml's own ggml_cuda_kernel_launch (PDL on sm_90, as
// llama.cpp launches them). This TU #includes the unmodified vendored fattn-vec.cuh. The host logic of
// launch_fattn that a direct launch needs (parallel_blocks, scratch buffers) is done by the caller:
// benchmarks/bench_fa.py picks parallel_blocks from raw_fa_occupancy() and allocates the scratch.
#include "ggml-cuda/fattn-vec.cuh"

#include "raw_common.h"

template <int D>
static fattn_kernel_t raw_fa_kernel() {
    return flash_attn_ext_vec<D, 1, GGML_TYPE_F16, GGML_TYPE_F16, false>;
}

static fattn_kernel_t raw_fa_kernel_for(int D) {
    switch (D) {
        case 64:  return raw_fa_kernel<64>();
        case 128: return raw_fa_kernel<128>();
        case 256: return raw_fa_kernel<256>();
        default:  throw std::runtime_error("raw_fa: head dim must be 64, 128 or 256");
    }
}

// Blocks of the vec kernel resident per SM (launch_fattn's starting point for parallel_blocks).
RAW_API int raw_fa_occupancy(int D, int * blocks_per_sm) {
    RAW_GUARD({
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, raw_fa_kernel_for(D), 128, 0));
    })
}

template <int D>
static void raw_fa_combine(const float * parts, const float2 * meta, float * dst, int n_q, int H, int B, int pb,
                           cudaStream_t stream) {
    const ggml_cuda_kernel_launch_params params(dim3(n_q, H, B), dim3(D, 1, 1), (size_t) pb * sizeof(float2), stream);
    ggml_cuda_kernel_launch(flash_attn_combine_results<D>, params, parts, meta, dst, pb);
}

// Byte strides, as ggml's nb[] (Q: query/head/seq; K, V: position/head/seq; mask: row/-/seq).
RAW_API int raw_fa_launch(int D, const void * Q, const void * K, const void * V, const void * mask,
                          float * dst, float * dst_tmp, void * dst_meta, int pb, float scale,
                          int n_q, int H, int B, int nb01, int nb02, int nb03,
                          int n_kv, int H_kv, int nb11, int nb12, long long nb13,
                          int nb21, int nb22, long long nb23,
                          int ne31, int ne32, int ne33, int nb31, int nb32, long long nb33, void * stream_) {
    RAW_GUARD({
        cudaStream_t stream = (cudaStream_t) stream_;
        if (n_q != 1) {
            throw std::runtime_error("raw_fa: the harness instantiates ncols=1 only (n_q must be 1)");
        }
        const fattn_kernel_t kernel = raw_fa_kernel_for(D);
        // launch_fattn's scalar arguments with max_bias = 0 and no softcap: m0 = m1 = 1.
        const uint32_t n_head_log2 = 1u << uint32_t(floorf(log2f(float(H))));
        const uint3    ne01        = init_fastdiv_values(n_q);
        const dim3     grid(n_q, pb, H * B);
        const ggml_cuda_kernel_launch_params params(grid, dim3(WARP_SIZE, 4, 1), (size_t) 0, stream);
        ggml_cuda_kernel_launch(kernel, params, (const char *) Q, (const char *) K, (const char *) V,
                                (const char *) mask, (const char *) nullptr, (const int *) nullptr,
                                pb > 1 ? dst_tmp : dst, (float2 *) dst_meta, scale, 0.0f, 1.0f, 1.0f, n_head_log2,
                                0.0f, D, ne01, H, B, nb01, nb02, nb03, D, n_kv, H_kv, B, nb11, nb12, (int64_t) nb13,
                                nb21, nb22, (int64_t) nb23, ne31, ne32, ne33, nb31, nb32, (int64_t) nb33);
        CUDA_CHECK(cudaGetLastError());
        if (pb > 1) {
            switch (D) {
                case 64:  raw_fa_combine<64>(dst_tmp, (const float2 *) dst_meta, dst, n_q, H, B, pb, stream); break;
                case 128: raw_fa_combine<128>(dst_tmp, (const float2 *) dst_meta, dst, n_q, H, B, pb, stream); break;
                case 256: raw_fa_combine<256>(dst_tmp, (const float2 *) dst_meta, dst, n_q, H, B, pb, stream); break;
            }
            CUDA_CHECK(cudaGetLastError());
        }
    })
}
