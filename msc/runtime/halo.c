/* msc halo-exchange library: see halo.h for the contract.
 * Exchange = pack each boundary slab into its own buffer, start persistent
 * sends and receives (msc_halo_start), wait and unpack (msc_halo_finish). */
#include "halo.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct msc_grid {
    MPI_Comm cart;
    int ndim;
    int dims[3], periods[3], coords[3];
    long interior[3];        /* global interior points per dimension */
    long start[3], count[3]; /* this rank's block of the interior */
    long thinnest[3];        /* the fewest points of any rank's block, per dimension */
};

typedef struct {
    long lo[3], hi[3]; /* half-open box in padded local coordinates (3D view) */
} box;

typedef struct {
    box region;        /* the slab sent, or the halo region received */
    char *buf;
    MPI_Request request; /* persistent */
} message;

struct msc_halo {
    long shape[3]; /* padded local shape, leading unused dimensions are 1 */
    size_t elem;
    int nsend, nrecv; /* no messages to or from a physical boundary */
    message send[MSC_HALO_MAX_DIRS], recv[MSC_HALO_MAX_DIRS];
    void *array;   /* the array between start and finish */
    long long bytes_sent;
};

static const char *DIM_NAMES[3] = {"x", "y", "z"};

static int fail(char *err, int errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, (size_t)errlen, fmt, ap);
    va_end(ap);
    return 1;
}

void msc_block(long n, int parts, int index, long *start, long *count)
{
    long base = n / parts, extra = n % parts;
    *count = base + (index < extra ? 1 : 0);
    *start = index * base + (index < extra ? index : extra);
}

/* The halo each rank exchanges per step, as points, for a process grid `dims` (its faces' areas). */
static double halo_surface(int ndim, const int *dims, const long *interior)
{
    double total = 0;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] == 1) continue;
        double face = 1;
        for (int e = 0; e < ndim; e++)
            if (e != d) face *= (double)(interior[e] + dims[e] - 1) / dims[e];
        total += face;
    }
    return total;
}

/* MPI_Dims_create balances the ranks without looking at the grid: where that leaves a dimension
 * fewer interior points than ranks, the grid of `size` ranks (keeping the dims given, nonzero)
 * whose blocks all hold points, with the least halo surface, is taken instead. 0: there is none. */
static int fitted_dims(int size, int ndim, const int *given, const long *interior, int *dims)
{
    int found = 0, trial[3] = {1, 1, 1};
    double best = 0;
    for (trial[0] = 1; trial[0] <= size; trial[0]++) {
        if (size % trial[0]) continue;
        for (trial[1] = 1; trial[1] <= (ndim > 1 ? size / trial[0] : 1); trial[1]++) {
            if ((size / trial[0]) % trial[1]) continue;
            trial[2] = size / trial[0] / trial[1];
            if (ndim < 3 && trial[2] != 1) continue;
            int fits = 1;
            for (int d = 0; d < ndim; d++)
                fits &= (given[d] == 0 || given[d] == trial[d]) && trial[d] <= interior[d];
            double cost = fits ? halo_surface(ndim, trial, interior) : 0;
            if (fits && (!found || cost < best)) {
                found = 1, best = cost;
                for (int d = 0; d < ndim; d++) dims[d] = trial[d];
            }
        }
    }
    return found;
}

int msc_grid_create(MPI_Fint comm_f, int ndim, const int *dims, const int *periodic,
                    const long *interior, msc_grid **out, char *err, int errlen)
{
    MPI_Comm comm = MPI_Comm_f2c(comm_f);
    int size;
    MPI_Comm_size(comm, &size);
    *out = NULL;
    if (ndim < 1 || ndim > 3) return fail(err, errlen, "a process grid has 1 to 3 dimensions, got %d", ndim);
    int fixed = 1, free_dims = 0;
    for (int d = 0; d < ndim; d++) {
        if (dims[d] < 0) return fail(err, errlen, "dims must be positive (or 0 to choose), got %d", dims[d]);
        if (dims[d] == 0) free_dims++;
        else fixed *= dims[d];
    }
    if (free_dims == 0 ? fixed != size : size % fixed != 0)
        return fail(err, errlen, "dims with a product of %d do not fit %d MPI ranks", fixed, size);

    msc_grid *g = calloc(1, sizeof *g);
    if (!g) return fail(err, errlen, "out of memory");
    g->ndim = ndim;
    for (int d = 0; d < 3; d++) g->dims[d] = 1;
    for (int d = 0; d < ndim; d++) {
        g->dims[d] = dims[d];
        g->periods[d] = periodic[d] != 0;
        g->interior[d] = interior[d];
    }
    MPI_Dims_create(size, ndim, g->dims);
    for (int d = 0; d < ndim; d++)
        if (interior[d] < g->dims[d] && !(free_dims && fitted_dims(size, ndim, dims, interior, g->dims))) {
            int parts = g->dims[d];
            free(g);
            return fail(err, errlen, "dimension %s has %ld interior points for %d ranks: a rank would get none%s",
                        DIM_NAMES[d], interior[d], parts,
                        free_dims ? ", and no process grid of these ranks gives every rank points" : "");
        }
    MPI_Cart_create(comm, ndim, g->dims, g->periods, 0, &g->cart);
    int rank;
    MPI_Comm_rank(g->cart, &rank);
    MPI_Cart_coords(g->cart, rank, ndim, g->coords);
    for (int d = 0; d < ndim; d++) {
        msc_block(interior[d], g->dims[d], g->coords[d], &g->start[d], &g->count[d]);
        g->thinnest[d] = interior[d] / g->dims[d];
    }
    *out = g;
    return 0;
}

