// The drop-in call's token order on the GPU: each head's value rows sorted by
// their projection on the top principal direction of the centred rows
// (vsmooth.h states the arithmetic). Three reads of V: the mean, the Gram
// matrix of the centred rows on tensor cores, the keys; the power steps run
// on the D x D matrix; heads of up to 8192 tokens are radix-sorted one block
// per head, longer ones by one stable radix sort of (head, key) over every
// head at once. The CPU's vsmooth_principal_order makes the same steps in
// double, so the permutations agree to rounding: keys within rounding of
// each other may swap.
#include "chain.cuh"
#include "kernels.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../formats/e4m3.h"
#include "../vsmooth/vsmooth.h"

#include <cub/block/block_radix_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <mma.h>

namespace {

constexpr int kThreads = 256;
constexpr int kSplitRows = 128;  // a split's rows: whole 128-row tiles
static_assert(kSplitRows % VC_KV_ROWS == 0, "a split holds whole key tiles");
constexpr int kTargetBlocks = 256;  // splits x heads: one wave at two blocks per SM

// The split's rows: whole tiles, spread evenly over the splits.
struct row_range {
    int n0, n1;
};
__device__ row_range split_rows(int split, int splits, int tokens) {
    const int tiles = (tokens + kSplitRows - 1) / kSplitRows;
    const int t0 = (int)((int64_t)split * tiles / splits), t1 = (int)((int64_t)(split + 1) * tiles / splits);
    return {t0 * kSplitRows, min(t1 * kSplitRows, tokens)};
}

// How a pass holds the 8 values a thread reads of a row. Rows of bf16 or
// fp16, 16-byte aligned (kRaw): as loaded, 16 bytes, widened when used, so
// twice as many loads fit in registers; others as float (load_row8).
template <bool kRaw>
struct row8 {
    uint4 raw;
    __device__ void load(const dev_tensor &t, int b, int h, int64_t n, int col) {
        raw = *reinterpret_cast<const uint4 *>(static_cast<const uint16_t *>(t.data) + b * t.sb + h * t.sh +
                                               n * t.sn + col);
    }
    __device__ void get(const dev_tensor &t, float *v) const { widen8(t.dtype, raw, v); }
};
template <>
struct row8<false> {
    float x[8];
    __device__ void load(const dev_tensor &t, int b, int h, int64_t n, int col) { load_row8(t, b, h, n, col, x); }
    __device__ void get(const dev_tensor &, float *v) const {
        for (int e = 0; e < 8; e++) v[e] = x[e];
    }
};

// Pass 1: per split, the column sums (float per thread, then double over
// the threads in order) and the largest |v| (atomicMax on the bits of a
// non-negative float: order-free). A thread reads 8 channels of every
// (256 / (D/8))-th row, eight rows in flight.
template <int D, bool kRaw>
__global__ void __launch_bounds__(kThreads) principal_mean_kernel(dev_tensor v, quant_common c, int splits,
                                                                  const principal_workspace w) {
    chain_begin();
    constexpr int kLanes = D / 8, kRowStep = kThreads / kLanes, kInFlight = 8;
    __shared__ float part_s[kRowStep][D];
    __shared__ float amax_s[kThreads / 32];
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t head = (int64_t)b * c.heads + h;
    const int col = threadIdx.x % kLanes * 8, rr = threadIdx.x / kLanes;
    const row_range r = split_rows(split, splits, c.tokens);
    float sum[8] = {}, amax = 0.0f;
    for (int n = r.n0 + rr; n < r.n1; n += kInFlight * kRowStep) {
        row8<kRaw> x[kInFlight];
#pragma unroll
        for (int l = 0; l < kInFlight; l++)
            if (n + l * kRowStep < r.n1) x[l].load(v, b, h, n + l * kRowStep, col);
#pragma unroll
        for (int l = 0; l < kInFlight; l++) {
            if (n + l * kRowStep >= r.n1) break;
            float y[8];
            x[l].get(v, y);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                sum[e] += y[e];
                amax = fmaxf(amax, fabsf(y[e]));
            }
        }
    }
    for (int e = 0; e < 8; e++) part_s[rr][col + e] = sum[e];
    amax = warp_max(amax);
    if (threadIdx.x % 32 == 0) amax_s[threadIdx.x / 32] = amax;
    __syncthreads();
    for (int ch = threadIdx.x; ch < D; ch += kThreads) {
        double acc = 0.0;
        for (int i = 0; i < kRowStep; i++) acc += (double)part_s[i][ch];
        w.mean_partials[(head * splits + split) * D + ch] = acc;
    }
    if (threadIdx.x == 0) {
        for (int i = 1; i < kThreads / 32; i++) amax = fmaxf(amax, amax_s[i]);
        atomicMax(reinterpret_cast<unsigned *>(w.amax) + head, __float_as_uint(amax));
    }
}

