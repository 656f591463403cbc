/* Shard packing, names and index files (huggingface_hub's rules). */
#include <stdlib.h>
#include <string.h>

#include "formats/hf_config.h"
#include "formats/shards.h"
#include "helpers.h"

#define GB 1000000000ULL

static void test_pack_docstring_example(void **state) {
    (void)state;
    /* From split_state_dict_into_shards_factory's docstring: with a 10GB
     * limit, [6, 6, 2, 6, 2, 2] GB → [6], [6+2], [6+2+2]. */
    uint64_t sizes[] = {6 * GB, 6 * GB, 2 * GB, 6 * GB, 2 * GB, 2 * GB};
    uint32_t shard[6];
    assert_int_equal(ckpt__shards_pack(sizes, 6, 10 * GB, shard), 3);
    uint32_t want[] = {0, 1, 1, 2, 2, 2};
    assert_memory_equal(shard, want, sizeof want);
}

static void test_pack_big_tensor_takes_the_next_number(void **state) {
    (void)state;
    /* A tensor over the limit is its own shard at once, numbered before the
     * shard still open. */
    uint64_t sizes[] = {3, 20, 4, 5, 0};
    uint32_t shard[5];
    assert_int_equal(ckpt__shards_pack(sizes, 5, 10, shard), 3);
    uint32_t want[] = {1, 0, 1, 2, 2};
    assert_memory_equal(shard, want, sizeof want);
    assert_int_equal(ckpt__shards_pack(sizes, 0, 10, shard), 0);
    uint64_t exact[] = {5, 5, 1};
    assert_int_equal(ckpt__shards_pack(exact, 3, 10, shard), 2);
    assert_int_equal(shard[1], 0);
    assert_int_equal(shard[2], 1);
}

static void test_names(void **state) {
    (void)state;
    char *n = ckpt__shard_file_name("model", 0, 3);
    assert_string_equal(n, "model-00001-of-00003.safetensors");
    free(n);
    n = ckpt__shard_file_name("model", 0, 1);
    assert_string_equal(n, "model.safetensors");
    free(n);
    assert_true(ckpt__shards_is_own_file("model", "model.safetensors"));
    assert_true(ckpt__shards_is_own_file("model", "model-00002-of-00007.safetensors"));
    assert_true(ckpt__shards_is_own_file("model", "model.safetensors.index.json"));
    assert_false(ckpt__shards_is_own_file("model", "model.safetensors.backup"));
    assert_false(ckpt__shards_is_own_file("model", "model-2-of-7.safetensors"));
    assert_false(ckpt__shards_is_own_file("model", "other.safetensors"));
}

/* The index text is parsed in place and must outlive the index: keep every
 * copy in the arena. */
static ckpt_status parse(const char *text, ckpt__index *idx, ckpt__arena *arena, ckpt_error *err) {
    char *copy = ckpt__arena_strndup(arena, text, strlen(text));
    return ckpt__index_parse(copy, strlen(text), "i.json", arena, idx, err);
}

static void test_index_parse(void **state) {
    (void)state;
    ckpt__arena arena = {0};
    ckpt__index idx;
    ckpt_error err;
    assert_int_equal(parse("{\"metadata\":{\"total_size\":3},\"weight_map\":{\"a\":\"m-2.st\",\"b\":\"m-1.st\",\"c\":\"m-2.st\"}}",
                           &idx, &arena, &err),
                     CKPT_OK);
    assert_int_equal(idx.count, 3);
    assert_int_equal(idx.file_count, 2);
    /* Files come out in name order. */
    assert_string_equal(idx.files[0], "m-1.st");
    assert_int_equal(idx.file_of[0], 1);
    assert_int_equal(idx.file_of[1], 0);
    assert_int_equal(idx.file_of[2], 1);
    ckpt__index_free(&idx);

    static const struct {
        const char *text;
        ckpt_status st;
    } bad[] = {
        {"[]", CKPT__D(INDEX_INVALID)},
        {"{\"metadata\":{}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":[]}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":1}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":\"../x.safetensors\"}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":\"d/../../x\"}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":\"/etc/passwd\"}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":\"\"}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":\"x\\u0000y\"}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{\"a\":\"x\",\"a\":\"x\"}}", CKPT__D(DUPLICATE_NAME)},
        {"{\"metadata\":3,\"weight_map\":{}}", CKPT__D(INDEX_INVALID)},
        {"{\"weight_map\":{", CKPT__D(INDEX_INVALID)},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ckpt_status st = code_of(parse(bad[i].text, &idx, &arena, &err), &err);
        if (st != bad[i].st) fail_msg("%s: got %s", bad[i].text, code_name(st));
        assert_string_equal(err.path, "i.json");
    }
    ckpt__arena_free(&arena);
}

