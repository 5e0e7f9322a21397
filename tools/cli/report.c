/* vcattn command line: the shared pieces of the reports: JSON values, the config and the shape. */
#include "cli.h"

/* JSON has no inf or nan: those become null. */
void json_num(double x) {
    if (isfinite(x)) printf("%.9g", x);
    else fputs("null", stdout);
}

void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

void json_metrics(const vcattn_metrics *m) {
    printf("{\"cosine\": "); json_num(m->cosine);
    printf(", \"rel_l1\": "); json_num(m->rel_l1);
    printf(", \"rel_l2\": "); json_num(m->rel_l2);
    printf(", \"snr_db\": "); json_num(m->snr_db);
    printf(", \"max_abs\": "); json_num(m->max_abs);
    printf(", \"worst_row_rel_l2\": "); json_num(m->worst_row_rel_l2);
    printf(", \"nonfinite\": %lld}", (long long)m->nonfinite);
}

/* "p" is the format the call applied at tokens_k keys (ExpCast falls back
 * to the cast below expcast_min_keys). */
void json_config(const vcattn_config *c, int64_t tokens_k) {
    /* %.7g: the float32 fields as typed, not their binary expansion; the
     * library keeps them finite. */
    printf("{\"qk\": \"%s\", \"k_smoothing\": %s, \"q_smoothing\": %s, \"hadamard\": %s, \"sm_scale\": %.7g, "
           "\"p\": \"%s\", \"expcast_beta\": %.7g, \"expcast_min_keys\": %d, \"v\": \"%s\", \"vsmooth\": %s, "
           "\"kmeans_clusters\": %d, \"kmeans_iters\": %d, \"sink_guard\": %.7g}",
           name_of(QK_NAMES, c->qk_format), c->k_smoothing ? "true" : "false", c->q_smoothing ? "true" : "false",
           c->hadamard ? "true" : "false", c->sm_scale, name_of(P_NAMES, vcattn_applied_p_format(c, tokens_k)),
           c->expcast_beta, c->expcast_min_keys, name_of(V_NAMES, c->v_format), c->vsmooth ? "true" : "false",
           c->kmeans_clusters, c->kmeans_iters, c->sink_guard);
}

void print_config(const vcattn_config *c, int64_t tokens_k) {
    const vcattn_p_format p = vcattn_applied_p_format(c, tokens_k);
    printf("qk %s, k-smoothing %s, hadamard %s, p %s", name_of(QK_NAMES, c->qk_format),
           c->k_smoothing ? "on" : "off", c->hadamard ? "on" : "off", name_of(P_NAMES, p));
    if (p != c->p_format) printf(" (ExpCast from %d keys)", c->expcast_min_keys);
    printf(", v %s, vsmooth %s", name_of(V_NAMES, c->v_format), c->vsmooth ? "on" : "off");
    if (c->vsmooth && c->kmeans_clusters) printf(" (%d clusters, %d iters)", c->kmeans_clusters, c->kmeans_iters);
    else if (c->vsmooth) printf(" (auto clusters, %d iters)", c->kmeans_iters);
    if (c->vsmooth) printf(", sink guard %.3g", c->sink_guard);
    if (p == VCATTN_P_FP8_EXPCAST) printf(", beta %.3g", c->expcast_beta);
    if (c->sm_scale > 0.0f) printf(", sm_scale %.6g", c->sm_scale);
}

/* Shape line shared by run and eval. */
void print_shape(const inputs *in) {
    printf("B=%lld Hq=%lld Hkv=%lld Nq=%lld Nk=%lld D=%lld", (long long)in->q.batch,
           (long long)in->q.heads, (long long)in->k.heads, (long long)in->q.tokens,
           (long long)in->k.tokens, (long long)in->q.head_dim);
}

void json_shape(const inputs *in) {
    printf("{\"batch\": %lld, \"heads_q\": %lld, \"heads_kv\": %lld, \"tokens_q\": %lld, "
           "\"tokens_kv\": %lld, \"head_dim\": %lld}",
           (long long)in->q.batch, (long long)in->q.heads, (long long)in->k.heads,
           (long long)in->q.tokens, (long long)in->k.tokens, (long long)in->q.head_dim);
}
