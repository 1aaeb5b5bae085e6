// Shared arrays accessed outside their bounds (a program: `bounds MODE`).
// Mode 0 is correct; each other mode reads or writes one element outside an
// MSC_SHARED array or the dynamic shared memory, or asks for more static
// shared memory than a block has. On a device these corrupt a neighbouring
// array or fault; the emulator's guard bands stop the launch and name the
// array (a read only in counting builds, where every access is checked).
#include <stdlib.h>

#include "msc_cuda.h"

enum {
    CORRECT,
    WRITE_PAST_END,     // tile[64] of a 64-element array
    WRITE_BEFORE_START, // tile[-1]
    READ_PAST_END,      // reads tile[64]
    DYNAMIC_PAST_END,   // dynamic[64] of 64 doubles of dynamic shared memory
    OVER_48_KIB,        // a second array that takes the block's static shared memory past 48 KiB
};

__global__ void kernel(int mode, double* out) {
    MSC_SHARED(double, tile, [64]);
    MSC_DYNAMIC_SHARED(double, dynamic);
    const int i = threadIdx.x;
    tile[i] = i;
    dynamic[i] = 2 * i;
    __syncthreads();
    double v = tile[63 - i] + dynamic[63 - i];
    if (i == 0) {
        if (mode == WRITE_PAST_END) tile[64] = 1.0;
        if (mode == WRITE_BEFORE_START) tile[-1] = 1.0;
        if (mode == READ_PAST_END) v += tile[64];
        if (mode == DYNAMIC_PAST_END) dynamic[64] = 1.0;
    }
#ifdef MSC_CUDA_EMULATE /* nvcc (ptxas) refuses this at compile time */
    if (mode == OVER_48_KIB) {
        MSC_SHARED(double, big, [6144]);  // 48 KiB, with tile's 512 bytes over the limit
        big[i] = v;
        __syncthreads();
        v = big[63 - i];
    }
#endif
    out[i] = v;
}

int main(int argc, char** argv) {
    const int mode = argc > 1 ? atoi(argv[1]) : CORRECT;
    double* out = nullptr;
    double host[64];
    MSC_CUDA_CHECK(cudaMalloc(&out, sizeof(double) * 64));
    MSC_LAUNCH(kernel, 2, 64, 64 * sizeof(double), mode, out);
    MSC_CUDA_CHECK(cudaDeviceSynchronize());
    MSC_CUDA_CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(out));
    for (int i = 0; i < 64; ++i)
        if (host[i] != 3 * (63 - i)) {
            printf("wrong: out[%d] = %g\n", i, host[i]);
            return 1;
        }
    printf("ok\n");
    return 0;
}
