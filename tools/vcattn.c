/* vcattn: the command-line tool.
 *   run      one attention call, timed and measured against the FP64 reference
 *   eval     every method on one workload: fidelity, V-quantization error, the
 *            probability/value split of the paper's eq. 2, V block-mean energy
 *   expcast  the ExpCast-FP8 facts, computed from the codec
 * Exit status: 0 ok, 1 library error (bad file, shape, backend), 2 usage. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "vcattn.h"
#include "workloads.h"
#include "vcattn_inspect.h"
#include "reference.h"
#include "expcast_study.h"
#include "studies.h"
#include "metrics.h"
#include "npy.h"
#include "progress.h"

#define EXIT_USAGE 2
#define PROCEED (-1)        /* from a parser: go on (else it is the exit status) */
#define UNHANDLED (-2)      /* from an option group: not one of its options */
#define ERRLEN 512
#define ENERGY_BLOCK 128    /* rows per V-Smooth block */

/* ------------------------------------------------------------------ usage */

static const char USAGE[] =
    "Usage: vcattn <command> [options]\n"
    "\n"
    "Commands:\n"
    "  run      one attention call, timed and measured against the FP64 reference\n"
    "  eval     every method on one workload: fidelity, V-quantization error and\n"
    "           the probability/value split of the output error (paper eq. 2)\n"
    "  expcast  the ExpCast-FP8 facts, computed from the codec\n"
    "\n"
    "Options:\n"
    "  -h, --help   this text; after a command, that command's options\n"
    "  --version    print the library version\n";

static const char USAGE_RUN[] =
    "Usage: vcattn run [inputs] [--method M] [switches] [options]\n"
    "\n"
    "Inputs (default: --workload small):\n"
    "  --q F --k F --v F    .npy files, 4-D [B,H,N,D] (or 3-D without B) in the layout\n"
    "                       below; float32, float16, or bfloat16 with --bf16. No RoPE.\n"
    "  --bf16               '<u2' files hold bfloat16\n"
    "  --layout HND|NHD     axis order of the files (default HND)\n"
    "  --workload NAME      a built-in workload (tiny, small, wan2.2-720p, longcat-480p,\n"
    "                       hunyuan-720p, seq-32k, d64), with its RoPE\n"
    "  --seed S             workload seed (default 0)\n"
    "\n"
    "Method (default vc): bf16, fp8-naive, sage2, vsmooth, vc, sage3-4bit,\n"
    "vsmooth-4bit, each optionally with +hadamard. Switches on top of it:\n"
    "  --hadamard, --no-hadamard          --vsmooth, --no-vsmooth\n"
    "  --k-smoothing, --no-k-smoothing\n"
    "  --q-smoothing   (Q channel mean out, per-key term back: docs/fidelity.md)\n"
    "  --qk exact|int8|fp8|nvfp4\n"
    "  --p exact|bf16|fp8-cast|expcast|nvfp4\n"
    "  --v exact|fp8-channel|fp8-block|nvfp4   (also --v-format; any other --v\n"
    "                                         value is the V file)\n"
    "  --clusters N   --iters N   --beta X   --sm-scale X (0 = 1/sqrt(D))\n"
    "  --sink-guard X  V-Smooth's sink guard in [0, 1] (0 = off; default 0.25)\n"
    "  --expcast-min-keys N  ExpCast P from N keys on; fewer keys take exp then\n"
    "                  the cast (default 1024; 0 = ExpCast always)\n"
    "\n"
    "Options:\n"
    "  --backend cpu|cuda|auto   (default auto)\n"
    "  --dtype bf16|f16|f32      input precision (default bf16 for workloads;\n"
    "                            .npy inputs are converted only when given)\n"
    "  --threads N               CPU threads (default: all cores)\n"
    "  --progress                show progress from the start (else only for\n"
    "                            CPU calls past one second)\n"
    "  --grouping kmeans|principal  V-Smooth's token order: kmeans (default)\n"
    "                            groups as a grouping step does, from a cold\n"
    "                            start; principal sorts along V's principal\n"
    "                            direction, as a call without a layer state\n"
    "                            (the drop-in call) does\n"
    "  --out F                   write the output as float32 .npy [B,Hq,Nq,D]\n"
    "  --json                    one JSON object on stdout\n";

static const char USAGE_EVAL[] =
    "Usage: vcattn eval [--workload NAME [--seed S] [--draws N] | --q F --k F --v F] [options]\n"
    "\n"
    "Runs bf16, fp8-naive, sage2, sage2+hadamard, vsmooth, vc, sage3-4bit,\n"
    "sage3-4bit+hadamard and vsmooth-4bit on one workload (default small) or on\n"
    "q/k/v from .npy files (as for run: --bf16, --layout) and\n"
    "prints their fidelity against the FP64 reference, the V-quantization error,\n"
    "the output error split into the probability and the value term of eq. 2,\n"
    "and the block-mean energy share of V before and after k-means grouping.\n"
    "A built-in workload is drawn N times (seeds S .. S+N-1, default N = 4):\n"
    "the table pools the draws' outputs as one set of rows, and the rel L2 of\n"
    "sage2, vsmooth and vc is also printed per draw.\n"
    "\n"
    "Options:\n"
    "  --draws N                 workload draws pooled, 1 to 64 (default 4; the\n"
    "                            full-size presets take minutes per draw)\n"
    "  --backend cpu|cuda|auto   (default auto)\n"
    "  --dtype bf16|f16|f32      input precision (default bf16)\n"
    "  --threads N               CPU threads (default: all cores)\n"
    "  --progress                show progress from the start (else only for\n"
    "                            CPU calls past one second)\n"
    "  --methods M1,M2,...       these methods instead of the list above\n"
    "  --grouping kmeans|principal  V-Smooth's token order: kmeans (default)\n"
    "                            groups as a grouping step does, from a cold\n"
    "                            start; principal sorts along V's principal\n"
    "                            direction, as a call without a layer state\n"
    "                            (the drop-in call) does\n"
    "  --q-smoothing             every method with Q smoothing\n"
    "  --study NAME              instead of the table: orders (V error and energy\n"
    "                            share by token order), expcast (ExpCast row\n"
    "                            statistics against the bound), schedule (the\n"
    "                            grouping schedule over a 40-step trajectory,\n"
    "                            minutes), stats (K channel offsets, V outlier\n"
    "                            tokens, attention entropy), studies (orders,\n"
    "                            expcast and stats) or all (studies on every\n"
    "                            -small preset; --size small, the only\n"
    "                            size the CPU studies take)\n"
    "  --json                    one JSON object on stdout\n";

static const char USAGE_EXPCAST[] =
    "Usage: vcattn expcast [--beta X] [--json]\n"
    "\n"
    "Prints, computed from the codec: the share of one doubling where ExpCast-FP8\n"
    "gives the exp-then-cast byte, the Mitchell error range, the minimax shift,\n"
    "the decoded/exact ratio bounds, the total-variation bound and the worked\n"
    "example of the paper (u = -1.60).\n"
    "\n"
    "  --beta X   the shift of eq. 7, in (-1, 1) (default -0.35)\n"
    "  --json     one JSON object on stdout\n";

/* A command-line mistake: what, where to look, exit status 2. */
static int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("vcattn: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'vcattn%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
    return EXIT_USAGE;
}

/* A library error: the status and the message behind it, exit status 1. */
static int lib_error(vcattn_status st, const char *msg) {
    fprintf(stderr, "vcattn: %s: %s\n", vcattn_status_string(st), msg);
    return 1;
}

/* ---------------------------------------------------------- value parsing */

typedef struct {
    const char *name;
    int value;
} name_value;

static const name_value QK_NAMES[] = {
    {"exact", VCATTN_QK_EXACT}, {"int8", VCATTN_QK_INT8}, {"fp8", VCATTN_QK_FP8},
    {"nvfp4", VCATTN_QK_NVFP4}, {NULL, 0}};
static const name_value P_NAMES[] = {
    {"exact", VCATTN_P_EXACT}, {"bf16", VCATTN_P_BF16}, {"fp8-cast", VCATTN_P_FP8_CAST},
    {"expcast", VCATTN_P_FP8_EXPCAST}, {"nvfp4", VCATTN_P_NVFP4}, {NULL, 0}};
static const name_value V_NAMES[] = {
    {"exact", VCATTN_V_EXACT}, {"fp8-channel", VCATTN_V_FP8_CHANNEL},
    {"fp8-block", VCATTN_V_FP8_BLOCK}, {"nvfp4", VCATTN_V_NVFP4}, {NULL, 0}};
