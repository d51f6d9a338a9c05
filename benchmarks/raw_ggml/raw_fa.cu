// Launches upstream's vector flash-attention kernel (f16 or bf16 K/V, one query, no softcap) and, when the
// KV range is split, its combine kernel, through ggml's own ggml_cuda_kernel_launch (PDL on sm_90, as
// llama.cpp launches them). This TU #includes the unmodified vendored fattn-vec.cuh. The host logic of
// launch_fattn that a direct launch needs (parallel_blocks, scratch buffers) is done by the caller:
// benchmarks/bench_fa.py picks parallel_blocks from raw_fa_occupancy() and allocates the scratch.
// The _ex entry points take the K/V type (0 f16, 1 bf16) and ncols2: with the GQA patch (GGML_VENDOR_FA_VEC_GQA)
// ncols2 > 1 runs the grouped kernel, one block per ncols2 Q heads of a K/V head.
#include "ggml-cuda/fattn-vec.cuh"

#include "raw_common.h"

template <int D, ggml_type T>
static fattn_kernel_t raw_fa_kernel(int ncols2) {
    switch (ncols2) {
        case 1: return flash_attn_ext_vec<D, 1, T, T, false>;
#ifdef GGML_VENDOR_FA_VEC_GQA
        case 4: return flash_attn_ext_vec<D, 4, T, T, false, 4>;  // both benchmark shapes have GQA ratio 4
#endif
        default: throw std::runtime_error("raw_fa: this tree has no grouped (ncols2 > 1) vec kernel for that group");
    }
}

template <ggml_type T>
static fattn_kernel_t raw_fa_kernel_typed(int D, int ncols2) {
    switch (D) {
        case 64:  return raw_fa_kernel<64, T>(ncols2);
        case 128: return raw_fa_kernel<128, T>(ncols2);
        case 256: return raw_fa_kernel<256, T>(ncols2);
        default:  throw std::runtime_error("raw_fa: head dim must be 64, 128 or 256");
    }
}

static fattn_kernel_t raw_fa_kernel_for(int D, int kv_type = 0, int ncols2 = 1) {
    switch (kv_type) {
        case 0:  return raw_fa_kernel_typed<GGML_TYPE_F16>(D, ncols2);
        case 1:  return raw_fa_kernel_typed<GGML_TYPE_BF16>(D, ncols2);
        default: throw std::runtime_error("raw_fa: kv_type must be 0 (f16) or 1 (bf16)");
    }
}

// 1 when the tree's vec kernel has the grouped (ncols2) form.
RAW_API int raw_fa_has_gqa(void) {
#ifdef GGML_VENDOR_FA_VEC_GQA
    return 1;
#else
    return 0;
#endif
}

// Blocks of the vec kernel resident per SM (launch_fattn's starting point for parallel_blocks).
RAW_API int raw_fa_occupancy_ex(int D, int kv_type, int ncols2, int * blocks_per_sm) {
    RAW_GUARD({
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, raw_fa_kernel_for(D, kv_type, ncols2),
                                                                 128, 0));
    })
}

RAW_API int raw_fa_occupancy(int D, int * blocks_per_sm) {
    return raw_fa_occupancy_ex(D, 0, 1, blocks_per_sm);
}

template <int D>
static void raw_fa_combine(const float * parts, const float2 * meta, float * dst, int n_q, int H, int B, int pb,
                           cudaStream_t stream) {
    const ggml_cuda_kernel_launch_params params(dim3(n_q, H, B), dim3(D, 1, 1), (size_t) pb * sizeof(float2), stream);
    ggml_cuda_kernel_launch(flash_attn_combine_results<D>, params, parts, meta, dst, pb);
}

// Byte strides, as ggml's nb[] (Q: query/head/seq; K, V: position/head/seq; mask: row/-/seq).
RAW_API int raw_fa_launch_ex(int kv_type, int ncols2, int D, const void * Q, const void * K, const void * V,
                             const void * mask, float * dst, float * dst_tmp, void * dst_meta, int pb, float scale,
                             int n_q, int H, int B, int nb01, int nb02, int nb03,
                             int n_kv, int H_kv, int nb11, int nb12, long long nb13,
                             int nb21, int nb22, long long nb23,
                             int ne31, int ne32, int ne33, int nb31, int nb32, long long nb33, void * stream_) {
    RAW_GUARD({
        cudaStream_t stream = (cudaStream_t) stream_;
        if (n_q != 1) {
            throw std::runtime_error("raw_fa: the harness instantiates one query per block only (n_q must be 1)");
        }
        if (ncols2 < 1 || H % ncols2 != 0 || (H / H_kv) % ncols2 != 0) {
            throw std::runtime_error("raw_fa: ncols2 must divide the GQA ratio");
        }
        const fattn_kernel_t kernel = raw_fa_kernel_for(D, kv_type, ncols2);
        // launch_fattn's scalar arguments with max_bias = 0 and no softcap: m0 = m1 = 1.
        const uint32_t n_head_log2 = 1u << uint32_t(floorf(log2f(float(H))));
        const uint3    ne01        = init_fastdiv_values(n_q);
        const dim3     grid(n_q, pb, H / ncols2 * B);
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

RAW_API int raw_fa_launch(int D, const void * Q, const void * K, const void * V, const void * mask,
                          float * dst, float * dst_tmp, void * dst_meta, int pb, float scale,
                          int n_q, int H, int B, int nb01, int nb02, int nb03,
                          int n_kv, int H_kv, int nb11, int nb12, long long nb13,
                          int nb21, int nb22, long long nb23,
                          int ne31, int ne32, int ne33, int nb31, int nb32, long long nb33, void * stream_) {
    return raw_fa_launch_ex(0, 1, D, Q, K, V, mask, dst, dst_tmp, dst_meta, pb, scale, n_q, H, B, nb01, nb02, nb03,
                            n_kv, H_kv, nb11, nb12, nb13, nb21, nb22, nb23, ne31, ne32, ne33, nb31, nb32, nb33,
                            stream_);
}
