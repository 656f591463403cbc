/* dcp_output.c — the DCP output format (formats/output.h): a
 * torch.distributed.checkpoint directory that torch.distributed.checkpoint
 * .load reads on any number of ranks.
 *
 * plan    a tensor with at least `dcp->ranks` rows is cut along its first
 *         axis as DTensor's Shard(0) cuts it (ceil(rows / ranks) rows per
 *         rank, the last ranks shorter or empty) — one writer part per
 *         rank's rows; smaller tensors, scalars and the object tree's
 *         non-tensor values (flattened as torch's flatten_state_dict does)
 *         are written once, by rank 0.  Each rank's items are torch.save
 *         archives back to back on 64-byte boundaries in
 *         `__<rank>_0.distcp`: objects first (as torch writes bytes before
 *         tensors), then the tensors' chunks.  Everything is placed here.
 * layout  rank 0's leading bytes: the objects' archives.
 * finish  each chunk's archive around its data — the head before it, and
 *         the tail (its CRC-32, the central directory) after it — then
 *         `.metadata` as a side file, last.
 * See dcp.h for the format, dcp_write.c for the bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcp.h"
#include "output.h"
#include "torch_save.h"

enum { ITEM_ALIGN = 64, MAX_PATH_PARTS = 256 };
#define TREE_KEY "ckpt.torch_tree" /* the object tree as a conversion passes it (tree_internal.h) */

typedef struct chunk_out {
    uint32_t rank;
    uint64_t *offsets, *sizes; /* ndim */
    uint64_t item_at;          /* the archive's offset in the rank's file */
    ckpt__dcp_archive archive; /* buffers in the writer's arena */
} chunk_out;

typedef struct tensor_out {
    ckpt__dcp_path_part *path;
    uint32_t path_len;
    bool in_tree;
    size_t first; /* its chunks: chunks[first, first + the tensor's part_count) */
} tensor_out;

typedef struct object_out {
    const char *fqn;
    ckpt__dcp_path_part *path;
    uint32_t path_len;
    uint64_t item_at;
    uint64_t size;
} object_out;

typedef struct entry_out {
    bool object;
    size_t index;
} entry_out;

typedef struct dcp_state {
    uint32_t ranks;
    tensor_out *tensors;
    chunk_out *chunks;
    size_t chunk_count;
    object_out *objects;
    size_t object_count;
    entry_out *order; /* state_dict_metadata's order */
    size_t order_count;
    ckpt__buf rank0_head; /* the objects' archives (arena copy) */
} dcp_state;

static dcp_state *state_of(ckpt__output *o) { return *ckpt__out_format_state(o); }

static bool dcp_owns(const char *prefix, const char *name) {
    (void)prefix;
    size_t n = strlen(name);
    return !strcmp(name, ".metadata") || (n > 7 && !strcmp(name + n - 7, ".distcp"));
}

/* Moves an archive's buffers into the arena (the format has no teardown). */
static bool to_arena(ckpt__arena *a, ckpt__dcp_archive *ar) {
    ckpt__buf *bufs[2] = {&ar->head, &ar->pickle};
    for (int i = 0; i < 2; i++) {
        char *copy = ckpt__arena_alloc(a, bufs[i]->len + 1);
        if (!copy) return false;
        if (bufs[i]->len) memcpy(copy, bufs[i]->data, bufs[i]->len);
        free(bufs[i]->data);
        bufs[i]->data = copy;
        bufs[i]->cap = bufs[i]->len + 1;
    }
    return true;
}

/* ---- the object tree, flattened as torch's flatten_state_dict does ----------------- */

typedef struct walk {
    ckpt__output *o;
    dcp_state *s;
    const ckpt__name_table *names;
    const char **tensor_names;
    ckpt__dcp_path_part parts[MAX_PATH_PARTS];
    uint32_t depth;
    ckpt_error *err;
    size_t object_cap, order_cap;
    ckpt__stack lists; /* is_terminal's walk */
} walk;

