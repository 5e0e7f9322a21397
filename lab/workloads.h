/* The lab's built-in workloads: deterministic synthetic video-DiT attention
 * inputs for the CLI, the tests, the studies and the benches (not part of
 * libvcattn). */
#ifndef VCATTN_LAB_WORKLOADS_H
#define VCATTN_LAB_WORKLOADS_H

#include "vcattn.h"

/*
 * Deterministic synthetic video-DiT attention inputs (see docs/workloads.md):
 * pre-RoPE q, k, v as contiguous float32 [B][H][N][D] plus interleaved 3-D
 * RoPE tables for the T x H x W latent grid.
 */
typedef struct {
    char name[32];
    int64_t batch, heads_q, heads_kv, tokens, head_dim;
    int frames, height, width;           /* latent grid; tokens = product */
    float *q, *k, *v;                    /* [B][H][N][D] */
    float *rope_cos, *rope_sin;          /* [N][D/2] */
    vcattn_rope_style rope_style;
} vcattn_workload;

/* Presets: "tiny", "small", "wan2.2-720p", "longcat-480p", "hunyuan-720p",
 * "seq-32k", "d64". Returns VCATTN_ERR_UNKNOWN_NAME for anything else. */
vcattn_status vcattn_workload_generate(const char *name, uint64_t seed,
                                       vcattn_workload *out);
void vcattn_workload_free(vcattn_workload *w);  /* NULL-safe; zeroes *w */
const char *const *vcattn_workload_names(void);

#endif
