/* tools/npy: bit-exact round trips, the header numpy would write, versions
 * 2.0/3.0 on read, and every malformed input with its exact status, *out
 * zeroed and the path named in the message. */
#define _POSIX_C_SOURCE 200809L  /* mkdtemp */

#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npy.h"
#include "testlib.h"

static char dir[64];
static int nfiles;

/* A fresh file name under the temp dir. */
static const char *tmp_path(char *buf, size_t cap) {
    snprintf(buf, cap, "%s/f%03d.npy", dir, nfiles++);
    return buf;
}

static void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

/* A file of format version major.minor with the given header text (padded
 * like numpy does) and `data_bytes` bytes of data. */
static size_t craft(unsigned char *buf, int major, int minor, const char *header,
                    size_t data_bytes) {
    size_t pre = major == 1 ? 10 : 12, hl = strlen(header);
    size_t hlen = hl + 1;
    while ((pre + hlen) % 64) hlen++;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = (unsigned char)minor;
    for (size_t i = 0; i < pre - 8; i++) buf[8 + i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + pre, header, hl);
    memset(buf + pre + hl, ' ', hlen - hl - 1);
    buf[pre + hlen - 1] = '\n';
    for (size_t i = 0; i < data_bytes; i++) buf[pre + hlen + i] = (unsigned char)(i * 37 + 1);
    return pre + hlen + data_bytes;
}

static int is_zeroed(const npy_array *a) {
    npy_array z;
    memset(&z, 0, sizeof z);
    return memcmp(a, &z, sizeof z) == 0;
}

/* Reads path expecting `want`; checks the zeroed output and the message. */
static void expect_fail(const char *path, int bf16, vcattn_status want, const char *what) {
    npy_array a;
    char err[512];
    memset(&a, 0xab, sizeof a);
    vcattn_status st = npy_read(path, bf16, &a, err, sizeof err);
    CHECK(st == want, "%s: status %d, want %d (%s)", what, (int)st, (int)want, err);
    CHECK(is_zeroed(&a), "%s: output not zeroed", what);
    CHECK(strstr(err, path) != NULL && strlen(err) > strlen(path) + 2,
          "%s: message '%s' does not name the file", what, err);
    if (st == VCATTN_OK) npy_free(&a);
}

