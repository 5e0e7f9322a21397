// Quantization of V for the sm_90a attention kernel (V-Smooth): per tile
// the block statistics (the centre, weighted by the attention probe where it
// ran, and whether removing it pays), per channel the E4M3 scales, then the
// transposed E4M3 records of the residual with the block means, nothing in
// high precision written back. The codecs are src/formats' (bit-identical
// to the CPU backend); compiled with -fmad=false, as quantize_rows.cu.
// Layout of the outputs: operand_layout.h.
#include "chain.cuh"
#include "kernels.h"
#include "launch_facts.h"
#include "load.cuh"
#include "operand_layout.h"
#include "sm90/ptx.cuh"
#include "../formats/formats.h"
#include "../vsmooth/vsmooth.h"

#include <cuda_fp16.h>
#include <cuda_pipeline.h>

namespace {

constexpr int kRowThreads = 256;  // threads a tile's block
constexpr int kMaxHeadDim = 128;

// ---- V: block statistics, channel scales, transposed E4M3 records -----------

struct v_args {
    dev_tensor v;
    quant_common c;
    const int32_t *perm;
    int demean;
    float sink_guard;
    float out_max;         // with the check: V past it sets VC_FLAG_OUT_RANGE; 0: none
    float *tile_mean, *tile_hi, *tile_lo, *chan_inv, *chan_mul, *chan_pre, *chan_pow2;
    uint8_t *records;
    uint8_t *mean_images;  // or NULL (operand_layout.h)
    probe_args probe;      // the attention probe's outputs when probe.rows > 0
};

// The attention probe's code bytes of 32 probe rows for one tile, and their
// factors, copied into shared memory asynchronously, so that the first batch
// is in flight while the block loads V's tile. 32 rows (not 64) keep the
// statistics kernel's shared memory to five blocks an SM at 16-bit V.
constexpr int kProbeBatch = 32;
struct probe_batch {
    alignas(16) uint8_t codes[kProbeBatch * VC_KV_ROWS];
    double factor[kProbeBatch];
};

__device__ void probe_fetch(const probe_args &p, int64_t head, int tile, int tiles, int base, probe_batch &s) {
    const int here = min(kProbeBatch, p.rows - base);
    const uint8_t *src = p.codes + ((head * tiles + tile) * (int64_t)p.rows + base) * VC_KV_ROWS;
    for (int c = threadIdx.x; c < here * VC_KV_ROWS / 16; c += blockDim.x)
        __pipeline_memcpy_async(s.codes + 16 * c, src + 16 * c, 16);
    if (threadIdx.x < here)
        __pipeline_memcpy_async(&s.factor[threadIdx.x], &p.tile_factor[(head * p.rows + base + threadIdx.x) * tiles + tile],
                                sizeof(double));
    __pipeline_commit();
}

// The weights of tile `tile`'s tokens in its centre from the probe's codes
// and factors (vsmooth.h), the first batch fetched by the caller: two threads
// per token, one for the even rows and one for the odd, each summing in s
// order, as the CPU. square: the 128 E4M3 magnitudes' squares in double,
// written by the caller before this call's first barrier (a table read
// instead of a decode and a conversion to double a code, which runs at a
// quarter of the FP64 rate; the same doubles). Every thread of the block
// calls it (it synchronizes); 256 threads.
__device__ void probe_weights(const probe_args &p, int64_t head, int tile, int tiles, int count, probe_batch &s,
                              const double *square, double *weight) {
    __shared__ double odd_s[VC_KV_ROWS];
    const int r = threadIdx.x & (VC_KV_ROWS - 1), parity = threadIdx.x >> 7;
    double half = 0.0;
    for (int base = 0; base < p.rows; base += kProbeBatch) {
        if (base > 0) {
            __syncthreads();  // the previous rows are read
            probe_fetch(p, head, tile, tiles, base, s);
        }
        __pipeline_wait_prior(0);
        __syncthreads();
        const int here = min(kProbeBatch, p.rows - base);
        if (r < count)  // base is even: row base + i has the parity of i
            for (int i = parity; i < here; i += 2) {
                half += square[s.codes[i * VC_KV_ROWS + r] & 0x7f] * s.factor[i];
            }
    }
    if (parity) odd_s[r] = half;
    __syncthreads();
    if (!parity && r < count) weight[r] = vsmooth_probe_token_weight(half, odd_s[r], p.mean_weight[head]);
}

static_assert(VC_KV_ROWS >= 128, "energy_s holds the 128 codes' squares first");
static_assert(VSMOOTH_SUM_LANES == 32, "vsmooth_tree_sum's lanes are a warp's (warp_sum)");

// The tile's block mean (double, as the CPU's block_means) and the range of
// each channel, from one read of the rows (v_scales_kernel turns them into
// the residual's amax). The mean is zeroed where it is not worth removing
// (the CPU's block_keeps_mean): the sink guard, a token of squared norm
// below sink_guard^2 |mean|^2, a mean with under VSMOOTH_MIN_MEAN_SHARE of
// the block's energy, or values all on the E4M3 grid at the block's channel
// ranges (vcattn_e4m3_exact_at). Two threads a channel (the even rows, the
// odd rows); the weights' total, |mean|^2 and the energy by one warp in
// vsmooth_tree_sum's order: no thread runs a chain of 128 additions while
// the block waits at a barrier.
template <bool kHalf>
__global__ void __launch_bounds__(kRowThreads) v_stats_kernel(v_args a) {
    chain_begin();
    extern __shared__ __align__(16) uint8_t tile_smem[];
    __shared__ float mean_s[kMaxHeadDim], hi_s[kMaxHeadDim], lo_s[kMaxHeadDim];
    __shared__ double energy_s[VC_KV_ROWS], mean2_s, weight_s[VC_KV_ROWS], total_s;
    __shared__ int keep_s;
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int n0 = tile * VC_KV_ROWS, count = min(VC_KV_ROWS, a.c.tokens - n0);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const bool weighted = a.demean && a.probe.rows > 0;
    __shared__ probe_batch batch_s;
    if (weighted) {
        probe_fetch(a.probe, head, tile, gridDim.x, 0, batch_s);
        if (threadIdx.x < 128) {  // the codes' squares, in energy_s until the row energies
            const double e = vcattn_e4m3_decode((uint8_t)threadIdx.x);
            energy_s[threadIdx.x] = e * e;
        }
    }
    smem_tile<kHalf> rows(tile_smem, d, a.v.dtype);
    // four chunks a thread in flight (one at a time, this pass waited on each
    // load); the codes' pass, whose reads mostly hit L2, was slower that way
    // (more registers, fewer blocks) and keeps one
    rows.template load<4>(a.v, a.c, b, h, a.perm, n0, count);
    if (weighted) probe_weights(a.probe, head, tile, gridDim.x, count, batch_s, energy_s, weight_s);
    __syncthreads();
    if (weighted && warp == 0) {
        double p = 0.0;
        for (int r = lane; r < count; r += VSMOOTH_SUM_LANES) p += weight_s[r];
        p = warp_sum(p);
        if (lane == 0) total_s = p;
    }
    // The odd rows' sums and ranges wait in arrays free until later (energy_s,
    // mean_s) or from now on (the probe batch's codes, all read above).
    float *const odd_lo = reinterpret_cast<float *>(batch_s.codes);
    const int chan = threadIdx.x % d, parity = threadIdx.x / d;
    double s = 0.0;
    float hi = -INFINITY, lo = INFINITY;
    if (parity < 2) {
        for (int r = parity; r < count; r += 2) {
            const float x = rows.get(r, chan);
            s += weighted ? weight_s[r] * (double)x : (double)x;
            hi = fmaxf(hi, x);
            lo = fminf(lo, x);
        }
        if (parity) {
            energy_s[chan] = s;
            mean_s[chan] = hi;
            odd_lo[chan] = lo;
        }
    }
    __syncthreads();
    if (parity == 0) {
        const double total = weighted ? total_s : (double)count;
        const float mean = a.demean ? (float)((s + energy_s[chan]) / total) : 0.0f;
        hi_s[chan] = fmaxf(hi, mean_s[chan]);
        lo_s[chan] = fminf(lo, odd_lo[chan]);
        mean_s[chan] = mean;
    }
    __syncthreads();
    if (a.demean && warp == 0) {
        double p = 0.0;
        for (int i = lane; i < d; i += VSMOOTH_SUM_LANES) p += (double)mean_s[i] * (double)mean_s[i];
        p = warp_sum(p);
        if (lane == 0) mean2_s = p;
    }
    __syncthreads();
    // Each row's energy in the CPU's four chains over i mod 4, two threads a
    // row: half 0 the chains 0 and 1, half 1 the chains 2 and 3, combined as
    // the CPU combines them, (e0 + e1) + (e2 + e3); a thread reads 4 channels
    // at a time (smem_tile's padding keeps these reads conflict-free).
    const int er = threadIdx.x & (VC_KV_ROWS - 1), half = threadIdx.x >> 7;
    int on_grid = 1;
    double part = 0.0;
    if (a.demean && er < count) {
        double e0 = 0.0, e1 = 0.0;
        for (int i = 0; i < d; i += 4) {
            const float4 q = rows.get4(er, i);
            const float u = half ? q.z : q.x, w = half ? q.w : q.y;
            e0 += (double)u * (double)u;
            e1 += (double)w * (double)w;
            const int c = i + 2 * half;
            if (on_grid)
                on_grid = vcattn_e4m3_exact_at(u, fmaxf(fabsf(hi_s[c]), fabsf(lo_s[c]))) &&
                          vcattn_e4m3_exact_at(w, fmaxf(fabsf(hi_s[c + 1]), fabsf(lo_s[c + 1])));
        }
        part = e0 + e1;
        if (half) energy_s[er] = part;
    }
    on_grid = __syncthreads_and(on_grid);  // and the upper halves are in energy_s
    int sink = 0;
    if (a.demean && !half && er < count) {
        const double energy = part + energy_s[er];
        energy_s[er] = energy;
        sink = a.sink_guard > 0.0f && energy < (double)a.sink_guard * (double)a.sink_guard * mean2_s;
    }
    sink = __syncthreads_or(sink);
    if (a.demean && warp == 0) {
        double p = 0.0;
        for (int r = lane; r < count; r += VSMOOTH_SUM_LANES) p += energy_s[r];
        p = warp_sum(p);
        if (lane == 0) keep_s = !sink && !on_grid && vsmooth_mean_worth_removing((double)count, mean2_s, p);
    }
    __syncthreads();
    for (int ch = threadIdx.x; ch < d; ch += kRowThreads) {
        const float mean = a.demean && keep_s ? mean_s[ch] : 0.0f;
        const int64_t at = (head * gridDim.x + tile) * d + ch;
        a.tile_mean[at] = mean;
        a.tile_hi[at] = hi_s[ch];
        a.tile_lo[at] = lo_s[ch];
    }
}

// Per channel: the power-of-two pre-scale of a channel near the float
// limits (vcattn_v_prescale_exp; 1 elsewhere) and its inverse, which the
// epilogue applies last, the block means scaled by it
// in place, and scale = max(amax, max|mean| / 128) / 448 (docs/formats.md)
// of the scaled residual, whose amax is, with RN monotone,
// max(RN(RN(max x pre) - mean), RN(mean - RN(min x pre))), as the CPU.
// kScaleThreads threads per head: thread (part, ch) takes the tiles
// t = part mod parts (a thread per channel looped over every tile, 0.1-0.3 ms
// at video lengths); maxima, so the split changes no bit.
constexpr int kScaleThreads = 1024;
__global__ void __launch_bounds__(kScaleThreads) v_scales_kernel(v_args a, int tiles) {
    chain_begin();
    __shared__ float part_s[2][kScaleThreads];
    const int64_t head = blockIdx.x;
    const int d = a.c.head_dim, ch = threadIdx.x % d, part = threadIdx.x / d, parts = kScaleThreads / d;
    float raw = 0.0f;
    for (int t = part; t < tiles; t += parts) {
        const int64_t at = (head * tiles + t) * d + ch;
        raw = fmaxf(raw, fmaxf(fabsf(a.tile_hi[at]), fabsf(a.tile_lo[at])));
    }
    part_s[0][threadIdx.x] = raw;
    __syncthreads();
    for (int p = 0; p < parts; p++) raw = fmaxf(raw, part_s[0][p * d + ch]);
    if (part == 0 && a.out_max > 0.0f && raw > a.out_max) atomicOr(a.c.error_flag, VC_FLAG_OUT_RANGE);
    const int k = vcattn_v_prescale_exp(raw);
    const float pre = vcattn_pow2f(-k);
    float amax = 0.0f, mean_amax = 0.0f;
    for (int t = part; t < tiles; t += parts) {
        const int64_t at = (head * tiles + t) * d + ch;
        const float mean = a.tile_mean[at] * pre;
        a.tile_mean[at] = mean;
        amax = fmaxf(amax, fmaxf(fmaxf(a.tile_hi[at] * pre - mean, mean - a.tile_lo[at] * pre), 0.0f));
        mean_amax = fmaxf(mean_amax, fabsf(mean));
    }
    __syncthreads();  // every thread has read the maxima above
    part_s[0][threadIdx.x] = amax;
    part_s[1][threadIdx.x] = mean_amax;
    __syncthreads();
    if (part) return;
    for (int p = 1; p < parts; p++) {
        amax = fmaxf(amax, part_s[0][p * d + ch]);
        mean_amax = fmaxf(mean_amax, part_s[1][p * d + ch]);
    }
    amax = fmaxf(amax, mean_amax / 128.0f);
    float scale;
    a.chan_inv[head * d + ch] = vcattn_e4m3_scale(amax, &scale);
    a.chan_mul[head * d + ch] = scale;
    a.chan_pre[head * d + ch] = pre;
    a.chan_pow2[head * d + ch] = vcattn_pow2f(k);
}

// Tile `tile`'s words of its group's mean image: (mu, mu) in FP16 per channel,
// zeros in the ones rows; the last tile also zeroes the slots after it.
static __device__ void write_mean_image(const v_args &a, int64_t head, int tile, int tiles, const float *mean,
                                        const float *inv) {
    const uint32_t d = a.c.head_dim, rows = d + VC_ONES_ROWS, bytes = vc_mean_image_bytes(d);
    const int groups = (tiles + VC_MEAN_TILES - 1) / VC_MEAN_TILES;
    uint8_t *image = a.mean_images + (head * groups + tile / VC_MEAN_TILES) * (int64_t)bytes;
    const int last = tile == tiles - 1 ? (tile / VC_MEAN_TILES + 1) * VC_MEAN_TILES - 1 : tile;
    for (int x = tile; x <= last; x++) {
        for (uint32_t n = threadIdx.x; n < rows; n += kRowThreads) {
            uint32_t word = 0;
            if (x == tile && n < d && a.demean) {
                const uint32_t h = __half_as_ushort(__float2half_rn(vcattn_round_f16(mean[n] * inv[n])));
                word = h | h << 16;
            }
            *reinterpret_cast<uint32_t *>(image + vc_mean_image_offset((uint32_t)x, n, d)) = word;
        }
    }
}

// V^T record of one tile: codes read straight from the tile in the order
// of the record's bytes (token sigma-permuted within 16), ones rows, then
// the block mean in code units. A thread writes 32 bytes: two adjacent
// channels (chunks 2j and 2j + 1 of the image: rows 2i, 2i + 1 of V^T),
// the 16 key positions of a 16-group, each token's pair in one shared-memory
// read (with a channel a thread, the pass waited on twice as many reads);
// a warp's lanes take 64 channels, so the reads of one token are 128
// contiguous bytes.
template <bool kHalf>
__global__ void __launch_bounds__(kRowThreads) v_encode_kernel(v_args a) {
    chain_begin();
    extern __shared__ __align__(16) uint8_t tile_smem[];
    const int tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z, d = a.c.head_dim;
    const int64_t head = (int64_t)b * a.c.heads + h;
    const int tiles = gridDim.x, n0 = tile * VC_KV_ROWS;
    const int count = min(VC_KV_ROWS, a.c.tokens - n0);
    const float *mean = a.tile_mean + (head * tiles + tile) * d;
    const float *inv = a.chan_inv + head * d, *pre = a.chan_pre + head * d;
    smem_tile<kHalf> rows(tile_smem, d, a.v.dtype);
    rows.load(a.v, a.c, b, h, a.perm, n0, count);
    __syncthreads();
    uint8_t *rec = a.records + (head * tiles + tile) * (int64_t)vc_v_record_bytes(d);
    const uint32_t vt_rows = d + VC_ONES_ROWS;
    uint4 *chunks = reinterpret_cast<uint4 *>(rec);
    static_assert(VC_ONES_ROWS % 2 == 0, "a pair of V^T rows is both channels or both ones rows");
    for (uint32_t j = threadIdx.x; j < vc_vt_bytes(d) / 32; j += kRowThreads) {
        uint32_t row, col;  // row even: chunk 2j + 1 is row + 1 at the same keys
        vc_tile_coords(j * 32, vt_rows, &row, &col);
        const uint4 ones = make_uint4(0x38383838u, 0x38383838u, 0x38383838u, 0x38383838u);  // E4M3 1.0
        uint4 pair[2] = {ones, ones};
        if (row < (uint32_t)d) {
            const float mu[2] = {mean[row], mean[row + 1]}, scale[2] = {inv[row], inv[row + 1]};
            const float p[2] = {pre[row], pre[row + 1]};
            uint32_t w[2][4];
#pragma unroll
            for (int q = 0; q < 4; q++) {
                float f[2][4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const uint32_t token = col + vc_sigma(4 * q + e);  // col is a multiple of 16
                    const float2 x = (int)token < count ? rows.get2(token, row) : make_float2(0.0f, 0.0f);
                    f[0][e] = (int)token < count ? (x.x * p[0] - mu[0]) * scale[0] : 0.0f;
                    f[1][e] = (int)token < count ? (x.y * p[1] - mu[1]) * scale[1] : 0.0f;
                }
#pragma unroll
                for (int c = 0; c < 2; c++) w[c][q] = cvt_e4m3x2(f[c][0], f[c][1]) | (cvt_e4m3x2(f[c][2], f[c][3]) << 16);
            }
            pair[0] = make_uint4(w[0][0], w[0][1], w[0][2], w[0][3]);
            pair[1] = make_uint4(w[1][0], w[1][1], w[1][2], w[1][3]);
        }
        chunks[2 * j] = pair[0];
        chunks[2 * j + 1] = pair[1];
    }
    float *mu = reinterpret_cast<float *>(rec + vc_vt_bytes(d));
    for (int ch = threadIdx.x; ch < d; ch += kRowThreads)
        mu[ch] = a.demean ? vcattn_round_f16(mean[ch] * inv[ch]) : 0.0f;
    if (a.mean_images) write_mean_image(a, head, tile, tiles, mean, inv);
}

}  // namespace

