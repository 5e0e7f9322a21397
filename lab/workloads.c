/*
 * Deterministic synthetic video-DiT attention inputs. docs/workloads.md says
 * which published observation each ingredient imitates; in short:
 *   - tokens on a T x H x W latent grid, 3-D interleaved RoPE split as Wan;
 *   - semantic regions (drifting weighted-Voronoi cells) shared by all heads;
 *   - K: large per-channel offsets shared by all tokens, one massive pair;
 *   - Q: a massive value in the same pair as K;
 *   - V: region prototype + smooth field + noise, plus a few outlier TOKENS
 *     whose spiking channels differ from head to head;
 *   - head kinds cycling over query heads: spatial, temporal, semantic.
 * Every random draw comes from a stream keyed by (seed, tag, batch, head), so
 * the bits do not depend on the thread count. Arithmetic is in double, rounded
 * to float once at the end.
 */
#include "workloads.h"

#include "vcattn_inspect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Same bits on every machine: no fused multiply-adds, which GNU C would
 * otherwise form wherever the target has them (-std=gnu11 contracts). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* ----------------------------------------------------------------- presets */

typedef struct {
    const char *name;
    int batch, heads_q, heads_kv, frames, height, width, head_dim;
    int audio, text;  /* tokens packed after the video grid (MiniMax-like), else 0 */
} preset;

static const preset PRESETS[] = {
    {"tiny", 1, 2, 1, 2, 8, 8, 64, 0, 0},
    {"small", 1, 8, 8, 4, 16, 24, 128, 0, 0},
    {"wan2.2-720p", 1, 40, 40, 21, 45, 80, 128, 0, 0},
    {"longcat-480p", 1, 32, 32, 24, 30, 52, 128, 0, 0},
    {"hunyuan-720p", 1, 16, 16, 31, 45, 80, 128, 0, 0},
    {"seq-32k", 1, 32, 32, 8, 64, 64, 128, 0, 0},
    {"d64", 1, 24, 24, 21, 45, 80, 64, 0, 0},
    /* the paper's models at CPU size: the same aspect, fewer frames and heads */
    {"wan2.2-small", 1, 8, 8, 6, 12, 20, 128, 0, 0},
    {"longcat-small", 1, 8, 8, 6, 10, 18, 128, 0, 0},
    {"hunyuan-small", 1, 8, 8, 8, 12, 20, 128, 0, 0},
    /* one sequence packing video, audio and text tokens, as joint audio-video models do */
    {"minimax-h3", 1, 40, 40, 21, 45, 80, 128, 5040, 512},
    {"minimax-small", 1, 8, 8, 4, 12, 20, 128, 160, 160},
};
#define NUM_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

static const char *const NAMES[] = {"tiny", "small", "wan2.2-720p", "longcat-480p",
                                    "hunyuan-720p", "seq-32k", "d64", "wan2.2-small",
                                    "longcat-small", "hunyuan-small", "minimax-h3",
                                    "minimax-small", NULL};
_Static_assert(sizeof NAMES / sizeof NAMES[0] == NUM_PRESETS + 1, "one name per preset");

const char *const *vcattn_workload_names(void) { return NAMES; }

/* ------------------------------------------------------- content constants */

#define REGIONS 16             /* semantic regions per video, at most */
#define AUDIO_REGION REGIONS   /* the packed audio tokens share one prototype... */
#define TEXT_REGION (REGIONS + 1)  /* ...and so do the text tokens */
#define ALL_REGIONS (REGIONS + 2)
#define V_PROTO_TEXT 1.8       /* text values: larger and more alike than video ones */
#define TOKENS_PER_REGION 384  /* at least, so small grids keep regions larger than
                                  a 128-row block, as real 720p videos do */
#define REGION_DRIFT 0.15      /* how far a region centre moves over the clip (frame heights) */
#define FIELDS 4               /* smooth low-frequency basis fields */
#define FIELD_MAX_CYCLES 1.5   /* per axis, over the whole grid */
#define SPIKE_CHANNELS 4       /* channels a head's outlier tokens may spike in */
#define OUTLIER_FRACTION 0.003 /* of tokens */
#define SPIKE_MIN 5.0          /* spike norm in units of the typical token norm */
#define SPIKE_MAX 30.0

#define ROPE_THETA 10000.0
#define TWO_PI 6.283185307179586

