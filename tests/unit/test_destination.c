/* The destination rule (ckpt_destination_resolve), which every writer and
 * conversion follows: file or directory, which format, what is refused;
 * files' parents made; the files a commit publishes; messages that name
 * real files.  The torch.save and np.save outputs are compared with torch
 * and numpy themselves in tests/python/test_destination.py. */
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_gguf.h"
#include "formats/torch_save.h"
#include "helpers.h"

/* The rule's table, shared with the CLI's, Python's, Rust's and Elixir's
 * tests (tests/destinations.tsv: path, format asked, format written or
 * "refused", directory, a fragment of the refusal). */
static void test_rule_table(void **state) {
    (void)state;
    char *dir = scratch_dir();
    assert_int_equal(mkdir(in_dir(dir, "existing.pt"), 0777), 0);
    size_t n, rows = 0;
    char *text = read_all(CKPT_SOURCE_DIR "/tests/destinations.tsv", &n);
    assert_non_null(text);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char *f[5];
        for (int k = 0; k < 5; k++) f[k] = strsep(&line, "\t");
        assert_non_null(f[4]);
        rows++;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, f[0]);
        ckpt_writer_options o;
        ckpt_writer_options_init(&o);
        o.format = strcmp(f[1], "-") ? ckpt_format_from_name(f[1]) : 0;
        ckpt_format format = (ckpt_format)-1;
        int directory = -1;
        ckpt_error err;
        ckpt_status st = ckpt_destination_resolve(path, &o, &format, &directory, &err);
        if (!strcmp(f[2], "refused")) {
            if (st != CKPT_E_INVALID_ARGUMENT || !strstr(err.message, f[4]) || !strstr(err.message, "ckpt writes"))
                fail_msg("%s: %s '%s'", f[0], ckpt_status_name(st), err.message);
            assert_string_equal(err.path, path);
            continue;
        }
        if (st != CKPT_OK || format != ckpt_format_from_name(f[2]) || directory != atoi(f[3]))
            fail_msg("%s: %s, format %d, directory %d: '%s'", f[0], ckpt_status_name(st), format, directory,
                     err.message);
    }
    free(text);
    assert_true(rows > 30);
    /* Nothing was created. */
    assert_int_equal(dir_entries(dir), 1);
    scratch_free(dir);
}

static void test_names(void **state) {
    (void)state;
    assert_int_equal(ckpt_format_for_path("a/b.pt"), CKPT_FORMAT_TORCH);
    assert_int_equal(ckpt_format_for_path("model.BIN"), CKPT_FORMAT_TORCH);
    assert_int_equal(ckpt_format_for_path("x.npy"), CKPT_FORMAT_NPY);
    assert_int_equal(ckpt_format_for_path(".pt"), 0); /* a hidden file named ".pt" has no suffix */
    assert_int_equal(ckpt_format_for_path("x.h5"), 0);
    assert_int_equal(ckpt_format_for_path("out/"), 0);
    assert_int_equal(ckpt_format_for_path(NULL), 0);
    assert_int_equal(ckpt_format_from_name("safetensors"), CKPT_FORMAT_SAFETENSORS);
    assert_int_equal(ckpt_format_from_name("Flax-Msgpack"), CKPT_FORMAT_FLAX_MSGPACK);
    assert_int_equal(ckpt_format_from_name("torch"), CKPT_FORMAT_TORCH);
    assert_int_equal(ckpt_format_from_name("pt"), 0);
    assert_int_equal(ckpt_format_from_name(NULL), 0);
}

/* exact_file (safetensors' save_file, torch.save): the path is one file of
 * the asked format whatever its name. */
