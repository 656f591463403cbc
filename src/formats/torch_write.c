/* torch_write.c — the torch output format: an object as torch.save
 * writes it (torch_save.h), which torch.load(weights_only=True) reads.
 *
 * The object is the output's object tree when the conversion passes one
 * (the checkpoint metadata "ckpt.torch_tree": a training checkpoint's
 * {'model': OrderedDict, 'optimizer': …, 'epoch': 3}), else the state dict
 * {name: tensor} of the declared tensors in declaration order.  Tensors
 * are _rebuild_tensor_v2 calls (v3 with an UntypedStorage and the dtype
 * for the dtypes without a legacy storage class: uint16-64, the float8s)
 * on persistent-id storages ('storage', class, key, 'cpu', numel), and the
 * whole is pickled as CPython's protocol-2 pickler pickles what torch.load
 * gives (its memo approximated by value: see "the pickle"); then one
 * record per storage, in the order the pickle first names them.  Byte for
 * byte what torch.save writes for that object, the .data/serialization_id
 * record included.  What such a file cannot hold is refused by its path in
 * the tree; a declared tensor the tree lacks, by its name.
 *
 * Storages.  Tensors declared on one storage (ckpt_writer_add_tensor_shared:
 * tied weights, views) keep sharing it when one of them covers the whole
 * storage: that tensor's bytes are the record, and every other contiguous
 * tensor of its dtype on it is written as a view (its storage_offset, its
 * bytes not sent again).  torch.load then gives tensors on one storage, as
 * torch.save received them.  A tensor on a storage no single tensor covers
 * (a view into a tensor that is not saved) or a non-contiguous view is
 * written as a storage of its own, holding its bytes only — as
 * torch.save(t.clone()) would write it: torch.save would write the whole
 * storage, bytes no saved tensor reaches included, which a writer given
 * the tensors' bytes does not have.
 *
 * A torch file has no place for string metadata: a source's
 * `__metadata__` is not carried. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../io/file.h"
#include "../base/json.h"
#include "output.h"
#include "torch.h"
#include "torch_save.h"

#define UNSET UINT32_MAX

typedef struct tw_tensor {
    size_t record; /* index into the archive's records */
    uint64_t offset; /* storage_offset, in elements */
} tw_tensor;

typedef struct tw_state {
    char *folder;               /* the archive's folder: the file's name without its extension */
    ckpt__torch_record *records; /* data.pkl, .format_version, .storage_alignment, byteorder, data/k…, version, id */
    const char **contents;      /* fixed records' bytes; NULL for a storage's, streamed by the writer */
    size_t *filler;             /* per record: the tensor whose bytes it holds (storages only) */
    size_t count;               /* records */
    char serial[41];
    ckpt__buf pickle;
    uint64_t cd_at;
} tw_state;

static tw_state *state_of(ckpt__output *o) { return *ckpt__out_format_state(o); }

static unsigned elem_bytes(ckpt_dtype d) { return ckpt_dtype_bits(d) / 8; }

/* torch.save's folder: the name after the last '/' or '\\', up to its last '.'. */
static char *archive_folder(ckpt__arena *a, const char *path) {
    const char *start = path;
    for (const char *p = path; *p; p++)
        if (*p == '/' || *p == '\\') start = p + 1;
    const char *dot = strrchr(start, '.');
    size_t n = dot && dot > start ? (size_t)(dot - start) : strlen(start);
    return ckpt__arena_strndup(a, start, n);
}

/* ---- storages ---------------------------------------------------------------------- */

static bool covers_storage(const ckpt__out_tensor *t) {
    const ckpt_tensor_storage *s = t->storage;
    return s && s->id && s->contiguous && s->begin == 0 && t->nbytes == s->nbytes;
}

/* Whether tensor t can be written as a view of filler f's storage. */
static bool view_of(const ckpt__out_tensor *t, const ckpt__out_tensor *f) {
    const ckpt_tensor_storage *s = t->storage;
    unsigned es = elem_bytes(t->dtype);
    return t->dtype == f->dtype && s->contiguous && es && s->begin % es == 0 && s->end - s->begin == t->nbytes;
}

/* Each tensor's record and storage offset; records' fillers.  Storage
 * records are numbered as torch numbers them: by the first tensor naming
 * each, in the pickle's `order`. */
static ckpt_status plan_storages(ckpt__output *o, const size_t *order, tw_tensor *tt, size_t *filler_of, size_t *storages,
                                 ckpt_error *err) {
    size_t n = ckpt__out_count(o);
    size_t *rank = ckpt__malloc((n ? n : 1) * sizeof *rank), *cover = ckpt__malloc((n ? n : 1) * sizeof *cover),
           *record = ckpt__malloc((n ? n : 1) * sizeof *record);
    ckpt_status st = !rank || !cover || !record ? ckpt__oom(err, ckpt__out_path(o), NULL)
                                                : ckpt__out_storage_ranks(o, rank, true, err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) cover[i] = record[i] = SIZE_MAX;
    for (size_t k = 0, i; st == CKPT_OK && k < n; k++) /* each storage's first tensor that covers it */
        if (i = order[k], cover[rank[i]] == SIZE_MAX && covers_storage(ckpt__out_tensor_at(o, i))) cover[rank[i]] = i;
    *storages = 0;
    for (size_t k = 0; st == CKPT_OK && k < n; k++) {
        size_t i = order[k];
        ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        size_t f = cover[rank[i]];
        bool shared = f != SIZE_MAX && (f == i || view_of(t, ckpt__out_tensor_at(o, f)));
        size_t *slot = shared ? &record[rank[i]] : NULL;
        if (!slot || *slot == SIZE_MAX) {
            filler_of[*storages] = shared ? f : i;
            if (slot) *slot = *storages;
            tt[i].record = (*storages)++;
        } else {
            tt[i].record = *slot;
        }
        tt[i].offset = shared ? t->storage->begin / elem_bytes(t->dtype) : 0;
        if (shared && f != i) ckpt__out_same_bytes(o, i, f);
        else t->file = 0;
    }
    free(rank);
    free(cover);
    free(record);
    return st;
}

/* ---- the pickle -------------------------------------------------------------------- */

