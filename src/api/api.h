/* The API layer's entry points below the public header, for the tools and
 * the tests (the backends and everything under them never include this). */
#ifndef VCATTN_API_H
#define VCATTN_API_H

#include "../core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks every argument of vcattn_attention without touching data beyond the
 * finite check (done only if cfg->check_finite and scan_host: the CUDA
 * backend checks on the device). out may be NULL: the inputs alone are
 * checked, q's shape standing for out's (the tools, before a reference). */
vcattn_status vcattn_validate_call(vcattn_context *ctx, const vcattn_config *cfg,
                                   const vcattn_tensor *q, const vcattn_tensor *k,
                                   const vcattn_tensor *v, const vcattn_tensor *out,
                                   const float *lse, const vcattn_rope *rope, int scan_host);

/* Resolves a validated call (the API layer's; tests that drive a backend
 * directly use it too). */
void vcattn_resolve_call(const vcattn_config *cfg, const vcattn_tensor *q, const vcattn_tensor *k,
                         vcattn_layer *layer, vcattn_call *call);

#ifdef __cplusplus
}
#endif
#endif
