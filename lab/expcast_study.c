/* `vcattn expcast`: the facts of ExpCast-FP8, each derived from the codec. */
#include "expcast_study.h"
#include "vcattn_inspect.h"

#include <math.h>

/* Same-byte fraction and largest code difference over the doubling u in
 * [-1, 0), sampled at the midpoints of 2^20 equal cells. */
static void compare_paths(float beta, expcast_facts *f) {
    const int cells = 1 << 20;
    long same = 0;
    int worst = 0;
    for (int i = 0; i < cells; i++) {
        float u = -1.0f + ((float)i + 0.5f) / (float)cells;
        int a = vcattn_expcast_code(vcattn_expcast_arg(u, beta));
        int b = vcattn_expthencast_code(u);
        same += a == b;
        int diff = a > b ? a - b : b - a;
        if (diff > worst) worst = diff;
    }
    f->same_byte_fraction = (double)same / cells;
    f->max_code_difference = worst;
}

static double mitchell(double x) { return 8.0 * (x - (exp2(x) - 1.0)); }

/* e(f) is concave on [0, 1] and zero at both ends: its range is [0, max],
 * the max found by ternary search. */
static void mitchell_range(expcast_facts *f) {
    double lo = 0.0, hi = 1.0;
    for (int it = 0; it < 200; it++) {
        double a = lo + (hi - lo) / 3.0, b = hi - (hi - lo) / 3.0;
        if (mitchell(a) < mitchell(b)) lo = a; else hi = b;
    }
    f->mitchell_min = fmin(mitchell(0.0), mitchell(1.0));
    f->mitchell_max = mitchell(0.5 * (lo + hi));
    f->minimax_shift = -0.5 * (f->mitchell_max + f->mitchell_min);
}

/* r(f) = (1 + Round(8f + beta) / 8) / 2^f is decreasing inside each rounding
 * cell; its extremes are the one-sided limits at the cell edges
 * f = (j + 1/2 - beta) / 8, the carry cell (code 8) included. */
static void ratio_bounds(float beta, expcast_facts *f) {
    double lo = INFINITY, hi = -INFINITY;
    double edge_prev = 0.0;
    for (int j = 0; j <= 8; j++) {
        double edge = (j + 0.5 - beta) / 8.0;
        if (edge > 1.0) edge = 1.0;
        if (edge > edge_prev) {
            double code = j;  /* Round(8f + beta) on (edge_prev, edge) */
            hi = fmax(hi, (1.0 + code / 8.0) / exp2(edge_prev));
            lo = fmin(lo, (1.0 + code / 8.0) / exp2(edge));
        }
        edge_prev = edge;
        if (edge >= 1.0) break;
    }
    f->ratio_min = lo;
    f->ratio_max = hi;
    double sa = sqrt(lo), sb = sqrt(hi);
    f->tv_bound = (sb - sa) / (sb + sa);
}

void expcast_compute(float beta, expcast_facts *f) {
    f->beta = beta;
    compare_paths(beta, f);
    mitchell_range(f);
    ratio_bounds(beta, f);
    f->example_u = -1.60f;
    f->example_arg = vcattn_expcast_arg(f->example_u, beta);
    f->example_byte = vcattn_expcast_code(f->example_arg);
    f->example_value = vcattn_e4m3_decode((uint8_t)f->example_byte);
    f->example_exact = exp2((double)f->example_u + 8.0);
    f->example_cast_byte = vcattn_expthencast_code(f->example_u);
}

void expcast_print(const expcast_facts *f, int json, FILE *out) {
    if (json) {
        fprintf(out,
                "{\"beta\": %.4f, \"same_byte_fraction\": %.6f, \"max_code_difference\": %d, "
                "\"mitchell_range\": [%.6f, %.6f], \"minimax_shift\": %.6f, "
                "\"ratio_bounds\": [%.6f, %.6f], \"tv_bound\": %.6f, "
                "\"example\": {\"u\": %.2f, \"arg\": %.4f, \"byte\": %d, \"value\": %.1f, "
                "\"exact\": %.4f, \"exp_then_cast_byte\": %d}}\n",
                f->beta, f->same_byte_fraction, f->max_code_difference, f->mitchell_min,
                f->mitchell_max, f->minimax_shift, f->ratio_min, f->ratio_max, f->tv_bound,
                f->example_u, f->example_arg, f->example_byte, f->example_value, f->example_exact,
                f->example_cast_byte);
        return;
    }
    fprintf(out, "ExpCast-FP8, beta = %.2f (every figure computed from the codec)\n", f->beta);
    fprintf(out, "  same byte as exp-then-cast      %.1f%% of a doubling (max %d code apart elsewhere)\n",
            100.0 * f->same_byte_fraction, f->max_code_difference);
    fprintf(out, "  Mitchell error e(f) range       [%.4f, %.4f] codes\n", f->mitchell_min, f->mitchell_max);
    fprintf(out, "  minimax shift                   %.4f\n", f->minimax_shift);
    fprintf(out, "  decoded/exact ratio             [%.6f, %.6f]\n", f->ratio_min, f->ratio_max);
    fprintf(out, "  total-variation bound per row   %.4f%% (+ underflow mass tau)\n", 100.0 * f->tv_bound);
    fprintf(out, "  example u = %.2f: 8(u+8)+56+beta = %.2f -> byte %d = %.0f; "
                 "exp-then-cast 2^(u+8) = %.1f -> byte %d = %.0f\n",
            f->example_u, f->example_arg, f->example_byte, f->example_value, f->example_exact,
            f->example_cast_byte, vcattn_e4m3_decode((uint8_t)f->example_cast_byte));
}