/*
 * The object is the output's object tree (the checkpoint metadata
 * "ckpt.torch_tree" a conversion passes: tree_internal.h; the schema of
 * ckpt_catalog_tree_json), else the state dict {name: tensor} of the
 * declared tensors.  It is pickled as CPython's protocol-2 pickler pickles
 * what torch.load gives for it.
 *
 * Memo.  CPython's pickler memoizes objects by identity: each is written
 * once, then fetched (BINGET).  The tree keeps values, not identities, so
 * the pickle shares by value what torch.save shares in practice — strings
 * (one piece of code puts the same str object in every dict it makes: an
 * optimizer's 'exp_avg' in each parameter's state, 'lr' in each param
 * group; "" and one-character strings are singletons), globals (classes,
 * functions, dtypes) and tuples of scalars (the 'betas' every param group
 * shares) — and writes anew what is a new object each time: containers,
 * calls, and each reference to a tensor (a tensor of its own on the same
 * storage, as state_dict() gives tied weights).  torch.save's own strings
 * ('storage', 'cpu', each storage's key) are other objects than the tree's
 * strings of the same text.  Two equal strings that were distinct objects
 * (the same keys in two state dicts built apart) are so written once.
 */
enum {
    BATCH = 1000,    /* CPython's pickler: APPENDS and SETITEMS in batches of 1000 */
    MAX_NEST = 1000, /* containers open at once; the tree's JSON nests less (json.h) */
};

typedef struct memo_entry {
    char *key; /* a tag and the value: 's' a string, 'g' module\nname, 't' a tuple's elements */
    uint32_t index;
} memo_entry;

typedef struct pickler {
    ckpt__output *o;
    const tw_state *s;
    const tw_tensor *tt;
    const ckpt__json_doc *doc;
    ckpt__buf *b;
    ckpt_error *err;
    uint32_t memo;
    uint32_t storage, cpu, latin1; /* torch.save's and pickle's own strings */
    uint32_t *key;                 /* per storage record: its key's memo index */
    ckpt__name_table shared;       /* what is shared by value: entries' keys */
    memo_entry *entries;
    size_t entry_count, entry_cap;
    ckpt__name_table tensors; /* the declared tensors by name */
    const char **names;
    bool *placed; /* per declared tensor: the object holds it */
    ckpt__buf scratch, path; /* a key being made; where in the object the value being written is */
} pickler;

static ckpt_status refuse(pickler *p, ckpt_status status, const char *fmt, const char *what) {
    const char *at = p->path.data && p->path.len ? p->path.data : NULL;
    return ckpt__fail(p->err, status, ckpt__out_path(p->o), NULL, -1, fmt, what, at ? at : "the root");
}

static uint32_t shared_get(pickler *p, const char *key) {
    int64_t i = ckpt__name_table_find(&p->shared, (const char *const *)p->entries, sizeof *p->entries, key);
    return i < 0 ? UNSET : p->entries[i].index;
}

/* Records that the value of `key` is memo `index` (a full table: not shared). */
static void shared_put(pickler *p, const char *key, uint32_t index) {
    char *copy = p->entry_count < p->entry_cap ? ckpt__strdup(key) : NULL;
    if (!copy) return;
    p->entries[p->entry_count] = (memo_entry){copy, index};
    ckpt__name_table_insert(&p->shared, (const char *const *)p->entries, sizeof *p->entries, (uint32_t)p->entry_count,
                            NULL);
    p->entry_count++;
}

/* The scratch key: a tag, then `n` bytes. */
static const char *make_key(pickler *p, char tag, const char *s, size_t n) {
    p->scratch.len = 0;
    ckpt__buf_append(&p->scratch, &tag, 1);
    ckpt__buf_append(&p->scratch, s, n);
    ckpt__buf_append(&p->scratch, "", 1);
    return p->scratch.failed ? NULL : p->scratch.data;
}

/* GLOBAL, shared by value; protocol 2 names builtins `__builtin__`, as
 * CPython's fix_imports does. */
static void pk_global(pickler *p, const char *module, const char *name) {
    if (!strcmp(module, "builtins")) module = "__builtin__";
    ckpt__buf *k = &p->scratch;
    k->len = 0;
    ckpt__buf_puts(k, "g");
    ckpt__buf_puts(k, module);
    ckpt__buf_puts(k, "\n");
    ckpt__buf_puts(k, name);
    ckpt__buf_append(k, "", 1);
    uint32_t at = k->failed ? UNSET : shared_get(p, k->data);
    if (at != UNSET) {
        ckpt__pkw_memo_get(p->b, at);
        return;
    }
    ckpt__pkw_global(p->b, module, name);
    at = ckpt__pkw_memo_put(p->b, &p->memo);
    if (!k->failed) shared_put(p, k->data, at);
}

/* A str of torch.save's own, memoized in `slot` (NULL: a new object). */
static void pk_own_str(pickler *p, uint32_t *slot, const char *s, size_t n) {
    if (slot && *slot != UNSET) {
        ckpt__pkw_memo_get(p->b, *slot);
        return;
    }
    ckpt__pkw_str(p->b, s, n);
    uint32_t at = ckpt__pkw_memo_put(p->b, &p->memo);
    if (slot) *slot = at;
}

/* A str of the object, shared by value (one holding a NUL: written anew). */
static void pk_str(pickler *p, const char *s, size_t n) {
    const char *key = memchr(s, 0, n) ? NULL : make_key(p, 's', s, n);
    uint32_t at = key ? shared_get(p, key) : UNSET;
    if (at != UNSET) {
        ckpt__pkw_memo_get(p->b, at);
        return;
    }
    ckpt__pkw_str(p->b, s, n);
    at = ckpt__pkw_memo_put(p->b, &p->memo);
    if (key) shared_put(p, key, at);
}

/* A tuple of sizes, a new object (the empty tuple is a constant, never memoized). */
static void pk_dims(pickler *p, const uint64_t *v, uint32_t n) {
    ckpt__pkw_dims(p->b, v, n);
    if (n) ckpt__pkw_memo_put(p->b, &p->memo);
}

/* Declared tensor i: _rebuild_tensor_v2(storage, offset, size, stride,
 * False, OrderedDict()) (v3 adds the dtype), as Tensor.__reduce_ex__ gives
 * it, on the persistent id ('storage', class, key, 'cpu', numel). */
