/* cuda_emu.h: a CPU emulator for the CUDA subset msc generates (header only, C++17).
 *
 * Included by msc_cuda.h under -DMSC_CUDA_EMULATE; compile with g++ -std=c++17
 * -fno-gnu-unique (each shared library keeps its own emulator state).
 *
 * Execution model. A launch runs its blocks one after another on the calling
 * OS thread. The threads of a block are fibers (below: "Fibers"), run in order of
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
 * MSC_CUDA_EMU_BLOCKS (InvalidValue).
 *
 * Counters. The library is built with g++'s -fsanitize=kernel-address and
 * a call per access (msc/runtime/cuda_emu.py), so every load and store the
 * compiled kernel makes calls __asan_{load,store}N_noabort; those count, while
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
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

/* Fibers: a saved execution context (`Fiber`), made on a stack to enter a function that never
 * returns (fiber_make), and left for another one (fiber_switch; fiber_jump abandons the one it
 * leaves). On x86-64 a switch saves the callee-saved registers and the SSE and x87 control words
 * on the stack it leaves, a handful of instructions: ucontext's swapcontext also saves and
 * restores the signal mask, a system call at every switch, which took most of an emulated
 * launch's time (a block's threads switch at every barrier and warp collective). Elsewhere,
 * or with -DMSC_CUDA_EMU_UCONTEXT, fibers are ucontexts. */
#if defined(__x86_64__) && !defined(MSC_CUDA_EMU_UCONTEXT)
extern "C" {
/* Save the running context on its stack and its stack pointer in *save_sp; run the one at load_sp. */
__attribute__((visibility("hidden"))) void msc_emu_switch(void** save_sp, void* load_sp);
/* A new fiber's first return address: calls the entry function fiber_make left in r12. */
__attribute__((visibility("hidden"))) void msc_emu_fiber_start();
}
/* weak: a program of several translation units that include this header links one copy */
__asm__(
    ".text\n"
    ".weak msc_emu_switch\n"
    ".hidden msc_emu_switch\n"
    ".type msc_emu_switch, @function\n"
    "msc_emu_switch:\n"
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r12\n"
    "    pushq %r13\n"
    "    pushq %r14\n"
    "    pushq %r15\n"
    "    subq $8, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $8, %rsp\n"
    "    popq %r15\n"
    "    popq %r14\n"
    "    popq %r13\n"
    "    popq %r12\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    ".size msc_emu_switch, .-msc_emu_switch\n"
    ".weak msc_emu_fiber_start\n"
    ".hidden msc_emu_fiber_start\n"
    ".type msc_emu_fiber_start, @function\n"
    "msc_emu_fiber_start:\n"
    "    callq *%r12\n"
    "    ud2\n"
    ".size msc_emu_fiber_start, .-msc_emu_fiber_start\n");

namespace msc_emu {
struct Fiber {
    void* sp = nullptr;
};

/* `fiber` enters `entry` (which never returns) on `stack` when first switched to: the frame
 * msc_emu_switch pops (control words, r15..r12, rbx, rbp, return address), laid out so that
 * entry is called with the stack aligned as the ABI asks. */
inline void fiber_make(Fiber& fiber, char* stack, size_t bytes, void (*entry)()) {
    uintptr_t top = reinterpret_cast<uintptr_t>(stack + bytes) & ~static_cast<uintptr_t>(15);
    void** frame = reinterpret_cast<void**>(top) - 10;  // 16 bytes spare above the return address
    uint32_t mxcsr;
    uint16_t fcw;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(fcw));
    memset(frame, 0, 10 * sizeof(void*));
    memcpy(frame, &mxcsr, sizeof mxcsr);
    memcpy(reinterpret_cast<char*>(frame) + 4, &fcw, sizeof fcw);
    frame[4] = reinterpret_cast<void*>(entry);  // r12
    frame[7] = reinterpret_cast<void*>(&msc_emu_fiber_start);
    fiber.sp = frame;
}

inline void fiber_switch(Fiber& from, Fiber& to) { msc_emu_switch(&from.sp, to.sp); }

[[noreturn]] inline void fiber_jump(Fiber& to) {
    void* abandoned;
    msc_emu_switch(&abandoned, to.sp);
    abort();
}
}  // namespace msc_emu
#else
#include <ucontext.h>

namespace msc_emu {
struct Fiber {
    ucontext_t ctx;
};

inline void fiber_make(Fiber& fiber, char* stack, size_t bytes, void (*entry)()) {
    static ucontext_t fresh;  // from getcontext once: it costs a system call
    static bool got = (getcontext(&fresh), true);
    (void)got;
    fiber.ctx = fresh;
    fiber.ctx.uc_stack.ss_sp = stack;
    fiber.ctx.uc_stack.ss_size = bytes;
    fiber.ctx.uc_link = nullptr;
    makecontext(&fiber.ctx, entry, 0);
}

inline void fiber_switch(Fiber& from, Fiber& to) { swapcontext(&from.ctx, &to.ctx); }

[[noreturn]] inline void fiber_jump(Fiber& to) {
    setcontext(&to.ctx);
    abort();
}
}  // namespace msc_emu
#endif

#ifndef MSC_CUDA_EMU_STACK_BYTES
#define MSC_CUDA_EMU_STACK_BYTES (256 * 1024) /* per emulated thread; a guard page below it */
#endif

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
struct CUevent_st {
    std::chrono::steady_clock::time_point when;
};
typedef CUevent_st* cudaEvent_t;

