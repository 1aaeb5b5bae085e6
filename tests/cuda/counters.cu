/* Access patterns whose counts are known by hand, for the emulator's counters
 * (tests/test_cuda_emulator.py): one warp of 32 lanes per launch. */
#include "msc_cuda.h"

/* lane i loads a[offset + stride * i] and stores it to b[i] */
__global__ void strided(const double* a, double* b, int offset, int stride) {
    const int i = threadIdx.x;
    b[i] = a[offset + stride * i];
}

/* lane i writes and reads back float word stride * i (mod 1024) of shared memory */
__global__ void banks(float* out, int stride) {
    __shared__ float s[1024];
    const int i = threadIdx.x;
    s[(stride * i) % 1024] = (float)i;
    __syncwarp();
    out[i] = s[(stride * i) % 1024];
}

extern "C" int run_strided(int offset, int stride) {
    double *a = 0, *b = 0;
    if (cudaMalloc((void**)&a, sizeof(double) * 4096) != cudaSuccess) return 1;
    if (cudaMalloc((void**)&b, sizeof(double) * 32) != cudaSuccess) return 1;
    MSC_LAUNCH(strided, dim3(1), dim3(32), 0, a, b, offset, stride);
    const int status = cudaDeviceSynchronize() != cudaSuccess;
    cudaFree(a);
    cudaFree(b);
    return status;
}

extern "C" int run_banks(int stride) {
    float* out = 0;
    if (cudaMalloc((void**)&out, sizeof(float) * 32) != cudaSuccess) return 1;
    MSC_LAUNCH(banks, dim3(1), dim3(32), 0, out, stride);
    const int status = cudaDeviceSynchronize() != cudaSuccess;
    cudaFree(out);
    return status;
}
