/* athread emulator: the CPE (slave) side, SW26010-Pro names (crts.h).
 * Destination first; strided forms take (len, bsize, stride).  Reply words
 * must lie in LDM (__thread_local): the Pro's DMA engine writes them there. */
#ifndef MSC_ATHREAD_EMU_CRTS_H
#define MSC_ATHREAD_EMU_CRTS_H

#include "slave.h"

typedef volatile int crts_rply_t;

#define CRTS_tid athread_emu_myid()
#define CRTS_rid (athread_emu_myid() / ATHREAD_EMU_MESH)
#define CRTS_cid (athread_emu_myid() % ATHREAD_EMU_MESH)

#define CRTS_dma_iget(dst, src, len, reply) \
    athread_emu_get("CRTS_dma_iget", PE_MODE, (src), (dst), (len), (void *)(reply), 0, 0)
#define CRTS_dma_iput(dst, src, len, reply) \
    athread_emu_put("CRTS_dma_iput", PE_MODE, (src), (dst), (len), (void *)(reply), 0, 0)
#define CRTS_dma_iget_stride(dst, src, len, bsize, stride, reply) \
    athread_emu_get("CRTS_dma_iget_stride", PE_MODE, (src), (dst), (len), (void *)(reply), (stride), (bsize))
#define CRTS_dma_iput_stride(dst, src, len, bsize, stride, reply) \
    athread_emu_put("CRTS_dma_iput_stride", PE_MODE, (src), (dst), (len), (void *)(reply), (stride), (bsize))
#define CRTS_dma_wait_value(reply, n) athread_emu_wait("CRTS_dma_wait_value", (void *)(reply), (n))
#define CRTS_ssync_array() athread_syn(ARRAY_SCOPE, 0xffff)
#define athread_ssync_array() athread_syn(ARRAY_SCOPE, 0xffff)
#define CRTS_ssync_row() athread_syn(ROW_SCOPE, 0xff)
#define CRTS_ssync_col() athread_syn(COL_SCOPE, 0xff)

/* The Pro declares the LDM heap; ldm_malloc returns NULL when the LDM is full. */
void *ldm_malloc(size_t size);
void ldm_free(void *ptr, size_t size);

void athread_emu_dma_blocking(int put, void *dst, void *src, int len);
#define CRTS_dma_get(dst, src, len) athread_emu_dma_blocking(0, (dst), (src), (len))
#define CRTS_dma_put(dst, src, len) athread_emu_dma_blocking(1, (dst), (src), (len))

#endif
