/* torch.c — see torch.h. */
#include "torch.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "../base/value.h"
#include "pickle.h"
#include "format.h"
#include "torch_allowed.h"
#include "torch_save.h"
#include "zip.h"

enum {
    MAX_DEPTH = 500,          /* nesting of the object tree */
    MAX_VISITS = 10000000,    /* node visits while walking (a shared DAG can fan out; real trees: ~1e5) */
};
#define MAX_PICKLE_BYTES (1ULL << 30) /* real pickles are megabytes at most */

/* Whether "module.name" is in a sorted list of them. */
static bool listed(const char *const *list, size_t count, const char *module, const char *name) {
    char full[512];
    const char *key = full;
    return (size_t)snprintf(full, sizeof full, "%s.%s", module, name) < sizeof full &&
           bsearch(&key, list, count, sizeof *list, ckpt__cmp_str) != NULL;
}

ckpt__pk_allowed ckpt__torch_allow(const char *module, const char *name, void *catalog) {
    size_t extra = 0;
    const char *const *allowed = catalog ? ckpt__cat_allowed_globals(catalog, &extra) : NULL;
    if (listed(torch_allowed, sizeof torch_allowed / sizeof torch_allowed[0], module, name)) return CKPT__PK_ALLOW;
    return extra && listed(allowed, extra, module, name) ? CKPT__PK_ALLOW_STATE : CKPT__PK_DENY;
}

/* Bytes per torch element (float4_e2m1fn_x2 packs two values in one). */
static unsigned item_bytes(ckpt_dtype d) { return d == CKPT_F4 ? 1 : ckpt_dtype_bits(d) / 8; }

/* ---- the walk ------------------------------------------------------------ */

typedef struct walker {
    const char *path;
    const char *entry;       /* data.pkl's full name, for messages */
    uint64_t pickle_offset;  /* where data.pkl starts in the file */
    const ckpt__zip *zip; /* NULL for the legacy format: storages are placed after the walk */
    ckpt__arena *arena;
    ckpt_error *err;
    ckpt__torch_file *out;
    size_t cap, storage_cap;
    ckpt__name_table storage_keys; /* over out->storages[].key, sized storage_cap */
    const uint32_t *crc_of_entry;  /* per zip entry: its index in out->crcs plus 1, 0 for none */
    uint64_t visits;
    ckpt_status failed; /* why making a value of the tree failed */
    ckpt__buf name; /* the current dotted path */
} walker;

static ckpt_status fail_at(walker *w, const ckpt__pk_value *v, ckpt_status st, const char *fmt, ...)
    CKPT__PRINTF(4, 5);