// The power of two that brings the largest |v| into [0.5, 1) (clamped to a
// normal float), so the centred rows fit half precision.
__device__ int principal_scale_exp(float amax) {
    if (!(amax > 0.0f) || !isfinite(amax)) return 0;
    return max(-126, min(126, ilogbf(amax) + 1));
}

// Per head: mu = the splits' sums in order over the token count; the scale;
// mu scaled, in float, for the Gram pass; u = mu / |mu| (e_0 if mu = 0).
template <int D>
__global__ void __launch_bounds__(D) principal_mean_final_kernel(quant_common c, int splits,
                                                                 const principal_workspace w) {
    chain_begin();
    __shared__ double mu_s[D];
    const int64_t head = blockIdx.x;
    const int ch = threadIdx.x;
    double acc = 0.0;
    for (int s = 0; s < splits; s++) acc += w.mean_partials[(head * splits + s) * D + ch];
    const double mu = acc / (double)c.tokens;
    const float scale = vcattn_pow2f(-principal_scale_exp(w.amax[head]));
    mu_s[ch] = mu;
    w.mu[head * D + ch] = (float)(mu * (double)scale);
    if (ch == 0) w.scale[head] = scale;
    __syncthreads();
    double n2 = 0.0;
    for (int i = 0; i < D; i++) n2 += mu_s[i] * mu_s[i];
    w.u[head * D + ch] = n2 > 0.0 ? (float)(mu / sqrt(n2)) : (ch == 0 ? 1.0f : 0.0f);
}

