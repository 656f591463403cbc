/* dcp.c — a torch.distributed.checkpoint directory through its .metadata
 * (see dcp.h). */
#include "dcp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cursor.h"
#include "../io/file.h"
#include "../base/json.h"
#include "pickle.h"
#include "torch.h"
#include "torch_save.h"

#define MAX_METADATA_BYTES (1ULL << 30) /* .metadata of huge models is tens of MB */
enum {
    MAX_DEPTH = 64,       /* nesting in .metadata (torch's is 8 deep) */
    MAX_PATH_PARTS = 256, /* components of a planner_data path */
};

static const char META[] = "torch.distributed.checkpoint.metadata";
static const char FILESYSTEM[] = "torch.distributed.checkpoint.filesystem";

/* ---- the allowlist --------------------------------------------------------- */

/* Classes of torch.distributed.checkpoint.metadata rebuilt from their state. */
static const char *const dataclasses[] = {
    "BytesStorageMetadata", "ChunkStorageMetadata", "Metadata", "MetadataIndex",
    "StorageMeta", "TensorProperties", "TensorStorageMetadata",
};

static bool in_list(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], name)) return true;
    return false;
}

/* The globals torch's own .metadata needs (found by logging find_class on
 * torch 2.13's output), and nothing else. */
static bool dcp_allowed_name(const char *module, const char *name) {
    if (!strcmp(module, META))
        return !strcmp(name, "_MEM_FORMAT_ENCODING") || in_list(name, dataclasses, sizeof dataclasses / sizeof *dataclasses);
    if (!strcmp(module, FILESYSTEM)) return !strcmp(name, "_StorageInfo");
    if (!strcmp(module, "torch")) return !strcmp(name, "Size") || ckpt__torch_type_named(name) != NULL;
    if (!strcmp(module, "torch.serialization")) return !strcmp(name, "_get_layout");
    if (!strcmp(module, "pathlib")) return !strcmp(name, "PosixPath");
    return false;
}

static ckpt__pk_allowed dcp_allowed(const char *module, const char *name, void *user) {
    (void)user;
    return dcp_allowed_name(module, name) ? CKPT__PK_ALLOW : CKPT__PK_DENY;
}

/* ---- the reader's state ------------------------------------------------------ */

/* One storage_data entry: MetadataIndex(fqn, offset) → _StorageInfo. */
typedef struct item {
    const char *key;      /* "<ndim>:<o0>,<o1>;<fqn>" or "-;<fqn>", arena */
    const char *rel;      /* relative_path */
    uint64_t offset, length;
    uint32_t file;        /* index into reader.files, once opened */
    size_t place;         /* index into reader.order, once opened */
    bool used;
    uint64_t at;          /* the value's byte in the pickle */
} item;

typedef struct data_file {
    const char *rel;
    uint32_t number; /* catalog data file */
    ckpt__source *src; /* owned by the catalog */
} data_file;

/* Small items of a remote file read together (held_bytes): [lo, hi) of
 * the file reader.files[file], in buf. */
typedef struct run {
    uint32_t file;
    uint64_t lo, hi;
    unsigned char *buf;
    uint64_t last; /* when it was last used (reader.tick) */
} run;

/* Over a remote source every read is a request, and the ZIP reader reads
 * an item's archive in five or six (its end records, central directory,
 * each member's local header, the pickle): a rank's file of many small
 * tensors would cost several requests a tensor.  An item of at most
 * RUN_ITEM bytes is read whole instead, with the small items that follow
 * it in the file (at most RUN_GAP bytes apart) in the same read, up to
 * RUN_BYTES: one request (over hf://, the file's one download) for many
 * items.  RUN_SLOTS runs are kept, one a file, for the entries whose
 * chunks alternate between the ranks' files; they are freed with the
 * reader (at most RUN_SLOTS × RUN_BYTES, whatever the checkpoint). */
enum { RUN_ITEM = 1 << 20, RUN_GAP = 64 << 10, RUN_BYTES = 8 << 20, RUN_SLOTS = 8 };

/* A node of the nested state dict rebuilt from planner_data. */
typedef struct tnode tnode;
struct tnode {
    uint8_t kind; /* T_* */
    tnode *parent;
    const char *key;  /* child of a dict */
    uint64_t index;   /* child of a list */
    tnode *first, *last, *next;
    size_t children;
    size_t entry; /* T_LEAF: its state_dict_metadata entry */
};
enum { T_EMPTY, T_DICT, T_LIST, T_LEAF };

typedef struct reader {
    ckpt_catalog *c;
    ckpt__arena *arena;
    const char *path; /* the .metadata */
    char *dir;
    ckpt_error *err;
    uint64_t visits, budget;
    item *items;
    size_t item_count;
    ckpt__name_table item_keys;
    data_file *files;
    size_t file_count;
    item **order; /* the used items, by file and offset */
    size_t order_count;
    run runs[RUN_SLOTS];
    uint64_t tick;
    /* the object tree */
    tnode root;
    tnode **slots; /* hash of (parent, component) → child */
    size_t slot_mask;
    size_t leaves;
    ckpt__value **leaf_values; /* per entry: its value in the tree */
    ckpt__value *null;    /* the value of a list's missing items */
    ckpt_status failed;   /* why making a value of the tree failed */
} reader;

static ckpt_status fail(reader *r, ckpt_status st, const char *tensor, const ckpt__pk_value *v, const char *fmt, ...)
    CKPT__PRINTF(5, 6);
static ckpt_status fail(reader *r, ckpt_status st, const char *tensor, const ckpt__pk_value *v, const char *fmt, ...) {
    char detail[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    return ckpt__fail(r->err, st, r->path, tensor, v ? (int64_t)v->offset : -1, "%s", detail);
}

static ckpt_status oom(reader *r) { return ckpt__oom(r->err, r->path, NULL); }

/* Charges what is made for value v (shared values are read once per
 * reference) to the metadata budget. */
static ckpt_status charge(reader *r, uint64_t bytes, const ckpt__pk_value *v) {
    return ckpt__budget_charge(r->arena->budget, bytes, r->err, r->path, v ? (int64_t)v->offset : -1);
}

/* ---- pass 1: every value made the way torch makes it --------------------------- */

static bool is_dataclass(const ckpt__pk_value *g) {
    return (!strcmp(g->u.global.module, META) && in_list(g->u.global.name, dataclasses, sizeof dataclasses / sizeof *dataclasses)) ||
           (!strcmp(g->u.global.module, FILESYSTEM) && !strcmp(g->u.global.name, "_StorageInfo"));
}

static bool scalars_of(const ckpt__pk_value *args, uint8_t kind) {
    for (size_t i = 0; i < args->u.seq.count; i++)
        if (args->u.seq.items[i]->kind != kind) return false;
    return true;
}

/* A call as torch makes it; *items: a dataclass's state, whose items are
 * checked next. */
static ckpt_status check_call(reader *r, const ckpt__pk_value *v, const ckpt__pk_value **items) {
    const ckpt__pk_value *g = v->u.call.callable, *args = v->u.call.args;
    const char *mod = g->u.global.module, *name = g->u.global.name;
    size_t n = args->u.seq.count;
    if (v->u.call.kwargs)
        return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v, ".metadata builds %s.%s with keyword arguments (NEWOBJ_EX); "
                    "torch never does", mod, name);
    if (is_dataclass(g)) {
        /* copyreg.__newobj__(cls): cls.__new__(cls), then BUILD of the
         * plain state — a dict of fields, or TensorProperties' tuple. */
        if (!v->newobj || n)
            return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v, "%s.%s is made by %s with %zu arguments; torch makes it "
                        "by NEWOBJ with none and then sets its state", mod, name, v->newobj ? "NEWOBJ" : "REDUCE", n);
        const ckpt__pk_value *s = v->state;
        bool props = !strcmp(name, "TensorProperties");
        if (!s) {
            if (!strcmp(name, "BytesStorageMetadata")) return CKPT_OK;
            return fail(r, CKPT__D(DCP_METADATA), NULL, v, "%s.%s has no state", mod, name);
        }
        if (s->kind == CKPT__PK_DICT && !s->state) {
            for (size_t i = 0; i < s->u.seq.count; i += 2)
                if (s->u.seq.items[i]->kind != CKPT__PK_STR)
                    return fail(r, CKPT__D(DCP_METADATA), NULL, s, "state of %s.%s has a key that is not a string", mod, name);
        } else if (!(props && s->kind == CKPT__PK_TUPLE)) {
            return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, s, "state of %s.%s is not a plain %s", mod, name,
                        props ? "tuple or dict" : "dict");
        }
        *items = s;
        return CKPT_OK;
    }
    if (v->state)
        return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v->state, "BUILD on the result of %s.%s", mod, name);
    if (v->newobj)
        return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v, "NEWOBJ of %s.%s; torch calls it (REDUCE)", mod, name);
    if (!strcmp(mod, META) && !strcmp(name, "_MEM_FORMAT_ENCODING")) {
        if (n != 1 || args->u.seq.items[0]->kind != CKPT__PK_INT)
            return fail(r, CKPT__D(DCP_METADATA), NULL, v, "_MEM_FORMAT_ENCODING takes one integer");
        return CKPT_OK;
    }
    if (!strcmp(mod, "torch.serialization") && !strcmp(name, "_get_layout")) {
        if (n != 1 || args->u.seq.items[0]->kind != CKPT__PK_STR)
            return fail(r, CKPT__D(DCP_METADATA), NULL, v, "_get_layout takes one string");
        return CKPT_OK;
    }
    if (!strcmp(mod, "pathlib") && !strcmp(name, "PosixPath")) {
        if (!scalars_of(args, CKPT__PK_STR))
            return fail(r, CKPT__D(DCP_METADATA), NULL, v, "PosixPath takes strings");
        return CKPT_OK;
    }
    /* torch.Size(tuple) is read as the tuple itself: a CALL of it (or of a
     * dtype) is not something torch writes. */
    return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v, "%s.%s is called in a way torch never writes", mod, name);
}

