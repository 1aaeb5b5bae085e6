/* athread emulator: 64 CPEs as pthreads, LDM as a checked per-CPE arena,
 * DMA as deferred copies that complete at a wait.  See docs/athread.md. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "athread.h"
#include "crts.h"

/* Granule of every DMA address, length, block size and stride (bytes). */
#ifndef ATHREAD_EMU_DMA_ALIGN
#define ATHREAD_EMU_DMA_ALIGN 4
#endif
#define MAX_PENDING 4096 /* an emulator limit, not a documented hardware one */
#define MAX_ALLOCS 64
#define HEAP_ALIGN 32
#define MAX_GUARDS 16

typedef struct {
    int put;
    char *ldm, *mem;
    size_t len, bsize, stride;
    volatile int *reply;
    const char *call;
    char *sent; /* a put: the LDM bytes as they were at the call, checked unchanged at its wait */
} transfer_t;

typedef struct {
    char *base;
    size_t size;
} block_t;

typedef struct {
    int id;
    char *arena;              /* the heap part of this CPE's LDM */
    size_t arena_size;
    block_t allocs[MAX_ALLOCS];
    int nallocs;
    size_t heap_used;
    char *tls_base;           /* this CPE's copy of the __thread_local variables */
    transfer_t pending[MAX_PENDING];
    int npending;
    char *stack_lo, *stack_hi; /* this CPE thread's stack (on SW26010 it lies in LDM) */
    unsigned long long get_bytes, put_bytes, transfers, dma_blocks, peak_ldm, peak_stack;
    size_t refused_size, refused_in_use, refused_heap; /* the first ldm_malloc that returned NULL */
    const char *refused_why;
    pthread_t thread;
} cpe_t;

static cpe_t cpes[ATHREAD_EMU_CPES];
static pthread_key_t cpe_key;
static pthread_barrier_t array_barrier, row_barrier[ATHREAD_EMU_MESH], col_barrier[ATHREAD_EMU_MESH];
static int initialised;
static void (*spawned_func)(void *);
static void *spawned_arg;
static const char *spawned_name = "?";
static int running;
static size_t static_ldm; /* bytes of __thread_local variables in the slave's module */
static unsigned long long spawns;

/* Guarded main memory: whole pages made inaccessible while a kernel runs;
 * DMA reaches them through /proc/self/mem, which ignores page protection.
 * Every 4-byte word of a guarded buffer also carries stamps of the last put
 * that wrote it and the last get that read it: the CPE and the barrier counts
 * it had passed (stamp_of), so a get of words another CPE put, or a put of
 * words another CPE put or read, with no barrier between them is caught,
 * whichever came first. */
typedef struct {
    char *user, *start;
    size_t user_bytes, bytes;
    uint64_t *stamps;  /* the last put of each 4-byte word of [user, user + user_bytes) */
    uint64_t *readers; /* the last get of each word */
} guard_t;

/* Barriers completed: array-wide, and per row and column of the mesh. A put's stamp
 * keeps the writer and these counts; a reader is ordered after it when a barrier
 * both took part in has completed since (the array's, or their shared row's or column's). */
static volatile uint64_t array_epoch, row_epoch[ATHREAD_EMU_MESH], col_epoch[ATHREAD_EMU_MESH];
#define EPOCH_BITS 18
#define EPOCH_MASK ((1ull << EPOCH_BITS) - 1)
static guard_t guards[MAX_GUARDS];
static int nguards;
static int self_mem = -1;
static struct sigaction previous_segv; /* restored at athread_halt, and for faults not ours */

/* One byte of thread-local storage in the slave's module: touching it makes
 * the loader allocate the module's thread-local block for a CPE thread. */
static __thread volatile char tls_anchor;

static cpe_t *self(void) { return (cpe_t *)pthread_getspecific(cpe_key); }
static void say_refused_mallocs(void);

/* The first failure wins: its message is formatted whole and written in one call while a lock
 * holds back any other CPE failing at the same moment (whose text would interleave or be cut
 * short by this abort). */
static void fail(const char *call, const char *fmt, ...) {
    static pthread_mutex_t failing = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&failing);
    say_refused_mallocs(); /* what led here, first */
    cpe_t *c = self();
    char msg[2048];
    int n = c ? snprintf(msg, sizeof msg, "athread emulator: CPE %d (row %d, col %d) in kernel '%s': %s: ", c->id,
                         c->id / ATHREAD_EMU_MESH, c->id % ATHREAD_EMU_MESH, spawned_name, call)
              : snprintf(msg, sizeof msg, "athread emulator: MPE: %s: ", call);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < sizeof msg) n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof msg - 1) n = (int)sizeof msg - 2;
    msg[n++] = '\n';
    fflush(stderr);
    ssize_t written = write(STDERR_FILENO, msg, (size_t)n);
    (void)written;
    abort();
}

