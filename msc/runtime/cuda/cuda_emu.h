/* cuda_emu.h: a CPU emulator for the CUDA subset msc generates (C++17): this header, which
 * generated sources include, and its runtime cuda_emu.cpp, compiled once and linked into each
 * emulated library or program (msc/runtime/cuda_emu.py builds and caches it).
 *
 * Included by msc_cuda.h under -DMSC_CUDA_EMULATE; compile with g++ -std=c++17
 * -fno-gnu-unique. Everything the emulator defines is hidden: each shared library
 * keeps its own emulator state.
 *
 * Execution model. A launch runs its blocks one after another on the calling
 * OS thread. The threads of a block are fibers (cuda_emu.cpp: "Fibers"), run in order of
 * their linear index, each until it blocks: at __syncthreads (a barrier of
 * the whole block) or at a warp collective (__shfl*_sync, __ballot_sync,
 * __all/__any_sync, __syncwarp, wmma load/store/mma). So a read of shared
 * memory that a missing barrier leaves unordered sees the value from before
 * the write, deterministically: thread 0 runs ahead of its neighbours.
 * The wmma memory collectives order nothing between lanes, as on the
 * hardware: load_matrix_sync reads a lane's elements when that lane arrives,
 * store_matrix_sync writes them when it leaves, so a lane that reads what
 * other lanes stored without __syncwarp (or a barrier) first sees old values.
 * Static __shared__ variables live in one linker section that is filled
 * with 0xff bytes (NaN for floating point) before every block, as is the
 * dynamic shared memory; a block that reads shared memory it did not write
 * sees NaN. Shared arrays declared with MSC_SHARED (as msc's generated code
 * declares them) live in an arena, each between guard bands of 256 poisoned
 * bytes, as does the dynamic shared memory: a byte of a guard band changed
 * by a block stops the launch, naming the array (and, in counting builds,
 * so does any load or store that reaches outside the array, when it runs).
 *
 * Block order. With MSC_CUDA_EMU_BLOCKS=reverse in the environment (read at
 * every launch; msc/runtime/cuda_emu.py: BLOCK_ORDER) a launch runs its blocks
 * last first, and a byte of cudaMalloc memory that two of its blocks both
 * change is an error (blocks run in any order on a device, so which write
 * lands is undefined; atomicAdd's bytes are exempt). Each block's changes
 * are found by comparing the allocations after it with a copy from before
 * it, so a write of the value already there is not seen. Unset or
 * "forward": blocks in order of their linear index, writes not checked.
 *
 * Thread order. A block runs warp by warp: each warp as far as it goes (to a
 * __syncthreads, or its end) before the next, its lanes in order; a warp
 * collective makes its lanes wait for each other, not for other warps. With
 * MSC_CUDA_EMU_THREADS=reverse (read at every launch; cuda_emu.py:
 * THREAD_ORDER) the warps and their lanes run last first: a thread then runs
 * ahead of its lower neighbours, so a read of what a lower thread (or warp)
 * writes, without a barrier between, sees the value from before (or shared
 * memory's NaN poison) instead of passing by luck, as it does in the forward
 * order.
 *
 * Detected errors (each stops the launch; the error is sticky, as a kernel
 * fault is on a device: cudaGetLastError, cudaDeviceSynchronize and every
 * later call return cudaErrorLaunchFailure; the diagnosis goes to stderr):
 *   (with MSC_CUDA_EMU_BLOCKS=reverse) two blocks of a launch changing one byte;
 *   a thread that exits, or waits at another barrier or collective, while
 *   others wait at __syncthreads; __syncthreads reached at different places;
 *   a warp collective that a lane of its mask never calls, lanes that call
 *   different collectives or pass different arguments to a wmma call, a mask
 *   that names lanes a partial warp lacks, a shuffle from a lane outside the
 *   mask; wmma pointers not 256-bit aligned or ldm not a multiple of 16 bytes;
 *   a shared array's guard band written (any access outside an MSC_SHARED
 *   array or the dynamic shared memory, in counting builds); MSC_SHARED
 *   arrays of a block over 48 KiB.
 * Launch errors, as the runtime reports them (cudaGetLastError): more than
 * 1024 threads or a block dimension over its limit (InvalidConfiguration),
 * dynamic shared memory over the kernel's limit, 48 KiB unless raised by
 * cudaFuncSetAttribute up to 227 KiB (InvalidValue); an unknown
 * MSC_CUDA_EMU_BLOCKS, MSC_CUDA_EMU_THREADS or MSC_CUDA_EMU_INDEX (InvalidValue).
 *
 * Counters. The kernel is built with g++'s -fsanitize=kernel-address and
 * a call per access (msc/runtime/cuda_emu.py), so every load and store the
 * compiled kernel makes calls __asan_{load,store}N_noabort, which the runtime
 * defines (built with -DMSC_CUDA_EMU_COUNT); those count, while
 * a fiber runs kernel code, what decides a GPU's speed (msc_emu_counters):
 *   global: bytes loaded and stored by threads; sectors, the distinct 32-byte
 *   sectors of each warp-level access (the k-th execution of one instruction
 *   by the lanes of a warp), summed: the coalescing model; dram bytes, the
 *   distinct sectors touched per launch, summed over launches: an ideal-L2
 *   model of DRAM traffic (each sector read or written once per launch);
 *   shared: wavefronts per warp-level access (the most distinct 4-byte words
 *   any of the 32 banks must serve, at least the request's bytes / 128) and
 *   the ideal for those accesses (bytes / 128, rounded up); launches. A wmma
 *   load_matrix_sync or store_matrix_sync is one warp-level access over the
 *   whole fragment (its rows at the ldm pitch), whatever lane holds which
 *   element: the emulator's element order is its own, not the hardware's.
 *   mma flops: 2 m n k per warp's mma_sync (the tensor cores' work).
 * The model assumes lanes run in lockstep (the k-th execution of an
 * instruction by each lane is one access) and g++'s loads stand for nvcc's
 * (the same source, both optimising; registers and caching may differ).
 *
 * Not modelled: timing, concurrency between blocks (they run in sequence;
 * reads of what another block of the launch writes see it or not by order),
 * memory spaces (host and device memory are the same; device pointers are
 * checked only by cudaMemcpy/cudaMemset/cudaFree), out-of-bounds accesses of
 * global memory and of plain __shared__ variables, the static shared memory
 * limit of plain __shared__ variables (nvcc checks it), registers.
 * nvcuda::wmma fragments hold their elements in a deliberately scrambled
 * order, so code that relies on the element order gives wrong results.
 */
