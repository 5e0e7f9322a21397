/* The drop-in call's token order: values sorted along their top principal
 * direction (vsmooth.h states the arithmetic), in double. */
#include "vsmooth.h"
#include "../core/internal.h"

#include <stdlib.h>

/* u = w / |w| (|w|^2 summed over the channels in order); 0 if w = 0 (u
 * untouched). */
static int normalize(const double *w, int64_t d, double *u) {
    double n2 = 0.0;
    for (int64_t i = 0; i < d; i++) n2 += w[i] * w[i];
    if (!(n2 > 0.0)) return 0;
    const double norm = sqrt(n2);
    for (int64_t i = 0; i < d; i++) u[i] = w[i] / norm;
    return 1;
}

typedef struct {
    uint32_t bits;
    int32_t index;
} sort_entry;

static int by_key_then_index(const void *a, const void *b) {
    const sort_entry *x = a, *y = b;
    if (x->bits != y->bits) return x->bits < y->bits ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

vcattn_status vsmooth_principal_order(const float *x, int64_t n, int64_t d, int32_t *perm) {
    double mu[VCATTN_MAX_HEAD_DIM], u[VCATTN_MAX_HEAD_DIM], w[VCATTN_MAX_HEAD_DIM];
    double *s = malloc((size_t)n * sizeof *s);
    sort_entry *order = malloc((size_t)n * sizeof *order);
    if (!s || !order) {
        free(s);
        free(order);
        return VCATTN_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < d; i++) mu[i] = 0.0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++) mu[i] += (double)x[t * d + i];
    for (int64_t i = 0; i < d; i++) mu[i] /= (double)n;
    if (!normalize(mu, d, u))
        for (int64_t i = 0; i < d; i++) u[i] = i == 0 ? 1.0 : 0.0;
    /* Power steps on the covariance, C u = sum_t ((x_t - mu) . u) (x_t - mu),
     * without forming C. */
    for (int it = 0; it < VSMOOTH_PRINCIPAL_ITERS; it++) {
        for (int64_t t = 0; t < n; t++) {
            double acc = 0.0;
            for (int64_t i = 0; i < d; i++) acc += ((double)x[t * d + i] - mu[i]) * u[i];
            s[t] = acc;
        }
        for (int64_t i = 0; i < d; i++) w[i] = 0.0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < d; i++) w[i] += s[t] * ((double)x[t * d + i] - mu[i]);
        normalize(w, d, u);  /* u stays where w = 0 (every row equal to the mean) */
    }
    for (int64_t t = 0; t < n; t++) {
        double acc = 0.0;
        for (int64_t i = 0; i < d; i++) acc += (double)x[t * d + i] * u[i];
        order[t].bits = vsmooth_principal_key_bits((float)acc);
        order[t].index = (int32_t)t;
    }
    qsort(order, (size_t)n, sizeof *order, by_key_then_index);  /* (key, index): a stable order */
    for (int64_t t = 0; t < n; t++) perm[t] = order[t].index;
    free(s);
    free(order);
    return VCATTN_OK;
}
