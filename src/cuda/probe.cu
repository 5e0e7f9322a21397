// V-Smooth's attention probe (src/vsmooth/vsmooth.h states the arithmetic):
// S sampled query rows scored against every key with the call's INT8 codes,
// their ExpCast probabilities kept as code bytes, then per-row sums; the
// weights themselves are formed in v_stats_kernel (quantize.cu), tile by
// tile, from what these two kernels leave. Same sums in the same order as
// the CPU's probe_and_quantize_values: the weights agree to the bit. Compiled
// with -fmad=false, as quantize.cu.
#include "kernels.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

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

// A float as an int of the same order (negative values with the magnitude
// bits flipped); the map is its own inverse. NaN is taken as -inf first, as
// fmaxf leaves it out of the CPU's maximum.
__device__ __forceinline__ int ordered_key(float f) {
    const int i = __float_as_int(f == f ? f : -INFINITY);
    return i >= 0 ? i : i ^ 0x7fffffff;
}
__device__ __forceinline__ float ordered_float(int key) { return __int_as_float(key >= 0 ? key : key ^ 0x7fffffff); }

// The dynamic shared memory of probe_tile_kernel<D>: the tile's keys and a
// pass's probe rows, INT8, each as D/16 slabs of 16 channels ([slab][row][16]:
// every 16 x 16 fragment is 256 contiguous bytes, as the tensor cores'
// fragment loads want them aligned); the pass's integer scores take the
// rows' place once the products are done (54.7 KB at D 128 and R 64).
template <int D, int R> struct probe_smem {
    static constexpr int kKeys = VC_KV_ROWS * D, kRows = R * D, kScoreLd = VC_KV_ROWS + 4;
    static constexpr int kScores = R * kScoreLd * 4;
    static constexpr int kBytes = kKeys + (kRows > kScores ? kRows : kScores);
    static __device__ int at(int row, int col, int rows) { return (col / 16) * rows * 16 + row * 16 + col % 16; }
};

// One 128-key tile of one key head against the probe rows, R at a time: the
// integer scores of a pass on the tensor cores (int8 in, exact int32 out: the
// dp4a sums to the bit), then each row by the threads pass_shape gives it
// (shared-memory reads free of bank conflicts), so the maximum and the sums
// are a thread's own loop and a few shuffles. Writes the code bytes
// [head][tile][S][128], and per (row, tile) the ceiling C_st and the exact
// sums L_st, S_st ([head][S][T]). A block is short and waits on its loads:
// blocks an SM is what pays; passes of 32 rows fit four (64 registers, no
// spill; five spill), of 64 three.
template <int D, int R>
__global__ void __launch_bounds__(kThreads, R == 32 ? 4 : 3) probe_tile_kernel(probe_args a) {
    using namespace nvcuda;
    using smem = probe_smem<D, R>;
    using shape = pass_shape<R>;
    constexpr int kRowsPerPass = R, kKeysPerThread = shape::kKeys;
    extern __shared__ __align__(16) uint8_t probe_smem_bytes[];
    int8_t *keys = reinterpret_cast<int8_t *>(probe_smem_bytes);
    int8_t *rows = keys + smem::kKeys;
    int *scores = reinterpret_cast<int *>(rows);  // over the rows, once every warp has its products
    __shared__ float row_mul[kRowsPerPass];
    __shared__ int row_head[kRowsPerPass];
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, tiles = gridDim.x;
    const int64_t head = (int64_t)b * a.heads_kv + h;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int count = min(VC_KV_ROWS, a.tokens_k - tile * VC_KV_ROWS);
    const int group = a.heads_q / a.heads_kv;

    const int8_t *ktile = a.k_codes + (head * tiles + tile) * (int64_t)VC_KV_ROWS * D;
    for (int c = threadIdx.x; c < VC_KV_ROWS * D / 16; c += kThreads) {  // tile image -> row-major
        uint32_t r, col;
        vc_tile_coords((uint32_t)c * 16, VC_KV_ROWS, &r, &col);
        const uint4 v = *reinterpret_cast<const uint4 *>(ktile + c * 16);
        *reinterpret_cast<uint4 *>(keys + smem::at(r, col, VC_KV_ROWS)) = v;
    }
    __shared__ float kmul[4];  // key j's scale is kmul[(j & 7) >> 1] (in registers, they spilled)
    if (threadIdx.x < 4) kmul[threadIdx.x] = a.k_mul[(head * tiles + tile) * 4 + threadIdx.x];

    for (int base = 0; base < a.rows; base += kRowsPerPass) {
        __syncthreads();  // the previous pass is done with rows[] and its scores
        for (int c = threadIdx.x; c < kRowsPerPass * D / 16; c += kThreads) {
            const int r = c / (D / 16), col = (c % (D / 16)) * 16, s = base + r;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (s < a.rows) {
                const int64_t qh = (int64_t)b * a.heads_q + (int64_t)h * group + s % group;
                const int64_t i = vsmooth_probe_row(s, a.tokens_q);
                const int8_t *qtile = a.q_codes + (qh * a.q_tiles + i / VC_Q_ROWS) * (int64_t)VC_Q_ROWS * D;
                v = *reinterpret_cast<const uint4 *>(qtile + vc_tile_offset((uint32_t)(i % VC_Q_ROWS), col, VC_Q_ROWS));
            }
            *reinterpret_cast<uint4 *>(rows + smem::at(r, col, kRowsPerPass)) = v;
        }
        if (threadIdx.x < kRowsPerPass) {
            const int s = base + threadIdx.x;
            const int64_t qh = (int64_t)b * a.heads_q + (int64_t)h * group + s % group;
            const int64_t i = s < a.rows ? vsmooth_probe_row(s, a.tokens_q) : 0;
            row_mul[threadIdx.x] = a.q_mul[qh * a.q_tiles * VC_Q_ROWS + i] * a.score_mul;
            row_head[threadIdx.x] = (int)qh;
        }
        __syncthreads();

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
                wmma::load_matrix_sync(fa, reinterpret_cast<const signed char *>(rows) +
                                               smem::at(16 * ti, 16 * kk, kRowsPerPass), 16);
#pragma unroll
                for (int f = 0; f < T; f++) {
                    wmma::load_matrix_sync(fb, reinterpret_cast<const signed char *>(keys) +
                                                   smem::at(16 * (tj0 + f), 16 * kk, VC_KV_ROWS), 16);
                    wmma::mma_sync(fc[f], fa, fb, fc[f]);
                }
            }
            __syncthreads();  // every warp's fragments of rows[] are read
#pragma unroll
            for (int f = 0; f < T; f++)
                wmma::store_matrix_sync(scores + 16 * ti * smem::kScoreLd + 16 * (tj0 + f), fc[f], smem::kScoreLd,
                                        wmma::mem_row_major);
        }
        __syncthreads();
        // Row r's keys k0.. k0 + KEYS - 1, read 4 at a time (16-byte reads:
        // each quarter-warp's eight lanes fall in distinct banks); the score
        // as the attention kernel forms it, twice (for the maximum, then for
        // the codes) rather than kept in registers.
        constexpr int kRowLanes = shape::kRowsPerWarp;  // lanes of a warp's rows; a row's threads are this far apart
        const int r = kRowLanes * warp + lane % kRowLanes, k0 = kKeysPerThread * (lane / kRowLanes), s = base + r;
        const int4 *score4 = reinterpret_cast<const int4 *>(scores + r * smem::kScoreLd + k0);
        const float *bias = a.key_bias ? a.key_bias + ((int64_t)row_head[r] * tiles + tile) * VC_KV_ROWS + k0 : nullptr;
        auto score_of = [&](int i, int product) {
            const float mult = row_mul[r] * kmul[(i & 7) >> 1];  // k0 is a multiple of 8
            const float t = bias ? fmaf((float)product, mult, bias[i]) : (float)product * mult;
            return k0 + i < count ? t : -INFINITY;
        };
        int mx = ordered_key(-INFINITY);