static cpe_t *need_cpe(const char *call) {
    cpe_t *c = self();
    if (!c) fail(call, "called outside a CPE (slave) function");
    return c;
}

static size_t ldm_in_use(const cpe_t *c) {
    return ATHREAD_EMU_LDM_CACHE + static_ldm + ATHREAD_EMU_STACK_RESERVE + c->heap_used;
}

/* ---- the module's thread-local block (static LDM) ---------------------- */

typedef struct {
    uintptr_t code;
    size_t memsz;
    void *data;
} tls_query_t;

static int find_tls(struct dl_phdr_info *info, size_t size, void *data) {
    tls_query_t *q = (tls_query_t *)data;
    int holds_code = 0;
    size_t memsz = 0;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        uintptr_t start = info->dlpi_addr + p->p_vaddr;
        if (p->p_type == PT_LOAD && q->code >= start && q->code < start + p->p_memsz) holds_code = 1;
        if (p->p_type == PT_TLS) memsz = p->p_memsz;
    }
    if (!holds_code) return 0;
    q->memsz = memsz;
    q->data = info->dlpi_tls_data;
    return 1;
}

static tls_query_t module_tls(void) {
    tls_query_t q = {(uintptr_t)&find_tls, 0, NULL};
    tls_anchor = 1;
    dl_iterate_phdr(find_tls, &q);
    return q;
}

/* ---- guarded main memory -------------------------------------------- */

static const guard_t *guard_of(const char *p) {
    for (int i = 0; i < nguards; i++)
        if (p >= guards[i].start && p < guards[i].start + guards[i].bytes) return &guards[i];
    return NULL;
}

static const guard_t *stamped_of(const char *p) {
    for (int i = 0; i < nguards; i++)
        if (p >= guards[i].user && p < guards[i].user + guards[i].user_bytes) return &guards[i];
    return NULL;
}

static int overlaps_guard(const char *p, size_t len) {
    for (int i = 0; i < nguards; i++)
        if (p < guards[i].start + guards[i].bytes && p + len > guards[i].start) return 1;
    return 0;
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    const guard_t *g = guard_of((const char *)info->si_addr);
    (void)context;
    if (g) {
        cpe_t *c = self();
        char line[320];
        int n = c ? snprintf(line, sizeof line, "athread emulator: CPE %d (row %d, col %d) in kernel '%s': direct "
                             "access to main memory at byte %td of the guarded buffer %p (%zu bytes); CPE code "
                             "reaches main memory only through DMA\n", c->id, c->id / ATHREAD_EMU_MESH,
                             c->id % ATHREAD_EMU_MESH, spawned_name, (char *)info->si_addr - g->user, (void *)g->user,
                             g->user_bytes)
                  : snprintf(line, sizeof line, "athread emulator: MPE: access to the guarded buffer %p while kernel "
                             "'%s' runs\n", (void *)g->user, spawned_name);
        if (n > (int)sizeof line - 1) n = (int)sizeof line - 1;
        if (write(2, line, (size_t)n) < 0) _exit(134);
        abort();
    }
    sigaction(sig, &previous_segv, NULL); /* not ours: whatever handled it before */
    raise(sig);
}

int athread_emu_guard(void *ptr, size_t bytes) {
    if (!initialised) fail("athread_emu_guard", "athread_init was not called");
    if (running) fail("athread_emu_guard", "called while a kernel runs");
    if (nguards == MAX_GUARDS) fail("athread_emu_guard", "more than %d guarded buffers", MAX_GUARDS);
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = ((uintptr_t)ptr + page - 1) / page * page, end = ((uintptr_t)ptr + bytes) / page * page;
    if (self_mem < 0 || end <= start) start = end = 0; /* no whole page, or no way around a protection */
    guard_t g = {(char *)ptr, (char *)start, bytes, end - start, (uint64_t *)calloc(bytes / 4 + 1, sizeof(uint64_t)),
                 (uint64_t *)calloc(bytes / 4 + 1, sizeof(uint64_t))};
    if (!g.stamps || !g.readers) fail("athread_emu_guard", "out of memory for the stamps of %zu bytes", bytes);
    guards[nguards++] = g;
    return self_mem < 0 ? -1 : 0;
}

