/* writer.c — ckpt_writer_*: streaming safetensors output, single or sharded,
 * committed atomically. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "formats/safetensors.h"
#include "formats/shards.h"
#include "writer_internal.h"

typedef struct wtensor {
    const char *name; /* arena */
    ckpt_dtype dtype;
    uint32_t ndim;
    uint64_t *shape; /* arena */
    uint64_t nbytes;
    uint32_t file;
    uint64_t offset; /* absolute, in its file */
    uint64_t written;
    XXH3_state_t *hash; /* while its bytes stream in, with checksums on */
    uint64_t digest;
    ckpt_tensor_storage storage; /* where its bytes lie in the caller's memory (id 0: nowhere shared) */
    size_t kept;                 /* deduplicated: the tensor written in its place; else its own index */
} wtensor;

#define REMOVED UINT32_MAX /* the file of a tensor deduplicated away */

typedef struct wfile {
    char *final_path;
    char *tmp_path;
    int fd;
    uint64_t size;
    bool existed;   /* a file was already at final_path */
    bool committed; /* renamed into place */
    uint64_t checksum_at;  /* where the escaped checksum map sits in the header (0: none) */
    size_t checksum_len;
    uint64_t header_digest; /* XXH3-64 of the header with the placeholder map */
} wfile;

typedef enum wstate { DECLARING, WRITING, COMMITTED, FAILED } wstate;

struct ckpt_writer {
    ckpt_writer_options opt;
    char *path;   /* the file, or the directory of shards */
    char *prefix;
    ckpt__arena arena;
    wstate state;
    size_t count, cap;
    wtensor *tensors;
    ckpt__name_table names;
    size_t names_cap;
    ckpt__pairs meta;      /* every file's __metadata__ */
    ckpt__pairs ckpt_meta; /* the checkpoint's: the single file, or the index */
    ckpt__pairs file_meta; /* what layout writes: meta, plus ckpt_meta when unsharded */
    uint64_t total;       /* bytes of tensor data written */
    uint64_t index_total; /* huggingface_hub's total_size: shared storages counted once, whole */
    size_t file_count;
    wfile *files;
    wfile index; /* sharded output with two or more shards */
    char **stale; /* files of a replaced checkpoint to remove after commit */
    size_t stale_count;
    /* Sharded output into a new or empty directory is built in a temporary
     * directory beside it and renamed into place in one step. */
    char *stage;
    bool dest_existed;   /* the (empty) destination directory was there before */
    bool stage_published; /* renamed into place; a later failure takes it back */
};

void ckpt_writer_options_init(ckpt_writer_options *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Lists the files of an existing sharded checkpoint with this prefix. */
static ckpt_status existing_shard_files(ckpt_writer *w, ckpt_error *err) {
    DIR *d = opendir(w->path);
    if (!d) {
        if (errno == ENOENT) return CKPT_OK;
        return ckpt__fail_errno(err, errno, w->path, -1, "cannot list the destination directory");
    }
    ckpt_status st = CKPT_OK;
    struct dirent *e;
    while ((e = readdir(d)) && st == CKPT_OK) {
        if (!ckpt__shards_is_own_file(w->prefix, e->d_name)) continue;
        char **s = ckpt__realloc(w->stale, (w->stale_count + 1) * sizeof *s);
        if (!s) {
            st = ckpt__oom(err, w->path, NULL);
            break;
        }
        w->stale = s;
        if (!(s[w->stale_count] = ckpt__path_join(w->path, e->d_name))) st = ckpt__oom(err, w->path, NULL);
        else w->stale_count++;
    }
    closedir(d);
    return st;
}

ckpt_status ckpt_writer_create(const char *path, const ckpt_writer_options *options, ckpt_writer **out,
                               ckpt_error *err) {
    if (out) *out = NULL;
    if (!path || !*path || !out)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "path and out are required");
    if (options && options->size && options->size < offsetof(ckpt_writer_options, copy_partial_views))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1,
                          "ckpt_writer_options.size is %zu: initialise the options with ckpt_writer_options_init",
                          options->size);
    ckpt_writer *w = ckpt__calloc(1, sizeof *w);
    if (!w) return ckpt__oom(err, path, NULL);
    if (options) memcpy(&w->opt, options, options->size && options->size < sizeof *options ? options->size : sizeof *options);
    w->path = ckpt__strdup(path);
    w->prefix = ckpt__strdup(w->opt.prefix && *w->opt.prefix ? w->opt.prefix : "model");
    w->opt.prefix = NULL;
    w->index.fd = -1;
    ckpt_status st = CKPT_OK;
    if (!w->path || !w->prefix) st = ckpt__oom(err, path, NULL);
    else if (w->opt.max_shard_size == 0) {
        struct stat sb;
        if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            st = ckpt__fail(err, CKPT_E_EXISTS, path, NULL, -1,
                            "is a directory; give a file name, or a maximum shard size to write shards into it");
        else if (exists(path) && !w->opt.overwrite)
            st = ckpt__fail(err, CKPT_E_EXISTS, path, NULL, -1, "already exists (use overwrite / --force to replace it)");
    } else {
        struct stat sb;
        if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
            st = ckpt__fail(err, CKPT_E_EXISTS, path, NULL, -1, "exists and is not a directory");
        if (st == CKPT_OK) st = existing_shard_files(w, err);
        if (st == CKPT_OK && w->stale_count && !w->opt.overwrite)
            st = ckpt__fail(err, CKPT_E_EXISTS, w->path, NULL, -1,
                            "already holds a checkpoint (%s); use overwrite / --force to replace it",
                            ckpt__path_basename(w->stale[0]));
    }
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    *out = w;
    return CKPT_OK;
}

