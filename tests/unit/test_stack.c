/* test_stack.c — every parser and walker on a thread with a 64 KiB stack
 * (musl's default is 128 KiB; threads of some runtimes have less), on
 * inputs at the deepest nesting it accepts.  Each runs twice, on a shallow
 * input and on the deep one, on a stack painted with a pattern: the deep
 * run must not crash, and must touch no more stack than the shallow one
 * (give or take SLACK): no C stack growth proportional to depth. */
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>

#include "catalog_internal.h"
#include "formats/dcp.h"
#include "formats/gguf.h"
#include "base/json.h"
#include "helpers.h"
#include "io/source.h"
#include "tree_internal.h"

enum { STACK = 64 * 1024, GUARD = 4096, SLACK = 1024, PAINT = 0xA5 };

/* What runs on the small stack, on an input prepared beforehand (a file,
 * or bytes read into memory: readers run on in-memory sources, so that
 * what they use is not hidden under what opening a file takes). */
typedef ckpt_status (*work_fn)(const char *path, ckpt_error *err);

typedef struct run {
    work_fn fn;
    const char *path;
    ckpt_status st;
    ckpt_error err;
} run;

static void *thread_main(void *p) {
    run *r = p;
    r->st = r->fn(r->path, &r->err);
    return NULL;
}

/* An input's bytes, read before the thread starts. */
static struct {
    const char *path;
    char *data;
    size_t n;
} loaded[2];

static void load_input(const char *path) {
    for (int i = 0; i < 2; i++)
        if (!loaded[i].path) {
            loaded[i].path = path;
            loaded[i].data = read_all(path, &loaded[i].n);
            return;
        }
    fail();
}

static void unload_inputs(void) {
    for (int i = 0; i < 2; i++) free(loaded[i].data);
    memset(loaded, 0, sizeof loaded);
}

static const char *input(const char *path, size_t *n) {
    *n = 0;
    for (int i = 0; i < 2; i++)
        if (loaded[i].path == path) return *n = loaded[i].n, loaded[i].data;
    return NULL;
}

/* A format's open on the input as an in-memory source named `path`. */
static ckpt_status open_in_memory(const ckpt__format *format, const char *path, ckpt_error *err) {
    size_t n;
    const char *data = input(path, &n);
    ckpt_catalog *c;
    ckpt__source *src;
    ckpt_status st = ckpt__catalog_new(NULL, &c, err);
    if (st) return st;
    if ((st = ckpt__source_memory(path, data, n, &src, err)) == CKPT_OK) st = format->open(c, src, err);
    ckpt_catalog_close(c);
    return st;
}

/* The bytes of the painted stack the thread wrote (read past ASan: the
 * stack's shadow may still mark the frames that were there). */
__attribute__((no_sanitize_address)) static size_t touched(const volatile unsigned char *stack) {
    size_t i = 0;
    while (i < STACK && stack[i] == PAINT) i++;
    return STACK - i;
}

/* Runs fn(path) on a thread whose 64 KiB stack sits above a guard page. */
static size_t on_small_stack(work_fn fn, const char *path, ckpt_status *st) {
    unsigned char *map = mmap(NULL, GUARD + STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map, GUARD, PROT_NONE), 0);
    unsigned char *stack = map + GUARD;
    memset(stack, PAINT, STACK);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    assert_int_equal(pthread_attr_setstack(&attr, stack, STACK), 0);
    run r = {fn, path, CKPT_OK, {0}};
    pthread_t t;
    assert_int_equal(pthread_create(&t, &attr, thread_main, &r), 0);
    pthread_join(t, NULL);
    pthread_attr_destroy(&attr);
    size_t used = touched(stack);
    munmap(map, GUARD + STACK);
    if (r.st) print_message("%s: %s\n", path, r.err.message);
    *st = r.st;
    return used;
}

