/* catalog.c — ckpt_catalog_*: opening a checkpoint (dispatching to its
 * format, see formats/registry.c) and owning what the format found: files,
 * tensors and where their bytes lie (pieces), storages, metadata, trees.
 * Reading tensor data is the engine's job (engine.c). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "catalog_internal.h"
#include "formats/format.h"
#include "formats/output.h"
#include "io/beneath.h"
#include "io/commit.h"
#include "io/file.h"
#include "io/http.h"
#include "io/mapping.h"
#include "transform/inflate.h"

typedef struct catalog_file {
    ckpt__source *src;
    void *map;        /* whole-file read-only mapping, made on first view */
    ckpt__pairs meta; /* this file's own __metadata__ */
} catalog_file;

typedef struct tensor_loc {
    const ckpt__piece *pieces; /* arena */
    uint32_t count;
} tensor_loc;

typedef struct storage {
    uint32_t file;
    uint64_t base, nbytes;
} storage;

typedef struct recorded_crc {
    uint32_t file;
    ckpt__recorded_crc crc;
} recorded_crc;

struct ckpt_catalog {
    ckpt_format format;
    ckpt__arena arena;
    ckpt__budget budget; /* what the formats' metadata may cost: the arena's */
    char *index_path;
    bool index_counts_parameters;
    size_t file_count, file_cap;
    catalog_file *files;
    size_t count, cap;
    ckpt_tensor_info *tensors;
    tensor_loc *locs;       /* per tensor, parallel to tensors */
    ckpt__name_table names; /* grows with the tensors: duplicates are found as they come */
    size_t names_cap;
    ckpt__pairs meta;
    size_t storage_count, storage_cap;
    storage *storages;
    size_t crc_count, crc_cap;
    recorded_crc *crcs;     /* what the files record: ZIP members' CRC-32s */
    ckpt__value **trees;    /* the files' object trees (malloc'ed; the values in the arena) */
    size_t tree_count;
    ckpt__value *tree;      /* the tree: the one file's, or {"__shards__": [tree, …]} */
    char *tree_text;        /* its JSON, written on the first ckpt_catalog_tree_json */
    const char **extra_globals; /* sorted "module.name", arena */
    size_t extra_global_count;
    ckpt__source_options source_options;
    ckpt_io_mode io; /* ckpt_catalog_options.io */
    ckpt__download_meter meter; /* the whole downloads of its files, for download_progress */
    /* While it is opened: a local checkpoint's directory (the one the user
     * named, or the one holding the file they named), which every other
     * file is opened beneath, and that file (followed as named). */
    ckpt__beneath *root;
    char *named;
    /* Where the checkpoint's other files are found, as a source
     * (ckpt_source_ops): the local directory (`local`, beneath `root`), a
     * remote prefix, or a caller's table (ckpt_catalog_open_source: only
     * names inside `place_dir` are asked of it). */
    const ckpt_source_ops *place_ops;
    void *place_user;
    char *place_dir;
    ckpt__local_dir local;
    pthread_mutex_t map_lock;
    ckpt_kv *kvs;           /* GGUF key-values (strings in the arena) */
    /* Each key-value in GGUF's encoding (gguf.h); its JSON text, kvs[i].json,
     * is written only when a caller asks for the pair (ckpt_catalog_kv). */
    const ckpt__encoded **kv_values;
    size_t kv_count, kv_cap;
    /* DEFLATE readers kept between ckpt_catalog_read calls, so that
     * reading a compressed tensor front to back in chunks resumes where the
     * last chunk stopped. */
    ckpt__inflater *inflaters[4];
    size_t inflater_next;
};

/* ---- options ------------------------------------------------------------------ */

void ckpt_catalog_options_init_sized(ckpt_catalog_options *o, size_t size) {
    if (!o || size < sizeof o->size) return;
    ckpt_catalog_options d;
    memset(&d, 0, sizeof d);
    d.retries = CKPT__DEFAULT_RETRIES;
    d.min_speed_bytes = CKPT__DEFAULT_MIN_SPEED;
    d.retry_deadline_ms = CKPT__DEFAULT_RETRY_DEADLINE_MS;
    /* A caller with a longer struct (a newer header) gets zeros in what
     * this library does not know. */
    memset(o, 0, size);
    memcpy(o, &d, size < sizeof d ? size : sizeof d);
    o->size = size;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static const char *arena_copy(ckpt_catalog *c, const char *s) {
    return s ? ckpt__arena_strndup(&c->arena, s, strlen(s)) : NULL;
}

/* The options of the sources (remote files, direct I/O); fields the
 * caller's (older) header lacks have their defaults. */
static ckpt_status take_source_options(ckpt_catalog *c, const ckpt_catalog_options *o, ckpt_error *err) {
    ckpt__source_options *so = &c->source_options;
    so->connect_timeout_ms = o->connect_timeout_ms;
    so->read_timeout_ms = o->read_timeout_ms;
    so->retries = o->retries;
    so->max_connections = o->max_connections;
    so->min_speed_bytes = o->min_speed_bytes;
    so->min_speed_time_ms = o->min_speed_time_ms;
    so->retry_deadline_ms = o->retry_deadline_ms;
    if (o->io != CKPT_IO_AUTO && o->io != CKPT_IO_BUFFERED && o->io != CKPT_IO_DIRECT)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "io %d is not a ckpt_io_mode", (int)o->io);
    c->io = o->io;
    so->direct = o->io == CKPT_IO_DIRECT;
    if (o->bearer_token && !(so->bearer_token = arena_copy(c, o->bearer_token))) return ckpt__oom(err, NULL, NULL);
    if (o->cache_dir && !(so->cache_dir = arena_copy(c, o->cache_dir))) return ckpt__oom(err, NULL, NULL);
    if (o->hf_cache_dir && !(so->hf_cache = arena_copy(c, o->hf_cache_dir))) return ckpt__oom(err, NULL, NULL);
    if (o->download_progress) {
        c->meter.fn = o->download_progress;
        c->meter.user = o->download_progress_user;
        so->meter = &c->meter;
    }
    return CKPT_OK;
}

