/* MSC_LAUNCH_INDEXED (msc_cuda.h) launches a kernel templated on its index type with
 * 32-bit indices up to MSC_INDEX32_POINTS points and 64-bit ones above; under the
 * emulator with 64-bit ones wherever MSC_CUDA_EMU_INDEX is "64"
 * (tests/test_cuda_emulator.py). The kernel writes its index type's size. */
#include "msc_cuda.h"

template <typename index_t>
__global__ void index_bytes(int* out, const index_t points) {
    out[0] = points > 0 ? (int)sizeof(index_t) : -1;
}

extern "C" int run_index_bytes(int* host, long points) {
    int* out = 0;
    MSC_CUDA_CHECK(cudaMalloc((void**)&out, sizeof(int)));
    MSC_LAUNCH_INDEXED(index_bytes, points, dim3(1), dim3(1), 0, out, points);
    MSC_CUDA_CHECK(cudaMemcpy(host, out, sizeof(int), cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(out));
    return 0;
}
