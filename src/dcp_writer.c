/* dcp_writer.c — a ckpt_writer whose output is a torch.distributed.checkpoint
 * directory (ckpt_writer_options.format = CKPT_FORMAT_DCP).
 *
 * Tensors are declared, then their bytes stream in, in order, as for
 * safetensors.  A tensor with at least `ranks` rows is cut along its first
 * axis as DTensor's Shard(0) cuts it (ceil(rows / ranks) rows per rank, the
 * last ranks shorter or empty); smaller tensors, scalars and the object
 * tree's non-tensor values are written once, by rank 0.  Each rank's items
 * are torch.save archives, back to back on 64-byte boundaries, in
 * `__<rank>_0.distcp`; their layout is fixed at begin, so bytes go straight
 * to their place (pwrite at computed offsets), and only each archive's tail
 * (CRC-32 and central directory) waits for the data.  The directory is
 * built beside the destination and renamed into place at commit, the
 * .metadata last inside it.
 *
 * Integration point: once the output-format interface lands
 * (formats/output.h), the layout below is its `plan`/`layout` and commit's
 * tails and .metadata its `finish`. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dcp_writer.h"
#include "formats/dcp.h"
#include "formats/json.h"
#include "io/file.h"

enum { ITEM_ALIGN = 64, COPY_CHUNK = 8 << 20 };

/* A range of a part's bytes written, with its CRC-32: writes arrive from
 * several threads in any order, and commit joins the CRCs in byte order. */
typedef struct segment {
    uint64_t at, n;
    uint32_t crc;
} segment;

typedef struct part {
    uint32_t rank;
    uint64_t *offsets, *sizes; /* arena, ndim */
    uint64_t begin, nbytes;    /* the tensor's bytes it holds */
    uint64_t item_at, data_at; /* in the rank's file */
    ckpt__dcp_archive archive;
    segment *segments;         /* under the writer's lock */
    size_t segment_count, segment_cap;
} part;

typedef struct wtensor {
    const char *name; /* arena */
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape; /* arena */
    uint64_t nbytes, written; /* written: atomic */
    size_t first, parts; /* into w->parts */
    ckpt__dcp_path_part *path;
    uint32_t path_len;
    bool in_tree;
} wtensor;

typedef struct wobject {
    const char *fqn;
    ckpt__dcp_path_part *path;
    uint32_t path_len;
    uint32_t node;
    uint64_t item_at;
    ckpt__dcp_archive archive;
} wobject;

/* An entry of state_dict_metadata, in order: a tensor or an object. */
typedef struct order_entry {
    bool object;
    size_t index;
} order_entry;

typedef enum dstate { DECLARING, WRITING, COMMITTED, FAILED } dstate;

struct ckpt__dcp_writer {
    char *path;
    uint32_t ranks;
    bool overwrite, no_sync;
    dstate state;
    ckpt__arena arena;
    wtensor *tensors;
    size_t count, cap;
    ckpt__name_table names;
    size_t names_cap;
    part *parts;
    size_t part_count;
    wobject *objects;
    size_t object_count;
    order_entry *order;
    size_t order_count;
    char *tree;          /* the object tree's JSON, parsed in place */
    ckpt__json_doc doc;
    char *stage;         /* the directory being built */
    char **file_paths;   /* final paths, per rank */
    int *fds;
    uint64_t *file_size;
    uint64_t total;
    pthread_mutex_t lock; /* the parts' segments */
};

/* ---- declaring ------------------------------------------------------------------ */

ckpt_status ckpt__dcp_writer_create(const char *path, uint32_t ranks, bool overwrite, bool no_sync,
                                    ckpt__dcp_writer **out, ckpt_error *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return ckpt__fail(err, CKPT_E_EXISTS, path, NULL, -1,
                              "exists and is not a directory (a DCP checkpoint is a directory)");
        /* An existing checkpoint is replaced whole with overwrite; a
         * directory holding anything else never is. */
        DIR *d = opendir(path);
        if (!d) return ckpt__fail_errno(err, errno, path, -1, "cannot list the destination");
        size_t entries = 0;
        const char *stranger = NULL;
        char name[256];
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            entries++;
            size_t len = strlen(e->d_name);
            bool own = !strcmp(e->d_name, ".metadata") || (len > 7 && !strcmp(e->d_name + len - 7, ".distcp"));
            if (!own && !stranger) {
                snprintf(name, sizeof name, "%s", e->d_name);
                stranger = name;
            }
        }
        closedir(d);
        if (stranger)
            return ckpt__fail(err, CKPT_E_EXISTS, path, NULL, -1,
                              "exists and holds '%s', which is not part of a DCP checkpoint: choose another "
                              "destination", stranger);
        if (entries && !overwrite)
            return ckpt__fail(err, CKPT_E_EXISTS, path, NULL, -1,
                              "already holds a DCP checkpoint; use overwrite / --force to replace it");
    }
    ckpt__dcp_writer *w = ckpt__calloc(1, sizeof *w);
    if (!w || !(w->path = ckpt__strdup(path))) {
        free(w);
        return ckpt__oom(err, path, NULL);
    }
    w->ranks = ranks ? ranks : 1;
    pthread_mutex_init(&w->lock, NULL);
    w->overwrite = overwrite;
    w->no_sync = no_sync;
    *out = w;
    return CKPT_OK;
}