static ckpt_status check_declaring(ckpt_writer *w, ckpt_error *err) {
    if (!w) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (w->state != DECLARING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "declarations must come before ckpt_writer_begin");
    return CKPT_OK;
}

static bool valid_utf8(const char *s) {
    size_t n = strlen(s);
    return ckpt__utf8_check((const unsigned char *)s, n) == n;
}

static ckpt_status add_pair(ckpt_writer *w, ckpt__pairs *pairs, const char *key, const char *value, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    if (!key || !value || !valid_utf8(key) || !valid_utf8(value))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "metadata keys and values must be UTF-8 strings");
    if (ckpt__pairs_get(pairs, key))
        return ckpt__fail(err, CKPT_E_DUPLICATE_NAME, w->path, NULL, -1, "metadata key '%s' set twice", key);
    const char *k = ckpt__arena_strndup(&w->arena, key, strlen(key));
    const char *v = ckpt__arena_strndup(&w->arena, value, strlen(value));
    if (!k || !v || !ckpt__pairs_push(pairs, k, v)) return ckpt__oom(err, w->path, NULL);
    return CKPT_OK;
}

ckpt_status ckpt_writer_set_metadata(ckpt_writer *w, const char *key, const char *value, ckpt_error *err) {
    return add_pair(w, w ? &w->meta : NULL, key, value, err);
}

ckpt_status ckpt_writer_set_checkpoint_metadata(ckpt_writer *w, const char *key, const char *value, ckpt_error *err) {
    return add_pair(w, w ? &w->ckpt_meta : NULL, key, value, err);
}

static bool rebuild_names(ckpt_writer *w, size_t want) {
    ckpt__name_table t;
    if (!ckpt__name_table_init(&t, want)) return false;
    for (size_t i = 0; i < w->count; i++)
        ckpt__name_table_insert(&t, &w->tensors[0].name, sizeof *w->tensors, (uint32_t)i, NULL);
    ckpt__name_table_free(&w->names);
    w->names = t;
    w->names_cap = want;
    return true;
}

ckpt_status ckpt_writer_add_tensor_shared(ckpt_writer *w, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                          const uint64_t *shape, const ckpt_tensor_storage *storage, size_t *index,
                                          ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    if (!name || !*name || !valid_utf8(name) || strcmp(name, "__metadata__") == 0)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, name, -1,
                          "tensor names must be non-empty UTF-8 and not \"__metadata__\"");
    if (!ckpt_dtype_name(dtype))
        return ckpt__fail(err, CKPT_E_UNKNOWN_DTYPE, w->path, name, -1, "unknown dtype %d", (int)dtype);
    if (ndim > CKPT_MAX_DIMS || (ndim && !shape))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, name, -1, "shape must have at most %d dimensions",
                          CKPT_MAX_DIMS);
    uint64_t numel, nbytes;
    if (!ckpt__shape_numel(ndim, shape, &numel))
        return ckpt__fail(err, CKPT_E_SHAPE_OVERFLOW, w->path, name, -1, "product of the shape overflows 64 bits");
    st = ckpt__dtype_nbytes(dtype, numel, &nbytes);
    if (st)
        return ckpt__fail(err, st, w->path, name, -1, "%llu elements of %s: %s", (unsigned long long)numel,
                          ckpt_dtype_name(dtype), ckpt_status_message(st));
    uint64_t total;
    if (!ckpt__add_u64(w->total, nbytes, &total))
        return ckpt__fail(err, CKPT_E_SHAPE_OVERFLOW, w->path, name, -1, "total size overflows 64 bits");
    if (w->count == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        wtensor *t = ckpt__realloc(w->tensors, cap * sizeof *t);
        if (!t) return ckpt__oom(err, w->path, NULL);
        w->tensors = t;
        w->cap = cap;
    }
    wtensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    t->name = ckpt__arena_strndup(&w->arena, name, strlen(name));
    t->shape = ckpt__arena_alloc(&w->arena, (ndim ? ndim : 1) * sizeof(uint64_t));
    if (!t->name || !t->shape) return ckpt__oom(err, w->path, NULL);
    if (ndim) memcpy(t->shape, shape, ndim * sizeof(uint64_t));
    if (storage && storage->id) {
        if (storage->begin > storage->end || storage->end > storage->nbytes)
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, name, -1,
                              "storage area [%llu, %llu) is not inside its %llu bytes", (unsigned long long)storage->begin,
                              (unsigned long long)storage->end, (unsigned long long)storage->nbytes);
        t->storage = *storage;
    }
    t->kept = w->count;
    t->dtype = dtype;
    t->ndim = ndim;
    t->nbytes = nbytes;
    if (w->count + 1 > w->names_cap / 2 + w->names_cap / 4 && !rebuild_names(w, (w->count + 1) * 2))
        return ckpt__oom(err, w->path, NULL);
    uint32_t prev;
    if (!ckpt__name_table_insert(&w->names, &w->tensors[0].name, sizeof *w->tensors, (uint32_t)w->count, &prev))
        return ckpt__fail(err, CKPT_E_DUPLICATE_NAME, w->path, name, -1, "tensor declared twice");
    if (index) *index = w->count;
    w->count++;
    w->total = total;
    return CKPT_OK;
}