cudaError_t quantize_v(const dev_tensor &v, const quant_common &c, const int32_t *perm, int demean,
                       float sink_guard, float out_max, const probe_args *probe, float *tile_mean,
                       float *tile_hi, float *tile_lo, float *chan_inv, float *chan_mul, float *chan_pre,
                       float *chan_pow2, uint8_t *records, uint8_t *mean_images, cudaStream_t stream) {
    const int tiles = (c.tokens + VC_KV_ROWS - 1) / VC_KV_ROWS;
    v_args a = {v, c, perm, demean, sink_guard, c.check_finite ? out_max : 0.0f, tile_mean, tile_hi, tile_lo,
                chan_inv, chan_mul, chan_pre, chan_pow2, records, mean_images, probe ? *probe : probe_args{}};
    const dim3 grid(tiles, c.heads, c.batch);
    // 16-bit rows stay 16-bit in shared memory (twice the blocks an SM)
    const bool half = v.vec && v.dtype != VCATTN_DTYPE_F32;
    const int smem = half ? smem_tile<true>::bytes(c.head_dim) : smem_tile<false>::bytes(c.head_dim);
    void (*stats)(v_args) = half ? v_stats_kernel<true> : v_stats_kernel<false>;
    void (*encode)(v_args) = half ? v_encode_kernel<true> : v_encode_kernel<false>;
    cudaError_t err;
    if ((err = allow_dynamic_smem((const void *)stats, smem)) || (err = allow_dynamic_smem((const void *)encode, smem)))
        return err;
    launch_chained(stats, grid, kRowThreads, smem, stream, a);
    launch_chained(v_scales_kernel, c.batch * c.heads, kScaleThreads, 0, stream, a, tiles);
    launch_chained(encode, grid, kRowThreads, smem, stream, a);
    return cudaGetLastError();
}
