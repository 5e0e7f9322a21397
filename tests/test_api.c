/* The C API's contract: every bad input gets its own status and a message,
 * never a crash, and the output buffer is not written on error. */
#include "testlib.h"
#include "workloads.h"
#include "vcattn.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

#define B 1
#define H 2
#define N 40
#define D 64
#define SENTINEL 0x7fa5a5a5u  /* a NaN pattern no result can produce */

static float q[B * H * N * D], k[B * H * N * D], v[B * H * N * D], out[B * H * N * D];
static float cos_tab[N * D / 2], sin_tab[N * D / 2];
static float head_cos[H * N * D / 2], head_sin[H * N * D / 2];  /* per-head tables, head-major */

static void fill(void) {
    for (int i = 0; i < B * H * N * D; i++) {
        q[i] = (float)((i * 37) % 23) / 23.0f - 0.5f;
        k[i] = (float)((i * 11) % 19) / 19.0f - 0.3f;
        v[i] = (float)((i * 7) % 29) / 29.0f;
    }
    for (int i = 0; i < N * D / 2; i++) { cos_tab[i] = 1.0f; sin_tab[i] = 0.0f; }
    for (int i = 0; i < H * N * D / 2; i++) { head_cos[i] = 1.0f; head_sin[i] = 0.0f; }
}

static void poison(void) {
    for (int i = 0; i < B * H * N * D; i++) memcpy(&out[i], &(uint32_t){SENTINEL}, 4);
}

static int untouched(void) {
    for (int i = 0; i < B * H * N * D; i++) {
        uint32_t u;
        memcpy(&u, &out[i], 4);
        if (u != SENTINEL) return 0;
    }
    return 1;
}

typedef struct {
    vcattn_config cfg;
    vcattn_tensor q, k, v, out;
    vcattn_rope rope;
    const vcattn_rope *rope_ptr;
} call_t;

static call_t good_call(void) {
    call_t c;
    c.cfg = vcattn_config_default();
    c.q = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, B, H, N, D);
    c.k = vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, B, H, N, D);
    c.v = vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, B, H, N, D);
    c.out = vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, B, H, N, D);
    vcattn_rope r = {.style = VCATTN_ROPE_INTERLEAVED, .q_cos = cos_tab, .q_sin = sin_tab, .k_cos = cos_tab,
                     .k_sin = sin_tab};
    c.rope = r;
    c.rope_ptr = NULL;
    return c;
}

static void expect(vcattn_context *ctx, call_t *c, vcattn_status want, const char *what) {
    poison();
    vcattn_status s = vcattn_attention(ctx, &c->cfg, &c->q, &c->k, &c->v, &c->out, NULL, c->rope_ptr, NULL);
    CHECK(s == want, "%s: got '%s', want '%s'", what, vcattn_status_string(s), vcattn_status_string(want));
    CHECK(strlen(vcattn_last_error(ctx)) > 0, "%s: no message", what);
    CHECK(untouched(), "%s: output written on error", what);
}

/* Sizes whose arithmetic overflowed: refused with a message, no write, no
 * crash (these calls once overflowed a heap buffer or wrote over q). */
static void test_size_arithmetic(vcattn_context *ctx) {
    call_t c;
    /* k and v rows broadcast (every stride 0) to 2^56 tokens: 256 bytes of
     * memory, but work buffers of 2^56 rows whose byte counts wrapped */
    c = good_call();
    c.k.tokens = c.v.tokens = (int64_t)1 << 56;
    c.k.stride_batch = c.k.stride_head = c.k.stride_token = 0;
    c.v.stride_batch = c.v.stride_head = c.v.stride_token = 0;
    c.cfg.check_finite = 0;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "k, v broadcast to 2^56 tokens");
    c.cfg.check_finite = 1;  /* the finite scan would walk 2^62 elements */
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "k, v broadcast to 2^56 tokens, checked for NaN");
    /* q broadcast to more tokens than a permutation index holds (int32) */
    c = good_call();
    c.q.tokens = c.out.tokens = (int64_t)1 << 31;
    c.q.stride_token = 0;
    c.out.stride_token = 0;  /* refused for its size before its overlap */
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "2^31 query tokens");
    /* out's second head 2^62 + delta floats away: its byte offset wraps past
     * 2^64 onto q, so the output span looked disjoint and q was overwritten */
    static float q_before[B * H * N * D];
    memcpy(q_before, q, sizeof q);
    c = good_call();
    const int64_t delta = (int64_t)((uintptr_t)q - (uintptr_t)out) / 4;
    c.out.stride_head = ((int64_t)1 << 62) + delta;
    c.cfg.check_finite = 0;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "out stride wrapping the address space onto q");
    CHECK(memcmp(q_before, q, sizeof q) == 0, "a wrapping out stride overwrote q");
    memcpy(q, q_before, sizeof q);
    /* lse's extent from out's sizes: 2^31 heads x 2^31 tokens of float wrap too */
    c = good_call();
    c.q.heads = c.out.heads = (int64_t)1 << 40;
    c.q.stride_head = c.out.stride_head = 0;
    c.cfg.check_finite = 0;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "2^40 query heads");
}