static ckpt_status fail_at(walker *w, const ckpt__pk_value *v, ckpt_status st, const char *fmt, ...) {
    char detail[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return ckpt__fail(w->err, st, w->path, w->name.len ? w->name.data : NULL,
                      v ? (int64_t)(w->pickle_offset + v->offset) : -1, "%s: %s", w->entry, detail);
}

static bool as_int(const ckpt__pk_value *v, int64_t *out) {
    if (!v || v->kind != CKPT__PK_INT) return false;
    *out = v->u.i;
    return true;
}

static bool int_tuple(const ckpt__pk_value *v, size_t max, int64_t *out, size_t *n) {
    if (!v || v->kind != CKPT__PK_TUPLE || v->u.seq.count > max) return false;
    for (size_t i = 0; i < v->u.seq.count; i++)
        if (!as_int(v->u.seq.items[i], &out[i])) return false;
    *n = v->u.seq.count;
    return true;
}

/* A persistent id ('storage', type, key, location, numel[, view]) → index
 * into out->storages (each key once). */
static ckpt_status storage_of(walker *w, const ckpt__pk_value *pid, ckpt_dtype *typed, bool *untyped,
                              uint32_t *index) {
    if (!pid || pid->kind != CKPT__PK_PERSID || !pid->u.pid || pid->u.pid->kind != CKPT__PK_TUPLE)
        return fail_at(w, pid, CKPT__D(PICKLE_INVALID), "tensor storage is not a persistent storage id");
    const ckpt__pk_value *t = pid->u.pid;
    size_t n = t->u.seq.count;
    ckpt__pk_value **a = t->u.seq.items;
    if ((n != 5 && n != 6) || a[0]->kind != CKPT__PK_STR || strcmp(a[0]->u.s.data, "storage") ||
        a[1]->kind != CKPT__PK_GLOBAL || a[2]->kind != CKPT__PK_STR || a[4]->kind != CKPT__PK_INT || a[4]->u.i < 0)
        return fail_at(w, pid, CKPT__D(PICKLE_INVALID),
                       "persistent id is not ('storage', StorageType, key, location, numel)");
    const char *type = a[1]->u.global.name;
    *untyped = !strcmp(type, "UntypedStorage");
    *typed = *untyped ? CKPT_U8 : ckpt__torch_storage_dtype(type);
    if (*typed == CKPT_DTYPE_INVALID)
        return fail_at(w, pid, CKPT__D(UNKNOWN_DTYPE), "storage type %s.%s has no safetensors dtype",
                       a[1]->u.global.module, type);
    const char *key = a[2]->u.s.data;
    if (w->out->storage_count) { /* a storage seen before: every tensor of a tied or viewed storage */
        int64_t seen = ckpt__name_table_find(&w->storage_keys, &w->out->storages[0].key, sizeof *w->out->storages, key);
        if (seen >= 0) {
            *index = (uint32_t)seen;
            return CKPT_OK;
        }
    }
    if (n == 6 && a[5]->kind != CKPT__PK_NONE)
        return fail_at(w, pid, CKPT_E_INVALID_ARGUMENT, "legacy storage views (view_metadata) are not supported");
    uint64_t need, offset = 0, comp_size = 0;
    uint32_t crc = 0;
    if (!ckpt__mul_u64((uint64_t)a[4]->u.i, item_bytes(*typed), &need))
        return fail_at(w, pid, CKPT__D(SHAPE_OVERFLOW), "storage '%s' size overflows", key);
    if (w->zip) {
        char rel[300];
        if ((size_t)snprintf(rel, sizeof rel, "data/%s", key) >= sizeof rel)
            return fail_at(w, pid, CKPT__D(PICKLE_INVALID), "storage key too long");
        const ckpt__zip_entry *e = ckpt__zip_find_in_folder(w->zip, rel);
        if (!e) return fail_at(w, pid, CKPT_E_NOT_FOUND, "storage '%s' has no record %s/data/%s", key, w->zip->folder, key);
        if (need > e->size)
            return fail_at(w, pid, CKPT_E_TRUNCATED, "storage '%s' declares %lld elements but its record holds %llu bytes",
                           key, (long long)a[4]->u.i, (unsigned long long)e->size);
        offset = e->data_offset;
        comp_size = e->method == 8 ? e->comp_size : 0;
        crc = w->crc_of_entry[e - w->zip->entries];
    }
    if (w->out->storage_count == w->storage_cap) {
        size_t cap = w->storage_cap ? w->storage_cap * 2 : 16;
        ckpt__torch_storage *s = ckpt__realloc(w->out->storages, cap * sizeof *s);
        if (!s) return fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
        w->out->storages = s;
        w->storage_cap = cap;
        /* Rehash into a table for the new capacity. */
        ckpt__name_table_free(&w->storage_keys);
        if (!ckpt__name_table_init(&w->storage_keys, cap))
            return fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
        for (size_t i = 0; i < w->out->storage_count; i++)
            ckpt__name_table_insert(&w->storage_keys, &s[0].key, sizeof *s, (uint32_t)i, NULL);
    }
    w->out->storages[w->out->storage_count] = (ckpt__torch_storage){key, offset, need, *typed, comp_size, crc};
    *index = (uint32_t)w->out->storage_count++;
    ckpt__name_table_insert(&w->storage_keys, &w->out->storages[0].key, sizeof *w->out->storages, *index, NULL);
    return CKPT_OK;
}

/* _rebuild_tensor[_v2|_v3](storage, storage_offset, size, stride, …[, dtype]) */
static ckpt_status rebuild(walker *w, const ckpt__pk_value *call, int version) {
    const ckpt__pk_value *args = call->u.call.args;
    size_t n = args->u.seq.count;
    ckpt__pk_value **a = args->u.seq.items;
    if (n < 4 || (version == 3 && n < 7))
        return fail_at(w, call, CKPT__D(PICKLE_INVALID), "tensor rebuild with %zu arguments", n);
    ckpt_dtype typed = CKPT_DTYPE_INVALID;
    bool untyped = false;
    uint32_t storage = 0;
    ckpt_status st = storage_of(w, a[0], &typed, &untyped, &storage);
    if (st) return st;
    ckpt_dtype dtype = typed;
    if (version == 3) {
        if (a[6]->kind != CKPT__PK_GLOBAL || strcmp(a[6]->u.global.module, "torch"))
            return fail_at(w, a[6], CKPT__D(PICKLE_INVALID), "_rebuild_tensor_v3 dtype is not a torch dtype");
        const ckpt__torch_type *named = ckpt__torch_type_named(a[6]->u.global.name);
        dtype = named ? named->dtype : CKPT_DTYPE_INVALID;
        if (dtype == CKPT_DTYPE_INVALID)
            return fail_at(w, a[6], CKPT__D(UNKNOWN_DTYPE), "torch.%s has no safetensors dtype", a[6]->u.global.name);
    } else if (untyped) {
        return fail_at(w, call, CKPT__D(PICKLE_INVALID), "untyped storage without a dtype");
    }
    int64_t offset, shape[CKPT_MAX_DIMS], stride[CKPT_MAX_DIMS];
    size_t ndim, nstride;
    if (!as_int(a[1], &offset) || offset < 0 || !int_tuple(a[2], CKPT_MAX_DIMS, shape, &ndim) ||
        !int_tuple(a[3], CKPT_MAX_DIMS, stride, &nstride) || nstride != ndim)
        return fail_at(w, call, CKPT__D(PICKLE_INVALID), "tensor offset, size or stride is malformed");
    unsigned item = item_bytes(dtype);
    ckpt__torch_storage *s = &w->out->storages[storage];
    /* Every element must lie inside the storage: offset + Σ (size−1)·stride. */
    uint64_t numel = 1, last = (uint64_t)offset, t;
    bool dense = true;
    uint64_t expect = 1;
    for (size_t d = ndim; d-- > 0;) {
        if (shape[d] < 0 || stride[d] < 0)
            return fail_at(w, call, CKPT__D(PICKLE_INVALID), "negative size or stride in dimension %zu", d);
        if (!ckpt__mul_u64(numel, (uint64_t)shape[d], &numel))
            return fail_at(w, call, CKPT__D(SHAPE_OVERFLOW), "tensor size overflows");
        if (shape[d] > 1 && (uint64_t)stride[d] != expect) dense = false;
        if (!ckpt__mul_u64(expect, (uint64_t)shape[d], &expect)) expect = UINT64_MAX;
        if (shape[d] > 0 && (!ckpt__mul_u64((uint64_t)(shape[d] - 1), (uint64_t)stride[d], &t) || !ckpt__add_u64(last, t, &last)))
            return fail_at(w, call, CKPT__D(SHAPE_OVERFLOW), "tensor extent overflows");
    }
    uint64_t end_bytes;
    if (numel && (!ckpt__mul_u64(last + 1, item, &end_bytes) || end_bytes > s->nbytes))
        return fail_at(w, call, CKPT_E_TRUNCATED,
                       "tensor reaches byte %llu of storage '%s', which holds %llu bytes",
                       (unsigned long long)(numel ? (last + 1) * item : 0), s->key, (unsigned long long)s->nbytes);
    if (dtype == CKPT_F4 && !dense)
        return fail_at(w, call, CKPT_E_INVALID_ARGUMENT, "non-contiguous float4_e2m1fn_x2 tensors are not supported");

    /* Its name (a long key reached many times through the memo repeats
     * in every name under it), shape and entry. */
    st = ckpt__budget_charge(w->arena->budget,
                             w->name.len + 1 + 2 * ndim * sizeof(uint64_t) + sizeof(ckpt__torch_tensor) + ckpt__cat_tensor_cost(1),
                             w->err, w->path, (int64_t)(w->pickle_offset + call->offset));
    if (st) return st;
    ckpt__torch_tensor *tt = ckpt__grow(w->out->tensors, w->out->count, &w->cap, sizeof *tt, 64);
    if (!tt) return fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
    w->out->tensors = tt;
    ckpt__torch_tensor *x = &w->out->tensors[w->out->count];
    memset(x, 0, sizeof *x);
    x->name = ckpt__arena_strndup(w->arena, w->name.data ? w->name.data : "", w->name.len);
    x->shape = ckpt__arena_alloc(w->arena, (ndim ? ndim : 1) * sizeof *x->shape);
    if (!x->name || !x->shape) return fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
    x->dtype = dtype;
    x->ndim = (uint32_t)ndim;
    for (size_t d = 0; d < ndim; d++) x->shape[d] = (uint64_t)shape[d];
    if (dtype == CKPT_F4 && ndim) x->shape[ndim - 1] *= 2; /* safetensors counts float4 values */
    if (!dense) {
        x->strides = ckpt__arena_alloc(w->arena, ndim * sizeof *x->strides);
        if (!x->strides) return fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
        memcpy(x->strides, stride, ndim * sizeof *stride);
    }
    x->numel = dtype == CKPT_F4 ? numel * 2 : numel;
    x->nbytes = numel * item;
    x->storage = storage;
    x->storage_begin = (uint64_t)offset * item; /* x->offset: set once storages are placed */
    w->out->count++;
    return CKPT_OK;
}

/* Tensor calls: the rebuild functions, and the wrappers around them (at
 * most 8, unwrapped in a loop). */
static ckpt_status tensor(walker *w, const ckpt__pk_value *v, bool *is_tensor) {
    *is_tensor = false;
    ckpt__pk_value inner;                   /* _rebuild_from_type_v2's func(*args), as a call */
    const ckpt__pk_value *parameter = NULL; /* the parameter whose data v is */
    for (int depth = 0; v->kind == CKPT__PK_CALL; depth++) {
        const ckpt__pk_value *f = v->u.call.callable, *args = v->u.call.args;
        if (depth > 8) return fail_at(w, v, CKPT_E_LIMIT, "tensor wrappers nested too deep");
        if (!strcmp(f->u.global.module, "torch._utils")) {
            const char *fn = f->u.global.name;
            int version = !strcmp(fn, "_rebuild_tensor_v2") ? 2 : !strcmp(fn, "_rebuild_tensor_v3") ? 3
                        : !strcmp(fn, "_rebuild_tensor")    ? 1 : 0;
            if (version) {
                *is_tensor = true;
                return rebuild(w, v, version);
            }
            if (!strcmp(fn, "_rebuild_parameter") || !strcmp(fn, "_rebuild_parameter_with_state")) {
                if (!args->u.seq.count) return fail_at(w, v, CKPT__D(PICKLE_INVALID), "parameter without data");
                parameter = v;
                v = args->u.seq.items[0];
                continue;
            }
            if (!strncmp(fn, "_rebuild_", 9))
                return fail_at(w, v, CKPT__D(UNKNOWN_DTYPE), "torch._utils.%s (quantized, sparse, nested or device tensors) "
                               "has no safetensors representation", fn);
        }
        if (!ckpt__pk_is_global(f, "torch._tensor", "_rebuild_from_type_v2")) break;
        /* (func, new_type, args, state): the tensor is func(*args). */
        if (args->u.seq.count < 3 || args->u.seq.items[0]->kind != CKPT__PK_GLOBAL ||
            args->u.seq.items[2]->kind != CKPT__PK_TUPLE)
            return fail_at(w, v, CKPT__D(PICKLE_INVALID), "malformed _rebuild_from_type_v2");
        ckpt__pk_value call = {.kind = CKPT__PK_CALL, .offset = v->offset};
        call.u.call.callable = args->u.seq.items[0];
        call.u.call.args = args->u.seq.items[2];
        inner = call;
        v = &inner;
    }
    return parameter ? fail_at(w, parameter, CKPT__D(PICKLE_INVALID), "parameter data is not a tensor") : CKPT_OK;
}

static void name_push(walker *w, const char *part, size_t *saved) {
    *saved = w->name.len;
    if (w->name.len) ckpt__buf_append(&w->name, ".", 1);
    ckpt__buf_puts(&w->name, part);
}

static void name_pop(walker *w, size_t saved) {
    w->name.len = saved;
    if (w->name.data) w->name.data[saved] = '\0';
}

/* A key's name component: strings as they are, ints in decimal. */
static bool key_text(const ckpt__pk_value *k, char *buf, size_t cap, const char **out) {
    if (k->kind == CKPT__PK_STR) *out = k->u.s.data;
    else if (k->kind == CKPT__PK_INT) snprintf(buf, cap, "%lld", (long long)k->u.i), *out = buf;
    else if (k->kind == CKPT__PK_BOOL) *out = k->u.b ? "True" : "False";
    else return false;
    return true;
}

/* The walk keeps the containers it is inside on a heap stack (a thread's
 * C stack may be 64 KiB; the tree nests up to MAX_DEPTH): one frame per
 * open list, tuple, set, dict or call, saying what is being walked and the
 * value it is being made into. */
typedef enum part { P_ITEMS, P_PAIRS, P_ARGS, P_STATE } part;

typedef struct frame {
    const ckpt__pk_value *v;
    ckpt__value *out;  /* v's value, its items being filled */
    size_t next;       /* the next item (of v, or of a call's args) */
    size_t saved;      /* the name's length before the current child's component */
    uint8_t part;      /* what the children being walked are */
    bool in_child;     /* a child was entered: its end comes first */
} frame;

/* A value of the tree, charged to the budget at the pickle value it stands for. */
static ckpt__value *make(walker *w, const ckpt__pk_value *v, ckpt__value_kind kind, size_t count, const char *text,
                         size_t len) {
    ckpt_status st = ckpt__budget_charge(w->arena->budget, ckpt__value_cost(kind, count, len), w->err, w->path,
                                         (int64_t)(w->pickle_offset + v->offset));
    ckpt__value *out = NULL;
    if (st == CKPT_OK)
        out = text ? ckpt__value_text(w->arena, kind, text, len) : ckpt__value_new(w->arena, kind, count);
    if (!out) w->failed = st ? st : fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
    return out;
}

/* "module.name" of a GLOBAL, in the arena. */
static const char *global_text(walker *w, const ckpt__pk_value *g) {
    size_t m = strlen(g->u.global.module), n = strlen(g->u.global.name);
    char *s = ckpt__arena_alloc(w->arena, m + n + 2);
    if (!s) return NULL;
    memcpy(s, g->u.global.module, m);
    s[m] = '.';
    memcpy(s + m + 1, g->u.global.name, n + 1);
    return s;
}

/* A value with no items: a scalar, bytes, a global. */
static ckpt__value *leaf(walker *w, const ckpt__pk_value *v) {
    ckpt__value *out = NULL;
    const char *g;
    switch (v->kind) {
    case CKPT__PK_NONE: return make(w, v, CKPT__V_NULL, 0, NULL, 0);
    case CKPT__PK_BOOL:
        if ((out = make(w, v, CKPT__V_BOOL, 0, NULL, 0))) out->u.b = v->u.b;
        return out;
    case CKPT__PK_INT:
        if ((out = make(w, v, CKPT__V_INT, 0, NULL, 0))) out->u.i = v->u.i;
        return out;
    case CKPT__PK_FLOAT:
        if ((out = make(w, v, CKPT__V_FLOAT, 0, NULL, 0))) out->u.f = v->u.f;
        return out;
    case CKPT__PK_STR: return make(w, v, CKPT__V_STR, 0, v->u.s.data, strlen(v->u.s.data));
    case CKPT__PK_BYTES: return make(w, v, CKPT__V_BYTES, 0, v->u.s.data, v->u.s.len);
    case CKPT__PK_BIGINT: return make(w, v, CKPT__V_BIGINT, 0, v->u.s.data, v->u.s.len);
    case CKPT__PK_GLOBAL:
        if (!(g = global_text(w, v))) return w->failed = fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory"), NULL;
        return make(w, v, CKPT__V_GLOBAL, 0, g, strlen(g));
    case CKPT__PK_PERSID: w->failed = fail_at(w, v, CKPT__D(PICKLE_INVALID), "a storage outside any tensor"); return NULL;
    default: w->failed = fail_at(w, v, CKPT__D(PICKLE_INVALID), "unexpected value"); return NULL;
    }
}

/* A container's value, its items to be filled, and what its frame walks first. */
static ckpt__value *container(walker *w, const ckpt__pk_value *v, uint8_t *first) {
    ckpt__value *out = NULL;
    *first = P_ITEMS;
    switch (v->kind) {
    case CKPT__PK_LIST: return make(w, v, CKPT__V_LIST, v->u.seq.count, NULL, 0);
    /* A torch.Size and an OrderedDict say their class, which torch.load gives back. */
    case CKPT__PK_TUPLE:
        if ((out = make(w, v, CKPT__V_TUPLE, v->u.seq.count, NULL, 0)) && v->type == CKPT__PK_TORCH_SIZE)
            out->cls = "torch.Size";
        return out;
    case CKPT__PK_SET: return make(w, v, CKPT__V_SET, v->u.seq.count, NULL, 0);
    case CKPT__PK_DICT:
        *first = P_PAIRS;
        if ((out = make(w, v, CKPT__V_DICT, v->u.seq.count / 2, NULL, 0)) && v->type == CKPT__PK_ORDERED_DICT)
            out->cls = "collections.OrderedDict";
        return out;
    case CKPT__PK_CALL:
        *first = P_ARGS;
        if ((out = make(w, v, CKPT__V_CALL, v->u.call.args->u.seq.count, NULL, 0)) &&
            !(out->cls = global_text(w, v->u.call.callable)))
            return w->failed = fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory"), NULL;
        return out;
    default: return leaf(w, v);
    }
}

/* Makes v's value into *slot: a leaf (a tensor, a scalar) whole, a
 * container with its frame pushed. */
static ckpt_status visit(walker *w, ckpt__stack *frames, const ckpt__pk_value *v, ckpt__value **slot) {
    if (frames->len > MAX_DEPTH)
        return fail_at(w, v, CKPT_E_LIMIT, "object tree nested deeper than %d (or cyclic)", MAX_DEPTH);
    if (++w->visits > MAX_VISITS) return fail_at(w, v, CKPT_E_LIMIT, "object tree too large when expanded");
    bool is_tensor;
    ckpt_status st = tensor(w, v, &is_tensor);
    if (st) return st;
    uint8_t first = P_ITEMS;
    const char *name = w->name.data ? w->name.data : "";
    *slot = is_tensor ? make(w, v, CKPT__V_TENSOR, 0, name, strlen(name)) : container(w, v, &first);
    if (!*slot) return w->failed;
    if (is_tensor || !ckpt__value_is_container(*slot)) return CKPT_OK;
    frame *f = ckpt__stack_push(frames);
    if (!f) return fail_at(w, NULL, CKPT_E_NO_MEMORY, "out of memory");
    *f = (frame){.v = v, .out = *slot, .part = first};
    return CKPT_OK;
}

/* Enters child `c` of the top frame, whose name component is `component`,
 * into *slot. */
static ckpt_status enter(walker *w, ckpt__stack *frames, const ckpt__pk_value *c, const char *component,
                         ckpt__value **slot) {
    frame *f = ckpt__stack_top(frames);
    name_push(w, component, &f->saved);
    f->in_child = true;
    return visit(w, frames, c, slot);
}

/* The next dict entry: its key made, its value entered. */
static ckpt_status next_pair(walker *w, ckpt__stack *frames, frame *f) {
    const ckpt__pk_value *v = f->v, *key = v->u.seq.items[f->next], *value = v->u.seq.items[f->next + 1];
    const char *component;
    char buf[32];
    if (!key_text(key, buf, sizeof buf, &component))
        return fail_at(w, key, CKPT__D(PICKLE_INVALID), "dictionary key is not a string, int or bool");
    size_t pair = f->next / 2;
    ckpt__value **slots = f->out->u.items;
    if (!(slots[2 * pair] = leaf(w, key))) return w->failed;
    f->next += 2;
    return enter(w, frames, value, component, &slots[2 * pair + 1]);
}

/* One step of the top frame: the end of the child it entered, then its
 * next child, its state (a dict's or a call's, after its items:
 * "__state__" in the names), or its end (the frame popped). */
static ckpt_status step(walker *w, ckpt__stack *frames) {
    frame *f = ckpt__stack_top(frames);
    if (f->in_child) {
        f->in_child = false;
        name_pop(w, f->saved);
    }
    const ckpt__pk_value *v = f->v, *items = f->part == P_ARGS ? v->u.call.args : v;
    if (f->part == P_PAIRS && f->next + 1 < v->u.seq.count) return next_pair(w, frames, f);
    if ((f->part == P_ITEMS || f->part == P_ARGS) && f->next < items->u.seq.count) {
        char component[32];
        snprintf(component, sizeof component, "%zu", f->next);
        size_t i = f->next++;
        return enter(w, frames, items->u.seq.items[i], component, &f->out->u.items[i]);
    }
    if ((f->part == P_PAIRS || f->part == P_ARGS) && v->state) {
        f->part = P_STATE;
        return enter(w, frames, v->state, "__state__", &f->out->state);
    }
    ckpt__stack_pop(frames);
    return CKPT_OK;
}

/* Walks the object tree into out->tensors, out->storages and out->tree. */
static ckpt_status walk_root(walker *w, const ckpt__pk_value *root) {
    ckpt__stack frames = CKPT__STACK(frame);
    ckpt_status st = visit(w, &frames, root, &w->out->tree);
    while (st == CKPT_OK && frames.len) st = step(w, &frames);
    ckpt__stack_free(&frames);
    if (st == CKPT_OK && w->name.failed) st = ckpt__fail(w->err, CKPT_E_NO_MEMORY, w->path, NULL, -1, "out of memory");
    if (st) w->out->tree = NULL;
    free(w->name.data);
    return st;
}

/* Tensor offsets, once every storage has its place in the file. */
static void place_tensors(ckpt__torch_file *out) {
    for (size_t i = 0; i < out->count; i++)
        out->tensors[i].offset = out->storages[out->tensors[i].storage].offset + out->tensors[i].storage_begin;
}

/* The CRC-32s the archive records, into out->crcs; *crc_of_entry[i] is
 * entry i's index there plus 1 (0: it records none). */
static ckpt_status recorded_crcs(const ckpt__zip *zip, const char *path, ckpt__torch_file *out,
                                 uint32_t **crc_of_entry, ckpt_error *err) {
    out->crcs = ckpt__malloc(zip->count * sizeof *out->crcs);
    *crc_of_entry = ckpt__calloc(zip->count, sizeof **crc_of_entry);
    if (!out->crcs || !*crc_of_entry) return ckpt__oom(err, path, "the archive's checksums");
    for (size_t i = 0; i < zip->count; i++)
        if (ckpt__zip_recorded_crc(&zip->entries[i], &out->crcs[out->crc_count]))
            (*crc_of_entry)[i] = (uint32_t)++out->crc_count;
    return CKPT_OK;
}

ckpt_status ckpt__torch_read_zip(ckpt__source *src, ckpt__pk_allow_fn allow, void *allow_user, ckpt__arena *arena,
                                 ckpt__torch_file *out, ckpt_error *err) {
    ckpt__torch_options o = {NULL, allow, allow_user};
    return ckpt__torch_read_zip_ex(src, arena, &o, out, err);
}

ckpt_status ckpt__torch_read_zip_ex(ckpt__source *src, ckpt__arena *arena, const ckpt__torch_options *o,
                                    ckpt__torch_file *out, ckpt_error *err) {
    const char *path = src->name;
    ckpt__pk_allow_fn allow = o && o->allow ? o->allow : ckpt__torch_allow;
    void *allow_user = o && o->allow ? o->allow_user : NULL;
    memset(out, 0, sizeof *out);
    ckpt__zip zip;
    ckpt_status st = ckpt__zip_open(src, true, arena, &zip, err);
    if (st) return st;
    if (ckpt__zip_find_in_folder(&zip, "constants.pkl")) {
        ckpt__zip_close(&zip);
        return ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, path, NULL, -1,
                          "this is a TorchScript archive (torch.jit.save), not a torch.save checkpoint");
    }
    const ckpt__zip_entry *pkl = ckpt__zip_find_in_folder(&zip, "data.pkl");
    if (!pkl) {
        ckpt__zip_close(&zip);
        return ckpt__fail(err, CKPT__D(ZIP_INVALID), path, NULL, -1, "archive has no %s/data.pkl record", zip.folder);
    }
    char *byteorder = NULL, *pickle = NULL;
    const ckpt__zip_entry *bo = ckpt__zip_find_in_folder(&zip, "byteorder");
    if (bo) {
        st = ckpt__zip_read_entry(src, bo, 16, &byteorder, err);
        if (st == CKPT_OK && strcmp(byteorder, "little") && strcmp(byteorder, "big"))
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, bo->name, (int64_t)bo->data_offset,
                            "byteorder record is neither 'little' nor 'big'");
        out->big_endian = st == CKPT_OK && !strcmp(byteorder, "big");
    }
    /* ckpt finds storages by key and their data from the zip directory, so
     * neither record changes how it reads; they are checked all the same. */
    static const char *const numeric[] = {".format_version", ".storage_alignment"};
    for (int i = 0; st == CKPT_OK && i < 2; i++) {
        const ckpt__zip_entry *e = ckpt__zip_find_in_folder(&zip, numeric[i]);
        char *text = NULL;
        if (!e) continue;
        st = ckpt__zip_read_entry(src, e, 32, &text, err);
        if (st == CKPT_OK && (!text[0] || strspn(text, "0123456789\n") != strlen(text)))
            st = ckpt__fail(err, CKPT__D(ZIP_INVALID), path, e->name, (int64_t)e->data_offset,
                            "record is not a decimal number");
        free(text);
    }
    /* The pickle is read whole, and its values are in the arena until the
     * catalog closes: both count against the metadata budget.  (A size
     * over the limit, or beyond what DEFLATE expands to, 1032:1, is refused
     * by the read before it allocates anything: not charged.) */
    bool plausible = pkl->size <= MAX_PICKLE_BYTES && (pkl->method != 8 || pkl->size / 1032 <= pkl->comp_size + 1);
    uint64_t pickle_bytes = plausible ? pkl->size : 0;
    if (st == CKPT_OK) st = ckpt__budget_charge(arena->budget, pickle_bytes, err, path, (int64_t)pkl->data_offset);
    if (st == CKPT_OK) st = ckpt__zip_read_entry(src, pkl, MAX_PICKLE_BYTES, &pickle, err);
    ckpt__pk_value *root = NULL;
    if (st == CKPT_OK) {
        ckpt__pk_source pk = {path, pkl->name, pkl->method == 0 ? pkl->data_offset : 0};
        size_t used;
        st = ckpt__pk_load((const unsigned char *)pickle, (size_t)pkl->size, &pk, allow, allow_user, arena, &root,
                           &used, err);
    }
    uint32_t *crc_of_entry = NULL;
    if (st == CKPT_OK) st = recorded_crcs(&zip, path, out, &crc_of_entry, err);
    if (st == CKPT_OK) {
        walker w = {.path = path, .entry = pkl->name, .pickle_offset = pkl->data_offset, .zip = &zip,
                    .crc_of_entry = crc_of_entry, .arena = arena, .err = err, .out = out};
        if (o && o->name_prefix) ckpt__buf_puts(&w.name, o->name_prefix);
        st = walk_root(&w, root);
        ckpt__name_table_free(&w.storage_keys);
    }
    if (st == CKPT_OK) place_tensors(out);
    free(crc_of_entry);
    free(pickle);
    ckpt__budget_release(arena->budget, pickle_bytes);
    free(byteorder);
    ckpt__zip_close(&zip);
    if (st) ckpt__torch_file_free(out);
    return st;
}

