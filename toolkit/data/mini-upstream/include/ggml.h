// Miniature ggml.h (written by the ggml-vendor authors): the handful of declarations the mini kernels use.
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GGML_API
#define GGML_NORETURN __attribute__((noreturn))

enum ggml_type {
    GGML_TYPE_F32  = 0,
    GGML_TYPE_F16  = 1,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_BF16 = 30,
};

struct ggml_context;

struct ggml_tensor {
    enum ggml_type type;
    int64_t ne[4];
    size_t  nb[4];
    void *  data;
};

GGML_NORETURN GGML_API void ggml_abort(const char * file, int line, const char * fmt, ...);

#define GGML_ABORT(...) ggml_abort(__FILE__, __LINE__, __VA_ARGS__)
#define GGML_ASSERT(x) if (!(x)) GGML_ABORT("GGML_ASSERT(%s) failed", #x)

    // gated delta net: q, k [S_k, H_k, n_tokens, n_seqs]; v [S_v, H_v, n_tokens, n_seqs]; the output
    // packs the attention scores followed by K state snapshots.
    GGML_API struct ggml_tensor * ggml_gated_delta_net(
            struct ggml_context * ctx,
            struct ggml_tensor  * q,
            struct ggml_tensor  * k,
            struct ggml_tensor  * v,
            struct ggml_tensor  * g,
            struct ggml_tensor  * beta,
            struct ggml_tensor  * state,
            int64_t               K);

#ifdef __cplusplus
}
#endif
