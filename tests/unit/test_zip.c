/* The ZIP reader: torch-style archives, ZIP64, DEFLATE, and lies. */
#include <string.h>
#include <zlib.h>

#include <unistd.h>

#include "formats/zip.h"
#include "transform/crc32.h"
#include "io/source.h"
#include "helpers.h"
#include "io/file.h"

/* ---- a small archive builder ------------------------------------------- */

typedef struct builder {
    unsigned char buf[1 << 21];
    size_t len;
    unsigned char cd[1 << 14];
    size_t cd_len;
    int count;
} builder;

static void put16(unsigned char *p, unsigned v) { p[0] = (unsigned char)v, p[1] = (unsigned char)(v >> 8); }
static void put32(unsigned char *p, uint32_t v) { put16(p, v & 0xFFFF), put16(p + 2, v >> 16); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v), put32(p + 4, (uint32_t)(v >> 32)); }

typedef struct entry_opts {
    int deflate;
    int zip64_extra;     /* sizes and offset through the ZIP64 extra field */
    unsigned pad;        /* local extra padding, as torch's alignment field */
    uint32_t crc;        /* 0: compute */
    int zero_crc;        /* record CRC 0, as torch may */
    uint32_t flags;
} entry_opts;

static void add(builder *b, const char *name, const void *data, size_t n, entry_opts o) {
    unsigned char *comp = malloc(n + n / 8 + 1024);
    size_t comp_len = n;
    const void *stored = data;
    if (o.deflate) {
        z_stream z;
        memset(&z, 0, sizeof z);
        deflateInit2(&z, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
        z.next_in = (unsigned char *)data;
        z.avail_in = (uInt)n;
        z.next_out = comp;
        z.avail_out = (uInt)(n + n / 8 + 1024);
        deflate(&z, Z_FINISH);
        comp_len = n + n / 8 + 1024 - z.avail_out;
        deflateEnd(&z);
        stored = comp;
    }
    uint32_t crc = o.zero_crc ? 0 : o.crc ? o.crc : (uint32_t)crc32(0, data, (uInt)n);
    size_t name_len = strlen(name), offset = b->len;
    unsigned char *l = b->buf + b->len;
    memset(l, 0, 30);
    put32(l, 0x04034b50);
    put16(l + 6, o.flags);
    put16(l + 8, o.deflate ? 8 : 0);
    put16(l + 26, (unsigned)name_len);
    put16(l + 28, o.pad ? o.pad + 4 : 0);
    memcpy(l + 30, name, name_len);
    b->len += 30 + name_len;
    if (o.pad) {
        put16(b->buf + b->len, 0x4246); /* "FB" */
        put16(b->buf + b->len + 2, o.pad);
        memset(b->buf + b->len + 4, 'Z', o.pad);
        b->len += 4 + o.pad;
    }
    memcpy(b->buf + b->len, stored, comp_len);
    b->len += comp_len;
    free(comp);

    unsigned char *c = b->cd + b->cd_len;
    memset(c, 0, 46);
    put32(c, 0x02014b50);
    put16(c + 8, o.flags);
    put16(c + 10, o.deflate ? 8 : 0);
    put32(c + 16, crc);
    put32(c + 20, o.zip64_extra ? 0xFFFFFFFFu : (uint32_t)comp_len);
    put32(c + 24, o.zip64_extra ? 0xFFFFFFFFu : (uint32_t)n);
    put16(c + 28, (unsigned)name_len);
    put16(c + 30, o.zip64_extra ? 28 : 0);
    put32(c + 42, o.zip64_extra ? 0xFFFFFFFFu : (uint32_t)offset);
    memcpy(c + 46, name, name_len);
    b->cd_len += 46 + name_len;
    if (o.zip64_extra) {
        unsigned char *x = b->cd + b->cd_len;
        put16(x, 1);
        put16(x + 2, 24);
        put64(x + 4, n);
        put64(x + 12, comp_len);
        put64(x + 20, offset);
        b->cd_len += 28;
    }
    b->count++;
}

/* Central directory, optional ZIP64 end records, end record. */
static size_t finish(builder *b, int zip64) {
    size_t cd_offset = b->len;
    memcpy(b->buf + b->len, b->cd, b->cd_len);
    b->len += b->cd_len;
    if (zip64) {
        size_t z = b->len;
        unsigned char *r = b->buf + b->len;
        memset(r, 0, 56);
        put32(r, 0x06064b50);
        put64(r + 4, 44);
        put64(r + 24, (uint64_t)b->count);
        put64(r + 32, (uint64_t)b->count);
        put64(r + 40, b->cd_len);
        put64(r + 48, cd_offset);
        b->len += 56;
        unsigned char *loc = b->buf + b->len;
        memset(loc, 0, 20);
        put32(loc, 0x07064b50);
        put64(loc + 8, z);
        put32(loc + 16, 1);
        b->len += 20;
    }
    unsigned char *e = b->buf + b->len;
    memset(e, 0, 22);
    put32(e, 0x06054b50);
    put16(e + 8, zip64 ? 0xFFFF : (unsigned)b->count);
    put16(e + 10, zip64 ? 0xFFFF : (unsigned)b->count);
    put32(e + 12, zip64 ? 0xFFFFFFFFu : (uint32_t)b->cd_len);
    put32(e + 16, zip64 ? 0xFFFFFFFFu : (uint32_t)cd_offset);
    b->len += 22;
    return cd_offset;
}

static ckpt_status open_bytes(const char *dir, const builder *b, bool folder, ckpt__arena *arena, ckpt__zip *zip,
                              ckpt__source **fd, ckpt_error *err) {
    const char *path = in_dir(dir, "a.zip");
    write_bytes(path, b->buf, b->len);
    assert_int_equal(ckpt__source_open(path, NULL, fd, err), CKPT_OK);
    return ckpt__zip_open(*fd, folder, arena, zip, err);
}

static void test_torch_like_archive(void **state) {
    (void)state;
    char *dir = scratch_dir();
    for (int zip64 = 0; zip64 < 2; zip64++) {
        builder *b = calloc(1, sizeof *b);
        add(b, "archive/data.pkl", "\x80\x02}q\x00.", 6, (entry_opts){.pad = 20, .flags = 0x808});
        add(b, "archive/data/0", "0123456789abcdef", 16, (entry_opts){.pad = 37, .zero_crc = 1, .zip64_extra = zip64});
        add(b, "archive/version", "3\n", 2, (entry_opts){.deflate = 1});
        finish(b, zip64);
        ckpt__arena arena = {0};
        ckpt__zip zip;
        ckpt_error err;
        ckpt__source *fd;
        assert_int_equal(open_bytes(dir, b, true, &arena, &zip, &fd, &err), CKPT_OK);
        assert_int_equal(zip.count, 3);
        assert_string_equal(zip.folder, "archive");
        const ckpt__zip_entry *d = ckpt__zip_find_in_folder(&zip, "data/0");
        assert_non_null(d);
        assert_int_equal(d->size, 16);
        /* The data offset accounts for the local padding field. */
        assert_memory_equal(b->buf + d->data_offset, "0123456789abcdef", 16);
        char *text;
        assert_int_equal(ckpt__zip_read_entry(fd, ckpt__zip_find_in_folder(&zip, "version"), 100, &text, &err),
                         CKPT_OK);
        assert_string_equal(text, "3\n");
        free(text);
        assert_int_equal(ckpt__zip_read_entry(fd, d, 100, &text, &err), CKPT_OK); /* CRC 0 accepted */
        free(text);
        assert_int_equal(ckpt__zip_read_entry(fd, d, 8, &text, &err), CKPT_E_LIMIT);
        assert_null(ckpt__zip_find(&zip, "archive/missing"));
        ckpt__zip_close(&zip);
        ckpt__arena_free(&arena);
        ckpt__source_close(fd);
        free(b);
    }
    scratch_free(dir);
}

typedef void (*corrupt_fn)(builder *b, size_t cd_offset);
static void flip_local_sig(builder *b, size_t cd) { (void)cd, b->buf[0] ^= 1; }
static void lie_size(builder *b, size_t cd) { put32(b->buf + cd + 20, 5000), put32(b->buf + cd + 24, 5000); }
static void lie_offset(builder *b, size_t cd) { put32(b->buf + cd + 42, 60000); }
static void lie_cd_offset(builder *b, size_t cd) { (void)cd, put32(b->buf + b->len - 6, 0x7FFFFFFF); }
static void truncate_tail(builder *b, size_t cd) { (void)cd, b->len -= 3; }
static void encrypt(builder *b, size_t cd) { put16(b->buf + cd + 8, 1); }
static void bzip2(builder *b, size_t cd) { put16(b->buf + cd + 10, 12); }
static void bad_crc(builder *b, size_t cd) { put32(b->buf + cd + 16, 0x12345678); }
static void multi_disk(builder *b, size_t cd) { (void)cd, put16(b->buf + b->len - 18, 1); }
static void count_too_big(builder *b, size_t cd) { (void)cd, put16(b->buf + b->len - 12, 9000), put16(b->buf + b->len - 14, 9000); }

static void test_corrupt_archives(void **state) {
    (void)state;
    static const struct {
        const char *label;
        corrupt_fn fn;
        ckpt_status st;
    } cases[] = {
        {"local signature", flip_local_sig, CKPT__D(ZIP_INVALID)},
        {"size past the data area", lie_size, CKPT__D(ZIP_INVALID)},
        {"local header offset out of range", lie_offset, CKPT__D(ZIP_INVALID)},
        {"directory offset out of range", lie_cd_offset, CKPT__D(ZIP_INVALID)},
        {"truncated end record", truncate_tail, CKPT__D(ZIP_INVALID)},
        {"encrypted", encrypt, CKPT__D(ZIP_UNSUPPORTED)},
        {"bzip2", bzip2, CKPT__D(ZIP_UNSUPPORTED)},
        {"multi-disk", multi_disk, CKPT__D(ZIP_UNSUPPORTED)},
        {"entry count", count_too_big, CKPT__D(ZIP_INVALID)},
    };
    char *dir = scratch_dir();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        builder *b = calloc(1, sizeof *b);
        add(b, "archive/data.pkl", "hello", 5, (entry_opts){0});
        size_t cd = finish(b, 0);
        cases[i].fn(b, cd);
        ckpt__arena arena = {0};
        ckpt__zip zip;
        ckpt_error err;
        ckpt_error_clear(&err);
        ckpt__source *fd;
        ckpt_status st = open_bytes(dir, b, true, &arena, &zip, &fd, &err);
        if (st == CKPT_OK) {
            char *text = NULL;
            st = ckpt__zip_read_entry(fd, &zip.entries[0], 100, &text, &err);
            free(text);
            ckpt__zip_close(&zip);
        }
        st = code_of(st, &err);
        if (st != cases[i].st && !(cases[i].fn == bad_crc && st == CKPT__D(CHECKSUM)))
            fail_msg("%s: got %s (%s)", cases[i].label, code_name(st), err.message);
        assert_true(err.message[0]);
        ckpt__source_close(fd);
        ckpt__arena_free(&arena);
        free(b);
    }
    /* A wrong CRC on a record is caught when it is read. */
    builder *b = calloc(1, sizeof *b);
    add(b, "archive/data.pkl", "hello", 5, (entry_opts){.crc = 0xDEADBEEF});
    finish(b, 0);
    ckpt__arena arena = {0};
    ckpt__zip zip;
    ckpt_error err;
    ckpt__source *fd;
    assert_int_equal(open_bytes(dir, b, true, &arena, &zip, &fd, &err), CKPT_OK);
    char *text;
    assert_code(ckpt__zip_read_entry(fd, &zip.entries[0], 100, &text, &err), err, CKPT__D(CHECKSUM));
    ckpt__zip_close(&zip);
    ckpt__arena_free(&arena);
    ckpt__source_close(fd);
    free(b);
    scratch_free(dir);
}