/* torch/distributed/checkpoint/_traverse.py: a mapping is never terminal;
 * a list is, unless it holds a tensor or a non-terminal mapping or list;
 * anything else (tuples included) is.  So a list is not terminal when a
 * mapping or a tensor lies under it through lists only: its lists are
 * gone through on a heap stack, skipping what is under anything else. */
static bool is_terminal(walk *k, const ckpt__value *v) {
    if (v->kind == CKPT__V_DICT) return false;
    if (v->kind != CKPT__V_LIST) return true;
    ckpt__stack *pending = &k->lists;
    pending->len = 0;
    const ckpt__value **top = ckpt__stack_push(pending);
    if (top) *top = v;
    while (top && pending->len) {
        const ckpt__value *list = *(const ckpt__value **)ckpt__stack_top(pending);
        ckpt__stack_pop(pending);
        for (uint32_t i = 0; i < list->count; i++) {
            const ckpt__value *c = list->u.items[i];
            if (c->kind == CKPT__V_DICT || c->kind == CKPT__V_TENSOR) return false;
            if (c->kind == CKPT__V_LIST && (top = ckpt__stack_push(pending))) *top = c;
        }
    }
    return true; /* out of memory: written as a value, which a later step refuses if it holds a tensor */
}

static char *join_path(ckpt__arena *a, const ckpt__dcp_path_part *p, uint32_t n) {
    ckpt__buf b = {0};
    for (uint32_t i = 0; i < n; i++) {
        if (i) ckpt__buf_puts(&b, ".");
        if (p[i].key) ckpt__buf_puts(&b, p[i].key);
        else ckpt__buf_u64(&b, p[i].index);
    }
    char *s = b.failed ? NULL : ckpt__arena_strndup(a, b.data ? b.data : "", b.len);
    free(b.data);
    return s;
}

static ckpt_status add_order(walk *k, bool object, size_t index) {
    dcp_state *s = k->s;
    entry_out *e = ckpt__grow(s->order, s->order_count, &k->order_cap, sizeof *e, 64);
    if (!e) return ckpt__oom(k->err, ckpt__out_path(k->o), NULL);
    s->order = e;
    s->order[s->order_count++] = (entry_out){object, index};
    return CKPT_OK;
}

static ckpt_status visit(walk *k, const ckpt__value *v) {
    ckpt__output *o = k->o;
    dcp_state *s = k->s;
    if (k->depth == 0)
        return ckpt__fail(k->err, CKPT__D(DCP_UNSUPPORTED), ckpt__out_path(o), NULL, -1,
                          "the object tree's root is not a dict: DCP saves a state dict");
    ckpt__dcp_path_part *path = ckpt__arena_alloc(ckpt__out_arena(o), k->depth * sizeof *path);
    char *fqn = join_path(ckpt__out_arena(o), k->parts, k->depth);
    if (!path || !fqn) return ckpt__oom(k->err, ckpt__out_path(o), NULL);
    memcpy(path, k->parts, k->depth * sizeof *path);
    if (v->kind == CKPT__V_TENSOR) {
        const char *name = v->u.s.data;
        int64_t i = ckpt__out_count(o) ? ckpt__name_table_find(k->names, k->tensor_names, sizeof *k->tensor_names, name)
                                       : -1;
        /* Not declared, renamed (its DCP key would not be its name), or a
         * second reference: left to plan, as a key of its own. */
        if (i < 0 || s->tensors[i].in_tree || strcmp(fqn, name)) return CKPT_OK;
        s->tensors[i] = (tensor_out){.path = path, .path_len = k->depth, .in_tree = true};
        return add_order(k, false, (size_t)i);
    }
    object_out *grown = ckpt__grow(s->objects, s->object_count, &k->object_cap, sizeof *grown, 16);
    if (!grown) return ckpt__oom(k->err, ckpt__out_path(o), NULL);
    s->objects = grown;
    /* The object's archive now, while the tree is at hand. */
    ckpt__dcp_archive ar;
    ckpt_status st = ckpt__dcp_object_archive(&ar, v, fqn, s->object_count + 1, k->err);
    if (st) {
        if (k->err) snprintf(k->err->path, sizeof k->err->path, "%s", ckpt__out_path(o));
        return st;
    }
    object_out *ob = &s->objects[s->object_count];
    *ob = (object_out){fqn, path, k->depth, s->rank0_head.len, ar.size};
    ckpt__buf_append(&s->rank0_head, ar.head.data, ar.head.len);
    while (s->rank0_head.len % ITEM_ALIGN) ckpt__buf_append(&s->rank0_head, "", 1);
    ckpt__dcp_archive_free(&ar);
    if (s->rank0_head.failed) return ckpt__oom(k->err, ckpt__out_path(o), NULL);
    s->object_count++;
    return add_order(k, true, s->object_count - 1);
}

