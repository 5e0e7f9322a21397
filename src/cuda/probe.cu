// V-Smooth's attention probe (src/vsmooth/vsmooth.h states the arithmetic):
// S sampled query rows scored against every key with the call's INT8 codes,
// their ExpCast probabilities kept as code bytes, then per-row sums; the
// weights themselves are formed in v_stats_kernel (quantize_values.cu), tile by
// tile, from what these two kernels leave. Same sums in the same order as
// the CPU's probe_and_quantize_values: the weights agree to the bit. Compiled
// with -fmad=false, as the quantizers.
#include "chain.cuh"
#include "kernels.h"
#include "launch_facts.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

#include <cuda_pipeline.h>
#include <mma.h>

namespace {

constexpr int kThreads = 256;

// A pass over a key tile scores R probe rows (64, or 32 when the call has no
// more): each row by 256 / R threads of one warp, lanes R / 8 apart, each
// thread KEYS keys; the 16 x 16 score tiles split so that warp w takes row
// tile w % (R / 16) and R / 16 key tiles.
template <int R> struct pass_shape {
    static_assert(R == 32 || R == 64, "32 or 64 probe rows a pass");
    static constexpr int kThreadsPerRow = kThreads / R, kRowsPerWarp = 32 / kThreadsPerRow;
    static constexpr int kKeys = VC_KV_ROWS / kThreadsPerRow, kRowTiles = R / 16;
};

// A probe byte's probability in units of 2^-9, as vcattn_e4m3_decode(code)
// * 512 gives it, in integer shifts (the bytes are 0..0x78: positive, never
// NaN; subnormal m / 512 is m units, normal 2^(e-7) (1 + m/8) is (8 + m) <<
// (e - 1)).
__device__ __forceinline__ unsigned probe_units(uint8_t code) {
    const unsigned e = code >> 3, m = code & 7u;
    return e ? (8u + m) << (e - 1) : m;
}

// Key tiles a block scores in turn (a run), the next tile's keys copied in
// while the block scores the current one (its probe rows loaded once when
// one pass takes them all): at most kMaxRun, and fewer where runs would
// leave SMs idle. Each tile's outputs are its own: runs change no bit.
constexpr int kMaxRun = 4;

// The dynamic shared memory of probe_tile_kernel<D>: two key tiles and a
// pass's probe rows, INT8, each as D/16 slabs of 16 channels ([slab][row][16]:
// every 16 x 16 fragment is 256 contiguous bytes, as the tensor cores'
// fragment loads want them aligned), then the pass's integer scores (53.8 KB
// at D 128 and R 32, 74.8 KB at R 64).
template <int D, int R> struct probe_smem {
    static constexpr int kKeys = VC_KV_ROWS * D, kRows = R * D, kScoreLd = VC_KV_ROWS + 4;
    static constexpr int kScores = R * kScoreLd * 4;
    static constexpr int kBytes = 2 * kKeys + kRows + kScores;
    static __device__ int at(int row, int col, int rows) { return (col / 16) * rows * 16 + row * 16 + col % 16; }
};

// Key tile `tile` of head `head` into keys (tile image -> slabs) and its four
// K scales into kmul, asynchronously, as one commit group.
template <int D>
__device__ void fetch_keys(const probe_args &a, int64_t head, int tile, int tiles, int8_t *keys, float *kmul) {
    const int8_t *ktile = a.k_codes + (head * tiles + tile) * (int64_t)VC_KV_ROWS * D;
    for (int c = threadIdx.x; c < VC_KV_ROWS * D / 16; c += kThreads) {
        uint32_t r, col;
        vc_tile_coords((uint32_t)c * 16, VC_KV_ROWS, &r, &col);
        __pipeline_memcpy_async(keys + probe_smem<D, 32>::at(r, col, VC_KV_ROWS), ktile + c * 16, 16);
    }
    if (threadIdx.x < 4) __pipeline_memcpy_async(&kmul[threadIdx.x], &a.k_mul[(head * tiles + tile) * 4 + threadIdx.x], 4);
    __pipeline_commit();
}

// Probe rows base.. base + R - 1 (zero past a.rows) into rows, with their
// score factors and query heads.
template <int D, int R>
__device__ void load_rows(const probe_args &a, int b, int h, int base, int8_t *rows, float *row_mul, int *row_head) {
    const int group = a.heads_q / a.heads_kv;
    const int64_t first = ((int64_t)b * a.heads_kv + h) * a.rows;  // the head's rows in the packed codes
    for (int c = threadIdx.x; c < R * D / 16; c += kThreads) {
        const int r = c / (D / 16), col = (c % (D / 16)) * 16, s = base + r;
        const uint4 v = s < a.rows ? *reinterpret_cast<const uint4 *>(a.q_codes + (first + s) * D + col)
                                   : make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4 *>(rows + probe_smem<D, R>::at(r, col, R)) = v;
    }
    if (threadIdx.x < R) {
        const int s = base + threadIdx.x;
        row_mul[threadIdx.x] = s < a.rows ? a.q_mul[first + s] * a.score_mul : 0.0f;
        row_head[threadIdx.x] = (int)((int64_t)b * a.heads_q + (int64_t)h * group + s % group);
    }
}

// A run of 128-key tiles of one key head against the probe rows, R at
// a time: the integer scores of a pass on the tensor cores (int8 in, exact
// int32 out: the dp4a sums to the bit), then each row by the threads
// pass_shape gives it (shared-memory reads free of bank conflicts), so the
// maximum and the sums are a thread's own loop and a few shuffles. Writes the
// code bytes [head][tile][S][128], and per (row, tile) the ceiling C_st and
// the exact sums L_st, S_st ([head][S][T]). Blocks an SM is what pays:
// passes of 32 rows fit four (64 registers, no spill; five spill), of 64
// three.
template <int D, int R>
__global__ void __launch_bounds__(kThreads, R == 32 ? 4 : 3) probe_tile_kernel(probe_args a, int tiles, int run) {
    chain_begin();
    using namespace nvcuda;
    using smem = probe_smem<D, R>;
    using shape = pass_shape<R>;
    constexpr int kKeysPerThread = shape::kKeys;
    extern __shared__ __align__(16) uint8_t probe_smem_bytes[];
    int8_t *const key_buf = reinterpret_cast<int8_t *>(probe_smem_bytes);
    int8_t *const rows = key_buf + 2 * smem::kKeys;
    int *const scores = reinterpret_cast<int *>(rows + smem::kRows);
    __shared__ float row_mul[R];
    __shared__ int row_head[R];
    __shared__ float kmul_buf[2][4];  // key j's scale is kmul[(j & 7) >> 1] (in registers, they spilled)
    __shared__ unsigned units_s[128];  // probe_units of every code byte: a read, not five integer operations
    const int h = blockIdx.y, b = blockIdx.z;
    const int64_t head = (int64_t)b * a.heads_kv + h;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int first = blockIdx.x * run, last = min(tiles, first + run);
    if (threadIdx.x < 128) units_s[threadIdx.x] = probe_units((uint8_t)threadIdx.x);  // read after a barrier

    fetch_keys<D>(a, head, first, tiles, key_buf + (first & 1) * smem::kKeys, kmul_buf[first & 1]);
    if (a.rows <= R) load_rows<D, R>(a, b, h, 0, rows, row_mul, row_head);  // one pass takes them all
    for (int tile = first; tile < last; tile++) {
        const int buf = tile & 1;
        const int8_t *keys = key_buf + buf * smem::kKeys;
        const float *kmul = kmul_buf[buf];
        __syncthreads();  // the previous tile is done with the other buffer and the scores
        if (tile + 1 < last) {
            fetch_keys<D>(a, head, tile + 1, tiles, key_buf + (buf ^ 1) * smem::kKeys, kmul_buf[buf ^ 1]);
            __pipeline_wait_prior(1);
        } else {
            __pipeline_wait_prior(0);
        }
        const int count = min(VC_KV_ROWS, a.tokens_k - tile * VC_KV_ROWS);
        for (int base = 0; base < a.rows; base += R) {
            if (a.rows > R) {
                if (base > 0) __syncthreads();  // the last pass's rows are done with row_mul and row_head
                load_rows<D, R>(a, b, h, base, rows, row_mul, row_head);
            }
            __syncthreads();  // this tile's keys (every thread's copies) and the pass's rows are in
            {  // scores[r][j] = rows[r] . keys[j]: warp w, row tile w % T, key tiles T (w / T).. (T row tiles)
                constexpr int T = shape::kRowTiles;
                wmma::fragment<wmma::matrix_a, 16, 16, 16, signed char, wmma::row_major> fa;
                wmma::fragment<wmma::matrix_b, 16, 16, 16, signed char, wmma::col_major> fb;
                wmma::fragment<wmma::accumulator, 16, 16, 16, int> fc[T];
                const int ti = warp % T, tj0 = (warp / T) * T;
#pragma unroll
                for (int f = 0; f < T; f++) wmma::fill_fragment(fc[f], 0);
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    wmma::load_matrix_sync(fa, reinterpret_cast<const signed char *>(rows) + smem::at(16 * ti, 16 * kk, R),
                                           16);
#pragma unroll
                    for (int f = 0; f < T; f++) {
                        wmma::load_matrix_sync(fb, reinterpret_cast<const signed char *>(keys) +
                                                       smem::at(16 * (tj0 + f), 16 * kk, VC_KV_ROWS), 16);
                        wmma::mma_sync(fc[f], fa, fb, fc[f]);
                    }
                }
#pragma unroll
                for (int f = 0; f < T; f++)
                    wmma::store_matrix_sync(scores + 16 * ti * smem::kScoreLd + 16 * (tj0 + f), fc[f], smem::kScoreLd,
                                            wmma::mem_row_major);
            }
            __syncthreads();
            // Row r's keys k0.. k0 + KEYS - 1, read 4 at a time (16-byte reads:
            // each quarter-warp's eight lanes fall in distinct banks); the score
            // as the attention kernel forms it, twice (for the maximum, then for
            // the codes) rather than kept in registers. The maximum by fmaxf,
            // as the CPU's (NaN left out; a zero's sign may differ, which moves
            // neither a code nor a shift); keys past the end score -inf, code 0.
            constexpr int kRowLanes = shape::kRowsPerWarp;  // lanes of a warp's rows; a row's threads are this far apart
            const int r = kRowLanes * warp + lane % kRowLanes, k0 = kKeysPerThread * (lane / kRowLanes), s = base + r;
            const int4 *score4 = reinterpret_cast<const int4 *>(scores + r * smem::kScoreLd + k0);
            const float *bias = a.key_bias ? a.key_bias + ((int64_t)row_head[r] * tiles + tile) * VC_KV_ROWS + k0 : nullptr;
            auto score_of = [&](int i, int product) {
                const float mult = row_mul[r] * kmul[(i & 7) >> 1];  // k0 is a multiple of 8
                const float t = bias ? fmaf((float)product, mult, bias[i]) : (float)product * mult;
                return k0 + i < count ? t : -INFINITY;
            };
            float mx = -INFINITY;
#pragma unroll
            for (int g = 0; g < kKeysPerThread / 4; g++) {
                const int4 p = score4[g];
                mx = fmaxf(mx, fmaxf(fmaxf(score_of(4 * g, p.x), score_of(4 * g + 1, p.y)),
                                     fmaxf(score_of(4 * g + 2, p.z), score_of(4 * g + 3, p.w))));
            }
#pragma unroll
            for (int o = kRowLanes; o < 32; o *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            const float ceiling = ceilf(mx);
            // Probabilities in units of 2^-9 (at most 2^17): exact integer sums.
            unsigned sum = 0, word[kKeysPerThread / 4] = {};
            unsigned long long sq = 0;
#pragma unroll
            for (int g = 0; g < kKeysPerThread / 4; g++) {
                const int4 p = score4[g];
                const int product[4] = {p.x, p.y, p.z, p.w};
                unsigned code[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    code[e] = vsmooth_probe_code(score_of(4 * g + e, product[e]), ceiling);
                    const unsigned n = units_s[code[e]];
                    sum += n;
                    sq += (unsigned long long)n * n;
                }
                word[g] = __byte_perm(__byte_perm(code[0], code[1], 0x0040), __byte_perm(code[2], code[3], 0x0040),
                                      0x5410);
            }
#pragma unroll
            for (int o = kRowLanes; o < 32; o *= 2) {
                sum += __shfl_xor_sync(0xffffffffu, sum, o);
                sq += __shfl_xor_sync(0xffffffffu, sq, o);
            }
            if (s < a.rows) {
                uint4 *dst = reinterpret_cast<uint4 *>(a.codes + ((head * tiles + tile) * a.rows + s) * VC_KV_ROWS + k0);
#pragma unroll
                for (int w4 = 0; w4 < kKeysPerThread / 16; w4++)  // the row's bytes k0.. k0 + KEYS - 1
                    dst[w4] = make_uint4(word[4 * w4], word[4 * w4 + 1], word[4 * w4 + 2], word[4 * w4 + 3]);
                if (lane < kRowLanes) {
                    const int64_t at = (head * a.rows + s) * tiles + tile;
                    a.tile_ceiling[at] = ceiling;
                    a.tile_sum[at] = ldexp((double)sum, -9);  // exact: the CPU's double sums
                    a.tile_sq[at] = ldexp((double)sq, -18);
                }
            }
        }
    }
}

// Per key head, a warp per probe row (32 warps: rows w, w + 32, ...): C_s
// (the maximum of the row's tile ceilings, over the lanes), then l_s and Q_s,
// their terms formed by the lanes 32 tiles at a time and added by lane 0 in
// tile order (the CPU's order: the same doubles), then each tile's factor
// f_st by the lanes; last the mean weight, summed over s ascending.
constexpr int kRowsThreads = 1024;
__global__ void __launch_bounds__(kRowsThreads) probe_rows_kernel(probe_args a, int tiles) {
    chain_begin();
    constexpr int kWarps = kRowsThreads / 32;
    __shared__ double contribution[VCATTN_MAX_PROBE_ROWS];
    __shared__ double term_l[kWarps][32], term_q[kWarps][32];
    const int64_t head = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int s = warp; s < a.rows; s += kWarps) {
        const int64_t row = (head * a.rows + s) * tiles;
        float c = -INFINITY;
        for (int t = lane; t < tiles; t += 32) c = fmaxf(c, a.tile_ceiling[row + t]);
        c = warp_max(c);  // a zero's sign may differ from the CPU's: the shifts cannot
        double l = 0.0, q2 = 0.0;
        for (int t0 = 0; t0 < tiles; t0 += 32) {
            if (t0 + lane < tiles) {
                const int shift = vsmooth_probe_shift(a.tile_ceiling[row + t0 + lane], c);
                term_l[warp][lane] = ldexp(a.tile_sum[row + t0 + lane], shift);
                term_q[warp][lane] = ldexp(a.tile_sq[row + t0 + lane], 2 * shift);
            }
            __syncwarp();
            if (lane == 0) {
                const int n = min(32, tiles - t0);
                if (n == 32) {  // unrolled: the loads issued ahead of the additions
#pragma unroll
                    for (int i = 0; i < 32; i++) {
                        l += term_l[warp][i];
                        q2 += term_q[warp][i];
                    }
                } else {
                    for (int i = 0; i < n; i++) {
                        l += term_l[warp][i];
                        q2 += term_q[warp][i];
                    }
                }
            }
            __syncwarp();
        }
        const double inv_l2 = __shfl_sync(0xffffffffu, 1.0 / (l * l), 0);
        if (lane == 0) contribution[s] = q2 * inv_l2;
        for (int t = lane; t < tiles; t += 32)
            a.tile_factor[row + t] = ldexp(inv_l2, 2 * vsmooth_probe_shift(a.tile_ceiling[row + t], c));
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double mean = 0.0;
        for (int s = 0; s < a.rows; s++) mean += contribution[s];
        a.mean_weight[head] = mean / (double)a.tokens_k;
    }
}

