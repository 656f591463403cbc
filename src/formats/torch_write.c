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
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "../io/file.h"
#include "../base/json.h"
#include "../base/value.h"
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
    MAX_NEST = 1000, /* containers open at once; the readers' trees nest less */
};

typedef struct memo_entry {
    char *key; /* a tag and the value: 's' a string, 'g' module\nname, 't' a tuple's elements */
    uint32_t index;
} memo_entry;

typedef struct pickler {
    ckpt__output *o;
    const tw_state *s;
    const tw_tensor *tt;
    const ckpt__value *root; /* the object */
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

/* A number as text (a tree read from JSON); the reader writes ints beyond
 * 64 bits as {"__int_le__": …}, not as numbers. */
static ckpt_status pk_number(pickler *p, const ckpt__value *n) {
    if (ckpt__pkw_number(p->b, n->u.s.data)) return CKPT_OK;
    return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s does not fit in 64 bits", "an integer");
}

/* A big int: LONG1 (LONG4 from 256 bytes), two's complement as CPython writes it. */
static ckpt_status pk_big_int(pickler *p, const ckpt__value *v) {
    if (v->u.s.len > UINT32_MAX) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is malformed", "an integer");
    ckpt__pkw_op(p->b, v->u.s.len < 256 ? 0x8a : 0x8b);
    ckpt__put_le(p->b, v->u.s.len, v->u.s.len < 256 ? 1 : 4);
    ckpt__buf_append(p->b, v->u.s.data, v->u.s.len);
    return CKPT_OK;
}

/* Bytes: protocol 2 pickles them as _codecs.encode(their latin-1 text,
 * 'latin1'), a new object each time (b'' too, which torch.save writes as
 * bytes(), a call torch.load's weights_only unpickler refuses). */
static ckpt_status pk_bytes(pickler *p, const ckpt__value *v) {
    ckpt__buf text = {0};
    ckpt__pkw_latin1(&text, v->u.s.data, v->u.s.len);
    pk_global(p, "_codecs", "encode");
    pk_own_str(p, NULL, text.data ? text.data : "", text.len);
    pk_own_str(p, &p->latin1, "latin1", 6);
    ckpt__pkw_op(p->b, 0x86);
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt__pkw_op(p->b, 'R');
    ckpt__pkw_memo_put(p->b, &p->memo);
    bool failed = text.failed;
    free(text.data);
    return failed ? ckpt__oom(p->err, ckpt__out_path(p->o), NULL) : CKPT_OK;
}

/* A global torch.load(weights_only=True) allows, and that is a value
 * rather than how a tensor or a storage is rebuilt (tensors are written
 * from their declarations): `text` is "module.name". */
static ckpt_status global_name(pickler *p, const char *text, char *module, size_t cap, const char **name) {
    const char *dot = strrchr(text, '.');
    if (!dot || (size_t)(dot - text) >= cap) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is malformed", "a global");
    memcpy(module, text, (size_t)(dot - text));
    module[dot - text] = '\0';
    *name = dot + 1;
    size_t n = strlen(*name);
    bool rebuilds = !strncmp(module, "torch._utils", 12) || !strcmp(module, "torch._tensor") ||
                    !strcmp(module, "torch.storage") || !strcmp(module, "torch.nn.parameter") ||
                    (n >= 7 && !strcmp(*name + n - 7, "Storage")) || (n >= 6 && !strcmp(*name + n - 6, "Tensor"));
    if (ckpt__torch_allow(module, *name, NULL) != CKPT__PK_ALLOW)
        return refuse(p, CKPT__D(PICKLE_FORBIDDEN),
                      "%s (at %s) is outside torch.load's weights_only allowlist: a torch.save file with it would "
                      "not load", text);
    if (rebuilds)
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s (at %s) rebuilds a tensor, which ckpt writes only from its data",
                      text);
    return CKPT_OK;
}

/* The declared tensor named so, or -1. */
static int64_t declared(const pickler *p, const char *name) {
    return ckpt__out_count(p->o) ? ckpt__name_table_find(&p->tensors, p->names, sizeof *p->names, name) : -1;
}

/* A reference to a declared tensor: a rebuild on its storage. */
static ckpt_status pk_tensor_ref(pickler *p, const ckpt__value *name) {
    int64_t i = declared(p, name->u.s.data);
    if (i < 0)
        return refuse(p, CKPT_E_NOT_FOUND, "the object tree names the tensor '%s' (at %s), which is not written",
                      name->u.s.data);
    p->placed[i] = true;
    pk_tensor(p, (size_t)i);
    return CKPT_OK;
}