/* ZIP64 extra fields that lie: sizes or offsets far past the file. */
static void test_lying_zip64_fields(void **state) {
    (void)state;
    char *dir = scratch_dir();
    /* 0: size, 1: compressed size, 2: local header offset, 3: both sizes
     * (consistent with each other, past the data area). */
    for (int field = 0; field < 4; field++) {
        builder *b = calloc(1, sizeof *b);
        add(b, "archive/data/0", "0123456789abcdef", 16, (entry_opts){.zip64_extra = 1});
        size_t cd = finish(b, 1);
        /* The extra field follows the 46-byte header and the 14-byte name:
         * [id, len] then size, compressed size, local header offset. */
        unsigned char *x = b->buf + cd + 46 + 14 + 4;
        if (field == 3) put64(x, 1ULL << 62), put64(x + 8, 1ULL << 62);
        else put64(x + 8 * field, field == 2 ? (1ULL << 40) : (1ULL << 62));
        ckpt__arena arena = {0};
        ckpt__zip zip;
        ckpt_error err;
        ckpt__source *fd;
        ckpt_status st = code_of(open_bytes(dir, b, true, &arena, &zip, &fd, &err), &err);
        if (st != CKPT__D(ZIP_INVALID)) fail_msg("field %d: got %s (%s)", field, code_name(st), err.message);
        ckpt__source_close(fd);
        ckpt__arena_free(&arena);
        free(b);
    }
    scratch_free(dir);
}

