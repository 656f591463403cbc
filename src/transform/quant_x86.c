/* quant_x86.c — SIMD kernels for the hot block-type pairs: Q8_0, Q4_0,
 * Q4_K and Q6_K dequantized to F32, F16 and BF16, and F32, F16, BF16
 * quantized to Q8_0, Q4_K, Q5_K and Q6_K (ggml's reference K-quantizers,
 * 8 sub-blocks at a time, one a lane); compiled for their instruction sets with target
 * attributes and chosen at run time by cast.c.  Each equals quant.c's
 * scalar kernel bit for bit: the same float32 products and differences
 * (this file is compiled with -ffp-contract=off, so that no product and
 * difference fuse into one rounding), the same float16/bfloat16 rounding as
 * cast_x86.c's, and quant.c's own code for a Q8_0 block whose scale is not
 * finite. */
#include <math.h>
#include <string.h>

#include "cast.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return ckpt__f16_to_f32(h);
}

/* ---- AVX2: 8 float32 values out as F32, F16 or BF16 ---------------------- */

AVX2 static inline void put8_f32(unsigned char *d, __m256 v) { _mm256_storeu_ps((float *)d, v); }

AVX2 static inline void put8_f16(unsigned char *d, __m256 v) {
    _mm_storeu_si128((__m128i *)d, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* Round to nearest even on the integer bits; NaN → quiet NaN, sign kept
 * (ckpt__f32_to_bf16, as cast_x86.c's avx2_round_bf16). */
AVX2 static inline void put8_bf16(unsigned char *d, __m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), odd), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    __m256i r = _mm256_blendv_epi8(rounded, quiet, is_nan);
    __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128((__m128i *)d, packed);
}

/* 32 signed bytes (each a level) times a scale, out as 4 × 8 values. */
#define AVX2_PUT32(OUT, SIZE, d, q8, scale)                                                                  \
    do {                                                                                                      \
        __m128i lo_ = _mm256_castsi256_si128(q8), hi_ = _mm256_extracti128_si256(q8, 1);                      \
        put8_##OUT((d), _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo_)), scale));                 \
        put8_##OUT((d) + 8 * SIZE, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo_, 8))), scale)); \
        put8_##OUT((d) + 16 * SIZE, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi_)), scale));     \
        put8_##OUT((d) + 24 * SIZE, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi_, 8))), scale)); \
    } while (0)

/* The f16 at p widened by F16C, in every lane: exact, and a NaN quieted
 * with its payload kept, as ckpt__f16_to_f32 — without a call per block,
 * which costs the loop its vzeroupper and its constants' registers. */
AVX2 static inline __m256 f16_splat(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

/* Q8_0: 32 int8 levels × the block's f16 scale (quant.c's deq_q8_0). */
#define AVX2_Q8_0(OUT, SIZE)                                                                                  \
    AVX2 static void avx2_q8_0_##OUT(const void *src, void *dst, size_t n) {                                 \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        for (size_t i = 0; i < n; i++, s += 34, d += 32 * SIZE) {                                            \
            __m256 scale = f16_splat(s);                                                                      \
            __m256i q = _mm256_loadu_si256((const __m256i *)(s + 2));                                         \
            AVX2_PUT32(OUT, SIZE, d, q, scale);                                                               \
        }                                                                                                     \
    }
AVX2_Q8_0(f32, 4)
AVX2_Q8_0(f16, 2)

/* 8 finite float32 values rounded to bfloat16 (to nearest even), each in
 * its lane's low half: put8_bf16 without the NaN case. */
AVX2 static inline __m256i bf16_finite(__m256 f) {
    const __m256i x = _mm256_castps_si256(f);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), odd), 16);
}

/* Q8_0 to BF16, the hot pair (a GGUF back to Hugging Face).  A finite
 * scale makes every product finite (at most 128 × 65504) and exact (8
 * bits times 11), so only its rounding remains, and two vectors of eight
 * are packed at once (the pack interleaves 128-bit lanes; the permute puts
 * them back in order); a block with an infinite or NaN scale goes through
 * put8_bf16's NaN case. */