extern "C" char __start_msc_cuda_shared[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_msc_cuda_shared[] __attribute__((weak, visibility("hidden")));

namespace msc_emu {

/* the emulated device: an H100/H200 (sm_90) */
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr int kDefaultSharedPerBlock = 48 * 1024;
constexpr int kOptinSharedPerBlock = 227 * 1024;
constexpr int kSharedPerSM = 228 * 1024;
constexpr int kSMs = 132;
/* guard bands: bytes of poison before and after each shared array (MSC_SHARED) and the dynamic shared memory */
constexpr size_t kSharedGuard = 256;
constexpr size_t kSharedArena = 4 << 20;  // room for a block's MSC_SHARED arrays and their guard bands

enum class State { Ready, AtBarrier, AtWarp, Done };

struct Thread {
    Fiber fiber;
    State state = State::Ready;
    uint3 idx{0, 0, 0};
    char* stack = nullptr;
    const char* file = "";  // where it waits
    int line = 0;
};

typedef void (*Combine)(void* const* lanes, unsigned mask);

struct WarpOp {  // the collective a warp's lanes are gathering at
    const char* name = nullptr;
    const char* file = "";
    int line = 0;
    unsigned mask = 0, arrived = 0;
    uint64_t key = 0;
    Combine combine = nullptr;
    void* lane[32] = {};
};

struct SharedArray {  // one MSC_SHARED array of the running block
    const char* name;
    char* start;
    size_t bytes;
};

struct Runtime {
    std::mutex launching;
    std::vector<Thread> threads;
    std::vector<WarpOp> warps;
    std::vector<char*> free_stacks;
    Fiber scheduler;
    unsigned current = 0;
    unsigned barrier_arrived = 0;
    unsigned long barriers = 0;       // the __syncthreads the running block has passed
    const std::function<void()>* body = nullptr;
    const char* kernel = "";
    char* dynamic_shared = nullptr;
    size_t dynamic_capacity = 0;
    std::vector<char> arena = std::vector<char>(kSharedArena, (char)0xff);  // the MSC_SHARED arrays, poisoned
    std::vector<SharedArray> arrays;  // the running block's, in the arena in order, each between guard bands
    size_t arena_used = 0;            // bytes of the arena the running block's arrays reach
    bool faulted = false;
    std::string fault;
    cudaError_t last_error = cudaSuccess;    // cleared by cudaGetLastError
    cudaError_t sticky_error = cudaSuccess;  // a kernel fault: never cleared
    std::map<const void*, int> max_dynamic_shared;
    std::map<const char*, size_t, std::greater<const char*>> allocations;  // start -> bytes
    bool check_writes = false;        // MSC_CUDA_EMU_BLOCKS=reverse, during a launch
    bool reverse_threads = false;     // MSC_CUDA_EMU_THREADS=reverse: a block's threads run last first
    std::set<const char*> atomic_bytes;  // bytes atomicAdd changed in this launch (exempt from the check)
};

inline Runtime& rt() {
    static Runtime r;
    return r;
}

/* -- access counters (see the header comment) -- */

struct Totals {  // cumulative over the library's life; msc_emu_counters reads them
    long long load_bytes = 0, store_bytes = 0, sectors = 0, dram_bytes = 0;
    long long shared_wavefronts = 0, shared_ideal = 0, shared_accesses = 0, launches = 0;
    long long mma_flops = 0;  // 2 m n k per warp's mma_sync
};

struct WarpAccess {  // what the lanes of one warp did at the k-th execution of one instruction
    std::vector<uint64_t> units;  // global: sectors; shared: 4-byte words
    unsigned bytes = 0;
    bool shared = false;
};

struct AccessKey {  // the k-th execution of an instruction by the lanes of a warp
    unsigned warp;
    const void* instruction;
    uint32_t k;
    bool operator==(const AccessKey& o) const { return warp == o.warp && instruction == o.instruction && k == o.k; }
};

struct AccessKeyHash {
    size_t operator()(const AccessKey& a) const {
        return std::hash<const void*>()(a.instruction) ^ ((size_t)a.warp * 0x9e3779b97f4a7c15ull) ^ ((size_t)a.k << 20);
    }
};

struct Region {  // a cudaMalloc allocation (256-byte aligned)
    const char* start;
    size_t bytes;
    std::vector<uint64_t> touched;  // one bit per 32-byte sector, cleared after each launch
    bool dirty = false;
};

struct Counting {
    Totals totals;
    std::vector<std::vector<std::pair<const void*, uint32_t>>> executions;  // per thread: per instruction
    std::unordered_map<AccessKey, WarpAccess, AccessKeyHash> accesses;
    std::vector<Region> regions;  // the cudaMalloc allocations, with the sectors this launch touched
};

inline Counting& counting() {
    static Counting c;
    return c;
}

inline bool in_arena(const char* c) {
    const Runtime& r = rt();
    return c >= r.arena.data() && c < r.arena.data() + r.arena.size();
}

/* dynamic shared memory with its guard bands */
inline bool in_dynamic(const char* c) {
    const Runtime& r = rt();
    return r.dynamic_shared != nullptr && c >= r.dynamic_shared - kSharedGuard &&
           c < r.dynamic_shared + r.dynamic_capacity + kSharedGuard;
}

inline bool in_shared(const char* c) {
    if (__start_msc_cuda_shared != nullptr && c >= __start_msc_cuda_shared && c < __stop_msc_cuda_shared) return true;
    return in_arena(c) || in_dynamic(c);
}

[[noreturn]] inline void fault(const std::string& what);

/* "<access> at byte K of <what>, which has N bytes": an access outside a shared array, for its fault */
inline std::string outside(const char* access, unsigned bytes, long long at, const std::string& what, size_t size) {
    return std::string(access) + std::to_string(bytes) + " bytes at byte " + std::to_string(at) + " of " + what +
           ", which has " + std::to_string(size) + " bytes";
}

/* An access of `bytes` at c outside every shared array (in a guard band): a fault naming the array it missed. */
inline void check_shared_bounds(const char* c, unsigned bytes, bool store) {
    const Runtime& r = rt();
    const char* access = store ? "a store of " : "a load of ";
    if (in_dynamic(c)) {
        if (c >= r.dynamic_shared && c + bytes <= r.dynamic_shared + r.dynamic_capacity) return;
        fault(outside(access, bytes, c - r.dynamic_shared, "the dynamic shared memory", r.dynamic_capacity));
    }
    if (!in_arena(c)) return;
    const SharedArray* nearest = nullptr;
    long long distance = 0;
    for (const SharedArray& a : r.arrays) {
        if (c >= a.start && c + bytes <= a.start + a.bytes) return;
        const long long d = c < a.start ? a.start - c : c - (a.start + a.bytes) + 1;
        if (nearest == nullptr || d < distance) nearest = &a, distance = d;
    }
    if (nearest == nullptr) fault(access + std::to_string(bytes) + " bytes in shared memory no array holds");
    fault(outside(access, bytes, c - nearest->start, "shared array '" + std::string(nearest->name) + "'",
                  nearest->bytes));
}

inline Region* region_of(const char* c) {
    for (Region& g : counting().regions)  // a kernel's few allocations: a scan beats a search
        if (c >= g.start && c < g.start + g.bytes) return &g;
    return nullptr;
}

inline void add_region(const char* start, size_t bytes) {
    counting().regions.push_back(Region{start, bytes, std::vector<uint64_t>(bytes / 32 / 64 + 1)});
}

inline void remove_region(const char* start) {
    auto& regions = counting().regions;
    regions.erase(std::remove_if(regions.begin(), regions.end(), [&](const Region& g) { return g.start == start; }),
                  regions.end());
}

/* True while a fiber runs kernel code and no access is being counted: the
 * instrumentation callbacks read only this (the counting code is instrumented too). */
inline bool listening = false;

/* One access by the running thread: the k-th execution of `instruction`, or with `same`
 * more of the execution noted last (a wmma fragment's elements: one access of the warp). */
inline void note_access(const void* p, unsigned bytes, bool store, const void* instruction, bool same = false) {
    Runtime& r = rt();
    const char* c = static_cast<const char*>(p);
    const bool shared = in_shared(c);
    if (shared) check_shared_bounds(c, bytes, store);
    Region* region = shared ? nullptr : region_of(c);
    if (!shared && region == nullptr) return;  // a thread's stack, the emulator's own data
    Counting& n = counting();
    auto& mine = n.executions[r.current];
    auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& e) { return e.first == instruction; });
    if (it == mine.end()) it = mine.insert(mine.end(), {instruction, 0});
    WarpAccess& a = n.accesses[AccessKey{r.current / 32, instruction, same ? it->second - 1 : it->second++}];
    a.shared = shared;
    a.bytes += bytes;
    const uintptr_t first = (uintptr_t)c, last = first + bytes - 1;
    const unsigned unit = shared ? 4 : 32;
    for (uintptr_t u = first / unit; u <= last / unit; ++u) {
        if (std::find(a.units.begin(), a.units.end(), u) == a.units.end()) a.units.push_back(u);
        if (!shared) {
            const size_t bit = u - (uintptr_t)region->start / 32;
            region->touched[bit / 64] |= 1ull << (bit % 64);
        }
    }
    if (region != nullptr) region->dirty = true;
    if (shared) return;
    (store ? n.totals.store_bytes : n.totals.load_bytes) += bytes;
}

}  // namespace msc_emu