// Pass 2: per split, the Gram matrix of the rows scaled and centred, in half
// precision on tensor cores with float sums: G = Y^T Y over tiles of rows.
// Shared-memory reads bound it, so each warp takes 32 x 32 of G (four 16 x
// 16 products from four fragment loads): one of the super-tiles above the
// diagonal, or (the last warps) diagonal ones, whose lower-left quarter is
// skipped. The tiles above the diagonal are stored and mirrored below. The
// next tile's rows are loaded while the tensor cores work on this one.
template <int D, bool kRaw>
__global__ void __launch_bounds__(kThreads, 2) principal_gram_kernel(dev_tensor v, quant_common c, int splits,
                                                                     const principal_workspace w) {
    chain_begin();
    using namespace nvcuda;
    using frag_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::col_major>;  // Y^T
    using frag_b = wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major>;  // Y
    using frag_c = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
    constexpr int kRows = kRaw ? 128 : 64;  // rows per tile: as many loads in flight as registers allow
    constexpr int kLanes = D / 8, kRowStep = kThreads / kLanes, kLoads = kRows / kRowStep;
    constexpr int kLd = D + 8;  // halves: rows 16 bytes apart in banks, fragment loads conflict-free
    constexpr int kS = D / 32, kOff = kS * (kS - 1) / 2;  // super-tiles per side, above the diagonal
    constexpr int kDiagWarps = kThreads / 32 - kOff, kDiagPerWarp = (kS + kDiagWarps - 1) / kDiagWarps;
    constexpr int kAcc = 3 * kDiagPerWarp > 4 ? 3 * kDiagPerWarp : 4;
    static_assert(kDiagWarps > 0, "a warp per super-tile above the diagonal, and one for the diagonal");
    __shared__ __align__(32) __half y_s[kRows * kLd];
    const int split = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
    const int64_t head = (int64_t)b * c.heads + h;
    const int col = threadIdx.x % kLanes * 8, rr = threadIdx.x / kLanes, warp = threadIdx.x / 32;
    const row_range r = split_rows(split, splits, c.tokens);
    const float scale = w.scale[head];
    float mu[8];
    for (int e = 0; e < 8; e++) mu[e] = w.mu[head * D + col + e];

    // This warp's super-tile (si, sj) above the diagonal, or its first diagonal one.
    int si = 0, sj = 0;
    if (warp < kOff) {
        int idx = warp;
        while (idx >= kS - 1 - si) idx -= kS - 1 - si++;
        sj = si + 1 + idx;
    }
    const int d0 = (warp - kOff) * kDiagPerWarp;
    frag_c acc[kAcc];
    for (int f = 0; f < kAcc; f++) wmma::fill_fragment(acc[f], 0.0f);

    row8<kRaw> x[kLoads];
    auto fetch = [&](int n0) {
#pragma unroll
        for (int l = 0; l < kLoads; l++) {
            const int n = n0 + rr + l * kRowStep;
            if (n < r.n1) x[l].load(v, b, h, n, col);
        }
    };
    if (r.n0 < r.n1) fetch(r.n0);
    for (int n0 = r.n0; n0 < r.n1; n0 += kRows) {
        __syncthreads();  // the last tile's fragments are read
#pragma unroll
        for (int l = 0; l < kLoads; l++) {  // rows past the end are zero, not -mu
            const int row = rr + l * kRowStep;
            const bool in = n0 + row < r.n1;
            float f[8];
            x[l].get(v, f);
            __align__(16) __half y[8];
            for (int e = 0; e < 8; e++) y[e] = __float2half_rn(in ? f[e] * scale - mu[e] : 0.0f);
            *reinterpret_cast<uint4 *>(&y_s[row * kLd + col]) = *reinterpret_cast<const uint4 *>(y);
        }
        __syncthreads();
        if (n0 + kRows < r.n1) fetch(n0 + kRows);
#pragma unroll
        for (int ks = 0; ks < kRows / 16; ks++) {
            const __half *k_rows = &y_s[ks * 16 * kLd];
            frag_a a0, a1;
            frag_b b0, b1;
            if (warp < kOff) {
                wmma::load_matrix_sync(a0, k_rows + si * 32, kLd);
                wmma::load_matrix_sync(a1, k_rows + si * 32 + 16, kLd);
                wmma::load_matrix_sync(b0, k_rows + sj * 32, kLd);
                wmma::load_matrix_sync(b1, k_rows + sj * 32 + 16, kLd);
                wmma::mma_sync(acc[0], a0, b0, acc[0]);
                wmma::mma_sync(acc[1], a0, b1, acc[1]);
                wmma::mma_sync(acc[2], a1, b0, acc[2]);
                wmma::mma_sync(acc[3], a1, b1, acc[3]);
            } else {
#pragma unroll
                for (int k = 0; k < kDiagPerWarp; k++) {
                    const int d = d0 + k;
                    if (d >= kS) break;
                    wmma::load_matrix_sync(a0, k_rows + d * 32, kLd);
                    wmma::load_matrix_sync(a1, k_rows + d * 32 + 16, kLd);
                    wmma::load_matrix_sync(b0, k_rows + d * 32, kLd);
                    wmma::load_matrix_sync(b1, k_rows + d * 32 + 16, kLd);
                    wmma::mma_sync(acc[3 * k], a0, b0, acc[3 * k]);
                    wmma::mma_sync(acc[3 * k + 1], a0, b1, acc[3 * k + 1]);
                    wmma::mma_sync(acc[3 * k + 2], a1, b1, acc[3 * k + 2]);
                }
            }
        }
    }
    float *g = w.gram_partials + (head * splits + split) * D * D;
    auto store = [&](const frag_c &t, int i, int j) {  // 16 x 16 tile (i, j), mirrored when off the diagonal
        wmma::store_matrix_sync(g + i * 16 * D + j * 16, t, D, wmma::mem_row_major);
        if (i != j) wmma::store_matrix_sync(g + j * 16 * D + i * 16, t, D, wmma::mem_col_major);
    };
    if (warp < kOff) {
        store(acc[0], 2 * si, 2 * sj);
        store(acc[1], 2 * si, 2 * sj + 1);
        store(acc[2], 2 * si + 1, 2 * sj);
        store(acc[3], 2 * si + 1, 2 * sj + 1);
    } else {
#pragma unroll
        for (int k = 0; k < kDiagPerWarp; k++) {
            const int d = d0 + k;
            if (d >= kS) break;
            store(acc[3 * k], 2 * d, 2 * d);
            store(acc[3 * k + 1], 2 * d, 2 * d + 1);
            store(acc[3 * k + 2], 2 * d + 1, 2 * d + 1);
        }
    }
}

