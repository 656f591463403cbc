/* ckpt_nif.c — the Erlang NIF of the Elixir binding (Ckpt.NIF): libckpt's
 * public API translated to terms.  Formats, validation, plans and I/O stay
 * in libckpt; this file only converts arguments and results and owns
 * objects through resources:
 *
 *   catalog  ckpt_catalog, closed by the garbage collector when no term
 *            refers to it — zero-copy binaries over its mapping included
 *            (enif_make_resource_binary keeps the resource alive);
 *   writer   ckpt_writer, under a mutex (terms are shared between
 *            processes); freed (temporaries removed) by commit, abort or GC;
 *   buffer   a buffer libckpt allocated for a loaded tensor, released with
 *            ckpt_free when its last binary is collected.
 *
 * Everything that reads or writes files runs on dirty I/O schedulers.
 * Errors come back as {:error, {status, code, path, tensor, offset, errno,
 * message}} (Ckpt.Error in Elixir); malformed arguments raise badarg. */
#include <erl_nif.h>
#include <stdio.h>
#include <string.h>

#include "ckpt.h"

static ErlNifResourceType *CATALOG_RT, *WRITER_RT, *BUFFER_RT;

typedef struct {
    ckpt_catalog *catalog;
} catalog_res;

typedef struct {
    ckpt_writer *writer;
    ErlNifMutex *lock;
} writer_res;

typedef struct {
    void *data;
} buffer_res;

static ERL_NIF_TERM ATOM_OK, ATOM_ERROR, ATOM_NIL, ATOM_TRUE, ATOM_FALSE;

static void catalog_dtor(ErlNifEnv *env, void *obj) {
    (void)env;
    ckpt_catalog_close(((catalog_res *)obj)->catalog);
}

static void writer_dtor(ErlNifEnv *env, void *obj) {
    (void)env;
    writer_res *w = obj;
    ckpt_writer_free(w->writer);
    if (w->lock) enif_mutex_destroy(w->lock);
}

static void buffer_dtor(ErlNifEnv *env, void *obj) {
    (void)env;
    ckpt_free(((buffer_res *)obj)->data);
}

static int load(ErlNifEnv *env, void **priv, ERL_NIF_TERM info) {
    (void)priv, (void)info;
    ErlNifResourceFlags flags = ERL_NIF_RT_CREATE | ERL_NIF_RT_TAKEOVER;
    CATALOG_RT = enif_open_resource_type(env, NULL, "ckpt_catalog", catalog_dtor, flags, NULL);
    WRITER_RT = enif_open_resource_type(env, NULL, "ckpt_writer", writer_dtor, flags, NULL);
    BUFFER_RT = enif_open_resource_type(env, NULL, "ckpt_buffer", buffer_dtor, flags, NULL);
    if (!CATALOG_RT || !WRITER_RT || !BUFFER_RT) return 1;
    ATOM_OK = enif_make_atom(env, "ok");
    ATOM_ERROR = enif_make_atom(env, "error");
    ATOM_NIL = enif_make_atom(env, "nil");
    ATOM_TRUE = enif_make_atom(env, "true");
    ATOM_FALSE = enif_make_atom(env, "false");
    return 0;
}

static int upgrade(ErlNifEnv *env, void **priv, void **old_priv, ERL_NIF_TERM info) {
    (void)old_priv;
    return load(env, priv, info);
}

/* ---- terms ------------------------------------------------------------ */

static ERL_NIF_TERM ok(ErlNifEnv *env, ERL_NIF_TERM t) { return enif_make_tuple2(env, ATOM_OK, t); }

static ERL_NIF_TERM string_or_nil(ErlNifEnv *env, const char *s) {
    if (!s || !*s) return ATOM_NIL;
    ERL_NIF_TERM t;
    size_t n = strlen(s);
    unsigned char *p = enif_make_new_binary(env, n, &t);
    memcpy(p, s, n);
    return t;
}

static ERL_NIF_TERM string(ErlNifEnv *env, const char *s) {
    ERL_NIF_TERM t;
    size_t n = s ? strlen(s) : 0;
    unsigned char *p = enif_make_new_binary(env, n, &t);
    if (n) memcpy(p, s, n);
    return t;
}

/* :corrupt for CKPT_E_CORRUPT, :data_hole for CKPT_D_DATA_HOLE: the names
 * of the library's table, read at run time. */
