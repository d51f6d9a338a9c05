// Miniature mmvq.cuh: a closure-only stand-in (written by the ggml-vendor authors, not taken from ggml). Same file name and
// includes as ggml's, so gguf-kernels' closure, render and build plan run on the embedded miniature; it holds no
// kernels and the demo does not compile it (ggml-vendor demo --upstream PATH builds the real ones).
#pragma once
#include "common.cuh"

#define MMVQ_MAX_BATCH_SIZE 8  // rows of x one gemv takes
