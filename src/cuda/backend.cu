// The CUDA backend: checks what the GPU kernels support, stages host tensors,
// runs grouping -> quantization -> the sm_90a attention kernel on the
// context's stream, and reports errors as vcattn statuses. Workspace comes
// from the stream-ordered allocator, one block per call.
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.h"
#include "kernels.h"
#include "operand_layout.h"
#include "sm90/attention.h"
#include "../core/internal.h"
#include "../vsmooth/vsmooth.h"

extern "C" int cuda_backend_available(const char **why) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        cudaGetLastError();  // clear the sticky "no device" error
        *why = "no CUDA device is visible";
        return 0;
    }
    int device = 0, major = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (major != 9) {
        *why = "the CUDA kernels need an sm_90 (Hopper) GPU";
        return 0;
    }
    *why = "";
    return 1;
}

namespace {

size_t dtype_size(int dtype) { return dtype == VCATTN_DTYPE_F32 ? 4 : 2; }

// Elements from the first to one past the last element of a view.
size_t tensor_extent(const vcattn_tensor *t) {
    return (size_t)((t->batch - 1) * t->stride_batch + (t->heads - 1) * t->stride_head +
                    (t->tokens - 1) * t->stride_token + t->head_dim);
}

// Everything one call allocates on the device, released in one place.
struct call_state {
    vcattn_context *ctx;
    cudaStream_t stream;
    void *staged[12];  // q, k, v, out, lse, 4 rope tables
    int nstaged;
    char *work;
    size_t work_used;
    int *host_flag;

    ~call_state() {
        for (int i = 0; i < nstaged; i++) cudaFreeAsync(staged[i], stream);
        if (work) cudaFreeAsync(work, stream);
        if (host_flag) cudaFreeHost(host_flag);
    }
    vcattn_status cuda_fail(cudaError_t err, const char *what) {
        cudaGetLastError();
        if (err == cudaErrorMemoryAllocation)
            return vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of device memory (%s)", what);
        return vcattn_fail(ctx, VCATTN_ERR_DEVICE, "cuda backend: %s: %s", what, cudaGetErrorString(err));
    }
    // Bump allocation from the call's workspace block (256-byte aligned).
    template <typename T> T *take(size_t count) {
        T *p = reinterpret_cast<T *>(work + work_used);
        work_used += (count * sizeof(T) + 255) & ~size_t(255);
        return p;
    }
};

// Where a caller pointer lives: 1 device (the current one), 0 host, -1 another device.
int pointer_kind(const void *p, int device) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged)
        return attr.device == device ? 1 : -1;
    return 0;
}

// A caller buffer as seen by the kernels: in place on the device, or a
// device copy of the host bytes [0, bytes) (copied in when copy_in).
vcattn_status device_view(call_state &cs, const char *name, void *data, size_t bytes, size_t align,
                          int device, int copy_in, void **dev, int *staged) {
    const int kind = pointer_kind(data, device);
    *staged = 0;
    if (kind < 0)
        return vcattn_fail(cs.ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "%s lives on another CUDA device than the current one (%d)", name, device);
    if ((uintptr_t)data % align)
        return vcattn_fail(cs.ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "%s must be aligned to %zu bytes (its element size)", name, align);
    if (kind == 1) {
        *dev = data;
        return VCATTN_OK;
    }
    cudaError_t err = cudaMallocAsync(dev, bytes, cs.stream);
    if (err != cudaSuccess) return cs.cuda_fail(err, name);
    cs.staged[cs.nstaged++] = *dev;
    *staged = 1;
    if (copy_in && (err = cudaMemcpyAsync(*dev, data, bytes, cudaMemcpyHostToDevice, cs.stream)) != cudaSuccess)
        return cs.cuda_fail(err, name);
    return VCATTN_OK;
}

vcattn_status tensor_view(call_state &cs, const char *name, const vcattn_tensor *t, int device,
                          int copy_in, dev_tensor *out, int *staged) {
    void *dev = nullptr;
    const size_t es = dtype_size(t->dtype);
    vcattn_status st = device_view(cs, name, t->data, tensor_extent(t) * es, es, device, copy_in, &dev, staged);
    *out = {dev, (int)t->dtype, t->stride_batch, t->stride_head, t->stride_token};
    return st;
}

