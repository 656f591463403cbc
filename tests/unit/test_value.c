/* The object tree's values: made in an arena, written as JSON, read back. */
#include <math.h>
#include <string.h>

#include "base/value.h"
#include "helpers.h"

/* JSON text read into values and written back. */
static char *round_trip(const char *text, ckpt__arena *arena, ckpt__value **value) {
    ckpt_error e = {0};
    assert_int_equal(ckpt__value_from_json(arena, text, value, &e, "tree"), CKPT_OK);
    char *out = ckpt__value_json_text(*value);
    assert_non_null(out);
    return out;
}

/* Every kind of the schema reads as its kind and writes back the same
 * text (ckpt_catalog_tree_json's bytes are tests' business). */
static void test_schema_round_trips(void **state) {
    (void)state;
    const char *tree =
        "{\"__class__\": \"collections.OrderedDict\", \"__dict__\": [[\"w\", {\"__tensor__\": \"model.w\"}], "
        "[1, [null, true, false, -7, 0.1, 1.0, {\"__float__\": \"nan\"}, {\"__float__\": \"-inf\"}]], "
        "[true, {\"__tuple__\": [\"a\\n\", {\"__bytes__\": \"00ff\"}]}], "
        "[\"s\", {\"__class__\": \"torch.Size\", \"__tuple__\": [2, 3]}], [\"set\", {\"__set__\": [1]}], "
        "[\"big\", {\"__int_le__\": \"0000000000000000ff\"}], "
        "[\"call\", {\"__call__\": \"m.C\", \"args\": [{\"__global__\": \"m.G\"}], \"state\": {\"k\": []}}]], "
        "\"__state__\": {\"__dict__\": [[\"_metadata\", {\"__dict__\": []}]]}}";
    ckpt__arena arena = {0};
    ckpt__value *v;
    char *out = round_trip(tree, &arena, &v);
    assert_string_equal(out, tree);
    assert_int_equal(v->kind, CKPT__V_DICT);
    assert_string_equal(v->cls, "collections.OrderedDict");
    assert_int_equal(v->count, 7);
    assert_int_equal(ckpt__value_at(v, 0)->kind, CKPT__V_TENSOR);
    assert_string_equal(ckpt__value_at(v, 0)->u.s.data, "model.w");
    assert_int_equal(ckpt__value_key(v, 1)->kind, CKPT__V_INT);
    const ckpt__value *list = ckpt__value_at(v, 1);
    assert_int_equal(list->kind, CKPT__V_LIST);
    assert_int_equal(list->u.items[3]->kind, CKPT__V_INT);
    assert_int_equal(list->u.items[3]->u.i, -7);
    assert_int_equal(list->u.items[4]->kind, CKPT__V_FLOAT);
    assert_true(isnan(list->u.items[6]->u.f));
    const ckpt__value *bytes = ckpt__value_at(v, 2)->u.items[1];
    assert_int_equal(bytes->kind, CKPT__V_BYTES);
    assert_int_equal(bytes->u.s.len, 2);
    assert_memory_equal(bytes->u.s.data, "\x00\xff", 2);
    assert_int_equal(ckpt__value_at(v, 5)->kind, CKPT__V_BIGINT);
    const ckpt__value *call = ckpt__value_at(v, 6);
    assert_int_equal(call->kind, CKPT__V_CALL);
    assert_string_equal(call->cls, "m.C");
    assert_int_equal(call->u.items[0]->kind, CKPT__V_GLOBAL);
    assert_int_equal(call->state->kind, CKPT__V_OBJECT);
    assert_int_equal(v->state->kind, CKPT__V_DICT);
    free(out);
    ckpt__arena_free(&arena);
}

/* Text that is not the schema's exact shape stays what it is: objects
 * (members in their order), numbers as written. */