static void pk_tensor(pickler *p, size_t i) {
    const ckpt__out_tensor *t = ckpt__out_tensor_at(p->o, i);
    const tw_tensor *tt = &p->tt[i];
    const ckpt__torch_record *r = &p->s->records[4 + tt->record];
    const ckpt__torch_type *type = ckpt__torch_type_of(t->dtype);
    bool v2 = type->storage != NULL;
    uint64_t strides[CKPT_MAX_DIMS], s = 1;
    for (uint32_t d = t->ndim; d-- > 0;) {
        strides[d] = s;
        s *= t->shape[d] ? t->shape[d] : 1; /* torch's contiguous strides count empty axes as 1 */
    }
    pk_global(p, "torch._utils", v2 ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
    ckpt__pkw_op(p->b, '(');
    ckpt__pkw_op(p->b, '('); /* the persistent id */
    pk_own_str(p, &p->storage, "storage", 7);
    if (v2) pk_global(p, "torch", type->storage);
    else pk_global(p, "torch.storage", "UntypedStorage");
    pk_own_str(p, &p->key[tt->record], r->name + 5, strlen(r->name + 5)); /* "data/<key>" */
    pk_own_str(p, &p->cpu, "cpu", 3);
    ckpt__pkw_int(p->b, (int64_t)(v2 ? r->size / elem_bytes(t->dtype) : r->size));
    ckpt__pkw_op(p->b, 't');
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt__pkw_op(p->b, 'Q');
    ckpt__pkw_int(p->b, (int64_t)tt->offset);
    pk_dims(p, t->shape, t->ndim);
    pk_dims(p, strides, t->ndim);
    ckpt__pkw_op(p->b, 0x89); /* requires_grad=False */
    pk_global(p, "collections", "OrderedDict");
    ckpt__pkw_op(p->b, ')');
    ckpt__pkw_op(p->b, 'R');
    ckpt__pkw_memo_put(p->b, &p->memo);
    if (!v2) pk_global(p, "torch", type->name);
    ckpt__pkw_op(p->b, 't');
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt__pkw_op(p->b, 'R');
    ckpt__pkw_memo_put(p->b, &p->memo);
}

/* ---- the object tree's values ---- */

static uint32_t member(const ckpt__json_doc *d, uint32_t i, const char *key) { return ckpt__json_member(d, i, key); }

/* Node i's member `key` when it is an array (else 0). */
static uint32_t array_member(const ckpt__json_doc *d, uint32_t i, const char *key) {
    uint32_t v = member(d, i, key);
    return v && d->nodes[v].kind == CKPT__JSON_ARRAY ? v : 0;
}

static void pk_float(pickler *p, double f) { ckpt__pkw_float(p->b, f); }

/* A JSON number: an int (BININT…, LONG1) or a float (BINFLOAT). */
static ckpt_status pk_number(pickler *p, const ckpt__json_node *n) {
    char text[64]; /* the raw text is not NUL-terminated */
    if (n->len >= sizeof text) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is longer than a number", "a number");
    memcpy(text, n->str, n->len);
    text[n->len] = '\0';
    char *end;
    errno = 0;
    if (strpbrk(text, ".eE")) {
        pk_float(p, strtod(text, &end));
        return CKPT_OK;
    }
    long long v = strtoll(text, &end, 10);
    if (errno || *end) /* the reader writes ints beyond 64 bits as {"__int_le__": …} */
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s does not fit in 64 bits", "an integer");
    ckpt__pkw_int(p->b, v);
    return CKPT_OK;
}

/* {"__int_le__": hex}: LONG1 (LONG4 from 256 bytes), two's complement as CPython writes it. */
static ckpt_status pk_big_int(pickler *p, const ckpt__json_node *hex) {
    ckpt__buf raw = {0};
    ckpt_status st = CKPT_OK;
    if (!ckpt__pkw_unhex(&raw, hex->str, hex->len) || raw.len > UINT32_MAX) {
        st = refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is malformed", "an integer");
    } else {
        ckpt__pkw_op(p->b, raw.len < 256 ? 0x8a : 0x8b);
        ckpt__put_le(p->b, raw.len, raw.len < 256 ? 1 : 4);
        ckpt__buf_append(p->b, raw.data ? raw.data : "", raw.len);
    }
    free(raw.data);
    return st;
}

/* {"__bytes__": hex}: protocol 2 pickles bytes as
 * _codecs.encode(their latin-1 text, 'latin1'), a new object each time
 * (b'' too, which torch.save writes as bytes(), a call torch.load's
 * weights_only unpickler refuses). */
static ckpt_status pk_bytes(pickler *p, const ckpt__json_node *hex) {
    ckpt__buf raw = {0}, text = {0};
    if (!ckpt__pkw_unhex(&raw, hex->str, hex->len)) {
        free(raw.data);
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s are malformed", "bytes");
    }
    for (size_t k = 0; k < raw.len; k++) {
        unsigned char c = (unsigned char)raw.data[k];
        if (c < 0x80) ckpt__pkw_op(&text, c);
        else ckpt__pkw_op(&text, (unsigned char)(0xC0 | c >> 6)), ckpt__pkw_op(&text, (unsigned char)(0x80 | (c & 0x3F)));
    }
    pk_global(p, "_codecs", "encode");
    pk_own_str(p, NULL, text.data ? text.data : "", text.len);
    pk_own_str(p, &p->latin1, "latin1", 6);
    ckpt__pkw_op(p->b, 0x86);
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt__pkw_op(p->b, 'R');
    ckpt__pkw_memo_put(p->b, &p->memo);
    bool failed = raw.failed || text.failed;
    free(raw.data);
    free(text.data);
    return failed ? ckpt__oom(p->err, ckpt__out_path(p->o), NULL) : CKPT_OK;
}

/* A global torch.load(weights_only=True) allows, and that is a value
 * rather than how a tensor or a storage is rebuilt (tensors are written
 * from their declarations): `text` is "module.name". */
static ckpt_status global_name(pickler *p, const ckpt__json_node *text, char *module, size_t cap, const char **name) {
    const char *dot = text->kind == CKPT__JSON_STRING ? strrchr(text->str, '.') : NULL;
    if (!dot || (size_t)(dot - text->str) >= cap)
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is malformed", "a global");
    memcpy(module, text->str, (size_t)(dot - text->str));
    module[dot - text->str] = '\0';
    *name = dot + 1;
    size_t n = strlen(*name);
    bool rebuilds = !strncmp(module, "torch._utils", 12) || !strcmp(module, "torch._tensor") ||
                    !strcmp(module, "torch.storage") || !strcmp(module, "torch.nn.parameter") ||
                    (n >= 7 && !strcmp(*name + n - 7, "Storage")) || (n >= 6 && !strcmp(*name + n - 6, "Tensor"));
    if (ckpt__torch_allow(module, *name, NULL) != CKPT__PK_ALLOW)
        return refuse(p, CKPT_E_PICKLE_FORBIDDEN,
                      "%s (at %s) is outside torch.load's weights_only allowlist: a torch.save file with it would "
                      "not load", text->str);
    if (rebuilds)
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s (at %s) rebuilds a tensor, which ckpt writes only from its data",
                      text->str);
    return CKPT_OK;
}

