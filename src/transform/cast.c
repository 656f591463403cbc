/* cast.c — scalar conversions, the kernel table and its run-time dispatch.
 *
 * The float encoders are torch's own algorithms (c10/util/Half.h,
 * BFloat16.h, Float8_*.h): round to nearest even, and torch's choices at the
 * edges — float8_e4m3fn saturates to ±448 (infinities included),
 * float8_e5m2 overflows to infinity, the *fnuz formats overflow to their
 * only NaN and have no negative zero, float8_e8m0fnu rounds exponents up
 * from the guard bit. */
#include <pthread.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "cast.h"

/* ---- float8 decoders (exact) -------------------------------------------- */

static inline float signed_value(uint8_t x, float v) { return (x & 0x80) ? -v : v; }

static float e4m3fn_to_f32(uint8_t x) {
    uint32_t exp = (x >> 3) & 0xF, mant = x & 7;
    if (exp == 0xF && mant == 7) return ckpt__f32_from(((uint32_t)(x & 0x80) << 24) | 0x7FC00000);
    if (exp == 0) return signed_value(x, (float)mant * 0x1p-9f);
    return ckpt__f32_from(((uint32_t)(x & 0x80) << 24) | ((exp + 120) << 23) | (mant << 20));
}

static float e5m2_to_f32(uint8_t x) { return ckpt__f16_to_f32((uint16_t)(x << 8)); }

static float fnuz_to_f32(uint8_t x, unsigned mant_bits, int bias) {
    if (x == 0x80) return ckpt__f32_from(0x7FC00000);
    uint32_t mant = x & ((1u << mant_bits) - 1), exp = (x & 0x7F) >> mant_bits;
    if (exp == 0) return signed_value(x, (float)mant * ckpt__f32_from((uint32_t)(127 + 1 - bias - (int)mant_bits) << 23));
    return ckpt__f32_from(((uint32_t)(x & 0x80) << 24) | ((exp - (uint32_t)bias + 127) << 23) | (mant << (23 - mant_bits)));
}

static float e4m3fnuz_to_f32(uint8_t x) { return fnuz_to_f32(x, 3, 8); }
static float e5m2fnuz_to_f32(uint8_t x) { return fnuz_to_f32(x, 2, 16); }

static float e8m0_to_f32(uint8_t x) {
    if (x == 0xFF) return ckpt__f32_from(0x7FC00000);
    if (x == 0) return ckpt__f32_from(0x00400000); /* 2^-127 */
    return ckpt__f32_from((uint32_t)x << 23);
}

/* ---- float8 encoders (torch's algorithms) ------------------------------- */

static uint8_t f32_to_e4m3fn(float f) {
    uint32_t x = ckpt__f32_bits(f), sign = x & 0x80000000, r;
    x ^= sign;
    if (x >= (1087u << 20)) {
        r = x > 0x7F800000 ? 0x7F : 0x7E;
    } else if (x < (121u << 23)) {
        r = (uint8_t)(ckpt__f32_bits(ckpt__f32_from(x) + ckpt__f32_from(141u << 23)) - (141u << 23));
    } else {
        uint32_t odd = (x >> 20) & 1;
        x += ((uint32_t)(7 - 127) << 23) + 0x7FFFF + odd;
        r = (uint8_t)(x >> 20);
        if (r == 0x7F) r = 0x7E;
    }
    return (uint8_t)(r | (sign >> 24));
}

static uint8_t f32_to_e5m2(float f) {
    uint32_t x = ckpt__f32_bits(f), sign = x & 0x80000000, r;
    x ^= sign;
    if (x >= (143u << 23)) {
        r = x > 0x7F800000 ? 0x7F : 0x7C;
    } else if (x < (113u << 23)) {
        r = (uint8_t)(ckpt__f32_bits(ckpt__f32_from(x) + ckpt__f32_from(134u << 23)) - (134u << 23));
    } else {
        uint32_t odd = (x >> 21) & 1;
        x += ((uint32_t)(15 - 127) << 23) + 0xFFFFF + odd;
        r = (uint8_t)(x >> 21);
    }
    return (uint8_t)(r | (sign >> 24));
}

