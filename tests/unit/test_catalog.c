/* Catalogs: opening files, indexes and directories; lookup; reads; views. */
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static const char *two_tensors = "{\"__metadata__\":{\"format\":\"pt\"}," T("w", "F32", "[2,2]", 0, 16) "," T("b", "U8", "[4]", 16, 20) "}";

static void test_open_single_file(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *path = in_dir(dir, "m.safetensors");
    write_safetensors(path, two_tensors, 20);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_SAFETENSORS);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 2);
    assert_int_equal(ckpt_catalog_file_count(cat), 1);
    assert_null(ckpt_catalog_index_path(cat));
    const ckpt_tensor_info *w = ckpt_catalog_find(cat, "w");
    assert_non_null(w);
    assert_ptr_equal(w, ckpt_catalog_tensor(cat, 0));
    assert_int_equal(w->nbytes, 16);
    assert_int_equal(w->numel, 4);
    assert_int_equal(w->offset, 8 + strlen(two_tensors));
    assert_null(ckpt_catalog_find(cat, "missing"));
    assert_null(ckpt_catalog_tensor(cat, 2));
    assert_string_equal(ckpt_catalog_metadata_get(cat, "format"), "pt");
    assert_int_equal(ckpt_catalog_metadata_count(cat), 1);
    assert_int_equal(ckpt_catalog_metadata_entry(cat, 1, NULL, NULL), CKPT_E_OUT_OF_RANGE);

    /* Reads: whole, a range, out of range. */
    unsigned char buf[16], expect[20];
    for (int i = 0; i < 20; i++) expect[i] = (unsigned char)(i * 7 + 1);
    assert_int_equal(ckpt_catalog_read(cat, w, 0, buf, 16, &err), CKPT_OK);
    assert_memory_equal(buf, expect, 16);
    const ckpt_tensor_info *b = ckpt_catalog_find(cat, "b");
    assert_int_equal(ckpt_catalog_read(cat, b, 1, buf, 3, &err), CKPT_OK);
    assert_memory_equal(buf, expect + 17, 3);
    assert_int_equal(ckpt_catalog_read(cat, b, 2, buf, 3, &err), CKPT_E_OUT_OF_RANGE);
    assert_string_equal(err.tensor, "b");
    assert_int_equal(ckpt_catalog_read(cat, b, UINT64_MAX, buf, 2, &err), CKPT_E_OUT_OF_RANGE);

    /* Views: zero-copy, stable for the catalog's life. */
    const void *v1, *v2;
    assert_int_equal(ckpt_catalog_view(cat, w, &v1, &err), CKPT_OK);
    assert_memory_equal(v1, expect, 16);
    assert_int_equal(ckpt_catalog_view(cat, b, &v2, &err), CKPT_OK);
    assert_ptr_equal((const char *)v2, (const char *)v1 + 16);

    ckpt_tensor_info fake = *w;
    ckpt_catalog_close(cat);

    /* A file cut short after opening: reads and the first view fail cleanly. */
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    assert_int_equal(truncate(path, 8 + (off_t)strlen(two_tensors) + 10), 0);
    w = ckpt_catalog_find(cat, "w");
    assert_int_equal(ckpt_catalog_read(cat, w, 0, buf, 16, &err), CKPT_E_TRUNCATED);
    assert_int_equal(ckpt_catalog_view(cat, w, &v1, &err), CKPT_E_TRUNCATED);
    assert_string_equal(err.tensor, "w");
    assert_int_equal(ckpt_catalog_read(cat, &fake, 0, buf, 1, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_catalog_close(cat);
    ckpt_catalog_close(NULL);
    scratch_free(dir);
}

static void write_shards(const char *dir, const char *index) {
    write_safetensors(in_dir(dir, "model-00001-of-00002.safetensors"),
                      "{\"__metadata__\":{\"format\":\"pt\"}," T("a", "U8", "[3]", 0, 3) "}", 3);
    write_safetensors(in_dir(dir, "model-00002-of-00002.safetensors"),
                      "{\"__metadata__\":{\"format\":\"pt\",\"extra\":\"2\"}," T("b", "U8", "[2]", 0, 2) "," T("c", "I16", "[1]", 2, 4) "}", 4);
    write_bytes(in_dir(dir, "model.safetensors.index.json"), index, strlen(index));
}

static const char *good_index =
    "{\"metadata\":{\"total_size\":7},\"weight_map\":{\"c\":\"model-00002-of-00002.safetensors\","
    "\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00002-of-00002.safetensors\"}}";

static void test_open_sharded(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_shards(dir, good_index);
    ckpt_catalog *cat;
    ckpt_error err;
    /* By directory and by index path. */
    for (int how = 0; how < 2; how++) {
        assert_int_equal(ckpt_catalog_open(how ? in_dir(dir, "model.safetensors.index.json") : dir, &cat, &err), CKPT_OK);
        assert_int_equal(ckpt_catalog_format(cat), CKPT_FORMAT_SAFETENSORS_SHARDED);
        assert_int_equal(ckpt_catalog_file_count(cat), 2);
        assert_non_null(strstr(ckpt_catalog_file_path(cat, 0), "model-00001-of-00002"));
        assert_int_equal(ckpt_catalog_tensor_count(cat), 3);
        assert_string_equal(ckpt_catalog_tensor(cat, 0)->name, "a");
        const ckpt_tensor_info *c = ckpt_catalog_find(cat, "c");
        assert_int_equal(c->file, 1);
        unsigned char buf[2];
        assert_int_equal(ckpt_catalog_read(cat, c, 0, buf, 2, &err), CKPT_OK);
        assert_int_equal(buf[0], (unsigned char)(2 * 7 + 1));
        /* Metadata: union, first shard wins. */
        assert_int_equal(ckpt_catalog_metadata_count(cat), 2);
        assert_string_equal(ckpt_catalog_metadata_get(cat, "extra"), "2");
        assert_non_null(ckpt_catalog_index_path(cat));
        ckpt_catalog_close(cat);
    }
    scratch_free(dir);
}

static void test_index_mismatches(void **state) {
    (void)state;
    static const struct {
        const char *index;
        ckpt_status st;
        const char *tensor;
    } cases[] = {
        /* a tensor listed in the wrong shard */
        {"{\"weight_map\":{\"a\":\"model-00002-of-00002.safetensors\",\"b\":\"model-00002-of-00002.safetensors\","
         "\"c\":\"model-00002-of-00002.safetensors\"}}", CKPT__D(INDEX_MISMATCH), "a"},
        /* a shard tensor the index does not list */
        {"{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00002-of-00002.safetensors\"}}",
         CKPT__D(INDEX_MISMATCH), "c"},
        /* a listed tensor no shard holds */
        {"{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00002-of-00002.safetensors\","
         "\"c\":\"model-00002-of-00002.safetensors\",\"zz\":\"model-00002-of-00002.safetensors\"}}", CKPT__D(INDEX_MISMATCH), "zz"},
        /* a missing shard file */
        {"{\"weight_map\":{\"a\":\"model-00001-of-00002.safetensors\",\"q\":\"model-00003-of-00003.safetensors\"}}",
         CKPT_E_NOT_FOUND, NULL},
        {"{\"weight_map\":{\"a\":\"../model-00001-of-00002.safetensors\"}}", CKPT__D(INDEX_INVALID), "a"},
        {"not json", CKPT__D(INDEX_INVALID), NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = scratch_dir();
        write_shards(dir, cases[i].index);
        ckpt_catalog *cat;
        ckpt_error err;
        ckpt_error_clear(&err);
        ckpt_status st = code_of(ckpt_catalog_open(dir, &cat, &err), &err);
        if (st != cases[i].st) fail_msg("case %zu: got %s: %s", i, code_name(st), err.message);
        assert_null(cat);
        if (cases[i].tensor) assert_string_equal(err.tensor, cases[i].tensor);
        scratch_free(dir);
    }
}

static void test_duplicate_across_shards(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_safetensors(in_dir(dir, "s1.safetensors"), "{" T("a", "U8", "[1]", 0, 1) "}", 1);
    write_safetensors(in_dir(dir, "s2.safetensors"), "{" T("a", "U8", "[1]", 0, 1) "}", 1);
    const char *idx = "{\"weight_map\":{\"a\":\"s1.safetensors\"}}";
    write_bytes(in_dir(dir, "x.safetensors.index.json"), idx, strlen(idx));
    /* Only s1 is referenced: fine. */
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(dir, &cat, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    const char *idx2 = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
    write_bytes(in_dir(dir, "x.safetensors.index.json"), idx2, strlen(idx2));
    assert_code(ckpt_catalog_open(dir, &cat, &err), err, CKPT__D(DUPLICATE_NAME));
    assert_string_equal(err.tensor, "a");
    scratch_free(dir);
}

static void test_directory_resolution(void **state) {
    (void)state;
    char *dir = scratch_dir();
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(dir, &cat, &err), CKPT_E_NOT_FOUND);
    write_safetensors(in_dir(dir, "one.safetensors"), "{}", 0);
    assert_int_equal(ckpt_catalog_open(dir, &cat, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    write_safetensors(in_dir(dir, "two.safetensors"), "{}", 0);
    assert_int_equal(ckpt_catalog_open(dir, &cat, &err), CKPT_E_UNKNOWN_FORMAT);
    write_safetensors(in_dir(dir, "model.safetensors"), "{" T("m", "U8", "[1]", 0, 1) "}", 1);
    assert_int_equal(ckpt_catalog_open(dir, &cat, &err), CKPT_OK);
    assert_non_null(ckpt_catalog_find(cat, "m"));
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "nope"), &cat, &err), CKPT_E_NOT_FOUND);
    assert_int_equal(ckpt_catalog_open(NULL, &cat, &err), CKPT_E_INVALID_ARGUMENT);
    scratch_free(dir);
}

typedef struct reader_arg {
    ckpt_catalog *cat;
    int failures;
} reader_arg;

static void *reader(void *p) {
    reader_arg *a = p;
    for (int round = 0; round < 200; round++) {
        for (size_t i = 0; i < ckpt_catalog_tensor_count(a->cat); i++) {
            const ckpt_tensor_info *t = ckpt_catalog_tensor(a->cat, i);
            unsigned char buf[64];
            const void *view;
            if (ckpt_catalog_read(a->cat, t, 0, buf, t->nbytes, NULL) != CKPT_OK) a->failures++;
            if (ckpt_catalog_view(a->cat, t, &view, NULL) != CKPT_OK || memcmp(view, buf, t->nbytes)) a->failures++;
        }
    }
    return NULL;
}

static void test_concurrent_reads(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_safetensors(in_dir(dir, "m.safetensors"), two_tensors, 20);
    ckpt_catalog *cat;
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "m.safetensors"), &cat, NULL), CKPT_OK);
    pthread_t th[4];
    reader_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (reader_arg){cat, 0};
        pthread_create(&th[i], NULL, reader, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].failures, 0);
    }
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