static ckpt_status check_declaring(ckpt__dcp_writer *w, ckpt_error *err) {
    if (w->state != DECLARING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "declarations must come before ckpt_writer_begin");
    return CKPT_OK;
}

ckpt_status ckpt__dcp_writer_add_tensor(ckpt__dcp_writer *w, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                        const uint64_t *shape, size_t *index, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    if (!name || !*name || ndim > CKPT_MAX_DIMS || (ndim && !shape))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, name, -1, "a tensor needs a name and a shape");
    if (!ckpt__dcp_torch_dtype(dtype))
        return ckpt__fail(err, CKPT_E_UNKNOWN_DTYPE, w->path, name, -1,
                          "%s has no torch dtype that DCP could record", ckpt_dtype_name(dtype) ? ckpt_dtype_name(dtype) : "this dtype");
    uint64_t numel, nbytes;
    if (!ckpt__shape_numel(ndim, shape, &numel) || ckpt__dtype_nbytes(dtype, numel, &nbytes) != CKPT_OK)
        return ckpt__fail(err, CKPT_E_SHAPE_OVERFLOW, w->path, name, -1, "its size overflows");
    if (w->count == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        wtensor *t = ckpt__realloc(w->tensors, cap * sizeof *t);
        if (!t) return ckpt__oom(err, w->path, name);
        w->tensors = t;
        w->cap = cap;
    }
    if (w->count + 1 > w->names_cap / 2) {
        size_t want = w->names_cap ? w->names_cap * 2 : 256;
        ckpt__name_table table;
        if (!ckpt__name_table_init(&table, want)) return ckpt__oom(err, w->path, name);
        for (size_t i = 0; i < w->count; i++)
            ckpt__name_table_insert(&table, &w->tensors[0].name, sizeof *w->tensors, (uint32_t)i, NULL);
        ckpt__name_table_free(&w->names);
        w->names = table;
        w->names_cap = want;
    }
    wtensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    t->name = ckpt__arena_strndup(&w->arena, name, strlen(name));
    t->shape = ckpt__arena_alloc(&w->arena, (ndim ? ndim : 1) * sizeof *t->shape);
    if (!t->name || !t->shape) return ckpt__oom(err, w->path, name);
    if (ndim) memcpy(t->shape, shape, ndim * sizeof *shape);
    t->dtype = dtype;
    t->ndim = ndim;
    t->nbytes = nbytes;
    if (!ckpt__name_table_insert(&w->names, &w->tensors[0].name, sizeof *w->tensors, (uint32_t)w->count, NULL))
        return ckpt__fail(err, CKPT_E_DUPLICATE_NAME, w->path, name, -1, "the tensor is declared twice");
    if (index) *index = w->count;
    w->count++;
    w->total += nbytes;
    return CKPT_OK;
}

ckpt_status ckpt__dcp_writer_set_tree(ckpt__dcp_writer *w, const char *json, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    free(w->tree);
    ckpt__json_free(&w->doc);
    w->tree = ckpt__strdup(json);
    if (!w->tree) return ckpt__oom(err, w->path, NULL);
    size_t at;
    const char *why;
    if (ckpt__json_parse(w->tree, strlen(json), &w->doc, &at, &why) != CKPT_OK) {
        free(w->tree);
        w->tree = NULL;
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1,
                          "the object tree is not JSON (%s at its byte %zu)", why ? why : "invalid", at);
    }
    return CKPT_OK;
}

/* ---- the object tree, flattened as torch's flatten_state_dict does ---------------- */

static uint32_t member(const ckpt__json_doc *doc, uint32_t i, const char *key) {
    const ckpt__json_node *o = &doc->nodes[i];
    if (o->kind != CKPT__JSON_OBJECT) return 0;
    for (uint32_t k = 0, c = i + 1; k < o->count; k++, c = doc->nodes[c + 1].end)
        if (!strcmp(doc->nodes[c].str, key)) return c + 1;
    return 0;
}

