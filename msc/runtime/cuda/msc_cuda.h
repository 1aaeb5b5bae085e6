/* msc_cuda.h: the one header generated CUDA sources include.
 *
 * Compiled by nvcc it includes the CUDA runtime and <mma.h>; compiled as
 * C++17 by a host compiler with -DMSC_CUDA_EMULATE it includes the
 * project's CPU emulator (cuda_emu.h) instead, so the same .cu source runs
 * on a machine without a GPU.
 *
 * Generated code uses only these macros for what differs between the two:
 *   MSC_LAUNCH(kernel, grid, block, shared_bytes, args...)
 *       launches `kernel` (no <<<>>> outside this header), then checks the
 *       launch with MSC_CUDA_CHECK(cudaGetLastError()).
 *   MSC_LAUNCH_INDEXED(kernel, points, grid, block, shared_bytes, args...)
 *       launches a kernel templated on its index type (`template <typename
 *       index_t>`) for `points` points: kernel<int> where they allow,
 *       kernel<long> above (msc_index.h).
 *   MSC_CUDA_CHECK(call)
 *       on an error prints the call, file, line and cudaGetErrorString to
 *       stderr and RETURNS the error code (as int) from the enclosing
 *       function: host functions that use it return int, 0 on success.
 *       It never aborts the process (a kernel called from Python reports
 *       the error instead).
 *   MSC_DYNAMIC_SHARED(type, name)
 *       declares the block's dynamic shared memory as `type name[]`
 *       (aligned to at least 128 bytes).
 *   MSC_SHARED(type, name, dims)
 *       declares a static shared array `__shared__ type name dims` inside a
 *       kernel (dims: `[N]`, `[N][M]`, ...); the emulator places it between
 *       guard bands, so an access outside it is reported, not silent.
 */
#ifndef MSC_CUDA_H
#define MSC_CUDA_H

#include <stdio.h>

#if defined(MSC_CUDA_EMULATE) && defined(__CUDACC__)
#error "msc_cuda.h: MSC_CUDA_EMULATE is for a host C++ compiler, not for nvcc"
#elif defined(MSC_CUDA_EMULATE)
#include "cuda_emu.h"
#define MSC_LAUNCH(kernel, grid, block, shared_bytes, ...)                                   \
    do {                                                                                     \
        ::msc_emu::launch(#kernel, (kernel), dim3(grid), dim3(block), (size_t)(shared_bytes), \
                          ##__VA_ARGS__);                                                    \
        MSC_CUDA_CHECK(cudaGetLastError());                                                  \
    } while (0)
#define MSC_DYNAMIC_SHARED(type, name) type* const name = static_cast<type*>(::msc_emu::dynamic_shared())
#define MSC_SHARED(type, name, dims) \
    type(&name) dims = *static_cast<type(*) dims>(::msc_emu::shared_array(#name, sizeof(type dims)))
#elif defined(__CUDACC__)
#include <cuda_runtime.h>
#include <mma.h>
#define MSC_LAUNCH(kernel, grid, block, shared_bytes, ...)             \
    do {                                                               \
        (kernel)<<<(grid), (block), (shared_bytes)>>>(__VA_ARGS__);    \
        MSC_CUDA_CHECK(cudaGetLastError());                            \
    } while (0)
#define MSC_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#define MSC_SHARED(type, name, dims) __shared__ type name dims
#else
#error "msc_cuda.h: compile with nvcc, or as C++17 with -DMSC_CUDA_EMULATE for the CPU emulator"
#endif

#include "msc_index.h"

/* Where a failed call is reported: file, line and the call's text (tools/same_machine_code.py
 * defines it away, so that code moved to other lines compiles to the same machine code). */
#ifndef MSC_ERROR_SITE
#define MSC_ERROR_SITE(call) __FILE__, __LINE__, #call
#endif

#define MSC_CUDA_CHECK(call)                                                                  \
    do {                                                                                      \
        cudaError_t msc_cuda_err_ = (call);                                                   \
        if (msc_cuda_err_ != cudaSuccess) {                                                   \
            fprintf(stderr, "msc: CUDA error at %s:%d: %s: %s\n", MSC_ERROR_SITE(call),       \
                    cudaGetErrorString(msc_cuda_err_));                                       \
            return (int)msc_cuda_err_;                                                        \
        }                                                                                     \
    } while (0)

#endif /* MSC_CUDA_H */