static ERL_NIF_TERM code_atom(ErlNifEnv *env, const char *name) {
    if (strncmp(name, "CKPT_E_", 7) == 0 || strncmp(name, "CKPT_D_", 7) == 0) name += 7;
    char buf[64];
    size_t i = 0;
    for (; name[i] && i < sizeof buf - 1; i++) buf[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    buf[i] = 0;
    return enif_make_atom(env, buf);
}

static ERL_NIF_TERM error_term(ErlNifEnv *env, ckpt_status st, const ckpt_error *e) {
    ERL_NIF_TERM items[9] = {
        code_atom(env, ckpt_status_name(st)),
        enif_make_int(env, (int)st),
        e->detail ? code_atom(env, ckpt_detail_name(e->detail)) : ATOM_NIL,
        enif_make_int(env, (int)e->detail),
        string_or_nil(env, e->path),
        string_or_nil(env, e->tensor),
        e->offset >= 0 ? enif_make_int64(env, e->offset) : ATOM_NIL,
        enif_make_int(env, e->sys_errno),
        string(env, e->message[0] ? e->message : ckpt_status_message(st)),
    };
    return enif_make_tuple2(env, ATOM_ERROR, enif_make_tuple_from_array(env, items, 9));
}

/* An error the binding itself reports (e.g. no such tensor). */
static ERL_NIF_TERM own_error(ErlNifEnv *env, ckpt_status st, const char *path, const char *tensor, const char *fmt,
                              const char *arg) {
    ckpt_error e;
    ckpt_error_clear(&e);
    e.status = st;
    if (path) snprintf(e.path, sizeof e.path, "%s", path);
    if (tensor) snprintf(e.tensor, sizeof e.tensor, "%s", tensor);
    snprintf(e.message, sizeof e.message, fmt, arg);
    return error_term(env, st, &e);
}

/* A binary term as a NUL-terminated copy (enif_free it); 0 when not a
 * binary or when it holds a NUL byte. */
static int cstring(ErlNifEnv *env, ERL_NIF_TERM t, char **out) {
    ErlNifBinary b;
    if (!enif_inspect_binary(env, t, &b) || memchr(b.data, 0, b.size)) return 0;
    char *s = enif_alloc(b.size + 1);
    if (!s) return 0;
    memcpy(s, b.data, b.size);
    s[b.size] = 0;
    *out = s;
    return 1;
}

/* A binary or nil (→ NULL, "every tensor"). */
static int cstring_or_nil(ErlNifEnv *env, ERL_NIF_TERM t, char **out) {
    if (enif_is_identical(t, ATOM_NIL)) {
        *out = NULL;
        return 1;
    }
    return cstring(env, t, out);
}

static int get_bool(ERL_NIF_TERM t, int *out) {
    if (enif_is_identical(t, ATOM_TRUE)) *out = 1;
    else if (enif_is_identical(t, ATOM_FALSE)) *out = 0;
    else return 0;
    return 1;
}

static ckpt_dtype get_dtype(ErlNifEnv *env, ERL_NIF_TERM t) {
    char *name;
    if (!cstring(env, t, &name)) return CKPT_DTYPE_INVALID;
    ckpt_dtype d = ckpt_dtype_from_name(name);
    enif_free(name);
    return d;
}

static ERL_NIF_TERM shape_tuple(ErlNifEnv *env, uint32_t ndim, const uint64_t *shape) {
    ERL_NIF_TERM dims[CKPT_MAX_DIMS];
    for (uint32_t i = 0; i < ndim && i < CKPT_MAX_DIMS; i++) dims[i] = enif_make_uint64(env, shape[i]);
    return enif_make_tuple_from_array(env, dims, ndim < CKPT_MAX_DIMS ? ndim : CKPT_MAX_DIMS);
}

static int get_catalog(ErlNifEnv *env, ERL_NIF_TERM t, catalog_res **out) {
    return enif_get_resource(env, t, CATALOG_RT, (void **)out);
}

/* ---- catalogs --------------------------------------------------------- */

static ERL_NIF_TERM nif_open(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    char *path;
    ckpt_catalog_options o;
    ckpt_catalog_options_init(&o);
    int io;
    if (!enif_get_int(env, argv[1], &io) || !cstring(env, argv[0], &path)) return enif_make_badarg(env);
    o.io = (ckpt_io_mode)io; /* how every read of it goes */
    ckpt_error e;
    ckpt_catalog *c;
    /* on the dirty scheduler itself: libckpt's parsers keep nesting on the
     * heap, not on the scheduler's (small) stack */
    ckpt_status st = ckpt_catalog_open_ex(path, &o, &c, &e);
    enif_free(path);
    if (st) return error_term(env, st, &e);
    catalog_res *r = enif_alloc_resource(CATALOG_RT, sizeof *r);
    if (!r) {
        ckpt_catalog_close(c);
        return own_error(env, CKPT_E_NO_MEMORY, NULL, NULL, "%s", "out of memory");
    }
    r->catalog = c;
    ERL_NIF_TERM term = enif_make_resource(env, r);
    enif_release_resource(r);
    return ok(env, term);
}

static const char *format_name(ckpt_format f) {
    switch (f) {
    case CKPT_FORMAT_SAFETENSORS: return "safetensors";
    case CKPT_FORMAT_SAFETENSORS_SHARDED: return "safetensors_sharded";
    case CKPT_FORMAT_TORCH: return "torch";
    case CKPT_FORMAT_TORCH_SHARDED: return "torch_sharded";
    case CKPT_FORMAT_GGUF: return "gguf";
    case CKPT_FORMAT_NPY: return "npy";
    case CKPT_FORMAT_NPZ: return "npz";
    case CKPT_FORMAT_FLAX_MSGPACK: return "flax_msgpack";
    case CKPT_FORMAT_DCP: return "dcp";
    }
    return "unknown";
}


/* ---- the object tree as terms ------------------------------------------ */

/*
 * The catalog's object tree built from libckpt's values (ckpt_value_*), in
 * the shape Ckpt.JSON.decode gives for its JSON (objects {:obj, [{key,
 * value}]}, {"__dict__": [[k, v], …]}, {"__tensor__": name} …), so that
 * Ckpt.Tree reads it as it reads a recorded structure, without the text.
 * Finished terms and the containers being filled wait on heap stacks,
 * never on the C stack, however deep the tree.
 */
typedef struct tree_frame {
    const ckpt_value *v;
    size_t next, count, base; /* base: its first term on the term stack */
    int in_state;
} tree_frame;

typedef struct tree_walk {
    ErlNifEnv *env;
    ERL_NIF_TERM *terms;
    size_t len, cap;
    tree_frame *frames;
    size_t depth, frame_cap;
    int failed;
} tree_walk;

/* Grows *at (of *cap items of `size` bytes) to hold one more than `len`. */
static int grow(void **at, size_t *cap, size_t len, size_t size) {
    if (len < *cap) return 1;
    size_t n = *cap ? 2 * *cap : 32;
    void *p = enif_realloc(*at, n * size);
    if (!p) return 0;
    *at = p, *cap = n;
    return 1;
}

static void push_term(tree_walk *w, ERL_NIF_TERM t) {
    if (!grow((void **)&w->terms, &w->cap, w->len, sizeof *w->terms)) w->failed = 1;
    else w->terms[w->len++] = t;
}

/* {:obj, [{tag, value}]}. */
static ERL_NIF_TERM tagged(ErlNifEnv *env, const char *tag, ERL_NIF_TERM value) {
    ERL_NIF_TERM pair = enif_make_tuple2(env, string(env, tag), value);
    return enif_make_tuple2(env, enif_make_atom(env, "obj"), enif_make_list1(env, pair));
}

static ERL_NIF_TERM text_term(ErlNifEnv *env, const ckpt_value *v) {
    size_t n;
    const char *s = ckpt_value_text(v, &n);
    ERL_NIF_TERM t;
    unsigned char *p = enif_make_new_binary(env, n, &t);
    if (n) memcpy(p, s, n);
    return t;
}

static ERL_NIF_TERM hex_term(ErlNifEnv *env, const ckpt_value *v) {
    static const char digits[] = "0123456789abcdef";
    size_t n;
    const unsigned char *s = (const unsigned char *)ckpt_value_text(v, &n);
    ERL_NIF_TERM t;
    unsigned char *p = enif_make_new_binary(env, 2 * n, &t);
    for (size_t i = 0; i < n; i++)
        p[2 * i] = (unsigned char)digits[s[i] >> 4], p[2 * i + 1] = (unsigned char)digits[s[i] & 15];
    return t;
}

/* A value with no items; a NUMBER (JSON text kept as written) as
 * {:number, text}, which Ckpt.Tree reads as the number. */
static ERL_NIF_TERM leaf_term(ErlNifEnv *env, const ckpt_value *v) {
    switch (ckpt_value_kind_of(v)) {
    case CKPT_VALUE_BOOL: return ckpt_value_bool(v) ? ATOM_TRUE : ATOM_FALSE;
    case CKPT_VALUE_INT: return enif_make_int64(env, ckpt_value_int(v));
    case CKPT_VALUE_FLOAT: {
        double f = ckpt_value_float(v);
        if (f == f && f - f == 0) return enif_make_double(env, f);
        return tagged(env, "__float__", string(env, f != f ? "nan" : f > 0 ? "inf" : "-inf"));
    }
    case CKPT_VALUE_NUMBER: return enif_make_tuple2(env, enif_make_atom(env, "number"), text_term(env, v));
    case CKPT_VALUE_STRING: return text_term(env, v);
    case CKPT_VALUE_BYTES: return tagged(env, "__bytes__", hex_term(env, v));
    case CKPT_VALUE_BIGINT: return tagged(env, "__int_le__", hex_term(env, v));
    case CKPT_VALUE_TENSOR: return tagged(env, "__tensor__", text_term(env, v));
    case CKPT_VALUE_GLOBAL: return tagged(env, "__global__", text_term(env, v));
    default: return ATOM_NIL;
    }
}

/* v's term pushed whole (a leaf), or its frame pushed (a container). */
static void open_value(tree_walk *w, const ckpt_value *v) {
    if (ckpt_value_kind_of(v) < CKPT_VALUE_LIST)
        push_term(w, leaf_term(w->env, v));
    else if (!grow((void **)&w->frames, &w->frame_cap, w->depth, sizeof *w->frames))
        w->failed = 1;
    else
        w->frames[w->depth++] = (tree_frame){.v = v, .count = ckpt_value_len(v), .base = w->len};
}

/* The list of terms[from…to). */
static ERL_NIF_TERM list_of(tree_walk *w, size_t from, size_t to) {
    return enif_make_list_from_array(w->env, w->terms + from, (unsigned)(to - from));
}

/* A finished container's term, from its terms on the stack (for a DICT or
 * an OBJECT: key, value, key, value…; then its state). */
static ERL_NIF_TERM close_value(tree_walk *w, const tree_frame *f) {
    ErlNifEnv *env = w->env;
    ckpt_value_kind kind = ckpt_value_kind_of(f->v);
    size_t end = w->len - (ckpt_value_state(f->v) ? 1 : 0);
    if (kind == CKPT_VALUE_LIST) return list_of(w, f->base, end);
    ERL_NIF_TERM fields[4];
    unsigned n = 0;
    const char *cls = ckpt_value_class(f->v);
    if (kind == CKPT_VALUE_DICT || kind == CKPT_VALUE_OBJECT) {
        for (size_t i = f->base; i < end; i += 2) {
            w->terms[f->base + (i - f->base) / 2] = kind == CKPT_VALUE_DICT
                                                         ? enif_make_list2(env, w->terms[i], w->terms[i + 1])
                                                         : enif_make_tuple2(env, w->terms[i], w->terms[i + 1]);
        }
        ERL_NIF_TERM pairs = list_of(w, f->base, f->base + (end - f->base) / 2);
        if (kind == CKPT_VALUE_OBJECT) return enif_make_tuple2(env, enif_make_atom(env, "obj"), pairs);
        if (cls) fields[n++] = enif_make_tuple2(env, string(env, "__class__"), string(env, cls));
        fields[n++] = enif_make_tuple2(env, string(env, "__dict__"), pairs);
        if (end < w->len) fields[n++] = enif_make_tuple2(env, string(env, "__state__"), w->terms[end]);
    } else {
        ERL_NIF_TERM items = list_of(w, f->base, end);
        if (kind == CKPT_VALUE_CALL) {
            fields[n++] = enif_make_tuple2(env, string(env, "__call__"), string(env, cls));
            fields[n++] = enif_make_tuple2(env, string(env, "args"), items);
            if (end < w->len) fields[n++] = enif_make_tuple2(env, string(env, "state"), w->terms[end]);
        } else {
            if (cls) fields[n++] = enif_make_tuple2(env, string(env, "__class__"), string(env, cls));
            fields[n++] = enif_make_tuple2(env, string(env, kind == CKPT_VALUE_SET ? "__set__" : "__tuple__"), items);
        }
    }
    return enif_make_tuple2(env, enif_make_atom(env, "obj"), enif_make_list_from_array(env, fields, n));
}

/* One step of the top frame: its next item (a pair's key pushed first),
 * its state, or its end. */
static void step_value(tree_walk *w) {
    tree_frame *f = &w->frames[w->depth - 1];
    const ckpt_value *v = f->v;
    ckpt_value_kind kind = ckpt_value_kind_of(v);
    if (f->next < f->count) {
        size_t i = f->next++;
        if (kind == CKPT_VALUE_DICT || kind == CKPT_VALUE_OBJECT) {
            push_term(w, leaf_term(w->env, ckpt_value_key(v, i)));
            open_value(w, ckpt_value_at(v, i));
        } else {
            open_value(w, ckpt_value_item(v, i));
        }
        return;
    }
    if (!f->in_state && ckpt_value_state(v)) {
        f->in_state = 1;
        open_value(w, ckpt_value_state(v));
        return;
    }
    ERL_NIF_TERM t = close_value(w, f);
    w->len = f->base;
    w->depth--;
    push_term(w, t);
}

/* The tree as terms in *out, or nil when there is none; 0 out of memory. */
static int tree_term(ErlNifEnv *env, const ckpt_value *tree, ERL_NIF_TERM *out) {
    *out = ATOM_NIL;
    if (!tree) return 1;
    tree_walk w = {.env = env};
    open_value(&w, tree);
    while (w.depth && !w.failed) step_value(&w);
    if (!w.failed) *out = w.terms[0];
    enif_free(w.terms);
    enif_free(w.frames);
    return !w.failed;
}

/* info(catalog) → {format, [{path, size}], index_path | nil, tree | nil, count}: the tree as
 * tree_term gives it. */
static ERL_NIF_TERM nif_info(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    ERL_NIF_TERM tree;
    if (!get_catalog(env, argv[0], &r)) return enif_make_badarg(env);
    if (!tree_term(env, ckpt_catalog_tree(r->catalog), &tree))
        return enif_raise_exception(env, enif_make_atom(env, "enomem"));
    size_t n = ckpt_catalog_file_count(r->catalog);
    ERL_NIF_TERM files = enif_make_list(env, 0);
    for (size_t i = n; i-- > 0;)
        files = enif_make_list_cell(env,
                                    enif_make_tuple2(env, string(env, ckpt_catalog_file_path(r->catalog, i)),
                                                     enif_make_uint64(env, ckpt_catalog_file_size(r->catalog, i))),
                                    files);
    return enif_make_tuple5(env, enif_make_atom(env, format_name(ckpt_catalog_format(r->catalog))), files,
                            string_or_nil(env, ckpt_catalog_index_path(r->catalog)),
                            tree,
                            enif_make_uint64(env, ckpt_catalog_tensor_count(r->catalog)));
}

static int viewable(const ckpt_tensor_info *t) { return !t->strides && !t->big_endian && !t->compressed; }

/* tensors(catalog) → [{name, dtype, shape, nbytes, file, offset, viewable}] */
static ERL_NIF_TERM nif_tensors(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    if (!get_catalog(env, argv[0], &r)) return enif_make_badarg(env);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (size_t i = ckpt_catalog_tensor_count(r->catalog); i-- > 0;) {
        const ckpt_tensor_info *t = ckpt_catalog_tensor(r->catalog, i);
        ERL_NIF_TERM items[7] = {
            string(env, t->name),
            string(env, ckpt_dtype_name(t->dtype)),
            shape_tuple(env, t->ndim, t->shape),
            enif_make_uint64(env, t->nbytes),
            enif_make_uint(env, t->file),
            enif_make_uint64(env, t->offset),
            viewable(t) ? ATOM_TRUE : ATOM_FALSE,
        };
        list = enif_make_list_cell(env, enif_make_tuple_from_array(env, items, 7), list);
    }
    return list;
}

/* metadata(catalog) → [{key, value}] in file order */
static ERL_NIF_TERM nif_metadata(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    if (!get_catalog(env, argv[0], &r)) return enif_make_badarg(env);
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (size_t i = ckpt_catalog_metadata_count(r->catalog); i-- > 0;) {
        const char *k, *v;
        if (ckpt_catalog_metadata_entry(r->catalog, i, &k, &v) == CKPT_OK)
            list = enif_make_list_cell(env, enif_make_tuple2(env, string(env, k), string(env, v)), list);
    }
    return list;
}

/* A binary of `nbytes` filled by ckpt_catalog_read. */
static ERL_NIF_TERM read_copy(ErlNifEnv *env, catalog_res *r, const ckpt_tensor_info *t) {
    ErlNifBinary b;
    if (!enif_alloc_binary((size_t)t->nbytes, &b))
        return own_error(env, CKPT_E_NO_MEMORY, NULL, t->name, "%s", "out of memory for the tensor's binary");
    ckpt_error e;
    ckpt_status st = ckpt_catalog_read(r->catalog, t, 0, b.data, t->nbytes, &e);
    if (st) {
        enif_release_binary(&b);
        return error_term(env, st, &e);
    }
    return ok(env, enif_make_binary(env, &b));
}

/* read(catalog, name, copy) → {:ok, binary}: a resource binary over the
 * file's read-only mapping when the bytes need no conversion (and copy is
 * false), else a new binary filled by pread. */
static ERL_NIF_TERM nif_read(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    char *name;
    int copy;
    if (!get_catalog(env, argv[0], &r) || !get_bool(argv[2], &copy)) return enif_make_badarg(env);
    if (!cstring(env, argv[1], &name)) return enif_make_badarg(env);
    const ckpt_tensor_info *t = ckpt_catalog_find(r->catalog, name);
    if (!t) {
        const char *where = ckpt_catalog_index_path(r->catalog);
        where = where ? where : ckpt_catalog_file_path(r->catalog, 0);
        char msg[1600];
        snprintf(msg, sizeof msg, "%s: no tensor '%.500s'", where, name);
        ERL_NIF_TERM err = own_error(env, CKPT_E_NOT_FOUND, where, name, "%s", msg);
        enif_free(name);
        return err;
    }
    enif_free(name);
    if (copy || !viewable(t)) return read_copy(env, r, t);
    const void *data;
    ckpt_error e;
    ckpt_status st = ckpt_catalog_view(r->catalog, t, &data, &e);
    if (st) return error_term(env, st, &e);
    return ok(env, enif_make_resource_binary(env, r, data, (size_t)t->nbytes));
}

/* ---- plans ------------------------------------------------------------ */

static int atom_is(ErlNifEnv *env, ERL_NIF_TERM t, const char *name) {
    char buf[32];
    return enif_get_atom(env, t, buf, sizeof buf, ERL_NIF_LATIN1) > 0 && strcmp(buf, name) == 0;
}

/* Applies one rule tuple; *bad is set for a malformed one. */
static ckpt_status apply_rule(ErlNifEnv *env, ckpt_plan *plan, ERL_NIF_TERM rule, int *bad, ckpt_error *e) {
    const ERL_NIF_TERM *f;
    int n;
    char *a = NULL, *b = NULL, *c = NULL;
    ckpt_status st = CKPT_OK;
    *bad = 1;
    if (!enif_get_tuple(env, rule, &n, &f) || n < 2 || !cstring_or_nil(env, f[1], &a)) return CKPT_OK;
    if (atom_is(env, f[0], "select") && n == 2) {
        *bad = 0, st = ckpt_plan_select(plan, a, e);
    } else if (atom_is(env, f[0], "exclude") && n == 2) {
        *bad = 0, st = ckpt_plan_exclude(plan, a, e);
    } else if (atom_is(env, f[0], "transpose") && n == 2) {
        *bad = 0, st = ckpt_plan_transpose(plan, a, e);
    } else if (atom_is(env, f[0], "rename") && n == 3 && a && cstring(env, f[2], &b)) {
        *bad = 0, st = ckpt_plan_rename(plan, a, b, e);
    } else if (atom_is(env, f[0], "cast") && n == 3) {
        ckpt_dtype d = get_dtype(env, f[2]);
        if (d != CKPT_DTYPE_INVALID) *bad = 0, st = ckpt_plan_cast(plan, a, d, e);
    } else if (atom_is(env, f[0], "layout") && n == 4 && cstring(env, f[2], &b) && cstring(env, f[3], &c)) {
        *bad = 0, st = ckpt_plan_layout(plan, a, b, c, e);
    } else if ((atom_is(env, f[0], "slice") || atom_is(env, f[0], "split")) && n == 5) {
        int dim;
        ErlNifUInt64 x, y;
        if (enif_get_int(env, f[2], &dim) && enif_get_uint64(env, f[3], &x) && enif_get_uint64(env, f[4], &y)) {
            *bad = 0;
            st = atom_is(env, f[0], "slice") ? ckpt_plan_slice(plan, a, dim, x, y, e) : ckpt_plan_split(plan, a, dim, x, y, e);
        }
    } else if (atom_is(env, f[0], "permute") && n == 3) {
        unsigned len;
        uint32_t perm[CKPT_MAX_DIMS];
        ERL_NIF_TERM list = f[2], head;
        if (enif_get_list_length(env, list, &len) && len <= CKPT_MAX_DIMS) {
            unsigned i = 0;
            while (enif_get_list_cell(env, list, &head, &list) && enif_get_uint(env, head, &perm[i])) i++;
            if (i == len) *bad = 0, st = ckpt_plan_permute(plan, a, len, perm, e);
        }
    }
    if (a) enif_free(a);
    if (b) enif_free(b);
    if (c) enif_free(c);
    return st;
}

/* A plan over the catalog with the rules applied; returns a term (badarg or
 * an error) on failure, 0 on success. */
static ERL_NIF_TERM make_plan(ErlNifEnv *env, catalog_res *r, ERL_NIF_TERM rules, ckpt_plan **out) {
    ckpt_error e;
    ckpt_status st = ckpt_plan_create(r->catalog, out, &e);
    if (st) return error_term(env, st, &e);
    ERL_NIF_TERM head;
    while (enif_get_list_cell(env, rules, &head, &rules)) {
        int bad;
        st = apply_rule(env, *out, head, &bad, &e);
        if (bad || st) {
            ckpt_plan_free(*out);
            *out = NULL;
            return bad ? enif_make_badarg(env) : error_term(env, st, &e);
        }
    }
    return 0;
}

/* plan(catalog, rules) → [{name, source, dtype, shape, nbytes, transform}], reading nothing */
static ERL_NIF_TERM nif_plan(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    ckpt_plan *plan;
    if (!get_catalog(env, argv[0], &r) || !enif_is_list(env, argv[1])) return enif_make_badarg(env);
    ERL_NIF_TERM fail = make_plan(env, r, argv[1], &plan);
    if (fail) return fail;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (size_t i = ckpt_plan_count(plan); i-- > 0;) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        ERL_NIF_TERM items[6] = {string(env, it->name), string(env, it->source->name),
                                 string(env, ckpt_dtype_name(it->dtype)), shape_tuple(env, it->ndim, it->shape),
                                 enif_make_uint64(env, it->nbytes), it->transform ? ATOM_TRUE : ATOM_FALSE};
        list = enif_make_list_cell(env, enif_make_tuple_from_array(env, items, 6), list);
    }
    ckpt_plan_free(plan);
    return ok(env, list);
}