ckpt_status ckpt_writer_add_tensor(ckpt_writer *w, const char *name, ckpt_dtype dtype, uint32_t ndim,
                                   const uint64_t *shape, size_t *index, ckpt_error *err) {
    return ckpt_writer_add_tensor_shared(w, name, dtype, ndim, shape, NULL, index, err);
}

/* ---- shared storages, as huggingface_hub's save_torch_state_dict ------------ */

typedef struct area {
    size_t index;
    size_t rank; /* the first declaration of its storage */
    uint64_t start, stop;
    const char *name;
} area;

static int by_key(const void *a, const void *b, void *w) {
    const wtensor *t = ((ckpt_writer *)w)->tensors;
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    const ckpt_tensor_storage *x = &t[i].storage, *y = &t[j].storage;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    if (x->nbytes != y->nbytes) return x->nbytes < y->nbytes ? -1 : 1;
    return i < j ? -1 : i > j;
}

static int by_area(const void *a, const void *b) {
    const area *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->stop != y->stop) return x->stop < y->stop ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(const area *const *)a)->name, (*(const area *const *)b)->name);
}

/* rank[i]: the index of the first tensor declared on i's storage (the
 * hub keys storages by address and size), or i itself. */
static ckpt_status storage_ranks(ckpt_writer *w, size_t *rank, bool packing, ckpt_error *err) {
    size_t *order = ckpt__malloc((w->count ? w->count : 1) * sizeof *order), n = 0;
    if (!order) return ckpt__oom(err, w->path, NULL);
    for (size_t i = 0; i < w->count; i++) {
        rank[i] = i;
        const wtensor *t = &w->tensors[i];
        /* Packing sees the tensors made contiguous: a view that is not has
         * a storage of its own by then. */
        if (t->storage.id && t->storage.nbytes && t->file != REMOVED && (!packing || t->storage.contiguous))
            order[n++] = i;
    }
    qsort_r(order, n, sizeof *order, by_key, w);
    for (size_t k = 1; k < n; k++) {
        const ckpt_tensor_storage *a = &w->tensors[order[k]].storage, *b = &w->tensors[order[k - 1]].storage;
        if (a->id == b->id && a->nbytes == b->nbytes) rank[order[k]] = rank[order[k - 1]];
    }
    free(order);
    return CKPT_OK;
}

/* Drops tensors whose bytes another tensor holds, as
 * _remove_duplicate_names does: on one storage, runs of overlapping areas
 * (each starting before the previous one's end) keep the first complete
 * tensor by name; the others are recorded as `removed → kept` in the
 * checkpoint's metadata (unless the caller set that key). */
static ckpt_status dedup(ckpt_writer *w, ckpt_error *err) {
    size_t n = w->count, count = 0;
    area *areas = ckpt__malloc((n ? n : 1) * sizeof *areas);
    area **group = ckpt__malloc((n ? n : 1) * sizeof *group);
    size_t *rank = ckpt__malloc((n ? n : 1) * sizeof *rank);
    ckpt_status st = !areas || !group || !rank ? ckpt__oom(err, w->path, NULL) : storage_ranks(w, rank, false, err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const wtensor *t = &w->tensors[i];
        if (!t->storage.id || !t->storage.nbytes) continue;
        areas[count++] = (area){i, rank[i], t->storage.begin, t->storage.end, t->name};
    }
    if (st == CKPT_OK) qsort(areas, count, sizeof *areas, by_area);
    for (size_t i = 0; st == CKPT_OK && i < count;) {
        size_t j = i + 1;
        while (j < count && areas[j].rank == areas[i].rank && areas[j].start < areas[j - 1].stop) j++;
        if (j - i >= 2) {
            const area *keep = NULL;
            for (size_t k = i; k < j; k++) {
                const wtensor *t = &w->tensors[areas[k].index];
                bool complete = t->storage.begin == 0 && t->nbytes == t->storage.nbytes;
                if (complete && (!keep || strcmp(areas[k].name, keep->name) < 0)) keep = &areas[k];
            }
            if (!keep && !w->opt.copy_partial_views) {
                ckpt__buf names = {0};
                for (size_t k = i; k < j; k++) {
                    ckpt__buf_puts(&names, k > i ? ", " : "");
                    ckpt__buf_puts(&names, areas[k].name);
                }
                st = ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, areas[i].name, -1,
                                "tensors %s share memory and none covers the whole storage; refusing to save them "
                                "(as huggingface_hub does: it would store more than the tensors hold; save copies, "
                                "or see https://huggingface.co/docs/safetensors/torch_shared_tensors)",
                                names.data ? names.data : "");
                free(names.data);
            }
            size_t members = 0;
            for (size_t k = i; keep && k < j; k++) group[members++] = &areas[k];
            qsort(group, members, sizeof *group, by_name);
            for (size_t k = 0; st == CKPT_OK && k < members; k++) {
                if (group[k] == keep) continue;
                wtensor *t = &w->tensors[group[k]->index];
                t->file = REMOVED;
                t->kept = keep->index;
                w->total -= t->nbytes;
                if (!ckpt__pairs_get(&w->ckpt_meta, t->name) && !ckpt__pairs_push(&w->ckpt_meta, t->name, keep->name))
                    st = ckpt__oom(err, w->path, NULL);
            }
        }
        i = j;
    }
    free(areas);
    free(group);
    free(rank);
    return st;
}

