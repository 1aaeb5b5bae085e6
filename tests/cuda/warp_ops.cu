// Warp collectives (shuffle reduction, ballot, scan, segmented broadcast),
// dynamic shared memory beyond the 48 KiB default, and the launch errors the
// runtime reports for over-limit configurations.
#include "msc_cuda.h"

__device__ double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}

// partial[b] = sum of x over block b's grid-stride share; positives[b] = count of x > 0 (ballots)
__global__ void block_sum(const double* __restrict__ x, int n, double* partial, int* positives) {
    MSC_DYNAMIC_SHARED(double, warp_sums);
    __shared__ int counts[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    double v = 0.0;
    int count = 0;
    for (int base = blockIdx.x * blockDim.x; base < n; base += gridDim.x * blockDim.x) {  // uniform rounds
        const int i = base + threadIdx.x;
        const bool in = i < n;
        count += __popc(__ballot_sync(0xffffffffu, in && x[i] > 0.0));  // the whole warp's count
        if (in) v += x[i];
    }
    v = warp_sum(v);
    if (lane == 0) {
        warp_sums[warp] = v;
        counts[warp] = count;
    }
    __syncthreads();
    if (warp == 0) {
        double s = lane < warps ? warp_sums[lane] : 0.0;
        int c = lane < warps ? counts[lane] : 0;
        for (int mask = 16; mask > 0; mask /= 2) {
            s += __shfl_xor_sync(0xffffffffu, s, mask);
            c += __shfl_xor_sync(0xffffffffu, c, mask);
        }
        if (lane == 0) {
            partial[blockIdx.x] = s;
            positives[blockIdx.x] = c;
        }
    }
}

extern "C" int reduce(const double* x, int n, int blocks, int threads, double* partial, int* positives) {
    double *dx = nullptr, *dp = nullptr;
    int* dc = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&dx, sizeof(double) * n));
    MSC_CUDA_CHECK(cudaMalloc(&dp, sizeof(double) * blocks));
    MSC_CUDA_CHECK(cudaMalloc(&dc, sizeof(int) * blocks));
    MSC_CUDA_CHECK(cudaMemcpy(dx, x, sizeof(double) * n, cudaMemcpyHostToDevice));
    MSC_LAUNCH(block_sum, blocks, threads, sizeof(double) * 32, dx, n, dp, dc);
    MSC_CUDA_CHECK(cudaMemcpy(partial, dp, sizeof(double) * blocks, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaMemcpy(positives, dc, sizeof(int) * blocks, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(dx));
    MSC_CUDA_CHECK(cudaFree(dp));
    MSC_CUDA_CHECK(cudaFree(dc));
    return 0;
}

// scan[i]: inclusive prefix sum of v within its warp; head[i]: v at the first lane of i's 8-lane segment
__global__ void warp_scan(const int* v, int* scan, int* head) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x % 32;
    int s = v[i];
    for (int delta = 1; delta < 32; delta *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, s, delta);
        if (lane >= delta) s += up;
    }
    scan[i] = s;
    head[i] = __shfl_sync(0xffffffffu, v[i], 0, 8);
}

extern "C" int scan(const int* v, int* out_scan, int* out_head, int n) {
    int *dv = nullptr, *ds = nullptr, *dh = nullptr;
    MSC_CUDA_CHECK(cudaMalloc(&dv, sizeof(int) * n));
    MSC_CUDA_CHECK(cudaMalloc(&ds, sizeof(int) * n));
    MSC_CUDA_CHECK(cudaMalloc(&dh, sizeof(int) * n));
    MSC_CUDA_CHECK(cudaMemcpy(dv, v, sizeof(int) * n, cudaMemcpyHostToDevice));
    MSC_LAUNCH(warp_scan, n / 64, 64, 0, dv, ds, dh);
    MSC_CUDA_CHECK(cudaMemcpy(out_scan, ds, sizeof(int) * n, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaMemcpy(out_head, dh, sizeof(int) * n, cudaMemcpyDeviceToHost));
    MSC_CUDA_CHECK(cudaFree(dv));
    MSC_CUDA_CHECK(cudaFree(ds));
    MSC_CUDA_CHECK(cudaFree(dh));
    return 0;
}

// writes the last byte of its dynamic shared memory and copies it out
__global__ void touch_shared(unsigned char* out, size_t bytes) {
    MSC_DYNAMIC_SHARED(unsigned char, mem);
    if (threadIdx.x == 0) mem[bytes - 1] = 42;
    __syncthreads();
    if (threadIdx.x == 0) out[0] = mem[bytes - 1];
}

static int launch(dim3 block, size_t shared, unsigned char* out) {
    MSC_LAUNCH(touch_shared, 1, block, shared, out, shared);
    return 0;
}

// codes[i]: what the runtime answers to each over-limit (or allowed) launch and attribute
extern "C" int launch_errors(int* codes) {
    unsigned char* out = nullptr;
    unsigned char seen = 0;
    MSC_CUDA_CHECK(cudaMalloc(&out, 1));
    codes[0] = launch(dim3(1025), 64, out);
    codes[1] = launch(dim3(32, 1, 65), 64, out);
    codes[2] = launch(dim3(32), 48 * 1024 + 8, out);
    codes[3] = (int)cudaFuncSetAttribute(touch_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024);
    codes[4] = launch(dim3(32), 200 * 1024, out);
    MSC_CUDA_CHECK(cudaMemcpy(&seen, out, 1, cudaMemcpyDeviceToHost));
    codes[5] = seen;
    codes[6] = (int)cudaFuncSetAttribute(touch_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024);
    codes[7] = (int)cudaGetLastError();  // the failed attribute call's error, then cleared
    codes[8] = (int)cudaGetLastError();
    int optin = 0;
    MSC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    codes[9] = optin;
    MSC_CUDA_CHECK(cudaFree(out));
    return 0;
}