/* load(catalog, rules, {threads, copy, io}) → {:ok, [{name, dtype, shape, binary}]}.
 * Items that need no conversion become zero-copy binaries over the file's
 * mapping (unless copy); the others are read into new binaries. */
static ERL_NIF_TERM nif_load(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    const ERL_NIF_TERM *o;
    int arity, copy, check_crc;
    unsigned threads;
    if (!get_catalog(env, argv[0], &r) || !enif_is_list(env, argv[1]) || !enif_get_tuple(env, argv[2], &arity, &o) ||
        arity != 3 || !enif_get_uint(env, o[0], &threads) || !get_bool(o[1], &copy) || !get_bool(o[2], &check_crc))
        return enif_make_badarg(env);
    ckpt_plan *plan;
    ERL_NIF_TERM fail = make_plan(env, r, argv[1], &plan);
    if (fail) return fail;
    size_t n = ckpt_plan_count(plan);
    ErlNifBinary *bins = enif_alloc((n ? n : 1) * sizeof *bins);
    unsigned char *owned = enif_alloc(n ? n : 1);
    ckpt_error e;
    ckpt_status st = CKPT_OK;
    ERL_NIF_TERM result = 0;
    if (!bins || !owned) {
        result = own_error(env, CKPT_E_NO_MEMORY, NULL, NULL, "%s", "out of memory");
        goto done;
    }
    memset(owned, 0, n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        if (!copy && !it->transform && it->nbytes) continue; /* a view, or a library buffer */
        if (!enif_alloc_binary((size_t)it->nbytes, &bins[i])) {
            result = own_error(env, CKPT_E_NO_MEMORY, NULL, it->name, "%s", "out of memory for the tensor's binary");
            goto done;
        }
        owned[i] = 1;
        st = ckpt_plan_set_buffer(plan, i, bins[i].data, it->nbytes, &e);
        if (st) goto done;
    }
    ckpt_load_options opts;
    ckpt_load_options_init(&opts);
    opts.threads = threads;
    opts.views = !copy;
    opts.skip_crc_check = !check_crc;
    st = ckpt_load(plan, &opts, &e);
    if (st) goto done;
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (size_t i = n; i-- > 0;) {
        const ckpt_plan_item *it = ckpt_plan_item_at(plan, i);
        ERL_NIF_TERM data;
        if (owned[i]) {
            data = enif_make_binary(env, &bins[i]);
            owned[i] = 0;
        } else if (it->is_view) {
            data = enif_make_resource_binary(env, r, it->data, (size_t)it->nbytes);
        } else {
            void *p = ckpt_plan_take(plan, i);
            buffer_res *b = p ? enif_alloc_resource(BUFFER_RT, sizeof *b) : NULL;
            if (!b) {
                ckpt_free(p);
                result = own_error(env, CKPT_E_NO_MEMORY, NULL, it->name, "%s", "out of memory");
                goto done;
            }
            b->data = p;
            data = enif_make_resource_binary(env, b, p, (size_t)it->nbytes);
            enif_release_resource(b);
        }
        ERL_NIF_TERM items[4] = {string(env, it->name), string(env, ckpt_dtype_name(it->dtype)),
                                 shape_tuple(env, it->ndim, it->shape), data};
        list = enif_make_list_cell(env, enif_make_tuple_from_array(env, items, 4), list);
    }
    result = ok(env, list);
done:
    if (!result) result = error_term(env, st, &e);
    for (size_t i = 0; owned && i < n; i++)
        if (owned[i]) enif_release_binary(&bins[i]);
    enif_free(bins);
    enif_free(owned);
    ckpt_plan_free(plan);
    return result;
}

