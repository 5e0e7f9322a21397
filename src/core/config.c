/* Configuration: defaults, the named method presets, and the names of enums. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

vcattn_config vcattn_config_default(void) {
    vcattn_config c;
    memset(&c, 0, sizeof c);
    c.qk_format = VCATTN_QK_INT8;
    c.k_smoothing = 1;
    c.hadamard = 0;
    c.sm_scale = 0.0f;
    c.p_format = VCATTN_P_FP8_EXPCAST;
    c.expcast_beta = -0.35f;
    c.v_format = VCATTN_V_FP8_CHANNEL;
    c.vsmooth = 1;
    c.kmeans_clusters = 0;
    c.kmeans_iters = 10;
    c.kmeans_warm_iters = 5;
    c.kmeans_seed = 0x5eedULL;
    c.group_window = 0.25f;
    c.group_refresh = 4;
    c.demean_outside_window = 0;
    c.check_finite = 1;
    c.num_threads = 0;
    c.sink_guard = 0.25f;
    c.expcast_min_keys = 1024;
    c.vsmooth_probe_rows = VCATTN_DEFAULT_PROBE_ROWS;
    c.vsmooth_order_rows = VCATTN_DEFAULT_ORDER_ROWS;
    return c;
}

size_t vcattn_config_size(void) { return sizeof(vcattn_config); }

/* Each preset as the switches it sets on top of the default (vc). */
typedef struct {
    const char *name;
    vcattn_qk_format qk;
    int k_smoothing;
    vcattn_p_format p;
    vcattn_v_format v;
    int vsmooth;
    int probe_rows, order_rows;  /* vsmooth_probe_rows, vsmooth_order_rows */
} method_preset;

/* vc probes and chooses the order per key head by default (docs/fidelity.md);
 * vsmooth stays the paper's V-Smooth, the ablation without ExpCast. */
static const method_preset METHODS[] = {
    {"bf16",         VCATTN_QK_EXACT, 0, VCATTN_P_BF16,        VCATTN_V_EXACT,       0, 0, 0},
    {"fp8-naive",    VCATTN_QK_FP8,   0, VCATTN_P_FP8_CAST,    VCATTN_V_FP8_BLOCK,   0, 0, 0},
    {"sage2",        VCATTN_QK_INT8,  1, VCATTN_P_FP8_CAST,    VCATTN_V_FP8_CHANNEL, 0, 0, 0},
    {"vsmooth",      VCATTN_QK_INT8,  1, VCATTN_P_FP8_CAST,    VCATTN_V_FP8_CHANNEL, 1, 0, 0},
    {"vc",           VCATTN_QK_INT8,  1, VCATTN_P_FP8_EXPCAST, VCATTN_V_FP8_CHANNEL, 1,
     VCATTN_DEFAULT_PROBE_ROWS, VCATTN_DEFAULT_ORDER_ROWS},
    {"sage3-4bit",   VCATTN_QK_NVFP4, 1, VCATTN_P_NVFP4,       VCATTN_V_NVFP4,       0, 0, 0},
    {"vsmooth-4bit", VCATTN_QK_NVFP4, 1, VCATTN_P_NVFP4,       VCATTN_V_NVFP4,       1, VCATTN_PROBE_ROWS, 0},
};
#define NUM_METHODS (sizeof METHODS / sizeof METHODS[0])

static const char *const METHOD_NAMES[NUM_METHODS + 1] = {
    "bf16", "fp8-naive", "sage2", "vsmooth", "vc", "sage3-4bit", "vsmooth-4bit", NULL};