static void test_exact_file(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.exact_file = 1;
    ckpt_format format;
    int directory;
    ckpt_error err;
    const char *names[] = {"model.bin", "noext", "x.h5", "y.pt"};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(ckpt_destination_resolve(in_dir(dir, names[i]), &o, &format, &directory, &err), CKPT_OK);
        assert_int_equal(format, CKPT_FORMAT_SAFETENSORS);
        assert_int_equal(directory, 0);
    }
    o.format = CKPT_FORMAT_TORCH;
    assert_int_equal(ckpt_destination_resolve(in_dir(dir, "a.safetensors"), &o, &format, &directory, &err), CKPT_OK);
    assert_int_equal(format, CKPT_FORMAT_TORCH);
    assert_int_equal(ckpt_destination_resolve(in_dir(dir, "out/"), &o, &format, &directory, &err),
                     CKPT_E_INVALID_ARGUMENT);
    o.format = CKPT_FORMAT_DCP;
    assert_int_equal(ckpt_destination_resolve(in_dir(dir, "d"), &o, &format, &directory, &err), CKPT_E_INVALID_ARGUMENT);
    /* Written as safetensors under its name. */
    o.format = 0, o.no_sync = 1;
    ckpt_writer *w;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "model.bin"), &o, &w, &err), CKPT_OK);
    size_t i;
    uint64_t n = 2;
    assert_int_equal(ckpt_writer_add_tensor(w, "a", CKPT_U8, 1, &n, &i, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, i, "xy", 2, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog *c;
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "model.bin"), &c, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(c), CKPT_FORMAT_SAFETENSORS);
    ckpt_catalog_close(c);
    scratch_free(dir);
}

static ckpt_writer *writer(const char *path, uint64_t max_shard, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = max_shard;
    o.no_sync = 1;
    ckpt_writer *w = NULL;
    if (ckpt_writer_create(path, &o, &w, err) != CKPT_OK) return NULL;
    return w;
}

/* Two tensors of `n` bytes each, written and committed. */
static ckpt_status write_two(ckpt_writer *w, uint64_t n, ckpt_error *err) {
    size_t a, b;
    unsigned char data[256] = {1, 2, 3};
    ckpt_status st = ckpt_writer_add_tensor(w, "a", CKPT_U8, 1, &n, &a, err);
    if (st == CKPT_OK) st = ckpt_writer_add_tensor(w, "b", CKPT_U8, 1, &n, &b, err);
    if (st == CKPT_OK) st = ckpt_writer_begin(w, err);
    if (st == CKPT_OK) st = ckpt_writer_write(w, a, data, (size_t)n, err);
    if (st == CKPT_OK) st = ckpt_writer_write(w, b, data, (size_t)n, err);
    if (st == CKPT_OK) st = ckpt_writer_commit(w, err);
    return st;
}

/* A file's parents are made, as a directory's are (item 7 of issue 27). */
static void test_file_parents_made(void **state) {
    (void)state;
    char *dir = scratch_dir();
    char path[4096];
    ckpt_error err;
    const char *names[] = {"nd1/x.safetensors", "a/b/c/o.pt", "n/w.npz"};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        ckpt_writer *w = writer(path, 0, &err);
        if (!w) fail_msg("%s: %s", names[i], err.message);
        assert_int_equal(write_two(w, 8, &err), CKPT_OK);
        ckpt_writer_free(w);
        assert_true(file_exists(path));
        ckpt_catalog *c;
        assert_int_equal(ckpt_catalog_open(path, &c, &err), CKPT_OK);
        assert_int_equal(ckpt_catalog_tensor_count(c), 2);
        ckpt_catalog_close(c);
    }
    /* A dry run makes nothing. */
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.dry_run = 1;
    ckpt_writer *w;
    snprintf(path, sizeof path, "%s/dry/x.safetensors", dir);
    assert_int_equal(ckpt_writer_create(path, &o, &w, &err), CKPT_OK);
    ckpt_writer_free(w);
    assert_false(file_exists(in_dir(dir, "dry")));
    scratch_free(dir);
}

/* A .safetensors name with a maximum shard size: the file when it fits,
 * else its parts and their index beside it, named after its stem — and
 * the commit publishes them all (ckpt_writer_published_path). */
