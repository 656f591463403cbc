/* ckpt_convert: single ↔ sharded round trips, progress and cancellation. */
#include <string.h>

#include "helpers.h"

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static int calls;
static uint64_t last_done, last_total;
static int record(uint64_t done, uint64_t total, void *user) {
    calls++;
    last_done = done;
    last_total = total;
    return user != NULL && done > 0;
}

static void test_round_trip_is_byte_identical(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    write_safetensors(src,
                      "{\"__metadata__\":{\"format\":\"pt\"}," T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[2]", 16, 24) ","
                      T("c", "I16", "[3]", 24, 30) "," T("d", "U8", "[0]", 30, 30) "}",
                      30);
    ckpt_catalog *cat;
    ckpt_error err;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    /* The hand-made source is not padded as safetensors pads; a first
     * conversion gives the canonical file the round trip must reproduce. */
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    const char *canon = strdup(in_dir(dir, "canon.safetensors"));
    assert_int_equal(ckpt_convert(cat, canon, &o, NULL, NULL, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_catalog_open(canon, &cat, &err), CKPT_OK);
    o.max_shard_size = 16;
    calls = 0;
    assert_int_equal(ckpt_convert(cat, in_dir(dir, "sharded"), &o, record, NULL, &err), CKPT_OK);
    assert_true(calls >= 2);
    assert_int_equal(last_done, 30);
    assert_int_equal(last_total, 30);
    ckpt_catalog_close(cat);
    /* a (16) | b, c, d (14): two shards and the index */
    assert_int_equal(dir_entries(in_dir(dir, "sharded")), 3);

    assert_int_equal(ckpt_catalog_open(in_dir(dir, "sharded"), &cat, &err), CKPT_OK);
    ckpt_writer_options_init(&o);
    assert_int_equal(ckpt_convert(cat, in_dir(dir, "merged.safetensors"), &o, NULL, NULL, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    size_t n1, n2;
    char *a = read_all(canon, &n1), *b = read_all(in_dir(dir, "merged.safetensors"), &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    /* The data is the source's, byte for byte. */
    char *orig = read_all(src, &n2);
    assert_memory_equal(a + n1 - 30, orig + n2 - 30, 30);
    free(orig);
    free(a);
    free(b);
    free((char *)canon);
    free((char *)src);
    scratch_free(dir);
}

static void test_cancel_leaves_nothing(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_safetensors(in_dir(dir, "src.safetensors"), "{" T("a", "U8", "[8]", 0, 8) "," T("b", "U8", "[8]", 8, 16) "}", 16);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "src.safetensors"), &cat, &err), CKPT_OK);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 8;
    assert_int_equal(ckpt_convert(cat, in_dir(dir, "out"), &o, record, (void *)1, &err), CKPT_E_CANCELLED);
    /* Staged in a temporary directory: neither "out" nor the stage remain. */
    assert_int_equal(dir_entries(in_dir(dir, "out")), -1);
    assert_int_equal(dir_entries(dir), 1);
    ckpt_writer_options_init(&o);
    assert_int_equal(ckpt_convert(cat, in_dir(dir, "src.safetensors"), &o, NULL, NULL, &err), CKPT_E_EXISTS);
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_convert(NULL, "x", NULL, NULL, NULL, &err), CKPT_E_INVALID_ARGUMENT);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_is_byte_identical),
        cmocka_unit_test(test_cancel_leaves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