/* ---- containers, walked with a heap stack (no recursion on the tree's depth) ---- */

typedef enum batching { B_NONE, B_LIST, B_DICT, B_ORDERED } batching;
typedef enum closing { C_NONE, C_TUPLE, C_SIZE, C_SET, C_CALL } closing;

typedef struct wframe {
    const ckpt__value *items; /* the container whose items are being gone through */
    uint32_t next;        /* the next of its items (pairs) */
    uint32_t done, count; /* children written, of all */
    const ckpt__value *shards; /* a root {"__shards__": […]}: its list, items being shard `shard` */
    uint32_t shard;
    const ckpt__value *state; /* written after the children, then BUILD (NULL: none) */
    uint8_t batching, closing;
    bool pairs;          /* the children are a dict's [key, value] pairs */
    bool in_child, in_state;
    size_t saved;        /* the path's length before the current child's part */
    char *share;         /* C_TUPLE: the key the tuple is shared under (malloc'ed), or NULL */
} wframe;

static ckpt_status push(pickler *p, ckpt__stack *open, const ckpt__value *items, uint32_t count, batching batch,
                        closing close, bool pairs) {
    wframe *f = ckpt__stack_push(open);
    if (!f) return ckpt__oom(p->err, ckpt__out_path(p->o), NULL);
    *f = (wframe){.items = items, .count = count, .batching = (uint8_t)batch, .closing = (uint8_t)close, .pairs = pairs};
    return CKPT_OK;
}

/* A scalar's text for the key a tuple of them is shared under, with its
 * kind's tag; 0 for a value no tuple is shared with. */
static char scalar_text(const ckpt__value *v, ckpt__buf *text) {
    static const char hex[] = "0123456789abcdef";
    char num[32];
    switch (v->kind) {
    case CKPT__V_NULL: return 'n';
    case CKPT__V_BOOL: return v->u.b ? 'T' : 'F';
    case CKPT__V_INT: snprintf(num, sizeof num, "%lld", (long long)v->u.i), ckpt__buf_puts(text, num); return 'i';
    case CKPT__V_NUMBER: ckpt__buf_append(text, v->u.s.data, v->u.s.len); return 'i';
    case CKPT__V_FLOAT: ckpt__buf_json_float(text, v->u.f); return 'f';
    case CKPT__V_STR:
        if (memchr(v->u.s.data, 0, v->u.s.len)) return 0;
        ckpt__buf_append(text, v->u.s.data, v->u.s.len);
        return 's';
    case CKPT__V_BIGINT:
        for (size_t i = 0; i < v->u.s.len; i++) {
            unsigned char c = (unsigned char)v->u.s.data[i];
            char h[2] = {hex[c >> 4], hex[c & 15]};
            ckpt__buf_append(text, h, 2);
        }
        return 'L';
    default: return 0;
    }
}

/* The key a tuple of scalars is shared under (NULL: another object each
 * time): each element's kind, length and text. */
static char *tuple_key(pickler *p, const ckpt__value *tuple) {
    ckpt__buf *k = &p->scratch, text = {0};
    k->len = 0;
    ckpt__buf_puts(k, "t");
    for (uint32_t i = 0; i < tuple->count; i++) {
        text.len = 0;
        char tag = scalar_text(tuple->u.items[i], &text);
        if (!tag) {
            free(text.data);
            return NULL;
        }
        char head[24];
        snprintf(head, sizeof head, "%c%zu:", tag, text.len);
        ckpt__buf_puts(k, head);
        ckpt__buf_append(k, text.data ? text.data : "", text.len);
    }
    ckpt__buf_append(k, "", 1);
    bool failed = text.failed;
    free(text.data);
    return k->failed || failed ? NULL : ckpt__strdup(k->data);
}

/* A tuple's opening: its elements follow, then TUPLE1-3 or TUPLE. */
static ckpt_status open_tuple(pickler *p, ckpt__stack *open, const ckpt__value *tuple, closing close, bool shareable) {
    uint32_t count = tuple->count;
    char *key = shareable && count ? tuple_key(p, tuple) : NULL;
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
    ckpt_status st = push(p, open, tuple, count, B_NONE, close, false);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->share = key;
    else free(key);
    return st;
}