static ckpt_status take_options(ckpt_catalog *c, const ckpt_catalog_options *options, ckpt_error *err) {
    c->source_options = (ckpt__source_options)CKPT__SOURCE_OPTIONS_DEFAULT;
    if (!options) return CKPT_OK;
    ckpt_catalog_options taken;
    ckpt_catalog_options_init(&taken);
    CKPT__TAKE_OPTIONS(&taken, options);
    const ckpt_catalog_options *o = &taken;
    if (o->allowed_global_count && !o->allowed_globals)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "allowed_globals is NULL");
    c->extra_globals = o->allowed_global_count
                           ? ckpt__arena_alloc(&c->arena, o->allowed_global_count * sizeof *c->extra_globals)
                           : NULL;
    if (o->allowed_global_count && !c->extra_globals) return ckpt__oom(err, NULL, NULL);
    for (size_t i = 0; i < o->allowed_global_count; i++) {
        const char *g = o->allowed_globals[i];
        const char *dot = g ? strrchr(g, '.') : NULL;
        if (!dot || dot == g || !dot[1])
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                              "allowed global '%s' is not of the form module.name", g ? g : "(null)");
        if (!(c->extra_globals[i] = ckpt__arena_strndup(&c->arena, g, strlen(g)))) return ckpt__oom(err, NULL, NULL);
    }
    c->extra_global_count = o->allowed_global_count;
    if (c->extra_global_count > 1) qsort(c->extra_globals, c->extra_global_count, sizeof *c->extra_globals, cmp_str);
    return take_source_options(c, o, err);
}

/* A URL's "user:password@" leaves the name (which errors and listings
 * show) for the source options, which send it to that host only — to the
 * index and to its shards. */
static ckpt_status take_userinfo(ckpt_catalog *c, const char *path, char **clean, ckpt_error *err) {
    *clean = NULL;
    if (!ckpt__source_is_remote_name(path)) return CKPT_OK;
    char *userinfo, *url;
    if (!ckpt__url_take_userinfo(path, &url, &userinfo)) return ckpt__oom(err, NULL, NULL);
    ckpt__url_parts u;
    if (userinfo && ckpt__url_split(url, &u)) {
        c->source_options.userinfo = arena_copy(c, userinfo);
        c->source_options.userinfo_host = ckpt__arena_strndup(&c->arena, u.host, u.host_len);
    }
    bool failed = userinfo && (!c->source_options.userinfo || !c->source_options.userinfo_host);
    if (userinfo) memset(userinfo, 0, strlen(userinfo));
    free(userinfo);
    if (failed) {
        free(url);
        return ckpt__oom(err, NULL, NULL);
    }
    *clean = url;
    return CKPT_OK;
}

/* A remote directory's name whose query is the credentials of the files
 * inside it (an Azure SAS token): the query kept in the source options for
 * them, and *clean the name without it (malloc'ed; NULL when the name keeps
 * its query), so that the names joined under it are names. */
static ckpt_status take_dir_query(ckpt_catalog *c, const char *path, char **clean, ckpt_error *err) {
    char *query;
    if (!ckpt__source_take_query(path, clean, &query)) return ckpt__oom(err, NULL, NULL);
    if (!query) return CKPT_OK;
    size_t n = strlen(*clean);
    bool slash = n && (*clean)[n - 1] == '/';
    char *dir = ckpt__arena_strndup(&c->arena, *clean, n + !slash);
    if (dir && !slash) dir[n] = '/';
    c->source_options.dir_query_for = dir;
    c->source_options.dir_query = arena_copy(c, query);
    memset(query, 0, strlen(query));
    free(query);
    return dir && c->source_options.dir_query ? CKPT_OK : ckpt__oom(err, NULL, NULL);
}

ckpt_status ckpt__catalog_take_credentials(ckpt_catalog *c, const char *path, char **clean, char **as_file,
                                           ckpt_error *err) {
    char *plain = NULL, *no_query = NULL;
    *as_file = NULL;
    ckpt_status st = take_userinfo(c, path, &plain, err);
    /* Whether the name was a directory is rank 0's knowledge: a query taken
     * for the names beneath it is sent with none if it was a file, so the
     * file's own name, query and all, is kept for that case. */
    if (st == CKPT_OK) st = take_dir_query(c, plain ? plain : path, &no_query, err);
    if (st == CKPT_OK && !(*as_file = ckpt__strdup(plain ? plain : path))) st = ckpt__oom(err, NULL, NULL);
    if (no_query) free(plain), plain = no_query;
    if (st) free(plain), plain = NULL;
    *clean = plain;
    return st;
}

const char *const *ckpt__cat_allowed_globals(const ckpt_catalog *c, size_t *count) {
    *count = c->extra_global_count;
    return c->extra_globals;
}

/* ---- what formats fill (formats/format.h) ------------------------------------- */

ckpt__arena *ckpt__cat_arena(ckpt_catalog *c) { return &c->arena; }
ckpt__budget *ckpt__cat_budget(ckpt_catalog *c) { return &c->budget; }
void ckpt__cat_set_format(ckpt_catalog *c, ckpt_format format) { c->format = format; }
ckpt_format ckpt__cat_format(const ckpt_catalog *c) { return c->format; }
ckpt__source *ckpt__cat_source(const ckpt_catalog *c, uint32_t file) { return c->files[file].src; }

void ckpt__cat_set_index_counts_parameters(ckpt_catalog *c) { c->index_counts_parameters = true; }
bool ckpt__cat_index_counts_parameters(const ckpt_catalog *c) { return c && c->index_counts_parameters; }

