/* Vector operations of the iterative solvers on float64 vectors, fused and threaded (OpenMP): each is
 * one pass over its vectors. Dot products return this process's part (summed over MPI ranks by the
 * caller), the same on any number of threads (CHUNKS). A view is a 3D array inside a kernel buffer:
 * its shape, the strides of its two outer axes in elements, its last axis contiguous.
 *
 * ZREAL is the element type of the operand that may be the multigrid preconditioner's (its result z,
 * its right-hand side): double here, float in the build for a single-precision hierarchy (each
 * function keeps its name there). Arithmetic is in double. */

#ifndef ZREAL
#define ZREAL double
#endif

/* A dot product is summed in CHUNKS fixed runs of consecutive elements (or rows), each in order, then
 * the runs' sums in order: its rounding, and the solvers' results, are the same on any number of
 * threads (an OpenMP reduction adds each thread's part, so its rounding follows the count). */
#define CHUNKS 64

static double sum_in_order(const double *part)
{
    double s = 0.0;
    for (int c = 0; c < CHUNKS; c++)
        s += part[c];
    return s;
}

double vec_dot(long n, const double *restrict a, const ZREAL *restrict b, int nthreads)
{
    double part[CHUNKS];
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int c = 0; c < CHUNKS; c++) {
        const long from = n * c / CHUNKS, to = n * (c + 1) / CHUNKS;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (long i = from; i < to; i++)
            s += a[i] * b[i];
        part[c] = s;
    }
    return sum_in_order(part);
}

/* r -= alpha q; returns r . r (CG's residual and its norm in one pass). */
double vec_residual_update(long n, double alpha, double *restrict r, const double *restrict q, int nthreads)
{
    double part[CHUNKS];
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int c = 0; c < CHUNKS; c++) {
        const long from = n * c / CHUNKS, to = n * (c + 1) / CHUNKS;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (long i = from; i < to; i++) {
            const double ri = r[i] - alpha * q[i];
            r[i] = ri;
            s += ri * ri;
        }
        part[c] = s;
    }
    return sum_in_order(part);
}

/* x += alpha p, then p = z + beta p (CG's solution step and its new direction in one pass). */
void vec_cg_step(long n, double alpha, double *restrict x, const ZREAL *restrict z, double beta,
                 double *restrict p, int nthreads)
{
#pragma omp parallel for simd schedule(static) num_threads(nthreads)
    for (long i = 0; i < n; i++) {
        x[i] += alpha * p[i];
        p[i] = z[i] + beta * p[i];
    }
}

/* y += a x (GMRES's Gram-Schmidt). */
void vec_axpy(long n, double a, const double *restrict x, double *restrict y, int nthreads)
{
#pragma omp parallel for simd schedule(static) num_threads(nthreads)
    for (long i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* out = a x (a copy when a is 1). */
void vec_scale(long n, double a, const ZREAL *restrict x, double *restrict out, int nthreads)
{
#pragma omp parallel for simd schedule(static) num_threads(nthreads)
    for (long i = 0; i < n; i++)
        out[i] = a * x[i];
}

/* The same on views: each operand a 3D array of `shape` with its own strides (sa, sb, ...: of its two
 * outer axes, in elements; its last axis contiguous), a flat vector included (strides shape[1] * shape[2],
 * shape[2]). CG runs on the kernel buffers' views this way, without copying them in or out. */
double vec_dot_views(const long *shape, const double *a, const long *sa, const ZREAL *b, const long *sb,
                     int nthreads)
{
    const long rows = shape[0] * shape[1];
    double part[CHUNKS];
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int c = 0; c < CHUNKS; c++) {
        const long from = rows * c / CHUNKS, to = rows * (c + 1) / CHUNKS;
        double s = 0.0;
        for (long ij = from; ij < to; ij++) {
            const long i = ij / shape[1], j = ij % shape[1];
            const double *restrict ra = a + i * sa[0] + j * sa[1];
            const ZREAL *restrict rb = b + i * sb[0] + j * sb[1];
            double row = 0.0;
#pragma omp simd reduction(+ : row)
            for (long k = 0; k < shape[2]; k++)
                row += ra[k] * rb[k];
            s += row;
        }
        part[c] = s;
    }
    return sum_in_order(part);
}

/* y, if not NULL: r's new values written there too, in the same pass (the V-cycle's right-hand side). */
double vec_residual_update_views(const long *shape, double alpha, double *r, const long *sr, const double *q,
                                 const long *sq, ZREAL *y, const long *sy, int nthreads)
{
    const long rows = shape[0] * shape[1];
    double part[CHUNKS];
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int c = 0; c < CHUNKS; c++) {
        const long from = rows * c / CHUNKS, to = rows * (c + 1) / CHUNKS;
        double s = 0.0;
        for (long ij = from; ij < to; ij++) {
            const long i = ij / shape[1], j = ij % shape[1];
            double *restrict rr = r + i * sr[0] + j * sr[1];
            const double *restrict rq = q + i * sq[0] + j * sq[1];
            ZREAL *restrict ry = y ? y + i * sy[0] + j * sy[1] : 0;
            double row = 0.0;
#pragma omp simd reduction(+ : row)
            for (long k = 0; k < shape[2]; k++) {
                const double ri = rr[k] - alpha * rq[k];
                rr[k] = ri;
                if (ry)
                    ry[k] = (ZREAL)ri;
                row += ri * ri;
            }
            s += row;
        }
        part[c] = s;
    }
    return sum_in_order(part);
}