/* One value at `depth`; *items: the container whose items are checked
 * next (one level deeper), or NULL. */
static ckpt_status check_value(reader *r, const ckpt__pk_value *v, int depth, const ckpt__pk_value **items) {
    *items = NULL;
    if (depth > MAX_DEPTH)
        return fail(r, CKPT_E_LIMIT, NULL, v, ".metadata is nested deeper than %d (or cyclic)", MAX_DEPTH);
    if (++r->visits > r->budget)
        return fail(r, CKPT_E_LIMIT, NULL, v, ".metadata expands to more values than its size allows");
    switch (v->kind) {
    case CKPT__PK_NONE:
    case CKPT__PK_BOOL:
    case CKPT__PK_INT:
    case CKPT__PK_BIGINT:
    case CKPT__PK_FLOAT:
    case CKPT__PK_STR:
    case CKPT__PK_BYTES: return CKPT_OK;
    case CKPT__PK_TUPLE:
    case CKPT__PK_LIST:
    case CKPT__PK_SET: *items = v; return CKPT_OK;
    case CKPT__PK_DICT:
        if (v->state) return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v->state, "BUILD on a dict");
        *items = v;
        return CKPT_OK;
    case CKPT__PK_GLOBAL:
        /* Only dtypes appear as values (TensorProperties.dtype). */
        if (!strcmp(v->u.global.module, "torch") && ckpt__torch_type_named(v->u.global.name)) return CKPT_OK;
        return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v, "%s.%s appears as a value", v->u.global.module,
                    v->u.global.name);
    case CKPT__PK_CALL: return check_call(r, v, items);
    case CKPT__PK_PERSID: return fail(r, CKPT__D(PICKLE_FORBIDDEN), NULL, v, "a persistent id in .metadata");
    default: return fail(r, CKPT__D(PICKLE_INVALID), NULL, v, "unexpected value");
    }
}

/* Containers whose items are being checked, on a heap stack. */
typedef struct pending_items {
    const ckpt__pk_value *seq;
    size_t next;
    int depth; /* of the items */
} pending_items;

/* Every value of .metadata, depth first, each as torch makes it. */
static ckpt_status check_tree(reader *r, const ckpt__pk_value *root) {
    ckpt__stack pending = CKPT__STACK(pending_items);
    const ckpt__pk_value *items;
    int depth = 0;
    ckpt_status st = check_value(r, root, depth, &items);
    for (;;) {
        pending_items *p;
        if (st == CKPT_OK && items) {
            if (!(p = ckpt__stack_push(&pending))) st = oom(r);
            else *p = (pending_items){items, 0, depth + 1};
        }
        if (st || !(p = ckpt__stack_top(&pending))) break;
        if (p->next == p->seq->u.seq.count) {
            ckpt__stack_pop(&pending);
            items = NULL;
            continue;
        }
        depth = p->depth;
        st = check_value(r, p->seq->u.seq.items[p->next++], depth, &items);
    }
    ckpt__stack_free(&pending);
    return st;
}

/* ---- pass 2: the schema ----------------------------------------------------------- */

/* The state of a dataclass instance `cls` (NULL for BytesStorageMetadata). */
static bool is_obj(const ckpt__pk_value *v, const char *module, const char *cls) {
    return v && v->kind == CKPT__PK_CALL && ckpt__pk_is_global(v->u.call.callable, module, cls);
}

static const ckpt__pk_value *field(const ckpt__pk_value *state, const char *key) {
    if (!state || state->kind != CKPT__PK_DICT) return NULL;
    for (size_t i = 0; i + 1 < state->u.seq.count; i += 2)
        if (!strcmp(state->u.seq.items[i]->u.s.data, key)) return state->u.seq.items[i + 1];
    return NULL;
}

static bool is_none(const ckpt__pk_value *v) { return !v || v->kind == CKPT__PK_NONE; }

/* A tuple (torch.Size) of non-negative ints into arena memory. */
static ckpt_status dims(reader *r, const ckpt__pk_value *v, const char *what, const char *tensor, uint64_t **out,
                        uint32_t *n) {
    if (!v || (v->kind != CKPT__PK_TUPLE && v->kind != CKPT__PK_LIST))
        return fail(r, CKPT__D(DCP_METADATA), tensor, v, "%s is not a torch.Size", what);
    if (v->u.seq.count > CKPT_MAX_DIMS)
        return fail(r, CKPT__D(DCP_METADATA), tensor, v, "%s has %zu axes, more than %d", what, (size_t)v->u.seq.count,
                    CKPT_MAX_DIMS);
    ckpt_status st = charge(r, (v->u.seq.count ? v->u.seq.count : 1) * sizeof(uint64_t), v);
    uint64_t *d = st ? NULL : ckpt__arena_alloc(r->arena, (v->u.seq.count ? v->u.seq.count : 1) * sizeof *d);
    if (!d) return st ? st : oom(r);
    for (size_t i = 0; i < v->u.seq.count; i++) {
        const ckpt__pk_value *x = v->u.seq.items[i];
        if (x->kind != CKPT__PK_INT || x->u.i < 0)
            return fail(r, CKPT__D(DCP_METADATA), tensor, x, "%s[%zu] is not a non-negative integer", what, i);
        d[i] = (uint64_t)x->u.i;
    }
    *out = d;
    *n = (uint32_t)v->u.seq.count;
    return CKPT_OK;
}

/* The key of a storage entry: "<ndim>:<o0>,<o1>,…;<fqn>", "-;<fqn>" for
 * bytes (numbers cannot hold ';', and the fqn comes last). */
