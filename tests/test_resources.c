/* Resource failures inside a call. Under an address-space limit that leaves
 * room for the call's buffers but not for the thread stacks of a large
 * OpenMP team, libgomp could not start its threads and exited the process
 * from inside vcattn_attention ("Thread creation failed"): no status came
 * back. Now the team gets the threads that can be started. Run in a child
 * process forked before any OpenMP use (the limit would bind the whole test
 * otherwise); skipped under the sanitizers, whose runtimes reserve address
 * space of their own. */
#define _GNU_SOURCE
#include "testlib.h"
#include "vcattn.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif

enum { H = 2, N = 300, D = 64, CALLED_OK = 42 };
static float q[H * N * D], k[H * N * D], v[H * N * D], out[H * N * D];

/* Bytes of address space the process maps now (/proc/self/statm), or 0. */
static long mapped_bytes(void) {
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    if (fscanf(f, "%ld", &pages) != 1) pages = 0;
    fclose(f);
    return pages * sysconf(_SC_PAGESIZE);
}

/* The child: 64 MB of address space beyond what it maps, a call that asks
 * for 64 threads (a team's stacks alone take 63 x 8 MB by default). */
static int limited_call(void) {
    for (int i = 0; i < H * N * D; i++) q[i] = nrand(), k[i] = nrand(), v[i] = nrand();
    vcattn_context *ctx;
    if (vcattn_create(&ctx, VCATTN_BACKEND_CPU) != VCATTN_OK) return 2;
    const long limit = mapped_bytes() + (64l << 20);
    struct rlimit r = {(rlim_t)limit, (rlim_t)limit};
    if (limit <= (64l << 20) || setrlimit(RLIMIT_AS, &r) != 0) return 2;
    vcattn_config cfg;
    vcattn_config_from_method("vc", &cfg);
    cfg.num_threads = 64;
    vcattn_tensor tq = vcattn_tensor_bhnd(q, VCATTN_DTYPE_F32, 1, H, N, D);
    vcattn_tensor tk = vcattn_tensor_bhnd(k, VCATTN_DTYPE_F32, 1, H, N, D);
    vcattn_tensor tv = vcattn_tensor_bhnd(v, VCATTN_DTYPE_F32, 1, H, N, D);
    vcattn_tensor to = vcattn_tensor_bhnd(out, VCATTN_DTYPE_F32, 1, H, N, D);
    const vcattn_status st = vcattn_attention(ctx, &cfg, &tq, &tk, &tv, &to, NULL, NULL, NULL);
    int finite = 1;
    for (int i = 0; i < H * N * D; i++) finite &= isfinite(out[i]) != 0;
    if (st != VCATTN_OK) fprintf(stderr, "limited call: status %d (%s)\n", st, vcattn_last_error(ctx));
    vcattn_destroy(ctx);
    return st == VCATTN_OK && finite ? CALLED_OK : 3;
}

static void test_thread_start_failure(void) {
#ifdef UNDER_SANITIZER
    printf("test_resources: thread starts under an address-space limit skipped: not under a sanitizer\n");
#else
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) _exit(limited_call());
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork and wait");
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    CHECK(code == CALLED_OK, "a call asking for 64 threads under an address-space limit: child exit %d "
          "(%d: the call returned OK with finite outputs; 1: libgomp exited the process)", code, CALLED_OK);
#endif
}

int main(int argc, char **argv) {
    tl_args(argc, argv);
    TL_RUN(test_thread_start_failure());
    return tl_finish("test_resources");
}
