/* ggml's block types: the K-quant quantizers (their bit-exactness with
 * ggml is tests/interop/test_kquants.py's) and the SIMD block kernels,
 * which must equal the scalar ones bit for bit at every level the CPU has. */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ckpt.h"
#include "transform/cast.h"

static uint64_t rng = 88172645463325252ull;
static uint32_t next_u32(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float next_normal(void) { /* Irwin–Hall: good enough for weights */
    float s = 0;
    for (int i = 0; i < 12; i++) s += (float)(next_u32() & 0xFFFFFF) / 16777216.0f;
    return s - 6.0f;
}

/* Quantizes n floats to `q` and back to f32 through the public casts;
 * returns the RMS error relative to the data's RMS. */
static double round_trip(ckpt_dtype q, const float *x, size_t n) {
    size_t bytes = n / ckpt_dtype_block_elems(q) * ckpt_dtype_block_bytes(q);
    unsigned char *b = malloc(bytes);
    float *y = malloc(n * sizeof *y);
    ckpt_error err;
    assert_int_equal(ckpt_cast(CKPT_F32, x, q, b, n, &err), CKPT_OK);
    assert_int_equal(ckpt_cast(q, b, CKPT_F32, y, n, &err), CKPT_OK);
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) e += (double)(y[i] - x[i]) * (y[i] - x[i]), s += (double)x[i] * x[i];
    free(b);
    free(y);
    return sqrt(e / s);
}

/* The K-quants and the 32-element types llama-quantize falls back to keep
 * weights within their bits' error. */
static void test_quantizers_round_trip(void **state) {
    (void)state;
    enum { N = 256 * 64 };
    float *x = malloc(N * sizeof *x);
    for (size_t i = 0; i < N; i++) x[i] = next_normal() * 0.02f;
    static const struct { ckpt_dtype q; double bound; } types[] = {
        {CKPT_Q4_K, 0.12}, {CKPT_Q5_K, 0.06}, {CKPT_Q6_K, 0.03}, {CKPT_Q5_0, 0.07}, {CKPT_Q5_1, 0.07},
    };
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        assert_true(ckpt_can_cast(CKPT_BF16, types[t].q) && ckpt_can_cast(CKPT_F16, types[t].q));
        double e = round_trip(types[t].q, x, N);
        if (e > types[t].bound) fail_msg("%s: relative RMS error %g", ckpt_dtype_name(types[t].q), e);
    }
    free(x);
}

/* A block of zeros is all zero bytes, as ggml writes it (Q6_K clears the
 * block; Q4_K and Q5_K have zero scales, minimums and levels). */
static void test_zero_blocks(void **state) {
    (void)state;
    float x[256] = {0};
    unsigned char b[210], zero[210] = {0};
    ckpt_error err;
    static const ckpt_dtype types[] = {CKPT_Q4_K, CKPT_Q5_K, CKPT_Q6_K};
    for (size_t t = 0; t < 3; t++) {
        memset(b, 0xAA, sizeof b);
        assert_int_equal(ckpt_cast(CKPT_F32, x, types[t], b, 256, &err), CKPT_OK);
        assert_memory_equal(b, zero, ckpt_dtype_block_bytes(types[t]));
    }
    /* rows of part of a block are refused by name */
    assert_int_not_equal(ckpt_cast(CKPT_F32, x, CKPT_Q4_K, b, 128, &err), CKPT_OK);
    assert_non_null(strstr(err.message, "Q4_K"));
}

static int cpu_has(int level) {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (level == 1) return __builtin_cpu_supports("avx2");
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    (void)level;
    return 0;
#endif
}

/* Random blocks of a block type: random bytes, then the f16 scales set to
 * what blocks hold — mostly ordinary, some 0, −0, subnormal, infinite or
 * NaN. */