/* K: content on positional and semantic channels, plus offsets. */
#define K_POS 1.6          /* |k| in each positional pair */
#define K_NOISE 0.6
#define K_OFFSET_SEM 1.5   /* std of the per-channel offsets on low-frequency channels */
#define K_OFFSET_POS 0.3   /* small on positional channels: RoPE would turn them into a bias */
#define K_MASSIVE 10.0     /* |k| in the massive pair */
#define Q_MASSIVE 8.0
#define Q_NOISE 0.6
/* V = V_PROTO * prototype + smooth field (total std V_SMOOTH) + V_NOISE * noise */
#define V_PROTO 0.6
#define V_SMOOTH 0.25
#define V_NOISE 0.7

/* Target peak logits (score at zero offset minus far away, after sm_scale)
 * per head kind, for the t, y, x positional kernels and the semantic match. */
typedef enum { KIND_SPATIAL = 0, KIND_TEMPORAL, KIND_SEMANTIC, KIND_COUNT } head_kind;
static const double KIND_LOGITS[KIND_COUNT][4] = {
    /*               t    y    x    semantic */
    [KIND_SPATIAL] = {5.0, 5.0, 5.0, 1.0},
    [KIND_TEMPORAL] = {0.0, 6.5, 6.5, 1.0},
    [KIND_SEMANTIC] = {0.5, 0.5, 0.5, 6.0},
};
#define HEAD_JITTER 0.25   /* per-head factor on those logits: 1 +- this */

enum { TAG_GRID = 1, TAG_PARAMS, TAG_Q, TAG_K, TAG_V };

/* --------------------------------------------------------------------- rng */

/* xoshiro256** seeded through splitmix64; normals by Marsaglia's polar method
 * (only log and sqrt, both in double). */