static const char *entry_key(reader *r, const char *fqn, const uint64_t *offsets, int64_t ndim) {
    ckpt__buf b = {0};
    if (ndim < 0) {
        ckpt__buf_puts(&b, "-");
    } else {
        ckpt__buf_u64(&b, (uint64_t)ndim);
        ckpt__buf_puts(&b, ":");
        for (int64_t i = 0; i < ndim; i++) {
            if (i) ckpt__buf_puts(&b, ",");
            ckpt__buf_u64(&b, offsets[i]);
        }
    }
    ckpt__buf_puts(&b, ";");
    ckpt__buf_puts(&b, fqn);
    const char *key = b.failed ? NULL : ckpt__arena_strndup(r->arena, b.data, b.len);
    free(b.data);
    return key;
}

/* A relative path inside the directory: no absolute path, no "..", no
 * empty component. */
static bool safe_relative(const char *name) {
    if (!*name || name[0] == '/' || strchr(name, '\\')) return false;
    for (const char *s = name;;) {
        const char *e = strchr(s, '/');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        if (n == 0 || (n == 2 && s[0] == '.' && s[1] == '.') || (n == 1 && s[0] == '.')) return false;
        if (!e) return true;
        s = e + 1;
    }
}

static ckpt_status read_storage_data(reader *r, const ckpt__pk_value *sd) {
    if (!sd || sd->kind != CKPT__PK_DICT)
        return fail(r, CKPT__D(DCP_METADATA), NULL, sd, "storage_data is not a dict of MetadataIndex → _StorageInfo");
    size_t n = sd->u.seq.count / 2;
    ckpt_status charged = charge(r, n * (sizeof *r->items + sizeof(uint64_t)), sd);
    if (charged) return charged;
    r->items = ckpt__calloc(n ? n : 1, sizeof *r->items);
    if (!r->items || !ckpt__name_table_init(&r->item_keys, n ? n : 1)) return oom(r);
    for (size_t i = 0; i < n; i++) {
        const ckpt__pk_value *k = sd->u.seq.items[2 * i], *v = sd->u.seq.items[2 * i + 1];
        if (!is_obj(k, META, "MetadataIndex") || !is_obj(v, FILESYSTEM, "_StorageInfo"))
            return fail(r, CKPT__D(DCP_METADATA), NULL, k, "storage_data entry %zu is not MetadataIndex → _StorageInfo", i);
        const ckpt__pk_value *fqn = field(k->state, "fqn"), *off = field(k->state, "offset");
        if (!fqn || fqn->kind != CKPT__PK_STR)
            return fail(r, CKPT__D(DCP_METADATA), NULL, k, "storage_data entry %zu has no fqn", i);
        uint64_t *offsets = NULL;
        uint32_t ndim = 0;
        ckpt_status st;
        if (!is_none(off) && (st = dims(r, off, "MetadataIndex.offset", fqn->u.s.data, &offsets, &ndim))) return st;
        item *it = &r->items[r->item_count];
        it->key = entry_key(r, fqn->u.s.data, offsets, is_none(off) ? -1 : (int64_t)ndim);
        if (!it->key) return oom(r);
        const ckpt__pk_value *rel = field(v->state, "relative_path"), *o = field(v->state, "offset"),
                             *len = field(v->state, "length"), *tr = field(v->state, "transform_descriptors");
        if (!rel || rel->kind != CKPT__PK_STR || !o || o->kind != CKPT__PK_INT || o->u.i < 0 || !len ||
            len->kind != CKPT__PK_INT || len->u.i < 0)
            return fail(r, CKPT__D(DCP_METADATA), fqn->u.s.data, v,
                        "_StorageInfo needs relative_path (a string), offset and length (non-negative integers)");
        if (!is_none(tr)) {
            if (tr->kind != CKPT__PK_LIST && tr->kind != CKPT__PK_TUPLE)
                return fail(r, CKPT__D(DCP_METADATA), fqn->u.s.data, tr, "transform_descriptors is not a list");
            for (size_t t = 0; t < tr->u.seq.count; t++) {
                const ckpt__pk_value *d = tr->u.seq.items[t];
                if (d->kind != CKPT__PK_STR)
                    return fail(r, CKPT__D(DCP_METADATA), fqn->u.s.data, d, "a transform descriptor is not a string");
                /* torch 2.13 writes only "stream.zstd/1" (_extension.py,
                 * ZStandard): a zstd stream around the torch.save archive. */
                return fail(r, CKPT__D(DCP_UNSUPPORTED), fqn->u.s.data, d,
                            "its item in %s is stored through the transform '%s'%s, which ckpt does not read; "
                            "load it with torch and save it without _extensions", rel->u.s.data, d->u.s.data,
                            !strncmp(d->u.s.data, "stream.zstd/", 12) ? " (zstd compression)" : "");
            }
        }
        if (!safe_relative(rel->u.s.data))
            return fail(r, CKPT__D(DCP_PATH), fqn->u.s.data, rel,
                        "relative_path '%s' is absolute, empty or has a '.' or '..' component", rel->u.s.data);
        it->rel = rel->u.s.data;
        it->offset = (uint64_t)o->u.i;
        it->length = (uint64_t)len->u.i;
        it->at = v->offset;
        uint32_t prev;
        if (!ckpt__name_table_insert(&r->item_keys, &r->items[0].key, sizeof *r->items, (uint32_t)r->item_count, &prev))
            return fail(r, CKPT__D(DCP_METADATA), fqn->u.s.data, k, "storage_data lists the same chunk twice (%s)",
                        it->key);
        r->item_count++;
    }
    return CKPT_OK;
}

static item *find_item(reader *r, const char *fqn, const uint64_t *offsets, int64_t ndim) {
    if (!r->item_count) return NULL;
    const char *key = entry_key(r, fqn, offsets, ndim);
    int64_t i = key ? ckpt__name_table_find(&r->item_keys, &r->items[0].key, sizeof *r->items, key) : -1;
    return i < 0 ? NULL : &r->items[i];
}

/* ---- data files -------------------------------------------------------------------- */

/* Natural order: "__2_0.distcp" before "__10_0.distcp". */
static int natural_cmp(const char *a, const char *b) {
    while (*a && *b) {
        if (*a >= '0' && *a <= '9' && *b >= '0' && *b <= '9') {
            const char *x = a, *y = b;
            while (*x == '0') x++;
            while (*y == '0') y++;
            size_t nx = strspn(x, "0123456789"), ny = strspn(y, "0123456789");
            if (nx != ny) return nx < ny ? -1 : 1;
            int c = strncmp(x, y, nx);
            if (c) return c;
            a = x + nx, b = y + ny;
            continue;
        }
        if (*a != *b) return (unsigned char)*a < (unsigned char)*b ? -1 : 1;
        a++, b++;
    }
    return *a ? 1 : *b ? -1 : 0;
}

static int by_rel(const void *x, const void *y) {
    int c = natural_cmp((*(const item *const *)x)->rel, (*(const item *const *)y)->rel);
    if (c) return c;
    uint64_t a = (*(const item *const *)x)->offset, b = (*(const item *const *)y)->offset;
    return a < b ? -1 : a > b;
}

/* Whether a safetensors blob starts at `offset` (u64 length, then '{'):
 * what FileSystemWriter(serialization_format=SAFETENSORS) appends after a
 * rank's objects, while its .metadata keeps offsets that do not point at
 * the tensors (torch 2.13's FileSystemReader cannot read it back either). */
static bool safetensors_blob(ckpt__source *src, uint64_t offset) {
    unsigned char head[9];
    if (offset > src->size || src->size - offset < sizeof head || ckpt__source_read(src, head, 9, offset, NULL)) return false;
    uint64_t n = ckpt__le64(head);
    return head[8] == '{' && n >= 2 && n <= src->size - offset - 8;
}

static ckpt_status safetensors_refused(reader *r, ckpt__source *src, uint64_t offset) {
    return ckpt__fail(r->err, CKPT__D(DCP_UNSUPPORTED), src->name, NULL, (int64_t)offset,
                      "the tensors are in a safetensors blob (FileSystemWriter with serialization_format="
                      "SAFETENSORS), which .metadata does not locate and torch's FileSystemReader cannot read; "
                      "save with the default TORCH_SAVE, or with HuggingFaceStorageWriter");
}

/* Opens the files of the used items, in natural order, and checks that no
 * two items share bytes. */