// C = the splits' Gram matrices added in order, in double, stored as float
// over the first split's (each thread reads its entry of every split first).
template <int D>
__global__ void __launch_bounds__(kThreads) principal_gram_sum_kernel(int splits, const principal_workspace w) {
    chain_begin();
    const int64_t head = blockIdx.x, e = (int64_t)blockIdx.y * kThreads + threadIdx.x;
    float *p = w.gram_partials + head * splits * D * D + e;
    double acc = 0.0;
    for (int s = 0; s < splits; s++) acc += (double)p[(int64_t)s * D * D];
    *p = (float)acc;
}

// Per head: VSMOOTH_PRINCIPAL_ITERS power steps on C, u = C u / |C u| (u
// kept if C u = 0), in double. Thread t holds column t % D of every
// (256 / D)-th row; C is symmetric, so its column sums against u give C u.
template <int D>
__global__ void __launch_bounds__(kThreads) principal_power_kernel(int splits, const principal_workspace w) {
    chain_begin();
    constexpr int kGroups = kThreads / D, kPer = D * D / kThreads;
    __shared__ double u_s[D], w_s[D], part_s[kGroups][D], n2_s;
    const int64_t head = blockIdx.x;
    const int j = threadIdx.x % D, g = threadIdx.x / D;
    const float *cm = w.gram_partials + head * splits * D * D;
    float cij[kPer];
#pragma unroll
    for (int k = 0; k < kPer; k++) cij[k] = cm[(int64_t)(g + kGroups * k) * D + j];
    if (threadIdx.x < D) u_s[threadIdx.x] = (double)w.u[head * D + threadIdx.x];
    __syncthreads();
    for (int it = 0; it < VSMOOTH_PRINCIPAL_ITERS; it++) {
        double acc = 0.0;
#pragma unroll
        for (int k = 0; k < kPer; k++) acc += (double)cij[k] * u_s[g + kGroups * k];
        part_s[g][j] = acc;
        __syncthreads();
        if (threadIdx.x < D) {
            double s = 0.0;
            for (int i = 0; i < kGroups; i++) s += part_s[i][threadIdx.x];
            w_s[threadIdx.x] = s;
        }
        __syncthreads();
        if (threadIdx.x < 32) {  // |w|^2 by one warp: lanes over i mod 32, then warp_sum's tree
            double n2 = 0.0;
            for (int i = threadIdx.x; i < D; i += 32) n2 += w_s[i] * w_s[i];
            n2 = warp_sum(n2);
            if (threadIdx.x == 0) n2_s = n2;
        }
        __syncthreads();
        if (threadIdx.x < D && n2_s > 0.0) u_s[threadIdx.x] = w_s[threadIdx.x] / sqrt(n2_s);
        __syncthreads();
    }
    if (threadIdx.x < D) w.u[head * D + threadIdx.x] = (float)u_s[threadIdx.x];
}

