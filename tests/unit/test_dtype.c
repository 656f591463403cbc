/* The dtype table. */
#include <string.h>

#include "base/base.h"
#include "ckpt_gguf.h"
#include "helpers.h"

static void test_names_round_trip(void **state) {
    (void)state;
    static const char *const order[] = {"BOOL", "F4", "F6_E2M3", "F6_E3M2", "U8", "I8", "F8_E5M2", "F8_E4M3",
                                        "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16", "U16", "F16", "BF16",
                                        "I32", "U32", "F32", "C64", "F64", "I64", "U64",
                                        /* then ggml's block types */
                                        "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K",
                                        "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",
                                        "IQ3_S", "IQ2_S", "IQ4_XS", "IQ1_M", "TQ1_0", "TQ2_0", "MXFP4", "NVFP4",
                                        "Q1_0"};
    assert_int_equal(sizeof order / sizeof order[0], CKPT_DTYPE_COUNT - 1);
    /* Enum order is safetensors' Dtype order, which its writer sorts by. */
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++) {
        assert_string_equal(ckpt_dtype_name((ckpt_dtype)d), order[d - 1]);
        assert_int_equal(ckpt_dtype_from_name(order[d - 1]), d);
    }
    assert_null(ckpt_dtype_name(CKPT_DTYPE_INVALID));
    assert_null(ckpt_dtype_name((ckpt_dtype)CKPT_DTYPE_COUNT));
    assert_int_equal(ckpt_dtype_from_name("bf16"), CKPT_DTYPE_INVALID);
    assert_int_equal(ckpt_dtype_from_name("F8"), CKPT_DTYPE_INVALID);
    assert_int_equal(ckpt_dtype_from_name(NULL), CKPT_DTYPE_INVALID);
}

static void test_bits_and_sizes(void **state) {
    (void)state;
    uint64_t n;
    assert_int_equal(ckpt_dtype_bits(CKPT_F4), 4);
    assert_int_equal(ckpt_dtype_bits(CKPT_F6_E3M2), 6);
    assert_int_equal(ckpt_dtype_bits(CKPT_C64), 64);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_BF16, 10, &n), CKPT_OK);
    assert_int_equal(n, 20);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F4, 6, &n), CKPT_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F4, 3, &n), CKPT__D(PARTIAL_BYTE));
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F6_E2M3, 4, &n), CKPT_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F6_E2M3, 5, &n), CKPT__D(PARTIAL_BYTE));
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F64, UINT64_MAX / 8 + 1, &n), CKPT__D(SHAPE_OVERFLOW)); /* 2^64 bytes */
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F64, UINT64_MAX / 8, &n), CKPT_OK); /* 2^64 - 8: its bits would not fit */
    assert_int_equal(n, UINT64_MAX / 8 * 8);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_F4, UINT64_MAX - 1, &n), CKPT_OK);
    assert_int_equal(n, UINT64_MAX / 2);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_DTYPE_INVALID, 1, &n), CKPT__D(UNKNOWN_DTYPE));
}

/* Block sizes and ggml numbers as gguf's GGML_QUANT_SIZES lists them
 * (tests/interop/test_gguf.py checks the whole table against the package). */
static void test_blocks(void **state) {
    (void)state;
    uint64_t n, row[2] = {3, 64}, bad[2] = {3, 48};
    assert_true(ckpt_dtype_is_block(CKPT_Q4_0));
    assert_false(ckpt_dtype_is_block(CKPT_BF16));
    assert_int_equal(ckpt_dtype_bits(CKPT_Q8_0), 0);
    assert_int_equal(ckpt_dtype_block_elems(CKPT_Q4_0), 32);
    assert_int_equal(ckpt_dtype_block_bytes(CKPT_Q4_0), 18);
    assert_int_equal(ckpt_dtype_block_elems(CKPT_Q6_K), 256);
    assert_int_equal(ckpt_dtype_block_bytes(CKPT_Q6_K), 210);
    assert_int_equal(ckpt_dtype_block_elems(CKPT_BF16), 1);
    assert_int_equal(ckpt_dtype_block_bytes(CKPT_BF16), 2);
    assert_int_equal(ckpt_dtype_block_elems(CKPT_F4), 2);
    assert_int_equal(ckpt_dtype_ggml_type(CKPT_BF16), 30);
    assert_int_equal(ckpt_dtype_ggml_type(CKPT_Q8_0), 8);
    assert_int_equal(ckpt_dtype_ggml_type(CKPT_U8), -1);
    assert_int_equal(ckpt_dtype_from_ggml_type(41), CKPT_Q1_0);
    assert_int_equal(ckpt_dtype_from_ggml_type(4), CKPT_DTYPE_INVALID); /* ggml's removed Q4_2 */
    assert_int_equal(ckpt__dtype_nbytes(CKPT_Q8_0, 64, &n), CKPT_OK);
    assert_int_equal(n, 68);
    assert_int_equal(ckpt__dtype_nbytes(CKPT_Q8_0, 33, &n), CKPT__D(GGUF_DIMS));
    assert_true(ckpt__block_rows_ok(CKPT_Q8_0, 2, row));
    assert_false(ckpt__block_rows_ok(CKPT_Q8_0, 2, bad));
    assert_false(ckpt__block_rows_ok(CKPT_Q8_0, 0, NULL));
    assert_true(ckpt__block_rows_ok(CKPT_F32, 0, NULL));
}