int msc_grid_split(msc_grid *g, const long *bounds, char *err, int errlen)
{
    const long *b = bounds;
    long start[3], count[3], thinnest[3];
    for (int d = 0; d < g->ndim; b += g->dims[d] + 1, d++) {
        if (b[0] != 0 || b[g->dims[d]] != g->interior[d])
            return fail(err, errlen, "dimension %s: block bounds must run from 0 to %ld, got %ld to %ld",
                        DIM_NAMES[d], g->interior[d], b[0], b[g->dims[d]]);
        thinnest[d] = g->interior[d];
        for (int c = 0; c < g->dims[d]; c++) {
            if (b[c + 1] <= b[c])
                return fail(err, errlen, "dimension %s: block %d would be empty (bounds %ld, %ld)",
                            DIM_NAMES[d], c, b[c], b[c + 1]);
            if (b[c + 1] - b[c] < thinnest[d]) thinnest[d] = b[c + 1] - b[c];
        }
        start[d] = b[g->coords[d]];
        count[d] = b[g->coords[d] + 1] - start[d];
    }
    for (int d = 0; d < g->ndim; d++) {
        g->start[d] = start[d];
        g->count[d] = count[d];
        g->thinnest[d] = thinnest[d];
    }
    return 0;
}

void msc_grid_layout(const msc_grid *g, int *dims, int *coords, long *start, long *count)
{
    for (int d = 0; d < g->ndim; d++) {
        dims[d] = g->dims[d];
        coords[d] = g->coords[d];
        start[d] = g->start[d];
        count[d] = g->count[d];
    }
}

void msc_grid_coords_of(const msc_grid *g, int rank, int *coords)
{
    MPI_Cart_coords(g->cart, rank, g->ndim, coords);
}

MPI_Comm msc_grid_comm(const msc_grid *g) { return g->cart; }

void msc_grid_padding(const msc_grid *g, int rank, const long *halo, const long *edge, long *lo, long *hi)
{
    int c[3];
    MPI_Cart_coords(g->cart, rank, g->ndim, c);
    for (int d = 0; d < g->ndim; d++) {
        lo[d] = c[d] == 0 && !g->periods[d] ? edge[d] : halo[d];
        hi[d] = c[d] == g->dims[d] - 1 && !g->periods[d] ? edge[d] : halo[d];
    }
}

void msc_grid_free(msc_grid *g)
{
    if (!g) return;
    MPI_Comm_free(&g->cart);
    free(g);
}

/* The rank at coords + v, or MPI_PROC_NULL past a non-periodic edge. */
static int neighbour(const msc_grid *g, const int *v)
{
    int c[3];
    for (int d = 0; d < g->ndim; d++) {
        c[d] = g->coords[d] + v[d];
        if (c[d] < 0 || c[d] >= g->dims[d]) {
            if (!g->periods[d]) return MPI_PROC_NULL;
            c[d] = (c[d] + g->dims[d]) % g->dims[d];
        }
    }
    int rank;
    MPI_Cart_rank(g->cart, c, &rank);
    return rank;
}

static long volume(const box *b)
{
    return (b->hi[0] - b->lo[0]) * (b->hi[1] - b->lo[1]) * (b->hi[2] - b->lo[2]);
}

/* Copy a box of the array to a contiguous buffer (to_buffer) or back. */
static void copy_box(const msc_halo *h, char *array, char *buf, const box *b, int to_buffer)
{
    const size_t run = (size_t)(b->hi[2] - b->lo[2]) * h->elem;
    for (long i0 = b->lo[0]; i0 < b->hi[0]; i0++)
        for (long i1 = b->lo[1]; i1 < b->hi[1]; i1++) {
            char *row = array + ((i0 * h->shape[1] + i1) * h->shape[2] + b->lo[2]) * (long)h->elem;
            if (to_buffer) memcpy(buf, row, run);
            else memcpy(row, buf, run);
            buf += run;
        }
}