static void random_blocks(ckpt_dtype q, unsigned char *b, size_t n) {
    static const uint16_t odd_scales[] = {0x0000, 0x8000, 0x0001, 0x03FF, 0x7C00, 0xFC00, 0x7E00, 0x7D01, 0x7BFF};
    size_t size = ckpt_dtype_block_bytes(q), at = q == CKPT_Q6_K ? 208 : 0;
    for (size_t i = 0; i < n * size; i++) b[i] = (unsigned char)next_u32();
    for (size_t i = 0; i < n; i++) {
        uint32_t r = next_u32();
        uint16_t h = r % 8 == 0 ? odd_scales[(r >> 8) % 9] : (uint16_t)(0x1000 + (r >> 8) % 0x4000);
        memcpy(b + i * size + at, &h, 2);
        if (q == CKPT_Q4_K) memcpy(b + i * size + 2, &h, 2);
    }
}

/* Random float32 blocks of 32 for Q8_0: normal data, and blocks of zeros,
 * of values at rounding ties, huge, tiny, infinite or with a NaN. */
static void random_floats(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = next_normal() * 0.05f;
    for (size_t blk = 0; blk < n / 32; blk++) {
        float *v = x + blk * 32;
        switch (blk % 9) {
        case 1: memset(v, 0, 32 * sizeof *v); break;
        case 2: for (int j = 0; j < 32; j++) v[j] = (float)(j - 16) + 0.5f; v[5] = 127.0f; break;
        case 3: for (int j = 0; j < 32; j++) v[j] *= 1e37f; break;
        case 4: for (int j = 0; j < 32; j++) v[j] *= 1e-40f; break;
        case 5: v[7] = INFINITY; break;
        case 6: v[9] = NAN; break;
        case 7: v[0] = 3.4028235e38f, v[1] = -3.4028235e38f; break;
        default: break;
        }
    }
}

/* For the K-quants (blocks of 256 in sub-blocks of 32 or 16): random_floats'
 * blocks of 32, then some whole blocks and sub-blocks set to what stresses
 * the per-sub-block searches — constant sub-blocks beside ordinary ones
 * (make_qkx2_quants' early return), all-positive and all-negative data,
 * a sub-block of zeros, sparse data, a wide range of magnitudes, huge and
 * tiny blocks, and values at the rounding boundaries of the levels. */
static void random_k_floats(float *x, size_t n) {
    random_floats(x, n);
    for (size_t blk = 0; blk < n / 256; blk++) {
        float *v = x + blk * 256;
        switch (blk % 13) {
        case 0: for (int j = 0; j < 256; j++) v[j] = next_normal() * 0.02f; break;
        case 1: for (int j = 32; j < 64; j++) v[j] = 0.37f; for (int j = 80; j < 96; j++) v[j] = -3.0f; break;
        case 2: for (int j = 0; j < 256; j++) v[j] = fabsf(next_normal()) + 0.5f; break;
        case 3: for (int j = 0; j < 256; j++) v[j] = -fabsf(next_normal()); break;
        case 4: for (int j = 0; j < 256; j++) v[j] = next_normal() * 0.01f; memset(v + 64, 0, 48 * sizeof *v); break;
        case 5: for (int j = 0; j < 256; j++) v[j] = next_u32() % 20 == 0 ? next_normal() : 0.0f; break;
        case 6: for (int j = 0; j < 256; j++) v[j] = next_normal() * expf((float)(next_u32() % 60) - 30.0f); break;
        case 7: for (int j = 0; j < 256; j++) v[j] = (float)(next_u32() % 31) / 2.0f - 7.5f; break;
        case 8: for (int j = 0; j < 256; j++) v[j] = next_normal() * (j < 128 ? 1e30f : 1e-30f); break;
        case 9: for (int j = 0; j < 256; j++) v[j] = 0.37f; break;
        case 10: for (int j = 0; j < 256; j++) v[j] = (float)j / 255.0f; v[100] = 50.0f; break;
        default: break; /* random_floats' blocks of 32 */
        }
    }
}

