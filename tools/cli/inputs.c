/* vcattn command line: q, k and v from .npy files or a built-in workload. */
#include "cli.h"

/* The RoPE the calls take: NULL for .npy inputs, which have none. */
const vcattn_rope *inputs_rope(const inputs *in) { return in->has_rope ? &in->rope : NULL; }

void inputs_free(inputs *in) {
    vcattn_workload_free(&in->w);
    for (int i = 0; i < 3; i++) {
        npy_free(&in->arr[i]);
        free(in->converted[i]);
    }
}

/* The first finite value of src that became infinite in dst (float16 tops
 * out at 65504), or 0 if none did. */
static float first_overflow(const void *src, vcattn_dtype from, const void *dst, vcattn_dtype to, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float x = from == VCATTN_DTYPE_F32   ? ((const float *)src)[i]
                  : from == VCATTN_DTYPE_F16 ? vcattn_f16_to_f32(((const uint16_t *)src)[i])
                                             : vcattn_bf16_to_f32(((const uint16_t *)src)[i]);
        float y = to == VCATTN_DTYPE_F32   ? ((const float *)dst)[i]
                  : to == VCATTN_DTYPE_F16 ? vcattn_f16_to_f32(((const uint16_t *)dst)[i])
                                           : vcattn_bf16_to_f32(((const uint16_t *)dst)[i]);
        if (isfinite(x) && !isfinite(y)) return x;
    }
    return 0.0f;
}

/* count elements of type `from` as a fresh `to` array (NULL if out of memory). */
static void *convert(const void *src, vcattn_dtype from, int64_t count, vcattn_dtype to) {
    size_t esz = to == VCATTN_DTYPE_F32 ? 4 : 2;
    void *dst = malloc((size_t)(count > 0 ? count : 1) * esz);
    if (!dst) return NULL;
    #pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < count; i++) {
        float x = from == VCATTN_DTYPE_F32   ? ((const float *)src)[i]
                  : from == VCATTN_DTYPE_F16 ? vcattn_f16_to_f32(((const uint16_t *)src)[i])
                                             : vcattn_bf16_to_f32(((const uint16_t *)src)[i]);
        if (to == VCATTN_DTYPE_F32) ((float *)dst)[i] = x;
        else if (to == VCATTN_DTYPE_F16) ((uint16_t *)dst)[i] = vcattn_f32_to_f16(x);
        else ((uint16_t *)dst)[i] = vcattn_f32_to_bf16(x);
    }
    return dst;
}

/* Reads one .npy input as a view: 4-D [B,H,N,D] / [B,N,H,D], or 3-D with B = 1. */
static vcattn_status load_npy(const options *o, const char *path, npy_array *arr, vcattn_tensor *t,
                              void **converted, char *err) {
    vcattn_status st = npy_read(path, o->bf16_files, arr, err, ERRLEN);
    if (st) return st;
    if (arr->from_f64) fprintf(stderr, "note: %s is float64: read as float32 (rounded to nearest)\n", path);
    if (arr->ndim != 3 && arr->ndim != 4) {
        snprintf(err, ERRLEN, "%s: expected a 3-D or 4-D array, got %d-D", path, arr->ndim);
        return VCATTN_ERR_SHAPE_MISMATCH;
    }
    const int64_t *s = arr->shape + (arr->ndim - 3);   /* the last three axes */
    int64_t b = arr->ndim == 4 ? arr->shape[0] : 1;
    int64_t h = o->nhd ? s[1] : s[0], n = o->nhd ? s[0] : s[1], d = s[2];
    if (h > n)  /* attention has more tokens than heads: the file is likely in the other layout */
        fprintf(stderr, "warning: %s read as %s has %lld heads of %lld tokens; more heads than tokens "
                "suggests %s (--layout %s)\n", path, o->nhd ? "NHD" : "HND", (long long)h, (long long)n,
                o->nhd ? "HND" : "NHD", o->nhd ? "HND" : "NHD");
    void *data = arr->data;
    vcattn_dtype dt = arr->dtype;
    if (o->dtype_set && dt != o->dtype) {
        if (!(data = *converted = convert(arr->data, dt, npy_numel(arr), o->dtype))) {
            snprintf(err, ERRLEN, "%s: no memory to convert to %s", path,
                     vcattn_dtype_name(o->dtype));
            return VCATTN_ERR_OUT_OF_MEMORY;
        }
        float big = first_overflow(arr->data, dt, data, o->dtype, npy_numel(arr));
        if (big != 0.0f) {
            snprintf(err, ERRLEN, "%s: %g is outside the %s range (--dtype)", path, (double)big,
                     vcattn_dtype_name(o->dtype));
            return VCATTN_ERR_INVALID_ARGUMENT;
        }
        dt = o->dtype;
    }
    *t = o->nhd ? vcattn_tensor_bnhd(data, dt, b, h, n, d)
                : vcattn_tensor_bhnd(data, dt, b, h, n, d);
    return VCATTN_OK;
}