static void expect_header_fail(int major, const char *header, size_t data_bytes,
                               vcattn_status want) {
    static unsigned char buf[1 << 16];
    char path[128];
    tmp_path(path, sizeof path);
    write_bytes(path, buf, craft(buf, major, 0, header, data_bytes));
    expect_fail(path, 1, want, header);
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static void test_round_trips(void) {
    const vcattn_dtype dtypes[3] = {VCATTN_DTYPE_F32, VCATTN_DTYPE_F16, VCATTN_DTYPE_BF16};
    const int64_t shapes[5][5] = {{7}, {3, 5}, {2, 3, 4}, {2, 1, 3, 2}, {1, 2, 3, 2, 2}};
    for (int t = 0; t < 3; t++) {
        for (int nd = 1; nd <= 5; nd++) {
            npy_array a = {.dtype = dtypes[t], .ndim = nd};
            memcpy(a.shape, shapes[nd - 1], sizeof(int64_t) * (size_t)nd);
            size_t esize = dtypes[t] == VCATTN_DTYPE_F32 ? 4 : 2;
            size_t nbytes = (size_t)npy_numel(&a) * esize;
            unsigned char *data = malloc(nbytes);
            /* random bit patterns: NaN payloads, -0, subnormals all included */
            for (size_t i = 0; i < nbytes; i++) data[i] = (unsigned char)next_u32();
            a.data = data;
            char path[128], err[512];
            tmp_path(path, sizeof path);
            CHECK(npy_write(path, &a, err, sizeof err) == VCATTN_OK, "write: %s", err);
            npy_array b;
            vcattn_status st = npy_read(path, 1, &b, err, sizeof err);
            CHECK(st == VCATTN_OK, "read back %s: %s", vcattn_dtype_name(dtypes[t]), err);
            if (st == VCATTN_OK) {
                CHECK(b.dtype == a.dtype && b.ndim == a.ndim, "dtype/ndim differ");
                CHECK(memcmp(b.shape, a.shape, sizeof a.shape) == 0, "shape differs");
                CHECK(memcmp(b.data, a.data, nbytes) == 0, "data not bit-exact");
            }
            npy_free(&b);
            CHECK(is_zeroed(&b), "npy_free did not zero");
            if (dtypes[t] == VCATTN_DTYPE_BF16) {
                expect_fail(path, 0, VCATTN_ERR_UNSUPPORTED_DTYPE, "bf16 without flag");
                npy_array c;
                npy_read(path, 0, &c, err, sizeof err);
                CHECK(strstr(err, "bf16") != NULL, "message should mention bf16: %s", err);
            }
            free(data);
        }
    }
    npy_free(NULL);
}

/* The exact bytes numpy.save writes for float32 (2, 3) and float16 (4,). */
static void test_header_bytes(void) {
    float x[6] = {1, 2, 3, 4, 5, 6};
    npy_array a = {.dtype = VCATTN_DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = x};
    char path[128];
    tmp_path(path, sizeof path);
    CHECK(npy_write(path, &a, NULL, 0) == VCATTN_OK, "write f32");
    unsigned char buf[256];
    FILE *f = fopen(path, "rb");
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(n == 128 + 24, "file size %zu", n);
    CHECK(memcmp(buf, "\x93NUMPY\x01\x00\x76\x00", 10) == 0, "preamble");
    CHECK(memcmp(buf + 10, want, strlen(want)) == 0, "header text");
    CHECK(buf[127] == '\n' && buf[126] == ' ', "padding");
    CHECK(memcmp(buf + 128, x, sizeof x) == 0, "data");

    uint16_t h[4] = {0x3c00, 0x4000, 0x7e00, 0x8000};
    npy_array b = {.dtype = VCATTN_DTYPE_F16, .ndim = 1, .shape = {4}, .data = h};
    tmp_path(path, sizeof path);
    CHECK(npy_write(path, &b, NULL, 0) == VCATTN_OK, "write f16");
    f = fopen(path, "rb");
    n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    want = "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }";
    CHECK(n == 128 + 8 && memcmp(buf + 10, want, strlen(want)) == 0, "1-D header");

    npy_array bad = {.dtype = VCATTN_DTYPE_F32, .ndim = 0, .data = x};
    CHECK(npy_write(path, &bad, NULL, 0) == VCATTN_ERR_INVALID_ARGUMENT, "ndim 0");
    bad.ndim = 2;
    bad.shape[0] = -1;
    bad.shape[1] = 2;
    CHECK(npy_write(path, &bad, NULL, 0) == VCATTN_ERR_INVALID_ARGUMENT, "negative dim");
    char dpath[128];
    snprintf(dpath, sizeof dpath, "%s/no/such/dir.npy", dir);
    CHECK(npy_write(dpath, &a, NULL, 0) == VCATTN_ERR_IO, "write into missing dir");
}

static void test_versions(void) {
    static unsigned char buf[4096];
    char path[128], err[512];
    for (int major = 1; major <= 3; major++) {
        tmp_path(path, sizeof path);
        size_t n = craft(buf, major, 0,
                         "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 24);
        write_bytes(path, buf, n);
        npy_array a;
        vcattn_status st = npy_read(path, 0, &a, err, sizeof err);
        CHECK(st == VCATTN_OK, "version %d.0: %s", major, err);
        CHECK(a.ndim == 2 && a.shape[0] == 3 && a.shape[1] == 2 && a.dtype == VCATTN_DTYPE_F32,
              "version %d.0 shape", major);
        CHECK(st == VCATTN_OK && memcmp(a.data, buf + n - 24, 24) == 0, "version %d.0 data", major);
        npy_free(&a);
    }
    /* Liberal but valid dict spellings numpy accepts. */
    const char *ok[] = {
        "{\"shape\": (2, 12), \"fortran_order\": False, \"descr\": \"<f2\"}",
        "{'descr':'<f2','fortran_order':False,'shape':(24,)}",
        "{ 'descr' : '<f2' , 'fortran_order' : False , 'shape' : ( 2 , 3 , 4 , ) , }",
        "{'descr': '<f2', 'fortran_order': False, 'shape': (2L, 12L), }",
    };
    for (int i = 0; i < 4; i++) {
        tmp_path(path, sizeof path);
        write_bytes(path, buf, craft(buf, 1, 0, ok[i], 48));
        npy_array a;
        CHECK(npy_read(path, 0, &a, err, sizeof err) == VCATTN_OK, "%s: %s", ok[i], err);
        CHECK(npy_numel(&a) == 24, "%s: numel %lld", ok[i], (long long)npy_numel(&a));
        npy_free(&a);
    }
    /* Empty arrays are fine. */
    tmp_path(path, sizeof path);
    write_bytes(path, buf, craft(buf, 1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5), }", 0));
    npy_array a;
    CHECK(npy_read(path, 0, &a, err, sizeof err) == VCATTN_OK && npy_numel(&a) == 0 && a.data,
          "empty array: %s", err);
    npy_free(&a);
}

static void test_malformed(void) {
    static unsigned char buf[4096];
    char path[128];
    const vcattn_status BAD = VCATTN_ERR_BAD_FILE_FORMAT, DT = VCATTN_ERR_UNSUPPORTED_DTYPE;
    const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }";

    snprintf(path, sizeof path, "%s/does_not_exist.npy", dir);
    expect_fail(path, 0, VCATTN_ERR_IO, "nonexistent");
    expect_fail(dir, 0, VCATTN_ERR_IO, "directory");

    tmp_path(path, sizeof path);
    write_bytes(path, "", 0);
    expect_fail(path, 0, BAD, "empty file");

    size_t n = craft(buf, 1, 0, good, 24);
    buf[1] = 'n';
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n);
    expect_fail(path, 0, BAD, "bad magic");

    n = craft(buf, 1, 0, good, 24);
    buf[6] = 4;
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n);
    expect_fail(path, 0, BAD, "version 4.0");
    buf[6] = 1;
    buf[7] = 1;
    write_bytes(path, buf, n);
    expect_fail(path, 0, BAD, "version 1.1");

    /* Header length beyond the file, and beyond any sane bound. */
    n = craft(buf, 1, 0, good, 0);
    buf[8] = 0xff;
    buf[9] = 0x7f;
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n);
    expect_fail(path, 0, BAD, "header length past EOF");
    n = craft(buf, 2, 0, good, 24);
    buf[11] = 0xff;
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n);
    expect_fail(path, 0, BAD, "4 GiB header length");
    tmp_path(path, sizeof path);
    write_bytes(path, buf, 11);
    expect_fail(path, 0, BAD, "v2 preamble cut");

    /* Truncated at every length: never OK, never a crash. */
    n = craft(buf, 1, 0, good, 24);
    for (size_t len = 0; len < n; len++) {
        tmp_path(path, sizeof path);
        write_bytes(path, buf, len);
        npy_array a;
        memset(&a, 0xab, sizeof a);
        vcattn_status st = npy_read(path, 0, &a, NULL, 0);
        CHECK(st == BAD && is_zeroed(&a), "cut at %zu: status %d", len, (int)st);
        unlink(path);
    }
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n + 1);  /* one byte past the data */
    expect_fail(path, 0, BAD, "trailing byte");

    /* Unparsable dicts. */
    const char *bad_headers[] = {
        "",
        "   ",
        "'descr': '<f4', 'fortran_order': False, 'shape': (3, 2)",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), ",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), } x",
        "{'descr': '<f4', 'fortran_order': False}",
        "{'descr': '<f4', 'shape': (6,)}",
        "{'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': false, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}",
        "{'descr': <f4, 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4, 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (6,)}",
        "{descr: '<f4', 'fortran_order': False, 'shape': (6,)}",
        "{'descr' '<f4', 'fortran_order': False, 'shape': (6,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (6)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': 6}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': [3, 2]}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3,, 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, -2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3.0, 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 1)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': ()}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 6)}",
        "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 16)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775807, 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 3)}",  /* data too short */
        "{'descr': '<f4', 'fortran_order': False, 'shape': (5,)}",    /* data too long */
        "{'descr': '" "<f4xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', "
        "'fortran_order': False, 'shape': (6,)}",
    };
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++)
        expect_header_fail(1, bad_headers[i], 24, BAD);
    expect_header_fail(3, bad_headers[3], 24, BAD);

    /* Well-formed files of other dtypes. */
    const char *other[] = {">f8", ">f4", ">f2", "|u1", "<i4", "<u2", "=f4", "<c8", "O", ""};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        char h[128];
        snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (3,), }", other[i]);
        tmp_path(path, sizeof path);
        write_bytes(path, buf, craft(buf, 1, 0, h, 24));
        expect_fail(path, 0, DT, other[i]);
    }
    expect_header_fail(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}", 24, DT);

    /* A NUL (or any control byte) inside a string: numpy refuses it; read as
     * a C string, '<f4\0' was taken for '<f4'. */
    const char *ctl[] = {"<f4#", "#<f4", "<f#4"};
    for (int z = 0; z < 2; z++)
        for (size_t i = 0; i < sizeof ctl / sizeof ctl[0]; i++) {
            char h[128];
            snprintf(h, sizeof h, "{'descr': '%s', 'fortran_order': False, 'shape': (3,), }", ctl[i]);
            size_t len = craft(buf, 1, 0, h, 12);
            *(unsigned char *)memchr(buf, '#', len) = z ? 0x01 : 0x00;
            tmp_path(path, sizeof path);
            write_bytes(path, buf, len);
            expect_fail(path, 0, BAD, z ? "descr with a control byte" : "descr with a NUL");
        }
}