static uint8_t f32_to_fnuz(float f, uint32_t max_bits, uint32_t normal_min, uint32_t denorm_mask, int bias,
                           unsigned mant_bits) {
    uint32_t x = ckpt__f32_bits(f), sign = x & 0x80000000, r;
    x ^= sign;
    if (x >= max_bits) return 0x80; /* NaN, infinities and overflow: the one NaN */
    if (x < normal_min) {
        r = (uint8_t)(ckpt__f32_bits(ckpt__f32_from(x) + ckpt__f32_from(denorm_mask)) - denorm_mask);
        if (r == 0) return 0; /* no negative zero */
    } else {
        unsigned shift = 23 - mant_bits;
        uint32_t odd = (x >> shift) & 1;
        x += ((uint32_t)(bias - 127) << 23) + ((1u << (shift - 1)) - 1) + odd;
        r = (uint8_t)(x >> shift);
    }
    return (uint8_t)(r | (sign >> 24));
}

static uint8_t f32_to_e4m3fnuz(float f) { return f32_to_fnuz(f, 0x87u << 23, 0x78u << 23, 0x8Cu << 23, 8, 3); }
static uint8_t f32_to_e5m2fnuz(float f) { return f32_to_fnuz(f, 0x8Fu << 23, 0x70u << 23, 0x85u << 23, 16, 2); }

static uint8_t f32_to_e8m0(float f) {
    uint32_t x = ckpt__f32_bits(f), exp = (x >> 23) & 0xFF;
    if (exp == 0xFF) return 0xFF;
    bool g = x & 0x400000, r = x & 0x200000, s = x & 0x1FFFFF, lsb = exp > 0;
    if (g && (r || s || lsb)) exp++;
    return (uint8_t)exp;
}

/* ---- kernels: decode to float32, encode from it --------------------------- */

static inline uint16_t ld16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline void st16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

static inline float dec_F32(const unsigned char *p) { float v; memcpy(&v, p, 4); return v; }
static inline float dec_F64(const unsigned char *p) { double v; memcpy(&v, p, 8); return (float)v; }
static inline float dec_F16(const unsigned char *p) { return ckpt__f16_to_f32(ld16(p)); }
static inline float dec_BF16(const unsigned char *p) { return ckpt__bf16_to_f32(ld16(p)); }
static inline float dec_E4M3(const unsigned char *p) { return e4m3fn_to_f32(*p); }
static inline float dec_E5M2(const unsigned char *p) { return e5m2_to_f32(*p); }
static inline float dec_E4M3FNUZ(const unsigned char *p) { return e4m3fnuz_to_f32(*p); }
static inline float dec_E5M2FNUZ(const unsigned char *p) { return e5m2fnuz_to_f32(*p); }
static inline float dec_E8M0(const unsigned char *p) { return e8m0_to_f32(*p); }

static inline void enc_F32(unsigned char *p, float f) { memcpy(p, &f, 4); }
static inline void enc_F64(unsigned char *p, float f) { double d = f; memcpy(p, &d, 8); }
static inline void enc_F16(unsigned char *p, float f) { st16(p, ckpt__f32_to_f16(f)); }
static inline void enc_BF16(unsigned char *p, float f) { st16(p, ckpt__f32_to_bf16(f)); }
static inline void enc_E4M3(unsigned char *p, float f) { *p = f32_to_e4m3fn(f); }
static inline void enc_E5M2(unsigned char *p, float f) { *p = f32_to_e5m2(f); }
static inline void enc_E4M3FNUZ(unsigned char *p, float f) { *p = f32_to_e4m3fnuz(f); }
static inline void enc_E5M2FNUZ(unsigned char *p, float f) { *p = f32_to_e5m2fnuz(f); }
static inline void enc_E8M0(unsigned char *p, float f) { *p = f32_to_e8m0(f); }

#define SZ_F32 4
#define SZ_F64 8
#define SZ_F16 2
#define SZ_BF16 2
#define SZ_E4M3 1
#define SZ_E5M2 1
#define SZ_E4M3FNUZ 1
#define SZ_E5M2FNUZ 1
#define SZ_E8M0 1

#define CAST_FN(A, B)                                                                                   \
    static void cast_##A##_##B(const void *src, void *dst, size_t n) {                                \
        const unsigned char *s = src;                                                                  \
        unsigned char *d = dst;                                                                        \
        for (size_t i = 0; i < n; i++) enc_##B(d + i * SZ_##B, dec_##A(s + i * SZ_##A));              \
    }
