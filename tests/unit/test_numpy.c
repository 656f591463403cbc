/* NumPy .npy headers and files: the header grammar, dtype spellings,
 * Fortran order as strided reads, big-endian data, and hostile headers. */
#include <string.h>
#include <zlib.h>

#include "formats/numpy.h"
#include "helpers.h"

/* A .npy preamble + header for `dict` (v1.0 unless version says otherwise),
 * padded as NumPy pads, then `data`. Returns the length. */
static size_t make_npy(unsigned char *out, int version, const char *dict, const void *data, size_t n) {
    size_t d = strlen(dict), pre = version == 1 ? 10 : 12, total = pre + d + 1;
    total = (total + 63) / 64 * 64;
    memcpy(out, "\x93NUMPY", 6);
    out[6] = (unsigned char)version, out[7] = 0;
    size_t hl = total - pre;
    out[8] = (unsigned char)hl, out[9] = (unsigned char)(hl >> 8);
    if (version != 1) out[10] = (unsigned char)(hl >> 16), out[11] = (unsigned char)(hl >> 24);
    memcpy(out + pre, dict, d);
    memset(out + pre + d, ' ', total - pre - d - 1);
    out[total - 1] = '\n';
    if (n) memcpy(out + total, data, n);
    return total + n;
}

static ckpt_status parse_dict(const char *dict, int version, ckpt__npy_header *h, ckpt_error *err) {
    static unsigned char buf[1 << 14];
    ckpt__arena arena = {0};
    size_t n = make_npy(buf, version, dict, NULL, 0);
    ckpt_status st = ckpt__npy_parse(buf, n, "x.npy", "x", 0, &arena, h, err);
    static uint64_t shape[CKPT_MAX_DIMS];
    if (st == CKPT_OK) memcpy(shape, h->shape, h->ndim * sizeof *shape), h->shape = shape;
    ckpt__arena_free(&arena);
    return st;
}

