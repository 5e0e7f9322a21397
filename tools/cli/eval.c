/* vcattn command line: `vcattn eval`: every method on one workload, and the fidelity studies. */
#include "cli.h"

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

/* eval --study: the fidelity studies on the CPU (lab/studies.c). */
static int cmd_study(const options *o);

/* --study all: orders and expcast on every CPU-size preset. */
static int cmd_study_all(const options *o) {
    static const char *const presets[] = {"small", "wan2.2-small", "longcat-small", "hunyuan-small",
                                          "minimax-small"};
    const size_t count = sizeof presets / sizeof presets[0];
    json_writer w = {0};
    if (o->json) {
        json_object(&w, NULL);
        json_array(&w, "presets");
    }
    for (size_t i = 0; i < count; i++) {
        options each = *o;
        each.workload = presets[i];
        each.study = "studies";
        if (o->json) {
            json_object(&w, NULL);
            json_string(&w, "workload", presets[i]);
            json_value_follows(&w, "studies");  /* the studies' own JSON */
        } else {
            printf("%s== %s ==\n", i ? "\n" : "", presets[i]);
        }
        int rc = cmd_study(&each);
        if (rc) return rc;
        if (o->json) json_end(&w, '}');
    }
    if (o->json) {
        json_end(&w, ']');
        json_end(&w, '}');
    }
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
    if (o->probe_rows >= 0) cfg.vsmooth_probe_rows = o->probe_rows;
    if (o->order_rows >= 0) cfg.vsmooth_order_rows = o->order_rows;
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
    json_writer w = {0};
    json_object(&w, NULL);
    json_string(&w, "workload", in->source);
    json_string(&w, "grouping", name_of(GROUPING_NAMES, o->stateless));
    json_string(&w, "backend", rep->backend);
    json_string(&w, "dtype", vcattn_dtype_name(in->q.dtype));
    json_int(&w, "draws", rep->draws);
    json_shape(&w, "shape", in);
    json_array(&w, "methods");
    for (size_t i = 0; i < rep->n; i++) {
        const eval_row *r = &rep->rows[i];
        double s = r->prob + r->value;
        json_object(&w, NULL);
        json_string(&w, "method", rep->methods[i]);
        json_metrics(&w, "metrics", &r->m);
        json_number(&w, "v_quant_rel_l2", r->v_err);
        json_number(&w, "prob_term", r->prob);
        json_number(&w, "value_term", r->value);
        json_number(&w, "value_share", s > 0.0 ? r->value / s : 0.0);
        json_number(&w, "time_ms", r->ms);
        json_string(&w, "backend", vcattn_backend_name(r->backend));
        json_array(&w, "rel_l2_per_draw");
        for (int d = 0; d < rep->draws; d++) json_number(&w, NULL, rep->sums[i].rel_l2[d]);
        json_end(&w, ']');
        json_end(&w, '}');
    }
    json_end(&w, ']');
    json_object(&w, "energy_share");
    json_int(&w, "block", ENERGY_BLOCK);
    json_number(&w, "stateless", rep->energy[0]);
    json_number(&w, "grouped", rep->energy[1]);
    json_end(&w, '}');
    json_object(&w, "value_term_dominates");
    for (int f = 0; f < 3; f++)
        if (rep->found[f]) json_bool(&w, EVAL_FOCUS[f], rep->dominates[f]);
    json_end(&w, '}');
    json_end(&w, '}');
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

int cmd_eval(const options *o) {
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