#ifndef MSC_CUDA_EMU_H
#define MSC_CUDA_EMU_H

/* The source line a diagnostic names (a barrier's, a shuffle's); tools/same_machine_code.py
 * defines it as 0, so that code moved to other lines compiles to the same machine code. */
#ifndef MSC_EMU_LINE
#define MSC_EMU_LINE __builtin_LINE()
#endif

#if !defined(__cplusplus) || __cplusplus < 201703L
#error "cuda_emu.h needs C++17 (g++ -std=c++17)"
#endif

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#pragma GCC visibility push(hidden)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__
#define __align__(n) __attribute__((aligned(n)))
/* every static shared variable goes to one section, poisoned before each block */
#define __shared__ __attribute__((section("msc_cuda_shared"))) static

/* ------------------------------------------------------------------ types */

struct uint3 {
    unsigned x, y, z;
};

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

inline uint3 threadIdx;
inline uint3 blockIdx;
inline dim3 blockDim;
inline dim3 gridDim;
constexpr int warpSize = 32;

typedef _Float16 __half;
inline __half __float2half(float f) { return static_cast<__half>(f); }
inline __half __float2half_rn(float f) { return static_cast<__half>(f); }
inline float __half2float(__half h) { return static_cast<float>(h); }

enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidDeviceFunction = 98,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrTotalConstantMemory = 9,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxRegistersPerBlock = 12,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

struct CUstream_st {};
typedef CUstream_st* cudaStream_t;
struct CUevent_st;  // cuda_emu.cpp's
typedef CUevent_st* cudaEvent_t;