/* A dict or a list being gone through. */
typedef struct open_level {
    const ckpt__value *v;
    uint32_t next;
    bool in_child; /* a child was entered, under a path part of its own */
} open_level;

/* v at the current path: a dict's or a non-terminal list's children are
 * gone through (a level pushed), anything else visited. */
static ckpt_status enter_node(walk *k, ckpt__stack *open, const ckpt__value *v) {
    if (k->depth >= MAX_PATH_PARTS)
        return ckpt__fail(k->err, CKPT_E_LIMIT, ckpt__out_path(k->o), NULL, -1, "the object tree is nested too deep");
    if (is_terminal(k, v)) return visit(k, v);
    open_level *l = ckpt__stack_push(open);
    if (!l) return ckpt__oom(k->err, ckpt__out_path(k->o), NULL);
    *l = (open_level){v, 0, false}; /* a dict, or a list that holds tensors or dicts */
    return CKPT_OK;
}

/* str(key): a string as it is, a number as Python writes it, a bool as Python spells it; NULL: another value. */
static char *key_text(ckpt__arena *a, const ckpt__value *key) {
    char num[32];
    ckpt__buf b = {0};
    switch (key->kind) {
    case CKPT__V_STR: case CKPT__V_NUMBER: return ckpt__arena_strndup(a, key->u.s.data, key->u.s.len);
    case CKPT__V_BOOL: return ckpt__arena_strndup(a, key->u.b ? "True" : "False", key->u.b ? 4 : 5);
    case CKPT__V_INT:
        snprintf(num, sizeof num, "%lld", (long long)key->u.i);
        return ckpt__arena_strndup(a, num, strlen(num));
    case CKPT__V_FLOAT: {
        ckpt__buf_json_float(&b, key->u.f);
        char *s = b.failed ? NULL : ckpt__arena_strndup(a, b.data, b.len);
        free(b.data);
        return s;
    }
    default: return NULL;
    }
}

/* The next child of level l, under its path part (a dict's key as str()
 * spells it, a list's index). */
static ckpt_status next_child(walk *k, ckpt__stack *open, open_level *l) {
    uint32_t i = l->next++;
    const ckpt__value *v = l->v;
    if (v->kind != CKPT__V_DICT) {
        k->parts[k->depth++] = (ckpt__dcp_path_part){NULL, i};
        l->in_child = true;
        return enter_node(k, open, v->u.items[i]);
    }
    const ckpt__value *key = ckpt__value_key(v, i);
    if (key->kind != CKPT__V_STR && key->kind != CKPT__V_NUMBER && key->kind != CKPT__V_BOOL && key->kind != CKPT__V_INT &&
        key->kind != CKPT__V_FLOAT)
        return ckpt__fail(k->err, CKPT__D(DCP_UNSUPPORTED), ckpt__out_path(k->o), NULL, -1, "a dict key that DCP cannot name");
    char *text = key_text(ckpt__out_arena(k->o), key);
    if (!text) return ckpt__oom(k->err, ckpt__out_path(k->o), NULL);
    k->parts[k->depth++] = (ckpt__dcp_path_part){text, 0};
    l->in_child = true;
    return enter_node(k, open, ckpt__value_at(v, i));
}

/* The tree's dicts and lists depth first, the levels being gone through on
 * a heap stack (the path in k->parts). */