/* Writes the reason (when why is not NULL) and returns status. */
static vcattn_status config_fail(char *why, size_t len, vcattn_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static vcattn_status config_fail(char *why, size_t len, vcattn_status status, const char *fmt, ...) {
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return status;
}

vcattn_status vcattn_config_check(const vcattn_config *c, int64_t d, char *why, size_t len) {
    if ((unsigned)c->qk_format > VCATTN_QK_NVFP4 || (unsigned)c->p_format > VCATTN_P_NVFP4 ||
        (unsigned)c->v_format > VCATTN_V_NVFP4)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT, "config: unknown format value");
    const struct { int value; const char *name; } flags[] = {
        {c->k_smoothing, "k_smoothing"}, {c->hadamard, "hadamard"}, {c->vsmooth, "vsmooth"},
        {c->demean_outside_window, "demean_outside_window"}, {c->check_finite, "check_finite"},
        {c->q_smoothing, "q_smoothing"}};
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        if (flags[i].value != 0 && flags[i].value != 1)
            return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT, "config: %s must be 0 or 1, got %d",
                               flags[i].name, flags[i].value);
    if (!(c->sm_scale >= 0.0f && c->sm_scale <= VCATTN_MAX_SM_SCALE))
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT,
                           "config: sm_scale must be in [0, %g] (0 = 1/sqrt(D))", (double)VCATTN_MAX_SM_SCALE);
    if (!(c->expcast_beta > -1.0f && c->expcast_beta < 1.0f))
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT, "config: expcast_beta must be in (-1, 1)");
    if (c->kmeans_clusters < 0 || c->kmeans_clusters > VCATTN_MAX_KMEANS_CLUSTERS)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT,
                           "config: kmeans_clusters must be in [0, %d] (0 = auto)", VCATTN_MAX_KMEANS_CLUSTERS);
    if (c->kmeans_iters < 1 || c->kmeans_iters > VCATTN_MAX_KMEANS_ITERS || c->kmeans_warm_iters < 1 ||
        c->kmeans_warm_iters > VCATTN_MAX_KMEANS_ITERS)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT,
                           "config: kmeans_iters and kmeans_warm_iters must be in [1, %d]", VCATTN_MAX_KMEANS_ITERS);
    if (c->expcast_min_keys < 0)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT, "config: expcast_min_keys must be >= 0, got %d",
                           c->expcast_min_keys);
    if (c->vsmooth_probe_rows < 0 || c->vsmooth_probe_rows > VCATTN_MAX_PROBE_ROWS)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT,
                           "config: vsmooth_probe_rows must be in [0, %d] (0 = the plain block mean), got %d",
                           VCATTN_MAX_PROBE_ROWS, c->vsmooth_probe_rows);
    if (c->vsmooth_order_rows < 0 || c->vsmooth_order_rows > VCATTN_MAX_ORDER_ROWS)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT,
                           "config: vsmooth_order_rows must be in [0, %d] (0 = k-means for every head), got %d",
                           VCATTN_MAX_ORDER_ROWS, c->vsmooth_order_rows);
    if (!(c->sink_guard >= 0.0f && c->sink_guard <= 1.0f))
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT, "config: sink_guard must be in [0, 1]");
    if (!(c->group_window >= 0.0f && c->group_window <= 1.0f) || c->group_refresh < 1)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT,
                           "config: group_window must be in [0, 1] and group_refresh >= 1");
    if (c->num_threads < 0 || c->num_threads > VCATTN_MAX_THREADS)
        return config_fail(why, len, VCATTN_ERR_INVALID_ARGUMENT, "config: num_threads must be in [0, %d] (0 = all cores)",
                           VCATTN_MAX_THREADS);
    if (d <= 0) return VCATTN_OK;  /* the checks below need the call's head dim */
    if (c->hadamard && !vcattn_is_pow2(d))
        return config_fail(why, len, VCATTN_ERR_UNSUPPORTED_CONFIG,
                           "config: the Hadamard rotation needs a power-of-two head dim, got %lld",
                           (long long)d);
    if ((c->qk_format == VCATTN_QK_NVFP4) && d % 16 != 0)
        return config_fail(why, len, VCATTN_ERR_UNSUPPORTED_CONFIG,
                           "config: NVFP4 Q/K needs a head dim divisible by 16, got %lld", (long long)d);
    return VCATTN_OK;
}

const char *const *vcattn_method_names(void) { return METHOD_NAMES; }

/* n bytes of a and b equal, ASCII letters matching whatever their case
 * (method names: "VC+Hadamard" is "vc+hadamard"). */
static int same_name(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char x = a[i] >= 'A' && a[i] <= 'Z' ? (char)(a[i] - 'A' + 'a') : a[i];
        char y = b[i] >= 'A' && b[i] <= 'Z' ? (char)(b[i] - 'A' + 'a') : b[i];
        if (x != y) return 0;
    }
    return 1;
}

/* Strips `suffix` from the end of method[0..*len) once; 1 if it was there. */
static int strip_suffix(const char *method, size_t *len, const char *suffix) {
    size_t slen = strlen(suffix);
    if (*len <= slen || !same_name(method + *len - slen, suffix, slen)) return 0;
    *len -= slen;
    return 1;
}

