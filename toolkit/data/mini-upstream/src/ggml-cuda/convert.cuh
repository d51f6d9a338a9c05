// Miniature convert.cuh (written by the ggml-vendor authors).
#pragma once
#include "common.cuh"

template <typename dst_t, typename src_t>
static __device__ __forceinline__ dst_t ggml_cuda_cast(src_t x) {
    return dst_t(x);
}
