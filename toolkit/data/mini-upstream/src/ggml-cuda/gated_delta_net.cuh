// Miniature gated_delta_net.cuh (written by the ggml-vendor authors).
#include "common.cuh"
#include "ggml.h"
