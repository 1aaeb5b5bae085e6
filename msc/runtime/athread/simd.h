/* athread emulator: the Sunway SIMD types and the calls the generated CPE code uses, with the vendors'
 * names and signatures (simd.h of SW26010 and of SW26010-Pro). SW26010's CPEs have 256-bit vectors
 * (doublev4, floatv4), SW26010-Pro's 512-bit ones (doublev8, floatv8); here they are GCC vector types of
 * the same lanes, so the same code runs on this host. simd_load and simd_store need an address aligned
 * to the vector's size, as on the chips; the emulator stops the run with a message where one is not.
 * simd_loadu and simd_storeu take any address. */
#ifndef MSC_ATHREAD_EMU_SIMD_H
#define MSC_ATHREAD_EMU_SIMD_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef double doublev4 __attribute__((vector_size(4 * sizeof(double))));
typedef float floatv4 __attribute__((vector_size(4 * sizeof(float))));
typedef double doublev8 __attribute__((vector_size(8 * sizeof(double))));
typedef float floatv8 __attribute__((vector_size(8 * sizeof(float))));

static __inline void msc_simd_aligned(const void *p, size_t size, const char *call)
{
    if ((uintptr_t)p % size) {
        fprintf(stderr, "athread emulator: %s at %p, which is not aligned to the vector's %zu bytes\n", call, p,
                size);
        abort();
    }
}

#define simd_loadu(dest, src) ({ memcpy(&(dest), (src), sizeof(dest)); (dest); })
#define simd_load(dest, src) \
    ({ msc_simd_aligned((src), sizeof(dest), "simd_load"); memcpy(&(dest), (src), sizeof(dest)); (dest); })
#define simd_storeu(src, dest) ({ __typeof__(src) msc_simd_v = (src); memcpy((dest), &msc_simd_v, sizeof msc_simd_v); })
#define simd_store(src, dest) ({ __typeof__(src) msc_simd_v = (src); \
    msc_simd_aligned((dest), sizeof msc_simd_v, "simd_store"); memcpy((dest), &msc_simd_v, sizeof msc_simd_v); })

static __inline doublev4 simd_set_doublev4(double a, double b, double c, double d)
{
    doublev4 v = {a, b, c, d};
    return v;
}

static __inline floatv4 simd_set_floatv4(float a, float b, float c, float d)
{
    floatv4 v = {a, b, c, d};
    return v;
}

static __inline doublev8 simd_set_doublev8(double a, double b, double c, double d, double e, double f, double g,
                                           double h)
{
    doublev8 v = {a, b, c, d, e, f, g, h};
    return v;
}

static __inline floatv8 simd_set_floatv8(float a, float b, float c, float d, float e, float f, float g, float h)
{
    floatv8 v = {a, b, c, d, e, f, g, h};
    return v;
}

#endif
