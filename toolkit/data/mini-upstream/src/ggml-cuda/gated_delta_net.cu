// Miniature gated delta net (written by the ggml-vendor authors, not taken from ggml): a plain per-column
// recurrence (one thread per value column) with the same kernel/launcher names, template parameters and
// parameter lists as ggml's, so bindings written against ggml compile here. Same maths: state stored
// [value][key], GQA tiled (h % H_k), KDA per-key-channel gates, output scaled by `scale`.
#include "gated_delta_net.cuh"
#include "ggml-cuda/common.cuh"

template <int S_v, bool KDA, bool keep_rs_t>
__global__ void __launch_bounds__(S_v, 2)
gated_delta_net_cuda(const float * q,
                                     const float * k,
                                     const float * v,
                                     const float * g,
                                     const float * beta,
                                     const float * curr_state,
                                     float *       dst,
                                     float *       state,
                                     int64_t       H,
                                     int64_t       n_tokens,
                                     int64_t       n_seqs,
                                     int64_t       sq1,
                                     int64_t       sq2,
                                     int64_t       sq3,
                                     int64_t       sv1,
                                     int64_t       sv2,
                                     int64_t       sv3,
                                     int64_t       sb1,
                                     int64_t       sb2,
                                     int64_t       sb3,
                                     const uint3   neqk1_magic,
                                     const uint3   rq3_magic,
                                     float         scale,
                                     int64_t       state_slot_stride,
                                     int           K) {
    const uint32_t h_idx    = blockIdx.x;
    const uint32_t sequence = blockIdx.y;
    const int      col      = threadIdx.x;  // one thread per state column (value row)

    const uint32_t iq1 = fastmodulo(h_idx, neqk1_magic);
    const uint32_t iq3 = fastdiv(sequence, rq3_magic);

    // state [S_v (key), S_v (value), H, n_seqs], stored transposed: M[col][i] = S[i][col]
    const int64_t state_offset = (sequence * H + h_idx) * S_v * S_v;
    const float * s_in  = curr_state + state_offset + col * S_v;
    float *       s_out = state + state_offset + col * S_v;
    float *       attn  = dst + (sequence * n_tokens * H + h_idx) * S_v;

    float s[S_v];
    for (int i = 0; i < S_v; i++) {
        s[i] = s_in[i];
    }
    for (int64_t t = 0; t < n_tokens; t++) {
        const float * q_t = q + iq3 * sq3 + t * sq2 + iq1 * sq1;
        const float * k_t = k + iq3 * sq3 + t * sq2 + iq1 * sq1;
        const float * v_t = v + sequence * sv3 + t * sv2 + h_idx * sv1;
        const int64_t gb  = sequence * sb3 + t * sb2 + h_idx * sb1;
        const float   b_t = beta[gb];
        float kv = 0.0f;
        for (int i = 0; i < S_v; i++) {
            const float decay = KDA ? expf(g[gb * S_v + i]) : expf(g[gb]);
            s[i] *= decay;
            kv   += s[i] * k_t[i];
        }
        const float delta = (v_t[col] - kv) * b_t;
        float out = 0.0f;
        for (int i = 0; i < S_v; i++) {
            s[i] += k_t[i] * delta;
            out  += s[i] * q_t[i];
        }
        attn[t * H * S_v + col] = out * scale;
    }
    for (int i = 0; i < S_v; i++) {
        s_out[i] = s[i];
    }
    (void) state_slot_stride; (void) K;
}

template <bool KDA, bool keep_rs_t>
static void launch_gated_delta_net(
        const float * q_d, const float * k_d, const float * v_d,
        const float * g_d, const float * b_d, const float * s_d,
        float * dst_d, float * state_d,
        int64_t S_v,   int64_t H, int64_t n_tokens, int64_t n_seqs,
        int64_t sq1,   int64_t sq2, int64_t sq3,
        int64_t sv1,   int64_t sv2, int64_t sv3,
        int64_t sb1,   int64_t sb2, int64_t sb3,
        int64_t neqk1, int64_t rq3,
        float scale, int64_t state_slot_stride, int K, cudaStream_t stream) {
    // Like ggml: the warp size comes from the device table that the binding's shim fills.
    const int warp_size = ggml_cuda_info().devices[ggml_cuda_get_device()].warp_size;
    GGML_ASSERT(warp_size > 0);
    dim3 grid_dims(H, n_seqs, 1);
    dim3 block_dims(S_v, 1, 1);

    const uint3 neqk1_magic = init_fastdiv_values(neqk1);
    const uint3 rq3_magic   = init_fastdiv_values(rq3);
    const ggml_cuda_kernel_launch_params launch_params(grid_dims, block_dims, (size_t) 0, stream);

    switch (S_v) {
        case 16:
            ggml_cuda_kernel_launch(gated_delta_net_cuda<16, KDA, keep_rs_t>, launch_params,
                q_d, k_d, v_d, g_d, b_d, s_d, dst_d, state_d, H, n_tokens, n_seqs, sq1, sq2, sq3, sv1, sv2, sv3,
                sb1, sb2, sb3, neqk1_magic, rq3_magic, scale, state_slot_stride, K);
            break;
        case 32:
            ggml_cuda_kernel_launch(gated_delta_net_cuda<32, KDA, keep_rs_t>, launch_params,
                q_d, k_d, v_d, g_d, b_d, s_d, dst_d, state_d, H, n_tokens, n_seqs, sq1, sq2, sq3, sv1, sv2, sv3,
                sb1, sb2, sb3, neqk1_magic, rq3_magic, scale, state_slot_stride, K);
            break;
        case 64:
            ggml_cuda_kernel_launch(gated_delta_net_cuda<64, KDA, keep_rs_t>, launch_params,
                q_d, k_d, v_d, g_d, b_d, s_d, dst_d, state_d, H, n_tokens, n_seqs, sq1, sq2, sq3, sv1, sv2, sv3,
                sb1, sb2, sb3, neqk1_magic, rq3_magic, scale, state_slot_stride, K);
            break;
        case 128:
            ggml_cuda_kernel_launch(gated_delta_net_cuda<128, KDA, keep_rs_t>, launch_params,
                q_d, k_d, v_d, g_d, b_d, s_d, dst_d, state_d, H, n_tokens, n_seqs, sq1, sq2, sq3, sv1, sv2, sv3,
                sb1, sb2, sb3, neqk1_magic, rq3_magic, scale, state_slot_stride, K);
            break;
        default:
            GGML_ABORT("fatal error");
            break;
    }
}