/* A reference to a declared tensor: a rebuild on its storage. */
static ckpt_status pk_tensor_ref(pickler *p, const ckpt__json_node *name) {
    int64_t i = name->kind == CKPT__JSON_STRING && ckpt__out_count(p->o)
                    ? ckpt__name_table_find(&p->tensors, p->names, sizeof *p->names, name->str)
                    : -1;
    if (i < 0)
        return refuse(p, CKPT_E_NOT_FOUND, "the object tree names the tensor '%s' (at %s), which is not written",
                      name->kind == CKPT__JSON_STRING ? name->str : "?");
    p->placed[i] = true;
    pk_tensor(p, (size_t)i);
    return CKPT_OK;
}

/* ---- containers, walked with a heap stack (no recursion on the tree's depth) ---- */

typedef enum batching { B_NONE, B_LIST, B_DICT, B_ORDERED } batching;
typedef enum closing { C_NONE, C_TUPLE, C_SIZE, C_SET, C_CALL } closing;

typedef struct wframe {
    uint32_t next;       /* the next child's node */
    uint32_t left;       /* children left in the array being gone through */
    uint32_t done, count; /* children written, of all */
    uint32_t shard;      /* a root {"__shards__": […]}: the shard whose pairs are being written (0: none) */
    uint32_t state;      /* written after the children, then BUILD (0: none) */
    uint8_t batching, closing;
    bool pairs;          /* the children are a dict's [key, value] pairs */
    bool in_child, in_state;
    size_t saved;        /* the path's length before the current child's part */
    char *share;         /* C_TUPLE: the key the tuple is shared under (malloc'ed), or NULL */
} wframe;

static ckpt_status push(pickler *p, ckpt__stack *open, uint32_t items, uint32_t count, batching batch, closing close,
                        bool pairs) {
    wframe *f = ckpt__stack_push(open);
    if (!f) return ckpt__oom(p->err, ckpt__out_path(p->o), NULL);
    *f = (wframe){.next = items + 1, .left = count, .count = count, .batching = (uint8_t)batch,
                  .closing = (uint8_t)close, .pairs = pairs};
    return CKPT_OK;
}

/* The key a tuple of scalars is shared under (NULL: another object each
 * time): each element's kind, length and text. */
static char *tuple_key(pickler *p, uint32_t items) {
    const ckpt__json_doc *d = p->doc;
    ckpt__buf *k = &p->scratch;
    k->len = 0;
    ckpt__buf_puts(k, "t");
    for (uint32_t c = items + 1; c < d->nodes[items].end; c = d->nodes[c].end) {
        const ckpt__json_node *n = &d->nodes[c];
        uint32_t v = 0;
        char tag = n->kind == CKPT__JSON_NUMBER ? 'i' : n->kind == CKPT__JSON_STRING ? 's' : n->kind == CKPT__JSON_NULL ? 'n'
                 : n->kind == CKPT__JSON_TRUE ? 'T' : n->kind == CKPT__JSON_FALSE ? 'F' : 0;
        if (!tag && n->count == 1 && (v = member(d, c, "__float__"))) tag = 'f';
        else if (!tag && n->count == 1 && (v = member(d, c, "__int_le__"))) tag = 'L';
        const ckpt__json_node *text = v ? &d->nodes[v] : n;
        if (!tag || text->kind == CKPT__JSON_ARRAY || text->kind == CKPT__JSON_OBJECT || memchr(text->str, 0, text->len))
            return NULL;
        char head[24];
        snprintf(head, sizeof head, "%c%u:", tag, text->len);
        ckpt__buf_puts(k, head);
        ckpt__buf_append(k, text->str, text->len);
    }
    ckpt__buf_append(k, "", 1);
    return k->failed ? NULL : ckpt__strdup(k->data);
}

/* A tuple's opening: its elements follow, then TUPLE1-3 or TUPLE. */
static ckpt_status open_tuple(pickler *p, ckpt__stack *open, uint32_t items, closing close, bool shareable) {
    uint32_t count = p->doc->nodes[items].count;
    char *key = shareable && count ? tuple_key(p, items) : NULL;
    uint32_t at = key ? shared_get(p, key) : UNSET;
    if (close == C_TUPLE && !count) {
        ckpt__pkw_op(p->b, ')'); /* the empty tuple: a constant */
        return CKPT_OK;
    }
    if (at != UNSET) {
        ckpt__pkw_memo_get(p->b, at);
        free(key);
        return CKPT_OK;
    }
    if (count > 3) ckpt__pkw_op(p->b, '(');
    ckpt_status st = push(p, open, items, count, B_NONE, close, false);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->share = key;
    else free(key);
    return st;
}

/* A dict: a plain one (EMPTY_DICT), or an OrderedDict (its class called
 * with no arguments) with its state (a state dict's _metadata); the root
 * {"__shards__": [dict, …]} of a sharded checkpoint is one dict. */
static ckpt_status open_dict(pickler *p, ckpt__stack *open, uint32_t i, uint32_t items) {
    const ckpt__json_doc *d = p->doc;
    uint32_t cls = member(d, i, "__class__"), state = member(d, i, "__state__");
    bool ordered = cls && d->nodes[cls].kind == CKPT__JSON_STRING && !strcmp(d->nodes[cls].str, "collections.OrderedDict");
    if (cls && !ordered) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is of a class ckpt does not write", "a dict");
    if (state && !ordered) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s has a state", "a plain dict");
    if (ordered) {
        pk_global(p, "collections", "OrderedDict");
        ckpt__pkw_op(p->b, ')');
        ckpt__pkw_op(p->b, 'R');
    } else {
        ckpt__pkw_op(p->b, '}');
    }
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt_status st = push(p, open, items, d->nodes[items].count, ordered ? B_ORDERED : B_DICT, C_NONE, true);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->state = state;
    return st;
}