// Pass 3: key = (v scale) . u in float, the lanes of a row added by a
// butterfly (every lane gets the same sum); as radix-order bits below the
// head's index, so that one sort orders every head: 32-bit keys for up to
// 256 heads, 64-bit ones beyond.
constexpr int kKeyRows = 128;  // rows per block
template <int D, bool kRaw, typename Key>
__global__ void __launch_bounds__(kThreads) principal_keys_kernel(dev_tensor v, quant_common c,
                                                                  const principal_workspace w) {
    chain_begin();
    constexpr int kLanes = D / 8, kRowStep = kThreads / kLanes, kLoads = kKeyRows / kRowStep;
    const int h = blockIdx.y, b = blockIdx.z;
    const int64_t head = (int64_t)b * c.heads + h;
    const int col = threadIdx.x % kLanes * 8, rr = threadIdx.x / kLanes;
    const int n0 = blockIdx.x * kKeyRows + rr;
    const float scale = w.scale[head];
    float u[8];
    for (int e = 0; e < 8; e++) u[e] = w.u[head * D + col + e];
    row8<kRaw> x[kLoads]{};
#pragma unroll
    for (int l = 0; l < kLoads; l++)
        if (n0 + l * kRowStep < c.tokens) x[l].load(v, b, h, n0 + l * kRowStep, col);
#pragma unroll
    for (int l = 0; l < kLoads; l++) {
        const int n = n0 + l * kRowStep;
        float y[8], acc = 0.0f;
        x[l].get(v, y);
        for (int e = 0; e < 8; e++) acc = __fmaf_rn(y[e] * scale, u[e], acc);
#pragma unroll
        for (int o = kLanes / 2; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if (col == 0 && n < c.tokens) {
            static_cast<Key *>(w.keys)[head * c.tokens + n] =
                (Key)head << VSMOOTH_PRINCIPAL_KEY_BITS | vsmooth_principal_key_bits(acc);
            w.index[head * c.tokens + n] = n;
        }
    }
}

template <int D, bool kRaw, typename Key>
void launch_passes(const dev_tensor &v, const quant_common &c, const principal_workspace &w, int splits,
                   cudaStream_t stream) {
    const int heads = c.batch * c.heads;
    const dim3 split_grid(splits, c.heads, c.batch);
    launch_chained(principal_mean_kernel<D, kRaw>, split_grid, kThreads, 0, stream, v, c, splits, w);
    launch_chained(principal_mean_final_kernel<D>, heads, D, 0, stream, c, splits, w);
    launch_chained(principal_gram_kernel<D, kRaw>, split_grid, kThreads, 0, stream, v, c, splits, w);
    launch_chained(principal_gram_sum_kernel<D>, dim3(heads, D * D / kThreads), kThreads, 0, stream, splits, w);
    launch_chained(principal_power_kernel<D>, heads, kThreads, 0, stream, splits, w);
    const dim3 key_grid((c.tokens + kKeyRows - 1) / kKeyRows, c.heads, c.batch);
    launch_chained(principal_keys_kernel<D, kRaw, Key>, key_grid, kThreads, 0, stream, v, c, w);
}

template <int D, typename Key>
void launch_passes(const dev_tensor &v, const quant_common &c, const principal_workspace &w, int splits,
                   cudaStream_t stream) {
    if (v.vec && v.dtype != VCATTN_DTYPE_F32) launch_passes<D, true, Key>(v, c, w, splits, stream);
    else launch_passes<D, false, Key>(v, c, w, splits, stream);
}

// The key bits the sort needs: the key's, and enough for the head index.
int sort_end_bit(int heads) {
    int bits = 1;
    while (bits < 31 && (1 << bits) < heads) bits++;
    return VSMOOTH_PRINCIPAL_KEY_BITS + bits;
}

// Heads of up to kHeadSortMax tokens: one block per head radix-sorts its
// keys' bits with the token as the value (cub::BlockRadixSort, stable like
// the device-wide sort below, so equal keys keep the token order), in one
// launch instead of that sort's six kernels and memset. Three sizes, so
// that a head sorts few padding slots (its time goes with the slots): 256
// threads x 8 items up to 2,048 tokens, 1,024 x 5 up to 5,120, 1,024 x 8.
constexpr int kHeadSortSmall = 256, kHeadSortLarge = 1024;  // block sizes
constexpr int kHeadSortItems = 8, kHeadSortFewItems = 5;     // items per thread
constexpr int kHeadSortMax = kHeadSortLarge * kHeadSortItems;

template <typename Key, int kBlock, int kItems>
__global__ void __launch_bounds__(kBlock) principal_head_sort_kernel(const Key *keys, int tokens, int32_t *perm) {
    chain_begin();
    using Sort = cub::BlockRadixSort<uint32_t, kBlock, kItems, int32_t>;
    __shared__ typename Sort::TempStorage temp;
    constexpr uint32_t kKeyMask = (1u << VSMOOTH_PRINCIPAL_KEY_BITS) - 1;  // the head's bits dropped
    const int64_t head = blockIdx.x;
    uint32_t key[kItems];
    int32_t token[kItems];
    for (int i = 0; i < kItems; i++) {  // blocked: thread t holds tokens t*items.. in order
        const int n = threadIdx.x * kItems + i;
        key[i] = n < tokens ? (uint32_t)(keys[head * tokens + n] & kKeyMask) : kKeyMask;  // padding sorts last
        token[i] = n;
    }
    Sort(temp).SortBlockedToStriped(key, token, 0, VSMOOTH_PRINCIPAL_KEY_BITS);
    for (int i = 0; i < kItems; i++) {
        const int r = i * kBlock + threadIdx.x;
        if (r < tokens) perm[head * tokens + r] = token[i];
    }
}

template <typename Key>
cudaError_t head_sort(const principal_workspace &w, int32_t *perm, int heads, int tokens, cudaStream_t stream) {
    const Key *keys = static_cast<const Key *>(w.keys);
    auto sort = [&](auto kernel, int block) { launch_chained(kernel, heads, block, 0, stream, keys, tokens, perm); };
    if (tokens <= kHeadSortSmall * kHeadSortItems)
        sort(principal_head_sort_kernel<Key, kHeadSortSmall, kHeadSortItems>, kHeadSortSmall);
    else if (tokens <= kHeadSortLarge * kHeadSortFewItems)
        sort(principal_head_sort_kernel<Key, kHeadSortLarge, kHeadSortFewItems>, kHeadSortLarge);
    else
        sort(principal_head_sort_kernel<Key, kHeadSortLarge, kHeadSortItems>, kHeadSortLarge);
    return cudaGetLastError();
}

// LSD radix sort: stable, so equal keys keep the token order. The values
// are indices within the head: perm comes out in place. With temp NULL,
// *bytes gets the scratch size.
template <typename Key>
cudaError_t sort_keys(void *temp, size_t *bytes, const principal_workspace &w, int32_t *perm, int heads,
                      int tokens, cudaStream_t stream) {
    return cub::DeviceRadixSort::SortPairs(temp, *bytes, static_cast<const Key *>(w.keys),
                                           static_cast<Key *>(w.keys_sorted), w.index, perm, heads * tokens, 0,
                                           sort_end_bit(heads), stream);
}

bool wide_keys(int heads) { return sort_end_bit(heads) > 32; }

}  // namespace