static ckpt_status open_files(reader *r) {
    size_t used = 0;
    for (size_t i = 0; i < r->item_count; i++) used += r->items[i].used;
    item **order = ckpt__malloc((used ? used : 1) * sizeof *order);
    r->files = ckpt__calloc(used ? used : 1, sizeof *r->files);
    if (!order || !r->files) {
        free(order);
        return oom(r);
    }
    size_t k = 0;
    for (size_t i = 0; i < r->item_count; i++)
        if (r->items[i].used) order[k++] = &r->items[i];
    qsort(order, used, sizeof *order, by_rel);
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < used && st == CKPT_OK; i++) {
        item *it = order[i];
        if (!r->file_count || strcmp(r->files[r->file_count - 1].rel, it->rel)) {
            data_file *f = &r->files[r->file_count];
            f->rel = it->rel;
            char *full = ckpt__path_join(r->dir, it->rel);
            if (!full) {
                st = oom(r);
                break;
            }
            st = ckpt__cat_open_source(r->c, full, &f->src, r->err);
            free(full);
            if (st == CKPT_OK) st = ckpt__cat_add_source(r->c, f->src, &f->number, r->err);
            if (st) break;
            r->file_count++;
        } else {
            const item *prev = order[i - 1];
            if (prev->offset + prev->length > it->offset && safetensors_blob(r->files[r->file_count - 1].src, it->offset))
                st = safetensors_refused(r, r->files[r->file_count - 1].src, it->offset);
            else if (prev->offset + prev->length > it->offset)
                st = ckpt__fail(r->err, CKPT__D(DCP_METADATA), r->files[r->file_count - 1].src->name, NULL,
                                (int64_t)it->offset,
                                "two items of .metadata overlap: [%llu, %llu) and [%llu, %llu) (the second declared "
                                "at byte %llu of %s)",
                                (unsigned long long)prev->offset, (unsigned long long)(prev->offset + prev->length),
                                (unsigned long long)it->offset, (unsigned long long)(it->offset + it->length),
                                (unsigned long long)it->at, r->path);
        }
        it->file = (uint32_t)(r->file_count - 1);
        if (st == CKPT_OK && (it->offset > r->files[it->file].src->size ||
                              it->length > r->files[it->file].src->size - it->offset))
            st = ckpt__fail(r->err, CKPT_E_TRUNCATED, r->files[it->file].src->name, NULL,
                            (int64_t)r->files[it->file].src->size,
                            "an item at bytes [%llu, %llu) runs past the end of the file (%llu bytes; declared at "
                            "byte %llu of %s)",
                            (unsigned long long)it->offset, (unsigned long long)(it->offset + it->length),
                            (unsigned long long)r->files[it->file].src->size, (unsigned long long)it->at, r->path);
    }
    for (size_t i = 0; i < used; i++) order[i]->place = i;
    r->order = order;
    r->order_count = used;
    return st;
}

/* The bytes of item `it` in *held when they are read with others
 * (RUN_ITEM above), else NULL: the item is read by its window. */
static ckpt_status held_bytes(reader *r, const item *it, const unsigned char **held) {
    *held = NULL;
    ckpt__source *src = r->files[it->file].src;
    if (!(src->caps & CKPT__SRC_REMOTE) || it->length > RUN_ITEM || !it->length) return CKPT_OK;
    uint64_t end = it->offset + it->length;
    run *mine = NULL, *other = &r->runs[0];
    for (size_t i = 0; i < RUN_SLOTS; i++) {
        run *x = &r->runs[i];
        if (x->buf && x->file == it->file && x->lo <= it->offset && end <= x->hi) {
            x->last = ++r->tick;
            *held = x->buf + (it->offset - x->lo);
            return CKPT_OK;
        }
        if (x->buf && x->file == it->file) mine = x;
        else if (other->buf && (!x->buf || x->last < other->last)) other = x; /* an empty slot, else the oldest */
    }
    run *slot = mine ? mine : other; /* the file's own run is replaced: its items come in file order */
    uint64_t hi = end;
    for (size_t k = it->place + 1; k < r->order_count; k++) {
        const item *next = r->order[k];
        if (next->file != it->file || next->length > RUN_ITEM || next->offset < hi || next->offset - hi > RUN_GAP ||
            next->offset + next->length - it->offset > RUN_BYTES)
            break;
        hi = next->offset + next->length;
    }
    unsigned char *buf = ckpt__malloc((size_t)(hi - it->offset));
    if (!buf) return oom(r);
    ckpt_status st = ckpt__source_read(src, buf, hi - it->offset, it->offset, r->err);
    if (st) {
        free(buf);
        return st;
    }
    free(slot->buf);
    *slot = (run){it->file, it->offset, hi, buf, ++r->tick};
    *held = buf;
    return CKPT_OK;
}

/* An error inside an item's archive, whose offsets count from the item's
 * start: moved to the file's coordinates, naming the tensor and the item. */
static ckpt_status in_item(reader *r, ckpt_status st, const item *it, const char *fqn, const char *what) {
    ckpt_error *e = r->err;
    if (!e) return st;
    const char *rest = e->message;
    size_t plen = strlen(e->path);
    if (plen && !strncmp(rest, e->path, plen) && !strncmp(rest + plen, ": ", 2)) rest += plen + 2;
    if (e->tensor[0]) {
        char t[600];
        int n = snprintf(t, sizeof t, "tensor '%s': ", e->tensor);
        if (n > 0 && !strncmp(rest, t, (size_t)n)) rest += n;
    }
    int64_t offset = e->offset;
    if (offset >= 0 && !strncmp(rest, "at byte ", 8)) {
        const char *colon = strstr(rest, ": ");
        if (colon) rest = colon + 2;
    }
    char detail[sizeof e->message + 256];
    snprintf(detail, sizeof detail, "%s (in the torch.save archive of %s at bytes [%llu, %llu))", rest, what,
             (unsigned long long)it->offset, (unsigned long long)(it->offset + it->length));
    char path[sizeof e->path];
    snprintf(path, sizeof path, "%s", r->files[it->file].src->name);
    return ckpt__fail(e, ckpt__code_of(e, st), path, fqn, offset >= 0 ? (int64_t)it->offset + offset : -1, "%s", detail);
}

/* ---- tensors ------------------------------------------------------------------------ */

typedef struct tensor_meta {
    const char *fqn;
    const ckpt__pk_value *at;
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *size;
    size_t chunk_count;
    ckpt__dcp_chunk *chunks; /* malloc'ed */
    item **chunk_items;      /* malloc'ed */
} tensor_meta;

static ckpt_status read_properties(reader *r, tensor_meta *t, const ckpt__pk_value *p) {
    if (!is_obj(p, META, "TensorProperties"))
        return fail(r, CKPT__D(DCP_METADATA), t->fqn, p, "properties is not a TensorProperties");
    const ckpt__pk_value *s = p->u.call.callable ? p->state : NULL, *dtype = NULL, *layout = NULL;
    if (s && s->kind == CKPT__PK_TUPLE && s->u.seq.count == 5) { /* __getstate__: (dtype, layout, rg, mf, pin) */
        dtype = s->u.seq.items[0];
        layout = s->u.seq.items[1];
    } else if (s && s->kind == CKPT__PK_DICT) {
        dtype = field(s, "dtype");
        layout = field(s, "layout");
    } else {
        return fail(r, CKPT__D(DCP_METADATA), t->fqn, p, "TensorProperties state is not (dtype, layout, requires_grad, "
                    "memory_format, pin_memory)");
    }
    if (!dtype || dtype->kind != CKPT__PK_GLOBAL)
        return fail(r, CKPT__D(DCP_METADATA), t->fqn, p, "TensorProperties has no dtype");
    if (layout && !is_none(layout) &&
        !(is_obj(layout, "torch.serialization", "_get_layout") && !strcmp(layout->u.call.args->u.seq.items[0]->u.s.data, "torch.strided")))
        return fail(r, CKPT__D(UNKNOWN_DTYPE), t->fqn, layout, "the tensor's layout is not torch.strided (a sparse "
                    "tensor has no safetensors representation)");
    const ckpt__torch_type *named = ckpt__torch_type_named(dtype->u.global.name);
    t->dtype = named ? named->dtype : CKPT_DTYPE_INVALID;
    if (t->dtype == CKPT_DTYPE_INVALID)
        return fail(r, CKPT__D(UNKNOWN_DTYPE), t->fqn, dtype, "torch.%s has no safetensors dtype", dtype->u.global.name);
    return CKPT_OK;
}

