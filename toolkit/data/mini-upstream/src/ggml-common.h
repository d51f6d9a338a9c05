// Miniature ggml-common.h (written by the ggml-vendor authors): shared type declarations, selected by the
// including backend with GGML_COMMON_DECL_{CUDA,HIP,METAL}.
#ifndef GGML_COMMON_DECL
#define GGML_COMMON_DECL

#if defined(GGML_COMMON_DECL_METAL)
#include <metal_stdlib>
typedef half  ggml_half;
typedef half2 ggml_half2;
#elif defined(GGML_COMMON_DECL_CUDA) || defined(GGML_COMMON_DECL_HIP)
#include <cstdint>
typedef half  ggml_half;
typedef half2 ggml_half2;
#else
#include <stdint.h>
typedef uint16_t ggml_half;
typedef uint32_t ggml_half2;
#endif

#define QK8_0 32
typedef struct {
    ggml_half d;
    int8_t    qs[QK8_0];
} block_q8_0;

#endif // GGML_COMMON_DECL
