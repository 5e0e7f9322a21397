/* Concurrency (issue 7): two host threads, each with its own context and
 * layer states, run their call sequences at the same time and get the same
 * bits as when the sequences run one after the other. The CPU backend (each
 * call itself multi-threaded), and the CUDA backend where a GPU is present.
 * The promise being tested (vcattn.h): contexts and layer states may be
 * used from any thread, each by one thread at a time; the library keeps no
 * other mutable state. */
#include "testlib.h"
#include "vcattn.h"

#include <pthread.h>
#include <string.h>

enum { B = 1, H = 4, N = 600, D = 64, STEPS = 3, WORKERS = 2 };
#define COUNT ((size_t)B * H * N * D)

typedef struct {
    vcattn_backend backend;
    const char *method;
    float *q, *k, *v;
    float *out[STEPS];       /* output of each step */
    vcattn_status status;
} worker;

/* A 40-step schedule, steps 0..STEPS-1: a cold grouping, then reuse. */
static void *run_worker(void *arg) {
    worker *w = arg;
    vcattn_context *ctx = NULL;
    vcattn_layer *layer = NULL;
    vcattn_config cfg;
    w->status = vcattn_create(&ctx, w->backend);
    if (!w->status) w->status = vcattn_layer_create(&layer, 40);
    if (!w->status) w->status = vcattn_config_from_method(w->method, &cfg);
    cfg.num_threads = 2;
    vcattn_tensor tq = vcattn_tensor_bhnd(w->q, VCATTN_DTYPE_F32, B, H, N, D);
    vcattn_tensor tk = vcattn_tensor_bhnd(w->k, VCATTN_DTYPE_F32, B, H, N, D);
    vcattn_tensor tv = vcattn_tensor_bhnd(w->v, VCATTN_DTYPE_F32, B, H, N, D);
    for (int s = 0; s < STEPS && !w->status; s++) {
        vcattn_tensor to = vcattn_tensor_bhnd(w->out[s], VCATTN_DTYPE_F32, B, H, N, D);
        w->status = vcattn_layer_set_step(layer, s);
        if (!w->status) w->status = vcattn_attention(ctx, &cfg, &tq, &tk, &tv, &to, NULL, NULL, layer);
    }
    vcattn_layer_destroy(layer);
    vcattn_destroy(ctx);
    return NULL;
}

static void make_worker(worker *w, vcattn_backend backend, const char *method, float offset) {
    memset(w, 0, sizeof *w);
    w->backend = backend;
    w->method = method;
    w->q = malloc(COUNT * sizeof(float));
    w->k = malloc(COUNT * sizeof(float));
    w->v = malloc(COUNT * sizeof(float));
    for (size_t i = 0; i < COUNT; i++) {
        w->q[i] = nrand();
        w->k[i] = nrand() + offset;
        w->v[i] = nrand() * (i % 97 == 0 ? 8.0f : 1.0f) + offset;
    }
    for (int s = 0; s < STEPS; s++) w->out[s] = calloc(COUNT, sizeof(float));
}

static void free_worker(worker *w) {
    free(w->q); free(w->k); free(w->v);
    for (int s = 0; s < STEPS; s++) free(w->out[s]);
}

static void test_backend(vcattn_backend backend, const char *name) {
    static const char *const methods[WORKERS] = {"vc", "sage2"};
    worker seq[WORKERS], par[WORKERS];
    for (int i = 0; i < WORKERS; i++) {
        tl_rng = 1234567u + 77u * (uint64_t)i;  /* the same inputs for both runs */
        make_worker(&seq[i], backend, methods[i], 0.5f * (float)i);
        tl_rng = 1234567u + 77u * (uint64_t)i;
        make_worker(&par[i], backend, methods[i], 0.5f * (float)i);
    }
    for (int i = 0; i < WORKERS; i++) run_worker(&seq[i]);
    pthread_t threads[WORKERS];
    int started[WORKERS];
    for (int i = 0; i < WORKERS; i++) started[i] = pthread_create(&threads[i], NULL, run_worker, &par[i]) == 0;
    for (int i = 0; i < WORKERS; i++)
        if (started[i]) pthread_join(threads[i], NULL);
    for (int i = 0; i < WORKERS; i++) {
        CHECK(started[i], "%s: thread %d did not start", name, i);
        CHECK(seq[i].status == VCATTN_OK && par[i].status == VCATTN_OK, "%s %s: status %d sequential, %d concurrent",
              name, methods[i], seq[i].status, par[i].status);
        for (int s = 0; s < STEPS; s++)
            CHECK(memcmp(seq[i].out[s], par[i].out[s], COUNT * sizeof(float)) == 0,
                  "%s %s step %d: concurrent output differs from sequential", name, methods[i], s);
        free_worker(&seq[i]);
        free_worker(&par[i]);
    }
}

int main(void) {
    test_backend(VCATTN_BACKEND_CPU, "cpu");
    const char *why;
    if (vcattn_backend_available(VCATTN_BACKEND_CUDA, &why)) test_backend(VCATTN_BACKEND_CUDA, "cuda");
    else printf("test_concurrency: cuda backend skipped: %s\n", why);
    return tl_finish("test_concurrency");
}
