/* Fidelity regression on the small preset (seed 0): the token-order study's
 * ordering and thresholds set from the measured values with a margin
 * (docs/fidelity.md, 2026-12-02), and the ExpCast bound on every row. */
#include "testlib.h"
#include "vcattn.h"
#include "studies.h"

int main(void) {
    vcattn_workload w;
    if (vcattn_workload_generate("small", 0, &w) != VCATTN_OK) return 1;
    vcattn_tensor q = vcattn_tensor_bhnd(w.q, VCATTN_DTYPE_F32, w.batch, w.heads_q, w.tokens, w.head_dim);
    vcattn_tensor k = vcattn_tensor_bhnd(w.k, VCATTN_DTYPE_F32, w.batch, w.heads_kv, w.tokens, w.head_dim);
    vcattn_tensor v = vcattn_tensor_bhnd(w.v, VCATTN_DTYPE_F32, w.batch, w.heads_kv, w.tokens, w.head_dim);
    vcattn_rope rope = {w.rope_style, w.rope_cos, w.rope_sin, w.rope_cos, w.rope_sin};
    vcattn_config cfg = vcattn_config_default();

    study_order o[STUDY_ORDER_COUNT];
    CHECK(study_orders(&v, w.frames, w.height, w.width, &cfg, o) == VCATTN_OK, "orders study failed");
    /* rows: 0 no demeaning, 1 sequence, 2 cube, 3 k-means, 4 balanced, 5 hadamard */
    CHECK(o[3].v_err_fp8 < o[1].v_err_fp8 && o[1].v_err_fp8 < o[0].v_err_fp8,
          "FP8 V error: k-means %.4f < sequence %.4f < none %.4f", o[3].v_err_fp8, o[1].v_err_fp8, o[0].v_err_fp8);
    CHECK(o[3].v_err_fp4 < o[1].v_err_fp4 && o[1].v_err_fp4 < o[0].v_err_fp4, "NVFP4 V error ordering");
    CHECK(o[3].v_err_fp8 < 0.0185 && o[0].v_err_fp8 > 0.020, "FP8 thresholds: k-means %.4f (< 1.85%%), none %.4f (> 2%%)",
          o[3].v_err_fp8, o[0].v_err_fp8);
    CHECK(o[3].energy_share > o[1].energy_share + 0.08, "energy share: k-means %.3f vs sequence %.3f",
          o[3].energy_share, o[1].energy_share);
    CHECK(o[2].available && o[4].available && o[5].available, "cube, balanced and Hadamard rows ran");

    study_expcast ex;
    CHECK(study_expcast_rows(&q, &k, &rope, 0.0f, cfg.expcast_beta, &ex) == VCATTN_OK, "expcast study failed");
    CHECK(ex.rows == w.batch * w.heads_q * w.tokens, "every row visited (%lld)", (long long)ex.rows);
    CHECK(ex.violations == 0 && ex.worst_slack > 0.0, "%lld rows over the ExpCast bound", (long long)ex.violations);
    CHECK(ex.tv_mean[0] < 0.015 && ex.tv_mean[1] < ex.tv_mean[0], "mean TV: ExpCast %.4f, cast %.4f",
          ex.tv_mean[0], ex.tv_mean[1]);
    vcattn_workload_free(&w);
    return tl_finish("test_studies");
}
