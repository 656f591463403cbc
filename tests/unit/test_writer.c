/* The streaming writer: layout, chunked writes, sharding, atomic commit. */
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* 1 when a catalog records no digest of any tensor. */
static int recorded_none(const ckpt_catalog *cat) {
    size_t n = ckpt_catalog_tensor_count(cat);
    uint64_t d[8];
    unsigned char r[8] = {1};
    ckpt_error err;
    if (n > 8 || ckpt_catalog_recorded_digests(cat, d, r, &err) != CKPT_OK) return 0;
    for (size_t i = 0; i < n; i++)
        if (r[i]) return 0;
    return 1;
}

static ckpt_status create(const char *path, uint64_t max_shard, int overwrite, ckpt_writer **w, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = max_shard;
    o.overwrite = overwrite;
    o.no_sync = 1;
    return ckpt_writer_create(path, &o, w, err);
}

/* A writer that must be created. */
static ckpt_writer *make(const char *path, uint64_t max_shard, int overwrite) {
    ckpt_writer *w;
    ckpt_error err;
    if (create(path, max_shard, overwrite, &w, &err)) fail_msg("create: %s", err.message);
    return w;
}

static void test_single_file_in_chunks(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "out.safetensors");
    ckpt_writer *w = make(path, 0, 0);
    ckpt_error err;
    uint64_t s_w[2] = {2, 3}, s_b[1] = {5};
    size_t iw, ib;
    assert_int_equal(ckpt_writer_set_metadata(w, "format", "pt", &err), CKPT_OK);
    assert_code(ckpt_writer_set_metadata(w, "format", "np", &err), err, CKPT__D(DUPLICATE_NAME));
    assert_int_equal(ckpt_writer_add_tensor(w, "w", CKPT_F32, 2, s_w, &iw, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "b", CKPT_U8, 1, s_b, &ib, &err), CKPT_OK);
    assert_code(ckpt_writer_add_tensor(w, "b", CKPT_U8, 1, s_b, NULL, &err), err, CKPT__D(DUPLICATE_NAME));
    assert_int_equal(ckpt_writer_add_tensor(w, "__metadata__", CKPT_U8, 1, s_b, NULL, &err), CKPT_E_INVALID_ARGUMENT);
    assert_code(ckpt_writer_add_tensor(w, "x", CKPT_DTYPE_INVALID, 1, s_b, NULL, &err), err, CKPT__D(UNKNOWN_DTYPE));
    assert_code(ckpt_writer_add_tensor(w, "odd", CKPT_F4, 1, s_b, NULL, &err), err, CKPT__D(PARTIAL_BYTE));
    assert_int_equal(ckpt_writer_write(w, iw, "x", 1, &err), CKPT_E_BAD_STATE);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "late", CKPT_U8, 1, s_b, NULL, &err), CKPT_E_BAD_STATE);
    assert_int_equal(ckpt_writer_file_count(w), 1);
    assert_int_equal(ckpt_writer_total_bytes(w), 29);
    /* Nothing under the final name before commit. */
    assert_false(file_exists(path));

    float data[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(ckpt_writer_write(w, ib, "hello", 5, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, iw, data, 10, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, iw, (char *)data + 10, 14, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, iw, data, 1, &err), CKPT_E_OUT_OF_RANGE);
    assert_string_equal(err.tensor, "w");
    assert_int_equal(ckpt_writer_write(w, 9, data, 1, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    assert_int_equal(dir_entries(dir), 1);

    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    /* F32 before U8 (dtype descending). */
    assert_string_equal(ckpt_catalog_tensor(cat, 0)->name, "w");
    float back[6];
    assert_int_equal(ckpt_catalog_read(cat, ckpt_catalog_find(cat, "w"), 0, back, 24, &err), CKPT_OK);
    assert_memory_equal(back, data, 24);
    assert_string_equal(ckpt_catalog_metadata_get(cat, "format"), "pt");
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

static void test_incomplete_commit_leaves_nothing(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "out.safetensors");
    ckpt_writer *w = make(path, 0, 0);
    uint64_t shape[1] = {4};
    ckpt_error err;
    assert_int_equal(ckpt_writer_add_tensor(w, "t", CKPT_U8, 1, shape, NULL, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(dir_entries(dir), 2); /* the temporary, and the lock file while the writer lives */
    assert_true(file_exists(in_dir(dir, ".out.safetensors.ckpt-lock")));
    assert_int_equal(ckpt_writer_write(w, 0, "ab", 2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_E_BAD_STATE);
    assert_string_equal(err.tensor, "t");
    ckpt_writer_free(w);
    assert_int_equal(dir_entries(dir), 0);
    /* Freed without commit: also nothing. */
    w = make(path, 0, 0);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    assert_int_equal(dir_entries(dir), 0);
    scratch_free(dir);
}

static void test_existing_destination(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "out.safetensors");
    write_safetensors(path, "{}", 0);
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(path, NULL, &w, &err), CKPT_E_EXISTS);
    assert_null(w);
    /* The directory holding it is a directory destination: shards with
     * the prefix "model", beside the other file. */
    assert_int_equal(ckpt_writer_create(dir, NULL, &w, &err), CKPT_OK);
    ckpt_writer_free(w);
    /* With overwrite, the old file stays intact until commit. */
    w = make(path, 0, 1);
    uint64_t shape[1] = {1};
    assert_int_equal(ckpt_writer_add_tensor(w, "t", CKPT_U8, 1, shape, NULL, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    size_t n;
    char *old = read_all(path, &n);
    assert_int_equal(n, 10); /* still the old file */
    free(old);
    assert_int_equal(ckpt_writer_write(w, 0, "z", 1, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 1);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

static ckpt_status write_sharded(const char *dir, uint64_t max, int overwrite, int count) {
    ckpt_writer *w;
    ckpt_error err;
    ckpt_status created = create(dir, max, overwrite, &w, &err);
    if (created) return created;
    uint64_t shape[1] = {10};
    char name[16];
    for (int i = 0; i < count; i++) {
        snprintf(name, sizeof name, "t%02d", i);
        assert_int_equal(ckpt_writer_add_tensor(w, name, CKPT_U8, 1, shape, NULL, &err), CKPT_OK);
    }
    ckpt_status st = ckpt_writer_begin(w, &err);
    for (int i = 0; st == CKPT_OK && i < count; i++) st = ckpt_writer_write(w, (size_t)i, "0123456789", 10, &err);
    if (st == CKPT_OK) st = ckpt_writer_commit(w, &err);
    ckpt_writer_free(w);
    return st;
}

static void test_sharded_output_and_replacement(void **state) {
    (void)state;
    char *root = scratch_dir();
    const char *dir = strdup(in_dir(root, "ckpt"));
    /* 5 tensors of 10 bytes, shards of 25 → 3 shards + index. */
    assert_int_equal(write_sharded(dir, 25, 0, 5), CKPT_OK);
    assert_int_equal(dir_entries(dir), 4);
    assert_true(file_exists(in_dir(dir, "model-00003-of-00003.safetensors")));
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(dir, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 5);
    assert_int_equal(ckpt_catalog_find(cat, "t04")->file, 2);
    ckpt_catalog_close(cat);
    /* Refused without overwrite; with it, the old shards are replaced and the
     * ones the new checkpoint does not use are removed. */
    assert_int_equal(write_sharded(dir, 1000, 0, 2), CKPT_E_EXISTS);
    assert_int_equal(write_sharded(dir, 1000, 1, 2), CKPT_OK);
    assert_int_equal(dir_entries(dir), 1);
    assert_true(file_exists(in_dir(dir, "model.safetensors")));
    free((char *)dir);
    scratch_free(root);
}

static void test_misuse(void **state) {
    (void)state;
    ckpt_writer *w;
    ckpt_error err;
    assert_int_equal(ckpt_writer_create(NULL, NULL, &w, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_writer_create("x", NULL, NULL, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_writer_commit(NULL, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_writer_free(NULL);
    char *dir = scratch_dir();
    w = make(in_dir(dir, "x.safetensors"), 0, 0);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_E_BAD_STATE);
    uint64_t big[2] = {UINT64_MAX, 2};
    assert_code(ckpt_writer_add_tensor(w, "big", CKPT_U8, 2, big, NULL, &err), err, CKPT__D(SHAPE_OVERFLOW));
    assert_int_equal(ckpt_writer_add_tensor(w, "bad\xff", CKPT_U8, 0, NULL, NULL, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_writer_free(w);
    scratch_free(dir);
}

/* ckpt_writer_copy_tensor and ckpt_catalog_recorded_digests: the base of
 * incremental saves.  A tensor copied whole with its digest is recorded
 * with it, the output equals a written one, and misuse is refused. */
static void test_copy_tensor_from_a_checkpoint(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *base = in_dir(dir, "base.safetensors");
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    o.checksums = 1;
    ckpt_writer *w;
    ckpt_error err;
    uint64_t s_a[2] = {2, 3}, s_b[1] = {5};
    float a[6] = {1, 2, 3, 4, 5, 6};
    size_t ia, ib;
    assert_int_equal(ckpt_writer_create(base, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "a", CKPT_F32, 2, s_a, &ia, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "b", CKPT_U8, 1, s_b, &ib, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, ia, a, sizeof a, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, ib, "hello", 5, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);

    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(base, &cat, &err), CKPT_OK);
    uint64_t digests[2];
    unsigned char recorded[2];
    assert_int_equal(ckpt_catalog_recorded_digests(cat, digests, recorded, &err), CKPT_OK);
    size_t ca = ckpt_catalog_find(cat, "a") - ckpt_catalog_tensor(cat, 0);
    size_t cb = ckpt_catalog_find(cat, "b") - ckpt_catalog_tensor(cat, 0);
    assert_true(recorded[ca] && recorded[cb]);
    assert_true(digests[ca] == XXH3_64bits(a, sizeof a) && digests[cb] == XXH3_64bits("hello", 5));

    /* The copy: "a" cloned, "b" cloned, "c" written; then the misuses. */
    const char *out = in_dir(dir, "out.safetensors");
    uint64_t s_c[1] = {4};
    size_t oa, ob, oc;
    assert_int_equal(ckpt_writer_create(out, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "a", CKPT_F32, 2, s_a, &oa, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "b", CKPT_U8, 1, s_b, &ob, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "c", CKPT_U8, 1, s_c, &oc, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, oa, cat, ca, digests[ca], &err), CKPT_E_BAD_STATE); /* before begin */
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, oc, cat, cb, digests[cb], &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "declared with 4 bytes, and the copy has 5"));
    assert_int_equal(ckpt_writer_copy_tensor(w, oa, cat, 7, 0, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_writer_write(w, oc, "ab", 2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, oc, cat, cb, 0, &err), CKPT_E_INVALID_ARGUMENT); /* 4 vs 5 bytes */
    assert_int_equal(ckpt_writer_write(w, oc, "cd", 2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, oa, cat, ca, digests[ca], &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, oa, cat, ca, digests[ca], &err), CKPT_E_BAD_STATE); /* has bytes */
    assert_int_equal(ckpt_writer_copy_tensor(w, ob, cat, cb, digests[cb], &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog_close(cat);

    ckpt_catalog *got;
    assert_int_equal(ckpt_catalog_open(out, &got, &err), CKPT_OK);
    ckpt_verify_report r = {.size = sizeof r};
    assert_int_equal(ckpt_verify(got, NULL, &r, &err), CKPT_OK);
    assert_int_equal(r.tensor_digests, 3);
    float back[6];
    const ckpt_tensor_info *t = ckpt_catalog_find(got, "a");
    assert_int_equal(ckpt_catalog_read(got, t, 0, back, sizeof back, &err), CKPT_OK);
    assert_memory_equal(back, a, sizeof a);
    ckpt_catalog_close(got);

    /* A source whose bytes are not stored as they are (a big-endian .npy). */
    const char *npy = in_dir(dir, "be.npy");
    char head[128] = "\x93NUMPY\x01\x00\x76\x00{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }";
    size_t hl = strlen(head + 10) + 10;
    memset(head + hl, ' ', 127 - hl);
    head[127] = '\n';
    FILE *f = fopen(npy, "wb");
    fwrite(head, 1, 128, f);
    fwrite("\x3f\x80\x00\x00\x40\x00\x00\x00", 1, 8, f);
    fclose(f);
    assert_int_equal(ckpt_catalog_open(npy, &cat, &err), CKPT_OK);
    uint64_t s_2[1] = {2};
    o.checksums = 0;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "x.safetensors"), &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "x", CKPT_F32, 1, s_2, &oa, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, oa, cat, 0, 0, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "not stored as they are"));
    assert_int_equal(recorded_none(cat), 1);
    ckpt_writer_free(w);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

static void test_many_tensors_grow_tables(void **state) {
    (void)state;
    char *root = scratch_dir();
    const char *dir = strdup(in_dir(root, "many"));
    assert_int_equal(write_sharded(dir, 1000, 0, 99), CKPT_OK);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(dir, &cat, NULL), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 99);
    assert_int_equal(ckpt_catalog_file_count(cat), 1);
    ckpt_catalog_close(cat);
    free((char *)dir);
    scratch_free(root);
}

/* A tensor of n bytes `phase` past a chunk edge: chunk k's digest, as
 * CKPT_CHUNK_METADATA_KEY defines the edges (the file's multiples of C). */
static uint64_t chunk_digest(const unsigned char *data, uint64_t n, uint64_t phase, uint32_t k, uint64_t *begin,
                             uint64_t *end) {
    uint64_t lo = (uint64_t)k * CKPT_CHUNK_BYTES, hi = lo + CKPT_CHUNK_BYTES - phase;
    *begin = lo > phase ? lo - phase : 0;
    *end = hi < n ? hi : n;
    if (*begin > n) *begin = n;
    return XXH3_64bits(data + *begin, (size_t)(*end - *begin));
}

/* Chunk digests: recorded for a large tensor at the file's edges, read
 * back (ckpt_catalog_recorded_chunks), given with a tensor whose unchanged
 * chunks are copied from the base (ckpt_writer_copy_range) and whose
 * changed chunk is written; ckpt_verify names a changed chunk's range. */
static void test_chunk_digests_and_partial_copies(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *base = in_dir(dir, "base.safetensors");
    enum { N = (5 << 20) + 3 };
    unsigned char *big = malloc(N);
    for (size_t i = 0; i < N; i++) big[i] = (unsigned char)(i * 7 + (i >> 13));
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    o.checksums = 1;
    ckpt_writer *w;
    ckpt_error err;
    uint64_t s_big[1] = {N}, s_small[1] = {5}, size, phase;
    size_t ib, is, count;
    assert_int_equal(ckpt_writer_create(base, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "small", CKPT_U8, 1, s_small, &is, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "big", CKPT_U8, 1, s_big, &ib, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_tensor_chunks(w, ib, &size, &phase, &count, &err), CKPT_E_BAD_STATE);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_tensor_chunks(w, is, &size, &phase, &count, &err), CKPT_OK);
    assert_int_equal(count, 0);
    assert_int_equal(ckpt_writer_tensor_chunks(w, ib, &size, &phase, &count, &err), CKPT_OK);
    assert_int_equal(size, CKPT_CHUNK_BYTES);
    assert_int_equal(count, 7); /* ceil(5 MiB + 3 / 1 MiB) + 1, wherever it lands */
    assert_int_equal(ckpt_writer_write(w, is, "hello", 5, &err), CKPT_OK);
    for (size_t at = 0; at < N; at += 100000)
        assert_int_equal(ckpt_writer_write(w, ib, big + at, N - at < 100000 ? N - at : 100000, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);

    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(base, &cat, &err), CKPT_OK);
    size_t cb = ckpt_catalog_find(cat, "big") - ckpt_catalog_tensor(cat, 0), total;
    size_t cs = ckpt_catalog_find(cat, "small") - ckpt_catalog_tensor(cat, 0);
    ckpt_chunk_record rec[2];
    uint64_t recorded[7], want[7], begin, end;
    assert_int_equal(ckpt_catalog_recorded_chunks(cat, rec, NULL, 0, &total, &err), CKPT_OK);
    assert_int_equal(total, 7);
    assert_int_equal(ckpt_catalog_recorded_chunks(cat, rec, recorded, 7, &total, &err), CKPT_OK);
    assert_int_equal(rec[cs].chunk_bytes, 0);
    assert_int_equal(rec[cb].chunk_bytes, CKPT_CHUNK_BYTES);
    assert_int_equal(rec[cb].count, 7);
    assert_int_equal(rec[cb].phase, ckpt_catalog_tensor(cat, cb)->offset % CKPT_CHUNK_BYTES);
    assert_int_equal(rec[cb].phase, phase);
    for (uint32_t k = 0; k < 7; k++) assert_true(recorded[rec[cb].first + k] == chunk_digest(big, N, phase, k, &begin, &end));

    /* The next save: chunk 2 changed. */
    big[2 * CKPT_CHUNK_BYTES + 10]++;
    for (uint32_t k = 0; k < 7; k++) want[k] = chunk_digest(big, N, phase, k, &begin, &end);
    uint64_t b2, e2;
    chunk_digest(big, N, phase, 2, &b2, &e2);
    const char *out = in_dir(dir, "out.safetensors");
    size_t ob, os;
    assert_int_equal(ckpt_writer_create(out, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "small", CKPT_U8, 1, s_small, &os, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "big", CKPT_U8, 1, s_big, &ob, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_give_digests(w, ob, XXH3_64bits(big, N), want, 6, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "it has 7 chunk digests"));
    assert_int_equal(ckpt_writer_give_digests(w, ob, XXH3_64bits(big, N), want, 7, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_range(w, ob, cat, cs, b2, &err), CKPT_E_INVALID_ARGUMENT); /* 5 bytes, not N */
    assert_int_equal(ckpt_writer_copy_range(w, ob, cat, cb, b2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, ob, big + b2, e2 - b2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_range(w, ob, cat, cb, N - e2 + 1, &err), CKPT_E_OUT_OF_RANGE);
    assert_int_equal(ckpt_writer_copy_range(w, ob, cat, cb, N - e2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, os, cat, cs, XXH3_64bits("hello", 5), &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    /* The whole tensor copied: its chunk digests are the source's. */
    const char *whole = in_dir(dir, "whole.safetensors");
    assert_int_equal(ckpt_writer_create(whole, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "small", CKPT_U8, 1, s_small, &os, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "big", CKPT_U8, 1, s_big, &ob, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, os, cat, cs, XXH3_64bits("hello", 5), &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_tensor(w, ob, cat, cb, recorded[0] ^ 1, &err), CKPT_OK); /* a wrong whole digest */
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    /* The tensor grew by 1 MiB (rows appended): its leading N bytes are
     * copied from the base's smaller tensor, the rest written; a range past
     * the base's bytes is refused, naming them. */
    const char *grown = in_dir(dir, "grown.safetensors");
    enum { G = N + (1 << 20) };
    unsigned char *more = malloc(G);
    memcpy(more, big, N);
    more[2 * CKPT_CHUNK_BYTES + 10]--; /* the base's bytes */
    for (size_t i = N; i < G; i++) more[i] = (unsigned char)(i * 3);
    uint64_t s_grown[1] = {G}, gsize, gphase, gwant[8];
    size_t gcount;
    assert_int_equal(ckpt_writer_create(grown, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "big", CKPT_U8, 1, s_grown, &ob, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_tensor_chunks(w, ob, &gsize, &gphase, &gcount, &err), CKPT_OK);
    assert_int_equal(gcount, 8);
    for (uint32_t k = 0; k < 8; k++) gwant[k] = chunk_digest(more, G, gphase, k, &begin, &end);
    assert_int_equal(ckpt_writer_give_digests(w, ob, XXH3_64bits(more, G), gwant, 8, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_copy_range(w, ob, cat, cb, N + 1, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "it holds 5242883 bytes"));
    assert_int_equal(ckpt_writer_copy_range(w, ob, cat, cb, N, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, ob, more + N, G - N, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog_close(cat);
    ckpt_catalog *g;
    assert_int_equal(ckpt_catalog_open(grown, &g, &err), CKPT_OK);
    unsigned char *gback = malloc(G);
    assert_int_equal(ckpt_catalog_read(g, ckpt_catalog_find(g, "big"), 0, gback, G, &err), CKPT_OK);
    assert_memory_equal(gback, more, G);
    ckpt_verify_report gr = {.size = sizeof gr};
    assert_int_equal(ckpt_verify(g, NULL, &gr, &err), CKPT_OK);
    assert_int_equal(gr.tensor_digests, 1);
    ckpt_catalog_close(g);
    free(gback);
    free(more);

    ckpt_catalog *got;
    assert_int_equal(ckpt_catalog_open(out, &got, &err), CKPT_OK);
    ckpt_verify_report r = {.size = sizeof r};
    assert_int_equal(ckpt_verify(got, NULL, &r, &err), CKPT_OK);
    assert_int_equal(r.tensor_digests, 2);
    assert_int_equal(r.chunk_digests, 7); /* big's, its empty last one included; small has none */
    /* A caller built before chunk_digests: the library fills only the
     * fields its size covers. */
    ckpt_verify_report older;
    memset(&older, 0xAB, sizeof older);
    older.size = offsetof(ckpt_verify_report, chunk_digests);
    assert_int_equal(ckpt_verify(got, NULL, &older, &err), CKPT_OK);
    assert_int_equal(older.tensor_digests, 2);
    assert_true(older.chunk_digests == (size_t)0xABABABABABABABABull);
    unsigned char *back = malloc(N);
    assert_int_equal(ckpt_catalog_read(got, ckpt_catalog_find(got, "big"), 0, back, N, &err), CKPT_OK);
    assert_memory_equal(back, big, N);
    uint64_t at = ckpt_catalog_find(got, "big")->offset;
    ckpt_catalog_close(got);
    assert_int_equal(ckpt_catalog_open(whole, &got, &err), CKPT_OK);
    assert_int_equal(ckpt_verify(got, NULL, &r, &err), CKPT_E_CHECKSUM); /* the chunks agree, the whole does not */
    assert_non_null(strstr(err.message, "data checksum is"));
    ckpt_catalog_close(got);

    /* A byte of chunk 2 changed on disk: verify names it. */
    FILE *f = fopen(out, "r+b");
    fseek(f, (long)(at + b2 + 5), SEEK_SET);
    fputc(big[b2 + 5] ^ 0x40, f);
    fclose(f);
    assert_int_equal(ckpt_catalog_open(out, &got, &err), CKPT_OK);
    assert_int_equal(ckpt_verify(got, NULL, &r, &err), CKPT_E_CHECKSUM);
    char range[96];
    snprintf(range, sizeof range, "chunk 2, the tensor's bytes [%llu, %llu)", (unsigned long long)b2,
             (unsigned long long)e2);
    assert_non_null(strstr(err.message, range));
    assert_string_equal(err.tensor, "big");
    assert_int_equal(err.offset, (int64_t)(at + b2));
    ckpt_catalog_close(got);
    free(back);
    free(big);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_file_in_chunks),
        cmocka_unit_test(test_incomplete_commit_leaves_nothing),
        cmocka_unit_test(test_existing_destination),
        cmocka_unit_test(test_sharded_output_and_replacement),
        cmocka_unit_test(test_misuse),
        cmocka_unit_test(test_many_tensors_grow_tables),
        cmocka_unit_test(test_copy_tensor_from_a_checkpoint),
        cmocka_unit_test(test_chunk_digests_and_partial_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