const char *ckpt_writer_tensor_kept(const ckpt_writer *w, size_t index) {
    if (!w || index >= w->count || w->tensors[index].file != REMOVED) return NULL;
    return w->tensors[w->tensors[index].kept].name;
}

/* The checksum map of a file's tensors (declaration order), as JSON text:
 * with digests, or with zeros as a placeholder of the same length.
 * malloc'ed; NULL when out of memory. */
static char *checksum_map(const ckpt_writer *w, uint32_t file) {
    ckpt__buf b = {0};
    /* "__metadata__" (never a tensor name) holds the header's own digest. */
    char hex[40];
    snprintf(hex, sizeof hex, "{\"__metadata__\":\"%016llx\"", (unsigned long long)w->files[file].header_digest);
    ckpt__buf_puts(&b, hex);
    bool first = false;
    for (size_t i = 0; i < w->count; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->file != file) continue;
        if (!first) ckpt__buf_puts(&b, ",");
        first = false;
        ckpt__buf_json_string(&b, t->name);
        snprintf(hex, sizeof hex, ":\"%016llx\"", (unsigned long long)t->digest);
        ckpt__buf_puts(&b, hex);
    }
    ckpt__buf_puts(&b, "}");
    if (b.failed) {
        free(b.data);
        return NULL;
    }
    return b.data;
}

/* Finds where the placeholder map landed in the rendered header. */
static ckpt_status locate_checksums(ckpt_writer *w, uint32_t file, const ckpt__buf *header, const char *placeholder,
                                    ckpt_error *err) {
    ckpt__buf escaped = {0};
    ckpt__buf_json_string(&escaped, placeholder);
    if (escaped.failed) return ckpt__oom(err, w->path, NULL);
    const char *at = memmem(header->data, header->len, escaped.data, escaped.len);
    if (at) {
        w->files[file].checksum_at = (uint64_t)(at - header->data);
        w->files[file].checksum_len = escaped.len;
        w->files[file].header_digest = XXH3_64bits(header->data, header->len);
    }
    free(escaped.data);
    return at ? CKPT_OK : ckpt__fail(err, CKPT_E_BAD_STATE, w->files[file].final_path, NULL, -1,
                                     "checksum placeholder not found in the header");
}

/* Writes the real checksum map over the placeholder (same length). */
static ckpt_status patch_checksums(ckpt_writer *w, uint32_t file, ckpt_error *err) {
    wfile *f = &w->files[file];
    char *map = checksum_map(w, file);
    ckpt__buf escaped = {0};
    if (map) ckpt__buf_json_string(&escaped, map);
    free(map);
    ckpt_status st = CKPT_OK;
    if (!map || escaped.failed) st = ckpt__oom(err, f->final_path, NULL);
    else if (escaped.len != f->checksum_len)
        st = ckpt__fail(err, CKPT_E_BAD_STATE, f->final_path, NULL, -1, "checksum map changed length");
    else st = ckpt__pwrite_full(f->fd, escaped.data, escaped.len, f->checksum_at, f->tmp_path, err);
    free(escaped.data);
    return st;
}

/* Lays out one output file: its header, and each tensor's offset in it. */
static ckpt_status layout_file(ckpt_writer *w, uint32_t file, ckpt__buf *header, ckpt_error *err) {
    size_t n = 0;
    for (size_t i = 0; i < w->count; i++) n += w->tensors[i].file == file;
    ckpt__st_out_tensor *out = ckpt__malloc((n ? n : 1) * sizeof *out);
    if (!out) return ckpt__oom(err, w->files[file].final_path, NULL);
    size_t k = 0;
    for (size_t i = 0; i < w->count; i++) {
        wtensor *t = &w->tensors[i];
        if (t->file == file)
            out[k++] = (ckpt__st_out_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim,
                                             .shape = t->shape, .nbytes = t->nbytes, .id = i};
    }
    uint64_t data_size;
    ckpt__pairs meta = w->file_meta; /* shared arrays; pushed onto only through `own` below */
    ckpt__pairs own = {0};
    char *placeholder = NULL;
    ckpt_status st = CKPT_OK;
    if (w->opt.checksums) {
        /* A fixed-length stand-in: the digests replace it at commit. */
        placeholder = checksum_map(w, file);
        for (size_t i = 0; placeholder && i < meta.count; i++) ckpt__pairs_push(&own, meta.keys[i], meta.values[i]);
        if (!placeholder || !ckpt__pairs_push(&own, CKPT_CHECKSUM_METADATA_KEY, placeholder)) st = ckpt__oom(err, w->path, NULL);
        meta = own;
    }
    if (st == CKPT_OK) st = ckpt__st_layout(out, n, meta.keys, meta.values, meta.count, header, &data_size);
    if (st == CKPT_OK && placeholder) st = locate_checksums(w, file, header, placeholder, err);
    free(placeholder);
    ckpt__pairs_free(&own);
    if (st == CKPT_OK) {
        for (size_t i = 0; i < n; i++) w->tensors[out[i].id].offset = header->len + out[i].begin;
        w->files[file].size = header->len + data_size;
    } else {
        st = ckpt__fail(err, st, w->files[file].final_path, NULL, -1, "cannot lay out the file");
    }
    free(out);
    return st;
}