ckpt_status ckpt__cat_set_index_path(ckpt_catalog *c, const char *path, ckpt_error *err) {
    free(c->index_path);
    c->index_path = ckpt__strdup(path);
    return c->index_path ? CKPT_OK : ckpt__oom(err, path, NULL);
}

ckpt_status ckpt__cat_add_source(ckpt_catalog *c, ckpt__source *src, uint32_t *file, ckpt_error *err) {
    catalog_file *files = ckpt__grow(c->files, c->file_count, &c->file_cap, sizeof *files, 4);
    if (!files) {
        ckpt_status st = ckpt__oom(err, src->name, NULL);
        ckpt__source_close(src);
        return st;
    }
    c->files = files;
    catalog_file *f = &c->files[c->file_count];
    memset(f, 0, sizeof *f);
    f->src = src;
    *file = (uint32_t)c->file_count++;
    return CKPT_OK;
}

/* Whether `name` lies inside the directory `dir` of a caller's source:
 * below it, without a ".." component. */
static ckpt_status inside_place(const char *dir, const char *name, ckpt_error *err) {
    size_t n = strlen(dir);
    const char *rel = !strncmp(name, dir, n) && (name[n] == '/' || (n && dir[n - 1] == '/')) ? name + n : NULL;
    while (rel && *rel == '/') rel++;
    for (const char *p = rel; p && *p; p += strcspn(p, "/"), p += *p == '/')
        if (!strncmp(p, "..", 2) && (p[2] == '/' || !p[2])) rel = NULL;
    if (rel && *rel) return CKPT_OK;
    return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1, "is not inside the checkpoint's directory %s", dir);
}

/* The file the user named is theirs to name (a symbolic link included);
 * any other is asked of the checkpoint's place: a local file is one the
 * checkpoint names or a listing found, and never leads out of its
 * directory; a caller's source is asked only for names inside the
 * directory it was opened at. */
static ckpt_status open_source(ckpt_catalog *c, const char *name, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    bool named = c->named && !strcmp(name, c->named);
    if (named && !c->place_dir) return ckpt__source_open(name, &c->source_options, out, err);
    if (!c->place_ops)
        return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1,
                          "names a local file, but the checkpoint has no local directory to find it in");
    ckpt_status st = named || !c->place_dir ? CKPT_OK : inside_place(c->place_dir, name, err);
    return st ? st : ckpt__source_open_in(c->place_ops, c->place_user, name, out, err);
}

ckpt_status ckpt__cat_open_source(ckpt_catalog *c, const char *name, ckpt__source **out, ckpt_error *err) {
    ckpt_status st = open_source(c, name, out, err);
    if (st == CKPT_OK) ckpt__budget_add_input(&c->budget, (*out)->size); /* its metadata may cost a multiple of it */
    return st;
}

const ckpt__beneath *ckpt__cat_root(const ckpt_catalog *c) { return c->root; }

bool ckpt__cat_can_list(const ckpt_catalog *c) { return c->place_ops && c->place_ops->list; }

ckpt_status ckpt__cat_list(ckpt_catalog *c, const char *dir, char ***names, size_t *count, ckpt_error *err) {
    *names = NULL;
    *count = 0;
    if (!c->place_ops) return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1, "the directory cannot be listed");
    return ckpt__source_list_in(c->place_ops, c->place_user, dir, names, count, err);
}

void ckpt__catalog_opened(ckpt_catalog *c) {
    ckpt__beneath_close(c->root);
    c->root = c->local.root = NULL;
    if (c->place_ops == &ckpt__local_dir_ops) c->place_ops = NULL;
}

/* The checkpoint's other files are asked of its remote place: a URL's
 * directory (no listing), or what the name's kind lists (a Hub repo). */
static void set_remote_place(ckpt_catalog *c, const char *path) {
    c->place_ops = ckpt__source_lists(path) ? &ckpt__remote_listed_dir_ops : &ckpt__remote_dir_ops;
    c->place_user = &c->source_options;
}

ckpt_status ckpt__catalog_set_root(ckpt_catalog *c, const char *path, bool is_dir, ckpt_error *err) {
    if (ckpt__source_is_remote_name(path)) { /* no directory to hold open: names are asked of the server */
        set_remote_place(c, path);
        return CKPT_OK;
    }
    char *dir = is_dir ? ckpt__strdup(path) : ckpt__path_dirname(path);
    if (!dir || (!is_dir && !(c->named = ckpt__strdup(path)))) {
        free(dir);
        return ckpt__oom(err, path, NULL);
    }
    ckpt_status st = ckpt__beneath_open_root(dir, &c->root, err);
    free(dir);
    if (st == CKPT_OK) {
        c->local = (ckpt__local_dir){c->root, &c->source_options};
        c->place_ops = &ckpt__local_dir_ops;
        c->place_user = &c->local;
    }
    return st;
}

ckpt_status ckpt__cat_add_storage(ckpt_catalog *c, uint32_t file, uint64_t base, uint64_t nbytes, uint32_t *number,
                                  ckpt_error *err) {
    storage *s = ckpt__grow(c->storages, c->storage_count, &c->storage_cap, sizeof *s, 64);
    if (!s) return ckpt__oom(err, c->files[file].src->name, NULL);
    c->storages = s;
    c->storages[c->storage_count] = (storage){file, base, nbytes};
    *number = (uint32_t)c->storage_count++;
    return CKPT_OK;
}

ckpt_status ckpt__cat_add_crc(ckpt_catalog *c, uint32_t file, const ckpt__recorded_crc *crc, uint32_t *index,
                              ckpt_error *err) {
    if (c->crc_count == UINT32_MAX - 1)
        return ckpt__fail(err, CKPT_E_LIMIT, c->files[file].src->name, crc->name, (int64_t)crc->offset,
                          "more recorded checksums than ckpt counts");
    recorded_crc *r = ckpt__grow(c->crcs, c->crc_count, &c->crc_cap, sizeof *r, 64);
    if (!r) return ckpt__oom(err, c->files[file].src->name, NULL);
    c->crcs = r;
    c->crcs[c->crc_count] = (recorded_crc){file, *crc};
    if (index) *index = (uint32_t)c->crc_count;
    c->crc_count++;
    return CKPT_OK;
}