/* fn on the shallow and on the deep input: both succeed, in as much stack. */
static void check_flat(work_fn fn, const char *shallow_path, const char *deep_path) {
    load_input(shallow_path);
    load_input(deep_path);
    ckpt_status st;
    /* Each runs once first: a call's first use binds its symbol, on the
     * caller's stack (deep inputs may reach a libc function shallow ones
     * do not). */
    on_small_stack(fn, shallow_path, &st);
    assert_int_equal(st, CKPT_OK);
    on_small_stack(fn, deep_path, &st);
    assert_int_equal(st, CKPT_OK);
    size_t shallow = on_small_stack(fn, shallow_path, &st);
    assert_int_equal(st, CKPT_OK);
    size_t deep = on_small_stack(fn, deep_path, &st);
    assert_int_equal(st, CKPT_OK);
    print_message("%s: %zu bytes of stack; %s: %zu\n", shallow_path, shallow, deep_path, deep);
    unload_inputs();
    assert_true(deep <= shallow + SLACK);
}

typedef struct bytes {
    unsigned char *p;
    size_t n, cap;
} bytes;

static void put(bytes *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_byte(bytes *b, unsigned v) {
    unsigned char c = (unsigned char)v;
    put(b, &c, 1);
}
static void put_text(bytes *b, const char *s) { put(b, s, strlen(s)); }
static void put_le(bytes *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) put_byte(b, (unsigned)(v >> (8 * i)) & 0xff);
}
static void put_repeat(bytes *b, const char *s, int n) {
    for (int i = 0; i < n; i++) put_text(b, s);
}

/* Paths the inputs were written to, freed at the end. */
static char *paths[64];
static size_t path_count;

static const char *keep(const char *path) {
    assert_true(path_count < sizeof paths / sizeof *paths);
    return paths[path_count++] = strdup(path);
}

static const char *save(const char *dir, const char *name, bytes *b) {
    const char *path = in_dir(dir, name);
    write_bytes(path, b->p, b->n);
    free(b->p);
    *b = (bytes){0};
    return keep(path);
}

static ckpt_status open_close(const char *path, ckpt_error *err) {
    ckpt_catalog *c;
    ckpt_status st = ckpt_catalog_open(path, &c, err);
    ckpt_catalog_close(c);
    return st;
}

/* ---- JSON (headers, indexes, object trees) ----------------------------------- */

static ckpt_status parse_json_file(const char *path, ckpt_error *err) {
    size_t n;
    const char *json = input(path, &n);
    char text[1024]; /* parsed in place */
    memcpy(text, json, n);
    ckpt__json_doc doc;
    size_t at;
    const char *why;
    ckpt_status st = ckpt__json_parse(text, n, &doc, &at, &why);
    if (st) snprintf(err->message, sizeof err->message, "byte %zu: %s", at, why);
    ckpt__json_free(&doc);
    return st;
}

typedef struct text_at {
    const char *data;
    size_t len;
} text_at;

static ckpt_status pull_fill(void *user, uint64_t offset, char *buf, size_t cap, size_t *got) {
    const text_at *b = user;
    size_t n = b->len - (size_t)offset < cap ? b->len - (size_t)offset : cap;
    memcpy(buf, b->data + offset, n);
    *got = n;
    return CKPT_OK;
}

/* The same document read through the pull reader into a tree. */
static ckpt_status pull_json_file(const char *path, ckpt_error *err) {
    size_t n;
    text_at b = {input(path, &n), 0};
    b.len = n;
    ckpt__json_pull r;
    ckpt__json_event ev;
    ckpt__json_doc doc = {0};
    ckpt__arena strings = {0};
    ckpt_status st = ckpt__json_pull_init(&r, n, 64, pull_fill, &b);
    if (!st) st = ckpt__json_pull_next(&r, &ev);
    if (!st) st = ckpt__json_pull_doc(&r, &ev, &strings, NULL, NULL, &doc);
    if (st) snprintf(err->message, sizeof err->message, "byte %llu: %s", (unsigned long long)r.error_offset, r.why);
    ckpt__json_pull_free(&r);
    ckpt__json_free(&doc);
    ckpt__arena_free(&strings);
    return st;
}

static const char *nested_json(const char *dir, const char *name, int depth) {
    bytes b = {0};
    put_repeat(&b, "[", depth);
    put_repeat(&b, "]", depth);
    return save(dir, name, &b);
}