#define CAST_FROM(A)                                                                                    \
    CAST_FN(A, F32) CAST_FN(A, F64) CAST_FN(A, F16) CAST_FN(A, BF16) CAST_FN(A, E4M3) CAST_FN(A, E5M2) \
    CAST_FN(A, E4M3FNUZ) CAST_FN(A, E5M2FNUZ) CAST_FN(A, E8M0)
CAST_FROM(F32)
CAST_FROM(F64)
CAST_FROM(F16)
CAST_FROM(BF16)
CAST_FROM(E4M3)
CAST_FROM(E5M2)
CAST_FROM(E4M3FNUZ)
CAST_FROM(E5M2FNUZ)
CAST_FROM(E8M0)

/* ---- integer widening ------------------------------------------------------- */

#define WIDEN_FN(NAME, S, D)                                                                             \
    static void widen_##NAME(const void *src, void *dst, size_t n) {                                   \
        const unsigned char *s = src;                                                                  \
        unsigned char *d = dst;                                                                        \
        for (size_t i = 0; i < n; i++) {                                                               \
            S v;                                                                                       \
            memcpy(&v, s + i * sizeof(S), sizeof(S));                                                  \
            D w = (D)v;                                                                                \
            memcpy(d + i * sizeof(D), &w, sizeof(D));                                                  \
        }                                                                                              \
    }
WIDEN_FN(i8_i16, int8_t, int16_t)
WIDEN_FN(i8_i32, int8_t, int32_t)
WIDEN_FN(i8_i64, int8_t, int64_t)
WIDEN_FN(i16_i32, int16_t, int32_t)
WIDEN_FN(i16_i64, int16_t, int64_t)
WIDEN_FN(i32_i64, int32_t, int64_t)
WIDEN_FN(u8_16, uint8_t, uint16_t)
WIDEN_FN(u8_32, uint8_t, uint32_t)
WIDEN_FN(u8_64, uint8_t, uint64_t)
WIDEN_FN(u16_32, uint16_t, uint32_t)
WIDEN_FN(u16_64, uint16_t, uint64_t)
WIDEN_FN(u32_64, uint32_t, uint64_t)

#define COPY_FN(BYTES)                                                                                   \
    static void copy_##BYTES(const void *src, void *dst, size_t n) { memcpy(dst, src, n * BYTES); }
COPY_FN(1)
COPY_FN(2)
COPY_FN(4)
COPY_FN(8)

/* ---- the table ---------------------------------------------------------------- */

static ckpt__cast_fn table[CKPT_DTYPE_COUNT][CKPT_DTYPE_COUNT];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && defined(__GNUC__)
/* F16C (CPUID leaf 1, ECX bit 29): clang before 15 has no "f16c" for
 * __builtin_cpu_supports. */
static bool has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}
#endif