void athread_emu_unguard_all(void) {
    if (running) fail("athread_emu_unguard_all", "called while a kernel runs");
    for (int i = 0; i < nguards; i++) {
        free(guards[i].stamps);
        free(guards[i].readers);
    }
    nguards = 0;
}

static void protect_guards(int prot) {
    for (int i = 0; i < nguards; i++)
        if (guards[i].bytes && mprotect(guards[i].start, guards[i].bytes, prot) != 0)
            fail("athread_spawn", "mprotect of the guarded buffer %p failed", (void *)guards[i].user);
}

/* Whether /proc/self/mem reads memory that is protected (it may be restricted). */
static int open_self_mem(void) {
    long page = sysconf(_SC_PAGESIZE);
    char *probe = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int fd = open("/proc/self/mem", O_RDWR | O_CLOEXEC);
    char byte = 0;
    if (probe == MAP_FAILED) return -1;
    probe[0] = 42;
    mprotect(probe, (size_t)page, PROT_NONE);
    if (fd >= 0 && (pread(fd, &byte, 1, (off_t)(uintptr_t)probe) != 1 || byte != 42)) {
        close(fd);
        fd = -1;
    }
    munmap(probe, (size_t)page);
    return fd;
}

/* ---- MPE side ----------------------------------------------------------- */

int athread_init(void) {
    if (initialised) fail("athread_init", "called again before athread_halt: the CPEs are set up once per program");
    if (pthread_key_create(&cpe_key, NULL) != 0) fail("athread_init", "pthread_key_create failed");
    pthread_barrier_init(&array_barrier, NULL, ATHREAD_EMU_CPES);
    for (int i = 0; i < ATHREAD_EMU_MESH; i++) {
        pthread_barrier_init(&row_barrier[i], NULL, ATHREAD_EMU_MESH);
        pthread_barrier_init(&col_barrier[i], NULL, ATHREAD_EMU_MESH);
    }
    static_ldm = module_tls().memsz - sizeof tls_anchor; /* the segment holds the anchor too */
    self_mem = open_self_mem();
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_sigaction = on_fault;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, &previous_segv);
    for (int i = 0; i < ATHREAD_EMU_CPES; i++) {
        cpes[i].id = i;
        cpes[i].arena_size = ATHREAD_EMU_LDM_BYTES;
        cpes[i].arena = (char *)aligned_alloc(HEAP_ALIGN, ATHREAD_EMU_LDM_BYTES);
        if (!cpes[i].arena) fail("athread_init", "out of memory for the LDM arenas");
    }
    initialised = 1;
    return 0;
}

static void report_stats(void) {
    const char *want = getenv("ATHREAD_EMU_STATS");
    if (!want || !*want || strcmp(want, "0") == 0) return;
    athread_emu_stats_t s = athread_emu_stats();
    fprintf(stderr,
            "athread emulator: chip=%s ldm_bytes=%d spawns=%llu get_bytes=%llu put_bytes=%llu transfers=%llu "
            "dma_blocks=%llu peak_ldm=%llu static_ldm=%llu peak_stack=%llu\n",
            ATHREAD_EMU_CHIP, ATHREAD_EMU_LDM_BYTES, s.spawns, s.get_bytes, s.put_bytes, s.transfers, s.dma_blocks,
            s.peak_ldm, s.static_ldm, s.peak_stack);
}

int athread_emu_halt(void) {
    if (!initialised) return 0;
    if (running) fail("athread_halt", "called while a spawned kernel is still running (no athread_join)");
    report_stats();
    for (int i = 0; i < ATHREAD_EMU_CPES; i++) free(cpes[i].arena);
    pthread_barrier_destroy(&array_barrier);
    for (int i = 0; i < ATHREAD_EMU_MESH; i++) {
        pthread_barrier_destroy(&row_barrier[i]);
        pthread_barrier_destroy(&col_barrier[i]);
    }
    pthread_key_delete(cpe_key);
    sigaction(SIGSEGV, &previous_segv, NULL);
    if (self_mem >= 0) close(self_mem);
    self_mem = -1;
    nguards = 0;
    initialised = 0;
    return 0;
}

/* The stack a CPE's kernel uses, measured on this host (an estimate of the chip's): a window below the
 * caller's frame is painted before the kernel runs and scanned for the deepest byte it changed after. */
#define STACK_WINDOW (64 * 1024)
#define STACK_PAINT 0xC5