/* A dict: a plain one (EMPTY_DICT), or an OrderedDict (its class called
 * with no arguments) with its state (a state dict's _metadata). */
static ckpt_status open_dict(pickler *p, ckpt__stack *open, const ckpt__value *dict) {
    bool ordered = dict->cls && !strcmp(dict->cls, "collections.OrderedDict");
    if (dict->cls && !ordered) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is of a class ckpt does not write", "a dict");
    if (dict->state && !ordered) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s has a state", "a plain dict");
    if (ordered) {
        pk_global(p, "collections", "OrderedDict");
        ckpt__pkw_op(p->b, ')');
        ckpt__pkw_op(p->b, 'R');
    } else {
        ckpt__pkw_op(p->b, '}');
    }
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt_status st = push(p, open, dict, dict->count, ordered ? B_ORDERED : B_DICT, C_NONE, true);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->state = dict->state;
    return st;
}

/* The root {"__shards__": [dict, …]} of a sharded checkpoint: one dict. */
static ckpt_status open_shards(pickler *p, ckpt__stack *open, const ckpt__value *shards) {
    uint64_t count = 0;
    for (uint32_t i = 0; i < shards->count; i++) {
        if (shards->u.items[i]->kind != CKPT__V_DICT) return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is not a dict", "a shard");
        count += shards->u.items[i]->count;
    }
    if (count > UINT32_MAX) return refuse(p, CKPT_E_LIMIT, "%s at %s has too many entries", "the object");
    ckpt__pkw_op(p->b, '}');
    ckpt__pkw_memo_put(p->b, &p->memo);
    ckpt_status st = push(p, open, shards->count ? shards->u.items[0] : NULL, (uint32_t)count, B_DICT, C_NONE, true);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->shards = shards;
    return st;
}

/* A call of an allowed global on arguments (torch.device('cpu'),
 * complex(1, 2), Counter({…})): REDUCE, then BUILD with its state. */
static ckpt_status open_call(pickler *p, ckpt__stack *open, const ckpt__value *call) {
    char module[256];
    const char *name;
    ckpt_status st = global_name(p, call->cls, module, sizeof module, &name);
    if (st) return st;
    pk_global(p, module, name);
    if (call->count > 3) ckpt__pkw_op(p->b, '(');
    st = push(p, open, call, call->count, B_NONE, C_CALL, false);
    if (st == CKPT_OK) ((wframe *)ckpt__stack_top(open))->state = call->state;
    return st;
}

/* Whether v is the root {"__shards__": [...]} of a sharded checkpoint. */
static bool is_shards(const ckpt__value *v) {
    return v->kind == CKPT__V_OBJECT && v->count == 1 && !strcmp(ckpt__value_key(v, 0)->u.s.data, "__shards__") &&
           ckpt__value_at(v, 0)->kind == CKPT__V_LIST;
}

