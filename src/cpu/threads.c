/* How many OpenMP threads a call can have. libgomp exits the process when it
 * cannot start a thread (under an address-space limit, say), so a team larger
 * than any this host thread has run is first tried with plain threads. */
#include "cpu_backend.h"

#include <omp.h>
#include <pthread.h>

static void *exit_at_once(void *arg) { return arg; }

/* At most wanted, at least 1: the team sizes this host thread has run need
 * no new threads (libgomp keeps each host thread's pool); a larger one is
 * tried with threads of the default attributes, as libgomp's, all alive at
 * once and then joined, and the team gets as many as started (outputs are the
 * same for any thread count). */
int cpu_startable_threads(int wanted) {
    static _Thread_local int known = 1;
    if (wanted <= known) return wanted < 1 ? 1 : wanted;
    if (wanted > VCATTN_MAX_THREADS) wanted = VCATTN_MAX_THREADS;
    pthread_t threads[VCATTN_MAX_THREADS];
    int started = 0;
    while (started < wanted - 1 && pthread_create(&threads[started], NULL, exit_at_once, NULL) == 0) started++;
    for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);
    if (started + 1 == wanted) known = wanted;
    return started + 1;
}

int cpu_thread_count(const vcattn_config *cfg) {
    return cpu_startable_threads(cfg->num_threads > 0 ? cfg->num_threads : omp_get_max_threads());
}
