// Miniature dequantize.cuh: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml).
// ggml's per-block dequantizers live here upstream; the miniature has none.
#pragma once
#include "common.cuh"