static void test_index_render(void **state) {
    (void)state;
    const char *names[] = {"a", "\xc3\xa9"};
    const char *files[] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
    ckpt__buf b = {0};
    ckpt__index_render(&b, NULL, 42, NULL, NULL, 0, names, files, 2);
    /* Python: json.dump({...}, f, indent=2) */
    assert_string_equal(b.data,
                        "{\n  \"metadata\": {\n    \"total_size\": 42\n  },\n  \"weight_map\": {\n"
                        "    \"a\": \"model-00001-of-00002.safetensors\",\n"
                        "    \"\\u00e9\": \"model-00002-of-00002.safetensors\"\n  }\n}");
    /* Extra metadata follows total_size, as {**split.metadata, **metadata}. */
    b.len = 0;
    const char *k[] = {"tied"}, *v[] = {"emb"};
    ckpt__index_render(&b, NULL, 1, k, v, 1, names, files, 1);
    assert_non_null(strstr(b.data, "\"total_size\": 1,\n    \"tied\": \"emb\"\n  },"));
    /* transformers' save_pretrained: json.dumps(..., indent=2, sort_keys=True)
     * puts total_parameters first; a source's own entry is not repeated. */
    b.len = 0;
    uint64_t params = 124439808;
    const char *k2[] = {"total_parameters", "tied"}, *v2[] = {"7", "emb"};
    ckpt__index_render(&b, &params, 1, k2, v2, 2, names, files, 1);
    assert_non_null(strstr(b.data, "{\n  \"metadata\": {\n    \"total_parameters\": 124439808,\n    \"total_size\": 1,\n"
                                   "    \"tied\": \"emb\"\n  },"));
    free(b.data);
}

/* config.json's dtype: each float dtype value of a "dtype" or
 * "torch_dtype" member, at any depth, replaced; every other byte kept. */
static void test_config_dtype(void **state) {
    (void)state;
    const char *text = "{\n  \"dtype\":   \"float32\",\n  \"x\": [{\"torch_dtype\": \"bfloat16\"}, \"dtype\"],\n"
                       "  \"quantization_config\": {\"dtype\": \"int8\", \"bnb_4bit_compute_dtype\": \"float32\"},\n"
                       "  \"text_config\": {\"hidden_size\": 1.50e1, \"dtype\": \"float16\"},\n"
                       "  \"name\": \"dtype\", \"auto\": {\"dtype\": \"auto\"}, \"esc\": {\"dtype\": \"floa\\u0074\"}\n}";
    ckpt__buf out = {0};
    assert_true(ckpt__hf_config_set_dtype(text, strlen(text), "bfloat16", &out));
    ckpt__buf_append(&out, "", 1);
    assert_string_equal(out.data,
                        "{\n  \"dtype\":   \"bfloat16\",\n  \"x\": [{\"torch_dtype\": \"bfloat16\"}, \"dtype\"],\n"
                        "  \"quantization_config\": {\"dtype\": \"int8\", \"bnb_4bit_compute_dtype\": \"float32\"},\n"
                        "  \"text_config\": {\"hidden_size\": 1.50e1, \"dtype\": \"bfloat16\"},\n"
                        "  \"name\": \"dtype\", \"auto\": {\"dtype\": \"auto\"}, \"esc\": {\"dtype\": \"floa\\u0074\"}\n}");
    free(out.data);
    out = (ckpt__buf){0};
    const char *none = "{\"model_type\": \"gpt2\"}", *bad = "{\"dtype\": \"float32\",}";
    assert_false(ckpt__hf_config_set_dtype(none, strlen(none), "bfloat16", &out));
    assert_false(ckpt__hf_config_set_dtype(bad, strlen(bad), "bfloat16", &out));
    assert_int_equal(out.len, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pack_docstring_example),
        cmocka_unit_test(test_pack_big_tensor_takes_the_next_number),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_index_parse),
        cmocka_unit_test(test_index_render),
        cmocka_unit_test(test_config_dtype),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