static __attribute__((noinline)) char *paint_stack(void) {
    char *top = (char *)__builtin_frame_address(0) - 1024; /* below this function's own frame */
    memset(top - STACK_WINDOW, STACK_PAINT, STACK_WINDOW);
    return top;
}

static size_t stack_used(const char *top) {
    const char *p = top - STACK_WINDOW;
    while (p < top && (unsigned char)*p == STACK_PAINT) p++;
    return (size_t)(top - p);
}

static void *cpe_main(void *arg) {
    cpe_t *c = (cpe_t *)arg;
    pthread_setspecific(cpe_key, c);
    c->tls_base = (char *)module_tls().data;
    pthread_attr_t attr;
    void *stack = NULL;
    size_t stack_bytes = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
        pthread_attr_getstack(&attr, &stack, &stack_bytes);
        pthread_attr_destroy(&attr);
    }
    c->stack_lo = (char *)stack;
    c->stack_hi = (char *)stack + stack_bytes;
    c->nallocs = 0;
    c->heap_used = 0;
    c->npending = 0;
    if (ldm_in_use(c) > c->arena_size)
        fail("athread_spawn",
             "LDM over capacity before any ldm_malloc: __thread_local variables %zu + stack reserve %d + data cache "
             "%d = %zu bytes > %d bytes of LDM on %s",
             static_ldm, ATHREAD_EMU_STACK_RESERVE, ATHREAD_EMU_LDM_CACHE, ldm_in_use(c), ATHREAD_EMU_LDM_BYTES,
             ATHREAD_EMU_CHIP);
    if (ldm_in_use(c) > c->peak_ldm) c->peak_ldm = ldm_in_use(c);
    const char *top = paint_stack();
    spawned_func(spawned_arg);
    const size_t used = stack_used(top);
    if (used > c->peak_stack) c->peak_stack = used;
    if (used > ATHREAD_EMU_STACK_RESERVE)
        fail("return", "the kernel's stack reached %zu bytes (measured on this host, an estimate of the chip's), "
             "more than the %d-byte stack reserve counted in the LDM: on the chip it would overwrite LDM data",
             used, ATHREAD_EMU_STACK_RESERVE);
    if (c->npending)
        fail("return", "%d DMA transfer(s) never waited for (first: %s of %zu bytes); on the chip their data "
             "is undefined", c->npending, c->pending[0].call, c->pending[0].len);
    return NULL;
}

int __real_athread_spawn(void *func, void *arg, const char *name) {
    if (!initialised) fail("athread_spawn", "athread_init was not called");
    if (running) fail("athread_spawn", "a kernel is already running (missing athread_join)");
    spawned_func = (void (*)(void *))func;
    spawned_arg = arg;
    spawned_name = name;
    running = 1;
    spawns++;
    array_epoch++; /* the join before and this spawn order every CPE's transfers */
    protect_guards(PROT_NONE);
    for (int i = 0; i < ATHREAD_EMU_CPES; i++)
        if (pthread_create(&cpes[i].thread, NULL, cpe_main, &cpes[i]) != 0)
            fail("athread_spawn", "could not start the thread of CPE %d", i);
    return 0;
}

int athread_join(void) {
    if (!running) fail("athread_join", "no kernel is running");
    for (int i = 0; i < ATHREAD_EMU_CPES; i++) pthread_join(cpes[i].thread, NULL);
    protect_guards(PROT_READ | PROT_WRITE);
    say_refused_mallocs();
    running = 0;
    return 0;
}

athread_emu_stats_t athread_emu_stats(void) {
    athread_emu_stats_t s = {0, 0, 0, 0, 0, spawns, static_ldm, 0};
    for (int i = 0; i < ATHREAD_EMU_CPES; i++) {
        s.get_bytes += cpes[i].get_bytes;
        s.put_bytes += cpes[i].put_bytes;
        s.transfers += cpes[i].transfers;
        s.dma_blocks += cpes[i].dma_blocks;
        if (cpes[i].peak_ldm > s.peak_ldm) s.peak_ldm = cpes[i].peak_ldm;
        if (cpes[i].peak_stack > s.peak_stack) s.peak_stack = cpes[i].peak_stack;
    }
    return s;
}

void athread_emu_reset_stats(void) {
    for (int i = 0; i < ATHREAD_EMU_CPES; i++)
        cpes[i].get_bytes = cpes[i].put_bytes = cpes[i].transfers = cpes[i].dma_blocks = cpes[i].peak_ldm =
            cpes[i].peak_stack = 0;
    spawns = 0;
}

/* ---- CPE side: ids, barriers ------------------------------------------- */