static bool is_mapping(const ckpt__json_doc *d, uint32_t i) {
    uint32_t v = member(d, i, "__dict__");
    return v && d->nodes[v].kind == CKPT__JSON_ARRAY;
}

static bool is_tensor(const ckpt__json_doc *d, uint32_t i) {
    uint32_t v = member(d, i, "__tensor__");
    return v && d->nodes[v].kind == CKPT__JSON_STRING;
}

/* torch/distributed/checkpoint/_traverse.py: a mapping is never terminal;
 * a list is, unless it holds a tensor or a non-terminal mapping or list;
 * anything else (tuples included) is. */
static bool is_terminal(const ckpt__json_doc *d, uint32_t i) {
    if (is_mapping(d, i)) return false;
    const ckpt__json_node *n = &d->nodes[i];
    if (n->kind != CKPT__JSON_ARRAY) return true;
    for (uint32_t k = 0, c = i + 1; k < n->count; k++, c = d->nodes[c].end) {
        if ((is_mapping(d, c) || d->nodes[c].kind == CKPT__JSON_ARRAY) && !is_terminal(d, c)) return false;
        if (is_tensor(d, c)) return false;
    }
    return true;
}

typedef struct walk {
    ckpt__dcp_writer *w;
    ckpt__dcp_path_part parts[256];
    uint32_t depth;
    ckpt_error *err;
} walk;

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

static ckpt_status add_order(ckpt__dcp_writer *w, bool object, size_t index, ckpt_error *err) {
    order_entry *o = ckpt__realloc(w->order, (w->order_count + 1) * sizeof *o);
    if (!o) return ckpt__oom(err, w->path, NULL);
    w->order = o;
    w->order[w->order_count++] = (order_entry){object, index};
    return CKPT_OK;
}

static ckpt_status visit(walk *k, uint32_t node) {
    ckpt__dcp_writer *w = k->w;
    if (k->depth == 0)
        return ckpt__fail(k->err, CKPT_E_DCP_UNSUPPORTED, w->path, NULL, -1, "the object tree's root is not a dict");
    ckpt__dcp_path_part *path = ckpt__arena_alloc(&w->arena, k->depth * sizeof *path);
    char *fqn = join_path(&w->arena, k->parts, k->depth);
    if (!path || !fqn) return ckpt__oom(k->err, w->path, NULL);
    memcpy(path, k->parts, k->depth * sizeof *path);
    if (is_tensor(&w->doc, node)) {
        const char *name = w->doc.nodes[member(&w->doc, node, "__tensor__")].str;
        int64_t i = w->count ? ckpt__name_table_find(&w->names, &w->tensors[0].name, sizeof *w->tensors, name) : -1;
        /* Not selected, renamed (its DCP key would not be its name), or a
         * second reference: left to layout, as a key of its own. */
        if (i < 0 || w->tensors[i].in_tree || strcmp(fqn, name)) return CKPT_OK;
        wtensor *t = &w->tensors[i];
        t->in_tree = true;
        t->path = path;
        t->path_len = k->depth;
        return add_order(w, false, (size_t)i, k->err);
    }
    wobject *o = ckpt__realloc(w->objects, (w->object_count + 1) * sizeof *o);
    if (!o) return ckpt__oom(k->err, w->path, NULL);
    w->objects = o;
    o = &w->objects[w->object_count];
    memset(o, 0, sizeof *o);
    o->fqn = fqn;
    o->path = path;
    o->path_len = k->depth;
    o->node = node;
    w->object_count++;
    return add_order(w, true, w->object_count - 1, k->err);
}