AVX2 static void avx2_q8_0_bf16(const void *src, void *dst, size_t n) {
    const uint8_t *s = src;
    unsigned char *d = dst;
    for (size_t i = 0; i < n; i++, s += 34, d += 64) {
        __m256 scale = f16_splat(s);
        __m256i q = _mm256_loadu_si256((const __m256i *)(s + 2));
        if ((s[1] & 0x7C) == 0x7C) { /* exponent all ones: ±Inf or NaN */
            AVX2_PUT32(bf16, 2, d, q, scale);
            continue;
        }
        __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
        __m256 v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), scale);
        __m256 v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), scale);
        __m256 v2 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), scale);
        __m256 v3 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), scale);
        __m256i a = _mm256_packus_epi32(bf16_finite(v0), bf16_finite(v1));
        __m256i b = _mm256_packus_epi32(bf16_finite(v2), bf16_finite(v3));
        _mm256_storeu_si256((__m256i *)d, _mm256_permute4x64_epi64(a, 0xD8));
        _mm256_storeu_si256((__m256i *)(d + 32), _mm256_permute4x64_epi64(b, 0xD8));
    }
}

/* Q4_0: low nibbles are values 0-15, high nibbles 16-31, each minus 8. */
#define AVX2_Q4_0(OUT, SIZE)                                                                                  \
    AVX2 static void avx2_q4_0_##OUT(const void *src, void *dst, size_t n) {                                 \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        const __m128i mask = _mm_set1_epi8(0x0F), eight = _mm_set1_epi8(8);                                   \
        for (size_t i = 0; i < n; i++, s += 18, d += 32 * SIZE) {                                            \
            __m256 scale = _mm256_set1_ps(f16_at(s));                                                         \
            __m128i b = _mm_loadu_si128((const __m128i *)(s + 2));                                            \
            __m128i lo = _mm_sub_epi8(_mm_and_si128(b, mask), eight);                                         \
            __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(b, 4), mask), eight);                      \
            __m256i q = _mm256_set_m128i(hi, lo);                                                             \
            AVX2_PUT32(OUT, SIZE, d, q, scale);                                                               \
        }                                                                                                     \
    }
AVX2_Q4_0(f32, 4)
AVX2_Q4_0(f16, 2)
AVX2_Q4_0(bf16, 2)

/* 8 unsigned levels (bytes) × dl − ml. */
#define AVX2_PUT8_AFFINE(OUT, d, u8, dl, ml)                                                                 \
    put8_##OUT((d), _mm256_sub_ps(_mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(u8))), ml))

/* Q4_K: 8 sub-blocks of 32, each d·scale × level − dmin·min (quant.c's
 * deq_q4_k), sub-block i's levels the low (even i) or high nibbles of
 * 32 bytes. */
#define AVX2_Q4_K(OUT, SIZE)                                                                                  \
    AVX2 static void avx2_q4_k_##OUT(const void *src, void *dst, size_t n) {                                 \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        const __m256i mask = _mm256_set1_epi8(0x0F);                                                          \
        for (size_t b = 0; b < n; b++, s += 144) {                                                            \
            float dd = f16_at(s), dmin = f16_at(s + 2);                                                       \
            uint8_t sc[8], mn[8];                                                                             \
            ckpt__quant_scale_min_k4(s + 4, sc, mn);                                                          \
            for (int i = 0; i < 8; i++, d += 32 * SIZE) {                                                     \
                __m256 dl = _mm256_set1_ps(dd * (float)sc[i]), ml = _mm256_set1_ps(dmin * (float)mn[i]);      \
                __m256i v = _mm256_loadu_si256((const __m256i *)(s + 16 + (i / 2) * 32));                     \
                __m256i q = _mm256_and_si256(i % 2 ? _mm256_srli_epi16(v, 4) : v, mask);                      \
                __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);                  \
                AVX2_PUT8_AFFINE(OUT, d, lo, dl, ml);                                                         \
                AVX2_PUT8_AFFINE(OUT, d + 8 * SIZE, _mm_srli_si128(lo, 8), dl, ml);                           \
                AVX2_PUT8_AFFINE(OUT, d + 16 * SIZE, hi, dl, ml);                                             \
                AVX2_PUT8_AFFINE(OUT, d + 24 * SIZE, _mm_srli_si128(hi, 8), dl, ml);                          \
            }                                                                                                 \
        }                                                                                                     \
    }
AVX2_Q4_K(f32, 4)
AVX2_Q4_K(f16, 2)
AVX2_Q4_K(bf16, 2)

/* Q6_K: runs of 32 values (g = run / 4, s = run % 4) take 4 low bits from
 * ql[g·64 + (s & 1)·32 …] (high nibble when s ≥ 2) and 2 high bits from
 * qh[g·32 …] at bit 2s, minus 32; each 16 values have their int8 scale
 * (quant.c's deq_q6_k). */
