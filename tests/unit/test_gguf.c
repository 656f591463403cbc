/* GGUF: the writer's output read back through the catalog (typed
 * key-values, block tensors, splits), dequantization through plans, and
 * the reader's refusals — under the sanitizers.  gguf-py's own files and
 * byte identity are in tests/interop/test_gguf.py. */
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "ckpt_gguf.h"
#include "helpers.h"

static const ckpt_dtype Q8 = CKPT_Q8_0;

/* One Q8_0 block of 32 values k * 0.5 (scale 0.5 as f16 0x3800). */
static void q8_block(unsigned char *b, int shift) {
    b[0] = 0x00, b[1] = 0x38;
    for (int k = 0; k < 32; k++) b[2 + k] = (unsigned char)(int8_t)(k - 16 + shift);
}

static void write_model(const char *path, const char *metadata_json, uint64_t split_max_tensors) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    o.metadata_json = metadata_json;
    ckpt_gguf_writer_options g;
    ckpt_gguf_writer_options_init(&g);
    g.split_max_tensors = split_max_tensors;
    o.gguf = &g;
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(path, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_set_metadata(w, "general.name", "tiny", &err), CKPT_OK);
    assert_int_equal(ckpt_writer_set_metadata(w, "general.architecture", "llama", &err), CKPT_OK);
    assert_int_equal(ckpt_writer_set_metadata(w, "general.alignment", "{\"gguf_type\": \"u32\", \"value\": 64}", &err),
                     CKPT_OK);
    uint64_t qshape[2] = {2, 64}, vshape[1] = {3};
    size_t qi, vi;
    assert_int_equal(ckpt_writer_add_tensor(w, "q", Q8, 2, qshape, &qi, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "v", CKPT_F32, 1, vshape, &vi, &err), CKPT_OK);
    /* rows must be whole blocks; safetensors-only and GGUF-less dtypes refused */
    uint64_t bad[2] = {2, 48};
    assert_int_equal(ckpt_writer_add_tensor(w, "bad", Q8, 2, bad, NULL, &err), CKPT_E_GGUF_DIMS);
    assert_int_equal(ckpt_writer_add_tensor(w, "u", CKPT_U8, 1, vshape, NULL, &err), CKPT_E_UNSUPPORTED_DTYPE);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    unsigned char blocks[4 * 34];
    for (int b = 0; b < 4; b++) q8_block(blocks + 34 * b, b);
    float v[3] = {1.5f, -2.0f, 0.25f};
    assert_int_equal(ckpt_writer_write(w, qi, blocks, 50, &err), CKPT_OK); /* chunks of any size */
    assert_int_equal(ckpt_writer_write(w, qi, blocks + 50, sizeof blocks - 50, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, vi, v, sizeof v, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
}

static void test_write_then_read(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "m.gguf");
    write_model(path, "{\"llama.block_count\": {\"gguf_type\": \"u32\", \"value\": 2}, \"general.name\": \"renamed\", "
                      "\"list\": [1, 2, 3], \"nested\": [[\"a\"], [\"b\", \"c\"]], \"flag\": true, \"x\": 0.5}",
                0);
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(c), CKPT_FORMAT_GGUF);
    /* general.architecture first, then the order set; overrides in place */
    static const char *const keys[] = {"general.architecture", "general.name", "general.alignment",
                                       "llama.block_count", "list", "nested", "flag", "x"};
    assert_int_equal(ckpt_catalog_kv_count(c), 8);
    for (size_t i = 0; i < 8; i++) assert_string_equal(ckpt_catalog_kv(c, i)->key, keys[i]);
    assert_string_equal(ckpt_catalog_kv_find(c, "general.name")->string, "renamed");
    const ckpt_kv *kv = ckpt_catalog_kv_find(c, "llama.block_count");
    assert_int_equal(kv->type, CKPT_KV_U32);
    assert_int_equal(kv->u, 2);
    kv = ckpt_catalog_kv_find(c, "list");
    assert_int_equal(kv->type, CKPT_KV_ARRAY);
    assert_int_equal(kv->element_type, CKPT_KV_I32);
    assert_int_equal(kv->count, 3);
    int32_t third;
    memcpy(&third, (const char *)kv->data + 8, 4);
    assert_int_equal(third, 3);
    assert_string_equal(ckpt_catalog_kv_find(c, "nested")->json,
                        "{\"gguf_type\": \"array\", \"element\": \"array\", \"value\": [{\"gguf_type\": \"array\", "
                        "\"element\": \"string\", \"value\": [\"a\"]}, {\"gguf_type\": \"array\", \"element\": "
                        "\"string\", \"value\": [\"b\", \"c\"]}]}");
    assert_int_equal(ckpt_catalog_kv_find(c, "flag")->u, 1);
    assert_true(ckpt_catalog_kv_find(c, "x")->f == 0.5);
    assert_string_equal(ckpt_catalog_metadata_get(c, "general.architecture"), "llama");
    const ckpt_tensor_info *q = ckpt_catalog_find(c, "q");
    assert_non_null(q);
    assert_int_equal(q->dtype, Q8);
    assert_int_equal(q->shape[1], 64);
    assert_int_equal(q->nbytes, 4 * 34);
    assert_int_equal(q->offset % 64, 0);
    unsigned char raw[4 * 34], want[4 * 34];
    for (int b = 0; b < 4; b++) q8_block(want + 34 * b, b);
    assert_int_equal(ckpt_catalog_read(c, q, 0, raw, sizeof raw, &err), CKPT_OK);
    assert_memory_equal(raw, want, sizeof raw);
    /* dequantized through a plan, sliced to the second block of each row */
    ckpt_plan *p;
    assert_int_equal(ckpt_plan_create(c, &p, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_select(p, "q", &err), CKPT_OK);
    assert_int_equal(ckpt_plan_slice(p, "q", 1, 5, 37, &err), CKPT_E_INVALID_ARGUMENT); /* not whole blocks */
    assert_int_equal(ckpt_plan_slice(p, "q", 1, 32, 64, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_transpose(p, "q", &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_plan_cast(p, NULL, CKPT_F32, &err), CKPT_OK);
    assert_int_equal(ckpt_load(p, NULL, &err), CKPT_OK);
    const ckpt_plan_item *it = ckpt_plan_item_at(p, 0);
    assert_int_equal(it->nbytes, 2 * 32 * 4);
    const float *y = it->data;
    assert_true(y[0] == (float)(0 - 16 + 1) * 0.5f);  /* row 0, block 1 */
    assert_true(y[63] == (float)(31 - 16 + 3) * 0.5f); /* row 1, block 3 */
    ckpt_plan_free(p);
    ckpt_catalog_close(c);
    scratch_free(dir);
}

/* A broad rule says why it left each tensor as it is: by reason, with an
 * example (vectors skipped by quantization are not "of a dtype it does
 * not cast"). */
static void test_skip_reasons(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "m.safetensors");
    write_safetensors(path,
                      "{\"w\":{\"dtype\":\"F32\",\"shape\":[2,64],\"data_offsets\":[0,512]},"
                      "\"v\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[512,768]},"
                      "\"n\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[768,800]},"
                      "\"r\":{\"dtype\":\"F32\",\"shape\":[2,40],\"data_offsets\":[800,1120]},"
                      "\"i\":{\"dtype\":\"I64\",\"shape\":[4],\"data_offsets\":[1120,1152]}}",
                      1152);
    ckpt_catalog *c;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(c, &p, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_cast(p, "*", Q8, &err), CKPT_OK);
    size_t matched, skipped;
    ckpt_plan_last_rule(p, &matched, &skipped);
    assert_int_equal(matched, 5);
    assert_int_equal(skipped, 4);
    const char *why, *example;
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 0, &why, &example), 1);
    assert_string_equal(example, "i");
    assert_non_null(strstr(why, "not a float"));
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 1, &why, &example), 2);
    assert_string_equal(example, "v");
    assert_non_null(strstr(why, "fewer than 2 axes"));
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 2, &why, &example), 1);
    assert_string_equal(example, "r");
    assert_non_null(strstr(why, "not whole quantization blocks"));
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 3, &why, &example), 0);
    assert_null(why);
    assert_null(example);
    /* each rule starts afresh (on a plan that quantizes nothing: a block
     * tensor's last axis stays in place) */
    ckpt_plan_free(p);
    assert_int_equal(ckpt_plan_create(c, &p, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_transpose(p, "*", &err), CKPT_OK);
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 0, &why, NULL), 3);
    assert_non_null(strstr(why, "another number of axes"));
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 1, NULL, NULL), 0);
    assert_int_equal(ckpt_plan_slice(p, "*", 1, 0, 1, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 0, &why, &example), 3);
    assert_string_equal(why, "without that dimension");
    assert_int_equal(ckpt_plan_cast(p, "*", CKPT_I64, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_last_rule_skipped(p, 0, &why, &example), 4);
    assert_non_null(strstr(why, "not an integer"));
    assert_int_equal(ckpt_plan_last_rule_skipped(NULL, 0, &why, &example), 0);
    ckpt_plan_free(p);
    ckpt_catalog_close(c);
    scratch_free(dir);
}