/* ---- the legacy stream format (torch.save(..., _use_new_zipfile_serialization=False)) -- */

/* The magic number 0x1950a86a20f9469cfc6c that starts a legacy file, as
 * pickled LONG1 bytes (little-endian). */
static const unsigned char legacy_magic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

/* Does a file start like a legacy (pre-1.6 stream) torch.save file? */
static bool sniff_legacy(const unsigned char *head, size_t n) {
    /* PROTO, a FRAME from protocol 4 on, then LONG1 of 10 bytes: the magic. */
    size_t i = 0;
    if (n >= 2 && head[0] == 0x80) i = 2;
    if (i < n && head[i] == 0x95) i += 9;
    return n >= i + 12 && head[i] == 0x8a && head[i + 1] == 10 && !memcmp(head + i + 2, legacy_magic, 10);
}

static ckpt__pk_allowed always_refuse(const char *module, const char *name, void *user) {
    (void)module, (void)name, (void)user;
    return CKPT__PK_DENY;
}

/*
 * Reads a legacy torch.save file: the pickles magic number, protocol 1001,
 * sys_info (little_endian), the object (storages as 6-tuple persistent ids)
 * and the sorted storage keys, then each storage as an int64 element count
 * and its bytes.
 */
static ckpt_status read_legacy(ckpt__source *src, ckpt__pk_allow_fn allow, void *allow_user, ckpt__arena *arena,
                               ckpt__torch_file *out, ckpt_error *err) {
    const char *path = src->name;
    uint64_t file_size = src->size;
    memset(out, 0, sizeof *out);
    /* The pickles come first and their length is unknown: read a prefix,
     * and read more while the pickles run past it. */
    uint64_t have = file_size < (64u << 20) ? file_size : (64u << 20), read_so_far = 0;
    unsigned char *buf = NULL;
    ckpt_status st;
    ckpt__pk_value *values[5];
    size_t pos;
    uint64_t charged = 0; /* the buffer's bytes, charged to the metadata budget */
    for (;;) {
        st = ckpt__budget_charge(arena->budget, have - charged, err, path, (int64_t)charged);
        unsigned char *grown = st ? NULL : ckpt__realloc(buf, have ? (size_t)have : 1);
        if (!grown) {
            free(buf);
            ckpt__budget_release(arena->budget, charged);
            return st ? st : ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "cannot allocate %llu bytes", (unsigned long long)have);
        }
        charged = have;
        buf = grown;
        st = ckpt__source_read(src, buf + read_so_far, have - read_so_far, read_so_far, err);
        read_so_far = have;
        pos = 0;
        for (int k = 0; st == CKPT_OK && k < 5; k++) {
            ckpt__pk_source pk = {path, k == 3 ? "object pickle" : "header pickle", pos};
            size_t used = 0;
            /* Only the object pickle may name (allowed) globals. */
            st = ckpt__pk_load(buf + pos, (size_t)(have - pos), &pk, k == 3 ? (allow ? allow : ckpt__torch_allow) : always_refuse,
                               allow_user, arena, &values[k], &used, err);
            pos += used;
        }
        if (st != CKPT_E_CORRUPT || have == file_size || have >= MAX_PICKLE_BYTES) break;
        have = have * 2 < file_size ? have * 2 : file_size; /* maybe cut short: read more */
    }
    free(buf);
    ckpt__budget_release(arena->budget, charged);
    if (st) return st;
    const ckpt__pk_value *magic = values[0], *version = values[1], *info = values[2], *keys = values[4];
    if (magic->kind != CKPT__PK_BIGINT || magic->u.s.len != 10 || memcmp(magic->u.s.data, legacy_magic, 10))
        return ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, path, NULL, 0, "not a legacy torch.save file (bad magic number)");
    if (version->kind != CKPT__PK_INT || version->u.i != 1001)
        return ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, path, NULL, (int64_t)version->offset,
                          "legacy torch.save protocol version is not 1001");
    if (info->kind == CKPT__PK_DICT)
        for (size_t i = 0; i + 1 < info->u.seq.count; i += 2)
            if (info->u.seq.items[i]->kind == CKPT__PK_STR && !strcmp(info->u.seq.items[i]->u.s.data, "little_endian"))
                out->big_endian = info->u.seq.items[i + 1]->kind == CKPT__PK_BOOL && !info->u.seq.items[i + 1]->u.b;

    walker w = {.path = path, .entry = "object pickle", .arena = arena, .err = err, .out = out};
    st = walk_root(&w, values[3]);
    if (st == CKPT_OK && keys->kind != CKPT__PK_LIST)
        st = ckpt__fail(err, CKPT__D(PICKLE_INVALID), path, NULL, (int64_t)keys->offset, "storage key list is not a list");
    /* The storages follow, in the key list's order: int64 count, then data. */
    uint64_t at = pos;
    for (size_t k = 0; st == CKPT_OK && k < keys->u.seq.count; k++) {
        const ckpt__pk_value *key = keys->u.seq.items[k];
        if (key->kind != CKPT__PK_STR) {
            st = ckpt__fail(err, CKPT__D(PICKLE_INVALID), path, NULL, (int64_t)at, "storage key is not a string");
            break;
        }
        int64_t found = out->storage_count ? ckpt__name_table_find(&w.storage_keys, &out->storages[0].key,
                                                                   sizeof *out->storages, key->u.s.data)
                                           : -1;
        ckpt__torch_storage *s = found >= 0 ? &out->storages[found] : NULL;
        unsigned char count_le[8];
        if ((st = ckpt__source_read(src, count_le, 8, at, err))) break;
        uint64_t numel = out->big_endian ? ckpt__load_be(count_le, 8) : ckpt__le64(count_le), nbytes;
        unsigned item = s ? item_bytes(s->dtype) : 1;
        if (!s) {
            st = ckpt__fail(err, CKPT__D(PICKLE_INVALID), path, NULL, (int64_t)at,
                            "storage '%s' is listed but no tensor uses it (its element size is unknown)", key->u.s.data);
        } else if (!ckpt__mul_u64(numel, item, &nbytes) || nbytes != s->nbytes || at + 8 + nbytes > file_size ||
                   at + 8 + nbytes < at) {
            st = ckpt__fail(err, at + 8 + nbytes > file_size ? CKPT_E_TRUNCATED : CKPT__D(PICKLE_INVALID), path, NULL,
                            (int64_t)at, "storage '%s' records %llu elements; the pickle declared %llu bytes and the "
                            "file has %llu bytes left", key->u.s.data, (unsigned long long)numel,
                            (unsigned long long)s->nbytes, (unsigned long long)(file_size - at - 8));
        } else {
            s->offset = at + 8;
            at += 8 + nbytes;
        }
    }
    ckpt__name_table_free(&w.storage_keys);
    for (size_t i = 0; st == CKPT_OK && i < out->storage_count; i++)
        if (!out->storages[i].offset && out->storages[i].nbytes)
            st = ckpt__fail(err, CKPT_E_NOT_FOUND, path, NULL, -1, "storage '%s' is not in the file's key list",
                            out->storages[i].key);
    if (st == CKPT_OK) place_tensors(out);
    if (st) ckpt__torch_file_free(out);
    return st;
}

