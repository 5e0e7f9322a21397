// V-Smooth grouping on the GPU: Lloyd's k-means over the value tokens of every
// (batch, head), then the stable counting sort of the labels into the token
// permutation. Same arithmetic as src/vsmooth/kmeans.c: distances in float32
// with the same summation order (compiled with -fmad=false), ties to the
// lowest index, centroid sums in double (in chunk order here, so a centroid
// may differ from the CPU's in its last bit), empty clusters kept; V scaled
// per head by the power of two of vsmooth_kmeans_scale_exp (1 for ordinary
// values). Deterministic: the one atomic is a max of non-negative floats.
#include "kernels.h"
#include "launch_facts.h"
#include "load.cuh"
#include "../vsmooth/vsmooth.h"

#include <float.h>

namespace {

constexpr int kMaxClusters = 32;
constexpr int kChunk = 2048;        // tokens per partial centroid sum / sort chunk
constexpr int kAssignThreads = 128;
constexpr int kSumBatch = 16;      // tokens whose loads are in flight together in partial_sums_kernel
constexpr int kMaxGridY = 65535;   // (batch, head) pairs per launch on grid.y; more run as slices from g0

// The multiplier V gets in the k-means of head g: 2^-k (exact).
static __device__ __forceinline__ float head_scale(const float *amax, int64_t g) {
    return ldexpf(1.0f, -vsmooth_kmeans_scale_exp(amax[g]));
}

constexpr int kAmaxThreads = 256;

// Per (chunk of tokens, head): the largest |v|, max-ed into amax[g] (zeroed
// before; non-negative floats order as their bits).
__global__ void __launch_bounds__(kAmaxThreads) head_amax_kernel(dev_tensor v, quant_common c, float *amax,
                                                                 int64_t g0) {
    __shared__ float warp_max[kAmaxThreads / 32];
    const int64_t g = g0 + blockIdx.y;
    const int d = c.head_dim, b = (int)(g / c.heads), h = (int)(g % c.heads);
    const int n0 = blockIdx.x * kChunk, n1 = min(c.tokens, n0 + kChunk);
    const int col = threadIdx.x % d, rows = kAmaxThreads / d;  // d <= 256: whole rows per pass
    float m = 0.0f;
    for (int n = n0 + (int)threadIdx.x / d; n < n1; n += rows) m = fmaxf(m, fabsf(load_elem(v, b, h, n, col)));
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kAmaxThreads / 32; w++) m = fmaxf(m, warp_max[w]);
        atomicMax(reinterpret_cast<int *>(amax + g), __float_as_int(m));
    }
}

// centroids [B*H][k*d] times the head's multiplier (inverse: its reciprocal).
__global__ void scale_centroids_kernel(float *centroids, int kd, const float *amax, int inverse) {
    const int64_t g = blockIdx.x;
    const int k = vsmooth_kmeans_scale_exp(amax[g]);
    const float s = ldexpf(1.0f, inverse ? k : -k);
    for (int i = threadIdx.x; i < kd; i += blockDim.x) centroids[g * kd + i] = centroids[g * kd + i] * s;
}

__global__ void gather_rows_kernel(dev_tensor v, quant_common c, int k, const int32_t *rows,
                                   float *centroids, int64_t g0) {
    const int cl = blockIdx.x, d = c.head_dim;
    const int64_t g = g0 + blockIdx.y;
    const int b = (int)(g / c.heads), h = (int)(g % c.heads);
    const int src = rows[(int64_t)g * k + cl];
    for (int i = threadIdx.x; i < d; i += blockDim.x)
        centroids[((int64_t)g * k + cl) * d + i] = load_elem(v, b, h, src, i);
}

__global__ void norms_kernel(const float *centroids, int k, int d, float *norms) {
    const int64_t g = blockIdx.x;
    const int cl = threadIdx.x;
    if (cl >= k) return;
    const float *cc = centroids + (g * k + cl) * d;
    float s = 0.0f;
    for (int i = 0; i < d; i++) s += cc[i] * cc[i];
    norms[g * k + cl] = s;
}