static void test_headers(void **state) {
    (void)state;
    ckpt__npy_header h;
    ckpt_error err;
    assert_int_equal(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 1, &h, &err), CKPT_OK);
    assert_int_equal(h.dtype, CKPT_F32);
    assert_int_equal(h.ndim, 2);
    assert_int_equal(h.shape[0], 3);
    assert_int_equal(h.shape[1], 4);
    assert_int_equal(h.nbytes, 48);
    assert_int_equal(h.data_offset, 128);
    assert_false(h.fortran);
    /* Other key orders, double quotes, no trailing comma, Python 2 longs,
     * scalars, 1-tuples, empty arrays, v2 and v3 headers. */
    assert_int_equal(parse_dict("{\"shape\": (2L, 3L), \"fortran_order\": True, \"descr\": \">i8\"}", 2, &h, &err), CKPT_OK);
    assert_int_equal(h.dtype, CKPT_I64);
    assert_true(h.big_endian);
    assert_true(h.fortran);
    assert_int_equal(h.data_offset, 128);
    assert_int_equal(parse_dict("{'descr': '|b1', 'fortran_order': False, 'shape': ()}", 3, &h, &err), CKPT_OK);
    assert_int_equal(h.ndim, 0);
    assert_int_equal(h.numel, 1);
    assert_int_equal(parse_dict("{'descr': '<u2', 'fortran_order': False, 'shape': (7,)}", 1, &h, &err), CKPT_OK);
    assert_int_equal(h.shape[0], 7);
    assert_int_equal(parse_dict("{'descr': '<c8', 'fortran_order': False, 'shape': (0, 5)}", 1, &h, &err), CKPT_OK);
    assert_int_equal(h.nbytes, 0);
    assert_int_equal(h.dtype, CKPT_C64);

    /* Each malformed header names what is wrong. */
    static const struct {
        const char *dict;
        ckpt_status st;
        const char *says;
    } bad[] = {
        {"['descr']", CKPT__D(NPY_INVALID), "not a dict"},
        {"{'descr': '<f4', 'shape': (3,)}", CKPT__D(NPY_INVALID), "lacks 'fortran_order'"},
        {"{'descr': '<f4', 'fortran_order': False}", CKPT__D(NPY_INVALID), "lacks 'shape'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", CKPT__D(NPY_INVALID), "unexpected key 'extra'"},
        {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", CKPT__D(NPY_INVALID), "given twice"},
        {"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", CKPT__D(NPY_INVALID), "not True or False"},
        {"{'descr': '<f4', 'fortran_order': Falsey, 'shape': (3,)}", CKPT__D(NPY_INVALID), "not True or False"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3)}", CKPT__D(NPY_INVALID), "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': [3]}", CKPT__D(NPY_INVALID), "not a tuple"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (-3,)}", CKPT__D(NPY_INVALID), "non-negative integers"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4)}", CKPT__D(NPY_INVALID), "malformed"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)} x", CKPT__D(NPY_INVALID), "text after the dict"},
        {"{'descr': '<f4' 'fortran_order': False, 'shape': (3,)}", CKPT__D(NPY_INVALID), "expected ',' or '}'"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", CKPT__D(NPY_INVALID), "expected ',' or '}'"},
        {"{'des\\cr': '<f4'}", CKPT__D(NPY_INVALID), "quoted key"},
        {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "structured"},
        {"{'descr': '<c16', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "complex128"},
        {"{'descr': '|O', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "pickles"},
        {"{'descr': '<U8', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "string"},
        {"{'descr': '<V1', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "8-bit ml_dtypes"},
        {"{'descr': '<M8[ns]', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "datetime"},
        {"{'descr': 'int4', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "4-bit"},
        {"{'descr': '<f16', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "extended-precision"},
        {"{'descr': 'zz', 'fortran_order': False, 'shape': (3,)}", CKPT__D(UNKNOWN_DTYPE), "not a NumPy type"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4)}", CKPT__D(SHAPE_OVERFLOW), "overflows"},
        {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", CKPT__D(NPY_INVALID), "integers"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ckpt_status st = code_of(parse_dict(bad[i].dict, 1, &h, &err), &err);
        if (st != bad[i].st || !strstr(err.message, bad[i].says))
            fail_msg("%s: got %s '%s'", bad[i].dict, code_name(st), err.message);
        assert_string_equal(err.path, "x.npy");
        assert_string_equal(err.tensor, "x");
        assert_true(err.offset >= 8);
    }
    /* 65 dimensions. */
    char many[1024] = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
    for (int i = 0; i < 65; i++) strcat(many, "1,");
    strcat(many, ")}");
    assert_int_equal(parse_dict(many, 1, &h, &err), CKPT_E_LIMIT);
    /* Non-ASCII in a v1 header; v3 allows UTF-8 but not broken UTF-8. */
    assert_code(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), '\xc3\xa9': 1}", 1, &h, &err), err, CKPT__D(NPY_INVALID));
    assert_non_null(strstr(err.message, "ASCII"));
    assert_code(parse_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), '\xc3': 1}", 3, &h, &err), err, CKPT__D(NPY_INVALID));
    assert_non_null(strstr(err.message, "UTF-8"));
}

static void test_preamble(void **state) {
    (void)state;
    ckpt_error err;
    uint64_t off;
    unsigned char p[16] = "\x93NUMPY\x01\x00\x76\x00";
    assert_int_equal(ckpt__npy_preamble(p, 10, "f", NULL, 100, &off, &err), CKPT_OK);
    assert_int_equal(off, 10 + 0x76);
    assert_int_equal(ckpt__npy_preamble(p, 9, "f", NULL, 100, &off, &err), CKPT_E_TRUNCATED);
    assert_int_equal(err.offset, 109);
    p[6] = 4;
    assert_code(ckpt__npy_preamble(p, 10, "f", NULL, 100, &off, &err), err, CKPT__D(NPY_INVALID));
    assert_non_null(strstr(err.message, "version 4.0"));
    assert_int_equal(err.offset, 106);
    p[6] = 1, p[7] = 1;
    assert_code(ckpt__npy_preamble(p, 10, "f", NULL, -1, &off, &err), err, CKPT__D(NPY_INVALID));
    assert_int_equal(err.offset, -1); /* inside a compressed member: no file offset */
    memcpy(p, "\x93NUMPY\x02\x00\x00\x00\x00\x01", 12); /* 16 MiB header */
    assert_int_equal(ckpt__npy_preamble(p, 12, "f", NULL, 0, &off, &err), CKPT_E_LIMIT);
    assert_code(ckpt__npy_preamble((const unsigned char *)"PK\3\4xxxxxxxx", 12, "f", NULL, 0, &off, &err), err, CKPT__D(NPY_INVALID));
}

static void test_dtype_names(void **state) {
    (void)state;
    bool big;
    static const struct {
        const char *s;
        ckpt_dtype d;
        bool big;
    } ok[] = {
        {"<f4", CKPT_F32, false}, {">f4", CKPT_F32, true},   {"=f8", CKPT_F64, false}, {"|b1", CKPT_BOOL, false},
        {"|i1", CKPT_I8, false},  {">i1", CKPT_I8, false},   {"<u8", CKPT_U64, false}, {">c8", CKPT_C64, true},
        {"<f2", CKPT_F16, false}, {"<V2", CKPT_BF16, false}, {"<f1", CKPT_F8_E5M2, false}, {"f4", CKPT_F32, false},
        {"bfloat16", CKPT_BF16, false}, {"float8_e4m3fn", CKPT_F8_E4M3, false}, {"float8_e5m2", CKPT_F8_E5M2, false},
        {"float8_e4m3fnuz", CKPT_F8_E4M3FNUZ, false}, {"float8_e5m2fnuz", CKPT_F8_E5M2FNUZ, false},
        {"float8_e8m0fnu", CKPT_F8_E8M0, false}, {"float32", CKPT_F32, false}, {"bool", CKPT_BOOL, false},
        {"uint16", CKPT_U16, false}, {"complex64", CKPT_C64, false},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(ckpt__numpy_dtype(ok[i].s, &big, NULL), ok[i].d);
        assert_int_equal(big, ok[i].big);
    }
    static const char *const refused[] = {"<c16", "float8_e3m4", "float8_e4m3b11fnuz", "float4_e2m1fn", "uint4",
                                          "|V1", "|V8", "<f16", "float128", "|S3", "<U1", "O", "<M8[s]", "", "<",
                                          "<f", "<f4x", "<i3"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *why = NULL;
        assert_int_equal(ckpt__numpy_dtype(refused[i], &big, &why), CKPT_DTYPE_INVALID);
        assert_non_null(why);
    }
    for (int d = 1; d < CKPT_DTYPE_COUNT; d++) {
        const char *name = ckpt__numpy_name((ckpt_dtype)d);
        if (!name) {
            assert_true(d == CKPT_F4 || d == CKPT_F6_E2M3 || d == CKPT_F6_E3M2 || ckpt_dtype_is_block((ckpt_dtype)d));
            continue;
        }
        assert_int_equal(ckpt__numpy_dtype(name, &big, NULL), d);
    }
}

/* Fortran order, big-endian data and errors, through the catalog. */
static void test_files(void **state) {
    (void)state;
    char *dir = scratch_dir();
    unsigned char buf[4096];
    ckpt_catalog *cat;
    ckpt_error err;
    /* A 2×3×4 int16 array in Fortran order: element (i, j, k) = 100i + 10j + k,
     * stored at i + 2j + 6k. */
    int16_t data[24], row_major[24], out[24];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++) {
                data[i + 2 * j + 6 * k] = (int16_t)(100 * i + 10 * j + k);
                row_major[i * 12 + j * 4 + k] = (int16_t)(100 * i + 10 * j + k);
            }
    size_t n = make_npy(buf, 1, "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", data, sizeof data);
    const char *path = in_dir(dir, "w.npy");
    write_bytes(path, buf, n);
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_NPY);
    assert_string_equal(ckpt_format_name(CKPT_FORMAT_NPY), "npy");
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "w");
    assert_non_null(t);
    assert_non_null(t->strides);
    assert_int_equal(t->strides[0], 1);
    assert_int_equal(t->strides[1], 2);
    assert_int_equal(t->strides[2], 6);
    assert_int_equal(ckpt_catalog_read(cat, t, 0, out, sizeof out, &err), CKPT_OK);
    assert_memory_equal(out, row_major, sizeof out);
    assert_int_equal(ckpt_catalog_read(cat, t, 6, out, 10, &err), CKPT_OK);
    assert_memory_equal(out, row_major + 3, 10);
    /* A load with a slice and a transpose: plan → engine. */
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_slice(plan, "w", 1, 1, 3, &err), CKPT_OK);
    assert_int_equal(ckpt_load(plan, NULL, &err), CKPT_OK);
    const int16_t *got = ckpt_plan_item_at(plan, 0)->data;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 4; k++) assert_int_equal(got[i * 8 + j * 4 + k], 100 * i + 10 * (j + 1) + k);
    ckpt_plan_free(plan);
    const void *view;
    assert_int_equal(ckpt_catalog_view(cat, t, &view, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_catalog_close(cat);

    /* Big-endian float64, read little-endian. */
    unsigned char be[16] = {0x3f, 0xf0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0};
    n = make_npy(buf, 1, "{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }", be, 16);
    path = in_dir(dir, "be.npy");
    write_bytes(path, buf, n);
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    double d[2];
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_tensor(cat, 0), 0, d, 16, &err), CKPT_OK);
    assert_true(d[0] == 1.0 && d[1] == 2.0);
    assert_string_equal(ckpt_catalog_tensor(cat, 0)->name, "be");
    ckpt_catalog_close(cat);

    /* Data cut short, header cut short. */
    n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", data, 19);
    path = in_dir(dir, "short.npy");
    write_bytes(path, buf, n);
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_E_TRUNCATED);
    assert_string_equal(err.tensor, "short");
    assert_non_null(strstr(err.message, "past the end"));
    write_bytes(path, buf, 40);
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_E_TRUNCATED);
    assert_non_null(strstr(err.message, "ends inside its 128-byte header"));
    write_bytes(path, buf, 8);
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_E_TRUNCATED);
    /* Trailing bytes after the data are ignored, as np.load ignores them. */
    n = make_npy(buf, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "abcdef", 6);
    path = in_dir(dir, "trail.npy");
    write_bytes(path, buf, n);
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor(cat, 0)->nbytes, 3);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

