/* Fidelity metrics; see metrics.h. Sums in long double, one pass, in element
 * order, so the numbers are reproducible bit for bit. */
#include "metrics.h"

#include <math.h>
#include <stddef.h>

/* Exactly one of xf, xd is non-NULL. */
static void sums_add(metrics_sums *s, const float *xf, const double *xd, const double *ref,
                     int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        long double row_ee = 0, row_rr = 0;
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            double x = xf ? (double)xf[i] : xd[i];
            if (!isfinite(x)) {
                s->nonfinite++;
                continue;
            }
            double y = ref[i], e = fabs(x - y);
            s->dot += (long double)x * y;
            s->xx += (long double)x * x;
            row_rr += (long double)y * y;
            row_ee += (long double)e * e;
            s->l1e += e;
            s->l1r += fabs(y);
            if (e > s->max_abs) s->max_abs = e;
        }
        double row = row_rr > 0 ? (double)sqrtl(row_ee / row_rr) : (double)sqrtl(row_ee);
        if (row > s->worst) s->worst = row;
        s->rr += row_rr;
        s->ee += row_ee;
    }
}

void metrics_sums_add(metrics_sums *s, const float *x, const double *ref, int64_t rows, int64_t cols) {
    sums_add(s, x, NULL, ref, rows, cols);
}

void metrics_sums_finish(const metrics_sums *s, vcattn_metrics *m) {
    m->nonfinite = s->nonfinite;
    if (s->nonfinite > 0) {
        m->cosine = m->rel_l1 = m->rel_l2 = m->snr_db = m->max_abs = m->worst_row_rel_l2 = NAN;
        return;
    }
    if (s->xx > 0 && s->rr > 0)  /* clamped: rounding can land a hair past +-1 */
        m->cosine = fmax(-1.0, fmin(1.0, (double)(s->dot / sqrtl(s->xx * s->rr))));
    else
        m->cosine = (s->xx == 0 && s->rr == 0) ? 1.0 : 0.0;
    m->rel_l1 = s->l1r > 0 ? (double)(s->l1e / s->l1r) : (s->l1e > 0 ? INFINITY : 0.0);
    m->rel_l2 = s->rr > 0 ? (double)sqrtl(s->ee / s->rr) : (s->ee > 0 ? INFINITY : 0.0);
    m->snr_db = s->ee > 0 ? (double)(10.0L * log10l(s->rr / s->ee)) : INFINITY;
    m->max_abs = s->max_abs;
    m->worst_row_rel_l2 = s->worst;
}

void metrics_compute(const float *x, const double *ref, int64_t rows, int64_t cols,
                     vcattn_metrics *m) {
    metrics_sums s = {0};
    sums_add(&s, x, NULL, ref, rows, cols);
    metrics_sums_finish(&s, m);
}

void metrics_compute_f64(const double *x, const double *ref, int64_t rows, int64_t cols,
                         vcattn_metrics *m) {
    metrics_sums s = {0};
    sums_add(&s, NULL, x, ref, rows, cols);
    metrics_sums_finish(&s, m);
}