static ckpt_status traverse(walk *k, const ckpt__value *tree) {
    ckpt__stack open = CKPT__STACK(open_level);
    ckpt_status st = enter_node(k, &open, tree);
    while (st == CKPT_OK && open.len) {
        open_level *l = ckpt__stack_top(&open);
        if (l->in_child) k->depth--, l->in_child = false;
        if (l->next == l->v->count) ckpt__stack_pop(&open);
        else st = next_child(k, &open, l);
    }
    ckpt__stack_free(&open);
    return st;
}

/* The tree's tensors and objects, in the tree's order. */
static ckpt_status flatten_tree(ckpt__output *o, dcp_state *s, const ckpt__value *tree, ckpt_error *err) {
    size_t n = ckpt__out_count(o);
    const char **names = ckpt__malloc((n ? n : 1) * sizeof *names);
    ckpt__name_table table = {0};
    ckpt_status st = names && ckpt__name_table_init(&table, n ? n : 1) ? CKPT_OK : ckpt__oom(err, ckpt__out_path(o), NULL);
    if (st == CKPT_OK && tree->kind != CKPT__V_DICT)
        st = ckpt__fail(err, CKPT__D(DCP_UNSUPPORTED), ckpt__out_path(o), NULL, -1,
                        "the object tree's root is not a dict: DCP saves a state dict");
    if (st == CKPT_OK) {
        for (size_t i = 0; i < n; i++) {
            names[i] = ckpt__out_tensor_at(o, i)->name;
            ckpt__name_table_insert(&table, names, sizeof *names, (uint32_t)i, NULL);
        }
        walk k = {.o = o, .s = s, .names = &table, .tensor_names = names, .err = err,
                  .lists = CKPT__STACK(const ckpt__value *)};
        st = traverse(&k, tree);
        ckpt__stack_free(&k.lists);
    }
    ckpt__name_table_free(&table);
    free(names);
    return st;
}

/* ---- plan -------------------------------------------------------------------------- */

/* The phases of a plan: the format's state, the order of the entries (the
 * tree's, then the tensors it does not name), the entries' DCP keys, each
 * tensor's chunks, and the files the chunks go to. */

/* The state, with a record per tensor; every dtype must be torch's. */
static ckpt_status new_state(ckpt__output *o, dcp_state **out, ckpt_error *err) {
    ckpt__arena *a = ckpt__out_arena(o);
    const char *path = ckpt__out_path(o);
    size_t n = ckpt__out_count(o);
    dcp_state *s = ckpt__arena_alloc(a, sizeof *s);
    if (!s) return ckpt__oom(err, path, NULL);
    memset(s, 0, sizeof *s);
    *ckpt__out_format_state(o) = *out = s;
    s->ranks = ckpt__out_options(o)->dcp->ranks ? ckpt__out_options(o)->dcp->ranks : 1;
    s->tensors = ckpt__arena_alloc(a, (n ? n : 1) * sizeof *s->tensors);
    if (!s->tensors) return ckpt__oom(err, path, NULL);
    memset(s->tensors, 0, (n ? n : 1) * sizeof *s->tensors);
    for (size_t i = 0; i < n; i++)
        if (!ckpt__torch_type_of(ckpt__out_tensor_at(o, i)->dtype))
            return ckpt__fail(err, CKPT__D(UNKNOWN_DTYPE), path, ckpt__out_tensor_at(o, i)->name, -1,
                              "%s has no torch dtype that DCP could record",
                              ckpt_dtype_name(ckpt__out_tensor_at(o, i)->dtype));
    return CKPT_OK;
}

/* The tensors the tree does not name, after those it does: keys of their own. */
static ckpt_status order_the_rest(ckpt__output *o, dcp_state *s, ckpt_error *err) {
    size_t order_cap = s->order_count;
    for (size_t i = 0; i < ckpt__out_count(o); i++) {
        tensor_out *t = &s->tensors[i];
        if (t->in_tree) continue;
        if (!(t->path = ckpt__arena_alloc(ckpt__out_arena(o), sizeof *t->path))) return ckpt__oom(err, ckpt__out_path(o), NULL);
        t->path[0] = (ckpt__dcp_path_part){ckpt__out_tensor_at(o, i)->name, 0};
        t->path_len = 1;
        entry_out *e = ckpt__grow(s->order, s->order_count, &order_cap, sizeof *e, 64);
        if (!e) return ckpt__oom(err, ckpt__out_path(o), NULL);
        s->order = e;
        s->order[s->order_count++] = (entry_out){false, i};
    }
    return CKPT_OK;
}

