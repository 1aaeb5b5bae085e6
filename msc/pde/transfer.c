/* Multigrid grid transfers on strided 3D arrays (1D and 2D grids come with unit leading axes).
 *
 * P is a tensor product of 1D linear interpolations, R = P^T. Along each axis
 * the tables say, per coarse point I, the 3 fine points it gathers from
 * (index, weight; weight 0 where absent) for R, and per fine point y, the 2
 * coarse points it takes from for P. Strides are in elements and the last
 * axis is contiguous, so the arrays may be views into padded kernel buffers. REAL is their element
 * type: double, or float in the build for a single-precision hierarchy; sums are in double. */

#ifndef REAL
#define REAL double
#endif

#include <stdlib.h>

/* sum[y] = the sum over a, b < k of w0[a][I0] w1[b][I1] base[i0[a][I0], i1[b][I1], y] for y < n: the rows an
 * output row combines, weighted (table k' of axis d holds n_d entries: k' * n_d + I). */
static void weighted_rows(double *restrict sum, long n, int k, const REAL *base, const long *strides,
                          const long *i0, const double *w0, long n0, long I0,
                          const long *i1, const double *w1, long n1, long I1)
{
    for (long y = 0; y < n; y++)
        sum[y] = 0.0;
    for (int a = 0; a < k; a++) {
        const double wa = w0[a * n0 + I0];
        if (wa == 0.0)
            continue;
        for (int b = 0; b < k; b++) {
            const double w = wa * w1[b * n1 + I1];
            if (w == 0.0)
                continue;
            const REAL *restrict row = base + i0[a * n0 + I0] * strides[0] + i1[b * n1 + I1] * strides[1];
            for (long y = 0; y < n; y++)
                sum[y] += w * row[y];
        }
    }
}

/* c[I] = sum over a, b, e < 3 of w0[a][I0] w1[b][I1] w2[e][I2] f[i0[a][I0], i1[b][I1], i2[e][I2]]:
 * per coarse row, its up to 9 fine rows summed with their weights, then restricted along the row. */
void mg_restrict(const REAL *f, const long *fs, REAL *c, const long *cs, const long *m, long n2,
                 const long *i0, const double *w0, const long *i1, const double *w1,
                 const long *i2, const double *w2, int nthreads)
{
    const long m0 = m[0], m1 = m[1], m2 = m[2];
#pragma omp parallel num_threads(nthreads)
    {
        double *sum = malloc((size_t)n2 * sizeof(double));
#pragma omp for collapse(2) schedule(static)
        for (long I0 = 0; I0 < m0; I0++) {
            for (long I1 = 0; I1 < m1; I1++) {
                weighted_rows(sum, n2, 3, f, fs, i0, w0, m0, I0, i1, w1, m1, I1);
                REAL *restrict out = c + I0 * cs[0] + I1 * cs[1];
                for (long I2 = 0; I2 < m2; I2++)
                    out[I2] = w2[I2] * sum[i2[I2]] + w2[m2 + I2] * sum[i2[m2 + I2]]
                              + w2[2 * m2 + I2] * sum[i2[2 * m2 + I2]];
            }
        }
        free(sum);
    }
}

/* f[y] += sum over a, b, e < 2 of w0[a][y0] w1[b][y1] w2[e][y2] c[j0[a][y0], j1[b][y1], j2[e][y2]]:
 * per fine row, its up to 4 coarse rows summed with their weights, then interpolated along the row. */
void mg_prolong_add(const REAL *c, const long *cs, REAL *f, const long *fs, const long *n, long m2,
                    const long *j0, const double *w0, const long *j1, const double *w1,
                    const long *j2, const double *w2, int nthreads)
{
    const long n0 = n[0], n1 = n[1], n2 = n[2];
#pragma omp parallel num_threads(nthreads)
    {
        double *sum = malloc((size_t)m2 * sizeof(double));
#pragma omp for collapse(2) schedule(static)
        for (long y0 = 0; y0 < n0; y0++) {
            for (long y1 = 0; y1 < n1; y1++) {
                weighted_rows(sum, m2, 2, c, cs, j0, w0, n0, y0, j1, w1, n1, y1);
                REAL *restrict out = f + y0 * fs[0] + y1 * fs[1];
                for (long y2 = 0; y2 < n2; y2++)
                    out[y2] += w2[y2] * sum[j2[y2]] + w2[n2 + y2] * sum[j2[n2 + y2]];
            }
        }
        free(sum);
    }
}