/* Shards as split_torch_state_dict_into_shards makes them: tensors in
 * declaration order, each storage counted once and whole; a tensor on a
 * storage already seen joins that tensor's shard. */
static ckpt_status plan_files(ckpt_writer *w, ckpt_error *err) {
    size_t shards = 1, n = w->count;
    uint64_t *sizes = ckpt__malloc((n ? n : 1) * sizeof *sizes);
    uint32_t *shard_of = ckpt__malloc((n ? n : 1) * sizeof *shard_of);
    size_t *rank = ckpt__malloc((n ? n : 1) * sizeof *rank), *leaders = ckpt__malloc((n ? n : 1) * sizeof *leaders);
    ckpt_status st = !sizes || !shard_of || !rank || !leaders ? ckpt__oom(err, w->path, NULL) : storage_ranks(w, rank, true, err);
    size_t count = 0;
    w->index_total = 0;
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->file == REMOVED || rank[i] != i) continue;
        leaders[count] = i;
        sizes[count++] = t->storage.id && t->storage.contiguous ? t->storage.nbytes : t->nbytes;
        w->index_total += sizes[count - 1];
    }
    if (st == CKPT_OK && w->opt.max_shard_size && count) {
        shards = ckpt__shards_pack(sizes, count, w->opt.max_shard_size, shard_of);
        for (size_t k = 0; k < count; k++) w->tensors[leaders[k]].file = shard_of[k];
    } else {
        for (size_t k = 0; k < count; k++) w->tensors[leaders[k]].file = 0;
    }
    for (size_t i = 0; st == CKPT_OK && i < n; i++)
        if (w->tensors[i].file != REMOVED && rank[i] != i) w->tensors[i].file = w->tensors[rank[i]].file;
    free(sizes);
    free(shard_of);
    free(rank);
    free(leaders);
    if (st) return st;
    w->files = ckpt__calloc(shards, sizeof *w->files);
    if (!w->files) return ckpt__oom(err, w->path, NULL);
    w->file_count = shards;
    for (size_t f = 0; f < shards; f++) {
        w->files[f].fd = -1;
        if (w->opt.max_shard_size) {
            char *name = ckpt__shard_file_name(w->prefix, f, shards);
            w->files[f].final_path = name ? ckpt__path_join(w->path, name) : NULL;
            free(name);
        } else {
            w->files[f].final_path = ckpt__strdup(w->path);
        }
        if (!w->files[f].final_path) return ckpt__oom(err, w->path, NULL);
        w->files[f].existed = exists(w->files[f].final_path);
    }
    if (shards > 1) {
        size_t len = strlen(w->prefix) + sizeof ".safetensors.index.json";
        char *name = ckpt__malloc(len);
        if (!name) return ckpt__oom(err, w->path, NULL);
        snprintf(name, len, "%s.safetensors.index.json", w->prefix);
        w->index.final_path = ckpt__path_join(w->path, name);
        free(name);
        if (!w->index.final_path) return ckpt__oom(err, w->path, NULL);
        w->index.existed = exists(w->index.final_path);
    }
    return CKPT_OK;
}

/* True when `path` does not exist or is an empty directory. */
static bool dir_is_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

/* In staged mode a file is made under its final name inside the stage. */
static ckpt_status stage_create(ckpt_writer *w, wfile *file, ckpt_error *err) {
    file->tmp_path = ckpt__path_join(w->stage, ckpt__path_basename(file->final_path));
    if (!file->tmp_path) return ckpt__oom(err, w->path, NULL);
    file->fd = ckpt__io_open(file->tmp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    return file->fd < 0 ? ckpt__fail_errno(err, errno, file->tmp_path, -1, "cannot create") : CKPT_OK;
}

/* mkdir -p: the shard directory and any missing parents. */
static ckpt_status make_directories(const char *path, ckpt_error *err) {
    char *p = ckpt__strdup(path);
    if (!p) return ckpt__oom(err, path, NULL);
    ckpt_status st = CKPT_OK;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = ckpt__fail_errno(err, errno, p, -1, "cannot create the output directory");
            break;
        }
        *s = saved;
        if (!saved) break;
    }
    free(p);
    return st;
}