#ifdef MSC_CUDA_EMU_COUNT /* cuda_emu.COUNTING_FLAGS; MSC_CUDA_EMU_COUNTERS=0 builds without them */
/* What g++ -fsanitize=kernel-address calls for every load and store (with
 * asan-instrumentation-with-call-threshold=0); hidden, so that each library
 * counts its own kernels. */
#define MSC_EMU_COUNT(store, size)                                                                          \
    if (!msc_emu::listening) return;                                                                       \
    msc_emu::listening = false;                                                                            \
    msc_emu::note_access(p, (unsigned)(size), store, __builtin_return_address(0));                         \
    msc_emu::listening = true;
#define MSC_EMU_HOOK extern "C" __attribute__((visibility("hidden"), no_sanitize("kernel-address"))) void
#define MSC_EMU_ACCESS(kind, store, size) \
    MSC_EMU_HOOK __asan_##kind##size##_noabort(void* p) { MSC_EMU_COUNT(store, size) }
MSC_EMU_ACCESS(load, false, 1)
MSC_EMU_ACCESS(load, false, 2)
MSC_EMU_ACCESS(load, false, 4)
MSC_EMU_ACCESS(load, false, 8)
MSC_EMU_ACCESS(load, false, 16)
MSC_EMU_ACCESS(store, true, 1)
MSC_EMU_ACCESS(store, true, 2)
MSC_EMU_ACCESS(store, true, 4)
MSC_EMU_ACCESS(store, true, 8)
MSC_EMU_ACCESS(store, true, 16)
MSC_EMU_HOOK __asan_loadN_noabort(void* p, size_t n) { MSC_EMU_COUNT(false, n) }
MSC_EMU_HOOK __asan_storeN_noabort(void* p, size_t n) { MSC_EMU_COUNT(true, n) }
#undef MSC_EMU_ACCESS
#undef MSC_EMU_HOOK
#undef MSC_EMU_COUNT
extern "C" __attribute__((visibility("hidden"))) void __asan_handle_no_return(void) {}

/* The counters since the library was loaded, in the order of Totals (Python: cuda_emu.COUNTERS). */
extern "C" void msc_emu_counters(long long* out) {
    const msc_emu::Totals& t = msc_emu::counting().totals;
    const long long values[] = {t.load_bytes, t.store_bytes, t.sectors, t.dram_bytes,
                                t.shared_wavefronts, t.shared_ideal, t.shared_accesses, t.launches,
                                t.mma_flops};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; ++i) out[i] = values[i];
}
#endif /* MSC_CUDA_EMU_COUNT */