size_t ckpt__catalog_crc_count(const ckpt_catalog *c) { return c->crc_count; }

const ckpt__recorded_crc *ckpt__catalog_crc(const ckpt_catalog *c, size_t i, uint32_t *file) {
    if (i >= c->crc_count) return NULL;
    if (file) *file = c->crcs[i].file;
    return &c->crcs[i].crc;
}

const char *ckpt__catalog_crc_tensor(const ckpt_catalog *c, size_t i) {
    for (size_t t = 0; t < c->count; t++)
        for (uint32_t k = 0; k < c->locs[t].count; k++)
            if (c->locs[t].pieces[k].crc == i + 1) return c->tensors[t].name;
    return NULL;
}

static bool grow_names(ckpt_catalog *c) {
    size_t want = c->names_cap ? c->names_cap * 2 : 256;
    if (!ckpt__name_table_grow(&c->names, want)) return false;
    c->names_cap = want;
    return true;
}

uint64_t ckpt__cat_tensor_cost(uint32_t piece_count) {
    /* its info, its place, its pieces, its slots in the name table (kept
     * at most three quarters full, doubled) */
    return sizeof(ckpt_tensor_info) + sizeof(tensor_loc) + (uint64_t)piece_count * sizeof(ckpt__piece) +
           4 * sizeof(uint64_t);
}

ckpt_status ckpt__cat_add_tensor(ckpt_catalog *c, const ckpt__tensor_decl *d, ckpt_error *err) {
    const ckpt__piece *p0 = &d->pieces[0];
    const char *path = c->files[p0->file].src->name;
    if (d->piece_count == 0 || d->ndim > CKPT_MAX_DIMS)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, d->name, -1, "tensor without data or with too many axes");
    uint64_t numel, nbytes;
    ckpt_status st;
    if ((st = ckpt__tensor_size(d->dtype, d->ndim, d->shape, &numel, &nbytes)) == CKPT__D(SHAPE_OVERFLOW))
        return ckpt__fail(err, st, path, d->name, (int64_t)p0->offset,
                          "the shape's nonzero axes hold more than 2^63-1 elements or bytes of %s (safetensors, numpy "
                          "and torch refuse it)", ckpt_dtype_name(d->dtype) ? ckpt_dtype_name(d->dtype) : "its dtype");
    if (st)
        return ckpt__fail(err, st, path, d->name, (int64_t)p0->offset, "%llu elements of %s: %s",
                          (unsigned long long)numel, ckpt_dtype_name(d->dtype), ckpt_status_message(st));
    if (c->count == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 64;
        ckpt_tensor_info *t = ckpt__realloc(c->tensors, cap * sizeof *t);
        if (t) c->tensors = t;
        tensor_loc *l = t ? ckpt__realloc(c->locs, cap * sizeof *l) : NULL;
        if (!l) return ckpt__oom(err, path, NULL);
        c->locs = l;
        c->cap = cap;
    }
    uint32_t number = d->storage;
    if (number == CKPT__OWN_STORAGE && (st = ckpt__cat_add_storage(c, p0->file, p0->record_size ? p0->record : p0->offset,
                                                                   nbytes, &number, err)))
        return st;
    ckpt__piece *pieces = ckpt__arena_alloc(&c->arena, d->piece_count * sizeof *pieces);
    if (!pieces) return ckpt__oom(err, path, NULL);
    memcpy(pieces, d->pieces, d->piece_count * sizeof *pieces);
    c->tensors[c->count] = (ckpt_tensor_info){
        .name = d->name, .dtype = d->dtype, .ndim = d->ndim, .shape = d->shape, .numel = numel, .nbytes = nbytes,
        .file = p0->file, .offset = p0->record_size ? p0->record + p0->offset : p0->offset, .strides = p0->strides,
        .storage = number, .big_endian = p0->big_endian,
        /* Several pieces (Flax's chunked arrays): like a compressed record,
         * `offset` is no place in the file and nothing may map it whole. */
        .compressed = p0->record_size != 0 || d->piece_count > 1,
    };
    c->locs[c->count] = (tensor_loc){pieces, d->piece_count};
    if (c->count + 1 > c->names_cap / 2 + c->names_cap / 4 && !grow_names(c)) return ckpt__oom(err, path, NULL);
    uint32_t prev;
    if (!ckpt__name_table_insert(&c->names, &c->tensors[0].name, sizeof *c->tensors, (uint32_t)c->count, &prev)) {
        const ckpt_tensor_info *t = &c->tensors[prev];
        return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), path, d->name, (int64_t)c->tensors[c->count].offset,
                          "tensor is also in %s", c->files[t->file].src->name);
    }
    c->count++;
    return CKPT_OK;
}

ckpt_status ckpt__cat_add_metadata(ckpt_catalog *c, uint32_t file, const char *key, const char *value,
                                   ckpt_error *err) {
    if (!ckpt__pairs_push(&c->files[file].meta, key, value)) return ckpt__oom(err, c->files[file].src->name, NULL);
    if (ckpt__pairs_get(&c->meta, key)) return CKPT_OK; /* the first file's value wins */
    return ckpt__pairs_push(&c->meta, key, value) ? CKPT_OK : ckpt__oom(err, c->files[file].src->name, NULL);
}

ckpt_status ckpt__cat_add_metadata_value(ckpt_catalog *c, uint32_t file, const char *key, const ckpt__encoded *value,
                                         ckpt_error *err) {
    if (!ckpt__pairs_push_value(&c->files[file].meta, key, value)) return ckpt__oom(err, c->files[file].src->name, NULL);
    if (ckpt__pairs_find(&c->meta, key) >= 0) return CKPT_OK; /* the first file's value wins */
    return ckpt__pairs_push_value(&c->meta, key, value) ? CKPT_OK : ckpt__oom(err, c->files[file].src->name, NULL);
}

