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

/* one warp loads m8n8k4's 8 x 4 double A fragment from shared memory, its rows ldm doubles
 * apart (never written: the poison is loaded; only the counts matter), and stores the 8 x 8
 * product to shared memory, rows 8 doubles apart (512 contiguous bytes) */
__global__ void fragment(int ldm) {
    MSC_DYNAMIC_SHARED(double, s);  // 8 x 24 doubles for A, then 8 x 8 for the product
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 8, 8, 4, double, nvcuda::wmma::row_major> a;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 8, 8, 4, double, nvcuda::wmma::row_major> b;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 8, 8, 4, double> c;
    nvcuda::wmma::load_matrix_sync(a, s, ldm);
    nvcuda::wmma::fill_fragment(b, 1.0);
    nvcuda::wmma::fill_fragment(c, 0.0);
    nvcuda::wmma::mma_sync(c, a, b, c);
    nvcuda::wmma::store_matrix_sync(s + 8 * 24, c, 8, nvcuda::wmma::mem_row_major);
}

extern "C" int run_fragment(int ldm) {
    MSC_LAUNCH(fragment, dim3(1), dim3(32), sizeof(double) * 8 * 32, ldm);
    return cudaDeviceSynchronize() != cudaSuccess;
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
