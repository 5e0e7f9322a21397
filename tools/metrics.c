/* Fidelity metrics; see metrics.h. Sums in long double, one pass, in element
 * order, so the numbers are reproducible bit for bit. */
#include "metrics.h"

#include <math.h>
#include <stddef.h>

/* Exactly one of xf, xd is non-NULL. */
static void metrics_impl(const float *xf, const double *xd, const double *ref, int64_t rows,
                         int64_t cols, vcattn_metrics *m) {
    long double dot = 0, xx = 0, rr = 0, ee = 0, l1e = 0, l1r = 0;
    double max_abs = 0, worst = 0;
    int64_t nonfinite = 0;
    for (int64_t r = 0; r < rows; r++) {
        long double row_ee = 0, row_rr = 0;
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            double x = xf ? (double)xf[i] : xd[i];
            if (!isfinite(x)) {
                nonfinite++;
                continue;
            }
            double y = ref[i], e = fabs(x - y);
            dot += (long double)x * y;
            xx += (long double)x * x;
            row_rr += (long double)y * y;
            row_ee += (long double)e * e;
            l1e += e;
            l1r += fabs(y);
            if (e > max_abs) max_abs = e;
        }
        double row = row_rr > 0 ? (double)sqrtl(row_ee / row_rr) : (double)sqrtl(row_ee);
        if (row > worst) worst = row;
        rr += row_rr;
        ee += row_ee;
    }
    m->nonfinite = nonfinite;
    if (nonfinite > 0) {
        m->cosine = m->rel_l1 = m->rel_l2 = m->snr_db = m->max_abs = m->worst_row_rel_l2 = NAN;
        return;
    }
    if (xx > 0 && rr > 0)  /* clamped: rounding can land a hair past +-1 */
        m->cosine = fmax(-1.0, fmin(1.0, (double)(dot / sqrtl(xx * rr))));
    else
        m->cosine = (xx == 0 && rr == 0) ? 1.0 : 0.0;
    m->rel_l1 = l1r > 0 ? (double)(l1e / l1r) : (l1e > 0 ? INFINITY : 0.0);
    m->rel_l2 = rr > 0 ? (double)sqrtl(ee / rr) : (ee > 0 ? INFINITY : 0.0);
    m->snr_db = ee > 0 ? (double)(10.0L * log10l(rr / ee)) : INFINITY;
    m->max_abs = max_abs;
    m->worst_row_rel_l2 = worst;
}

void metrics_compute(const float *x, const double *ref, int64_t rows, int64_t cols,
                     vcattn_metrics *m) {
    metrics_impl(x, NULL, ref, rows, cols, m);
}

void metrics_compute_f64(const double *x, const double *ref, int64_t rows, int64_t cols,
                         vcattn_metrics *m) {
    metrics_impl(NULL, x, ref, rows, cols, m);
}
