/* Flax msgpack files: Flax's extension types, the object tree, chunked
 * arrays as pieces, and hostile documents. */
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

/* ---- a msgpack builder ---------------------------------------------------- */

typedef struct mb {
    unsigned char b[1 << 16];
    size_t n;
} mb;

static void put(mb *m, const void *p, size_t n) {
    assert_true(m->n + n <= sizeof m->b);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}
static void byte(mb *m, unsigned v) { unsigned char c = (unsigned char)v; put(m, &c, 1); }
static void be(mb *m, uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) byte(m, (unsigned)(v >> (8 * i)) & 0xff);
}
static void map(mb *m, unsigned n) { n < 16 ? byte(m, 0x80 | n) : (byte(m, 0xde), be(m, n, 2)); }
static void arr(mb *m, unsigned n) { n < 16 ? byte(m, 0x90 | n) : (byte(m, 0xdc), be(m, n, 2)); }
static void str(mb *m, const char *s) {
    size_t n = strlen(s);
    n < 32 ? byte(m, 0xa0 | (unsigned)n) : (byte(m, 0xd9), byte(m, (unsigned)n));
    put(m, s, n);
}
static void uint_(mb *m, uint64_t v) { v < 128 ? byte(m, (unsigned)v) : (byte(m, 0xcf), be(m, v, 8)); }
static void bin(mb *m, const void *p, size_t n) {
    if (n < 256) byte(m, 0xc4), byte(m, (unsigned)n);
    else byte(m, 0xc6), be(m, n, 4);
    put(m, p, n);
}
static void f64(mb *m, double d) {
    uint64_t v;
    memcpy(&v, &d, 8);
    byte(m, 0xcb), be(m, v, 8);
}
static void ext(mb *m, int type, const mb *payload) {
    size_t n = payload->n;
    if (n == 1 || n == 2 || n == 4 || n == 8 || n == 16) byte(m, 0xd4 + (unsigned)__builtin_ctz((unsigned)n));
    else if (n < 256) byte(m, 0xc7), byte(m, (unsigned)n);
    else byte(m, 0xc9), be(m, n, 4);
    byte(m, (unsigned)type);
    put(m, payload->b, n);
}
/* Flax's ndarray extension: (shape, dtype name, data). */
static void ndarray(mb *m, int type, const char *dtype, unsigned ndim, const uint64_t *shape, const void *data,
                    size_t n) {
    static mb p;
    p.n = 0;
    arr(&p, 3);
    arr(&p, ndim);
    for (unsigned i = 0; i < ndim; i++) uint_(&p, shape[i]);
    str(&p, dtype);
    bin(&p, data, n);
    ext(m, type, &p);
}

static char *dir;

static const char *save(const mb *m, const char *name) {
    const char *path = in_dir(dir, name);
    write_bytes(path, m->b, m->n);
    return path;
}

static ckpt_status open_doc(const mb *m, ckpt_catalog **cat, ckpt_error *err) {
    return ckpt_catalog_open(save(m, "m.msgpack"), cat, err);
}

static int setup(void **state) {
    (void)state;
    dir = scratch_dir();
    return 0;
}
static int teardown(void **state) {
    (void)state;
    scratch_free(dir);
    return 0;
}

/* ---- documents Flax writes -------------------------------------------------- */