static void test_splits(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_model(in_dir(dir, "s.gguf"), NULL, 1);
    assert_true(file_exists(in_dir(dir, "s-00001-of-00002.gguf")));
    assert_false(file_exists(in_dir(dir, "s.gguf")));
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "s-00001-of-00002.gguf"), &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_file_count(c), 2);
    assert_int_equal(ckpt_catalog_kv_find(c, "split.count")->u, 2);
    float v[3];
    assert_int_equal(ckpt_catalog_read(c, ckpt_catalog_find(c, "v"), 0, v, sizeof v, &err), CKPT_OK);
    assert_true(v[2] == 0.25f);
    ckpt_catalog_close(c);
    /* a directory of parts opens at its first */
    assert_int_equal(ckpt_catalog_open(dir, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(c), 2);
    ckpt_catalog_close(c);
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "s-00002-of-00002.gguf"), &c, &err), CKPT_E_GGUF_SPLIT);
    scratch_free(dir);
}

/* Little-endian header bytes. */
static size_t put(unsigned char *b, size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; i++) b[at + i] = (unsigned char)(v >> (8 * i));
    return at + (size_t)n;
}

static ckpt_status open_bytes(const unsigned char *b, size_t n, const char *dir, ckpt_error *err) {
    const char *path = in_dir(dir, "h.gguf");
    write_bytes(path, b, n);
    ckpt_catalog *c;
    ckpt_status st = ckpt_catalog_open(path, &c, err);
    ckpt_catalog_close(c);
    return st;
}