ckpt_status ckpt__cat_add_kv(ckpt_catalog *c, const ckpt_kv *kv, const ckpt__encoded *value, ckpt_error *err) {
    if (c->kv_count == c->kv_cap) {
        size_t cap = c->kv_cap ? c->kv_cap * 2 : 32;
        ckpt_kv *k = ckpt__realloc(c->kvs, cap * sizeof *k);
        if (!k) return ckpt__oom(err, NULL, "the key-values");
        c->kvs = k;
        const ckpt__encoded **v = ckpt__realloc(c->kv_values, cap * sizeof *v);
        if (!v) return ckpt__oom(err, NULL, "the key-values");
        c->kv_values = v;
        c->kv_cap = cap;
    }
    c->kvs[c->kv_count] = *kv;
    c->kvs[c->kv_count].json = NULL;
    c->kv_values[c->kv_count++] = value;
    return CKPT_OK;
}

/* Pair i with its JSON text, written on the first ask (from any thread:
 * the first text stored wins; out of memory, json stays NULL). */
static const ckpt_kv *kv_with_text(const ckpt_catalog *c, size_t i) {
    ckpt_kv *kv = &c->kvs[i];
    if (__atomic_load_n(&kv->json, __ATOMIC_ACQUIRE)) return kv;
    char *mine = c->kv_values[i]->json(c->kv_values[i]);
    const char *expected = NULL;
    if (mine && !__atomic_compare_exchange_n(&kv->json, &expected, mine, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        free(mine); /* another thread wrote it first */
    return kv;
}

const ckpt__encoded *ckpt__catalog_kv_encoded(const ckpt_catalog *c, const char *key, const ckpt_kv **kv) {
    for (size_t i = 0; c && key && i < c->kv_count; i++)
        if (strcmp(c->kvs[i].key, key) == 0) {
            *kv = &c->kvs[i];
            return c->kv_values[i];
        }
    return NULL;
}

size_t ckpt_catalog_kv_count(const ckpt_catalog *c) { return c ? c->kv_count : 0; }
const ckpt_kv *ckpt_catalog_kv(const ckpt_catalog *c, size_t i) {
    return c && i < c->kv_count ? kv_with_text(c, i) : NULL;
}
const ckpt_kv *ckpt_catalog_kv_find(const ckpt_catalog *c, const char *key) {
    for (size_t i = 0; c && key && i < c->kv_count; i++)
        if (strcmp(c->kvs[i].key, key) == 0) return kv_with_text(c, i);
    return NULL;
}

ckpt_status ckpt__cat_add_checkpoint_metadata(ckpt_catalog *c, const char *key, const char *value, ckpt_error *err) {
    if (ckpt__pairs_get(&c->meta, key)) return CKPT_OK;
    return ckpt__pairs_push(&c->meta, key, value) ? CKPT_OK : ckpt__oom(err, c->index_path, NULL);
}

ckpt_status ckpt__cat_set_tree(ckpt_catalog *c, ckpt__value *tree, ckpt_error *err) {
    ckpt__value **trees = ckpt__realloc(c->trees, (c->tree_count + 1) * sizeof *trees);
    if (!trees) return ckpt__oom(err, NULL, "the object tree");
    c->trees = trees;
    c->trees[c->tree_count++] = tree;
    c->tree = c->trees[0];
    return CKPT_OK;
}

ckpt_status ckpt__cat_add_tree(ckpt_catalog *c, const char *json, ckpt_error *err) {
    ckpt__value *tree;
    ckpt_status st = ckpt__value_from_json(&c->arena, json, &tree, err, NULL);
    return st ? st : ckpt__cat_set_tree(c, tree, err);
}

/* The reader for an opened file: the best probe of its first bytes and
 * its name (registry.c), or CKPT_E_UNKNOWN_FORMAT for a file that only
 * safetensors' fallback would take and that looks like something else. */
static ckpt_status choose_format(ckpt__source *src, const char *path, const ckpt__format **f, ckpt_error *err) {
    unsigned char head[512] = {0};
    size_t n = src->size < sizeof head ? (size_t)src->size : sizeof head;
    ckpt_status st = ckpt__source_read(src, head, n, 0, err);
    if (st) return st;
    int score;
    *f = ckpt__format_probe(head, n, ckpt__path_basename(path), &score);
    /* The source's name is the one shown (a URL's credentials redacted). */
    return score <= CKPT__PROBE_FALLBACK ? ckpt__format_check_unclaimed(head, n, src->size, src->name, err) : CKPT_OK;
}

ckpt_status ckpt__cat_open_path(ckpt_catalog *c, const char *path, ckpt_error *err) {
    ckpt__source *src;
    const ckpt__format *f;
    ckpt_status st = ckpt__cat_open_source(c, path, &src, err);
    if (st) return st;
    if ((st = choose_format(src, path, &f, err))) {
        ckpt__source_close(src);
        return st;
    }
    return f->open(c, src, err);
}

ckpt_status ckpt_detect_format(const char *path, const ckpt_catalog_options *options, ckpt_format *format,
                               ckpt_error *err) {
    if (format) *format = (ckpt_format)0;
    if (!path || !format) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "path and format are required");
    ckpt_catalog *c;
    ckpt__source *src = NULL;
    const ckpt__format *f;
    char *clean = NULL;
    ckpt_status st = ckpt__catalog_new(options, &c, err);
    if (st) return st;
    if (!(st = take_userinfo(c, path, &clean, err)) && clean) path = clean;
    if (!st) st = ckpt__source_open(path, &c->source_options, &src, err); /* the file as named, as an open does */
    if (!st && !(st = choose_format(src, path, &f, err))) *format = ckpt__format_id(f, path);
    ckpt__source_close(src);
    free(clean);
    ckpt_catalog_close(c);
    return st;
}

/* ---- opening ------------------------------------------------------------------ */

/* Several torch shards with trees: {"__shards__": [tree, …]}. */
static ckpt_status wrap_shard_trees(ckpt_catalog *c, ckpt_error *err) {
    ckpt__value *shards = ckpt__value_new(&c->arena, CKPT__V_OBJECT, 1);
    ckpt__value *key = ckpt__value_text(&c->arena, CKPT__V_STR, "__shards__", 10);
    ckpt__value *list = ckpt__value_new(&c->arena, CKPT__V_LIST, c->tree_count);
    if (!shards || !key || !list) return ckpt__oom(err, c->index_path, NULL);
    memcpy(list->u.items, c->trees, c->tree_count * sizeof *c->trees);
    shards->u.items[0] = key;
    shards->u.items[1] = list;
    c->tree = shards;
    return CKPT_OK;
}

ckpt_status ckpt__catalog_new(const ckpt_catalog_options *options, ckpt_catalog **out, ckpt_error *err) {
    *out = NULL;
    ckpt_catalog *c = ckpt__calloc(1, sizeof *c);
    if (!c) return ckpt__oom(err, NULL, NULL);
    pthread_mutex_init(&c->map_lock, NULL);
    pthread_mutex_init(&c->meter.lock, NULL);
    c->format = CKPT_FORMAT_SAFETENSORS;
    c->arena.budget = &c->budget;
    ckpt_status st = take_options(c, options, err);
    if (st) {
        ckpt_catalog_close(c);
        return st;
    }
    *out = c;
    return CKPT_OK;
}

size_t ckpt__catalog_storage_count(const ckpt_catalog *c) { return c->storage_count; }

void ckpt__catalog_storage_at(const ckpt_catalog *c, size_t i, uint32_t *file, uint64_t *base, uint64_t *nbytes) {
    *file = c->storages[i].file;
    *base = c->storages[i].base;
    *nbytes = c->storages[i].nbytes;
}

/* Opens the checkpoint file `path` (what the directory resolved to) into
 * the catalog, if `st` says so far so good; the catalog is *out or gone. */
static ckpt_status finish_open(ckpt_catalog *c, ckpt_status st, const char *path, ckpt_catalog **out, ckpt_error *err) {
    if (st == CKPT_OK) st = ckpt__cat_open_path(c, path, err);
    /* What the formats read past a remote file's first bytes may have come
     * from a download checked only at its end (ckpt__source_settle): no
     * open succeeds on bytes that fail the check. */
    for (size_t i = 0; st == CKPT_OK && i < c->file_count; i++) st = ckpt__source_settle(c->files[i].src, false, err);
    ckpt__catalog_opened(c);
    if (st == CKPT_OK && c->tree_count > 1) st = wrap_shard_trees(c, err);
    if (st) {
        ckpt_catalog_close(c);
        return st;
    }
    *out = c;
    return CKPT_OK;
}

ckpt_status ckpt_catalog_open_ex(const char *path, const ckpt_catalog_options *options, ckpt_catalog **out,
                                 ckpt_error *err) {
    if (out) *out = NULL;
    if (!path || !out) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "path and out are required");
    ckpt_catalog *c;
    ckpt_status st = ckpt__catalog_new(options, &c, err);
    if (st) return st;
    char *resolved = NULL, *clean = NULL, *pinned = NULL, *plain_dir = NULL;
    st = take_userinfo(c, path, &clean, err);
    if (clean) path = clean;
    /* One version throughout: a Hub branch becomes the commit it is at now. */
    if (st == CKPT_OK) st = ckpt__source_pin(path, &c->source_options, &pinned, err);
    if (pinned) path = pinned;
    if (st == CKPT_OK && !ckpt__source_is_remote_name(path)) {
        /* A read never writes: a commit into this checkpoint's directory
         * that a crash cut short is refused, naming the fix (io/commit.h). */
        bool is_dir = ckpt__source_stat(path, &c->source_options) == CKPT__NAME_DIR;
        char *dir = is_dir ? ckpt__strdup(path) : ckpt__path_dirname(path);
        st = dir ? ckpt__commit_check_read(dir, is_dir ? NULL : ckpt__path_basename(path), ckpt__output_owns_any, err)
                 : ckpt__oom(err, path, NULL);
        free(dir);
    }
    /* A remote file is not asked about first (its open says if it is
     * missing): one request fewer.  A remote "directory" ends in '/'. */
    bool remote_name = ckpt__source_is_remote_name(path);
    bool remote_file = remote_name && path[0] && path[strlen(path) - 1] != '/' && !ckpt__source_lists(path);
    if (remote_name) set_remote_place(c, path);
    if (st == CKPT_OK && !remote_file) {
        switch (ckpt__source_stat(path, &c->source_options)) {
        case CKPT__NAME_MISSING:
            /* A remote name is opened all the same: its server says why
             * not (a store's 404 NoSuchKey, or its 403). */
            if (!remote_name) st = ckpt__fail_errno(err, ENOENT, path, -1, "cannot open");
            break;
        case CKPT__NAME_DIR:
            st = remote_name ? take_dir_query(c, path, &plain_dir, err) : ckpt__catalog_set_root(c, path, true, err);
            if (st == CKPT_OK)
                st = ckpt__format_find_in_dir(c->place_ops, c->place_user, plain_dir ? plain_dir : path, &resolved, err);
            break;
        case CKPT__NAME_FILE:
            if (!remote_name) st = ckpt__catalog_set_root(c, path, false, err);
            break;
        }
    }
    st = finish_open(c, st, resolved ? resolved : path, out, err);
    free(resolved);
    free(clean);
    free(pinned);
    free(plain_dir);
    return st;
}

