/* Numeric kernels of swCholesky: left-looking supernodal Cholesky with the
 * three size-classed update queues, plus supernodal triangular solves.
 *
 * Supernode s owns columns super[s] .. super[s+1]-1 and the sorted rows
 * Si[Sp[s] .. Sp[s+1]) (its own columns first); its values are a dense
 * column-major block of nsrow x nscol doubles at Lx + Px[s].
 *
 * Each update of supernode s by a descendant d (a fused SYRK+GEMM of sizes
 * ndrow1 x ndcol and ndrow3 x ndcol) goes to one queue by size:
 *   InstQ  ndrow1, ndrow3, ndcol <= inst_max: done at once in plain C;
 *   TPQ    (ndrow1 + ndrow3) * (ndcol + 1) <= tpq_max doubles: batched (up to
 *          tpq_batch items) and run by a blocked C kernel;
 *   DPQ    the rest: one dsyrk + one dgemm from the BLAS.
 * Then the diagonal block is factored (plain C when small, else dpotrf and
 * dtrsm). BLAS/LAPACK come in as function pointers (scipy's OpenBLAS).
 * Independent subtrees (contiguous ranges of postordered supernodes) run on
 * the OpenMP threads, each taken by the next free thread.
 *
 * Solves go supernode by supernode on the dense blocks: dtrsv + dgemv for
 * one right-hand side, dtrsm + dgemm for several; tiny blocks in plain C. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef void (*dgemm_t)(const char *, const char *, const int *, const int *, const int *,
                        const double *, const double *, const int *, const double *,
                        const int *, const double *, double *, const int *);
typedef void (*dsyrk_t)(const char *, const char *, const int *, const int *, const double *,
                        const double *, const int *, const double *, double *, const int *);
typedef void (*dtrsm_t)(const char *, const char *, const char *, const char *, const int *,
                        const int *, const double *, const double *, const int *, double *,
                        const int *);
typedef void (*dpotrf_t)(const char *, const int *, double *, const int *, int *);

/* Indices into the statistics array (doubles). */
enum {
    ST_INST_N, ST_INST_FLOPS, ST_INST_SEC,
    ST_TPQ_N, ST_TPQ_FLOPS, ST_TPQ_SEC, ST_TPQ_BATCHES,
    ST_DPQ_N, ST_DPQ_FLOPS, ST_DPQ_SEC,
    ST_DIAG_C, ST_DIAG_BLAS, ST_DIAG_SEC,
    ST_ASSEMBLE_SEC,
    ST_SUBTREES_SEC, ST_TOP_SEC,
    NSTAT
};

typedef struct {
    int32_t n;
    const int32_t *super, *snode_of;
    const int64_t *Sp, *Px;
    const int32_t *Si;
    const int64_t *Ap;
    const int32_t *Ai;
    const double *Ax;
    double *Lx;
    int32_t *head, *next; /* descendant lists, by next target supernode */
    int64_t *lpos;        /* offset in d's rows of its next target's rows */
    int64_t inst_max, tpq_max, tpq_batch, diag_small;
    dgemm_t dgemm;
    dsyrk_t dsyrk;
    dtrsm_t dtrsm;
    dpotrf_t dpotrf;
} ctx_t;

typedef struct { /* one pending TPQ item */
    int32_t d;
    int64_t r1, ndrow1, ndrow2;
} item_t;

typedef struct { /* per-thread workspace */
    int32_t *map;
    int32_t *rel;
    double *cbuf;
    int64_t ccap;
    double *bbuf;
    item_t *items;
    int64_t nitems;
    double stats[NSTAT];
} work_t;

static int64_t imax64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t imin64(int64_t a, int64_t b) { return a < b ? a : b; }

/* C (ndrow2 x ndrow1, column-major, ldc = ndrow2) = lower part of
 * Ld[r1:, :] * Ld[r1:r1+ndrow1, :]^T; four columns at a time so the inner
 * loop streams one column of Ld and vectorizes. */
static void update_kernel(const double *Ld, int64_t ldd, int64_t ndcol, int64_t ndrow1,
                          int64_t ndrow2, double *C)
{
    int64_t j = 0;
    for (; j + 4 <= ndrow1; j += 4) {
        double *c0 = C + j * ndrow2, *c1 = c0 + ndrow2, *c2 = c1 + ndrow2, *c3 = c2 + ndrow2;
        for (int64_t i = j; i < ndrow2; i++) c0[i] = c1[i] = c2[i] = c3[i] = 0.0;
        for (int64_t k = 0; k < ndcol; k++) {
            const double *l = Ld + k * ldd;
            const double a0 = l[j], a1 = l[j + 1], a2 = l[j + 2], a3 = l[j + 3];
            for (int64_t i = j; i < ndrow2; i++) {
                const double v = l[i];
                c0[i] += v * a0;
                c1[i] += v * a1;
                c2[i] += v * a2;
                c3[i] += v * a3;
            }
        }
    }
    for (; j < ndrow1; j++) {
        double *c0 = C + j * ndrow2;
        for (int64_t i = j; i < ndrow2; i++) c0[i] = 0.0;
        for (int64_t k = 0; k < ndcol; k++) {
            const double *l = Ld + k * ldd;
            const double a0 = l[j];
            for (int64_t i = j; i < ndrow2; i++) c0[i] += l[i] * a0;
        }
    }
}

/* The same C by the BLAS: one dsyrk (the ndrow1 x ndrow1 triangle) and one
 * dgemm (the ndrow2 - ndrow1 rows below it). */
static void blas_update(const ctx_t *c, const double *Ld, int64_t ldd, int64_t ndcol, int64_t ndrow1,
                        int64_t ndrow2, double *C)
{
    const double one = 1.0, zero = 0.0;
    const int m1 = (int)ndrow1, m3 = (int)(ndrow2 - ndrow1), kk = (int)ndcol, lda = (int)ldd,
              ldc = (int)ndrow2;
    c->dsyrk("L", "N", &m1, &kk, &one, Ld, &lda, &zero, C, &ldc);
    if (m3 > 0) c->dgemm("N", "T", &m3, &m1, &kk, &one, Ld + ndrow1, &lda, Ld, &lda, &zero, C + ndrow1, &ldc);
}

