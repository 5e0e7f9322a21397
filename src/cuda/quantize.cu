// Fused quantization of Q, K and V for the sm_90a attention kernel: one pass
// over each operand (V: statistics, then encode), nothing in high precision
// written back. The codecs are src/formats' (bit-identical to the CPU
// backend); this file compiles with -fmad=false so every product and sum
// rounds as the CPU's C code does. Layout of the outputs: operand_layout.h.
#include "kernels.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../formats/formats.h"

namespace {

constexpr int kRowThreads = 256;
constexpr int kMeanChunk = 1024;  // keys per partial sum of the K channel mean
constexpr int kMeanLanes = 8;     // token lanes per block of that sum

__device__ __forceinline__ void rope_pair_index(int i, int d, int half_split, int &a, int &b) {
    a = half_split ? i : 2 * i;
    b = half_split ? i + d / 2 : 2 * i + 1;
}

// ---- K channel mean (post-RoPE), in double, deterministic chunk order -------

// Block (D/2, kMeanLanes): lane y sums the chunk's tokens n = y mod kMeanLanes,
// then lane 0 adds the lanes' sums in order (deterministic).
__global__ void k_mean_partial_kernel(dev_tensor k, dev_rope rope, quant_common c, double *partials) {
    __shared__ double lane_sum[kMeanLanes][2][128];
    const int chunk = blockIdx.x, h = blockIdx.y, b = blockIdx.z, i = threadIdx.x, d = c.head_dim;
    const int chunks = gridDim.x, y = threadIdx.y;
    int ia, ib;
    rope_pair_index(i, d, rope.half_split, ia, ib);
    double sa = 0.0, sb = 0.0;
    const int n1 = min(c.tokens, (chunk + 1) * kMeanChunk);
    for (int n = chunk * kMeanChunk + y; n < n1; n += kMeanLanes) {
        float xa = load_elem(k, b, h, n, ia), xb = load_elem(k, b, h, n, ib);
        if (rope.cos_tab) {
            const float co = rope.cos_tab[(int64_t)n * (d / 2) + i], si = rope.sin_tab[(int64_t)n * (d / 2) + i];
            const float ra = xa * co - xb * si, rb = xa * si + xb * co;
            xa = ra;
            xb = rb;
        }
        sa += xa;
        sb += xb;
    }
    lane_sum[y][0][i] = sa;
    lane_sum[y][1][i] = sb;
    __syncthreads();
    if (y) return;
    for (int l = 1; l < kMeanLanes; l++) {
        sa += lane_sum[l][0][i];
        sb += lane_sum[l][1][i];
    }
    double *out = partials + (((int64_t)b * gridDim.y + h) * chunks + chunk) * d;
    out[ia] = sa;
    out[ib] = sb;
}

__global__ void k_mean_final_kernel(const double *partials, int chunks, quant_common c, float *mean) {
    const int g = blockIdx.x, i = threadIdx.x, d = c.head_dim;
    double s = 0.0;
    for (int ch = 0; ch < chunks; ch++) s += partials[((int64_t)g * chunks + ch) * d + i];
    mean[(int64_t)g * d + i] = (float)(s / (double)c.tokens);
}

// ---- Q and K rows: RoPE, smoothing, Hadamard, INT8 -------------------------

struct row_args {
    dev_tensor x;
    dev_rope rope;
    quant_common c;
    const int32_t *perm;     // K only, may be NULL
    const float *kmean;      // K: subtracted; Q: for the LSE shift; may be NULL
    int heads_kv;            // Q: which kmean row
    float sm_scale;
    int hadamard;
    float hadamard_scale;
    int8_t *codes;
    float *scales;
    float *lse_shift;        // Q only
};

// Row x[D] in shared memory (token n, original position src) rotated,
// smoothed and Hadamard-transformed in place, as the CPU's prepare_q /
// prepare_kv; returns the row's amax. One warp.
template <bool IS_KEY>
__device__ float transform_row(const row_args &a, int b, int h, int n, int src, float *x) {
    const int lane = threadIdx.x & 31, d = a.c.head_dim;
    if (a.rope.cos_tab) {
        for (int i = lane; i < d / 2; i += 32) {
            int ia, ib;
            rope_pair_index(i, d, a.rope.half_split, ia, ib);
            const float co = checked(a.rope.cos_tab[(int64_t)src * (d / 2) + i], a.c);
            const float si = checked(a.rope.sin_tab[(int64_t)src * (d / 2) + i], a.c);
            const float xa = x[ia], xb = x[ib];
            x[ia] = xa * co - xb * si;
            x[ib] = xa * si + xb * co;
        }
        __syncwarp();
    }
    if (a.kmean) {
        if constexpr (IS_KEY) {
            const float *mean = a.kmean + ((int64_t)b * a.c.heads + h) * d;
            for (int i = lane; i < d; i += 32) x[i] = x[i] - mean[i];
        } else {
            const int hkv = h / (a.c.heads / a.heads_kv);
            const float *mean = a.kmean + ((int64_t)b * a.heads_kv + hkv) * d;
            double s = 0.0;
            for (int i = lane; i < d; i += 32) s += (double)x[i] * mean[i];
            s = warp_sum(s);
            if (lane == 0)
                a.lse_shift[((int64_t)b * a.c.heads + h) * a.c.tokens + n] = (float)(s * a.sm_scale);
        }
        __syncwarp();
    }
    if (a.hadamard) {
        // Sylvester order, stage by stage, as cpu_hadamard: same sums, same bits.
        for (int span = 1; span < d; span *= 2) {
            for (int q = lane; q < d / 2; q += 32) {
                const int j = (q / span) * 2 * span + q % span;
                const float u = x[j], w = x[j + span];
                x[j] = u + w;
                x[j + span] = u - w;
            }
            __syncwarp();
        }
        for (int i = lane; i < d; i += 32) x[i] = x[i] * a.hadamard_scale;
        __syncwarp();
    }
    float m = 0.0f;
    for (int i = lane; i < d; i += 32) m = fmaxf(m, fabsf(x[i]));
    return warp_max(m);
}

template <bool IS_KEY>
__global__ void __launch_bounds__(kRowThreads) quantize_rows_kernel(row_args a) {
    constexpr int R = IS_KEY ? VC_KV_ROWS : VC_Q_ROWS;
    extern __shared__ float rows[];  // [R][D + 4]: padded so the encode reads miss no bank
    __shared__ float row_amax[R];
    __shared__ float inv_scale[R];
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim, ld = d + 4;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = kRowThreads / 32;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int tiles = gridDim.x;

    load_tile(a.x, a.c, b, h, a.perm, tile * R, R, rows, ld);
    __syncthreads();
    for (int r = warp; r < R; r += warps) {
        const int n = tile * R + r;
        float amax = 0.0f;
        if (n < a.c.tokens)
            amax = transform_row<IS_KEY>(a, b, h, n, a.perm ? a.perm[head * a.c.tokens + n] : n, rows + r * ld);
        if (lane == 0) row_amax[r] = amax;
    }
    __syncthreads();
    if (IS_KEY) {
        // 4 scales per tile: keys with the same (key % 8) / 2 (a thread's keys).
        if (threadIdx.x < 4) {
            float m = 0.0f;
            for (int r = 0; r < R; r++)
                if (((r & 7) >> 1) == (int)threadIdx.x) m = fmaxf(m, row_amax[r]);
            const vcattn_int8_scale s = vcattn_int8_scale_from_amax(m);
            a.scales[(head * tiles + tile) * 4 + threadIdx.x] = s.scale;
            for (int r = threadIdx.x * 2; r < R; r += 8) inv_scale[r] = inv_scale[r + 1] = s.inv_scale;
        }
    } else if (threadIdx.x < R) {
        const vcattn_int8_scale s = vcattn_int8_scale_from_amax(row_amax[threadIdx.x]);
        a.scales[head * tiles * R + tile * R + threadIdx.x] = s.scale;
        inv_scale[threadIdx.x] = s.inv_scale;
    }
    __syncthreads();
    // Encode, four bytes per thread in the order of the tile image (coalesced).
    uint32_t *out = reinterpret_cast<uint32_t *>(a.codes + (head * tiles + tile) * (int64_t)R * d);
    for (int w = threadIdx.x; w < R * d / 4; w += kRowThreads) {
        uint32_t row, col;
        vc_tile_coords((uint32_t)w * 4, R, &row, &col);
        const float *x = rows + row * ld + col;
        const float inv = inv_scale[row];
        uint32_t word = 0;
        for (int e = 0; e < 4; e++) word |= (uint32_t)(uint8_t)vcattn_int8_encode(x[e], inv) << (8 * e);
        out[w] = word;
    }
}

// ---- V: block statistics, channel scales, transposed E4M3 records -----------

struct v_args {
    dev_tensor v;
    quant_common c;
    const int32_t *perm;
    int demean;
    float *tile_mean, *tile_amax, *chan_inv, *chan_mul;
    uint8_t *records;
};

// The tile's block mean (double, row order, as the CPU) and the amax of the
// residual per channel, from one read of the rows: with RN monotone,
// max |RN(x - mean)| = max(RN(max x - mean), RN(mean - min x)).
__global__ void __launch_bounds__(kRowThreads) v_stats_kernel(v_args a) {
    extern __shared__ float rows[];  // [128][D + 4]
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim, ld = d + 4;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int n0 = tile * VC_KV_ROWS, count = min(VC_KV_ROWS, a.c.tokens - n0);
    load_tile(a.v, a.c, b, h, a.perm, n0, count, rows, ld);
    __syncthreads();
    for (int ch = threadIdx.x; ch < d; ch += kRowThreads) {
        double s = 0.0;
        float hi = -INFINITY, lo = INFINITY;
        for (int r = 0; r < count; r++) {
            const float x = rows[r * ld + ch];
            s += x;
            hi = fmaxf(hi, x);
            lo = fminf(lo, x);
        }
        const float mean = a.demean ? (float)(s / (double)count) : 0.0f;
        const int64_t at = (head * gridDim.x + tile) * d + ch;
        a.tile_mean[at] = mean;
        a.tile_amax[at] = fmaxf(fmaxf(hi - mean, mean - lo), 0.0f);
    }
}

// Per channel: scale = max(amax, max|mean| / 128) / 448 (docs/formats.md).
__global__ void v_scales_kernel(v_args a, int tiles) {
    const int64_t head = blockIdx.x;
    const int ch = threadIdx.x, d = a.c.head_dim;
    float amax = 0.0f, mean_amax = 0.0f;
    for (int t = 0; t < tiles; t++) {
        amax = fmaxf(amax, a.tile_amax[(head * tiles + t) * d + ch]);
        mean_amax = fmaxf(mean_amax, fabsf(a.tile_mean[(head * tiles + t) * d + ch]));
    }
    amax = fmaxf(amax, mean_amax / 128.0f);
    float scale;
    a.chan_inv[head * d + ch] = vcattn_e4m3_scale(amax, &scale);
    a.chan_mul[head * d + ch] = scale;
}

// V^T record of one tile: codes read straight from the float tile in the
// order of the record's bytes (token sigma-permuted within 16), ones rows,
// then the block mean in code units.
__global__ void __launch_bounds__(kRowThreads) v_encode_kernel(v_args a) {
    extern __shared__ float rows[];  // [128][D + 4]
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim, ld = d + 4;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int tiles = gridDim.x, n0 = tile * VC_KV_ROWS;
    const int count = min(VC_KV_ROWS, a.c.tokens - n0);
    const float *mean = a.tile_mean + (head * tiles + tile) * d;
    const float *inv = a.chan_inv + head * d;
    load_tile(a.v, a.c, b, h, a.perm, n0, count, rows, ld);
    __syncthreads();
    uint8_t *rec = a.records + (head * tiles + tile) * (int64_t)vc_v_record_bytes(d);
    const uint32_t vt_rows = d + VC_ONES_ROWS;
    uint32_t *words = reinterpret_cast<uint32_t *>(rec);
    for (uint32_t w = threadIdx.x; w < vc_vt_bytes(d) / 4; w += kRowThreads) {
        uint32_t row, col;
        vc_tile_coords(w * 4, vt_rows, &row, &col);
        uint32_t word = 0x38383838u;  // the ones rows: E4M3 1.0
        if (row < (uint32_t)d) {
            const float mu = mean[row], scale = inv[row];
            word = 0;
            for (int e = 0; e < 4; e++) {
                const uint32_t p = col + e, token = (p & ~15u) + vc_sigma(p & 15);
                if ((int)token < count)
                    word |= (uint32_t)vcattn_e4m3_encode((rows[token * ld + row] - mu) * scale) << (8 * e);
            }
        }
        words[w] = word;
    }
    float *mu = reinterpret_cast<float *>(rec + vc_vt_bytes(d));
    for (int ch = threadIdx.x; ch < d; ch += kRowThreads)
        mu[ch] = a.demean ? vcattn_round_f16(mean[ch] * inv[ch]) : 0.0f;
}

}  // namespace