/* Does a file start like a tar archive (the torch format before the
 * legacy stream)? */
static bool sniff_tar(const unsigned char *head, size_t n) {
    return n >= 262 && !memcmp(head + 257, "ustar", 5);
}

void ckpt__torch_file_free(ckpt__torch_file *f) {
    free(f->tensors);
    free(f->storages);
    free(f->crcs);
    memset(f, 0, sizeof *f);
}

/* ---- the formats --------------------------------------------------------- */

ckpt_status ckpt__torch_add_crcs(ckpt_catalog *c, uint32_t file, const ckpt__torch_file *tf, uint64_t at,
                                 uint32_t *first, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    *first = 0;
    for (size_t i = 0; st == CKPT_OK && i < tf->crc_count; i++) {
        ckpt__recorded_crc r = tf->crcs[i];
        uint32_t index;
        r.offset += at;
        st = ckpt__cat_add_crc(c, file, &r, &index, err);
        if (i == 0) *first = index;
    }
    return st;
}

/* Adds what a reader found: recorded CRC-32s, storages, then tensors as
 * pieces of them. */
static ckpt_status add_to_catalog(ckpt_catalog *c, uint32_t file, ckpt__torch_file *tf, ckpt_error *err) {
    uint32_t first = 0, first_crc = 0;
    ckpt_status st = ckpt__torch_add_crcs(c, file, tf, 0, &first_crc, err);
    for (size_t i = 0; st == CKPT_OK && i < tf->storage_count; i++) {
        const ckpt__torch_storage *s = &tf->storages[i];
        uint32_t number;
        st = ckpt__cat_add_storage(c, file, s->offset, s->nbytes, &number, err);
        if (i == 0) first = number;
    }
    for (size_t i = 0; st == CKPT_OK && i < tf->count; i++) {
        const ckpt__torch_tensor *t = &tf->tensors[i];
        const ckpt__torch_storage *s = &tf->storages[t->storage];
        ckpt__piece piece = {.file = file, .offset = t->offset, .strides = t->strides, .big_endian = tf->big_endian,
                             .crc = s->crc ? first_crc + s->crc : 0};
        if (s->comp_size) { /* inside a DEFLATE record: offsets count inflated bytes */
            piece.offset = t->storage_begin;
            piece.record = s->offset;
            piece.record_size = s->comp_size;
        }
        ckpt__tensor_decl d = {t->name, t->dtype, t->ndim, t->shape, first + t->storage, &piece, 1};
        st = ckpt__cat_add_tensor(c, &d, err);
    }
    /* The catalog takes the tree over: always, since a dict's keys and its
     * nesting both make dots in the names ({"conv1.weight": …} of a state
     * dict and {"conv1": {"weight": …}} read alike), and only the tree says
     * which torch.load gives. */
    if (st == CKPT_OK) {
        st = ckpt__cat_set_tree(c, tf->tree, err);
        tf->tree = NULL;
    }
    ckpt__cat_set_format(c, CKPT_FORMAT_TORCH);
    return st;
}

