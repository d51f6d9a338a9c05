// Miniature quantize.cuh: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml).
#pragma once
#include "common.cuh"

void quantize_row_q8_1_cuda(
    const float * x, const int32_t * ids, void * vy, ggml_type type_src0, int64_t ne00, int64_t s01, int64_t s02,
    int64_t s03, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, cudaStream_t stream);
