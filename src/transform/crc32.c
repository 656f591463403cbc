/* crc32.c — see crc32.h. */
#include "crc32.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t zlib_crc32(uint32_t crc, const void *data, size_t len) {
    return (uint32_t)crc32_z(crc, (const Bytef *)data, (z_size_t)len);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define CLMUL __attribute__((target("pclmul,sse4.1")))
#define VCLMUL __attribute__((target("avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1")))

/*
 * The folding constants of the paper's bit-reflected variant for
 * P = 0x104C11DB7, each a 33-bit residue of a power of x modulo P (shifted
 * left once, as reflection asks):
 *   k1, k2   x^(4·128+32), x^(4·128−32): fold four 128-bit lanes over 64 bytes;
 *   k3, k4   x^(128+32), x^(128−32): fold one lane into the next (16 bytes);
 *   k5       x^64: fold 128 bits down to 96, then 64;
 *   mu, p    floor(x^64 / P) and P: the Barrett reduction to 32 bits.
 * With VPCLMULQDQ, four 512-bit lanes fold over 256 bytes (x^(4·512±32)),
 * and the four 128-bit lanes of the last one fold into its top lane from
 * 384, 256 and 128 bits away.  (k(n) = reflect32(x^n mod P) << 1.)
 */
static const uint64_t K12[2] __attribute__((aligned(16))) = {0x154442bd4, 0x1c6e41596};
static const uint64_t K34[2] __attribute__((aligned(16))) = {0x1751997d0, 0x0ccaa009e};
static const uint64_t K2048[2] __attribute__((aligned(16))) = {0x11542778a, 0x1322d1430};
static const uint64_t KLANES[8] __attribute__((aligned(64))) = {0x03db1ecdc, 0x174359406, 0x0f1da05aa, 0x15a546366,
                                                                0x1751997d0, 0x0ccaa009e, 0, 0};
static const uint64_t K5[2] __attribute__((aligned(16))) = {0x163cd6124, 0};
static const uint64_t POLY[2] __attribute__((aligned(16))) = {0x1db710641, 0x1f7011641}; /* p, mu */

/* a·k.lo ⊕ b·k.hi, carry-less: one lane folded 128·n bits forward. */
CLMUL static inline __m128i fold_lane(__m128i lane, __m128i k, __m128i next) {
    __m128i lo = _mm_clmulepi64_si128(lane, k, 0x00), hi = _mm_clmulepi64_si128(lane, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

/* One 128-bit lane `a` carrying the CRC of everything before p: folds the
 * `len` (a multiple of 16) bytes at p into it, then reduces it to the CRC
 * register. */
CLMUL static uint32_t finish(__m128i a, const unsigned char *p, size_t len) {
    __m128i k = _mm_load_si128((const __m128i *)K34);
    for (; len >= 16; p += 16, len -= 16) a = fold_lane(a, k, _mm_loadu_si128((const __m128i *)p));
    /* 128 bits to 64: the low half times k4 into the high half, then the
     * low 32 bits times k5 into the rest. */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k, 0x10));
    __m128i rest = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), _mm_load_si128((const __m128i *)K5), 0x00), rest);
    /* Barrett: t = (a mod x^32)·mu, keep its low 32 bits, times p; the
     * remainder is in bits 32..63. */
    __m128i poly = _mm_load_si128((const __m128i *)POLY);
    __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), poly, 0x10), low32);
    a = _mm_xor_si128(a, _mm_clmulepi64_si128(t, poly, 0x00));
    return (uint32_t)_mm_extract_epi32(a, 1);
}

/* The CRC register (pre- and post-inversion are the caller's) after `len`
 * bytes: len ≥ 64 and a multiple of 16. */
