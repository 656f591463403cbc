/* A checkpoint read through a caller's source (ckpt_source_ops): a file in
 * memory, a directory of shards, a DCP directory; its failures named; its
 * lies refused. */
#include <string.h>

#include "ckpt_dcp.h"
#include "helpers.h"
#include "memdir.h"

static const float rows[6] = {1, 2, 3, 4, 5, 6};
static const uint16_t halves[4] = {0x3c00, 0x4000, 0x4200, 0x4400};

/* Writes the two tensors as `format` to `path` (shards of at most `shard`
 * bytes when nonzero). */
static void write_checkpoint(const char *path, ckpt_format format, uint64_t shard) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = format;
    o.max_shard_size = shard;
    o.no_sync = 1;
    ckpt_dcp_writer_options dcp;
    ckpt_dcp_writer_options_init(&dcp);
    dcp.ranks = 2; /* two files */
    if (format == CKPT_FORMAT_DCP) o.dcp = &dcp;
    ckpt_writer *w;
    ckpt_error err;
    uint64_t s_rows[2] = {2, 3}, s_halves[1] = {4};
    size_t a, b;
    assert_int_equal(ckpt_writer_create(path, &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "rows", CKPT_F32, 2, s_rows, &a, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "halves", CKPT_F16, 1, s_halves, &b, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, a, rows, sizeof rows, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, b, halves, sizeof halves, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
}

/* The catalog holds exactly the two tensors, with their bytes. */
static void check_exact(ckpt_catalog *cat) {
    ckpt_error err;
    assert_int_equal(ckpt_catalog_tensor_count(cat), 2);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "rows");
    assert_non_null(t);
    float r[6];
    assert_int_equal(ckpt_catalog_read(cat, t, 0, r, sizeof r, &err), CKPT_OK);
    assert_memory_equal(r, rows, sizeof rows);
    uint16_t h[4];
    assert_non_null(t = ckpt_catalog_find(cat, "halves"));
    assert_int_equal(ckpt_catalog_read(cat, t, 0, h, sizeof h, &err), CKPT_OK);
    assert_memory_equal(h, halves, sizeof halves);
    /* And through the engine, as a load. */
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_select(plan, "rows", &err), CKPT_OK);
    memset(r, 0, sizeof r);
    assert_int_equal(ckpt_plan_set_buffer(plan, 0, r, sizeof r, &err), CKPT_OK);
    assert_int_equal(ckpt_load(plan, NULL, &err), CKPT_OK);
    assert_memory_equal(r, rows, sizeof rows);
    ckpt_plan_free(plan);
}

static void test_memory_safetensors(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_checkpoint(in_dir(dir, "model.safetensors"), CKPT_FORMAT_SAFETENSORS, 0);
    size_t n;
    char *bytes = read_all(in_dir(dir, "model.safetensors"), &n);
    ckpt_memory_source m = {bytes, n};
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open_source(&ckpt_memory_source_ops, &m, "model.safetensors", NULL, &cat, &err),
                     CKPT_OK);
    check_exact(cat);
    /* A view is the caller's memory itself. */
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "rows");
    const void *view;
    assert_int_equal(ckpt_catalog_view(cat, t, &view, &err), CKPT_OK);
    assert_ptr_equal(view, bytes + t->offset);
    ckpt_catalog_close(cat);
    free(bytes);
    scratch_free(dir);
}

/* Opens directory "ckpt" of a memdir made of `local`, checks it exactly. */
static void open_dir_exact(const char *local, ckpt_format format, int listings) {
    memdir d;
    memdir_load(&d, "ckpt", local);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "ckpt", NULL, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), format);
    assert_true(ckpt_catalog_file_count(cat) >= 2);
    assert_int_equal(d.listings, listings);
    check_exact(cat);
    ckpt_catalog_close(cat);
    memdir_free(&d);
}

static void test_directory_of_shards(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_checkpoint(in_dir(dir, "model.safetensors"), CKPT_FORMAT_SAFETENSORS, 24);
    assert_true(file_exists(in_dir(dir, "model.safetensors.index.json")));
    open_dir_exact(dir, CKPT_FORMAT_SAFETENSORS_SHARDED, 0); /* the index is found by its name */
    scratch_free(dir);
}

static void test_dcp_directory(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char *out = strdup(in_dir(dir, "dcp"));
    write_checkpoint(out, CKPT_FORMAT_DCP, 0);
    open_dir_exact(out, CKPT_FORMAT_DCP, 0);
    free(out);
    scratch_free(dir);
}

/* A directory that only a listing resolves: two files, one a safetensors
 * named as no exact rule names it. */