#define AVX2_Q6_K(OUT, SIZE)                                                                                  \
    AVX2 static void avx2_q6_k_##OUT(const void *src, void *dst, size_t n) {                                 \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);      \
        for (size_t b = 0; b < n; b++, s += 210) {                                                            \
            float dd = f16_at(s + 208);                                                                       \
            const int8_t *sc = (const int8_t *)(s + 192);                                                     \
            for (int run = 0; run < 8; run++, d += 32 * SIZE) {                                               \
                int g = run / 4, r = run % 4;                                                                 \
                __m256i l = _mm256_loadu_si256((const __m256i *)(s + g * 64 + (r & 1) * 32));                 \
                __m256i h = _mm256_loadu_si256((const __m256i *)(s + 128 + g * 32));                          \
                l = _mm256_and_si256(r >= 2 ? _mm256_srli_epi16(l, 4) : l, m4);                               \
                h = _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(2 * r)), m2);                      \
                __m256i q = _mm256_sub_epi8(_mm256_or_si256(l, _mm256_slli_epi16(h, 4)), k32);                \
                __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);                  \
                __m256 d0 = _mm256_set1_ps(dd * (float)sc[run * 2]), d1 = _mm256_set1_ps(dd * (float)sc[run * 2 + 1]); \
                put8_##OUT(d, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));              \
                put8_##OUT(d + 8 * SIZE, _mm256_mul_ps(d0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))))); \
                put8_##OUT(d + 16 * SIZE, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));   \
                put8_##OUT(d + 24 * SIZE, _mm256_mul_ps(d1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))))); \
            }                                                                                                 \
        }                                                                                                     \
    }
AVX2_Q6_K(f32, 4)
AVX2_Q6_K(f16, 2)
AVX2_Q6_K(bf16, 2)

/* ---- AVX2: F32, F16, BF16 → Q8_0 ------------------------------------------- */

AVX2 static inline __m256 get8_f32(const unsigned char *s) { return _mm256_loadu_ps((const float *)s); }
AVX2 static inline __m256 get8_f16(const unsigned char *s) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)s)); }
AVX2 static inline __m256 get8_bf16(const unsigned char *s) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s)), 16));
}

/* quant.c's np_roundf of v = x × id where every v is finite: |v|
 * truncated, plus one when the fraction is at least one half, signed. */
AVX2 static inline __m256i round8(__m256 x, __m256 id) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v = _mm256_mul_ps(x, id), a = _mm256_andnot_ps(sign, v);
    __m256i t = _mm256_cvttps_epi32(a);
    __m256 frac = _mm256_sub_ps(a, _mm256_cvtepi32_ps(t));
    __m256i up = _mm256_castps_si256(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ));
    __m256i r = _mm256_sub_epi32(t, up);
    __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
    return _mm256_blendv_epi8(r, _mm256_sub_epi32(_mm256_setzero_si256(), r), neg);
}

/* One block of 32 values: the vector path when the scale is finite and no
 * value is a NaN, else quant.c's own. */
AVX2 static inline void avx2_q8_0_block(const __m256 x[4], uint8_t *b) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_and_ps(x[0], abs_mask), _mm256_and_ps(x[1], abs_mask)),
                             _mm256_max_ps(_mm256_and_ps(x[2], abs_mask), _mm256_and_ps(x[3], abs_mask)));
    __m256 unord = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(x[0], x[0], _CMP_UNORD_Q), _mm256_cmp_ps(x[1], x[1], _CMP_UNORD_Q)),
                                _mm256_or_ps(_mm256_cmp_ps(x[2], x[2], _CMP_UNORD_Q), _mm256_cmp_ps(x[3], x[3], _CMP_UNORD_Q)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1)));
    float dd = amax / 127.0f, id = dd == 0 ? 0.0f : 1.0f / dd;
    if (_mm256_movemask_ps(unord) || !isfinite(dd) || !isfinite(id)) {
        float tmp[32];
        for (int k = 0; k < 4; k++) _mm256_storeu_ps(tmp + 8 * k, x[k]);
        ckpt__quant_q8_0_block(tmp, b);
        return;
    }
    uint16_t h = ckpt__f32_to_f16(dd);
    memcpy(b, &h, 2);
    __m256 vid = _mm256_set1_ps(id);
    __m256i ab = _mm256_packs_epi32(round8(x[0], vid), round8(x[1], vid));
    __m256i cd = _mm256_packs_epi32(round8(x[2], vid), round8(x[3], vid));
    /* packs works per 128-bit lane: put the eight groups of four back in order */
    __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)(b + 2), q);
}