int principal_splits(int heads, int tokens) {
    const int tiles = (tokens + kSplitRows - 1) / kSplitRows;
    return max(1, min(tiles, kTargetBlocks / max(1, heads)));
}

size_t principal_sort_bytes(int heads, int tokens) {
    if (tokens <= kHeadSortMax) return 0;  // one block per head
    size_t bytes = 0;
    principal_workspace none = {};
    if (wide_keys(heads)) sort_keys<uint64_t>(nullptr, &bytes, none, nullptr, heads, tokens, 0);
    else sort_keys<uint32_t>(nullptr, &bytes, none, nullptr, heads, tokens, 0);
    return bytes;
}

cudaError_t principal_order(const dev_tensor &v, const quant_common &c, const principal_workspace &w,
                            int32_t *perm, cudaStream_t stream) {
    const int heads = c.batch * c.heads, splits = principal_splits(heads, c.tokens);
    const bool wide = wide_keys(heads);
    if (c.head_dim == 64) wide ? launch_passes<64, uint64_t>(v, c, w, splits, stream) : launch_passes<64, uint32_t>(v, c, w, splits, stream);
    else wide ? launch_passes<128, uint64_t>(v, c, w, splits, stream) : launch_passes<128, uint32_t>(v, c, w, splits, stream);
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
    if (c.tokens <= kHeadSortMax)
        return wide ? head_sort<uint64_t>(w, perm, heads, c.tokens, stream)
                    : head_sort<uint32_t>(w, perm, heads, c.tokens, stream);
    size_t bytes = w.sort_bytes;
    return wide ? sort_keys<uint64_t>(w.sort_temp, &bytes, w, perm, heads, c.tokens, stream)
                : sort_keys<uint32_t>(w.sort_temp, &bytes, w, perm, heads, c.tokens, stream);
}
