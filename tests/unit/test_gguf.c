/* GGUF: the writer's output read back through the catalog (typed
 * key-values, block tensors, splits), dequantization through plans, and
 * the reader's refusals — under the sanitizers.  gguf-py's own files and
 * byte identity are in tests/interop/test_gguf.py. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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
    assert_code(ckpt_writer_add_tensor(w, "bad", Q8, 2, bad, NULL, &err), err, CKPT__D(GGUF_DIMS));
    assert_code(ckpt_writer_add_tensor(w, "u", CKPT_U8, 1, vshape, NULL, &err), err, CKPT__D(UNSUPPORTED_DTYPE));
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
    assert_code(ckpt_catalog_open(in_dir(dir, "s-00002-of-00002.gguf"), &c, &err), err, CKPT__D(GGUF_SPLIT));
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
    assert_code(open_bytes(b, at, dir, &err), err, CKPT__D(GGUF_VERSION));
    put(b, 4, 3, 4);
    put(b, 8, 1000000, 8); /* tensor count */
    assert_code(open_bytes(b, at, dir, &err), err, CKPT__D(GGUF_COUNT));
    put(b, 8, 0, 8);
    put(b, 16, 1, 8); /* one kv: key of 2^40 bytes */
    size_t k = put(b, 24, 1ULL << 40, 8);
    assert_code(open_bytes(b, k + 8, dir, &err), err, CKPT__D(GGUF_LENGTH));
    assert_int_equal(err.offset, 24);
    k = put(b, 24, 1, 8);
    b[k++] = 'a';
    size_t type_at = k;
    k = put(b, k, 13, 4); /* unknown value type */
    assert_code(open_bytes(b, k + 8, dir, &err), err, CKPT__D(GGUF_KV_TYPE));
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
    assert_code(open_bytes(b, t + 64, dir, &err), err, CKPT__D(GGUF_DIMS));
    assert_int_equal(err.offset, (int64_t)dims_at);
    t = put(b, dims_at, 1, 4);
    t = put(b, t, 4, 8);  /* 4 elements */
    t = put(b, t, 77, 4); /* unknown ggml type */
    t = put(b, t, 0, 8);
    assert_code(open_bytes(b, t + 64, dir, &err), err, CKPT__D(GGUF_TENSOR_TYPE));
    put(b, t - 12, 0, 4); /* F32 */
    put(b, t - 8, 8, 8);  /* offset 8: not a multiple of 32 */
    assert_code(open_bytes(b, t + 64, dir, &err), err, CKPT__D(GGUF_ALIGNMENT));
    put(b, t - 8, 0, 8);
    size_t data = (t + 31) / 32 * 32;
    assert_int_equal(open_bytes(b, data + 16, dir, &err), CKPT_OK);
    assert_int_equal(open_bytes(b, data + 15, dir, &err), CKPT_E_TRUNCATED);
    /* the same tensor name twice: refused at the second, naming the first */
    put(b, 8, 2, 8);
    memcpy(b + t, b + k, t - k);
    size_t end = put(b, t + (t - k) - 8, 32, 8);
    assert_code(open_bytes(b, (end + 31) / 32 * 32 + 64, dir, &err), err, CKPT__D(DUPLICATE_NAME));
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


/* ---- llama.cpp's conversion of a Hugging Face model ------------------------ */

/* A tiny Llama directory: F32 tensors of pattern bytes (hidden 8, 2 heads
 * of 4, 1 KV head, feed-forward 4, vocabulary 8), config.json (`config`
 * overrides the heads), a byte-level BPE tokenizer.json (Llama 3's Split
 * expression) and tokenizer_config.json. */