static ckpt_status open_shards(pickler *p, ckpt__stack *open, uint32_t shards) {
    const ckpt__json_doc *d = p->doc;
    uint64_t count = 0;
    uint32_t first = 0;
    for (uint32_t c = shards + 1; c < d->nodes[shards].end; c = d->nodes[c].end) {
        uint32_t items = array_member(d, c, "__dict__");
        if (!items) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is not a dict", "a shard");
        if (!first && d->nodes[items].count) first = c;
        count += d->nodes[items].count;
    }
    if (count > UINT32_MAX) return refuse(p, CKPT_E_LIMIT, "%s at %s has too many entries", "the object");
    ckpt__pkw_op(p->b, '}');
    ckpt__pkw_memo_put(p->b, &p->memo);
    uint32_t items = first ? array_member(d, first, "__dict__") : shards;
    ckpt_status st = push(p, open, items, (uint32_t)count, B_DICT, C_NONE, true);
    if (st == CKPT_OK) {
        wframe *f = ckpt__stack_top(open);
        f->left = first ? d->nodes[items].count : 0;
        f->shard = first;
    }
    return st;
}

/* A call of an allowed global on arguments (torch.device('cpu'),
 * complex(1, 2), Counter({…})): REDUCE, then BUILD with its state. */
static ckpt_status open_call(pickler *p, ckpt__stack *open, uint32_t i, uint32_t callable) {
    const ckpt__json_doc *d = p->doc;
    uint32_t args = member(d, i, "args"), state = member(d, i, "state");
    if (args && d->nodes[args].kind != CKPT__JSON_ARRAY)
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s has malformed arguments", "a call");
    char module[256];
    const char *name;
    ckpt_status st = global_name(p, &d->nodes[callable], module, sizeof module, &name);
    if (st) return st;
    pk_global(p, module, name);
    uint32_t count = args ? d->nodes[args].count : 0;
    if (count > 3) ckpt__pkw_op(p->b, '(');
    st = push(p, open, args ? args : callable, count, B_NONE, C_CALL, false);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->state = state;
    return st;
}

/* Node i: a leaf whole, or a container's opening (its frame pushed). */
static ckpt_status open_value(pickler *p, ckpt__stack *open, uint32_t i) {
    const ckpt__json_doc *d = p->doc;
    const ckpt__json_node *n = &d->nodes[i];
    uint32_t v;
    if (open->len >= MAX_NEST) return refuse(p, CKPT_E_LIMIT, "%s at %s nests too deep", "the object");
    switch (n->kind) {
    case CKPT__JSON_NULL: ckpt__pkw_op(p->b, 'N'); return CKPT_OK;
    case CKPT__JSON_TRUE: ckpt__pkw_op(p->b, 0x88); return CKPT_OK;
    case CKPT__JSON_FALSE: ckpt__pkw_op(p->b, 0x89); return CKPT_OK;
    case CKPT__JSON_NUMBER: return pk_number(p, n);
    case CKPT__JSON_STRING: pk_str(p, n->str, n->len); return CKPT_OK;
    case CKPT__JSON_ARRAY: /* a list */
        ckpt__pkw_op(p->b, ']');
        ckpt__pkw_memo_put(p->b, &p->memo);
        return push(p, open, i, n->count, B_LIST, C_NONE, false);
    default: break;
    }
    uint32_t cls = member(d, i, "__class__");
    if ((v = member(d, i, "__tensor__"))) return pk_tensor_ref(p, &d->nodes[v]);
    if ((v = array_member(d, i, "__dict__"))) return open_dict(p, open, i, v);
    if ((v = array_member(d, i, "__shards__")) && !open->len) return open_shards(p, open, v);
    if ((v = array_member(d, i, "__tuple__"))) {
        if (!cls) return open_tuple(p, open, v, C_TUPLE, true);
        if (d->nodes[cls].kind != CKPT__JSON_STRING || strcmp(d->nodes[cls].str, "torch.Size"))
            return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is of a class ckpt does not write", "a tuple");
        pk_global(p, "torch", "Size"); /* torch.Size(tuple): REDUCE */
        return open_tuple(p, open, v, C_SIZE, false);
    }
    if ((v = array_member(d, i, "__set__"))) { /* protocol 2: set(list), REDUCE */
        pk_global(p, "builtins", "set");
        ckpt__pkw_op(p->b, ']');
        ckpt__pkw_memo_put(p->b, &p->memo);
        return push(p, open, v, d->nodes[v].count, B_LIST, C_SET, false);
    }
    if ((v = member(d, i, "__call__"))) return open_call(p, open, i, v);
    if ((v = member(d, i, "__global__"))) {
        char module[256];
        const char *name;
        ckpt_status st = global_name(p, &d->nodes[v], module, sizeof module, &name);
        if (st == CKPT_OK) pk_global(p, module, name);
        return st;
    }
    if ((v = member(d, i, "__float__")) && d->nodes[v].kind == CKPT__JSON_STRING) {
        const char *s = d->nodes[v].str;
        pk_float(p, !strcmp(s, "inf") ? INFINITY : !strcmp(s, "-inf") ? -INFINITY : NAN);
        return CKPT_OK;
    }
    if ((v = member(d, i, "__int_le__")) && d->nodes[v].kind == CKPT__JSON_STRING) return pk_big_int(p, &d->nodes[v]);
    if ((v = member(d, i, "__bytes__")) && d->nodes[v].kind == CKPT__JSON_STRING) return pk_bytes(p, &d->nodes[v]);
    return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is not one a torch.save file can hold", "the value");
}

/* The opcodes before child number f->done: a batch's MARK. */
static void before_child(pickler *p, const wframe *f) {
    uint32_t start = f->done - f->done % BATCH, batch = f->count - start < BATCH ? f->count - start : BATCH;
    bool mark = f->done % BATCH == 0 && (f->batching == B_ORDERED ? batch > 1 : f->count > 1);
    if (f->batching != B_NONE && mark) ckpt__pkw_op(p->b, '(');
}

