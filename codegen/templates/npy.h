/* Minimal .npy reader and writer for msc's standalone drivers (C order,
 * little-endian float32/float64). Writes go to a temporary file that is
 * renamed into place, so a reader never sees half a file. */
#ifndef MSC_NPY_H
#define MSC_NPY_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *npy_load(const char *path, const char *descr, int ndim, long *shape)
{
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    unsigned char magic[8];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, "\x93NUMPY", 6)) { fclose(f); return 0; }
    unsigned long hlen = 0;
    unsigned char b[4] = {0};
    size_t nlen = magic[6] == 1 ? 2 : 4;
    if (fread(b, 1, nlen, f) != nlen) { fclose(f); return 0; }
    for (size_t i = 0; i < nlen; i++) hlen |= (unsigned long)b[i] << (8 * i);
    char *h = (char *)calloc(hlen + 1, 1);
    if (!h || fread(h, 1, hlen, f) != hlen) { free(h); fclose(f); return 0; }
    char want[32];
    snprintf(want, sizeof want, "'%s'", descr);
    const char *s = strstr(h, "'shape':");
    if (!strstr(h, want) || strstr(h, "'fortran_order': True") || !s) {
        fprintf(stderr, "%s: expected dtype %s in C order\n", path, descr);
        free(h); fclose(f); return 0;
    }
    s = strchr(s, '(');
    long count = 1;
    int d = 0;
    for (s++; *s && *s != ')'; ) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) { s++; continue; }
        if (d < ndim) shape[d] = v;
        d++; count *= v; s = end;
    }
    free(h);
    if (d != ndim) { fprintf(stderr, "%s: expected a %dD array, got %dD\n", path, ndim, d); fclose(f); return 0; }
    size_t item = strstr(descr, "8") ? 8 : 4;
    void *data = malloc(item * (size_t)count);
    if (!data || fread(data, item, (size_t)count, f) != (size_t)count) { free(data); data = 0; }
    fclose(f);
    return data;
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
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return 1;
    unsigned short hlen = (unsigned short)(n + pad + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, f);
    fputc(hlen & 0xff, f); fputc(hlen >> 8, f);
    fwrite(header, 1, (size_t)n, f);
    for (int i = 0; i < pad; i++) fputc(' ', f);
    fputc('\n', f);
    int ok = fwrite(data, item, (size_t)count, f) == (size_t)count;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path)) { remove(tmp); return 1; }
    return 0;
}
#endif
