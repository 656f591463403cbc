/*
 * cast.h — element type conversions, bit-for-bit as torch's Tensor.to() on
 * CPU for every value that is not a NaN (see docs/CASTS.md for NaN bits).
 *
 * Floats convert through float32, as torch does (float64 → bfloat16 is
 * float64 → float32 → bfloat16, double rounding included); integers widen.
 * The common pairs (bf16/f16 ↔ f32, and the common block types:
 * quant_x86.c) have SIMD kernels picked at run time
 * from what the CPU offers (F16C, AVX2, AVX-512); CKPT_SIMD=scalar|avx2|avx512
 * in the environment caps the choice (tests run every level).  The scalar
 * float16 and bfloat16 conversions they start from are base's (base.h).
 * Depends on base only.
 */
#ifndef CKPT_TRANSFORM_CAST_H
#define CKPT_TRANSFORM_CAST_H

#include <stddef.h>

#include "../base/base.h"

/* Converts n contiguous elements.  src and dst must not overlap; neither
 * needs any alignment. */
typedef void (*ckpt__cast_fn)(const void *src, void *dst, size_t n);

/* The kernel for a pair, or NULL when ckpt does not cast from → to (a
 * narrowing integer cast, float ↔ integer, complex, sub-byte floats).
 * Same dtype gives a copy. */
CKPT__HIDDEN ckpt__cast_fn ckpt__cast_kernel(ckpt_dtype from, ckpt_dtype to);

/* Converts n elements whose destinations are dst_stride elements apart
 * (a permuted layout), through a small contiguous buffer. */
CKPT__HIDDEN void ckpt__cast_strided(ckpt__cast_fn fn, unsigned in_size, unsigned out_size, const void *src,
                                     void *dst, size_t n, ptrdiff_t dst_stride);



/* quant.c: fills the pairs of ggml's block types (dequantization to F32,
 * F16, BF16; quantization to Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K; each
 * block type to itself).
 * Their kernels count blocks, not elements. */
CKPT__HIDDEN void ckpt__quant_fill(ckpt__cast_fn (*table)[CKPT_DTYPE_COUNT]);

/* quant.c's scalar pieces that quant_x86.c's kernels share: one Q8_0 block
 * of 32 float32 values (what a SIMD kernel does for a block whose scale is
 * not finite), and Q4_K/Q5_K's 6-bit scales and minimums unpacked. */
CKPT__HIDDEN void ckpt__quant_q8_0_block(const float *x, uint8_t *block);
CKPT__HIDDEN void ckpt__quant_scale_min_k4(const uint8_t *packed, uint8_t *scales, uint8_t *mins);
/* The per-block steps of ggml's K-quantizers around their per-sub-block
 * searches (make_qkx2_quants, make_qx_quants), which quant_x86.c runs 8
 * sub-blocks at a time: the scales quantized against the block's largest
 * and written with d (and dmin) to the block, and the levels L (256, one a
 * byte) packed into it. */
CKPT__HIDDEN void ckpt__quant_k4_scales(uint8_t *block, const float *scales, const float *mins, float max_scale,
                                        float max_min);
CKPT__HIDDEN void ckpt__quant_q6_k_scales(uint8_t *block, const float *scales, float max_scale);
CKPT__HIDDEN void ckpt__quant_q4_k_pack(const uint8_t *L, uint8_t *block);
CKPT__HIDDEN void ckpt__quant_q5_k_pack(const uint8_t *L, uint8_t *block);
CKPT__HIDDEN void ckpt__quant_q6_k_pack(const uint8_t *L, uint8_t *block);

/* Kernels of cast_x86.c (element types) and quant_x86.c (block types) for
 * a SIMD level, 1 AVX2 (+F16C) or 2 AVX-512 (NULL where none): */
CKPT__HIDDEN ckpt__cast_fn ckpt__cast_simd_kernel(int level, ckpt_dtype from, ckpt_dtype to);
CKPT__HIDDEN ckpt__cast_fn ckpt__quant_simd_kernel(int level, ckpt_dtype from, ckpt_dtype to);

#endif
