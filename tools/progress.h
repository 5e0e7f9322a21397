/* The CLI's view of long CPU calls, on stderr: an estimate before the call
 * (timed on a slice of it), then the share of rows done and the time left. */
#ifndef VCATTN_TOOLS_PROGRESS_H
#define VCATTN_TOOLS_PROGRESS_H

#include "vcattn.h"

typedef struct {
    const char *label;
    double start_ms;
    int always;      /* from the first row on (--progress), not only after a second */
    int tty;         /* stderr is a terminal: one bar redrawn in place */
    int last_tenth;  /* otherwise a line at each tenth */
    int drawn;
} cli_progress;

double cli_now_ms(void);

/* Shows the progress of ctx's calls until cli_progress_end (p must live as
 * long). */
void cli_progress_begin(cli_progress *p, vcattn_context *ctx, const char *label, int always);
void cli_progress_end(cli_progress *p, vcattn_context *ctx);

/* On the CPU backend, for calls of more than about 10^11 multiply-adds:
 * times one 64-row slice of the call (the first query head against every
 * key) and prints what the whole call should take on `threads` threads. */
void cli_print_estimate(vcattn_context *ctx, const vcattn_config *cfg, const vcattn_tensor *q,
                        const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope, int threads);

#endif