static const name_value BACKEND_NAMES[] = {
    {"auto", VCATTN_BACKEND_AUTO}, {"cpu", VCATTN_BACKEND_CPU}, {"cuda", VCATTN_BACKEND_CUDA},
    {NULL, 0}};
static const name_value DTYPE_NAMES[] = {
    {"bf16", VCATTN_DTYPE_BF16}, {"f16", VCATTN_DTYPE_F16}, {"f32", VCATTN_DTYPE_F32}, {NULL, 0}};
static const name_value LAYOUT_NAMES[] = {{"HND", 0}, {"NHD", 1}, {NULL, 0}};
static const name_value GROUPING_NAMES[] = {{"kmeans", 0}, {"principal", 1}, {NULL, 0}};

/* An option's value in lower case, in place (argv is writable): methods,
 * workloads, studies and sizes are lower-case names, whatever a user types. */
static char *lowered(char *s) {
    for (char *c = s; *c; c++) *c = (char)tolower((unsigned char)*c);
    return s;
}

/* Names match whatever their case (--layout nhd, --dtype BF16). */
static int lookup(const name_value *t, const char *s, int *out) {
    for (; t->name; t++)
        if (strcasecmp(t->name, s) == 0) {
            *out = t->value;
            return 1;
        }
    return 0;
}

static const char *name_of(const name_value *t, int value) {
    for (; t->name; t++)
        if (t->value == value) return t->name;
    return "?";
}

/* "a, b, c" from a name table or a NULL-terminated list, for messages. */
static const char *join(const name_value *t, const char *const *list, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; t ? t[i].name != NULL : list[i] != NULL; i++) {
        int w = snprintf(buf + n, len - n, "%s%s", i ? ", " : "", t ? t[i].name : list[i]);
        if (w < 0 || (size_t)w >= len - n) break;
        n += (size_t)w;
    }
    return buf;
}

/* Whole-string decimal integer in [lo, hi]: no blanks, no trailing junk. */
static int parse_long(const char *s, long lo, long hi, long *out) {
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *end;
    errno = 0;
    long x = strtol(s, &end, 10);
    if (*end || errno || x < lo || x > hi) return 0;
    *out = x;
    return 1;
}

/* strtoull wraps a leading '-' around silently, so digits only. */
static int parse_u64(const char *s, uint64_t *out) {
    if (!isdigit((unsigned char)*s)) return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(s, &end, 10);
    if (*end || errno) return 0;
    *out = (uint64_t)x;
    return 1;
}

/* Whole-string finite number in [lo, hi], or in (lo, hi) when open. */
static int parse_float(const char *s, double lo, double hi, int open, float *out) {
    if (!*s || isspace((unsigned char)*s)) return 0;
    char *end;
    errno = 0;
    double x = strtod(s, &end);
    if (*end || errno || !isfinite(x)) return 0;
    if (open ? !(x > lo && x < hi) : !(x >= lo && x <= hi)) return 0;
    *out = (float)x;
    return 1;
}

/* ---------------------------------------------------------------- options */

#define MAX_EVAL_METHODS 16
#define MAX_DRAWS 64
#define DEFAULT_DRAWS 4  /* eval on a built-in workload: one draw of `small` is
                            too few rows to rank methods a few per cent apart */

typedef struct {
    const char *cmd;                     /* "run" or "eval" */
    const char *q_path, *k_path, *v_path;
    int bf16_files, nhd, layout_set;
    const char *workload;
    uint64_t seed;
    int seed_set;
    int draws;                           /* eval: workload draws pooled, 0 = default */
    const char *method;
    vcattn_backend backend;
    vcattn_dtype dtype;
    int dtype_set;
    int threads;
    int stateless;                       /* --grouping principal: no layer state */
    int progress;                        /* --progress: from the first row on */
    const char *out_path;
    int json;
    const char *study;                   /* eval --study: orders, expcast, studies */
    char methods_buf[512];               /* eval --methods: the list, split in place */
    const char *methods[MAX_EVAL_METHODS];
    int n_methods;                       /* 0: the default list */
    /* switches on top of the method: -1 (floats: NAN) = as the method says */
    int hadamard, k_smoothing, vsmooth, qk, p, v, clusters, iters, q_smoothing, expcast_min_keys;
    float beta, sm_scale, sink_guard;
} options;

typedef enum {
    OPT_HELP, OPT_JSON, OPT_Q, OPT_K, OPT_V, OPT_V_FORMAT, OPT_BF16, OPT_LAYOUT, OPT_WORKLOAD,
    OPT_SEED, OPT_METHOD, OPT_BACKEND, OPT_DTYPE, OPT_THREADS, OPT_OUT, OPT_HADAMARD,
    OPT_NO_HADAMARD, OPT_K_SMOOTHING, OPT_NO_K_SMOOTHING, OPT_VSMOOTH, OPT_NO_VSMOOTH, OPT_QK,
    OPT_P, OPT_CLUSTERS, OPT_ITERS, OPT_BETA, OPT_SM_SCALE, OPT_STUDY, OPT_METHODS, OPT_Q_SMOOTHING, OPT_SINK_GUARD, OPT_SIZE,
    OPT_DRAWS, OPT_EXPCAST_MIN_KEYS, OPT_GROUPING, OPT_PROGRESS
} opt_id;

typedef struct {
    const char *name;
    opt_id id;
    int takes_value;
    int run_only;
} opt_spec;

static const opt_spec OPTS[] = {
    {"-h", OPT_HELP, 0, 0},           {"--help", OPT_HELP, 0, 0},
    {"--json", OPT_JSON, 0, 0},       {"--workload", OPT_WORKLOAD, 1, 0},
    {"--seed", OPT_SEED, 1, 0},       {"--backend", OPT_BACKEND, 1, 0},
    {"--dtype", OPT_DTYPE, 1, 0},     {"--threads", OPT_THREADS, 1, 0},
    {"--q", OPT_Q, 1, 0},             {"--k", OPT_K, 1, 0},
    {"--v", OPT_V, 1, 0},             {"--v-format", OPT_V_FORMAT, 1, 1},
    {"--bf16", OPT_BF16, 0, 0},       {"--layout", OPT_LAYOUT, 1, 0},
    {"--method", OPT_METHOD, 1, 1},   {"--out", OPT_OUT, 1, 1},
    {"--hadamard", OPT_HADAMARD, 0, 1}, {"--no-hadamard", OPT_NO_HADAMARD, 0, 1},
    {"--k-smoothing", OPT_K_SMOOTHING, 0, 1}, {"--no-k-smoothing", OPT_NO_K_SMOOTHING, 0, 1},
    {"--q-smoothing", OPT_Q_SMOOTHING, 0, 0},
    {"--vsmooth", OPT_VSMOOTH, 0, 1}, {"--no-vsmooth", OPT_NO_VSMOOTH, 0, 1},
    {"--qk", OPT_QK, 1, 1},           {"--p", OPT_P, 1, 1},
    {"--clusters", OPT_CLUSTERS, 1, 1}, {"--iters", OPT_ITERS, 1, 1},
    {"--beta", OPT_BETA, 1, 1},       {"--sm-scale", OPT_SM_SCALE, 1, 1},
    {"--sink-guard", OPT_SINK_GUARD, 1, 1}, {"--size", OPT_SIZE, 1, 0},
    {"--study", OPT_STUDY, 1, 0},     {"--methods", OPT_METHODS, 1, 0},
    {"--draws", OPT_DRAWS, 1, 0},     {"--grouping", OPT_GROUPING, 1, 0},
    {"--progress", OPT_PROGRESS, 0, 0}, {"--expcast-min-keys", OPT_EXPCAST_MIN_KEYS, 1, 1},
};
#define NUM_OPTS (sizeof OPTS / sizeof OPTS[0])

/* Value of an enum option, or a usage error listing the choices. */
static int parse_choice(const char *cmd, const char *opt, const char *val, const name_value *t,
                        int *out) {
    char buf[256];
    if (lookup(t, val, out)) return PROCEED;
    return usage_error(cmd, "%s: unknown value '%s' (one of: %s)", opt, val,
                       join(t, NULL, buf, sizeof buf));
}

/* An integer option in [lo, hi] into *out, or a usage error naming the range. */
static int int_option(const char *cmd, const char *opt, const char *val, long lo, long hi, int *out) {
    long n;
    if (!parse_long(val, lo, hi, &n))
        return usage_error(cmd, "%s: '%s' is not an integer in [%ld, %ld]", opt, val, lo, hi);
    *out = (int)n;
    return PROCEED;
}