static void test_other_json_kept_as_written(void **state) {
    (void)state;
    const char *cases[] = {
        "{\"__dict__\": [[\"a\", 1]], \"__class__\": \"x\"}", /* members out of the schema's order */
        "{\"__dict__\": [[[1], 2]]}",                          /* a key that is no scalar */
        "{\"__tensor__\": 3}",
        "{\"__bytes__\": \"0F\"}",
        "{\"__float__\": \"1\"}",
        "[1.50, 1e3, 18446744073709551615, -0, 1E+2]",
        "{\"__shards__\": [{\"a\": \"\\u0000\"}, {}]}",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ckpt__arena arena = {0};
        ckpt__value *v;
        char *out = round_trip(cases[i], &arena, &v);
        assert_string_equal(out, cases[i]);
        assert_true(v->kind == CKPT__V_OBJECT || v->kind == CKPT__V_LIST);
        free(out);
        ckpt__arena_free(&arena);
    }
    ckpt__arena arena = {0};
    ckpt__value *v;
    free(round_trip("[1.50, 7]", &arena, &v));
    assert_int_equal(v->u.items[0]->kind, CKPT__V_NUMBER);
    assert_int_equal(v->u.items[1]->kind, CKPT__V_INT);
    ckpt__arena_free(&arena);
}

/* Values made by a reader: strings keep their bytes (a NUL among them). */
static void test_made_values(void **state) {
    (void)state;
    ckpt__arena arena = {0};
    ckpt__value *d = ckpt__value_new(&arena, CKPT__V_DICT, 2);
    d->u.items[0] = ckpt__value_text(&arena, CKPT__V_STR, "a\0b", 3);
    d->u.items[1] = ckpt__value_text(&arena, CKPT__V_TENSOR, "t", 1);
    d->u.items[2] = ckpt__value_new(&arena, CKPT__V_BOOL, 0);
    d->u.items[3] = ckpt__value_new(&arena, CKPT__V_CALL, 0);
    d->u.items[3]->cls = "builtins.object";
    char *out = ckpt__value_json_text(d);
    assert_string_equal(out, "{\"__dict__\": [[\"a\\u0000b\", {\"__tensor__\": \"t\"}], "
                             "[false, {\"__call__\": \"builtins.object\", \"args\": []}]]}");
    free(out);
    ckpt__arena_free(&arena);
}

/* A tree nested far deeper than any C stack would take, written without
 * recursion. */
static void test_deep_tree_written_without_recursion(void **state) {
    (void)state;
    enum { DEPTH = 1000000 };
    ckpt__arena arena = {0};
    ckpt__value *root = ckpt__value_new(&arena, CKPT__V_LIST, 1), *v = root;
    for (int i = 1; i < DEPTH; i++) v = v->u.items[0] = ckpt__value_new(&arena, CKPT__V_LIST, i == DEPTH - 1 ? 0 : 1);
    char *out = ckpt__value_json_text(root);
    assert_non_null(out);
    assert_int_equal(strlen(out), 2 * (size_t)DEPTH);
    assert_int_equal(out[DEPTH - 1], '[');
    assert_int_equal(out[DEPTH], ']');
    free(out);
    ckpt__arena_free(&arena);
}