static ckpt_status read_tensor_meta(reader *r, tensor_meta *t, const ckpt__pk_value *v) {
    const ckpt__pk_value *s = v->state;
    ckpt_status st = read_properties(r, t, field(s, "properties"));
    if (st) return st;
    if ((st = dims(r, field(s, "size"), "size", t->fqn, &t->size, &t->ndim))) return st;
    const ckpt__pk_value *chunks = field(s, "chunks");
    if (!chunks || chunks->kind != CKPT__PK_LIST)
        return fail(r, CKPT__D(DCP_METADATA), t->fqn, v, "chunks is not a list");
    if (!chunks->u.seq.count)
        return fail(r, CKPT__D(DCP_CHUNK_HOLE), t->fqn, chunks, "the tensor has no chunks");
    t->chunk_count = chunks->u.seq.count;
    if ((st = charge(r, t->chunk_count * (sizeof *t->chunks + sizeof *t->chunk_items + sizeof(ckpt__piece)), chunks)))
        return st;
    t->chunks = ckpt__calloc(t->chunk_count, sizeof *t->chunks);
    t->chunk_items = ckpt__calloc(t->chunk_count, sizeof *t->chunk_items);
    if (!t->chunks || !t->chunk_items) return oom(r);
    for (size_t k = 0; k < t->chunk_count; k++) {
        const ckpt__pk_value *ch = chunks->u.seq.items[k];
        if (!is_obj(ch, META, "ChunkStorageMetadata"))
            return fail(r, CKPT__D(DCP_METADATA), t->fqn, ch, "chunk %zu is not a ChunkStorageMetadata", k);
        uint64_t *off, *sz;
        uint32_t no, ns;
        if ((st = dims(r, field(ch->state, "offsets"), "chunk offsets", t->fqn, &off, &no)) ||
            (st = dims(r, field(ch->state, "sizes"), "chunk sizes", t->fqn, &sz, &ns)))
            return st;
        if (no != t->ndim || ns != t->ndim)
            return fail(r, CKPT__D(DCP_CHUNK_BOUNDS), t->fqn, ch, "chunk %zu has %u offsets and %u sizes for a %u-axis "
                        "tensor", k, no, ns, t->ndim);
        item *it = find_item(r, t->fqn, off, t->ndim);
        if (!it) {
            char a[160];
            return fail(r, CKPT__D(DCP_METADATA), t->fqn, ch, "chunk %zu (offsets %s) has no storage_data entry", k,
                        ckpt__dcp_dims(a, sizeof a, off, t->ndim));
        }
        it->used = true;
        t->chunks[k] = (ckpt__dcp_chunk){off, sz, it->rel};
        t->chunk_items[k] = it;
    }
    /* float4_e2m1fn_x2 packs two values per element: the catalog counts
     * values (as safetensors and the torch reader do). */
    if (t->dtype == CKPT_F4 && t->ndim) {
        uint32_t last = t->ndim - 1;
        if (t->size[last] > UINT64_MAX / 2)
            return fail(r, CKPT__D(SHAPE_OVERFLOW), t->fqn, v, "size overflows");
        t->size[last] *= 2;
        for (size_t k = 0; k < t->chunk_count; k++) {
            uint64_t *o = (uint64_t *)t->chunks[k].offsets, *z = (uint64_t *)t->chunks[k].sizes;
            if (o[last] > UINT64_MAX / 2 || z[last] > UINT64_MAX / 2)
                return fail(r, CKPT__D(DCP_CHUNK_BOUNDS), t->fqn, v, "chunk %zu overflows", k);
            o[last] *= 2, z[last] *= 2;
        }
    }
    return ckpt__dcp_check_tiling(r->path, t->fqn, t->ndim, t->size, t->chunks, t->chunk_count, r->err);
}

/* Reads each chunk's archive and adds the tensor with one piece per
 * non-empty chunk. */
static ckpt_status add_tensor(reader *r, const tensor_meta *t) {
    ckpt__piece *pieces = ckpt__calloc(t->chunk_count, sizeof *pieces);
    if (!pieces) return oom(r);
    uint32_t count = 0;
    ckpt_status st = CKPT_OK;
    for (size_t k = 0; k < t->chunk_count && st == CKPT_OK; k++) {
        const ckpt__dcp_chunk *ch = &t->chunks[k];
        const item *it = t->chunk_items[k];
        const data_file *f = &r->files[it->file];
        char what[64];
        snprintf(what, sizeof what, "chunk %zu", k);
        ckpt__source *win;
        const unsigned char *held;
        if ((st = held_bytes(r, it, &held))) break;
        if ((st = ckpt__source_window_held(f->src, it->offset, it->length, held, &win, r->err))) break;
        ckpt__torch_file tf;
        st = ckpt__torch_read_zip(win, ckpt__torch_allow, r->c, r->arena, &tf, r->err);
        ckpt__source_close(win);
        if (st) {
            st = safetensors_blob(f->src, it->offset) ? safetensors_refused(r, f->src, it->offset)
                                                      : in_item(r, st, it, t->fqn, what);
            break;
        }
        const ckpt__torch_tensor *x = tf.count == 1 ? &tf.tensors[0] : NULL;
        bool same = x && !x->name[0] && x->dtype == t->dtype && x->ndim == t->ndim;
        for (uint32_t d = 0; same && d < t->ndim; d++) same = x->shape[d] == ch->sizes[d];
        if (!same) {
            char a[160], b[160];
            if (!x || x->name[0])
                st = ckpt__fail(r->err, CKPT__D(DCP_CHUNK_MISMATCH), f->src->name, t->fqn, (int64_t)it->offset,
                                "chunk %zu: the archive at bytes [%llu, %llu) holds %s, not one tensor", k,
                                (unsigned long long)it->offset, (unsigned long long)(it->offset + it->length),
                                tf.count ? "more than a tensor" : "no tensor");
            else
                st = ckpt__fail(r->err, CKPT__D(DCP_CHUNK_MISMATCH), f->src->name, t->fqn, (int64_t)it->offset,
                                "chunk %zu (offsets %s) declares sizes %s of %s; its archive at bytes [%llu, %llu) "
                                "holds a %s tensor of size %s",
                                k, ckpt__dcp_dims(a, sizeof a, ch->offsets, t->ndim),
                                ckpt__dcp_dims(b, sizeof b, ch->sizes, t->ndim), ckpt_dtype_name(t->dtype),
                                (unsigned long long)it->offset, (unsigned long long)(it->offset + it->length),
                                ckpt_dtype_name(x->dtype), ckpt__dcp_dims(a, sizeof a, x->shape, x->ndim));
            ckpt__torch_file_free(&tf);
            break;
        }
        uint64_t volume = 1;
        for (uint32_t d = 0; d < t->ndim; d++) volume *= ch->sizes[d];
        uint32_t first_crc;
        if ((st = ckpt__torch_add_crcs(r->c, f->number, &tf, it->offset, &first_crc, r->err))) {
            ckpt__torch_file_free(&tf);
            break;
        }
        if (volume) {
            const ckpt__torch_storage *s = &tf.storages[x->storage];
            ckpt__piece *p = &pieces[count++];
            p->file = f->number;
            p->crc = s->crc ? first_crc + s->crc : 0;
            p->start = ch->offsets;
            p->count = ch->sizes;
            p->strides = x->strides;
            p->big_endian = tf.big_endian;
            if (s->comp_size) {
                p->offset = x->storage_begin;
                p->record = it->offset + s->offset;
                p->record_size = s->comp_size;
            } else {
                p->offset = it->offset + x->offset;
            }
        }
        ckpt__torch_file_free(&tf);
    }
    if (st == CKPT_OK && count == 0) { /* an empty tensor: its first chunk stands for it */
        pieces[0] = (ckpt__piece){.file = r->files[t->chunk_items[0]->file].number,
                                  .offset = t->chunk_items[0]->offset, .start = t->chunks[0].offsets,
                                  .count = t->chunks[0].sizes};
        count = 1;
    }
    if (st == CKPT_OK) {
        ckpt__tensor_decl d = {t->fqn, t->dtype, t->ndim, t->size, CKPT__OWN_STORAGE, pieces, count};
        st = ckpt__cat_add_tensor(r->c, &d, r->err);
    }
    free(pieces);
    return st;
}