#define AVX2_TO_Q8_0(IN, SIZE)                                                                                \
    AVX2 static void avx2_##IN##_q8_0(const void *src, void *dst, size_t n) {                                \
        const unsigned char *s = src;                                                                         \
        uint8_t *d = dst;                                                                                     \
        for (size_t i = 0; i < n; i++, s += 32 * SIZE, d += 34) {                                            \
            __m256 x[4] = {get8_##IN(s), get8_##IN(s + 8 * SIZE), get8_##IN(s + 16 * SIZE), get8_##IN(s + 24 * SIZE)}; \
            avx2_q8_0_block(x, d);                                                                            \
        }                                                                                                     \
    }
AVX2_TO_Q8_0(f32, 4)
AVX2_TO_Q8_0(f16, 2)
AVX2_TO_Q8_0(bf16, 2)

/* ---- AVX2: F32, F16, BF16 → Q4_K, Q5_K, Q6_K --------------------------------
 *
 * ggml's reference K-quantizers (quant.c's q_q4_k, q_q5_k, q_q6_k) work on
 * each sub-block of a block alone: 32 values for Q4_K and Q5_K, 16 for Q6_K,
 * each value's sums accumulated in order.  Here one lane holds one
 * sub-block (8 at a time), so that every lane runs quant.c's float32
 * operations in quant.c's order and the block is the same bit for bit: the
 * block is transposed so that vector i holds value i of each sub-block, the
 * comparisons are quant.c's (ordered, so a NaN compares false as in C; minps
 * and maxps keep the second operand unless the first is smaller/greater, as
 * quant.c's `if (x < min) min = x`), and quant.c's branches become masks. */

