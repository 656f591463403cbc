/* Shard sizes, parsed as huggingface_hub's parse_size_to_int (plus binary
 * units); sizes and progress lines written for people. */
#include <string.h>

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

static const char *size_text(uint64_t n) {
    static char buf[32];
    return ckpt_format_size(n, buf, sizeof buf);
}

/* One decimal, never four digits before the point: 1000.0 KiB is 1.0 MiB. */
static void test_format_size_rolls_over(void **state) {
    (void)state;
    assert_string_equal(size_text(0), "0 B");
    assert_string_equal(size_text(999), "999 B");
    assert_string_equal(size_text(1000), "1.0 KiB");
    assert_string_equal(size_text(1536), "1.5 KiB");
    assert_string_equal(size_text(1023948), "999.9 KiB");
    assert_string_equal(size_text(1024000), "1.0 MiB"); /* was "1000.0 KiB" */
    assert_string_equal(size_text(1048575), "1.0 MiB");
    assert_string_equal(size_text(90856960), "86.6 MiB");
    assert_string_equal(size_text(1023ULL << 20), "1.0 GiB");
    assert_string_equal(size_text(UINT64_MAX), "16.0 EiB");
    for (uint64_t n = 1; n < (1ULL << 62); n = n * 3 + 1) assert_true(strlen(size_text(n)) <= 9);
    char small[4];
    assert_string_equal(ckpt_format_size(1 << 20, small, sizeof small), "1.0");
}

static size_t line(char *out, unsigned width, uint64_t done, uint64_t total, double elapsed, const char *note) {
    return ckpt_progress_line(out, 1024, width, "converting", done, total, elapsed, note);
}

static int columns(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Redraws keep every part in place: the bar is as long whatever the
 * numbers, and the line never reaches the last column. */
static void test_progress_line_keeps_its_layout(void **state) {
    (void)state;
    char a[1024], b[1024];
    static const unsigned widths[] = {12, 25, 40, 60, 80, 120, 300};
    for (size_t w = 0; w < sizeof widths / sizeof widths[0]; w++) {
        uint64_t total = 5ULL << 30;
        line(a, widths[w], 0, total, 0, NULL);
        size_t bar = strchr(a, ']') ? (size_t)(strchr(a, ']') - a) : 0;
        for (uint64_t done = 1; done < total; done = done * 7 + 3) {
            line(b, widths[w], done, total, 3.0 + (double)done / 1e9, NULL);
            assert_true(columns(b) <= (int)widths[w] - 1);
            assert_int_equal(strchr(b, ']') ? (size_t)(strchr(b, ']') - b) : 0, bar);
            if (strstr(a, " / ")) /* the sizes end where they did */
                assert_int_equal(strstr(b, " / ") - b, strstr(a, " / ") - a);
        }
    }
    line(a, 120, 512ULL << 20, 1ULL << 30, 2.0, NULL);
    assert_non_null(strstr(a, "converting ["));
    assert_non_null(strstr(a, " 50%"));
    assert_non_null(strstr(a, "512.0 MiB / 1.0 GiB"));
    assert_non_null(strstr(a, "256.0 MiB/s"));
    assert_non_null(strstr(a, "ETA 0:02"));
    line(a, 120, 1ULL << 30, 1ULL << 30, 2.0, "syncing\xe2\x80\xa6");
    assert_non_null(strstr(a, "100%  "));
    assert_true(strlen(a) > 12 && !strcmp(a + strlen(a) - 12, "  syncing\xe2\x80\xa6")); /* in the ETA's place */
    assert_null(strstr(a, "/s"));
    line(a, 120, 1, 1ULL << 40, 1.0, NULL);
    assert_non_null(strstr(a, "ETA "));
    assert_true(line(a, 5, 1, 2, 1.0, NULL) <= 4);
    assert_int_equal(line(a, 0, 1, 2, 1.0, NULL), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hub_units),
        cmocka_unit_test(test_binary_units_and_plain_bytes),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_format_size_rolls_over),
        cmocka_unit_test(test_progress_line_keeps_its_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
