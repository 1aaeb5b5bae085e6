/* msc_hip.h: the one header generated HIP sources include (the HIP twin of
 * msc_cuda.h, whose comment describes the macros).
 *
 * Compiled by hipcc (AMD GPUs) it includes the HIP runtime. Compiled as C++17
 * by a host compiler with -DMSC_CUDA_EMULATE it includes msc_cuda.h and the
 * project's CUDA emulator, and names each HIP runtime call after the CUDA call
 * the emulator implements: the same kernel.hip then runs on the CPU.
 */
#ifndef MSC_HIP_H
#define MSC_HIP_H

#include <stdio.h>

#if defined(MSC_CUDA_EMULATE)
#include "msc_cuda.h"
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipGetLastError cudaGetLastError
#define hipGetErrorString cudaGetErrorString
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#elif defined(__HIPCC__)
#include <hip/hip_runtime.h>
#define MSC_LAUNCH(kernel, grid, block, shared_bytes, ...)             \
    do {                                                               \
        (kernel)<<<(grid), (block), (shared_bytes)>>>(__VA_ARGS__);    \
        MSC_HIP_CHECK(hipGetLastError());                              \
    } while (0)
#define MSC_DYNAMIC_SHARED(type, name) extern __shared__ __attribute__((aligned(128))) type name[]
#define MSC_SHARED(type, name, dims) __shared__ type name dims
#include "msc_index.h"
#else
#error "msc_hip.h: compile with hipcc, or as C++17 with -DMSC_CUDA_EMULATE for the CPU emulator"
#endif

/* Where a failed call is reported: file, line and the call's text (tools/same_machine_code.py
 * defines it away, so that code moved to other lines compiles to the same machine code). */
#ifndef MSC_ERROR_SITE
#define MSC_ERROR_SITE(call) __FILE__, __LINE__, #call
#endif

#define MSC_HIP_CHECK(call)                                                                  \
    do {                                                                                     \
        hipError_t msc_hip_err_ = (call);                                                    \
        if (msc_hip_err_ != hipSuccess) {                                                    \
            fprintf(stderr, "msc: HIP error at %s:%d: %s: %s\n", MSC_ERROR_SITE(call),       \
                    hipGetErrorString(msc_hip_err_));                                        \
            return (int)msc_hip_err_;                                                        \
        }                                                                                    \
    } while (0)

#endif /* MSC_HIP_H */