int athread_emu_myid(void) { return need_cpe("_MYID")->id; }

int athread_get_id(int core) {
    (void)core;
    return need_cpe("athread_get_id")->id;
}

/* A barrier, then its count advanced by one member, then a second wait: every member sees the new count. */
static void barrier(pthread_barrier_t *b, volatile uint64_t *count) {
    if (pthread_barrier_wait(b) == PTHREAD_BARRIER_SERIAL_THREAD) *count += 1;
    pthread_barrier_wait(b);
}

int athread_syn(scope sc, int mask) {
    cpe_t *c = need_cpe("athread_syn");
    (void)mask;
    for (int k = 0; k < c->npending; k++)
        if (c->pending[k].put)
            fail("athread_syn", "an %s of %zu bytes is not waited for at the barrier: CPEs past it may read main "
                 "memory before the put lands", c->pending[k].call, c->pending[k].len);
    const int row = c->id / ATHREAD_EMU_MESH, col = c->id % ATHREAD_EMU_MESH;
    if (sc == ARRAY_SCOPE) barrier(&array_barrier, &array_epoch);
    else if (sc == ROW_SCOPE) barrier(&row_barrier[row], &row_epoch[row]);
    else if (sc == COL_SCOPE) barrier(&col_barrier[col], &col_epoch[col]);
    else fail("athread_syn", "unknown scope %d", (int)sc);
    return 0;
}

/* ---- ordering of puts and gets between CPEs ----------------------------- */

/* A transfer of `len` bytes in blocks of `bsize` (0: one contiguous block): how many, and how long. */
static size_t blocks_of(size_t len, size_t bsize) { return bsize ? len / bsize : 1; }
static size_t block_of(size_t len, size_t bsize) { return bsize ? bsize : len; }

static uint64_t stamp_of(const cpe_t *c) {
    const int row = c->id / ATHREAD_EMU_MESH, col = c->id % ATHREAD_EMU_MESH;
    return (uint64_t)(c->id + 1) << (3 * EPOCH_BITS) | (array_epoch & EPOCH_MASK) << (2 * EPOCH_BITS) |
           (row_epoch[row] & EPOCH_MASK) << EPOCH_BITS | (col_epoch[col] & EPOCH_MASK);
}

/* Whether this CPE is ordered after the put that left `stamp` (or none did). */
static int ordered_after(const cpe_t *c, uint64_t stamp) {
    const int writer = (int)(stamp >> (3 * EPOCH_BITS)) - 1;
    if (writer < 0 || writer == c->id) return 1;
    if (((stamp >> (2 * EPOCH_BITS)) & EPOCH_MASK) != (array_epoch & EPOCH_MASK)) return 1;
    const int row = c->id / ATHREAD_EMU_MESH, col = c->id % ATHREAD_EMU_MESH;
    if (writer / ATHREAD_EMU_MESH == row && ((stamp >> EPOCH_BITS) & EPOCH_MASK) != (row_epoch[row] & EPOCH_MASK))
        return 1;
    if (writer % ATHREAD_EMU_MESH == col && (stamp & EPOCH_MASK) != (col_epoch[col] & EPOCH_MASK)) return 1;
    return 0;
}

/* Check and stamp the words of a transfer's main-memory blocks that lie in guarded buffers: a get of words
 * another CPE put, or a put of words another CPE put or read, with no barrier between is a race on the chip. */
static void order_words(cpe_t *c, const char *call, int put, char *mem, size_t len, size_t bsize, size_t stride) {
    const size_t nblocks = blocks_of(len, bsize), block = block_of(len, bsize);
    const uint64_t mine = stamp_of(c);
    for (size_t b = 0; b < nblocks; b++) {
        char *start = mem + b * (block + stride);
        const guard_t *g = stamped_of(start);
        for (size_t at = 0; at < block; at += 4) {
            if (!g || start + at >= g->user + g->user_bytes) g = stamped_of(start + at);
            if (!g) continue;
            const size_t word = (size_t)(start + at - g->user) / 4;
            uint64_t *stamp = &g->stamps[word], *reader = &g->readers[word];
            const uint64_t other = !ordered_after(c, *stamp) ? *stamp : put && !ordered_after(c, *reader) ? *reader : 0;
            if (other)
                fail(call, "%s byte %td of the buffer %p, which CPE %d %s with no barrier between: a missing "
                     "athread_syn(ARRAY_SCOPE, ...) / athread_ssync_array() (a race on the chip)",
                     put ? "writes" : "reads", start + at - g->user, (void *)g->user,
                     (int)(other >> (3 * EPOCH_BITS)) - 1, other == *stamp ? "put" : "read");
            if (put) *stamp = mine;
            else *reader = mine;
        }
    }
}