static ckpt_status open_torch(ckpt_catalog *c, ckpt__source *src, bool legacy, ckpt_error *err) {
    uint32_t file;
    ckpt_status st = ckpt__cat_add_source(c, src, &file, err);
    if (st) return st;
    ckpt__torch_file tf;
    st = legacy ? read_legacy(src, ckpt__torch_allow, c, ckpt__cat_arena(c), &tf, err)
                : ckpt__torch_read_zip(src, ckpt__torch_allow, c, ckpt__cat_arena(c), &tf, err);
    if (st) return st;
    st = add_to_catalog(c, file, &tf, err);
    ckpt__torch_file_free(&tf);
    return st;
}

static int zip_probe(const unsigned char *head, size_t n, const char *name) {
    (void)name;
    if (!ckpt__zip_sniff(head, n)) return CKPT__PROBE_NO;
    /* torch.save puts every record in one top folder ("archive/data.pkl"):
     * a first record outside any folder is some other ZIP archive. */
    size_t len = n >= 30 ? ckpt__le16(head + 26) : 0;
    if (len && 30 + len <= n && !memchr(head + 30, '/', len)) return CKPT__PROBE_NO;
    return CKPT__PROBE_MAGIC;
}

static ckpt_status zip_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) { return open_torch(c, src, false, err); }

static int legacy_probe(const unsigned char *head, size_t n, const char *name) {
    (void)name;
    return sniff_legacy(head, n) ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

static ckpt_status legacy_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) { return open_torch(c, src, true, err); }

static int tar_probe(const unsigned char *head, size_t n, const char *name) {
    (void)name;
    return sniff_tar(head, n) ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

static ckpt_status tar_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    (void)c;
    ckpt_status st = ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, src->name, NULL, 0,
                                "this is a tar archive: the torch.save format of PyTorch before 0.4, which ckpt does not "
                                "read; load and re-save it with a current torch");
    ckpt__source_close(src);
    return st;
}

const ckpt__format ckpt__format_torch_zip = {"torch", CKPT_FORMAT_TORCH, zip_probe, zip_open};
const ckpt__format ckpt__format_torch_legacy = {"torch-legacy", CKPT_FORMAT_TORCH, legacy_probe, legacy_open};
const ckpt__format ckpt__format_torch_tar = {"torch-tar", CKPT_FORMAT_TORCH, tar_probe, tar_open};