/* ---- objects (BytesStorageMetadata) ------------------------------------------------- */

/* Reads a bytes item: its archive's tensors join the catalog as
 * "<fqn>.<path>", its object tree becomes the item's leaf. */
static ckpt_status add_bytes(reader *r, const char *fqn, const item *it, ckpt__value **leaf) {
    const data_file *f = &r->files[it->file];
    ckpt__source *win;
    const unsigned char *held;
    ckpt_status st = held_bytes(r, it, &held);
    if (st == CKPT_OK) st = ckpt__source_window_held(f->src, it->offset, it->length, held, &win, r->err);
    if (st) return st;
    ckpt__torch_options o = {.name_prefix = fqn, .allow = ckpt__torch_allow, .allow_user = r->c};
    ckpt__torch_file tf;
    st = ckpt__torch_read_zip_ex(win, r->arena, &o, &tf, r->err);
    ckpt__source_close(win);
    if (st) return in_item(r, st, it, fqn, "the object");
    uint32_t first = 0, first_crc;
    st = ckpt__torch_add_crcs(r->c, f->number, &tf, it->offset, &first_crc, r->err);
    for (size_t i = 0; st == CKPT_OK && i < tf.storage_count; i++) {
        const ckpt__torch_storage *s = &tf.storages[i];
        uint32_t number;
        st = ckpt__cat_add_storage(r->c, f->number, it->offset + s->offset, s->nbytes, &number, r->err);
        if (i == 0) first = number;
    }
    for (size_t i = 0; st == CKPT_OK && i < tf.count; i++) {
        const ckpt__torch_tensor *t = &tf.tensors[i];
        const ckpt__torch_storage *s = &tf.storages[t->storage];
        ckpt__piece p = {.file = f->number, .offset = it->offset + t->offset, .strides = t->strides,
                         .big_endian = tf.big_endian, .crc = s->crc ? first_crc + s->crc : 0};
        if (s->comp_size) {
            p.offset = t->storage_begin;
            p.record = it->offset + s->offset;
            p.record_size = s->comp_size;
        }
        ckpt__tensor_decl d = {t->name, t->dtype, t->ndim, t->shape, first + t->storage, &p, 1};
        st = ckpt__cat_add_tensor(r->c, &d, r->err);
    }
    if (st == CKPT_OK) *leaf = tf.tree; /* in the catalog's arena */
    ckpt__torch_file_free(&tf);
    return st;
}

/* ---- the object tree ----------------------------------------------------------------- */

static size_t slot_of(const reader *r, const tnode *parent, const char *key, uint64_t index) {
    uint64_t h = (uint64_t)(uintptr_t)parent * 0x9E3779B97F4A7C15ULL;
    h ^= key ? ckpt__hash_str(key) : index * 0xC2B2AE3D27D4EB4FULL + 1;
    return (size_t)((h ^ (h >> 31)) & r->slot_mask);
}

/* The child of `parent` named `key` (in a dict) or `index` (in a list),
 * made when missing. */
static ckpt_status child(reader *r, tnode *parent, const char *key, uint64_t index, const char *fqn, tnode **out) {
    uint8_t want = key ? T_DICT : T_LIST;
    if (parent->kind == T_EMPTY) parent->kind = want;
    if (parent->kind != want)
        return fail(r, CKPT__D(DCP_METADATA), fqn, NULL, "planner_data paths disagree: a %s is also used as a %s",
                    parent->kind == T_LEAF ? "value" : parent->kind == T_DICT ? "dict" : "list",
                    want == T_DICT ? "dict" : "list");
    size_t i = slot_of(r, parent, key, index);
    for (tnode *n; (n = r->slots[i]); i = (i + 1) & r->slot_mask) {
        if (n->parent == parent && (key ? n->key && !strcmp(n->key, key) : !n->key && n->index == index)) {
            *out = n;
            return CKPT_OK;
        }
    }
    tnode *n = ckpt__arena_alloc(r->arena, sizeof *n);
    if (!n) return oom(r);
    memset(n, 0, sizeof *n);
    n->parent = parent;
    n->key = key;
    n->index = index;
    if (parent->last) parent->last->next = n;
    else parent->first = n;
    parent->last = n;
    parent->children++;
    r->slots[i] = n;
    *out = n;
    return CKPT_OK;
}

/* Puts entry `entry` at its planner_data path. */
static ckpt_status place(reader *r, const char *fqn, const ckpt__pk_value *path, size_t entry) {
    tnode *n = &r->root;
    size_t parts = path ? path->u.seq.count : 1;
    for (size_t i = 0; i < parts; i++) {
        const ckpt__pk_value *p = path ? path->u.seq.items[i] : NULL;
        ckpt_status st;
        if (!p) st = child(r, n, fqn, 0, fqn, &n);
        else if (p->kind == CKPT__PK_STR) st = child(r, n, p->u.s.data, 0, fqn, &n);
        else st = child(r, n, NULL, (uint64_t)p->u.i, fqn, &n);
        if (st) return st;
    }
    if (n->kind != T_EMPTY)
        return fail(r, CKPT__D(DCP_METADATA), fqn, path, "planner_data puts two values at the same place");
    n->kind = T_LEAF;
    n->entry = entry;
    return CKPT_OK;
}

static int by_index(const void *a, const void *b) {
    uint64_t x = (*(const tnode *const *)a)->index, y = (*(const tnode *const *)b)->index;
    return x < y ? -1 : x > y;
}

/* A node's children in order: a dict's as they were first met, a list's
 * by index (malloc'ed). */
static const tnode **children(const tnode *n) {
    const tnode **kids = ckpt__malloc((n->children ? n->children : 1) * sizeof *kids);
    if (!kids) return NULL;
    size_t k = 0;
    for (const tnode *c = n->first; c; c = c->next) kids[k++] = c;
    if (n->kind == T_LIST) qsort(kids, k, sizeof *kids, by_index);
    return kids;
}

/* A node of the trie being gone through: its children and the next. */
typedef struct open_tnode {
    const tnode *n;
    const tnode **kids; /* malloc'ed */
    size_t next;
    ckpt__value *out; /* render: n's value */
} open_tnode;

/* Pushes n's frame (its children in order). */
static ckpt_status open_trie_node(reader *r, ckpt__stack *open, const tnode *n) {
    const tnode **kids = children(n);
    open_tnode *o = kids ? ckpt__stack_push(open) : NULL;
    if (!o) {
        free(kids);
        return oom(r);
    }
    *o = (open_tnode){.n = n, .kids = kids};
    return CKPT_OK;
}

static void close_trie(ckpt__stack *open) {
    for (size_t i = 0; i < open->len; i++) free(((open_tnode *)(void *)open->data)[i].kids);
    ckpt__stack_free(open);
}

/* The entries in the order of the nested state dict they rebuild (the
 * order dcp_to_torch_save gives: torch's unflatten_state_dict): the trie's
 * leaves depth first, the nodes being gone through on a heap stack. */
