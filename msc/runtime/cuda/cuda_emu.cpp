/* cuda_emu.cpp: the runtime of msc's CUDA emulator (cuda_emu.h says what it emulates and
 * detects): fibers, the launch and its blocks, barriers and warp collectives, the access
 * counters and the host API. Compiled once per set of flags (msc/runtime/cuda_emu.py:
 * runtime_object) and linked into each emulated library or program, so a generated kernel's
 * build compiles only its own code. With -DMSC_CUDA_EMU_COUNT it also defines the
 * instrumentation callbacks that count the kernel's accesses (cuda_emu.COUNTING_FLAGS); it
 * is never itself instrumented. */
#include "cuda_emu.h"

#include <stdarg.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>
#if !defined(__x86_64__) || defined(MSC_CUDA_EMU_UCONTEXT)
#include <ucontext.h>
#endif

/* after every system header: what is declared from here on is this library's own */
#pragma GCC visibility push(hidden)

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
__asm__(
    ".text\n"
    ".globl msc_emu_switch\n"
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
    ".globl msc_emu_fiber_start\n"
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
void fiber_make(Fiber& fiber, char* stack, size_t bytes, void (*entry)()) {
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

void fiber_switch(Fiber& from, Fiber& to) { msc_emu_switch(&from.sp, to.sp); }

[[noreturn]] void fiber_jump(Fiber& to) {
    void* abandoned;
    msc_emu_switch(&abandoned, to.sp);
    abort();
}
}  // namespace msc_emu
#else

namespace msc_emu {
struct Fiber {
    ucontext_t ctx;
};

void fiber_make(Fiber& fiber, char* stack, size_t bytes, void (*entry)()) {
    static ucontext_t fresh;  // from getcontext once: it costs a system call
    static bool got = (getcontext(&fresh), true);
    (void)got;
    fiber.ctx = fresh;
    fiber.ctx.uc_stack.ss_sp = stack;
    fiber.ctx.uc_stack.ss_size = bytes;
    fiber.ctx.uc_link = nullptr;
    makecontext(&fiber.ctx, entry, 0);
}

void fiber_switch(Fiber& from, Fiber& to) { swapcontext(&from.ctx, &to.ctx); }

[[noreturn]] void fiber_jump(Fiber& to) {
    setcontext(&to.ctx);
    abort();
}
}  // namespace msc_emu
#endif

#ifndef MSC_CUDA_EMU_STACK_BYTES
#define MSC_CUDA_EMU_STACK_BYTES (256 * 1024) /* per emulated thread; a guard page below it */
#endif

struct CUevent_st {
    std::chrono::steady_clock::time_point when;
};

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
    void (*body)(void*) = nullptr;  // runs the kernel as the current thread
    void* body_arg = nullptr;
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

Runtime& rt() {
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

Counting& counting() {
    static Counting c;
    return c;
}

bool in_arena(const char* c) {
    const Runtime& r = rt();
    return c >= r.arena.data() && c < r.arena.data() + r.arena.size();
}

/* dynamic shared memory with its guard bands */
bool in_dynamic(const char* c) {
    const Runtime& r = rt();
    return r.dynamic_shared != nullptr && c >= r.dynamic_shared - kSharedGuard &&
           c < r.dynamic_shared + r.dynamic_capacity + kSharedGuard;
}

bool in_shared(const char* c) {
    if (__start_msc_cuda_shared != nullptr && c >= __start_msc_cuda_shared && c < __stop_msc_cuda_shared) return true;
    return in_arena(c) || in_dynamic(c);
}

[[noreturn]] void fault(const std::string& what);

/* "<access> at byte K of <what>, which has N bytes": an access outside a shared array, for its fault */
std::string outside(const char* access, unsigned bytes, long long at, const std::string& what, size_t size) {
    return std::string(access) + std::to_string(bytes) + " bytes at byte " + std::to_string(at) + " of " + what +
           ", which has " + std::to_string(size) + " bytes";
}

/* An access of `bytes` at c outside every shared array (in a guard band): a fault naming the array it missed. */
void check_shared_bounds(const char* c, unsigned bytes, bool store) {
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

Region* region_of(const char* c) {
    for (Region& g : counting().regions)  // a kernel's few allocations: a scan beats a search
        if (c >= g.start && c < g.start + g.bytes) return &g;
    return nullptr;
}

void add_region(const char* start, size_t bytes) {
    counting().regions.push_back(Region{start, bytes, std::vector<uint64_t>(bytes / 32 / 64 + 1)});
}

void remove_region(const char* start) {
    auto& regions = counting().regions;
    regions.erase(std::remove_if(regions.begin(), regions.end(), [&](const Region& g) { return g.start == start; }),
                  regions.end());
}

void note_access(const void* p, unsigned bytes, bool store, const void* instruction, bool same) {
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
extern "C" __attribute__((visibility("default"))) void msc_emu_counters(long long* out) {
    const msc_emu::Totals& t = msc_emu::counting().totals;
    const long long values[] = {t.load_bytes, t.store_bytes, t.sectors, t.dram_bytes,
                                t.shared_wavefronts, t.shared_ideal, t.shared_accesses, t.launches,
                                t.mma_flops};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; ++i) out[i] = values[i];
}
#endif /* MSC_CUDA_EMU_COUNT */

namespace msc_emu {

/* A block's warp-level accesses into the totals. */
void count_block() {
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


cudaError_t set_error(cudaError_t e) {
    Runtime& r = rt();
    if (e != cudaSuccess && r.sticky_error == cudaSuccess) r.last_error = e;
    return r.sticky_error != cudaSuccess ? r.sticky_error : e;
}

void diagnose(const char* fmt_what, const std::string& detail) {
    fprintf(stderr, "msc cuda emulator: %s: %s\n", fmt_what, detail.c_str());
}

std::string where(const char* file, int line) { return std::string(file) + ":" + std::to_string(line); }

std::string thread_name(const Thread& t) {
    return "thread (" + std::to_string(t.idx.x) + "," + std::to_string(t.idx.y) + "," + std::to_string(t.idx.z) + ")";
}

std::string block_name(uint3 b = blockIdx) {
    return "block (" + std::to_string(b.x) + "," + std::to_string(b.y) + "," + std::to_string(b.z) + ")";
}

void yield() {
    Runtime& r = rt();
    fiber_switch(r.threads[r.current].fiber, r.scheduler);
}

/* Stop the launch with an error; called on a fiber, it never returns. */
[[noreturn]] void fault(const std::string& what) {
    Runtime& r = rt();
    r.faulted = true;
    r.fault = what;
    fiber_jump(r.scheduler);
}

void* dynamic_shared() { return rt().dynamic_shared; }

/* MSC_SHARED: the running block's array `name` of `bytes` (every thread of the block gets the same one),
 * between guard bands; the static shared memory of a block over 48 KiB is a fault, as nvcc refuses it. */
void* shared_array(const char* name, size_t bytes) {
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
std::string guard_written(const std::string& what, const char* start, size_t bytes, size_t before) {
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
std::string guards_changed() {
    const Runtime& r = rt();
    for (const SharedArray& a : r.arrays) {
        const size_t before = std::min<size_t>(kSharedGuard, (size_t)(a.start - r.arena.data()));
        const std::string said = guard_written("shared array '" + std::string(a.name) + "'", a.start, a.bytes, before);
        if (!said.empty()) return said;
    }
    if (r.dynamic_shared == nullptr) return "";
    return guard_written("dynamic shared memory", r.dynamic_shared, r.dynamic_capacity, kSharedGuard);
}

unsigned threads_per_block() { return blockDim.x * blockDim.y * blockDim.z; }

unsigned lanes_present(unsigned warp) {
    unsigned n = threads_per_block() - warp * 32;
    return n >= 32 ? 0xffffffffu : (1u << n) - 1;
}

/* __syncthreads: a barrier of the block's threads, all at one place in the code */
void block_barrier(const char* file, int line) {
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
void warp_collective(const char* name, unsigned mask, uint64_t key, void* request, Combine combine,
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
std::string deadlock() {
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

char* take_stack() {
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

[[noreturn]] void fiber_main() {
    Runtime& r = rt();
    r.body(r.body_arg);
    r.threads[r.current].state = State::Done;
    fiber_jump(r.scheduler);
}

void poison_shared() {
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
bool run_block() {
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

uint3 block_of(uint64_t linear, dim3 grid) {
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

void note_atomic(const void* p, size_t bytes) {
    Runtime& r = rt();
    if (r.check_writes)
        for (size_t i = 0; i < bytes; ++i) r.atomic_bytes.insert(static_cast<const char*>(p) + i);
}

/* MSC_CUDA_EMU_BLOCKS: `reverse` set for "reverse", cleared for unset or "forward"; anything else is an error. */
/* The order the environment variable `name` asks for: forward (unset) or reverse. */
cudaError_t order_of(const char* name, bool* reverse) {
    const char* order = getenv(name);
    *reverse = order != nullptr && strcmp(order, "reverse") == 0;
    if (order == nullptr || *order == 0 || *reverse || strcmp(order, "forward") == 0) return cudaSuccess;
    diagnose(name, std::string("'") + order + "' is not forward or reverse");
    return cudaErrorInvalidValue;
}

bool wide_indices() {
    const char* width = getenv("MSC_CUDA_EMU_INDEX");
    if (width == nullptr || *width == 0 || strcmp(width, "32") == 0) return false;
    if (strcmp(width, "64") == 0) return true;
    diagnose("MSC_CUDA_EMU_INDEX", std::string("'") + width + "' is not 32 or 64");
    set_error(cudaErrorInvalidValue);
    return false;
}

cudaError_t check_config(const void* kernel, dim3 grid, dim3 block, size_t shared) {
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

/* The launch MSC_LAUNCH (cuda_emu.h: launch) makes. */
void launch_erased(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared,
                   void (*body)(void*), void* arg) {
    Runtime& r = rt();
    std::lock_guard<std::mutex> one_launch_at_a_time(r.launching);
    if (r.sticky_error != cudaSuccess) return;
    const cudaError_t bad = check_config(kernel, grid, block, shared);
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
    std::vector<char> dynamic(shared + 256 + 2 * kSharedGuard);  // aligned to 256, between guard bands
    r.dynamic_capacity = shared;
    r.dynamic_shared = shared ? dynamic.data() + kSharedGuard + (256 - (uintptr_t)dynamic.data() % 256) : nullptr;
    r.body = body;
    r.body_arg = arg;
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
bool is_device(const void* p, size_t bytes) {
    const Runtime& r = rt();
    const char* c = static_cast<const char*>(p);
    auto it = r.allocations.lower_bound(c);  // the greatest start <= c
    return it != r.allocations.end() && c + bytes <= it->first + it->second;
}

cudaError_t check_copy(const char* call, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
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

/* ---------------------------------------------------------- device code */

void count_mma(long long flops) { counting().totals.mma_flops += flops; }

[[noreturn]] void fault_with(const char* format, ...) {
    va_list args, again;
    va_start(args, format);
    va_copy(again, args);
    std::string text((size_t)vsnprintf(nullptr, 0, format, args), '\0');
    vsnprintf(text.data(), text.size() + 1, format, again);
    va_end(again);
    va_end(args);
    fault(text);
}

struct ShuffleRequest {
    uint64_t value;
    int source;  // lane to read, -1 for the own value
    uint64_t result;
};

void shuffle_combine(void* const* lanes, unsigned mask) {
    for (unsigned l = 0; l < 32; ++l) {
        if (!(mask >> l & 1u)) continue;
        auto* q = static_cast<ShuffleRequest*>(lanes[l]);
        if (q->source >= 0 && !(mask >> q->source & 1u))
            fault("a shuffle of lane " + std::to_string(l) + " reads lane " + std::to_string(q->source) +
                  ", which is not in the mask");
        q->result = q->source < 0 ? q->value : static_cast<ShuffleRequest*>(lanes[q->source])->value;
    }
}

uint64_t shuffle_bits(const char* name, unsigned mask, uint64_t value, int source, int width, const char* file,
                      int line) {
    if (width <= 0 || width > 32 || (width & (width - 1)))
        fault(std::string(name) + " at " + where(file, line) + ": width " + std::to_string(width) +
              " is not a power of 2 in [1, 32]");
    ShuffleRequest q{value, source, 0};
    warp_collective(name, mask, (uint64_t)width, &q, shuffle_combine, file, line);
    return q.result;
}

int lane_id() { return (int)(rt().current % 32); }

struct VoteRequest {
    int predicate;
    unsigned result;
};

void vote_combine(void* const* lanes, unsigned mask) {
    unsigned bits = 0;
    for (unsigned l = 0; l < 32; ++l)
        if ((mask >> l & 1u) && static_cast<VoteRequest*>(lanes[l])->predicate) bits |= 1u << l;
    for (unsigned l = 0; l < 32; ++l)
        if (mask >> l & 1u) static_cast<VoteRequest*>(lanes[l])->result = bits;
}

unsigned vote(const char* name, unsigned mask, int predicate, const char* file, int line) {
    VoteRequest q{predicate, 0};
    warp_collective(name, mask, 0, &q, vote_combine, file, line);
    return q.result;
}
}  // namespace msc_emu

/* ------------------------------------------------------------- host API */

cudaError_t cudaGetLastError() {
    msc_emu::Runtime& r = msc_emu::rt();
    const cudaError_t e = r.sticky_error != cudaSuccess ? r.sticky_error : r.last_error;
    r.last_error = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError() {
    msc_emu::Runtime& r = msc_emu::rt();
    return r.sticky_error != cudaSuccess ? r.sticky_error : r.last_error;
}

const char* cudaGetErrorName(cudaError_t e) {
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

const char* cudaGetErrorString(cudaError_t e) {
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

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaSetDevice(int device) {
    return msc_emu::set_error(device == 0 ? cudaSuccess : cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
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

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
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

/* Device memory allocated and not freed, in bytes (tests check that a failed run frees what it took). */
extern "C" __attribute__((visibility("default"))) long long msc_emu_allocated_bytes(void) {
    long long total = 0;
    for (const auto& [start, bytes] : msc_emu::rt().allocations) total += (long long)bytes;
    return total;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
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

cudaError_t cudaFree(void* ptr) {
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

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
    if (msc_emu::rt().sticky_error != cudaSuccess) return msc_emu::rt().sticky_error;
    const cudaError_t e = msc_emu::check_copy("cudaMemcpy", dst, src, bytes, kind);
    if (e != cudaSuccess) return e;
    memmove(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
    return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
    if (msc_emu::rt().sticky_error != cudaSuccess) return msc_emu::rt().sticky_error;
    if (!msc_emu::is_device(dst, bytes)) {
        msc_emu::diagnose("cudaMemset", std::to_string(bytes) + " bytes outside every cudaMalloc allocation");
        return msc_emu::set_error(cudaErrorInvalidValue);
    }
    memset(dst, value, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t) {
    return cudaMemset(dst, value, bytes);
}

cudaError_t cudaDeviceSynchronize() { return msc_emu::set_error(cudaSuccess); }

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    *stream = new CUstream_st();
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    delete stream;
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return msc_emu::set_error(cudaSuccess); }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = new CUevent_st();
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete event;
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
    event->when = std::chrono::steady_clock::now();
    return msc_emu::set_error(cudaSuccess);
}

cudaError_t cudaEventSynchronize(cudaEvent_t) { return msc_emu::set_error(cudaSuccess); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
    return msc_emu::set_error(cudaSuccess);
}

#pragma GCC visibility pop