void vec_cg_step_views(const long *shape, double alpha, double *x, const long *sx, const ZREAL *z, const long *sz,
                       double beta, double *p, const long *sp, int nthreads)
{
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (long i = 0; i < shape[0]; i++)
        for (long j = 0; j < shape[1]; j++) {
            double *restrict rx = x + i * sx[0] + j * sx[1], *restrict rp = p + i * sp[0] + j * sp[1];
            const ZREAL *restrict rz = z + i * sz[0] + j * sz[1];
#pragma omp simd
            for (long k = 0; k < shape[2]; k++) {
                rx[k] += alpha * rp[k];
                rp[k] = rz[k] + beta * rp[k];
            }
        }
}

void vec_axpy_views(const long *shape, double a, const double *x, const long *sx, double *y, const long *sy,
                    int nthreads)
{
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (long i = 0; i < shape[0]; i++)
        for (long j = 0; j < shape[1]; j++) {
            const double *restrict rx = x + i * sx[0] + j * sx[1];
            double *restrict ry = y + i * sy[0] + j * sy[1];
#pragma omp simd
            for (long k = 0; k < shape[2]; k++)
                ry[k] += a * rx[k];
        }
}

void vec_scale_views(const long *shape, double a, const ZREAL *x, const long *sx, double *out, const long *so,
                     int nthreads)
{
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (long i = 0; i < shape[0]; i++)
        for (long j = 0; j < shape[1]; j++) {
            const ZREAL *restrict rx = x + i * sx[0] + j * sx[1];
            double *restrict ro = out + i * so[0] + j * so[1];
#pragma omp simd
            for (long k = 0; k < shape[2]; k++)
                ro[k] = a * rx[k];
        }
}

/* flat = view (row by row). */
void vec_gather(const ZREAL *view, const long *shape, const long *strides, double *restrict flat, int nthreads)
{
    const long n1 = shape[1], n2 = shape[2];
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (long i = 0; i < shape[0]; i++)
        for (long j = 0; j < n1; j++) {
            const ZREAL *restrict row = view + i * strides[0] + j * strides[1];
            double *restrict out = flat + (i * n1 + j) * n2;
            for (long k = 0; k < n2; k++)
                out[k] = row[k];
        }
}

/* view = flat (row by row). */
void vec_scatter(const double *restrict flat, ZREAL *view, const long *shape, const long *strides, int nthreads)
{
    const long n1 = shape[1], n2 = shape[2];
#pragma omp parallel for collapse(2) schedule(static) num_threads(nthreads)
    for (long i = 0; i < shape[0]; i++)
        for (long j = 0; j < n1; j++) {
            ZREAL *restrict row = view + i * strides[0] + j * strides[1];
            const double *restrict in = flat + (i * n1 + j) * n2;
            for (long k = 0; k < n2; k++)
                row[k] = in[k];
        }
}