static ckpt_status leaf_order(reader *r, size_t *order, size_t *k) {
    ckpt__stack open = CKPT__STACK(open_tnode);
    ckpt_status st = open_trie_node(r, &open, &r->root);
    while (st == CKPT_OK && open.len) {
        open_tnode *o = ckpt__stack_top(&open);
        if (o->next == o->n->children) {
            free(o->kids);
            ckpt__stack_pop(&open);
            continue;
        }
        const tnode *c = o->kids[o->next++];
        if (c->kind == T_LEAF) order[(*k)++] = c->entry;
        else st = open_trie_node(r, &open, c);
    }
    close_trie(&open);
    return st;
}

/* A value of the tree, charged to the budget. */
static ckpt__value *make(reader *r, ckpt__value_kind kind, size_t count, const char *text) {
    size_t len = text ? strlen(text) : 0;
    if ((r->failed = charge(r, ckpt__value_cost(kind, count, len), NULL))) return NULL;
    ckpt__value *v = text ? ckpt__value_text(r->arena, kind, text, len) : ckpt__value_new(r->arena, kind, count);
    if (!v) r->failed = oom(r);
    return v;
}

/* Pushes n's frame with its value into *slot: a dict, or a list as long
 * as its last index says, missing items null. */
static ckpt_status open_trie_value(reader *r, ckpt__stack *open, const tnode *n, ckpt__value **slot) {
    ckpt_status st = open_trie_node(r, open, n);
    if (st) return st;
    open_tnode *o = ckpt__stack_top(open);
    bool dict = n->kind == T_DICT;
    size_t count = dict || !n->children ? n->children : (size_t)o->kids[n->children - 1]->index + 1;
    if (!(o->out = *slot = make(r, dict ? CKPT__V_DICT : CKPT__V_LIST, count, NULL))) return r->failed;
    for (size_t i = 0; !dict && i < count; i++) o->out->u.items[i] = r->null;
    return CKPT_OK;
}

/* The trie as an object tree: dicts, lists with null where no entry is,
 * the entries' values at its leaves. */
static ckpt_status render(reader *r, ckpt__value **tree) {
    ckpt__stack open = CKPT__STACK(open_tnode);
    r->null = make(r, CKPT__V_NULL, 0, NULL);
    ckpt_status st = r->null ? open_trie_value(r, &open, &r->root, tree) : r->failed;
    while (st == CKPT_OK && open.len) {
        open_tnode *o = ckpt__stack_top(&open);
        if (o->next == o->n->children) {
            free(o->kids);
            ckpt__stack_pop(&open);
            continue;
        }
        size_t i = o->next++;
        const tnode *c = o->kids[i];
        ckpt__value **slot = &o->out->u.items[c->index];
        if (o->n->kind == T_DICT) {
            slot = &o->out->u.items[2 * i + 1];
            if (!(o->out->u.items[2 * i] = make(r, CKPT__V_STR, 0, c->key))) st = r->failed;
        }
        if (c->kind == T_LEAF) *slot = r->leaf_values[c->entry];
        else if (c->kind == T_DICT || c->kind == T_LIST) st = st ? st : open_trie_value(r, &open, c, slot);
    }
    close_trie(&open);
    return st;
}

/* ---- the format ---------------------------------------------------------------------- */

typedef struct entry {
    const char *fqn;
    const ckpt__pk_value *value, *path;
    bool bytes;
    item *object; /* bytes */
    tensor_meta t;
    ckpt__value *leaf;
} entry;

/* The planner_data path of each entry (NULL: the fqn itself). */
static ckpt_status read_paths(reader *r, const ckpt__pk_value *planner, entry *e, size_t n, size_t *parts) {
    *parts = 0;
    ckpt__name_table names = {0};
    size_t count = planner && planner->kind == CKPT__PK_DICT ? planner->u.seq.count / 2 : 0;
    if (count && !ckpt__name_table_init(&names, count)) return oom(r);
    ckpt_status st = CKPT_OK;
    const char **keys = ckpt__calloc(count ? count : 1, sizeof *keys);
    if (!keys) st = oom(r);
    for (size_t i = 0; st == CKPT_OK && i < count; i++) {
        const ckpt__pk_value *k = planner->u.seq.items[2 * i];
        if (k->kind != CKPT__PK_STR) {
            st = fail(r, CKPT__D(DCP_METADATA), NULL, k, "planner_data key %zu is not a string", i);
            break;
        }
        keys[i] = k->u.s.data;
        ckpt__name_table_insert(&names, keys, sizeof *keys, (uint32_t)i, NULL); /* a repeated key: the first wins */
    }
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        int64_t at = count ? ckpt__name_table_find(&names, keys, sizeof *keys, e[i].fqn) : -1;
        const ckpt__pk_value *p = at >= 0 ? planner->u.seq.items[2 * at + 1] : NULL;
        if (!p) {
            *parts += 1;
            continue;
        }
        if ((p->kind != CKPT__PK_TUPLE && p->kind != CKPT__PK_LIST) || !p->u.seq.count || p->u.seq.count > MAX_PATH_PARTS) {
            st = fail(r, CKPT__D(DCP_METADATA), e[i].fqn, p, "planner_data path is not a tuple of 1 to %d keys",
                      MAX_PATH_PARTS);
            break;
        }
        for (size_t k = 0; st == CKPT_OK && k < p->u.seq.count; k++) {
            const ckpt__pk_value *c = p->u.seq.items[k];
            if (c->kind != CKPT__PK_STR && (c->kind != CKPT__PK_INT || c->u.i < 0 || (uint64_t)c->u.i >= n))
                st = fail(r, CKPT__D(DCP_METADATA), e[i].fqn, c,
                          "planner_data path part %zu is neither a string nor a list index below %zu", k, n);
        }
        if (st) break;
        e[i].path = p;
        *parts += p->u.seq.count;
    }
    free(keys);
    ckpt__name_table_free(&names);
    return st;
}

/* The nested state dict that planner_data describes. */
static ckpt_status build_trie(reader *r, entry *e, size_t n, size_t parts) {
    size_t cap = 16;
    while (cap < 2 * parts + 2) cap *= 2;
    r->slots = ckpt__calloc(cap, sizeof *r->slots);
    if (!r->slots) return oom(r);
    r->slot_mask = cap - 1;
    r->root.kind = T_DICT;
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < n && st == CKPT_OK; i++) st = place(r, e[i].fqn, e[i].path, i);
    return st;
}

static ckpt_status add_tree(reader *r, entry *e, size_t n) {
    r->leaf_values = ckpt__calloc(n ? n : 1, sizeof *r->leaf_values);
    if (!r->leaf_values) return oom(r);
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < n && st == CKPT_OK; i++) {
        /* an object's own tree, or a tensor */
        r->leaf_values[i] = e[i].leaf ? e[i].leaf : make(r, CKPT__V_TENSOR, 0, e[i].fqn);
        if (!r->leaf_values[i]) st = r->failed;
    }
    ckpt__value *tree = NULL;
    if (st == CKPT_OK) st = render(r, &tree);
    return st ? st : ckpt__cat_set_tree(r->c, tree, r->err);
}

