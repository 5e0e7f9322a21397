/* Where the quantized operands live: the contract between the quantization
 * kernels (writers) and the sm_90a attention kernel (reader).
 *
 * Every tile is stored as the image the wgmma instruction reads from shared
 * memory, so one bulk copy moves it: K-major, no swizzle, 8-row x 16-byte
 * core matrices of 128 contiguous bytes, core matrices of one 16-byte column
 * of K (the contraction axis) stacked along the rows.
 *
 *   Q  int8  [B][Hq][ceil(Nq/64)][64 rows x D]          scales [B][Hq][ceil(Nq/64)*64]
 *   K  int8  [B][Hkv][T][128 rows x D]                  scales [B][Hkv][T][4] (lane groups)
 *   V  e4m3  [B][Hkv][T] records of VT_RECORD(D) bytes: V^T as (D + 8) rows
 *            (channels, then 8 rows of 1.0 that make the PV product also
 *            return the row sum of P) x 128 key positions, followed by the
 *            tile's block mean in code units as D floats (zeros without
 *            V-Smooth).                                 scales [B][Hkv][D]
 *   means f16 [B][Hkv][ceil(T/8)] images (head dim 128, V-Smooth): the B
 *            operand of the wgmma that restores the means of 8 tiles at
 *            once, (D + 8) rows (the PV columns) x 16 k in two 8-k halves.
 *            Tile x puts its mean (FP16, the record's values) in k rows
 *            2 (x % 8) and + 1 of image x / 8; the ones rows and the slots
 *            past the last tile are zero.
 *
 * Key position p of a V tile holds token 16 (p / 16) + sigma(p % 16): the
 * permutation that lets the probability accumulator registers be used as the
 * PV A operand without shuffles (docs/cuda-design.md section 5). Positions of
 * tokens >= Nk hold zeros, as do K rows and Q rows past the end. */
#ifndef VCATTN_CUDA_OPERAND_LAYOUT_H
#define VCATTN_CUDA_OPERAND_LAYOUT_H

#include <stdint.h>

#ifdef __CUDACC__
#define VCATTN_LAYOUT_FN static __host__ __device__ __forceinline__
#else
#define VCATTN_LAYOUT_FN static inline
#endif

#define VC_Q_ROWS 64          /* query rows per attention CTA (one warpgroup) */
#define VC_KV_ROWS 128        /* keys per tile = VCATTN_TILE */
#define VC_ONES_ROWS 8        /* rows of 1.0 appended to V^T */
#define VC_E4M3_ONE 0x38u

/* Byte offset of element (row, col) in a K-major tile with `rows` rows. */
VCATTN_LAYOUT_FN uint32_t vc_tile_offset(uint32_t row, uint32_t col, uint32_t rows) {
    return (((col >> 4) * (rows >> 3) + (row >> 3)) << 7) + ((row & 7) << 4) + (col & 15);
}

/* The inverse: which (row, col) byte `offset` of such a tile holds. */
VCATTN_LAYOUT_FN void vc_tile_coords(uint32_t offset, uint32_t rows, uint32_t *row, uint32_t *col) {
    uint32_t core = offset >> 7, groups = rows >> 3;
    *row = (core % groups) * 8 + ((offset >> 4) & 7);
    *col = (core / groups) * 16 + (offset & 15);
}

/* Token held at key position p (0..15) of a 16-group of V^T. */
VCATTN_LAYOUT_FN uint32_t vc_sigma(uint32_t p) {
    return 2 * (p >> 2) + (p & 1) + 8 * ((p >> 1) & 1);
}

/* Key position (0..15) of token k of a 16-group: vc_sigma(vc_sigma_inverse(k)) == k. */
VCATTN_LAYOUT_FN uint32_t vc_sigma_inverse(uint32_t k) {
    return 4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3);
}

VCATTN_LAYOUT_FN uint32_t vc_vt_bytes(uint32_t d) { return (d + VC_ONES_ROWS) * VC_KV_ROWS; }
VCATTN_LAYOUT_FN uint32_t vc_v_record_bytes(uint32_t d) { return vc_vt_bytes(d) + d * 4; }

#define VC_MEAN_TILES 8       /* tiles whose means share one mean image */

/* One 8-k half of a mean image (16 bytes per row), and the whole image. */
VCATTN_LAYOUT_FN uint32_t vc_mean_half_bytes(uint32_t d) { return (d + VC_ONES_ROWS) * 16; }
VCATTN_LAYOUT_FN uint32_t vc_mean_image_bytes(uint32_t d) { return 2 * vc_mean_half_bytes(d); }

/* Byte offset, in its image, of the (mu, mu) FP16 pair of tile x, row n. */
VCATTN_LAYOUT_FN uint32_t vc_mean_image_offset(uint32_t x, uint32_t n, uint32_t d) {
    return ((x >> 2) & 1) * vc_mean_half_bytes(d) + 16 * n + 4 * (x & 3);
}

#endif