/* 8 rows of 8 floats transposed in place: r[k] lane j = row j's element k. */
AVX2 static inline void transpose8(__m256 r[8]) {
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Sub-blocks of `len` values, `rows` apart in x (8 of them from `first`),
 * as len vectors: xt[i] lane j = value i of sub-block first + j. */
AVX2 static inline void to_lanes(const float *x, int len, __m256 *xt) {
    for (int c = 0; c < len; c += 8) {
        for (int j = 0; j < 8; j++) xt[c + j] = _mm256_loadu_ps(x + len * j + c);
        transpose8(xt + c);
    }
}

/* The inverse for levels: L[len·j + i] = lane j of Lt[i], as bytes. */
AVX2 static inline void from_lanes(const __m256i *Lt, int len, uint8_t *L) {
    for (int c = 0; c < len; c += 8) {
        __m256 r[8];
        for (int k = 0; k < 8; k++) r[k] = _mm256_castsi256_ps(Lt[c + k]);
        transpose8(r);
        for (int j = 0; j < 8; j++) {
            __m256i v = _mm256_castps_si256(r[j]);
            __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            _mm_storel_epi64((__m128i *)(L + len * j + c), _mm_packus_epi16(w, w));
        }
    }
}

/* quant.c's nearest_int, lane by lane. */
AVX2 static inline __m256i nearest8(__m256 v) {
    __m256i i = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}

AVX2 static inline __m256i clamp8(__m256i v, int lo, int hi) {
    return _mm256_max_epi32(_mm256_set1_epi32(lo), _mm256_min_epi32(_mm256_set1_epi32(hi), v));
}

#define GT(a, b) _mm256_cmp_ps(a, b, _CMP_GT_OQ)
#define LT(a, b) _mm256_cmp_ps(a, b, _CMP_LT_OQ)

/* quant.c's make_qkx2_quants for 32-value sub-blocks, one per lane: the
 * scales returned, the negated minimums in *the_min, the levels in Lt. */
AVX2 static __m256 avx2_qkx2(const __m256 *xt, const __m256 *wt, __m256i *Lt, __m256 *the_min, int nmax, float rmin,
                              float rdelta, int nstep) {
    const __m256 zero = _mm256_setzero_ps(), fmax = _mm256_set1_ps((float)nmax);
    __m256 min = xt[0], max = xt[0], sum_w = wt[0], sum_x = _mm256_mul_ps(sum_w, xt[0]);
    for (int i = 1; i < 32; ++i) {
        min = _mm256_min_ps(xt[i], min);
        max = _mm256_max_ps(xt[i], max);
        sum_w = _mm256_add_ps(sum_w, wt[i]);
        sum_x = _mm256_add_ps(sum_x, _mm256_mul_ps(wt[i], xt[i]));
    }
    min = _mm256_blendv_ps(min, zero, GT(min, zero));
    __m256 flat = _mm256_cmp_ps(max, min, _CMP_EQ_OQ), flat_min = min;
    __m256 range = _mm256_sub_ps(max, min);
    __m256 iscale = _mm256_div_ps(fmax, range), scale = _mm256_div_ps(_mm256_set1_ps(1.f), iscale);
    __m256 best_error = zero;
    for (int i = 0; i < 32; ++i) {
        Lt[i] = clamp8(nearest8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
        __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(scale, _mm256_cvtepi32_ps(Lt[i])), min), xt[i]);
        best_error = _mm256_add_ps(best_error, _mm256_mul_ps(wt[i], _mm256_mul_ps(diff, diff)));
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = _mm256_div_ps(_mm256_set1_ps(rmin + rdelta * is + nmax), _mm256_sub_ps(max, min));
        __m256 sum_l = zero, sum_l2 = zero, sum_xl = zero;
        __m256i Laux[32];
        __m256 lf[32];
        for (int i = 0; i < 32; ++i) {
            Laux[i] = clamp8(nearest8(_mm256_mul_ps(iscale, _mm256_sub_ps(xt[i], min))), 0, nmax);
            lf[i] = _mm256_cvtepi32_ps(Laux[i]);
            __m256 wl = _mm256_mul_ps(wt[i], lf[i]);
            sum_l = _mm256_add_ps(sum_l, wl);
            sum_l2 = _mm256_add_ps(sum_l2, _mm256_mul_ps(wl, lf[i]));
            sum_xl = _mm256_add_ps(sum_xl, _mm256_mul_ps(wl, xt[i]));
        }
        __m256 D = _mm256_sub_ps(_mm256_mul_ps(sum_w, sum_l2), _mm256_mul_ps(sum_l, sum_l));
        __m256 ok = GT(D, zero);
        if (!_mm256_movemask_ps(ok)) continue;
        __m256 this_scale = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_w, sum_xl), _mm256_mul_ps(sum_x, sum_l)), D);
        __m256 this_min = _mm256_div_ps(_mm256_sub_ps(_mm256_mul_ps(sum_l2, sum_x), _mm256_mul_ps(sum_l, sum_xl)), D);
        __m256 pos = GT(this_min, zero);
        this_min = _mm256_blendv_ps(this_min, zero, pos);
        this_scale = _mm256_blendv_ps(this_scale, _mm256_div_ps(sum_xl, sum_l2), pos);
        __m256 cur_error = zero;
        for (int i = 0; i < 32; ++i) {
            __m256 diff = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(this_scale, lf[i]), this_min), xt[i]);
            cur_error = _mm256_add_ps(cur_error, _mm256_mul_ps(wt[i], _mm256_mul_ps(diff, diff)));
        }
        __m256 better = _mm256_and_ps(ok, LT(cur_error, best_error));
        if (!_mm256_movemask_ps(better)) continue;
        __m256i take = _mm256_castps_si256(better);
        for (int i = 0; i < 32; ++i) Lt[i] = _mm256_blendv_epi8(Lt[i], Laux[i], take);
        best_error = _mm256_blendv_ps(best_error, cur_error, better);
        scale = _mm256_blendv_ps(scale, this_scale, better);
        min = _mm256_blendv_ps(min, this_min, better);
    }
    /* a sub-block of one value: levels 0, scale 0, the minimum as found */
    __m256i flat_i = _mm256_castps_si256(flat);
    for (int i = 0; i < 32; ++i) Lt[i] = _mm256_andnot_si256(flat_i, Lt[i]);
    min = _mm256_blendv_ps(min, flat_min, flat);
    *the_min = _mm256_xor_ps(min, _mm256_set1_ps(-0.0f));
    return _mm256_blendv_ps(scale, zero, flat);
}

/* quant.c's q_k4_levels: d, dmin and the packed scales written to b, the
 * block's levels to L. */
