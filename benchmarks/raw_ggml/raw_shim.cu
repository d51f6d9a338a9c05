// The handful of ggml runtime symbols that upstream's CUDA sources reference but that live outside the
// files we include (normally in ggml-cuda.cu and ggml.c). Written by us for the benchmark harness only;
// docs/upstream.md §1.6 lists what each has to do. Errors become C++ exceptions, which the extern "C"
// entry points in raw_gdn.cu / raw_fa.cu turn into an error code plus a message for Python.
#include "ggml-cuda/common.cuh"

#include "raw_common.h"

#include <cstdarg>
#include <cstdio>
#include <stdexcept>
#include <string>

std::string & raw_error_slot() {
    static thread_local std::string msg;
    return msg;
}

RAW_API const char * raw_last_error() {
    return raw_error_slot().c_str();
}

const ggml_cuda_device_info & ggml_cuda_info() {
    // Filled once, field by field: the struct changes upstream from time to time (docs/upstream.md §1.6).
    static const ggml_cuda_device_info info = [] {
        ggml_cuda_device_info out{};
        int n = 0;
        if (cudaGetDeviceCount(&n) != cudaSuccess) {
            n = 0;
        }
        if (n > GGML_CUDA_MAX_DEVICES) {
            n = GGML_CUDA_MAX_DEVICES;
        }
        // Only the fields upstream's launch paths read (cc, nsm, smem limits, warp size): the struct gains and
        // loses others between pins (docs/upstream.md §1.6), which stay value-initialised.
        out.device_count = n;
        for (int d = 0; d < n; ++d) {
            cudaDeviceProp p{};
            if (cudaGetDeviceProperties(&p, d) != cudaSuccess) {
                continue;
            }
            auto & dev     = out.devices[d];
            dev.cc         = 100 * p.major + 10 * p.minor;
            dev.nsm        = p.multiProcessorCount;
            dev.smpb       = p.sharedMemPerBlock;
            dev.smpbo      = p.sharedMemPerBlockOptin;
            dev.warp_size  = p.warpSize;
        }
        return out;
    }();
    return info;
}

int ggml_cuda_get_device() {
    int id = 0;
    if (cudaGetDevice(&id) != cudaSuccess) {
        throw std::runtime_error("cudaGetDevice failed");
    }
    return id;
}

void ggml_cuda_set_device(int device) {
    if (cudaSetDevice(device) != cudaSuccess) {
        throw std::runtime_error("cudaSetDevice failed");
    }
}

[[noreturn]] void ggml_cuda_error(const char * stmt, const char * func, const char * file, int line, const char * msg) {
    throw std::runtime_error(std::string("CUDA error: ") + msg + " in " + func + " (" + file + ":" +
                             std::to_string(line) + "): " + stmt);
}

// ggml_cuda_op_gated_delta_net takes the chunked prefill path's workspace from ggml's pool (vendor/patches/0003);
// the harness calls the launcher directly and never reaches it, but the non-static op wrapper must link.
std::unique_ptr<ggml_cuda_pool> ggml_backend_cuda_context::new_pool_for_device(int device, int stream_no) {
    (void) device;
    (void) stream_no;
    throw std::runtime_error("ggml's CUDA memory pool is not available in the raw harness");
}

extern "C" {

void ggml_abort(const char * file, int line, const char * fmt, ...) {
    char buf[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(buf, sizeof(buf), fmt, args);
    va_end(args);
    throw std::runtime_error(std::string("ggml_abort at ") + file + ":" + std::to_string(line) + ": " + buf);
}

// Reached only from upstream's ggml_tensor-based op wrappers, which the harness never calls.
bool ggml_is_contiguous(const struct ggml_tensor *) {
    throw std::runtime_error("ggml_is_contiguous: not available in the benchmark harness");
}
bool ggml_is_contiguous_rows(const struct ggml_tensor *) {
    throw std::runtime_error("ggml_is_contiguous_rows: not available in the benchmark harness");
}
bool ggml_are_same_stride(const struct ggml_tensor *, const struct ggml_tensor *) {
    throw std::runtime_error("ggml_are_same_stride: not available in the benchmark harness");
}

}  // extern "C"
