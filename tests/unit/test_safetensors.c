/* safetensors headers: every validation rule of the reference, and the
 * writer's byte-exact header. */
#include <string.h>

#include "formats/safetensors.h"
#include "helpers.h"

typedef struct rule_case {
    const char *name;
    const char *header;
    uint64_t data_len;
    ckpt_status expect;
    const char *tensor; /* expected err.tensor, or NULL */
} rule_case;

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static const rule_case cases[] = {
    {"valid", "{" T("a", "F32", "[2]", 0, 8) "}", 8, CKPT_OK, NULL},
    {"valid, whitespace and metadata", "  {\"__metadata__\":{\"format\":\"pt\"}, " T("a", "U8", "[2,2]", 0, 4) "}   ", 4, CKPT_OK, NULL},
    {"null metadata and extra fields", "{\"__metadata__\":null,\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":[]}}", 1, CKPT_OK, NULL},
    {"empty and scalar", "{" T("e", "F32", "[0,3]", 0, 0) "," T("s", "I64", "[]", 0, 8) "}", 8, CKPT_OK, NULL},
    {"no tensors", "{}", 0, CKPT_OK, NULL},
    {"sub-byte dtypes", "{" T("f4", "F4", "[2,2]", 0, 2) "," T("f6", "F6_E2M3", "[4]", 2, 5) "}", 5, CKPT_OK, NULL},
    {"not JSON", "{\"a\":", 0, CKPT__D(HEADER_NOT_JSON), NULL},
    {"trailing NULs are not whitespace", "{}\0\0", 0, CKPT__D(HEADER_NOT_JSON), NULL},
    {"not an object", "[]", 0, CKPT__D(HEADER_SCHEMA), NULL},
    {"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, CKPT__D(HEADER_SCHEMA), "a"},
    {"shape not array", "{\"a\":{\"dtype\":\"U8\",\"shape\":1,\"data_offsets\":[0,1]}}", 1, CKPT__D(HEADER_SCHEMA), "a"},
    {"negative dim", "{" T("a", "U8", "[-1]", 0, 1) "}", 1, CKPT__D(HEADER_SCHEMA), "a"},
    {"fractional dim", "{" T("a", "U8", "[1.0]", 0, 1) "}", 1, CKPT__D(HEADER_SCHEMA), "a"},
    {"three offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", 1, CKPT__D(HEADER_SCHEMA), "a"},
    {"entry not object", "{\"a\":[]}", 0, CKPT__D(HEADER_SCHEMA), "a"},
    {"metadata not object", "{\"__metadata__\":[]}", 0, CKPT__D(HEADER_SCHEMA), NULL},
    {"metadata value not string", "{\"__metadata__\":{\"k\":1}}", 0, CKPT__D(METADATA_NOT_STRING), NULL},
    {"unknown dtype", "{" T("a", "F128", "[1]", 0, 16) "}", 16, CKPT__D(UNKNOWN_DTYPE), "a"},
    {"lower-case dtype", "{" T("a", "f32", "[1]", 0, 4) "}", 4, CKPT__D(UNKNOWN_DTYPE), "a"},
    {"shape product overflows", "{" T("a", "U8", "[4294967296,4294967296,2]", 0, 0) "}", 0, CKPT__D(SHAPE_OVERFLOW), "a"},
    {"bit count overflows", "{" T("a", "F64", "[2305843009213693952]", 0, 0) "}", 0, CKPT__D(SHAPE_OVERFLOW), "a"},
    {"partial byte", "{" T("a", "F4", "[3]", 0, 2) "}", 2, CKPT__D(PARTIAL_BYTE), "a"},
    {"size mismatch", "{" T("a", "F32", "[2]", 0, 4) "}", 4, CKPT__D(SIZE_MISMATCH), "a"},
    {"hole at start", "{" T("a", "U8", "[4]", 4, 8) "}", 8, CKPT__D(DATA_HOLE), "a"},
    {"hole between", "{" T("a", "U8", "[8]", 0, 8) "," T("b", "U8", "[4]", 12, 16) "}", 16, CKPT__D(DATA_HOLE), "b"},
    {"overlap", "{" T("a", "U8", "[8]", 0, 8) "," T("b", "U8", "[8]", 4, 12) "}", 12, CKPT__D(DATA_OVERLAP), "b"},
    {"end before begin", "{" T("a", "U8", "[0]", 8, 0) "}", 8, CKPT__D(BAD_OFFSETS), "a"},
    {"trailing bytes", "{" T("a", "U8", "[8]", 0, 8) "}", 12, CKPT__D(TRAILING_BYTES), NULL},
    {"data past end", "{" T("a", "U8", "[8]", 0, 8) "}", 4, CKPT_E_TRUNCATED, "a"},
    {"duplicate name", "{" T("a", "U8", "[1]", 0, 1) "," T("a", "U8", "[1]", 1, 2) "}", 2, CKPT__D(DUPLICATE_NAME), "a"},
    {"duplicate metadata", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, CKPT__D(DUPLICATE_NAME), NULL},
    {"too many dims", "{" T("a", "U8", "[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1, CKPT__D(HEADER_SCHEMA), "a"},
};

static void test_every_rule(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rule_case *c = &cases[i];
        size_t n = strlen(c->header);
        if (!strcmp(c->name, "trailing NULs are not whitespace")) n += 2;
        ckpt__arena arena = {0};
        char *text = ckpt__arena_alloc(&arena, n + 1);
        memcpy(text, c->header, n + 1);
        ckpt__st_header h;
        ckpt_error err;
        ckpt_error_clear(&err);
        ckpt_status st = ckpt__st_parse_header(text, n, 8 + n + c->data_len, "f.safetensors", &arena, &h, &err);
        if (st) st = code_of(st, &err);
        if (st != c->expect)
            fail_msg("%s: got %s (%s), expected %s", c->name, code_name(st), err.message,
                     code_name(c->expect));
        if (st) {
            assert_int_equal(err.status, ckpt__category(st));
            assert_string_equal(err.path, "f.safetensors");
            assert_true(err.offset >= 0);
            assert_non_null(strstr(err.message, "f.safetensors: "));
            if (c->tensor) assert_string_equal(err.tensor, c->tensor);
        } else {
            ckpt__st_header_free(&h);
        }
        ckpt__arena_free(&arena);
    }
}

static void test_parsed_fields(void **state) {
    (void)state;
    const char *hdr = "{\"__metadata__\":{\"k\":\"v\",\"k2\":\"\\u00e9\"}," T("b", "BF16", "[2,3]", 8, 20) "," T("a", "F64", "[1]", 0, 8) "}";
    size_t n = strlen(hdr);
    ckpt__arena arena = {0};
    char *text = ckpt__arena_strndup(&arena, hdr, n);
    ckpt__st_header h;
    assert_int_equal(ckpt__st_parse_header(text, n, 8 + n + 20, "x", &arena, &h, NULL), CKPT_OK);
    assert_int_equal(h.data_start, 8 + n);
    assert_int_equal(h.count, 2);
    /* Sorted by data offsets, whatever the header's order. */
    assert_string_equal(h.tensors[0].name, "a");
    assert_string_equal(h.tensors[1].name, "b");
    assert_int_equal(h.tensors[1].dtype, CKPT_BF16);
    assert_int_equal(h.tensors[1].ndim, 2);
    assert_int_equal(h.tensors[1].shape[1], 3);
    assert_int_equal(h.tensors[1].numel, 6);
    assert_int_equal(h.tensors[1].nbytes, 12);
    assert_int_equal(h.meta_count, 2);
    assert_string_equal(h.meta_keys[1], "k2");
    assert_string_equal(h.meta_values[1], "\xc3\xa9");
    ckpt__st_header_free(&h);
    ckpt__arena_free(&arena);
}

static void test_length_rules_through_files(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_catalog *cat;
    ckpt_error err;
    write_bytes(in_dir(dir, "small"), "\x02\0\0\0\0\0\0", 7);
    assert_code(ckpt_catalog_open(in_dir(dir, "small"), &cat, &err), err, CKPT__D(HEADER_TOO_SMALL));
    assert_null(cat);
    unsigned char big[16] = {0x01, 0xe1, 0xf5, 0x05}; /* 100,000,001 */
    write_bytes(in_dir(dir, "big"), big, sizeof big);
    assert_code(ckpt_catalog_open(in_dir(dir, "big"), &cat, &err), err, CKPT__D(HEADER_TOO_LARGE));
    unsigned char past[16] = {100};
    write_bytes(in_dir(dir, "past"), past, sizeof past);
    assert_code(ckpt_catalog_open(in_dir(dir, "past"), &cat, &err), err, CKPT__D(HEADER_PAST_END));
    /* A length no header could have is judged as safetensors' when the
     * file is named so; otherwise the file is no checkpoint (its first
     * bytes look like nothing ckpt reads). */
    unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80};
    write_bytes(in_dir(dir, "huge.safetensors"), huge, sizeof huge);
    assert_code(ckpt_catalog_open(in_dir(dir, "huge.safetensors"), &cat, &err), err, CKPT__D(HEADER_TOO_LARGE));
    write_bytes(in_dir(dir, "huge"), huge, sizeof huge);
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "huge"), &cat, &err), CKPT_E_UNKNOWN_FORMAT);
    assert_non_null(strstr(err.message, "not a checkpoint ckpt reads (it looks like binary data"));
    write_safetensors(in_dir(dir, "utf8"), "{\"\xff\":1}", 0);
    assert_code(ckpt_catalog_open(in_dir(dir, "utf8"), &cat, &err), err, CKPT__D(HEADER_NOT_UTF8));
    assert_int_equal(err.offset, 10);
    /* A zip signature sends the file to the torch reader, which finds it damaged. */
    write_bytes(in_dir(dir, "zip"), "PK\x03\x04rest-of-a-zip", 17);
    assert_code(ckpt_catalog_open(in_dir(dir, "zip"), &cat, &err), err, CKPT__D(ZIP_INVALID));
    scratch_free(dir);
}

