/* vcattn: the command-line tool; this file holds `vcattn expcast` and the
 * entry point.
 *   run      one attention call, timed and measured against the FP64 reference
 *   eval     every method on one workload: fidelity, V-quantization error, the
 *            probability/value split of the paper's eq. 2, V block-mean energy
 *   expcast  the ExpCast-FP8 facts, computed from the codec
 * Exit status: 0 ok, 1 library error (bad file, shape, backend), 2 usage. */
#include "cli.h"

static int cmd_expcast(int argc, char **argv) {
    float beta = -0.35f;
    int json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE_EXPCAST, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--beta") == 0) {
            if (i + 1 >= argc) return usage_error("expcast", "option '--beta' needs a value");
            if (!parse_float(argv[++i], -1.0, 1.0, 1, &beta))
                return usage_error("expcast", "--beta: '%s' is not a number in (-1, 1)", argv[i]);
        } else {
            return usage_error("expcast", a[0] == '-' ? "unknown option '%s' for expcast"
                                                      : "unexpected argument '%s'", a);
        }
    }
    expcast_facts f;
    expcast_compute(beta, &f);
    expcast_print(&f, json, stdout);
    return 0;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv) {
    /* A write past the file-size limit then fails with EFBIG and npy_write
     * removes its temporary file, instead of SIGXFSZ killing the process. */
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("vcattn %s\n", vcattn_version_string());
        return 0;
    }
    if (strcmp(cmd, "expcast") == 0) return cmd_expcast(argc, argv);
    if (strcmp(cmd, "run") != 0 && strcmp(cmd, "eval") != 0)
        return usage_error(NULL, cmd[0] == '-' ? "unknown option '%s'" : "unknown command '%s'",
                           cmd);

    options o = {0};
    o.cmd = cmd;
    o.method = "vc";
    o.backend = VCATTN_BACKEND_AUTO;
    o.dtype = VCATTN_DTYPE_BF16;
    o.hadamard = o.k_smoothing = o.vsmooth = o.qk = o.p = o.v = o.clusters = o.iters = o.expcast_min_keys = o.probe_rows = o.order_rows = -1;
    o.beta = o.sm_scale = o.sink_guard = NAN;
    int rc = parse_options(argc, argv, &o);
    if (rc != PROCEED) return rc;
    if (!o.q_path && !o.workload) o.workload = "small";
    /* --threads bounds everything OpenMP runs here: the reference too. */
    if (o.threads > 0) omp_set_num_threads(o.threads);
    return strcmp(cmd, "run") == 0 ? cmd_run(&o) : cmd_eval(&o);
}