/* Random corruptions of a valid file: any status is fine, but OK must come
 * with a consistent array and failures with a zeroed one (run under ASan). */
static void test_mutations(void) {
    static unsigned char base[256], buf[256];
    size_t n = craft(base, 1, 0, "{'descr': '<f2', 'fortran_order': False, 'shape': (4, 2), }", 16);
    char path[128];
    tmp_path(path, sizeof path);
    int inconsistent = 0;
    for (int iter = 0; iter < 3000; iter++) {
        memcpy(buf, base, n);
        int flips = 1 + (int)(next_u32() % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = next_u32() % n;
            buf[at] = (next_u32() & 1) ? (unsigned char)next_u32() : (unsigned char)"0'(),: {}9L"[next_u32() % 11];
        }
        write_bytes(path, buf, n - (next_u32() % 4 == 0 ? next_u32() % n : 0));
        npy_array a;
        memset(&a, 0xab, sizeof a);
        vcattn_status st = npy_read(path, 1, &a, NULL, 0);
        if (st == VCATTN_OK)
            inconsistent += !(a.ndim >= 1 && a.ndim <= 8 && a.data && npy_numel(&a) >= 0);
        else
            inconsistent += !is_zeroed(&a);
        npy_free(&a);
    }
    CHECK(inconsistent == 0, "%d inconsistent results under mutation", inconsistent);
}

