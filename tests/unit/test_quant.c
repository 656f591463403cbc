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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantizers_round_trip),
        cmocka_unit_test(test_zero_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