/* Subtract C (as above) from supernode s through the relative map
 * (map: global row -> local row of s; rel: workspace of ndrow2 entries). */
static void scatter(const ctx_t *c, const int32_t *map, int32_t *rel, int32_t d, int64_t r1,
                    int64_t ndrow1, int64_t ndrow2, const double *C, double *Ls, int64_t ld)
{
    const int32_t *rows = c->Si + c->Sp[d] + r1;
    for (int64_t i = 0; i < ndrow2; i++) rel[i] = map[rows[i]];
    for (int64_t j = 0; j < ndrow1; j++) {
        double *col = Ls + (int64_t)rel[j] * ld;
        const double *cj = C + j * ndrow2;
        for (int64_t i = j; i < ndrow2; i++) col[rel[i]] -= cj[i];
    }
}

static double *cbuf_reserve(work_t *w, int64_t size)
{
    if (size > w->ccap) {
        free(w->cbuf);
        w->ccap = imax64(size, 2 * w->ccap);
        w->cbuf = malloc((size_t)w->ccap * sizeof(double));
    }
    return w->cbuf;
}

static void run_tpq(const ctx_t *c, work_t *w, double *Ls, int64_t ld)
{
    if (w->nitems == 0) return;
    double t0 = omp_get_wtime();
    for (int64_t b = 0; b < w->nitems; b++) {
        const item_t *it = &w->items[b];
        int32_t d = it->d;
        int64_t ldd = c->Sp[d + 1] - c->Sp[d];
        int64_t ndcol = c->super[d + 1] - c->super[d];
        double *C = w->bbuf + b * c->tpq_max;
        update_kernel(c->Lx + c->Px[d] + it->r1, ldd, ndcol, it->ndrow1, it->ndrow2, C);
    }
    for (int64_t b = 0; b < w->nitems; b++) {
        const item_t *it = &w->items[b];
        scatter(c, w->map, w->rel, it->d, it->r1, it->ndrow1, it->ndrow2, w->bbuf + b * c->tpq_max,
                Ls, ld);
    }
    w->stats[ST_TPQ_BATCHES] += 1;
    w->stats[ST_TPQ_SEC] += omp_get_wtime() - t0;
    w->nitems = 0;
}

/* Dense Cholesky of the nsrow x nscol panel (diagonal block and the rows
 * below it) in plain C. Returns -1, or the failing local column. */
static int64_t panel_c(double *Ls, int64_t ld, int64_t nscol, int64_t nsrow)
{
    for (int64_t j = 0; j < nscol; j++) {
        double *cj = Ls + j * ld;
        double djj = cj[j];
        if (!(djj > 0.0) || !isfinite(djj)) return j;
        djj = sqrt(djj);
        cj[j] = djj;
        const double inv = 1.0 / djj;
        for (int64_t i = j + 1; i < nsrow; i++) cj[i] *= inv;
        for (int64_t k = j + 1; k < nscol; k++) {
            double *ck = Ls + k * ld;
            const double a = cj[k];
            for (int64_t i = k; i < nsrow; i++) ck[i] -= cj[i] * a;
        }
    }
    return -1;
}

/* Zero columns j0 .. j1-1 (global) of the supernode whose first column is k1
 * and add A's entries (map: global row -> local row). */
static void assemble(const ctx_t *c, const int32_t *map, int64_t k1, int64_t j0, int64_t j1,
                     double *Ls, int64_t ld)
{
    memset(Ls + (j0 - k1) * ld, 0, (size_t)((j1 - j0) * ld) * sizeof(double));
    for (int64_t j = j0; j < j1; j++) {
        double *col = Ls + (j - k1) * ld;
        for (int64_t p = c->Ap[j]; p < c->Ap[j + 1]; p++) col[map[c->Ai[p]]] += c->Ax[p];
    }
}

static void link_snode(ctx_t *c, int32_t d, int64_t off, int32_t lim, int shared)
{
    int32_t t = c->snode_of[c->Si[c->Sp[d] + off]];
    c->lpos[d] = off;
    if (shared && t > lim) {
#pragma omp critical(swchol_link)
        {
            c->next[d] = c->head[t];
            c->head[t] = d;
        }
    } else {
        c->next[d] = c->head[t];
        c->head[t] = d;
    }
}

/* Descendant d's rows that update the supernode ending before column k2 run
 * from offset lpos[d] to the offset this returns (the first row >= k2). */
static int64_t rows_end(const ctx_t *c, int32_t d, int64_t k2)
{
    const int64_t pd = c->Sp[d], pdend = c->Sp[d + 1];
    int64_t r2 = c->lpos[d];
    while (pd + r2 < pdend && c->Si[pd + r2] < k2) r2++;
    return r2;
}

