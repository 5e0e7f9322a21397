/* vcattn command line: the one JSON writer of the reports. It places the
 * separators (", " between members, ": " after keys), quotes strings and
 * writes non-finite numbers as null (JSON has no inf or nan), so the
 * reports only name their members. */
#include "cli.h"

static void member(json_writer *w, const char *key) {
    if (w->depth > 0 && w->count[w->depth - 1]++) fputs(", ", stdout);
    if (key) {
        json_quoted(key);
        fputs(": ", stdout);
    }
}

void json_quoted(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void open_with(json_writer *w, const char *key, char bracket) {
    member(w, key);
    putchar(bracket);
    if (w->depth < JSON_MAX_DEPTH) w->count[w->depth] = 0;
    w->depth++;
}

void json_object(json_writer *w, const char *key) { open_with(w, key, '{'); }
void json_array(json_writer *w, const char *key) { open_with(w, key, '['); }

void json_end(json_writer *w, char bracket) {
    w->depth--;
    putchar(bracket);
    if (w->depth == 0) putchar('\n');
}

void json_string(json_writer *w, const char *key, const char *s) {
    member(w, key);
    json_quoted(s);
}

void json_number(json_writer *w, const char *key, double x) {
    member(w, key);
    if (isfinite(x)) printf("%.9g", x);
    else fputs("null", stdout);
}

/* A float32 field as typed (%.7g), not its binary expansion. */
void json_float(json_writer *w, const char *key, float x) {
    member(w, key);
    if (isfinite(x)) printf("%.7g", x);
    else fputs("null", stdout);
}

void json_int(json_writer *w, const char *key, long long x) {
    member(w, key);
    printf("%lld", x);
}

void json_bool(json_writer *w, const char *key, int b) {
    member(w, key);
    fputs(b ? "true" : "false", stdout);
}

void json_value_follows(json_writer *w, const char *key) { member(w, key); }