/* The opcodes after a child (f->done counts it): a batch's end.  A list
 * or dict of one item: APPEND, SETITEM; an OrderedDict's items come from
 * an iterator, whose last batch of one is a SETITEM too. */
static void after_child(pickler *p, const wframe *f) {
    if (f->batching == B_NONE || (f->done % BATCH && f->done != f->count)) return;
    uint32_t batch = f->done - (f->done - 1) / BATCH * BATCH;
    bool single = f->batching == B_ORDERED ? batch == 1 : f->count == 1;
    ckpt__pkw_op(p->b, f->batching == B_LIST ? (single ? 'a' : 'e') : (single ? 's' : 'u'));
}

/* After the children: what closes the container. */
static void close_frame(pickler *p, wframe *f) {
    ckpt__buf *b = p->b;
    if (f->batching == B_DICT && f->count > 1 && f->count % BATCH == 0) {
        ckpt__pkw_op(b, '('); /* an exact dict's full last batch is followed by an empty one */
        ckpt__pkw_op(b, 'u');
    }
    if (f->closing == C_TUPLE || f->closing == C_SIZE || f->closing == C_CALL) {
        if (!f->count) {
            ckpt__pkw_op(b, ')');
        } else {
            ckpt__pkw_op(b, f->count == 1 ? 0x85 : f->count == 2 ? 0x86 : f->count == 3 ? 0x87 : 't');
            uint32_t at = ckpt__pkw_memo_put(b, &p->memo);
            if (f->share) shared_put(p, f->share, at);
        }
    }
    if (f->closing == C_SIZE || f->closing == C_SET) { /* the call's argument tuple */
        ckpt__pkw_op(b, 0x85);
        ckpt__pkw_memo_put(b, &p->memo);
    }
    if (f->closing == C_SIZE || f->closing == C_SET || f->closing == C_CALL) {
        ckpt__pkw_op(b, 'R');
        ckpt__pkw_memo_put(b, &p->memo);
    }
}

static void path_part(pickler *p, wframe *f, const char *part, size_t n) {
    f->saved = p->path.len;
    if (p->path.len) ckpt__buf_append(&p->path, ".", 1);
    ckpt__buf_append(&p->path, part, n);
    ckpt__buf_append(&p->path, "", 1);
    p->path.len--;
}

/* The next child of f: its path part, then its value (a dict's pair: its
 * key, then its value under the key). */
static ckpt_status next_child(pickler *p, ckpt__stack *open, wframe *f) {
    const ckpt__json_doc *d = p->doc;
    if (!f->left && f->shard) { /* the next shard's pairs */
        do f->shard = d->nodes[f->shard].end;
        while (!d->nodes[array_member(d, f->shard, "__dict__")].count);
        uint32_t items = array_member(d, f->shard, "__dict__");
        f->next = items + 1, f->left = d->nodes[items].count;
    }
    uint32_t c = f->next;
    f->next = d->nodes[c].end;
    f->left--;
    before_child(p, f);
    f->done++;
    f->in_child = true;
    if (!f->pairs) {
        char index[16];
        path_part(p, f, index, (size_t)snprintf(index, sizeof index, "%u", f->done - 1));
        return open_value(p, open, c);
    }
    const ckpt__json_node *key = d->nodes[c].kind == CKPT__JSON_ARRAY && d->nodes[c].count == 2 ? &d->nodes[c + 1] : NULL;
    if (!key || (key->kind != CKPT__JSON_STRING && key->kind != CKPT__JSON_NUMBER && key->kind != CKPT__JSON_TRUE &&
                 key->kind != CKPT__JSON_FALSE))
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s in the dict at %s is not a string, int or bool", "a key");
    ckpt_status st = open_value(p, open, c + 1);
    const char *part = key->kind == CKPT__JSON_TRUE ? "True" : key->kind == CKPT__JSON_FALSE ? "False" : key->str;
    path_part(p, f, part, part == key->str ? key->len : strlen(part));
    return st ? st : open_value(p, open, key->end);
}

/* Writes the object from node 0. */
static ckpt_status pickle_object(pickler *p) {
    ckpt__stack open = CKPT__STACK(wframe);
    ckpt_status st = open_value(p, &open, 0);
    while (st == CKPT_OK && open.len) {
        wframe *f = ckpt__stack_top(&open);
        if (f->in_child) {
            f->in_child = false;
            p->path.len = f->saved;
            if (p->path.data) p->path.data[f->saved] = '\0';
            if (f->in_state) {
                ckpt__pkw_op(p->b, 'b'); /* BUILD */
                free(f->share);
                ckpt__stack_pop(&open);
                continue;
            }
            after_child(p, f);
        }
        if (f->done < f->count) {
            st = next_child(p, &open, f);
            continue;
        }
        close_frame(p, f);
        if (f->state) {
            f->in_state = f->in_child = true;
            path_part(p, f, "__state__", 9);
            st = open_value(p, &open, f->state);
            continue;
        }
        free(f->share);
        ckpt__stack_pop(&open);
    }
    while (open.len) { /* after an error */
        free(((wframe *)ckpt__stack_top(&open))->share);
        ckpt__stack_pop(&open);
    }
    ckpt__stack_free(&open);
    return st;
}

/* ---- the object's JSON and the tensors' order ---- */

#define TREE_KEY "ckpt.torch_tree" /* the object tree as a conversion passes it (tree_internal.h) */

/* The object as JSON: the tree, else the state dict of the declared
 * tensors, in order. */
static char *object_json(ckpt__output *o) {
    const char *tree = ckpt__pairs_get(ckpt__out_checkpoint_metadata(o), TREE_KEY);
    if (tree) return ckpt__strdup(tree);
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, "{\"__dict__\": [");
    for (size_t i = 0; i < ckpt__out_count(o); i++) {
        const char *name = ckpt__out_tensor_at(o, i)->name;
        ckpt__buf_puts(&b, i ? ", [" : "[");
        ckpt__buf_json_string(&b, name);
        ckpt__buf_puts(&b, ", {\"__tensor__\": ");
        ckpt__buf_json_string(&b, name);
        ckpt__buf_puts(&b, "}]");
    }
    ckpt__buf_puts(&b, "]}");
    if (b.failed) free(b.data);
    return b.failed ? NULL : b.data;
}

