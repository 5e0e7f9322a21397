/* The numbers behind ExpCast-FP8 (paper sec. 3.3, appendices C and D),
 * computed from the codec itself: nothing here is typed in. */
#ifndef VCATTN_EXPCAST_STUDY_H
#define VCATTN_EXPCAST_STUDY_H

#include <stdio.h>

typedef struct {
    float beta;
    double same_byte_fraction;    /* of one doubling: ExpCast byte == exp-then-cast byte */
    int max_code_difference;      /* over that doubling */
    double mitchell_min, mitchell_max;  /* range of e(f) = 8[f - (2^f - 1)], in codes */
    double minimax_shift;         /* -(mitchell_max + mitchell_min) / 2 */
    double ratio_min, ratio_max;  /* decoded / exact probability, eq. 11 */
    double tv_bound;              /* (sqrt b - sqrt a) / (sqrt b + sqrt a), eq. 13 */
    /* the worked example of sec. 3.3 */
    float example_u;
    float example_arg;            /* 8 (u + 8) + 56 + beta */
    int example_byte;
    float example_value;          /* the byte decoded as E4M3 */
    double example_exact;         /* 2^(u + 8) */
    int example_cast_byte;        /* exp-then-cast byte of the same u */
} expcast_facts;

void expcast_compute(float beta, expcast_facts *f);
void expcast_print(const expcast_facts *f, int json, FILE *out);

#endif