static void test_file_parts(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_error err;
    ckpt_writer *w = writer(in_dir(dir, "x.safetensors"), 10, &err);
    assert_non_null(w);
    assert_int_equal(write_two(w, 8, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_published_count(w), 3);
    const char *want[] = {"x-00001-of-00002.safetensors", "x-00002-of-00002.safetensors", "x.safetensors.index.json"};
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(ckpt_writer_published_path(w, i), in_dir(dir, want[i]));
        assert_true(file_exists(in_dir(dir, want[i])));
    }
    assert_null(ckpt_writer_published_path(w, 3));
    ckpt_writer_free(w);
    assert_false(file_exists(in_dir(dir, "x.safetensors")));
    /* Its parts are the checkpoint of that name: refused without overwrite. */
    assert_null(writer(in_dir(dir, "x.safetensors"), 0, &err));
    assert_int_equal(err.status, CKPT_E_EXISTS);
    assert_non_null(strstr(err.message, "parts of a checkpoint of this name"));
    /* A smaller one replaces them, index and all. */
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.overwrite = 1, o.no_sync = 1;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "x.safetensors"), &o, &w, &err), CKPT_OK);
    assert_int_equal(write_two(w, 2, &err), CKPT_OK);
    ckpt_writer_free(w);
    assert_int_equal(dir_entries(dir), 1);
    assert_true(file_exists(in_dir(dir, "x.safetensors")));
    /* Other parts beside it are another checkpoint's. */
    write_bytes(in_dir(dir, "y-00001-of-00002.safetensors"), "x", 1);
    assert_int_equal(ckpt_writer_create(in_dir(dir, "z.safetensors"), NULL, &w, &err), CKPT_OK);
    ckpt_writer_free(w);
    /* A prefix other than the file's stem is refused; a one-file format
     * refuses a maximum shard size. */
    o.prefix = "model";
    assert_int_equal(ckpt_writer_create(in_dir(dir, "q.safetensors"), &o, &w, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "prefix"));
    assert_null(writer(in_dir(dir, "q.pt"), 10, &err));
    assert_int_equal(err.status, CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "torch output is one file"));
    scratch_free(dir);
}

/* A directory destination: 5 GB shards by default (one file here), with
 * the published paths. */