AVX2 static void avx2_k4_levels(const float *x, uint8_t *b, uint8_t *L, int nmax, float rmin, int nstep) {
    __m256 xt[32], wt[32], sum_x2 = _mm256_setzero_ps();
    __m256i Lt[32];
    to_lanes(x, 32, xt);
    for (int l = 0; l < 32; ++l) sum_x2 = _mm256_add_ps(sum_x2, _mm256_mul_ps(xt[l], xt[l]));
    __m256 av_x = _mm256_sqrt_ps(_mm256_div_ps(sum_x2, _mm256_set1_ps(32.f)));
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int l = 0; l < 32; ++l) wt[l] = _mm256_add_ps(av_x, _mm256_and_ps(xt[l], abs_mask));
    __m256 vmins;
    __m256 vscales = avx2_qkx2(xt, wt, Lt, &vmins, nmax, rmin, 0.1f, nstep);
    float scales[8], mins[8], max_scale = 0, max_min = 0;
    _mm256_storeu_ps(scales, vscales);
    _mm256_storeu_ps(mins, vmins);
    for (int j = 0; j < 8; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    ckpt__quant_k4_scales(b, scales, mins, max_scale, max_min);
    uint8_t sc[8], mn[8];
    ckpt__quant_scale_min_k4(b + 4, sc, mn);
    float d[8], dm[8];
    for (int j = 0; j < 8; ++j) d[j] = f16_at(b) * sc[j], dm[j] = f16_at(b + 2) * mn[j];
    __m256 vd = _mm256_loadu_ps(d), vdm = _mm256_loadu_ps(dm);
    /* ggml keeps make_qkx2_quants' levels where d is 0 */
    __m256i redo = _mm256_castps_si256(_mm256_cmp_ps(vd, _mm256_setzero_ps(), _CMP_NEQ_UQ));
    for (int i = 0; i < 32; ++i)
        Lt[i] = _mm256_blendv_epi8(Lt[i], clamp8(nearest8(_mm256_div_ps(_mm256_add_ps(xt[i], vdm), vd)), 0, nmax), redo);
    from_lanes(Lt, 32, L);
}

/* quant.c's make_qx_quants (Q6_K's: nmax 32) for 16-value sub-blocks, one
 * per lane: the scales returned, the levels + 32 in Lt. */
AVX2 static __m256 avx2_qx(const __m256 *xt, __m256i *Lt) {
    const int nmax = 32;
    const __m256 zero = _mm256_setzero_ps(), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 max = zero, amax = zero;
    for (int i = 0; i < 16; ++i) {
        __m256 ax = _mm256_and_ps(xt[i], abs_mask), bigger = GT(ax, amax);
        amax = _mm256_blendv_ps(amax, ax, bigger);
        max = _mm256_blendv_ps(max, xt[i], bigger);
    }
    __m256 tiny = LT(amax, _mm256_set1_ps(1e-15f));
    __m256 w[16], sumlx = zero, suml2 = zero;
    __m256 iscale = _mm256_div_ps(_mm256_set1_ps((float)-nmax), max);
    for (int i = 0; i < 16; ++i) {
        __m256i l = clamp8(nearest8(_mm256_mul_ps(iscale, xt[i])), -nmax, nmax - 1);
        Lt[i] = _mm256_add_epi32(l, _mm256_set1_epi32(nmax));
        __m256 lf = _mm256_cvtepi32_ps(l);
        w[i] = _mm256_mul_ps(xt[i], xt[i]);
        sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w[i], xt[i]), lf));
        suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], lf), lf));
    }
    __m256 scale = _mm256_and_ps(_mm256_cmp_ps(suml2, zero, _CMP_NEQ_UQ), _mm256_div_ps(sumlx, suml2));
    __m256 best = _mm256_mul_ps(scale, sumlx);
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = _mm256_div_ps(_mm256_set1_ps(-(nmax + 0.1f * is)), max);
        __m256i l[16];
        sumlx = suml2 = zero;
        for (int i = 0; i < 16; ++i) {
            l[i] = clamp8(nearest8(_mm256_mul_ps(iscale, xt[i])), -nmax, nmax - 1);
            __m256 lf = _mm256_cvtepi32_ps(l[i]);
            sumlx = _mm256_add_ps(sumlx, _mm256_mul_ps(_mm256_mul_ps(w[i], xt[i]), lf));
            suml2 = _mm256_add_ps(suml2, _mm256_mul_ps(_mm256_mul_ps(w[i], lf), lf));
        }
        __m256 better = _mm256_and_ps(GT(suml2, zero),
                                      GT(_mm256_mul_ps(sumlx, sumlx), _mm256_mul_ps(best, suml2)));
        if (!_mm256_movemask_ps(better)) continue;
        __m256i take = _mm256_castps_si256(better);
        for (int i = 0; i < 16; ++i)
            Lt[i] = _mm256_blendv_epi8(Lt[i], _mm256_add_epi32(l[i], _mm256_set1_epi32(nmax)), take);
        scale = _mm256_blendv_ps(scale, _mm256_div_ps(sumlx, suml2), better);
        best = _mm256_blendv_ps(best, _mm256_mul_ps(scale, sumlx), better);
    }
    __m256i tiny_i = _mm256_castps_si256(tiny);
    for (int i = 0; i < 16; ++i) Lt[i] = _mm256_andnot_si256(tiny_i, Lt[i]);
    return _mm256_blendv_ps(scale, zero, tiny);
}