/* Files that are no checkpoint are called so, with what they look like
 * and the list of formats ckpt reads, where safetensors' rules used to
 * judge them ("header length 8031924123371070824 exceeds the limit"). */
static void test_files_that_are_no_checkpoint(void **state) {
    (void)state;
    char *dir = scratch_dir();
    static const unsigned char random_bytes[64] = {0x9c, 0x41, 0xe7, 0x02, 0x5d, 0xb3, 0x18, 0xfa, 0x66, 0x07};
    static const unsigned char gz[16] = {0x1f, 0x8b, 8, 0};
    static const struct { const char *name; const void *data; size_t len; const char *looks; } cases[] = {
        {"notes.txt", "hello, this is not a checkpoint\n", 32, "text"},
        {"hi", "hi there\n", 9, "text"},
        {"index.html", "\n<!DOCTYPE html><html><body>Index of /</body></html>", 50, "HTML, a web page"},
        {"model.safetensors", "<html><head><title>model</title>", 32, "HTML, a web page"},
        {"model.bin", "version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n", 62, "a Git LFS pointer"},
        {"w.bin.gz", gz, sizeof gz, "gzip-compressed data"},
        {"plain.zip", "PK\3\4\24\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\12\0\0\0readme.txt", 40,
         "a ZIP archive that is neither torch's nor NumPy's"},
        {"noise.bin", random_bytes, sizeof random_bytes, "binary data of no format ckpt knows"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *path = in_dir(dir, cases[i].name);
        write_bytes(path, cases[i].data, cases[i].len);
        ckpt_catalog *cat;
        ckpt_error err;
        ckpt_format f = CKPT_FORMAT_GGUF;
        assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_E_UNKNOWN_FORMAT);
        assert_non_null(strstr(err.message, "not a checkpoint ckpt reads (it looks like "));
        assert_non_null(strstr(err.message, cases[i].looks));
        assert_non_null(strstr(err.message, "ckpt reads safetensors, torch.save files"));
        assert_non_null(strstr(err.message, "GGUF"));
        assert_int_equal(ckpt_detect_format(path, NULL, &f, &err), CKPT_E_UNKNOWN_FORMAT);
        assert_int_equal(f, 0);
        assert_non_null(strstr(err.message, cases[i].looks));
    }
    /* What may be a damaged safetensors file is still judged as one. */
    write_bytes(in_dir(dir, "empty.safetensors"), "", 0);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_code(ckpt_catalog_open(in_dir(dir, "empty.safetensors"), &cat, &err), err, CKPT__D(HEADER_TOO_SMALL));
    unsigned char cut[16] = {200};
    write_bytes(in_dir(dir, "cut"), cut, sizeof cut);
    assert_code(ckpt_catalog_open(in_dir(dir, "cut"), &cat, &err), err, CKPT__D(HEADER_PAST_END));
    scratch_free(dir);
}