static ckpt_status traverse(walk *k, uint32_t node) {
    const ckpt__json_doc *d = &k->w->doc;
    if (k->depth >= sizeof k->parts / sizeof k->parts[0])
        return ckpt__fail(k->err, CKPT_E_LIMIT, k->w->path, NULL, -1, "the object tree is nested too deep");
    ckpt_status st = CKPT_OK;
    uint32_t items = member(d, node, "__dict__");
    if (items && d->nodes[items].kind == CKPT__JSON_ARRAY) {
        const ckpt__json_node *a = &d->nodes[items];
        for (uint32_t i = 0, c = items + 1; i < a->count && st == CKPT_OK; i++, c = d->nodes[c].end) {
            if (d->nodes[c].kind != CKPT__JSON_ARRAY || d->nodes[c].count != 2)
                return ckpt__fail(k->err, CKPT_E_INVALID_ARGUMENT, k->w->path, NULL, -1, "malformed object tree");
            const ckpt__json_node *key = &d->nodes[c + 1];
            const char *text = key->kind == CKPT__JSON_STRING || key->kind == CKPT__JSON_NUMBER ? key->str
                             : key->kind == CKPT__JSON_TRUE ? "True" : key->kind == CKPT__JSON_FALSE ? "False" : NULL;
            if (!text) return ckpt__fail(k->err, CKPT_E_DCP_UNSUPPORTED, k->w->path, NULL, -1, "a dict key that DCP cannot name");
            /* str(key): strings point into the parsed tree; numbers are its raw text. */
            bool literal = key->kind == CKPT__JSON_TRUE || key->kind == CKPT__JSON_FALSE;
            char *copy = ckpt__arena_strndup(&k->w->arena, text, literal ? strlen(text) : key->len);
            if (!copy) return ckpt__oom(k->err, k->w->path, NULL);
            k->parts[k->depth++] = (ckpt__dcp_path_part){copy, 0};
            st = traverse(k, d->nodes[c + 1].end);
            k->depth--;
        }
        return st;
    }
    if (is_terminal(d, node)) return visit(k, node);
    const ckpt__json_node *a = &d->nodes[node]; /* a list that holds tensors or dicts */
    for (uint32_t i = 0, c = node + 1; i < a->count && st == CKPT_OK; i++, c = d->nodes[c].end) {
        k->parts[k->depth++] = (ckpt__dcp_path_part){NULL, i};
        st = traverse(k, c);
        k->depth--;
    }
    return st;
}

/* ---- laying out ------------------------------------------------------------------------ */

static ckpt_status layout(ckpt__dcp_writer *w, ckpt_error *err) {
    /* Tensors the tree does not place: top-level keys of their own. */
    for (size_t i = 0; i < w->count; i++) {
        wtensor *t = &w->tensors[i];
        if (t->in_tree) continue;
        t->path = ckpt__arena_alloc(&w->arena, sizeof *t->path);
        if (!t->path) return ckpt__oom(err, w->path, NULL);
        t->path[0] = (ckpt__dcp_path_part){t->name, 0};
        t->path_len = 1;
        ckpt_status st = add_order(w, false, i, err);
        if (st) return st;
    }
    /* Names are unique among tensors; objects must not reuse them. */
    ckpt__name_table seen;
    size_t n = w->order_count;
    const char **names = ckpt__malloc((n ? n : 1) * sizeof *names);
    if (!names || !ckpt__name_table_init(&seen, n ? n : 1)) {
        free(names);
        return ckpt__oom(err, w->path, NULL);
    }
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; i < n && st == CKPT_OK; i++) {
        const order_entry *o = &w->order[i];
        names[i] = o->object ? w->objects[o->index].fqn : w->tensors[o->index].name;
        if (!ckpt__name_table_insert(&seen, names, sizeof *names, (uint32_t)i, NULL))
            st = ckpt__fail(err, CKPT_E_DUPLICATE_NAME, w->path, names[i], -1,
                            "two entries of the checkpoint would have this DCP key");
    }
    ckpt__name_table_free(&seen);
    free(names);
    if (st) return st;

    /* Parts: Shard(0) cuts of tensors with at least `ranks` rows. */
    size_t cap = 0;
    for (size_t i = 0; i < w->count; i++) cap += w->ranks;
    w->parts = ckpt__calloc(cap ? cap : 1, sizeof *w->parts);
    w->file_size = ckpt__calloc(w->ranks, sizeof *w->file_size);
    if (!w->parts || !w->file_size) return ckpt__oom(err, w->path, NULL);
    /* Rank 0 writes the objects first, as torch writes bytes before tensors. */
    for (size_t i = 0; i < w->object_count; i++) {
        wobject *o = &w->objects[i];
        if ((st = ckpt__dcp_object_archive(&o->archive, &w->doc, o->node, o->fqn, w->part_count + i + 1, err))) {
            if (err) snprintf(err->path, sizeof err->path, "%s", w->path);
            return st;
        }
        o->item_at = w->file_size[0];
        w->file_size[0] = (o->item_at + o->archive.size + ITEM_ALIGN - 1) / ITEM_ALIGN * ITEM_ALIGN;
    }
    uint64_t id = w->object_count + 1;
    for (size_t i = 0; i < w->count; i++) {
        wtensor *t = &w->tensors[i];
        uint64_t rows = t->ndim ? t->shape[0] : 1, per = rows, row_bytes = 0;
        bool split = t->ndim && w->ranks > 1 && rows >= w->ranks;
        if (split) per = (rows + w->ranks - 1) / w->ranks;
        if (t->ndim) row_bytes = rows ? t->nbytes / rows : 0;
        t->first = w->part_count;
        for (uint32_t r = 0; r < (split ? w->ranks : 1); r++) {
            uint64_t row0 = split ? r * per : 0;
            if (split && row0 >= rows) break;
            uint64_t count = split ? (rows - row0 < per ? rows - row0 : per) : rows;
            part *p = &w->parts[w->part_count++];
            p->rank = r;
            p->offsets = ckpt__arena_alloc(&w->arena, (t->ndim ? t->ndim : 1) * sizeof *p->offsets);
            p->sizes = ckpt__arena_alloc(&w->arena, (t->ndim ? t->ndim : 1) * sizeof *p->sizes);
            if (!p->offsets || !p->sizes) return ckpt__oom(err, w->path, t->name);
            for (uint32_t d = 0; d < t->ndim; d++) {
                p->offsets[d] = d ? 0 : row0;
                p->sizes[d] = d ? t->shape[d] : count;
            }
            p->begin = t->ndim ? row0 * row_bytes : 0;
            p->nbytes = t->ndim ? count * row_bytes : t->nbytes;
            if (ckpt__dcp_chunk_archive(&p->archive, t->dtype, t->ndim, p->sizes, p->nbytes, id++))
                return ckpt__oom(err, w->path, t->name);
            p->item_at = w->file_size[r];
            p->data_at = p->item_at + p->archive.head.len;
            w->file_size[r] = (p->item_at + p->archive.size + ITEM_ALIGN - 1) / ITEM_ALIGN * ITEM_ALIGN;
        }
        t->parts = w->part_count - t->first;
    }
    return CKPT_OK;
}

