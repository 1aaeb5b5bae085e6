/* Whether every value of a strided box of floating-point numbers is finite: the check after
 * each run and advance (msc/runtime/finite.py), on the kernel's threads. x * 0 is 0 for a
 * finite x and NaN for a NaN or an infinity, so the sum of a row's x * 0 is NaN exactly when
 * the row holds one; the sum vectorises where isfinite() would not. */
#include <omp.h>

#define MSC_FINITE(name, real)                                                                    \
    int name(const real *p, long n0, long n1, long n2, long s0, long s1, int threads)             \
    {                                                                                              \
        int bad = 0;                                                                               \
        if (threads <= 0)                                                                          \
            threads = omp_get_max_threads();                                                       \
        _Pragma("omp parallel for collapse(2) reduction(|:bad) schedule(static) num_threads(threads)") \
        for (long i = 0; i < n0; i++)                                                              \
            for (long j = 0; j < n1; j++) {                                                        \
                const real *row = p + i * s0 + j * s1;                                             \
                real zero = 0;                                                                     \
                _Pragma("omp simd reduction(+:zero)")                                              \
                for (long k = 0; k < n2; k++)                                                      \
                    zero += row[k] * 0;                                                            \
                bad |= zero != 0; /* NaN != 0 */                                                   \
            }                                                                                      \
        return !bad;                                                                               \
    }

MSC_FINITE(msc_finite_float64, double)
MSC_FINITE(msc_finite_float32, float)