vcattn_status vcattn_config_from_method(const char *method, vcattn_config *cfg) {
    if (!method || !cfg) return VCATTN_ERR_NULL_POINTER;
    size_t base_len = strlen(method);
    int probe = strip_suffix(method, &base_len, "+probe");
    int q_smoothing = strip_suffix(method, &base_len, "+qsmooth");
    int hadamard = strip_suffix(method, &base_len, "+hadamard");
    for (size_t i = 0; i < NUM_METHODS; i++) {
        const method_preset *m = &METHODS[i];
        if (strlen(m->name) != base_len || !same_name(m->name, method, base_len)) continue;
        /* the probe serves V-Smooth: a name that would not use it is refused */
        if (probe && !m->vsmooth) return VCATTN_ERR_UNKNOWN_NAME;
        vcattn_config c = vcattn_config_default();
        c.qk_format = m->qk;
        c.k_smoothing = m->k_smoothing;
        c.p_format = m->p;
        c.v_format = m->v;
        c.vsmooth = m->vsmooth;
        c.hadamard = hadamard;
        c.q_smoothing = q_smoothing;
        c.vsmooth_probe_rows = probe ? VCATTN_PROBE_ROWS : m->probe_rows;
        c.vsmooth_order_rows = m->order_rows;
        *cfg = c;
        return VCATTN_OK;
    }
    return VCATTN_ERR_UNKNOWN_NAME;
}

const char *vcattn_status_string(vcattn_status s) {
    switch (s) {
    case VCATTN_OK: return "ok";
    case VCATTN_ERR_NULL_POINTER: return "null pointer";
    case VCATTN_ERR_INVALID_ARGUMENT: return "invalid argument";
    case VCATTN_ERR_SHAPE_MISMATCH: return "shape mismatch";
    case VCATTN_ERR_UNSUPPORTED_DTYPE: return "unsupported dtype";
    case VCATTN_ERR_UNSUPPORTED_HEAD_DIM: return "unsupported head dim";
    case VCATTN_ERR_UNSUPPORTED_CONFIG: return "unsupported configuration";
    case VCATTN_ERR_NONFINITE_INPUT: return "non-finite input (NaN or Inf)";
    case VCATTN_ERR_BACKEND_UNAVAILABLE: return "backend unavailable";
    case VCATTN_ERR_OUT_OF_MEMORY: return "out of memory";
    case VCATTN_ERR_IO: return "i/o error";
    case VCATTN_ERR_BAD_FILE_FORMAT: return "bad file format";
    case VCATTN_ERR_UNKNOWN_NAME: return "unknown name";
    case VCATTN_ERR_DEVICE: return "device error";
    case VCATTN_ERR_INTERNAL: return "internal error";
    case VCATTN_STATUS_COUNT: break;
    }
    return "unknown status";
}

const char *vcattn_dtype_name(vcattn_dtype d) {
    switch (d) {
    case VCATTN_DTYPE_F32: return "float32";
    case VCATTN_DTYPE_F16: return "float16";
    case VCATTN_DTYPE_BF16: return "bfloat16";
    }
    return "unknown dtype";
}

const char *vcattn_backend_name(vcattn_backend b) {
    switch (b) {
    case VCATTN_BACKEND_AUTO: return "auto";
    case VCATTN_BACKEND_CPU: return "cpu";
    case VCATTN_BACKEND_CUDA: return "cuda";
    }
    return "unknown backend";
}

const char *vcattn_grouping_name(vcattn_grouping g) {
    switch (g) {
    case VCATTN_GROUP_NONE: return "none";
    case VCATTN_GROUP_COLD: return "cold";
    case VCATTN_GROUP_WARM: return "warm";
    case VCATTN_GROUP_REUSE: return "reuse";
    case VCATTN_GROUP_PRINCIPAL: return "principal";
    }
    return "unknown grouping";
}

unsigned vcattn_version_number(void) { return VCATTN_VERSION_NUMBER; }

const char *vcattn_version_string(void) {
#define VCATTN_STR2(x) #x
#define VCATTN_STR(x) VCATTN_STR2(x)
    return VCATTN_STR(VCATTN_VERSION_MAJOR) "." VCATTN_STR(VCATTN_VERSION_MINOR) "."
        VCATTN_STR(VCATTN_VERSION_PATCH);
}