static int known_workload(const char *name) {
    for (const char *const *w = vcattn_workload_names(); *w; w++)
        if (strcmp(*w, name) == 0) return 1;
    return 0;
}

/* Inputs, outputs and where the call runs: PROCEED, the exit status, or UNHANDLED (not one of these options). */
static int apply_input_option(options *o, int id, const char *a, const char *val, int run) {
    const char *cmd = o->cmd;
    int choice = 0;
    char buf[256];
    int rc = PROCEED;
    switch (id) {
    case OPT_HELP: fputs(run ? USAGE_RUN : USAGE_EVAL, stdout); return 0;
    case OPT_JSON: o->json = 1; break;
    case OPT_Q: o->q_path = val; break;
    case OPT_K: o->k_path = val; break;
    case OPT_V:
        /* --v names both the V file and the V format: a format name wins. */
        if (!lookup(V_NAMES, val, &o->v)) o->v_path = val;
        break;
    case OPT_V_FORMAT: rc = parse_choice(cmd, a, val, V_NAMES, &o->v); break;
    case OPT_BF16: o->bf16_files = 1; break;
    case OPT_LAYOUT:
        rc = parse_choice(cmd, a, val, LAYOUT_NAMES, &o->nhd);
        o->layout_set = 1;
        break;
    case OPT_WORKLOAD:
        if (!known_workload(lowered((char *)val)))
            return usage_error(cmd, "unknown workload '%s' (one of: %s)", val,
                               join(NULL, vcattn_workload_names(), buf, sizeof buf));
        o->workload = val;
        break;
    case OPT_SEED:
        if (!parse_u64(val, &o->seed))
            return usage_error(cmd, "--seed: '%s' is not an unsigned 64-bit integer", val);
        o->seed_set = 1;
        break;
    case OPT_BACKEND:
        rc = parse_choice(cmd, a, val, BACKEND_NAMES, &choice);
        o->backend = (vcattn_backend)choice;
        break;
    case OPT_DTYPE:
        rc = parse_choice(cmd, a, val, DTYPE_NAMES, &choice);
        o->dtype = (vcattn_dtype)choice;
        o->dtype_set = 1;
        break;
    case OPT_THREADS: rc = int_option(cmd, a, val, 0, VCATTN_MAX_THREADS, &o->threads); break;
    case OPT_OUT: o->out_path = val; break;
    case OPT_GROUPING: rc = parse_choice(cmd, a, val, GROUPING_NAMES, &o->stateless); break;
    case OPT_PROGRESS: o->progress = 1; break;
    default: return UNHANDLED;
    }
    return rc;
}

/* The method and its switches: PROCEED, the exit status, or UNHANDLED (not one of these options). */
static int apply_method_option(options *o, int id, const char *a, const char *val) {
    const char *cmd = o->cmd;
    char buf[256];
    int rc = PROCEED;
    switch (id) {
    case OPT_METHOD: {
        vcattn_config probe;
        if (vcattn_config_from_method(lowered((char *)val), &probe) != VCATTN_OK)
            return usage_error(cmd, "unknown method '%s' (one of: %s; each may take +hadamard, then +qsmooth)",
                               val, join(NULL, vcattn_method_names(), buf, sizeof buf));
        o->method = val;
        break;
    }
    case OPT_HADAMARD: o->hadamard = 1; break;
    case OPT_NO_HADAMARD: o->hadamard = 0; break;
    case OPT_K_SMOOTHING: o->k_smoothing = 1; break;
    case OPT_NO_K_SMOOTHING: o->k_smoothing = 0; break;
    case OPT_Q_SMOOTHING: o->q_smoothing = 1; break;
    case OPT_VSMOOTH: o->vsmooth = 1; break;
    case OPT_NO_VSMOOTH: o->vsmooth = 0; break;
    case OPT_QK: rc = parse_choice(cmd, a, val, QK_NAMES, &o->qk); break;
    case OPT_P: rc = parse_choice(cmd, a, val, P_NAMES, &o->p); break;
    case OPT_CLUSTERS: rc = int_option(cmd, a, val, 1, VCATTN_MAX_KMEANS_CLUSTERS, &o->clusters); break;
    case OPT_ITERS: rc = int_option(cmd, a, val, 1, VCATTN_MAX_KMEANS_ITERS, &o->iters); break;
    case OPT_EXPCAST_MIN_KEYS: rc = int_option(cmd, a, val, 0, INT_MAX, &o->expcast_min_keys); break;
    case OPT_SINK_GUARD:
        if (!parse_float(val, 0.0, 1.0, 0, &o->sink_guard))
            return usage_error(cmd, "--sink-guard: '%s' is not a number in [0, 1]", val);
        break;
    case OPT_BETA:
        if (!parse_float(val, -1.0, 1.0, 1, &o->beta))
            return usage_error(cmd, "--beta: '%s' is not a number in (-1, 1)", val);
        break;
    case OPT_SM_SCALE:
        if (!parse_float(val, 0.0, VCATTN_MAX_SM_SCALE, 0, &o->sm_scale))
            return usage_error(cmd, "--sm-scale: '%s' is not a number in [0, %g]", val,
                               (double)VCATTN_MAX_SM_SCALE);
        break;
    default: return UNHANDLED;
    }
    return rc;
}

/* eval's own options: PROCEED, the exit status, or UNHANDLED (not one of these options). */
static int apply_eval_option(options *o, int id, const char *a, const char *val, int run) {
    const char *cmd = o->cmd;
    char buf[256];
    int rc = PROCEED;
    switch (id) {
    case OPT_SIZE:
        if (run) return usage_error(cmd, "--size belongs to eval --study all");
        if (strcmp(lowered((char *)val), "small") != 0)
            return usage_error(cmd, "--size: '%s' is not available: the studies run on the CPU, where only "
                                    "the small presets take minutes (full-size fidelity: vcattn eval "
                                    "--workload wan2.2-720p --backend cuda)", val);
        break;
    case OPT_DRAWS:
        if (run) return usage_error(cmd, "--draws belongs to eval");
        rc = int_option(cmd, a, val, 1, MAX_DRAWS, &o->draws);
        break;
    case OPT_STUDY:
        if (run) return usage_error(cmd, "--study belongs to eval");
        lowered((char *)val);
        if (strcmp(val, "orders") && strcmp(val, "expcast") && strcmp(val, "stats") &&
            strcmp(val, "schedule") && strcmp(val, "studies") && strcmp(val, "all"))
            return usage_error(cmd,
                               "unknown study '%s' (one of: orders, expcast, stats, schedule, studies, all)",
                               val);
        o->study = val;
        break;
    case OPT_METHODS: {
        if (run) return usage_error(cmd, "--methods belongs to eval (run takes --method)");
        if (strlen(val) >= sizeof o->methods_buf) return usage_error(cmd, "--methods: list too long");
        strcpy(o->methods_buf, val);
        lowered(o->methods_buf);
        o->n_methods = 0;
        for (char *m = strtok(o->methods_buf, ","); m; m = strtok(NULL, ",")) {
            vcattn_config probe;
            if (vcattn_config_from_method(m, &probe) != VCATTN_OK)
                return usage_error(cmd, "--methods: unknown method '%s' (one of: %s; each may take +hadamard, "
                                        "then +qsmooth)", m, join(NULL, vcattn_method_names(), buf, sizeof buf));
            if (o->n_methods == MAX_EVAL_METHODS)
                return usage_error(cmd, "--methods: at most %d methods", MAX_EVAL_METHODS);
            o->methods[o->n_methods++] = m;
        }
        if (!o->n_methods) return usage_error(cmd, "--methods: empty list");
        break;
    }
    default: return UNHANDLED;
    }
    return rc;
}

