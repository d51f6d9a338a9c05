// Miniature vecdotq.cuh (written by the ggml-vendor authors).
#pragma once

#include "common.cuh"

#include <cstdint>

static __device__ __forceinline__ int ggml_cuda_dp4a(const int a, const int b, int c) {
    const int8_t * a8 = (const int8_t *) &a;
    const int8_t * b8 = (const int8_t *) &b;
    return c + a8[0]*b8[0] + a8[1]*b8[1] + a8[2]*b8[2] + a8[3]*b8[3];
}
