// Miniature convert.cu: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml).
// The dequantizers' translation unit as gguf-kernels' closure follows it. Declarations only.
#include "convert.cuh"
#include "dequantize.cuh"
