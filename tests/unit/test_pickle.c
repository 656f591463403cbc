/* The restricted unpickler: CPython's pickles read exactly; hostile ones
 * refused with their status; no input can crash it. */
#include <string.h>

#include "formats/pickle.h"
#include "helpers.h"
#include "pickle_cases.h"

static ckpt__pk_allowed allow(const char *module, const char *name, void *user) {
    static const char *const ok[][2] = {{"collections", "OrderedDict"}, {"builtins", "set"}, {"torch", "Size"},
                                        {"_codecs", "encode"},          {"builtins", "bytearray"},
                                        {"builtins", "frozenset"}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (!strcmp(module, ok[i][0]) && !strcmp(name, ok[i][1])) return CKPT__PK_ALLOW;
    /* What a caller's allowed_globals gives: rebuilding from state only. */
    if (user && !strcmp(module, "os") && !strcmp(name, "system")) return CKPT__PK_ALLOW_STATE;
    return CKPT__PK_DENY;
}

static ckpt_status load_as(const char *data, size_t len, void *user, ckpt__arena *arena, ckpt__pk_value **out,
                           ckpt_error *err) {
    ckpt__pk_source src = {"m.pt", "archive/data.pkl", 100};
    size_t used;
    return ckpt__pk_load((const unsigned char *)data, len, &src, allow, user, arena, out, &used, err);
}

static ckpt_status load(const char *data, size_t len, ckpt__arena *arena, ckpt__pk_value **out, ckpt_error *err) {
    return load_as(data, len, NULL, arena, out, err);
}

static const ckpt__pk_value *get(const ckpt__pk_value *dict, const char *key) {
    assert_int_equal(dict->kind, CKPT__PK_DICT);
    for (size_t i = 0; i + 1 < dict->u.seq.count; i += 2)
        if (dict->u.seq.items[i]->kind == CKPT__PK_STR && !strcmp(dict->u.seq.items[i]->u.s.data, key))
            return dict->u.seq.items[i + 1];
    fail_msg("no key '%s'", key);
    return NULL;
}

static void test_cpython_pickles(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof good_cases / sizeof good_cases[0]; c++) {
        const pickle_case *pc = &good_cases[c];
        ckpt__arena arena = {0};
        ckpt__pk_value *v;
        ckpt_error err;
        ckpt_status st = load(pc->data, pc->len, &arena, &v, &err);
        if (st) fail_msg("%s: %s", pc->name, err.message);
        if (!strncmp(pc->name, "nested", 6)) {
            assert_int_equal(get(v, "a")->u.i, 1);
            const ckpt__pk_value *b = get(v, "b");
            assert_int_equal(b->kind, CKPT__PK_LIST);
            assert_int_equal(b->u.seq.count, 4);
            assert_true(b->u.seq.items[0]->kind == CKPT__PK_FLOAT && b->u.seq.items[0]->u.f == 1.5);
            assert_int_equal(b->u.seq.items[1]->kind, CKPT__PK_NONE);
            assert_true(b->u.seq.items[2]->u.b && !b->u.seq.items[3]->u.b);
            const ckpt__pk_value *t = get(v, "c");
            assert_int_equal(t->kind, CKPT__PK_TUPLE);
            assert_string_equal(t->u.seq.items[0]->u.s.data, "x");
            assert_int_equal(t->u.seq.items[1]->kind, CKPT__PK_BYTES);
            assert_int_equal(t->u.seq.items[1]->u.s.len, 6);
            assert_memory_equal(t->u.seq.items[1]->u.s.data, "by\0tes", 6);
            const ckpt__pk_value *d = get(v, "d");
            assert_int_equal(get(d, "e")->u.i, -5);
            assert_int_equal(get(d, "big")->kind, CKPT__PK_BIGINT);
            assert_int_equal(get(d, "neg")->u.i, -(1LL << 40));
            assert_int_equal(get(d, "i32")->u.i, 2147483647);
            assert_int_equal(get(d, "u8")->u.i, 255);
            assert_int_equal(get(d, "u16")->u.i, 65535);
            assert_int_equal(get(v, "s")->kind, CKPT__PK_SET);
            assert_int_equal(get(v, "s")->u.seq.items[0]->u.i, 3);
            assert_int_equal(get(v, "f")->kind, CKPT__PK_SET);
            assert_int_equal(get(v, "t")->kind, CKPT__PK_TUPLE);
            assert_string_equal(get(v, "u")->u.s.data, "na\xc3\xafve \xe5\x90\x8d\xe5\x89\x8d \xf0\x9f\x98\x80");
        } else if (!strncmp(pc->name, "ordered", 7)) {
            assert_int_equal(v->kind, CKPT__PK_DICT);
            assert_int_equal(get(v, "w")->u.i, 1);
            assert_int_equal(get(v, "z")->u.seq.items[0]->u.i, 2);
        } else if (!strncmp(pc->name, "shared", 6)) {
            assert_ptr_equal(get(v, "x"), get(v, "y")); /* the memo keeps identity */
        } else if (!strcmp(pc->name, "bytes_p2")) {
            assert_int_equal(v->kind, CKPT__PK_BYTES);
            assert_int_equal(v->u.s.len, 6);
            assert_memory_equal(v->u.s.data, "\x00\xff\x80" "abc", 6);
        }
        ckpt__arena_free(&arena);
    }
}