/* Reading text charges the arena's budget: beyond it, CKPT_E_LIMIT. */
static void test_reading_is_bounded(void **state) {
    (void)state;
    ckpt__budget budget = {.input = 0, .used = UINT64_MAX - 1000};
    ckpt__arena arena = {.budget = &budget};
    ckpt__value *v;
    ckpt_error e = {0};
    assert_int_equal(ckpt__value_from_json(&arena, "[1, 2, 3]", &v, &e, "tree"), CKPT_E_LIMIT);
    ckpt__arena_free(&arena);
    ckpt__arena plain = {0};
    assert_int_equal(ckpt__value_from_json(&plain, "[1, 2", &v, &e, "tree"), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(e.offset, 5);
    ckpt__arena_free(&plain);
}

/* The public accessors (ckpt.h) read every kind; asked of another kind,
 * or out of range, they give their zero. */
static void test_public_accessors(void **state) {
    (void)state;
    const char *tree =
        "{\"__class__\": \"collections.OrderedDict\", \"__dict__\": [[\"w\", {\"__tensor__\": \"model.w\"}], "
        "[1, [null, true, -7, 0.5, \"s\", {\"__bytes__\": \"00ff\"}, {\"__int_le__\": \"01ff\"}, "
        "{\"__global__\": \"m.G\"}, 123456789012345678901234567890]], "
        "[2, {\"__class__\": \"torch.Size\", \"__tuple__\": [2]}], [3, {\"__set__\": []}], "
        "[4, {\"__call__\": \"m.C\", \"args\": [5], \"state\": {\"k\": false}}]], "
        "\"__state__\": {\"__dict__\": []}}";
    ckpt__arena arena = {0};
    ckpt__value *root;
    free(round_trip(tree, &arena, &root));
    const ckpt_value *v = root;
    size_t n = 9;
    assert_int_equal(ckpt_value_kind_of(v), CKPT_VALUE_DICT);
    assert_string_equal(ckpt_value_class(v), "collections.OrderedDict");
    assert_int_equal(ckpt_value_len(v), 5);
    assert_int_equal(ckpt_value_kind_of(ckpt_value_state(v)), CKPT_VALUE_DICT);
    assert_string_equal(ckpt_value_text(ckpt_value_key(v, 0), &n), "w");
    assert_int_equal(n, 1);
    assert_int_equal(ckpt_value_kind_of(ckpt_value_at(v, 0)), CKPT_VALUE_TENSOR);
    assert_string_equal(ckpt_value_text(ckpt_value_at(v, 0), NULL), "model.w");
    assert_int_equal(ckpt_value_int(ckpt_value_key(v, 1)), 1);
    assert_null(ckpt_value_key(v, 5));
    assert_null(ckpt_value_at(v, 5));
    assert_null(ckpt_value_item(v, 0)); /* a dict has pairs, not items */

    const ckpt_value *list = ckpt_value_at(v, 1);
    assert_int_equal(ckpt_value_kind_of(list), CKPT_VALUE_LIST);
    assert_int_equal(ckpt_value_len(list), 9);
    assert_null(ckpt_value_item(list, 9));
    assert_null(ckpt_value_class(list));
    assert_null(ckpt_value_key(list, 0));
    assert_int_equal(ckpt_value_kind_of(ckpt_value_item(list, 0)), CKPT_VALUE_NULL);
    assert_int_equal(ckpt_value_bool(ckpt_value_item(list, 1)), 1);
    assert_int_equal(ckpt_value_int(ckpt_value_item(list, 2)), -7);
    assert_true(ckpt_value_float(ckpt_value_item(list, 3)) == 0.5);
    assert_int_equal(ckpt_value_kind_of(ckpt_value_item(list, 4)), CKPT_VALUE_STRING);
    const ckpt_value *bytes = ckpt_value_item(list, 5);
    assert_int_equal(ckpt_value_kind_of(bytes), CKPT_VALUE_BYTES);
    assert_memory_equal(ckpt_value_text(bytes, &n), "\x00\xff", 2);
    assert_int_equal(n, 2);
    assert_int_equal(ckpt_value_kind_of(ckpt_value_item(list, 6)), CKPT_VALUE_BIGINT);
    assert_memory_equal(ckpt_value_text(ckpt_value_item(list, 6), &n), "\x01\xff", 2);
    assert_int_equal(ckpt_value_kind_of(ckpt_value_item(list, 7)), CKPT_VALUE_GLOBAL);
    assert_string_equal(ckpt_value_text(ckpt_value_item(list, 7), NULL), "m.G");
    assert_int_equal(ckpt_value_kind_of(ckpt_value_item(list, 8)), CKPT_VALUE_NUMBER);
    assert_string_equal(ckpt_value_text(ckpt_value_item(list, 8), NULL), "123456789012345678901234567890");
    /* another kind's accessor: its zero */
    assert_int_equal(ckpt_value_int(ckpt_value_item(list, 3)), 0);
    assert_int_equal(ckpt_value_bool(ckpt_value_item(list, 2)), 0);
    assert_null(ckpt_value_text(ckpt_value_item(list, 2), &n));
    assert_int_equal(n, 0);
    assert_int_equal(ckpt_value_len(ckpt_value_item(list, 4)), 0);

    const ckpt_value *size = ckpt_value_at(v, 2);
    assert_int_equal(ckpt_value_kind_of(size), CKPT_VALUE_TUPLE);
    assert_string_equal(ckpt_value_class(size), "torch.Size");
    assert_int_equal(ckpt_value_int(ckpt_value_item(size, 0)), 2);
    assert_int_equal(ckpt_value_kind_of(ckpt_value_at(v, 3)), CKPT_VALUE_SET);
    assert_int_equal(ckpt_value_len(ckpt_value_at(v, 3)), 0);
    const ckpt_value *call = ckpt_value_at(v, 4);
    assert_int_equal(ckpt_value_kind_of(call), CKPT_VALUE_CALL);
    assert_string_equal(ckpt_value_class(call), "m.C");
    assert_int_equal(ckpt_value_len(call), 1);
    assert_int_equal(ckpt_value_int(ckpt_value_item(call, 0)), 5);
    const ckpt_value *st = ckpt_value_state(call);
    assert_int_equal(ckpt_value_kind_of(st), CKPT_VALUE_OBJECT);
    assert_string_equal(ckpt_value_text(ckpt_value_key(st, 0), NULL), "k");
    assert_int_equal(ckpt_value_kind_of(ckpt_value_at(st, 0)), CKPT_VALUE_BOOL);
    assert_null(ckpt_value_state(size));
    assert_int_equal(ckpt_value_kind_of(NULL), CKPT_VALUE_NULL);
    assert_int_equal(ckpt_value_len(NULL), 0);
    ckpt__arena_free(&arena);
}

/* CKPT__VALUE_RAW: numbers kept as written, strings left in the
 * document's text (GGUF's typed values convert both themselves). */
static void test_raw_values_keep_numbers_as_text(void **state) {
    (void)state;
    char text[] = "{\"a\": [1, 1.0, 1e-05, 18446744073709551615], \"s\": \"x\\ny\"}";
    ckpt__json_doc doc;
    size_t at;
    const char *why;
    assert_int_equal(ckpt__json_parse(text, strlen(text), &doc, &at, &why), CKPT_OK);
    ckpt__arena arena = {0};
    ckpt__value *v;
    assert_int_equal(ckpt__value_from_doc(&arena, &doc, CKPT__VALUE_RAW, &v, NULL, NULL), CKPT_OK);
    ckpt__json_free(&doc);
    const ckpt__value *list = ckpt__value_member(v, "a"), *s = ckpt__value_member(v, "s");
    const char *numbers[] = {"1", "1.0", "1e-05", "18446744073709551615"};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(list->u.items[i]->kind, CKPT__V_NUMBER);
        assert_string_equal(list->u.items[i]->u.s.data, numbers[i]);
    }
    assert_int_equal(s->kind, CKPT__V_STR);
    assert_string_equal(s->u.s.data, "x\ny");
    assert_true(s->u.s.data >= text && s->u.s.data < text + sizeof text); /* not copied */
    ckpt__arena_free(&arena);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_round_trips),
        cmocka_unit_test(test_other_json_kept_as_written),
        cmocka_unit_test(test_made_values),
        cmocka_unit_test(test_deep_tree_written_without_recursion),
        cmocka_unit_test(test_reading_is_bounded),
        cmocka_unit_test(test_public_accessors),
        cmocka_unit_test(test_raw_values_keep_numbers_as_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