static void flax_doc(mb *m) {
    static const float k[6] = {1, 2, 3, 4, 5, 6};
    static const uint16_t b[3] = {0x3f80, 0x4000, 0x4040}; /* bfloat16 1, 2, 3 */
    static const float s = 2.5f;
    m->n = 0;
    map(m, 11);
    str(m, "params");
    map(m, 1);
    str(m, "Dense_0");
    map(m, 2);
    str(m, "bias");
    ndarray(m, 1, "bfloat16", 1, (uint64_t[]){3}, b, 6);
    str(m, "kernel");
    ndarray(m, 1, "float32", 2, (uint64_t[]){2, 3}, k, 24);
    str(m, "step"), uint_(m, 7);
    str(m, "neg"), byte(m, 0xd0), byte(m, 0xfb); /* int8 -5 */
    str(m, "lr"), f64(m, 0.5);
    str(m, "name"), str(m, "x\"y");
    str(m, "flag"), byte(m, 0xc3);
    str(m, "none"), byte(m, 0xc0);
    str(m, "c");
    mb pair = {.n = 0};
    arr(&pair, 2), f64(&pair, 1.0), f64(&pair, -2.0);
    ext(m, 2, &pair);
    str(m, "s");
    ndarray(m, 3, "float32", 0, NULL, &s, 4);
    str(m, "lst");
    arr(m, 2), uint_(m, 1), ndarray(m, 1, "uint8", 1, (uint64_t[]){2}, "\x05\x06", 2);
    uint_(m, 3); /* an int key */
    map(m, 1), str(m, "raw"), bin(m, "\x00\x01", 2);
}