namespace msc_emu {

/* What the device code and the templates below call; cuda_emu.cpp defines them. */

/* True while a fiber runs kernel code and no access is being counted: the instrumentation
 * callbacks read only this (the runtime is not instrumented; the code below that counts, a wmma
 * fragment's copy, is compiled with the kernel, so it turns this off while it counts). */
inline bool listening = false;

/* One access by the running thread: the k-th execution of `instruction`, or with `same`
 * more of the execution noted last (a wmma fragment's elements: one access of the warp). */
void note_access(const void* p, unsigned bytes, bool store, const void* instruction, bool same = false);
/* a warp's mma_sync: its flops into the counters */
void count_mma(long long flops);
cudaError_t set_error(cudaError_t e);
/* Stop the launch with an error (printf's format); called on a fiber, it never returns. */
[[noreturn]] void fault_with(const char* format, ...) __attribute__((format(printf, 1, 2)));
void* dynamic_shared();
/* MSC_SHARED: the running block's array `name` of `bytes` (every thread of the block gets the same one) */
void* shared_array(const char* name, size_t bytes);
/* __syncthreads: a barrier of the block's threads, all at one place in the code */
void block_barrier(const char* file, int line);
typedef void (*Combine)(void* const* lanes, unsigned mask);
/* A warp collective: wait until every lane of `mask` has called `name` with the same
   `key`; the last to arrive runs `combine` over the lanes' requests. */
void warp_collective(const char* name, unsigned mask, uint64_t key, void* request, Combine combine,
                     const char* file, int line);
int lane_id();
/* A shuffle of up to 8 bytes: the value of lane `source` (-1: the own `value`) */
uint64_t shuffle_bits(const char* name, unsigned mask, uint64_t value, int source, int width, const char* file,
                      int line);
unsigned vote(const char* name, unsigned mask, int predicate, const char* file, int line);
void note_atomic(const void* p, size_t bytes);
/* MSC_LAUNCH_INDEXED (msc_cuda.h): whether MSC_CUDA_EMU_INDEX asks for 64-bit indices whatever the
   size ("64"; unset or "32": 32-bit where the size allows, as on a GPU), so that tests run both */
bool wide_indices();
/* Run body(arg) as each thread of grid x block, synchronously. */
void launch_erased(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared,
                   void (*body)(void*), void* arg);

template <class Body>
void call_body(void* body) {
    (*static_cast<Body*>(body))();
}

/* MSC_LAUNCH: run kernel(args...) over grid x block, synchronously. */
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args&&... args) {
    auto body = [&]() { kernel(args...); };
    launch_erased(name, reinterpret_cast<const void*>(kernel), grid, block, shared, &call_body<decltype(body)>,
                  &body);
}

}  // namespace msc_emu

/* ---------------------------------------------------------- device code */

inline void __syncthreads(const char* file = __builtin_FILE(), int line = MSC_EMU_LINE) {
    msc_emu::block_barrier(file, line);
}

namespace msc_emu {
template <class T>
T shuffle(const char* name, unsigned mask, T var, int source, int width, const char* file, int line) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of up to 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &var, sizeof(T));
    bits = shuffle_bits(name, mask, bits, source, width, file, line);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}
}  // namespace msc_emu

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, const char* file = __builtin_FILE(),
              int line = MSC_EMU_LINE) {
    const int lane = msc_emu::lane_id(), base = lane / width * width;
    return msc_emu::shuffle("__shfl_sync", mask, var, base + ((src_lane % width + width) % width), width, file, line);
}

template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                 int line = MSC_EMU_LINE) {
    const int lane = msc_emu::lane_id(), base = lane / width * width;
    const int src = lane - (int)delta;
    return msc_emu::shuffle("__shfl_up_sync", mask, var, src >= base ? src : -1, width, file, line);
}

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, const char* file = __builtin_FILE(),
                   int line = MSC_EMU_LINE) {
    const int lane = msc_emu::lane_id(), base = lane / width * width;
    const int src = lane + (int)delta;
    return msc_emu::shuffle("__shfl_down_sync", mask, var, src < base + width ? src : -1, width, file, line);
}

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, const char* file = __builtin_FILE(),
                  int line = MSC_EMU_LINE) {
    const int lane = msc_emu::lane_id(), base = lane / width * width;
    const int src = lane ^ lane_mask;  // later groups are out of reach: the own value
    return msc_emu::shuffle("__shfl_xor_sync", mask, var, src < base + width ? src : -1, width, file, line);
}

inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = MSC_EMU_LINE) {
    return msc_emu::vote("__ballot_sync", mask, predicate, file, line);
}

inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = MSC_EMU_LINE) {
    return msc_emu::vote("__all_sync", mask, predicate, file, line) == mask;
}

inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = MSC_EMU_LINE) {
    return msc_emu::vote("__any_sync", mask, predicate, file, line) != 0;
}

inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = MSC_EMU_LINE) {
    msc_emu::vote("__syncwarp", mask, 0, file, line);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }

template <class T>
inline T __ldg(const T* p) {
    return *p;
}

/* blocks run one at a time on one OS thread: plain read-modify-writes are atomic */
template <class T>
inline T atomicAdd(T* address, T value) {
    T old = *address;
    *address = old + value;
    msc_emu::note_atomic(address, sizeof(T));
    return old;
}

/* ------------------------------------------------------------- host API */

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);

template <class... Params>
inline cudaError_t cudaFuncSetAttribute(void (*func)(Params...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

cudaError_t cudaMalloc(void** ptr, size_t bytes);

template <class T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}

cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);

template <class T>
inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t bytes, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (offset + bytes > sizeof(T) || (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice))
        return msc_emu::set_error(cudaErrorInvalidValue);
    memcpy(const_cast<char*>(reinterpret_cast<const char*>(&symbol)) + offset, src, bytes);
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

/* ------------------------------------------------------- nvcuda::wmma */

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

