/* V-Smooth pieces: k-means, the stable argsort, the energy share, and the
 * grouping schedule of the layer state across denoising steps. */
#include "testlib.h"
#include "vcattn.h"
#include "vcattn_inspect.h"
#include "reference.h"

#include <math.h>

#include <string.h>

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static float frand(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0) - 0.5f;
}

static void test_kmeans(void) {
    /* Three well separated blobs, interleaved in sequence order. */
    enum { n = 300, d = 8, k = 3 };
    static float x[n * d], c1[k * d], c2[k * d];
    static int32_t l1[n], l2[n], perm[n];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < d; i++) x[t * d + i] = 10.0f * (float)(i == t % 3) + 0.1f * frand();
    vsmooth_init_centroids(x, n, d, k, 7, 0, c1);
    memcpy(c2, c1, sizeof c1);
    vsmooth_kmeans(x, n, d, k, 10, c1, l1);
    vsmooth_kmeans(x, n, d, k, 10, c2, l2);
    CHECK(memcmp(l1, l2, sizeof l1) == 0 && memcmp(c1, c2, sizeof c1) == 0, "k-means is deterministic");
    int pure = 1;
    for (int t = 0; t < n; t++) pure &= l1[t] == l1[t % 3];
    CHECK(pure, "separated blobs get one label each");
    CHECK(l1[0] != l1[1] && l1[1] != l1[2] && l1[0] != l1[2], "three distinct labels");

    vsmooth_argsort_labels(l1, n, k, perm);
    int seen[n] = {0}, sorted = 1, stable = 1;
    for (int i = 0; i < n; i++) {
        seen[perm[i]]++;
        if (i && l1[perm[i]] < l1[perm[i - 1]]) sorted = 0;
        if (i && l1[perm[i]] == l1[perm[i - 1]] && perm[i] < perm[i - 1]) stable = 0;
    }
    int is_perm = 1;
    for (int i = 0; i < n; i++) is_perm &= seen[i] == 1;
    CHECK(is_perm, "argsort gives a permutation");
    CHECK(sorted, "labels ascend along the permutation");
    CHECK(stable, "ties keep sequence order");

    /* Grouping makes the block means worth subtracting (blocks of 100 = blobs). */
    double seq = vsmooth_block_mean_energy_share(x, n, d, NULL, 100);
    double grouped = vsmooth_block_mean_energy_share(x, n, d, perm, 100);
    CHECK(grouped > 0.99 && seq < 0.5, "energy share: %.3f in sequence order, %.3f grouped", seq, grouped);
    static float zeros[10 * 4];
    CHECK(vsmooth_block_mean_energy_share(zeros, 10, 4, NULL, 4) == 0.0, "zero energy gives share 0");

    /* One iteration from two identical centroids: every distance ties, the
     * lowest index wins, and the empty second cluster keeps its centroid. */
    float c3[2 * d];
    int32_t l3[n];
    memcpy(c3, x, d * sizeof(float));
    memcpy(c3 + d, x, d * sizeof(float));
    vsmooth_kmeans(x, n, d, 2, 1, c3, l3);
    int all_zero = 1;
    for (int t = 0; t < n; t++) all_zero &= l3[t] == 0;
    CHECK(all_zero && memcmp(c3 + d, x, d * sizeof(float)) == 0, "ties go to the lowest index; empty cluster kept");

    /* The same blobs times 2^70 and 2^-90: the squares of |v| ~ 1e22 once
     * overflowed float32 and those of 1e-26 underflowed, every token landed
     * in cluster 0 and grouping silently stopped. A power-of-two scale keeps
     * the labels, and the centroids come back in V's own scale. */
    const int shifts[] = {70, -90};
    for (int s = 0; s < 2; s++) {
        static float xs[n * d], cs[k * d];
        static int32_t ls[n];
        for (int i = 0; i < n * d; i++) xs[i] = ldexpf(x[i], shifts[s]);
        vsmooth_init_centroids(xs, n, d, k, 7, 0, cs);
        vsmooth_kmeans(xs, n, d, k, 10, cs, ls);
        int centroids_scaled = 1;
        for (int i = 0; i < k * d; i++) centroids_scaled &= cs[i] == ldexpf(c1[i], shifts[s]);
        CHECK(memcmp(ls, l1, sizeof ls) == 0 && centroids_scaled,
              "V times 2^%d: the labels and (scaled) centroids of V", shifts[s]);
    }
}

