// Error plumbing shared by the harness's extern "C" entry points: exceptions from the shim (ggml_abort,
// CUDA_CHECK) become a non-zero return code and a message Python reads with raw_last_error().
#pragma once

#include <stdexcept>
#include <string>

#define RAW_API extern "C" __attribute__((visibility("default")))

std::string & raw_error_slot();

#define RAW_GUARD(...)                                   \
    try {                                                \
        __VA_ARGS__;                                     \
        return 0;                                        \
    } catch (const std::exception & e) {                 \
        raw_error_slot() = e.what();                     \
        return 1;                                        \
    }