static void test_refusals(void **state) {
    (void)state;
    char *dir = scratch_dir();
    unsigned char b[256];
    ckpt_error err;
    memset(b, 0, sizeof b);
    memcpy(b, "GGUF", 4);
    size_t at = put(b, 4, 1, 4);
    at = put(b, at, 0, 8), at = put(b, at, 0, 8);
    assert_int_equal(open_bytes(b, at, dir, &err), CKPT_E_GGUF_VERSION);
    put(b, 4, 3, 4);
    put(b, 8, 1000000, 8); /* tensor count */
    assert_int_equal(open_bytes(b, at, dir, &err), CKPT_E_GGUF_COUNT);
    put(b, 8, 0, 8);
    put(b, 16, 1, 8); /* one kv: key of 2^40 bytes */
    size_t k = put(b, 24, 1ULL << 40, 8);
    assert_int_equal(open_bytes(b, k + 8, dir, &err), CKPT_E_GGUF_LENGTH);
    assert_int_equal(err.offset, 24);
    k = put(b, 24, 1, 8);
    b[k++] = 'a';
    size_t type_at = k;
    k = put(b, k, 13, 4); /* unknown value type */
    assert_int_equal(open_bytes(b, k + 8, dir, &err), CKPT_E_GGUF_KV_TYPE);
    assert_int_equal(err.offset, (int64_t)type_at);
    k = put(b, type_at, 4, 4); /* general.alignment-like but named "a": a u32 */
    k = put(b, k, 7, 4);
    assert_int_equal(open_bytes(b, k, dir, &err), CKPT_OK);
    /* one tensor with 5 dimensions */
    put(b, 8, 1, 8);
    size_t t = k;
    t = put(b, t, 1, 8);
    b[t++] = 't';
    size_t dims_at = t;
    t = put(b, t, 5, 4);
    assert_int_equal(open_bytes(b, t + 64, dir, &err), CKPT_E_GGUF_DIMS);
    assert_int_equal(err.offset, (int64_t)dims_at);
    t = put(b, dims_at, 1, 4);
    t = put(b, t, 4, 8);  /* 4 elements */
    t = put(b, t, 77, 4); /* unknown ggml type */
    t = put(b, t, 0, 8);
    assert_int_equal(open_bytes(b, t + 64, dir, &err), CKPT_E_GGUF_TENSOR_TYPE);
    put(b, t - 12, 0, 4); /* F32 */
    put(b, t - 8, 8, 8);  /* offset 8: not a multiple of 32 */
    assert_int_equal(open_bytes(b, t + 64, dir, &err), CKPT_E_GGUF_ALIGNMENT);
    put(b, t - 8, 0, 8);
    size_t data = (t + 31) / 32 * 32;
    assert_int_equal(open_bytes(b, data + 16, dir, &err), CKPT_OK);
    assert_int_equal(open_bytes(b, data + 15, dir, &err), CKPT_E_TRUNCATED);
    /* the same tensor name twice: refused at the second, naming the first */
    put(b, 8, 2, 8);
    memcpy(b + t, b + k, t - k);
    size_t end = put(b, t + (t - k) - 8, 32, 8);
    assert_int_equal(open_bytes(b, (end + 31) / 32 * 32 + 64, dir, &err), CKPT_E_DUPLICATE_NAME);
    assert_int_equal(err.offset, (int64_t)t);
    char first[64];
    snprintf(first, sizeof first, "(first at byte %zu)", k);
    assert_non_null(strstr(err.message, first));
    scratch_free(dir);
}