/* ---- writing ---------------------------------------------------------- */

/* {max_shard_size, prefix, overwrite, no_sync, checksums, format,
 * check_crc}: format a name ("torch", "flax-msgpack") or nil, the path's;
 * check_crc false skips a conversion's ZIP CRC-32 checks. */
static int get_writer_options(ErlNifEnv *env, ERL_NIF_TERM t, ckpt_writer_options *o, char **prefix) {
    const ERL_NIF_TERM *f;
    int n;
    ErlNifUInt64 max;
    char *format = NULL;
    *prefix = NULL;
    ckpt_writer_options_init(o);
    int check_crc;
    if (!enif_get_tuple(env, t, &n, &f) || n != 7 || !enif_get_uint64(env, f[0], &max) || !get_bool(f[6], &check_crc) ||
        !cstring_or_nil(env, f[1], prefix))
        return 0;
    if (!get_bool(f[2], &o->overwrite) || !get_bool(f[3], &o->no_sync) || !get_bool(f[4], &o->checksums) ||
        !cstring_or_nil(env, f[5], &format) || (format && !(o->format = ckpt_format_from_name(format)))) {
        if (*prefix) enif_free(*prefix);
        if (format) enif_free(format);
        *prefix = NULL;
        return 0;
    }
    if (format) enif_free(format);
    o->max_shard_size = max;
    o->prefix = *prefix;
    o->skip_crc_check = !check_crc;
    return 1;
}

