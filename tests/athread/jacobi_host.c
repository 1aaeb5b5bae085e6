/* MPE side of a 2D 5-point Jacobi step: usage
 *   jacobi NX NY BX BY STEPS IN.bin OUT.bin [OMIT]
 * IN.bin holds (NX+2)*(NY+2) doubles, ring included; OUT.bin gets the same after STEPS steps. */
#include <athread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jacobi.h"

extern void SLAVE_FUN(jacobi)(void *);

static double *read_grid(const char *path, size_t n) {
    double *a = malloc(n * sizeof(double));
    FILE *f = fopen(path, "rb");
    if (!a || !f || fread(a, sizeof(double), n, f) != n) {
        fprintf(stderr, "cannot read %zu doubles from %s\n", n, path);
        exit(2);
    }
    fclose(f);
    return a;
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr, "usage: %s NX NY BX BY STEPS IN.bin OUT.bin [OMIT]\n", argv[0]);
        return 2;
    }
    jacobi_args args = {0};
    args.nx = atoi(argv[1]);
    args.ny = atoi(argv[2]);
    args.bx = atoi(argv[3]);
    args.by = atoi(argv[4]);
    int steps = atoi(argv[5]);
    args.omit = argc > 8 ? atoi(argv[8]) : OMIT_NOTHING;
    size_t n = (size_t)(args.nx + 2) * (size_t)(args.ny + 2);
    double *a = read_grid(argv[6], n);
    double *b = malloc(n * sizeof(double));
    memcpy(b, a, n * sizeof(double)); /* the ring is fixed in time: both levels carry it */

    athread_init();
#ifdef MSC_ATHREAD_EMU_H
    if (athread_emu_guard(a, n * sizeof(double)) != 0 || athread_emu_guard(b, n * sizeof(double)) != 0)
        fputs("unguarded\n", stderr);
#endif
    for (int t = 0; t < steps; t++) {
        args.in = a;
        args.out = b;
        athread_spawn(jacobi, &args);
        athread_join();
        double *swap = a; /* level rotation */
        a = b;
        b = swap;
    }
    athread_halt();

    FILE *f = fopen(argv[7], "wb");
    if (!f || fwrite(a, sizeof(double), n, f) != n) {
        fprintf(stderr, "cannot write %s\n", argv[7]);
        return 2;
    }
    fclose(f);
    free(a);
    free(b);
    return 0;
}