static void test_json(void **state) {
    const char *dir = *state;
    check_flat(parse_json_file, nested_json(dir, "shallow.json", 2), nested_json(dir, "deep.json", 128));
    check_flat(pull_json_file, nested_json(dir, "shallow.json", 2), nested_json(dir, "deep.json", 128));
}

/* ---- torch pickles: the object-tree walk ------------------------------------- */

/* A legacy torch.save file (no zip to write): magic, protocol, sys_info,
 * the object pickle `object`, an empty storage key list. */
static const char *legacy_torch(const char *dir, const char *name, const bytes *object) {
    static const unsigned char magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
    bytes b = {0};
    put_text(&b, "\x80\x02\x8a\x0a"), put(&b, magic, 10), put_text(&b, ".");
    put_text(&b, "\x80\x02M"), put_le(&b, 1001, 2), put_text(&b, ".");
    put_text(&b, "\x80\x02}."); /* sys_info */
    put(&b, object->p, object->n);
    put_text(&b, "\x80\x02]."); /* storage keys */
    return save(dir, name, &b);
}

/* Lists `depth` deep around None: None at depth `depth`. */
static const char *nested_lists_pickle(const char *dir, const char *name, int depth) {
    bytes o = {0};
    put_text(&o, "\x80\x02");
    put_repeat(&o, "]", depth);
    put_text(&o, "N");
    put_repeat(&o, "a", depth);
    put_text(&o, ".");
    const char *path = legacy_torch(dir, name, &o);
    free(o.p);
    return path;
}

/* Dicts {"a": {"a": … None}}: None at depth `depth`. */
static const char *nested_dicts_pickle(const char *dir, const char *name, int depth) {
    bytes o = {0};
    put_text(&o, "\x80\x02}");
    put_repeat(&o, "U\x01" "a}", depth - 1);
    put_text(&o, "U\x01" "aN");
    put_repeat(&o, "s", depth);
    put_text(&o, ".");
    const char *path = legacy_torch(dir, name, &o);
    free(o.p);
    return path;
}

static ckpt_status open_torch(const char *path, ckpt_error *err) {
    return open_in_memory(&ckpt__format_torch_legacy, path, err);
}

static void test_torch_tree(void **state) {
    const char *dir = *state;
    /* the walk accepts values 500 deep */
    check_flat(open_torch, nested_lists_pickle(dir, "lists2.pt", 2), nested_lists_pickle(dir, "lists500.pt", 500));
    check_flat(open_torch, nested_dicts_pickle(dir, "dicts2.pt", 2), nested_dicts_pickle(dir, "dicts500.pt", 500));
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(nested_lists_pickle(dir, "lists501.pt", 501), &c, &err), CKPT_E_LIMIT);
    assert_non_null(strstr(err.message, "nested deeper than 500"));
}

/* ---- the plan's object tree (tree.c) ---------------------------------------------- */