ckpt_status ckpt_catalog_open_source(const ckpt_source_ops *ops, void *user, const char *name,
                                     const ckpt_catalog_options *options, ckpt_catalog **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!ops || !name || !out || !*name)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "ops, name and out are required");
    if (ops->version < 1 || !ops->open || !ops->read || !ops->stat)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "a source's table needs a version (CKPT_SOURCE_OPS_VERSION), open, read and stat");
    ckpt_catalog *c;
    ckpt_status st = ckpt__catalog_new(options, &c, err);
    if (st) return st;
    c->place_ops = ops;
    c->place_user = user;
    char *resolved = NULL;
    ckpt_source_kind kind = CKPT_SOURCE_MISSING;
    st = ckpt__source_stat_in(ops, user, name, &kind, err);
    if (st == CKPT_OK && kind == CKPT_SOURCE_MISSING)
        st = ckpt__fail(err, CKPT_E_NOT_FOUND, name, NULL, -1, "the source has no such name");
    else if (st == CKPT_OK && kind == CKPT_SOURCE_DIRECTORY) /* its files are inside it */
        st = (c->place_dir = ckpt__strdup(name)) ? ckpt__format_find_in_dir(c->place_ops, c->place_user, name, &resolved, err)
                                                 : ckpt__oom(err, name, NULL);
    else if (st == CKPT_OK && (!(c->place_dir = ckpt__path_dirname(name)) || !(c->named = ckpt__strdup(name))))
        st = ckpt__oom(err, name, NULL); /* a file: the others are beside it */
    st = finish_open(c, st, resolved ? resolved : name, out, err);
    free(resolved);
    return st;
}

