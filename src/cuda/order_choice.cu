// V-Smooth's token order chosen per key head at a grouping step
// (vsmooth_order_rows; docs/cuda-design.md §13d). The backend quantizes the
// call in both orders; these kernels gather the sampled query rows into a
// small Q operand (for the attention kernel to run in each order), form their
// reference output on the tensor cores, compare each order's squared error
// and copy the chosen order's slices over the k-means ones.
#include "kernels.h"
#include "load.cuh"
#include "operand_layout.h"
#include "../vsmooth/vsmooth.h"

#include <mma.h>

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
    const float *co = rope.cos_tab + n * (d / 2), *si = rope.sin_tab + n * (d / 2);
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

// The reference: 64 sampled rows of one query head (16 a warp) against one
// range of keys, as a tensor-core kernel forms attention: BF16 q, k and v,
// FP32 scores, running maxima and sums, the probabilities rounded to BF16
// before P V (docs/fidelity.md measures what this reference costs the
// choice). Rows padded by 8 halves / 4 floats so that fragment loads hit
// distinct banks.
constexpr int kRefRows = 64, kRefKeys = 64, kRefWarps = kRefRows / 16, kRefThreads = 32 * kRefWarps;
// Blocks the splits aim at (eight waves of two blocks an SM on an H100).
constexpr int kRefBlocks = 2048;
// 16-byte chunks of a tile a thread loads before it stores any.
constexpr int kRefBatch = 4;

template <int D> struct ref_smem {
    __nv_bfloat16 q[kRefRows][D + 8], k[kRefKeys][D + 8], v[kRefKeys][D + 8];
    float s[kRefRows][kRefKeys + 4];
    __nv_bfloat16 p[kRefRows][kRefKeys + 8];
    float o[kRefRows][D + 4];
    float m[kRefRows], l[kRefRows], alpha[kRefRows];
};