CLMUL static uint32_t fold(uint32_t reg, const unsigned char *p, size_t len) {
    __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32)), d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)reg));
    __m128i k = _mm_load_si128((const __m128i *)K12);
    for (p += 64, len -= 64; len >= 64; p += 64, len -= 64) {
        a = fold_lane(a, k, _mm_loadu_si128((const __m128i *)p));
        b = fold_lane(b, k, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = fold_lane(c, k, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = fold_lane(d, k, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    /* Four lanes into one, then the remaining 16-byte blocks into it. */
    k = _mm_load_si128((const __m128i *)K34);
    a = fold_lane(a, k, b);
    a = fold_lane(a, k, c);
    a = fold_lane(a, k, d);
    return finish(a, p, len);
}

VCLMUL static inline __m512i fold_lane512(__m512i lane, __m512i k, __m512i next) {
    __m512i lo = _mm512_clmulepi64_epi128(lane, k, 0x00), hi = _mm512_clmulepi64_epi128(lane, k, 0x11);
    return _mm512_ternarylogic_epi64(lo, hi, next, 0x96); /* lo ^ hi ^ next */
}

/* fold() with 512-bit lanes: len ≥ 256 and a multiple of 16. */
VCLMUL static uint32_t fold512(uint32_t reg, const unsigned char *p, size_t len) {
    __m512i a = _mm512_loadu_si512(p), b = _mm512_loadu_si512(p + 64);
    __m512i c = _mm512_loadu_si512(p + 128), d = _mm512_loadu_si512(p + 192);
    a = _mm512_xor_si512(a, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)reg)));
    __m512i k = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)K2048));
    for (p += 256, len -= 256; len >= 256; p += 256, len -= 256) {
        a = fold_lane512(a, k, _mm512_loadu_si512(p));
        b = fold_lane512(b, k, _mm512_loadu_si512(p + 64));
        c = fold_lane512(c, k, _mm512_loadu_si512(p + 128));
        d = fold_lane512(d, k, _mm512_loadu_si512(p + 192));
    }
    k = _mm512_broadcast_i32x4(_mm_load_si128((const __m128i *)K12));
    a = fold_lane512(a, k, b);
    a = fold_lane512(a, k, c);
    a = fold_lane512(a, k, d);
    /* Its lanes 0, 1 and 2 folded into lane 3 (the constants' lane 3 is 0). */
    __m512i t = fold_lane512(a, _mm512_load_si512(KLANES), _mm512_setzero_si512());
    __m128i top = _mm512_extracti32x4_epi32(a, 3);
    top = _mm_xor_si128(top, _mm_xor_si128(_mm512_castsi512_si128(t), _mm512_extracti32x4_epi32(t, 1)));
    top = _mm_xor_si128(top, _mm512_extracti32x4_epi32(t, 2));
    return finish(top, p, len);
}

/* 1: zlib's only, 2: PCLMULQDQ, 3: VPCLMULQDQ too (CKPT_SIMD=scalar: 1,
 * =avx2: at most 2, as for casts). */
static int level(void) {
    static atomic_int known; /* 0: not asked yet */
    int v = atomic_load_explicit(&known, memory_order_relaxed);
    if (!v) {
        __builtin_cpu_init();
        const char *cap = getenv("CKPT_SIMD");
        v = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") ? 2 : 1;
        if (v == 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
            __builtin_cpu_supports("vpclmulqdq"))
            v = 3;
        if (cap && strcmp(cap, "scalar") == 0) v = 1;
        else if (cap && strcmp(cap, "avx2") == 0 && v > 2) v = 2;
        atomic_store_explicit(&known, v, memory_order_relaxed);
    }
    return v;
}

uint32_t ckpt__crc32_at(int simd, uint32_t crc, const void *data, size_t len) {
    const unsigned char *p = data;
    if (simd > level()) simd = level();
    if (simd > 1 && len >= 64) {
        size_t n = len & ~(size_t)15;
        crc = simd == 3 && n >= 256 ? ~fold512(~crc, p, n) : ~fold(~crc, p, n);
        p += n, len -= n;
    }
    return zlib_crc32(crc, p, len);
}

uint32_t ckpt__crc32(uint32_t crc, const void *data, size_t len) { return ckpt__crc32_at(3, crc, data, len); }

#else

uint32_t ckpt__crc32_at(int simd, uint32_t crc, const void *data, size_t len) {
    (void)simd;
    return zlib_crc32(crc, data, len);
}

uint32_t ckpt__crc32(uint32_t crc, const void *data, size_t len) { return zlib_crc32(crc, data, len); }

#endif