/* quant.c's q_q6_k: 16 sub-blocks of 16, as two sets of 8 lanes. */
AVX2 static void avx2_q6_k_block(const float *x, uint8_t *b) {
    __m256 xt[2][16];
    __m256i Lt[2][16];
    float scales[16];
    for (int h = 0; h < 2; h++) {
        to_lanes(x + 128 * h, 16, xt[h]);
        _mm256_storeu_ps(scales + 8 * h, avx2_qx(xt[h], Lt[h]));
    }
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < 16; ++ib)
        if (fabsf(scales[ib]) > max_abs_scale) max_abs_scale = fabsf(scales[ib]), max_scale = scales[ib];
    if (max_abs_scale < 1e-15f) {
        memset(b, 0, 210);
        return;
    }
    int8_t *sc = (int8_t *)(b + 192);
    ckpt__quant_q6_k_scales(b, scales, max_scale);
    for (int h = 0; h < 2; h++) {
        float d[8];
        for (int j = 0; j < 8; ++j) d[j] = f16_at(b + 208) * sc[8 * h + j];
        __m256 vd = _mm256_loadu_ps(d);
        __m256i redo = _mm256_castps_si256(_mm256_cmp_ps(vd, _mm256_setzero_ps(), _CMP_NEQ_UQ));
        for (int i = 0; i < 16; ++i) {
            __m256i l = clamp8(nearest8(_mm256_div_ps(xt[h][i], vd)), -32, 31);
            Lt[h][i] = _mm256_blendv_epi8(Lt[h][i], _mm256_add_epi32(l, _mm256_set1_epi32(32)), redo);
        }
    }
    uint8_t L[256];
    from_lanes(Lt[0], 16, L);
    from_lanes(Lt[1], 16, L + 128);
    ckpt__quant_q6_k_pack(L, b);
}

AVX2 static void avx2_q4_k_block(const float *x, uint8_t *b) {
    uint8_t L[256];
    avx2_k4_levels(x, b, L, 15, -1.f, 20);
    ckpt__quant_q4_k_pack(L, b);
}

AVX2 static void avx2_q5_k_block(const float *x, uint8_t *b) {
    uint8_t L[256];
    avx2_k4_levels(x, b, L, 31, -0.5f, 15);
    ckpt__quant_q5_k_pack(L, b);
}

#undef GT
#undef LT

/* A K-quant kernel: each block's 256 values widened to float32, then
 * quantized. */
#define AVX2_TO_K(IN, SIZE, Q, BYTES)                                                                         \
    AVX2 static void avx2_##IN##_##Q(const void *src, void *dst, size_t n) {                                 \
        const unsigned char *s = src;                                                                         \
        uint8_t *d = dst;                                                                                     \
        float x[256];                                                                                         \
        for (size_t i = 0; i < n; i++, s += 256 * SIZE, d += BYTES) {                                        \
            for (int k = 0; k < 256; k += 8) _mm256_storeu_ps(x + k, get8_##IN(s + k * SIZE));                 \
            avx2_##Q##_block(x, d);                                                                           \
        }                                                                                                     \
    }
#define AVX2_TO_K_ALL(Q, BYTES) AVX2_TO_K(f32, 4, Q, BYTES) AVX2_TO_K(f16, 2, Q, BYTES) AVX2_TO_K(bf16, 2, Q, BYTES)
AVX2_TO_K_ALL(q4_k, 144)
AVX2_TO_K_ALL(q5_k, 176)
AVX2_TO_K_ALL(q6_k, 210)