/* Files in the temp dir whose names tmp_path did not give out. */
static int stray_files(void) {
    DIR *d = opendir(dir);
    int stray = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int i;
        char tail;
        if (e->d_name[0] == '.' || (sscanf(e->d_name, "f%3d.np%c", &i, &tail) == 2 && tail == 'y')) continue;
        fprintf(stderr, "stray file %s/%s\n", dir, e->d_name);
        stray++;
    }
    if (d) closedir(d);
    return stray;
}

/* A write that fails half way (the file-size limit here) leaves the file
 * that was at the path as it was, and no temporary file behind. */
static void test_failed_write(void) {
    char path[128];
    tmp_path(path, sizeof path);
    write_bytes(path, "precious", 8);
    static float big[8192];
    npy_array a = {.dtype = VCATTN_DTYPE_F32, .ndim = 1, .shape = {8192}, .data = big};
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit lim = {4096, 4096};
        signal(SIGXFSZ, SIG_IGN);  /* the write then fails with EFBIG */
        char err[256];
        _exit(setrlimit(RLIMIT_FSIZE, &lim) == 0 && npy_write(path, &a, err, sizeof err) == VCATTN_ERR_IO &&
                      strstr(err, path) ? 0 : 1);
    }
    int status = -1;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "a write past the file-size limit: VCATTN_ERR_IO naming the path (status %d)", status);
    char back[16] = {0};
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(back, 1, sizeof back, f) : 0;
    if (f) fclose(f);
    CHECK(got == 8 && memcmp(back, "precious", 8) == 0, "the file at the path survives a failed write (%zu bytes)",
          got);
    CHECK(stray_files() == 0, "no temporary file left behind");

    /* A successful write replaces the file, with the mode a new file gets. */
    mode_t old_mask = umask(022);
    CHECK(npy_write(path, &a, NULL, 0) == VCATTN_OK, "write over an existing file");
    umask(old_mask);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0644 && st.st_size == 128 + 8192 * 4,
          "replaced file: mode %o, %lld bytes", (unsigned)(st.st_mode & 0777), (long long)st.st_size);
    CHECK(stray_files() == 0, "no temporary file left after a write");

    /* A device is written in place and never removed, even on failure. */
    if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
        CHECK(npy_write("/dev/full", &a, NULL, 0) == VCATTN_ERR_IO, "writing /dev/full fails");
        CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode), "/dev/full is still there");
    } else {
        printf("test_npy: /dev/full absent, its check not run\n");
    }
}