ckpt_status ckpt_writer_begin(ckpt_writer *w, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    w->state = FAILED; /* until every step below succeeds */
    if (w->opt.max_shard_size) {
        char *parent = ckpt__path_dirname(w->path);
        if (!parent) return ckpt__oom(err, w->path, NULL);
        st = make_directories(parent, err);
        ckpt__remove_stale_temps(parent); /* what killed writers left beside it */
        free(parent);
        if (st) return st;
        if (dir_is_empty(w->path)) {
            w->dest_existed = exists(w->path);
            st = ckpt__temp_dir_create(w->path, &w->stage, err);
        }
        else ckpt__remove_stale_temps(w->path);
        if (st) return st;
    } else {
        char *parent = ckpt__path_dirname(w->path);
        if (parent) ckpt__remove_stale_temps(parent);
        free(parent);
    }
    st = dedup(w, err);
    if (st == CKPT_OK) st = plan_files(w, err);
    /* The per-file entries, then (one file only) the checkpoint's own. */
    for (size_t i = 0; st == CKPT_OK && i < w->meta.count; i++)
        if (!ckpt__pairs_push(&w->file_meta, w->meta.keys[i], w->meta.values[i])) st = ckpt__oom(err, w->path, NULL);
    for (size_t i = 0; st == CKPT_OK && w->file_count == 1 && i < w->ckpt_meta.count; i++) {
        if (ckpt__pairs_get(&w->file_meta, w->ckpt_meta.keys[i])) continue; /* do not override per-file data */
        if (!ckpt__pairs_push(&w->file_meta, w->ckpt_meta.keys[i], w->ckpt_meta.values[i])) st = ckpt__oom(err, w->path, NULL);
    }
    for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) {
        wfile *file = &w->files[f];
        ckpt__buf header = {0};
        st = layout_file(w, (uint32_t)f, &header, err);
        if (st == CKPT_OK) st = w->stage ? stage_create(w, file, err)
                                         : ckpt__temp_create(file->final_path, &file->tmp_path, &file->fd, err);
        if (st == CKPT_OK) st = ckpt__reserve(file->fd, file->size, file->tmp_path, err);
        if (st == CKPT_OK) st = ckpt__pwrite_full(file->fd, header.data, header.len, 0, file->tmp_path, err);
        free(header.data);
    }
    if (st == CKPT_OK) w->state = WRITING;
    return st;
}

size_t ckpt_writer_file_count(const ckpt_writer *w) { return w ? w->file_count : 0; }
const char *ckpt_writer_file_path(const ckpt_writer *w, size_t i) {
    return w && i < w->file_count ? w->files[i].final_path : NULL;
}
size_t ckpt_writer_tensor_file(const ckpt_writer *w, size_t index) {
    if (!w || index >= w->count) return 0;
    return w->tensors[index].file == REMOVED ? SIZE_MAX : w->tensors[index].file;
}
uint64_t ckpt_writer_total_bytes(const ckpt_writer *w) { return w ? w->total : 0; }

static ckpt_status check_append(ckpt_writer *w, size_t index, uint64_t at, uint64_t n, ckpt_error *err) {
    if (!w) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (w->state != WRITING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1,
                          w->state == DECLARING ? "data must come after ckpt_writer_begin"
                                                : "the writer is committed or has failed");
    if (index >= w->count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "no tensor with writer index %zu", index);
    wtensor *t = &w->tensors[index];
    if (at > t->nbytes || n > t->nbytes - at)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, t->file == REMOVED ? w->path : w->files[t->file].final_path,
                          t->name, -1, "bytes [%llu, %llu) are outside the declared %llu", (unsigned long long)at,
                          (unsigned long long)(at + n), (unsigned long long)t->nbytes);
    return CKPT_OK;
}

/* Bytes for a tensor deduplicated away: accepted and dropped, so that
 * callers may stream every tensor they declared. */
static bool dropped(const ckpt_writer *w, size_t index) { return w->tensors[index].file == REMOVED; }

/* Tensor bytes [at, at + n) from `data`, at their place in the file.
 * Threads may write different ranges at once; with checksums a tensor's
 * bytes must come in order (the hash streams). */
ckpt_status ckpt__writer_pwrite(ckpt_writer *w, size_t index, uint64_t at, const void *data, size_t nbytes,
                                ckpt_error *err) {
    ckpt_status st = check_append(w, index, at, nbytes, err);
    if (st) return st;
    if (nbytes && !data) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "data is NULL");
    wtensor *t = &w->tensors[index];
    if (dropped(w, index)) {
        __atomic_add_fetch(&t->written, nbytes, __ATOMIC_ACQ_REL);
        return CKPT_OK;
    }
    wfile *f = &w->files[t->file];
    if (w->opt.checksums && at != __atomic_load_n(&t->written, __ATOMIC_ACQUIRE))
        return ckpt__fail(err, CKPT_E_BAD_STATE, f->final_path, t->name, -1,
                          "with checksums a tensor's bytes must arrive in order (byte %llu came after %llu)",
                          (unsigned long long)at, (unsigned long long)t->written);
    st = ckpt__pwrite_full(f->fd, data, nbytes, t->offset + at, f->tmp_path, err);
    if (st) return ckpt__error_in_tensor(err, st, t->name);
    if (w->opt.checksums) {
        if (!t->hash && (!(t->hash = XXH3_createState()) || XXH3_64bits_reset(t->hash) == XXH_ERROR))
            return ckpt__oom(err, w->path, NULL);
        XXH3_64bits_update(t->hash, data, nbytes);
    }
    uint64_t written = __atomic_add_fetch(&t->written, nbytes, __ATOMIC_ACQ_REL);
    if (t->hash && written == t->nbytes) {
        t->digest = XXH3_64bits_digest(t->hash);
        XXH3_freeState(t->hash);
        t->hash = NULL;
    }
    return CKPT_OK;
}

