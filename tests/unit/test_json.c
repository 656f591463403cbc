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


/* ---- the pull reader --------------------------------------------------- */

/* A text handed to the reader at most `chunk` bytes a call, so that every
 * token crosses a refill somewhere. */
typedef struct dribble {
    const char *text;
    size_t chunk, calls;
} dribble;

static ckpt_status dribble_fill(void *user, uint64_t offset, char *buf, size_t cap, size_t *got) {
    dribble *d = user;
    size_t n = strlen(d->text) - (size_t)offset;
    if (n > cap) n = cap;
    if (n > d->chunk) n = d->chunk;
    memcpy(buf, d->text + offset, n);
    *got = n;
    d->calls++;
    return CKPT_OK;
}

typedef struct pulled {
    ckpt__json_doc doc;
    ckpt__arena strings;
    ckpt_status st;
    uint64_t at;
    const char *why;
    size_t fills;
} pulled;

/* The whole document read through the pull reader into a tree, then its end. */
static pulled pull(const char *text, size_t chunk, ckpt__json_take take, void *user) {
    pulled p = {0};
    dribble d = {text, chunk, 0};
    ckpt__json_pull r;
    ckpt__json_event ev;
    p.st = ckpt__json_pull_init(&r, strlen(text), 64, dribble_fill, &d);
    if (!p.st) p.st = ckpt__json_pull_next(&r, &ev);
    if (!p.st) p.st = ckpt__json_pull_doc(&r, &ev, &p.strings, take, user, &p.doc);
    if (!p.st) p.st = ckpt__json_pull_next(&r, &ev);
    if (!p.st) assert_int_equal(ev.step, CKPT__JSON_DONE);
    p.at = r.error_offset, p.why = r.why, p.fills = d.calls;
    ckpt__json_pull_free(&r);
    return p;
}

static void pulled_free(pulled *p) {
    ckpt__json_free(&p->doc);
    ckpt__arena_free(&p->strings);
}

/* Nesting as deep as the parser takes, no deeper — the pull reader's too. */
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
        pulled q = pull(deep, 64, NULL, NULL); /* the pull reader's limit is the same */
        assert_int_equal(q.st, depth == 128 ? CKPT_OK : CKPT_E_INVALID_ARGUMENT);
        pulled_free(&q);
    }
}

/* The pull reader's tree is the whole-text parser's: kinds, counts, ends,
 * offsets and decoded strings, whatever the refills cut. */
static void test_pull_matches_the_parser(void **state) {
    (void)state;
    const char *docs[] = {
        " {\"a\": [1, 2, {\"b\": null}], \"c\": \"x\"} ",
        "[\"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\\u0000z\", -0.5e+3, true, false, {}, []]",
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\\u0120a\": 0, \"long token with spaces\": 1}, "
        "\"merges\": [\"a b\", [\"c\", \"d\"]]}, \"added_tokens\": [{\"id\": 2, \"content\": \"<|x|>\"}]}",
        "\"just a string\"", "18446744073709551615",
    };
    for (size_t i = 0; i < sizeof docs / sizeof *docs; i++) {
        for (size_t chunk = 1; chunk <= 7; chunk += 3) {
            parsed want = parse(docs[i]);
            pulled got = pull(docs[i], chunk, NULL, NULL);
            assert_int_equal(want.st, CKPT_OK);
            assert_int_equal(got.st, CKPT_OK);
            assert_int_equal(got.doc.count, want.doc.count);
            for (size_t k = 0; k < want.doc.count; k++) {
                const ckpt__json_node *a = &want.doc.nodes[k], *b = &got.doc.nodes[k];
                assert_int_equal(a->kind, b->kind);
                assert_int_equal(a->count, b->count);
                assert_int_equal(a->end, b->end);
                assert_int_equal(a->offset, b->offset);
                assert_int_equal(a->len, b->len);
                if (a->kind == CKPT__JSON_STRING || a->kind == CKPT__JSON_NUMBER) assert_memory_equal(a->str, b->str, a->len);
            }
            done(&want);
            pulled_free(&got);
        }
    }
}

/* Its errors are the parser's, at the parser's offsets. */
static void test_pull_errors_carry_offsets(void **state) {
    (void)state;
    const char *cases[] = {
        "{\"a\":1,}", "[1 2]", "{\"a\" 1}", "[01]", "[1.]", "\"abc", "[\"\\ud800\"]", "[\"\\udc00\"]", "[\"a\tb\"]",
        "nul", "{} x", "", "[\"\\x\"]", "{1:2}", "[", "{\"a\": [1, {\"b\": tru}]}", "[\"abc\\",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        parsed want = parse(cases[i]);
        pulled got = pull(cases[i], 2, NULL, NULL);
        assert_int_equal(want.st, CKPT_E_INVALID_ARGUMENT);
        if (got.st != CKPT_E_INVALID_ARGUMENT || got.at != want.at)
            fail_msg("'%s': status %d at %llu, the parser's at %zu", cases[i], got.st, (unsigned long long)got.at, want.at);
        assert_non_null(got.why);
        done(&want);
        pulled_free(&got);
    }
}

/* A take reads a member's value itself, event by event; the tree holds an
 * empty array in its place. */
typedef struct taken {
    size_t values;
    char seen[64];
} taken;

static bool take_list(void *user, ckpt__json_pull *r, const ckpt__json_event *ev, const char *parent,
                      ckpt_status *st) {
    taken *t = user;
    if (!parent || strcmp(parent, "model") || !ev->key || strcmp(ev->key, "list")) return false;
    ckpt__json_event e;
    while (!(*st = ckpt__json_pull_next(r, &e)) && e.step == CKPT__JSON_VALUE) {
        t->values++;
        if (e.kind == CKPT__JSON_STRING) strncat(t->seen, e.str, sizeof t->seen - strlen(t->seen) - 1);
        if ((*st = ckpt__json_pull_skip(r, &e))) break;
    }
    return true;
}

static void test_pull_take(void **state) {
    (void)state;
    taken t = {0};
    pulled p = pull("{\"list\": [9], \"model\": {\"list\": [\"ab\", {\"x\": [1]}, \"cd\"], \"k\": 1}}", 3, take_list, &t);
    assert_int_equal(p.st, CKPT_OK);
    assert_int_equal(t.values, 3);
    assert_string_equal(t.seen, "abcd");
    const ckpt__json_node *n = p.doc.nodes;
    assert_int_equal(n[2].kind, CKPT__JSON_ARRAY); /* the outer "list", read into the tree */
    assert_int_equal(n[2].count, 1);
    uint32_t model = ckpt__json_member(&p.doc, 0, "model"), list = ckpt__json_member(&p.doc, model, "list");
    assert_int_equal(n[list].kind, CKPT__JSON_ARRAY);
    assert_int_equal(n[list].count, 0);
    assert_int_equal(n[list].offset, 32);
    assert_int_equal(n[ckpt__json_member(&p.doc, model, "k")].kind, CKPT__JSON_NUMBER);
    pulled_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure_and_offsets), cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_errors_carry_offsets),  cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_u64),                   cmocka_unit_test(test_utf8_check),
        cmocka_unit_test(test_writers),               cmocka_unit_test(test_pull_matches_the_parser),
        cmocka_unit_test(test_pull_errors_carry_offsets),
        cmocka_unit_test(test_pull_take),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