/* ---- LDM ---------------------------------------------------------------- */

static int in_range(const char *p, size_t len, const char *base, size_t size) {
    return base && p >= base && len <= size && (size_t)(p - base) <= size - len;
}

/* Whether [p, p+len) lies in this CPE's LDM: its heap or its __thread_local block. */
static int in_own_ldm(const cpe_t *c, const char *p, size_t len) {
    return in_range(p, len, c->arena, c->arena_size) || in_range(p, len, c->tls_base, static_ldm + sizeof tls_anchor);
}

static int overlaps_any_ldm(const char *p, size_t len) {
    for (int i = 0; i < ATHREAD_EMU_CPES; i++) {
        const cpe_t *c = &cpes[i];
        if (p < c->arena + c->arena_size && p + len > c->arena) return 1;
        if (c->tls_base && static_ldm && p < c->tls_base + static_ldm && p + len > c->tls_base) return 1;
    }
    return 0;
}

/* An ldm_malloc that returns NULL is said at the join, by the MPE: printing here would run the C library's
 * formatting on the CPE's stack, which is measured against the stack reserve. */
static void refuse_malloc(cpe_t *c, size_t size, const char *why) {
    if (c->refused_size) return; /* the first one is said */
    c->refused_size = size;
    c->refused_why = why;
    c->refused_in_use = ldm_in_use(c);
    c->refused_heap = c->heap_used;
}

static void say_refused_mallocs(void) {
    for (int i = 0; i < ATHREAD_EMU_CPES; i++) {
        cpe_t *c = &cpes[i];
        if (!c->refused_size) continue;
        fprintf(stderr,
                "athread emulator: CPE %d in kernel '%s': ldm_malloc: ldm_malloc(%zu) %s: %d bytes on %s, already "
                "in use %zu (__thread_local %zu + stack reserve %d + data cache %d + ldm_malloc %zu); it returned "
                "NULL\n",
                c->id, spawned_name, c->refused_size, c->refused_why, ATHREAD_EMU_LDM_BYTES, ATHREAD_EMU_CHIP,
                c->refused_in_use, static_ldm, ATHREAD_EMU_STACK_RESERVE, ATHREAD_EMU_LDM_CACHE, c->refused_heap);
        c->refused_size = 0;
    }
}

void *ldm_malloc(size_t size) {
    cpe_t *c = need_cpe("ldm_malloc");
    size_t rounded = (size + HEAP_ALIGN - 1) / HEAP_ALIGN * HEAP_ALIGN;
    if (size == 0) fail("ldm_malloc", "size 0");
    if (ldm_in_use(c) + rounded > c->arena_size) { /* as on the chip: NULL, for the caller to check */
        refuse_malloc(c, size, "exceeds the LDM");
        return NULL;
    }
    if (c->nallocs == MAX_ALLOCS) fail("ldm_malloc", "more than %d live ldm_malloc blocks", MAX_ALLOCS);
    /* first fit in address order over the live blocks */
    char *at = c->arena;
    int slot = 0;
    for (; slot < c->nallocs; slot++) {
        if ((size_t)(c->allocs[slot].base - at) >= rounded) break;
        at = c->allocs[slot].base + c->allocs[slot].size;
    }
    if ((size_t)(c->arena + c->arena_size - at) < rounded && slot == c->nallocs) {
        refuse_malloc(c, size, "finds the LDM heap too fragmented");
        return NULL;
    }
    memmove(&c->allocs[slot + 1], &c->allocs[slot], (size_t)(c->nallocs - slot) * sizeof(block_t));
    c->allocs[slot].base = at;
    c->allocs[slot].size = rounded;
    c->nallocs++;
    c->heap_used += rounded;
    if (ldm_in_use(c) > c->peak_ldm) c->peak_ldm = ldm_in_use(c);
    memset(at, 0xA5, rounded); /* LDM is not zeroed */
    return at;
}

