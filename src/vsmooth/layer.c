/* Per-layer V-Smooth state and the grouping schedule of the paper's
 * appendix A: group on the first ceil(window * n) of n steps, regrouping every
 * `refresh` steps (0, 4, 8 of 40) from the previous centroids; afterwards
 * either the plain low-bit kernel or the last permutation, demeaned. */
#include "vsmooth.h"
#include "../core/internal.h"

#include <math.h>
#include <stdlib.h>

vcattn_status vcattn_layer_create(vcattn_layer **out, int num_steps) {
    if (!out) return VCATTN_ERR_NULL_POINTER;
    *out = NULL;
    if (num_steps < 1) return VCATTN_ERR_INVALID_ARGUMENT;
    vcattn_layer *l = calloc(1, sizeof *l);
    if (!l) return VCATTN_ERR_OUT_OF_MEMORY;
    l->num_steps = num_steps;
    *out = l;
    return VCATTN_OK;
}

void vsmooth_layer_keep_device_perm(vcattn_layer *l, void *device_perm, int device,
                                    void (*release)(void *device_perm)) {
    if (l->device_perm && l->release_device_perm) l->release_device_perm(l->device_perm);
    l->device_perm = device_perm;
    l->device_perm_device = device;
    l->release_device_perm = release;
}

void vcattn_layer_reset(vcattn_layer *l) {
    if (!l) return;
    vsmooth_layer_keep_device_perm(l, NULL, 0, NULL);
    free(l->centroids);
    free(l->perm);
    l->centroids = NULL;
    l->perm = NULL;
    l->has_grouping = 0;
    l->batch = l->heads_kv = l->tokens = l->head_dim = 0;
    l->clusters = 0;
}

void vcattn_layer_destroy(vcattn_layer *l) {
    vcattn_layer_reset(l);
    free(l);
}

vcattn_status vcattn_layer_set_step(vcattn_layer *l, int step) {
    if (!l) return VCATTN_ERR_NULL_POINTER;
    if (step < 0 || step >= l->num_steps) return VCATTN_ERR_INVALID_ARGUMENT;
    l->step = step;
    return VCATTN_OK;
}

int vcattn_layer_step(const vcattn_layer *l) { return l ? l->step : 0; }

int vsmooth_in_window(const vcattn_layer *l, const vcattn_config *cfg) {
    return l->step < (int)ceil((double)cfg->group_window * l->num_steps);
}

vcattn_grouping vcattn_layer_plan(const vcattn_layer *l, const vcattn_config *cfg) {
    if (!cfg || !cfg->vsmooth || vcattn_config_check(cfg, 0, NULL, 0) != VCATTN_OK) return VCATTN_GROUP_NONE;
    if (!l) return VCATTN_GROUP_PRINCIPAL;
    if (vsmooth_in_window(l, cfg)) {
        if (!l->has_grouping) return VCATTN_GROUP_COLD;
        return l->step % cfg->group_refresh == 0 ? VCATTN_GROUP_WARM : VCATTN_GROUP_REUSE;
    }
    return cfg->demean_outside_window && l->has_grouping ? VCATTN_GROUP_REUSE : VCATTN_GROUP_NONE;
}

int vsmooth_layer_matches(const vcattn_layer *l, int64_t batch, int64_t heads_kv,
                          int64_t tokens, int64_t head_dim, int clusters) {
    return l->has_grouping && l->batch == batch && l->heads_kv == heads_kv &&
           l->tokens == tokens && l->head_dim == head_dim && l->clusters == clusters;
}

vcattn_grouping vsmooth_resolve_plan(const vcattn_config *cfg, const vcattn_layer *layer,
                                     int64_t batch, int64_t heads_kv, int64_t tokens,
                                     int64_t head_dim, int clusters) {
    vcattn_grouping plan = vcattn_layer_plan(layer, cfg);
    if ((plan == VCATTN_GROUP_WARM || plan == VCATTN_GROUP_REUSE) &&
        !vsmooth_layer_matches(layer, batch, heads_kv, tokens, head_dim, clusters))
        plan = vsmooth_in_window(layer, cfg) ? VCATTN_GROUP_COLD : VCATTN_GROUP_NONE;
    return plan;
}

void vsmooth_layer_adopt(vcattn_layer *l, int64_t batch, int64_t heads_kv, int64_t tokens,
                         int64_t head_dim, int clusters, float *centroids, int32_t *perm) {
    vcattn_layer_reset(l);
    l->centroids = centroids;
    l->perm = perm;
    l->batch = batch;
    l->heads_kv = heads_kv;
    l->tokens = tokens;
    l->head_dim = head_dim;
    l->clusters = clusters;
    l->has_grouping = 1;
}
