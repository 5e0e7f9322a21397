/* FP64 reference attention; see reference.h. Per (batch, kv head) the keys
 * and values are decoded (and K rotated) once into double buffers, then every
 * query row of the heads sharing that kv head is done on its own: scores,
 * then the visitor (direct softmax and P V for the attention), all in double
 * and in a fixed order, so the result does not depend on the thread count. */
#include "reference.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "vcattn_inspect.h"

/* Row (b, h, n) of a view as double; head_dim is contiguous. */
static void load_row_f64(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n, double *dst) {
    int64_t off = b * t->stride_batch + h * t->stride_head + n * t->stride_token;
    int64_t d = t->head_dim;
    if (t->dtype == VCATTN_DTYPE_F32) {
        const float *p = (const float *)t->data + off;
        for (int64_t i = 0; i < d; i++) dst[i] = p[i];
    } else if (t->dtype == VCATTN_DTYPE_F16) {
        const uint16_t *p = (const uint16_t *)t->data + off;
        for (int64_t i = 0; i < d; i++) dst[i] = vcattn_f16_to_f32(p[i]);
    } else {
        const uint16_t *p = (const uint16_t *)t->data + off;
        for (int64_t i = 0; i < d; i++) dst[i] = vcattn_bf16_to_f32(p[i]);
    }
}

/* Where the table row of token n of head (b, h) starts: the k tables' for
 * keys, the q tables' for queries (a token stride of 0 meaning d/2). */
static int64_t rope_row_at(const vcattn_rope *rope, int key, int64_t b, int64_t h, int64_t n, int64_t d) {
    const int64_t token = key ? rope->k_stride_token : rope->q_stride_token;
    const int64_t batch = key ? rope->k_stride_batch : rope->q_stride_batch;
    const int64_t head = key ? rope->k_stride_head : rope->q_stride_head;
    return b * batch + h * head + n * (token ? token : d / 2);
}

/* Rotates x[d] by its token's table rows (d/2 entries each), in double. */
static void rope_row_f64(double *x, int64_t d, const float *cr, const float *sr, vcattn_rope_style style) {
    int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        int64_t i0 = style == VCATTN_ROPE_INTERLEAVED ? 2 * i : i;
        int64_t i1 = style == VCATTN_ROPE_INTERLEAVED ? 2 * i + 1 : i + half;
        double c = cr[i], s = sr[i], a = x[i0], b = x[i1];
        x[i0] = a * c - b * s;
        x[i1] = a * s + b * c;
    }
}

/* The shape rules of vcattn_attention that the loops below rely on. */
static vcattn_status check_shapes(const vcattn_tensor *q, const vcattn_tensor *k, const vcattn_tensor *v) {
    const vcattn_tensor *all[3] = {q, k, v};
    for (int i = 0; i < 3; i++)
        if (all[i] && (all[i]->batch <= 0 || all[i]->heads <= 0 || all[i]->tokens <= 0 || all[i]->head_dim <= 0))
            return VCATTN_ERR_INVALID_ARGUMENT;
    if (k->batch != q->batch || k->head_dim != q->head_dim || q->heads % k->heads != 0)
        return VCATTN_ERR_SHAPE_MISMATCH;
    if (v && (v->batch != k->batch || v->heads != k->heads || v->tokens != k->tokens || v->head_dim != k->head_dim))
        return VCATTN_ERR_SHAPE_MISMATCH;
    return VCATTN_OK;
}

