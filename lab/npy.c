/* .npy read/write; see npy.h. The format: "\x93NUMPY", major, minor, a
 * little-endian header length (u16 for 1.x, u32 for 2.x/3.x), then a Python
 * dict literal {'descr': ..., 'fortran_order': ..., 'shape': (...), } padded
 * with spaces and '\n', then the raw data. The host is assumed little-endian,
 * like every platform vcattn targets. */
#define _POSIX_C_SOURCE 200809L  /* fseeko/ftello: files over 2 GiB */

#include "npy.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* numpy itself refuses headers over 10000 bytes by default; real headers are
 * under 200, so this only bounds the allocation a hostile file can ask for. */
#define NPY_MAX_HEADER 65536

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static vcattn_status npy_fail(char *err, size_t errlen, vcattn_status status,
                              const char *path, const char *fmt, ...) {
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s: ", path);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return status;
}

/* *data: numel doubles, replaced by numel floats (rounded to nearest). A
 * finite double beyond the float range is refused rather than made Inf;
 * NaN and Inf pass (the library's finite check reports them). */
static vcattn_status narrow_doubles(void **data, int64_t numel) {
    float *f = malloc(numel ? (size_t)numel * sizeof(float) : 1);
    if (!f) {
        free(*data);
        *data = NULL;
        return VCATTN_ERR_OUT_OF_MEMORY;
    }
    const unsigned char *src = *data;
    for (int64_t i = 0; i < numel; i++) {
        double x;
        memcpy(&x, src + (size_t)i * sizeof x, sizeof x);
        if (isfinite(x) && fabs(x) > FLT_MAX) {
            free(f);
            free(*data);
            *data = NULL;
            return VCATTN_ERR_INVALID_ARGUMENT;
        }
        f[i] = (float)x;
    }
    free(*data);
    *data = f;
    return VCATTN_OK;
}

static size_t npy_elem_size(vcattn_dtype dtype) {
    return dtype == VCATTN_DTYPE_F32 ? 4 : 2;
}

/* ------------------------------------------------------------ header parse */

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int peek(cursor *c, char ch) {
    skip_ws(c);
    return c->p < c->end && *c->p == ch;
}

static int eat(cursor *c, char ch) {
    if (!peek(c, ch)) return 0;
    c->p++;
    return 1;
}

static int eat_word(cursor *c, const char *w) {
    size_t n = strlen(w);
    skip_ws(c);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0) return 0;
    c->p += n;
    return 1;
}

/* A quoted Python string without escapes (all numpy ever writes here) and
 * without control bytes: a NUL would end the C string early ('<f4\0'). */
static int parse_str(cursor *c, char *buf, size_t cap) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || (unsigned char)*c->p < 0x20 || n + 1 >= cap) return 0;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    buf[n] = '\0';
    return 1;
}

