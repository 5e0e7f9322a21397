// V-Smooth's token order chosen per key head at a grouping step
// (vsmooth_order_rows; docs/cuda-design.md §13d). The backend quantizes the
// call in both orders; these kernels gather the sampled query rows into a
// small Q operand (for the attention kernel to run in each order), form their
// reference output on the tensor cores, compare each order's squared error
// and copy the chosen order's slices over the k-means ones.
#include "kernels.h"
#include "launch_facts.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../vsmooth/vsmooth.h"

namespace {

// Sampled row s of each query head is row vsmooth_probe_row(s, nq) of the
// call's Q operand: its codes and multiplier, moved to row s of the small
// operand (row_tiles 64-row tiles a head, zeroed by the caller past rows).
__global__ void gather_rows_kernel(sampled_rows a, const int8_t *q_codes, const float *q_mul, int q_tiles) {
    const int s = blockIdx.x, d = a.head_dim;
    const int64_t i = vsmooth_probe_row(s, a.tokens_q), heads = (int64_t)a.batch * a.heads_q;
    for (int64_t head = blockIdx.y; head < heads; head += gridDim.y) {
        const int8_t *src = q_codes + (head * q_tiles + i / VC_Q_ROWS) * (int64_t)VC_Q_ROWS * d;
        int8_t *dst = a.q_codes + (head * a.row_tiles + s / VC_Q_ROWS) * (int64_t)VC_Q_ROWS * d;
        for (int c = threadIdx.x; c < d; c += blockDim.x)
            dst[vc_tile_offset(s % VC_Q_ROWS, c, VC_Q_ROWS)] =
                src[vc_tile_offset((uint32_t)(i % VC_Q_ROWS), c, VC_Q_ROWS)];
        if (threadIdx.x == 0) a.q_mul[head * a.row_tiles * VC_Q_ROWS + s] = q_mul[head * q_tiles * VC_Q_ROWS + i];
    }
}

// Elements [c, c + 8) of row n of head (b, h) after RoPE, as the quantizers
// rotate: for a pair (xa, xb), xa co - xb si and xa si + xb co.
__device__ void rotated8(const dev_tensor &t, const dev_rope &rope, int b, int h, int64_t n, int c, int d, float *x) {
    load_row8(t, b, h, n, c, x);
    if (!rope.cos_tab) return;
    const float *co = rope.cos_tab + rope.row_at(b, h, n), *si = rope.sin_tab + rope.row_at(b, h, n);
    if (rope.half_split) {
        const bool first = c < d / 2;
        const int pair = first ? c : c - d / 2;
        float y[8];
        load_row8(t, b, h, n, first ? c + d / 2 : c - d / 2, y);
#pragma unroll
        for (int i = 0; i < 8; i++)
            x[i] = first ? x[i] * co[pair + i] - y[i] * si[pair + i] : y[i] * si[pair + i] + x[i] * co[pair + i];
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float xa = x[2 * i], xb = x[2 * i + 1], cp = co[c / 2 + i], sp = si[c / 2 + i];
            x[2 * i] = xa * cp - xb * sp;
            x[2 * i + 1] = xa * sp + xb * cp;
        }
    }
}

__device__ void store_bf16x8(__nv_bfloat16 *dst, const float *x) {
    __align__(16) __nv_bfloat16 h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) h[i] = __float2bfloat16_rn(x[i]);
    *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(h);
}

// The reference: 128 sampled rows of one query head (16 a warp) against one
// range of keys, as a tensor-core kernel forms attention: BF16 q, k and v,
// FP32 scores, running maxima and sums, the probabilities rounded to BF16
// before P V (docs/fidelity.md measures what this reference costs the
// choice). Scores, probabilities and the output stay in registers
// (mma.sync m16n8k16: a score tile's accumulator is the next product's A
// operand); a block's eight warps share each key tile it loads and rotates.
// Rows padded by 8 halves, so fragment loads hit distinct banks.
constexpr int kRefRows = 128, kRefKeys = 64, kRefWarps = kRefRows / 16, kRefThreads = 32 * kRefWarps;
// Blocks the splits aim at (about eight waves of two blocks an SM on an H100).
constexpr int kRefBlocks = 2048;
// 16-byte chunks of a tile a thread loads before it stores any.
constexpr int kRefBatch = 2;

template <int D> struct ref_smem {
    __nv_bfloat16 q[kRefRows][D + 8], k[kRefKeys][D + 8], v[kRefKeys][D + 8];
};

__device__ __forceinline__ uint32_t lds32(const __nv_bfloat16 *p) { return *reinterpret_cast<const uint32_t *>(p); }

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&h);
}