size_t k_channel_mean_partials(int batch, int heads, int tokens, int head_dim) {
    return (size_t)batch * heads * ((tokens + kMeanChunk - 1) / kMeanChunk) * head_dim;
}

cudaError_t k_channel_mean(const dev_tensor &k, const dev_rope &rope, const quant_common &c,
                           double *partials, float *mean, cudaStream_t stream) {
    const int chunks = (c.tokens + kMeanChunk - 1) / kMeanChunk;
    k_mean_partial_kernel<<<dim3(chunks, c.heads, c.batch), dim3(c.head_dim / 2, kMeanLanes), 0, stream>>>(
        k, rope, c, partials);
    k_mean_final_kernel<<<c.batch * c.heads, c.head_dim, 0, stream>>>(partials, chunks, c, mean);
    return cudaGetLastError();
}

static cudaError_t launch_rows(bool is_key, const row_args &a, int rows_per_tile, int tiles,
                               cudaStream_t stream) {
    const int smem = rows_per_tile * (a.c.head_dim + 4) * (int)sizeof(float);
    auto kernel = is_key ? quantize_rows_kernel<true> : quantize_rows_kernel<false>;
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    kernel<<<dim3(tiles, a.c.heads, a.c.batch), kRowThreads, smem, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t quantize_k(const dev_tensor &k, const dev_rope &rope, const quant_common &c,
                       const int32_t *perm, const float *mean, int hadamard, float hadamard_scale,
                       int8_t *codes, float *scales, cudaStream_t stream) {
    row_args a = {k, rope, c, perm, mean, c.heads, 0.0f, hadamard, hadamard_scale, codes, scales, nullptr};
    return launch_rows(true, a, VC_KV_ROWS, (c.tokens + VC_KV_ROWS - 1) / VC_KV_ROWS, stream);
}

cudaError_t quantize_q(const dev_tensor &q, const dev_rope &rope, const quant_common &c,
                       int heads_kv, const float *kmean, float sm_scale, int hadamard,
                       float hadamard_scale, int tiles, int8_t *codes, float *scales,
                       float *lse_shift, cudaStream_t stream) {
    row_args a = {q, rope, c, nullptr, kmean, heads_kv, sm_scale, hadamard, hadamard_scale, codes, scales, lse_shift};
    return launch_rows(false, a, VC_Q_ROWS, tiles, stream);
}

cudaError_t quantize_v(const dev_tensor &v, const quant_common &c, const int32_t *perm, int demean,
                       float *tile_mean, float *tile_amax, float *chan_inv, float *chan_mul,
                       uint8_t *records, cudaStream_t stream) {
    const int tiles = (c.tokens + VC_KV_ROWS - 1) / VC_KV_ROWS;
    v_args a = {v, c, perm, demean, tile_mean, tile_amax, chan_inv, chan_mul, records};
    const dim3 grid(tiles, c.heads, c.batch);
    const int smem = VC_KV_ROWS * (c.head_dim + 4) * (int)sizeof(float);
    cudaError_t err;
    if ((err = cudaFuncSetAttribute(v_stats_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) ||
        (err = cudaFuncSetAttribute(v_encode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)))
        return err;
    v_stats_kernel<<<grid, kRowThreads, smem, stream>>>(a);
    v_scales_kernel<<<c.batch * c.heads, c.head_dim, 0, stream>>>(a, tiles);
    v_encode_kernel<<<grid, kRowThreads, smem, stream>>>(a);
    return cudaGetLastError();
}