static void test_bad_inputs(vcattn_context *ctx) {
    call_t c;
    c = good_call(); c.q.data = NULL; expect(ctx, &c, VCATTN_ERR_NULL_POINTER, "NULL q data");
    c = good_call(); c.out.data = NULL; expect(ctx, &c, VCATTN_ERR_NULL_POINTER, "NULL out data");

    c = good_call(); c.q.tokens = 0; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "zero tokens");
    c = good_call(); c.k.batch = 0; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "zero batch");
    c = good_call(); c.q.head_dim = c.k.head_dim = c.v.head_dim = c.out.head_dim = 60;
    expect(ctx, &c, VCATTN_ERR_UNSUPPORTED_HEAD_DIM, "head dim 60 (not a multiple of 8)");
    c = good_call(); c.q.head_dim = c.k.head_dim = c.v.head_dim = c.out.head_dim = 264;
    expect(ctx, &c, VCATTN_ERR_UNSUPPORTED_HEAD_DIM, "head dim 264 (over 256)");
    c = good_call(); c.v.head_dim = 32; expect(ctx, &c, VCATTN_ERR_SHAPE_MISMATCH, "v head dim differs");
    c = good_call(); c.v.tokens = N - 1; expect(ctx, &c, VCATTN_ERR_SHAPE_MISMATCH, "k/v token mismatch");
    c = good_call(); c.out.tokens = N - 1; expect(ctx, &c, VCATTN_ERR_SHAPE_MISMATCH, "out token mismatch");
    c = good_call(); c.out.heads = 1; expect(ctx, &c, VCATTN_ERR_SHAPE_MISMATCH, "out heads mismatch");
    c = good_call(); c.q.heads = 3; c.out.heads = 3;
    expect(ctx, &c, VCATTN_ERR_SHAPE_MISMATCH, "Hq not a multiple of Hkv");
    c = good_call(); c.k.batch = 2; expect(ctx, &c, VCATTN_ERR_SHAPE_MISMATCH, "batch mismatch");
    c = good_call(); c.q.dtype = (vcattn_dtype)7; expect(ctx, &c, VCATTN_ERR_UNSUPPORTED_DTYPE, "bad dtype");
    c = good_call(); c.k.stride_token = -D; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "negative stride");
    /* Data pointers must be aligned to their element size (a misaligned
     * float load is undefined behaviour). */
    static unsigned char shifted[sizeof q + 8];  /* the same values one or two bytes off */
    memcpy(shifted + 1, q, sizeof q);
    c = good_call(); c.q.data = shifted + 1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "misaligned q");
    memcpy(shifted + 1, cos_tab, sizeof cos_tab);
    c = good_call(); c.rope.q_cos = (const float *)(shifted + 1); c.rope_ptr = &c.rope;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "misaligned rope table");
    memset(shifted, 0x5a, sizeof shifted);
    c = good_call(); c.out.data = shifted + 2;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_ERR_INVALID_ARGUMENT,
          "misaligned out: %s", vcattn_last_error(ctx));
    c = good_call();
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, (float *)(shifted + 2), NULL, NULL) ==
              VCATTN_ERR_INVALID_ARGUMENT, "misaligned lse: %s", vcattn_last_error(ctx));
    int kept = 1;
    for (size_t i = 0; i < sizeof shifted; i++) kept &= shifted[i] == 0x5a;
    CHECK(kept, "misaligned out and lse: nothing written");
    /* A zero dim with others near INT64_MAX: the helper's strides must not
     * overflow (signed overflow is undefined; run under UBSan), and the view
     * is refused for its zero size. */
    c = good_call(); c.q = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, 0, INT64_MAX / 2, 4);
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "bhnd view with a zero dim");
    c = good_call(); c.q = vcattn_tensor_bnhd(q, VCATTN_DTYPE_F32, 0, INT64_MAX / 2, 3, 4);
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "bnhd view with a zero dim");
    c = good_call(); c.out.stride_token = 1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "overlapping out rows");
    test_size_arithmetic(ctx);
    /* Output views that overlap themselves: heads or batches on top of each other. */
    c = good_call(); c.out.stride_head = 0; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "out stride_head 0");
    c = good_call(); c.out.stride_head = N * D - 1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "out heads overlap");
    c = good_call(); c.out.heads = c.q.heads = c.k.heads = c.v.heads = 1;
    c.out.tokens = c.q.tokens = 2; c.out.stride_token = D; c.out.stride_head = D;  /* one head: its stride is unused */
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "a size-1 axis may have any stride: %s", vcattn_last_error(ctx));
    c = good_call(); c.out = vcattn_tensor_bnhd(out, VCATTN_DTYPE_F32, B, H, N, D);
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "NHD out: %s", vcattn_last_error(ctx));
    c = good_call(); c.out.stride_token = 2 * D; c.out.heads = 1; c.q.heads = 1; c.k.heads = c.v.heads = 1;
    c.out.stride_head = 2 * N * D;  /* every other row: no overlap */
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "padded out rows: %s", vcattn_last_error(ctx));
    c = good_call(); c.cfg.kmeans_clusters = -1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "negative clusters");
    c = good_call(); c.cfg.group_window = 1.5f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "window > 1");
    c = good_call(); c.cfg.sink_guard = -0.1f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "sink_guard < 0");
    c = good_call(); c.cfg.sink_guard = 1.5f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "sink_guard > 1");
    c = good_call(); c.cfg.sink_guard = NAN; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "sink_guard NaN");
    c = good_call(); c.cfg.sm_scale = -1.0f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "negative sm_scale");
    c = good_call(); c.cfg.sm_scale = NAN; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "NaN sm_scale");
    c = good_call(); c.cfg.p_format = (vcattn_p_format)42; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "bad p format");
    /* Every config field has an upper bound (vcattn.h): past it a call once
     * crashed inside OpenMP (100000 threads) or ran for hours (2e9 iterations). */
    c = good_call(); c.cfg.num_threads = 100000; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "100000 threads");
    c = good_call(); c.cfg.num_threads = VCATTN_MAX_THREADS + 1;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "threads past the bound");
    c = good_call(); c.cfg.kmeans_iters = 2000000000; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "2e9 iterations");
    c = good_call(); c.cfg.kmeans_warm_iters = VCATTN_MAX_KMEANS_ITERS + 1;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "warm iterations past the bound");
    c = good_call(); c.cfg.kmeans_clusters = VCATTN_MAX_KMEANS_CLUSTERS + 1;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "clusters past the bound");
    c = good_call(); c.cfg.sm_scale = 1e30f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "sm_scale 1e30");
    c = good_call(); c.cfg.group_refresh = 0; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "group_refresh 0");
    c = good_call(); c.cfg.expcast_beta = 1.0f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "beta 1");
    c = good_call(); c.cfg.expcast_min_keys = -1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "expcast_min_keys -1");
    CHECK(vcattn_config_size() == sizeof(vcattn_config), "vcattn_config_size %zu", vcattn_config_size());
    c = good_call(); c.cfg.vsmooth_probe_rows = -1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "vsmooth_probe_rows -1");
    c = good_call(); c.cfg.vsmooth_probe_rows = VCATTN_MAX_PROBE_ROWS + 1;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "vsmooth_probe_rows past the maximum");
    c = good_call(); c.cfg.vsmooth_order_rows = -1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "vsmooth_order_rows -1");
    c = good_call(); c.cfg.vsmooth_order_rows = VCATTN_MAX_ORDER_ROWS + 1;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "vsmooth_order_rows past the maximum");
    c = good_call(); c.cfg.group_window = -0.5f; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "window < 0");
    c = good_call(); c.cfg.hadamard = 2; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "hadamard 2");
    c = good_call(); c.cfg.vsmooth = -1; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "vsmooth -1");
    c = good_call(); c.cfg.k_smoothing = 7; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "k_smoothing 7");
    c = good_call(); c.cfg.q_smoothing = 2; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "q_smoothing 2");
    c = good_call(); c.cfg.check_finite = 3; expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "check_finite 3");
    c = good_call(); c.cfg.demean_outside_window = 2;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "demean_outside_window 2");
    /* The bounds themselves are accepted. */
    c = good_call(); c.cfg.num_threads = 2; c.cfg.kmeans_iters = VCATTN_MAX_KMEANS_ITERS;
    c.cfg.kmeans_warm_iters = VCATTN_MAX_KMEANS_ITERS; c.cfg.sm_scale = VCATTN_MAX_SM_SCALE;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "config at its bounds: %s", vcattn_last_error(ctx));
    c = good_call(); c.q.head_dim = c.k.head_dim = c.v.head_dim = c.out.head_dim = 24; c.cfg.hadamard = 1;
    expect(ctx, &c, VCATTN_ERR_UNSUPPORTED_CONFIG, "Hadamard with head dim 24");
    c = good_call(); c.q.head_dim = c.k.head_dim = c.v.head_dim = c.out.head_dim = 24;
    vcattn_config_from_method("sage3-4bit", &c.cfg);
    expect(ctx, &c, VCATTN_ERR_UNSUPPORTED_CONFIG, "NVFP4 with head dim 24");
    c = good_call(); c.rope.k_sin = NULL; c.rope_ptr = &c.rope;
    expect(ctx, &c, VCATTN_ERR_NULL_POINTER, "rope table missing");
    c = good_call(); c.rope.style = (vcattn_rope_style)9; c.rope_ptr = &c.rope;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "bad rope style");
    c = good_call(); c.rope.k_stride_head = -1; c.rope_ptr = &c.rope;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "negative rope stride");
    c = good_call(); c.rope.q_stride_head = (int64_t)1 << 62; c.rope_ptr = &c.rope;
    expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "rope table past the address space");

    /* Non-finite inputs: rejected by default (policy in docs/formats.md). */
    float saved = q[5];
    q[5] = NAN;
    c = good_call(); expect(ctx, &c, VCATTN_ERR_NONFINITE_INPUT, "NaN in q");
    q[5] = saved;
    saved = v[B * H * N * D - 1];
    v[B * H * N * D - 1] = INFINITY;
    c = good_call(); expect(ctx, &c, VCATTN_ERR_NONFINITE_INPUT, "Inf in v");
    v[B * H * N * D - 1] = saved;
    cos_tab[3] = NAN;
    c = good_call(); c.rope_ptr = &c.rope; expect(ctx, &c, VCATTN_ERR_NONFINITE_INPUT, "NaN in rope table");
    cos_tab[3] = 1.0f;
    /* per-head tables: the finite check reads the rows the strides reach */
    head_sin[N * D / 2 + 5] = NAN;  /* head 1's row 0 */
    c = good_call(); c.rope.q_cos = c.rope.k_cos = head_cos; c.rope.q_sin = c.rope.k_sin = head_sin;
    c.rope_ptr = &c.rope;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, c.rope_ptr, NULL) == VCATTN_OK,
          "a NaN past the rows a shared table reaches: %s", vcattn_last_error(ctx));
    c.rope.q_stride_head = N * D / 2;
    expect(ctx, &c, VCATTN_ERR_NONFINITE_INPUT, "NaN in head 1's q rope rows");
    c.rope.q_stride_head = 0; c.rope.k_stride_head = N * D / 2;
    expect(ctx, &c, VCATTN_ERR_NONFINITE_INPUT, "NaN in head 1's k rope rows");
    head_sin[N * D / 2 + 5] = 0.0f;

    /* Scores beyond what float32 softmax resolves (|s| > 2^20 in log2 units):
     * refused by the same check (docs/robustness.md). */
    for (int i = 0; i < B * H * N * D; i++) q[i] *= 16384.0f, k[i] *= 16384.0f;
    c = good_call(); expect(ctx, &c, VCATTN_ERR_INVALID_ARGUMENT, "scores of ~1e9");
    CHECK(strstr(vcattn_last_error(ctx), "float32 softmax") != NULL, "huge scores: message names the reason: %s",
          vcattn_last_error(ctx));
    c = good_call(); c.cfg.check_finite = 0;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "unchecked huge scores return");
    for (int i = 0; i < B * H * N * D; i++) q[i] /= 16384.0f, k[i] /= 16384.0f;

    /* With the check off, NaN flows to the output: no crash, status OK. */
    q[5] = NAN;
    c = good_call(); c.cfg.check_finite = 0;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "unchecked NaN call returns");
    q[5] = saved;

    /* NULL arguments. */
    c = good_call();
    CHECK(vcattn_attention(NULL, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_ERR_NULL_POINTER,
          "NULL context");
    CHECK(vcattn_attention(ctx, NULL, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_ERR_NULL_POINTER,
          "NULL config");
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, NULL, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_ERR_NULL_POINTER,
          "NULL k");

    /* And a good call still works after all of that, N = 1 included. */
    c = good_call(); c.rope_ptr = &c.rope;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, c.rope_ptr, NULL) == VCATTN_OK,
          "good call: %s", vcattn_last_error(ctx));
    CHECK(strlen(vcattn_last_error(ctx)) == 0, "message cleared by a good call");
    c = good_call(); c.q.tokens = c.k.tokens = c.v.tokens = c.out.tokens = 1;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK, "N = 1");
    int finite = 1;
    for (int i = 0; i < D; i++) finite &= isfinite(out[i]);
    CHECK(finite, "N = 1 output finite");
}