static void encode_floats(ckpt_dtype to, const float *x, unsigned char *out, size_t n) {
    ckpt_error err;
    if (to == CKPT_F32) memcpy(out, x, n * 4);
    else assert_int_equal(ckpt_cast(CKPT_F32, x, to, out, n, &err), CKPT_OK);
}

/* Every SIMD block kernel (quant_x86.c) equals quant.c's scalar one bit for
 * bit, at every level this CPU has: dequantization of Q8_0, Q4_0, Q4_K and
 * Q6_K to F32, F16 and BF16, and F32, F16 and BF16 to Q8_0, Q4_K, Q5_K and
 * Q6_K. */
static void test_simd_kernels_equal_scalar(void **state) {
    (void)state;
    enum { BLOCKS = 4096 };
    static ckpt__cast_fn scalar[CKPT_DTYPE_COUNT][CKPT_DTYPE_COUNT];
    ckpt__quant_fill(scalar);
    static const ckpt_dtype blocks[] = {CKPT_Q8_0, CKPT_Q4_0, CKPT_Q4_K, CKPT_Q5_K, CKPT_Q6_K};
    static const ckpt_dtype floats[] = {CKPT_F32, CKPT_F16, CKPT_BF16};
    unsigned char *in = malloc(BLOCKS * 256 * 4), *want = malloc(BLOCKS * 256 * 4), *got = malloc(BLOCKS * 256 * 4);
    float *x = malloc(BLOCKS * 32 * sizeof *x);
    int checked = 0;
    for (int level = 1; level <= 2; level++) {
        if (!cpu_has(level)) continue;
        for (size_t q = 0; q < sizeof blocks / sizeof *blocks; q++)
            for (size_t f = 0; f < 3; f++) {
                ckpt__cast_fn deq = ckpt__quant_simd_kernel(level, blocks[q], floats[f]);
                if (deq) {
                    size_t out = BLOCKS * ckpt_dtype_block_elems(blocks[q]) * (floats[f] == CKPT_F32 ? 4 : 2);
                    random_blocks(blocks[q], in, BLOCKS);
                    scalar[blocks[q]][floats[f]](in, want, BLOCKS);
                    memset(got, 0xA5, out);
                    deq(in, got, BLOCKS);
                    if (memcmp(want, got, out))
                        fail_msg("level %d: %s to %s differs", level, ckpt_dtype_name(blocks[q]), ckpt_dtype_name(floats[f]));
                    checked++;
                }
                ckpt__cast_fn quant = ckpt__quant_simd_kernel(level, floats[f], blocks[q]);
                if (quant) {
                    /* BLOCKS × 32 values: BLOCKS blocks of Q8_0, BLOCKS / 8 of a K-quant */
                    size_t elems = ckpt_dtype_block_elems(blocks[q]), nb = BLOCKS * 32 / elems;
                    size_t out = nb * ckpt_dtype_block_bytes(blocks[q]);
                    if (elems == 256) random_k_floats(x, BLOCKS * 32);
                    else random_floats(x, BLOCKS * 32);
                    encode_floats(floats[f], x, in, BLOCKS * 32);
                    scalar[floats[f]][blocks[q]](in, want, nb);
                    memset(got, 0xA5, out);
                    quant(in, got, nb);
                    if (memcmp(want, got, out)) {
                        size_t at = 0;
                        while (want[at] == got[at]) at++;
                        fail_msg("level %d: %s to %s differs at block %zu, byte %zu", level, ckpt_dtype_name(floats[f]),
                                 ckpt_dtype_name(blocks[q]), at / ckpt_dtype_block_bytes(blocks[q]),
                                 at % ckpt_dtype_block_bytes(blocks[q]));
                    }
                    checked++;
                }
            }
    }
    /* the CPUs that run the tests have AVX2: 12 dequantizing and 12 quantizing kernels */
    if (cpu_has(1)) assert_true(checked >= 24);
    free(in), free(want), free(got), free(x);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantizers_round_trip),
        cmocka_unit_test(test_zero_blocks),
        cmocka_unit_test(test_simd_kernels_equal_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