/* The order array, the objects and rank 0's head move into the arena
 * (`st`: whether the phases before succeeded; if not they are freed). */
static ckpt_status settle_in_arena(ckpt__output *o, dcp_state *s, ckpt_status st, ckpt_error *err) {
    ckpt__arena *a = ckpt__out_arena(o);
    entry_out *order = NULL;
    object_out *objects = NULL;
    char *head = NULL;
    if (st == CKPT_OK) {
        order = ckpt__arena_alloc(a, (s->order_count ? s->order_count : 1) * sizeof *order);
        objects = ckpt__arena_alloc(a, (s->object_count ? s->object_count : 1) * sizeof *objects);
        head = ckpt__arena_alloc(a, s->rank0_head.len + 1);
        if (!order || !objects || !head) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    }
    if (st == CKPT_OK) {
        if (s->order_count) memcpy(order, s->order, s->order_count * sizeof *order);
        if (s->object_count) memcpy(objects, s->objects, s->object_count * sizeof *objects);
        if (s->rank0_head.len) memcpy(head, s->rank0_head.data, s->rank0_head.len);
    }
    free(s->order), free(s->objects), free(s->rank0_head.data);
    s->order = st ? NULL : order, s->objects = st ? NULL : objects;
    s->rank0_head = st ? (ckpt__buf){0} : (ckpt__buf){.data = head, .len = s->rank0_head.len, .cap = s->rank0_head.len + 1};
    return st;
}

/* Names are DCP keys: tensors' and objects' must differ. */
static ckpt_status check_keys(ckpt__output *o, const dcp_state *s, ckpt_error *err) {
    ckpt__name_table seen;
    const char **keys = ckpt__malloc((s->order_count ? s->order_count : 1) * sizeof *keys);
    if (!keys || !ckpt__name_table_init(&seen, s->order_count ? s->order_count : 1)) {
        free(keys);
        return ckpt__oom(err, ckpt__out_path(o), NULL);
    }
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && i < s->order_count; i++) {
        const entry_out *e = &s->order[i];
        keys[i] = e->object ? s->objects[e->index].fqn : ckpt__out_tensor_at(o, e->index)->name;
        if (!ckpt__name_table_insert(&seen, keys, sizeof *keys, (uint32_t)i, NULL))
            st = ckpt__fail(err, CKPT__D(DUPLICATE_NAME), ckpt__out_path(o), keys[i], -1,
                            "two entries of the checkpoint would have this DCP key");
    }
    ckpt__name_table_free(&seen);
    free(keys);
    return st;
}

/* Tensor i's chunks: Shard(0) cuts when it has at least `ranks` rows, each
 * an archive at the end of its rank's file (`size`: the files' sizes so
 * far; `id`: the next archive's). */