/* A path and writer options; the caller frees *path and *prefix (when set). */
static int get_path_and_options(ErlNifEnv *env, ERL_NIF_TERM path_term, ERL_NIF_TERM options, char **path,
                                ckpt_writer_options *o, char **prefix) {
    if (!get_writer_options(env, options, o, prefix)) return 0;
    if (cstring(env, path_term, path)) return 1;
    if (*prefix) enif_free(*prefix);
    return 0;
}

/* destination(path, writer_options) → {:ok, {format_name, directory}}: the
 * library's destination rule (ckpt_destination_resolve). */
static ERL_NIF_TERM nif_destination(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    char *path, *prefix;
    ckpt_writer_options o;
    if (!get_path_and_options(env, argv[0], argv[1], &path, &o, &prefix)) return enif_make_badarg(env);
    ckpt_error e;
    ckpt_format format;
    int directory;
    ckpt_status st = ckpt_destination_resolve(path, &o, &format, &directory, &e);
    enif_free(path);
    if (prefix) enif_free(prefix);
    if (st) return error_term(env, st, &e);
    return ok(env, enif_make_tuple2(env, string(env, ckpt_format_name(format)), directory ? ATOM_TRUE : ATOM_FALSE));
}

/* writer_create(path, writer_options) → {:ok, writer} */
static ERL_NIF_TERM nif_writer_create(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    char *path, *prefix;
    ckpt_writer_options o;
    if (!get_path_and_options(env, argv[0], argv[1], &path, &o, &prefix)) return enif_make_badarg(env);
    ckpt_error e;
    ckpt_writer *w;
    ckpt_status st = ckpt_writer_create(path, &o, &w, &e);
    enif_free(path);
    if (prefix) enif_free(prefix);
    if (st) return error_term(env, st, &e);
    writer_res *r = enif_alloc_resource(WRITER_RT, sizeof *r);
    r->writer = w;
    r->lock = enif_mutex_create("ckpt_writer");
    ERL_NIF_TERM term = enif_make_resource(env, r);
    enif_release_resource(r);
    if (!r->lock) return own_error(env, CKPT_E_NO_MEMORY, NULL, NULL, "%s", "cannot create a mutex");
    return ok(env, term);
}