static char *rank_file_name(uint32_t r) {
    char name[48];
    snprintf(name, sizeof name, "__%u_0.distcp", r);
    return ckpt__strdup(name);
}

ckpt_status ckpt__dcp_writer_begin(ckpt__dcp_writer *w, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    w->state = FAILED; /* until everything below succeeds */
    if (w->tree) {
        if (w->doc.nodes[0].kind != CKPT__JSON_OBJECT || !member(&w->doc, 0, "__dict__"))
            return ckpt__fail(err, CKPT_E_DCP_UNSUPPORTED, w->path, NULL, -1,
                              "the object tree's root is not a dict: DCP saves a state dict");
        walk k = {.w = w, .err = err};
        if ((st = traverse(&k, 0))) return st;
    }
    if ((st = layout(w, err))) return st;
    char *parent = ckpt__path_dirname(w->path);
    if (!parent) return ckpt__oom(err, w->path, NULL);
    ckpt__remove_stale_temps(parent);
    free(parent);
    if ((st = ckpt__temp_dir_create(w->path, &w->stage, err))) return st;
    w->fds = ckpt__malloc(w->ranks * sizeof *w->fds);
    w->file_paths = ckpt__calloc(w->ranks, sizeof *w->file_paths);
    if (!w->fds || !w->file_paths) return ckpt__oom(err, w->path, NULL);
    for (uint32_t r = 0; r < w->ranks; r++) w->fds[r] = -1;
    for (uint32_t r = 0; r < w->ranks && st == CKPT_OK; r++) {
        char *name = rank_file_name(r);
        char *tmp = name ? ckpt__path_join(w->stage, name) : NULL;
        w->file_paths[r] = name ? ckpt__path_join(w->path, name) : NULL;
        free(name);
        if (!tmp || !w->file_paths[r]) {
            free(tmp);
            return ckpt__oom(err, w->path, NULL);
        }
        w->fds[r] = ckpt__io_open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (w->fds[r] < 0) st = ckpt__fail_errno(err, errno, tmp, -1, "cannot create");
        if (st == CKPT_OK) st = ckpt__reserve(w->fds[r], w->file_size[r], tmp, err);
        free(tmp);
    }
    for (size_t i = 0; i < w->object_count && st == CKPT_OK; i++)
        st = ckpt__pwrite_full(w->fds[0], w->objects[i].archive.head.data, w->objects[i].archive.head.len,
                               w->objects[i].item_at, w->file_paths[0], err);
    for (size_t i = 0; i < w->part_count && st == CKPT_OK; i++) {
        part *p = &w->parts[i];
        st = ckpt__pwrite_full(w->fds[p->rank], p->archive.head.data, p->archive.head.len, p->item_at,
                               w->file_paths[p->rank], err);
    }
    if (st == CKPT_OK) w->state = WRITING;
    return st;
}

/* ---- data ---------------------------------------------------------------------------- */

static ckpt_status check_append(ckpt__dcp_writer *w, size_t index, uint64_t at, uint64_t n, ckpt_error *err) {
    if (w->state != WRITING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1,
                          w->state == DECLARING ? "data must come after ckpt_writer_begin"
                                                : "the writer is committed or has failed");
    if (index >= w->count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "no tensor with writer index %zu", index);
    wtensor *t = &w->tensors[index];
    if (at > t->nbytes || n > t->nbytes - at)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, w->path, t->name, -1, "bytes [%llu, %llu) are outside the declared %llu",
                          (unsigned long long)at, (unsigned long long)(at + n), (unsigned long long)t->nbytes);
    return CKPT_OK;
}

