#ifndef VCATTN_CLI_H
#define VCATTN_CLI_H
/* The command-line tool, split by concern: options.c (usage, parsing, the
 * config), inputs.c (.npy files and workloads), report.c (JSON and text
 * pieces), run.c, eval.c, main.c (expcast and the entry point). This header
 * is what they share; each file includes it first. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "vcattn.h"
#include "vcattn_inspect.h"
#include "workloads.h"
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
#define ENERGY_BLOCK VCATTN_TILE  /* rows per V-Smooth block */

typedef struct {
    const char *name;
    int value;
} name_value;

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
    int hadamard, k_smoothing, vsmooth, qk, p, v, clusters, iters, q_smoothing, expcast_min_keys, probe_rows,
        order_rows;
    float beta, sm_scale, sink_guard;
} options;

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

/* json.c: members are written in order; key is NULL for an array's elements.
 * json_value_follows: the caller prints the member's value itself. */
#define JSON_MAX_DEPTH 8
typedef struct {
    int depth;
    int count[JSON_MAX_DEPTH];  /* members written so far at each open level */
} json_writer;
void json_quoted(const char *s);
void json_object(json_writer *w, const char *key);
void json_array(json_writer *w, const char *key);
void json_end(json_writer *w, char bracket);
void json_string(json_writer *w, const char *key, const char *s);
void json_number(json_writer *w, const char *key, double x);
void json_float(json_writer *w, const char *key, float x);
void json_int(json_writer *w, const char *key, long long x);
void json_bool(json_writer *w, const char *key, int b);
void json_value_follows(json_writer *w, const char *key);

/* options.c */
extern const char USAGE[];
extern const char USAGE_EXPCAST[];
int usage_error(const char *cmd, const char *fmt, ...);
int lib_error(vcattn_status st, const char *msg);
extern const name_value QK_NAMES[];
extern const name_value P_NAMES[];
extern const name_value V_NAMES[];
extern const name_value GROUPING_NAMES[];
const char *name_of(const name_value *t, int value);
int parse_float(const char *s, double lo, double hi, int open, float *out);
int parse_options(int argc, char **argv, options *o);
vcattn_config build_config(const options *o);

/* inputs.c */
const vcattn_rope *inputs_rope(const inputs *in);
void inputs_free(inputs *in);
vcattn_status load_inputs(const options *o, inputs *in, char *err);
vcattn_status validate_inputs(const inputs *in, char *err);

/* report.c */
void json_metrics(json_writer *w, const char *key, const vcattn_metrics *m);
void json_config(json_writer *w, const char *key, const vcattn_config *c, int64_t tokens_k);
void print_config(const vcattn_config *c, int64_t tokens_k);
void print_shape(const inputs *in);
void json_shape(json_writer *w, const char *key, const inputs *in);

/* run.c */
int open_context(vcattn_backend backend, vcattn_context **ctx);
vcattn_status attend(vcattn_context *ctx, const vcattn_config *cfg, int stateless,
    const inputs *in, const vcattn_tensor *out, float *lse);
int cmd_run(const options *o);

/* eval.c */
int cmd_eval(const options *o);

#endif