/* Locks the writer; fails (unlocked) when it was committed or aborted. */
static ERL_NIF_TERM lock_writer(ErlNifEnv *env, ERL_NIF_TERM t, writer_res **out) {
    if (!enif_get_resource(env, t, WRITER_RT, (void **)out) || !(*out)->lock) return enif_make_badarg(env);
    enif_mutex_lock((*out)->lock);
    if (!(*out)->writer) {
        enif_mutex_unlock((*out)->lock);
        return own_error(env, CKPT_E_BAD_STATE, NULL, NULL, "%s", "the writer was already committed or aborted");
    }
    return 0;
}

/* `n` paths, the i-th from path(w, i). */
static ERL_NIF_TERM writer_paths(ErlNifEnv *env, ckpt_writer *w, size_t n,
                                 const char *(*path)(const ckpt_writer *, size_t)) {
    ERL_NIF_TERM list = enif_make_list(env, 0);
    for (size_t i = n; i-- > 0;) list = enif_make_list_cell(env, string(env, path(w, i)), list);
    return list;
}

/* writer_set_metadata(writer, key, value, checkpoint_level) → :ok */
static ERL_NIF_TERM nif_writer_set_metadata(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    writer_res *w;
    char *k, *v;
    int checkpoint;
    if (!get_bool(argv[3], &checkpoint)) return enif_make_badarg(env);
    ERL_NIF_TERM fail = lock_writer(env, argv[0], &w);
    if (fail) return fail;
    if (!cstring(env, argv[1], &k)) {
        enif_mutex_unlock(w->lock);
        return enif_make_badarg(env);
    }
    if (!cstring(env, argv[2], &v)) {
        enif_free(k);
        enif_mutex_unlock(w->lock);
        return enif_make_badarg(env);
    }
    ckpt_error e;
    ckpt_status st = checkpoint ? ckpt_writer_set_checkpoint_metadata(w->writer, k, v, &e)
                                : ckpt_writer_set_metadata(w->writer, k, v, &e);
    enif_mutex_unlock(w->lock);
    enif_free(k);
    enif_free(v);
    return st ? error_term(env, st, &e) : ATOM_OK;
}

