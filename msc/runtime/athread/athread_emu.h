/* athread emulator: what its host (athread.h) and CPE (slave.h, crts.h)
 * headers share -- the chip's figures, the emulator's own calls and its
 * counters.  No vendor header declares these names.  See docs/athread.md. */
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

/* 1 on SW26010-Pro (known by its LDM size): the rules that differ between the chips */
#define ATHREAD_EMU_PRO (ATHREAD_EMU_LDM_BYTES > 64 * 1024)

/* SW26010-Pro: bytes of each CPE's LDM configured as data cache, which LDM variables, the stack and
 * ldm_malloc cannot use (the Makefile's LDM_CACHE). SW26010 has no such cache. */
#ifndef ATHREAD_EMU_LDM_CACHE
#define ATHREAD_EMU_LDM_CACHE 0
#endif
#if ATHREAD_EMU_LDM_CACHE && !ATHREAD_EMU_PRO
#error "ATHREAD_EMU_LDM_CACHE: only the SW26010-Pro shares its LDM with a data cache"
#endif

#define ATHREAD_EMU_CPES 64
#define ATHREAD_EMU_MESH 8

/* What the emulator counted since the last reset (all CPEs together). */
typedef struct {
    unsigned long long get_bytes;  /* main memory -> LDM */
    unsigned long long put_bytes;  /* LDM -> main memory */
    unsigned long long transfers;  /* DMA calls (one strided call is one transfer) */
    unsigned long long dma_blocks; /* contiguous blocks moved (a strided call moves len / bsize) */
    unsigned long long peak_ldm;   /* largest LDM use of one CPE: static + stack reserve + heap */
    unsigned long long spawns;
    unsigned long long static_ldm; /* bytes of __thread_local variables per CPE */
    unsigned long long peak_stack; /* deepest stack of one CPE's kernel, measured on this host */
} athread_emu_stats_t;

athread_emu_stats_t athread_emu_stats(void);
void athread_emu_reset_stats(void);

#ifdef __cplusplus
}
#endif
#endif