/* Factor supernode s. Returns -1 or the failing column (permuted numbering). */
static int64_t factor_snode(ctx_t *c, work_t *w, int32_t s, int32_t lim, int shared)
{
    const int64_t k1 = c->super[s], k2 = c->super[s + 1], nscol = k2 - k1;
    const int64_t p0 = c->Sp[s], nsrow = c->Sp[s + 1] - p0, ld = nsrow;
    double *Ls = c->Lx + c->Px[s];
    const double one = 1.0;

    double t0 = omp_get_wtime();
    for (int64_t p = 0; p < nsrow; p++) w->map[c->Si[p0 + p]] = (int32_t)p;
    assemble(c, w->map, k1, k1, k2, Ls, ld);
    w->stats[ST_ASSEMBLE_SEC] += omp_get_wtime() - t0;

    int32_t d = c->head[s];
    c->head[s] = -1;
    while (d != -1) {
        const int32_t dnext = c->next[d];
        const int64_t ldd = c->Sp[d + 1] - c->Sp[d];
        const int64_t ndcol = c->super[d + 1] - c->super[d];
        const int64_t r1 = c->lpos[d], r2 = rows_end(c, d, k2);
        const int64_t ndrow1 = r2 - r1, ndrow2 = ldd - r1, ndrow3 = ndrow2 - ndrow1;
        const double flops = (double)ndcol * (double)ndrow1 * (double)(ndrow1 + 2 * ndrow3);

        if (ndrow1 <= c->inst_max && ndrow3 <= c->inst_max && ndcol <= c->inst_max) {
            double ti = omp_get_wtime();
            double C[c->inst_max * 2 * c->inst_max];
            update_kernel(c->Lx + c->Px[d] + r1, ldd, ndcol, ndrow1, ndrow2, C);
            scatter(c, w->map, w->rel, d, r1, ndrow1, ndrow2, C, Ls, ld);
            w->stats[ST_INST_N] += 1;
            w->stats[ST_INST_FLOPS] += flops;
            w->stats[ST_INST_SEC] += omp_get_wtime() - ti;
        } else if ((ndrow1 + ndrow3) * (ndcol + 1) <= c->tpq_max && ndrow2 * ndrow1 <= c->tpq_max) {
            item_t *it = &w->items[w->nitems++];
            it->d = d;
            it->r1 = r1;
            it->ndrow1 = ndrow1;
            it->ndrow2 = ndrow2;
            w->stats[ST_TPQ_N] += 1;
            w->stats[ST_TPQ_FLOPS] += flops;
            if (w->nitems == c->tpq_batch) run_tpq(c, w, Ls, ld);
        } else {
            double td = omp_get_wtime();
            double *C = cbuf_reserve(w, ndrow2 * ndrow1);
            blas_update(c, c->Lx + c->Px[d] + r1, ldd, ndcol, ndrow1, ndrow2, C);
            scatter(c, w->map, w->rel, d, r1, ndrow1, ndrow2, C, Ls, ld);
            w->stats[ST_DPQ_N] += 1;
            w->stats[ST_DPQ_FLOPS] += flops;
            w->stats[ST_DPQ_SEC] += omp_get_wtime() - td;
        }
        if (ndrow3 > 0) link_snode(c, d, r2, lim, shared);
        d = dnext;
    }
    run_tpq(c, w, Ls, ld);

    double tf = omp_get_wtime();
    int64_t bad = -1;
    if (nscol <= c->diag_small) {
        bad = panel_c(Ls, ld, nscol, nsrow);
        w->stats[ST_DIAG_C] += 1;
    } else {
        const int nc = (int)nscol, lda = (int)ld, m = (int)(nsrow - nscol);
        int info = 0;
        c->dpotrf("L", &nc, Ls, &lda, &info);
        if (info > 0) bad = info - 1;
        else if (m > 0) c->dtrsm("R", "L", "T", "N", &m, &nc, &one, Ls, &lda, Ls + nscol, &lda);
        w->stats[ST_DIAG_BLAS] += 1;
    }
    w->stats[ST_DIAG_SEC] += omp_get_wtime() - tf;
    if (bad >= 0) return k1 + bad;
    if (nsrow > nscol) link_snode(c, s, nscol, lim, shared);
    return -1;
}

static int64_t max_rows(int32_t ns, const int64_t *Sp)
{
    int64_t maxrow = 1;
    for (int32_t s = 0; s < ns; s++) maxrow = imax64(maxrow, Sp[s + 1] - Sp[s]);
    return maxrow;
}

static void work_init(work_t *w, const ctx_t *c, int64_t maxrow)
{
    memset(w, 0, sizeof *w);
    w->map = malloc((size_t)(c->n > 0 ? c->n : 1) * sizeof(int32_t));
    w->rel = malloc((size_t)maxrow * sizeof(int32_t));
    w->bbuf = malloc((size_t)(c->tpq_batch * c->tpq_max) * sizeof(double));
    w->items = malloc((size_t)c->tpq_batch * sizeof(item_t));
}

/* Adds w's statistics to stats and frees w. */
static void work_free(work_t *w, double *stats)
{
    for (int k = 0; k < NSTAT; k++) stats[k] += w->stats[k];
    free(w->map);
    free(w->rel);
    free(w->cbuf);
    free(w->bbuf);
    free(w->items);
}

/* Factor the supernode ranges task_lo[t] .. task_hi[t] (inclusive, each a
 * union of whole subtrees or a single supernode whose descendants are done)
 * on nthreads threads. Threads take the next task in the given order when
 * they are free (largest first is best): a thread slowed by another process
 * on its core then holds up only its own task. Returns -1, or the smallest
 * failing column found (permuted numbering). */
static int64_t factor_subtrees(ctx_t *c, int64_t maxrow, int32_t ntask, const int32_t *task_lo,
                               const int32_t *task_hi, int32_t nthreads, double *stats)
{
    int64_t fail = -1;
    int32_t next_task = 0;
    const int shared = nthreads > 1;

#pragma omp parallel num_threads(nthreads)
    {
        work_t w;
        work_init(&w, c, maxrow);
        for (;;) {
            int32_t t;
#pragma omp atomic capture
            t = next_task++;
            if (t >= ntask) break;
            for (int32_t s = task_lo[t]; s <= task_hi[t]; s++) {
                int64_t failed_now;
#pragma omp atomic read
                failed_now = fail;
                if (failed_now >= 0) break;
                int64_t bad = factor_snode(c, &w, s, task_hi[t], shared);
                if (bad >= 0) {
#pragma omp critical(swchol_fail)
                    if (fail < 0 || bad < fail) fail = bad;
                }
            }
        }
#pragma omp critical(swchol_stats)
        work_free(&w, stats);
    }
    return fail;
}

/* ---------------------------------------------------------------- top part
 * A large top supernode is split into column blocks of `tile` columns and
 * factored by OpenMP tasks with single-threaded BLAS: one task per column
 * block assembles A and applies every descendant's update to that block
 * (blocks never share an entry, so no locks), then a tiled right-looking
 * Cholesky of the panel (dpotrf on diagonal tiles, dtrsm below them,
 * dsyrk/dgemm on the trailing tiles), each tile op a task ordered by its
 * tiles' dependences. A thread that another process keeps off its core
 * holds up one tile at a time, not a fixed share of every BLAS call (as
 * threaded BLAS does), and no thread spins waiting inside the BLAS. */

typedef struct { /* a descendant of the supernode being factored */
    int32_t d;
    int64_t r1, r2; /* its rows in the supernode's columns: offsets r1 .. r2-1 */
} desc_t;

