/* The Krylov methods' vector operations on contiguous float64 vectors, fused and threaded (OpenMP):
 * each is one pass over its vectors. Dot products return this process's part (summed over MPI
 * ranks by the caller). */

double vec_dot(long n, const double *restrict a, const double *restrict b, int nthreads)
{
    double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) num_threads(nthreads)
    for (long i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

/* x += alpha p, r -= alpha q; returns r . r (CG's update and its residual norm in one pass). */
double vec_cg_update(long n, double alpha, double *restrict x, const double *restrict p, double *restrict r,
                     const double *restrict q, int nthreads)
{
    double s = 0.0;
#pragma omp parallel for simd reduction(+ : s) schedule(static) num_threads(nthreads)
    for (long i = 0; i < n; i++) {
        x[i] += alpha * p[i];
        const double ri = r[i] - alpha * q[i];
        r[i] = ri;
        s += ri * ri;
    }
    return s;
}

/* p = z + beta p (CG's new direction). */
void vec_xpay(long n, const double *restrict z, double beta, double *restrict p, int nthreads)
{
#pragma omp parallel for simd schedule(static) num_threads(nthreads)
    for (long i = 0; i < n; i++)
        p[i] = z[i] + beta * p[i];
}
