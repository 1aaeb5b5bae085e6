/* A read of what a lower thread writes to shared memory, with or without the
 * barrier between (tests/test_cuda_emulator.py: only the reverse thread order
 * exposes the missing one). One block of n threads. */
#include "msc_cuda.h"

__global__ void neighbour(float* out, int barrier) {
    __shared__ float s[256];
    const int i = threadIdx.x;
    s[i] = (float)(i + 1);
    if (barrier) __syncthreads();
    out[i] = i > 0 ? s[i - 1] : 0.0f;
}

extern "C" int run_neighbour(float* host, int n, int barrier) {
    float* out = 0;
    if (cudaMalloc((void**)&out, sizeof(float) * n) != cudaSuccess) return 1;
    MSC_LAUNCH(neighbour, dim3(1), dim3(n), 0, out, barrier);
    int status = cudaDeviceSynchronize() != cudaSuccess;
    if (!status) status = cudaMemcpy(host, out, sizeof(float) * n, cudaMemcpyDeviceToHost) != cudaSuccess;
    cudaFree(out);
    return status;
}
