/* athread emulator: the CPE (slave) side, SW26010 names (slave.h), with the
 * vendor's enum values; like the vendor's header it declares no ldm_malloc
 * or ldm_free (code for SW26010 declares them itself) and does not include
 * athread.h.
 *
 * DMA completes only at a wait (athread_dma_wait_value, CRTS_dma_wait_value)
 * or when checked at the end of the slave function, where an unwaited
 * transfer is an error.  See docs/athread.md. */
#ifndef MSC_ATHREAD_EMU_SLAVE_H
#define MSC_ATHREAD_EMU_SLAVE_H

#include "athread_emu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LDM variables: one copy per CPE thread, counted against the LDM. */
#define __thread_local __thread

typedef enum { PE_MODE, BCAST_MODE, ROW_MODE, BROW_MODE, RANK_MODE } dma_mode;
typedef enum { ROW_SCOPE, COL_SCOPE, ARRAY_SCOPE } scope;

int athread_emu_myid(void);
#define _MYID athread_emu_myid()
#define _ROW ((char)(athread_emu_myid() / ATHREAD_EMU_MESH))
#define _COL ((char)(athread_emu_myid() % ATHREAD_EMU_MESH))
/* The vendor's slave.h also declares _CGN and _PEN; one core group is emulated, so both are 0. */
#define _CGN ((char)0)
#define _PEN ((char)0)
int athread_get_id(int core);

/* The DMA calls carry the name the program used, for the emulator's messages. */
int athread_emu_get(const char *call, dma_mode mode, void *src_mem, void *dst_ldm, int len, void *reply, int stride,
                    int bsize);
int athread_emu_put(const char *call, dma_mode mode, void *src_ldm, void *dst_mem, int len, void *reply, int stride,
                    int bsize);
void athread_emu_wait(const char *call, void *reply, int n);

#define athread_get(mode, src_mem, dst_ldm, len, reply, mask, stride, bsize) \
    athread_emu_get("athread_get", (mode), (src_mem), (dst_ldm), (len), (reply), (stride), (bsize))
#define athread_put(mode, src_ldm, dst_mem, len, reply, stride, bsize) \
    athread_emu_put("athread_put", (mode), (src_ldm), (dst_mem), (len), (reply), (stride), (bsize))
/* Wait until the reply counter has reached n.  Not a vendor name: code for the
 * SW26010 defines it as the spin while (reply < n); */
#define athread_dma_wait_value(reply, n) athread_emu_wait("athread_dma_wait_value", (reply), (n))
int athread_syn(scope scope, int mask);

/* Check that [ptr, ptr + bytes) is this CPE's LDM; generated code routes its
 * LDM accesses through it.  On the chip it is the pointer itself. */
void *athread_emu_ldm(void *ptr, size_t bytes, const char *what);
#define LDM_ACCESS(ptr, bytes) athread_emu_ldm((void *)(ptr), (bytes), #ptr)

#ifdef __cplusplus
}
#endif
#endif
