// Launches upstream's gated_delta_net kernel exactly as ggml does: this TU #includes the unmodified
// vendored gated_delta_net.cu (so its static launch_gated_delta_net<KDA, keep_rs> is callable here) and
// hands it precomputed pointers and strides. No ggml_tensor, no allocation, no copy: the baseline the
// op's binding is measured against (benchmarks/bench_gdn.py).
#include "ggml-cuda/gated_delta_net.cu"

#include "raw_common.h"

// The chunked prefill path (vendor/patches/0003) needs a workspace that ggml's op takes from its pool: here one
// grow-only device buffer per process (a benchmark harness, never captured in a graph).
#ifdef GGML_CUDA_GDN_CHUNK_AVAILABLE
static float * raw_chunk_ws(int64_t floats) {
    static float * buf = nullptr;
    static int64_t cap = 0;
    if (floats > cap) {
        if (buf != nullptr) {
            CUDA_CHECK(cudaDeviceSynchronize());
            CUDA_CHECK(cudaFree(buf));
        }
        CUDA_CHECK(cudaMalloc(&buf, floats * sizeof(float)));
        cap = floats;
    }
    return buf;
}
#endif // GGML_CUDA_GDN_CHUNK_AVAILABLE

// Strides are in floats, as upstream's host wrapper computes them (nb / sizeof(float)).
// state_out may equal state_in (upstream supports in place for K == 1).
RAW_API int raw_gdn_launch(const float * q, const float * k, const float * v, const float * g, const float * beta,
                           const float * state_in, float * out, float * state_out,
                           int64_t S_v, int64_t H, int64_t n_tokens, int64_t n_seqs,
                           int64_t sq1, int64_t sq2, int64_t sq3,
                           int64_t sv1, int64_t sv2, int64_t sv3,
                           int64_t sb1, int64_t sb2, int64_t sb3,
                           int64_t neqk1, int64_t rq3, int kda, void * stream) {
    RAW_GUARD({
        const float   scale             = 1.0f / sqrtf((float) S_v);
        const int64_t state_slot_stride = S_v * S_v * H * n_seqs;
        if (kda) {
            launch_gated_delta_net<true, false>(q, k, v, g, beta, state_in, out, state_out, S_v, H, n_tokens, n_seqs,
                                                sq1, sq2, sq3, sv1, sv2, sv3, sb1, sb2, sb3, neqk1, rq3, scale,
                                                state_slot_stride, 1, (cudaStream_t) stream);
        } else {
            float * ws = nullptr;
#ifdef GGML_CUDA_GDN_CHUNK_AVAILABLE
            const int64_t n_ws = gated_delta_net_chunk_workspace(S_v, false, false, H, n_tokens, n_seqs, q, k, v,
                                                                 state_in, state_out, sq1, sq2, sq3, sv1, sv2, sv3);
            ws = n_ws > 0 ? raw_chunk_ws(n_ws) : nullptr;
#endif // GGML_CUDA_GDN_CHUNK_AVAILABLE
            launch_gated_delta_net<false, false>(q, k, v, g, beta, state_in, out, state_out, S_v, H, n_tokens, n_seqs,
                                                 sq1, sq2, sq3, sv1, sv2, sv3, sb1, sb2, sb3, neqk1, rq3, scale,
                                                 state_slot_stride, 1, (cudaStream_t) stream
#ifdef GGML_CUDA_GDN_CHUNK_AVAILABLE
                                                 , ws
#endif // GGML_CUDA_GDN_CHUNK_AVAILABLE
                                                 );
        }
        CUDA_CHECK(cudaGetLastError());
    })
}