static void test_directory(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_error err;
    ckpt_writer *w = writer(in_dir(dir, "out"), 0, &err);
    assert_non_null(w);
    assert_int_equal(write_two(w, 8, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_published_count(w), 1);
    assert_string_equal(ckpt_writer_published_path(w, 0), in_dir(dir, "out/model.safetensors"));
    ckpt_writer_free(w);
    scratch_free(dir);
}

/* One array into .npy; more are refused by name, suggesting .npz. */
static void test_npy(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_error err;
    ckpt_writer *w = writer(in_dir(dir, "w.npy"), 0, &err);
    assert_non_null(w);
    assert_int_equal(write_two(w, 4, &err), CKPT_E_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "2 tensors (a, b)"));
    assert_non_null(strstr(err.message, ".npz"));
    ckpt_writer_free(w);
    assert_int_equal(dir_entries(dir), 0);
    w = writer(in_dir(dir, "w.npy"), 0, &err);
    uint64_t shape[2] = {2, 3};
    size_t i;
    float v[6] = {1, 2, 3, 4, 5, 6};
    assert_int_equal(ckpt_writer_add_tensor(w, "w", CKPT_F32, 2, shape, &i, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_write(w, i, v, sizeof v, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    size_t n;
    char *bytes = read_all(in_dir(dir, "w.npy"), &n);
    /* np.save's header: version 1.0, the dict, spaces to 64 bytes. */
    const char head[] = "\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    assert_int_equal(n, 128 + sizeof v);
    assert_memory_equal(bytes, head, sizeof head - 1);
    assert_int_equal(bytes[127], '\n');
    assert_memory_equal(bytes + 128, v, sizeof v);
    free(bytes);
    scratch_free(dir);
}

/* The torch output: a file ckpt's own reader reads back, tied tensors on
 * one storage. */
static void test_torch(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_error err;
    const char *path = in_dir(dir, "pytorch_model.bin");
    ckpt_writer *w = writer(path, 0, &err);
    assert_non_null(w);
    uint64_t shape[2] = {2, 2}, half = 2;
    float v[4] = {1, 2, 3, 4};
    ckpt_tensor_storage whole = {.id = 7, .nbytes = 16, .begin = 0, .end = 16, .contiguous = 1};
    ckpt_tensor_storage second = {.id = 7, .nbytes = 16, .begin = 8, .end = 16, .contiguous = 1};
    size_t a, b, c;
    assert_int_equal(ckpt_writer_add_tensor_shared(w, "emb", CKPT_F32, 2, shape, &whole, &a, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor_shared(w, "head", CKPT_F32, 2, shape, &whole, &b, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor_shared(w, "row", CKPT_F32, 1, &half, &second, &c, &err), CKPT_OK);
    assert_code(ckpt_writer_add_tensor(w, "q", CKPT_Q8_0, 1, (uint64_t[]){32}, NULL, &err), err, CKPT__D(UNSUPPORTED_DTYPE));
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_null(ckpt_writer_tensor_kept(w, a));
    assert_string_equal(ckpt_writer_tensor_kept(w, b), "emb");
    assert_string_equal(ckpt_writer_tensor_kept(w, c), "emb");
    assert_int_equal(ckpt_writer_write(w, a, v, sizeof v, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_TORCH);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 3);
    float got[2];
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, "row");
    assert_non_null(t);
    assert_int_equal(ckpt_catalog_read(cat, t, 0, got, sizeof got, &err), CKPT_OK);
    assert_true(got[0] == 3 && got[1] == 4);
    assert_int_equal(ckpt_verify(cat, NULL, NULL, &err), CKPT_OK); /* the records' CRC-32s */
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

/* torch's .data/serialization_id of a known archive: torch 2.13's
 * torch.save({"a.weight": arange(12.).reshape(4, 3), "b": arange(5)}),
 * its records' names, sizes and CRC-32s. */
static void test_serialization_id(void **state) {
    (void)state;
    ckpt__torch_record r[] = {
        {"data.pkl", 250, 0x7a06c875u, 0, 0},        {".format_version", 1, 0x83dcefb7u, 0, 0},
        {".storage_alignment", 2, 0xe971773fu, 0, 0}, {"byteorder", 6, 0x19e33d85u, 0, 0},
        {"data/0", 48, 0x3e667d78u, 0, 0},           {"data/1", 40, 0x6c8f4e1cu, 0, 0},
        {"version", 2, 0x55679ed1u, 0, 0},
    };
    char id[41];
    assert_int_equal(ckpt__torch_serialization_id(r, 7, id), CKPT_OK);
    assert_string_equal(id, "0561108523619670529413165469095421909846");
    /* An empty record has no descriptor: its CRC counts for nothing. */
    r[5].size = 0;
    char again[41];
    assert_int_equal(ckpt__torch_serialization_id(r, 7, again), CKPT_OK);
    assert_memory_equal(id, again, 20);
    assert_memory_not_equal(id + 20, again + 20, 20);
}

/* Messages name the files being written, not the commit's staging names:
 * a file-size limit (RLIMIT_FSIZE) makes reserving a split part fail. */
static void test_messages_name_real_files(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_error err;
    assert_int_equal(mkdir(in_dir(dir, "split"), 0777), 0);
    write_bytes(in_dir(dir, "split/other.txt"), "x", 1); /* files beside: staged through the journal */
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.format = CKPT_FORMAT_GGUF;
    ckpt_gguf_writer_options g;
    ckpt_gguf_writer_options_init(&g);
    g.split_max_tensors = 1;
    o.gguf = &g;
    o.no_sync = 1;
    ckpt_writer *w;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "split/llama.gguf"), &o, &w, &err), CKPT_OK);
    uint64_t n = 1 << 16;
    size_t a, b;
    assert_int_equal(ckpt_writer_add_tensor(w, "a", CKPT_F32, 1, &n, &a, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "b", CKPT_F32, 1, &n, &b, &err), CKPT_OK);
    struct rlimit old, small = {4096, 4096};
    void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    ckpt_status st = ckpt_writer_begin(w, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, was);
    assert_int_equal(st, CKPT_E_IO);
    assert_string_equal(err.path, in_dir(dir, "split/llama-00001-of-00002.gguf"));
    assert_null(strstr(err.message, ".commit"));
    ckpt_writer_free(w);
    /* Nothing published, the staging gone. */
    assert_int_equal(dir_entries(in_dir(dir, "split")), 1);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_table),     cmocka_unit_test(test_names), cmocka_unit_test(test_exact_file),
        cmocka_unit_test(test_file_parents_made), cmocka_unit_test(test_file_parts),
        cmocka_unit_test(test_directory),      cmocka_unit_test(test_npy),
        cmocka_unit_test(test_torch),          cmocka_unit_test(test_serialization_id),
        cmocka_unit_test(test_messages_name_real_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