static void write_llama_dir(const char *dir, const char *architecture, unsigned heads, bool tokenizer) {
    static const struct { const char *name; unsigned rows, cols; } t[] = {
        {"lm_head.weight", 8, 8},
        {"model.embed_tokens.weight", 8, 8},
        {"model.layers.0.input_layernorm.weight", 8, 0},
        {"model.layers.0.mlp.down_proj.weight", 8, 4},
        {"model.layers.0.mlp.gate_proj.weight", 4, 8},
        {"model.layers.0.mlp.up_proj.weight", 4, 8},
        {"model.layers.0.post_attention_layernorm.weight", 8, 0},
        {"model.layers.0.self_attn.k_proj.weight", 4, 8},
        {"model.layers.0.self_attn.o_proj.weight", 8, 8},
        {"model.layers.0.self_attn.q_proj.weight", 8, 8},
        {"model.layers.0.self_attn.v_proj.weight", 4, 8},
        {"model.norm.weight", 8, 0},
    };
    char header[4096];
    size_t at = 0, len = (size_t)snprintf(header, sizeof header, "{");
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        size_t n = 4u * t[i].rows * (t[i].cols ? t[i].cols : 1);
        char shape[32];
        if (t[i].cols) snprintf(shape, sizeof shape, "[%u, %u]", t[i].rows, t[i].cols);
        else snprintf(shape, sizeof shape, "[%u]", t[i].rows);
        len += (size_t)snprintf(header + len, sizeof header - len,
                                "%s\"%s\": {\"dtype\": \"F32\", \"shape\": %s, \"data_offsets\": [%zu, %zu]}",
                                i ? ", " : "", t[i].name, shape, at, at + n);
        at += n;
    }
    snprintf(header + len, sizeof header - len, "}");
    write_safetensors(in_dir(dir, "model.safetensors"), header, at);
    char config[1024];
    int n = snprintf(config, sizeof config,
                     "{\"architectures\": [\"%s\"], \"hidden_size\": 8, \"intermediate_size\": 4, "
                     "\"num_attention_heads\": %u, \"num_key_value_heads\": 1, \"num_hidden_layers\": 1, "
                     "\"max_position_embeddings\": 64, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0, "
                     "\"vocab_size\": 8, \"bos_token_id\": 6, \"eos_token_id\": 7}",
                     architecture, heads);
    write_bytes(in_dir(dir, "config.json"), config, (size_t)n);
    if (!tokenizer) return;
    static const char tok[] =
        "{\"added_tokens\": [{\"id\": 6, \"content\": \"<|begin|>\", \"special\": true, \"normalized\": false},"
        " {\"id\": 7, \"content\": \"<|end|>\", \"special\": true, \"normalized\": false}],"
        " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\":"
        " \"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+"
        "[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\"}]},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<|begin|>\"}},"
        " {\"Sequence\": {\"id\": \"A\"}}], \"pair\": [{\"SpecialToken\": {\"id\": \"<|begin|>\"}}, {\"Sequence\":"
        " {\"id\": \"A\"}}, {\"Sequence\": {\"id\": \"B\"}}]},"
        " \"decoder\": {\"type\": \"ByteLevel\"},"
        " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\\u0120\": 3, \"\\u0120a\": 4},"
        " \"merges\": [[\"a\", \"b\"], [\"\\u0120\", \"a\"]]}}";
    write_bytes(in_dir(dir, "tokenizer.json"), tok, sizeof tok - 1);
    static const char cfg[] = "{\"bos_token\": \"<|begin|>\", \"eos_token\": \"<|end|>\", \"chat_template\": \"{{ x }}\"}";
    write_bytes(in_dir(dir, "tokenizer_config.json"), cfg, sizeof cfg - 1);
}

