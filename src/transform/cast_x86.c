/* cast_x86.c — SIMD kernels for the hot pairs (bf16/f16 ↔ f32), compiled for
 * their instruction sets with target attributes and chosen at run time by
 * cast.c.  Each matches the scalar conversion bit for bit, NaNs included.
 *
 * AVX512-BF16's VCVTNEPS2BF16 is not used: it flushes subnormal inputs to
 * zero, where torch (and ckpt) round them. */
#include <string.h>

#include "cast.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,f16c")))
#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,f16c")))

/* Scalar tails: src and dst may be unaligned, so elements go through
 * memcpy into locals. */
#define TAIL(name, S, D, conv)                                                                 \
    static inline void name(const void *src, void *dst, size_t i, size_t n) {                 \
        const unsigned char *s = src;                                                          \
        unsigned char *d = dst;                                                                \
        for (; i < n; i++) {                                                                   \
            S v;                                                                               \
            memcpy(&v, s + i * sizeof(S), sizeof(S));                                          \
            D w = conv(v);                                                                     \
            memcpy(d + i * sizeof(D), &w, sizeof(D));                                          \
        }                                                                                      \
    }
TAIL(tail_h2f, uint16_t, float, ckpt__f16_to_f32)
TAIL(tail_f2h, float, uint16_t, ckpt__f32_to_f16)
TAIL(tail_b2f, uint16_t, float, ckpt__bf16_to_f32)
TAIL(tail_f2b, float, uint16_t, ckpt__f32_to_bf16)

/* A kernel: STEP elements at a time by the statements that follow (s and
 * d the bytes, i the step's first element), the rest by the scalar TAIL. */
#define KERNEL(ATTR, NAME, STEP, TAIL, ...)                                                                            \
    ATTR static void NAME(const void *src, void *dst, size_t n) {                                                      \
        const unsigned char *s = src;                                                                                  \
        unsigned char *d = dst;                                                                                        \
        size_t i = 0;                                                                                                  \
        for (; i + STEP <= n; i += STEP) {                                                                             \
            __VA_ARGS__;                                                                                               \
        }                                                                                                              \
        TAIL(src, dst, i, n);                                                                                          \
    }

/* ---- AVX2 + F16C ---------------------------------------------------------- */

KERNEL(AVX2, avx2_f16_f32, 8, tail_h2f,
       _mm256_storeu_ps((float *)(d + 4 * i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i)))))

KERNEL(AVX2, avx2_f32_f16, 8, tail_f2h,
       _mm_storeu_si128((__m128i *)(d + 2 * i),
                        _mm256_cvtps_ph(_mm256_loadu_ps((const float *)(s + 4 * i)), _MM_FROUND_TO_NEAREST_INT)))

KERNEL(AVX2, avx2_bf16_f32, 8, tail_b2f,
       __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(s + 2 * i)));
       _mm256_storeu_si256((__m256i *)(d + 4 * i), _mm256_slli_epi32(w, 16)))

/* Round to nearest even on the integer bits; NaN → quiet NaN, sign kept. */
AVX2 static inline __m256i avx2_round_bf16(__m256i x) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
    __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs_mask), inf);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7FFF)), odd), 16);
    __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, quiet, is_nan);
}

/* packus works per 128-bit lane: the permute fixes the order of the four quarters. */
KERNEL(AVX2, avx2_f32_bf16, 16, tail_f2b, __m256i a = avx2_round_bf16(_mm256_loadu_si256((const __m256i *)(s + 4 * i)));
       __m256i b = avx2_round_bf16(_mm256_loadu_si256((const __m256i *)(s + 4 * i + 32)));
       _mm256_storeu_si256((__m256i *)(d + 2 * i), _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8)))

/* ---- AVX-512 --------------------------------------------------------------- */

KERNEL(AVX512, avx512_f16_f32, 16, tail_h2f,
       _mm512_storeu_ps(d + 4 * i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + 2 * i)))))

KERNEL(AVX512, avx512_f32_f16, 16, tail_f2h,
       _mm256_storeu_si256((__m256i *)(d + 2 * i),
                           _mm512_cvtps_ph(_mm512_loadu_ps(s + 4 * i), _MM_FROUND_TO_NEAREST_INT)))

KERNEL(AVX512, avx512_bf16_f32, 16, tail_b2f,
       __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
       _mm512_storeu_si512(d + 4 * i, _mm512_slli_epi32(w, 16)))

AVX512 static void avx512_f32_bf16(const void *src, void *dst, size_t n) {
    const unsigned char *s = src;
    unsigned char *d = dst;
    const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000);
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7FFF), qbit = _mm512_set1_epi32(0x40);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(s + 4 * i);
        __mmask16 is_nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, abs_mask), inf);
        __m512i hi = _mm512_srli_epi32(x, 16);
        __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_and_si512(hi, one)), 16);
        __m512i r = _mm512_mask_mov_epi32(rounded, is_nan, _mm512_or_si512(hi, qbit));
        _mm256_storeu_si256((__m256i *)(d + 2 * i), _mm512_cvtepi32_epi16(r));
    }
    tail_f2b(src, dst, i, n);
}

ckpt__cast_fn ckpt__cast_simd_kernel(int level, ckpt_dtype from, ckpt_dtype to) {
    if (level == 1) {
        if (from == CKPT_F16 && to == CKPT_F32) return avx2_f16_f32;
        if (from == CKPT_F32 && to == CKPT_F16) return avx2_f32_f16;
        if (from == CKPT_BF16 && to == CKPT_F32) return avx2_bf16_f32;
        if (from == CKPT_F32 && to == CKPT_BF16) return avx2_f32_bf16;
    } else if (level == 2) {
        if (from == CKPT_F16 && to == CKPT_F32) return avx512_f16_f32;
        if (from == CKPT_F32 && to == CKPT_F16) return avx512_f32_f16;
        if (from == CKPT_BF16 && to == CKPT_F32) return avx512_bf16_f32;
        if (from == CKPT_F32 && to == CKPT_BF16) return avx512_f32_bf16;
    }
    return NULL;
}

#else

ckpt__cast_fn ckpt__cast_simd_kernel(int level, ckpt_dtype from, ckpt_dtype to) {
    (void)level, (void)from, (void)to;
    return NULL;
}

#endif
