/* Shard sizes, parsed as huggingface_hub's parse_size_to_int (plus binary units). */
#include "base/base.h"
#include "helpers.h"

static uint64_t parse(const char *s) {
    uint64_t v = 0;
    ckpt_error err;
    assert_int_equal(ckpt_parse_size(s, &v, &err), CKPT_OK);
    return v;
}

static void test_hub_units(void **state) {
    (void)state;
    assert_int_equal(parse("5GB"), 5000000000ULL);
    assert_int_equal(parse("500MB"), 500000000ULL);
    assert_int_equal(parse("10KB"), 10000ULL);
    assert_int_equal(parse("2TB"), 2000000000000ULL);
    assert_int_equal(parse("5gb"), 5000000000ULL);
    assert_int_equal(parse(" 1.5 GB "), 1500000000ULL);
    assert_int_equal(parse("0.5KB"), 500);
}

static void test_binary_units_and_plain_bytes(void **state) {
    (void)state;
    assert_int_equal(parse("5GiB"), 5ULL << 30);
    assert_int_equal(parse("64MiB"), 64ULL << 20);
    assert_int_equal(parse("1kib"), 1024);
    assert_int_equal(parse("123456"), 123456);
    assert_int_equal(parse("100B"), 100);
    assert_int_equal(parse("18446744073709551615"), UINT64_MAX);
}

static void test_rejects(void **state) {
    (void)state;
    static const char *const bad[] = {"", "GB", "5XB", "-1GB", "five GB", "5 G B", "1e", "0", "0GB",
                                      "18446744073709551616", "1e30TB", "nanGB", "infGB", "5GBs"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        ckpt_error err;
        ckpt_error_clear(&err);
        assert_int_equal(ckpt_parse_size(bad[i], &v, &err), CKPT_E_BAD_SIZE);
        assert_int_equal(err.status, CKPT_E_BAD_SIZE);
    }
    assert_int_equal(ckpt_parse_size(NULL, NULL, NULL), CKPT_E_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hub_units),
        cmocka_unit_test(test_binary_units_and_plain_bytes),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
