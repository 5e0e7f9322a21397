/* Tensor views: the public constructors and the element and row accessors
 * the backends read and write through (below the core, which dispatches to
 * the backends). */
#include "internal.h"
#include "../formats/halfs.h"

#include <float.h>
#include <string.h>

/* Stride products in unsigned arithmetic: shapes the validation refuses
 * (a zero or negative dim beside huge ones) must not overflow a signed
 * product on the way there. */
static int64_t stride_of(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

vcattn_tensor vcattn_tensor_bhnd(void *data, vcattn_dtype dtype, int64_t batch,
                                 int64_t heads, int64_t tokens, int64_t head_dim) {
    vcattn_tensor t = {data, dtype, batch, heads, tokens, head_dim,
                       stride_of(heads, stride_of(tokens, head_dim)), stride_of(tokens, head_dim), head_dim};
    return t;
}

vcattn_tensor vcattn_tensor_bnhd(void *data, vcattn_dtype dtype, int64_t batch,
                                 int64_t heads, int64_t tokens, int64_t head_dim) {
    vcattn_tensor t = {data, dtype, batch, heads, tokens, head_dim,
                       stride_of(heads, stride_of(tokens, head_dim)), head_dim, stride_of(heads, head_dim)};
    return t;
}

/* a * b into *out, or 0 when it passes limit (a, b, limit non-negative). */
static int mul_within(int64_t a, int64_t b, int64_t limit, int64_t *out) {
    if (a != 0 && b > limit / a) return 0;
    *out = a * b;
    return 1;
}

const char *vcattn_view_measure(const vcattn_tensor *t, vcattn_view_size *size) {
    if (t->tokens > VCATTN_MAX_TOKENS) return "more than VCATTN_MAX_TOKENS tokens";
    int64_t rows, elements;  /* the logical B*H*N*D: work buffers follow it, whatever the strides */
    if (!mul_within(t->batch, t->heads, VCATTN_MAX_ELEMENTS, &rows) ||
        !mul_within(rows, t->tokens, VCATTN_MAX_ELEMENTS, &rows) ||
        !mul_within(rows, t->head_dim, VCATTN_MAX_ELEMENTS, &elements))
        return "more than VCATTN_MAX_ELEMENTS elements (batch x heads x tokens x head_dim)";
    /* elements from the first to one past the last, then bytes, then addresses */
    const int64_t count[3] = {t->batch, t->heads, t->tokens};
    const int64_t stride[3] = {t->stride_batch, t->stride_head, t->stride_token};
    const int64_t esize = t->dtype == VCATTN_DTYPE_F32 ? 4 : 2;
    int64_t extent = t->head_dim;
    for (int i = 0; i < 3; i++) {
        int64_t step;
        if (count[i] == 1) continue;
        if (!mul_within(stride[i], count[i] - 1, INT64_MAX - extent, &step))
            return "strides times sizes pass the address space";
        extent += step;
    }
    if (extent > INT64_MAX / esize || (uint64_t)(extent * esize) > UINTPTR_MAX - (uintptr_t)t->data)
        return "strides times sizes pass the address space";
    size->lo = (uintptr_t)t->data;
    size->hi = (uintptr_t)t->data + (uintptr_t)(extent * esize);
    return NULL;
}

int vcattn_array_span(const void *p, int64_t count, size_t esize, uintptr_t *hi) {
    if (count < 0 || (uint64_t)count > (UINTPTR_MAX - (uintptr_t)p) / esize) return 0;
    *hi = (uintptr_t)p + (uintptr_t)count * esize;
    return 1;
}

static int64_t row_offset(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n) {
    return b * t->stride_batch + h * t->stride_head + n * t->stride_token;
}

vcattn_tensor vcattn_rope_table(const vcattn_rope *rope, int which, const vcattn_tensor *x) {
    const float *tables[4] = {rope->q_cos, rope->q_sin, rope->k_cos, rope->k_sin};
    const int key = which >= 2;
    const int64_t token = key ? rope->k_stride_token : rope->q_stride_token;
    vcattn_tensor t = {(void *)tables[which], VCATTN_DTYPE_F32, x->batch, x->heads, x->tokens, x->head_dim / 2,
                       key ? rope->k_stride_batch : rope->q_stride_batch,
                       key ? rope->k_stride_head : rope->q_stride_head, token ? token : x->head_dim / 2};
    return t;
}

float vcattn_tensor_get(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n, int64_t d) {
    int64_t i = row_offset(t, b, h, n) + d;
    switch (t->dtype) {
    case VCATTN_DTYPE_F32: return ((const float *)t->data)[i];
    case VCATTN_DTYPE_F16: return vcattn_f16_to_f32(((const uint16_t *)t->data)[i]);
    case VCATTN_DTYPE_BF16: return vcattn_bf16_to_f32(((const uint16_t *)t->data)[i]);
    }
    return 0.0f;
}

void vcattn_tensor_load_row(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n, float *dst) {
    int64_t base = row_offset(t, b, h, n);
    switch (t->dtype) {
    case VCATTN_DTYPE_F32:
        memcpy(dst, (const float *)t->data + base, (size_t)t->head_dim * sizeof(float));
        break;
    case VCATTN_DTYPE_F16:
        for (int64_t d = 0; d < t->head_dim; d++)
            dst[d] = vcattn_f16_to_f32(((const uint16_t *)t->data)[base + d]);
        break;
    case VCATTN_DTYPE_BF16:
        for (int64_t d = 0; d < t->head_dim; d++)
            dst[d] = vcattn_bf16_to_f32(((const uint16_t *)t->data)[base + d]);
        break;
    }
}

float vcattn_dtype_max(vcattn_dtype dtype) {
    switch (dtype) {
    case VCATTN_DTYPE_F16: return VCATTN_F16_MAX;
    case VCATTN_DTYPE_BF16: return VCATTN_BF16_MAX;
    default: return FLT_MAX;
    }
}

vcattn_status vcattn_fail_out_range(vcattn_context *ctx, vcattn_dtype out_dtype) {
    return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                       "v holds values past %g, the largest %s: out cannot hold the output (a weighted mean of "
                       "v's rows); pass a wider out dtype", (double)vcattn_dtype_max(out_dtype),
                       out_dtype == VCATTN_DTYPE_F16 ? "float16" : "bfloat16");
}

void vcattn_tensor_store_row(const vcattn_tensor *t, int64_t b, int64_t h, int64_t n,
                             const float *src) {
    int64_t base = row_offset(t, b, h, n);
    switch (t->dtype) {
    case VCATTN_DTYPE_F32:
        memcpy((float *)t->data + base, src, (size_t)t->head_dim * sizeof(float));
        break;
    case VCATTN_DTYPE_F16:
        for (int64_t d = 0; d < t->head_dim; d++)
            ((uint16_t *)t->data)[base + d] = vcattn_f32_to_f16(vcattn_saturate(src[d], VCATTN_F16_MAX));
        break;
    case VCATTN_DTYPE_BF16:
        for (int64_t d = 0; d < t->head_dim; d++)
            ((uint16_t *)t->data)[base + d] = vcattn_f32_to_bf16(vcattn_saturate(src[d], VCATTN_BF16_MAX));
        break;
    }
}
