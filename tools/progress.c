#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SLICE_ROWS 64
#define ESTIMATE_ABOVE 1e11  /* multiply-adds (B Hq Nq Nk D): below, a CPU call takes seconds */

double cli_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void format_duration(double s, char *buf, size_t len) {
    if (s < 90.0) snprintf(buf, len, "%.0f s", s);
    else if (s < 5400.0) snprintf(buf, len, "%.0f min", s / 60.0);
    else snprintf(buf, len, "%.0f h %02.0f min", (double)(long)(s / 3600.0), (s - 3600.0 * (long)(s / 3600.0)) / 60.0);
}

static void on_progress(int64_t done, int64_t total, void *user) {
    cli_progress *p = user;
    const double elapsed = (cli_now_ms() - p->start_ms) / 1e3;
    if (!p->always && elapsed < 1.0) return;
    const int percent = (int)(100 * done / total);
    char left[32];
    format_duration(done ? elapsed * (double)(total - done) / (double)done : 0.0, left, sizeof left);
    if (p->tty) {
        static const char bar[] = "##############################";
        const int filled = (int)(30 * done / total);
        fprintf(stderr, "\r%s [%.*s%*s] %3d%%, %s left  ", p->label, filled, bar, 30 - filled, "", percent, left);
        p->drawn = 1;
        if (done == total) {
            fputc('\n', stderr);
            p->drawn = 0;
        }
    } else if (percent / 10 > p->last_tenth) {
        p->last_tenth = percent / 10;
        fprintf(stderr, "%s: %d%% of the rows, %s left\n", p->label, percent, left);
    }
}

void cli_progress_begin(cli_progress *p, vcattn_context *ctx, const char *label, int always) {
    p->label = label;
    p->start_ms = cli_now_ms();
    p->always = always;
    p->tty = isatty(fileno(stderr));
    p->last_tenth = 0;
    p->drawn = 0;
    vcattn_set_progress(ctx, on_progress, p);
}

void cli_progress_end(cli_progress *p, vcattn_context *ctx) {
    vcattn_set_progress(ctx, NULL, NULL);
    if (p->drawn) fputc('\n', stderr);  /* a call that failed midway */
}

void cli_print_estimate(vcattn_context *ctx, const vcattn_config *cfg, const vcattn_tensor *q,
                        const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope, int threads) {
    const double work = (double)q->batch * q->heads * q->tokens * k->tokens * q->head_dim;
    if (vcattn_context_backend(ctx) != VCATTN_BACKEND_CPU || work < ESTIMATE_ABOVE) return;
    vcattn_tensor qs = *q, ks = *k, vs = *v;
    qs.batch = ks.batch = vs.batch = 1;
    qs.heads = ks.heads = vs.heads = 1;
    qs.tokens = q->tokens < SLICE_ROWS ? q->tokens : SLICE_ROWS;
    float *buf = malloc((size_t)(qs.tokens * q->head_dim) * sizeof *buf);
    if (!buf) return;
    vcattn_tensor os = vcattn_tensor_bhnd(buf, VCATTN_DTYPE_F32, 1, 1, qs.tokens, q->head_dim);
    vcattn_config one = *cfg;
    one.num_threads = 1;
    const double t0 = cli_now_ms();
    vcattn_status st = vcattn_attention(ctx, &one, &qs, &ks, &vs, &os, NULL, rope, NULL);
    const double slice_s = (cli_now_ms() - t0) / 1e3;
    free(buf);
    if (st) return;  /* the call itself will say what is wrong */
    char when[32];
    const double slices = (double)q->batch * q->heads * q->tokens / (double)qs.tokens;
    format_duration(slice_s * slices / (threads > 0 ? threads : 1), when, sizeof when);
    fprintf(stderr, "[estimate] about %s on %d thread%s (one %lld-row slice took %.2f s)\n", when, threads,
            threads == 1 ? "" : "s", (long long)qs.tokens, slice_s);
}