static void test_fortran_strides(void **state) {
    (void)state;
    int64_t s[4];
    assert_false(ckpt__npy_fortran_strides(1, (uint64_t[]){5}, s));
    assert_false(ckpt__npy_fortran_strides(3, (uint64_t[]){1, 5, 1}, s)); /* one long axis: same bytes */
    assert_false(ckpt__npy_fortran_strides(2, (uint64_t[]){0, 5}, s));   /* empty */
    assert_true(ckpt__npy_fortran_strides(3, (uint64_t[]){2, 1, 3}, s));
    assert_int_equal(s[0], 1);
    assert_int_equal(s[1], 2);
    assert_int_equal(s[2], 2);
}

/* Writing an .npz: read back by ckpt (the zip reader checks the layout)
 * and its CRC-32s correct (checked by zlib over each member). */
static void test_write_npz(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "out.npz");
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = CKPT_FORMAT_NPZ;
    o.no_sync = 1;
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(path, &o, &w, &err), CKPT_OK);
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
    size_t ia, ib, ie, is;
    assert_int_equal(ckpt_writer_add_tensor(w, "layer/w", CKPT_F32, 2, (uint64_t[]){2, 3}, &ia, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "b\xc3\xa9", CKPT_BF16, 1, (uint64_t[]){3}, &ib, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "empty", CKPT_I8, 2, (uint64_t[]){0, 4}, &ie, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "s", CKPT_F64, 0, NULL, &is, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    double sv = 0.25;
    assert_int_equal(ckpt_writer_write(w, ib, b, 6, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, ia, a, 10, &err), CKPT_OK); /* in two chunks */
    assert_int_equal(ckpt_writer_write(w, ia, (char *)a + 10, 14, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, is, &sv, 8, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_NPZ);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 4);
    float ra[6];
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "layer/w");
    assert_int_equal(ckpt_catalog_read(cat, t, 0, ra, 24, &err), CKPT_OK);
    assert_memory_equal(ra, a, 24);
    t = ckpt_catalog_find(cat, "b\xc3\xa9");
    assert_int_equal(t->dtype, CKPT_BF16);
    uint16_t rb[3];
    assert_int_equal(ckpt_catalog_read(cat, t, 0, rb, 6, &err), CKPT_OK);
    assert_memory_equal(rb, b, 6);
    assert_int_equal(ckpt_catalog_find(cat, "empty")->nbytes, 0);
    assert_int_equal(ckpt_catalog_find(cat, "s")->ndim, 0);
    ckpt_catalog_close(cat);
    /* Each member's CRC-32, as zipfile checks it. */
    size_t n;
    unsigned char *zip = (unsigned char *)read_all(path, &n);
    size_t members = 0;
    for (size_t at = 0; at + 4 <= n && zip[at] == 'P' && zip[at + 1] == 'K' && zip[at + 2] == 3 && zip[at + 3] == 4;) {
        uint32_t crc = zip[at + 14] | zip[at + 15] << 8 | zip[at + 16] << 16 | (uint32_t)zip[at + 17] << 24;
        size_t name = zip[at + 26] | zip[at + 27] << 8, extra = zip[at + 28] | zip[at + 29] << 8;
        uint64_t size = 0;
        for (int k = 7; k >= 0; k--) size = size << 8 | zip[at + 30 + name + 4 + k];
        unsigned char *data = zip + at + 30 + name + extra;
        assert_int_equal(crc, (uint32_t)crc32(0L, data, (uInt)size));
        at += 30 + name + extra + size;
        members++;
    }
    assert_int_equal(members, 4);
    free(zip);

    /* What an .npz cannot hold is refused before any data, leaving nothing. */
    const char *bad = in_dir(dir, "bad.npz");
    assert_int_equal(ckpt_writer_create(bad, &o, &w, &err), CKPT_OK);
    assert_code(ckpt_writer_add_tensor(w, "f4", CKPT_F4, 1, (uint64_t[]){4}, NULL, &err), err, CKPT__D(UNSUPPORTED_DTYPE));
    assert_string_equal(err.tensor, "f4");
    assert_code(ckpt_writer_add_tensor(w, "q", CKPT_Q8_0, 1, (uint64_t[]){32}, NULL, &err), err, CKPT__D(UNSUPPORTED_DTYPE));
    assert_non_null(strstr(err.message, "NumPy has no Q8_0 dtype"));
    ckpt_writer_free(w);
    o.checksums = 1;
    assert_int_equal(ckpt_writer_create(bad, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_writer_free(w);
    assert_false(file_exists(bad));
    scratch_free(dir);
}

/* Shapes whose nonzero axes pass 2^63-1 elements or bytes (what numpy,
 * torch and safetensors refuse): refused at open, at declaration and by a
 * cast, however an axis of 0 makes their product 0 — the engine once
 * overflowed on them (UBSan: engine.c's `s *= count`) and wrote a file
 * safetensors refused.  The largest allowed one opens, loads and converts. */
static void test_shape_overflow(void **state) {
    (void)state;
    char *dir = scratch_dir();
    unsigned char buf[4096];
    char dict[256];
    ckpt_catalog *cat;
    ckpt_error err;
    const char *path = in_dir(dir, "x.npy");
    static const char *const refused[] = {
        "(0, 9223372036854775807, 9223372036854775807)", "(9223372036854775807, 9223372036854775807, 0)",
        "(9223372036854775807, 0, 9223372036854775807)", "(0, 4611686018427387904, 4)",
        "(0, 2305843009213693952)", /* 2^61 float32: 2^63 bytes */
        "(2305843009213693952, 0)", "(0, 18446744073709551615)",
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", refused[i]);
        write_bytes(path, buf, make_npy(buf, 1, dict, NULL, 0));
        assert_code(ckpt_catalog_open(path, &cat, &err), err, CKPT__D(SHAPE_OVERFLOW));
    }
    const uint64_t shapes[][3] = {{0, INT64_MAX, INT64_MAX}, {INT64_MAX, INT64_MAX, 0}, {0, 1ull << 62, 4}};
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    ckpt_writer *w;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "w.safetensors"), &o, &w, &err), CKPT_OK);
    for (size_t i = 0; i < 3; i++)
        assert_code(ckpt_writer_add_tensor(w, "t", CKPT_F32, 3, shapes[i], NULL, &err), err, CKPT__D(SHAPE_OVERFLOW));
    ckpt_writer_free(w);

    /* 2^61 - 1 float32s in the nonzero axes: 2^63 - 4 bytes, allowed. */
    write_bytes(path, buf,
                make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2305843009213693951), }", NULL, 0));
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    const ckpt_tensor_info *t = ckpt_catalog_tensor(cat, 0);
    assert_int_equal(t->numel, 0);
    assert_int_equal(t->nbytes, 0);
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    assert_int_equal(ckpt_load(plan, NULL, &err), CKPT_OK);
    assert_code(ckpt_plan_cast(plan, "x", CKPT_F64, &err), err, CKPT__D(SHAPE_OVERFLOW)); /* 2^64 - 8 bytes */
    ckpt_plan_free(plan);
    const char *out = in_dir(dir, "x.safetensors");
    assert_int_equal(convert_all(cat, out, &o, NULL, NULL, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_catalog_open(out, &cat, &err), CKPT_OK);
    t = ckpt_catalog_tensor(cat, 0);
    assert_int_equal(t->ndim, 2);
    assert_int_equal(t->shape[1], (1ull << 61) - 1);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_headers),         cmocka_unit_test(test_preamble),
        cmocka_unit_test(test_dtype_names),     cmocka_unit_test(test_files),
        cmocka_unit_test(test_fortran_strides), cmocka_unit_test(test_write_npz),
        cmocka_unit_test(test_shape_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