static void test_schedule(void) {
    vcattn_layer *layer;
    vcattn_config c = vcattn_config_default();
    vcattn_layer_create(&layer, 40);
    CHECK(vcattn_layer_plan(layer, &c) == VCATTN_GROUP_COLD, "step 0 without history groups cold");
    CHECK(vcattn_layer_plan(NULL, &c) == VCATTN_GROUP_PRINCIPAL, "no layer: principal order, no k-means");
    vcattn_config off = c;
    off.vsmooth = 0;
    CHECK(vcattn_layer_plan(layer, &off) == VCATTN_GROUP_NONE, "vsmooth off never groups");

    /* Run real calls through the schedule: 40 steps, window 10, refresh 4. */
    enum { n = 200, d = 16, h = 2 };
    static float q[h * n * d], k[h * n * d], v[h * n * d], out[h * n * d];
    for (int i = 0; i < h * n * d; i++) { q[i] = frand(); k[i] = frand(); v[i] = frand() + (i / d % 7); }
    vcattn_tensor tq = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, h, n, d);
    vcattn_tensor tk = vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, 1, h, n, d);
    vcattn_tensor tv = vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, 1, h, n, d);
    vcattn_tensor to = vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, 1, h, n, d);
    vcattn_context *ctx;
    vcattn_create(&ctx, VCATTN_BACKEND_CPU);
    char trace[41] = {0};
    const char letter[] = {'-', 'C', 'W', 'R'};
    for (int step = 0; step < 40; step++) {
        vcattn_layer_set_step(layer, step);
        trace[step] = letter[vcattn_layer_plan(layer, &c)];
        CHECK(vcattn_attention(ctx, &c, &tq, &tk, &tv, &to, NULL, NULL, layer) == VCATTN_OK, "step %d", step);
    }
    CHECK(strcmp(trace, "CRRRWRRRWR------------------------------") == 0, "40-step schedule: %s", trace);
    CHECK(vcattn_layer_step(layer) == 39, "step kept");
    /* A config a call would refuse, on a layer that has grouped: no plan, and
     * no division by its zero refresh (this query once divided by zero). */
    vcattn_config bad = c;
    bad.group_refresh = 0;
    vcattn_layer_set_step(layer, 1);
    CHECK(vcattn_layer_plan(layer, &bad) == VCATTN_GROUP_NONE, "group_refresh 0: no plan");
    bad = c;
    bad.group_window = NAN;
    CHECK(vcattn_layer_plan(layer, &bad) == VCATTN_GROUP_NONE, "group_window NaN: no plan");

    /* The paper's 8-step setting: window ceil(8/4) = 2. */
    vcattn_layer *short_layer;
    vcattn_layer_create(&short_layer, 8);
    for (int step = 0; step < 8; step++) {
        vcattn_layer_set_step(short_layer, step);
        trace[step] = letter[vcattn_layer_plan(short_layer, &c)];
        vcattn_attention(ctx, &c, &tq, &tk, &tv, &to, NULL, NULL, short_layer);
    }
    trace[8] = 0;
    CHECK(strcmp(trace, "CR------") == 0, "8-step schedule: %s", trace);

    /* Demeaning outside the window reuses the last permutation. */
    c.demean_outside_window = 1;
    vcattn_layer_set_step(layer, 30);
    CHECK(vcattn_layer_plan(layer, &c) == VCATTN_GROUP_REUSE, "outside window: reuse and demean");

    /* A new shape inside the window regroups cold; reset forgets. */
    vcattn_layer_set_step(layer, 4);
    tk.tokens = tv.tokens = n - 10;
    CHECK(vcattn_attention(ctx, &c, &tq, &tk, &tv, &to, NULL, NULL, layer) == VCATTN_OK, "new shape");
    vcattn_layer_reset(layer);
    vcattn_layer_set_step(layer, 5);
    CHECK(vcattn_layer_plan(layer, &c) == VCATTN_GROUP_COLD, "after reset: cold");

    vcattn_layer_destroy(layer);
    vcattn_layer_destroy(short_layer);
    vcattn_destroy(ctx);
}

/* The sink guard: one key with a near-zero value that some queries attend
 * to almost exclusively (an "attention sink", as BERT's [CLS] in
 * docs/fidelity.md), among values sharing a large mean. Demeaned, the sink
 * becomes -mean + small and those rows inherit an error the size of the
 * mean; guarded, its block keeps raw values and the rows stay as accurate
 * as sage2's. QK and P exact: the value path alone. */
