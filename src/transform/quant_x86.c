/* quant_x86.c — SIMD kernels for the hot block-type pairs: Q8_0, Q4_0,
 * Q4_K and Q6_K dequantized to F32, F16 and BF16, and F32, F16, BF16
 * quantized to Q8_0; compiled for their instruction sets with target
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

/* Q8_0: 32 int8 levels × the block's f16 scale (quant.c's deq_q8_0). */
#define AVX2_Q8_0(OUT, SIZE)                                                                                  \
    AVX2 static void avx2_q8_0_##OUT(const void *src, void *dst, size_t n) {                                 \
        const uint8_t *s = src;                                                                               \
        unsigned char *d = dst;                                                                               \
        for (size_t i = 0; i < n; i++, s += 34, d += 32 * SIZE) {                                            \
            __m256 scale = _mm256_set1_ps(f16_at(s));                                                         \
            __m256i q = _mm256_loadu_si256((const __m256i *)(s + 2));                                         \
            AVX2_PUT32(OUT, SIZE, d, q, scale);                                                               \
        }                                                                                                     \
    }
AVX2_Q8_0(f32, 4)
AVX2_Q8_0(f16, 2)
AVX2_Q8_0(bf16, 2)

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
    if (to == CKPT_Q8_0)
        return from == CKPT_F32 ? avx2_f32_q8_0 : from == CKPT_F16 ? avx2_f16_q8_0 : from == CKPT_BF16 ? avx2_bf16_q8_0 : NULL;
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
