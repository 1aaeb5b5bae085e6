// nvcuda::wmma GEMMs C = alpha * A @ B, one warp per output tile, for the
// fp64 (m8n8k4), tf32 (m16n16k8) and fp16 (m16n16k16, m32n8k16) shapes and
// both operand layouts; plus a kernel that stores the fp64 accumulator
// through x[] by the sm_80 element order (right on the device, wrong in the
// emulator, whose order is deliberately different).
#include "msc_cuda.h"

using namespace nvcuda;

// A is m x k, B k x n, C m x n, each row- or column-major as its layout says;
// the grid is (n / N, m / M) warps of 32 threads.
template <int M, int N, int K, class T, class LA, class LB, class E, class Acc>
__global__ void gemm(const E* A, const E* B, Acc* C, int m, int n, int k, wmma::layout_t c_layout, Acc alpha) {
    constexpr bool a_row = std::is_same<LA, wmma::row_major>::value, b_row = std::is_same<LB, wmma::row_major>::value;
    const int ti = blockIdx.y, tj = blockIdx.x;
    const int lda = a_row ? k : m, ldb = b_row ? n : k, ldc = c_layout == wmma::mem_row_major ? n : m;
    wmma::fragment<wmma::matrix_a, M, N, K, T, LA> a;
    wmma::fragment<wmma::matrix_b, M, N, K, T, LB> b;
    wmma::fragment<wmma::accumulator, M, N, K, Acc> acc;
    wmma::fill_fragment(acc, Acc(0));
    for (int kk = 0; kk < k; kk += K) {
        wmma::load_matrix_sync(a, A + (a_row ? ti * M * lda + kk : kk * lda + ti * M), lda);
        wmma::load_matrix_sync(b, B + (b_row ? kk * ldb + tj * N : tj * N * ldb + kk), ldb);
        if (std::is_same<T, wmma::precision::tf32>::value) {  // element-wise: independent of the element order
            for (int e = 0; e < a.num_elements; ++e) a.x[e] = wmma::__float_to_tf32(a.x[e]);
            for (int e = 0; e < b.num_elements; ++e) b.x[e] = wmma::__float_to_tf32(b.x[e]);
        }
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int e = 0; e < acc.num_elements; ++e) acc.x[e] *= alpha;
    Acc* c = C + (c_layout == wmma::mem_row_major ? ti * M * ldc + tj * N : tj * N * ldc + ti * M);
    wmma::store_matrix_sync(c, acc, ldc, c_layout);
}

// m8n8k4 fp64 with row-major A, B, C, storing the accumulator by the documented
// sm_80 layout (lane l holds row l / 4, columns 2 (l % 4) + e) instead of store_matrix_sync
__global__ void gemm_f64_by_element_order(const double* A, const double* B, double* C, int n, int k) {
    const int ti = blockIdx.y, tj = blockIdx.x, lane = threadIdx.x;
    wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
    wmma::fill_fragment(acc, 0.0);
    for (int kk = 0; kk < k; kk += 4) {
        wmma::load_matrix_sync(a, A + ti * 8 * k + kk, k);
        wmma::load_matrix_sync(b, B + kk * n + tj * 8, n);
        wmma::mma_sync(acc, a, b, acc);
    }
    for (int e = 0; e < acc.num_elements; ++e) C[(ti * 8 + lane / 4) * n + tj * 8 + 2 * (lane % 4) + e] = acc.x[e];
}

template <int M, int N, int K, class T, class LA, class LB, class E, class Acc>
static int run(const E* A, const E* B, Acc* C, int m, int n, int k, wmma::layout_t c_layout, Acc alpha) {
    E *da = nullptr, *db = nullptr;
    Acc* dc = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&da, sizeof(E) * m * k));
    MSC_CUDA_CHECK(cudaMalloc(&db, sizeof(E) * k * n));
    MSC_CUDA_CHECK(cudaMalloc(&dc, sizeof(Acc) * m * n));
    MSC_CUDA_CHECK(cudaMemcpy(da, A, sizeof(E) * m * k, cudaMemcpyHostToDevice));
    MSC_CUDA_CHECK(cudaMemcpy(db, B, sizeof(E) * k * n, cudaMemcpyHostToDevice));
    MSC_LAUNCH((gemm<M, N, K, T, LA, LB, E, Acc>), dim3(n / N, m / M), 32, 0, da, db, dc, m, n, k, c_layout, alpha);
    MSC_CUDA_CHECK(cudaMemcpy(C, dc, sizeof(Acc) * m * n, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(da));
    MSC_CUDA_CHECK(cudaFree(db));
    MSC_CUDA_CHECK(cudaFree(dc));
    return 0;
}

#define ROW wmma::row_major
#define COL wmma::col_major

// variant 0: A, B, C row-major; 1: A, B, C column-major
extern "C" int gemm_f64(const double* A, const double* B, double* C, int m, int n, int k, int variant, double alpha) {
    if (variant == 0) return run<8, 8, 4, double, ROW, ROW>(A, B, C, m, n, k, wmma::mem_row_major, alpha);
    return run<8, 8, 4, double, COL, COL>(A, B, C, m, n, k, wmma::mem_col_major, alpha);
}

// variant 0: A row, B column, C row-major; 1: A column, B row, C column-major
extern "C" int gemm_tf32(const float* A, const float* B, float* C, int m, int n, int k, int variant, float alpha) {
    if (variant == 0) return run<16, 16, 8, wmma::precision::tf32, ROW, COL>(A, B, C, m, n, k, wmma::mem_row_major, alpha);
    return run<16, 16, 8, wmma::precision::tf32, COL, ROW>(A, B, C, m, n, k, wmma::mem_col_major, alpha);
}

// variant 0: m16n16k16, A row, B row, C row-major; 1: m32n8k16, A column, B column, C column-major
extern "C" int gemm_f16(const __half* A, const __half* B, float* C, int m, int n, int k, int variant, float alpha) {
    if (variant == 0) return run<16, 16, 16, __half, ROW, ROW>(A, B, C, m, n, k, wmma::mem_row_major, alpha);
    return run<32, 8, 16, __half, COL, COL>(A, B, C, m, n, k, wmma::mem_col_major, alpha);
}

extern "C" int gemm_f64_element_order(const double* A, const double* B, double* C, int m, int n, int k) {
    double *da = nullptr, *db = nullptr, *dc = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&da, sizeof(double) * m * k));
    MSC_CUDA_CHECK(cudaMalloc(&db, sizeof(double) * k * n));
    MSC_CUDA_CHECK(cudaMalloc(&dc, sizeof(double) * m * n));
    MSC_CUDA_CHECK(cudaMemcpy(da, A, sizeof(double) * m * k, cudaMemcpyHostToDevice));
    MSC_CUDA_CHECK(cudaMemcpy(db, B, sizeof(double) * k * n, cudaMemcpyHostToDevice));
    MSC_LAUNCH(gemm_f64_by_element_order, dim3(n / 8, m / 8), 32, 0, da, db, dc, n, k);
    MSC_CUDA_CHECK(cudaMemcpy(C, dc, sizeof(double) * m * n, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(da));
    MSC_CUDA_CHECK(cudaFree(db));
    MSC_CUDA_CHECK(cudaFree(dc));
    return 0;
}