// One thread per token: nearest centroid by |c|^2 - 2 x.c.
__global__ void __launch_bounds__(kAssignThreads) assign_kernel(dev_tensor v, quant_common c, int k,
                                                                const float *centroids,
                                                                const float *norms, const float *amax,
                                                                int32_t *labels, int64_t g0) {
    extern __shared__ float4 cent_raw[];  // [k][D] floats, 16-byte aligned
    float *cent = reinterpret_cast<float *>(cent_raw);
    const int64_t g = g0 + blockIdx.y;
    const float s = head_scale(amax, g);
    const int d = c.head_dim, b = (int)(g / c.heads), h = (int)(g % c.heads);
    for (int i = threadIdx.x; i < k * d; i += blockDim.x) cent[i] = centroids[g * k * d + i];
    __syncthreads();
    const int n = blockIdx.x * kAssignThreads + threadIdx.x;
    if (n >= c.tokens) return;
    float dot[kMaxClusters];
#pragma unroll
    for (int cl = 0; cl < kMaxClusters; cl++) dot[cl] = 0.0f;
    // Four channels per step: one 16-byte shared load per centroid instead of
    // four (the scalar loads cost a fifth of this kernel's time on the H200);
    // each dot still adds its products in channel order. d % 8 == 0.
    const float4 *cent4 = reinterpret_cast<const float4 *>(cent);
    for (int i = 0; i < d; i += 4) {
        const float x0 = load_elem(v, b, h, n, i) * s, x1 = load_elem(v, b, h, n, i + 1) * s;
        const float x2 = load_elem(v, b, h, n, i + 2) * s, x3 = load_elem(v, b, h, n, i + 3) * s;
#pragma unroll
        for (int cl = 0; cl < kMaxClusters; cl++) {
            if (cl < k) {
                const float4 cc = cent4[(cl * d + i) >> 2];
                dot[cl] += x0 * cc.x;
                dot[cl] += x1 * cc.y;
                dot[cl] += x2 * cc.z;
                dot[cl] += x3 * cc.w;
            }
        }
    }
    float best = FLT_MAX;
    int best_cl = 0;
#pragma unroll
    for (int cl = 0; cl < kMaxClusters; cl++) {
        if (cl >= k) break;
        const float dist = norms[g * k + cl] - 2.0f * dot[cl];
        if (dist < best) {
            best = dist;
            best_cl = cl;
        }
    }
    labels[g * c.tokens + n] = best_cl;
}

// Per chunk of tokens, one thread per channel: cluster sums in token order.
__global__ void partial_sums_kernel(dev_tensor v, quant_common c, int k, const int32_t *labels,
                                    const float *amax, double *sums, int32_t *counts, int64_t g0) {
    extern __shared__ double acc[];  // [k][D]
    __shared__ int cnt[kMaxClusters];
    const int chunk = blockIdx.x, d = c.head_dim, i = threadIdx.x, chunks = gridDim.x;
    const int64_t g = g0 + blockIdx.y;
    const int b = (int)(g / c.heads), h = (int)(g % c.heads);
    const float s = head_scale(amax, g);
    for (int cl = 0; cl < k; cl++) acc[cl * d + i] = 0.0;
    if (i < k) cnt[i] = 0;
    __syncthreads();
    const int n1 = min(c.tokens, (chunk + 1) * kChunk);
    // The loads of kSumBatch tokens go out together, then their adds in token
    // order: one memory latency per batch instead of per token (the serial
    // loop was most of a grouping step), the same sums bit for bit.
    for (int n0 = chunk * kChunk; n0 < n1; n0 += kSumBatch) {
        int cl[kSumBatch];
        float x[kSumBatch];
#pragma unroll
        for (int u = 0; u < kSumBatch; u++) {
            const int n = min(n0 + u, n1 - 1);
            cl[u] = labels[g * c.tokens + n];
            x[u] = load_elem(v, b, h, n, i) * s;
        }
#pragma unroll
        for (int u = 0; u < kSumBatch; u++) {
            if (n0 + u < n1) {
                acc[cl[u] * d + i] += x[u];
                if (i == 0) cnt[cl[u]]++;
            }
        }
    }
    __syncthreads();
    for (int cl = 0; cl < k; cl++) sums[((g * chunks + chunk) * k + cl) * d + i] = acc[cl * d + i];
    if (i < k) counts[(g * chunks + chunk) * k + i] = cnt[i];
}

// One block per (batch-head, cluster): the chunks' partial sums in chunk order.
__global__ void centroids_kernel(const double *sums, const int32_t *counts, int chunks, int k, int d,
                                 float *centroids) {
    const int64_t g = blockIdx.x;
    const int cl = blockIdx.y, i = threadIdx.x;
    double s = 0.0;
    int64_t count = 0;
    for (int ch = 0; ch < chunks; ch++) {
        s += sums[((g * chunks + ch) * k + cl) * d + i];
        count += counts[(g * chunks + ch) * k + cl];
    }
    if (count) centroids[(g * k + cl) * d + i] = (float)(s / (double)count);
}

// counts [chunk][k] -> the first output position of each (chunk, cluster):
// clusters in order, chunks in order within a cluster (a stable sort). One
// warp per (batch, head), a lane per cluster: its total, a scan over lanes,
// then its chunks in order.
static_assert(kMaxClusters <= 32, "sort_offsets_kernel: one lane per cluster");
__global__ void sort_offsets_kernel(int32_t *counts, int chunks, int k) {
    int32_t *cnt = counts + (int64_t)blockIdx.x * chunks * k;
    const int cl = threadIdx.x;
    int32_t total = 0;
    if (cl < k)
        for (int ch = 0; ch < chunks; ch++) total += cnt[ch * k + cl];
    int32_t inclusive = total;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int32_t below = __shfl_up_sync(0xffffffffu, inclusive, o);
        if (cl >= o) inclusive += below;
    }
    int32_t running = inclusive - total;
    if (cl < k)
        for (int ch = 0; ch < chunks; ch++) {
            const int32_t x = cnt[ch * k + cl];
            cnt[ch * k + cl] = running;
            running += x;
        }
}