ckpt_status ckpt_writer_write(ckpt_writer *w, size_t index, const void *data, size_t nbytes, ckpt_error *err) {
    if (!w || index >= w->count) return check_append(w, index, 0, nbytes, err);
    return ckpt__writer_pwrite(w, index, w->tensors[index].written, data, nbytes, err);
}

/* Tensor bytes [at, at + n) copied by the kernel from a local source. */
ckpt_status ckpt__writer_pcopy(ckpt_writer *w, size_t index, uint64_t at, ckpt__source *src, uint64_t src_offset,
                               uint64_t n, ckpt_error *err) {
    ckpt_status st = check_append(w, index, at, n, err);
    if (st) return st;
    wtensor *t = &w->tensors[index];
    if (dropped(w, index)) {
        __atomic_add_fetch(&t->written, n, __ATOMIC_ACQ_REL);
        return CKPT_OK;
    }
    wfile *f = &w->files[t->file];
    if (w->opt.checksums || src->fd < 0)
        return ckpt__fail(err, CKPT_E_BAD_STATE, f->final_path, t->name, -1,
                          "a kernel copy needs a local source and no checksums");
    st = ckpt__copy_range(src->fd, src_offset, src->name, f->fd, t->offset + at, f->tmp_path, n, NULL, NULL, err);
    if (st) return ckpt__error_in_tensor(err, st, t->name);
    __atomic_add_fetch(&t->written, n, __ATOMIC_ACQ_REL);
    return CKPT_OK;
}

static ckpt_status finish_file(ckpt_writer *w, wfile *f, ckpt_error *err) {
    if (ckpt__io_ftruncate(f->fd, (off_t)f->size) != 0)
        return ckpt__fail_errno(err, errno, f->tmp_path, -1, "cannot set the file size");
    if (!w->opt.no_sync && ckpt__io_fsync(f->fd) != 0) return ckpt__fail_errno(err, errno, f->tmp_path, -1, "fsync failed");
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) return ckpt__fail_errno(err, errno, f->tmp_path, -1, "close failed");
    return CKPT_OK;
}

static int by_rank(const void *a, const void *b, void *rank) {
    size_t i = *(const size_t *)a, j = *(const size_t *)b, ri = ((size_t *)rank)[i], rj = ((size_t *)rank)[j];
    if (ri != rj) return ri < rj ? -1 : 1;
    return i < j ? -1 : i > j;
}

static ckpt_status write_index(ckpt_writer *w, ckpt_error *err) {
    const char **names = ckpt__malloc((w->count + 1) * sizeof *names);
    const char **files = ckpt__malloc((w->count + 1) * sizeof *files);
    ckpt_status st = CKPT_OK;
    if (!names || !files) st = ckpt__oom(err, w->index.final_path, NULL);
    /* huggingface_hub lists the weight map shard by shard: each shard's
     * tensors in declaration order, then the tensors that joined it for
     * sharing a storage with one of them, storage by storage. */
    size_t *order = st == CKPT_OK ? ckpt__malloc((w->count + 1) * sizeof *order) : NULL;
    size_t *rank = st == CKPT_OK ? ckpt__malloc((w->count + 1) * sizeof *rank) : NULL;
    if (st == CKPT_OK && (!order || !rank)) st = ckpt__oom(err, w->index.final_path, NULL);
    if (st == CKPT_OK) st = storage_ranks(w, rank, true, err);
    size_t listed = 0, followers = 0;
    for (size_t i = 0; st == CKPT_OK && i < w->count; i++) /* by storage, then declaration: rank[i] ≤ i */
        if (w->tensors[i].file != REMOVED && rank[i] != i) order[followers++] = i;
    if (st == CKPT_OK) qsort_r(order, followers, sizeof *order, by_rank, rank);
    size_t *list = st == CKPT_OK ? ckpt__malloc((w->count + 1) * sizeof *list) : NULL;
    if (st == CKPT_OK && !list) st = ckpt__oom(err, w->index.final_path, NULL);
    for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) {
        for (size_t i = 0; i < w->count; i++)
            if (w->tensors[i].file == f && rank[i] == i) list[listed++] = i;
        for (size_t k = 0; k < followers; k++)
            if (w->tensors[order[k]].file == f) list[listed++] = order[k];
    }
    for (size_t k = 0; st == CKPT_OK && k < listed; k++) {
        names[k] = w->tensors[list[k]].name;
        files[k] = ckpt__path_basename(w->files[w->tensors[list[k]].file].final_path);
    }
    free(list);
    free(order);
    free(rank);
    ckpt__buf text = {0};
    if (st == CKPT_OK) {
        ckpt__index_render(&text, w->index_total, w->ckpt_meta.keys, w->ckpt_meta.values, w->ckpt_meta.count, names,
                           files, listed);
        if (text.failed) st = ckpt__oom(err, w->index.final_path, NULL);
    }
    if (st == CKPT_OK) st = w->stage ? stage_create(w, &w->index, err)
                                     : ckpt__temp_create(w->index.final_path, &w->index.tmp_path, &w->index.fd, err);
    if (st == CKPT_OK) st = ckpt__pwrite_full(w->index.fd, text.data, text.len, 0, w->index.tmp_path, err);
    w->index.size = text.len;
    if (st == CKPT_OK) st = finish_file(w, &w->index, err);
    free(text.data);
    free(names);
    free(files);
    return st;
}