static void test_layout_rules(void **state) {
    (void)state;
    char *dir = scratch_dir();
    struct {
        const char *a, *b;
        ckpt_status st;
    } cases[] = {
        {"archive/data.pkl", "other/data/0", CKPT__D(ZIP_INVALID)},      /* two top folders */
        {"data.pkl", "data/0", CKPT__D(ZIP_INVALID)},                    /* no folder */
        {"archive/data.pkl", "archive/data.pkl", CKPT__D(DUPLICATE_NAME)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        builder *b = calloc(1, sizeof *b);
        add(b, cases[i].a, "x", 1, (entry_opts){0});
        add(b, cases[i].b, "y", 1, (entry_opts){0});
        finish(b, 0);
        ckpt__arena arena = {0};
        ckpt__zip zip;
        ckpt_error err;
        ckpt__source *fd;
        assert_code(open_bytes(dir, b, true, &arena, &zip, &fd, &err), err, cases[i].st);
        ckpt__source_close(fd);
        ckpt__arena_free(&arena);
        free(b);
    }
    unsigned char head[4] = {'P', 'K', 3, 4};
    assert_true(ckpt__zip_sniff(head, 4));
    assert_false(ckpt__zip_sniff((const unsigned char *)"\x08\0\0\0", 4));
    scratch_free(dir);
}

/* ---- CRC-32s checked by loads, conversions and verify -------------------- */

enum { ROWS = 300, COLS = 250 }; /* 300 KB of float32: several 64 KiB boxes */

/* An .npz array member: a NumPy 1.0 .npy of float32 [ROWS, COLS], i / 3. */
static size_t npy_member(unsigned char *out) {
    char dict[128];
    int n = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", ROWS, COLS);
    size_t header = 10 + (size_t)n + 1, padded = (header + 63) / 64 * 64;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    put16(out + 8, (unsigned)(padded - 10));
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', padded - header);
    out[padded - 1] = '\n';
    for (size_t i = 0; i < ROWS * COLS; i++) {
        float v = (float)i / 3;
        memcpy(out + padded + 4 * i, &v, 4);
    }
    return padded + 4 * (size_t)ROWS * COLS;
}

/* Loads "w" of the .npz at `path` whole in 64 KiB boxes; `skip` turns the check off. */
static ckpt_status load_w(const char *path, int skip, unsigned threads, ckpt_error *err) {
    ckpt_catalog *cat;
    ckpt_status st = ckpt_catalog_open(path, &cat, err);
    if (st) return st;
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, err), CKPT_OK);
    ckpt_load_options o;
    ckpt_load_options_init(&o);
    o.chunk_bytes = 64 << 10, o.threads = threads, o.skip_crc_check = skip;
    st = ckpt_load(plan, &o, err);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    return st;
}

