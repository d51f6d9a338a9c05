// Miniature vendors/hip.h (written by the ggml-vendor authors): CUDA names mapped onto HIP.
#pragma once

#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>

#define cudaError_t          hipError_t
#define cudaSuccess          hipSuccess
#define cudaStream_t         hipStream_t
#define cudaGetDevice        hipGetDevice
#define cudaGetLastError     hipGetLastError
#define cudaGetErrorString   hipGetErrorString