namespace msc_emu {

/* A block's warp-level accesses into the totals. */
inline void count_block() {
    Counting& n = counting();
    for (const auto& [key, a] : n.accesses) {
        if (!a.shared) {
            n.totals.sectors += (long long)a.units.size();
            continue;
        }
        unsigned per_bank[32] = {};
        unsigned most = 0;
        for (uint64_t word : a.units) most = std::max(most, ++per_bank[word % 32]);
        const long long ideal = (a.bytes + 127) / 128;
        n.totals.shared_wavefronts += std::max<long long>(most, ideal);
        n.totals.shared_ideal += ideal;
        n.totals.shared_accesses += 1;
    }
    n.accesses.clear();
}


inline cudaError_t set_error(cudaError_t e) {
    Runtime& r = rt();
    if (e != cudaSuccess && r.sticky_error == cudaSuccess) r.last_error = e;
    return r.sticky_error != cudaSuccess ? r.sticky_error : e;
}

inline void diagnose(const char* fmt_what, const std::string& detail) {
    fprintf(stderr, "msc cuda emulator: %s: %s\n", fmt_what, detail.c_str());
}

inline std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

inline std::string thread_name(const Thread& t) {
    return "thread (" + std::to_string(t.idx.x) + "," + std::to_string(t.idx.y) + "," + std::to_string(t.idx.z) + ")";
}

inline std::string block_name(uint3 b = blockIdx) {
    return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

inline void yield() {
    Runtime& r = rt();
    fiber_switch(r.threads[r.current].fiber, r.scheduler);
}

/* Stop the launch with an error; called on a fiber, it never returns. */
[[noreturn]] inline void fault(const std::string& what) {
    Runtime& r = rt();
    r.faulted = true;
    r.fault = what;
    fiber_jump(r.scheduler);
}

inline void* dynamic_shared() { return rt().dynamic_shared; }

/* MSC_SHARED: the running block's array `name` of `bytes` (every thread of the block gets the same one),
 * between guard bands; the static shared memory of a block over 48 KiB is a fault, as nvcc refuses it. */
inline void* shared_array(const char* name, size_t bytes) {
    Runtime& r = rt();
    size_t total = 0;
    for (const SharedArray& a : r.arrays) {
        if (strcmp(a.name, name) == 0) return a.start;
        total += a.bytes;
    }
    if (total + bytes > (size_t)kDefaultSharedPerBlock)
        fault("shared array '" + std::string(name) + "' of " + std::to_string(bytes) + " bytes takes the block's " +
              "static shared memory to " + std::to_string(total + bytes) + " bytes, over the " +
              std::to_string(kDefaultSharedPerBlock) + " a block may have");
    const size_t at = (r.arena_used + kSharedGuard + 255) / 256 * 256;
    if (at + bytes + kSharedGuard > r.arena.size())
        fault("shared array '" + std::string(name) + "': the emulator's arena for shared arrays is full");
    r.arrays.push_back(SharedArray{name, r.arena.data() + at, bytes});
    r.arena_used = at + bytes;
    return r.arena.data() + at;
}

/* "<what> of N bytes: byte K (outside it) was written", K the first byte of its guard bands (`before`
 * bytes below `start`, kSharedGuard above the `bytes` from it) that is not poison, the upper band first; or "" */
inline std::string guard_written(const std::string& what, const char* start, size_t bytes, size_t before) {
    auto changed = [](const char* from, size_t n) -> long long {
        for (size_t i = 0; i < n; ++i)
            if ((unsigned char)from[i] != 0xff) return (long long)i;
        return -1;
    };
    const long long high = changed(start + bytes, kSharedGuard), low = changed(start - before, before);
    if (high < 0 && low < 0) return "";
    return what + " of " + std::to_string(bytes) + " bytes: byte " +
           std::to_string(high >= 0 ? (long long)bytes + high : low - (long long)before) + " (outside it) was written";
}

/* The first byte of a guard band the running block changed, as a fault message, or "" */
inline std::string guards_changed() {
    const Runtime& r = rt();
    for (const SharedArray& a : r.arrays) {
        const size_t before = std::min<size_t>(kSharedGuard, (size_t)(a.start - r.arena.data()));
        const std::string said = guard_written("shared array '" + std::string(a.name) + "'", a.start, a.bytes, before);
        if (!said.empty()) return said;
    }
    if (r.dynamic_shared == nullptr) return "";
    return guard_written("dynamic shared memory", r.dynamic_shared, r.dynamic_capacity, kSharedGuard);
}

inline unsigned threads_per_block() { return blockDim.x * blockDim.y * blockDim.z; }

inline unsigned lanes_present(unsigned warp) {
    unsigned n = threads_per_block() - warp * 32;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1;
}

/* __syncthreads: a barrier of the block's threads, all at one place in the code */
inline void block_barrier(const char* file, int line) {
    Runtime& r = rt();
    Thread& t = r.threads[r.current];
    t.state = State::AtBarrier;
    t.file = file;
    t.line = line;
    if (++r.barrier_arrived == r.threads.size()) {
        for (const Thread& o : r.threads)
            if (o.line != line || strcmp(o.file, file) != 0)
                fault("__syncthreads reached at different places: " + thread_name(o) + " at " +
                      where(o.file, o.line) + ", " + thread_name(t) + " at " + where(file, line));
        for (Thread& o : r.threads) o.state = State::Ready;
        r.barrier_arrived = 0;
        ++r.barriers;
    }
    yield();
}

/* A warp collective: wait until every lane of `mask` has called `name` with the same
   `key`; the last to arrive runs `combine` over the lanes' requests. */
inline void warp_collective(const char* name, unsigned mask, uint64_t key, void* request, Combine combine,
                            const char* file, int line) {
    Runtime& r = rt();
    Thread& t = r.threads[r.current];
    const unsigned warp = r.current / 32, lane = r.current % 32;
    const std::string me = thread_name(t) + " (warp " + std::to_string(warp) + " lane " + std::to_string(lane) + ")";
    if (!(mask >> lane & 1u))
        fault(std::string(name) + " at " + where(file, line) + ": " + me + " calls it but is not in its mask");
    if (mask & ~lanes_present(warp))
        fault(std::string(name) + " at " + where(file, line) + ": its mask names lanes that warp " +
              std::to_string(warp) + " of a block of " + std::to_string(threads_per_block()) +
              " threads does not have");
    WarpOp& w = r.warps[warp];
    if (w.arrived == 0) {
        w.name = name;
        w.file = file;
        w.line = line;
        w.mask = mask;
        w.key = key;
        w.combine = combine;
    } else if (strcmp(w.name, name) != 0 || w.mask != mask || w.key != key) {
        fault(me + " calls " + name + " at " + where(file, line) + " while lanes of its warp wait at " + w.name +
              " at " + where(w.file, w.line) +
              (strcmp(w.name, name) == 0 ? " with another mask or other arguments (they must agree)" : ""));
    }
    w.lane[lane] = request;
    w.arrived |= 1u << lane;
    t.file = file;
    t.line = line;
    if (w.arrived == mask) {
        w.combine(w.lane, mask);
        for (unsigned l = 0; l < 32; ++l)
            if (mask >> l & 1u) r.threads[warp * 32 + l].state = State::Ready;
        w.arrived = 0;
    } else {
        t.state = State::AtWarp;
    }
    yield();
}

/* No thread can run: say which barrier or collective is stuck and why. */
inline std::string deadlock() {
    Runtime& r = rt();
    auto doing = [&](const Thread& o) -> std::string {
        switch (o.state) {
            case State::Done: return "exited";
            case State::AtBarrier: return "waits at __syncthreads at " + where(o.file, o.line);
            default: return "waits at " + std::string(r.warps[(size_t)(&o - r.threads.data()) / 32].name) + " at " +
                            where(o.file, o.line);
        }
    };
    for (size_t w = 0; w < r.warps.size(); ++w) {
        const WarpOp& op = r.warps[w];
        if (op.arrived == 0) continue;
        for (unsigned l = 0; l < 32; ++l)
            if ((op.mask >> l & 1u) && !(op.arrived >> l & 1u)) {
                const Thread& o = r.threads[w * 32 + l];
                return std::string(op.name) + " at " + where(op.file, op.line) + ": lane " + std::to_string(l) +
                       " of warp " + std::to_string(w) + ", " + thread_name(o) + ", never calls it (it " + doing(o) +
                       "); every lane of the mask must";
            }
    }
    for (const Thread& o : r.threads)
        if (o.state == State::AtBarrier)
            for (const Thread& p : r.threads)
                if (p.state != State::AtBarrier)
                    return "__syncthreads at " + where(o.file, o.line) + ": " + thread_name(o) + " waits there, " +
                           thread_name(p) + " " + doing(p) + " (every thread of the block must reach it)";
    return "no thread can run";
}

inline char* take_stack() {
    Runtime& r = rt();
    if (!r.free_stacks.empty()) {
        char* s = r.free_stacks.back();
        r.free_stacks.pop_back();
        return s;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void* p = mmap(nullptr, MSC_CUDA_EMU_STACK_BYTES + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        perror("msc cuda emulator: mmap of a thread stack");
        abort();
    }
    mprotect(p, page, PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
    return static_cast<char*>(p) + page;
}

[[noreturn]] inline void fiber_main() {
    Runtime& r = rt();
    (*r.body)();
    r.threads[r.current].state = State::Done;
    fiber_jump(r.scheduler);
}

inline void poison_shared() {
    Runtime& r = rt();
    if (__start_msc_cuda_shared != nullptr)
        memset(__start_msc_cuda_shared, 0xff, (size_t)(__stop_msc_cuda_shared - __start_msc_cuda_shared));
    if (r.dynamic_shared != nullptr)
        memset(r.dynamic_shared - kSharedGuard, 0xff, r.dynamic_capacity + 2 * kSharedGuard);
    memset(r.arena.data(), 0xff, std::min(r.arena.size(), r.arena_used + kSharedGuard));
    r.arrays.clear();
    r.arena_used = 0;
}

/* Run one block to completion; false after a fault. */
inline bool run_block() {
    Runtime& r = rt();
    const unsigned n = threads_per_block();
    r.threads.assign(n, Thread{});
    r.warps.assign((n + 31) / 32, WarpOp{});
    r.barrier_arrived = 0;
    for (unsigned i = 0; i < n; ++i)
        r.threads[i].idx = uint3{i % blockDim.x, i / blockDim.x % blockDim.y, i / (blockDim.x * blockDim.y)};
    poison_shared();
    counting().executions.assign(n, {});
    unsigned done = 0;
    bool faulted = false;
    /* Run thread i until it waits or ends; false if it was not ready. */
    const auto run_thread = [&](unsigned i) {
        Thread& t = r.threads[i];
        if (t.state != State::Ready) return false;
        if (t.stack == nullptr) {
            t.stack = take_stack();
            fiber_make(t.fiber, t.stack, MSC_CUDA_EMU_STACK_BYTES, fiber_main);
        }
        r.current = i;
        threadIdx = t.idx;
        listening = true;
        fiber_switch(r.scheduler, t.fiber);
        listening = false;
        if (r.faulted) {
            faulted = true;
        } else if (t.state == State::Done) {
            r.free_stacks.push_back(t.stack);
            t.stack = nullptr;
            ++done;
        }
        return true;
    };
    const unsigned warps = (n + 31) / 32;
    while (done < n) {
        bool ran = false;
        /* each warp as far as it goes (to a __syncthreads, or its end) before the next: warps are
           independent on a device, so one that reads what another writes without a barrier between
           sees the value from before (or the poison) in one of the two orders; once a __syncthreads
           lets the block go on, the first warp runs first again */
        const unsigned long barriers = r.barriers;
        for (unsigned v = 0; v < warps && !faulted && r.barriers == barriers; ++v) {
            const unsigned first = (r.reverse_threads ? warps - 1 - v : v) * 32, lanes = std::min(32u, n - first);
            for (bool warp_ran = true; warp_ran && !faulted && r.barriers == barriers;) {
                warp_ran = false;
                for (unsigned j = 0; j < lanes && !faulted && r.barriers == barriers; ++j)
                    warp_ran |= run_thread(first + (r.reverse_threads ? lanes - 1 - j : j));
                ran |= warp_ran;
            }
        }
        if (faulted) {
            r.fault = block_name() + " " + thread_name(r.threads[r.current]) + ": " + r.fault;
            for (Thread& o : r.threads)
                if (o.stack != nullptr) r.free_stacks.push_back(o.stack);
            return false;
        }
        if (!ran && done < n) {
            r.faulted = true;
            r.fault = block_name() + ": " + deadlock();
            for (Thread& o : r.threads)
                if (o.stack != nullptr) r.free_stacks.push_back(o.stack);
            return false;
        }
    }
    const std::string written = guards_changed();
    if (!written.empty()) {
        r.faulted = true;
        r.fault = block_name() + ": " + written;
        return false;
    }
    count_block();
    return true;
}

inline uint3 block_of(uint64_t linear, dim3 grid) {
    return uint3{(unsigned)(linear % grid.x), (unsigned)(linear / grid.x % grid.y),
                 (unsigned)(linear / ((uint64_t)grid.x * grid.y))};
}

/* MSC_CUDA_EMU_BLOCKS=reverse: which block of the launch changed each byte of cudaMalloc memory */
class WriteCheck {
    struct Region {
        char* start;
        size_t bytes;
        std::vector<char> before;      // the bytes before the block that runs now
        std::vector<uint32_t> writer;  // 1 + the linear index of the block that changed each byte (0: none)
    };
    std::vector<Region> regions_;

  public:
    WriteCheck() {
        for (const auto& [start, bytes] : rt().allocations) {
            char* p = const_cast<char*>(start);
            regions_.push_back(Region{p, bytes, std::vector<char>(p, p + bytes), std::vector<uint32_t>(bytes, 0)});
        }
    }

    /* After block `linear`: "" or the byte it changed that another block of the launch changed. */
    std::string after_block(uint64_t linear, dim3 grid) {
        const std::set<const char*>& atomic = rt().atomic_bytes;
        for (Region& g : regions_)
            for (size_t c = 0; c < g.bytes; c += 64) {
                const size_t n = g.bytes - c < 64 ? g.bytes - c : 64;
                if (memcmp(g.start + c, g.before.data() + c, n) == 0) continue;
                for (size_t i = c; i < c + n; ++i) {
                    if (g.start[i] == g.before[i]) continue;
                    g.before[i] = g.start[i];
                    if (atomic.count(g.start + i)) continue;
                    if (g.writer[i] != 0 && g.writer[i] != linear + 1)
                        return block_name(block_of(g.writer[i] - 1, grid)) + " and " +
                               block_name(block_of(linear, grid)) + " both write byte " + std::to_string(i) +
                               " of a cudaMalloc allocation of " + std::to_string(g.bytes) +
                               " bytes (blocks of a launch run in any order on a device: which write lands is "
                               "undefined)";
                    g.writer[i] = (uint32_t)(linear + 1);
                }
            }
        return "";
    }
};

inline void note_atomic(const void* p, size_t bytes) {
    Runtime& r = rt();
    if (r.check_writes)
        for (size_t i = 0; i < bytes; ++i) r.atomic_bytes.insert(static_cast<const char*>(p) + i);
}

/* MSC_CUDA_EMU_BLOCKS: `reverse` set for "reverse", cleared for unset or "forward"; anything else is an error. */
/* The order the environment variable `name` asks for: forward (unset) or reverse. */
inline cudaError_t order_of(const char* name, bool* reverse) {
    const char* order = getenv(name);
    *reverse = order != nullptr && strcmp(order, "reverse") == 0;
    if (order == nullptr || *order == 0 || *reverse || strcmp(order, "forward") == 0) return cudaSuccess;
    diagnose(name, std::string("'") + order + "' is not forward or reverse");
    return cudaErrorInvalidValue;
}

inline cudaError_t check_config(const void* kernel, dim3 grid, dim3 block, size_t shared) {
    const unsigned b[3] = {block.x, block.y, block.z}, g[3] = {grid.x, grid.y, grid.z};
    for (int d = 0; d < 3; ++d)
        if (b[d] == 0 || b[d] > kMaxBlockDim[d] || g[d] == 0 || g[d] > kMaxGridDim[d])
            return cudaErrorInvalidConfiguration;
    if ((size_t)block.x * block.y * block.z > kMaxThreadsPerBlock) return cudaErrorInvalidConfiguration;
    auto limit = rt().max_dynamic_shared.find(kernel);
    const int allowed = limit == rt().max_dynamic_shared.end() ? kDefaultSharedPerBlock : limit->second;
    if (shared > (size_t)allowed) return cudaErrorInvalidValue;
    return cudaSuccess;
}

/* MSC_LAUNCH: run kernel(args...) over grid x block, synchronously. */
template <class... Params, class... Args>
void launch(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args&&... args) {
    Runtime& r = rt();
    std::lock_guard<std::mutex> one_launch_at_a_time(r.launching);
    if (r.sticky_error != cudaSuccess) return;
    const cudaError_t bad = check_config(reinterpret_cast<const void*>(kernel), grid, block, shared);
    if (bad != cudaSuccess) {
        diagnose(name, "launch refused: grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) + "," +
                           std::to_string(grid.z) + "), block (" + std::to_string(block.x) + "," +
                           std::to_string(block.y) + "," + std::to_string(block.z) + "), " + std::to_string(shared) +
                           " bytes of dynamic shared memory");
        set_error(bad);
        return;
    }
    bool reverse = false;
    if (order_of("MSC_CUDA_EMU_BLOCKS", &reverse) != cudaSuccess ||
        order_of("MSC_CUDA_EMU_THREADS", &r.reverse_threads) != cudaSuccess) {
        set_error(cudaErrorInvalidValue);
        return;
    }
    const std::function<void()> body = [&]() { kernel(args...); };
    std::vector<char> dynamic(shared + 256 + 2 * kSharedGuard);  // aligned to 256, between guard bands
    r.dynamic_capacity = shared;
    r.dynamic_shared = shared ? dynamic.data() + kSharedGuard + (256 - (uintptr_t)dynamic.data() % 256) : nullptr;
    r.body = &body;
    r.kernel = name;
    r.faulted = false;
    r.check_writes = reverse;
    r.atomic_bytes.clear();
    gridDim = grid;
    blockDim = block;
    std::optional<WriteCheck> writes;
    if (reverse) writes.emplace();
    const uint64_t blocks = (uint64_t)grid.x * grid.y * grid.z;
    for (uint64_t k = 0; k < blocks; ++k) {
        const uint64_t linear = reverse ? blocks - 1 - k : k;
        blockIdx = block_of(linear, grid);
        bool ok = run_block();
        if (ok && reverse) {
            r.fault = writes->after_block(linear, grid);
            ok = r.fault.empty();
        }
        if (!ok) {
            diagnose(name, r.fault);
            r.sticky_error = cudaErrorLaunchFailure;
            r.last_error = cudaErrorLaunchFailure;
            break;
        }
    }
    r.check_writes = false;
    r.dynamic_shared = nullptr;
    Counting& n = counting();
    for (Region& g : n.regions) {
        if (!g.dirty) continue;
        for (uint64_t& word : g.touched) {
            n.totals.dram_bytes += 32 * (long long)__builtin_popcountll(word);
            word = 0;
        }
        g.dirty = false;
    }
    n.totals.launches += 1;
}

/* the allocation holding [p, p + bytes), or false */
inline bool is_device(const void* p, size_t bytes) {
    const Runtime& r = rt();
    const char* c = static_cast<const char*>(p);
    auto it = r.allocations.lower_bound(c);  // the greatest start <= c
    return it != r.allocations.end() && c + bytes <= it->first + it->second;
}

inline cudaError_t check_copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if ((unsigned)kind > cudaMemcpyDefault) return set_error(cudaErrorInvalidMemcpyDirection);
    const bool to_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool from_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if ((to_device && !is_device(dst, bytes)) || (from_device && !is_device(src, bytes))) {
        diagnose(call, std::to_string(bytes) + " bytes " + (to_device && !is_device(dst, bytes) ? "to " : "from ") +
                           "memory outside every cudaMalloc allocation (wrong direction or size?)");
        return set_error(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

}  // namespace msc_emu

/* ---------------------------------------------------------- device code */

inline void __syncthreads(const char* file = __builtin_FILE(), int line = MSC_EMU_LINE) {
    msc_emu::block_barrier(file, line);
}

namespace msc_emu {
struct ShuffleRequest {
    uint64_t value;
    int source;  // lane to read, -1 for the own value
    uint64_t result;
};

inline void shuffle_combine(void* const* lanes, unsigned mask) {
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask >> l & 1u)) continue;
        auto* q = static_cast<ShuffleRequest*>(lanes[l]);
        if (q->source >= 0 && !(mask >> q->source & 1u))
            fault("a shuffle of lane " + std::to_string(l) + " reads lane " + std::to_string(q->source) +
                  ", which is not in the mask");
        q->result = q->source < 0 ? q->value : static_cast<ShuffleRequest*>(lanes[q->source])->value;
    }
}

template <class T>
T shuffle(const char* name, unsigned mask, T var, int source, int width, const char* file, int line) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8, "shuffles move values of up to 8 bytes");
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fault(std::string(name) + " at " + where(file, line) + ": width " + std::to_string(width) +
              " is not a power of 2 in [1, 32]");
    ShuffleRequest q{0, source, 0};
    memcpy(&q.value, &var, sizeof(T));
    warp_collective(name, mask, (uint64_t)width, &q, shuffle_combine, file, line);
    T out;
    memcpy(&out, &q.result, sizeof(T));
    return out;
}

inline int lane_id() { return (int)(rt().current % 32); }
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

namespace msc_emu {
struct VoteRequest {
    int predicate;
    unsigned result;
};

inline void vote_combine(void* const* lanes, unsigned mask) {
    unsigned bits = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l & 1u) && static_cast<VoteRequest*>(lanes[l])->predicate) bits |= 1u << l;
    for (unsigned l = 0; l < 32; ++l)
        if (mask >> l & 1u) static_cast<VoteRequest*>(lanes[l])->result = bits;
}

