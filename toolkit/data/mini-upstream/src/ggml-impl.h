// Miniature ggml-impl.h (written by the ggml-vendor authors).
#pragma once

#include "ggml.h"

#include <assert.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

GGML_API bool ggml_is_contiguous(const struct ggml_tensor * tensor);

#ifdef __cplusplus
}
#endif