static void test_shape_numel(void **state) {
    (void)state;
    uint64_t n, shape[3] = {4, 0, 7}, big[2] = {1ULL << 40, 1ULL << 30};
    assert_true(ckpt__shape_numel(0, NULL, &n));
    assert_int_equal(n, 1);
    assert_true(ckpt__shape_numel(3, shape, &n));
    assert_int_equal(n, 0);
    assert_false(ckpt__shape_numel(2, big, &n));
    /* An axis of 0 does not hide the others' overflow (what numpy, torch and
     * safetensors refuse): the nonzero axes must stay within 2^63 - 1. */
    uint64_t hidden[3] = {0, INT64_MAX, INT64_MAX}, last[3] = {INT64_MAX, INT64_MAX, 0}, edge[2] = {0, INT64_MAX};
    uint64_t past[2] = {0, (uint64_t)INT64_MAX + 1};
    assert_false(ckpt__shape_numel(3, hidden, &n));
    assert_false(ckpt__shape_numel(3, last, &n));
    assert_true(ckpt__shape_numel(2, edge, &n));
    assert_int_equal(n, 0);
    assert_false(ckpt__shape_numel(2, past, &n));
}

/* ckpt__tensor_size: elements and bytes of the nonzero axes within
 * 2^63 - 1, as numpy allows (`arr.size * arr.dtype.itemsize`). */
static void test_tensor_size(void **state) {
    (void)state;
    uint64_t n, b;
    uint64_t f32_max[2] = {0, (1ULL << 61) - 1}, f32_past[2] = {(1ULL << 61), 0}, u8_max[2] = {0, INT64_MAX};
    uint64_t full[2] = {3, 5}, hidden[3] = {0, 1ULL << 62, 4}, packed[2] = {0, (uint64_t)INT64_MAX + 1};
    assert_int_equal(ckpt__tensor_size(CKPT_F32, 2, f32_max, &n, &b), CKPT_OK);
    assert_true(n == 0 && b == 0);
    assert_int_equal(ckpt__tensor_size(CKPT_F32, 2, f32_past, &n, &b), CKPT__D(SHAPE_OVERFLOW));
    assert_int_equal(ckpt__tensor_size(CKPT_F64, 2, f32_max, &n, &b), CKPT__D(SHAPE_OVERFLOW));
    assert_int_equal(ckpt__tensor_size(CKPT_U8, 2, u8_max, &n, &b), CKPT_OK);
    assert_int_equal(ckpt__tensor_size(CKPT_U16, 2, u8_max, &n, &b), CKPT__D(SHAPE_OVERFLOW));
    assert_int_equal(ckpt__tensor_size(CKPT_F32, 3, hidden, &n, &b), CKPT__D(SHAPE_OVERFLOW));
    assert_int_equal(ckpt__tensor_size(CKPT_F4, 2, packed, &n, &b), CKPT__D(SHAPE_OVERFLOW)); /* elements */
    assert_int_equal(ckpt__tensor_size(CKPT_BF16, 2, full, &n, &b), CKPT_OK);
    assert_true(n == 15 && b == 30);
    assert_int_equal(ckpt__tensor_size(CKPT_F4, 2, full, &n, &b), CKPT__D(PARTIAL_BYTE));
    assert_int_equal(ckpt__tensor_size(CKPT_DTYPE_INVALID, 2, full, &n, &b), CKPT__D(UNKNOWN_DTYPE));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_round_trip),
        cmocka_unit_test(test_bits_and_sizes),
        cmocka_unit_test(test_shape_numel),
        cmocka_unit_test(test_tensor_size),
        cmocka_unit_test(test_blocks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