/* The declared tensors in the order the pickle first names them (its
 * storages are numbered so, as torch numbers them): the tree's document
 * order.  Each must be in the tree: none is dropped unsaid. */
static ckpt_status tensor_order(pickler *p, size_t *order) {
    const ckpt__json_doc *d = p->doc;
    size_t n = ckpt__out_count(p->o), k = 0;
    for (uint32_t i = 0; i < d->count; i++) {
        uint32_t v = d->nodes[i].kind == CKPT__JSON_OBJECT ? member(d, i, "__tensor__") : 0;
        int64_t t = v && d->nodes[v].kind == CKPT__JSON_STRING && n
                        ? ckpt__name_table_find(&p->tensors, p->names, sizeof *p->names, d->nodes[v].str)
                        : -1;
        if (t >= 0 && !p->placed[t]) p->placed[t] = true, order[k++] = (size_t)t;
    }
    for (size_t i = 0; i < n; i++)
        if (!p->placed[i])
            return ckpt__fail(p->err, CKPT_E_INVALID_ARGUMENT, ckpt__out_path(p->o), p->names[i], -1,
                              "the object tree to write does not hold the tensor '%s': it would be dropped", p->names[i]);
    return CKPT_OK;
}

/* Parses the object and indexes the declared tensors by name. */
static ckpt_status pickler_init(pickler *p, ckpt__output *o, char *text, ckpt_error *err) {
    size_t n = ckpt__out_count(o), at;
    const char *why;
    *p = (pickler){.o = o, .err = err};
    p->storage = p->cpu = p->latin1 = UNSET;
    ckpt__json_doc *doc = ckpt__malloc(sizeof *doc);
    p->names = ckpt__malloc((n ? n : 1) * sizeof *p->names);
    p->placed = ckpt__calloc(n ? n : 1, sizeof *p->placed);
    if (!doc || !p->names || !p->placed || !ckpt__name_table_init(&p->tensors, n ? n : 1)) {
        free(doc);
        return ckpt__oom(err, ckpt__out_path(o), NULL);
    }
    memset(doc, 0, sizeof *doc);
    p->doc = doc;
    for (size_t i = 0; i < n; i++) {
        p->names[i] = ckpt__out_tensor_at(o, i)->name;
        ckpt__name_table_insert(&p->tensors, p->names, sizeof *p->names, (uint32_t)i, NULL);
    }
    ckpt_status st = ckpt__json_parse(text, strlen(text), doc, &at, &why);
    if (st == CKPT_E_NO_MEMORY) return ckpt__oom(err, ckpt__out_path(o), NULL);
    if (st)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, ckpt__out_path(o), NULL, -1,
                          "the object tree to write is not JSON ckpt reads (%s at its byte %zu)", why ? why : "invalid", at);
    /* Every node is shared at most once, and so are the globals of tensors. */
    p->entry_cap = doc->count + 2 * CKPT_DTYPE_COUNT + 16;
    p->entries = ckpt__malloc(p->entry_cap * sizeof *p->entries);
    if (!p->entries || !ckpt__name_table_init(&p->shared, p->entry_cap)) return ckpt__oom(err, ckpt__out_path(o), NULL);
    return CKPT_OK;
}

static void pickler_free(pickler *p) {
    for (size_t i = 0; i < p->entry_count; i++) free(p->entries[i].key);
    free(p->entries);
    ckpt__name_table_free(&p->shared);
    ckpt__name_table_free(&p->tensors);
    if (p->doc) ckpt__json_free((ckpt__json_doc *)p->doc);
    free((void *)p->doc);
    free(p->names);
    free(p->placed);
    free(p->key);
    free(p->scratch.data);
    free(p->path.data);
}

/* The pickle: protocol 2, the object, STOP. */
static ckpt_status render_pickle(pickler *p, tw_state *s, const tw_tensor *tt, size_t storages) {
    p->s = s, p->tt = tt, p->b = &s->pickle;
    if (!(p->key = ckpt__malloc((storages ? storages : 1) * sizeof *p->key))) return ckpt__oom(p->err, ckpt__out_path(p->o), NULL);
    memset(p->key, 0xFF, (storages ? storages : 1) * sizeof *p->key);
    ckpt__pkw_op(p->b, 0x80);
    ckpt__pkw_op(p->b, 2);
    ckpt_status st = pickle_object(p);
    ckpt__pkw_op(p->b, '.');
    if (st == CKPT_OK && (p->b->failed || p->scratch.failed || p->path.failed)) st = ckpt__oom(p->err, ckpt__out_path(p->o), NULL);
    return st;
}

/* ---- the output format ------------------------------------------------------------ */

static const char *const fixed_before[] = {".format_version", "1", ".storage_alignment", "64", "byteorder", "little"};

/* The archive's records: data.pkl, three small ones, one per storage
 * (data/<k>, filled by tensor filler[k]), version, the id. */
static ckpt_status plan_records(ckpt__output *o, tw_state *s, const size_t *filler, size_t storages, ckpt_error *err) {
    ckpt__arena *a = ckpt__out_arena(o);
    const char *path = ckpt__out_path(o);
    s->count = storages + 6;
    s->records = ckpt__arena_alloc(a, s->count * sizeof *s->records);
    s->contents = ckpt__arena_alloc(a, s->count * sizeof *s->contents);
    s->filler = ckpt__arena_alloc(a, s->count * sizeof *s->filler);
    s->folder = archive_folder(a, ckpt__path_basename(path));
    if (!s->records || !s->contents || !s->filler || !s->folder) return ckpt__oom(err, path, NULL);
    memset(s->records, 0, s->count * sizeof *s->records);
    memset(s->contents, 0, s->count * sizeof *s->contents);
    s->records[0].name = "data.pkl";
    for (size_t k = 0; k < 3; k++)
        s->records[1 + k] = (ckpt__torch_record){.name = fixed_before[2 * k], .size = strlen(fixed_before[2 * k + 1])},
        s->contents[1 + k] = fixed_before[2 * k + 1];
    for (size_t k = 0; k < storages; k++) {
        char name[32];
        snprintf(name, sizeof name, "data/%zu", k);
        s->records[4 + k].name = ckpt__arena_strndup(a, name, strlen(name));
        s->records[4 + k].size = ckpt__out_tensor_at(o, filler[k])->nbytes;
        s->filler[4 + k] = filler[k];
        if (!s->records[4 + k].name) return ckpt__oom(err, path, NULL);
    }
    s->records[4 + storages] = (ckpt__torch_record){.name = "version", .size = 2};
    s->contents[4 + storages] = "3\n";
    s->records[5 + storages] = (ckpt__torch_record){.name = ".data/serialization_id", .size = 40};
    s->contents[5 + storages] = s->serial;
    return CKPT_OK;
}