/* Parses argv[2..] of run or eval into o; PROCEED, or the exit status. */
static int parse_options(int argc, char **argv, options *o) {
    const int run = strcmp(o->cmd, "run") == 0;
    const char *cmd = o->cmd;
    for (int i = 2; i < argc; i++) {
        /* --name value, or --name=value */
        char name[64];
        const char *a = argv[i], *inline_val = NULL, *eq = strchr(a, '=');
        if (a[0] == '-' && a[1] == '-' && eq && (size_t)(eq - a) < sizeof name) {
            memcpy(name, a, (size_t)(eq - a));
            name[eq - a] = '\0';
            a = name;
            inline_val = eq + 1;
        }
        const opt_spec *spec = NULL;
        for (size_t j = 0; j < NUM_OPTS; j++)
            if (strcmp(OPTS[j].name, a) == 0) spec = &OPTS[j];
        if (!spec || (spec->run_only && !run)) {
            if (a[0] != '-') return usage_error(cmd, "unexpected argument '%s'", a);
            return usage_error(cmd, "unknown option '%s' for %s", a, cmd);
        }
        const char *val = NULL;
        if (spec->takes_value) {
            if (inline_val) val = inline_val;
            else if (i + 1 >= argc) return usage_error(cmd, "option '%s' needs a value", a);
            else val = argv[++i];
        } else if (inline_val) {
            return usage_error(cmd, "option '%s' takes no value", a);
        }
        int rc = apply_input_option(o, spec->id, a, val, run);
        if (rc == UNHANDLED) rc = apply_method_option(o, spec->id, a, val);
        if (rc == UNHANDLED) rc = apply_eval_option(o, spec->id, a, val, run);
        if (rc != PROCEED) return rc;
    }
    int files = o->q_path || o->k_path || o->v_path;
    if (files && !(o->q_path && o->k_path && o->v_path))
        return usage_error(cmd, "--q, --k and --v go together");
    if (files && (o->workload || o->seed_set))
        return usage_error(cmd, "give either .npy inputs or --workload/--seed, not both");
    if (files && o->draws)
        return usage_error(cmd, "--draws applies to built-in workloads (.npy inputs are one draw)");
    if (o->study && o->draws) return usage_error(cmd, "--draws applies to the method table, not to --study");
    const int draws = o->draws ? o->draws : DEFAULT_DRAWS;
    if (!run && !files && !o->study && o->seed > UINT64_MAX - (uint64_t)(draws - 1))
        return usage_error(cmd, "--seed %llu with %d draws runs past the last seed", (unsigned long long)o->seed,
                           draws);
    if (!files && (o->bf16_files || o->layout_set))
        return usage_error(cmd, "--bf16 and --layout apply to .npy inputs only");
    if (o->out_path && !*o->out_path) return usage_error(cmd, "--out: empty file name");
    return PROCEED;
}

/* The method preset with the switches laid over it. */
static vcattn_config build_config(const options *o) {
    vcattn_config c;
    vcattn_config_from_method(o->method, &c);  /* validated while parsing */
    if (o->hadamard >= 0) c.hadamard = o->hadamard;
    if (o->k_smoothing >= 0) c.k_smoothing = o->k_smoothing;
    if (o->q_smoothing > 0) c.q_smoothing = 1;
    if (o->vsmooth >= 0) c.vsmooth = o->vsmooth;
    if (o->qk >= 0) c.qk_format = (vcattn_qk_format)o->qk;
    if (o->p >= 0) c.p_format = (vcattn_p_format)o->p;
    if (o->v >= 0) c.v_format = (vcattn_v_format)o->v;
    if (o->clusters >= 0) c.kmeans_clusters = o->clusters;
    if (o->iters >= 0) c.kmeans_iters = o->iters;
    if (o->expcast_min_keys >= 0) c.expcast_min_keys = o->expcast_min_keys;
    if (!isnan(o->beta)) c.expcast_beta = o->beta;
    if (!isnan(o->sink_guard)) c.sink_guard = o->sink_guard;
    if (!isnan(o->sm_scale)) c.sm_scale = o->sm_scale;
    c.num_threads = o->threads;
    return c;
}

/* ----------------------------------------------------------------- inputs */

/* q, k, v views, the memory behind them, and the RoPE of a workload. */
typedef struct {
    vcattn_tensor q, k, v;
    vcattn_rope rope;
    int has_rope;
    vcattn_workload w;
    npy_array arr[3];
    void *converted[3];
    char source[256];   /* where the inputs came from, for the report */
} inputs;

/* The RoPE the calls take: NULL for .npy inputs, which have none. */
static const vcattn_rope *inputs_rope(const inputs *in) { return in->has_rope ? &in->rope : NULL; }

