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
#include "../formats/expcast.h"
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
    cudaStream_t side;   // the context's side stream, or NULL (none, or the call is being captured)
    cudaMemPool_t pool;  // the context's; NULL: the device's default pool
    void *staged[12];  // q, k, v, out, lse, 4 rope tables
    int nstaged;
    char *work;
    char *alt_work, *choice_work;  // a grouping step's second order and its choice (vsmooth_order_rows)

    ~call_state() {
        for (int i = 0; i < nstaged; i++) cudaFreeAsync(staged[i], stream);
        for (char *p : {work, alt_work, choice_work})
            if (p) cudaFreeAsync(p, stream);
    }
    cudaError_t alloc(void **p, size_t bytes) {
        return pool ? cudaMallocFromPoolAsync(p, bytes, pool, stream) : cudaMallocAsync(p, bytes, stream);
    }
    vcattn_status cuda_fail(cudaError_t err, const char *what) {
        cudaGetLastError();
        if (err == cudaErrorMemoryAllocation)
            return vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of device memory (%s)", what);
        return vcattn_fail(ctx, VCATTN_ERR_DEVICE, "cuda backend: %s: %s", what, cudaGetErrorString(err));
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
    cudaError_t err = cs.alloc(dev, bytes);
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
    const int64_t align = 16 / (int64_t)es;  // elements per 16 bytes
    const int vec = (uintptr_t)dev % 16 == 0 && t->stride_batch % align == 0 && t->stride_head % align == 0 &&
                    t->stride_token % align == 0 && t->head_dim % 8 == 0;
    *out = {dev, (int)t->dtype, t->stride_batch, t->stride_head, t->stride_token, vec};
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

// The layer's permutation on this device: its cached copy, or uploaded and
// handed back in `made` (the API layer keeps it in the layer once the call
// has succeeded; the backend never writes the layer). NULL (and err set) on
// failure.
const int32_t *layer_device_perm(const vcattn_layer *layer, size_t count, int device, cudaStream_t stream,
                                 vcattn_new_grouping *made, cudaError_t *err) {
    if (layer->device_perm && layer->device_perm_device == device) return (const int32_t *)layer->device_perm;
    void *p = nullptr;
    if ((*err = cudaMalloc(&p, count * 4)) != cudaSuccess) return nullptr;
    if ((*err = cudaMemcpyAsync(p, layer->perm, count * 4, cudaMemcpyHostToDevice, stream)) != cudaSuccess) {
        cudaFree(p);
        return nullptr;
    }
    made->device_perm = p;
    made->device = device;
    made->release = release_device_perm;
    return (const int32_t *)p;
}

// The kernels' key tile is the tile and V-Smooth block the API resolves calls with.
static_assert(VC_KV_ROWS == VCATTN_TILE, "a CUDA key tile must be a V-Smooth block");

// The shape of one call and what it does for V-Smooth.
struct call_shape {
    int64_t B, Hq, Hkv, Nq, Nk, D;
    int clusters, T, QT;  // QT: 64-row Q tiles rounded up to even (a D 128 CTA takes two)
    float sm_scale;
    vcattn_grouping plan;
    int grouped, regroup;
};

call_shape shape_of(const vcattn_call *call) {
    call_shape c;
    c.B = call->batch; c.Hq = call->heads_q; c.Hkv = call->heads_kv;
    c.Nq = call->tokens_q; c.Nk = call->tokens_k; c.D = call->head_dim;
    c.clusters = call->clusters;
    c.sm_scale = call->sm_scale;
    c.plan = call->plan;
    c.grouped = c.plan != VCATTN_GROUP_NONE;
    c.regroup = c.plan == VCATTN_GROUP_COLD || c.plan == VCATTN_GROUP_WARM;
    c.T = (int)((c.Nk + VC_KV_ROWS - 1) / VC_KV_ROWS);
    c.QT = (int)((c.Nq + 2 * VC_Q_ROWS - 1) / (2 * VC_Q_ROWS)) * 2;
    return c;
}

vcattn_status check_call(vcattn_context *ctx, const vcattn_config *cfg, const call_shape &c) {
    vcattn_status st = check_supported(ctx, cfg, c.D, c.clusters, c.plan);
    if (st) return st;
    if (c.Nq > INT32_MAX / 2 || c.Nk > INT32_MAX / 2 || c.Hq > 65535 || c.B > 65535 || c.B * c.Hq > INT32_MAX)
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "cuda backend: at most 2^30 tokens, 65535 heads, 65535 batch entries and 2^31 (batch, head) pairs");
    if (c.plan == VCATTN_GROUP_PRINCIPAL && c.B * c.Hkv * c.Nk > INT32_MAX)  // one sort of every head's keys counts in int
        return vcattn_fail(ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "cuda backend: a call without a layer state sorts at most 2^31 keys (batch x kv heads x tokens); "
                           "pass a layer state, or split the batch");
    return VCATTN_OK;
}

// The context's workspace pool on `device`, made on first use. It never
// gives memory back before the context goes: the default pool returns freed
// memory at every synchronization, and mapping it again on the next call
// left the GPU idle for 0.7-3 ms per call (docs/perf-notes.md). NULL (the
// default pool) if it cannot be made.
cudaMemPool_t context_pool(vcattn_context *ctx, int device) {
    if (ctx->cuda_pool_device != device) cuda_release_context(ctx);  // made for another device
    ctx->cuda_pool_device = device;
    if (ctx->cuda_pool) return (cudaMemPool_t)ctx->cuda_pool;
    cudaMemPoolProps props = {};
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) {
        cudaGetLastError();
        return nullptr;
    }
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    ctx->cuda_pool = pool;
    return pool;
}