ckpt_status ckpt_catalog_open(const char *path, ckpt_catalog **out, ckpt_error *err) {
    return ckpt_catalog_open_ex(path, NULL, out, err);
}

void ckpt_catalog_close(ckpt_catalog *c) {
    if (!c) return;
    for (size_t i = 0; i < c->file_count; i++) {
        if (c->files[i].map && c->files[i].src->ops->unmap) c->files[i].src->ops->unmap(c->files[i].src->user, c->files[i].src->file, c->files[i].map);
        ckpt__source_close(c->files[i].src);
        ckpt__pairs_free(&c->files[i].meta);
    }
    free(c->files);
    free(c->tensors);
    free(c->locs);
    ckpt__pairs_free(&c->meta);
    free(c->trees);
    free(c->tree_text);
    free(c->storages);
    free(c->crcs);
    free(c->index_path);
    for (size_t i = 0; i < c->kv_count; i++) free((char *)c->kvs[i].json); /* the texts written when asked */
    free(c->kvs);
    free(c->kv_values);
    ckpt__beneath_close(c->root);
    free(c->named);
    free(c->place_dir);
    ckpt__name_table_free(&c->names);
    ckpt__arena_free(&c->arena);
    for (size_t i = 0; i < sizeof c->inflaters / sizeof c->inflaters[0]; i++) ckpt__inflater_free(c->inflaters[i]);
    pthread_mutex_destroy(&c->map_lock);
    pthread_mutex_destroy(&c->meter.lock);
    free(c);
}

/* ---- the public view of the entries ------------------------------------------ */

ckpt_format ckpt_catalog_format(const ckpt_catalog *c) { return c->format; }
size_t ckpt_catalog_tensor_count(const ckpt_catalog *c) { return c ? c->count : 0; }

const ckpt_tensor_info *ckpt_catalog_tensor(const ckpt_catalog *c, size_t i) {
    return c && i < c->count ? &c->tensors[i] : NULL;
}

const ckpt_tensor_info *ckpt_catalog_find(const ckpt_catalog *c, const char *name) {
    if (!c || !name || !c->count) return NULL;
    int64_t i = ckpt__name_table_find(&c->names, &c->tensors[0].name, sizeof *c->tensors, name);
    return i < 0 ? NULL : &c->tensors[i];
}

size_t ckpt_catalog_file_count(const ckpt_catalog *c) { return c ? c->file_count : 0; }
const char *ckpt_catalog_file_path(const ckpt_catalog *c, size_t i) {
    return c && i < c->file_count ? c->files[i].src->name : NULL;
}
uint64_t ckpt_catalog_file_size(const ckpt_catalog *c, size_t i) {
    return c && i < c->file_count ? c->files[i].src->size : 0;
}
const char *ckpt_catalog_index_path(const ckpt_catalog *c) { return c ? c->index_path : NULL; }

/* The text is written once, on the first call from any thread: a caller
 * that lost the race frees its own and returns the winner's. */
const char *ckpt_catalog_tree_json(const ckpt_catalog *c) {
    if (!c || !c->tree) return NULL;
    char *text = __atomic_load_n(&c->tree_text, __ATOMIC_ACQUIRE), *none = NULL;
    if (text) return text;
    if (!(text = ckpt__value_json_text(c->tree))) return NULL;
    if (__atomic_compare_exchange_n(&((ckpt_catalog *)c)->tree_text, &none, text, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        return text;
    free(text);
    return none;
}

const ckpt_value *ckpt_catalog_tree(const ckpt_catalog *c) { return c ? c->tree : NULL; }
size_t ckpt_catalog_metadata_count(const ckpt_catalog *c) { return c ? c->meta.count : 0; }

ckpt_status ckpt_catalog_metadata_entry(const ckpt_catalog *c, size_t i, const char **key, const char **value) {
    if (!c || i >= c->meta.count) return CKPT_E_OUT_OF_RANGE;
    if (key) *key = c->meta.keys[i];
    if (value) *value = ckpt__pairs_text(&c->meta, i);
    return CKPT_OK;
}

const char *ckpt_catalog_file_metadata(const ckpt_catalog *c, size_t file, const char *key) {
    return c && key && file < c->file_count ? ckpt__pairs_get(&c->files[file].meta, key) : NULL;
}

const char *ckpt_catalog_metadata_get(const ckpt_catalog *c, const char *key) {
    return c && key ? ckpt__pairs_get(&c->meta, key) : NULL;
}

/* ---- chunks --------------------------------------------------------------------- */

size_t ckpt_catalog_chunk_count(const ckpt_catalog *c, const ckpt_tensor_info *t) {
    size_t i = ckpt__catalog_index_of(c, t);
    return i == SIZE_MAX ? 0 : c->locs[i].count;
}

ckpt_status ckpt_catalog_chunk(const ckpt_catalog *c, const ckpt_tensor_info *t, size_t k, ckpt_chunk_info *out,
                               ckpt_error *err) {
    static const uint64_t origin[CKPT_MAX_DIMS];
    size_t i = ckpt__catalog_index_of(c, t);
    if (i == SIZE_MAX || !out)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1,
                          "the tensor info does not belong to this catalog, or no output was given");
    if (k >= c->locs[i].count)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, NULL, t->name, -1, "chunk %zu of a tensor stored in %u", k,
                          c->locs[i].count);
    const ckpt__piece *p = &c->locs[i].pieces[k];
    out->file = p->file;
    out->start = p->start ? p->start : origin;
    out->count = p->count ? p->count : t->shape;
    out->offset = p->record_size ? p->record + p->offset : p->offset;
    return CKPT_OK;
}