/* The part that holds the tensor's byte `at` (parts are in row order). */
static part *part_at(ckpt__dcp_writer *w, const wtensor *t, uint64_t at) {
    size_t lo = 0, hi = t->parts; /* the last part that begins at or before `at` */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (w->parts[t->first + mid].begin <= at) lo = mid;
        else hi = mid;
    }
    return &w->parts[t->first + lo];
}

static ckpt_status add_segment(ckpt__dcp_writer *w, part *p, uint64_t at, uint64_t n, uint32_t crc, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    pthread_mutex_lock(&w->lock);
    if (p->segment_count == p->segment_cap) {
        size_t cap = p->segment_cap ? p->segment_cap * 2 : 8;
        segment *s = ckpt__realloc(p->segments, cap * sizeof *s);
        if (!s) st = ckpt__oom(err, w->path, NULL);
        else p->segments = s, p->segment_cap = cap;
    }
    if (st == CKPT_OK) p->segments[p->segment_count++] = (segment){at, n, crc};
    pthread_mutex_unlock(&w->lock);
    return st;
}

/* Tensor bytes [at, at + n) at their places: each part's share written
 * where its archive's data lies. */
ckpt_status ckpt__dcp_writer_pwrite(ckpt__dcp_writer *w, size_t index, uint64_t at, const void *data, size_t n,
                                    ckpt_error *err) {
    ckpt_status st = check_append(w, index, at, n, err);
    if (st) return st;
    if (n && !data) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "data is NULL");
    wtensor *t = &w->tensors[index];
    const unsigned char *src = data;
    for (uint64_t done = 0; done < n;) {
        part *p = part_at(w, t, at + done);
        uint64_t in = at + done - p->begin, take = p->nbytes - in < n - done ? p->nbytes - in : n - done;
        if ((st = ckpt__pwrite_full(w->fds[p->rank], src + done, take, p->data_at + in, w->file_paths[p->rank], err)))
            return ckpt__error_in_tensor(err, st, t->name);
        if ((st = add_segment(w, p, in, take, ckpt__dcp_crc32(0, src + done, (size_t)take), err))) return st;
        done += take;
    }
    __atomic_add_fetch(&t->written, n, __ATOMIC_ACQ_REL);
    return CKPT_OK;
}

ckpt_status ckpt__dcp_writer_write(ckpt__dcp_writer *w, size_t index, const void *data, size_t n, ckpt_error *err) {
    if (index >= w->count) return check_append(w, index, 0, n, err);
    return ckpt__dcp_writer_pwrite(w, index, __atomic_load_n(&w->tensors[index].written, __ATOMIC_ACQUIRE), data, n,
                                   err);
}

/* The bytes pass through here, not the kernel: each archive records their
 * CRC-32. */
ckpt_status ckpt__dcp_writer_pcopy(ckpt__dcp_writer *w, size_t index, uint64_t at, ckpt__source *src,
                                   uint64_t src_offset, uint64_t n, ckpt_error *err) {
    ckpt_status st = check_append(w, index, at, n, err);
    if (st) return st;
    size_t cap = n < COPY_CHUNK ? (size_t)n : COPY_CHUNK;
    unsigned char *buf = ckpt__malloc(cap ? cap : 1);
    if (!buf) return ckpt__oom(err, w->path, NULL);
    for (uint64_t done = 0; done < n && st == CKPT_OK;) {
        size_t len = n - done < cap ? (size_t)(n - done) : cap;
        st = ckpt__source_read(src, buf, len, src_offset + done, err);
        if (st == CKPT_OK) st = ckpt__dcp_writer_pwrite(w, index, at + done, buf, len, err);
        done += len;
    }
    free(buf);
    return st;
}

static int by_at(const void *a, const void *b) {
    uint64_t x = ((const segment *)a)->at, y = ((const segment *)b)->at;
    return x < y ? -1 : x > y;
}

/* A part's CRC-32 from its segments, which must tile its bytes. */
static ckpt_status part_crc(ckpt__dcp_writer *w, part *p, const char *tensor, uint32_t *crc, ckpt_error *err) {
    if (p->segment_count) qsort(p->segments, p->segment_count, sizeof *p->segments, by_at);
    uint64_t at = 0;
    uLong c = crc32_z(0L, Z_NULL, 0);
    for (size_t i = 0; i < p->segment_count; i++) {
        const segment *s = &p->segments[i];
        if (s->at != at) break;
        c = crc32_combine64(c, s->crc, (z_off64_t)s->n);
        at += s->n;
    }
    if (at != p->nbytes)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, tensor, -1,
                          "rank %u's chunk: bytes from %llu were written %s", p->rank, (unsigned long long)at,
                          at < p->nbytes ? "twice or not at all" : "beyond it");
    *crc = (uint32_t)c;
    return CKPT_OK;
}

