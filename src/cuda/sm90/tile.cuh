// The operand tiles as the kernel sees them in shared memory: their sizes,
// their wgmma descriptors, and which accumulator register holds which column.
// The images themselves are written by the quantizers (../operand_layout.h).
#pragma once
#include "ptx.cuh"
#include "../operand_layout.h"

// Bytes of one 64-row Q tile, one 128-key K tile and one V record (V^T with
// its ones rows, then the tile's block mean as D floats).
template <int D> struct Sizes {
    static constexpr uint32_t q = VC_Q_ROWS * D, k = VC_KV_ROWS * D;
    static constexpr uint32_t vt_rows = D + VC_ONES_ROWS, v = vt_rows * VC_KV_ROWS + D * 4;
    static constexpr uint32_t mean_offset = vt_rows * VC_KV_ROWS;  // the D floats of mu
    // One k-half of a mean image (the mean wgmma's f16 B operand), and the
    // image: vc_mean_half_bytes, vc_mean_image_bytes.
    static constexpr uint32_t mean_half = vt_rows * 16, mean_image = 2 * mean_half;
};

// Descriptors of a tile's operands (K-major, no swizzle), advanced by one
// add per 32-byte k-step.
static __device__ __forceinline__ uint64_t q_desc(const int8_t *q) { return smem_desc(q, VC_Q_ROWS * 16, 128); }
static __device__ __forceinline__ uint64_t k_desc(const int8_t *k) { return smem_desc(k, VC_KV_ROWS * 16, 128); }
template <int D> __device__ __forceinline__ uint64_t v_desc(const uint8_t *v) {
    return smem_desc(v, Sizes<D>::vt_rows * 16, 128);
}
template <int D> __device__ __forceinline__ uint64_t mean_desc(const uint8_t *image) {
    return smem_desc(image, Sizes<D>::mean_half, 128);
}

// Column (tile-relative key, or output channel) of accumulator register i of
// lane (g, t): rows g (registers with (i >> 1) even) and g + 8.
static __device__ __forceinline__ int acc_col(int i, int t) { return 8 * (i >> 2) + 2 * t + (i & 1); }