/* First offset p in [lo, hi) of d's rows with row index >= row (else hi). */
static int64_t lower_bound(const int32_t *rows, int64_t lo, int64_t hi, int64_t row)
{
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (rows[mid] < row) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Column block [j0, j1) (global columns) of supernode s: assemble it, then
 * subtract each descendant's update of those columns. */
static void update_block(const ctx_t *c, work_t *w, const int32_t *map, const desc_t *desc,
                         int64_t ndesc, int32_t s, int64_t j0, int64_t j1, double *Ls, int64_t ld)
{
    const int64_t k1 = c->super[s];
    double t0 = omp_get_wtime();
    assemble(c, map, k1, j0, j1, Ls, ld);
    w->stats[ST_ASSEMBLE_SEC] += omp_get_wtime() - t0;
    for (int64_t e = 0; e < ndesc; e++) {
        const int32_t d = desc[e].d;
        const int32_t *rows = c->Si + c->Sp[d];
        const int64_t ja = lower_bound(rows, desc[e].r1, desc[e].r2, j0);
        const int64_t jb = lower_bound(rows, ja, desc[e].r2, j1);
        if (ja == jb) continue;
        const int64_t ldd = c->Sp[d + 1] - c->Sp[d], ndcol = c->super[d + 1] - c->super[d];
        const int64_t m1 = jb - ja, m2 = ldd - ja;
        const double *Ld = c->Lx + c->Px[d] + ja;
        const double flops = (double)ndcol * (double)m1 * (double)(m1 + 2 * (m2 - m1));
        double *C = cbuf_reserve(w, m2 * m1);
        const int small = m2 * m1 <= c->tpq_max; /* counted as TPQ (C kernel), else DPQ (BLAS) */
        double tu = omp_get_wtime();
        if (small) update_kernel(Ld, ldd, ndcol, m1, m2, C);
        else blas_update(c, Ld, ldd, ndcol, m1, m2, C);
        scatter(c, map, w->rel, d, ja, m1, m2, C, Ls, ld);
        w->stats[small ? ST_TPQ_N : ST_DPQ_N] += 1;
        w->stats[small ? ST_TPQ_FLOPS : ST_DPQ_FLOPS] += flops;
        w->stats[small ? ST_TPQ_SEC : ST_DPQ_SEC] += omp_get_wtime() - tu;
    }
}

/* Row block i of a panel with nb diagonal blocks: rows [*r0, *r0 + *m). */
static void row_block(int64_t i, int64_t nb, int64_t tile, int64_t nscol, int64_t nsrow,
                      int64_t *r0, int64_t *m)
{
    *r0 = i < nb ? i * tile : nscol + (i - nb) * tile;
    const int64_t end = i < nb ? imin64(*r0 + tile, nscol) : imin64(*r0 + tile, nsrow);
    *m = end - *r0;
}

/* Factor supernode s (its descendants done) with tasks on the team's
 * threads; works[t] is thread t's workspace and works[self] holds the map.
 * Returns -1 or the failing column (permuted numbering). */
static int64_t factor_snode_tiled(ctx_t *c, work_t *works, int self, int32_t s, int64_t tile)
{
    const int64_t k1 = c->super[s], k2 = c->super[s + 1], nscol = k2 - k1;
    const int64_t p0 = c->Sp[s], nsrow = c->Sp[s + 1] - p0, ld = nsrow;
    double *Ls = c->Lx + c->Px[s];
    int32_t *map = works[self].map; /* read by every task, written only here */
    for (int64_t p = 0; p < nsrow; p++) map[c->Si[p0 + p]] = (int32_t)p;

    int64_t ndesc = 0;
    for (int32_t d = c->head[s]; d != -1; d = c->next[d]) ndesc++;
    desc_t *desc = malloc((size_t)(ndesc > 0 ? ndesc : 1) * sizeof(desc_t));
    ndesc = 0;
    for (int32_t d = c->head[s]; d != -1; d = c->next[d]) desc[ndesc++] = (desc_t){d, c->lpos[d], rows_end(c, d, k2)};

    const int64_t nb = (nscol + tile - 1) / tile, nr = nb + (nsrow - nscol + tile - 1) / tile;
    char *ready = calloc((size_t)nb, 1);      /* dependence tokens: column block assembled */
    char *tok = calloc((size_t)(nr * nb), 1); /* dependence tokens: tile (i, j) */
    int64_t bad = -1;
    const double one = 1.0, minus = -1.0;

    for (int64_t j = 0; j < nb; j++) {
#pragma omp task firstprivate(j) depend(out : ready[j])
        {
            const int64_t j0 = k1 + j * tile, j1 = imin64(j0 + tile, k2);
            update_block(c, &works[omp_get_thread_num()], map, desc, ndesc, s, j0, j1, Ls, ld);
        }
    }
    for (int64_t k = 0; k < nb; k++) {
        int64_t kr, kb;
        row_block(k, nb, tile, nscol, nsrow, &kr, &kb);
        double *Lkk = Ls + kr + kr * ld;
#pragma omp task firstprivate(k, kr, kb, Lkk) shared(bad) depend(in : ready[k]) \
    depend(inout : tok[k * nb + k])
        {
            int64_t failed;
#pragma omp atomic read
            failed = bad;
            if (failed < 0) {
                work_t *w = &works[omp_get_thread_num()];
                double tf = omp_get_wtime();
                const int nk = (int)kb, lda = (int)ld;
                int info = 0;
                c->dpotrf("L", &nk, Lkk, &lda, &info);
                if (info > 0) {
#pragma omp atomic write
                    bad = kr + info - 1;
                }
                w->stats[ST_DIAG_SEC] += omp_get_wtime() - tf;
            }
        }
        for (int64_t i = k + 1; i < nr; i++) {
            int64_t ir, im;
            row_block(i, nb, tile, nscol, nsrow, &ir, &im);
#pragma omp task firstprivate(i, k, ir, im, kr, kb) depend(in : tok[k * nb + k]) \
    depend(inout : tok[i * nb + k])
            {
                work_t *w = &works[omp_get_thread_num()];
                double tf = omp_get_wtime();
                const int m = (int)im, nk = (int)kb, lda = (int)ld;
                c->dtrsm("R", "L", "T", "N", &m, &nk, &one, Ls + kr + kr * ld, &lda, Ls + ir + kr * ld, &lda);
                w->stats[ST_DIAG_SEC] += omp_get_wtime() - tf;
            }
        }
        for (int64_t j = k + 1; j < nb; j++) {
            int64_t jr, jm;
            row_block(j, nb, tile, nscol, nsrow, &jr, &jm);
            for (int64_t i = j; i < nr; i++) {
                int64_t ir, im;
                row_block(i, nb, tile, nscol, nsrow, &ir, &im);
#pragma omp task firstprivate(i, j, k, ir, im, jr, jm, kr, kb) depend(in : ready[j]) \
    depend(in : tok[i * nb + k], tok[j * nb + k]) depend(inout : tok[i * nb + j])
                {
                    work_t *w = &works[omp_get_thread_num()];
                    double tu = omp_get_wtime();
                    const int m = (int)im, nj = (int)jm, nk = (int)kb, lda = (int)ld;
                    if (i == j)
                        c->dsyrk("L", "N", &nj, &nk, &minus, Ls + jr + kr * ld, &lda, &one,
                                 Ls + jr + jr * ld, &lda);
                    else
                        c->dgemm("N", "T", &m, &nj, &nk, &minus, Ls + ir + kr * ld, &lda,
                                 Ls + jr + kr * ld, &lda, &one, Ls + ir + jr * ld, &lda);
                    w->stats[ST_DIAG_SEC] += omp_get_wtime() - tu;
                }
            }
        }
    }
#pragma omp taskwait
    works[self].stats[ST_DIAG_BLAS] += 1;
    for (int64_t e = 0; e < ndesc; e++)
        if (desc[e].r2 < c->Sp[desc[e].d + 1] - c->Sp[desc[e].d]) link_snode(c, desc[e].d, desc[e].r2, 0, 0);
    c->head[s] = -1;
    free(desc);
    free(ready);
    free(tok);
    if (bad >= 0) return k1 + bad;
    if (nsrow > nscol) link_snode(c, s, nscol, 0, 0);
    return -1;
}

/* Factor the top supernodes top[0 .. ntop) in order (the rest of the tree
 * done) on nthreads threads: those with tile[t] > 0 as tasks over tiles of
 * tile[t] columns, the others by one thread. Returns -1 or the failing
 * column (permuted numbering). */
static int64_t factor_top(ctx_t *c, int64_t maxrow, int32_t ntop, const int32_t *top,
                          const int32_t *tile, int32_t nthreads, double *stats)
{
    work_t *works = malloc((size_t)nthreads * sizeof(work_t));
    for (int t = 0; t < nthreads; t++) work_init(&works[t], c, maxrow);
    int64_t fail = -1;
#pragma omp parallel num_threads(nthreads)
#pragma omp single
    {
        const int self = omp_get_thread_num();
        for (int32_t t = 0; t < ntop && fail < 0; t++)
            fail = tile[t] > 0 ? factor_snode_tiled(c, works, self, top[t], tile[t])
                               : factor_snode(c, &works[self], top[t], 0, 0);
    }
    for (int t = 0; t < nthreads; t++) work_free(&works[t], stats);
    free(works);
    return fail;
}

/* Factor the supernodes: the subtree ranges task_lo[t] .. task_hi[t] (see
 * factor_subtrees), then the top supernodes top[] with their tile sizes
 * (see factor_top), on nthreads threads. head/next/lpos: descendant lists
 * (head all -1 on entry). params: inst_max, tpq_max, tpq_batch, diag_small.
 * stats: NSTAT doubles, accumulated. Returns -1, or the smallest failing
 * column found (permuted numbering). */
int64_t chol_factor(int32_t n, int32_t ns, const int32_t *super, const int32_t *snode_of,
                    const int64_t *Sp, const int32_t *Si, const int64_t *Px,
                    const int64_t *Ap, const int32_t *Ai, const double *Ax, double *Lx,
                    int32_t *head, int32_t *next, int64_t *lpos,
                    int32_t ntask, const int32_t *task_lo, const int32_t *task_hi,
                    int32_t ntop, const int32_t *top, const int32_t *tile,
                    int32_t nthreads, const int64_t *params,
                    void *dgemm, void *dsyrk, void *dtrsm, void *dpotrf, double *stats)
{
    ctx_t c = {n, super, snode_of, Sp, Px, Si, Ap, Ai, Ax, Lx, head, next, lpos,
               params[0], params[1], params[2], params[3],
               (dgemm_t)dgemm, (dsyrk_t)dsyrk, (dtrsm_t)dtrsm, (dpotrf_t)dpotrf};
    const int64_t maxrow = max_rows(ns, Sp);
    double t0 = omp_get_wtime();
    int64_t fail = factor_subtrees(&c, maxrow, ntask, task_lo, task_hi, nthreads, stats);
    double t1 = omp_get_wtime();
    if (fail < 0 && ntop > 0) fail = factor_top(&c, maxrow, ntop, top, tile, nthreads, stats);
    stats[ST_SUBTREES_SEC] += t1 - t0;
    stats[ST_TOP_SEC] += omp_get_wtime() - t1;
    return fail;
}

/* Solves: each supernode's block is swept in column blocks of SB columns,
 * reading each entry of L once per sweep: the block's small triangle, then
 * all the rows below it in one pass over SB column streams. One right-hand
 * side: the supernode's rows are gathered into a contiguous vector, so the
 * pass vectorizes over the rows. Several: X is row-major (n x r), the pass
 * vectorizes over the right-hand sides, RB at a time, with the block's
 * SB x RB solution in registers, and reads and writes X's rows in place.
 * No BLAS: dgemm packed (copied) every block before multiplying 16 columns,
 * half of a 16-column solve's time, and dtrsv + dgemv calls cost more than
 * the work on the many small supernodes. */
#define SB 8 /* columns per block */
#define RB 8 /* right-hand sides per chunk */
#define SUM_CHUNK 32 /* several right-hand sides: backward sums by chunks of this many rows */
#define SMALL_BLOCK 64 /* one right-hand side: blocks of at most this many entries in place */

/* L y = y on a supernode's rows: y[0..nscol) its own entries, the rest below. */
static void forward1(int64_t nscol, int64_t nsrow, const double *restrict Ls, double *restrict y)
{
    for (int64_t c0 = 0; c0 < nscol; c0 += SB) {
        const int64_t cb = imin64(SB, nscol - c0);
        double a[SB];
        for (int64_t k = 0; k < cb; k++) {
            const double *col = Ls + (c0 + k) * nsrow;
            const double v = y[c0 + k] * (1.0 / col[c0 + k]); /* the division is off the dependence chain */
            a[k] = v;
            y[c0 + k] = v;
            for (int64_t k2 = k + 1; k2 < cb; k2++) y[c0 + k2] -= col[c0 + k2] * v;
        }
        const double *L0 = Ls + c0 * nsrow;
        if (cb == SB) {
            const double *L1 = L0 + nsrow, *L2 = L1 + nsrow, *L3 = L2 + nsrow, *L4 = L3 + nsrow,
                         *L5 = L4 + nsrow, *L6 = L5 + nsrow, *L7 = L6 + nsrow;
            for (int64_t i = c0 + SB; i < nsrow; i++)
                y[i] -= ((L0[i] * a[0] + L1[i] * a[1]) + (L2[i] * a[2] + L3[i] * a[3])) +
                        ((L4[i] * a[4] + L5[i] * a[5]) + (L6[i] * a[6] + L7[i] * a[7]));
        } else {
            for (int64_t k = 0; k < cb; k++) {
                const double *l = L0 + k * nsrow;
                for (int64_t i = c0 + cb; i < nsrow; i++) y[i] -= l[i] * a[k];
            }
        }
    }
}

/* L^T y = y on a supernode's rows (those below its own are final). */
static void backward1(int64_t nscol, int64_t nsrow, const double *restrict Ls, double *restrict y)
{
    for (int64_t c0 = (nscol - 1) / SB * SB; c0 >= 0; c0 -= SB) {
        const int64_t cb = imin64(SB, nscol - c0);
        const double *L0 = Ls + c0 * nsrow;
        double a[SB];
        if (cb == SB) {
            const double *L1 = L0 + nsrow, *L2 = L1 + nsrow, *L3 = L2 + nsrow, *L4 = L3 + nsrow,
                         *L5 = L4 + nsrow, *L6 = L5 + nsrow, *L7 = L6 + nsrow;
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3, s4, s5, s6, s7)
            for (int64_t i = c0 + SB; i < nsrow; i++) {
                const double v = y[i];
                s0 += L0[i] * v;
                s1 += L1[i] * v;
                s2 += L2[i] * v;
                s3 += L3[i] * v;
                s4 += L4[i] * v;
                s5 += L5[i] * v;
                s6 += L6[i] * v;
                s7 += L7[i] * v;
            }
            a[0] = y[c0] - s0, a[1] = y[c0 + 1] - s1, a[2] = y[c0 + 2] - s2, a[3] = y[c0 + 3] - s3;
            a[4] = y[c0 + 4] - s4, a[5] = y[c0 + 5] - s5, a[6] = y[c0 + 6] - s6, a[7] = y[c0 + 7] - s7;
        } else {
            for (int64_t k = 0; k < cb; k++) {
                const double *l = L0 + k * nsrow;
                double s = 0;
#pragma omp simd reduction(+ : s)
                for (int64_t i = c0 + cb; i < nsrow; i++) s += l[i] * y[i];
                a[k] = y[c0 + k] - s;
            }
        }
        for (int64_t k = cb - 1; k >= 0; k--) {
            const double *col = Ls + (c0 + k) * nsrow;
            double v = a[k];
            for (int64_t k2 = k + 1; k2 < cb; k2++) v -= col[c0 + k2] * a[k2];
            a[k] = v * (1.0 / col[c0 + k]);
            y[c0 + k] = a[k];
        }
    }
}