static ckpt_status read_entries(reader *r, const ckpt__pk_value *sdm, entry **out, size_t *count) {
    if (!sdm || sdm->kind != CKPT__PK_DICT)
        return fail(r, CKPT__D(DCP_METADATA), NULL, sdm, "state_dict_metadata is not a dict");
    size_t n = sdm->u.seq.count / 2;
    ckpt_status charged = charge(r, n * (sizeof(entry) + 2 * sizeof(char *) + sizeof(tnode) + ckpt__cat_tensor_cost(0)), sdm);
    if (charged) return charged;
    entry *e = ckpt__calloc(n ? n : 1, sizeof *e);
    const char **names = ckpt__calloc(n ? n : 1, sizeof *names);
    ckpt__name_table seen = {0};
    if (!e || !names || !ckpt__name_table_init(&seen, n ? n : 1)) {
        free(e);
        free(names);
        ckpt__name_table_free(&seen);
        return oom(r);
    }
    *out = e;
    *count = n;
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < n && st == CKPT_OK; i++) {
        const ckpt__pk_value *k = sdm->u.seq.items[2 * i], *v = sdm->u.seq.items[2 * i + 1];
        if (k->kind != CKPT__PK_STR) {
            st = fail(r, CKPT__D(DCP_METADATA), NULL, k, "state_dict_metadata key %zu is not a string", i);
            break;
        }
        e[i].fqn = names[i] = k->u.s.data;
        e[i].value = v;
        e[i].t.fqn = k->u.s.data;
        if (!ckpt__name_table_insert(&seen, names, sizeof *names, (uint32_t)i, NULL)) {
            st = fail(r, CKPT__D(DCP_METADATA), e[i].fqn, k, "state_dict_metadata names the tensor twice");
        } else if (is_obj(v, META, "TensorStorageMetadata")) {
            st = read_tensor_meta(r, &e[i].t, v);
        } else if (is_obj(v, META, "BytesStorageMetadata")) {
            e[i].bytes = true;
            e[i].object = find_item(r, e[i].fqn, NULL, -1);
            if (!e[i].object) st = fail(r, CKPT__D(DCP_METADATA), e[i].fqn, v, "the object has no storage_data entry");
            else e[i].object->used = true;
        } else {
            st = fail(r, CKPT__D(DCP_METADATA), e[i].fqn, v,
                      "state_dict_metadata value is neither TensorStorageMetadata nor BytesStorageMetadata");
        }
    }
    free(names);
    ckpt__name_table_free(&seen);
    return st;
}

static ckpt_status dcp_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    reader r = {.c = c, .arena = ckpt__cat_arena(c), .err = err};
    char *buf = NULL;
    uint64_t len = src->size;
    r.path = ckpt__arena_strndup(r.arena, src->name, strlen(src->name));
    r.dir = ckpt__path_dirname(src->name);
    ckpt_status st = r.path && r.dir ? ckpt__cat_set_index_path(c, src->name, err) : ckpt__oom(err, src->name, NULL);
    /* The checkpoint is the directory: its data files count as input to
     * the budget before the pickle of .metadata (a value takes 40 bytes;
     * torch's .metadata spends 4 or 5 bytes a value) is read.  A remote
     * directory cannot be listed: there only .metadata counts. */
    if (st == CKPT_OK && ckpt__cat_root(c)) ckpt__budget_add_input(r.arena->budget, ckpt__beneath_file_bytes(ckpt__cat_root(c)));
    /* .metadata is read whole: it counts against the metadata budget */
    uint64_t buf_bytes = len <= MAX_METADATA_BYTES ? len : 0;
    if (st == CKPT_OK) st = ckpt__budget_charge(r.arena->budget, buf_bytes, err, src->name, 0);
    if (st == CKPT_OK) st = ckpt__source_slurp(src, MAX_METADATA_BYTES, CKPT_E_LIMIT, &buf, err);
    ckpt__source_close(src);
    ckpt__pk_value *root = NULL;
    if (st == CKPT_OK) {
        ckpt__pk_source pk = {r.path, NULL, 0};
        size_t used;
        st = ckpt__pk_load((const unsigned char *)buf, (size_t)len, &pk, dcp_allowed, NULL, r.arena, &root, &used, err);
    }
    r.budget = 4 * len + 1024;
    if (st == CKPT_OK) st = check_tree(&r, root);
    if (st == CKPT_OK && !is_obj(root, META, "Metadata"))
        st = fail(&r, CKPT__D(DCP_METADATA), NULL, root, "the pickle is not a torch.distributed.checkpoint Metadata");
    const ckpt__pk_value *state = st == CKPT_OK ? root->state : NULL;
    if (st == CKPT_OK) {
        const ckpt__pk_value *sm = field(state, "storage_meta"), *version = field(state, "version"),
                             *planner = field(state, "planner_data");
        if (!is_none(sm) && !is_obj(sm, META, "StorageMeta"))
            st = fail(&r, CKPT__D(DCP_METADATA), NULL, sm, "storage_meta is not a StorageMeta");
        else if (!is_none(version) && version->kind != CKPT__PK_STR)
            st = fail(&r, CKPT__D(DCP_METADATA), NULL, version, "version is not a string");
        else if (!is_none(planner) && planner->kind != CKPT__PK_DICT)
            st = fail(&r, CKPT__D(DCP_METADATA), NULL, planner, "planner_data is not a dict");
    }
    if (st == CKPT_OK) st = read_storage_data(&r, field(state, "storage_data"));
    entry *e = NULL;
    size_t n = 0, parts = 0;
    if (st == CKPT_OK) st = read_entries(&r, field(state, "state_dict_metadata"), &e, &n);
    if (st == CKPT_OK) st = read_paths(&r, field(state, "planner_data"), e, n, &parts);
    if (st == CKPT_OK) st = open_files(&r);
    /* Catalog order: the nested state dict's, as dcp_to_torch_save
     * rebuilds it (an entry joins the dict its path first made). */
    size_t *order = st == CKPT_OK ? ckpt__malloc((n ? n : 1) * sizeof *order) : NULL, placed = 0;
    if (st == CKPT_OK && !order) st = oom(&r);
    if (st == CKPT_OK) st = build_trie(&r, e, n, parts);
    if (st == CKPT_OK) st = leaf_order(&r, order, &placed);
    for (size_t k = 0; k < placed && st == CKPT_OK; k++) {
        entry *x = &e[order[k]];
        st = x->bytes ? add_bytes(&r, x->fqn, x->object, &x->leaf) : add_tensor(&r, &x->t);
    }
    free(order);
    /* The tree always: a path's parts and a key's own dots both make the
     * fqn's dots ({"model": {"conv1.weight": …}} is "model.conv1.weight"),
     * and only the tree says which state dict dcp_to_torch_save rebuilds. */
    if (st == CKPT_OK) st = add_tree(&r, e, n);
    ckpt__cat_set_format(c, CKPT_FORMAT_DCP);
    for (size_t i = 0; i < n; i++) {
        free(e[i].t.chunks);
        free(e[i].t.chunk_items);
    }
    free(e);
    free(r.leaf_values);
    free(r.slots);
    free(r.items);
    free(r.files);
    free(r.order);
    for (size_t i = 0; i < RUN_SLOTS; i++) free(r.runs[i].buf);
    ckpt__name_table_free(&r.item_keys);
    free(r.dir);
    free(buf);
    ckpt__budget_release(r.arena->budget, buf_bytes);
    return st;
}

static int dcp_probe(const unsigned char *head, size_t n, const char *name) {
    static const char needle[] = "torch.distributed.checkpoint.metadata";
    if (n >= 2 && head[0] == 0x80 && memmem(head, n, needle, sizeof needle - 1)) return CKPT__PROBE_MAGIC;
    if (name && !strcmp(name, ".metadata")) return CKPT__PROBE_NAME;
    return CKPT__PROBE_NO;
}

const ckpt__format ckpt__format_dcp = {"dcp", CKPT_FORMAT_DCP, dcp_probe, dcp_open};

/* One rank's data file opened on its own: its first item looks like a
 * torch.save archive, but only .metadata says what the file holds. */
static int distcp_probe(const unsigned char *head, size_t n, const char *name) {
    (void)head, (void)n;
    size_t len = name ? strlen(name) : 0;
    return len > 7 && !strcmp(name + len - 7, ".distcp") ? CKPT__PROBE_MAGIC : CKPT__PROBE_NO;
}

static ckpt_status distcp_open(ckpt_catalog *c, ckpt__source *src, ckpt_error *err) {
    (void)c;
    ckpt_status st = ckpt__fail(err, CKPT_E_UNKNOWN_FORMAT, src->name, NULL, -1,
                                "this is one rank's data file of a torch.distributed.checkpoint; open the directory "
                                "that holds it and its .metadata");
    ckpt__source_close(src);
    return st;
}

const ckpt__format ckpt__format_distcp = {"dcp-data", CKPT_FORMAT_DCP, distcp_probe, distcp_open};