static void test_hostile_pickles(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof hostile_cases / sizeof hostile_cases[0]; c++) {
        const pickle_case *pc = &hostile_cases[c];
        ckpt__arena arena = {0};
        ckpt__pk_value *v = NULL;
        ckpt_error err;
        ckpt_error_clear(&err);
        ckpt_status st = code_of(load(pc->data, pc->len, &arena, &v, &err), &err);
        if (strcmp(code_name(st), pc->status))
            fail_msg("%s: got %s (%s), expected %s", pc->name, code_name(st), err.message, pc->status);
        /* The message names the record and the opcode's byte; the offset is in the file. */
        assert_string_equal(err.path, "m.pt");
        assert_non_null(strstr(err.message, "archive/data.pkl: pickle byte "));
        assert_true(err.offset >= 100);
        ckpt__arena_free(&arena);
    }
    /* The refusal names the global. */
    ckpt__arena arena = {0};
    ckpt__pk_value *v;
    ckpt_error err;
    assert_code(load(hostile_cases[0].data, hostile_cases[0].len, &arena, &v, &err), err, CKPT__D(PICKLE_FORBIDDEN));
    assert_non_null(strstr(err.message, "'os.system' is not allowed"));
    assert_non_null(strstr(err.message, "allowed_globals"));
    ckpt__arena_free(&arena);
    /* Allowing a global lets it rebuild objects from their state, never
     * calls it: REDUCE of an allowed os.system is still refused. */
    int caller = 1;
    static const char reduce_os_system[] = "\x80\x02" "cos\nsystem\n" "X\x05\x00\x00\x00touch" "\x85R.";
    assert_code(load_as(reduce_os_system, sizeof reduce_os_system - 1, &caller, &arena, &v, &err), err, CKPT__D(PICKLE_FORBIDDEN));
    assert_non_null(strstr(err.message, "calls it with arguments"));
    ckpt__arena_free(&arena);
}

static void test_every_truncation_and_flip_is_safe(void **state) {
    (void)state;
    static const unsigned char flips[] = {0x00, 0xff, 0x80, '(', 'a', 'u', 'h', 0x95};
    for (size_t c = 0; c < sizeof good_cases / sizeof good_cases[0]; c++) {
        const pickle_case *pc = &good_cases[c];
        char *buf = malloc(pc->len);
        for (size_t n = 0; n < pc->len; n++) {
            ckpt__arena arena = {0};
            ckpt__pk_value *v;
            memcpy(buf, pc->data, n);
            /* Every proper prefix lacks its STOP. */
            assert_int_not_equal(load(buf, n, &arena, &v, NULL), CKPT_OK);
            ckpt__arena_free(&arena);
        }
        for (size_t i = 0; i < pc->len; i++) {
            for (size_t f = 0; f < sizeof flips; f++) {
                ckpt__arena arena = {0};
                ckpt__pk_value *v;
                memcpy(buf, pc->data, pc->len);
                buf[i] = (char)flips[f];
                (void)load(buf, pc->len, &arena, &v, NULL); /* any status; never a crash (ASan) */
                ckpt__arena_free(&arena);
            }
        }
        free(buf);
    }
}

static void test_limits_and_cycles(void **state) {
    (void)state;
    /* Two million MARKs: refused at the limit, not by running out of memory. */
    size_t n = 2u << 20;
    char *deep = malloc(n + 3);
    deep[0] = (char)0x80, deep[1] = 2;
    memset(deep + 2, '(', n);
    deep[n + 2] = '.';
    ckpt__arena arena = {0};
    ckpt__pk_value *v;
    ckpt_error err;
    assert_int_equal(load(deep, n + 3, &arena, &v, &err), CKPT_E_LIMIT);
    ckpt__arena_free(&arena);
    /* A list nested a million deep loads (the reader does not recurse). */
    size_t depth = 1u << 20;
    char *nest = malloc(2 + depth + 2 * depth + 1);
    size_t k = 0;
    nest[k++] = (char)0x80, nest[k++] = 2;
    for (size_t i = 0; i < depth; i++) nest[k++] = ']';
    for (size_t i = 1; i < depth; i++) nest[k++] = 'a';
    nest[k++] = '.';
    assert_int_equal(load(nest, k, &arena, &v, &err), CKPT_OK);
    ckpt__arena_free(&arena);
    /* A list that contains itself (through the memo). */
    assert_int_equal(load("\x80\x02]q\x00h\x00" "a.", 9, &arena, &v, &err), CKPT_OK);
    assert_ptr_equal(v->u.seq.items[0], v);
    ckpt__arena_free(&arena);
    free(deep);
    free(nest);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cpython_pickles),
        cmocka_unit_test(test_hostile_pickles),
        cmocka_unit_test(test_every_truncation_and_flip_is_safe),
        cmocka_unit_test(test_limits_and_cycles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