/* writer_add(writer, name, dtype, [dims]) → {:ok, index} */
static ERL_NIF_TERM nif_writer_add(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    uint64_t shape[CKPT_MAX_DIMS];
    unsigned ndim = 0, len;
    ERL_NIF_TERM list = argv[3], head;
    if (!enif_get_list_length(env, list, &len) || len > CKPT_MAX_DIMS) return enif_make_badarg(env);
    while (enif_get_list_cell(env, list, &head, &list)) {
        ErlNifUInt64 d;
        if (!enif_get_uint64(env, head, &d)) return enif_make_badarg(env);
        shape[ndim++] = d;
    }
    ckpt_dtype dtype = get_dtype(env, argv[2]);
    char *name;
    if (!cstring(env, argv[1], &name)) return enif_make_badarg(env);
    writer_res *w;
    ERL_NIF_TERM fail = lock_writer(env, argv[0], &w);
    if (fail) {
        enif_free(name);
        return fail;
    }
    ckpt_error e;
    size_t index;
    ckpt_status st = ckpt_writer_add_tensor(w->writer, name, dtype, ndim, shape, &index, &e);
    enif_mutex_unlock(w->lock);
    enif_free(name);
    return st ? error_term(env, st, &e) : ok(env, enif_make_uint64(env, index));
}

/* writer_begin(writer) → {:ok, [path]} */
static ERL_NIF_TERM nif_writer_begin(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    writer_res *w;
    ERL_NIF_TERM fail = lock_writer(env, argv[0], &w);
    if (fail) return fail;
    ckpt_error e;
    ckpt_status st = ckpt_writer_begin(w->writer, &e);
    ERL_NIF_TERM result = st ? error_term(env, st, &e)
                             : ok(env, writer_paths(env, w->writer, ckpt_writer_file_count(w->writer),
                                                    ckpt_writer_file_path));
    enif_mutex_unlock(w->lock);
    return result;
}

/* writer_write(writer, index, binary) → :ok; the writer keeps no copy */
static ERL_NIF_TERM nif_writer_write(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    ErlNifUInt64 index;
    ErlNifBinary b;
    if (!enif_get_uint64(env, argv[1], &index) || !enif_inspect_binary(env, argv[2], &b)) return enif_make_badarg(env);
    writer_res *w;
    ERL_NIF_TERM fail = lock_writer(env, argv[0], &w);
    if (fail) return fail;
    ckpt_error e;
    ckpt_status st = ckpt_writer_write(w->writer, (size_t)index, b.data, b.size, &e);
    enif_mutex_unlock(w->lock);
    return st ? error_term(env, st, &e) : ATOM_OK;
}

/* writer_commit(writer) → {:ok, [path]}: every path published (data files,
 * then the index); the writer is released either way */
static ERL_NIF_TERM nif_writer_commit(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    writer_res *w;
    ERL_NIF_TERM fail = lock_writer(env, argv[0], &w);
    if (fail) return fail;
    ckpt_error e;
    ckpt_status st = ckpt_writer_commit(w->writer, &e);
    ERL_NIF_TERM result = st ? error_term(env, st, &e)
                             : ok(env, writer_paths(env, w->writer, ckpt_writer_published_count(w->writer),
                                                    ckpt_writer_published_path));
    ckpt_writer_free(w->writer);
    w->writer = NULL;
    enif_mutex_unlock(w->lock);
    return result;
}

/* writer_abort(writer) → :ok: removes the temporaries now */
static ERL_NIF_TERM nif_writer_abort(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    writer_res *w;
    if (!enif_get_resource(env, argv[0], WRITER_RT, (void **)&w) || !w->lock) return enif_make_badarg(env);
    enif_mutex_lock(w->lock);
    ckpt_writer_free(w->writer);
    w->writer = NULL;
    enif_mutex_unlock(w->lock);
    return ATOM_OK;
}

/* convert(catalog, dst, rules, writer_options) → :ok; no rules: ckpt_convert
 * (metadata and a torch object tree kept), else the plan's ckpt_convert_plan. */