static int cpu_level(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    int level = 0;
    if (__builtin_cpu_supports("avx2") && has_f16c()) level = 1;
    if (level && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        level = 2;
    const char *cap = getenv("CKPT_SIMD");
    if (cap && strcmp(cap, "scalar") == 0) level = 0;
    else if (cap && strcmp(cap, "avx2") == 0 && level > 1) level = 1;
    return level;
#else
    return 0;
#endif
}

static void fill_scalar(ckpt__cast_fn (*t)[CKPT_DTYPE_COUNT]) {
    enum { NF = 9 };
    static const ckpt_dtype floats[NF] = {CKPT_F32, CKPT_F64, CKPT_F16, CKPT_BF16, CKPT_F8_E4M3,
                                          CKPT_F8_E5M2, CKPT_F8_E4M3FNUZ, CKPT_F8_E5M2FNUZ, CKPT_F8_E8M0};
#define ROW(A) {cast_##A##_F32, cast_##A##_F64, cast_##A##_F16, cast_##A##_BF16, cast_##A##_E4M3, cast_##A##_E5M2, \
                cast_##A##_E4M3FNUZ, cast_##A##_E5M2FNUZ, cast_##A##_E8M0}
    static const ckpt__cast_fn grid[NF][NF] = {ROW(F32), ROW(F64), ROW(F16), ROW(BF16), ROW(E4M3),
                                               ROW(E5M2), ROW(E4M3FNUZ), ROW(E5M2FNUZ), ROW(E8M0)};
#undef ROW
    for (int a = 0; a < NF; a++)
        for (int b = 0; b < NF; b++) t[floats[a]][floats[b]] = grid[a][b];
    /* Same type: a copy (also for every integer, bool and complex type). */
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++) {
        unsigned bits = ckpt_dtype_bits((ckpt_dtype)d);
        t[d][d] = bits == 8 ? copy_1 : bits == 16 ? copy_2 : bits == 32 ? copy_4 : bits == 64 ? copy_8 : NULL;
    }
    t[CKPT_I8][CKPT_I16] = widen_i8_i16, t[CKPT_I8][CKPT_I32] = widen_i8_i32, t[CKPT_I8][CKPT_I64] = widen_i8_i64;
    t[CKPT_I16][CKPT_I32] = widen_i16_i32, t[CKPT_I16][CKPT_I64] = widen_i16_i64, t[CKPT_I32][CKPT_I64] = widen_i32_i64;
    t[CKPT_U8][CKPT_U16] = t[CKPT_U8][CKPT_I16] = t[CKPT_BOOL][CKPT_I16] = widen_u8_16;
    t[CKPT_U8][CKPT_U32] = t[CKPT_U8][CKPT_I32] = t[CKPT_BOOL][CKPT_I32] = widen_u8_32;
    t[CKPT_U8][CKPT_U64] = t[CKPT_U8][CKPT_I64] = t[CKPT_BOOL][CKPT_I64] = widen_u8_64;
    t[CKPT_U16][CKPT_U32] = t[CKPT_U16][CKPT_I32] = widen_u16_32;
    t[CKPT_U16][CKPT_U64] = t[CKPT_U16][CKPT_I64] = widen_u16_64;
    t[CKPT_U32][CKPT_U64] = t[CKPT_U32][CKPT_I64] = widen_u32_64;
    t[CKPT_BOOL][CKPT_U8] = t[CKPT_BOOL][CKPT_I8] = copy_1;
}

/* Scalar kernels everywhere, then each SIMD level up to the CPU's (or
 * CKPT_SIMD's cap) overrides the pairs it has. */
static void build_table(void) {
    int level = cpu_level();
    fill_scalar(table);
    ckpt__quant_fill(table);
    for (int l = 1; l <= level; l++)
        for (int a = 1; a < CKPT_DTYPE_COUNT; a++)
            for (int b = 1; b < CKPT_DTYPE_COUNT; b++) {
                ckpt__cast_fn fn = ckpt__cast_simd_kernel(l, (ckpt_dtype)a, (ckpt_dtype)b);
                if (!fn) fn = ckpt__quant_simd_kernel(l, (ckpt_dtype)a, (ckpt_dtype)b);
                if (fn) table[a][b] = fn;
            }
}

ckpt__cast_fn ckpt__cast_kernel(ckpt_dtype from, ckpt_dtype to) {
    pthread_once(&table_once, build_table);
    if (from <= 0 || from >= CKPT_DTYPE_COUNT || to <= 0 || to >= CKPT_DTYPE_COUNT) return NULL;
    return table[from][to];
}

void ckpt__cast_strided(ckpt__cast_fn fn, unsigned in_size, unsigned out_size, const void *src, void *dst, size_t n,
                        ptrdiff_t dst_stride) {
    enum { BLOCK = 256 };
    _Alignas(64) unsigned char tmp[BLOCK * 8];
    const unsigned char *s = src;
    unsigned char *d = dst;
    ptrdiff_t step = dst_stride * (ptrdiff_t)out_size;
    while (n) {
        size_t k = n < BLOCK ? n : BLOCK;
        fn(s, tmp, k);
        switch (out_size) {
        case 1: for (size_t i = 0; i < k; i++, d += step) *d = tmp[i]; break;
        case 2: for (size_t i = 0; i < k; i++, d += step) memcpy(d, tmp + 2 * i, 2); break;
        case 4: for (size_t i = 0; i < k; i++, d += step) memcpy(d, tmp + 4 * i, 4); break;
        default: for (size_t i = 0; i < k; i++, d += step) memcpy(d, tmp + (size_t)out_size * i, out_size); break;
        }
        n -= k;
        s += k * in_size;
    }
}