static ckpt_status tw_plan(ckpt__output *o, ckpt_error *err) {
    const char *path = ckpt__out_path(o);
    if (ckpt__out_options(o)->checksums)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "a torch.save file has no metadata to record checksums in (its records carry CRC-32s)");
    size_t n = ckpt__out_count(o), storages = 0;
    tw_state *s = ckpt__arena_alloc(ckpt__out_arena(o), sizeof *s);
    tw_tensor *tt = ckpt__malloc((n ? n : 1) * sizeof *tt);
    size_t *filler = ckpt__malloc((n ? n : 1) * sizeof *filler), *order = ckpt__malloc((n ? n : 1) * sizeof *order);
    char *object = object_json(o);
    pickler p = {0};
    if (s) memset(s, 0, sizeof *s), *ckpt__out_format_state(o) = s;
    ckpt_status st = !s || !tt || !filler || !order || !object ? ckpt__oom(err, path, NULL) : CKPT_OK;
    if (st == CKPT_OK) st = pickler_init(&p, o, object, err);
    if (st == CKPT_OK) st = tensor_order(&p, order);
    if (st == CKPT_OK) st = plan_storages(o, order, tt, filler, &storages, err);
    if (st == CKPT_OK) st = plan_records(o, s, filler, storages, err);
    if (st == CKPT_OK) st = render_pickle(&p, s, tt, storages);
    if (st == CKPT_OK) {
        s->records[0].size = s->pickle.len;
        s->contents[0] = s->pickle.data ? s->pickle.data : "";
        const char *base = ckpt__path_basename(path);
        st = ckpt__out_set_files(o, 1, &base, err);
    }
    if (st && s) free(s->pickle.data), s->pickle.data = NULL;
    pickler_free(&p);
    free(object);
    free(tt);
    free(filler);
    free(order);
    return st;
}

/* The archive's bytes from record `from` up to the data of the next
 * storage record (or to the archive's end), appended to `b`: each local
 * header, then a fixed record's content and descriptor.  Returns the
 * index of the storage record reached (s->count at the end). */
static size_t render_from(tw_state *s, size_t from, ckpt__buf *b) {
    size_t i = from;
    for (; i < s->count; i++) {
        ckpt__torch_record *r = &s->records[i];
        if (r->name[0] == '.' && !strcmp(r->name, ".data/serialization_id") &&
            ckpt__torch_serialization_id(s->records, i, s->serial) != CKPT_OK)
            b->failed = true; /* out of memory: the caller reports it */
        if (s->contents[i]) r->crc = (uint32_t)crc32_z(0, (const unsigned char *)s->contents[i], (size_t)r->size);
        ckpt__torch_local_header(b, s->folder, r);
        if (!s->contents[i]) return i;
        ckpt__buf_append(b, s->contents[i], (size_t)r->size);
        ckpt__torch_descriptor(b, r);
    }
    ckpt__torch_directory(b, s->folder, s->records, s->count, s->cd_at);
    return i;
}

static ckpt_status tw_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    tw_state *s = state_of(o);
    s->cd_at = ckpt__torch_records_place(s->folder, s->records, s->count, 0);
    for (size_t k = 4; k < s->count; k++)
        if (!s->contents[k]) ckpt__out_tensor_at(o, s->filler[k])->offset = s->records[k].data;
    render_from(s, 0, head); /* up to the first storage's data */
    ckpt__out_set_file_size(o, file, s->cd_at + ckpt__torch_directory_size(s->folder, s->records, s->count));
    return head->failed ? ckpt__oom(err, ckpt__out_path(o), NULL) : CKPT_OK;
}

/* After the data: each storage's descriptor (its CRC-32) and what follows
 * it up to the next storage's data; the id and the directory last. */
static ckpt_status tw_finish(ckpt__output *o, ckpt_error *err) {
    tw_state *s = state_of(o);
    ckpt_status st = CKPT_OK;
    for (size_t k = 4; k < s->count; k++)
        if (!s->contents[k]) s->records[k].crc = ckpt__out_tensor_at(o, s->filler[k])->crc32;
    for (size_t k = 4; st == CKPT_OK && k < s->count && !s->contents[k];) {
        ckpt__buf b = {0};
        ckpt__torch_descriptor(&b, &s->records[k]);
        size_t next = render_from(s, k + 1, &b);
        st = b.failed ? ckpt__oom(err, ckpt__out_path(o), NULL)
                      : ckpt__out_patch(o, 0, s->records[k].data + s->records[k].size, b.data, b.len, err);
        free(b.data);
        k = next;
    }
    free(s->pickle.data);
    s->pickle.data = NULL;
    return st;
}

static ckpt_status tw_accepts(const char *path, const char *name, ckpt_dtype dtype, uint32_t ndim,
                              const uint64_t *shape, ckpt_error *err) {
    (void)ndim, (void)shape;
    if (ckpt__torch_type_of(dtype)) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_UNSUPPORTED_DTYPE, path, name, -1,
                      "torch has no %s dtype: cast it to a float dtype (e.g. BF16), or write GGUF",
                      ckpt_dtype_name(dtype));
}

/* transformers' pytorch_model.bin is a torch.save file too. */
static const char *const tw_suffixes[] = {".pt", ".pth", ".bin", NULL};

const ckpt__output_format ckpt__output_torch = {
    .name = "torch",
    .id = CKPT_FORMAT_TORCH,
    .suffixes = tw_suffixes,
    .layouts = CKPT__LAYOUT_FILE,
    .plan = tw_plan,
    .layout = tw_layout,
    .finish = tw_finish,
    .owns = ckpt__out_owns_none,
    .needs = ckpt__out_needs_crc32,
    .dedup = false, /* storages are shared by the format itself (plan_storages) */
    .accepts = tw_accepts,
};