// c += a b: 16x16 BF16 by 16x8 BF16 into 16x8 FP32.
__device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// B operands of two 16x8 products from a row-major [key][channel] tile:
// keys [k0, k0 + 16), channels [n0, n0 + 8) into b[0..1] and [n0 + 8,
// n0 + 16) into b[2..3] (each lane addresses one 16-byte row piece).
__device__ __forceinline__ void ldsm_x4_trans(uint32_t *b, const __nv_bfloat16 *tile_row0, int ld, int lane) {
    const int m = lane / 8, i = lane % 8;
    const __nv_bfloat16 *p = tile_row0 + (i + 8 * (m & 1)) * ld + 8 * (m >> 1);
    const uint32_t at = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(at));
}

template <int D>
__global__ void __launch_bounds__(kRefThreads, 2) reference_kernel(sampled_rows a, call_tensors in, float score_mul) {
    extern __shared__ __align__(128) uint8_t ref_bytes[];
    ref_smem<D> &sm = *reinterpret_cast<ref_smem<D> *>(ref_bytes);
    const int tile = blockIdx.x, hq = blockIdx.y, b = blockIdx.z / a.splits, split = blockIdx.z % a.splits;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, hk = hq / (a.heads_q / a.heads_kv);
    const int g = lane / 4, t = lane % 4;  // the fragment's row (and row + 8) and column pair
    const int64_t head = (int64_t)b * a.heads_q + hq;
    for (int e = tid; e < kRefRows * D / 8; e += kRefThreads) {
        const int r = e / (D / 8), c = e % (D / 8) * 8, s = tile * kRefRows + r;
        float x[8] = {};
        if (s < a.rows) rotated8(in.q, in.qrope, b, hq, vsmooth_probe_row(s, a.tokens_q), c, D, x);
        store_bf16x8(&sm.q[r][c], x);
    }
    const int w0 = 16 * warp;  // the warp's rows
    float o[D / 8][4] = {};    // rows w0 + g and w0 + g + 8, channels 8n + 2t and + 1
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's columns only
    constexpr int kChunks = kRefKeys * D / 8;  // 16-byte chunks of a k or v tile
    static_assert(2 * kChunks % (kRefBatch * kRefThreads) == 0, "whole batches");
    const int key_end = min(a.tokens_k, (split + 1) * a.split_keys);
    for (int j0 = split * a.split_keys; j0 < key_end; j0 += kRefKeys) {
        __syncthreads();  // the previous tile's k and v are read
        for (int e0 = tid; e0 < 2 * kChunks; e0 += kRefBatch * kRefThreads) {  // k's chunks, then v's
            float x[kRefBatch][8];  // every load in flight before the first store
#pragma unroll
            for (int i = 0; i < kRefBatch; i++) {
                const int at = e0 + i * kRefThreads, e = at % kChunks, r = e / (D / 8), c = e % (D / 8) * 8;
                const int64_t j = j0 + r;
#pragma unroll
                for (int y = 0; y < 8; y++) x[i][y] = 0.0f;
                if (j < key_end) {
                    if (at < kChunks) rotated8(in.k, in.krope, b, hk, j, c, D, x[i]);
                    else load_row8(in.v, b, hk, j, c, x[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < kRefBatch; i++) {
                const int at = e0 + i * kRefThreads, e = at % kChunks, r = e / (D / 8), c = e % (D / 8) * 8;
                store_bf16x8(at < kChunks ? &sm.k[r][c] : &sm.v[r][c], x[i]);
            }
        }
        __syncthreads();
        float s[kRefKeys / 8][4] = {};  // scores: rows g, g + 8; keys 8n + 2t and + 1
#pragma unroll
        for (int kk = 0; kk < D / 16; kk++) {
            uint32_t qa[4];
            qa[0] = lds32(&sm.q[w0 + g][16 * kk + 2 * t]);
            qa[1] = lds32(&sm.q[w0 + g + 8][16 * kk + 2 * t]);
            qa[2] = lds32(&sm.q[w0 + g][16 * kk + 2 * t + 8]);
            qa[3] = lds32(&sm.q[w0 + g + 8][16 * kk + 2 * t + 8]);
#pragma unroll
            for (int n = 0; n < kRefKeys / 8; n++)
                mma_bf16(s[n], qa, lds32(&sm.k[8 * n + g][16 * kk + 2 * t]), lds32(&sm.k[8 * n + g][16 * kk + 2 * t + 8]));
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < kRefKeys / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const bool valid = j0 + 8 * n + 2 * t + (i & 1) < key_end;
                s[n][i] = valid ? s[n][i] * score_mul : -INFINITY;
                mx[i / 2] = fmaxf(mx[i / 2], s[n][i]);
            }
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {  // the row's maximum over its quad of lanes
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            const float m_new = fmaxf(m[h], mx[h]);
            alpha[h] = exp2f(m[h] - m_new);  // 0 on the first tile
            m[h] = m_new;
            l[h] *= alpha[h];
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) o[n][i] *= alpha[i / 2];
#pragma unroll
        for (int kk = 0; kk < kRefKeys / 16; kk++) {
            uint32_t pa[4];  // the two score tiles of keys [16 kk, 16 kk + 16) as BF16 A operand
#pragma unroll
            for (int half = 0; half < 2; half++) {
                float e[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    e[i] = exp2f(s[2 * kk + half][i] - m[i / 2]);
                    l[i / 2] += e[i];
                }
                pa[2 * half] = pack_bf16(e[0], e[1]);
                pa[2 * half + 1] = pack_bf16(e[2], e[3]);
            }
#pragma unroll
            for (int n = 0; n < D / 16; n++) {
                uint32_t vb[4];
                ldsm_x4_trans(vb, &sm.v[16 * kk][16 * n], D + 8, lane);
                mma_bf16(o[2 * n], pa, vb[0], vb[1]);
                mma_bf16(o[2 * n + 1], pa, vb[2], vb[3]);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {  // the row's sum over its quad
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
    const int64_t part = (int64_t)split * a.batch * a.heads_q + head;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int s = tile * kRefRows + w0 + g + 8 * h;
        if (s >= a.rows) continue;
        float *dst = a.part_o + (part * a.rows + s) * D;
#pragma unroll
        for (int n = 0; n < D / 8; n++)
            *reinterpret_cast<float2 *>(dst + 8 * n + 2 * t) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
        if (t == 0) {
            a.part_ml[(part * a.rows + s) * 2] = m[h];
            a.part_ml[(part * a.rows + s) * 2 + 1] = l[h];
        }
    }
}

// The reference of each sampled row from its key ranges, in split order:
// a block a (row, head), a thread a channel.
__global__ void combine_splits_kernel(sampled_rows a) {
    const int64_t heads = (int64_t)a.batch * a.heads_q, s = blockIdx.x, d = a.head_dim;
    for (int64_t head = blockIdx.y; head < heads; head += gridDim.y) {
        float m = -INFINITY;
        for (int i = 0; i < a.splits; i++) m = fmaxf(m, a.part_ml[((i * heads + head) * a.rows + s) * 2]);
        for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
            float l = 0.0f, o = 0.0f;
            for (int i = 0; i < a.splits; i++) {
                const int64_t at = (i * heads + head) * a.rows + s;
                const float w = exp2f(a.part_ml[at * 2] - m);
                l += a.part_ml[at * 2 + 1] * w;
                o += a.part_o[at * d + c] * w;
            }
            a.reference[(head * a.rows + s) * d + c] = o / l;
        }
    }
}

// Per key head: the squared error of each order's output on the sampled rows
// of its query heads, in double, in a fixed order (the same sums every
// run), and the choice: 1 where the principal order's is smaller (ties keep
// k-means, as on the CPU).
constexpr int kErrThreads = 256;
__global__ void __launch_bounds__(kErrThreads) order_error_kernel(sampled_rows a) {
    __shared__ double part[2][kErrThreads];
    const int64_t g = blockIdx.x, group = a.heads_q / a.heads_kv;
    const int64_t b = g / a.heads_kv, hk = g % a.heads_kv;
    const int64_t first = (b * a.heads_q + hk * group) * a.rows * a.head_dim;  // the group's heads are adjacent
    const int64_t count = group * a.rows * a.head_dim;
    double ek = 0.0, ep = 0.0;
    for (int64_t e = threadIdx.x; e < count; e += kErrThreads) {
        const double ref = a.reference[first + e];
        const double dk = a.out_kmeans[first + e] - ref, dp = a.out_principal[first + e] - ref;
        ek += dk * dk;
        ep += dp * dp;
    }
    part[0][threadIdx.x] = ek;
    part[1][threadIdx.x] = ep;
    __syncthreads();
    for (int half = kErrThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            part[0][threadIdx.x] += part[0][threadIdx.x + half];
            part[1][threadIdx.x] += part[1][threadIdx.x + half];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) a.choice[g] = part[1][0] < part[0][0];
}

// dst's slice of head h takes src's where the choice of key head h / group is 1.
template <typename Word>
__global__ void take_heads_kernel(Word *dst, const Word *src, int64_t words, int heads, int group, const int *choice) {
    for (int h = blockIdx.y; h < heads; h += gridDim.y) {
        if (!choice[h / group]) continue;
        const int64_t at = (int64_t)h * words;
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < words; i += (int64_t)gridDim.x * blockDim.x)
            dst[at + i] = src[at + i];
    }
}

}  // namespace

cudaError_t gather_sampled_rows(const sampled_rows &a, const int8_t *q_codes, const float *q_mul, int q_tiles,
                                cudaStream_t stream) {
    const int64_t heads = (int64_t)a.batch * a.heads_q;
    cudaError_t err = cudaMemsetAsync(a.q_codes, 0, heads * a.row_tiles * VC_Q_ROWS * a.head_dim, stream);
    if (err == cudaSuccess) err = cudaMemsetAsync(a.q_mul, 0, heads * a.row_tiles * VC_Q_ROWS * sizeof(float), stream);
    if (err != cudaSuccess) return err;
    gather_rows_kernel<<<dim3(a.rows, (unsigned)(heads < 65535 ? heads : 65535)), 128, 0, stream>>>(a, q_codes, q_mul,
                                                                                                  q_tiles);
    return cudaGetLastError();
}

void plan_reference_splits(sampled_rows *a) {
    const int64_t blocks = (int64_t)(a->rows + kRefRows - 1) / kRefRows * a->batch * a->heads_q;
    const int key_tiles = (a->tokens_k + kRefKeys - 1) / kRefKeys;
    int64_t splits = kRefBlocks / blocks;
    if (splits > key_tiles) splits = key_tiles;
    if (splits > 65535 / a->batch) splits = 65535 / a->batch;  // grid.z
    if (splits < 1) splits = 1;
    const int tiles = (int)((key_tiles + splits - 1) / splits);
    a->split_keys = tiles * kRefKeys;
    a->splits = (key_tiles + tiles - 1) / tiles;  // none empty
}

template <int D>
cudaError_t launch_reference(const sampled_rows &a, const call_tensors &in, float score_mul, cudaStream_t stream) {
    const int bytes = (int)sizeof(ref_smem<D>);
    cudaError_t err = allow_dynamic_smem((const void *)reference_kernel<D>, bytes);
    if (err != cudaSuccess) return err;
    const dim3 grid((a.rows + kRefRows - 1) / kRefRows, a.heads_q, a.batch * a.splits);
    reference_kernel<D><<<grid, kRefThreads, bytes, stream>>>(a, in, score_mul);
    if ((err = cudaGetLastError())) return err;
    const int64_t heads = (int64_t)a.batch * a.heads_q;
    combine_splits_kernel<<<dim3(a.rows, (unsigned)(heads < 65535 ? heads : 65535)), D, 0, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t sampled_reference(const sampled_rows &a, const call_tensors &in, float score_mul, cudaStream_t stream) {
    if (a.head_dim == 64) return launch_reference<64>(a, in, score_mul, stream);
    if (a.head_dim == 128) return launch_reference<128>(a, in, score_mul, stream);
    return cudaErrorInvalidValue;
}

cudaError_t choose_by_error(const sampled_rows &a, cudaStream_t stream) {
    order_error_kernel<<<a.batch * a.heads_kv, kErrThreads, 0, stream>>>(a);
    return cudaGetLastError();
}

cudaError_t take_heads(void *dst, const void *src, size_t bytes_per_head, int heads, int group, const int *choice,
                       cudaStream_t stream) {
    if (!dst || !src || !bytes_per_head) return cudaSuccess;
    const dim3 grid(16, (unsigned)(heads < 65535 ? heads : 65535));
    if (bytes_per_head % 16 == 0)
        take_heads_kernel<uint4><<<grid, 256, 0, stream>>>(static_cast<uint4 *>(dst), static_cast<const uint4 *>(src),
                                                           (int64_t)(bytes_per_head / 16), heads, group, choice);
    else if (bytes_per_head % 4 == 0)
        take_heads_kernel<uint32_t><<<grid, 256, 0, stream>>>(static_cast<uint32_t *>(dst),
                                                              static_cast<const uint32_t *>(src),
                                                              (int64_t)(bytes_per_head / 4), heads, group, choice);
    else
        take_heads_kernel<uint8_t><<<grid, 256, 0, stream>>>(static_cast<uint8_t *>(dst),
                                                             static_cast<const uint8_t *>(src), (int64_t)bytes_per_head,
                                                             heads, group, choice);
    return cudaGetLastError();
}