/* cvt.rna.tf32.f32: keep 10 mantissa bits, round half away from zero */
inline float __float_to_tf32(float in) {
    if (!std::isfinite(in)) return in;
    uint32_t bits;
    memcpy(&bits, &in, 4);
    bits = (bits + 0x1000u) & 0xffffe000u;
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

namespace detail {

template <class T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

template <class Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> { enum { rows = M, cols = K, id = 1 }; };
template <int M, int N, int K> struct dims<matrix_b, M, N, K> { enum { rows = K, cols = N, id = 2 }; };
template <int M, int N, int K> struct dims<accumulator, M, N, K> { enum { rows = M, cols = N, id = 3 }; };

/* the element counts per lane of the real fragments (a and b are replicated for some shapes) */
template <class Use, int M, int N, int K, class T>
constexpr int elements() {
    constexpr bool acc = std::is_same_v<Use, accumulator>;
    if constexpr (M == 8 && N == 8 && K == 4) {
        static_assert(std::is_same_v<T, double>, "wmma m8n8k4 is the fp64 shape: double fragments");
        return acc ? 2 : 1;
    } else if constexpr (M == 16 && N == 16 && K == 8) {
        static_assert(acc ? std::is_same_v<T, float> : std::is_same_v<T, precision::tf32>,
                      "wmma m16n16k8 is the tf32 shape: precision::tf32 operands, a float accumulator");
        return acc ? 8 : 4;
    } else if constexpr ((M == 16 && N == 16 && K == 16) || (M == 32 && N == 8 && K == 16) ||
                         (M == 8 && N == 32 && K == 16)) {
        static_assert(acc ? std::is_same_v<T, float> : std::is_same_v<T, __half>,
                      "the emulator's fp16 wmma shapes take __half operands and a float accumulator");
        return acc ? 8 : 16;
    } else {
        static_assert(M < 0, "wmma shape not emulated: m8n8k4 (double), m16n16k8 (tf32), m16n16k16, "
                             "m32n8k16, m8n32k16 (half)");
        return 0;
    }
}

}  // namespace detail

template <class Use, int M, int N, int K, class T, class Layout = void>
class fragment {
    static_assert(std::is_same_v<Use, accumulator> == std::is_same_v<Layout, void>,
                  "matrix_a/matrix_b fragments name row_major or col_major; accumulators name no layout");

  public:
    typedef typename detail::storage<T>::type element_type;
    enum { num_elements = detail::elements<Use, M, N, K, T>() };
    element_type x[num_elements];
};

namespace detail {

/* Element e of lane l holds matrix entry p = (a * (l * num + e) + b) mod size, row-major:
   a bijection (size a power of 2, a odd), unlike any hardware layout. */
template <class Use, int M, int N, int K>
inline int position(int lane, int e, int num) {
    constexpr int size = dims<Use, M, N, K>::rows * dims<Use, M, N, K>::cols;
    constexpr int a = 2 * (7 + 11 * dims<Use, M, N, K>::id) + 1, b = 5 * dims<Use, M, N, K>::id;
    return (int)(((long)a * (lane * num + e) + b) % size);
}

template <class Frag>
struct MemRequest {
    Frag* frag;
    void* pointer;
    unsigned ldm;
    bool col_major;
};

/* One lane's part of a load or store: the elements its fragment holds. */
template <class Use, int M, int N, int K, class T, class L, bool Store>
inline void lane_copy(const MemRequest<fragment<Use, M, N, K, T, L>>& q, int lane) {
    typedef fragment<Use, M, N, K, T, L> Frag;
    typedef typename Frag::element_type E;
    constexpr int cols = dims<Use, M, N, K>::cols;
    E* base = static_cast<E*>(q.pointer);
#ifdef MSC_CUDA_EMU_COUNT
    /* counted as one access of the warp over the whole fragment: the element order is the emulator's */
    const bool counted = msc_emu::listening;
    msc_emu::listening = false;
#endif
    for (int e = 0; e < Frag::num_elements; ++e) {
        const int p = position<Use, M, N, K>(lane, e, Frag::num_elements), r = p / cols, c = p % cols;
        E& cell = base[q.col_major ? (size_t)c * q.ldm + r : (size_t)r * q.ldm + c];
        if (Store)
            cell = q.frag->x[e];
        else
            q.frag->x[e] = cell;
#ifdef MSC_CUDA_EMU_COUNT
        if (counted)
            msc_emu::note_access(&cell, sizeof(E), Store,
                                 reinterpret_cast<const void*>(&lane_copy<Use, M, N, K, T, L, Store>), e > 0);
#endif
    }
#ifdef MSC_CUDA_EMU_COUNT
    msc_emu::listening = counted;
#endif
}

inline void no_combine(void* const*, unsigned) {}

template <class Use, int M, int N, int K, class T, class L, bool Store>
inline void memory_op(const char* name, fragment<Use, M, N, K, T, L>* f, const void* p, unsigned ldm,
                      bool col_major, const char* file, int line) {
    typedef fragment<Use, M, N, K, T, L> Frag;
    const size_t bytes = sizeof(typename Frag::element_type);
    if ((uintptr_t)p % 32 != 0)
        msc_emu::fault_with("%s at %s:%d: the pointer is not 256-bit (32-byte) aligned", name, file, line);
    if (ldm * bytes % 16 != 0)
        msc_emu::fault_with("%s at %s:%d: ldm %u is not a multiple of 16 bytes (%zu elements)", name, file, line,
                            ldm, 16 / bytes);
    MemRequest<Frag> q{f, const_cast<void*>(p), ldm, col_major};
    const uint64_t key = (uint64_t)(uintptr_t)p * 31 + ldm * 2 + (col_major ? 1 : 0);
    /* a load reads on arrival, a store writes on leaving: the collective checks the lanes agree, orders nothing */
    if (!Store) lane_copy<Use, M, N, K, T, L, false>(q, msc_emu::lane_id());
    msc_emu::warp_collective(name, 0xffffffffu, key, &q, no_combine, file, line);
    if (Store) lane_copy<Use, M, N, K, T, L, true>(q, msc_emu::lane_id());
}

template <class A, class B, class C, class D>
struct MmaRequest {
    D* d;
    const A* a;
    const B* b;
    const C* c;
};

template <class T>
inline double operand(T v) {
    if constexpr (std::is_same_v<T, float>) {  // tf32: the unit reads the top 19 bits
        uint32_t bits;
        memcpy(&bits, &v, 4);
        bits &= 0xffffe000u;
        float t;
        memcpy(&t, &bits, 4);
        return (double)t;
    } else {
        return (double)v;
    }
}

template <int M, int N, int K, class T, class LA, class LB, class Acc>
inline void mma_combine(void* const* lanes, unsigned) {
    typedef fragment<matrix_a, M, N, K, T, LA> A;
    typedef fragment<matrix_b, M, N, K, T, LB> B;
    typedef fragment<accumulator, M, N, K, Acc> C;
    typedef MmaRequest<A, B, C, C> Q;
    double a[M][K], b[K][N];
    Acc c[M][N];
    for (int i = 0; i < M * K; ++i) {  // lanes hold replicas of a and b: read the first copy
        const int l = i / A::num_elements, e = i % A::num_elements, p = position<matrix_a, M, N, K>(l, e, A::num_elements);
        a[p / K][p % K] = operand(static_cast<Q*>(lanes[l])->a->x[e]);
    }
    for (int i = 0; i < K * N; ++i) {
        const int l = i / B::num_elements, e = i % B::num_elements, p = position<matrix_b, M, N, K>(l, e, B::num_elements);
        b[p / N][p % N] = operand(static_cast<Q*>(lanes[l])->b->x[e]);
    }
    for (int l = 0; l < 32; ++l)
        for (int e = 0; e < C::num_elements; ++e) {
            const int p = position<accumulator, M, N, K>(l, e, C::num_elements);
            c[p / N][p % N] = static_cast<Q*>(lanes[l])->c->x[e];
        }
#ifdef MSC_CUDA_EMU_COUNT
    msc_emu::count_mma(2LL * M * N * K);
#endif
    /* each block product summed exactly (in double), rounded once to the accumulator type, then added */
    for (int l = 0; l < 32; ++l)
        for (int e = 0; e < C::num_elements; ++e) {
            const int p = position<accumulator, M, N, K>(l, e, C::num_elements), i = p / N, j = p % N;
            double s = 0;
            for (int k = 0; k < K; ++k) s += a[i][k] * b[k][j];
            static_cast<Q*>(lanes[l])->d->x[e] = static_cast<Acc>(static_cast<Acc>(s) + c[i][j]);
        }
}

}  // namespace detail

template <class Use, int M, int N, int K, class T, class L>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, typename fragment<Use, M, N, K, T, L>::element_type v) {
    for (int e = 0; e < fragment<Use, M, N, K, T, L>::num_elements; ++e) f.x[e] = v;
}