/* ---- committing ------------------------------------------------------------------------ */

static ckpt_status write_metadata(ckpt__dcp_writer *w, ckpt_error *err) {
    ckpt__dcp_item_meta *items = ckpt__calloc(w->order_count ? w->order_count : 1, sizeof *items);
    ckpt__dcp_out_chunk *chunks = ckpt__calloc(w->part_count ? w->part_count : 1, sizeof *chunks);
    char **rel = ckpt__calloc(w->ranks, sizeof *rel);
    ckpt_status st = items && chunks && rel ? CKPT_OK : ckpt__oom(err, w->path, NULL);
    for (uint32_t r = 0; r < w->ranks && st == CKPT_OK; r++)
        if (!(rel[r] = rank_file_name(r))) st = ckpt__oom(err, w->path, NULL);
    for (size_t i = 0; i < w->order_count && st == CKPT_OK; i++) {
        const order_entry *o = &w->order[i];
        ckpt__dcp_item_meta *m = &items[i];
        if (o->object) {
            const wobject *ob = &w->objects[o->index];
            *m = (ckpt__dcp_item_meta){.fqn = ob->fqn, .path = ob->path, .path_len = ob->path_len,
                                       .object = {rel[0], ob->item_at, ob->archive.size}};
            continue;
        }
        const wtensor *t = &w->tensors[o->index];
        *m = (ckpt__dcp_item_meta){.fqn = t->name, .path = t->path, .path_len = t->path_len, .dtype = t->dtype,
                                   .ndim = t->ndim, .shape = t->shape, .chunk_count = (uint32_t)t->parts,
                                   .chunks = &chunks[t->first]};
        for (size_t k = 0; k < t->parts; k++) {
            const part *p = &w->parts[t->first + k];
            chunks[t->first + k] = (ckpt__dcp_out_chunk){p->offsets, p->sizes, {rel[p->rank], p->item_at, p->archive.size}};
        }
    }
    ckpt__buf text = {0};
    if (st == CKPT_OK && ckpt__dcp_render_metadata(items, w->order_count, &text)) st = ckpt__oom(err, w->path, NULL);
    char *path = st == CKPT_OK ? ckpt__path_join(w->stage, ".metadata") : NULL;
    if (st == CKPT_OK && !path) st = ckpt__oom(err, w->path, NULL);
    if (st == CKPT_OK) {
        int fd = ckpt__io_open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0) st = ckpt__fail_errno(err, errno, path, -1, "cannot create");
        if (st == CKPT_OK) st = ckpt__pwrite_full(fd, text.data, text.len, 0, path, err);
        if (st == CKPT_OK && !w->no_sync && ckpt__io_fsync(fd) != 0) st = ckpt__fail_errno(err, errno, path, -1, "fsync failed");
        if (fd >= 0 && close(fd) != 0 && st == CKPT_OK) st = ckpt__fail_errno(err, errno, path, -1, "close failed");
    }
    free(path);
    free(text.data);
    for (uint32_t r = 0; rel && r < w->ranks; r++) free(rel[r]);
    free(rel);
    free(items);
    free(chunks);
    return st;
}

/* Replaces the destination by the built directory: a new or empty one by
 * one rename; an existing checkpoint moved aside first, removed after. */
static ckpt_status publish(ckpt__dcp_writer *w, ckpt_error *err) {
    if (ckpt__io_rename(w->stage, w->path) == 0) return CKPT_OK;
    if (errno != ENOTEMPTY && errno != EEXIST)
        return ckpt__fail_errno(err, errno, w->path, -1, "cannot rename %s into place", w->stage);
    if (!w->overwrite) return ckpt__fail(err, CKPT_E_EXISTS, w->path, NULL, -1, "appeared while the checkpoint was written");
    char *old = NULL;
    ckpt_status st = ckpt__temp_dir_create(w->path, &old, err);
    if (st) return st;
    rmdir(old); /* only its unique name is wanted */
    if (ckpt__io_rename(w->path, old) != 0) st = ckpt__fail_errno(err, errno, w->path, -1, "cannot move the old checkpoint aside");
    else if (ckpt__io_rename(w->stage, w->path) != 0) {
        st = ckpt__fail_errno(err, errno, w->path, -1, "cannot rename %s into place", w->stage);
        ckpt__io_rename(old, w->path); /* put the old one back */
    } else {
        ckpt__remove_flat_dir(old);
    }
    free(old);
    return st;
}