static void test_flax_document(void **state) {
    (void)state;
    mb m;
    flax_doc(&m);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(open_doc(&m, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_FLAX_MSGPACK);
    assert_string_equal(ckpt_format_name(CKPT_FORMAT_FLAX_MSGPACK), "flax-msgpack");
    assert_int_equal(ckpt_catalog_tensor_count(cat), 4);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "params.Dense_0.kernel");
    assert_non_null(t);
    assert_int_equal(t->dtype, CKPT_F32);
    assert_int_equal(t->ndim, 2);
    float k[6];
    assert_int_equal(ckpt_catalog_read(cat, t, 0, k, 24, &err), CKPT_OK);
    assert_true(k[0] == 1 && k[5] == 6);
    const void *view;
    assert_int_equal(ckpt_catalog_view(cat, t, &view, &err), CKPT_OK); /* in place, in the file */
    assert_memory_equal(view, k, 24);
    t = ckpt_catalog_find(cat, "params.Dense_0.bias");
    assert_int_equal(t->dtype, CKPT_BF16);
    t = ckpt_catalog_find(cat, "s");
    assert_int_equal(t->ndim, 0);
    t = ckpt_catalog_find(cat, "lst.1");
    assert_int_equal(t->dtype, CKPT_U8);
    const char *tree = ckpt_catalog_tree_json(cat);
    assert_non_null(tree);
    assert_string_equal(
        tree,
        "{\"__dict__\": [[\"params\", {\"__dict__\": [[\"Dense_0\", {\"__dict__\": [[\"bias\", {\"__tensor__\": "
        "\"params.Dense_0.bias\"}], [\"kernel\", {\"__tensor__\": \"params.Dense_0.kernel\"}]]}]]}], [\"step\", 7], "
        "[\"neg\", -5], [\"lr\", 0.5], [\"name\", \"x\\\"y\"], [\"flag\", true], [\"none\", null], [\"c\", "
        "{\"__call__\": \"builtins.complex\", \"args\": [1.0, -2.0]}], [\"s\", {\"__tensor__\": \"s\"}], [\"lst\", "
        "[1, {\"__tensor__\": \"lst.1\"}]], [3, {\"__dict__\": [[\"raw\", {\"__bytes__\": \"0001\"}]]}]]}");
    ckpt_catalog_close(cat);

    /* Without the .msgpack name the content tells the format. */
    assert_int_equal(ckpt_catalog_open(save(&m, "weights.bin"), &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_FLAX_MSGPACK);
    ckpt_catalog_close(cat);
    /* A directory holding flax_model.msgpack, as transformers saves it. */
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/model", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    write_bytes(in_dir(sub, "flax_model.msgpack"), m.b, m.n);
    write_bytes(in_dir(sub, "config.json"), "{}", 2);
    assert_int_equal(ckpt_catalog_open(sub, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_FLAX_MSGPACK);
    ckpt_catalog_close(cat);
}

/* Every prefix of a document fails cleanly. */
static void test_truncated(void **state) {
    (void)state;
    mb m, cut;
    flax_doc(&m);
    for (size_t n = 0; n < m.n; n++) {
        memcpy(cut.b, m.b, n);
        cut.n = n;
        ckpt_catalog *cat;
        ckpt_error err;
        ckpt_status st = ckpt_catalog_open(save(&cut, "cut.msgpack"), &cat, &err);
        if (st == CKPT_OK) fail_msg("prefix of %zu bytes opened", n);
        st = code_of(st, &err);
        assert_true(st == CKPT_E_TRUNCATED || st == CKPT__D(MSGPACK_INVALID) || st == CKPT__D(SIZE_MISMATCH));
    }
}

/* A float32 (3, 4, 5) array in chunks of 7 elements, chunk keys out of order. */
static void chunked_doc(mb *m, float *all, const char *first_key) {
    for (int i = 0; i < 60; i++) all[i] = (float)i;
    m->n = 0;
    map(m, 1);
    str(m, "emb");
    map(m, 3);
    str(m, first_key), byte(m, 0xc3);
    str(m, "shape");
    map(m, 3), str(m, "2"), uint_(m, 5), str(m, "0"), uint_(m, 3), str(m, "1"), uint_(m, 4);
    str(m, "chunks");
    map(m, 9);
    for (int k = 8; k >= 0; k--) {
        char key[16];
        snprintf(key, sizeof key, "%d", k);
        str(m, key);
        uint64_t n = k == 8 ? 4 : 7;
        ndarray(m, 1, "float32", 1, &n, all + 7 * k, n * 4);
    }
}

static void test_chunked(void **state) {
    (void)state;
    mb m;
    float all[60], out[60];
    chunked_doc(&m, all, "__msgpack_chunked_array__");
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(open_doc(&m, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 1);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "emb");
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[0], 3);
    assert_int_equal(t->shape[2], 5);
    assert_true(t->compressed); /* several pieces: read, never viewed */
    const void *view;
    assert_int_equal(ckpt_catalog_view(cat, t, &view, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_catalog_read(cat, t, 0, out, 240, &err), CKPT_OK);
    assert_memory_equal(out, all, 240);
    for (uint64_t a = 0; a < 240; a += 13)
        for (uint64_t n = 1; a + n <= 240; n += 29) {
            memset(out, 0, sizeof out);
            assert_int_equal(ckpt_catalog_read(cat, t, a, out, n, &err), CKPT_OK);
            assert_memory_equal(out, (unsigned char *)all + a, n);
        }
    /* Through the engine: rows 1..3 of axis 1, transposed to (5, 2, 3). */
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_slice(plan, "emb", 1, 1, 3, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_permute(plan, "emb", 3, (uint32_t[]){2, 1, 0}, &err), CKPT_OK);
    assert_int_equal(ckpt_load(plan, NULL, &err), CKPT_OK);
    const float *got = ckpt_plan_item_at(plan, 0)->data;
    for (int k = 0; k < 5; k++)
        for (int j = 0; j < 2; j++)
            for (int i = 0; i < 3; i++) assert_true(got[k * 6 + j * 3 + i] == all[i * 20 + (j + 1) * 5 + k]);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
}

/* ---- hostile documents ---------------------------------------------------------- */

typedef void (*build_fn)(mb *m);

static void b_trailing(mb *m) { map(m, 0), byte(m, 0); }
static void b_ext_type(mb *m) {
    mb p = {.n = 0};
    byte(&p, 0xc0);
    map(m, 1), str(m, "a"), ext(m, 5, &p);
}
static void b_two_items(mb *m) {
    mb p = {.n = 0};
    arr(&p, 2), arr(&p, 0), str(&p, "float32");
    map(m, 1), str(m, "a"), ext(m, 1, &p);
}
static void b_size(mb *m) { map(m, 1), str(m, "a"), ndarray(m, 1, "float32", 1, (uint64_t[]){3}, "12345678", 8); }
static void b_dtype(mb *m) { map(m, 1), str(m, "a"), ndarray(m, 1, "complex128", 1, (uint64_t[]){1}, "0123456789abcdef", 16); }
static void b_negative(mb *m) {
    mb p = {.n = 0};
    arr(&p, 3), arr(&p, 1), byte(&p, 0xff), str(&p, "uint8"), bin(&p, "", 0);
    map(m, 1), str(m, "a"), ext(m, 1, &p);
}
static void b_huge_map(mb *m) { byte(m, 0xdf), be(m, 1000000000, 4), str(m, "a"), byte(m, 0xc0); }
static void b_deep(mb *m) {
    for (int i = 0; i < 300; i++) arr(m, 1);
    byte(m, 0xc0);
}
static void b_float_key(mb *m) { map(m, 1), f64(m, 1.5), byte(m, 0xc0); }
static void b_c1(mb *m) { map(m, 1), str(m, "a"), byte(m, 0xc1); }
static void b_utf8(mb *m) { map(m, 1), byte(m, 0xa2), byte(m, 0xc3), byte(m, 0x28), byte(m, 0xc0); }
static void b_nul_key(mb *m) { map(m, 1), byte(m, 0xa3), put(m, "a\0b", 3), byte(m, 0xc0); }
static void b_payload_extra(mb *m) {
    mb p = {.n = 0};
    arr(&p, 3), arr(&p, 1), uint_(&p, 1), str(&p, "uint8"), bin(&p, "x", 1), byte(&p, 0xc0);
    map(m, 1), str(m, "a"), ext(m, 1, &p);
}
static void b_ext_past_end(mb *m) { map(m, 1), str(m, "a"), byte(m, 0xc9), be(m, 1000, 4), byte(m, 1), arr(m, 0); }
static void b_bin_in_ext(mb *m) {
    mb p = {.n = 0};
    arr(&p, 3), arr(&p, 1), uint_(&p, 100), str(&p, "uint8"), byte(&p, 0xc4), byte(&p, 100);
    map(m, 2), str(m, "a"), ext(m, 1, &p), str(m, "b"), byte(m, 0xc0);
}
static void b_duplicate(mb *m) {
    map(m, 2), str(m, "a.b"), ndarray(m, 1, "uint8", 1, (uint64_t[]){1}, "x", 1);
    str(m, "a"), map(m, 1), str(m, "b"), ndarray(m, 1, "uint8", 1, (uint64_t[]){1}, "y", 1);
}
static void chunk_map(mb *m, unsigned nshape, const char *dtype1, const char *key1) {
    map(m, 1), str(m, "t"), map(m, 3), str(m, "__msgpack_chunked_array__"), byte(m, 0xc3);
    str(m, "shape"), map(m, nshape);
    for (unsigned i = 0; i < nshape; i++) {
        char k[16];
        snprintf(k, sizeof k, "%u", i);
        str(m, k), uint_(m, 2);
    }
    str(m, "chunks"), map(m, 2);
    str(m, "0"), ndarray(m, 1, "uint8", 1, (uint64_t[]){2}, "ab", 2);
    str(m, key1), ndarray(m, 1, dtype1, 1, (uint64_t[]){2}, "cd", 2);
}
static void b_chunk_count(mb *m) { chunk_map(m, 1, "uint8", "1"); }  /* 4 elements for a shape of 2 */
static void b_chunk_dtype(mb *m) { chunk_map(m, 2, "int8", "1"); }
static void b_chunk_keys(mb *m) { chunk_map(m, 2, "uint8", "01"); }
static void b_chunk_nomap(mb *m) {
    map(m, 1), str(m, "t"), map(m, 3), str(m, "__msgpack_chunked_array__"), byte(m, 0xc3);
    str(m, "shape"), map(m, 0), str(m, "chunks"), arr(m, 0);
}
static void b_string_past_end(mb *m) { map(m, 1), byte(m, 0xdb), be(m, 0x7fffffff, 4), put(m, "ab", 2); }
static void b_many_dims(mb *m) {
    mb p = {.n = 0};
    arr(&p, 3), arr(&p, 65);
    for (int i = 0; i < 65; i++) uint_(&p, 1);
    str(&p, "uint8"), bin(&p, "x", 1);
    map(m, 1), str(m, "a"), ext(m, 1, &p);
}
static void b_overflow(mb *m) {
    mb p = {.n = 0};
    arr(&p, 3), arr(&p, 3), uint_(&p, 1ull << 40), uint_(&p, 1ull << 40), uint_(&p, 1ull << 40);
    str(&p, "uint8"), bin(&p, "x", 1);
    map(m, 1), str(m, "a"), ext(m, 1, &p);
}

static void test_hostile(void **state) {
    (void)state;
    static const struct {
        build_fn build;
        ckpt_status st;
        const char *says;
    } cases[] = {
        {b_trailing, CKPT__D(TRAILING_BYTES), "after the msgpack document"},
        {b_ext_type, CKPT__D(MSGPACK_INVALID), "extension type 5"},
        {b_two_items, CKPT__D(MSGPACK_INVALID), "has 2 items"},
        {b_size, CKPT__D(SIZE_MISMATCH), "needs 12 bytes; its data holds 8"},
        {b_dtype, CKPT__D(UNKNOWN_DTYPE), "complex128"},
        {b_negative, CKPT__D(MSGPACK_INVALID), "something other than integers"},
        {b_huge_map, CKPT_E_TRUNCATED, "cannot fit"},
        {b_deep, CKPT_E_LIMIT, "nested deeper"},
        {b_float_key, CKPT__D(MSGPACK_INVALID), "map key is not a string or an integer"},
        {b_c1, CKPT__D(MSGPACK_INVALID), "0xc1 starts no msgpack value"},
        {b_utf8, CKPT__D(MSGPACK_INVALID), "not UTF-8"},
        {b_nul_key, CKPT__D(MSGPACK_INVALID), "NUL"},
        {b_payload_extra, CKPT__D(MSGPACK_INVALID), "after the ndarray payload"},
        {b_ext_past_end, CKPT_E_TRUNCATED, "past the end of the file"},
        {b_bin_in_ext, CKPT__D(MSGPACK_INVALID), "past the end of its extension"},
        {b_duplicate, CKPT__D(DUPLICATE_NAME), "also in"},
        {b_chunk_count, CKPT__D(SIZE_MISMATCH), "more elements than the shape's 2"},
        {b_chunk_dtype, CKPT__D(MSGPACK_INVALID), "chunk 1 is I8, chunk 0 U8"},
        {b_chunk_keys, CKPT__D(MSGPACK_INVALID), "keys are not '0'"},
        {b_chunk_nomap, CKPT__D(MSGPACK_INVALID), "no 'chunks' map"},
        {b_string_past_end, CKPT_E_LIMIT, "string of 2147483647 bytes"},
        {b_many_dims, CKPT_E_LIMIT, "65 dimensions"},
        {b_overflow, CKPT__D(SHAPE_OVERFLOW), "overflows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        static mb m;
        m.n = 0;
        cases[i].build(&m);
        ckpt_catalog *cat = NULL;
        ckpt_error err;
        ckpt_status st = code_of(open_doc(&m, &cat, &err), &err);
        if (st != cases[i].st || !strstr(err.message, cases[i].says))
            fail_msg("case %zu: got %s '%s'", i, code_name(st), err.message);
        assert_null(cat);
        assert_non_null(strstr(err.path, "m.msgpack"));
        assert_true(err.offset >= 0);
    }
}

/* Writing Flax msgpack: names split at dots into nested maps, read back. */
static void test_write(void **state) {
    (void)state;
    const char *path = in_dir(dir, "out.msgpack");
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = CKPT_FORMAT_FLAX_MSGPACK;
    o.no_sync = 1;
    o.overwrite = 1;
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(path, &o, &w, &err), CKPT_OK);
    float k[6] = {1, 2, 3, 4, 5, 6};
    uint8_t big[300];
    for (int i = 0; i < 300; i++) big[i] = (uint8_t)i;
    size_t ik, ib, ih, is;
    assert_int_equal(ckpt_writer_add_tensor(w, "params.Dense_0.kernel", CKPT_F32, 2, (uint64_t[]){2, 3}, &ik, &err),
                     CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "params.h.0.w", CKPT_U8, 1, (uint64_t[]){300}, &ih, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "params.Dense_0.bias", CKPT_BF16, 1, (uint64_t[]){0}, &ib, &err),
                     CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "step", CKPT_I64, 0, NULL, &is, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    int64_t step = 7;
    assert_int_equal(ckpt_writer_write(w, ih, big, 300, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, is, &step, 8, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, ik, k, 24, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_FLAX_MSGPACK);
    assert_string_equal(ckpt_catalog_tree_json(cat),
                        "{\"__dict__\": [[\"params\", {\"__dict__\": [[\"Dense_0\", {\"__dict__\": [[\"kernel\", "
                        "{\"__tensor__\": \"params.Dense_0.kernel\"}], [\"bias\", {\"__tensor__\": "
                        "\"params.Dense_0.bias\"}]]}], [\"h\", {\"__dict__\": [[\"0\", {\"__dict__\": [[\"w\", "
                        "{\"__tensor__\": \"params.h.0.w\"}]]}]]}]]}], [\"step\", {\"__tensor__\": \"step\"}]]}");
    uint8_t rb[300];
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_find(cat, "params.h.0.w"), 0, rb, 300, &err), CKPT_OK);
    assert_memory_equal(rb, big, 300);
    float rk[6];
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_find(cat, "params.Dense_0.kernel"), 0, rk, 24, &err), CKPT_OK);
    assert_memory_equal(rk, k, 24);
    int64_t rs;
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_find(cat, "step"), 0, &rs, 8, &err), CKPT_OK);
    assert_int_equal(rs, 7);
    ckpt_catalog_close(cat);

    /* Names that cannot nest, tensors msgpack cannot hold, packed dtypes. */
    static const struct {
        const char *a, *b;
        ckpt_dtype dtype;
        uint64_t size;
        ckpt_status st;
        const char *says;
    } bad[] = {
        {"a", "a.b", CKPT_U8, 1, CKPT_E_INVALID_ARGUMENT, "nests under the tensor 'a'"},
        {"a.b", "a", CKPT_U8, 1, CKPT_E_INVALID_ARGUMENT, "both a tensor and a map"},
        {"x", "big", CKPT_U8, 5ull << 30, CKPT_E_LIMIT, "at most 4 GiB"},
    };
    const char *bad_path = in_dir(dir, "bad.msgpack");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(ckpt_writer_create(bad_path, &o, &w, &err), CKPT_OK);
        assert_int_equal(ckpt_writer_add_tensor(w, bad[i].a, CKPT_U8, 1, (uint64_t[]){1}, NULL, &err), CKPT_OK);
        assert_int_equal(ckpt_writer_add_tensor(w, bad[i].b, bad[i].dtype, 1, &bad[i].size, NULL, &err), CKPT_OK);
        ckpt_status st = ckpt_writer_begin(w, &err);
        if (st != bad[i].st || !strstr(err.message, bad[i].says))
            fail_msg("case %zu: %s '%s'", i, ckpt_status_name(st), err.message);
        ckpt_writer_free(w);
        assert_false(file_exists(bad_path));
    }
    /* A dtype NumPy has no name for is refused as it is declared. */
    assert_int_equal(ckpt_writer_create(bad_path, &o, &w, &err), CKPT_OK);
    assert_code(ckpt_writer_add_tensor(w, "f4", CKPT_F4, 1, (uint64_t[]){4}, NULL, &err), err, CKPT__D(UNSUPPORTED_DTYPE));
    assert_string_equal(err.tensor, "f4");
    assert_non_null(strstr(err.message, "NumPy has no F4 dtype"));
    ckpt_writer_free(w);
    assert_false(file_exists(bad_path));
    o.max_shard_size = 1000; /* one file: refused by name when the writer is made */
    assert_int_equal(ckpt_writer_create(bad_path, &o, &w, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "flax-msgpack output is one file"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flax_document),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_write),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