static ckpt_status llamacpp(const char *dir, ckpt_dtype dtype, ckpt_catalog **c, ckpt_plan **p, char **kv,
                            ckpt_error *err) {
    assert_int_equal(ckpt_catalog_open(dir, c, err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(*c, p, err), CKPT_OK);
    return ckpt_gguf_llamacpp_plan(*p, dir, dtype, kv, err);
}

/* The tiny Llama directory (write_llama_dir, with its tokenizer) at
 * `model` and llama.cpp's plan over it. */
static ckpt_status tiny_llama(const char *model, ckpt_dtype dtype, ckpt_catalog **c, ckpt_plan **p, char **kv,
                              ckpt_error *err) {
    assert_int_equal(mkdir(model, 0755), 0);
    write_llama_dir(model, "LlamaForCausalLM", 2, true);
    return llamacpp(model, dtype, c, p, kv, err);
}

static void test_llamacpp_plan(void **state) {
    (void)state;
    char *dir = scratch_dir(), *model = strdup(in_dir(dir, "tiny-llama"));
    ckpt_catalog *c;
    ckpt_plan *p;
    char *kv = NULL;
    ckpt_error err;
    assert_int_equal(tiny_llama(model, CKPT_Q8_0, &c, &p, &kv, &err), CKPT_OK);
    /* names, f32 norms, and Q8_0 rows of 4 elements fall back to f16 */
    const ckpt_plan_item *q = ckpt_plan_find(p, "blk.0.attn_q.weight", NULL);
    assert_non_null(q);
    assert_int_equal(q->dtype, CKPT_F16);
    assert_int_equal(ckpt_plan_find(p, "blk.0.attn_norm.weight", NULL)->dtype, CKPT_F32);
    assert_non_null(ckpt_plan_find(p, "output.weight", NULL));
    assert_non_null(strstr(kv, "\"general.name\": {\"gguf_type\": \"string\", \"value\": \"Tiny Llama\"}"));
    assert_non_null(strstr(kv, "\"llama.rope.freq_base\": {\"gguf_type\": \"f32\", \"value\": 10000}"));
    assert_non_null(strstr(kv, "\"tokenizer.ggml.pre\": {\"gguf_type\": \"string\", \"value\": \"llama-bpe\"}"));
    assert_non_null(strstr(kv, "\"value\": [\"a\", \"b\", \"ab\", \"\xc4\xa0\", \"\xc4\xa0" "a\", \"[PAD5]\", "
                               "\"<|begin|>\", \"<|end|>\"]"));
    assert_non_null(strstr(kv, "\"value\": [1, 1, 1, 1, 1, 5, 3, 3]"));
    assert_non_null(strstr(kv, "\"value\": [\"a b\", \"\xc4\xa0 a\"]"));
    assert_non_null(strstr(kv, "\"tokenizer.ggml.bos_token_id\": {\"gguf_type\": \"u32\", \"value\": 6}"));
    assert_non_null(strstr(kv, "\"tokenizer.ggml.add_bos_token\": {\"gguf_type\": \"bool\", \"value\": true}"));
    assert_non_null(strstr(kv, "\"tokenizer.chat_template\""));
    ckpt_free(kv);
    /* Q's rows reordered as LlamaModel.permute: (2 heads, 2, 2, 8), axes 1 and 2 swapped */
    assert_int_equal(ckpt_plan_cast(p, "model.layers.0.self_attn.q_proj.weight", CKPT_F32, &err), CKPT_OK);
    assert_int_equal(ckpt_load(p, NULL, &err), CKPT_OK);
    q = ckpt_plan_find(p, "blk.0.attn_q.weight", NULL);
    const ckpt_tensor_info *src = ckpt_catalog_find(c, "model.layers.0.self_attn.q_proj.weight");
    float raw[64];
    assert_int_equal(ckpt_catalog_read(c, src, 0, raw, sizeof raw, &err), CKPT_OK);
    for (unsigned h = 0; h < 2; h++)
        for (unsigned i = 0; i < 2; i++)
            for (unsigned j = 0; j < 2; j++)
                assert_memory_equal((const float *)q->data + 8 * (4 * h + 2 * i + j), raw + 8 * (4 * h + 2 * j + i),
                                    8 * sizeof(float));
    ckpt_plan_free(p);
    ckpt_catalog_close(c);
    /* No text asked: the plan carries the key-values to the .gguf, in order */
    assert_int_equal(llamacpp(model, CKPT_F32, &c, &p, NULL, &err), CKPT_OK);
    char *out = strdup(in_dir(dir, "out.gguf"));
    assert_int_equal(ckpt_convert_plan(p, out, NULL, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(c);
    assert_int_equal(ckpt_catalog_open(out, &c, &err), CKPT_OK);
    const ckpt_kv *tokens = ckpt_catalog_kv_find(c, "tokenizer.ggml.tokens");
    assert_non_null(tokens);
    assert_int_equal(tokens->count, 8);
    assert_int_equal(ckpt_catalog_kv_find(c, "tokenizer.ggml.merges")->count, 2);
    assert_string_equal(ckpt_catalog_kv(c, 0)->key, "general.architecture");
    assert_string_equal(ckpt_catalog_kv(c, ckpt_catalog_kv_count(c) - 1)->key, "tokenizer.chat_template");
    ckpt_catalog_close(c);
    free(out);
    free(model);
    scratch_free(dir);
}

/* And back: the GGUF's tokenizer key-values as tokenizer.json and
 * tokenizer_config.json beside config.json, written as the vocabulary is
 * walked (the byte-level vocabulary, its merges as pairs, control tokens
 * special, BOS added, Llama 3's split). */
static void test_gguf_hf_tokenizer(void **state) {
    (void)state;
    char *dir = scratch_dir(), *model = strdup(in_dir(dir, "tiny-llama")), *gguf = strdup(in_dir(dir, "m.gguf"));
    char *out = strdup(in_dir(dir, "hf/"));
    ckpt_catalog *c;
    ckpt_plan *p;
    char *kv = NULL;
    ckpt_error err;
    assert_int_equal(tiny_llama(model, CKPT_F32, &c, &p, &kv, &err), CKPT_OK);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1, o.metadata_json = kv;
    assert_int_equal(ckpt_convert_plan(p, gguf, &o, &err), CKPT_OK);
    ckpt_free(kv);
    ckpt_plan_free(p);
    ckpt_catalog_close(c);
    assert_int_equal(ckpt_catalog_open(gguf, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(c, &p, &err), CKPT_OK);
    assert_int_equal(ckpt_gguf_hf_plan(p, CKPT_F32, &err), CKPT_OK);
    o.metadata_json = NULL, o.format = CKPT_FORMAT_SAFETENSORS;
    if (ckpt_convert_plan(p, out, &o, &err) != CKPT_OK) fail_msg("%s", err.message);
    size_t n;
    char *json = read_all(in_dir(out, "tokenizer.json"), &n), *config = read_all(in_dir(out, "tokenizer_config.json"), &n);
    assert_non_null(json);
    assert_non_null(config);
    static const char *const want[] = {
        "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"\xc4\xa0\": 3, \"\xc4\xa0" "a\": 4, \"[PAD5]\": 5, "
        "\"<|begin|>\": 6, \"<|end|>\": 7}",
        "\"merges\": [[\"a\", \"b\"], [\"\xc4\xa0\", \"a\"]]",
        "{\"id\": 6, \"content\": \"<|begin|>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
        "\"normalized\": false, \"special\": true}",
        "\"single\": [{\"SpecialToken\": {\"id\": \"<|begin|>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", "
        "\"type_id\": 0}}]",
        "\\\\p{N}{1,3}", "\"ignore_merges\": true",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(json, want[i])) fail_msg("%s not in %s", want[i], json);
    assert_null(strstr(json, "\"id\": 5, \"content\"")); /* [PAD5]: unused, no added token */
    assert_non_null(strstr(config, "\"bos_token\": \"<|begin|>\""));
    assert_non_null(strstr(config, "\"chat_template\": \"{{ x }}\""));
    /* the control tokens again in added_tokens_decoder, as save_pretrained writes it
     * (convert_hf_to_gguf.py's SentencePiece path reads it alone); [PAD5] not there */
    static const char decoder[] = "\"added_tokens_decoder\": {\n    \"6\": {\n      \"content\": \"<|begin|>\",\n"
                                  "      \"lstrip\": false,\n      \"normalized\": false,\n      \"rstrip\": false,\n"
                                  "      \"single_word\": false,\n      \"special\": true\n    },\n    \"7\": {";
    if (!strstr(config, decoder)) fail_msg("%s not in %s", decoder, config);
    assert_null(strstr(config, "[PAD5]"));
    free(json);
    free(config);
    /* the key-values became those files: the safetensors hold what
     * save_pretrained writes, and the key-values only when asked */
    char *asked = strdup(in_dir(dir, "asked/"));
    o.source_metadata = 1;
    if (ckpt_convert_plan(p, asked, &o, &err) != CKPT_OK) fail_msg("%s", err.message);
    ckpt_plan_free(p);
    ckpt_catalog_close(c);
    assert_int_equal(ckpt_catalog_open(out, &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_metadata_count(c), 1);
    assert_string_equal(ckpt_catalog_metadata_get(c, "format"), "pt");
    ckpt_catalog_close(c);
    assert_int_equal(ckpt_catalog_open(asked, &c, &err), CKPT_OK);
    assert_string_equal(ckpt_catalog_metadata_get(c, "format"), "pt");
    assert_string_equal(ckpt_catalog_metadata_get(c, "general.architecture"), "llama");
    assert_non_null(ckpt_catalog_metadata_get(c, "tokenizer.ggml.tokens"));
    ckpt_catalog_close(c);
    free(asked);
    free(model);
    free(gguf);
    free(out);
    scratch_free(dir);
}

static void test_llamacpp_refusals(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_catalog *c;
    ckpt_plan *p;
    char *kv = NULL;
    ckpt_error err;
    struct { const char *arch; unsigned heads; bool tokenizer; ckpt_status st; const char *words[2]; } cases[] = {
        {"FalconForCausalLM", 2, true, CKPT_E_INVALID_ARGUMENT, {"architecture FalconForCausalLM", "architectures"}},
        {"LlamaForCausalLM", 2, false, CKPT_E_NOT_FOUND, {"tokenizer.json", "llama.cpp"}},
        {"LlamaForCausalLM", 4, true, CKPT_E_INVALID_ARGUMENT, {"hidden_size / num_attention_heads", "k_proj"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[16];
        snprintf(name, sizeof name, "m%zu", i);
        char *model = strdup(in_dir(dir, name));
        assert_int_equal(mkdir(model, 0755), 0);
        write_llama_dir(model, cases[i].arch, cases[i].heads, cases[i].tokenizer);
        assert_int_equal(llamacpp(model, CKPT_DTYPE_INVALID, &c, &p, &kv, &err), cases[i].st);
        assert_null(kv);
        /* the file, the key (where a tensor goes, or in the message) */
        char said[4096];
        snprintf(said, sizeof said, "%s | %s | %s", err.path, err.tensor, err.message);
        assert_non_null(strstr(err.path, i == 1 ? "tokenizer.json" : "config.json"));
        for (int w = 0; w < 2; w++) if (!strstr(said, cases[i].words[w])) fail_msg("%s", said);
        ckpt_plan_free(p);
        ckpt_catalog_close(c);
        free(model);
    }
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_then_read),
        cmocka_unit_test(test_source_metadata),
        cmocka_unit_test(test_splits),
        cmocka_unit_test(test_skip_reasons),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_llamacpp_plan),
        cmocka_unit_test(test_llamacpp_refusals),
        cmocka_unit_test(test_gguf_hf_tokenizer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