/* out and lse may not share memory with any input, with each other, or
 * with the RoPE tables: the call would read what it has written. */
static void test_aliasing(vcattn_context *ctx) {
    static float inputs[3][B * H * N * D], lse[B * H * N], snap[3][B * H * N * D], lse_snap[B * H * N];
    memcpy(inputs[0], q, sizeof q); memcpy(inputs[1], k, sizeof k); memcpy(inputs[2], v, sizeof v);
    for (int i = 0; i < B * H * N; i++) lse[i] = -1.0f;
    static const char *const names[3] = {"q", "k", "v"};
    for (int target = 0; target < 3; target++)
        for (int shift = 0; shift < 2; shift++) {
            call_t c = good_call();
            c.q.data = inputs[0]; c.k.data = inputs[1]; c.v.data = inputs[2];
            c.out.data = inputs[target] + shift * (D + 3);  /* the same memory, or a part of it */
            c.out.tokens = c.q.tokens = N - 2;
            memcpy(snap, inputs, sizeof snap);
            vcattn_status s = vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL);
            CHECK(s == VCATTN_ERR_INVALID_ARGUMENT && strstr(vcattn_last_error(ctx), names[target]),
                  "out over %s (shift %d): '%s' (%s)", names[target], shift, vcattn_status_string(s),
                  vcattn_last_error(ctx));
            CHECK(memcmp(snap, inputs, sizeof snap) == 0, "out over %s: nothing written", names[target]);
        }
    call_t c = good_call();
    c.rope_ptr = &c.rope;
    c.out.data = cos_tab;  /* the table is smaller than out: any overlap counts */
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, c.rope_ptr, NULL) ==
              VCATTN_ERR_INVALID_ARGUMENT, "out over a RoPE table: %s", vcattn_last_error(ctx));
    c = good_call();
    poison();
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, out + 7, NULL, NULL) == VCATTN_ERR_INVALID_ARGUMENT,
          "lse inside out: %s", vcattn_last_error(ctx));
    CHECK(untouched(), "lse inside out: nothing written");
    c = good_call();
    memcpy(snap, q, sizeof q);
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, q + 100, NULL, NULL) == VCATTN_ERR_INVALID_ARGUMENT,
          "lse inside q: %s", vcattn_last_error(ctx));
    CHECK(memcmp(snap, q, sizeof q) == 0, "lse inside q: nothing written");
    c = good_call();
    memcpy(lse_snap, lse, sizeof lse);
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, lse, NULL, NULL) == VCATTN_OK,
          "separate lse: %s", vcattn_last_error(ctx));
    /* Inputs may share memory with each other (self-attention on one buffer). */
    c = good_call(); c.k.data = q; c.v.data = q;
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "q, k and v on one buffer: %s", vcattn_last_error(ctx));
}

