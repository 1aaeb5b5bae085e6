/* Minimal .npy reader and writer for msc's standalone drivers (C order,
 * little-endian float32/float64). npy_load checks the header, dtype, order,
 * rank and data size against the file and puts what is wrong in one line of
 * `err`. npy_save writes a temporary file beside the target (mode as open()
 * gives it) and renames it into place, so a failed write leaves no half file. */
#ifndef MSC_NPY_H
#define MSC_NPY_H
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NPY_FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); goto fail; } while (0)

static const char *npy_type_name(const char *descr) { return strcmp(descr, "<f8") ? "float32" : "float64"; }

static void *npy_load(const char *path, const char *descr, int ndim, long *shape, char *err, size_t errlen)
{
    /* declared before the first NPY_FAIL: C++ (a CUDA driver) jumps over no initialisation */
    char *h = 0, got[32] = "";
    void *data = 0;
    unsigned char magic[8], b[4] = {0};
    size_t nlen, need;
    unsigned long hlen = 0;
    const char *p;
    long count = 1, here, size = -1;
    int d = 0;
    double memory;
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, errlen, "cannot open it: %s", strerror(errno)); return 0; }
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6)) NPY_FAIL("not a .npy file (no .npy header)");
    if (magic[6] < 1 || magic[6] > 3) NPY_FAIL("unsupported .npy format version %d", magic[6]);
    nlen = magic[6] == 1 ? 2 : 4;
    if (fread(b, 1, nlen, f) != nlen) NPY_FAIL("truncated .npy header");
    for (size_t i = 0; i < nlen; i++) hlen |= (unsigned long)b[i] << (8 * i);
    if (hlen > (1ul << 20)) NPY_FAIL("implausible .npy header length %lu", hlen);
    h = (char *)calloc(hlen + 1, 1);
    if (!h || fread(h, 1, hlen, f) != hlen) NPY_FAIL("truncated .npy header");
    p = strstr(h, "'descr':");
    if (!p || sscanf(p + 8, " '%31[^']'", got) != 1) NPY_FAIL("the .npy header has no 'descr'");
    if (strcmp(got, descr))
        NPY_FAIL("dtype '%s', expected '%s' (%s); save it as a.astype(numpy.%s)", got, descr, npy_type_name(descr),
                 npy_type_name(descr));
    if (strstr(h, "'fortran_order': True")) NPY_FAIL("Fortran order; save it as numpy.ascontiguousarray(a)");
    if (!(p = strstr(h, "'shape':")) || !(p = strchr(p, '('))) NPY_FAIL("the .npy header has no 'shape'");
    for (p++; *p && *p != ')';) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) { p++; continue; }
        if (v < 0 || (v > 0 && count > LONG_MAX / 8 / v)) NPY_FAIL("implausible extent %ld in its shape", v);
        if (d < ndim) shape[d] = v;
        d++; count *= v; p = end;
    }
    if (d != ndim) NPY_FAIL("a %dD array, expected %dD", d, ndim);
    need = (strcmp(descr, "<f8") ? 4 : 8) * (size_t)count;
    here = ftell(f);
    if (here >= 0 && fseek(f, 0, SEEK_END) == 0) size = ftell(f);
    if (size < 0 || fseek(f, here, SEEK_SET)) NPY_FAIL("cannot find its size: %s", strerror(errno));
    if ((size_t)(size - here) != need)
        NPY_FAIL("%ld bytes of data where its header's shape needs %zu (truncated or damaged)", size - here, need);
    memory = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGE_SIZE);
    if (memory > 0 && (double)need > memory)
        NPY_FAIL("its %.1f GiB of data exceed this machine's %.1f GiB of memory", need / 1073741824.0,
                 memory / 1073741824.0);
    data = malloc(need ? need : 1);
    if (!data) NPY_FAIL("out of memory for its %zu bytes", need);
    if (fread(data, 1, need, f) != need) NPY_FAIL("read error: %s", strerror(errno));
    free(h);
    fclose(f);
    return data;
fail:
    free(data);
    free(h);
    fclose(f);
    return 0;
}

static int npy_save(const char *path, const char *descr, int ndim, const long *shape, const void *data, size_t item)
{
    char header[256], dims[128] = "";
    long count = 1;
    for (int d = 0; d < ndim; d++) {
        char one[32];
        snprintf(one, sizeof one, "%ld,%s", shape[d], (ndim > 1 && d < ndim - 1) ? " " : "");
        strcat(dims, one);
        count *= shape[d];
    }
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }", descr, dims);
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid()) >= (int)sizeof tmp) return 1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    FILE *f = fd < 0 ? 0 : fdopen(fd, "wb");
    if (!f) { if (fd >= 0) { close(fd); remove(tmp); } return 1; }
    unsigned short hlen = (unsigned short)(n + pad + 1);
    int ok = fwrite("\x93NUMPY\x01\x00", 1, 8, f) == 8;
    ok = ok && fputc(hlen & 0xff, f) != EOF && fputc(hlen >> 8, f) != EOF;
    ok = ok && fwrite(header, 1, (size_t)n, f) == (size_t)n;
    for (int i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && fwrite(data, item, (size_t)count, f) == (size_t)count;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path)) { remove(tmp); return 1; }
    return 0;
}
#endif
