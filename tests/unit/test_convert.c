/* ckpt_convert: single ↔ sharded round trips, progress and cancellation;
 * the object tree a plan's output has (ckpt_plan_tree_json). */
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"
#include "base/base.h"
#include "plan_internal.h"

#define T(name, dtype, shape, b, e) "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static int calls;
static uint64_t last_done, last_total;
static int record(uint64_t done, uint64_t total, void *user) {
    calls++;
    last_done = done;
    last_total = total;
    return user != NULL && done > 0;
}

static void test_round_trip_is_byte_identical(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    write_safetensors(src,
                      "{\"__metadata__\":{\"format\":\"pt\"}," T("a", "F32", "[4]", 0, 16) "," T("b", "F32", "[2]", 16, 24) ","
                      T("c", "I16", "[3]", 24, 30) "," T("d", "U8", "[0]", 30, 30) "}",
                      30);
    ckpt_catalog *cat;
    ckpt_error err;
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    /* The hand-made source is not padded as safetensors pads; a first
     * conversion gives the canonical file the round trip must reproduce. */
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    const char *canon = strdup(in_dir(dir, "canon.safetensors"));
    assert_int_equal(convert_all(cat, canon, &o, NULL, NULL, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_catalog_open(canon, &cat, &err), CKPT_OK);
    o.max_shard_size = 16;
    calls = 0;
    assert_int_equal(convert_all(cat, in_dir(dir, "sharded"), &o, record, NULL, &err), CKPT_OK);
    assert_true(calls >= 2);
    assert_int_equal(last_done, 30);
    assert_int_equal(last_total, 30);
    ckpt_catalog_close(cat);
    /* a (16) | b, c, d (14): two shards and the index */
    assert_int_equal(dir_entries(in_dir(dir, "sharded")), 3);

    assert_int_equal(ckpt_catalog_open(in_dir(dir, "sharded"), &cat, &err), CKPT_OK);
    ckpt_writer_options_init(&o);
    assert_int_equal(convert_all(cat, in_dir(dir, "merged.safetensors"), &o, NULL, NULL, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    size_t n1, n2;
    char *a = read_all(canon, &n1), *b = read_all(in_dir(dir, "merged.safetensors"), &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    /* The data is the source's, byte for byte. */
    char *orig = read_all(src, &n2);
    assert_memory_equal(a + n1 - 30, orig + n2 - 30, 30);
    free(orig);
    free(a);
    free(b);
    free((char *)canon);
    free((char *)src);
    scratch_free(dir);
}

static void test_cancel_leaves_nothing(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_safetensors(in_dir(dir, "src.safetensors"), "{" T("a", "U8", "[8]", 0, 8) "," T("b", "U8", "[8]", 8, 16) "}", 16);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "src.safetensors"), &cat, &err), CKPT_OK);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 8;
    assert_int_equal(convert_all(cat, in_dir(dir, "out"), &o, record, (void *)1, &err), CKPT_E_CANCELLED);
    /* Staged in a temporary directory: neither "out" nor the stage remain. */
    assert_int_equal(dir_entries(in_dir(dir, "out")), -1);
    assert_int_equal(dir_entries(dir), 1);
    ckpt_writer_options_init(&o);
    assert_int_equal(convert_all(cat, in_dir(dir, "src.safetensors"), &o, NULL, NULL, &err), CKPT_E_EXISTS);
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_convert_plan(NULL, "x", NULL, &err), CKPT_E_INVALID_ARGUMENT);
    scratch_free(dir);
}

/* A dry run lists what a conversion would write, after the plan's rules,
 * and writes nothing; the real conversion then writes exactly those files. */