// The pinned word and event through which the finite check's flag reaches
// the host, made once per context and device (the event belongs to the
// device current at its creation; context_pool, called first, released
// those of another device). The word is mapped, so the score bound's kernel
// writes it (a copy into it cost two ~9 us gaps a call); where mapping
// fails it is copied into. 0 if they cannot be made.
int context_flag(vcattn_context *ctx) {
    if (ctx->cuda_flag_host) return 1;
    void *word = nullptr, *mapped = nullptr;
    cudaEvent_t ready = nullptr;
    if (cudaHostAlloc(&word, sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess ||
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        if (word) cudaFreeHost(word);
        return 0;
    }
    if (cudaHostGetDevicePointer(&mapped, word, 0) != cudaSuccess) {
        cudaGetLastError();
        mapped = nullptr;
    }
    ctx->cuda_flag_host = (int *)word;
    ctx->cuda_flag_device = (int *)mapped;
    ctx->cuda_flag_ready = ready;
    return 1;
}

// The side stream and its two events, made once per context and device
// (context_pool releases those of another device), with the priority of the
// call's stream. Not blocking: it must not wait on the legacy default stream
// by itself, only on the fork event. NULL if they cannot be made.
cudaStream_t context_side(vcattn_context *ctx, cudaStream_t stream) {
    if (ctx->cuda_side_stream) return (cudaStream_t)ctx->cuda_side_stream;
    int priority = 0;
    cudaStream_t side = nullptr;
    cudaEvent_t fork = nullptr, join = nullptr;
    if (cudaStreamGetPriority(stream, &priority) != cudaSuccess ||
        cudaStreamCreateWithPriority(&side, cudaStreamNonBlocking, priority) != cudaSuccess ||
        cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&join, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        if (side) cudaStreamDestroy(side);
        if (fork) cudaEventDestroy(fork);
        return nullptr;
    }
    ctx->cuda_side_stream = side;
    ctx->cuda_fork = fork;
    ctx->cuda_join = join;
    return side;
}

// Checks the call and binds it to the context's stream and the current device;
// layered: the call has a layer state.
vcattn_status begin_call(vcattn_context *ctx, const vcattn_config *cfg, const call_shape &c, bool layered,
                         call_state *cs, int *device) {
    vcattn_status st = check_call(ctx, cfg, c);
    if (st) return st;
    cs->ctx = ctx;
    cs->stream = (cudaStream_t)ctx->cuda_stream;
    // A call captured into a CUDA graph may not wait for the GPU, and a
    // replay would repeat one step's grouping plan: only drop-in calls
    // without the finite check (whose status needs that wait) can be captured.
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(cs->stream, &capture) != cudaSuccess) {
        cudaGetLastError();  // the launches below report what is wrong with the stream
        capture = cudaStreamCaptureStatusNone;
    }
    if (capture != cudaStreamCaptureStatusNone && (cfg->check_finite || layered))
        return vcattn_fail(ctx, VCATTN_ERR_UNSUPPORTED_CONFIG,
                           "cuda backend: a call captured into a CUDA graph must be a drop-in call (no layer state) "
                           "with check_finite off: the finite check waits for the GPU, and a replay would repeat "
                           "one step's grouping");
    cudaError_t err = cudaGetDevice(device);
    if (err != cudaSuccess) return cs->cuda_fail(err, "cudaGetDevice");
    cs->pool = context_pool(ctx, *device);
    if (cfg->check_finite) context_flag(ctx);  // without it the check waits for the whole stream
    // A captured call stays on one stream (a graph's fork would need the side
    // stream made before the capture began).
    cs->side = capture == cudaStreamCaptureStatusNone ? context_side(ctx, cs->stream) : nullptr;
    return VCATTN_OK;
}

vcattn_status stage_inputs(call_state &cs, const call_shape &c, const vcattn_tensor *q,
                           const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_rope *rope,
                           int device, call_tensors *in) {
    vcattn_status st;
    int staged;
    if ((st = tensor_view(cs, "q", q, device, 1, &in->q, &staged)) ||
        (st = tensor_view(cs, "k", k, device, 1, &in->k, &staged)) ||
        (st = tensor_view(cs, "v", v, device, 1, &in->v, &staged)))
        return st;
    if (rope) {
        const char *names[4] = {"rope.q_cos", "rope.q_sin", "rope.k_cos", "rope.k_sin"};
        dev_tensor tabs[4];
        for (int i = 0; i < 4; i++) {
            const vcattn_tensor t = vcattn_rope_table(rope, i, i < 2 ? q : k);
            if ((st = tensor_view(cs, names[i], &t, device, 1, &tabs[i], &staged))) return st;
        }
        const int half = rope->style == VCATTN_ROPE_HALF_SPLIT;
        in->qrope = {(const float *)tabs[0].data, (const float *)tabs[1].data, tabs[0].sb, tabs[0].sh,
                     tabs[0].sn, half};
        in->krope = {(const float *)tabs[2].data, (const float *)tabs[3].data, tabs[2].sb, tabs[2].sh,
                     tabs[2].sn, half};
    }
    return VCATTN_OK;
}

// Everything the attention kernel reads, in the call's workspace.
struct operands {
    int *flag;
    const int32_t *perm;   // this call's permutation (NULL without grouping)
    int32_t *new_perm;     // when this call regrouped
    float *centroids;
    float *kmean;
    int8_t *q_codes, *k_codes;
    float *q_mul, *lse_shift, *k_mul;
    int need_lse_shift;    // set by the caller: computed only when an LSE is asked for
    int q_given;           // set by the caller: q_codes and q_mul are another pass's (Q's codes do not
                           // depend on the key order), so this pass quantizes K and V only
    float out_max;         // set by the caller: V past it is refused (0: out holds any V)
    uint8_t *v_records;
    uint8_t *v_mean_images;  // head dim 128 with V-Smooth, else NULL
    float *tile_mean, *chan_mul, *chan_pow2;
    float *key_bias;       // Q smoothing's per-key terms, or NULL
};

