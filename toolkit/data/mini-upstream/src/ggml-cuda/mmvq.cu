// Miniature mmvq.cu: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml).
// The quantized gemv's translation unit as gguf-kernels' closure follows it: its header, the q8_1 quantizer's
// header and the dot products, and an empty gemv with the launcher name and parameters the binding calls.
#include "mmvq.cuh"
#include "quantize.cuh"
#include "vecdotq.cuh"

struct ggml_cuda_mm_fusion_args_device;

static void mul_mat_vec_q_switch_type(
    const void * vx, const ggml_type type_x, const void * vy, const int32_t * ids,
    const ggml_cuda_mm_fusion_args_device & fusion, float * dst, const int ncols_x, const int nrows_x,
    const int ncols_dst, const int stride_row_x, const int stride_col_y, const int stride_col_dst,
    const int nchannels_x, const int nchannels_y, const int nchannels_dst, const int stride_channel_x,
    const int stride_channel_y, const int stride_channel_dst, const int nsamples_x, const int nsamples_dst,
    const int stride_sample_x, const int stride_sample_y, const int stride_sample_dst, const int ids_stride,
    cudaStream_t stream) {
}