// One warp per chunk, 32 tokens at a time in order: rank among equal labels.
__global__ void scatter_kernel(const int32_t *labels, const int32_t *offsets, int tokens, int k,
                               int32_t *perm, int64_t g0) {
    __shared__ int32_t base[kMaxClusters];
    const int chunk = blockIdx.x, lane = threadIdx.x, chunks = gridDim.x;
    const int64_t g = g0 + blockIdx.y;
    if (lane < k) base[lane] = offsets[(g * chunks + chunk) * k + lane];
    __syncwarp();
    const int n1 = min(tokens, (chunk + 1) * kChunk);
    for (int n0 = chunk * kChunk; n0 < n1; n0 += 32) {
        const int n = n0 + lane;
        const bool valid = n < n1;
        const int cl = valid ? labels[g * tokens + n] : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, cl);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (valid) perm[g * tokens + base[cl] + rank] = n;
        __syncwarp();
        if (valid && rank == 0) base[cl] += __popc(peers);
        __syncwarp();
    }
}

}  // namespace

size_t kmeans_chunks(int tokens) { return (size_t)(tokens + kChunk - 1) / kChunk; }

cudaError_t kmeans_gather_rows(const dev_tensor &v, const quant_common &c, int clusters,
                               const int32_t *rows, float *centroids, cudaStream_t stream) {
    const int heads = c.batch * c.heads;  // the backend keeps B*H < 2^31
    for (int g0 = 0; g0 < heads; g0 += kMaxGridY)
        gather_rows_kernel<<<dim3(clusters, (unsigned)min(kMaxGridY, heads - g0)), 128, 0, stream>>>(
            v, c, clusters, rows, centroids, g0);
    return cudaGetLastError();
}

cudaError_t kmeans_group(const dev_tensor &v, const quant_common &c, int clusters, int iters,
                         float *centroids, const kmeans_workspace &w, int32_t *perm,
                         cudaStream_t stream) {
    if (clusters < 1 || clusters > kMaxClusters) return cudaErrorInvalidValue;
    const int heads = c.batch * c.heads, d = c.head_dim, k = clusters;  // the backend keeps B*H < 2^31
    const int chunks = (int)kmeans_chunks(c.tokens);
    const int assign_smem = k * d * (int)sizeof(float), sums_smem = k * d * (int)sizeof(double);
    cudaError_t err = allow_dynamic_smem((const void *)partial_sums_kernel, sums_smem);
    if (err != cudaSuccess) return err;
    // Each head's V amax, then the centroids in its scaled space (a multiply
    // by 1 for ordinary values: the same bits).
    if ((err = cudaMemsetAsync(w.amax, 0, (size_t)heads * sizeof(float), stream)) != cudaSuccess) return err;
    for (int g0 = 0; g0 < heads; g0 += kMaxGridY)
        head_amax_kernel<<<dim3(chunks, (unsigned)min(kMaxGridY, heads - g0)), kAmaxThreads, 0, stream>>>(
            v, c, w.amax, g0);
    scale_centroids_kernel<<<heads, 128, 0, stream>>>(centroids, k * d, w.amax, 0);
    for (int it = 0; it < iters; it++) {
        norms_kernel<<<heads, kMaxClusters, 0, stream>>>(centroids, k, d, w.norms);
        for (int g0 = 0; g0 < heads; g0 += kMaxGridY) {
            const unsigned slice = (unsigned)min(kMaxGridY, heads - g0);
            assign_kernel<<<dim3((c.tokens + kAssignThreads - 1) / kAssignThreads, slice), kAssignThreads,
                            assign_smem, stream>>>(v, c, k, centroids, w.norms, w.amax, w.labels, g0);
            partial_sums_kernel<<<dim3(chunks, slice), d, sums_smem, stream>>>(v, c, k, w.labels, w.amax,
                                                                            w.sums, w.counts, g0);
        }
        centroids_kernel<<<dim3(heads, k), d, 0, stream>>>(w.sums, w.counts, chunks, k, d, centroids);
    }
    scale_centroids_kernel<<<heads, 128, 0, stream>>>(centroids, k * d, w.amax, 1);
    sort_offsets_kernel<<<heads, 32, 0, stream>>>(w.counts, chunks, k);
    for (int g0 = 0; g0 < heads; g0 += kMaxGridY)
        scatter_kernel<<<dim3(chunks, (unsigned)min(kMaxGridY, heads - g0)), 32, 0, stream>>>(
            w.labels, w.counts, c.tokens, k, perm, g0);
    return cudaGetLastError();
}