/* The workload (converted to the input dtype, as a model supplies it) or the
 * three files. On error err holds the message. */
vcattn_status load_inputs(const options *o, inputs *in, char *err) {
    memset(in, 0, sizeof *in);
    vcattn_status st;
    if (o->q_path) {
        if ((st = load_npy(o, o->q_path, &in->arr[0], &in->q, &in->converted[0], err)) ||
            (st = load_npy(o, o->k_path, &in->arr[1], &in->k, &in->converted[1], err)) ||
            (st = load_npy(o, o->v_path, &in->arr[2], &in->v, &in->converted[2], err)))
            return st;
        snprintf(in->source, sizeof in->source, "%s, %s, %s (%s)", o->q_path, o->k_path, o->v_path,
                 o->nhd ? "NHD" : "HND");
        return VCATTN_OK;
    }
    vcattn_workload *w = &in->w;
    if ((st = vcattn_workload_generate(o->workload, o->seed, w))) {
        snprintf(err, ERRLEN, "cannot generate workload '%s'", o->workload);
        return st;
    }
    float **src[3] = {&w->q, &w->k, &w->v};
    vcattn_tensor *dst[3] = {&in->q, &in->k, &in->v};
    for (int i = 0; i < 3; i++) {
        int64_t heads = i == 0 ? w->heads_q : w->heads_kv;
        int64_t count = w->batch * heads * w->tokens * w->head_dim;
        void *data = *src[i];
        if (o->dtype != VCATTN_DTYPE_F32) {
            data = in->converted[i] = convert(*src[i], VCATTN_DTYPE_F32, count, o->dtype);
            if (!data) {
                snprintf(err, ERRLEN, "no memory for the %s workload", w->name);
                return VCATTN_ERR_OUT_OF_MEMORY;
            }
            /* The float32 original is not needed any more; on the large
             * presets it is gigabytes. */
            free(*src[i]);
            *src[i] = NULL;
        }
        *dst[i] = vcattn_tensor_bhnd(data, o->dtype, w->batch, heads, w->tokens, w->head_dim);
    }
    in->rope = (vcattn_rope){.style = w->rope_style, .q_cos = w->rope_cos, .q_sin = w->rope_sin,
                             .k_cos = w->rope_cos, .k_sin = w->rope_sin};
    in->has_rope = 1;
    snprintf(in->source, sizeof in->source, "workload %s (seed %llu, %dx%dx%d grid)", w->name,
             (unsigned long long)o->seed, w->frames, w->height, w->width);
    return VCATTN_OK;
}

/* The library's own argument checks (shapes, head dim, strides; not the
 * values) on the loaded inputs, before anything computes with them. */
vcattn_status validate_inputs(const inputs *in, char *err) {
    vcattn_context *ctx;
    vcattn_status st = vcattn_create(&ctx, VCATTN_BACKEND_CPU);
    if (st) {
        snprintf(err, ERRLEN, "cannot create a context to check the inputs");
        return st;
    }
    const vcattn_config cfg = vcattn_config_default();
    st = vcattn_validate_call(ctx, &cfg, &in->q, &in->k, &in->v, NULL, NULL, inputs_rope(in), 0);
    if (st) snprintf(err, ERRLEN, "%s", vcattn_last_error(ctx));
    vcattn_destroy(ctx);
    return st;
}