template <class Use, int M, int N, int K, class T, class L>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f,
                             const typename fragment<Use, M, N, K, T, L>::element_type* p, unsigned ldm,
                             const char* file = __builtin_FILE(), int line = MSC_EMU_LINE) {
    static_assert(!std::is_same_v<L, void>, "an accumulator's load_matrix_sync takes a layout_t");
    detail::memory_op<Use, M, N, K, T, L, false>("load_matrix_sync", &f, p, ldm, std::is_same_v<L, col_major>, file,
                                                 line);
}

template <int M, int N, int K, class T>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout,
                             const char* file = __builtin_FILE(), int line = MSC_EMU_LINE) {
    detail::memory_op<accumulator, M, N, K, T, void, false>("load_matrix_sync", &f, p, ldm, layout == mem_col_major,
                                                            file, line);
}

template <int M, int N, int K, class T>
inline void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                              const char* file = __builtin_FILE(), int line = MSC_EMU_LINE) {
    detail::memory_op<accumulator, M, N, K, T, void, true>("store_matrix_sync",
                                                           const_cast<fragment<accumulator, M, N, K, T>*>(&f), p, ldm,
                                                           layout == mem_col_major, file, line);
}

template <int M, int N, int K, class T, class LA, class LB, class Acc>
inline void mma_sync(fragment<accumulator, M, N, K, Acc>& d, const fragment<matrix_a, M, N, K, T, LA>& a,
                     const fragment<matrix_b, M, N, K, T, LB>& b, const fragment<accumulator, M, N, K, Acc>& c,
                     const char* file = __builtin_FILE(), int line = MSC_EMU_LINE) {
    typedef detail::MmaRequest<fragment<matrix_a, M, N, K, T, LA>, fragment<matrix_b, M, N, K, T, LB>,
                               fragment<accumulator, M, N, K, Acc>, fragment<accumulator, M, N, K, Acc>>
        Q;
    Q q{&d, &a, &b, &c};
    msc_emu::warp_collective("mma_sync", 0xffffffffu, 0, &q,
                             detail::mma_combine<M, N, K, T, LA, LB, Acc>, file, line);
}

}  // namespace wmma
}  // namespace nvcuda

#pragma GCC visibility pop

#endif /* MSC_CUDA_EMU_H */
