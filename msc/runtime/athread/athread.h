/* athread emulator: the MPE (host) side of the Sunway athread API.
 *
 * Built only with EMULATE=1; on a Sunway machine the toolchain's own
 * <athread.h> is used instead.  See docs/athread.md for the model. */
#ifndef MSC_ATHREAD_EMU_H
#define MSC_ATHREAD_EMU_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The chip: LDM bytes per CPE.  The Makefile sets both from CHIP. */
#ifndef ATHREAD_EMU_LDM_BYTES
#define ATHREAD_EMU_LDM_BYTES (256 * 1024) /* SW26010-Pro */
#endif
#ifndef ATHREAD_EMU_CHIP
#define ATHREAD_EMU_CHIP "sw26010pro"
#endif
/* LDM bytes reserved for each CPE's stack (the stack lives in LDM). */
#ifndef ATHREAD_EMU_STACK_RESERVE
#define ATHREAD_EMU_STACK_RESERVE (8 * 1024)
#endif

#define ATHREAD_EMU_CPES 64
#define ATHREAD_EMU_MESH 8

/* Slave functions keep their C name under emulation (the slave compiler
 * would prefix them with "slave_"); declare them with SLAVE_FUN. */
#define SLAVE_FUN(name) name

int athread_init(void);
int athread_halt(void);
int __real_athread_spawn(void *func, void *arg, const char *name);
int athread_join(void);
#define athread_spawn(func, arg) __real_athread_spawn((void *)(func), (void *)(arg), #func)

/* Guard a main-memory buffer while kernels run: a CPE that loads or stores
 * it directly (not by DMA) is reported and aborted.  Whole pages inside the
 * buffer are guarded.  Returns 0, or -1 where this system cannot guard (the
 * emulator then copies through /proc/self/mem and that is refused). */
int athread_emu_guard(void *ptr, size_t bytes);

/* What the emulator counted since the last reset (all CPEs together). */
typedef struct {
    unsigned long long get_bytes;  /* main memory -> LDM */
    unsigned long long put_bytes;  /* LDM -> main memory */
    unsigned long long transfers;  /* DMA calls (one strided call is one transfer) */
    unsigned long long peak_ldm;   /* largest LDM use of one CPE: static + stack reserve + heap */
    unsigned long long spawns;
} athread_emu_stats_t;

athread_emu_stats_t athread_emu_stats(void);
void athread_emu_reset_stats(void);

#ifdef __cplusplus
}
#endif
#endif