static const char *tensor_file(const char *dir) {
    const char *path = in_dir(dir, "w.safetensors");
    write_safetensors(path, "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    return keep(path);
}

/* Lists around a tensor, JSON `depth` deep; or dicts (3 JSON levels each). */
static const char *tree_json(const char *dir, const char *name, int depth, bool dicts) {
    bytes b = {0};
    int levels = dicts ? (depth - 1) / 3 : depth - 1;
    put_repeat(&b, dicts ? "{\"__dict__\": [[1, " : "[", levels); /* int keys: a tree worth keeping */
    put_text(&b, "{\"__tensor__\": \"w\"}");
    put_repeat(&b, dicts ? "]]}" : "]", levels);
    put_byte(&b, 0);
    return save(dir, name, &b);
}

static ckpt_plan *tree_plan; /* over a catalog of one tensor "w", with a rule */

/* The tree read into values, filtered, written back. */
static ckpt_status emit_tree(const char *path, ckpt_error *err) {
    size_t n;
    const char *tree = input(path, &n);
    ckpt__arena arena = {0};
    ckpt__value *value = NULL, *out = NULL;
    ckpt_status st = ckpt__value_from_json(&arena, tree, &value, err, path);
    if (st == CKPT_OK) st = ckpt__tree_for_plan(tree_plan, value, CKPT__TREE_UNLESS_STATE_DICT, &arena, &out, err);
    char *text = st == CKPT_OK && out ? ckpt__value_json_text(out) : NULL;
    if (st == CKPT_OK && (!text || strlen(text) + 1 != n)) st = CKPT_E_INVALID_ARGUMENT; /* the tree as it was */
    free(text);
    ckpt__arena_free(&arena);
    return st;
}

static void test_plan_tree(void **state) {
    const char *dir = *state;
    ckpt_catalog *c;
    ckpt_error err;
    assert_int_equal(ckpt_catalog_open(tensor_file(dir), &c, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_create(c, &tree_plan, &err), CKPT_OK);
    assert_int_equal(ckpt_plan_select(tree_plan, "*", &err), CKPT_OK); /* rules: each entry's tensors are counted */
    check_flat(emit_tree, tree_json(dir, "lists4.json", 4, false), tree_json(dir, "lists128.json", 128, false));
    check_flat(emit_tree, tree_json(dir, "dicts4.json", 4, true), tree_json(dir, "dicts127.json", 127, true));
    ckpt_plan_free(tree_plan);
    ckpt_catalog_close(c);
}

/* ---- Flax msgpack: the parser, the walk, the writer --------------------------------- */

static const char *nested_msgpack(const char *dir, const char *name, int depth, bool maps) {
    bytes b = {0};
    for (int i = 0; i < depth; i++) {
        put_byte(&b, maps ? 0x81 : 0x91);
        if (maps) put_text(&b, "\xa1" "a");
    }
    put_byte(&b, 0xc0);
    return save(dir, name, &b);
}

static ckpt_status open_msgpack(const char *path, ckpt_error *err) {
    return open_in_memory(&ckpt__format_flax_msgpack, path, err);
}

static void test_msgpack(void **state) {
    const char *dir = *state;
    /* maps and arrays nest 256 deep */
    check_flat(open_msgpack, nested_msgpack(dir, "a2.msgpack", 2, false), nested_msgpack(dir, "a256.msgpack", 256, false));
    check_flat(open_msgpack, nested_msgpack(dir, "m2.msgpack", 2, true), nested_msgpack(dir, "m256.msgpack", 256, true));
}

/* A safetensors file whose tensor's name has `parts` dot-separated parts. */
static const char *dotted_tensor(const char *dir, const char *name, int parts) {
    bytes b = {0};
    put_text(&b, "{\"");
    for (int i = 0; i < parts; i++) put_text(&b, i ? ".a" : "a");
    put_text(&b, "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}");
    put_byte(&b, 0);
    const char *path = in_dir(dir, name);
    write_safetensors(path, (const char *)b.p, 1);
    free(b.p);
    return keep(path);
}

static ckpt_status convert_to(const char *path, const char *dst, ckpt_format format, ckpt_error *err) {
    ckpt_catalog *c;
    ckpt_status st = ckpt_catalog_open(path, &c, err);
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    o.overwrite = 1;
    o.format = format;
    if (st == CKPT_OK) st = convert_all(c, dst, &o, NULL, NULL, err);
    ckpt_catalog_close(c);
    return st;
}

static const char *scratch;

static ckpt_status to_msgpack(const char *path, ckpt_error *err) {
    return convert_to(path, in_dir(scratch, "out.msgpack"), CKPT_FORMAT_FLAX_MSGPACK, err);
}

static void test_msgpack_writer(void **state) {
    const char *dir = *state;
    /* names split at dots nest maps as deep as they have parts */
    check_flat(to_msgpack, dotted_tensor(dir, "a2.safetensors", 2), dotted_tensor(dir, "a1000.safetensors", 1000));
}

/* ---- GGUF: arrays of arrays; typed metadata written back ------------------------------- */

/* A GGUF file of one key whose value is arrays nested `depth` deep. */
static const char *nested_gguf(const char *dir, const char *name, int depth) {
    bytes b = {0};
    put_text(&b, "GGUF");
    put_le(&b, 3, 4), put_le(&b, 0, 8), put_le(&b, 1, 8); /* version, tensors, key-values */
    put_le(&b, 1, 8), put_text(&b, "k"), put_le(&b, 9, 4); /* key "k": an array */
    for (int i = 1; i < depth; i++) put_le(&b, 9, 4), put_le(&b, 1, 8); /* of one array */
    put_le(&b, 0, 4), put_le(&b, 0, 8); /* of no u8 */
    return save(dir, name, &b);
}

static ckpt_status write_gguf(const char *metadata_json, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    o.no_sync = 1;
    o.overwrite = 1;
    o.metadata_json = metadata_json;
    ckpt_writer *w = NULL;
    uint64_t shape[1] = {1};
    size_t i;
    float v = 1;
    ckpt_status st = ckpt_writer_create(in_dir(scratch, "out.gguf"), &o, &w, err);
    if (st == CKPT_OK && !(st = ckpt_writer_add_tensor(w, "v", CKPT_F32, 1, shape, &i, err)) &&
        !(st = ckpt_writer_begin(w, err)) && !(st = ckpt_writer_write(w, i, &v, sizeof v, err)))
        st = ckpt_writer_commit(w, err);
    if (w) ckpt_writer_free(w);
    return st;
}

static ckpt_status write_gguf_file(const char *path, ckpt_error *err) {
    size_t n;
    return write_gguf(input(path, &n), err);
}

static ckpt_status open_gguf(const char *path, ckpt_error *err) {
    return open_in_memory(&ckpt__format_gguf, path, err);
}

/* metadata_json whose typed value carries JSON `depth` deep beside it. */
static const char *typed_metadata(const char *dir, const char *name, int depth) {
    bytes b = {0};
    put_text(&b, "{\"general.architecture\": \"llama\", \"k\": {\"gguf_type\": \"u8\", \"value\": 1, \"note\": ");
    put_repeat(&b, "[", depth - 2);
    put_repeat(&b, "]", depth - 2);
    put_text(&b, "}}");
    put_byte(&b, 0);
    return save(dir, name, &b);
}

/* A metadata_json's values typed as gguf-py types them, then encoded as
 * a GGUF file's key-values (what a writer does, without the file). */
static ckpt_status encode_metadata(const char *path, ckpt_error *err) {
    size_t n;
    char **keys, **values, why[256] = "";
    ckpt_status st = ckpt__gguf_metadata_pairs(input(path, &n), &keys, &values, &n, why, sizeof why);
    if (st) n = 0, keys = values = NULL;
    ckpt__buf out = {0};
    for (size_t i = 0; st == CKPT_OK && i < n; i++) st = ckpt__gguf_encode_kv(&out, keys[i], values[i], why, sizeof why);
    for (size_t i = 0; i < n; i++) free(keys[i]), free(values[i]);
    free(keys), free(values);
    free(out.data);
    if (st) snprintf(err->message, sizeof err->message, "%s", why);
    return st;
}

/* metadata_json of a plain list `depth` deep: typed, then encoded. */
static const char *plain_lists(const char *dir, const char *name, int depth) {
    bytes b = {0};
    put_text(&b, "{\"general.architecture\": \"llama\", \"k\": ");
    put_repeat(&b, "[", depth);
    put_text(&b, "1");
    put_repeat(&b, "]", depth);
    put_text(&b, "}");
    put_byte(&b, 0);
    return save(dir, name, &b);
}

static void test_gguf(void **state) {
    const char *dir = *state;
    /* arrays of arrays nest 16 deep at most */
    check_flat(open_gguf, nested_gguf(dir, "a2.gguf", 2), nested_gguf(dir, "a16.gguf", 16));
    check_flat(write_gguf_file, typed_metadata(dir, "m4.json", 4), typed_metadata(dir, "m128.json", 128));
    /* a list of lists typed as arrays of arrays, 16 deep at most */
    check_flat(encode_metadata, plain_lists(dir, "l2.json", 2), plain_lists(dir, "l16.json", 16));
}

/* ---- DCP: .metadata, its trie, and the writer's traversal and object pickles ------------ */

/* A .metadata whose Metadata carries, beside empty tables, lists that put
 * None at `depth`. */
static const char *nested_dcp(const char *dir, const char *name, int depth) {
    bytes b = {0};
    put_text(&b, "\x80\x02" "ctorch.distributed.checkpoint.metadata\nMetadata\n)\x81}(");
    put_text(&b, "U\x13state_dict_metadata}U\x0cstorage_data}U\x05" "extra");
    put_repeat(&b, "]", depth - 1); /* Metadata 0, its state's values 1 */
    put_text(&b, "N");
    put_repeat(&b, "a", depth - 1);
    put_text(&b, "ub.");
    return save(dir, name, &b);
}

static ckpt_status open_dcp_metadata(const char *path, ckpt_error *err) {
    return open_in_memory(&ckpt__format_dcp, path, err);
}

/* {"m": [[… [tensor] …]], "o": [[… [1] …]]}: a tensor under `depth`
 * lists (DCP paths of as many parts) beside an object as deep. */
static const char *deep_flax(const char *dir, const char *name, int depth) {
    bytes b = {0};
    put_byte(&b, 0x82);
    put_text(&b, "\xa1m");
    put_repeat(&b, "\x91", depth);
    bytes payload = {0}; /* (shape, dtype, data): one uint8 */
    put_text(&payload, "\x93\x91\x01\xa5uint8\xc4\x01\x07");
    put_byte(&b, 0xc7), put_byte(&b, (unsigned)payload.n), put_byte(&b, 1), put(&b, payload.p, payload.n);
    free(payload.p);
    put_text(&b, "\xa1o");
    put_repeat(&b, "\x91", depth);
    put_byte(&b, 1);
    return save(dir, name, &b);
}

static ckpt_status to_dcp(const char *path, ckpt_error *err) {
    char dst[1024];
    snprintf(dst, sizeof dst, "%s.dcp", path);
    return convert_to(path, dst, CKPT_FORMAT_DCP, err);
}

static ckpt_status open_dcp(const char *path, ckpt_error *err) {
    char dst[1024];
    snprintf(dst, sizeof dst, "%s.dcp", path);
    return open_close(dst, err);
}

static void test_dcp(void **state) {
    const char *dir = *state;
    /* .metadata nests 64 deep at most */
    check_flat(open_dcp_metadata, nested_dcp(dir, "n2.metadata", 2), nested_dcp(dir, "n64.metadata", 64));
    /* The writer's traversal and object pickles, then the reader's trie:
     * lists as deep as an object tree's JSON (128 levels) allows. */
    const char *shallow = deep_flax(dir, "f2.msgpack", 2), *deep = deep_flax(dir, "f120.msgpack", 120);
    check_flat(to_dcp, shallow, deep);
    check_flat(open_dcp, shallow, deep);
}

/* ---- the torch writer's pickle of the object tree -------------------------------------- */

static ckpt_status to_torch(const char *path, ckpt_error *err) {
    char dst[1024];
    snprintf(dst, sizeof dst, "%s.out.pt", path);
    return convert_to(path, dst, CKPT_FORMAT_TORCH, err);
}

static void test_torch_writer(void **state) {
    const char *dir = *state;
    /* lists, and dicts (three JSON levels each), as deep as an object
     * tree's JSON (128 levels) allows */
    check_flat(to_torch, nested_lists_pickle(dir, "w2.pt", 2), nested_lists_pickle(dir, "w120.pt", 120));
    check_flat(to_torch, nested_dicts_pickle(dir, "wd2.pt", 2), nested_dicts_pickle(dir, "wd40.pt", 40));
}

static int setup(void **state) {
    *state = scratch_dir();
    scratch = *state;
    return 0;
}

static int teardown(void **state) {
    while (path_count) free(paths[--path_count]);
    scratch_free(*state);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json),    cmocka_unit_test(test_torch_tree),     cmocka_unit_test(test_plan_tree),
        cmocka_unit_test(test_msgpack), cmocka_unit_test(test_msgpack_writer), cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_dcp),     cmocka_unit_test(test_torch_writer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
