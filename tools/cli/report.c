/* vcattn command line: the shared pieces of the reports: the metrics, the config and the shape, as JSON
 * (through json.c's writer) and as text. */
#include "cli.h"

void json_metrics(json_writer *w, const char *key, const vcattn_metrics *m) {
    json_object(w, key);
    json_number(w, "cosine", m->cosine);
    json_number(w, "rel_l1", m->rel_l1);
    json_number(w, "rel_l2", m->rel_l2);
    json_number(w, "snr_db", m->snr_db);
    json_number(w, "max_abs", m->max_abs);
    json_number(w, "worst_row_rel_l2", m->worst_row_rel_l2);
    json_int(w, "nonfinite", (long long)m->nonfinite);
    json_end(w, '}');
}

/* "p" is the format the call applied at tokens_k keys (ExpCast falls back
 * to the cast below expcast_min_keys). */
void json_config(json_writer *w, const char *key, const vcattn_config *c, int64_t tokens_k) {
    json_object(w, key);
    json_string(w, "qk", name_of(QK_NAMES, c->qk_format));
    json_bool(w, "k_smoothing", c->k_smoothing);
    json_bool(w, "q_smoothing", c->q_smoothing);
    json_bool(w, "hadamard", c->hadamard);
    json_float(w, "sm_scale", c->sm_scale);
    json_string(w, "p", name_of(P_NAMES, vcattn_applied_p_format(c, tokens_k)));
    json_float(w, "expcast_beta", c->expcast_beta);
    json_int(w, "expcast_min_keys", c->expcast_min_keys);
    json_string(w, "v", name_of(V_NAMES, c->v_format));
    json_bool(w, "vsmooth", c->vsmooth);
    json_int(w, "kmeans_clusters", c->kmeans_clusters);
    json_int(w, "kmeans_iters", c->kmeans_iters);
    json_float(w, "sink_guard", c->sink_guard);
    json_end(w, '}');
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

void json_shape(json_writer *w, const char *key, const inputs *in) {
    json_object(w, key);
    json_int(w, "batch", (long long)in->q.batch);
    json_int(w, "heads_q", (long long)in->q.heads);
    json_int(w, "heads_kv", (long long)in->k.heads);
    json_int(w, "tokens_q", (long long)in->q.tokens);
    json_int(w, "tokens_kv", (long long)in->k.tokens);
    json_int(w, "head_dim", (long long)in->q.head_dim);
    json_end(w, '}');
}