void ldm_free(void *ptr, size_t size) {
    cpe_t *c = need_cpe("ldm_free");
    size_t rounded = (size + HEAP_ALIGN - 1) / HEAP_ALIGN * HEAP_ALIGN;
    for (int i = 0; i < c->nallocs; i++) {
        if (c->allocs[i].base != (char *)ptr) continue;
        if (c->allocs[i].size != rounded)
            fail("ldm_free", "ldm_free(%p, %zu) of a block allocated with %zu bytes", ptr, size, c->allocs[i].size);
        for (int k = 0; k < c->npending; k++)
            if (c->pending[k].ldm >= c->allocs[i].base && c->pending[k].ldm < c->allocs[i].base + rounded)
                fail("ldm_free", "ldm_free(%p, %zu) while an %s on it is not waited for", ptr, size,
                     c->pending[k].call);
        c->heap_used -= rounded;
        memmove(&c->allocs[i], &c->allocs[i + 1], (size_t)(c->nallocs - i - 1) * sizeof(block_t));
        c->nallocs--;
        return;
    }
    fail("ldm_free", "ldm_free(%p, %zu): not a block from ldm_malloc on this CPE", ptr, size);
}

void *athread_emu_ldm(void *ptr, size_t bytes, const char *what) {
    cpe_t *c = need_cpe("LDM_ACCESS");
    if (!in_own_ldm(c, (const char *)ptr, bytes))
        fail("LDM_ACCESS", "%s = %p (%zu bytes) is not in this CPE's LDM; CPE code reaches main memory only "
             "through DMA", what, ptr, bytes);
    return ptr;
}

/* ---- DMA ---------------------------------------------------------------- */

static void do_copy(const transfer_t *t) {
    if (t->sent) {
        int changed = memcmp(t->sent, t->ldm, t->len) != 0;
        free(t->sent);
        if (changed)
            fail(t->call, "its LDM buffer %p (%zu bytes) was written before the wait for it; on the chip the DMA "
                 "engine may send either version", (void *)t->ldm, t->len);
    } else
        for (size_t i = 0; i < t->len; i++)
            if ((unsigned char)t->ldm[i] != 0xFF)
                fail(t->call, "its LDM buffer %p (%zu bytes) was written at byte %zu before the wait for it; on the "
                     "chip the DMA engine may overwrite it", (void *)t->ldm, t->len, i);
    const size_t nblocks = blocks_of(t->len, t->bsize), block = block_of(t->len, t->bsize);
    for (size_t b = 0; b < nblocks; b++) {
        char *mem = t->mem + b * (block + t->stride);
        char *ldm = t->ldm + b * block;
        if (overlaps_guard(mem, block)) {
            ssize_t done = t->put ? pwrite(self_mem, ldm, block, (off_t)(uintptr_t)mem)
                                  : pread(self_mem, ldm, block, (off_t)(uintptr_t)mem);
            if (done != (ssize_t)block) fail(t->call, "copy through /proc/self/mem failed (%zu bytes)", block);
        } else if (t->put) memcpy(mem, ldm, block);
        else memcpy(ldm, mem, block);
    }
}

static void check_dma(cpe_t *c, const char *call, char *ldm, char *mem, long len, long stride, long bsize) {
    const long g = ATHREAD_EMU_DMA_ALIGN;
    if (len <= 0) fail(call, "length %ld bytes: must be positive", len);
    if (len % g) fail(call, "length %ld bytes is not a multiple of %ld", len, g);
    if (len > ATHREAD_EMU_LDM_BYTES) fail(call, "length %ld bytes exceeds the LDM (%d bytes)", len, ATHREAD_EMU_LDM_BYTES);
    if ((uintptr_t)ldm % g) fail(call, "LDM address %p is not %ld-byte aligned (length %ld)", (void *)ldm, g, len);
    if ((uintptr_t)mem % g)
        fail(call, "main-memory address %p is not %ld-byte aligned (length %ld)", (void *)mem, g, len);
    if (stride < 0 || bsize < 0) fail(call, "negative stride %ld or block size %ld", stride, bsize);
    if (stride && !bsize) fail(call, "stride %ld bytes with block size 0", stride);
    if (bsize) {
        if (bsize % g || stride % g)
            fail(call, "block size %ld and stride %ld bytes must be multiples of %ld", bsize, stride, g);
        if (len % bsize) fail(call, "length %ld bytes is not a whole number of %ld-byte blocks", len, bsize);
    }
    if (!in_own_ldm(c, ldm, (size_t)len))
        fail(call, "LDM side %p (%ld bytes) is not inside this CPE's LDM (ldm_malloc or __thread_local)",
             (void *)ldm, len);
    long nblocks = bsize ? len / bsize : 1;
    size_t span = (size_t)(len + (nblocks - 1) * stride);
    if (overlaps_any_ldm(mem, span))
        fail(call, "main-memory side %p (%zu bytes) lies in a CPE's LDM", (void *)mem, span);
}

