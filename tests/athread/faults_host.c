/* MPE side of the fault programs: usage  faults MODE BYTES [CULPRIT]
 * spawns the `faults` kernel, in which CPE CULPRIT (default 5; -1: none)
 * breaks the hardware rule chosen by MODE. */
#include <athread.h>
#include <stdio.h>
#include <stdlib.h>

#include "faults.h"

extern void SLAVE_FUN(faults)(void *);

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s MODE BYTES [CULPRIT]\n", argv[0]);
        return 2;
    }
    static double memory[64 * 1024] __attribute__((aligned(64)));
    for (int i = 0; i < 64 * 1024; i++) memory[i] = i;
    faults_args args = {memory, atoi(argv[1]), atoi(argv[2]), argc == 4 ? atoi(argv[3]) : 5};
    athread_init();
    if (args.mode == INIT_TWICE) athread_init();
#ifdef MSC_ATHREAD_EMU_H
    if (athread_emu_guard(memory, sizeof memory) != 0) puts("unguarded");
#endif
    athread_spawn(faults, &args);
    athread_join();
    athread_halt();
    if (args.mode == SYNC)
        for (int id = 0; id < 64; id++)
            if (memory[SYNC_READ + id] != sync_neighbour(id, args.bytes) + 1) {
                printf("CPE %d read %g from CPE %d before it was published\n", id, memory[SYNC_READ + id],
                       sync_neighbour(id, args.bytes));
                return 1;
            }
    puts("finished");
    return 0;
}