/* ---- what the glue sees (catalog_internal.h) ---------------------------------- */

bool ckpt__catalog_storage(const ckpt_catalog *c, uint32_t number, uint64_t *base, uint64_t *nbytes) {
    if (number >= c->storage_count) return false;
    *base = c->storages[number].base;
    *nbytes = c->storages[number].nbytes;
    return true;
}

const ckpt__pairs *ckpt__cat_file_metadata(const ckpt_catalog *c, size_t file) { return &c->files[file].meta; }
const ckpt__pairs *ckpt__cat_metadata(const ckpt_catalog *c) { return &c->meta; }

ckpt__source *ckpt__catalog_source(const ckpt_catalog *c, size_t file) { return c->files[file].src; }

size_t ckpt__catalog_index_of(const ckpt_catalog *c, const ckpt_tensor_info *t) {
    return c && t >= c->tensors && t < c->tensors + c->count ? (size_t)(t - c->tensors) : SIZE_MAX;
}

const ckpt__piece *ckpt__catalog_pieces(const ckpt_catalog *c, size_t tensor, uint32_t *count) {
    *count = c->locs[tensor].count;
    return c->locs[tensor].pieces;
}

ckpt_status ckpt__catalog_map(ckpt_catalog *c, size_t file, const void **base, ckpt_error *err) {
    catalog_file *f = &c->files[file];
    ckpt_status st = CKPT_OK;
    pthread_mutex_lock(&c->map_lock);
    if (!f->map && f->src->size) {
        if (!(f->src->caps & CKPT__SRC_MAP) || !f->src->ops->map)
            st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, f->src->name, NULL, -1,
                            "this file cannot be mapped (a network file system or a remote source): read it instead");
        else
            st = f->src->ops->map(f->src->user, f->src->file, 0, &f->map, err);
    }
    pthread_mutex_unlock(&c->map_lock);
    *base = f->map;
    return st;
}

ckpt_io_mode ckpt__catalog_io(const ckpt_catalog *c) { return c->io; }

void ckpt__catalog_drop_cache(const ckpt_catalog *c) {
    if (!c->source_options.direct) return;
    for (size_t i = 0; i < c->file_count; i++)
        if (c->files[i].src->fd >= 0) posix_fadvise(c->files[i].src->fd, 0, 0, POSIX_FADV_DONTNEED);
}

ckpt__inflater *ckpt__catalog_take_inflater(ckpt_catalog *c, const ckpt__source *src, uint64_t record, uint64_t offset) {
    ckpt__inflater *best = NULL;
    size_t at = 0;
    pthread_mutex_lock(&c->map_lock);
    for (size_t i = 0; i < sizeof c->inflaters / sizeof c->inflaters[0]; i++) {
        ckpt__inflater *f = c->inflaters[i];
        if (!ckpt__inflater_is(f, src, record) || ckpt__inflater_position(f) > offset) continue;
        if (!best || ckpt__inflater_position(f) > ckpt__inflater_position(best)) best = f, at = i;
    }
    if (best) c->inflaters[at] = NULL;
    pthread_mutex_unlock(&c->map_lock);
    return best;
}

void ckpt__catalog_keep_inflater(ckpt_catalog *c, ckpt__inflater *f) {
    if (!f) return;
    ckpt__inflater *evicted = NULL;
    pthread_mutex_lock(&c->map_lock);
    size_t n = sizeof c->inflaters / sizeof c->inflaters[0], slot = n;
    for (size_t i = 0; i < n && slot == n; i++)
        if (!c->inflaters[i]) slot = i;
    if (slot == n) slot = c->inflater_next++ % n, evicted = c->inflaters[slot];
    c->inflaters[slot] = f;
    pthread_mutex_unlock(&c->map_lock);
    ckpt__inflater_free(evicted);
}

/* ---- private mappings (io/mapping.c) ------------------------------------------ */

ckpt_status ckpt_catalog_map_file(ckpt_catalog *c, size_t file, unsigned flags, ckpt_mapping **out, ckpt_error *err) {
    if (out) *out = NULL;
    if (!c || !out || file >= c->file_count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a catalog, one of its files and out are required");
    return ckpt__mapping_create(c->files[file].src, (flags & CKPT_MAP_PREFETCH) != 0, out, err);
}

void *ckpt_mapping_data(const ckpt_mapping *m) { return m ? ckpt__mapping_data(m) : NULL; }
uint64_t ckpt_mapping_size(const ckpt_mapping *m) { return m ? ckpt__mapping_size(m) : 0; }
int ckpt_mapping_prefetching(const ckpt_mapping *m) { return m && ckpt__mapping_prefetching(m); }
void ckpt_mapping_free(ckpt_mapping *m) { ckpt__mapping_release(m); }