/* A safetensors source's metadata ({"format": "pt"}, a caller's entry) is
 * foreign to GGUF: a conversion writes it as key-values only with
 * source_metadata; metadata_json's entries always, a GGUF source's always. */
static void convert_to_gguf(const char *src, const char *dst, int source_metadata, const char *metadata_json) {
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &c, &err), CKPT_OK);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1, o.overwrite = 1, o.format = CKPT_FORMAT_GGUF;
    o.source_metadata = source_metadata, o.metadata_json = metadata_json;
    assert_int_equal(convert_all(c, dst, &o, NULL, NULL, &err), CKPT_OK);
    ckpt_catalog_close(c);
}

static void test_source_metadata(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char src[4096], dst[4096], again[4096];
    snprintf(src, sizeof src, "%s", in_dir(dir, "m.safetensors"));
    snprintf(dst, sizeof dst, "%s", in_dir(dir, "m.gguf"));
    snprintf(again, sizeof again, "%s", in_dir(dir, "again.gguf"));
    write_safetensors(src,
                      "{\"__metadata__\":{\"format\":\"pt\",\"origin\":\"test\"},"
                      "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                      8);
    ckpt_catalog *c;
    ckpt_error err;
    convert_to_gguf(src, dst, 0, "{\"general.name\": \"tiny\"}");
    assert_int_equal(ckpt_catalog_open(dst, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_kv_count(c), 1);
    assert_string_equal(ckpt_catalog_kv(c, 0)->key, "general.name");
    ckpt_catalog_close(c);
    convert_to_gguf(dst, again, 0, NULL); /* a GGUF source keeps its own */
    assert_int_equal(ckpt_catalog_open(again, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_kv_count(c), 1);
    assert_string_equal(ckpt_catalog_kv_find(c, "general.name")->string, "tiny");
    ckpt_catalog_close(c);
    convert_to_gguf(src, dst, 1, NULL);
    assert_int_equal(ckpt_catalog_open(dst, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_kv_count(c), 2);
    assert_string_equal(ckpt_catalog_kv_find(c, "format")->string, "pt");
    assert_string_equal(ckpt_catalog_kv_find(c, "origin")->string, "test");
    ckpt_catalog_close(c);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_then_read),
        cmocka_unit_test(test_source_metadata),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_skip_reasons),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