template <int D>
__global__ void __launch_bounds__(kRefThreads) reference_kernel(sampled_rows a, call_tensors in, float score_mul) {
    using namespace nvcuda;
    extern __shared__ __align__(128) uint8_t ref_bytes[];
    ref_smem<D> &sm = *reinterpret_cast<ref_smem<D> *>(ref_bytes);
    const int tile = blockIdx.x, hq = blockIdx.y, b = blockIdx.z / a.splits, split = blockIdx.z % a.splits;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, hk = hq / (a.heads_q / a.heads_kv);
    const int64_t head = (int64_t)b * a.heads_q + hq;
    constexpr int kChunks = kRefRows * D / 8;  // 16-byte chunks of a tile (q's, k's or v's)
    for (int e = tid; e < kChunks; e += kRefThreads) {
        const int r = e / (D / 8), c = e % (D / 8) * 8, s = tile * kRefRows + r;
        float x[8] = {};
        if (s < a.rows) rotated8(in.q, in.qrope, b, hq, vsmooth_probe_row(s, a.tokens_q), c, D, x);
        store_bf16x8(&sm.q[r][c], x);
    }
    for (int e = tid; e < kRefRows * D; e += kRefThreads) sm.o[e / D][e % D] = 0.0f;
    for (int r = tid; r < kRefRows; r += kRefThreads) {
        sm.m[r] = -INFINITY;
        sm.l[r] = 0.0f;
    }
    const int w0 = 16 * warp;  // the warp's rows
    const int key_end = min(a.tokens_k, (split + 1) * a.split_keys);
    for (int j0 = split * a.split_keys; j0 < key_end; j0 += kRefKeys) {
        __syncthreads();  // the previous tile's k and v are read
        for (int e0 = tid; e0 < kChunks; e0 += kRefBatch * kRefThreads) {
            float kx[kRefBatch][8], vx[kRefBatch][8];  // every load in flight before the first store
#pragma unroll
            for (int i = 0; i < kRefBatch; i++) {
                const int e = e0 + i * kRefThreads, r = e / (D / 8), c = e % (D / 8) * 8;
                const int64_t j = j0 + r;
#pragma unroll
                for (int x = 0; x < 8; x++) kx[i][x] = vx[i][x] = 0.0f;
                if (e < kChunks && j < key_end) {
                    rotated8(in.k, in.krope, b, hk, j, c, D, kx[i]);
                    load_row8(in.v, b, hk, j, c, vx[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < kRefBatch; i++) {
                const int e = e0 + i * kRefThreads, r = e / (D / 8), c = e % (D / 8) * 8;
                if (e < kChunks) {
                    store_bf16x8(&sm.k[r][c], kx[i]);
                    store_bf16x8(&sm.v[r][c], vx[i]);
                }
            }
        }
        __syncthreads();
        {  // s = q k^T for the warp's 16 rows
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
            for (int n = 0; n < kRefKeys / 16; n++) {
                wmma::fill_fragment(fc, 0.0f);
                for (int kk = 0; kk < D / 16; kk++) {
                    wmma::load_matrix_sync(fa, &sm.q[w0][16 * kk], D + 8);
                    wmma::load_matrix_sync(fb, &sm.k[16 * n][16 * kk], D + 8);
                    wmma::mma_sync(fc, fa, fb, fc);
                }
                wmma::store_matrix_sync(&sm.s[w0][16 * n], fc, kRefKeys + 4, wmma::mem_row_major);
            }
        }
        __syncwarp();
        {  // online softmax: two lanes a row, 32 keys each
            const int r = w0 + lane / 2, k0 = 32 * (lane % 2);
            float mx = -INFINITY;
            for (int i = 0; i < 32; i++) {
                const float x = j0 + k0 + i < key_end ? sm.s[r][k0 + i] * score_mul : -INFINITY;
                sm.s[r][k0 + i] = x;
                mx = fmaxf(mx, x);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = sm.m[r], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int i = 0; i < 32; i++) {
                const float e = exp2f(sm.s[r][k0 + i] - m_new);
                sum += e;
                sm.p[r][k0 + i] = __float2bfloat16_rn(e);
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            __syncwarp();
            if (lane % 2 == 0) {
                const float alpha = exp2f(m_old - m_new);  // 0 on the first tile
                sm.alpha[r] = alpha;
                sm.l[r] = sm.l[r] * alpha + sum;
                sm.m[r] = m_new;
            }
        }
        __syncwarp();
        for (int e = lane; e < 16 * D; e += 32) sm.o[w0 + e / D][e % D] *= sm.alpha[w0 + e / D];
        __syncwarp();
        {  // o += p v for the warp's 16 rows
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
            for (int n = 0; n < D / 16; n++) {
                wmma::load_matrix_sync(fc, &sm.o[w0][16 * n], D + 4, wmma::mem_row_major);
                for (int kk = 0; kk < kRefKeys / 16; kk++) {
                    wmma::load_matrix_sync(fa, &sm.p[w0][16 * kk], kRefKeys + 8);
                    wmma::load_matrix_sync(fb, &sm.v[16 * kk][16 * n], D + 8);
                    wmma::mma_sync(fc, fa, fb, fc);
                }
                wmma::store_matrix_sync(&sm.o[w0][16 * n], fc, D + 4, wmma::mem_row_major);
            }
        }
    }
    __syncthreads();
    const int64_t part = (int64_t)split * a.batch * a.heads_q + head;
    for (int e = tid; e < kRefRows * D; e += kRefThreads) {
        const int r = e / D, c = e % D, s = tile * kRefRows + r;
        if (s < a.rows) a.part_o[(part * a.rows + s) * D + c] = sm.o[r][c];
    }
    for (int r = tid; r < kRefRows; r += kRefThreads) {
        const int s = tile * kRefRows + r;
        if (s < a.rows) {
            a.part_ml[(part * a.rows + s) * 2] = sm.m[r];
            a.part_ml[(part * a.rows + s) * 2 + 1] = sm.l[r];
        }
    }
}

// The reference of each sampled row from its key ranges, in split order.
__global__ void combine_splits_kernel(sampled_rows a) {
    const int64_t head = blockIdx.x, heads = (int64_t)a.batch * a.heads_q, d = a.head_dim;
    for (int64_t e = threadIdx.x; e < (int64_t)a.rows * d; e += blockDim.x) {
        const int64_t s = e / d;
        float m = -INFINITY;
        for (int i = 0; i < a.splits; i++) m = fmaxf(m, a.part_ml[((i * heads + head) * a.rows + s) * 2]);
        float l = 0.0f, o = 0.0f;
        for (int i = 0; i < a.splits; i++) {
            const int64_t at = (i * heads + head) * a.rows + s;
            const float w = exp2f(a.part_ml[at * 2] - m);
            l += a.part_ml[at * 2 + 1] * w;
            o += a.part_o[at * d + e % d] * w;
        }
        a.reference[(head * a.rows + s) * d + e % d] = o / l;
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
    cudaError_t err = cudaFuncSetAttribute(reference_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (err != cudaSuccess) return err;
    const dim3 grid((a.rows + kRefRows - 1) / kRefRows, a.heads_q, a.batch * a.splits);
    reference_kernel<D><<<grid, kRefThreads, bytes, stream>>>(a, in, score_mul);
    if ((err = cudaGetLastError())) return err;
    combine_splits_kernel<<<a.batch * a.heads_q, 256, 0, stream>>>(a);
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
