// Miniature vendors/cuda.h (written by the ggml-vendor authors).
#pragma once

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