static void test_objects(void) {
    CHECK(vcattn_version_number() == VCATTN_VERSION_NUMBER, "runtime version matches header");
    CHECK(strlen(vcattn_version_string()) >= 5, "version string");
    for (int s = 0; s < VCATTN_STATUS_COUNT; s++) {
        CHECK(vcattn_status_string((vcattn_status)s) != NULL, "status %d has a string", s);
        for (int t = 0; t < s; t++)
            CHECK(strcmp(vcattn_status_string((vcattn_status)s), vcattn_status_string((vcattn_status)t)) != 0,
                  "status strings %d and %d are distinct", s, t);
    }
    CHECK(strcmp(vcattn_status_string((vcattn_status)999), "unknown status") == 0, "out-of-range status");
    CHECK(vcattn_set_cuda_stream(NULL, NULL) == VCATTN_ERR_NULL_POINTER, "stream on a NULL context");
    vcattn_context *cpu;
    CHECK(vcattn_create(&cpu, VCATTN_BACKEND_CPU) == VCATTN_OK &&
          vcattn_set_cuda_stream(cpu, (void *)0x1) == VCATTN_OK, "a CPU context accepts and ignores a stream");
    vcattn_destroy(cpu);

    vcattn_config c;
    for (const char *const *m = vcattn_method_names(); *m; m++) {
        CHECK(vcattn_config_from_method(*m, &c) == VCATTN_OK, "method %s", *m);
        char name[64];
        snprintf(name, sizeof name, "%s+hadamard", *m);
        CHECK(vcattn_config_from_method(name, &c) == VCATTN_OK && c.hadamard, "method %s", name);
    }
    CHECK(vcattn_config_from_method("vc+hadamard+hadamard", &c) == VCATTN_ERR_UNKNOWN_NAME, "double suffix");
    CHECK(vcattn_config_from_method("vc+qsmooth", &c) == VCATTN_OK && c.q_smoothing && !c.hadamard, "vc+qsmooth");
    vcattn_config lower;
    vcattn_config_from_method("vc+hadamard", &lower);
    CHECK(vcattn_config_from_method("VC+Hadamard", &c) == VCATTN_OK && memcmp(&c, &lower, sizeof c) == 0,
          "method names match whatever their case");
    CHECK(vcattn_config_from_method("sage2+hadamard+qsmooth", &c) == VCATTN_OK && c.q_smoothing && c.hadamard,
          "sage2+hadamard+qsmooth");
    CHECK(vcattn_config_from_method("vc", &c) == VCATTN_OK && !c.q_smoothing, "vc: no Q smoothing by default");
    CHECK(vcattn_config_from_method("vc+qsmooth+hadamard", &c) == VCATTN_ERR_UNKNOWN_NAME, "suffixes in order");
    CHECK(vcattn_config_from_method("vc+probe", &c) == VCATTN_OK && c.vsmooth_probe_rows == VCATTN_PROBE_ROWS &&
          !c.q_smoothing, "vc+probe");
    CHECK(vcattn_config_from_method("vsmooth+hadamard+qsmooth+probe", &c) == VCATTN_OK && c.hadamard &&
          c.q_smoothing && c.vsmooth_probe_rows == VCATTN_PROBE_ROWS, "vsmooth+hadamard+qsmooth+probe");
    CHECK(vcattn_config_from_method("vc", &c) == VCATTN_OK && c.vsmooth_probe_rows == VCATTN_DEFAULT_PROBE_ROWS &&
          c.vsmooth_order_rows == VCATTN_DEFAULT_ORDER_ROWS, "vc: 32 probe rows and the order choice by default");
    vcattn_config vc_default = vcattn_config_default();
    CHECK(!memcmp(&vc_default, &c, sizeof c), "vcattn_config_default() is method vc");
    CHECK(vcattn_config_from_method("sage2", &c) == VCATTN_OK && !c.vsmooth_probe_rows && !c.vsmooth_order_rows,
          "sage2: no probe, no order choice");
    CHECK(vcattn_config_from_method("vsmooth-4bit", &c) == VCATTN_OK && c.vsmooth_probe_rows == VCATTN_PROBE_ROWS &&
          vcattn_config_from_method("vsmooth-4bit+probe", &c) == VCATTN_OK && c.vsmooth_probe_rows == VCATTN_PROBE_ROWS,
          "vsmooth-4bit: the probe by default");
    CHECK(vcattn_config_from_method("vsmooth-4bit", &c) == VCATTN_OK && !c.vsmooth_order_rows,
          "vsmooth-4bit: no order choice");
    CHECK(vcattn_config_from_method("sage2+probe", &c) == VCATTN_ERR_UNKNOWN_NAME &&
          vcattn_config_from_method("sage3-4bit+probe", &c) == VCATTN_ERR_UNKNOWN_NAME &&
          vcattn_config_from_method("vc+probe+qsmooth", &c) == VCATTN_ERR_UNKNOWN_NAME,
          "+probe only last, and only on the V-Smooth methods");
    CHECK(vcattn_config_from_method("nosuch", &c) == VCATTN_ERR_UNKNOWN_NAME, "unknown method");
    CHECK(vcattn_config_from_method("+hadamard", &c) == VCATTN_ERR_UNKNOWN_NAME, "suffix alone");
    CHECK(vcattn_config_from_method(NULL, &c) == VCATTN_ERR_NULL_POINTER, "NULL method");
    vcattn_config d = vcattn_config_default(), vc;
    vcattn_config_from_method("vc", &vc);
    CHECK(memcmp(&d, &vc, sizeof d) == 0, "the default is the vc method");
    CHECK(d.expcast_min_keys == 1024, "ExpCast from 1024 keys by default (vcattn.h), got %d", d.expcast_min_keys);

    vcattn_context *ctx = NULL;
    CHECK(vcattn_create(NULL, VCATTN_BACKEND_CPU) == VCATTN_ERR_NULL_POINTER, "create(NULL)");
    CHECK(vcattn_create(&ctx, (vcattn_backend)9) == VCATTN_ERR_INVALID_ARGUMENT && ctx == NULL, "bad backend");
    CHECK(vcattn_create(&ctx, VCATTN_BACKEND_AUTO) == VCATTN_OK, "auto backend");
    const char *why = NULL;
    int cuda = vcattn_backend_available(VCATTN_BACKEND_CUDA, &why);
    CHECK(why != NULL && (cuda || strlen(why) > 0), "cuda availability has a reason");
    CHECK(vcattn_context_backend(ctx) == (cuda ? VCATTN_BACKEND_CUDA : VCATTN_BACKEND_CPU), "auto resolves");
    vcattn_destroy(ctx);
    ctx = NULL;
    if (!cuda) {
        CHECK(vcattn_create(&ctx, VCATTN_BACKEND_CUDA) == VCATTN_ERR_BACKEND_UNAVAILABLE && ctx == NULL,
              "cuda unavailable: %s", why);
    }
    vcattn_destroy(ctx);
    vcattn_destroy(NULL);

    vcattn_layer *layer = NULL;
    CHECK(vcattn_layer_create(&layer, 0) == VCATTN_ERR_INVALID_ARGUMENT && !layer, "layer with 0 steps");
    CHECK(vcattn_layer_create(&layer, 40) == VCATTN_OK, "layer");
    CHECK(vcattn_layer_set_step(layer, -1) == VCATTN_ERR_INVALID_ARGUMENT, "negative step");
    CHECK(vcattn_layer_set_step(layer, 1000) == VCATTN_ERR_INVALID_ARGUMENT, "step 1000 of 40");
    CHECK(vcattn_layer_set_step(layer, 40) == VCATTN_ERR_INVALID_ARGUMENT, "step 40 of 40");
    CHECK(vcattn_layer_set_step(layer, 39) == VCATTN_OK && vcattn_layer_step(layer) == 39, "step 39 of 40");
    CHECK(vcattn_layer_set_step(NULL, 1) == VCATTN_ERR_NULL_POINTER, "NULL layer");
    vcattn_layer_destroy(layer);
    vcattn_layer_destroy(NULL);

    vcattn_workload w;
    CHECK(vcattn_workload_generate("nosuch", 1, &w) == VCATTN_ERR_UNKNOWN_NAME, "unknown workload");
    vcattn_workload_free(NULL);
}