#pragma unroll
        for (int g = 0; g < kKeysPerThread / 4; g++) {
            const int4 p = score4[g];
            mx = max(mx, max(max(ordered_key(score_of(4 * g, p.x)), ordered_key(score_of(4 * g + 1, p.y))),
                             max(ordered_key(score_of(4 * g + 2, p.z)), ordered_key(score_of(4 * g + 3, p.w)))));
        }
#pragma unroll
        for (int o = kRowLanes; o < 32; o *= 2) mx = max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float ceiling = ceilf(ordered_float(mx));
        // Probabilities in units of 2^-9 (at most 2^17): exact integer sums.
        unsigned sum = 0, word[kKeysPerThread / 4] = {};
        unsigned long long sq = 0;
#pragma unroll
        for (int g = 0; g < kKeysPerThread / 4; g++) {
            const int4 p = score4[g];
            const int product[4] = {p.x, p.y, p.z, p.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 4 * g + e;
                const uint8_t code = k0 + i < count ? vsmooth_probe_code(score_of(i, product[e]), ceiling) : 0;
                word[g] |= (unsigned)code << (8 * e);
                const unsigned n = (unsigned)(vcattn_e4m3_decode(code) * 512.0f);
                sum += n;
                sq += (unsigned long long)n * n;
            }
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

// Per key head, a warp per probe row (32 warps: rows w, w + 32, ...): C_s
// (the maximum of the row's tile ceilings, over the lanes), then l_s and Q_s,
// their terms formed by the lanes 32 tiles at a time and added by lane 0 in
// tile order (the CPU's order: the same doubles), then each tile's factor
// f_st by the lanes; last the mean weight, summed over s ascending.
constexpr int kRowsThreads = 1024;
__global__ void __launch_bounds__(kRowsThreads) probe_rows_kernel(probe_args a, int tiles) {
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
cudaError_t launch_probe_tiles(const probe_args &a, dim3 grid, cudaStream_t stream) {
    const cudaError_t err = cudaFuncSetAttribute(probe_tile_kernel<D, R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 probe_smem<D, R>::kBytes);
    if (err != cudaSuccess) return err;
    probe_tile_kernel<D, R><<<grid, kThreads, probe_smem<D, R>::kBytes, stream>>>(a);
    return cudaSuccess;
}

// Passes of 32 rows when the call has no more (half the work of 64).
template <int D>
cudaError_t launch_probe_tiles(const probe_args &a, dim3 grid, cudaStream_t stream) {
    return a.rows <= 32 ? launch_probe_tiles<D, 32>(a, grid, stream) : launch_probe_tiles<D, 64>(a, grid, stream);
}

}  // namespace

cudaError_t attention_probe(const probe_args &a, int head_dim, cudaStream_t stream) {
    const int tiles = (a.tokens_k + VC_KV_ROWS - 1) / VC_KV_ROWS;
    const dim3 grid(tiles, a.heads_kv, a.batch);
    const cudaError_t err = head_dim == 128  ? launch_probe_tiles<128>(a, grid, stream)
                            : head_dim == 64 ? launch_probe_tiles<64>(a, grid, stream)
                                             : cudaErrorInvalidValue;
    if (err != cudaSuccess) return err;
    probe_rows_kernel<<<a.batch * a.heads_kv, kRowsThreads, 0, stream>>>(a, tiles);
    return cudaGetLastError();
}
