/* athread emulator: the MPE (host) side of the Sunway athread API, as the
 * vendors' <athread.h> declares it.
 *
 * Built only with EMULATE=1; on a Sunway machine the toolchain's own
 * <athread.h> is used instead.  See docs/athread.md for the model. */
#ifndef MSC_ATHREAD_EMU_HOST_H
#define MSC_ATHREAD_EMU_HOST_H

#include "athread_emu.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Slave functions keep their C name under emulation (the slave compiler
 * would prefix them with "slave_"); declare them with SLAVE_FUN. */
#define SLAVE_FUN(name) name

int athread_init(void);
int __real_athread_spawn(void *func, void *arg, const char *name);
int athread_join(void);
int athread_emu_halt(void);
#define athread_spawn(func, arg) __real_athread_spawn((void *)(func), (void *)(arg), #func)
#if ATHREAD_EMU_PRO
/* SW26010-Pro: a statement macro, not a function with a value */
#define athread_halt() \
    do { \
        athread_emu_halt(); \
    } while (0)
#else
#define athread_halt() athread_emu_halt()
#endif

/* Guard a main-memory buffer while kernels run: a CPE that loads or stores
 * it directly (not by DMA) is reported and aborted.  Whole pages inside the
 * buffer are guarded.  Returns 0, or -1 where this system cannot guard (the
 * emulator then copies through /proc/self/mem and that is refused). */
int athread_emu_guard(void *ptr, size_t bytes);
/* Lift every guard (a program that calls kernels many times guards its buffers per call). */
void athread_emu_unguard_all(void);

#ifdef __cplusplus
}
#endif
#endif
