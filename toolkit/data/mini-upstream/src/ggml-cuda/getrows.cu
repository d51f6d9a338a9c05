// Miniature getrows.cu: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml).
// The row gather's translation unit as gguf-kernels' closure follows it. Declarations only.
#include "getrows.cuh"
#include "dequantize.cuh"
#include "convert.cuh"
