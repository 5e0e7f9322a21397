// PTX wrappers for the sm_90a kernels: mbarriers, bulk copies (TMA engine),
// wgmma descriptors and fences, and the integer byte tricks of ExpCast.
// One instruction each, no logic.
#pragma once
#include <stdint.h>

static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// ---- mbarriers ----------------------------------------------------------
static __device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count));
}

static __device__ __forceinline__ void fence_mbar_init() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Arrives once and tells the barrier to expect `bytes` more from bulk copies.
static __device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}

static __device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n}\n"
        ::"r"(smem_addr(bar)), "r"(parity) : "memory");
}

// The same for a thread with nothing else to do (the producer): each try
// suspends the thread until the phase completes or `hint_ns` pass, instead of
// spinning on issue slots its warp's scheduler shares with a consumer warp.
static __device__ __forceinline__ void mbar_wait_suspended(uint64_t *bar, uint32_t parity) {
    constexpr uint32_t hint_ns = 1000000;
    asm volatile(
        "{\n.reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1, %2;\n"
        "@!done bra WAIT_%=;\n}\n"
        ::"r"(smem_addr(bar)), "r"(parity), "n"(hint_ns) : "memory");
}

// Two floats from shared memory (an explicit ld.shared: the compiler loses
// the address space of pointers into the dynamic shared buffer and emits a
// generic load).
static __device__ __forceinline__ float2 lds_float2(uint32_t addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
    return v;
}

static __device__ __forceinline__ float lds_float(uint32_t addr) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
    return v;
}

static __device__ __forceinline__ void sts_u32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Makes this thread's shared-memory writes visible to the async proxy
// (wgmma operand reads); a barrier then orders them for the other threads.
static __device__ __forceinline__ void fence_proxy_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- bulk copy global -> shared, completion counted on an mbarrier --------
// bytes: multiple of 16; both addresses 16-byte aligned.
static __device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes,
                                                 uint64_t *bar) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
        ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar)) : "memory");
}

// ---- barriers among the threads of one warpgroup ---------------------------
static __device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

static __device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Moves registers between warpgroups (all warps of a warpgroup execute it).
template <uint32_t N> static __device__ __forceinline__ void regs_decrease() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <uint32_t N> static __device__ __forceinline__ void regs_increase() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// ---- wgmma bookkeeping ----------------------------------------------------
static __device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wgmma_wait_all() {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}
// Waits until at most N committed groups are pending (groups complete in order).
template <int N> static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of accumulator registers across the
// asynchronous wgmma (it cannot see that the registers are in flight).
static __device__ __forceinline__ void reg_fence(int32_t &r) { asm volatile("" : "+r"(r)::"memory"); }
static __device__ __forceinline__ void reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }
static __device__ __forceinline__ void reg_fence(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

// Shared-memory matrix descriptor of a K-major operand in the no-swizzle
// ("interleaved") canonical layout: 8-row x 16-byte core matrices of 128
// contiguous bytes; `sbo` bytes between core matrices along M/N (8-row
// groups), `lbo` bytes between core matrices along K.
static __device__ __forceinline__ uint64_t smem_desc(const void *base, uint32_t lbo, uint32_t sbo) {
    uint64_t d = 0;
    d |= (uint64_t)((smem_addr(base) & 0x3FFFF) >> 4);
    d |= (uint64_t)((lbo & 0x3FFFF) >> 4) << 16;
    d |= (uint64_t)((sbo & 0x3FFFF) >> 4) << 32;
    return d;  // base offset 0, layout type 0 (no swizzle)
}

// The descriptor of the same layout `bytes` further on (16-byte multiple):
// one add on the address field, which stays below 2^14 in shared memory.
static __device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    return desc + (bytes >> 4);
}

// ---- ExpCast packing --------------------------------------------------------
// Four floats to four bytes, x0 in byte 0: each rounded to the nearest
// integer (ties to even), saturated to [0, 255] (NaN and -inf give 0). ptxas
// fuses each pair of conversions with its pack into one F2IP.U8.F32.
static __device__ __forceinline__ uint32_t round_pack_u8x4(float x0, float x1, float x2, float x3) {
    int32_t i0, i1, i2, i3;
    asm("cvt.rni.s32.f32 %0, %1;\n" : "=r"(i0) : "f"(x0));
    asm("cvt.rni.s32.f32 %0, %1;\n" : "=r"(i1) : "f"(x1));
    asm("cvt.rni.s32.f32 %0, %1;\n" : "=r"(i2) : "f"(x2));
    asm("cvt.rni.s32.f32 %0, %1;\n" : "=r"(i3) : "f"(x3));
    uint32_t high, d;  // cvt.pack d, a, b, c: b in byte 0, a in byte 1, c's low half above
    asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, 0;\n" : "=r"(high) : "r"(i3), "r"(i2));
    asm("cvt.pack.sat.u8.s32.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(i1), "r"(i0), "r"(high));
    return d;
}

// Two FP32 values to two E4M3 bytes (RNE, saturating): lo in byte 0, hi in byte 1.
static __device__ __forceinline__ uint32_t cvt_e4m3x2(float lo, float hi) {
    uint16_t h;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(h) : "f"(hi), "f"(lo));
    return h;
}

// Two FP32 values to FP16 (RNE): lo in bits 0-15, hi in bits 16-31.
static __device__ __forceinline__ uint32_t cvt_f16x2(float lo, float hi) {
    uint32_t h;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(h) : "f"(hi), "f"(lo));
    return h;
}

static __device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