/* RB right-hand sides as one vector (GCC/Clang vector extension). */
typedef double vrb __attribute__((vector_size(RB * sizeof(double))));

static inline vrb load_rb(const double *p)
{
    vrb v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store_rb(double *p, vrb v) { memcpy(p, &v, sizeof v); }

/* Several right-hand sides, forward: where row i of a supernode's block is
 * updated: its own rows in X1 (the supernode's rows of X), those below in
 * W when the supernode has more than one column block (what it sends,
 * summed from zero and added to X once, as for one right-hand side: X
 * updated in place block by block was 2-3x less accurate), else in X. */
typedef struct {
    int64_t nscol, r;
    const int32_t *rows;
    double *X, *X1, *W;
} rows_t;

static inline double *row_of(const rows_t *t, int64_t i)
{
    if (i < t->nscol) return t->X1 + i * t->r;
    return t->W != NULL ? t->W + (i - t->nscol) * t->r : t->X + (int64_t)t->rows[i] * t->r;
}

/* Forward, several right-hand sides: columns c0 .. c0+cb-1 of a supernode
 * (cb <= SB, a constant where inlined), right-hand sides q0 .. q0+RB-1. */
static inline __attribute__((always_inline)) void forward_rb(
    int64_t c0, int64_t cb, int64_t nsrow, const double *restrict Ls, const rows_t *t, int64_t q0)
{
    const int64_t r = t->r;
    vrb a[SB];
    double *X0 = t->X1 + c0 * r + q0;
    for (int64_t k = 0; k < cb; k++) a[k] = load_rb(X0 + k * r);
    for (int64_t k = 0; k < cb; k++) {
        const double *col = Ls + (c0 + k) * nsrow + c0;
        a[k] *= 1.0 / col[k];
        for (int64_t k2 = k + 1; k2 < cb; k2++) a[k2] -= col[k2] * a[k];
    }
    for (int64_t k = 0; k < cb; k++) store_rb(X0 + k * r, a[k]);
    const double *L0 = Ls + c0 * nsrow;
    for (int64_t i = c0 + cb; i < nsrow; i++) {
        double *xi = row_of(t, i) + q0;
        vrb s = L0[i] * a[0];
        for (int64_t k = 1; k < cb; k++) s += L0[k * nsrow + i] * a[k];
        store_rb(xi, load_rb(xi) - s);
    }
}

/* Backward, as forward_rb, transposed (X below the supernode read in place). */
static inline __attribute__((always_inline)) void backward_rb(
    int64_t c0, int64_t cb, int64_t nsrow, const int32_t *rows, const double *restrict Ls,
    double *restrict X, int64_t r, int64_t q0)
{
    vrb a[SB];
    double *X0 = X + (int64_t)rows[c0] * r + q0;
    for (int64_t k = 0; k < cb; k++) a[k] = (vrb){0};
    const double *L0 = Ls + c0 * nsrow;
    for (int64_t i0 = c0 + cb; i0 < nsrow; i0 += SUM_CHUNK) { /* sums by chunks of rows: fewer roundings */
        const int64_t i1 = imin64(i0 + SUM_CHUNK, nsrow);
        vrb t[SB];
        for (int64_t k = 0; k < cb; k++) t[k] = (vrb){0};
        for (int64_t i = i0; i < i1; i++) {
            const vrb xi = load_rb(X + (int64_t)rows[i] * r + q0);
            for (int64_t k = 0; k < cb; k++) t[k] += L0[k * nsrow + i] * xi;
        }
        for (int64_t k = 0; k < cb; k++) a[k] += t[k];
    }
    for (int64_t k = 0; k < cb; k++) a[k] = load_rb(X0 + k * r) - a[k];
    for (int64_t k = cb - 1; k >= 0; k--) {
        const double *col = Ls + (c0 + k) * nsrow + c0;
        for (int64_t k2 = k + 1; k2 < cb; k2++) a[k] -= col[k2] * a[k2];
        a[k] *= 1.0 / col[k];
    }
    for (int64_t k = 0; k < cb; k++) store_rb(X0 + k * r, a[k]);
}

/* Forward/backward for the last w < RB right-hand sides, in scalars. */
static void forward_tail(int64_t c0, int64_t cb, int64_t nsrow, const double *Ls, const rows_t *t,
                         int64_t q0, int64_t w)
{
    for (int64_t k = 0; k < cb; k++) {
        const double *col = Ls + (c0 + k) * nsrow;
        double *xk = t->X1 + (c0 + k) * t->r + q0;
        const double inv = 1.0 / col[c0 + k];
        for (int64_t q = 0; q < w; q++) xk[q] *= inv;
        for (int64_t i = c0 + k + 1; i < nsrow; i++) {
            double *xi = row_of(t, i) + q0;
            for (int64_t q = 0; q < w; q++) xi[q] -= col[i] * xk[q];
        }
    }
}

static void backward_tail(int64_t c0, int64_t cb, int64_t nsrow, const int32_t *rows,
                          const double *Ls, double *X, int64_t r, int64_t q0, int64_t w)
{
    double *X0 = X + (int64_t)rows[c0] * r + q0;
    for (int64_t k = cb - 1; k >= 0; k--) {
        const double *col = Ls + (c0 + k) * nsrow;
        double *xk = X0 + k * r, acc[RB] = {0};
        for (int64_t i = c0 + k + 1; i < nsrow; i++) {
            const double *xi = X + (int64_t)rows[i] * r + q0;
            for (int64_t q = 0; q < w; q++) acc[q] += col[i] * xi[q];
        }
        const double inv = 1.0 / col[c0 + k];
        for (int64_t q = 0; q < w; q++) xk[q] = (xk[q] - acc[q]) * inv;
    }
}

/* One case per block width, so that each kernel is compiled with cb constant. */
#define BY_WIDTH(kernel, ...)                                                                  \
    switch (cb) {                                                                              \
    case 1: kernel(c0, 1, __VA_ARGS__); break;                                                 \
    case 2: kernel(c0, 2, __VA_ARGS__); break;                                                 \
    case 3: kernel(c0, 3, __VA_ARGS__); break;                                                 \
    case 4: kernel(c0, 4, __VA_ARGS__); break;                                                 \
    case 5: kernel(c0, 5, __VA_ARGS__); break;                                                 \
    case 6: kernel(c0, 6, __VA_ARGS__); break;                                                 \
    case 7: kernel(c0, 7, __VA_ARGS__); break;                                                 \
    default: kernel(c0, SB, __VA_ARGS__); break;                                               \
    }

static void forward_many(int64_t nscol, int64_t nsrow, const int32_t *rows, const double *Ls,
                         double *X, int64_t r, double *W)
{
    /* the supernode's own rows are consecutive */
    const rows_t t = {nscol, r, rows, X, X + (int64_t)rows[0] * r, nscol > SB ? W : NULL};
    if (t.W != NULL) memset(W, 0, (size_t)((nsrow - nscol) * r) * sizeof(double));
    for (int64_t c0 = 0; c0 < nscol; c0 += SB) {
        const int64_t cb = imin64(SB, nscol - c0);
        int64_t q0 = 0;
        for (; q0 + RB <= r; q0 += RB) BY_WIDTH(forward_rb, nsrow, Ls, &t, q0)
        if (q0 < r) forward_tail(c0, cb, nsrow, Ls, &t, q0, r - q0);
    }
    for (int64_t i = nscol; i < nsrow && t.W != NULL; i++) {
        double *xi = X + (int64_t)rows[i] * r;
        const double *wi = W + (i - nscol) * r;
        for (int64_t q = 0; q < r; q++) xi[q] += wi[q];
    }
}

static void backward_many(int64_t nscol, int64_t nsrow, const int32_t *rows, const double *Ls,
                          double *X, int64_t r)
{
    for (int64_t c0 = (nscol - 1) / SB * SB; c0 >= 0; c0 -= SB) {
        const int64_t cb = imin64(SB, nscol - c0);
        int64_t q0 = 0;
        for (; q0 + RB <= r; q0 += RB) BY_WIDTH(backward_rb, nsrow, rows, Ls, X, r, q0)
        if (q0 < r) backward_tail(c0, cb, nsrow, rows, Ls, X, r, q0, r - q0);
    }
}

/* Forward sweep over supernodes lo .. hi-1 (ascending). W: nsrow x r doubles. */
static void sweep_forward(int32_t lo, int32_t hi, const int32_t *super, const int64_t *Sp,
                          const int32_t *Si, const int64_t *Px, const double *Lx, double *X,
                          int64_t r, double *W)
{
    for (int32_t s = lo; s < hi; s++) {
        const int64_t nscol = super[s + 1] - super[s], nsrow = Sp[s + 1] - Sp[s];
        const int32_t *rows = Si + Sp[s];
        if (r > 1) {
            forward_many(nscol, nsrow, rows, Lx + Px[s], X, r, W);
            continue;
        }
        double *x1 = X + super[s];
        const double *Ls = Lx + Px[s];
        if (nscol * nsrow <= SMALL_BLOCK) { /* in place: copying costs more than the work */
            for (int64_t c = 0; c < nscol; c++) {
                const double *col = Ls + c * nsrow;
                const double xj = x1[c] * (1.0 / col[c]);
                x1[c] = xj;
                for (int64_t i = c + 1; i < nscol; i++) x1[i] -= col[i] * xj;
                for (int64_t i = nscol; i < nsrow; i++) X[rows[i]] -= col[i] * xj;
            }
            continue;
        }
        memcpy(W, x1, (size_t)nscol * sizeof(double));
        memset(W + nscol, 0, (size_t)(nsrow - nscol) * sizeof(double));
        forward1(nscol, nsrow, Ls, W);
        memcpy(x1, W, (size_t)nscol * sizeof(double));
        for (int64_t i = nscol; i < nsrow; i++) X[rows[i]] += W[i];
    }
}

/* Backward sweep over supernodes hi-1 down to lo. */
static void sweep_backward(int32_t lo, int32_t hi, const int32_t *super, const int64_t *Sp,
                           const int32_t *Si, const int64_t *Px, const double *Lx, double *X,
                           int64_t r, double *W)
{
    for (int32_t s = hi - 1; s >= lo; s--) {
        const int64_t nscol = super[s + 1] - super[s], nsrow = Sp[s + 1] - Sp[s];
        const int32_t *rows = Si + Sp[s];
        if (r > 1) {
            backward_many(nscol, nsrow, rows, Lx + Px[s], X, r);
            continue;
        }
        double *x1 = X + super[s];
        const double *Ls = Lx + Px[s];
        if (nscol * nsrow <= SMALL_BLOCK) {
            for (int64_t c = nscol - 1; c >= 0; c--) {
                const double *col = Ls + c * nsrow;
                double sum = x1[c];
                for (int64_t i = c + 1; i < nscol; i++) sum -= col[i] * x1[i];
                for (int64_t i = nscol; i < nsrow; i++) sum -= col[i] * X[rows[i]];
                x1[c] = sum * (1.0 / col[c]);
            }
            continue;
        }
        memcpy(W, x1, (size_t)nscol * sizeof(double));
        for (int64_t i = nscol; i < nsrow; i++) W[i] = X[rows[i]];
        backward1(nscol, nsrow, Ls, W);
        memcpy(x1, W, (size_t)nscol * sizeof(double));
    }
}

/* Solve A X = B for P A P^T = L L^T (P = I[perm]): X[k] = B[perm[k]], then
 * L Y = X (forward) and L^T Z = Y (backward) supernode by supernode, then
 * out[perm[k]] = Z[k]. B, X (workspace) and out are n x nrhs row-major.
 * Returns 0, or -1 when the workspace cannot be allocated. */
int32_t chol_solve(int32_t n, int32_t ns, const int32_t *super, const int64_t *Sp, const int32_t *Si,
                   const int64_t *Px, const double *Lx, const int64_t *perm, const double *B,
                   double *X, double *out, int32_t nrhs)
{
    const int64_t r = nrhs;
    int64_t maxrow = 1;
    for (int32_t s = 0; s < ns; s++) maxrow = imax64(maxrow, Sp[s + 1] - Sp[s]);
    double *W = malloc((size_t)(maxrow * r) * sizeof(double));
    if (W == NULL) return -1;
    if (r == 1)
        for (int64_t k = 0; k < n; k++) X[k] = B[perm[k]];
    else
        for (int64_t k = 0; k < n; k++) memcpy(X + k * r, B + perm[k] * r, (size_t)r * sizeof(double));
    sweep_forward(0, ns, super, Sp, Si, Px, Lx, X, r, W);
    sweep_backward(0, ns, super, Sp, Si, Px, Lx, X, r, W);
    if (r == 1)
        for (int64_t k = 0; k < n; k++) out[perm[k]] = X[k];
    else
        for (int64_t k = 0; k < n; k++) memcpy(out + perm[k] * r, X + k * r, (size_t)r * sizeof(double));
    free(W);
    return 0;
}

/* Copy the supernodal factor into CSC arrays (lower triangle, sorted rows). */
void chol_to_csc(int32_t ns, const int32_t *super, const int64_t *Sp, const int32_t *Si,
                 const int64_t *Px, const double *Lx, int64_t *Lp, int32_t *Li, double *Lv)
{
    int64_t q = 0;
    Lp[0] = 0;
    for (int32_t s = 0; s < ns; s++) {
        const int64_t k1 = super[s], nscol = super[s + 1] - k1, nsrow = Sp[s + 1] - Sp[s];
        for (int64_t c = 0; c < nscol; c++) {
            const double *col = Lx + Px[s] + c * nsrow;
            for (int64_t i = c; i < nsrow; i++) {
                Li[q] = Si[Sp[s] + i];
                Lv[q++] = col[i];
            }
            Lp[k1 + c + 1] = q;
        }
    }
}

/* Give the pages of [p, p + nbytes) to the process now, on nthreads threads
 * taking chunks of POPULATE_CHUNK bytes as they come free (a thread that
 * another process keeps off its core populates fewer), asking the kernel for
 * each chunk in one call (MADV_POPULATE_WRITE) where the kernel has it, else
 * touching one byte per page. */
#define POPULATE_CHUNK (8 << 20)
void chol_populate(char *p, int64_t nbytes, int32_t nthreads)
{
    const int64_t page = sysconf(_SC_PAGESIZE);
    char *first = (char *)(((uintptr_t)p + (uintptr_t)page - 1) & ~(uintptr_t)(page - 1));
    const int64_t len = (p + nbytes - first) / page * page;
    if (len <= 0) return;
    const int64_t chunk = POPULATE_CHUNK / page * page, nchunk = (len + chunk - 1) / chunk;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
    for (int64_t k = 0; k < nchunk; k++) {
        char *a = first + k * chunk, *b = first + imin64((k + 1) * chunk, len);
#ifdef MADV_POPULATE_WRITE
        if (madvise(a, (size_t)(b - a), MADV_POPULATE_WRITE) == 0) a = b;
#endif
        for (; a < b; a += page) *(volatile char *)a = 0;
    }
}
