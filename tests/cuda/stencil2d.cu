// A 5-point Jacobi step staged in shared memory (tile plus a ring of 1), with
// __syncthreads between staging and computing; `sync` = 0 leaves it out
// (a uniform condition), which the emulator must expose as a data race.
// And blocks that read shared memory only the first block wrote.
#include "msc_cuda.h"

#define BX 16
#define BY 8

__global__ void jacobi(const double* __restrict__ in, double* __restrict__ out, int nx, int ny, int sync) {
    __shared__ double tile[BY + 2][BX + 2];
    const int x = blockIdx.x * BX + threadIdx.x, y = blockIdx.y * BY + threadIdx.y;  // interior point (x+1, y+1)
    const int w = nx + 2;
    for (int j = threadIdx.y; j < BY + 2; j += BY)
        for (int i = threadIdx.x; i < BX + 2; i += BX) {
            const int gx = blockIdx.x * BX + i, gy = blockIdx.y * BY + j;
            tile[j][i] = gx < nx + 2 && gy < ny + 2 ? in[gy * w + gx] : 0.0;
        }
    if (sync) __syncthreads();
    if (x < nx && y < ny) {
        const int i = threadIdx.x + 1, j = threadIdx.y + 1;
        out[(y + 1) * w + x + 1] = 0.25 * (tile[j - 1][i] + tile[j + 1][i] + tile[j][i - 1] + tile[j][i + 1]);
    }
}

// `steps` Jacobi steps of the (ny+2) x (nx+2) grid `u` (the ring stays fixed).
extern "C" int stencil2d(double* u, int nx, int ny, int steps, int sync) {
    const size_t bytes = sizeof(double) * (size_t)(nx + 2) * (ny + 2);
    double *a = nullptr, *b = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&a, bytes));
    MSC_CUDA_CHECK(cudaMalloc(&b, bytes));
    MSC_CUDA_CHECK(cudaMemcpy(a, u, bytes, cudaMemcpyHostToDevice));
    MSC_CUDA_CHECK(cudaMemcpy(b, u, bytes, cudaMemcpyHostToDevice));
    const dim3 grid((nx + BX - 1) / BX, (ny + BY - 1) / BY), block(BX, BY);
    for (int s = 0; s < steps; ++s) {
        MSC_LAUNCH(jacobi, grid, block, 0, a, b, nx, ny, sync);
        double* t = a;
        a = b;
        b = t;
    }
    MSC_CUDA_CHECK(cudaDeviceSynchronize());
    MSC_CUDA_CHECK(cudaMemcpy(u, a, bytes, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(a));
    MSC_CUDA_CHECK(cudaFree(b));
    return 0;
}

// Block 0 stores its 32 threads' cells of shared memory, every block copies them out: on a
// device another block's shared memory is its own, never written (NaN under the emulator).
__global__ void copy_shared(double* out) {
    __shared__ double cells[32];
    if (blockIdx.x == 0) cells[threadIdx.x] = 1.0 + threadIdx.x;
    __syncthreads();
    out[blockIdx.x * 32 + threadIdx.x] = cells[threadIdx.x];
}

extern "C" int shared_between_blocks(double* result, int blocks) {
    const size_t bytes = sizeof(double) * 32 * (size_t)blocks;
    double* out = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&out, bytes));
    MSC_LAUNCH(copy_shared, blocks, 32, 0, out);
    MSC_CUDA_CHECK(cudaMemcpy(result, out, bytes, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(out));
    return 0;
}
