// Miniature ssm_conv (written by the ggml-vendor authors, not taken from ggml): one thread per channel, the
// same static host launcher name, template parameter and parameter list as ggml's, so bindings written against
// ggml compile here. Same maths: y[s, t, c] = sum_j x[s, c, t + j] * w[c, j] (+ bias[c]), SiLU when asked;
// x rows (channels) of d_conv - 1 + n_t time steps, strides in bytes.
#include "common.cuh"
#include "ssm-conv.cuh"
#include "unary.cuh"

template <bool apply_silu>
static __global__ void ssm_conv_f32(const float * src0, const float * src1, const float * bias, const int src0_nb1,
                                    const int src0_nb2, const int src1_nb1, float * dst, const int dst_nb1,
                                    const int dst_nb2, const int64_t nc, const int64_t nr, const int64_t n_t) {
    const int64_t c = (int64_t) blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= nr) {
        return;
    }
    const float * x = (const float *) ((const char *) src0 + blockIdx.x * src0_nb2 + c * src0_nb1);
    const float * w = (const float *) ((const char *) src1 + c * src1_nb1);
    for (int64_t i = 0; i < n_t; i++) {
        float sumf = 0.0f;
        for (int64_t j = 0; j < nc; j++) {
            sumf += x[i + j] * w[j];
        }
        sumf += bias != nullptr ? bias[c] : 0.0f;
        float * y = (float *) ((char *) dst + blockIdx.x * dst_nb2 + i * dst_nb1);
        y[c] = apply_silu ? ggml_cuda_op_silu_single(sumf) : sumf;
    }
}

template <bool apply_silu>
static void ssm_conv_f32_cuda(const float * src0, const float * src1, const float * bias, const int src0_nb0, const int src0_nb1,
                              const int src0_nb2, const int src1_nb1, float * dst, const int dst_nb0, const int dst_nb1,
                              const int dst_nb2, const int64_t nc, const int64_t nr, const int64_t n_t,
                              const int64_t n_s, cudaStream_t stream) {
    const int threads = 128;
    GGML_ASSERT(nr % threads == 0);
    (void) src0_nb0;
    (void) dst_nb0;
    switch (nc) {
        case 3: case 4: case 5: case 9: case 15: break;
        default: GGML_ABORT("Only support kernel sizes 3, 4, 5, 9, 15 right now.");
    }
    const dim3 blocks(n_s, (nr + threads - 1) / threads, 1);
    const ggml_cuda_kernel_launch_params launch_params(blocks, dim3(threads, 1, 1), (size_t) 0, stream);
    ggml_cuda_kernel_launch(ssm_conv_f32<apply_silu>, launch_params, src0, src1, bias, src0_nb1, src0_nb2, src1_nb1,
                            dst, dst_nb1, dst_nb2, nc, nr, n_t);
}