/* A value: a leaf whole, or a container's opening (its frame pushed). */
static ckpt_status open_value(pickler *p, ckpt__stack *open, const ckpt__value *v) {
    if (open->len >= MAX_NEST) return refuse(p, CKPT_E_LIMIT, "%s at %s nests too deep", "the object");
    char module[256];
    const char *name;
    ckpt_status st;
    switch (v->kind) {
    case CKPT__V_NULL: ckpt__pkw_op(p->b, 'N'); return CKPT_OK;
    case CKPT__V_BOOL: ckpt__pkw_op(p->b, v->u.b ? 0x88 : 0x89); return CKPT_OK;
    case CKPT__V_INT: ckpt__pkw_int(p->b, v->u.i); return CKPT_OK;
    case CKPT__V_FLOAT: ckpt__pkw_float(p->b, v->u.f); return CKPT_OK;
    case CKPT__V_NUMBER: return pk_number(p, v);
    case CKPT__V_STR: pk_str(p, v->u.s.data, v->u.s.len); return CKPT_OK;
    case CKPT__V_BYTES: return pk_bytes(p, v);
    case CKPT__V_BIGINT: return pk_big_int(p, v);
    case CKPT__V_TENSOR: return pk_tensor_ref(p, v);
    case CKPT__V_GLOBAL:
        if ((st = global_name(p, v->u.s.data, module, sizeof module, &name)) == CKPT_OK) pk_global(p, module, name);
        return st;
    case CKPT__V_LIST:
        ckpt__pkw_op(p->b, ']');
        ckpt__pkw_memo_put(p->b, &p->memo);
        return push(p, open, v, v->count, B_LIST, C_NONE, false);
    case CKPT__V_DICT: return open_dict(p, open, v);
    case CKPT__V_TUPLE:
        if (!v->cls) return open_tuple(p, open, v, C_TUPLE, true);
        if (strcmp(v->cls, "torch.Size"))
            return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is of a class ckpt does not write", "a tuple");
        pk_global(p, "torch", "Size"); /* torch.Size(tuple): REDUCE */
        return open_tuple(p, open, v, C_SIZE, false);
    case CKPT__V_SET: /* protocol 2: set(list), REDUCE */
        pk_global(p, "builtins", "set");
        ckpt__pkw_op(p->b, ']');
        ckpt__pkw_memo_put(p->b, &p->memo);
        return push(p, open, v, v->count, B_LIST, C_SET, false);
    case CKPT__V_CALL: return open_call(p, open, v);
    default:
        if (is_shards(v) && !open->len) return open_shards(p, open, ckpt__value_at(v, 0));
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s at %s is not one a torch.save file can hold", "the value");
    }
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

/* A dict key's text in the path: a string, a number's digits, True/False; NULL for another value. */
static const char *key_part(const ckpt__value *key, ckpt__buf *text) {
    text->len = 0;
    switch (key->kind) {
    case CKPT__V_STR: case CKPT__V_NUMBER: ckpt__buf_append(text, key->u.s.data, key->u.s.len); break;
    case CKPT__V_BOOL: ckpt__buf_puts(text, key->u.b ? "True" : "False"); break;
    case CKPT__V_INT: case CKPT__V_FLOAT: scalar_text(key, text); break;
    default: return NULL;
    }
    ckpt__buf_append(text, "", 1);
    text->len--;
    return text->failed ? NULL : text->data;
}

/* The next child of f: its path part, then its value (a dict's pair: its
 * key, then its value under the key). */
static ckpt_status next_child(pickler *p, ckpt__stack *open, wframe *f) {
    while (f->shards && f->next == f->items->count) /* the next shard's pairs */
        f->items = f->shards->u.items[++f->shard], f->next = 0;
    uint32_t c = f->next++;
    before_child(p, f);
    f->done++;
    f->in_child = true;
    if (!f->pairs) {
        char index[16];
        path_part(p, f, index, (size_t)snprintf(index, sizeof index, "%u", f->done - 1));
        return open_value(p, open, f->items->u.items[c]);
    }
    const ckpt__value *key = ckpt__value_key(f->items, c), *value = ckpt__value_at(f->items, c);
    ckpt__buf text = {0};
    const char *part = key->kind != CKPT__V_NULL ? key_part(key, &text) : NULL;
    if (!part) {
        free(text.data);
        return refuse(p, CKPT_E_INVALID_ARGUMENT, "%s in the dict at %s is not a string, int or bool", "a key");
    }
    ckpt_status st = open_value(p, open, key);
    path_part(p, f, part, text.len);
    free(text.data);
    return st ? st : open_value(p, open, value);
}

/* Writes the object from its root. */
static ckpt_status pickle_object(pickler *p) {
    ckpt__stack open = CKPT__STACK(wframe);
    ckpt_status st = open_value(p, &open, p->root);
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

/* ---- the object and the tensors' order ---- */

#define TREE_KEY "ckpt.torch_tree" /* the object tree as a conversion passes it (tree_internal.h) */

/* The object: the tree, else the state dict of the declared tensors, in order. */
static ckpt_status object_of(ckpt__output *o, const ckpt__value **object, ckpt_error *err) {
    ckpt_status st = ckpt__out_tree(o, TREE_KEY, object, err);
    if (st || *object) return st;
    ckpt__arena *a = ckpt__out_arena(o);
    size_t n = ckpt__out_count(o);
    ckpt__value *dict = ckpt__value_new(a, CKPT__V_DICT, n);
    for (size_t i = 0; dict && i < n; i++) {
        const char *name = ckpt__out_tensor_at(o, i)->name;
        dict->u.items[2 * i] = ckpt__value_text(a, CKPT__V_STR, name, strlen(name));
        dict->u.items[2 * i + 1] = ckpt__value_text(a, CKPT__V_TENSOR, name, strlen(name));
        if (!dict->u.items[2 * i] || !dict->u.items[2 * i + 1]) dict = NULL;
    }
    *object = dict;
    return dict ? CKPT_OK : ckpt__oom(err, ckpt__out_path(o), NULL);
}

/* The declared tensors in the order the pickle first names them (its
 * storages are numbered so, as torch numbers them): the tree's order, a
 * container's items before its state.  Each must be in the tree: none is
 * dropped unsaid.  *values: how many values the tree has. */
static ckpt_status tensor_order(pickler *p, size_t *order, size_t *values) {
    size_t n = ckpt__out_count(p->o), k = 0;
    ckpt__stack pending = CKPT__STACK(const ckpt__value *);
    const ckpt__value **top = ckpt__stack_push(&pending);
    if (top) *top = p->root;
    *values = 0;
    while (top && pending.len) {
        const ckpt__value *v = *(const ckpt__value **)ckpt__stack_top(&pending);
        ckpt__stack_pop(&pending);
        ++*values;
        int64_t t = v->kind == CKPT__V_TENSOR ? declared(p, v->u.s.data) : -1;
        if (t >= 0 && !p->placed[t]) p->placed[t] = true, order[k++] = (size_t)t;
        if (!ckpt__value_is_container(v)) continue;
        bool pairs = v->kind == CKPT__V_DICT || v->kind == CKPT__V_OBJECT;
        for (size_t i = v->count + (v->state != NULL); top && i-- > 0;) {
            if ((top = ckpt__stack_push(&pending)))
                *top = i == v->count ? v->state : pairs ? ckpt__value_at(v, i) : v->u.items[i];
        }
    }
    ckpt__stack_free(&pending);
    if (!top) return ckpt__oom(p->err, ckpt__out_path(p->o), NULL);
    for (size_t i = 0; i < n; i++)
        if (!p->placed[i])
            return ckpt__fail(p->err, CKPT_E_INVALID_ARGUMENT, ckpt__out_path(p->o), p->names[i], -1,
                              "the object tree to write does not hold the tensor '%s': it would be dropped", p->names[i]);
    return CKPT_OK;
}

/* Indexes the declared tensors by name, and orders them. */
static ckpt_status pickler_init(pickler *p, ckpt__output *o, size_t *order, ckpt_error *err) {
    size_t n = ckpt__out_count(o), values;
    *p = (pickler){.o = o, .err = err};
    p->storage = p->cpu = p->latin1 = UNSET;
    p->names = ckpt__malloc((n ? n : 1) * sizeof *p->names);
    p->placed = ckpt__calloc(n ? n : 1, sizeof *p->placed);
    if (!p->names || !p->placed || !ckpt__name_table_init(&p->tensors, n ? n : 1))
        return ckpt__oom(err, ckpt__out_path(o), NULL);
    for (size_t i = 0; i < n; i++) {
        p->names[i] = ckpt__out_tensor_at(o, i)->name;
        ckpt__name_table_insert(&p->tensors, p->names, sizeof *p->names, (uint32_t)i, NULL);
    }
    ckpt_status st = object_of(o, &p->root, err);
    if (st == CKPT_OK) st = tensor_order(p, order, &values);
    if (st) return st;
    /* Every value is shared at most once, and so are the globals of tensors. */
    p->entry_cap = values + 2 * CKPT_DTYPE_COUNT + 16;
    p->entries = ckpt__malloc(p->entry_cap * sizeof *p->entries);
    if (!p->entries || !ckpt__name_table_init(&p->shared, p->entry_cap)) return ckpt__oom(err, ckpt__out_path(o), NULL);
    return CKPT_OK;
}

static void pickler_free(pickler *p) {
    for (size_t i = 0; i < p->entry_count; i++) free(p->entries[i].key);
    free(p->entries);
    ckpt__name_table_free(&p->shared);
    ckpt__name_table_free(&p->tensors);
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
    pickler p = {0};
    if (s) memset(s, 0, sizeof *s), *ckpt__out_format_state(o) = s;
    ckpt_status st = !s || !tt || !filler || !order ? ckpt__oom(err, path, NULL) : CKPT_OK;
    if (st == CKPT_OK) st = pickler_init(&p, o, order, err);
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
    return ckpt__fail(err, CKPT__D(UNSUPPORTED_DTYPE), path, name, -1,
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