static ckpt_status plan_chunks(ckpt__output *o, dcp_state *s, size_t i, uint64_t *size, uint64_t *id, ckpt_error *err) {
    ckpt__arena *a = ckpt__out_arena(o);
    ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
    uint64_t rows = t->ndim ? t->shape[0] : 1, per = rows, row_bytes = t->ndim && rows ? t->nbytes / rows : 0;
    bool split = t->ndim && s->ranks > 1 && rows >= s->ranks;
    if (split) per = (rows + s->ranks - 1) / s->ranks;
    uint32_t count = split ? (uint32_t)((rows + per - 1) / per) : 1;
    t->parts = ckpt__arena_alloc(a, count * sizeof *t->parts);
    if (!t->parts) return ckpt__oom(err, ckpt__out_path(o), t->name);
    t->part_count = count;
    s->tensors[i].first = s->chunk_count;
    for (uint32_t r = 0; r < count; r++) {
        uint64_t row0 = split ? r * per : 0, rws = split ? (rows - row0 < per ? rows - row0 : per) : rows;
        chunk_out *c = &s->chunks[s->chunk_count++];
        c->rank = r;
        c->offsets = ckpt__arena_alloc(a, (t->ndim ? t->ndim : 1) * sizeof *c->offsets);
        c->sizes = ckpt__arena_alloc(a, (t->ndim ? t->ndim : 1) * sizeof *c->sizes);
        if (!c->offsets || !c->sizes) return ckpt__oom(err, ckpt__out_path(o), t->name);
        for (uint32_t d = 0; d < t->ndim; d++) c->offsets[d] = d ? 0 : row0, c->sizes[d] = d ? t->shape[d] : rws;
        uint64_t bytes = t->ndim ? rws * row_bytes : t->nbytes;
        if (ckpt__dcp_chunk_archive(&c->archive, t->dtype, t->ndim, c->sizes, bytes, (*id)++) != CKPT_OK ||
            !to_arena(a, &c->archive))
            return ckpt__oom(err, ckpt__out_path(o), t->name);
        c->item_at = size[r];
        t->parts[r] = (ckpt__out_part){.begin = t->ndim ? row0 * row_bytes : 0, .nbytes = bytes, .file = r,
                                       .offset = c->item_at + c->archive.head.len};
        size[r] = (c->item_at + c->archive.size + ITEM_ALIGN - 1) / ITEM_ALIGN * ITEM_ALIGN;
    }
    t->file = 0;
    return CKPT_OK;
}

/* A file per rank, __<rank>_0.distcp, of the size its chunks make. */
static ckpt_status name_files(ckpt__output *o, const dcp_state *s, const uint64_t *size, ckpt_error *err) {
    char **names = ckpt__calloc(s->ranks, sizeof *names);
    if (!names) return ckpt__oom(err, ckpt__out_path(o), NULL);
    ckpt_status st = CKPT_OK;
    for (uint32_t r = 0; st == CKPT_OK && r < s->ranks; r++) {
        char name[48];
        snprintf(name, sizeof name, "__%u_0.distcp", r);
        if (!(names[r] = ckpt__strdup(name))) st = ckpt__oom(err, ckpt__out_path(o), NULL);
    }
    if (st == CKPT_OK) st = ckpt__out_set_files(o, s->ranks, (const char *const *)names, err);
    for (uint32_t r = 0; r < s->ranks; r++) {
        free(names[r]);
        if (st == CKPT_OK) ckpt__out_set_file_size(o, r, size[r]);
    }
    free(names);
    return st;
}

static ckpt_status dcp_plan(ckpt__output *o, ckpt_error *err) {
    dcp_state *s = NULL;
    size_t n = ckpt__out_count(o);
    ckpt_status st = new_state(o, &s, err);
    if (st) return st;
    /* The tree orders and nests what it names; the rest are keys of their own. */
    const ckpt__value *tree;
    st = ckpt__out_tree(o, TREE_KEY, &tree, err);
    if (st == CKPT_OK && tree) st = flatten_tree(o, s, tree, err);
    if (st == CKPT_OK) st = order_the_rest(o, s, err);
    if ((st = settle_in_arena(o, s, st, err)) || (st = check_keys(o, s, err))) return st;
    size_t chunks = n * s->ranks; /* at most */
    uint64_t *size = ckpt__arena_alloc(ckpt__out_arena(o), s->ranks * sizeof *size);
    s->chunks = ckpt__arena_alloc(ckpt__out_arena(o), (chunks ? chunks : 1) * sizeof *s->chunks);
    if (!size || !s->chunks) return ckpt__oom(err, ckpt__out_path(o), NULL);
    memset(size, 0, s->ranks * sizeof *size);
    size[0] = s->rank0_head.len;
    uint64_t id = s->object_count + 1;
    for (size_t i = 0; st == CKPT_OK && i < n; i++) st = plan_chunks(o, s, i, size, &id, err);
    return st ? st : name_files(o, s, size, err);
}

/* ---- layout and finish ----------------------------------------------------------------- */

static ckpt_status dcp_layout(ckpt__output *o, uint32_t file, ckpt__buf *head, ckpt_error *err) {
    (void)err;
    dcp_state *s = state_of(o);
    if (file == 0 && s->rank0_head.len) ckpt__buf_append(head, s->rank0_head.data, s->rank0_head.len);
    return CKPT_OK;
}

