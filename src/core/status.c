/* The error record of a context: the lowest layer, used by the core and
 * by every backend. */
#include "internal.h"

#include <stdio.h>

vcattn_status vcattn_fail(vcattn_context *ctx, vcattn_status status, const char *fmt, ...) {
    if (ctx) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(ctx->last_error, sizeof ctx->last_error, fmt, ap);
        va_end(ap);
    }
    return status;
}
