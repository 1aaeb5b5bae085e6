/* A read of what a lower thread writes to shared memory, with or without the
 * barrier between (tests/test_cuda_emulator.py: only the reverse thread order
 * exposes the missing one); a read of what the next warp writes, past a
 * __syncwarp only (the forward order exposes it). One block of n threads. */
#include "msc_cuda.h"

/* kernel over one block of n threads, its output copied to host */
static int run_block(void (*kernel)(float*, int), float* host, int n, int barrier) {
    float* out = 0;
    if (cudaMalloc((void**)&out, sizeof(float) * n) != cudaSuccess) return 1;
    MSC_LAUNCH(kernel, dim3(1), dim3(n), 0, out, barrier);
    int status = cudaDeviceSynchronize() != cudaSuccess;
    if (!status) status = cudaMemcpy(host, out, sizeof(float) * n, cudaMemcpyDeviceToHost) != cudaSuccess;
    cudaFree(out);
    return status;
}

__global__ void neighbour(float* out, int barrier) {
    __shared__ float s[256];
    const int i = threadIdx.x;
    s[i] = (float)(i + 1);
    if (barrier) __syncthreads();
    out[i] = i > 0 ? s[i - 1] : 0.0f;
}

extern "C" int run_neighbour(float* host, int n, int barrier) { return run_block(neighbour, host, n, barrier); }

__global__ void next_warp(float* out, int barrier) {
    __shared__ float s[256];
    const int i = threadIdx.x;
    s[i] = (float)(i + 1);
    if (barrier)
        __syncthreads();
    else
        __syncwarp();
    out[i] = s[(i + 32) % blockDim.x];
}

extern "C" int run_next_warp(float* host, int n, int barrier) { return run_block(next_warp, host, n, barrier); }