int msc_halo_create(const msc_grid *g, const long *halo, const long *edge, int elem_size, int ndirs,
                    const int *dirs, msc_halo **out, char *err, int errlen)
{
    *out = NULL;
    if (ndirs < 0 || ndirs > MSC_HALO_MAX_DIRS) return fail(err, errlen, "%d halo directions (at most 26)", ndirs);
    for (int d = 0; d < g->ndim; d++) {
        if (halo[d] < 0 || edge[d] < 0)
            return fail(err, errlen, "negative halo width %ld", halo[d] < 0 ? halo[d] : edge[d]);
        long thinnest = g->thinnest[d];
        if (halo[d] > thinnest && (g->dims[d] > 1 || g->periods[d]))
            return fail(err, errlen,
                        "dimension %s: the thinnest local block has %ld points, fewer than the halo width %ld "
                        "it must supply; use fewer ranks along %s or a larger grid",
                        DIM_NAMES[d], thinnest, halo[d], DIM_NAMES[d]);
    }
    msc_halo *h = calloc(1, sizeof *h);
    if (!h) return fail(err, errlen, "out of memory");
    h->elem = (size_t)elem_size;
    const int lead = 3 - g->ndim; /* leading unused dimensions of the 3D view */
    int rank;
    long lo[3], hi[3];
    MPI_Comm_rank(g->cart, &rank);
    msc_grid_padding(g, rank, halo, edge, lo, hi);
    for (int d = 0; d < 3; d++) h->shape[d] = 1;
    for (int d = 0; d < g->ndim; d++) h->shape[lead + d] = lo[d] + g->count[d] + hi[d];

    for (int k = 0; k < ndirs; k++) {
        const int *v = dirs + k * g->ndim;
        int minus_v[3];
        for (int d = 0; d < g->ndim; d++) minus_v[d] = -v[d];
        const int from = neighbour(g, v), to = neighbour(g, minus_v);
        /* receive halo region v; send our slab at side -v: region v of the rank at -v
         * (a side with a neighbour is padded by exactly w) */
        box s = {{0, 0, 0}, {1, 1, 1}}, r = s;
        for (int d = 0; d < g->ndim; d++) {
            const long w = halo[d], n = g->count[d], b = lo[d];
            const int e = lead + d;
            if (v[d] < 0) { r.lo[e] = 0; r.hi[e] = w; s.lo[e] = b + n - w; s.hi[e] = b + n; }
            else if (v[d] > 0) { r.lo[e] = b + n; r.hi[e] = b + n + w; s.lo[e] = b; s.hi[e] = b + w; }
            else { r.lo[e] = s.lo[e] = b; r.hi[e] = s.hi[e] = b + n; }
        }
        const long bytes = volume(&s) * (long)h->elem;
        if (bytes > INT_MAX) {
            msc_halo_free(h);
            return fail(err, errlen, "a halo message of %ld bytes is larger than MPI's int count", bytes);
        }
        int tag = 0;
        for (int d = 0; d < g->ndim; d++) tag = 3 * tag + v[d] + 1;
        if (to != MPI_PROC_NULL) {
            message *m = &h->send[h->nsend++];
            m->region = s;
            if (!(m->buf = malloc((size_t)bytes + 1))) break;
            MPI_Send_init(m->buf, (int)bytes, MPI_BYTE, to, tag, g->cart, &m->request);
        }
        if (from != MPI_PROC_NULL) {
            message *m = &h->recv[h->nrecv++];
            m->region = r;
            if (!(m->buf = malloc((size_t)bytes + 1))) break;
            MPI_Recv_init(m->buf, (int)bytes, MPI_BYTE, from, tag, g->cart, &m->request);
        }
    }
    if ((h->nsend && !h->send[h->nsend - 1].buf) || (h->nrecv && !h->recv[h->nrecv - 1].buf)) {
        msc_halo_free(h);
        return fail(err, errlen, "out of memory for halo buffers");
    }
    *out = h;
    return 0;
}

void msc_halo_start(msc_halo *h, void *array)
{
    h->array = array;
    for (int i = 0; i < h->nrecv; i++) MPI_Start(&h->recv[i].request);
    for (int i = 0; i < h->nsend; i++) {
        message *m = &h->send[i];
        copy_box(h, array, m->buf, &m->region, 1);
        MPI_Start(&m->request);
        h->bytes_sent += volume(&m->region) * (long)h->elem;
    }
}

void msc_halo_finish(msc_halo *h)
{
    MPI_Request requests[MSC_HALO_MAX_DIRS];
    for (int i = 0; i < h->nrecv; i++) requests[i] = h->recv[i].request;
    for (int done = 0; done < h->nrecv; done++) { /* unpack in order of arrival */
        int i;
        MPI_Waitany(h->nrecv, requests, &i, MPI_STATUS_IGNORE);
        copy_box(h, h->array, h->recv[i].buf, &h->recv[i].region, 0);
    }
    for (int i = 0; i < h->nsend; i++) MPI_Wait(&h->send[i].request, MPI_STATUS_IGNORE);
}

long long msc_halo_bytes_sent(const msc_halo *h) { return h->bytes_sent; }

void msc_halo_free(msc_halo *h)
{
    if (!h) return;
    for (int i = 0; i < h->nsend + h->nrecv; i++) {
        message *m = i < h->nsend ? &h->send[i] : &h->recv[i - h->nsend];
        if (m->buf) {
            MPI_Request_free(&m->request);
            free(m->buf);
        }
    }
    free(h);
}
