/* The JSON reader and writers. */
#include <string.h>

#include "base/json.h"
#include "helpers.h"

typedef struct parsed {
    char *text; /* parsed in place */
    ckpt__json_doc doc;
    size_t at;
    const char *why;
    ckpt_status st;
} parsed;

static parsed parse(const char *text) {
    parsed p = {0};
    p.text = strdup(text);
    p.st = ckpt__json_parse(p.text, strlen(text), &p.doc, &p.at, &p.why);
    return p;
}

static void done(parsed *p) {
    ckpt__json_free(&p->doc);
    free(p->text);
}

static void test_structure_and_offsets(void **state) {
    (void)state;
    parsed p = parse(" {\"a\": [1, 2, {\"b\": null}], \"c\": \"x\"} ");
    assert_int_equal(p.st, CKPT_OK);
    ckpt__json_node *n = p.doc.nodes;
    assert_int_equal(n[0].kind, CKPT__JSON_OBJECT);
    assert_int_equal(n[0].count, 2);
    assert_int_equal(n[0].offset, 1);
    assert_string_equal(n[1].str, "a");
    assert_int_equal(n[2].kind, CKPT__JSON_ARRAY);
    assert_int_equal(n[2].count, 3);
    /* The sibling after the array is the key "c". */
    assert_string_equal(n[n[2].end].str, "c");
    assert_string_equal(n[n[n[2].end].end].str, "x");
    assert_int_equal(n[0].end, p.doc.count);
    done(&p);
}

static void test_escapes(void **state) {
    (void)state;
    parsed p = parse("[\"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\\u0000z\"]");
    assert_int_equal(p.st, CKPT_OK);
    const ckpt__json_node *s = &p.doc.nodes[1];
    assert_int_equal(s->len, 15);
    assert_memory_equal(s->str, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80\0z", 15);
    done(&p);
}

static void test_errors_carry_offsets(void **state) {
    (void)state;
    struct {
        const char *text;
        size_t at;
    } cases[] = {
        {"{\"a\":1,}", 7}, {"[1 2]", 3}, {"{\"a\" 1}", 5}, {"[01]", 2}, {"[1.]", 3}, {"\"abc", 4},
        {"[\"\\ud800\"]", 8}, {"[\"\\udc00\"]", 8}, {"[\"a\tb\"]", 3}, {"nul", 0}, {"{} x", 3}, {"", 0},
        {"[\"\\x\"]", 3}, {"{1:2}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        parsed p = parse(cases[i].text);
        assert_int_equal(p.st, CKPT_E_INVALID_ARGUMENT);
        if (p.at != cases[i].at) fail_msg("'%s': error at %zu, expected %zu", cases[i].text, p.at, cases[i].at);
        assert_non_null(p.why);
        done(&p);
    }
}

static void test_depth_limit(void **state) {
    (void)state;
    char deep[600];
    for (int depth = 128; depth <= 129; depth++) {
        memset(deep, '[', (size_t)depth);
        memset(deep + depth, ']', (size_t)depth);
        deep[2 * depth] = '\0';
        parsed p = parse(deep);
        assert_int_equal(p.st, depth == 128 ? CKPT_OK : CKPT_E_INVALID_ARGUMENT);
        done(&p);
    }
}

static void test_u64(void **state) {
    (void)state;
    parsed p = parse("[0, 18446744073709551615, 18446744073709551616, -1, 1.0, 1e3]");
    assert_int_equal(p.st, CKPT_OK);
    uint64_t v;
    assert_true(ckpt__json_u64(&p.doc.nodes[1], &v) && v == 0);
    assert_true(ckpt__json_u64(&p.doc.nodes[2], &v) && v == UINT64_MAX);
    for (int i = 3; i <= 6; i++) assert_false(ckpt__json_u64(&p.doc.nodes[i], &v));
    done(&p);
}

static void test_utf8_check(void **state) {
    (void)state;
    struct {
        const char *s;
        size_t bad;
    } cases[] = {
        {"plain", 5}, {"\xc3\xa9", 2}, {"ab\xc3", 2}, {"\xc0\xaf", 0}, {"x\xed\xa0\x80", 1},
        {"\xf4\x90\x80\x80", 0}, {"\xf0\x9f\x98\x80!", 5}, {"\xe0\x80\xaf", 0}, {"a\xff", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(ckpt__utf8_check((const unsigned char *)cases[i].s, strlen(cases[i].s)), cases[i].bad);
}

static void test_writers(void **state) {
    (void)state;
    ckpt__buf b = {0};
    ckpt__buf_json_string(&b, "a\"\\\n\x01\x7f\xc3\xa9/");
    assert_string_equal(b.data, "\"a\\\"\\\\\\n\\u0001\x7f\xc3\xa9/\"");
    b.len = 0;
    ckpt__buf_json_string_ascii(&b, "a\x7f\xc3\xa9\xf0\x9f\x98\x80\t");
    assert_string_equal(b.data, "\"a\\u007f\\u00e9\\ud83d\\ude00\\t\"");
    b.len = 0;
    ckpt__buf_u64(&b, 0);
    ckpt__buf_u64(&b, UINT64_MAX);
    assert_string_equal(b.data, "018446744073709551615");
    free(b.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure_and_offsets), cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_errors_carry_offsets),  cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_u64),                   cmocka_unit_test(test_utf8_check),
        cmocka_unit_test(test_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