typedef struct {
    uint64_t s[4];
    double spare;
    int has_spare;
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static rng rng_stream(uint64_t seed, int tag, int64_t b, int64_t h) {
    uint64_t key = ((uint64_t)tag << 56) ^ ((uint64_t)b << 28) ^ (uint64_t)h;
    uint64_t x = seed ^ splitmix64(&key);
    rng r = {{0}, 0.0, 0};
    for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
    return r;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return out;
}

static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static int rng_below(rng *r, int n) { return (int)(rng_uniform(r) * n); }

static double rng_normal(rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * rng_uniform(r) - 1.0;
        v = 2.0 * rng_uniform(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = sqrt(-2.0 * log(s) / s);
    r->spare = v * f;
    r->has_spare = 1;
    return u * f;
}

/* A random unit 2-vector without trigonometry (so no libm differences). */
static void rng_unit2(rng *r, double *c, double *s) {
    double x, y, n;
    do {
        x = 2.0 * rng_uniform(r) - 1.0;
        y = 2.0 * rng_uniform(r) - 1.0;
        n = x * x + y * y;
    } while (n >= 1.0 || n < 1e-4);
    n = sqrt(n);
    *c = x / n;
    *s = y / n;
}

/* -------------------------------------------------------------- rope split */

/* Wan2.1/2.2: of D/2 rotary pairs, height and width get (D/2)/3 each and time
 * the rest, in the order t, y, x. Within an axis pair i turns at
 * theta^(-i/pairs). The first half of an axis's pairs (fast) carries position,
 * the rest (slow, nearly position-invariant) carries semantics; the slowest
 * pair of one axis per head is the massive pair. */
typedef struct {
    int pairs[3], first[3], npos[3];
    double freq[VCATTN_MAX_HEAD_DIM / 2];
    /* |q| and |k| of a positional pair go as freq^(1/4), so its term in the
     * score as freq^(1/2): a kernel that falls to half its peak two tokens
     * away (equal weights would give a slow, logarithmic fall). Normalized so
     * the squares sum to npos over an axis. */
    double pos_weight[VCATTN_MAX_HEAD_DIM / 2];
} rope_split;

typedef enum { CH_POS = 0, CH_SEM, CH_MASSIVE } channel_class;

static rope_split rope_split_of(int head_dim) {
    rope_split rs;
    int half = head_dim / 2;
    rs.pairs[1] = rs.pairs[2] = half / 3;
    rs.pairs[0] = half - 2 * (half / 3);
    for (int a = 0, f = 0; a < 3; f += rs.pairs[a], a++) {
        rs.first[a] = f;
        rs.npos[a] = (rs.pairs[a] + 1) / 2;
        double sum = 0.0;
        for (int i = 0; i < rs.pairs[a]; i++) {
            rs.freq[f + i] = pow(ROPE_THETA, -(double)i / rs.pairs[a]);
            rs.pos_weight[f + i] = i < rs.npos[a] ? sqrt(sqrt(rs.freq[f + i])) : 0.0;
            sum += rs.pos_weight[f + i] * rs.pos_weight[f + i];
        }
        for (int i = 0; i < rs.npos[a]; i++) rs.pos_weight[f + i] *= sqrt(rs.npos[a] / sum);
    }
    return rs;
}

static int pair_axis(const rope_split *rs, int pair) {
    return pair < rs->first[1] ? 0 : pair < rs->first[2] ? 1 : 2;
}

static void fill_rope(const preset *p, const rope_split *rs, float *cos_t, float *sin_t) {
    int half = p->head_dim / 2;
    int64_t n = 0;
    for (int t = 0; t < p->frames; t++)
        for (int y = 0; y < p->height; y++)
            for (int x = 0; x < p->width; x++, n++) {
                const int pos[3] = {t, y, x};
                for (int j = 0; j < half; j++) {
                    double ang = pos[pair_axis(rs, j)] * rs->freq[j];
                    cos_t[n * half + j] = (float)cos(ang);
                    sin_t[n * half + j] = (float)sin(ang);
                }
            }
    /* Audio tokens sit on the time axis (frame of their sound); text tokens at
     * position 0 (no rotation), as 1-D positions of a packed sequence. */
    for (int i = 0; i < p->audio + p->text; i++, n++) {
        int t = i < p->audio ? (int)((int64_t)i * p->frames / p->audio) : 0;
        for (int j = 0; j < half; j++) {
            double ang = (pair_axis(rs, j) == 0 ? t : 0) * rs->freq[j];
            cos_t[n * half + j] = (float)cos(ang);
            sin_t[n * half + j] = (float)sin(ang);
        }
    }
}

/* -------------------------------------------------------- per-video grid */

/* What all heads of one batch element share: the region of every token, the
 * smooth basis fields, and which tokens are value outliers. */
typedef struct {
    int *region;        /* [N] */
    double *field;      /* [N][FIELDS], each of unit variance */
    int64_t *outliers;  /* token indices */
    int num_outliers;
} grid;

static void make_grid(const preset *p, uint64_t seed, int64_t b, grid *g) {
    rng r = rng_stream(seed, TAG_GRID, b, 0);
    const double aspect = (double)p->width / p->height;
    /* Multiplicatively weighted Voronoi cells in frame-height units, whose
     * centres move on straight lines over the clip. */
    int64_t tokens = (int64_t)p->frames * p->height * p->width;
    int regions = tokens / TOKENS_PER_REGION < 2 ? 2
                : tokens / TOKENS_PER_REGION > REGIONS ? REGIONS : (int)(tokens / TOKENS_PER_REGION);
    double cy[REGIONS], cx[REGIONS], vy[REGIONS], vx[REGIONS], wt[REGIONS];
    for (int i = 0; i < regions; i++) {
        double c, s, speed;
        cy[i] = rng_uniform(&r);
        cx[i] = rng_uniform(&r) * aspect;
        rng_unit2(&r, &c, &s);
        speed = REGION_DRIFT * rng_uniform(&r);
        vy[i] = speed * s;
        vx[i] = speed * c;
        wt[i] = 0.6 + 0.8 * rng_uniform(&r);
    }
    /* Plane waves of at most FIELD_MAX_CYCLES cycles per axis over the grid. */
    double fq[FIELDS][3], ph[FIELDS][2];
    for (int m = 0; m < FIELDS; m++) {
        for (int a = 0; a < 3; a++) fq[m][a] = FIELD_MAX_CYCLES * (2.0 * rng_uniform(&r) - 1.0);
        rng_unit2(&r, &ph[m][0], &ph[m][1]);
    }
    int64_t n = 0;
    for (int t = 0; t < p->frames; t++)
        for (int y = 0; y < p->height; y++)
            for (int x = 0; x < p->width; x++, n++) {
                double tt = p->frames > 1 ? (double)t / (p->frames - 1) : 0.0;
                double py = (y + 0.5) / p->height, px = (x + 0.5) / p->height;
                double best = INFINITY;
                for (int i = 0; i < regions; i++) {
                    double dy = py - cy[i] - vy[i] * tt, dx = px - cx[i] - vx[i] * tt;
                    double d = wt[i] * (dy * dy + dx * dx);
                    if (d < best) {
                        best = d;
                        g->region[n] = i;
                    }
                }
                double u[3] = {(double)t / p->frames, (double)y / p->height,
                               (double)x / p->width};
                for (int m = 0; m < FIELDS; m++) {
                    double arg = TWO_PI * (fq[m][0] * u[0] + fq[m][1] * u[1] + fq[m][2] * u[2]);
                    g->field[n * FIELDS + m] = sqrt(2.0) * (cos(arg) * ph[m][0] - sin(arg) * ph[m][1]);
                }
            }
    /* Packed tokens: audio is smooth in time, text has no smooth field. */
    for (int i = 0; i < p->audio + p->text; i++, n++) {
        int audio = i < p->audio;
        g->region[n] = audio ? AUDIO_REGION : TEXT_REGION;
        double ta = audio ? (double)i / p->audio : 0.0;
        for (int m = 0; m < FIELDS; m++) {
            double arg = TWO_PI * fq[m][0] * ta;
            g->field[n * FIELDS + m] = audio ? sqrt(2.0) * (cos(arg) * ph[m][0] - sin(arg) * ph[m][1]) : 0.0;
        }
    }
    /* Distinct outlier tokens anywhere in the sequence. */
    for (int i = 0; i < g->num_outliers; i++) {
        int64_t tok;
        int dup;
        do {
            tok = (int64_t)(rng_uniform(&r) * (double)n);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= g->outliers[j] == tok;
        } while (dup);
        g->outliers[i] = tok;
    }
}

/* ------------------------------------------------------ per-KV-head params */

/* Everything a KV head and the query heads of its group share. */
typedef struct {
    unsigned char cls[VCATTN_MAX_HEAD_DIM];        /* channel_class of each channel */
    double udir[VCATTN_MAX_HEAD_DIM];              /* direction x pos_weight per positional pair */
    double koff[VCATTN_MAX_HEAD_DIM];              /* K offsets, massive pair included */
    double qmass[VCATTN_MAX_HEAD_DIM];             /* Q massive pair, 0 elsewhere */
    double kproto[ALL_REGIONS][VCATTN_MAX_HEAD_DIM];   /* semantic channels only */
    double vproto[ALL_REGIONS][VCATTN_MAX_HEAD_DIM];
    double vfield[FIELDS][VCATTN_MAX_HEAD_DIM];
    int spike[SPIKE_CHANNELS];
} kv_params;

static void make_params(const preset *p, const rope_split *rs, uint64_t seed, int64_t b,
                        int64_t h, kv_params *kp) {
    rng r = rng_stream(seed, TAG_PARAMS, b, h);
    const int D = p->head_dim;
    memset(kp, 0, sizeof *kp);
    int ma = rng_below(&r, 3);
    int massive_pair = rs->first[ma] + rs->pairs[ma] - 1;
    for (int j = 0; j < D / 2; j++) {
        int a = pair_axis(rs, j);
        double *u = &kp->udir[2 * j], *ko = &kp->koff[2 * j], *qm = &kp->qmass[2 * j];
        channel_class c = j - rs->first[a] < rs->npos[a] ? CH_POS
                        : j == massive_pair             ? CH_MASSIVE
                                                        : CH_SEM;
        kp->cls[2 * j] = kp->cls[2 * j + 1] = (unsigned char)c;
        if (c == CH_POS) {
            rng_unit2(&r, &u[0], &u[1]);
            u[0] *= rs->pos_weight[j];
            u[1] *= rs->pos_weight[j];
            ko[0] = K_OFFSET_POS * rng_normal(&r);
            ko[1] = K_OFFSET_POS * rng_normal(&r);
        } else if (c == CH_SEM) {
            ko[0] = K_OFFSET_SEM * rng_normal(&r);
            ko[1] = K_OFFSET_SEM * rng_normal(&r);
        } else {
            rng_unit2(&r, &ko[0], &ko[1]);
            rng_unit2(&r, &qm[0], &qm[1]);
            ko[0] *= K_MASSIVE; ko[1] *= K_MASSIVE;
            qm[0] *= Q_MASSIVE; qm[1] *= Q_MASSIVE;
        }
    }
    for (int i = 0; i < REGIONS; i++)
        for (int d = 0; d < D; d++)
            kp->kproto[i][d] = kp->cls[d] == CH_SEM ? rng_normal(&r) : 0.0;
    for (int i = 0; i < REGIONS; i++)
        for (int d = 0; d < D; d++) kp->vproto[i][d] = rng_normal(&r);
    for (int m = 0; m < FIELDS; m++)
        for (int d = 0; d < D; d++) kp->vfield[m][d] = V_SMOOTH / sqrt(FIELDS) * rng_normal(&r);
    for (int i = 0; i < SPIKE_CHANNELS; i++) {
        int dup;
        do {
            kp->spike[i] = rng_below(&r, D);
            dup = 0;
            for (int j = 0; j < i; j++) dup |= kp->spike[j] == kp->spike[i];
        } while (dup);
    }
    /* Drawn last, so the video-only presets keep their bytes. */
    for (int i = REGIONS; i < ALL_REGIONS; i++)
        for (int d = 0; d < D; d++) {
            kp->kproto[i][d] = kp->cls[d] == CH_SEM ? rng_normal(&r) : 0.0;
            kp->vproto[i][d] = rng_normal(&r);
        }
}

/* ----------------------------------------------------------------- tensors */

static void fill_q(const preset *p, const rope_split *rs, const grid *g, const kv_params *kp,
                   uint64_t seed, int64_t b, int64_t h, int64_t N, float *dst) {
    const int D = p->head_dim;
    rng r = rng_stream(seed, TAG_Q, b, h);
    head_kind kind = (head_kind)(h % KIND_COUNT);
    double jitter = 1.0 + HEAD_JITTER * (2.0 * rng_uniform(&r) - 1.0);
    /* Gains that put the kernel peaks at KIND_LOGITS after sm_scale. */
    int nsem = 0;
    for (int d = 0; d < D; d++) nsem += kp->cls[d] == CH_SEM;
    double gain[3], qconst[VCATTN_MAX_HEAD_DIM];
    for (int a = 0; a < 3; a++)
        gain[a] = KIND_LOGITS[kind][a] * jitter * sqrt(D) / (rs->npos[a] * K_POS);
    double gsem = KIND_LOGITS[kind][3] * jitter * sqrt(D) / nsem;
    for (int d = 0; d < D; d++)
        qconst[d] = kp->cls[d] == CH_POS ? gain[pair_axis(rs, d / 2)] * kp->udir[d] : kp->qmass[d];
    for (int64_t n = 0; n < N; n++) {
        const double *proto = kp->kproto[g->region[n]];
        for (int d = 0; d < D; d++)
            dst[n * D + d] = (float)(qconst[d] + gsem * proto[d] + Q_NOISE * rng_normal(&r));
    }
}

static void fill_k(const preset *p, const grid *g, const kv_params *kp, uint64_t seed,
                   int64_t b, int64_t h, int64_t N, float *dst) {
    const int D = p->head_dim;
    rng r = rng_stream(seed, TAG_K, b, h);
    double kconst[VCATTN_MAX_HEAD_DIM];
    for (int d = 0; d < D; d++) kconst[d] = K_POS * kp->udir[d] + kp->koff[d];
    for (int64_t n = 0; n < N; n++) {
        const double *proto = kp->kproto[g->region[n]];
        for (int d = 0; d < D; d++)
            dst[n * D + d] = (float)(kconst[d] + proto[d] + K_NOISE * rng_normal(&r));
    }
}

static void fill_v(const preset *p, const grid *g, const kv_params *kp, uint64_t seed,
                   int64_t b, int64_t h, int64_t N, float *dst) {
    const int D = p->head_dim;
    rng r = rng_stream(seed, TAG_V, b, h);
    for (int64_t n = 0; n < N; n++) {
        const double *proto = kp->vproto[g->region[n]], *f = &g->field[n * FIELDS];
        const double vp = g->region[n] == TEXT_REGION ? V_PROTO_TEXT : V_PROTO;
        for (int d = 0; d < D; d++) {
            double s = vp * proto[d] + V_NOISE * rng_normal(&r);
            for (int m = 0; m < FIELDS; m++) s += f[m] * kp->vfield[m][d];
            dst[n * D + d] = (float)s;
        }
    }
    /* Outlier tokens spike in one or two of this head's spike channels, with a
     * norm of SPIKE_MIN..SPIKE_MAX typical token norms (log-uniform): large
     * enough that a rotation, which keeps the norm, cannot dissolve them. */
    const double typical = sqrt((V_PROTO * V_PROTO + V_SMOOTH * V_SMOOTH + V_NOISE * V_NOISE) * D);
    for (int i = 0; i < g->num_outliers; i++) {
        int c0 = rng_below(&r, SPIKE_CHANNELS), count = 1 + rng_below(&r, 2);
        double mag = typical * SPIKE_MIN * pow(SPIKE_MAX / SPIKE_MIN, rng_uniform(&r)) / sqrt(count);
        for (int j = 0; j < count; j++) {
            int ch = kp->spike[(c0 + j) % SPIKE_CHANNELS];
            double sign = rng_next(&r) >> 63 ? -1.0 : 1.0;
            float *e = &dst[g->outliers[i] * D + ch];
            *e = (float)(*e + sign * mag);
        }
    }
}

/* -------------------------------------------------------------------- api */

vcattn_status vcattn_workload_generate(const char *name, uint64_t seed, vcattn_workload *out) {
    if (!name || !out) return VCATTN_ERR_NULL_POINTER;
    memset(out, 0, sizeof *out);
    const preset *p = NULL;
    for (int i = 0; i < NUM_PRESETS; i++)
        if (strcmp(name, PRESETS[i].name) == 0) p = &PRESETS[i];
    if (!p) return VCATTN_ERR_UNKNOWN_NAME;

    const int64_t N = (int64_t)p->frames * p->height * p->width + p->audio + p->text, D = p->head_dim;
    const int64_t B = p->batch, Hq = p->heads_q, Hkv = p->heads_kv;
    const rope_split rs = rope_split_of(p->head_dim);
    vcattn_workload w;
    memset(&w, 0, sizeof w);
    grid g = {0};
    g.num_outliers = (int)(OUTLIER_FRACTION * N + 0.5);
    if (g.num_outliers < 1) g.num_outliers = 1;
    w.q = malloc((size_t)(B * Hq * N * D) * sizeof(float));
    w.k = malloc((size_t)(B * Hkv * N * D) * sizeof(float));
    w.v = malloc((size_t)(B * Hkv * N * D) * sizeof(float));
    w.rope_cos = malloc((size_t)(N * D / 2) * sizeof(float));
    w.rope_sin = malloc((size_t)(N * D / 2) * sizeof(float));
    kv_params *kp = malloc((size_t)Hkv * sizeof *kp);
    g.region = malloc((size_t)N * sizeof *g.region);
    g.field = malloc((size_t)(N * FIELDS) * sizeof *g.field);
    g.outliers = malloc((size_t)g.num_outliers * sizeof *g.outliers);
    vcattn_status st = VCATTN_OK;
    if (!w.q || !w.k || !w.v || !w.rope_cos || !w.rope_sin || !kp || !g.region || !g.field ||
        !g.outliers) {
        vcattn_workload_free(&w);
        st = VCATTN_ERR_OUT_OF_MEMORY;
        goto done;
    }

    fill_rope(p, &rs, w.rope_cos, w.rope_sin);
    for (int64_t b = 0; b < B; b++) {
        make_grid(p, seed, b, &g);
        for (int64_t h = 0; h < Hkv; h++) make_params(p, &rs, seed, b, h, &kp[h]);
        /* One task per head and tensor; each owns its stream and its output. */
        #pragma omp parallel for schedule(dynamic, 1)
        for (int64_t task = 0; task < Hq + 2 * Hkv; task++) {
            if (task < Hq) {
                const kv_params *pk = &kp[task / (Hq / Hkv)];
                fill_q(p, &rs, &g, pk, seed, b, task, N, w.q + ((b * Hq + task) * N * D));
            } else if (task < Hq + Hkv) {
                int64_t h = task - Hq;
                fill_k(p, &g, &kp[h], seed, b, h, N, w.k + ((b * Hkv + h) * N * D));
            } else {
                int64_t h = task - Hq - Hkv;
                fill_v(p, &g, &kp[h], seed, b, h, N, w.v + ((b * Hkv + h) * N * D));
            }
        }
    }
    memcpy(w.name, p->name, strlen(p->name) + 1);
    w.batch = B;
    w.heads_q = Hq;
    w.heads_kv = Hkv;
    w.tokens = N;
    w.head_dim = D;
    w.frames = p->frames;
    w.height = p->height;
    w.width = p->width;
    w.rope_style = VCATTN_ROPE_INTERLEAVED;
    *out = w;
done:
    free(kp);
    free(g.region);
    free(g.field);
    free(g.outliers);
    return st;
}

void vcattn_workload_free(vcattn_workload *w) {
    if (!w) return;
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->rope_cos);
    free(w->rope_sin);
    memset(w, 0, sizeof *w);
}
