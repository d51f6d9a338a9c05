// Miniature common.cuh (written by the ggml-vendor authors, not taken from ggml): the part of ggml's CUDA
// common header that the bindings touch (device info, error checks, launch helper, fastdiv, warp reductions),
// with ggml's names and signatures so bindings written against ggml compile against this test double.
#pragma once

#include "ggml.h"
#include "ggml-impl.h"

#include <cstdint>
#include <limits>
#include <memory>

#include <utility>

// The vendor headers come first here: the miniature ggml-common.h does not include cuda_fp16.h itself.
#if defined(GGML_USE_HIP)
#include "vendors/hip.h"
#else
#include "vendors/cuda.h"
#endif // defined(GGML_USE_HIP)

#if defined(GGML_USE_HIP)
#define GGML_COMMON_DECL_HIP
#else
#define GGML_COMMON_DECL_CUDA
#endif
#include "ggml-common.h"

#define WARP_SIZE 32
#define GGML_CUDA_MAX_DEVICES 16
#define GGML_CUDA_CC_OFFSET_AMD 0x1000000

[[noreturn]]
void ggml_cuda_error(const char * stmt, const char * func, const char * file, int line, const char * msg);

#define CUDA_CHECK(err)                                                                   \
    do {                                                                                  \
        cudaError_t err_ = (err);                                                         \
        if (err_ != cudaSuccess) {                                                        \
            ggml_cuda_error(#err, __func__, __FILE__, __LINE__, cudaGetErrorString(err_)); \
        }                                                                                 \
    } while (0)

struct ggml_cuda_device_info {
    int device_count;

    struct cuda_device_info {
        int     cc;        // compute capability
        int     nsm;       // number of streaming multiprocessors
        size_t  smpb;      // max. shared memory per block
        size_t  smpbo;     // max. shared memory per block (with opt-in)
        int     warp_size; // number of threads in a dispatch
    };

    cuda_device_info devices[GGML_CUDA_MAX_DEVICES] = {};
};

const ggml_cuda_device_info & ggml_cuda_info();

// ggml's per-device memory pool and the backend context that makes one: the op wrappers take scratch memory
// from it (the shims define the factory; the bindings pass their own memory and never reach it).
struct ggml_cuda_pool {
    virtual ~ggml_cuda_pool() = default;
};

struct ggml_backend_cuda_context {
    static std::unique_ptr<ggml_cuda_pool> new_pool_for_device(int device, int stream_no = 0);
};

void ggml_cuda_set_device(int device);
int ggml_cuda_get_device();

static constexpr __device__ int ggml_cuda_get_physical_warp_size() {
    return WARP_SIZE;
}

struct ggml_cuda_kernel_launch_params {
    dim3 block_nums;
    dim3 block_dims;
    size_t shmem;
    cudaStream_t stream;

    ggml_cuda_kernel_launch_params(const dim3 & block_nums_, const dim3 & block_dims_, const size_t shmem_,
                                   const cudaStream_t stream_)
        : block_nums(block_nums_), block_dims(block_dims_), shmem(shmem_), stream(stream_) {}
};

// Plain <<<>>> launch (ggml's also uses programmatic dependent launch where it can).
template <typename Kernel, typename... Args>
static __inline__ void ggml_cuda_kernel_launch(Kernel kernel, const ggml_cuda_kernel_launch_params & launch_params,
                                               Args &&... args) {
    kernel<<<launch_params.block_nums, launch_params.block_dims, launch_params.shmem, launch_params.stream>>>(
        std::forward<Args>(args)...);
    CUDA_CHECK(cudaGetLastError());
}

// n/d = (mulhi(n, mp) + n) >> L, with mp and L precomputed on the host.
static const uint3 init_fastdiv_values(uint64_t d_64) {
    GGML_ASSERT(d_64 != 0);
    GGML_ASSERT(d_64 <= std::numeric_limits<uint32_t>::max());

    uint32_t d = (uint32_t)d_64;
    uint32_t L = 0;
    while (L < 32 && (uint32_t{ 1 } << L) < d) {
        L++;
    }
    uint32_t mp = (uint32_t) ((uint64_t{ 1 } << 32) * ((uint64_t{ 1 } << L) - d) / d + 1);
    return make_uint3(mp, L, d);
}

static __device__ __forceinline__ uint32_t fastdiv(uint32_t n, const uint3 fastdiv_values) {
    const uint32_t hi = __umulhi(n, fastdiv_values.x);
    return (hi + n) >> fastdiv_values.y;
}

static __device__ __forceinline__ uint32_t fastmodulo(uint32_t n, const uint3 fastdiv_values) {
    return n - fastdiv(n, fastdiv_values) * fastdiv_values.z;
}

template <int width = WARP_SIZE>
static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = width/2; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, width);
    }
    return x;
}