inline unsigned vote(const char* name, unsigned mask, int predicate, const char* file, int line) {
    VoteRequest q{predicate, 0};
    warp_collective(name, mask, 0, &q, vote_combine, file, line);
    return q.result;
}
}  // namespace msc_emu

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

inline cudaError_t cudaGetLastError() {
    msc_emu::Runtime& r = msc_emu::rt();
    const cudaError_t e = r.sticky_error != cudaSuccess ? r.sticky_error : r.last_error;
    r.last_error = cudaSuccess;
    return e;
}

inline cudaError_t cudaPeekAtLastError() {
    msc_emu::Runtime& r = msc_emu::rt();
    return r.sticky_error != cudaSuccess ? r.sticky_error : r.last_error;
}

inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}

inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDeviceFunction: return "invalid device function";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorLaunchFailure: return "unspecified launch failure";
    }
    return "unknown error";
}

inline cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaSetDevice(int device) {
    return msc_emu::set_error(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

inline cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    using namespace msc_emu;
    if (device != 0) return set_error(cudaErrorInvalidDevice);
    switch (attr) {
        case cudaDevAttrMaxThreadsPerBlock: *value = (int)kMaxThreadsPerBlock; break;
        case cudaDevAttrMaxBlockDimX: *value = (int)kMaxBlockDim[0]; break;
        case cudaDevAttrMaxBlockDimY: *value = (int)kMaxBlockDim[1]; break;
        case cudaDevAttrMaxBlockDimZ: *value = (int)kMaxBlockDim[2]; break;
        case cudaDevAttrMaxGridDimX: *value = (int)kMaxGridDim[0]; break;
        case cudaDevAttrMaxGridDimY: *value = (int)kMaxGridDim[1]; break;
        case cudaDevAttrMaxGridDimZ: *value = (int)kMaxGridDim[2]; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = kDefaultSharedPerBlock; break;
        case cudaDevAttrTotalConstantMemory: *value = 64 * 1024; break;
        case cudaDevAttrWarpSize: *value = warpSize; break;
        case cudaDevAttrMaxRegistersPerBlock: *value = 64 * 1024; break;
        case cudaDevAttrMultiProcessorCount: *value = kSMs; break;
        case cudaDevAttrL2CacheSize: *value = 50 * 1024 * 1024; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = kSharedPerSM; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: *value = 64 * 1024; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kOptinSharedPerBlock; break;
        default: return set_error(cudaErrorInvalidValue);
    }
    return set_error(cudaSuccess);
}

inline cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    using namespace msc_emu;
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > kOptinSharedPerBlock) return set_error(cudaErrorInvalidValue);
        rt().max_dynamic_shared[func] = value;
        return set_error(cudaSuccess);
    }
    if (attr == cudaFuncAttributePreferredSharedMemoryCarveout)
        return set_error(value >= -1 && value <= 100 ? cudaSuccess : cudaErrorInvalidValue);
    return set_error(cudaErrorInvalidValue);
}