static void test_layout_matches_the_reference_bytes(void **state) {
    (void)state;
    /* safetensors' own test_serialization: {"attn.0": F32 [1,2,3]}. */
    static const unsigned char expected[] = {
        64, 0, 0, 0, 0, 0, 0, 0, 123, 34, 97, 116, 116, 110, 46, 48, 34, 58, 123, 34, 100, 116, 121, 112, 101,
        34, 58, 34, 70, 51, 50, 34, 44, 34, 115, 104, 97, 112, 101, 34, 58, 91, 49, 44, 50, 44, 51, 93, 44, 34,
        100, 97, 116, 97, 95, 111, 102, 102, 115, 101, 116, 115, 34, 58, 91, 48, 44, 50, 52, 93, 125, 125, 0, 0};
    uint64_t shape[3] = {1, 2, 3}, data_size;
    ckpt__st_out_tensor t = {.name = "attn.0", .dtype = CKPT_F32, .ndim = 3, .shape = shape, .nbytes = 24};
    ckpt__buf out = {0};
    assert_int_equal(ckpt__st_layout(&t, 1, NULL, NULL, 0, &out, &data_size), CKPT_OK);
    assert_int_equal(out.len, 72);
    assert_memory_equal(out.data, expected, 72);
    assert_int_equal(data_size, 24);
    free(out.data);

    /* Empty, with one metadata entry: the reference's test_empty. */
    const char *k = "framework", *v = "pt";
    out = (ckpt__buf){0};
    assert_int_equal(ckpt__st_layout(NULL, 0, &k, &v, 1, &out, &data_size), CKPT_OK);
    assert_int_equal(out.len, 48);
    assert_memory_equal(out.data + 8, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40);
    free(out.data);
}