// For benchmarks/patch_sweep.py: the patched vector path (vendor/patches) with a forced number of columns per
// warp, instead of the launcher's choice; cols = -1: the chunked prefill kernel (bench_gdn_prefill.py). Sources without that path (upstream's) report it unavailable.
#ifdef GGML_CUDA_GDN_VEC_AVAILABLE
template <int C>
static void raw_gdn_cols(const float * q, const float * k, const float * v, const float * g, const float * beta,
                         const float * state_in, float * out, float * state_out, int64_t S_v, int64_t H,
                         int64_t n_tokens, int64_t n_seqs, int64_t sq1, int64_t sq2, int64_t sq3, int64_t sv1,
                         int64_t sv2, int64_t sv3, int64_t sb1, int64_t sb2, int64_t sb3, int64_t neqk1, int64_t rq3,
                         cudaStream_t stream) {
    launch_gated_delta_net_vec<false, false, C>(q, k, v, g, beta, state_in, out, state_out, S_v, H, n_tokens, n_seqs,
                                                sq1, sq2, sq3, sv1, sv2, sv3, sb1, sb2, sb3,
                                                init_fastdiv_values(neqk1), init_fastdiv_values(rq3),
                                                1.0f / sqrtf((float) S_v), S_v * S_v * H * n_seqs, 1, stream);
}
#endif // GGML_CUDA_GDN_VEC_AVAILABLE

RAW_API int raw_gdn_launch_cols(const float * q, const float * k, const float * v, const float * g, const float * beta,
                                const float * state_in, float * out, float * state_out,
                                int64_t S_v, int64_t H, int64_t n_tokens, int64_t n_seqs,
                                int64_t sq1, int64_t sq2, int64_t sq3,
                                int64_t sv1, int64_t sv2, int64_t sv3,
                                int64_t sb1, int64_t sb2, int64_t sb3,
                                int64_t neqk1, int64_t rq3, int cols, void * stream) {
#ifdef GGML_CUDA_GDN_CHUNK_AVAILABLE
    if (cols == -1) {  // the chunked prefill kernel (vendor/patches/0003), whatever the launcher would choose
        RAW_GUARD({
            const int64_t n_chunks = (n_tokens + gdn_chunk::C - 1) / gdn_chunk::C;
#ifdef GGML_CUDA_GDN_CHUNK_WS_BY_FORM  // vendor/patches/0008: the launcher's default is the three-product form
            float * ws = raw_chunk_ws(n_seqs * H * n_chunks * gdn_chunk::WS_CHUNK<true>);
#else
            float * ws = raw_chunk_ws(n_seqs * H * n_chunks * gdn_chunk::WS_CHUNK);
#endif
            launch_gated_delta_net_chunk(q, k, v, g, beta, state_in, out, state_out, ws, H, n_tokens, n_seqs,
                                         sq1, sq2, sq3, sv1, sv2, sv3, sb1, sb2, sb3, init_fastdiv_values(neqk1),
                                         init_fastdiv_values(rq3), 1.0f / sqrtf((float) S_v), (cudaStream_t) stream);
            CUDA_CHECK(cudaGetLastError());
        })
    }
#endif // GGML_CUDA_GDN_CHUNK_AVAILABLE
#ifdef GGML_CUDA_GDN_VEC_AVAILABLE
    RAW_GUARD({
        auto * const fn = cols == 4 ? raw_gdn_cols<4> : cols == 8 ? raw_gdn_cols<8> : cols == 16 ? raw_gdn_cols<16> : nullptr;
        if (fn == nullptr) {
            throw std::runtime_error("raw_gdn_launch_cols: cols must be 4, 8 or 16");
        }
        fn(q, k, v, g, beta, state_in, out, state_out, S_v, H, n_tokens, n_seqs, sq1, sq2, sq3, sv1, sv2, sv3,
           sb1, sb2, sb3, neqk1, rq3, (cudaStream_t) stream);
        CUDA_CHECK(cudaGetLastError());
    })
#else
    (void) q; (void) k; (void) v; (void) g; (void) beta; (void) state_in; (void) out; (void) state_out;
    (void) S_v; (void) H; (void) n_tokens; (void) n_seqs; (void) sq1; (void) sq2; (void) sq3; (void) sv1;
    (void) sv2; (void) sv3; (void) sb1; (void) sb2; (void) sb3; (void) neqk1; (void) rq3; (void) cols; (void) stream;
    raw_error_slot() = "these sources have no vector GDN path (unpatched upstream)";
    return 1;
#endif // GGML_CUDA_GDN_VEC_AVAILABLE
}