static ckpt_status place(wfile *f, ckpt_error *err) {
    if (ckpt__io_rename(f->tmp_path, f->final_path) != 0)
        return ckpt__fail_errno(err, errno, f->final_path, -1, "cannot rename %s into place", f->tmp_path);
    f->committed = true;
    return CKPT_OK;
}

static bool is_new_file(const ckpt_writer *w, const char *path) {
    for (size_t f = 0; f < w->file_count; f++)
        if (strcmp(w->files[f].final_path, path) == 0) return true;
    return w->index.final_path && strcmp(w->index.final_path, path) == 0;
}

ckpt_status ckpt_writer_commit(ckpt_writer *w, ckpt_error *err) {
    if (!w) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (w->state != WRITING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "commit needs a begun, uncommitted writer");
    for (size_t i = 0; i < w->count; i++) {
        wtensor *t = &w->tensors[i];
        if (t->written != t->nbytes && t->file != REMOVED) {
            w->state = FAILED;
            return ckpt__fail(err, CKPT_E_BAD_STATE, w->files[t->file].final_path, t->name, -1,
                              "only %llu of its %llu bytes were written", (unsigned long long)t->written,
                              (unsigned long long)t->nbytes);
        }
    }
    w->state = FAILED;
    ckpt_status st = CKPT_OK;
    if (w->opt.checksums) {
        for (size_t i = 0; i < w->count; i++)
            if (w->tensors[i].nbytes == 0) w->tensors[i].digest = XXH3_64bits(NULL, 0);
        for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) st = patch_checksums(w, (uint32_t)f, err);
    }
    for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) st = finish_file(w, &w->files[f], err);
    if (st == CKPT_OK && w->index.final_path) st = write_index(w, err);
    if (w->stage) {
        /* One rename publishes every file at once (over an empty directory,
         * which rename replaces). */
        if (st == CKPT_OK && !w->opt.no_sync) st = ckpt__fsync_parent(w->files[0].tmp_path, err);
        if (st == CKPT_OK && ckpt__io_rename(w->stage, w->path) != 0)
            st = ckpt__fail_errno(err, errno, w->path, -1, "cannot rename %s into place", w->stage);
        if (st == CKPT_OK) {
            free(w->stage);
            w->stage = NULL;
            w->stage_published = true;
        }
    } else {
        /* Shards first, the index last: a reader never sees an index whose
         * shards are missing. */
        for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) st = place(&w->files[f], err);
        if (st == CKPT_OK && w->index.final_path) st = place(&w->index, err);
    }
    /* The new names live in the directory of the final files, or, for a
     * staged directory, in its parent. */
    if (st == CKPT_OK && !w->opt.no_sync)
        st = ckpt__fsync_parent(w->stage_published ? w->path : w->files[0].final_path, err);
    if (st) return st; /* ckpt_writer_free rolls back */
    w->state = COMMITTED;
    for (size_t i = 0; i < w->stale_count; i++)
        if (!is_new_file(w, w->stale[i])) unlink(w->stale[i]);
    return CKPT_OK;
}

/* Closes a file; when rolling back, removes its temporary, and takes back
 * a final name it created (a failed commit leaves no new name behind). */
static void discard(wfile *f, bool rollback) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
    if (rollback) {
        if (!f->committed && f->tmp_path) unlink(f->tmp_path);
        if (f->committed && !f->existed) unlink(f->final_path);
    }
    free(f->tmp_path);
    free(f->final_path);
}

void ckpt_writer_free(ckpt_writer *w) {
    if (!w) return;
    bool rollback = w->state != COMMITTED;
    bool staged = w->stage || w->stage_published;
    for (size_t f = 0; f < w->file_count; f++) discard(&w->files[f], rollback && !staged);
    discard(&w->index, rollback && !staged);
    if (w->stage) ckpt__remove_flat_dir(w->stage); /* still staged: nothing was published */
    if (rollback && w->stage_published) {
        /* Published, then a later step (the directory fsync) failed: take
         * the whole directory back, leaving what was there before. */
        ckpt__remove_flat_dir(w->path);
        if (w->dest_existed) mkdir(w->path, 0777);
    }
    free(w->stage);
    for (size_t i = 0; i < w->count; i++) XXH3_freeState(w->tensors[i].hash);
    for (size_t i = 0; i < w->stale_count; i++) free(w->stale[i]);
    free(w->stale);
    free(w->files);
    free(w->tensors);
    ckpt__pairs_free(&w->meta);
    ckpt__pairs_free(&w->ckpt_meta);
    ckpt__pairs_free(&w->file_meta);
    ckpt__name_table_free(&w->names);
    ckpt__arena_free(&w->arena);
    free(w->path);
    free(w->prefix);
    free(w);
}