static ckpt_status verify(const char *path, ckpt_verify_report *r, ckpt_error *err) {
    ckpt_catalog *cat;
    ckpt_status st = ckpt_catalog_open(path, &cat, err);
    if (st) return st;
    r->size = sizeof *r;
    st = ckpt_verify(cat, NULL, r, err);
    ckpt_catalog_close(cat);
    return st;
}

static void test_crcs_checked_by_loads_and_verify(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "a.npz");
    unsigned char *npy = malloc(1 << 20);
    size_t n = npy_member(npy);
    uint32_t good = (uint32_t)crc32(0, npy, (uInt)n);
    for (int deflate = 0; deflate < 2; deflate++) {
        for (int damaged = 0; damaged < 2; damaged++) {
            builder *b = calloc(1, sizeof *b);
            if (damaged) npy[n - 5000] ^= 0x40; /* the recorded CRC-32 is still the good one */
            add(b, "w.npy", npy, n, (entry_opts){.deflate = deflate, .crc = good});
            add(b, "notes.txt", "hello", 5, (entry_opts){.deflate = deflate});
            finish(b, 0);
            write_bytes(path, b->buf, b->len);
            if (damaged) npy[n - 5000] ^= 0x40;
            ckpt_error err;
            ckpt_verify_report r;
            for (unsigned threads = 1; threads <= 4; threads *= 4) {
                ckpt_status st = load_w(path, 0, threads, &err);
                assert_code(st, err, damaged ? CKPT__D(CHECKSUM) : CKPT_OK);
                if (damaged) {
                    assert_string_equal(err.tensor, "w");
                    assert_non_null(strstr(err.message, "ZIP member 'w.npy' has CRC-32"));
                }
                assert_int_equal(load_w(path, 1, threads, &err), CKPT_OK);
            }
            assert_code(verify(path, &r, &err), err, damaged ? CKPT__D(CHECKSUM) : CKPT_OK);
            /* ckpt_catalog_read of the whole tensor checks it; of a part, not. */
            ckpt_catalog *cat;
            assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
            const ckpt_tensor_info *w = ckpt_catalog_find(cat, "w");
            void *bytes = malloc(w->nbytes);
            assert_code(ckpt_catalog_read(cat, w, 0, bytes, w->nbytes, &err), err, damaged ? CKPT__D(CHECKSUM) : CKPT_OK);
            assert_int_equal(ckpt_catalog_read(cat, w, 0, bytes, w->nbytes - 1, &err), CKPT_OK);
            free(bytes);
            ckpt_catalog_close(cat);
            if (!damaged) {
                assert_int_equal(r.zip_crc32, 2);
                assert_int_equal(r.tensors, 1);
                assert_int_equal(r.bytes, n + 5);
            } else {
                assert_string_equal(err.tensor, "w");
            }
            /* A converted copy is refused alike, and nothing is left. */
            assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
            const char *out = in_dir(dir, "out.safetensors");
            assert_code(convert_all(cat, out, NULL, NULL, NULL, &err), err, damaged ? CKPT__D(CHECKSUM) : CKPT_OK);
            assert_int_equal(access(out, F_OK) == 0, !damaged);
            unlink(out);
            ckpt_catalog_close(cat);
            free(b);
        }
        /* A DEFLATE member declaring 8 bytes more than its stream gives;
         * a stored one whose declared size is its real size, its CRC-32 a lie. */
        builder *b = calloc(1, sizeof *b);
        add(b, "w.npy", npy, n, (entry_opts){.deflate = deflate});
        size_t cd = finish(b, 0);
        if (deflate) put32(b->buf + cd + 24, (uint32_t)n + 8);
        else put32(b->buf + cd + 16, good ^ 1);
        write_bytes(path, b->buf, b->len);
        ckpt_error err;
        ckpt_verify_report r;
        ckpt_status want = deflate ? CKPT__D(ZIP_INVALID) : CKPT__D(CHECKSUM);
        assert_code(load_w(path, 0, 2, &err), err, want);
        assert_non_null(strstr(err.message, "ZIP member 'w.npy'"));
        assert_code(verify(path, &r, &err), err, want);
        assert_non_null(strstr(err.message, "ZIP member 'w.npy'"));
        free(b);
    }
    free(npy);
    scratch_free(dir);
}

/* The folded CRC-32s (each SIMD level the CPU has) are zlib's, for every
 * length, alignment and start. */
static void test_crc32_matches_zlib(void **state) {
    (void)state;
    enum { N = 1 << 18 };
    unsigned char *b = malloc(N + 64);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < N + 64; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, b[i] = (unsigned char)x;
    for (int t = 0; t < 20000; t++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t off = x % 64, len = t < 2000 ? (size_t)t % 300 : (size_t)(x >> 8) % (t < 10000 ? 4096 : N);
        uint32_t init = t % 3 ? (uint32_t)(x >> 32) : 0, want = (uint32_t)crc32_z(init, b + off, len);
        for (int level = 1; level <= 3; level++) assert_int_equal(ckpt__crc32_at(level, init, b + off, len), want);
        assert_int_equal(ckpt__crc32(init, b + off, len), want);
    }
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_torch_like_archive),
        cmocka_unit_test(test_corrupt_archives),
        cmocka_unit_test(test_lying_zip64_fields),
        cmocka_unit_test(test_layout_rules),
        cmocka_unit_test(test_crcs_checked_by_loads_and_verify),
        cmocka_unit_test(test_crc32_matches_zlib),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
