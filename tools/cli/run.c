/* vcattn command line: `vcattn run`: one attention call, timed and measured against the FP64 reference. */
#include "cli.h"

/* Creates the context; a backend that cannot run here says why. */
int open_context(vcattn_backend backend, vcattn_context **ctx) {
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
vcattn_status attend(vcattn_context *ctx, const vcattn_config *cfg, int stateless,
                            const inputs *in, const vcattn_tensor *out, float *lse) {
    vcattn_layer *layer = NULL;
    vcattn_status st = VCATTN_OK;
    if (cfg->vsmooth && !stateless && (st = vcattn_layer_create(&layer, 1))) return st;
    st = vcattn_attention(ctx, cfg, &in->q, &in->k, &in->v, out, lse, inputs_rope(in), layer);
    vcattn_layer_destroy(layer);
    return st;
}

int cmd_run(const options *o) {
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
        json_writer w = {0};
        json_object(&w, NULL);
        json_string(&w, "backend", backend);
        json_string(&w, "method", o->method);
        json_string(&w, "grouping", name_of(GROUPING_NAMES, o->stateless));
        json_config(&w, "config", &cfg, in.k.tokens);
        json_string(&w, "source", in.source);
        json_object(&w, "dtype");
        json_string(&w, "q", vcattn_dtype_name(in.q.dtype));
        json_string(&w, "k", vcattn_dtype_name(in.k.dtype));
        json_string(&w, "v", vcattn_dtype_name(in.v.dtype));
        json_end(&w, '}');
        json_shape(&w, "shape", &in);
        json_bool(&w, "rope", in.has_rope);
        json_number(&w, "time_ms", ms);
        json_metrics(&w, "metrics", &m);
        json_number(&w, "lse_max_abs", lse_err);
        if (o->out_path) json_string(&w, "out", o->out_path);
        json_end(&w, '}');
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
