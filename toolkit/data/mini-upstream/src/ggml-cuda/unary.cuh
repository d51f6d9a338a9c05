// Miniature unary.cuh (written by the ggml-vendor authors, not taken from ggml): the one device helper the
// ssm_conv kernel uses, with ggml's name and signature.
#pragma once
#include "common.cuh"

__device__ __forceinline__ float ggml_cuda_op_silu_single(float x) {
    return x / (1.0f + expf(-x));
}