/* The format a file is read as, from its first bytes: damaged files keep
 * their family (front ends name errors after it). */
static void test_detect_format(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_safetensors(in_dir(dir, "m.safetensors"), two_tensors, 20);
    write_bytes(in_dir(dir, "cut.bin"), "PK\3\4\24\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\20\0\0\0archive/data.pkl", 46);
    write_bytes(in_dir(dir, "x.gguf"), "GGUF\3\0\0\0", 8);
    write_bytes(in_dir(dir, "a.npy"), "\x93NUMPY\1\0", 8);
    write_bytes(in_dir(dir, "model.safetensors.index.json"), "{}", 2);
    static const struct { const char *name; ckpt_format format; } cases[] = {
        {"m.safetensors", CKPT_FORMAT_SAFETENSORS}, {"cut.bin", CKPT_FORMAT_TORCH},   {"x.gguf", CKPT_FORMAT_GGUF},
        {"a.npy", CKPT_FORMAT_NPY}, {"model.safetensors.index.json", CKPT_FORMAT_SAFETENSORS_SHARDED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ckpt_format f = 0;
        ckpt_error err;
        assert_int_equal(ckpt_detect_format(in_dir(dir, cases[i].name), NULL, &f, &err), CKPT_OK);
        assert_int_equal(f, cases[i].format);
    }
    ckpt_format f;
    ckpt_error err;
    assert_int_equal(ckpt_detect_format(in_dir(dir, "missing"), NULL, &f, &err), CKPT_E_NOT_FOUND);
    assert_int_equal(ckpt_detect_format(NULL, NULL, &f, &err), CKPT_E_INVALID_ARGUMENT);
    scratch_free(dir);
}

/* The list help texts print: every format, described, the writable ones. */
static void test_format_list(void **state) {
    (void)state;
    size_t n = 0;
    for (; ckpt_format_at(n); n++) {
        assert_non_null(ckpt_format_name(ckpt_format_at(n)));
        assert_non_null(strchr(ckpt_format_description(ckpt_format_at(n)), ':'));
    }
    assert_int_equal(n, 9);
    assert_true(ckpt_format_writable(CKPT_FORMAT_SAFETENSORS) && ckpt_format_writable(CKPT_FORMAT_SAFETENSORS_SHARDED));
    assert_true(ckpt_format_writable(CKPT_FORMAT_GGUF) && ckpt_format_writable(CKPT_FORMAT_DCP));
    assert_false(ckpt_format_writable(CKPT_FORMAT_TORCH_SHARDED));
    assert_null(ckpt_format_description((ckpt_format)0));
    assert_false(ckpt_format_writable((ckpt_format)999));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_files_that_are_no_checkpoint), cmocka_unit_test(test_detect_format),
        cmocka_unit_test(test_format_list),
        cmocka_unit_test(test_open_single_file),      cmocka_unit_test(test_open_sharded),
        cmocka_unit_test(test_index_mismatches),      cmocka_unit_test(test_duplicate_across_shards),
        cmocka_unit_test(test_directory_resolution),  cmocka_unit_test(test_concurrent_reads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