/* A non-negative decimal int64; Python 2 numpy wrote longs as "3L". */
static int parse_dim(cursor *c, int64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        int d = *c->p++ - '0';
        if (x > (INT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    if (c->p < c->end && *c->p == 'L') c->p++;
    *v = x;
    return 1;
}

typedef struct {
    char descr[32];
    int fortran_order;
    int ndim;
    int64_t shape[NPY_MAX_DIMS];
} npy_header;

/* A Python tuple of ints: "()", "(3,)", "(2, 3)", "(2, 3,)"; "(3)" is an int. */
static int parse_shape(cursor *c, npy_header *h, const char **why) {
    *why = "malformed shape tuple";
    h->ndim = 0;
    if (!eat(c, '(')) return 0;
    if (eat(c, ')')) return 1;
    for (;;) {
        if (h->ndim == NPY_MAX_DIMS) {
            *why = "shape has more than 8 dimensions";
            return 0;
        }
        if (!parse_dim(c, &h->shape[h->ndim])) {
            *why = "shape entry is not a non-negative int64";
            return 0;
        }
        h->ndim++;
        if (eat(c, ')')) return h->ndim > 1;
        if (!eat(c, ',')) return 0;
        if (eat(c, ')')) return 1;
    }
}

/* Parses the dict; returns OK, BAD_FILE_FORMAT or (structured descr)
 * UNSUPPORTED_DTYPE, with *why set on error. */
static vcattn_status parse_header(const char *text, size_t len, npy_header *h, const char **why) {
    cursor c = {text, text + len};
    int have_descr = 0, have_order = 0, have_shape = 0;
    memset(h, 0, sizeof *h);
    if (!eat(&c, '{')) {
        *why = "header is not a dict";
        return VCATTN_ERR_BAD_FILE_FORMAT;
    }
    while (!eat(&c, '}')) {
        char key[32];
        if (!parse_str(&c, key, sizeof key) || !eat(&c, ':')) {
            *why = "header dict: expected 'key':";
            return VCATTN_ERR_BAD_FILE_FORMAT;
        }
        if (strcmp(key, "descr") == 0 && !have_descr) {
            have_descr = 1;
            if (peek(&c, '[')) {
                *why = "structured dtypes are not supported";
                return VCATTN_ERR_UNSUPPORTED_DTYPE;
            }
            if (!parse_str(&c, h->descr, sizeof h->descr)) {
                *why = "header dict: bad 'descr' value";
                return VCATTN_ERR_BAD_FILE_FORMAT;
            }
        } else if (strcmp(key, "fortran_order") == 0 && !have_order) {
            have_order = 1;
            if (eat_word(&c, "True")) {
                h->fortran_order = 1;
            } else if (!eat_word(&c, "False")) {
                *why = "header dict: 'fortran_order' is not True or False";
                return VCATTN_ERR_BAD_FILE_FORMAT;
            }
        } else if (strcmp(key, "shape") == 0 && !have_shape) {
            have_shape = 1;
            if (!parse_shape(&c, h, why)) return VCATTN_ERR_BAD_FILE_FORMAT;
        } else {
            *why = "header dict: unknown or repeated key";
            return VCATTN_ERR_BAD_FILE_FORMAT;
        }
        if (!eat(&c, ',') && !peek(&c, '}')) {
            *why = "header dict: expected ',' or '}'";
            return VCATTN_ERR_BAD_FILE_FORMAT;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) {
        *why = "junk after the header dict";
        return VCATTN_ERR_BAD_FILE_FORMAT;
    }
    if (!have_descr || !have_order || !have_shape) {
        *why = "header dict lacks 'descr', 'fortran_order' or 'shape'";
        return VCATTN_ERR_BAD_FILE_FORMAT;
    }
    return VCATTN_OK;
}

/* ------------------------------------------------------------------- read */

/* fread of exactly n bytes: OK, IO on a read error, BAD_FILE_FORMAT on EOF. */
static vcattn_status read_exact(FILE *f, void *buf, size_t n) {
    if (fread(buf, 1, n, f) == n) return VCATTN_OK;
    return ferror(f) ? VCATTN_ERR_IO : VCATTN_ERR_BAD_FILE_FORMAT;
}

static vcattn_status npy_read_file(FILE *f, const char *path, int bf16_from_u16,
                                   npy_array *out, char *err, size_t errlen) {
    unsigned char pre[12];
    vcattn_status st = read_exact(f, pre, 10);
    if (st == VCATTN_ERR_IO) return npy_fail(err, errlen, st, path, "read error: %s", strerror(errno));
    if (st || memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "not a .npy file (bad magic or too short)");
    int major = pre[6], minor = pre[7];
    if (major < 1 || major > 3 || minor != 0)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "unsupported .npy format version %d.%d", major, minor);
    uint32_t hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
    if (major >= 2) {
        st = read_exact(f, pre + 10, 2);
        if (st == VCATTN_ERR_IO)
            return npy_fail(err, errlen, st, path, "read error: %s", strerror(errno));
        if (st) return npy_fail(err, errlen, st, path, "truncated header");
        hlen |= (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
    }
    if (hlen > NPY_MAX_HEADER)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "header length %u exceeds %d", (unsigned)hlen, NPY_MAX_HEADER);

    char *text = malloc(hlen ? hlen : 1);
    if (!text) return npy_fail(err, errlen, VCATTN_ERR_OUT_OF_MEMORY, path, "out of memory");
    st = read_exact(f, text, hlen);
    npy_header h;
    const char *why = "truncated header";
    if (st == VCATTN_OK) st = parse_header(text, hlen, &h, &why);
    free(text);
    if (st == VCATTN_ERR_IO) return npy_fail(err, errlen, st, path, "read error: %s", strerror(errno));
    if (st) return npy_fail(err, errlen, st, path, "%s", why);

    vcattn_dtype dtype;
    int wide = 0;  /* '<f8': read as doubles, handed out as float32 */
    if (strcmp(h.descr, "<f4") == 0) {
        dtype = VCATTN_DTYPE_F32;
    } else if (strcmp(h.descr, "<f8") == 0) {
        dtype = VCATTN_DTYPE_F32;
        wide = 1;
    } else if (strcmp(h.descr, "<f2") == 0) {
        dtype = VCATTN_DTYPE_F16;
    } else if (strcmp(h.descr, "<u2") == 0) {
        if (!bf16_from_u16)
            return npy_fail(err, errlen, VCATTN_ERR_UNSUPPORTED_DTYPE, path,
                            "dtype '<u2': pass the bf16 flag to read it as bfloat16 bits");
        dtype = VCATTN_DTYPE_BF16;
    } else {
        return npy_fail(err, errlen, VCATTN_ERR_UNSUPPORTED_DTYPE, path,
                        "dtype '%s' is not supported (want '<f4', '<f8', '<f2' or bf16 as '<u2')",
                        h.descr);
    }
    if (h.fortran_order)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "fortran_order arrays are not supported; save a C-order array");
    if (h.ndim < 1)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "0-d (scalar) arrays are not supported");

    size_t esize = wide ? sizeof(double) : npy_elem_size(dtype);
    int64_t numel = 1;
    for (int i = 0; i < h.ndim; i++) {
        if (h.shape[i] != 0 && numel > INT64_MAX / (int64_t)esize / h.shape[i])
            return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                            "shape overflows the addressable size");
        numel *= h.shape[i];
    }
    int64_t nbytes = numel * (int64_t)esize;
    if ((uint64_t)nbytes > SIZE_MAX)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "shape overflows the addressable size");

    /* Compare with the file size before allocating: a hostile shape must not
     * make us allocate what the file does not hold. */
    off_t pos = ftello(f), size = -1;
    if (pos >= 0 && fseeko(f, 0, SEEK_END) == 0) size = ftello(f);
    if (size < 0 || fseeko(f, pos, SEEK_SET) != 0)
        return npy_fail(err, errlen, VCATTN_ERR_IO, path, "cannot seek: %s", strerror(errno));
    if ((int64_t)(size - pos) != nbytes)
        return npy_fail(err, errlen, VCATTN_ERR_BAD_FILE_FORMAT, path,
                        "data is %lld bytes but the shape needs %lld (%s)",
                        (long long)(size - pos), (long long)nbytes,
                        size - pos < nbytes ? "truncated" : "trailing bytes");

    void *data = malloc(nbytes ? (size_t)nbytes : 1);
    if (!data) return npy_fail(err, errlen, VCATTN_ERR_OUT_OF_MEMORY, path, "out of memory");
    st = read_exact(f, data, (size_t)nbytes);
    if (st) {
        free(data);
        return npy_fail(err, errlen, st, path, "data could not be read completely");
    }
    if (wide && (st = narrow_doubles(&data, numel)))
        return npy_fail(err, errlen, st, path, st == VCATTN_ERR_OUT_OF_MEMORY ? "out of memory"
                        : "float64 data holds a finite value beyond the float32 range");
    out->dtype = dtype;
    out->from_f64 = wide;
    out->ndim = h.ndim;
    memcpy(out->shape, h.shape, sizeof h.shape);
    out->data = data;
    return VCATTN_OK;
}

