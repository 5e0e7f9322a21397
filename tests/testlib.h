/* A minimal test harness: CHECK records a failure and goes on; the summary
 * line "N passed, N failed" is what CI reads. NaN never passes a CHECK_CLOSE. */
#ifndef VCATTN_TESTLIB_H
#define VCATTN_TESTLIB_H

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vcattn.h"

static int tl_passed, tl_failed;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            tl_passed++;                                                  \
        } else {                                                          \
            tl_failed++;                                                  \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

/* |a - b| <= tol, false for NaN in either. */
#define CHECK_CLOSE(a, b, tol, what)                                      \
    do {                                                                  \
        double tl_a = (double)(a), tl_b = (double)(b);                    \
        CHECK(!isnan(tl_a) && !isnan(tl_b) && fabs(tl_a - tl_b) <= (tol), \
              "%s: %.9g vs %.9g (tol %.3g)", what, tl_a, tl_b, (double)(tol)); \
    } while (0)

/* Deterministic test data: xorshift64 uniforms in [0, 1) and Box-Muller normals. */
static uint64_t tl_rng = 88172645463325252ULL;
static inline double urand(void) {
    tl_rng ^= tl_rng << 13; tl_rng ^= tl_rng >> 7; tl_rng ^= tl_rng << 17;
    return (double)(tl_rng >> 11) / 9007199254740992.0;
}
static inline float nrand(void) {
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* -k NAME on a test's command line (or VCATTN_TEST_ONLY=NAME in the
 * environment): only the tests, and the named cases inside them, whose
 * name contains NAME run (test_attention -k expcast, test_cuda -k "N=17"). */
static const char *tl_only;
static inline void tl_args(int argc, char **argv) {
    tl_only = getenv("VCATTN_TEST_ONLY");
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "-k") == 0) tl_only = argv[++i];
}
static inline int tl_wanted(const char *name) { return !tl_only || strstr(name, tl_only) != NULL; }

/* Runs one test, named by the text of its call, and says how it went. */
#define TL_RUN(call)                                                              \
    do {                                                                          \
        if (tl_wanted(#call)) {                                                   \
            const int tl_failed_before = tl_failed;                               \
            call;                                                                 \
            printf("%s %s\n", tl_failed == tl_failed_before ? "ok  " : "FAIL", #call); \
        }                                                                         \
    } while (0)

static inline int tl_finish(const char *name) {
    printf("%s: %d passed, %d failed\n", name, tl_passed, tl_failed);
    return tl_failed ? 1 : 0;
}

/* A call on a grouping step: V-Smooth (if on) groups by k-means from a cold
 * start, through a fresh one-step layer, as the method is defined; a call
 * without a layer sorts along the values' principal direction instead. */
static inline vcattn_status grouped_attention(vcattn_context *ctx, const vcattn_config *cfg, const vcattn_tensor *q,
                                              const vcattn_tensor *k, const vcattn_tensor *v,
                                              const vcattn_tensor *out, float *lse, const vcattn_rope *rope) {
    vcattn_layer *layer = NULL;
    vcattn_status st = vcattn_layer_create(&layer, 1);
    if (st == VCATTN_OK) st = vcattn_attention(ctx, cfg, q, k, v, out, lse, rope, layer);
    vcattn_layer_destroy(layer);
    return st;
}

/* The expcast_min_keys boundary: cfg gets vc as shipped, vc with ExpCast at
 * every length, and vsmooth; returns which of the last two vc must equal to
 * the bit at nk keys (the other must differ). */
static inline int expcast_boundary_configs(int64_t nk, vcattn_config cfg[3]) {
    vcattn_config_from_method("vc", &cfg[0]);
    cfg[1] = cfg[0];
    cfg[1].expcast_min_keys = 0;
    vcattn_config_from_method("vsmooth", &cfg[2]);
    cfg[2].vsmooth_probe_rows = cfg[0].vsmooth_probe_rows;  /* vc's V-Smooth: its probe and order choice */
    cfg[2].vsmooth_order_rows = cfg[0].vsmooth_order_rows;
    return nk < cfg[0].expcast_min_keys ? 2 : 1;
}

#endif