// Work forked from the call's stream onto the side stream: stream is the
// side stream once the fork is queued, else the call's stream (no side
// stream, not wanted, or the fork failed). The call's stream waits for the
// branch at join(), or when the branch goes out of scope on an error path,
// so the workspace is never freed under the side stream's kernels.
struct side_branch {
    call_state &cs;
    cudaStream_t stream;
    bool open = false;
    side_branch(call_state &cs_, bool wanted) : cs(cs_), stream(cs_.stream) {
        if (!wanted || !cs.side) return;
        if (cudaEventRecord((cudaEvent_t)cs.ctx->cuda_fork, cs.stream) != cudaSuccess ||
            cudaStreamWaitEvent(cs.side, (cudaEvent_t)cs.ctx->cuda_fork, 0) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        stream = cs.side;
        open = true;
    }
    cudaError_t join() {
        if (!open) return cudaSuccess;
        open = false;
        cudaError_t err = cudaEventRecord((cudaEvent_t)cs.ctx->cuda_join, cs.side);
        if (err == cudaSuccess) err = cudaStreamWaitEvent(cs.stream, (cudaEvent_t)cs.ctx->cuda_join, 0);
        if (err != cudaSuccess) cudaStreamSynchronize(cs.side);  // nothing may outlive the call's workspace
        return err;
    }
    ~side_branch() { join(); }
};

// Bump allocation from the call's workspace block, 256-byte aligned. With
// no base it only measures: the same layout function sizes the block and
// carves it, so the two cannot disagree.
struct carver {
    char *base;
    size_t used = 0;
    template <typename T> T *take(size_t count) {
        T *p = base ? reinterpret_cast<T *>(base + used) : nullptr;
        used += (count * sizeof(T) + 255) & ~size_t(255);
        return p;
    }
};

// The workspace arrays the preprocessing uses besides the operands.
struct scratch {
    float *max_norm;       // flag + 2: the largest |q|, |k| and those of unseen rows
    double *partials, *qpartials;
    float *qmean;
    int32_t *init_rows;
    float *tile_hi, *tile_lo, *chan_inv, *chan_pre;
    kmeans_workspace kmeans_ws;
    principal_workspace principal_ws;
    probe_args probe;
    int8_t *probe_q_codes;  // the probe's query rows, packed (quantize_probe_rows)
    float *probe_q_mul;
};

// Every array of a call's workspace, in one order; w.used is then its size.
void lay_out_workspace(carver &w, const vcattn_config *cfg, const call_shape &c, operands *op, scratch *x) {
    const size_t kvh = (size_t)(c.B * c.Hkv), qh = (size_t)(c.B * c.Hq), D = (size_t)c.D, k = (size_t)c.clusters;
    const size_t Nk = (size_t)c.Nk, Nq = (size_t)c.Nq, T = (size_t)c.T, QT = (size_t)c.QT;
    const bool regroup = c.regroup, qsmooth = cfg->q_smoothing, principal = c.plan == VCATTN_GROUP_PRINCIPAL;
    const size_t S = c.grouped ? (size_t)cfg->vsmooth_probe_rows : 0;  // the attention probe's rows
    op->flag = w.take<int>(8);  // [0] the check's flag, [2], [3] the largest |q| and |k|, [4], [5] of unseen rows
    x->max_norm = reinterpret_cast<float *>(op->flag) + 2;
    op->kmean = w.take<float>(kvh * D);
    x->partials = w.take<double>(k_channel_mean_partials((int)c.B, (int)c.Hkv, (int)Nk, (int)D));
    op->new_perm = regroup || principal ? w.take<int32_t>(kvh * Nk) : nullptr;
    op->perm = op->new_perm;
    x->kmeans_ws = {};
    x->init_rows = nullptr;
    op->centroids = nullptr;
    if (regroup) {
        const size_t chunks = kmeans_chunks((int)Nk);
        op->centroids = w.take<float>(kvh * k * D);
        x->kmeans_ws.norms = w.take<float>(kvh * k);
        x->kmeans_ws.labels = w.take<int32_t>(kvh * Nk);
        x->kmeans_ws.sums = w.take<double>(kvh * chunks * k * D);
        x->kmeans_ws.counts = w.take<int32_t>(kvh * chunks * k);
        x->init_rows = w.take<int32_t>(kvh * k);
        x->kmeans_ws.amax = w.take<float>(kvh);
    }
    if (!op->q_given) {
        op->q_codes = w.take<int8_t>(qh * QT * VC_Q_ROWS * D);
        op->q_mul = w.take<float>(qh * QT * VC_Q_ROWS);
        op->lse_shift = w.take<float>(qh * Nq);
    }
    op->k_codes = w.take<int8_t>(kvh * T * VC_KV_ROWS * D);
    op->k_mul = w.take<float>(kvh * T * VCATTN_K_LANE_GROUPS);
    op->v_records = w.take<uint8_t>(kvh * T * vc_v_record_bytes((uint32_t)D));
    const bool reads_means = vc_attention_sm90_reads_means((int)D, cfg->p_format == VCATTN_P_FP8_EXPCAST, c.grouped);
    const size_t mean_images = reads_means ? kvh * ((T + VC_MEAN_TILES - 1) / VC_MEAN_TILES) : 0;
    op->v_mean_images = mean_images ? w.take<uint8_t>(mean_images * vc_mean_image_bytes((uint32_t)D)) : nullptr;
    op->tile_mean = w.take<float>(kvh * T * D);
    x->tile_hi = w.take<float>(kvh * T * D);
    x->tile_lo = w.take<float>(kvh * T * D);
    x->chan_inv = w.take<float>(kvh * D);
    op->chan_mul = w.take<float>(kvh * D);
    x->chan_pre = w.take<float>(kvh * D);
    op->chan_pow2 = w.take<float>(kvh * D);
    x->qmean = qsmooth ? w.take<float>(qh * D) : nullptr;
    x->qpartials = qsmooth ? w.take<double>(k_channel_mean_partials((int)c.B, (int)c.Hq, (int)Nq, (int)D)) : nullptr;
    op->key_bias = qsmooth ? w.take<float>(qh * T * VC_KV_ROWS) : nullptr;
    x->principal_ws = {};
    if (principal) {
        const size_t splits = (size_t)principal_splits((int)kvh, (int)Nk);
        x->principal_ws.mean_partials = w.take<double>(kvh * splits * D);
        x->principal_ws.gram_partials = w.take<float>(kvh * splits * D * D);
        x->principal_ws.mu = w.take<float>(kvh * D);
        x->principal_ws.u = w.take<float>(kvh * D);
        x->principal_ws.amax = w.take<float>(kvh);
        x->principal_ws.scale = w.take<float>(kvh);
        x->principal_ws.keys = w.take<uint64_t>(kvh * Nk);  // room for 64-bit keys
        x->principal_ws.keys_sorted = w.take<uint64_t>(kvh * Nk);
        x->principal_ws.index = w.take<int32_t>(kvh * Nk);
        x->principal_ws.sort_bytes = principal_sort_bytes((int)kvh, (int)Nk);
        x->principal_ws.sort_temp = w.take<uint8_t>(x->principal_ws.sort_bytes);
    }
    x->probe = {};
    x->probe_q_codes = nullptr;
    x->probe_q_mul = nullptr;
    if (S) {
        x->probe_q_codes = w.take<int8_t>(kvh * S * D);
        x->probe_q_mul = w.take<float>(kvh * S);
        x->probe.codes = w.take<uint8_t>(kvh * T * S * VC_KV_ROWS);
        x->probe.tile_ceiling = w.take<float>(kvh * S * T);
        x->probe.tile_sum = w.take<double>(kvh * S * T);
        x->probe.tile_sq = w.take<double>(kvh * S * T);
        x->probe.tile_factor = w.take<double>(kvh * S * T);
        x->probe.mean_weight = w.take<double>(kvh);
    }
}

// Grouping (or the layer's permutation) and the three quantizers, in a
// workspace allocated into *work. made: where a device copy of the layer's
// permutation, uploaded for this call, is handed back.
vcattn_status prepare_operands(call_state &cs, const vcattn_config *cfg, const call_shape &c,
                               const call_tensors &in, const vcattn_layer *layer, int device, operands *op,
                               vcattn_new_grouping *made, char **work) {
    const size_t kvh = (size_t)(c.B * c.Hkv), D = (size_t)c.D, k = (size_t)c.clusters;
    const size_t Nk = (size_t)c.Nk, Nq = (size_t)c.Nq;
    const int regroup = c.regroup, q_smoothing = cfg->q_smoothing, principal = c.plan == VCATTN_GROUP_PRINCIPAL;
    const size_t S = c.grouped ? (size_t)cfg->vsmooth_probe_rows : 0;  // the attention probe's rows
    scratch x;
    carver measure = {nullptr};
    lay_out_workspace(measure, cfg, c, op, &x);
    cudaError_t err = cs.alloc((void **)work, measure.used);
    if (err != cudaSuccess) return cs.cuda_fail(err, "workspace");
    carver carve = {*work};
    lay_out_workspace(carve, cfg, c, op, &x);
    float *max_norm = x.max_norm;
    double *partials = x.partials, *qpartials = x.qpartials;
    float *qmean = x.qmean, *tile_hi = x.tile_hi, *tile_lo = x.tile_lo, *chan_inv = x.chan_inv, *chan_pre = x.chan_pre;
    int32_t *init_rows = x.init_rows;
    kmeans_workspace &kmeans_ws = x.kmeans_ws;
    principal_workspace &principal_ws = x.principal_ws;
    probe_args &probe = x.probe;
    if ((err = reset_call(op->flag, 8, principal_ws.amax, (int)kvh, cs.stream)) != cudaSuccess)
        return cs.cuda_fail(err, "workspace reset");

    const float sm_scale = c.sm_scale;
    const float hadamard_scale = 1.0f / sqrtf((float)D);
    const quant_common kv_rows = {(int)c.B, (int)c.Hkv, (int)Nk, (int)D, cfg->check_finite, op->flag};
    const quant_common q_rows = {(int)c.B, (int)c.Hq, (int)Nq, (int)D, cfg->check_finite, op->flag};

    // The channel means and Q's codes depend on no token order. With the
    // probe they come first and Q's pass runs on the side stream beside the
    // ordering, the probe and V's passes (the order's kernels and the probe
    // leave SMs idle at short sequences). Without it V needs only the order:
    // its passes run on the side stream beside K's and Q's. The call's
    // stream waits for the side before the score bound and the attention.
    const bool queries_beside = S > 0 && !op->q_given;
    const float *mean = cfg->k_smoothing ? op->kmean : nullptr;
    auto channel_means = [&]() {
        cudaError_t e = cudaSuccess;
        if (cfg->k_smoothing) e = k_channel_mean(in.k, in.krope, kv_rows, partials, op->kmean, cs.stream);
        if (e == cudaSuccess && q_smoothing) e = k_channel_mean(in.q, in.qrope, q_rows, qpartials, qmean, cs.stream);
        return e;
    };
    auto queries_pass = [&](cudaStream_t stream) {
        return quantize_q(in.q, in.qrope, q_rows, (int)c.Hkv, mean, sm_scale, cfg->hadamard, hadamard_scale, c.QT,
                          op->q_codes, op->q_mul, op->need_lse_shift ? op->lse_shift : nullptr, max_norm, qmean,
                          stream);
    };
    auto values = [&](const probe_args *weights, cudaStream_t stream) {
        return quantize_v(in.v, kv_rows, op->perm, c.grouped, cfg->sink_guard, op->out_max, weights, op->tile_mean,
                          tile_hi, tile_lo, chan_inv, op->chan_mul, chan_pre, op->chan_pow2, op->v_records,
                          op->v_mean_images, stream);
    };
    if (queries_beside && (err = channel_means())) return cs.cuda_fail(err, "channel means");
    side_branch queries(cs, queries_beside);
    if (queries_beside && (err = queries_pass(queries.stream))) return cs.cuda_fail(err, "quantization");

    if (c.plan == VCATTN_GROUP_REUSE) {
        if (!(op->perm = layer_device_perm(layer, kvh * Nk, device, cs.stream, made, &err)))
            return cs.cuda_fail(err, "permutation upload");
    } else if (principal) {
        if ((err = principal_order(in.v, kv_rows, principal_ws, op->new_perm, cs.stream))) return cs.cuda_fail(err, "principal order");
    } else if (regroup) {
        if (c.plan == VCATTN_GROUP_WARM) {
            err = cudaMemcpyAsync(op->centroids, layer->centroids, kvh * k * D * 4, cudaMemcpyHostToDevice, cs.stream);
        } else {
            int32_t *rows = (int32_t *)malloc(kvh * k * 4);
            if (!rows) return vcattn_fail(cs.ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
            for (size_t g = 0; g < kvh; g++) vsmooth_init_rows((int64_t)Nk, c.clusters, cfg->kmeans_seed, g, rows + g * k);
            err = cudaMemcpyAsync(init_rows, rows, kvh * k * 4, cudaMemcpyHostToDevice, cs.stream);
            if (err == cudaSuccess) err = cudaStreamSynchronize(cs.stream);  // rows is pageable and freed now
            free(rows);
            if (err == cudaSuccess) err = kmeans_gather_rows(in.v, kv_rows, c.clusters, init_rows, op->centroids, cs.stream);
        }
        if (err == cudaSuccess)
            err = kmeans_group(in.v, kv_rows, c.clusters,
                               c.plan == VCATTN_GROUP_WARM ? cfg->kmeans_warm_iters : cfg->kmeans_iters,
                               op->centroids, kmeans_ws, op->new_perm, cs.stream);
        if (err != cudaSuccess) return cs.cuda_fail(err, "k-means");
    }

    side_branch beside(cs, S == 0);
    if (beside.stream != cs.stream && (err = values(nullptr, beside.stream)))
        return cs.cuda_fail(err, "quantization");
    if (!queries_beside && (err = channel_means())) return cs.cuda_fail(err, "channel means");
    const q_smoothing_args q_smooth_args = {qmean, (int)(c.Hq / c.Hkv), sm_scale * VCATTN_LOG2E, op->key_bias};
    if ((!op->q_given && !queries_beside && (err = queries_pass(cs.stream))) ||
        (err = quantize_k(in.k, in.krope, kv_rows, op->perm, mean, cfg->hadamard, hadamard_scale, op->k_codes,
                          op->k_mul, max_norm + 1, q_smooth_args, cs.stream)))
        return cs.cuda_fail(err, "quantization");
    if (S) {  // V's block centres weighted by the attention the probe rows give each token
        if ((err = quantize_probe_rows(in.q, in.qrope, q_rows, (int)c.Hkv, cfg->hadamard, hadamard_scale, (int)S,
                                       qmean, x.probe_q_codes, x.probe_q_mul, cs.stream)))
            return cs.cuda_fail(err, "quantization");
        probe.q_codes = x.probe_q_codes; probe.q_mul = x.probe_q_mul;
        probe.k_codes = op->k_codes; probe.k_mul = op->k_mul; probe.key_bias = op->key_bias;
        probe.batch = (int)c.B; probe.heads_q = (int)c.Hq; probe.heads_kv = (int)c.Hkv;
        probe.tokens_k = (int)Nk; probe.rows = (int)S;
        probe.score_mul = sm_scale * VCATTN_LOG2E;
        if ((err = attention_probe(probe, (int)D, cs.stream))) return cs.cuda_fail(err, "attention probe");
    }
    if (beside.stream == cs.stream && (err = values(S ? &probe : nullptr, cs.stream)))
        return cs.cuda_fail(err, "quantization");
    if ((err = queries.join()) || (err = beside.join())) return cs.cuda_fail(err, "side stream");
    if (cfg->check_finite && (err = check_score_bound(max_norm, sm_scale * VCATTN_LOG2E, cfg->hadamard, kv_rows,
                                                      cs.ctx->cuda_flag_device, cs.stream)))
        return cs.cuda_fail(err, "quantization");
    return VCATTN_OK;
}

// Queues the event after the quantizers' flag reaches the context's pinned
// word (written by the score bound's kernel where the word is mapped, else
// copied here), so the status can wait for the preprocessing alone while
// the attention kernel, queued next, runs (it skips its writes itself when
// the flag is set).
vcattn_status publish_flag(call_state &cs, const vcattn_config *cfg, const operands &op) {
    if (!cfg->check_finite || !cs.ctx->cuda_flag_host) return VCATTN_OK;
    cudaError_t err = cudaSuccess;
    if ((!cs.ctx->cuda_flag_device &&
         (err = cudaMemcpyAsync(cs.ctx->cuda_flag_host, op.flag, sizeof(int), cudaMemcpyDeviceToHost, cs.stream))) ||
        (err = cudaEventRecord((cudaEvent_t)cs.ctx->cuda_flag_ready, cs.stream)))
        return cs.cuda_fail(err, "non-finite check");
    return VCATTN_OK;
}

// Whether the quantizers saw NaN/Inf or unresolvable scores: waits for the
// published flag (without a pinned word, for the whole stream).
vcattn_status await_flag(call_state &cs, const vcattn_config *cfg, const operands &op, vcattn_dtype out_dtype) {
    if (!cfg->check_finite) return VCATTN_OK;
    cudaError_t err;
    int found = 0;
    if (cs.ctx->cuda_flag_host) {
        if ((err = cudaEventSynchronize((cudaEvent_t)cs.ctx->cuda_flag_ready))) return cs.cuda_fail(err, "non-finite check");
        found = *cs.ctx->cuda_flag_host;
    } else if ((err = cudaMemcpyAsync(&found, op.flag, sizeof(int), cudaMemcpyDeviceToHost, cs.stream)) ||
               (err = cudaStreamSynchronize(cs.stream))) {
        return cs.cuda_fail(err, "non-finite check");
    }
    if (found & VC_FLAG_NONFINITE)
        return vcattn_fail(cs.ctx, VCATTN_ERR_NONFINITE_INPUT, "q, k, v or the rope tables contain NaN or Inf");
    if (found & VC_FLAG_HADAMARD_RANGE)
        return vcattn_fail(cs.ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "the Hadamard rotation would overflow float32: a row's norm after RoPE and smoothing, "
                           "times 2 sqrt(D), passes the float maximum");
    if (found & VC_FLAG_SCORE_RANGE)
        return vcattn_fail(cs.ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "scores could pass %g (log2 units, from |q| and |k| after RoPE and smoothing): "
                           "beyond what the float32 softmax resolves", VCATTN_MAX_SCORE_LOG2);
    if (found & VC_FLAG_OUT_RANGE) return vcattn_fail_out_range(cs.ctx, out_dtype);
    if (found & VC_FLAG_UNSEEN_SCORES)
        return vcattn_fail(cs.ctx, VCATTN_ERR_INVALID_ARGUMENT,
                           "scores past %g (log2 units) would read as 0: rows of q or k are below what INT8 scales "
                           "hold (amax ~3.7e-37) against rows large enough to score with them; scale q up and k down "
                           "by the same power of two", VCATTN_UNSEEN_SCORE_LOG2);
    return VCATTN_OK;
}

// The attention kernel's arguments for the operands op, all of the call's
// query rows; the caller sets the output, the LSE and the flag.
vc_attention_params attention_params(const vcattn_config *cfg, const call_shape &c, const operands &op) {
    vc_attention_params p = {};
    p.q = op.q_codes; p.q_mul = op.q_mul;
    p.k = op.k_codes; p.k_mul = op.k_mul;
    p.v = op.v_records; p.v_mul = op.chan_mul; p.v_pow2 = op.chan_pow2; p.v_means = op.v_mean_images;
    p.key_bias = op.key_bias;
    p.batch = (int)c.B; p.heads_q = (int)c.Hq; p.heads_kv = (int)c.Hkv; p.nq = (int)c.Nq; p.nk = (int)c.Nk;
    p.q_tiles = c.QT; p.kv_tiles = c.T;
    p.kv_group_mul = ((1ull << 32) + (uint64_t)(c.Hq / c.Hkv) - 1) / (uint64_t)(c.Hq / c.Hkv);  // exact for heads < 2^16
    p.score_mul = c.sm_scale * VCATTN_LOG2E;
    p.expcast_bias = VCATTN_EXPCAST_MAX_CODE + cfg->expcast_beta;  // the row maximum lands on 0x78
    return p;
}

// vsmooth_order_rows at a grouping step (docs/cuda-design.md §13d): the call
// quantized again in the principal order, both orders' attention on the
// sampled query rows against a reference on the tensor cores, and, for each
// key head whose principal order errs less, that order's operand slices and
// permutation copied over op's (k-means's; centroids stay k-means's, as on
// the CPU). Q's codes are the same in both orders; Q smoothing's per-key
// terms follow the key order and are copied with their key head.
vcattn_status choose_orders(call_state &cs, const vcattn_config *cfg, const call_shape &c, const call_tensors &in,
                            int device, operands *op) {
    call_shape ca = c;
    ca.plan = VCATTN_GROUP_PRINCIPAL;
    ca.regroup = 0;
    vcattn_config plain = *cfg;
    plain.check_finite = 0;  // the k-means pass checked the same inputs
    operands alt = {};
    alt.q_given = 1;  // Q's codes do not depend on the key order: quantized once
    alt.q_codes = op->q_codes;
    alt.q_mul = op->q_mul;
    vcattn_status st = prepare_operands(cs, &plain, ca, in, nullptr, device, &alt, nullptr, &cs.alt_work);
    if (st) return st;

    const size_t qh = (size_t)(c.B * c.Hq), kvh = (size_t)(c.B * c.Hkv), D = (size_t)c.D, T = (size_t)c.T;
    const int rows = cfg->vsmooth_order_rows, row_tiles = (rows + 2 * VC_Q_ROWS - 1) / (2 * VC_Q_ROWS) * 2;
    const int group = (int)(c.Hq / c.Hkv);
    sampled_rows a = {(int)c.B, (int)c.Hq, (int)c.Hkv, (int)c.Nq, (int)c.Nk, (int)D, rows, row_tiles};
    plan_reference_splits(&a);
    carver measure = {nullptr};
    auto lay_out = [&](carver &w) {
        a.q_codes = w.take<int8_t>(qh * row_tiles * VC_Q_ROWS * D);
        a.q_mul = w.take<float>(qh * row_tiles * VC_Q_ROWS);
        a.out_kmeans = w.take<float>(qh * rows * D);
        a.out_principal = w.take<float>(qh * rows * D);
        a.reference = w.take<float>(qh * rows * D);
        a.part_o = w.take<float>(a.splits * qh * rows * D);
        a.part_ml = w.take<float>(a.splits * qh * rows * 2);
        a.choice = w.take<int>(kvh);
    };
    lay_out(measure);
    cudaError_t err = cs.alloc((void **)&cs.choice_work, measure.used);
    if (err != cudaSuccess) return cs.cuda_fail(err, "order choice workspace");
    carver carve = {cs.choice_work};
    lay_out(carve);
    if ((err = gather_sampled_rows(a, op->q_codes, op->q_mul, c.QT, cs.stream)))
        return cs.cuda_fail(err, "order choice: sampled rows");
    for (const operands *set : {(const operands *)op, (const operands *)&alt}) {
        vc_attention_params p = attention_params(cfg, c, *set);
        p.q = a.q_codes; p.q_mul = a.q_mul; p.q_tiles = row_tiles; p.nq = rows;
        p.out = set == op ? a.out_kmeans : a.out_principal; p.out_dtype = VCATTN_DTYPE_F32;
        p.out_sb = (int64_t)c.Hq * rows * D; p.out_sh = (int64_t)rows * D; p.out_sn = (int64_t)D;
        if ((err = vc_attention_sm90(p, (int)D, cfg->p_format == VCATTN_P_FP8_EXPCAST, c.grouped, cs.stream)))
            return cs.cuda_fail(err, "order choice: attention of the sampled rows");
    }
    if ((err = sampled_reference(a, in, c.sm_scale * VCATTN_LOG2E, cs.stream)) || (err = choose_by_error(a, cs.stream)))
        return cs.cuda_fail(err, "order choice: reference");
    const size_t means = op->v_mean_images ? (T + VC_MEAN_TILES - 1) / VC_MEAN_TILES * vc_mean_image_bytes((uint32_t)D) : 0;
    struct slice { void *dst; const void *src; size_t bytes; int heads, group; };
    const slice slices[] = {
        {op->k_codes, alt.k_codes, T * VC_KV_ROWS * D, (int)kvh, 1},
        {op->k_mul, alt.k_mul, T * VCATTN_K_LANE_GROUPS * sizeof(float), (int)kvh, 1},
        {op->v_records, alt.v_records, T * vc_v_record_bytes((uint32_t)D), (int)kvh, 1},
        {op->v_mean_images, alt.v_mean_images, means, (int)kvh, 1},
        {op->tile_mean, alt.tile_mean, T * D * sizeof(float), (int)kvh, 1},
        {op->chan_mul, alt.chan_mul, D * sizeof(float), (int)kvh, 1},
        {op->chan_pow2, alt.chan_pow2, D * sizeof(float), (int)kvh, 1},
        {op->new_perm, alt.new_perm, (size_t)c.Nk * sizeof(int32_t), (int)kvh, 1},
        {op->key_bias, alt.key_bias, T * VC_KV_ROWS * sizeof(float), (int)qh, group},
    };
    for (const slice &x : slices)
        if ((err = take_heads(x.dst, x.src, x.bytes, x.heads, x.group, a.choice, cs.stream)))
            return cs.cuda_fail(err, "order choice: the chosen slices");
    return VCATTN_OK;
}

}  // namespace

extern "C" vcattn_status cuda_attention(vcattn_context *ctx, const vcattn_call *call, const vcattn_tensor *q,
                                        const vcattn_tensor *k, const vcattn_tensor *v, const vcattn_tensor *out,
                                        float *lse, const vcattn_rope *rope, vcattn_new_grouping *grouping) {
    const vcattn_config *cfg = &call->cfg;
    const vcattn_layer *layer = call->layer;
    const call_shape c = shape_of(call);
    call_state cs = {};
    int device = 0;
    vcattn_status st = begin_call(ctx, cfg, c, call->layer != nullptr, &cs, &device);
    if (st) return st;
    cudaError_t err;

    call_tensors in;
    dev_tensor dout;
    int out_staged = 0, lse_staged = 0;
    float *dlse = nullptr;
    if ((st = stage_inputs(cs, c, q, k, v, rope, device, &in)) ||
        (st = tensor_view(cs, "out", out, device, 1, &dout, &out_staged)))
        return st;
    if (lse && (st = device_view(cs, "lse", lse, (size_t)(c.B * c.Hq * c.Nq) * sizeof(float), 4, device, 0,
                                 (void **)&dlse, &lse_staged)))
        return st;
    operands op = {};
    op.need_lse_shift = lse != nullptr;
    if (vcattn_dtype_max(out->dtype) < vcattn_dtype_max(v->dtype)) op.out_max = vcattn_dtype_max(out->dtype);
    if ((st = prepare_operands(cs, cfg, c, in, layer, device, &op, grouping, &cs.work)) ||
        (c.regroup && cfg->vsmooth_order_rows > 0 && (st = choose_orders(cs, cfg, c, in, device, &op))) ||
        (st = publish_flag(cs, cfg, op)))
        return st;

    vc_attention_params p = attention_params(cfg, c, op);
    p.lse_shift = cfg->k_smoothing ? op.lse_shift : nullptr;
    p.out = const_cast<void *>(dout.data); p.out_dtype = out->dtype;
    p.out_sb = out->stride_batch; p.out_sh = out->stride_head; p.out_sn = out->stride_token;
    p.lse = dlse;
    p.error_flag = cfg->check_finite ? op.flag : nullptr;
    if ((err = vc_attention_sm90(p, (int)c.D, cfg->p_format == VCATTN_P_FP8_EXPCAST, c.grouped, cs.stream)))
        return cs.cuda_fail(err, "attention kernel");
    if ((st = await_flag(cs, cfg, op, out->dtype))) return st;

    // ---- results ----
    const size_t kvh = (size_t)(c.B * c.Hkv), cents = kvh * c.clusters * c.D, perms = kvh * c.Nk;
    float *host_centroids = nullptr;
    int32_t *host_perm = nullptr;
    if (c.regroup && layer) {
        host_centroids = (float *)malloc(cents * 4);
        host_perm = (int32_t *)malloc(perms * 4);
        if (!host_centroids || !host_perm) {
            free(host_centroids);
            free(host_perm);
            return vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
        }
        cudaMemcpyAsync(host_centroids, op.centroids, cents * 4, cudaMemcpyDeviceToHost, cs.stream);
        cudaMemcpyAsync(host_perm, op.new_perm, perms * 4, cudaMemcpyDeviceToHost, cs.stream);
    }
    if (out_staged)
        cudaMemcpyAsync(out->data, dout.data, tensor_extent(out) * dtype_size(out->dtype), cudaMemcpyDeviceToHost, cs.stream);
    if (lse_staged) cudaMemcpyAsync(lse, dlse, (size_t)(c.B * c.Hq * c.Nq) * 4, cudaMemcpyDeviceToHost, cs.stream);
    if (out_staged || lse_staged || host_perm) err = cudaStreamSynchronize(cs.stream);
    else err = cudaGetLastError();
    if (err != cudaSuccess) {
        free(host_centroids);
        free(host_perm);
        return cs.cuda_fail(err, "attention");
    }
    if (host_perm) {
        grouping->centroids = host_centroids;
        grouping->perm = host_perm;
        // A device copy of the new permutation for the next plain steps
        // (best effort: without it the next plain step uploads the host copy).
        void *keep = nullptr;
        if (cudaMalloc(&keep, perms * 4) == cudaSuccess &&
            cudaMemcpyAsync(keep, op.new_perm, perms * 4, cudaMemcpyDeviceToDevice, cs.stream) == cudaSuccess) {
            grouping->device_perm = keep;
            grouping->device = device;
            grouping->release = release_device_perm;
        } else {
            if (keep) cudaFree(keep);
            cudaGetLastError();
        }
    }
    return VCATTN_OK;
}

extern "C" vcattn_status cuda_order_reference_for_test(vcattn_context *ctx, const vcattn_call *call,
                                                       const vcattn_tensor *q, const vcattn_tensor *k,
                                                       const vcattn_tensor *v, const vcattn_rope *rope, int rows,
                                                       float *out) {
    const call_shape c = shape_of(call);
    call_state cs = {};
    int device = 0;
    vcattn_status st = begin_call(ctx, &call->cfg, c, 0, &cs, &device);
    call_tensors in;
    if (st || (st = stage_inputs(cs, c, q, k, v, rope, device, &in))) return st;
    const size_t qh = (size_t)(c.B * c.Hq), D = (size_t)c.D;
    sampled_rows a = {(int)c.B, (int)c.Hq, (int)c.Hkv, (int)c.Nq, (int)c.Nk, (int)D, rows, 0};
    plan_reference_splits(&a);
    const size_t ref = qh * rows * D, parts = a.splits * qh * rows;
    cudaError_t err = cs.alloc((void **)&cs.choice_work, (ref + parts * D + parts * 2) * sizeof(float));
    if (err != cudaSuccess) return cs.cuda_fail(err, "order reference workspace");
    a.reference = (float *)cs.choice_work;
    a.part_o = a.reference + ref;
    a.part_ml = a.part_o + parts * D;
    if ((err = sampled_reference(a, in, c.sm_scale * VCATTN_LOG2E, cs.stream)) ||
        (err = cudaMemcpyAsync(out, a.reference, ref * sizeof(float), cudaMemcpyDeviceToHost, cs.stream)) ||
        (err = cudaStreamSynchronize(cs.stream)))
        return cs.cuda_fail(err, "order reference");
    return VCATTN_OK;
}

extern "C" vcattn_status cuda_quantize_for_test(vcattn_context *ctx, const vcattn_call *call,
                                                const vcattn_tensor *q, const vcattn_tensor *k,
                                                const vcattn_tensor *v, const vcattn_rope *rope,
                                                vcattn_quantized *out) {
    const vcattn_config *cfg = &call->cfg;
    const vcattn_layer *layer = call->layer;
    const call_shape c = shape_of(call);
    call_state cs = {};
    int device = 0;
    vcattn_status st = begin_call(ctx, cfg, c, call->layer != nullptr, &cs, &device);
    if (st) return st;
    call_tensors in;
    operands op = {};
    op.need_lse_shift = 1;
    // a device copy of the layer's permutation made here lives as long as the call
    struct made_copy {
        vcattn_new_grouping g = {nullptr, nullptr, nullptr, 0, nullptr};
        cudaStream_t stream;
        ~made_copy() {
            if (g.device_perm) cudaStreamSynchronize(stream), g.release(g.device_perm);
        }
    } made;
    made.stream = cs.stream;
    if ((st = stage_inputs(cs, c, q, k, v, rope, device, &in)) ||
        (st = prepare_operands(cs, cfg, c, in, layer, device, &op, &made.g, &cs.work)) || (st = publish_flag(cs, cfg, op)) ||
        (st = await_flag(cs, cfg, op, VCATTN_DTYPE_F32)))
        return st;
    const size_t kvh = (size_t)(c.B * c.Hkv), qh = (size_t)(c.B * c.Hq), D = (size_t)c.D;
    const size_t T = (size_t)c.T, QT = (size_t)c.QT, rec = vc_v_record_bytes((uint32_t)D);
    // Raw device images, then unpacked on the host into the CPU's row order.
    int8_t *qc = (int8_t *)malloc(qh * QT * VC_Q_ROWS * D), *kc = (int8_t *)malloc(kvh * T * VC_KV_ROWS * D);
    float *qm = (float *)malloc(qh * QT * VC_Q_ROWS * 4);
    uint8_t *vr = (uint8_t *)malloc(kvh * T * rec);
    float *vp = (float *)malloc(kvh * D * 4);
    if (!qc || !kc || !qm || !vr || !vp) {
        free(qc); free(kc); free(qm); free(vr); free(vp);
        return vcattn_fail(ctx, VCATTN_ERR_OUT_OF_MEMORY, "cuda backend: out of host memory");
    }
    cudaMemcpyAsync(qc, op.q_codes, qh * QT * VC_Q_ROWS * D, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(qm, op.q_mul, qh * QT * VC_Q_ROWS * 4, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(kc, op.k_codes, kvh * T * VC_KV_ROWS * D, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(vr, op.v_records, kvh * T * rec, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(out->k_scale, op.k_mul, kvh * T * 16, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(out->v_scale, op.chan_mul, kvh * D * 4, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(vp, op.chan_pow2, kvh * D * 4, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(out->k_mean, op.kmean, kvh * D * 4, cudaMemcpyDeviceToHost, cs.stream);
    cudaMemcpyAsync(out->lse_shift, op.lse_shift, qh * c.Nq * 4, cudaMemcpyDeviceToHost, cs.stream);
    if (op.perm) cudaMemcpyAsync(out->perm, op.perm, kvh * c.Nk * 4, cudaMemcpyDeviceToHost, cs.stream);
    cudaError_t err = cudaStreamSynchronize(cs.stream);
    if (err == cudaSuccess) {
        for (size_t i = 0; i < kvh * D; i++) out->v_scale[i] *= vp[i];  // the CPU's chan_mul * chan_pow2
        if (!op.perm)
            for (size_t i = 0; i < kvh * (size_t)c.Nk; i++) out->perm[i] = (int32_t)(i % (size_t)c.Nk);
        for (size_t g = 0; g < qh; g++)
            for (size_t n = 0; n < (size_t)c.Nq; n++) {
                const size_t tile = n / VC_Q_ROWS, r = n % VC_Q_ROWS;
                out->q_scale[g * c.Nq + n] = qm[g * QT * VC_Q_ROWS + n];
                for (size_t col = 0; col < D; col++)
                    out->q_codes[(g * c.Nq + n) * D + col] =
                        qc[(g * QT + tile) * VC_Q_ROWS * D + vc_tile_offset((uint32_t)r, (uint32_t)col, VC_Q_ROWS)];
            }
        for (size_t g = 0; g < kvh; g++)
            for (size_t n = 0; n < (size_t)c.Nk; n++) {
                const size_t tile = n / VC_KV_ROWS, r = n % VC_KV_ROWS;
                const size_t pos = (r & ~size_t(15)) + vc_sigma_inverse((uint32_t)(r & 15));
                const uint8_t *record = vr + (g * T + tile) * rec;
                for (size_t col = 0; col < D; col++) {
                    out->k_codes[(g * c.Nk + n) * D + col] =
                        kc[(g * T + tile) * VC_KV_ROWS * D + vc_tile_offset((uint32_t)r, (uint32_t)col, VC_KV_ROWS)];
                    out->v_codes[(g * c.Nk + n) * D + col] =
                        record[vc_tile_offset((uint32_t)col, (uint32_t)pos, (uint32_t)(D + VC_ONES_ROWS))];
                }
                if (r == 0)
                    memcpy(out->v_mean + (g * T + tile) * D, record + vc_vt_bytes((uint32_t)D), D * 4);
            }
    }
    free(qc); free(kc); free(qm); free(vr); free(vp);
    if (err != cudaSuccess) return cs.cuda_fail(err, "quantize for test");
    return VCATTN_OK;
}

extern "C" void cuda_release_context(vcattn_context *ctx) {
    // Safe with frees still queued: the pool goes once they have run.
    if (ctx->cuda_pool) cudaMemPoolDestroy((cudaMemPool_t)ctx->cuda_pool);
    if (ctx->cuda_flag_ready) {
        cudaEventSynchronize((cudaEvent_t)ctx->cuda_flag_ready);  // the copy into the word has landed
        cudaEventDestroy((cudaEvent_t)ctx->cuda_flag_ready);
    }
    if (ctx->cuda_flag_host) cudaFreeHost(ctx->cuda_flag_host);
    if (ctx->cuda_side_stream) {
        cudaStreamSynchronize((cudaStream_t)ctx->cuda_side_stream);
        cudaStreamDestroy((cudaStream_t)ctx->cuda_side_stream);
        cudaEventDestroy((cudaEvent_t)ctx->cuda_fork);
        cudaEventDestroy((cudaEvent_t)ctx->cuda_join);
    }
    ctx->cuda_pool = nullptr;
    ctx->cuda_flag_host = ctx->cuda_flag_device = nullptr;
    ctx->cuda_flag_ready = nullptr;
    ctx->cuda_side_stream = ctx->cuda_fork = ctx->cuda_join = nullptr;
}