static ckpt_status dcp_finish(ckpt__output *o, ckpt_error *err) {
    dcp_state *s = state_of(o);
    const char *path = ckpt__out_path(o);
    size_t n = ckpt__out_count(o);
    ckpt_status st = CKPT_OK;
    /* Each chunk's archive: its head, then (now that its CRC is known) its tail. */
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, i);
        for (uint32_t k = 0; st == CKPT_OK && k < t->part_count; k++) {
            const chunk_out *c = &s->chunks[s->tensors[i].first + k];
            ckpt__buf tail = {0};
            st = ckpt__out_patch(o, c->rank, c->item_at, c->archive.head.data, c->archive.head.len, err);
            if (st == CKPT_OK && ckpt__dcp_archive_tail(&c->archive, t->parts[k].crc32, &tail) != CKPT_OK)
                st = ckpt__oom(err, path, t->name);
            if (st == CKPT_OK)
                st = ckpt__out_patch(o, c->rank, t->parts[k].offset + t->parts[k].nbytes, tail.data, tail.len, err);
            free(tail.data);
        }
    }
    if (st) return st;
    /* .metadata, last. */
    char rel[48];
    char **names = ckpt__calloc(s->ranks, sizeof *names);
    ckpt__dcp_item_meta *items = ckpt__calloc(s->order_count ? s->order_count : 1, sizeof *items);
    ckpt__dcp_out_chunk *chunks = ckpt__calloc(s->chunk_count ? s->chunk_count : 1, sizeof *chunks);
    if (!names || !items || !chunks) st = ckpt__oom(err, path, NULL);
    for (uint32_t r = 0; st == CKPT_OK && r < s->ranks; r++) {
        snprintf(rel, sizeof rel, "__%u_0.distcp", r);
        if (!(names[r] = ckpt__strdup(rel))) st = ckpt__oom(err, path, NULL);
    }
    for (size_t i = 0; st == CKPT_OK && i < s->order_count; i++) {
        const entry_out *e = &s->order[i];
        if (e->object) {
            const object_out *ob = &s->objects[e->index];
            items[i] = (ckpt__dcp_item_meta){.fqn = ob->fqn, .path = ob->path, .path_len = ob->path_len,
                                             .object = {names[0], ob->item_at, ob->size}};
            continue;
        }
        const ckpt__out_tensor *t = ckpt__out_tensor_at(o, e->index);
        const tensor_out *to = &s->tensors[e->index];
        items[i] = (ckpt__dcp_item_meta){.fqn = t->name, .path = to->path, .path_len = to->path_len,
                                         .dtype = t->dtype, .ndim = t->ndim, .shape = t->shape,
                                         .chunk_count = t->part_count, .chunks = &chunks[to->first]};
        for (uint32_t k = 0; k < t->part_count; k++) {
            const chunk_out *c = &s->chunks[to->first + k];
            chunks[to->first + k] = (ckpt__dcp_out_chunk){c->offsets, c->sizes, {names[c->rank], c->item_at, c->archive.size}};
        }
    }
    ckpt__buf text = {0};
    if (st == CKPT_OK && ckpt__dcp_render_metadata(items, s->order_count, &text) != CKPT_OK)
        st = ckpt__oom(err, path, ".metadata");
    if (st == CKPT_OK) st = ckpt__out_add_side_file(o, ".metadata", text.data, text.len, err);
    free(text.data);
    for (uint32_t r = 0; names && r < s->ranks; r++) free(names[r]);
    free(names);
    free(items);
    free(chunks);
    return st;
}

const ckpt__output_format ckpt__output_dcp = {
    .name = "dcp",
    .id = CKPT_FORMAT_DCP,
    .layouts = CKPT__LAYOUT_DIR, /* no suffix: a directory, asked for by id */
    .plan = dcp_plan,
    .layout = dcp_layout,
    .finish = dcp_finish,
    .owns = dcp_owns,
    .needs = ckpt__out_needs_crc32,
    .dedup = false, /* every declared tensor is written, shared or not, as torch's DCP save does */
};
