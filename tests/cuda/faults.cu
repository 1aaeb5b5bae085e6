// Kernels with a fault the emulator must report (a program: `faults MODE`).
// Mode 0 is correct; each other mode breaks one rule of warp-synchronous or
// block-synchronous code, or of the wmma API. On a device most of these hang,
// give wrong results or fault; the emulator stops the launch and names it
// (OVERLAPPING_WRITES only with MSC_CUDA_EMU_BLOCKS=reverse).
#include <stdlib.h>

#include "msc_cuda.h"

using namespace nvcuda;

enum {
    CORRECT,
    SHUFFLE_31_LANES,       // a lane of the mask skips __shfl_down_sync
    EXIT_BEFORE_BARRIER,    // a thread returns before __syncthreads
    MISALIGNED_WMMA_LOAD,   // load_matrix_sync from a pointer off 256-bit alignment
    MMA_HALF_WARP,          // mma_sync called by lanes 0-15 only
    DIVERGENT_BARRIERS,     // __syncthreads at two places
    MASK_BEYOND_WARP,       // a full mask in a warp of 16 threads
    OVERLAPPING_WRITES,     // each of 3 blocks also writes the next one's first element
};

__global__ void kernel(int mode, double* out) {
    const int lane = threadIdx.x % 32;
    double v = threadIdx.x;
    if (mode == SHUFFLE_31_LANES || mode == MASK_BEYOND_WARP) {
        if (mode == MASK_BEYOND_WARP || lane < 31) v += __shfl_down_sync(0xffffffffu, v, 1);
    } else if (mode == EXIT_BEFORE_BARRIER) {
        if (threadIdx.x == 5) return;
        __syncthreads();
    } else if (mode == DIVERGENT_BARRIERS) {
        if (threadIdx.x < 32) {
            v += 1;
            __syncthreads();
        } else {
            __syncthreads();
        }
    } else if (mode == MISALIGNED_WMMA_LOAD || mode == MMA_HALF_WARP) {
        __shared__ __align__(32) double tile[8 * 4 + 1];
        for (int i = threadIdx.x; i < 8 * 4 + 1; i += blockDim.x) tile[i] = i;
        __syncthreads();
        if (threadIdx.x < 32) {
            wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> b;
            wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
            wmma::fill_fragment(acc, 0.0);
            wmma::load_matrix_sync(a, tile + (mode == MISALIGNED_WMMA_LOAD ? 1 : 0), 4);
            wmma::load_matrix_sync(b, tile, 4);
            if (mode == CORRECT || lane < 16) wmma::mma_sync(acc, a, b, acc);
            v += acc.x[0];
        }
    } else if (mode == OVERLAPPING_WRITES) {
        v += 1000 * blockIdx.x;
        if (threadIdx.x == blockDim.x - 1) out[(blockIdx.x + 1) * blockDim.x] = v;
    } else {  // CORRECT: a shuffle every lane calls
        v += __shfl_xor_sync(0xffffffffu, v, 1);
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

int main(int argc, char** argv) {
    const int mode = argc > 1 ? atoi(argv[1]) : CORRECT;
    const int threads = mode == MASK_BEYOND_WARP ? 16 : 64, blocks = mode == OVERLAPPING_WRITES ? 3 : 1;
    double* out = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&out, sizeof(double) * (blocks * threads + 1)));
    MSC_LAUNCH(kernel, blocks, threads, 0, mode, out);
    MSC_CUDA_CHECK(cudaDeviceSynchronize());
    MSC_CUDA_CHECK(cudaFree(out));
    printf("ok\n");
    return 0;
}