ckpt_status ckpt__dcp_writer_commit(ckpt__dcp_writer *w, ckpt_error *err) {
    if (w->state != WRITING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "commit needs a begun, uncommitted writer");
    w->state = FAILED;
    for (size_t i = 0; i < w->count; i++)
        if (w->tensors[i].written != w->tensors[i].nbytes)
            return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, w->tensors[i].name, -1,
                              "only %llu of its %llu bytes were written",
                              (unsigned long long)w->tensors[i].written, (unsigned long long)w->tensors[i].nbytes);
    ckpt_status st = CKPT_OK;
    for (size_t t = 0; t < w->count && st == CKPT_OK; t++)
        for (size_t k = 0; k < w->tensors[t].parts && st == CKPT_OK; k++) {
            part *p = &w->parts[w->tensors[t].first + k];
            uint32_t crc = 0;
            ckpt__buf tail = {0};
            st = part_crc(w, p, w->tensors[t].name, &crc, err);
            if (st == CKPT_OK && ckpt__dcp_archive_tail(&p->archive, crc, &tail)) st = ckpt__oom(err, w->path, NULL);
            if (st == CKPT_OK)
                st = ckpt__pwrite_full(w->fds[p->rank], tail.data, tail.len, p->data_at + p->nbytes,
                                       w->file_paths[p->rank], err);
            free(tail.data);
        }
    for (uint32_t r = 0; r < w->ranks && st == CKPT_OK; r++) {
        if (ckpt__io_ftruncate(w->fds[r], (off_t)w->file_size[r]) != 0)
            st = ckpt__fail_errno(err, errno, w->file_paths[r], -1, "cannot set the file size");
        else if (!w->no_sync && ckpt__io_fsync(w->fds[r]) != 0)
            st = ckpt__fail_errno(err, errno, w->file_paths[r], -1, "fsync failed");
        int fd = w->fds[r];
        w->fds[r] = -1;
        if (close(fd) != 0 && st == CKPT_OK) st = ckpt__fail_errno(err, errno, w->file_paths[r], -1, "close failed");
    }
    if (st == CKPT_OK) st = write_metadata(w, err);
    if (st == CKPT_OK && !w->no_sync) {
        char *probe = ckpt__path_join(w->stage, ".metadata");
        st = probe ? ckpt__fsync_parent(probe, err) : ckpt__oom(err, w->path, NULL);
        free(probe);
    }
    if (st == CKPT_OK) st = publish(w, err);
    if (st) return st;
    free(w->stage);
    w->stage = NULL;
    if (!w->no_sync) st = ckpt__fsync_parent(w->path, err);
    if (st == CKPT_OK) w->state = COMMITTED;
    return st;
}

/* ---- the rest ----------------------------------------------------------------------- */

size_t ckpt__dcp_writer_file_count(const ckpt__dcp_writer *w) { return w->file_paths ? w->ranks : 0; }
const char *ckpt__dcp_writer_file_path(const ckpt__dcp_writer *w, size_t i) {
    return w->file_paths && i < w->ranks ? w->file_paths[i] : NULL;
}
size_t ckpt__dcp_writer_tensor_file(const ckpt__dcp_writer *w, size_t index) {
    return index < w->count && w->parts && w->tensors[index].parts ? w->parts[w->tensors[index].first].rank : 0;
}
uint64_t ckpt__dcp_writer_total_bytes(const ckpt__dcp_writer *w) { return w->total; }

void ckpt__dcp_writer_free(ckpt__dcp_writer *w) {
    if (!w) return;
    for (uint32_t r = 0; w->fds && r < w->ranks; r++)
        if (w->fds[r] >= 0) close(w->fds[r]);
    if (w->stage) ckpt__remove_flat_dir(w->stage);
    for (size_t i = 0; i < w->part_count; i++) {
        ckpt__dcp_archive_free(&w->parts[i].archive);
        free(w->parts[i].segments);
    }
    pthread_mutex_destroy(&w->lock);
    for (size_t i = 0; i < w->object_count; i++) ckpt__dcp_archive_free(&w->objects[i].archive);
    for (uint32_t r = 0; w->file_paths && r < w->ranks; r++) free(w->file_paths[r]);
    free(w->file_paths);
    free(w->fds);
    free(w->file_size);
    free(w->parts);
    free(w->objects);
    free(w->order);
    free(w->tensors);
    free(w->tree);
    ckpt__json_free(&w->doc);
    ckpt__name_table_free(&w->names);
    ckpt__arena_free(&w->arena);
    free(w->stage);
    free(w->path);
    free(w);
}