/* float64 files (numpy's default dtype) are read as float32, rounded to
 * nearest; a finite value past the float32 range is refused, not made Inf. */
static void test_float64(void) {
    unsigned char buf[512];
    const char *h = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
    const double values[6] = {1.0, -2.5, 0.1, 1e-45, 3.0e38, -0.0};
    size_t n = craft(buf, 1, 0, h, 0);
    memcpy(buf + n, values, sizeof values);
    char path[128];
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n + sizeof values);
    npy_array a;
    char err[256];
    vcattn_status st = npy_read(path, 0, &a, err, sizeof err);
    CHECK(st == VCATTN_OK && a.dtype == VCATTN_DTYPE_F32 && a.from_f64 && a.ndim == 2 && a.shape[1] == 3,
          "float64 file: status %d (%s)", st, err);
    if (st == VCATTN_OK) {
        int same = 1;
        for (int i = 0; i < 6; i++) same &= ((const float *)a.data)[i] == (float)values[i];
        CHECK(same, "float64 values are the nearest floats");
    }
    npy_free(&a);
    const double huge[6] = {1.0, 2.0, 1e300, 4.0, 5.0, 6.0};
    memcpy(buf + n, huge, sizeof huge);
    tmp_path(path, sizeof path);
    write_bytes(path, buf, n + sizeof huge);
    st = npy_read(path, 0, &a, err, sizeof err);
    CHECK(st == VCATTN_ERR_INVALID_ARGUMENT && strstr(err, "float32 range") && is_zeroed(&a),
          "float64 beyond the float32 range: status %d (%s)", st, err);
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    snprintf(dir, sizeof dir, "/tmp/vcattn_npy_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    TL_RUN(test_round_trips());
    TL_RUN(test_header_bytes());
    TL_RUN(test_versions());
    TL_RUN(test_malformed());
    TL_RUN(test_mutations());
    TL_RUN(test_failed_write());
    TL_RUN(test_float64());
    char path[128];
    for (int i = 0; i < nfiles; i++) {
        snprintf(path, sizeof path, "%s/f%03d.npy", dir, i);
        unlink(path);
    }
    rmdir(dir);
    return tl_finish("test_npy");
}