/* The reply word must be where the DMA engine can write it: this CPE's LDM, or on SW26010 its stack
 * (which lives in LDM there). */
static void check_reply(cpe_t *c, const char *call, void *reply) {
    const char *r = (const char *)reply;
    if (!reply) fail(call, "reply counter is NULL");
    if (in_own_ldm(c, r, sizeof(int))) return;
    if (!ATHREAD_EMU_PRO && r >= c->stack_lo && r + sizeof(int) <= c->stack_hi) return;
    fail(call, "reply word %p is not in this CPE's LDM%s; declare it __thread_local", reply,
         ATHREAD_EMU_PRO ? " (the SW26010-Pro's DMA engine writes replies to LDM addresses only)" : " or stack");
}

static void issue(int put, const char *call, void *ldm, void *mem, int len, void *reply, int stride, int bsize,
                  dma_mode mode) {
    cpe_t *c = need_cpe(call);
    if (mode != PE_MODE) fail(call, "only PE_MODE is emulated (mode %d)", (int)mode);
    check_dma(c, call, (char *)ldm, (char *)mem, len, stride, bsize);
    if (c->npending == MAX_PENDING) fail(call, "more than %d DMA transfers outstanding", MAX_PENDING);
    for (int k = 0; k < c->npending; k++) { /* two transfers may read one LDM buffer, never write it */
        const transfer_t *o = &c->pending[k];
        if ((put && o->put) || (char *)ldm >= o->ldm + o->len || (char *)ldm + len <= o->ldm) continue;
        fail(call, "its LDM buffer %p (%d bytes) overlaps that of an %s (%p, %zu bytes) not yet waited for; on the "
             "chip the two transfers race", ldm, len, o->call, (void *)o->ldm, o->len);
    }
    transfer_t t = {put, (char *)ldm, (char *)mem, (size_t)len, (size_t)bsize, (size_t)stride,
                    (volatile int *)reply, call, NULL};
    if (put) {
        t.sent = (char *)malloc((size_t)len);
        if (!t.sent) fail(call, "out of memory for the put's copy (%d bytes)", len);
        memcpy(t.sent, ldm, (size_t)len);
    }
    order_words(c, call, put, (char *)mem, (size_t)len, (size_t)bsize, (size_t)stride);
    c->pending[c->npending++] = t;
    c->transfers++;
    c->dma_blocks += blocks_of((size_t)len, (size_t)bsize);
    if (put) c->put_bytes += (size_t)len;
    else {
        c->get_bytes += (size_t)len;
        memset(ldm, 0xFF, (size_t)len); /* NaN until the transfer is waited for */
    }
}

int athread_emu_get(const char *call, dma_mode mode, void *src_mem, void *dst_ldm, int len, void *reply, int stride,
                    int bsize) {
    check_reply(need_cpe(call), call, reply);
    issue(0, call, dst_ldm, src_mem, len, reply, stride, bsize, mode);
    return 0;
}

int athread_emu_put(const char *call, dma_mode mode, void *src_ldm, void *dst_mem, int len, void *reply, int stride,
                    int bsize) {
    check_reply(need_cpe(call), call, reply);
    issue(1, call, src_ldm, dst_mem, len, reply, stride, bsize, mode);
    return 0;
}

void athread_emu_wait(const char *call, void *reply, int n) {
    cpe_t *c = need_cpe(call);
    volatile int *r = (volatile int *)reply;
    while (*r < n) {
        int k = 0;
        while (k < c->npending && c->pending[k].reply != r) k++;
        if (k == c->npending)
            fail(call, "waits for the reply counter to reach %d, but it is %d and no transfer on it is outstanding "
                 "(this would hang on the chip)", n, *r);
        transfer_t t = c->pending[k];
        memmove(&c->pending[k], &c->pending[k + 1], (size_t)(c->npending - k - 1) * sizeof(transfer_t));
        c->npending--;
        do_copy(&t);
        *r += 1;
    }
}

void athread_emu_dma_blocking(int put, void *dst, void *src, int len) {
    volatile int reply = 0; /* the emulator's own word (CRTS_dma_get/put wait inside): not checked */
    if (put) issue(1, "CRTS_dma_put", src, dst, len, (void *)&reply, 0, 0, PE_MODE);
    else issue(0, "CRTS_dma_get", dst, src, len, (void *)&reply, 0, 0, PE_MODE);
    athread_emu_wait(put ? "CRTS_dma_put" : "CRTS_dma_get", (void *)&reply, 1);
}