static void test_preview_writes_nothing(void **state) {
    (void)state;
    char *dir = scratch_dir();
    write_safetensors(in_dir(dir, "src.safetensors"),
                      "{" T("a", "F32", "[2]", 0, 8) "," T("b", "U8", "[8]", 8, 16) "," T("c", "U8", "[4]", 16, 20) "}",
                      20);
    ckpt_catalog *cat;
    ckpt_plan *plan;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(in_dir(dir, "src.safetensors"), &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_exclude(plan, "c", &err), CKPT_OK);
    assert_int_equal(ckpt_plan_rename(plan, "a", "x.a", &err), CKPT_OK);
    assert_int_equal(ckpt_plan_cast(plan, "a", CKPT_F16, &err), CKPT_OK);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.max_shard_size = 8;
    ckpt_writer *preview;
    assert_int_equal(ckpt_convert_plan_preview(plan, in_dir(dir, "out/"), &o, &preview, &err), CKPT_OK);
    assert_int_equal(dir_entries(dir), 1); /* neither "out" nor a stage */
    /* Read through the writer's accessors: x.a (from a, cast to F16) and b,
     * one per shard, each at the end of its file; "c" excluded. */
    assert_int_equal(ckpt_writer_format(preview), CKPT_FORMAT_SAFETENSORS);
    assert_true(ckpt_writer_is_directory(preview));
    assert_string_equal(ckpt_writer_open_path(preview), ckpt_writer_path(preview));
    assert_int_equal(ckpt_writer_tensor_count(preview), 2);
    assert_int_equal(ckpt_writer_file_count(preview), 2);
    static const char *const names[] = {"x.a", "b"}, *const files[] = {"model-00001-of-00002.safetensors",
                                                                        "model-00002-of-00002.safetensors"};
    static const ckpt_dtype dtypes[] = {CKPT_F16, CKPT_U8};
    static const uint64_t shapes[] = {2, 8}, nbytes[] = {4, 8};
    uint64_t sizes[2];
    for (size_t i = 0; i < 2; i++) {
        ckpt_writer_tensor_info t = {.size = sizeof t};
        assert_true(ckpt_writer_tensor_info_at(preview, i, &t));
        assert_string_equal(t.name, names[i]);
        assert_string_equal(ckpt_plan_item_at(plan, i)->source->name, i ? "b" : "a");
        assert_int_equal(t.dtype, dtypes[i]);
        assert_int_equal(t.ndim, 1);
        assert_int_equal(t.shape[0], shapes[i]);
        assert_int_equal(t.nbytes, nbytes[i]);
        assert_int_equal(t.file, i);
        assert_null(t.kept);
        assert_int_equal(t.part_count, 0);
        assert_string_equal(ckpt_writer_name_at(preview, CKPT_WRITER_DATA_FILES, i), files[i]);
        sizes[i] = ckpt_writer_file_size(preview, i);
        assert_int_equal(sizes[i], t.offset + t.nbytes);
    }
    ckpt_writer_tensor_info none = {.size = sizeof none};
    assert_false(ckpt_writer_tensor_info_at(preview, 2, &none));
    assert_int_equal(ckpt_writer_name_count(preview, CKPT_WRITER_SIDE_FILES), 1);
    assert_string_equal(ckpt_writer_name_at(preview, CKPT_WRITER_SIDE_FILES, 0), "model.safetensors.index.json");
    assert_null(ckpt_writer_name_at(preview, CKPT_WRITER_SIDE_FILES, 1));
    assert_int_equal(ckpt_writer_name_count(preview, CKPT_WRITER_REPLACED_FILES), 0);
    assert_int_equal(ckpt_writer_total_bytes(preview), 12);
    assert_int_equal(ckpt_writer_published_count(preview), 0);
    ckpt_writer_free(preview);
    /* The same options through ckpt_convert_plan with dry_run: checked, nothing written. */
    o.dry_run = 1;
    assert_int_equal(ckpt_convert_plan(plan, in_dir(dir, "out"), &o, &err), CKPT_OK);
    assert_int_equal(dir_entries(dir), 1);
    /* The real conversion writes the files the preview named, of the sizes it said. */
    o.dry_run = 0;
    assert_int_equal(ckpt_convert_plan(plan, in_dir(dir, "out"), &o, &err), CKPT_OK);
    assert_int_equal(dir_entries(in_dir(dir, "out")), 3);
    for (size_t i = 0; i < 2; i++) {
        struct stat sb;
        assert_int_equal(stat(in_dir(in_dir(dir, "out"), files[i]), &sb), 0);
        assert_int_equal((uint64_t)sb.st_size, sizes[i]);
    }
    /* A dry run fails as the conversion would: the checkpoint is there now. */
    assert_int_equal(ckpt_convert_plan_preview(plan, in_dir(dir, "out"), &o, &preview, &err), CKPT_E_EXISTS);
    assert_null(preview);
    o.overwrite = 1;
    assert_int_equal(ckpt_convert_plan_preview(plan, in_dir(dir, "out"), &o, &preview, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_name_count(preview, CKPT_WRITER_REPLACED_FILES), 3);
    assert_non_null(strstr(ckpt_writer_name_at(preview, CKPT_WRITER_REPLACED_FILES, 0), "model"));
    ckpt_writer_free(preview);
    /* A dry-run writer refuses data. */
    ckpt_writer *w;
    o.dry_run = 1;
    o.max_shard_size = 0;
    uint64_t shape[1] = {4};
    size_t index;
    assert_int_equal(ckpt_writer_create(in_dir(dir, "w.safetensors"), &o, &w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_add_tensor(w, "t", CKPT_U8, 1, shape, &index, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_begin(w, &err), CKPT_OK);
    assert_int_equal(ckpt_writer_file_count(w), 1);
    assert_int_equal(ckpt_writer_write(w, index, "abcd", 4, &err), CKPT_E_BAD_STATE);
    assert_int_equal(ckpt_writer_commit(w, &err), CKPT_OK);
    ckpt_writer_free(w);
    assert_false(file_exists(in_dir(dir, "w.safetensors")));
    ckpt_plan_free(plan);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}

/* A training checkpoint's tree, converted by the hub's rules: the head
 * tied to fc was written once, recorded as `removed → kept`. */
#define MODEL_TREE                                                                                                   \
    "{\"__dict__\": [[\"conv1.weight\", {\"__tensor__\": \"model.conv1.weight\"}], [\"head.weight\", {\"__tensor__\": " \
    "\"model.head.weight\"}]]}"
#define TRAIN_TREE                                                                                                   \
    "{\"__dict__\": [[\"model\", " MODEL_TREE "], [\"opt\", {\"__dict__\": [[\"m\", {\"__tensor__\": \"opt.m\"}], "     \
    "[\"lr\", 0.1]]}], [\"epoch\", 3]]}"

static char *plan_tree(ckpt_catalog *cat, const char *select, const char *tree) {
    ckpt_plan *plan;
    ckpt_error err;
    char *json = NULL;
    assert_int_equal(ckpt_plan_create(cat, &plan, &err), CKPT_OK);
    if (select) assert_int_equal(ckpt_plan_select(plan, select, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_tree_json(plan, tree, &json, &err), CKPT_OK);
    ckpt_plan_free(plan);
    return json;
}

static void test_plan_tree_json(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *src = in_dir(dir, "m.safetensors");
    write_safetensors(src,
                      "{\"__metadata__\":{\"format\":\"pt\",\"model.head.weight\":\"model.fc.weight\"},"
                      T("model.conv1.weight", "F32", "[2]", 0, 8) "," T("model.fc.weight", "F32", "[1]", 8, 12) ","
                      T("opt.m", "F32", "[1]", 12, 16) "}",
                      16);
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    /* No tree recorded, none given: none. */
    assert_null(plan_tree(cat, NULL, NULL));
    /* The whole tree, the removed head under the tensor that holds it. */
    char *json = plan_tree(cat, NULL, TRAIN_TREE);
    assert_non_null(strstr(json, "[\"head.weight\", {\"__tensor__\": \"model.fc.weight\"}]"));
    assert_non_null(strstr(json, "[\"lr\", 0.1]]}], [\"epoch\", 3]]}"));
    ckpt_free(json);
    /* A selection: the optimizer goes with its tensors, the epoch with the rule. */
    json = plan_tree(cat, "model.*", TRAIN_TREE);
    assert_string_equal(json, "{\"__dict__\": [[\"model\", {\"__dict__\": [[\"conv1.weight\", {\"__tensor__\": "
                              "\"model.conv1.weight\"}], [\"head.weight\", {\"__tensor__\": \"model.fc.weight\"}]]}]]}");
    ckpt_free(json);
    /* A state dict is given as it is, though a conversion records none. */
    const char *flat = "{\"__dict__\": [[\"model.conv1.weight\", {\"__tensor__\": \"model.conv1.weight\"}]]}";
    json = plan_tree(cat, "model.conv1.*", flat);
    assert_string_equal(json, flat);
    ckpt_free(json);
    assert_int_equal(ckpt_plan_tree_json(NULL, flat, &json, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_catalog_close(cat);
    scratch_free(dir);
}


/* ---- outputs a conversion assembles, computes or generates (plan_internal.h) ---- */

/* A safetensors file of F32 tensors named `names`, each of `numel`
 * elements of shape `shape_json`, tensor k's element i holding k*100+i. */
static void write_f32_tensors(const char *path, const char *const *names, size_t n, const char *shape_json,
                              size_t numel) {
    char header[2048] = "{";
    for (size_t k = 0; k < n; k++)
        snprintf(header + strlen(header), sizeof header - strlen(header),
                 "%s\"%s\":{\"dtype\":\"F32\",\"shape\":%s,\"data_offsets\":[%zu,%zu]}", k ? "," : "", names[k],
                 shape_json, k * numel * 4, (k + 1) * numel * 4);
    strcat(header, "}");
    size_t h = strlen(header), len = 8 + h + n * numel * 4;
    unsigned char *buf = calloc(1, len);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(buf + 8, header, h);
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < numel; i++) {
            float v = (float)(k * 100 + i);
            memcpy(buf + 8 + h + (k * numel + i) * 4, &v, 4); /* the data is not 4-byte aligned */
        }
    write_bytes(path, buf, len);
    free(buf);
}

/* A plan over a fresh write_f32_tensors file at `src` (its catalog in *cat). */
static ckpt_plan *plan_of_f32_tensors(const char *src, const char *const *names, size_t n, const char *shape_json,
                                      size_t numel, ckpt_catalog **cat) {
    ckpt_plan *p;
    ckpt_error err;
    write_f32_tensors(src, names, n, shape_json, numel);
    assert_int_equal(ckpt_catalog_open(src, cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(*cat, &p, &err), CKPT_OK);
    return p;
}

/* Tensor `name` of a converted file, read whole into a malloc'ed buffer. */
static void *read_output(const char *path, const char *name, const ckpt_tensor_info **info) {
    ckpt_catalog *cat;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(path, &cat, &err), CKPT_OK);
    const ckpt_tensor_info *t = ckpt_catalog_find(cat, name);
    assert_non_null(t);
    static ckpt_tensor_info copy;
    static uint64_t shape[CKPT_MAX_DIMS];
    copy = *t;
    memcpy(shape, t->shape, t->ndim * sizeof *shape);
    copy.shape = shape, copy.name = NULL;
    void *buf = malloc(t->nbytes ? t->nbytes : 1);
    assert_int_equal(ckpt_catalog_read(cat, t, 0, buf, t->nbytes, &err), CKPT_OK);
    ckpt_catalog_close(cat);
    *info = &copy;
    return buf;
}

static void test_stack_streams_parts_into_one_tensor(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *names[] = {"a", "e0", "e1", "e2", "z"};
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    write_f32_tensors(src, names, 5, "[2,3]", 6);
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &p, &err), CKPT_OK);
    size_t parts[] = {3, 1, 2}; /* e2, e0, e1: the stack's order is the caller's */
    assert_int_equal(ckpt__plan_stack(p, 1, 3, parts, &err), CKPT_OK);
    assert_int_equal(ckpt__plan_set_name(p, 1, "stacked", &err), CKPT_OK);
    ckpt__plan_place(p, 1, 4); /* after z */
    assert_int_equal(ckpt_plan_cast(p, "e0", CKPT_F16, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_count(p), 3);
    assert_string_equal(ckpt_plan_item_at(p, 0)->name, "a");
    assert_string_equal(ckpt_plan_item_at(p, 1)->name, "z");
    const ckpt_plan_item *it = ckpt_plan_item_at(p, 2);
    assert_string_equal(it->name, "stacked");
    assert_int_equal(it->ndim, 3);
    assert_int_equal(it->shape[0], 3);
    assert_int_equal(it->shape[1], 2);
    assert_int_equal(it->shape[2], 3);
    assert_int_equal(it->nbytes, 3 * 6 * 2);
    size_t index = 99;
    assert_non_null(ckpt_plan_find(p, "stacked", &index));
    assert_int_equal(index, 2);
    /* a load cannot place parts: refused */
    ckpt_load_options lo;
    ckpt_load_options_init(&lo);
    assert_int_equal(ckpt_load(p, &lo, &err), CKPT_E_UNSUPPORTED);
    const char *dst = strdup(in_dir(dir, "out.safetensors"));
    assert_int_equal(ckpt_convert_plan(p, dst, NULL, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    const ckpt_tensor_info *t;
    uint16_t *h = read_output(dst, "stacked", &t);
    assert_int_equal(t->dtype, CKPT_F16);
    assert_int_equal(t->ndim, 3);
    assert_int_equal(t->shape[0], 3);
    for (size_t k = 0; k < 3; k++)
        for (size_t i = 0; i < 6; i++)
            assert_true(ckpt__f16_to_f32(h[k * 6 + i]) == (float)(parts[k] * 100 + i)); /* file entry j holds j*100+i */
    free(h);
    free((void *)dst);
    free((void *)src);
    scratch_free(dir);
}

static void test_stack_refuses_parts_of_other_shapes(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    write_safetensors(src, "{" T("e0", "F32", "[2,3]", 0, 24) "," T("e1", "F32", "[3,2]", 24, 48) "}", 48);
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &p, &err), CKPT_OK);
    size_t parts[] = {0, 1};
    assert_int_equal(ckpt__plan_stack(p, 0, 2, parts, &err), CKPT_E_INVALID_ARGUMENT);
    assert_string_equal(err.tensor, "e1");
    assert_non_null(strstr(err.message, "shape"));
    size_t twice[] = {0, 0};
    assert_int_equal(ckpt__plan_stack(p, 0, 2, twice, &err), CKPT_E_INVALID_ARGUMENT);
    size_t other[] = {1};
    assert_int_equal(ckpt__plan_stack(p, 0, 1, other, &err), CKPT_E_INVALID_ARGUMENT);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    free((void *)src);
    scratch_free(dir);
}

static void test_unstack_streams_each_slice_into_its_own_tensor(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *names[] = {"a", "stack", "z"};
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    write_f32_tensors(src, names, 3, "[3,2,4]", 24); /* tensor j's element i holds j*100+i */
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &p, &err), CKPT_OK);
    const char *outs[] = {"e0", "e1", "e2"};
    assert_int_equal(ckpt__plan_unstack(p, 1, 2, outs, &err), CKPT_E_INVALID_ARGUMENT); /* 3 slices, 2 names */
    assert_string_equal(err.tensor, "stack");
    assert_int_equal(ckpt__plan_unstack(p, 1, 3, outs, &err), CKPT_OK);
    assert_int_equal(ckpt__plan_unstack(p, 1, 3, outs, &err), CKPT_E_INVALID_ARGUMENT); /* split already */
    assert_int_equal(ckpt_plan_slice(p, "stack", 0, 0, 1, &err), CKPT_E_INVALID_ARGUMENT); /* its boxes stay */
    assert_int_equal(ckpt_plan_cast(p, "*", CKPT_F16, &err), CKPT_OK); /* every slice cast */
    assert_int_equal(ckpt_plan_count(p), 3); /* the item is the stack, whole */
    assert_int_equal(ckpt_plan_item_at(p, 1)->ndim, 3);
    ckpt_load_options lo;
    ckpt_load_options_init(&lo);
    assert_int_equal(ckpt_load(p, &lo, &err), CKPT_E_UNSUPPORTED); /* one output a tensor */
    const char *dst = strdup(in_dir(dir, "out.safetensors"));
    assert_int_equal(ckpt_convert_plan(p, dst, NULL, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    ckpt_catalog *out;
    assert_int_equal(ckpt_catalog_open(dst, &out, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(out), 5);
    assert_null(ckpt_catalog_find(out, "stack"));
    ckpt_catalog_close(out);
    for (size_t k = 0; k < 3; k++) {
        const ckpt_tensor_info *t;
        uint16_t *h = read_output(dst, outs[k], &t);
        assert_int_equal(t->dtype, CKPT_F16);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], 2);
        assert_int_equal(t->shape[1], 4);
        for (size_t i = 0; i < 8; i++) assert_true(ckpt__f16_to_f32(h[i]) == (float)(100 + k * 8 + i));
        free(h);
    }
    free((void *)dst);
    free((void *)src);
    scratch_free(dir);
}

static void test_unstack_refuses_what_it_cannot_slice(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *names[] = {"v", "m"};
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    ckpt_catalog *cat;
    ckpt_plan *p = plan_of_f32_tensors(src, names, 2, "[4]", 4, &cat);
    ckpt_error err;
    const char *outs[] = {"a", "b", "c", "d"};
    assert_int_equal(ckpt__plan_unstack(p, 0, 4, outs, &err), CKPT_E_INVALID_ARGUMENT); /* a vector */
    assert_non_null(strstr(err.message, "fewer than 2 axes"));
    size_t parts[] = {0, 1};
    assert_int_equal(ckpt__plan_stack(p, 0, 2, parts, &err), CKPT_OK);
    assert_int_equal(ckpt__plan_unstack(p, 0, 2, outs, &err), CKPT_E_INVALID_ARGUMENT); /* stacked */
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    free((void *)src);
    scratch_free(dir);
}

static void test_compute_adds_in_the_precision_held(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *names[] = {"n32", "n16"};
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    ckpt_catalog *cat;
    ckpt_plan *p = plan_of_f32_tensors(src, names, 2, "[64]", 64, &cat);
    ckpt_error err;
    ckpt__elementwise f32 = {.add = 0.25, .hold = CKPT_F32}, f16 = {.add = 2049.0, .hold = CKPT_F16};
    ckpt__elementwise bad = {.add = 1.0, .hold = CKPT_I32};
    assert_int_equal(ckpt__plan_compute(p, 0, &bad, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt__plan_compute(p, 0, &f32, &err), CKPT_OK);
    assert_int_equal(ckpt__plan_compute(p, 0, &f32, &err), CKPT_E_INVALID_ARGUMENT); /* one rule a tensor */
    assert_int_equal(ckpt__plan_compute(p, 1, &f16, &err), CKPT_OK);
    assert_true(ckpt_plan_item_at(p, 0)->transform);
    const char *dst = strdup(in_dir(dir, "out.safetensors"));
    assert_int_equal(ckpt_convert_plan(p, dst, NULL, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    const ckpt_tensor_info *t;
    float *a = read_output(dst, "n32", &t);
    for (size_t i = 0; i < 64; i++) assert_true(a[i] == (float)i + 0.25f);
    free(a);
    float *b = read_output(dst, "n16", &t);
    /* 100 + i + 2049 in float16: above 2048 float16 steps by 2, ties to even */
    for (size_t i = 0; i < 64; i++) assert_true(b[i] == ckpt__f16_to_f32(ckpt__f32_to_f16((float)(2149 + i))));
    assert_true(b[0] != 2149.0f || b[1] != 2150.0f || b[2] != 2151.0f); /* the rounding shows */
    free(b);
    free((void *)dst);
    free((void *)src);
    scratch_free(dir);
}

/* A load applies an elementwise rule as a conversion does (Gemma's norms
 * read back into a model): into memory of its own, never a view of the
 * file's bytes; the tensor without a rule stays a view. */
static void test_load_applies_the_elementwise_rule(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *names[] = {"norm", "plain"};
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    ckpt_catalog *cat;
    ckpt_plan *p = plan_of_f32_tensors(src, names, 2, "[64]", 64, &cat);
    ckpt_error err;
    ckpt__elementwise less_one = {.add = -1.0, .hold = CKPT_F32};
    assert_int_equal(ckpt__plan_compute(p, 0, &less_one, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_cast(p, "norm", CKPT_F16, &err), CKPT_OK);
    ckpt_load_options lo;
    ckpt_load_options_init(&lo);
    lo.views = CKPT_VIEWS_SHARED;
    assert_int_equal(ckpt_load(p, &lo, &err), CKPT_OK);
    const ckpt_plan_item *norm = ckpt_plan_item_at(p, 0), *plain = ckpt_plan_item_at(p, 1);
    assert_int_equal(norm->dtype, CKPT_F16);
    assert_int_equal(norm->is_view, 0);
    assert_int_equal(plain->is_view, CKPT_VIEWS_SHARED);
    const uint16_t *n = norm->data;
    for (size_t i = 0; i < 64; i++) {
        float v;
        memcpy(&v, (const unsigned char *)plain->data + 4 * i, 4); /* the file's bytes, unaligned */
        assert_true(ckpt__f16_to_f32(n[i]) == (float)i - 1.0f);
        assert_true(v == (float)(100 + i));
    }
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    free((void *)src);
    scratch_free(dir);
}

static void test_generated_tensors_come_first(void **state) {
    (void)state;
    char *dir = scratch_dir();
    const char *names[] = {"w"};
    const char *src = strdup(in_dir(dir, "src.safetensors"));
    write_f32_tensors(src, names, 1, "[4]", 4);
    ckpt_catalog *cat;
    ckpt_plan *p;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(src, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(cat, &p, &err), CKPT_OK);
    float values[3] = {1.0f, 0.5f, 8.0f};
    uint64_t shape[1] = {3};
    assert_int_equal(ckpt__plan_generate(p, "g", CKPT_F32, 1, shape, values, 8, &err), CKPT_E_INVALID_ARGUMENT);
    assert_int_equal(ckpt__plan_generate(p, "g", CKPT_F32, 1, shape, values, sizeof values, &err), CKPT_OK);
    values[0] = 7.0f; /* copied */
    ckpt_load_options lo;
    ckpt_load_options_init(&lo);
    assert_int_equal(ckpt_load(p, &lo, &err), CKPT_E_UNSUPPORTED);
    const char *dst = strdup(in_dir(dir, "out.gguf"));
    assert_int_equal(ckpt_convert_plan(p, dst, NULL, &err), CKPT_OK);
    ckpt_plan_free(p);
    ckpt_catalog_close(cat);
    assert_int_equal(ckpt_catalog_open(dst, &cat, &err), CKPT_OK);
    assert_int_equal(ckpt_catalog_tensor_count(cat), 2);
    assert_string_equal(ckpt_catalog_tensor(cat, 0)->name, "g");
    assert_string_equal(ckpt_catalog_tensor(cat, 1)->name, "w");
    ckpt_catalog_close(cat);
    const ckpt_tensor_info *t;
    float *g = read_output(dst, "g", &t);
    assert_true(g[0] == 1.0f && g[1] == 0.5f && g[2] == 8.0f);
    free(g);
    free((void *)dst);
    free((void *)src);
    scratch_free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_is_byte_identical),
        cmocka_unit_test(test_cancel_leaves_nothing),
        cmocka_unit_test(test_preview_writes_nothing),
        cmocka_unit_test(test_plan_tree_json),
        cmocka_unit_test(test_stack_streams_parts_into_one_tensor),
        cmocka_unit_test(test_stack_refuses_parts_of_other_shapes),
        cmocka_unit_test(test_unstack_streams_each_slice_into_its_own_tensor),
        cmocka_unit_test(test_unstack_refuses_what_it_cannot_slice),
        cmocka_unit_test(test_compute_adds_in_the_precision_held),
        cmocka_unit_test(test_load_applies_the_elementwise_rule),
        cmocka_unit_test(test_generated_tensors_come_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
