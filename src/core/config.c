/* Configuration: defaults, the named method presets, and the names of enums. */
#include "internal.h"

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
    return c;
}

/* Each preset as the switches it sets on top of the default (vc). */
typedef struct {
    const char *name;
    vcattn_qk_format qk;
    int k_smoothing;
    vcattn_p_format p;
    vcattn_v_format v;
    int vsmooth;
} method_preset;

static const method_preset METHODS[] = {
    {"bf16",         VCATTN_QK_EXACT, 0, VCATTN_P_BF16,        VCATTN_V_EXACT,       0},
    {"fp8-naive",    VCATTN_QK_FP8,   0, VCATTN_P_FP8_CAST,    VCATTN_V_FP8_BLOCK,   0},
    {"sage2",        VCATTN_QK_INT8,  1, VCATTN_P_FP8_CAST,    VCATTN_V_FP8_CHANNEL, 0},
    {"vsmooth",      VCATTN_QK_INT8,  1, VCATTN_P_FP8_CAST,    VCATTN_V_FP8_CHANNEL, 1},
    {"vc",           VCATTN_QK_INT8,  1, VCATTN_P_FP8_EXPCAST, VCATTN_V_FP8_CHANNEL, 1},
    {"sage3-4bit",   VCATTN_QK_NVFP4, 1, VCATTN_P_NVFP4,       VCATTN_V_NVFP4,       0},
    {"vsmooth-4bit", VCATTN_QK_NVFP4, 1, VCATTN_P_NVFP4,       VCATTN_V_NVFP4,       1},
};
#define NUM_METHODS (sizeof METHODS / sizeof METHODS[0])

static const char *const METHOD_NAMES[NUM_METHODS + 1] = {
    "bf16", "fp8-naive", "sage2", "vsmooth", "vc", "sage3-4bit", "vsmooth-4bit", NULL};

const char *const *vcattn_method_names(void) { return METHOD_NAMES; }

/* Strips `suffix` from the end of method[0..*len) once; 1 if it was there. */
static int strip_suffix(const char *method, size_t *len, const char *suffix) {
    size_t slen = strlen(suffix);
    if (*len <= slen || strncmp(method + *len - slen, suffix, slen) != 0) return 0;
    *len -= slen;
    return 1;
}

vcattn_status vcattn_config_from_method(const char *method, vcattn_config *cfg) {
    if (!method || !cfg) return VCATTN_ERR_NULL_POINTER;
    size_t base_len = strlen(method);
    int q_smoothing = strip_suffix(method, &base_len, "+qsmooth");
    int hadamard = strip_suffix(method, &base_len, "+hadamard");
    for (size_t i = 0; i < NUM_METHODS; i++) {
        const method_preset *m = &METHODS[i];
        if (strlen(m->name) != base_len || strncmp(m->name, method, base_len) != 0) continue;
        vcattn_config c = vcattn_config_default();
        c.qk_format = m->qk;
        c.k_smoothing = m->k_smoothing;
        c.p_format = m->p;
        c.v_format = m->v;
        c.vsmooth = m->vsmooth;
        c.hadamard = hadamard;
        c.q_smoothing = q_smoothing;
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
