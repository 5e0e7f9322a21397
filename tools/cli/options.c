/* vcattn command line: the usage texts, value parsing, the options and the config they build. */
#include "cli.h"

const char USAGE[] =
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
    "  --probe-rows N  V-Smooth's block centres weighted by the attention of N\n"
    "                  sampled query rows (0 = the plain mean; vc: 32)\n"
    "  --order-rows N  a grouping step takes, per key head, k-means or the\n"
    "                  principal order by the output error on N sampled query\n"
    "                  rows (0 = k-means; vc: 256)\n"
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
    "  --probe-rows N            every method with V-Smooth's attention probe\n"
    "                            of N query rows\n"
    "  --order-rows N            every method's grouping step choosing each key\n"
    "                            head's order on N sampled rows\n"
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

const char USAGE_EXPCAST[] =
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
int usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("vcattn: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'vcattn%s%s --help'.\n", cmd ? " " : "", cmd ? cmd : "");
    return EXIT_USAGE;
}

/* A library error: the status and the message behind it, exit status 1. */
int lib_error(vcattn_status st, const char *msg) {
    fprintf(stderr, "vcattn: %s: %s\n", vcattn_status_string(st), msg);
    return 1;
}

/* ---------------------------------------------------------- value parsing */


const name_value QK_NAMES[] = {
    {"exact", VCATTN_QK_EXACT}, {"int8", VCATTN_QK_INT8}, {"fp8", VCATTN_QK_FP8},
    {"nvfp4", VCATTN_QK_NVFP4}, {NULL, 0}};
const name_value P_NAMES[] = {
    {"exact", VCATTN_P_EXACT}, {"bf16", VCATTN_P_BF16}, {"fp8-cast", VCATTN_P_FP8_CAST},
    {"expcast", VCATTN_P_FP8_EXPCAST}, {"nvfp4", VCATTN_P_NVFP4}, {NULL, 0}};
const name_value V_NAMES[] = {
    {"exact", VCATTN_V_EXACT}, {"fp8-channel", VCATTN_V_FP8_CHANNEL},
    {"fp8-block", VCATTN_V_FP8_BLOCK}, {"nvfp4", VCATTN_V_NVFP4}, {NULL, 0}};
static const name_value BACKEND_NAMES[] = {
    {"auto", VCATTN_BACKEND_AUTO}, {"cpu", VCATTN_BACKEND_CPU}, {"cuda", VCATTN_BACKEND_CUDA},
    {NULL, 0}};
static const name_value DTYPE_NAMES[] = {
    {"bf16", VCATTN_DTYPE_BF16}, {"f16", VCATTN_DTYPE_F16}, {"f32", VCATTN_DTYPE_F32}, {NULL, 0}};
static const name_value LAYOUT_NAMES[] = {{"HND", 0}, {"NHD", 1}, {NULL, 0}};
const name_value GROUPING_NAMES[] = {{"kmeans", 0}, {"principal", 1}, {NULL, 0}};

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

const char *name_of(const name_value *t, int value) {
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
int parse_float(const char *s, double lo, double hi, int open, float *out) {
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



typedef enum {
    OPT_HELP, OPT_JSON, OPT_Q, OPT_K, OPT_V, OPT_V_FORMAT, OPT_BF16, OPT_LAYOUT, OPT_WORKLOAD,
    OPT_SEED, OPT_METHOD, OPT_BACKEND, OPT_DTYPE, OPT_THREADS, OPT_OUT, OPT_HADAMARD,
    OPT_NO_HADAMARD, OPT_K_SMOOTHING, OPT_NO_K_SMOOTHING, OPT_VSMOOTH, OPT_NO_VSMOOTH, OPT_QK,
    OPT_P, OPT_CLUSTERS, OPT_ITERS, OPT_BETA, OPT_SM_SCALE, OPT_STUDY, OPT_METHODS, OPT_Q_SMOOTHING, OPT_SINK_GUARD, OPT_SIZE,
    OPT_DRAWS, OPT_EXPCAST_MIN_KEYS, OPT_GROUPING, OPT_PROGRESS, OPT_PROBE_ROWS, OPT_ORDER_ROWS
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
    {"--q-smoothing", OPT_Q_SMOOTHING, 0, 0}, {"--probe-rows", OPT_PROBE_ROWS, 1, 0},
    {"--order-rows", OPT_ORDER_ROWS, 1, 0},
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
    case OPT_PROBE_ROWS: rc = int_option(cmd, a, val, 0, VCATTN_MAX_PROBE_ROWS, &o->probe_rows); break;
    case OPT_ORDER_ROWS: rc = int_option(cmd, a, val, 0, VCATTN_MAX_ORDER_ROWS, &o->order_rows); break;
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
int parse_options(int argc, char **argv, options *o) {
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
vcattn_config build_config(const options *o) {
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
    if (o->probe_rows >= 0) c.vsmooth_probe_rows = o->probe_rows;
    if (o->order_rows >= 0) c.vsmooth_order_rows = o->order_rows;
    if (!isnan(o->beta)) c.expcast_beta = o->beta;
    if (!isnan(o->sink_guard)) c.sink_guard = o->sink_guard;
    if (!isnan(o->sm_scale)) c.sm_scale = o->sm_scale;
    c.num_threads = o->threads;
    return c;
}