/* vcattn_set_progress: done rises to total = B Hq Nq, once per call at the end
 * at least; turned off by NULL; a NULL context refused. */
typedef struct {
    int calls, rising;
    int64_t last, total;
} progress_log;

static void log_progress(int64_t done, int64_t total, void *user) {
    progress_log *p = user;
    p->rising &= done > p->last;
    p->last = done;
    p->total = total;
    p->calls++;
}

typedef struct {
    vcattn_context *inner;
    progress_log inner_log;
    vcattn_status status;
    int calls;
} nested_call;

static void progress_calls_inner(int64_t done, int64_t total, void *user) {
    (void)done; (void)total;
    nested_call *n = user;
    if (n->calls++) return;  /* once is enough */
    call_t c = good_call();
    n->status = vcattn_attention(n->inner, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL);
}

static void test_progress(void) {
    vcattn_context *ctx;
    if (vcattn_create(&ctx, VCATTN_BACKEND_CPU) != VCATTN_OK) return;
    progress_log log = {0, 1, 0, 0};
    call_t c = good_call();
    CHECK(vcattn_set_progress(NULL, log_progress, &log) == VCATTN_ERR_NULL_POINTER, "progress on a NULL context");
    CHECK(vcattn_set_progress(ctx, log_progress, &log) == VCATTN_OK, "set progress");
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK, "call with progress");
    CHECK(log.calls >= 1 && log.rising && log.last == B * H * N && log.total == B * H * N,
          "progress: %d calls, rising %d, last %lld of %lld", log.calls, log.rising, (long long)log.last,
          (long long)log.total);
    const int calls = log.calls;
    vcattn_set_progress(ctx, NULL, NULL);
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK &&
          log.calls == calls, "progress off: no more calls");
    /* A callback that runs a call on a second context with its own callback
     * returns (both once waited on one process-wide lock: a hang). The alarm
     * turns a hang back into a failure. */
    nested_call nest = {NULL, {0, 1, 0, 0}, VCATTN_OK, 0};
    vcattn_create(&nest.inner, VCATTN_BACKEND_CPU);
    vcattn_set_progress(nest.inner, log_progress, &nest.inner_log);
    vcattn_set_progress(ctx, progress_calls_inner, &nest);
    alarm(60);
    static float outer_out[B * H * N * D];
    c.out = vcattn_tensor_bhnd(outer_out, VCATTN_DTYPE_F32, B, H, N, D);
    CHECK(vcattn_attention(ctx, &c.cfg, &c.q, &c.k, &c.v, &c.out, NULL, NULL, NULL) == VCATTN_OK,
          "call whose progress calls a second context");
    alarm(0);
    CHECK(nest.calls >= 1 && nest.status == VCATTN_OK && nest.inner_log.last == B * H * N,
          "nested progress: %d inner calls, status %d, inner progress %lld", nest.calls, (int)nest.status,
          (long long)nest.inner_log.last);
    vcattn_destroy(nest.inner);
    vcattn_destroy(ctx);
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    fill();
    vcattn_context *ctx;
    if (vcattn_create(&ctx, VCATTN_BACKEND_CPU) != VCATTN_OK) return 1;
    TL_RUN(test_bad_inputs(ctx));
    TL_RUN(test_aliasing(ctx));
    vcattn_destroy(ctx);
    TL_RUN(test_objects());
    TL_RUN(test_progress());
    return tl_finish("test_api");
}
