/* Fidelity of a result against the FP64 reference, both [rows][cols] (rows
 * are typically the (batch, head, token) rows of an attention output). */
#ifndef VCATTN_METRICS_H
#define VCATTN_METRICS_H

#include <stdint.h>

typedef struct {
    double cosine;        /* <x,ref>/(|x||ref|) over all elements */
    double rel_l1;        /* sum|x-ref| / sum|ref| */
    double rel_l2;        /* |x-ref|_2 / |ref|_2 */
    double snr_db;        /* 10 log10(|ref|^2 / |x-ref|^2); +inf if exact */
    double max_abs;       /* max |x-ref| */
    double worst_row_rel_l2;  /* max over rows of |x_r-ref_r|/|ref_r| (rows with |ref_r|=0 use absolute) */
    int64_t nonfinite;    /* count of NaN/Inf in x; if > 0 all error metrics are NaN and cosine NaN */
} vcattn_metrics;

/* Running sums of the metrics over several results, as if their rows were
 * concatenated in the order added (bit for bit: sums in that element order). */
typedef struct {
    long double dot, xx, rr, ee, l1e, l1r;
    double max_abs, worst;
    int64_t nonfinite;
} metrics_sums;

void metrics_sums_add(metrics_sums *s, const float *x, const double *ref, int64_t rows, int64_t cols);
void metrics_sums_finish(const metrics_sums *s, vcattn_metrics *m);

/* Degenerate cases: ref all zero gives rel_l1/rel_l2 0 if x is too, else
 * +inf; cosine is 1 if x and ref are both all zero, 0 if only one is. An
 * empty input counts as exact. */
void metrics_compute(const float *x, const double *ref, int64_t rows, int64_t cols, vcattn_metrics *m);
/* Same with a double x (for comparing two double results). */
void metrics_compute_f64(const double *x, const double *ref, int64_t rows, int64_t cols,
                         vcattn_metrics *m);

#endif