vcattn_status npy_read(const char *path, int bf16_from_u16, npy_array *out, char *err,
                       size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!out) return VCATTN_ERR_NULL_POINTER;
    memset(out, 0, sizeof *out);
    if (!path) return VCATTN_ERR_NULL_POINTER;
    FILE *f = fopen(path, "rb");
    if (!f) return npy_fail(err, errlen, VCATTN_ERR_IO, path, "cannot open: %s", strerror(errno));
    vcattn_status st = npy_read_file(f, path, bf16_from_u16, out, err, errlen);
    fclose(f);
    return st;
}

/* ------------------------------------------------------------------ write */

vcattn_status npy_write(const char *path, const npy_array *arr, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!path || !arr) return VCATTN_ERR_NULL_POINTER;
    const char *descr = arr->dtype == VCATTN_DTYPE_F32  ? "<f4"
                        : arr->dtype == VCATTN_DTYPE_F16 ? "<f2"
                        : arr->dtype == VCATTN_DTYPE_BF16 ? "<u2"
                                                          : NULL;
    if (!descr)
        return npy_fail(err, errlen, VCATTN_ERR_UNSUPPORTED_DTYPE, path, "unknown dtype %d",
                        (int)arr->dtype);
    if (arr->ndim < 1 || arr->ndim > NPY_MAX_DIMS)
        return npy_fail(err, errlen, VCATTN_ERR_INVALID_ARGUMENT, path,
                        "ndim %d is outside 1..8", arr->ndim);
    size_t esize = npy_elem_size(arr->dtype);
    int64_t numel = 1;
    for (int i = 0; i < arr->ndim; i++) {
        int64_t d = arr->shape[i];
        if (d < 0 || (d != 0 && numel > INT64_MAX / (int64_t)esize / d))
            return npy_fail(err, errlen, VCATTN_ERR_INVALID_ARGUMENT, path,
                            "bad shape entry %lld", (long long)d);
        numel *= d;
    }
    if (numel > 0 && !arr->data)
        return npy_fail(err, errlen, VCATTN_ERR_NULL_POINTER, path, "data is NULL");

    /* Byte-for-byte what numpy writes: (3,) for 1-D, (2, 3) otherwise, and
     * the whole preamble padded with spaces to a multiple of 64 bytes. */
    char header[512];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int i = 0; i < arr->ndim; i++)
        n += snprintf(header + n, sizeof header - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)arr->shape[i]);
    n += snprintf(header + n, sizeof header - (size_t)n, "%s), }", arr->ndim == 1 ? "," : "");
    while ((10 + n + 1) % 64 != 0) header[n++] = ' ';
    header[n++] = '\n';
    unsigned char pre[10];
    memcpy(pre, NPY_MAGIC, NPY_MAGIC_LEN);
    pre[6] = 1;
    pre[7] = 0;
    pre[8] = (unsigned char)(n & 0xff);
    pre[9] = (unsigned char)(n >> 8);

    /* A regular file (or nothing) at path: write a temporary file beside it
     * and rename it over path once complete, so a failed write leaves path as
     * it was. Anything else (a device, a pipe) is written in place and never
     * removed. */
    struct stat st;
    const int in_place = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
    char *tmp = NULL;
    FILE *f = NULL;
    if (in_place) {
        f = fopen(path, "wb");
    } else {
        const size_t cap = strlen(path) + 32;
        if (!(tmp = malloc(cap))) return npy_fail(err, errlen, VCATTN_ERR_OUT_OF_MEMORY, path, "out of memory");
        for (int attempt = 0; attempt < 100 && !f; attempt++) {
            snprintf(tmp, cap, "%s.tmp%ld-%d", path, (long)getpid(), attempt);
            int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);  /* the umask applies, as to fopen's */
            if (fd < 0 && errno == EEXIST) continue;
            if (fd < 0) break;
            if (!(f = fdopen(fd, "wb"))) {
                int saved = errno;
                close(fd);
                unlink(tmp);
                errno = saved;
                break;
            }
        }
    }
    if (!f) {
        int saved = errno;
        free(tmp);
        return npy_fail(err, errlen, VCATTN_ERR_IO, path, "cannot create: %s", strerror(saved));
    }
    size_t nbytes = (size_t)numel * esize;
    int ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre &&
             fwrite(header, 1, (size_t)n, f) == (size_t)n &&
             (nbytes == 0 || fwrite(arr->data, 1, nbytes, f) == nbytes);
    int saved = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && tmp && rename(tmp, path) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok && tmp) unlink(tmp);
    free(tmp);
    if (!ok) return npy_fail(err, errlen, VCATTN_ERR_IO, path, "write failed: %s", strerror(saved));
    return VCATTN_OK;
}

void npy_free(npy_array *arr) {
    if (!arr) return;
    free(arr->data);
    memset(arr, 0, sizeof *arr);
}

int64_t npy_numel(const npy_array *arr) {
    if (!arr || arr->ndim < 1 || arr->ndim > NPY_MAX_DIMS) return 0;
    int64_t n = 1;
    for (int i = 0; i < arr->ndim; i++) n *= arr->shape[i];
    return n;
}