vcattn_status check_supported(vcattn_context *ctx, const vcattn_config *cfg, int64_t d, int clusters,
                              vcattn_grouping plan) {
    if (d != 64 && d != 128)
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_HEAD_DIM,
                           "cuda backend: head dim %lld unsupported (the sm_90a kernel takes 64 and 128)",
                           (long long)d);
    if (cfg->qk_format != VCATTN_QK_INT8 || cfg->v_format != VCATTN_V_FP8_CHANNEL ||
        (cfg->p_format != VCATTN_P_FP8_CAST && cfg->p_format != VCATTN_P_FP8_EXPCAST))
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_CONFIG,
                           "cuda backend: the sm_90a kernel runs INT8 Q/K, FP8 P (cast or ExpCast) and "
                           "per-channel FP8 V (methods sage2, vsmooth, vc, each +hadamard); use the cpu "
                           "backend for the other formats");
    if ((plan == VCATTN_GROUP_COLD || plan == VCATTN_GROUP_WARM) && clusters > 32)
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_CONFIG,
                           "cuda backend: k-means runs with at most 32 clusters, got %d", clusters);
    return VCATTN_OK;
}

void release_device_perm(void *p) { cudaFree(p); }

// The layer's permutation on this device: its cached copy, or uploaded once
// and cached. NULL (and err set) on failure.
const int32_t *layer_device_perm(vcattn_layer *layer, size_t count, int device, cudaStream_t stream,
                                 cudaError_t *err) {
    if (layer->device_perm && layer->device_perm_device == device) return (const int32_t *)layer->device_perm;
    if (layer->device_perm) layer->release_device_perm(layer->device_perm);
    layer->device_perm = nullptr;
    void *p = nullptr;
    if ((*err = cudaMalloc(&p, count * 4)) != cudaSuccess) return nullptr;
    if ((*err = cudaMemcpyAsync(p, layer->perm, count * 4, cudaMemcpyHostToDevice, stream)) != cudaSuccess) {
        cudaFree(p);
        return nullptr;
    }
    layer->device_perm = p;
    layer->device_perm_device = device;
    layer->release_device_perm = release_device_perm;
    return (const int32_t *)p;
}

}  // namespace