template <class... Params>
inline cudaError_t cudaFuncSetAttribute(void (*func)(Params...), cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute(reinterpret_cast<const void*>(func), attr, value);
}

inline cudaError_t cudaMalloc(void** ptr, size_t bytes) {
    msc_emu::Runtime& r = msc_emu::rt();
    if (r.sticky_error != cudaSuccess) return r.sticky_error;
    void* p = aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    if (p == nullptr) return msc_emu::set_error(cudaErrorMemoryAllocation);
    const char* start = static_cast<const char*>(p);
    r.allocations[start] = bytes;
    msc_emu::add_region(start, bytes);
    *ptr = p;
    return cudaSuccess;
}

template <class T>
inline cudaError_t cudaMalloc(T** ptr, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}

inline cudaError_t cudaFree(void* ptr) {
    msc_emu::Runtime& r = msc_emu::rt();
    if (ptr == nullptr) return msc_emu::set_error(cudaSuccess);
    auto it = r.allocations.find(static_cast<const char*>(ptr));
    if (it == r.allocations.end()) {
        msc_emu::diagnose("cudaFree", "the pointer is not the start of a cudaMalloc allocation");
        return msc_emu::set_error(cudaErrorInvalidValue);
    }
    r.allocations.erase(it);
    msc_emu::remove_region(static_cast<const char*>(ptr));
    free(ptr);
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (msc_emu::rt().sticky_error != cudaSuccess) return msc_emu::rt().sticky_error;
    const cudaError_t e = msc_emu::check_copy("cudaMemcpy", dst, src, bytes, kind);
    if (e != cudaSuccess) return e;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                   cudaStream_t = nullptr) {
    return cudaMemcpy(dst, src, bytes, kind);
}