static void test_layout_order(void **state) {
    (void)state;
    uint64_t s1[1] = {2};
    ckpt__st_out_tensor t[4] = {
        {.name = "b", .dtype = CKPT_U8, .ndim = 1, .shape = s1, .nbytes = 2, .id = 0},
        {.name = "z", .dtype = CKPT_F64, .ndim = 1, .shape = s1, .nbytes = 16, .id = 1},
        {.name = "a", .dtype = CKPT_U8, .ndim = 1, .shape = s1, .nbytes = 2, .id = 2},
        {.name = "m", .dtype = CKPT_BF16, .ndim = 1, .shape = s1, .nbytes = 4, .id = 3},
    };
    ckpt__buf out = {0};
    uint64_t size;
    assert_int_equal(ckpt__st_layout(t, 4, NULL, NULL, 0, &out, &size), CKPT_OK);
    /* dtype alignment descending, then name */
    assert_string_equal(t[0].name, "z");
    assert_string_equal(t[1].name, "m");
    assert_string_equal(t[2].name, "a");
    assert_string_equal(t[3].name, "b");
    assert_int_equal(t[3].id, 0);
    assert_int_equal(t[2].begin, 20);
    assert_int_equal(size, 24);
    assert_int_equal(out.len % 8, 0);
    free(out.data);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rule),
        cmocka_unit_test(test_parsed_fields),
        cmocka_unit_test(test_length_rules_through_files),
        cmocka_unit_test(test_layout_matches_the_reference_bytes),
        cmocka_unit_test(test_layout_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
