/* CPE side of a 2D 5-point Jacobi step, SW26010 athread names.
 *
 * Each CPE takes tiles _MYID, _MYID + 64, ... (static cyclic assignment),
 * fetches tile plus halo into LDM with one strided athread_get, computes and
 * writes the tile back with one strided athread_put.  Two LDM buffers per
 * direction: the next tile's get overlaps this tile's compute, and a buffer's
 * put is waited for before the buffer is reused. */
#include <slave.h>
#include <stddef.h>

#include "jacobi.h"

/* SW26010's slave.h does not declare the LDM heap */
extern void *ldm_malloc(size_t size);
extern void ldm_free(void *ptr, size_t size);

/* reply words in LDM: the SW26010-Pro's DMA engine writes them nowhere else */
static __thread_local volatile int got[2], put[2];

void jacobi(void *raw) {
    jacobi_args a = *(jacobi_args *)raw;
    const int row = a.ny + 2;
    const int tiles_x = (a.nx + a.bx - 1) / a.bx, tiles_y = (a.ny + a.by - 1) / a.by;
    const int ntiles = tiles_x * tiles_y;
    const int in_doubles = (a.bx + 2) * (a.by + 2);
    double *in[2], *out[2];
    got[0] = got[1] = put[0] = put[1] = 0;
    int gets[2] = {0, 0}, puts[2] = {0, 0};
    for (int s = 0; s < 2; s++) {
        in[s] = ldm_malloc(sizeof(double) * (size_t)in_doubles);
        out[s] = ldm_malloc(sizeof(double) * (size_t)(a.bx * a.by));
    }

    int first = _MYID;
#define TILE_GEOMETRY(tile, i0, j0, h, w)                                   \
    const int i0 = ((tile) / tiles_y) * a.bx, j0 = ((tile) % tiles_y) * a.by; \
    const int h = a.nx - i0 < a.bx ? a.nx - i0 : a.bx;                      \
    const int w = a.ny - j0 < a.by ? a.ny - j0 : a.by;
    if (first < ntiles) {
        TILE_GEOMETRY(first, i0, j0, h, w)
        athread_get(PE_MODE, (void *)(a.in + (long)i0 * row + j0), in[0], (h + 2) * (w + 2) * 8, (void *)&got[0],
                    0, (row - (w + 2)) * 8, (w + 2) * 8);
        gets[0]++;
    }
    for (int tile = first, k = 0; tile < ntiles; tile += 64, k++) {
        const int s = k & 1;
        const int next = tile + 64;
        if (next < ntiles) {
            TILE_GEOMETRY(next, ni0, nj0, nh, nw)
            athread_get(PE_MODE, (void *)(a.in + (long)ni0 * row + nj0), in[s ^ 1], (nh + 2) * (nw + 2) * 8,
                        (void *)&got[s ^ 1], 0, (row - (nw + 2)) * 8, (nw + 2) * 8);
            gets[s ^ 1]++;
        }
        if (!(a.omit == OMIT_FIRST_GET_WAIT && k == 0)) athread_dma_wait_value((void *)&got[s], gets[s]);
        athread_dma_wait_value((void *)&put[s], puts[s]);
        TILE_GEOMETRY(tile, i0, j0, h, w)
        const double *src = in[s];
        double *dst = out[s];
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                const double *c = src + (i + 1) * (w + 2) + (j + 1);
                dst[i * w + j] = 0.25 * (c[-(w + 2)] + c[w + 2] + c[-1] + c[1]);
            }
        athread_put(PE_MODE, dst, a.out + (long)(i0 + 1) * row + (j0 + 1), h * w * 8, (void *)&put[s],
                    (row - w) * 8, w * 8);
        puts[s]++;
    }
    if (a.omit == OMIT_FINAL_PUT_WAIT) return; /* returns with its last puts in flight */
    for (int s = 0; s < 2; s++) athread_dma_wait_value((void *)&put[s], puts[s]);
    for (int s = 1; s >= 0; s--) {
        ldm_free(out[s], sizeof(double) * (size_t)(a.bx * a.by));
        ldm_free(in[s], sizeof(double) * (size_t)in_doubles);
    }
}