template <int D, int R>
cudaError_t launch_probe_tiles(const probe_args &a, int tiles, cudaStream_t stream) {
    int sms = 0;
    cudaError_t err = allow_dynamic_smem((const void *)probe_tile_kernel<D, R>, probe_smem<D, R>::kBytes);
    if (err == cudaSuccess) err = multiprocessor_count(&sms);
    if (err != cudaSuccess) return err;
    // Runs as long as at least two waves of blocks remain (R 32: four blocks an SM, R 64: three).
    const int64_t waves2 = (int64_t)sms * (R == 32 ? 4 : 3) * 2;
    const int64_t fit = (int64_t)tiles * a.heads_kv * a.batch / waves2;
    const int run = fit < 1 ? 1 : fit > kMaxRun ? kMaxRun : (int)fit;
    const dim3 grid((tiles + run - 1) / run, a.heads_kv, a.batch);
    launch_chained(probe_tile_kernel<D, R>, grid, kThreads, probe_smem<D, R>::kBytes, stream, a, tiles, run);
    return cudaSuccess;
}

// Passes of 32 rows when the call has no more (half the work of 64).
template <int D>
cudaError_t launch_probe_tiles(const probe_args &a, int tiles, cudaStream_t stream) {
    return a.rows <= 32 ? launch_probe_tiles<D, 32>(a, tiles, stream) : launch_probe_tiles<D, 64>(a, tiles, stream);
}

}  // namespace

cudaError_t attention_probe(const probe_args &a, int head_dim, cudaStream_t stream) {
    const int tiles = (a.tokens_k + VC_KV_ROWS - 1) / VC_KV_ROWS;
    const cudaError_t err = head_dim == 128  ? launch_probe_tiles<128>(a, tiles, stream)
                            : head_dim == 64 ? launch_probe_tiles<64>(a, tiles, stream)
                                             : cudaErrorInvalidValue;
    if (err != cudaSuccess) return err;
    launch_chained(probe_rows_kernel, a.batch * a.heads_kv, kRowsThreads, 0, stream, a, tiles);
    return cudaGetLastError();
}