/* ---- AVX-512: Q8_0 dequantized 16 values at a time ----------------------- */

AVX512 static inline void put16_f32(unsigned char *d, __m512 v) { _mm512_storeu_ps(d, v); }
AVX512 static inline void put16_f16(unsigned char *d, __m512 v) {
    _mm256_storeu_si256((__m256i *)d, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
AVX512 static inline void put16_bf16(unsigned char *d, __m512 f) {
    const __m512i x = _mm512_castps_si512(f);
    __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7FFFFFFF)),
                                               _mm512_set1_epi32(0x7F800000));
    __m512i hi = _mm512_srli_epi32(x, 16);
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7FFF)), _mm512_and_si512(hi, _mm512_set1_epi32(1))), 16);
    __m512i r = _mm512_mask_mov_epi32(rounded, is_nan, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(r));
}

#define AVX512_Q8_0(OUT, SIZE)                                                                                \
    AVX512 static void avx512_q8_0_##OUT(const void *src, void *dst, size_t n) {                             \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        for (size_t i = 0; i < n; i++, s += 34, d += 32 * SIZE) {                                            \
            __m512 scale = _mm512_set1_ps(f16_at(s));                                                         \
            __m128i lo = _mm_loadu_si128((const __m128i *)(s + 2)), hi = _mm_loadu_si128((const __m128i *)(s + 18)); \
            put16_##OUT(d, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lo)), scale));               \
            put16_##OUT(d + 16 * SIZE, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(hi)), scale));   \
        }                                                                                                     \
    }
AVX512_Q8_0(f32, 4)
AVX512_Q8_0(f16, 2)
AVX512_Q8_0(bf16, 2)

ckpt__cast_fn ckpt__quant_simd_kernel(int level, ckpt_dtype from, ckpt_dtype to) {
    static const struct { ckpt_dtype d; ckpt__cast_fn f32, f16, bf16; } avx2_deq[] = {
        {CKPT_Q8_0, avx2_q8_0_f32, avx2_q8_0_f16, avx2_q8_0_bf16},
        {CKPT_Q4_0, avx2_q4_0_f32, avx2_q4_0_f16, avx2_q4_0_bf16},
        {CKPT_Q4_K, avx2_q4_k_f32, avx2_q4_k_f16, avx2_q4_k_bf16},
        {CKPT_Q6_K, avx2_q6_k_f32, avx2_q6_k_f16, avx2_q6_k_bf16},
    };
    if (level == 2 && from == CKPT_Q8_0)
        return to == CKPT_F32 ? avx512_q8_0_f32 : to == CKPT_F16 ? avx512_q8_0_f16 : to == CKPT_BF16 ? avx512_q8_0_bf16 : NULL;
    if (level != 1) return NULL;
    static const struct { ckpt_dtype d; ckpt__cast_fn f32, f16, bf16; } avx2_quant[] = {
        {CKPT_Q8_0, avx2_f32_q8_0, avx2_f16_q8_0, avx2_bf16_q8_0},
        {CKPT_Q4_K, avx2_f32_q4_k, avx2_f16_q4_k, avx2_bf16_q4_k},
        {CKPT_Q5_K, avx2_f32_q5_k, avx2_f16_q5_k, avx2_bf16_q5_k},
        {CKPT_Q6_K, avx2_f32_q6_k, avx2_f16_q6_k, avx2_bf16_q6_k},
    };
    for (size_t i = 0; i < sizeof avx2_quant / sizeof *avx2_quant; i++)
        if (avx2_quant[i].d == to)
            return from == CKPT_F32 ? avx2_quant[i].f32 : from == CKPT_F16 ? avx2_quant[i].f16 : from == CKPT_BF16 ? avx2_quant[i].bf16 : NULL;
    for (size_t i = 0; i < sizeof avx2_deq / sizeof *avx2_deq; i++)
        if (avx2_deq[i].d == from)
            return to == CKPT_F32 ? avx2_deq[i].f32 : to == CKPT_F16 ? avx2_deq[i].f16 : to == CKPT_BF16 ? avx2_deq[i].bf16 : NULL;
    return NULL;
}

#else

ckpt__cast_fn ckpt__quant_simd_kernel(int level, ckpt_dtype from, ckpt_dtype to) {
    (void)level, (void)from, (void)to;
    return NULL;
}

#endif