vcattn_status vcattn_reference_rows(const vcattn_tensor *q, const vcattn_tensor *k,
                                    const vcattn_tensor *v, const vcattn_rope *rope, float sm_scale,
                                    vcattn_row_visitor visit, void *ctx) {
    vcattn_status st = check_shapes(q, k, v);
    if (st) return st;
    const int64_t B = q->batch, Hq = q->heads, Hkv = k->heads, Nq = q->tokens, Nk = k->tokens;
    const int64_t D = q->head_dim, group = Hq / Hkv;
    const double scale = sm_scale != 0.0f ? (double)sm_scale : 1.0 / sqrt((double)D);
    const int nthreads = omp_get_max_threads();

    /* One block: rotated K and V of one kv head, then per thread a score row
     * [Nk] and a query row [D]. Always non-empty since D >= 1. */
    size_t kv_len = (size_t)Nk * (size_t)D, scratch_len = (size_t)Nk + (size_t)D;
    double *buf = malloc((2 * kv_len + (size_t)nthreads * scratch_len) * sizeof(double));
    if (!buf) return VCATTN_ERR_OUT_OF_MEMORY;
    double *kd = buf, *vd = buf + kv_len, *scratch = buf + 2 * kv_len;

    for (int64_t b = 0; b < B; b++) {
        for (int64_t hk = 0; hk < Hkv; hk++) {
#pragma omp parallel for schedule(static)
            for (int64_t j = 0; j < Nk; j++) {
                load_row_f64(k, b, hk, j, kd + j * D);
                if (v) load_row_f64(v, b, hk, j, vd + j * D);
                if (rope) {
                    const int64_t at = rope_row_at(rope, 1, b, hk, j, D);
                    rope_row_f64(kd + j * D, D, rope->k_cos + at, rope->k_sin + at, rope->style);
                }
            }
#pragma omp parallel for schedule(dynamic, 16)
            for (int64_t r = 0; r < group * Nq; r++) {
                int64_t hq = hk * group + r / Nq, i = r % Nq;
                int thread = omp_get_thread_num();
                double *s = scratch + (size_t)thread * scratch_len, *qr = s + Nk;
                load_row_f64(q, b, hq, i, qr);
                if (rope) {
                    const int64_t at = rope_row_at(rope, 0, b, hq, i, D);
                    rope_row_f64(qr, D, rope->q_cos + at, rope->q_sin + at, rope->style);
                }
                for (int64_t j = 0; j < Nk; j++) {
                    const double *kr = kd + j * D;
                    double dot = 0.0;
                    for (int64_t d = 0; d < D; d++) dot += qr[d] * kr[d];
                    s[j] = scale * dot;
                }
                visit(ctx, thread, b, hq, i, s, v ? vd : NULL, Nk, D);
            }
        }
    }
    free(buf);
    return VCATTN_OK;
}

typedef struct {
    int64_t hq, nq;
    double *out, *lse;
} attention_sink;

/* Direct softmax of one score row and its P V. */
static void attend_row(void *ctx, int thread, int64_t b, int64_t hq, int64_t i, double *s,
                       const double *vd, int64_t nk, int64_t d_head) {
    const attention_sink *a = ctx;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < nk; j++)
        if (s[j] > mx) mx = s[j];
    for (int64_t j = 0; j < nk; j++) {
        s[j] = exp(s[j] - mx);
        sum += s[j];
    }
    double *o = a->out + ((b * a->hq + hq) * a->nq + i) * d_head;
    for (int64_t d = 0; d < d_head; d++) o[d] = 0.0;
    for (int64_t j = 0; j < nk; j++) {
        const double *vr = vd + j * d_head;
        for (int64_t d = 0; d < d_head; d++) o[d] += s[j] * vr[d];
    }
    for (int64_t d = 0; d < d_head; d++) o[d] /= sum;
    if (a->lse) a->lse[(b * a->hq + hq) * a->nq + i] = mx + log(sum);
}

vcattn_status vcattn_reference_attention(const vcattn_tensor *q, const vcattn_tensor *k,
                                         const vcattn_tensor *v, const vcattn_rope *rope,
                                         float sm_scale, double *out, double *lse) {
    attention_sink sink = {q->heads, q->tokens, out, lse};
    return vcattn_reference_rows(q, k, v, rope, sm_scale, attend_row, &sink);
}