extern "C" vcattn_status cuda_attention(vcattn_context *ctx, const vcattn_config *cfg,
                                        const vcattn_tensor *q, const vcattn_tensor *k,
                                        const vcattn_tensor *v, const vcattn_tensor *out, float *lse,
                                        const vcattn_rope *rope, vcattn_layer *layer) {
    const int64_t B = q->batch, Hq = q->heads, Hkv = k->heads, Nq = q->tokens, Nk = k->tokens, D = q->head_dim;
    const int clusters = vsmooth_cluster_count(cfg, Nk);
    const vcattn_grouping plan = vsmooth_resolve_plan(cfg, layer, B, Hkv, Nk, D, clusters);
    const int grouped = plan != VCATTN_GROUP_NONE, regroup = plan == VCATTN_GROUP_COLD || plan == VCATTN_GROUP_WARM;
    vcattn_status st = check_supported(ctx, cfg, D, clusters, plan);
    if (st) return st;
    if (Nq > INT32_MAX / 2 || Nk > INT32_MAX / 2 || Hq > 65535 || B > 65535)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "cuda backend: at most 2^30 tokens, 65535 heads and 65535 batch entries");

    call_state cs = {};
    cs.ctx = ctx;
    cs.stream = (cudaStream_t)ctx->cuda_stream;
    int device = 0;
    cudaError_t err = cudaGetDevice(&device);
    if (err != cudaSuccess) return cs.cuda_fail(err, "cudaGetDevice");

    // ---- caller buffers on the device ----
    dev_tensor dq, dk, dv, dout;
    int staged_q, staged_k, staged_v, out_staged = 0, lse_staged = 0;
    if ((st = tensor_view(cs, "q", q, device, 1, &dq, &staged_q)) ||
        (st = tensor_view(cs, "k", k, device, 1, &dk, &staged_k)) ||
        (st = tensor_view(cs, "v", v, device, 1, &dv, &staged_v)) ||
        (st = tensor_view(cs, "out", out, device, 1, &dout, &out_staged)))
        return st;
    float *dlse = nullptr;
    if (lse && (st = device_view(cs, "lse", lse, (size_t)(B * Hq * Nq) * sizeof(float), 4, device, 0,
                                 (void **)&dlse, &lse_staged)))
        return st;
    dev_rope qrope = {nullptr, nullptr, 0}, krope = {nullptr, nullptr, 0};
    if (rope) {
        const size_t qb = (size_t)(Nq * D / 2) * sizeof(float), kb = (size_t)(Nk * D / 2) * sizeof(float);
        void *tabs[4];
        int staged;
        const char *names[4] = {"rope.q_cos", "rope.q_sin", "rope.k_cos", "rope.k_sin"};
        const float *src[4] = {rope->q_cos, rope->q_sin, rope->k_cos, rope->k_sin};
        for (int i = 0; i < 4; i++)
            if ((st = device_view(cs, names[i], (void *)src[i], i < 2 ? qb : kb, 4, device, 1, &tabs[i], &staged)))
                return st;
        const int half = rope->style == VCATTN_ROPE_HALF_SPLIT;
        qrope = {(const float *)tabs[0], (const float *)tabs[1], half};
        krope = {(const float *)tabs[2], (const float *)tabs[3], half};
    }

    // ---- workspace ----
    // Q tiles rounded up to even: the kernel's CTAs take two 64-row tiles.
    const int T = (int)((Nk + VC_KV_ROWS - 1) / VC_KV_ROWS), QT = (int)((Nq + 2 * VC_Q_ROWS - 1) / (2 * VC_Q_ROWS)) * 2;
    const size_t kvh = (size_t)(B * Hkv), qh = (size_t)(B * Hq);
    const size_t chunks = kmeans_chunks((int)Nk), mean_partials = k_channel_mean_partials((int)B, (int)Hkv, (int)Nk, (int)D);
    const size_t sizes[] = {
        sizeof(int), kvh * D * 4, mean_partials * 8,                         // flag, kmean, partials
        regroup ? kvh * Nk * 4 : 0,                                           // perm
        regroup ? kvh * clusters * D * 4 : 0, regroup ? kvh * clusters * 4 : 0,  // centroids, norms
        regroup ? kvh * Nk * 4 : 0, regroup ? kvh * chunks * clusters * D * 8 : 0,
        regroup ? kvh * chunks * clusters * 4 : 0, regroup ? kvh * clusters * 4 : 0,  // labels, sums, counts, rows
        qh * QT * VC_Q_ROWS * D, qh * QT * VC_Q_ROWS * 4, qh * Nq * 4,        // q codes, scales, lse shift
        kvh * T * VC_KV_ROWS * D, kvh * T * 16,                               // k codes, scales
        kvh * T * vc_v_record_bytes((uint32_t)D), 2 * kvh * T * D * 4, 2 * kvh * D * 4};
    size_t total = 0;
    for (size_t s : sizes) total += (s + 255) & ~size_t(255);
    if ((err = cudaMallocAsync((void **)&cs.work, total, cs.stream)) != cudaSuccess)
        return cs.cuda_fail(err, "workspace");
    int *flag = cs.take<int>(1);
    float *kmean = cs.take<float>(kvh * D);
    double *partials = cs.take<double>(mean_partials);
    int32_t *new_perm = regroup ? cs.take<int32_t>(kvh * Nk) : nullptr;
    const int32_t *perm = new_perm;
    float *centroids = nullptr;
    kmeans_workspace kw = {};
    int32_t *init_rows = nullptr;
    if (regroup) {
        centroids = cs.take<float>(kvh * clusters * D);
        kw.norms = cs.take<float>(kvh * clusters);
        kw.labels = cs.take<int32_t>(kvh * Nk);
        kw.sums = cs.take<double>(kvh * chunks * clusters * D);
        kw.counts = cs.take<int32_t>(kvh * chunks * clusters);
        init_rows = cs.take<int32_t>(kvh * clusters);
    }
    int8_t *q_codes = cs.take<int8_t>(qh * QT * VC_Q_ROWS * D);
    float *q_mul = cs.take<float>(qh * QT * VC_Q_ROWS);
    float *lse_shift = cs.take<float>(qh * Nq);
    int8_t *k_codes = cs.take<int8_t>(kvh * T * VC_KV_ROWS * D);
    float *k_mul = cs.take<float>(kvh * T * 4);
    uint8_t *v_records = cs.take<uint8_t>(kvh * T * vc_v_record_bytes((uint32_t)D));
    float *tile_mean = cs.take<float>(kvh * T * D), *tile_amax = cs.take<float>(kvh * T * D);
    float *chan_inv = cs.take<float>(kvh * D), *chan_mul = cs.take<float>(kvh * D);
    if ((err = cudaMemsetAsync(flag, 0, sizeof(int), cs.stream)) != cudaSuccess) return cs.cuda_fail(err, "memset");

    const float sm_scale = cfg->sm_scale > 0.0f ? cfg->sm_scale : 1.0f / sqrtf((float)D);
    const float hadamard_scale = 1.0f / sqrtf((float)D);
    const quant_common ck = {(int)B, (int)Hkv, (int)Nk, (int)D, cfg->check_finite, flag};
    const quant_common cq = {(int)B, (int)Hq, (int)Nq, (int)D, cfg->check_finite, flag};

    // ---- V-Smooth grouping: the permutation of this call ----
    float *host_centroids = nullptr;
    int32_t *host_perm = nullptr;
    if (plan == VCATTN_GROUP_REUSE) {
        if (!(perm = layer_device_perm(layer, kvh * Nk, device, cs.stream, &err)))
            return cs.cuda_fail(err, "permutation upload");
    } else if (regroup) {
        if (plan == VCATTN_GROUP_WARM) {
            err = cudaMemcpyAsync(centroids, layer->centroids, kvh * clusters * D * 4, cudaMemcpyHostToDevice, cs.stream);
        } else {
            int32_t *rows = (int32_t *)malloc(kvh * clusters * 4);
            if (!rows) return vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
            for (size_t g = 0; g < kvh; g++) vsmooth_init_rows(Nk, clusters, cfg->kmeans_seed, g, rows + g * clusters);
            err = cudaMemcpyAsync(init_rows, rows, kvh * clusters * 4, cudaMemcpyHostToDevice, cs.stream);
            if (err == cudaSuccess) err = cudaStreamSynchronize(cs.stream);  // rows is pageable and freed now
            free(rows);
            if (err == cudaSuccess) err = kmeans_gather_rows(dv, ck, clusters, init_rows, centroids, cs.stream);
        }
        if (err == cudaSuccess)
            err = kmeans_group(dv, ck, clusters, plan == VCATTN_GROUP_WARM ? cfg->kmeans_warm_iters : cfg->kmeans_iters,
                               centroids, kw, new_perm, cs.stream);
        if (err != cudaSuccess) return cs.cuda_fail(err, "k-means");
    }

    // ---- quantization ----
    if (cfg->k_smoothing && (err = k_channel_mean(dk, krope, ck, partials, kmean, cs.stream)))
        return cs.cuda_fail(err, "K channel mean");
    const float *mean = cfg->k_smoothing ? kmean : nullptr;
    if ((err = quantize_k(dk, krope, ck, perm, mean, cfg->hadamard, hadamard_scale, k_codes, k_mul, cs.stream)) ||
        (err = quantize_q(dq, qrope, cq, (int)Hkv, mean, sm_scale, cfg->hadamard, hadamard_scale, QT, q_codes,
                          q_mul, lse_shift, cs.stream)) ||
        (err = quantize_v(dv, ck, perm, grouped, tile_mean, tile_amax, chan_inv, chan_mul, v_records, cs.stream)))
        return cs.cuda_fail(err, "quantization");

    // ---- attention ----
    vc_attention_params p = {};
    p.q = q_codes; p.q_mul = q_mul;
    p.k = k_codes; p.k_mul = k_mul;
    p.v = v_records; p.v_mul = chan_mul;
    p.lse_shift = cfg->k_smoothing ? lse_shift : nullptr;
    p.out = const_cast<void *>(dout.data); p.out_dtype = out->dtype;
    p.out_sb = out->stride_batch; p.out_sh = out->stride_head; p.out_sn = out->stride_token;
    p.lse = dlse;
    p.error_flag = cfg->check_finite ? flag : nullptr;
    p.batch = (int)B; p.heads_q = (int)Hq; p.heads_kv = (int)Hkv; p.nq = (int)Nq; p.nk = (int)Nk;
    p.q_tiles = QT; p.kv_tiles = T;
    p.kv_group_mul = ((1ull << 32) + (uint64_t)(Hq / Hkv) - 1) / (uint64_t)(Hq / Hkv);  // exact for heads < 2^16
    p.score_mul = sm_scale * 1.4426950408889634f;
    p.expcast_bias = 120.0f + cfg->expcast_beta;
    // VCATTN_KERNEL=v1 selects the one-warpgroup kernel (for A/B measurements).
    const char *version = getenv("VCATTN_KERNEL");
    if ((err = vc_attention_sm90(p, (int)D, cfg->p_format == VCATTN_P_FP8_EXPCAST, grouped,
                                 version && strcmp(version, "v1") == 0 ? 1 : 2, cs.stream)))
        return cs.cuda_fail(err, "attention kernel");

    // ---- results ----
    if (cfg->check_finite) {
        if ((err = cudaMallocHost((void **)&cs.host_flag, sizeof(int))) ||
            (err = cudaMemcpyAsync(cs.host_flag, flag, sizeof(int), cudaMemcpyDeviceToHost, cs.stream)) ||
            (err = cudaStreamSynchronize(cs.stream)))
            return cs.cuda_fail(err, "non-finite check");
        if (*cs.host_flag)
            return vcattn_fail(ctx, VCATTN_ERR_NONFINITE_INPUT, "q, k, v or the rope tables contain NaN or Inf");
    }
    if (regroup && layer) {
        host_centroids = (float *)malloc(kvh * clusters * D * 4);
        host_perm = (int32_t *)malloc(kvh * Nk * 4);
        if (!host_centroids || !host_perm) {
            free(host_centroids);
            free(host_perm);
            return vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
        }
        cudaMemcpyAsync(host_centroids, centroids, kvh * clusters * D * 4, cudaMemcpyDeviceToHost, cs.stream);
        cudaMemcpyAsync(host_perm, perm, kvh * Nk * 4, cudaMemcpyDeviceToHost, cs.stream);
    }
    if (out_staged)
        cudaMemcpyAsync(out->data, dout.data, tensor_extent(out) * dtype_size(out->dtype), cudaMemcpyDeviceToHost, cs.stream);
    if (lse_staged) cudaMemcpyAsync(lse, dlse, (size_t)(B * Hq * Nq) * 4, cudaMemcpyDeviceToHost, cs.stream);
    if (out_staged || lse_staged || host_perm) err = cudaStreamSynchronize(cs.stream);
    else err = cudaGetLastError();
    if (err != cudaSuccess) {
        free(host_centroids);
        free(host_perm);
        return cs.cuda_fail(err, "attention");
    }
    if (host_perm) {
        vsmooth_layer_adopt(layer, B, Hkv, Nk, D, clusters, host_centroids, host_perm);
        // Keep the new permutation on the device too (best effort: without
        // it the next plain step uploads it from the host copy).
        void *keep = nullptr;
        if (cudaMalloc(&keep, kvh * Nk * 4) == cudaSuccess &&
            cudaMemcpyAsync(keep, new_perm, kvh * Nk * 4, cudaMemcpyDeviceToDevice, cs.stream) == cudaSuccess) {
            layer->device_perm = keep;
            layer->device_perm_device = device;
            layer->release_device_perm = release_device_perm;
        } else {
            if (keep) cudaFree(keep);
            cudaGetLastError();
        }
    }
    return VCATTN_OK;
}
