// Miniature quantize.cu: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml).
// The q8_1 activation quantizer's translation unit as gguf-kernels' closure follows it. Declarations only.
#include "quantize.cuh"