static ERL_NIF_TERM nif_convert(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    char *dst, *prefix;
    ckpt_writer_options o;
    if (!get_catalog(env, argv[0], &r) || !enif_is_list(env, argv[2]) ||
        !get_path_and_options(env, argv[1], argv[3], &dst, &o, &prefix))
        return enif_make_badarg(env);
    ckpt_error e;
    ckpt_status st;
    ERL_NIF_TERM result = 0;
    ckpt_plan *plan = NULL;
    if (enif_is_empty_list(env, argv[2])) { /* the whole catalog: a plan with no rule */
        st = ckpt_plan_create(r->catalog, &plan, &e);
        if (st == CKPT_OK) st = ckpt_convert_plan(plan, dst, &o, &e);
    } else {
        result = make_plan(env, r, argv[2], &plan);
        st = result ? CKPT_OK : ckpt_convert_plan(plan, dst, &o, &e);
    }
    if (!result) ckpt_plan_free(plan);
    enif_free(dst);
    if (prefix) enif_free(prefix);
    if (result) return result;
    return st ? error_term(env, st, &e) : ATOM_OK;
}

/* verify(catalog) → {:ok, %{tensor_digests:, chunk_digests:, header_digests:, zip_crc32:, bytes:, tensors:,
 * file_sha256:}} */
static ERL_NIF_TERM nif_verify(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    catalog_res *r;
    if (!get_catalog(env, argv[0], &r)) return enif_make_badarg(env);
    ckpt_error e;
    ckpt_verify_report report = {.size = sizeof report};
    ckpt_status st = ckpt_verify(r->catalog, NULL, &report, &e);
    if (st) return error_term(env, st, &e);
    ERL_NIF_TERM keys[] = {enif_make_atom(env, "tensor_digests"), enif_make_atom(env, "header_digests"),
                           enif_make_atom(env, "zip_crc32"), enif_make_atom(env, "bytes"),
                           enif_make_atom(env, "tensors"), enif_make_atom(env, "file_sha256"),
                           enif_make_atom(env, "chunk_digests")};
    ERL_NIF_TERM values[] = {enif_make_uint64(env, report.tensor_digests), enif_make_uint64(env, report.header_digests),
                             enif_make_uint64(env, report.zip_crc32), enif_make_uint64(env, report.bytes),
                             enif_make_uint64(env, report.tensors), enif_make_uint64(env, report.file_sha256),
                             enif_make_uint64(env, report.chunk_digests)};
    ERL_NIF_TERM map;
    enif_make_map_from_arrays(env, keys, values, sizeof keys / sizeof *keys, &map);
    return ok(env, map);
}

/* recover(dir, check) → {:ok, found}: ckpt_commit_recover, found true when
 * dir held an interrupted commit that was (check: would be) finished. */
static ERL_NIF_TERM nif_recover(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    char *dir;
    int check;
    if (!get_bool(argv[1], &check) || !cstring(env, argv[0], &dir)) return enif_make_badarg(env);
    ckpt_error e;
    int found = 0;
    ckpt_status st = ckpt_commit_recover(dir, check ? CKPT_RECOVER_CHECK : 0, &found, &e);
    enif_free(dir);
    return st ? error_term(env, st, &e) : ok(env, found ? ATOM_TRUE : ATOM_FALSE);
}

/* ---- small things ----------------------------------------------------- */

static ERL_NIF_TERM nif_parse_size(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    char *text;
    if (!cstring(env, argv[0], &text)) return enif_make_badarg(env);
    ckpt_error e;
    uint64_t bytes;
    ckpt_status st = ckpt_parse_size(text, &bytes, &e);
    enif_free(text);
    return st ? error_term(env, st, &e) : ok(env, enif_make_uint64(env, bytes));
}

/* dtype_bits(name) → bits per element, 0 for an unknown name */
static ERL_NIF_TERM nif_dtype_bits(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    return enif_make_uint(env, ckpt_dtype_bits(get_dtype(env, argv[0])));
}

/* redact_name(name) → the name as it may be shown (ckpt_redact_name: a URL
 * without its user part or the query values that carry credentials) */
static ERL_NIF_TERM nif_redact_name(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc;
    char *name;
    if (!cstring(env, argv[0], &name)) return enif_make_badarg(env);
    ERL_NIF_TERM t;
    size_t n = ckpt_redact_name(name, NULL, 0);
    unsigned char *p = enif_make_new_binary(env, n + 1, &t); /* room for the NUL, cut below */
    ckpt_redact_name(name, (char *)p, n + 1);
    enif_free(name);
    return enif_make_sub_binary(env, t, 0, n);
}

static ERL_NIF_TERM nif_version(ErlNifEnv *env, int argc, const ERL_NIF_TERM argv[]) {
    (void)argc, (void)argv;
    return string(env, ckpt_version());
}

#define IO ERL_NIF_DIRTY_JOB_IO_BOUND
#define CPU ERL_NIF_DIRTY_JOB_CPU_BOUND

static ErlNifFunc functions[] = {
    {"open", 2, nif_open, IO},
    {"info", 1, nif_info, 0},
    {"tensors", 1, nif_tensors, CPU},
    {"metadata", 1, nif_metadata, 0},
    {"read", 3, nif_read, IO},
    {"plan", 2, nif_plan, CPU},
    {"load", 3, nif_load, IO},
    {"destination", 2, nif_destination, IO},
    {"writer_create", 2, nif_writer_create, IO},
    /* Writer calls take its lock, which a dirty write may hold: all dirty. */
    {"writer_set_metadata", 4, nif_writer_set_metadata, IO},
    {"writer_add", 4, nif_writer_add, IO},
    {"writer_begin", 1, nif_writer_begin, IO},
    {"writer_write", 3, nif_writer_write, IO},
    {"writer_commit", 1, nif_writer_commit, IO},
    {"writer_abort", 1, nif_writer_abort, IO},
    {"convert", 4, nif_convert, IO},
    {"verify", 1, nif_verify, IO},
    {"recover", 2, nif_recover, IO},
    {"parse_size", 1, nif_parse_size, 0},
    {"dtype_bits", 1, nif_dtype_bits, 0},
    {"version", 0, nif_version, 0},
    {"redact_name", 1, nif_redact_name, 0},
};

ERL_NIF_INIT(Elixir.Ckpt.NIF, functions, load, NULL, upgrade, NULL)