static void inputs_free(inputs *in) {
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
static vcattn_status load_inputs(const options *o, inputs *in, char *err) {
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
    in->rope = (vcattn_rope){w->rope_style, w->rope_cos, w->rope_sin, w->rope_cos, w->rope_sin};
    in->has_rope = 1;
    snprintf(in->source, sizeof in->source, "workload %s (seed %llu, %dx%dx%d grid)", w->name,
             (unsigned long long)o->seed, w->frames, w->height, w->width);
    return VCATTN_OK;
}

/* The library's own argument checks (shapes, head dim, strides; not the
 * values) on the loaded inputs, before anything computes with them. */
static vcattn_status validate_inputs(const inputs *in, char *err) {
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

/* -------------------------------------------------------------- printing */


/* JSON has no inf or nan: those become null. */
static void json_num(double x) {
    if (isfinite(x)) printf("%.9g", x);
    else fputs("null", stdout);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_metrics(const vcattn_metrics *m) {
    printf("{\"cosine\": "); json_num(m->cosine);
    printf(", \"rel_l1\": "); json_num(m->rel_l1);
    printf(", \"rel_l2\": "); json_num(m->rel_l2);
    printf(", \"snr_db\": "); json_num(m->snr_db);
    printf(", \"max_abs\": "); json_num(m->max_abs);
    printf(", \"worst_row_rel_l2\": "); json_num(m->worst_row_rel_l2);
    printf(", \"nonfinite\": %lld}", (long long)m->nonfinite);
}

/* "p" is the format the call applied at tokens_k keys (ExpCast falls back
 * to the cast below expcast_min_keys). */
static void json_config(const vcattn_config *c, int64_t tokens_k) {
    /* %.7g: the float32 fields as typed, not their binary expansion; the
     * library keeps them finite. */
    printf("{\"qk\": \"%s\", \"k_smoothing\": %s, \"q_smoothing\": %s, \"hadamard\": %s, \"sm_scale\": %.7g, "
           "\"p\": \"%s\", \"expcast_beta\": %.7g, \"expcast_min_keys\": %d, \"v\": \"%s\", \"vsmooth\": %s, "
           "\"kmeans_clusters\": %d, \"kmeans_iters\": %d, \"sink_guard\": %.7g}",
           name_of(QK_NAMES, c->qk_format), c->k_smoothing ? "true" : "false", c->q_smoothing ? "true" : "false",
           c->hadamard ? "true" : "false", c->sm_scale, name_of(P_NAMES, vcattn_applied_p_format(c, tokens_k)),
           c->expcast_beta, c->expcast_min_keys, name_of(V_NAMES, c->v_format), c->vsmooth ? "true" : "false",
           c->kmeans_clusters, c->kmeans_iters, c->sink_guard);
}

static void print_config(const vcattn_config *c, int64_t tokens_k) {
    const vcattn_p_format p = vcattn_applied_p_format(c, tokens_k);
    printf("qk %s, k-smoothing %s, hadamard %s, p %s", name_of(QK_NAMES, c->qk_format),
           c->k_smoothing ? "on" : "off", c->hadamard ? "on" : "off", name_of(P_NAMES, p));
    if (p != c->p_format) printf(" (ExpCast from %d keys)", c->expcast_min_keys);
    printf(", v %s, vsmooth %s", name_of(V_NAMES, c->v_format), c->vsmooth ? "on" : "off");
    if (c->vsmooth && c->kmeans_clusters) printf(" (%d clusters, %d iters)", c->kmeans_clusters, c->kmeans_iters);
    else if (c->vsmooth) printf(" (auto clusters, %d iters)", c->kmeans_iters);
    if (c->vsmooth) printf(", sink guard %.3g", c->sink_guard);
    if (p == VCATTN_P_FP8_EXPCAST) printf(", beta %.3g", c->expcast_beta);
    if (c->sm_scale > 0.0f) printf(", sm_scale %.6g", c->sm_scale);
}

/* Shape line shared by run and eval. */
static void print_shape(const inputs *in) {
    printf("B=%lld Hq=%lld Hkv=%lld Nq=%lld Nk=%lld D=%lld", (long long)in->q.batch,
           (long long)in->q.heads, (long long)in->k.heads, (long long)in->q.tokens,
           (long long)in->k.tokens, (long long)in->q.head_dim);
}

static void json_shape(const inputs *in) {
    printf("{\"batch\": %lld, \"heads_q\": %lld, \"heads_kv\": %lld, \"tokens_q\": %lld, "
           "\"tokens_kv\": %lld, \"head_dim\": %lld}",
           (long long)in->q.batch, (long long)in->q.heads, (long long)in->k.heads,
           (long long)in->q.tokens, (long long)in->k.tokens, (long long)in->q.head_dim);
}

/* ------------------------------------------------------------------- run */

/* Creates the context; a backend that cannot run here says why. */
static int open_context(vcattn_backend backend, vcattn_context **ctx) {
    vcattn_status st = vcattn_create(ctx, backend);
    if (st == VCATTN_OK) return 0;
    const char *why = "";
    vcattn_backend_available(backend, &why);
    char msg[ERRLEN];
    snprintf(msg, sizeof msg, "%s backend: %s", vcattn_backend_name(backend),
             *why ? why : "cannot create");
    return lib_error(st, msg);
}

/* One call, V-Smooth as --grouping says: k-means through a one-step layer
 * (the call groups from a cold start, as a grouping step does), or without
 * a layer, in the tokens' own order (the drop-in call). */
static vcattn_status attend(vcattn_context *ctx, const vcattn_config *cfg, int stateless,
                            const inputs *in, const vcattn_tensor *out, float *lse) {
    vcattn_layer *layer = NULL;
    vcattn_status st = VCATTN_OK;
    if (cfg->vsmooth && !stateless && (st = vcattn_layer_create(&layer, 1))) return st;
    st = vcattn_attention(ctx, cfg, &in->q, &in->k, &in->v, out, lse, inputs_rope(in), layer);
    vcattn_layer_destroy(layer);
    return st;
}

static int cmd_run(const options *o) {
    vcattn_config cfg = build_config(o);
    vcattn_context *ctx = NULL;
    inputs in;
    char err[ERRLEN];
    float *out = NULL, *lse = NULL;
    double *ref = NULL, *ref_lse = NULL;
    int rc;
    vcattn_status st = load_inputs(o, &in, err);
    if (st) {
        rc = lib_error(st, err);
        goto done;
    }
    if ((rc = open_context(o->backend, &ctx))) goto done;

    const int64_t rows = in.q.batch * in.q.heads * in.q.tokens, d = in.q.head_dim;
    /* +1: an empty shape still gets a pointer; the library then names the problem. */
    out = malloc((size_t)(rows * d + 1) * sizeof *out);
    lse = malloc((size_t)(rows + 1) * sizeof *lse);
    ref = malloc((size_t)(rows * d + 1) * sizeof *ref);
    ref_lse = malloc((size_t)(rows + 1) * sizeof *ref_lse);
    if (!out || !lse || !ref || !ref_lse) {
        rc = lib_error(VCATTN_ERR_OUT_OF_MEMORY, "output buffers");
        goto done;
    }
    vcattn_tensor ot =
        vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, in.q.batch, in.q.heads, in.q.tokens, d);
    const vcattn_rope *rope = inputs_rope(&in);
    const char *backend = vcattn_backend_name(vcattn_context_backend(ctx));

    cli_print_estimate(ctx, &cfg, &in.q, &in.k, &in.v, rope, o->threads ? o->threads : omp_get_max_threads());
    fprintf(stderr, "[1/2] %s on %s ...\n", o->method, backend);
    cli_progress progress;
    cli_progress_begin(&progress, ctx, o->method, o->progress);
    double t0 = cli_now_ms();
    st = attend(ctx, &cfg, o->stateless, &in, &ot, lse);
    double ms = cli_now_ms() - t0;
    cli_progress_end(&progress, ctx);
    if (st) {
        rc = lib_error(st, vcattn_last_error(ctx));
        goto done;
    }
    fprintf(stderr, "[2/2] fp64 reference ...\n");
    if ((st = vcattn_reference_attention(&in.q, &in.k, &in.v, rope, cfg.sm_scale, ref, ref_lse))) {
        rc = lib_error(st, "fp64 reference attention");
        goto done;
    }
    vcattn_metrics m;
    metrics_compute(out, ref, rows, d, &m);
    double lse_err = 0.0;
    for (int64_t i = 0; i < rows; i++) {
        double e = fabs((double)lse[i] - ref_lse[i]);
        lse_err = e > lse_err || isnan(e) ? e : lse_err;
    }
    if (o->out_path) {
        npy_array arr = {.dtype = VCATTN_DTYPE_F32, .ndim = 4, .shape = {in.q.batch, in.q.heads, in.q.tokens, d}, .data = out};
        if ((st = npy_write(o->out_path, &arr, err, sizeof err))) {
            rc = lib_error(st, err);
            goto done;
        }
    }

    if (o->json) {
        printf("{\"backend\": \"%s\", \"method\": ", backend);
        json_str(o->method);
        printf(", \"grouping\": \"%s\"", name_of(GROUPING_NAMES, o->stateless));
        printf(", \"config\": ");
        json_config(&cfg, in.k.tokens);
        printf(", \"source\": ");
        json_str(in.source);
        printf(", \"dtype\": {\"q\": \"%s\", \"k\": \"%s\", \"v\": \"%s\"}, \"shape\": ",
               vcattn_dtype_name(in.q.dtype), vcattn_dtype_name(in.k.dtype),
               vcattn_dtype_name(in.v.dtype));
        json_shape(&in);
        printf(", \"rope\": %s, \"time_ms\": ", in.has_rope ? "true" : "false");
        json_num(ms);
        printf(", \"metrics\": ");
        json_metrics(&m);
        printf(", \"lse_max_abs\": ");
        json_num(lse_err);
        if (o->out_path) {
            printf(", \"out\": ");
            json_str(o->out_path);
        }
        printf("}\n");
    } else {
        printf("backend           %s\n", backend);
        printf("method            %s: ", o->method);
        print_config(&cfg, in.k.tokens);
        if (cfg.vsmooth) printf("; V-Smooth %s", o->stateless ? "in principal order (no layer state)" : "after k-means");
        printf("\ninput             %s, q/k/v %s/%s/%s%s\n", in.source,
               vcattn_dtype_name(in.q.dtype), vcattn_dtype_name(in.k.dtype),
               vcattn_dtype_name(in.v.dtype), in.has_rope ? ", RoPE" : "");
        printf("shape             ");
        print_shape(&in);
        printf("\ntime              %.2f ms\n", ms);
        printf("cosine            %.8f\n", m.cosine);
        printf("rel L1            %.6e\n", m.rel_l1);
        printf("rel L2            %.6e\n", m.rel_l2);
        printf("SNR               %.2f dB\n", m.snr_db);
        printf("max abs error     %.6e\n", m.max_abs);
        printf("worst-row rel L2  %.6e\n", m.worst_row_rel_l2);
        printf("LSE max abs error %.6e\n", lse_err);
        if (m.nonfinite) printf("non-finite output %lld values\n", (long long)m.nonfinite);
        if (o->out_path) printf("output            %s\n", o->out_path);
    }
    rc = 0;
done:
    free(out); free(lse); free(ref); free(ref_lse);
    vcattn_destroy(ctx);
    inputs_free(&in);
    return rc;
}

/* ------------------------------------------------------------------ eval */

static const char *const DEFAULT_EVAL_METHODS[] = {
    "bf16", "fp8-naive", "sage2", "sage2+hadamard", "vsmooth", "vc",
    "sage3-4bit", "sage3-4bit+hadamard", "vsmooth-4bit"};

typedef struct {
    vcattn_metrics m;
    double v_err;        /* |V - V_hat|_F / |V|_F */
    double prob, value;  /* eq. 2 terms, relative to |O_ref| */
    double ms;
    vcattn_backend backend;  /* where O_q ran */
} eval_row;

/* Runs on ctx, or on cpu_ctx when ctx's backend lacks the configuration (the
 * GPU kernel runs only the 8-bit INT8-QK / FP8-PV methods). */
static vcattn_status attention_or_cpu(vcattn_context *ctx, vcattn_context *cpu_ctx,
                                      const vcattn_config *cfg, int stateless, const inputs *in,
                                      const vcattn_tensor *out, vcattn_context **used) {
    *used = ctx;
    vcattn_status st = attend(ctx, cfg, stateless, in, out, NULL);
    if (st == VCATTN_ERR_UNSUPPORTED_CONFIG && cpu_ctx) {
        *used = cpu_ctx;
        st = attend(cpu_ctx, cfg, stateless, in, out, NULL);
    }
    return st;
}

/* Per kv head: V as the attention sees it (input dtype, no RoPE), grouped as a
 * cold-start call of cfg groups it when cfg->vsmooth (as a call without a
 * layer state does with stateless), quantized and rebuilt:
 * |V - V_hat|_F^2 and |V|_F^2 over all heads added to v_sums (if set). With
 * energy set, also the block-mean energy shares in sequence order and in
 * cfg's grouping, averaged over heads, added to it. */
static vcattn_status value_analysis(const vcattn_config *cfg, int stateless, const vcattn_tensor *v,
                                    double v_sums[2], double energy[2]) {
    const int permuted = cfg->vsmooth;
    const int64_t n = v->tokens, d = v->head_dim, heads = v->batch * v->heads;
    float *x = malloc((size_t)(n * d) * sizeof *x);
    float *xp = malloc((size_t)(n * d) * sizeof *xp);
    int32_t *perm = malloc((size_t)n * sizeof *perm);
    vcattn_status st = VCATTN_ERR_OUT_OF_MEMORY;
    double num = 0.0, den = 0.0;
    if (!x || !xp || !perm) goto done;
    for (int64_t g = 0; g < heads; g++) {
        for (int64_t t = 0; t < n; t++)
            vcattn_tensor_load_row(v, g / v->heads, g % v->heads, t, x + t * d);
        if ((permuted || energy) && (st = study_group_rows(cfg, stateless, x, n, d, (uint64_t)g, perm)))
            goto done;
        if (energy) {
            energy[0] += vsmooth_block_mean_energy_share(x, n, d, NULL, ENERGY_BLOCK) / heads;
            energy[1] += vsmooth_block_mean_energy_share(x, n, d, perm, ENERGY_BLOCK) / heads;
        }
        if (v_sums) {
            for (int64_t t = 0; t < n; t++)
                memcpy(xp + t * d, x + (permuted ? perm[t] : t) * d, (size_t)d * sizeof *xp);
            /* x no longer needed: it takes the reconstruction. */
            if ((st = cpu_value_roundtrip(cfg, xp, n, d, x))) goto done;
            for (int64_t i = 0; i < n * d; i++) {
                double e = (double)xp[i] - x[i];
                num += e * e;
                den += (double)xp[i] * xp[i];
            }
        }
    }
    if (v_sums) {
        v_sums[0] += num;
        v_sums[1] += den;
    }
    st = VCATTN_OK;
done:
    free(x); free(xp); free(perm);
    return st;
}

/* eval --study: the fidelity studies on the CPU (tools/studies.c). */
static int cmd_study(const options *o);

/* --study all: orders and expcast on every CPU-size preset. */
static int cmd_study_all(const options *o) {
    static const char *const presets[] = {"small", "wan2.2-small", "longcat-small", "hunyuan-small",
                                          "minimax-small"};
    const size_t count = sizeof presets / sizeof presets[0];
    if (o->json) printf("{\"presets\": [\n");
    for (size_t i = 0; i < count; i++) {
        options each = *o;
        each.workload = presets[i];
        each.study = "studies";
        if (o->json) printf("{\"workload\": \"%s\", \"studies\": ", presets[i]);
        else printf("%s== %s ==\n", i ? "\n" : "", presets[i]);
        int rc = cmd_study(&each);
        if (rc) return rc;
        if (o->json) printf("}%s\n", i + 1 < count ? "," : "");
    }
    if (o->json) printf("]}\n");
    return 0;
}

static int cmd_study(const options *o) {
    if (strcmp(o->study, "all") == 0) return cmd_study_all(o);
    if (strcmp(o->study, "schedule") == 0) {
        study_schedule_row rows[STUDY_SCHEDULE_COUNT];
        const int steps = 40;
        vcattn_status st = study_schedule(o->workload, o->seed, steps, rows);
        if (st) return lib_error(st, "schedule study");
        study_schedule_print(rows, steps, o->json, stdout);
        return 0;
    }
    inputs in;
    char err[ERRLEN];
    vcattn_status st = load_inputs(o, &in, err);
    if (!st) st = validate_inputs(&in, err);
    if (st) {
        int rc = lib_error(st, err);
        inputs_free(&in);
        return rc;
    }
    vcattn_config cfg;
    vcattn_config_from_method("vc", &cfg);
    study_order orders[STUDY_ORDER_COUNT];
    study_expcast ex;
    study_stats stats;
    const int every = strcmp(o->study, "studies") == 0;
    const int want_orders = every || strcmp(o->study, "orders") == 0;
    const int want_ex = every || strcmp(o->study, "expcast") == 0;
    const int want_stats = every || strcmp(o->study, "stats") == 0;
    if (want_orders) {
        fprintf(stderr, "[study] token orders ...\n");
        st = study_orders(&in.v, in.w.frames, in.w.height, in.w.width, &cfg, orders);
    }
    if (!st && want_ex) {
        fprintf(stderr, "[study] ExpCast rows ...\n");
        st = study_expcast_rows(&in.q, &in.k, inputs_rope(&in), cfg.sm_scale, cfg.expcast_beta, &ex);
    }
    if (!st && want_stats) st = study_tensor_stats(&in.k, &in.v, &stats);
    int rc = 0;
    if (st) rc = lib_error(st, "study");
    else {
        if (!o->json) printf("%s\n\n", in.source);
        study_print(want_orders ? orders : NULL, want_ex ? &ex : NULL, want_stats ? &stats : NULL, o->json, stdout);
    }
    inputs_free(&in);
    return rc;
}

/* The methods the summary lines compare: the baseline first. */
static const char *const EVAL_FOCUS[] = {"sage2", "vsmooth", "vc"};

/* One method's sums over the draws. */
typedef struct {
    metrics_sums out, pv;     /* O_q and O_pv against the reference */
    long double value_ee;     /* |O_pv - O_q|^2 */
    double v_sums[2];         /* |V - V_hat|^2, |V|^2 */
    double rel_l2[MAX_DRAWS]; /* of each draw alone */
} eval_sums;

/* Adds |a - b|^2 over count values to *ee. */
static void add_sq_diff(const float *a, const float *b, int64_t count, long double *ee) {
    for (int64_t i = 0; i < count; i++) {
        double e = (double)a[i] - b[i];
        *ee += (long double)e * e;
    }
}

static void print_per_draw(const options *o, int draws, const char *const *methods, size_t count,
                           const eval_sums *sums) {
    const eval_sums *f[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < count; i++)
            if (strcmp(methods[i], EVAL_FOCUS[k]) == 0) f[k] = &sums[i];
    printf("Per draw, rel L2 (seeds %llu..%llu):\n", (unsigned long long)o->seed,
           (unsigned long long)(o->seed + (uint64_t)draws - 1));
    for (int k = 0; k < 3; k++) {
        if (!f[k]) continue;
        printf("  %-8s", EVAL_FOCUS[k]);
        for (int d = 0; d < draws; d++) printf(" %.3e", f[k]->rel_l2[d]);
        printf("\n");
    }
    for (int k = 1; k < 3 && f[0]; k++) {
        if (!f[k]) continue;
        int below = 0;
        for (int d = 0; d < draws; d++) below += f[k]->rel_l2[d] < f[0]->rel_l2[d];
        printf("%s%s below sage2 on %d of %d draws", k == 1 || !f[1] ? "" : "; ", EVAL_FOCUS[k], below, draws);
    }
    if (f[0] && (f[1] || f[2])) printf(".\n");
}

/* Everything eval reports: the rows of its methods and what they share. */
typedef struct {
    const char *const *methods;
    size_t n;
    int draws;
    eval_row rows[MAX_EVAL_METHODS];
    eval_sums *sums;
    double energy[2];       /* block-mean energy share: sequence order, grouped */
    int clusters;           /* of the grouping the energy share is measured in */
    const char *backend;
    double share[3];        /* value-term share of EVAL_FOCUS[f] */
    int dominates[3], found[3], n_found;
} eval_report;

/* Buffers one draw of eval needs: the method's output, its exact-V output,
 * the FP64 reference. */
typedef struct {
    float *oq, *opv;
    double *ref;
} eval_buffers;

/* One method on one draw: O_q, O_pv (quantized P, exact V), their sums. */
static int eval_method(const options *o, vcattn_context *ctx, vcattn_context *cpu_ctx, const char *method,
                       const inputs *in, const eval_buffers *buf, int draw, int draws, eval_row *r,
                       eval_sums *sm) {
    const int64_t b = in->q.batch, hq = in->q.heads, nq = in->q.tokens, d = in->q.head_dim;
    const int64_t rows = b * hq * nq;
    vcattn_tensor tq = vcattn_tensor_bhnd(buf->oq, VCATTN_DTYPE_F32, b, hq, nq, d);
    vcattn_tensor tpv = vcattn_tensor_bhnd(buf->opv, VCATTN_DTYPE_F32, b, hq, nq, d);
    vcattn_config cfg;
    vcattn_config_from_method(method, &cfg);
    cfg.num_threads = o->threads;
    if (o->q_smoothing > 0) cfg.q_smoothing = 1;
    vcattn_context *used, *pv_used;
    cli_progress progress, cpu_progress;
    cli_progress_begin(&progress, ctx, method, o->progress);
    if (cpu_ctx) cli_progress_begin(&cpu_progress, cpu_ctx, method, o->progress);
    double t0 = cli_now_ms();
    vcattn_status st = attention_or_cpu(ctx, cpu_ctx, &cfg, o->stateless, in, &tq, &used);
    r->ms += (cli_now_ms() - t0) / draws;
    r->backend = vcattn_context_backend(used);
    /* O_pv: quantized P, exact V. V-Smooth stays as the method has it: its
     * permutation reorders the key tiles, and with them the running maxima
     * P is encoded against, so turning it off would move P error into the
     * value term; with exact V its demeaning is exact. */
    vcattn_config pv = cfg;
    pv.v_format = VCATTN_V_EXACT;
    int own_pv = cfg.v_format == VCATTN_V_EXACT;
    if (!st && !own_pv) st = attention_or_cpu(ctx, cpu_ctx, &pv, o->stateless, in, &tpv, &pv_used);
    else pv_used = used;
    cli_progress_end(&progress, ctx);
    if (cpu_ctx) cli_progress_end(&cpu_progress, cpu_ctx);
    if (st) {
        char msg[ERRLEN + 64];
        snprintf(msg, sizeof msg, "%s: %s", method, vcattn_last_error(own_pv ? used : pv_used));
        return lib_error(st, msg);
    }
    const float *o_pv = own_pv ? buf->oq : buf->opv;
    vcattn_metrics alone;
    metrics_compute(buf->oq, buf->ref, rows, d, &alone);
    sm->rel_l2[draw] = alone.rel_l2;
    metrics_sums_add(&sm->out, buf->oq, buf->ref, rows, d);
    metrics_sums_add(&sm->pv, o_pv, buf->ref, rows, d);
    add_sq_diff(o_pv, buf->oq, rows * d, &sm->value_ee);
    if (cfg.v_format != VCATTN_V_EXACT && (st = value_analysis(&cfg, o->stateless, &in->v, sm->v_sums, NULL)))
        return lib_error(st, "value analysis");
    return 0;
}

/* Every method on one draw (loaded into in), then the draw's energy shares. */
static int eval_draw(const options *o, vcattn_context *ctx, vcattn_context *cpu_ctx, const inputs *in,
                     eval_buffers *buf, int draw, eval_report *rep) {
    fprintf(stderr, "[draw %d/%d] [0/%zu] fp64 reference ...\n", draw + 1, rep->draws, rep->n);
    vcattn_status st = vcattn_reference_attention(&in->q, &in->k, &in->v, inputs_rope(in), 0.0f, buf->ref, NULL);
    if (st) return lib_error(st, "fp64 reference attention");
    for (size_t i = 0; i < rep->n; i++) {
        fprintf(stderr, "[draw %d/%d] [%zu/%zu] %s ...\n", draw + 1, rep->draws, i + 1, rep->n, rep->methods[i]);
        int rc = eval_method(o, ctx, cpu_ctx, rep->methods[i], in, buf, draw, rep->draws, &rep->rows[i],
                             &rep->sums[i]);
        if (rc) return rc;
    }
    vcattn_config vc;  /* the grouping the energy shares are measured in */
    vcattn_config_from_method("vc", &vc);
    double e[2] = {0.0, 0.0};
    if ((st = value_analysis(&vc, 0, &in->v, NULL, e))) return lib_error(st, "value analysis");
    rep->energy[0] += e[0] / rep->draws;
    rep->energy[1] += e[1] / rep->draws;
    rep->clusters = vsmooth_cluster_count(&vc, in->k.tokens);
    return 0;
}

/* The rows' metrics and eq. 2 terms from the sums, and whether the value
 * term dominates (share > 1/2) where V-Smooth should help. */
static void eval_finish(eval_report *rep) {
    for (size_t i = 0; i < rep->n; i++) {
        eval_row *r = &rep->rows[i];
        const eval_sums *sm = &rep->sums[i];
        vcattn_metrics pm;
        metrics_sums_finish(&sm->out, &r->m);
        metrics_sums_finish(&sm->pv, &pm);
        r->prob = pm.rel_l2;
        r->value = sm->out.rr > 0 ? (double)sqrtl(sm->value_ee / sm->out.rr) : 0.0;
        r->v_err = sm->v_sums[1] > 0.0 ? sqrt(sm->v_sums[0] / sm->v_sums[1]) : 0.0;
    }
    for (int f = 0; f < 3; f++)
        for (size_t i = 0; i < rep->n; i++)
            if (strcmp(rep->methods[i], EVAL_FOCUS[f]) == 0) {
                double s = rep->rows[i].prob + rep->rows[i].value;
                rep->share[f] = s > 0.0 ? rep->rows[i].value / s : 0.0;
                rep->dominates[f] = rep->share[f] > 0.5;
                rep->found[f] = 1;
            }
    for (int f = 0; f < 3; f++) rep->n_found += rep->found[f];
}

static void eval_print_json(const options *o, const inputs *in, const eval_report *rep) {
    printf("{\"workload\": ");
    json_str(in->source);
    printf(", \"grouping\": \"%s\"", name_of(GROUPING_NAMES, o->stateless));
    printf(", \"backend\": \"%s\", \"dtype\": \"%s\", \"draws\": %d, \"shape\": ", rep->backend,
           vcattn_dtype_name(in->q.dtype), rep->draws);
    json_shape(in);
    printf(", \"methods\": [");
    for (size_t i = 0; i < rep->n; i++) {
        const eval_row *r = &rep->rows[i];
        double s = r->prob + r->value;
        printf("%s{\"method\": \"%s\", \"metrics\": ", i ? ", " : "", rep->methods[i]);
        json_metrics(&r->m);
        printf(", \"v_quant_rel_l2\": "); json_num(r->v_err);
        printf(", \"prob_term\": "); json_num(r->prob);
        printf(", \"value_term\": "); json_num(r->value);
        printf(", \"value_share\": "); json_num(s > 0.0 ? r->value / s : 0.0);
        printf(", \"time_ms\": "); json_num(r->ms);
        printf(", \"backend\": \"%s\", \"rel_l2_per_draw\": [", vcattn_backend_name(r->backend));
        for (int d = 0; d < rep->draws; d++) {
            printf("%s", d ? ", " : "");
            json_num(rep->sums[i].rel_l2[d]);
        }
        printf("]}");
    }
    printf("], \"energy_share\": {\"block\": %d, \"stateless\": ", ENERGY_BLOCK);
    json_num(rep->energy[0]);
    printf(", \"grouped\": ");
    json_num(rep->energy[1]);
    printf("}, \"value_term_dominates\": {");
    for (int f = 0, k = 0; f < 3; f++)
        if (rep->found[f])
            printf("%s\"%s\": %s", k++ ? ", " : "", EVAL_FOCUS[f], rep->dominates[f] ? "true" : "false");
    printf("}}\n");
}

/* "... the value term dominates for X but not for Y." */
static void print_dominance(const eval_report *rep) {
    printf("Value-term share of the output error:");
    for (int f = 0; f < 3; f++) printf(" %s %.1f%%%s", EVAL_FOCUS[f], 100.0 * rep->share[f], f < 2 ? "," : "");
    int n_dom = rep->dominates[0] + rep->dominates[1] + rep->dominates[2];
    if (n_dom == 3) printf(": the value term dominates for all three.\n");
    else if (n_dom == 0) printf(": the value term dominates for none of them.\n");
    else {
        printf(": the value term dominates for");
        for (int f = 0, k = 0; f < 3; f++)
            if (rep->dominates[f]) printf("%s %s", k++ ? "," : "", EVAL_FOCUS[f]);
        printf(" but not for");
        for (int f = 0, k = 0; f < 3; f++)
            if (!rep->dominates[f]) printf("%s %s", k++ ? "," : "", EVAL_FOCUS[f]);
        printf(".\n");
    }
}

/* The line a person acts on: how the default method compares with sage2 on
 * these inputs, and which 8-bit method was the most faithful. */
static void print_conclusion(const eval_report *rep) {
    const eval_row *vc = NULL, *sage2 = NULL, *best = NULL;
    const char *best_name = NULL;
    for (size_t i = 0; i < rep->n; i++) {
        const char *m = rep->methods[i];
        const eval_row *r = &rep->rows[i];
        if (strcmp(m, "vc") == 0) vc = r;
        if (strcmp(m, "sage2") == 0) sage2 = r;
        const int better = !best || r->m.snr_db > best->m.snr_db ||
                           (r->m.snr_db == best->m.snr_db && strcmp(m, "vc") == 0);  /* a tie goes to the default */
        if (strstr(m, "4bit") == NULL && strcmp(m, "bf16") != 0 && better) {
            best = r;
            best_name = m;
        }
    }
    if (!vc || !sage2) return;
    const double gain = vc->m.snr_db - sage2->m.snr_db;
    printf("In short: vc, the default, is %.2f dB %s sage2 on these inputs (SNR against FP64); the most faithful "
           "8-bit method here is %s (%.2f dB).%s\n", fabs(gain), gain >= 0.0 ? "above" : "below", best_name,
           best->m.snr_db, gain >= 0.0 ? "" : " Here sage2 is the more faithful choice.");
}

static void eval_print_text(const options *o, const inputs *in, const eval_report *rep) {
    printf("%s, ", in->source);
    print_shape(in);
    printf(", %s inputs, backend %s, V-Smooth %s\n\n", vcattn_dtype_name(in->q.dtype), rep->backend,
           o->stateless ? "in principal order (no layer state)" : "after k-means");
    printf("%-20s %10s %10s %10s %7s %10s %9s %9s %9s %6s %9s %s\n", "method", "cosine", "rel L1",
           "rel L2", "SNR dB", "worst row", "V-q err", "prob", "value", "value%", "time ms", "backend");
    for (size_t i = 0; i < rep->n; i++) {
        const eval_row *r = &rep->rows[i];
        double s = r->prob + r->value;
        printf("%-20s %10.7f %10.3e %10.3e %7.2f %10.3e %9.3e %9.3e %9.3e %5.1f%% %9.1f %s\n",
               rep->methods[i], r->m.cosine, r->m.rel_l1, r->m.rel_l2, r->m.snr_db, r->m.worst_row_rel_l2,
               r->v_err, r->prob, r->value, s > 0.0 ? 100.0 * r->value / s : 0.0, r->ms,
               vcattn_backend_name(r->backend));
    }
    printf("\nprob = |O_ref - O_pv| / |O_ref|, value = |O_pv - O_q| / |O_ref| (eq. 2),\n"
           "O_pv: the method with exact V (same grouping; on the cpu backend when\n"
           "the row's backend has no exact-V path); V-q err = |V - V_hat|_F / |V|_F.\n");
    if (o->stateless)
        printf("V block-mean energy share (%d-row blocks, mean over heads): %.1f%% in sequence "
               "order, %.1f%% in principal order\n", ENERGY_BLOCK, 100.0 * rep->energy[0], 100.0 * rep->energy[1]);
    else
        printf("V block-mean energy share (%d-row blocks, mean over heads): %.1f%% in sequence "
               "order, %.1f%% after k-means grouping (%d clusters)\n",
               ENERGY_BLOCK, 100.0 * rep->energy[0], 100.0 * rep->energy[1], rep->clusters);
    if (rep->draws > 1) print_per_draw(o, rep->draws, rep->methods, rep->n, rep->sums);
    if (rep->n_found == 3) print_dominance(rep);
    print_conclusion(rep);
}

static int cmd_eval(const options *o) {
    if (o->study) return cmd_study(o);
    vcattn_context *ctx = NULL, *cpu_ctx = NULL;
    inputs in;
    char err[ERRLEN];
    eval_buffers buf = {NULL, NULL, NULL};
    eval_report rep;
    memset(&rep, 0, sizeof rep);
    memset(&in, 0, sizeof in);
    rep.n = o->n_methods ? (size_t)o->n_methods : sizeof DEFAULT_EVAL_METHODS / sizeof DEFAULT_EVAL_METHODS[0];
    rep.methods = o->n_methods ? o->methods : DEFAULT_EVAL_METHODS;
    rep.draws = o->q_path ? 1 : o->draws ? o->draws : DEFAULT_DRAWS;
    int rc;
    if (!(rep.sums = calloc(rep.n, sizeof *rep.sums))) {
        rc = lib_error(VCATTN_ERR_OUT_OF_MEMORY, "eval sums");
        goto done;
    }
    if ((rc = open_context(o->backend, &ctx))) goto done;
    if (vcattn_context_backend(ctx) != VCATTN_BACKEND_CPU && (rc = open_context(VCATTN_BACKEND_CPU, &cpu_ctx)))
        goto done;
    rep.backend = vcattn_backend_name(vcattn_context_backend(ctx));
    for (int draw = 0; draw < rep.draws; draw++) {
        options each = *o;
        each.seed = o->seed + (uint64_t)draw;
        inputs_free(&in);
        vcattn_status st = load_inputs(&each, &in, err);
        if (!st) st = validate_inputs(&in, err);
        if (st) {
            rc = lib_error(st, err);
            goto done;
        }
        if (!buf.ref) {  /* every draw of a workload has the same shape */
            const size_t count = (size_t)(in.q.batch * in.q.heads * in.q.tokens * in.q.head_dim);
            buf.oq = malloc(count * sizeof *buf.oq);
            buf.opv = malloc(count * sizeof *buf.opv);
            buf.ref = malloc(count * sizeof *buf.ref);
            if (!buf.oq || !buf.opv || !buf.ref) {
                rc = lib_error(VCATTN_ERR_OUT_OF_MEMORY, "output buffers");
                goto done;
            }
        }
        if ((rc = eval_draw(o, ctx, cpu_ctx, &in, &buf, draw, &rep))) goto done;
    }
    if (rep.draws > 1)  /* load_inputs named the last draw's seed */
        snprintf(in.source, sizeof in.source, "workload %s (seeds %llu..%llu pooled, %dx%dx%d grid)", in.w.name,
                 (unsigned long long)o->seed, (unsigned long long)(o->seed + (uint64_t)rep.draws - 1),
                 in.w.frames, in.w.height, in.w.width);
    eval_finish(&rep);
    if (o->json) eval_print_json(o, &in, &rep);
    else eval_print_text(o, &in, &rep);
    rc = 0;
done:
    free(buf.oq); free(buf.opv); free(buf.ref); free(rep.sums);
    vcattn_destroy(cpu_ctx);
    vcattn_destroy(ctx);
    inputs_free(&in);
    return rc;
}

/* --------------------------------------------------------------- expcast */

static int cmd_expcast(int argc, char **argv) {
    float beta = -0.35f;
    int json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE_EXPCAST, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--beta") == 0) {
            if (i + 1 >= argc) return usage_error("expcast", "option '--beta' needs a value");
            if (!parse_float(argv[++i], -1.0, 1.0, 1, &beta))
                return usage_error("expcast", "--beta: '%s' is not a number in (-1, 1)", argv[i]);
        } else {
            return usage_error("expcast", a[0] == '-' ? "unknown option '%s' for expcast"
                                                      : "unexpected argument '%s'", a);
        }
    }
    expcast_facts f;
    expcast_compute(beta, &f);
    expcast_print(&f, json, stdout);
    return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    /* A write past the file-size limit then fails with EFBIG and npy_write
     * removes its temporary file, instead of SIGXFSZ killing the process. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("vcattn %s\n", vcattn_version_string());
        return 0;
    }
    if (strcmp(cmd, "expcast") == 0) return cmd_expcast(argc, argv);
    if (strcmp(cmd, "run") != 0 && strcmp(cmd, "eval") != 0)
        return usage_error(NULL, cmd[0] == '-' ? "unknown option '%s'" : "unknown command '%s'",
                           cmd);

    options o = {0};
    o.cmd = cmd;
    o.method = "vc";
    o.backend = VCATTN_BACKEND_AUTO;
    o.dtype = VCATTN_DTYPE_BF16;
    o.hadamard = o.k_smoothing = o.vsmooth = o.qk = o.p = o.v = o.clusters = o.iters = o.expcast_min_keys = -1;
    o.beta = o.sm_scale = o.sink_guard = NAN;
    int rc = parse_options(argc, argv, &o);
    if (rc != PROCEED) return rc;
    if (!o.q_path && !o.workload) o.workload = "small";
    /* --threads bounds everything OpenMP runs here: the reference too. */
    if (o.threads > 0) omp_set_num_threads(o.threads);
    return strcmp(cmd, "run") == 0 ? cmd_run(&o) : cmd_eval(&o);
}