static void test_sink_guard(void) {
    enum { n = 256, d = 32, sink = 40 };
    static float q[n * d], k[n * d], v[n * d], out[n * d];
    static double ref[n * d];
    for (int t = 0; t < n; t++)
        for (int i = 0; i < d; i++) {
            q[t * d + i] = 0.3f * frand();
            k[t * d + i] = t == sink ? 2.0f : 0.3f * frand();
            v[t * d + i] = t == sink ? 0.01f * frand() : 4.0f + frand();  /* |mean| ~ 23, |sink| ~ 0.03 */
        }
    for (int t = 0; t < n; t += 4)  /* a quarter of the queries look (almost) only at the sink */
        for (int i = 0; i < d; i++) q[t * d + i] = 1.0f;  /* score 11.3 on the sink, ~0 elsewhere */
    vcattn_tensor tq = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, 1, n, d);
    vcattn_tensor tk = vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, 1, 1, n, d);
    vcattn_tensor tv = vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, 1, 1, n, d);
    vcattn_tensor to = vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, 1, 1, n, d);
    vcattn_reference_attention(&tq, &tk, &tv, NULL, 0.0f, ref, NULL);
    vcattn_context *ctx;
    vcattn_create(&ctx, VCATTN_BACKEND_CPU);
    double worst[3];
    const float guards[3] = {0.25f, 0.0f, 0.25f};
    const char *methods[3] = {"vsmooth", "vsmooth", "sage2"};
    for (int m = 0; m < 3; m++) {
        vcattn_config c;
        vcattn_config_from_method(methods[m], &c);
        c.sink_guard = guards[m];
        c.qk_format = VCATTN_QK_EXACT;  /* the value path alone */
        c.p_format = VCATTN_P_EXACT;
        CHECK(vcattn_attention(ctx, &c, &tq, &tk, &tv, &to, NULL, NULL, NULL) == VCATTN_OK, "sink case %d", m);
        worst[m] = 0.0;
        for (int t = 0; t < n; t += 4) {  /* the rows that read the sink */
            double e = 0.0, r = 0.0;
            for (int i = 0; i < d; i++) {
                e += (out[t * d + i] - ref[t * d + i]) * (out[t * d + i] - ref[t * d + i]);
                r += ref[t * d + i] * ref[t * d + i];
            }
            worst[m] = fmax(worst[m], sqrt(e / r));
        }
    }
    printf("sink rows, value path: guarded %.4f, demeaned %.4f, sage2 %.4f\n", worst[0], worst[1], worst[2]);
    CHECK(worst[1] > 4.0 * worst[0], "sink rows: demeaned %.4f should be far worse than guarded %.4f", worst[1],
          worst[0]);
    CHECK(worst[0] <= 1.5 * worst[2] + 1e-3, "sink rows: guarded vsmooth %.4f vs sage2 %.4f", worst[0], worst[2]);
    vcattn_destroy(ctx);
}

/* The principal order (the call without a layer state): tokens spread along
 * one direction, plus noise, come out sorted along it, the same every time;
 * and the blocks of the order carry more of V's energy in their means than
 * sequence order. */
static void test_principal_order(void) {
    enum { N = 700, D = 16 };
    static float x[N * D];
    static int32_t perm[N];
    static float a[N];
    for (int t = 0; t < N; t++) {
        a[t] = 4.0f * (frand() - 0.5f);
        for (int i = 0; i < D; i++) x[t * D + i] = a[t] * (i % 3 == 0 ? 1.0f : -0.5f) + 0.002f * (frand() - 0.5f) + 1.0f;
    }
    CHECK(vsmooth_principal_order(x, N, D, perm) == VCATTN_OK, "principal order runs");
    int up = 1, down = 1, is_perm = 1;
    static int seen[N];
    for (int t = 0; t < N; t++) seen[t] = 0;
    for (int t = 0; t < N; t++) is_perm &= perm[t] >= 0 && perm[t] < N && !seen[perm[t]]++;
    for (int t = 1; t < N; t++) {
        up &= a[perm[t]] >= a[perm[t - 1]] - 0.01f;
        down &= a[perm[t]] <= a[perm[t - 1]] + 0.01f;
    }
    CHECK(is_perm && (up || down), "tokens come out sorted along their direction (permutation %d)", is_perm);
    double seq = vsmooth_block_mean_energy_share(x, N, D, NULL, 128);
    double pc = vsmooth_block_mean_energy_share(x, N, D, perm, 128);
    CHECK(pc > seq + 0.005, "block-mean energy share: %.4f in principal order, %.4f in sequence order", pc, seq);
    static int32_t again[N];
    vsmooth_principal_order(x, N, D, again);
    CHECK(memcmp(perm, again, sizeof perm) == 0, "the principal order is deterministic");
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    TL_RUN(test_kmeans());
    TL_RUN(test_principal_order());
    TL_RUN(test_schedule());
    TL_RUN(test_sink_guard());
    return tl_finish("test_vsmooth");
}
