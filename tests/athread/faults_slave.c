/* CPE side of the fault programs, SW26010-Pro (CRTS) names: one CPE breaks
 * a rule, the others do the legal version of the same thing. */
#include <crts.h>

#include "faults.h"

#ifndef STATIC_DOUBLES
#define STATIC_DOUBLES 16
#endif
__thread_local double fixed[STATIC_DOUBLES];
__thread_local crts_rply_t reply; /* reply words live in LDM (the Pro's DMA engine writes nowhere else) */

/* A local array of `bytes` bytes, all touched: that much stack. */
static __attribute__((noinline)) double deep_stack(int bytes) {
    volatile char local[bytes];
    for (int i = 0; i < bytes; i++) local[i] = (char)i;
    return local[bytes - 1];
}

void faults(void *raw) {
    faults_args a = *(faults_args *)raw;
    const int culprit = CRTS_tid == a.culprit;
    reply = 0;
    crts_rply_t stack_reply = 0;
    char *memory = (char *)a.memory + 64 * CRTS_tid;
    switch (a.mode) {
    case LDM_MALLOC: {
        double *buf = ldm_malloc((size_t)a.bytes);
        CRTS_dma_iget(buf, memory, 64, &reply);
        CRTS_dma_wait_value(&reply, 1);
        ldm_free(buf, (size_t)a.bytes);
        break;
    }
    case MISALIGNED_DMA:
        CRTS_dma_iget(fixed, memory + (culprit ? 2 : 0), 64, &reply);
        CRTS_dma_wait_value(&reply, 1);
        break;
    case BAD_LENGTH:
        CRTS_dma_iget(fixed, memory, culprit ? a.bytes : 64, &reply);
        CRTS_dma_wait_value(&reply, 1);
        break;
    case BAD_BLOCKS:
        CRTS_dma_iget_stride(fixed, memory, culprit ? 40 : 48, 16, 64, &reply);
        CRTS_dma_wait_value(&reply, 1);
        break;
    case DMA_TO_MEMORY:
        CRTS_dma_iget(culprit ? (void *)(memory + 4096) : (void *)fixed, memory, 64, &reply);
        CRTS_dma_wait_value(&reply, 1);
        break;
    case DIRECT_ACCESS: {
        double *p = culprit ? a.memory : fixed;
        double *checked = LDM_ACCESS(p, sizeof(double));
        checked[0] = 1.0;
        break;
    }
    case REPLY_ON_STACK: /* legal on SW26010, whose stack is in LDM; not on the Pro */
        CRTS_dma_iget(fixed, memory, 64, culprit ? &stack_reply : &reply);
        CRTS_dma_wait_value(culprit ? &stack_reply : &reply, 1);
        break;
    case PUT_REWRITTEN: /* the LDM side of a put written again before its wait */
        fixed[0] = CRTS_tid;
        CRTS_dma_iput(memory, fixed, 64, &reply);
        if (culprit) fixed[0] = -1.0;
        CRTS_dma_wait_value(&reply, 1);
        break;
    case GET_OVERWRITTEN: /* the LDM side of a get written before its wait */
        CRTS_dma_iget(fixed, memory, 64, &reply);
        if (culprit) fixed[1] = 0.0;
        CRTS_dma_wait_value(&reply, 1);
        break;
    case PUT_AT_BARRIER:
        fixed[0] = CRTS_tid;
        CRTS_dma_iput(a.memory + SYNC_PUBLISHED + CRTS_tid, fixed, 8, &reply);
        if (!culprit) CRTS_dma_wait_value(&reply, 1);
        CRTS_ssync_array();
        if (culprit) CRTS_dma_wait_value(&reply, 1);
        break;
    case RACE:
        fixed[0] = CRTS_tid;
        CRTS_dma_put(a.memory + SYNC_PUBLISHED + CRTS_tid, fixed, 8);
        if (a.culprit < 0) CRTS_ssync_array();
        CRTS_dma_get(fixed, a.memory + SYNC_PUBLISHED + (CRTS_tid + 1) % 64, 8);
        break;
    case BIG_STACK:
        fixed[0] = deep_stack(culprit ? a.bytes : 64);
        break;
    case WAIT_TOO_LONG:
        CRTS_dma_iget(fixed, memory, 64, &reply);
        CRTS_dma_wait_value(&reply, culprit ? 2 : 1);
        break;
    case STATIC_LDM:
        fixed[0] = CRTS_tid;
        break;
    case DIRECT_LOAD: {
        volatile double *p = culprit ? a.memory + 1000 : fixed;
        fixed[1] = p[0];
        break;
    }
    case SYNC: {
        const int id = CRTS_tid;
        for (volatile long spin = 0; spin < 20000L * (63 - id); spin++) {
        } /* the late publishers are the low ids, whose neighbours read early */
        fixed[0] = id + 1;
        CRTS_dma_put(a.memory + SYNC_PUBLISHED + id, fixed, 8);
        if (a.bytes == 0) CRTS_ssync_array();
        else if (a.bytes == 1) CRTS_ssync_row();
        else CRTS_ssync_col();
        CRTS_dma_get(fixed, a.memory + SYNC_PUBLISHED + sync_neighbour(id, a.bytes), 8);
        CRTS_dma_put(a.memory + SYNC_READ + id, fixed, 8);
        break;
    }
    }
}