template <class T>
inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t bytes, size_t offset = 0,
                                      cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
    if (offset + bytes > sizeof(T) || (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice))
        return msc_emu::set_error(cudaErrorInvalidValue);
    memcpy(const_cast<char*>(reinterpret_cast<const char*>(&symbol)) + offset, src, bytes);
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
    if (msc_emu::rt().sticky_error != cudaSuccess) return msc_emu::rt().sticky_error;
    if (!msc_emu::is_device(dst, bytes)) {
        msc_emu::diagnose("cudaMemset", std::to_string(bytes) + " bytes outside every cudaMalloc allocation");
        return msc_emu::set_error(cudaErrorInvalidValue);
    }
    memset(dst, value, bytes);
    return cudaSuccess;
}

inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t = nullptr) {
    return cudaMemset(dst, value, bytes);
}

inline cudaError_t cudaDeviceSynchronize() { return msc_emu::set_error(cudaSuccess); }

inline cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    *stream = new CUstream_st();
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    delete stream;
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return msc_emu::set_error(cudaSuccess); }

inline cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = new CUevent_st();
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t = nullptr) {
    event->when = std::chrono::steady_clock::now();
    return msc_emu::set_error(cudaSuccess);
}

inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return msc_emu::set_error(cudaSuccess); }

inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return msc_emu::set_error(cudaSuccess);
}

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
        msc_emu::fault(std::string(name) + " at " + msc_emu::where(file, line) +
                       ": the pointer is not 256-bit (32-byte) aligned");
    if (ldm * bytes % 16 != 0)
        msc_emu::fault(std::string(name) + " at " + msc_emu::where(file, line) + ": ldm " + std::to_string(ldm) +
                       " is not a multiple of 16 bytes (" + std::to_string(16 / bytes) + " elements)");
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
    msc_emu::counting().totals.mma_flops += 2LL * M * N * K;
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

#endif /* MSC_CUDA_EMU_H */