static void test_listed_directory(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_checkpoint(in_dir(dir, "weights.safetensors"), CKPT_FORMAT_SAFETENSORS, 0);
    write_bytes(in_dir(dir, "config.json"), "{}", 2);
    memdir d;
    memdir_load(&d, "ckpt", dir);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "ckpt", NULL, &cat, &err), CKPT_OK);
    assert_int_equal(d.listings, 1);
    assert_string_equal(ckpt_catalog_file_path(cat, 0), "ckpt/weights.safetensors");
    check_exact(cat);
    ckpt_catalog_close(cat);
    /* Lies in the listing: a name with '/' or "..". */
    static const char *const lies[] = {"../evil.safetensors", "sub/x.safetensors", ".."};
    for (size_t i = 0; i < sizeof lies / sizeof lies[0]; i++) {
        d.extra = lies[i];
        assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "ckpt", NULL, &cat, &err), CKPT_E_UNSAFE_PATH);
        assert_null(cat);
        assert_string_equal(err.path, "ckpt");
        assert_non_null(strstr(err.message, lies[i]));
    }
    memdir_free(&d);
    scratch_free(dir);
}

/* A read that fails names the file, the tensor and the byte. */
static void test_failed_read_is_named(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_checkpoint(in_dir(dir, "model.safetensors"), CKPT_FORMAT_SAFETENSORS, 0);
    memdir d;
    memdir_load(&d, "ckpt", dir);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "ckpt/model.safetensors", NULL, &cat, &err), CKPT_OK);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "rows");
    d.fail_file = "ckpt/model.safetensors";
    d.fail_offset = t->offset + 4;
    float r[6];
    assert_int_equal(ckpt_catalog_read(cat, t, 0, r, sizeof r, &err), CKPT_E_IO);
    assert_string_equal(err.path, "ckpt/model.safetensors");
    assert_string_equal(err.tensor, "rows");
    assert_int_equal(err.offset, (int64_t)t->offset);
    assert_non_null(strstr(err.message, "the disk of memdir broke"));
    /* The same through the engine. */
    ckpt_plan *plan;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_select(plan, "rows", &err), CKPT_OK);
    assert_int_equal(ckpt_plan_set_buffer(plan, 0, r, sizeof r, &err), CKPT_OK);
    assert_int_equal(ckpt_load(plan, NULL, &err), CKPT_E_IO);
    assert_string_equal(err.path, "ckpt/model.safetensors");
    assert_string_equal(err.tensor, "rows");
    assert_true(err.offset >= 0 && (uint64_t)err.offset <= d.fail_offset);
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    memdir_free(&d);
    scratch_free(dir);
}

/* Sizes told too short: the data a file declares runs past them. */
static void test_short_sizes_refused(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_checkpoint(in_dir(dir, "model.safetensors"), CKPT_FORMAT_SAFETENSORS, 0);
    memdir d;
    memdir_load(&d, "ckpt", dir);
    d.short_by = 4;
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "ckpt", NULL, &cat, &err), CKPT_E_TRUNCATED);
    assert_null(cat);
    assert_string_equal(err.path, "ckpt/model.safetensors");
    assert_int_equal(err.offset, (int64_t)d.files[0].size - 4);
    memdir_free(&d);
    scratch_free(dir);
}

/* A name an index gives that leads out of the directory is refused before
 * the source is asked for it. */
static void test_index_names_stay_inside(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_checkpoint(in_dir(dir, "w.safetensors"), CKPT_FORMAT_SAFETENSORS, 0);
    const char *index =
        "{\"metadata\":{},\"weight_map\":{\"rows\":\"../w.safetensors\",\"halves\":\"../w.safetensors\"}}";
    write_bytes(in_dir(dir, "model.safetensors.index.json"), index, strlen(index));
    memdir d;
    memdir_load(&d, "ckpt", dir);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_code(ckpt_catalog_open_source(&memdir_ops, &d, "ckpt", NULL, &cat, &err), err, CKPT__D(INDEX_INVALID));
    assert_null(cat);
    assert_string_equal(err.tensor, "rows");
    assert_non_null(strstr(err.message, "'../w.safetensors'"));
    memdir_free(&d);
    scratch_free(dir);
}

static void test_bad_tables_refused(void **state) {
    (void)state;
    ckpt_source_ops old = memdir_ops;
    old.version = 0;
    ckpt_catalog *cat;
    ckpt_error err;
    memdir d;
    memset(&d, 0, sizeof d);
    assert_int_equal(ckpt_catalog_open_source(&old, &d, "x", NULL, &cat, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "", NULL, &cat, &err), CKPT_E_INVALID_ARGUMENT);
    d.root = "ckpt";
    assert_int_equal(ckpt_catalog_open_source(&memdir_ops, &d, "nothing", NULL, &cat, &err), CKPT_E_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory_safetensors),      cmocka_unit_test(test_directory_of_shards),
        cmocka_unit_test(test_dcp_directory),           cmocka_unit_test(test_listed_directory),
        cmocka_unit_test(test_failed_read_is_named),    cmocka_unit_test(test_short_sizes_refused),
        cmocka_unit_test(test_index_names_stay_inside), cmocka_unit_test(test_bad_tables_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
