/* writer.c — ckpt_writer_*: a new checkpoint in any output format
 * (formats/output.h).  Declarations first (names, dtypes, shapes, shared
 * storages, deduplicated as huggingface_hub does), then tensor bytes at
 * computed offsets from any thread, then an atomic commit (io/commit.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#include "base/chunk_hash.h"
#include "base/wire.h"
#include "formats/hf_config.h"
#include "base/json.h"
#include "formats/output.h"
#include "io/beneath.h"
#include "io/commit.h"
#include "io/lock.h"
#include "io/source.h"
#include "writer_internal.h"

typedef struct wtensor {
    ckpt__out_tensor pub;
    ckpt_tensor_storage storage; /* where its bytes lie in the caller's memory (id 0: nowhere shared) */
    size_t kept;                 /* deduplicated: the tensor written in its place; else its own index */
    uint64_t written;            /* bytes received (atomic) */
    XXH3_state_t *hash;          /* while its bytes stream in, when the format needs it */
    ckpt__chunk_hash chunks;     /* its chunks' digests, as they stream in (pub.chunk_count > 0) */
    bool digest_given;           /* its digests known to the caller (ckpt_writer_give_digests) */
    struct segment *segments;    /* CRC-32 of each range received (under the writer's lock) */
    size_t segment_count, segment_cap;
} wtensor;

/* A range of a tensor's bytes and its CRC-32: bytes come from any thread,
 * in any order; commit joins the CRCs (crc32_combine) in byte order. */
typedef struct segment {
    uint64_t at, n;
    uint32_t crc;
} segment;
enum { SEGMENT_JOIN = 16 }; /* the last ranges a new one may extend (add_segment) */

typedef struct wfile {
    char *name; /* relative to the output directory */
    char *final_path;
    const char *tmp_path; /* the commit's */
    int fd;
    uint64_t size;
    bool written; /* this process wrote into it (place_of): a collective save's rank syncs it (atomic) */
} wfile;

typedef enum wstate { DECLARING, WRITING, COMMITTED, FAILED } wstate;

struct ckpt_writer {
    ckpt_writer_options opt;
    ckpt__format_options format_options; /* what opt.gguf and opt.dcp point at */
    const ckpt__output_format *fmt;
    void *fmt_state;
    char *path;   /* as given, normalised: the file, or the directory */
    char *dir;    /* where the files go */
    char *prefix;
    bool directory;
    unsigned needs; /* CKPT__OUT_* */
    ckpt__arena arena;
    wstate state;
    size_t count, cap;
    wtensor *tensors;
    ckpt__name_table names;
    size_t names_cap;
    ckpt__pairs meta;      /* every file's __metadata__ */
    ckpt__pairs ckpt_meta; /* the checkpoint's: the single file's, or the index's */
    /* The object tree a conversion hands over (ckpt__writer_set_tree):
     * ckpt_meta's pair `tree_key` holds tree_pending until a format asks
     * for the metadata's text (ckpt__out_checkpoint_metadata). */
    const ckpt__value *tree;
    const char *tree_key;
    uint64_t total;        /* bytes of tensor data written */
    size_t file_count, side_count, extra_count;
    wfile *files, *sides;
    char **extras;         /* copy_files_from: names copied along */
    struct given_file {    /* ckpt__writer_add_file: files written along, with their bytes (arena) */
        const char *name;
        const void *data;
        size_t len;
    } *given;
    size_t given_count;
    char **extra_paths;    /* after the commit: their paths */
    const char *config_dtype; /* their config.json's dtype becomes this (a torch name); NULL: copied as is */
    const char *open_path; /* after the commit: what opens the output (arena) */
    char **stale;          /* a replaced checkpoint's files (names in dir) */
    size_t stale_count;
    ckpt__commit *commit;
    ckpt__lock *dest_lock; /* held from create to free (none for a dry run or a joined writer) */
    bool joined; /* writes into another process's writer (ckpt__writer_join): no commit */
    bool shared; /* other processes write tensors too: commit trusts the caller's count */
    /* Drop-behind (ckpt__writer_drop_behind): what is written leaves the
     * page cache once on disk. */
    bool drop_behind;
    pthread_mutex_t drop_lock;
    struct dropped_range {
        int fd;
        uint64_t off, n;
        uint64_t started; /* its first bytes whose write-back has started */
        uint64_t bytes;   /* of them, those written (a merged span has gaps: merge_oldest_half) */
    } drops[64]; /* written ranges, oldest first (a ring) */
    size_t drop_first, drop_count;
    uint64_t drop_bytes; /* bytes written in the ring's ranges */
    pthread_mutex_t lock; /* tensors' CRC segments */
};

#define W(o) ((ckpt_writer *)(o))
#define O(w) ((ckpt__output *)(w))

void ckpt_writer_options_init_sized(ckpt_writer_options *o, size_t size) {
    if (!o || size < sizeof o->size) return;
    ckpt_writer_options d;
    memset(&d, 0, sizeof d);
    /* A caller with a longer struct (a newer header) gets zeros in what
     * this library does not know. */
    memset(o, 0, size);
    memcpy(o, &d, size < sizeof d ? size : sizeof d);
    o->size = size;
}

/* The destination rule (formats/output.h), asked with a caller's options. */
ckpt_status ckpt_destination_resolve(const char *path, const ckpt_writer_options *options, ckpt_format *format,
                                     int *directory, ckpt_error *err) {
    ckpt_writer_options o;
    ckpt_writer_options_init(&o);
    if (options) CKPT__TAKE_OPTIONS(&o, options);
    ckpt__destination d;
    ckpt_status st = ckpt__output_destination(path, &o, &d, err);
    if (format) *format = st ? (ckpt_format)0 : d.fmt->id;
    if (directory) *directory = st ? 0 : d.directory;
    return st;
}

/* ---- creating ----------------------------------------------------------------- */

/* Whether `name`, in the directory the files go to, belongs to the
 * checkpoint being replaced: a directory's files of this format and
 * prefix; for a file, the file itself or its split parts and their index. */
static bool replaced_file(const ckpt_writer *w, const char *name) {
    if (w->directory) return w->fmt->owns(w->prefix, name);
    return !strcmp(name, ckpt__path_basename(w->path)) ||
           ((w->fmt->layouts & CKPT__LAYOUT_PARTS) && w->fmt->owns(w->prefix, name));
}

/* Lists the files of an existing checkpoint at the destination (DCP's
 * .metadata too), in name order. */
static ckpt_status existing_files(ckpt_writer *w, ckpt_error *err) {
    if (ckpt__local_kind(w->dir, NULL) == CKPT__NAME_MISSING) return CKPT_OK;
    ckpt__beneath *root = NULL;
    char **names = NULL;
    size_t count = 0;
    ckpt_status st = ckpt__beneath_open_root(w->dir, &root, err);
    if (st == CKPT_OK) st = ckpt__beneath_list(root, w->dir, true, &names, &count, err);
    ckpt__beneath_close(root);
    if (st == CKPT_OK && count && !(w->stale = ckpt__calloc(count, sizeof *w->stale))) st = ckpt__oom(err, w->path, NULL);
    for (size_t i = 0; st == CKPT_OK && i < count; i++)
        if (replaced_file(w, names[i])) w->stale[w->stale_count++] = names[i], names[i] = NULL;
    ckpt__beneath_free_names(names, count);
    return st;
}

/* The output path as the caller means it: "out/", "out//" and "./out"
 * name the directory "out"; a symlink to a directory names its target. */
static ckpt_status normalise(ckpt_writer *w, const char *path, ckpt_error *err) {
    char *p = ckpt__path_normalize(path);
    if (!p) return ckpt__oom(err, path, NULL);
    bool link;
    if (ckpt__local_kind(p, &link) == CKPT__NAME_DIR && link) {
        char *real = realpath(p, NULL);
        if (!real) {
            ckpt_status st = ckpt__fail_errno(err, errno, path, -1, "cannot resolve the symbolic link");
            free(p);
            return st;
        }
        free(p);
        p = real;
    }
    w->path = p;
    w->dir = w->directory ? ckpt__strdup(p) : ckpt__path_dirname(p);
    return w->dir ? CKPT_OK : ckpt__oom(err, path, NULL);
}

/* Locks the destination for the whole write and commit (a second writer
 * fails at once with CKPT_E_LOCKED naming this one), then finishes a
 * commit a crash cut short in the directory the files go to: the
 * destination's own, under its lock; a file's directory unless a live
 * writer of that directory holds it (its commit is its own to finish). */
static ckpt_status lock_and_recover(ckpt_writer *w, ckpt_error *err) {
    ckpt_status st = ckpt__lock_destination(w->path, w->directory, &w->dest_lock, err);
    int dir_fd = ckpt__lock_dir_fd(w->dest_lock);
    bool found;
    if (st == CKPT_OK && dir_fd >= 0)
        st = ckpt__commit_recover_at(dir_fd, w->dir, ckpt__output_owns_any, false, &found, err);
    else if (st == CKPT_OK && !w->directory)
        st = ckpt__commit_recover(w->dir, ckpt__output_owns_any, CKPT__RECOVER_UNLESS_BUSY, &found, err);
    return st;
}

/* The destination's format and shape (formats/output.h: the destination
 * rule), the files' prefix, and the options that follow from them. */
static ckpt_status choose_destination(ckpt_writer *w, const char *path, ckpt_error *err) {
    ckpt__destination d;
    ckpt_status st = ckpt__output_destination(path, &w->opt, &d, err);
    if (st) return st;
    w->fmt = d.fmt;
    w->directory = d.directory;
    if ((st = normalise(w, path, err))) return st;
    const char *name = ckpt__path_basename(w->path);
    const char *given = w->opt.prefix && *w->opt.prefix ? w->opt.prefix : NULL;
    size_t stem = strlen(name) - d.suffix_len;
    if (!w->directory && given && (strlen(given) != stem || strncmp(given, name, stem)))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1,
                          "a prefix names the files of a directory; this file names its own (its split parts are "
                          "'%.*s-NNNNN-of-NNNNN…'): drop the prefix, or give a directory",
                          (int)stem, name);
    if (!(w->prefix = ckpt__strdup(w->directory ? (given ? given : "model") : name))) return ckpt__oom(err, path, NULL);
    if (!w->directory) w->prefix[stem] = '\0';
    w->opt.prefix = NULL;
    if (w->opt.max_shard_size && (!(w->fmt->layouts & CKPT__LAYOUT_PARTS) || w->opt.exact_file))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1,
                          "%s output is %s: it takes no maximum shard size", w->fmt->name,
                          w->directory ? "a directory of its own layout" : "one file here");
    if (w->opt.gguf->split_max_tensors && w->fmt->id != CKPT_FORMAT_GGUF)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "gguf->split_max_tensors is for GGUF output");
    if (w->opt.dcp->ranks > 1 && w->fmt->id != CKPT_FORMAT_DCP)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "dcp->ranks is for DCP output");
    /* A directory of shards: the hub's default shard size. */
    if (w->directory && (w->fmt->layouts & CKPT__LAYOUT_PARTS) && !w->opt.max_shard_size)
        w->opt.max_shard_size = CKPT_DEFAULT_MAX_SHARD_SIZE;
    w->needs = w->fmt->needs ? w->fmt->needs(&w->opt) : 0;
    return CKPT_OK;
}

/* An existing checkpoint at the destination: refused unless overwrite,
 * else listed for replacement. */
static ckpt_status check_existing(ckpt_writer *w, ckpt_error *err) {
    bool link;
    ckpt__name_kind there = ckpt__local_kind(w->path, &link);
    if (!w->directory && there == CKPT__NAME_DIR)
        return ckpt__fail(err, CKPT_E_EXISTS, w->path, NULL, -1, "is a directory; give a file name");
    if (w->directory && there == CKPT__NAME_FILE)
        return ckpt__fail(err, CKPT_E_EXISTS, w->path, NULL, -1, "exists and is not a directory");
    if (!w->directory && (there != CKPT__NAME_MISSING || link) && !w->opt.overwrite)
        return ckpt__fail(err, CKPT_E_EXISTS, w->path, NULL, -1, "already exists");
    /* A file's split parts (and their index) are replaced along with it. */
    ckpt_status st = w->directory || (w->fmt->layouts & CKPT__LAYOUT_PARTS) ? existing_files(w, err) : CKPT_OK;
    if (st == CKPT_OK && w->stale_count && !w->opt.overwrite)
        st = ckpt__fail(err, CKPT_E_EXISTS, w->path, NULL, -1,
                        w->directory ? "already holds a checkpoint (%s)" : "the parts of a checkpoint of this name are "
                                                                           "there (%s)",
                        w->stale[0]);
    return st;
}

void ckpt__writer_take_format_options(ckpt_writer_options *o, ckpt__format_options *own) {
    ckpt_gguf_writer_options_init(&own->gguf);
    ckpt_dcp_writer_options_init(&own->dcp);
    if (o->gguf) CKPT__TAKE_OPTIONS(&own->gguf, o->gguf);
    if (o->dcp) CKPT__TAKE_OPTIONS(&own->dcp, o->dcp);
    own->gguf.size = sizeof own->gguf;
    own->dcp.size = sizeof own->dcp;
    o->gguf = &own->gguf;
    o->dcp = &own->dcp;
}

ckpt_status ckpt_writer_create(const char *path, const ckpt_writer_options *options, ckpt_writer **out,
                               ckpt_error *err) {
    if (out) *out = NULL;
    if (!path || !*path || !out)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "path and out are required");
    ckpt_writer *w = ckpt__calloc(1, sizeof *w);
    if (!w) return ckpt__oom(err, path, NULL);
    pthread_mutex_init(&w->lock, NULL);
    ckpt_writer_options_init(&w->opt);
    if (options) CKPT__TAKE_OPTIONS(&w->opt, options);
    w->opt.size = sizeof w->opt;
    ckpt__writer_take_format_options(&w->opt, &w->format_options);
    ckpt_status st = CKPT_OK;
    if (w->opt.metadata_json && !(w->opt.metadata_json = ckpt__arena_strndup(&w->arena, w->opt.metadata_json,
                                                                              strlen(w->opt.metadata_json))))
        st = ckpt__oom(err, path, NULL);
    if (st == CKPT_OK) st = choose_destination(w, path, err);
    /* A dry run changes nothing, not even an interrupted commit's leftovers. */
    if (st == CKPT_OK && !w->opt.dry_run) st = lock_and_recover(w, err);
    if (st == CKPT_OK) st = check_existing(w, err);
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    *out = w;
    return CKPT_OK;
}

/* ---- declaring ---------------------------------------------------------------- */

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
        return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), w->path, NULL, -1, "metadata key '%s' set twice", key);
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

ckpt_status ckpt__writer_set_metadata_value(ckpt_writer *w, const char *key, const ckpt__encoded *value, bool own,
                                            ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    ckpt__pairs *pairs = own ? &w->ckpt_meta : &w->meta;
    if (ckpt__pairs_find(pairs, key) >= 0)
        return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), w->path, NULL, -1, "metadata key '%s' set twice", key);
    const char *k = ckpt__arena_strndup(&w->arena, key, strlen(key));
    if (!k || !ckpt__pairs_push_value(pairs, k, value)) return ckpt__oom(err, w->path, NULL);
    return CKPT_OK;
}

/* The value of a pair whose text is the writer's tree, not yet written. */
static const char tree_pending[] = "";

ckpt_status ckpt__writer_set_tree(ckpt_writer *w, const char *key, const ckpt__value *tree, ckpt_error *err) {
    if (w->tree) return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), w->path, NULL, -1, "an object tree handed over twice");
    ckpt_status st = add_pair(w, &w->ckpt_meta, key, "", err);
    if (st) return st;
    w->ckpt_meta.values[w->ckpt_meta.count - 1] = tree_pending;
    w->tree = tree;
    w->tree_key = w->ckpt_meta.keys[w->ckpt_meta.count - 1];
    return CKPT_OK;
}

/* The pair holding the tree's place, when nothing replaced it. */
static const char **pending_tree(ckpt_writer *w) {
    for (size_t i = 0; w->tree && i < w->ckpt_meta.count; i++)
        if (w->ckpt_meta.keys[i] == w->tree_key) return w->ckpt_meta.values[i] == tree_pending ? &w->ckpt_meta.values[i] : NULL;
    return NULL;
}

static bool rebuild_names(ckpt_writer *w, size_t want) {
    if (!ckpt__name_table_grow(&w->names, want)) return false;
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
        return ckpt__fail(err, CKPT__D(UNKNOWN_DTYPE), w->path, name, -1, "unknown dtype %d", (int)dtype);
    if (ndim > CKPT_MAX_DIMS || (ndim && !shape))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, name, -1, "shape must have at most %d dimensions",
                          CKPT_MAX_DIMS);
    uint64_t numel, nbytes, total;
    if ((st = ckpt__tensor_size(dtype, ndim, shape, &numel, &nbytes)) == CKPT__D(SHAPE_OVERFLOW))
        return ckpt__fail(err, st, w->path, name, -1,
                          "the shape's nonzero axes hold more than 2^63-1 elements or bytes of %s (safetensors, numpy "
                          "and torch refuse it)", ckpt_dtype_name(dtype));
    if (st)
        return ckpt__fail(err, st, w->path, name, -1, "%llu elements of %s: %s", (unsigned long long)numel,
                          ckpt_dtype_name(dtype), ckpt_status_message(st));
    if (!ckpt__add_u64(w->total, nbytes, &total))
        return ckpt__fail(err, CKPT__D(SHAPE_OVERFLOW), w->path, name, -1, "total size overflows 64 bits");
    if (w->fmt->accepts && (st = w->fmt->accepts(w->path, name, dtype, ndim, shape, err))) return st;
    if (!ckpt__block_rows_ok(dtype, ndim, shape))
        return ckpt__fail(err, CKPT__D(GGUF_DIMS), w->path, name, -1, "rows of a %s tensor must be whole blocks of %u",
                          ckpt_dtype_name(dtype), ckpt_dtype_block_elems(dtype));
    if (storage && storage->id && (storage->begin > storage->end || storage->end > storage->nbytes))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, name, -1,
                          "storage area [%llu, %llu) is not inside its %llu bytes", (unsigned long long)storage->begin,
                          (unsigned long long)storage->end, (unsigned long long)storage->nbytes);
    wtensor *grown = ckpt__grow(w->tensors, w->count, &w->cap, sizeof *grown, 64);
    if (!grown) return ckpt__oom(err, w->path, NULL);
    w->tensors = grown;
    wtensor *t = &w->tensors[w->count];
    memset(t, 0, sizeof *t);
    uint64_t *dims = ckpt__arena_alloc(&w->arena, (ndim ? ndim : 1) * sizeof(uint64_t));
    t->pub.name = ckpt__arena_strndup(&w->arena, name, strlen(name));
    if (!t->pub.name || !dims) return ckpt__oom(err, w->path, NULL);
    if (ndim) memcpy(dims, shape, ndim * sizeof(uint64_t));
    if (storage && storage->id) t->storage = *storage;
    t->pub = (ckpt__out_tensor){.name = t->pub.name, .dtype = dtype, .ndim = ndim, .shape = dims, .nbytes = nbytes};
    t->kept = w->count;
    if (w->count + 1 > w->names_cap / 2 + w->names_cap / 4 && !rebuild_names(w, (w->count + 1) * 2))
        return ckpt__oom(err, w->path, NULL);
    uint32_t prev;
    if (!ckpt__name_table_insert(&w->names, &w->tensors[0].pub.name, sizeof *w->tensors, (uint32_t)w->count, &prev))
        return ckpt__fail(err, CKPT__D(DUPLICATE_NAME), w->path, name, -1, "tensor declared twice");
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

ckpt_status ckpt__out_storage_ranks(const ckpt__output *o, size_t *rank, bool contiguous_only, ckpt_error *err) {
    const ckpt_writer *w = W(o);
    size_t *order = ckpt__malloc((w->count ? w->count : 1) * sizeof *order), n = 0;
    if (!order) return ckpt__oom(err, w->path, NULL);
    for (size_t i = 0; i < w->count; i++) {
        rank[i] = i;
        const wtensor *t = &w->tensors[i];
        if (t->storage.id && t->storage.nbytes && t->pub.file != CKPT__OUT_NONE && (!contiguous_only || t->storage.contiguous))
            order[n++] = i;
    }
    qsort_r(order, n, sizeof *order, by_key, (void *)w);
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
    ckpt_status st = !areas || !group || !rank ? ckpt__oom(err, w->path, NULL) : ckpt__out_storage_ranks(O(w), rank, false, err);
    for (size_t i = 0; st == CKPT_OK && i < n; i++) {
        const wtensor *t = &w->tensors[i];
        if (t->storage.id && t->storage.nbytes) areas[count++] = (area){i, rank[i], t->storage.begin, t->storage.end, t->pub.name};
    }
    if (st == CKPT_OK) qsort(areas, count, sizeof *areas, by_area);
    for (size_t i = 0; st == CKPT_OK && i < count;) {
        size_t j = i + 1;
        while (j < count && areas[j].rank == areas[i].rank && areas[j].start < areas[j - 1].stop) j++;
        if (j - i >= 2) {
            const area *keep = NULL;
            for (size_t k = i; k < j; k++) {
                const wtensor *t = &w->tensors[areas[k].index];
                bool complete = t->storage.begin == 0 && t->pub.nbytes == t->storage.nbytes;
                if (complete && (!keep || strcmp(areas[k].name, keep->name) < 0)) keep = &areas[k];
            }
            if (!keep && !w->opt.copy_partial_views) {
                ckpt__buf names = {0};
                for (size_t k = i; k < j; k++) ckpt__buf_puts(&names, k > i ? ", " : ""), ckpt__buf_puts(&names, areas[k].name);
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
                t->pub.file = CKPT__OUT_NONE;
                t->kept = keep->index;
                w->total -= t->pub.nbytes;
                if (!ckpt__pairs_get(&w->ckpt_meta, t->pub.name) && !ckpt__pairs_push(&w->ckpt_meta, t->pub.name, keep->name))
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
    if (!w || index >= w->count || w->tensors[index].pub.file != CKPT__OUT_NONE) return NULL;
    return w->tensors[w->tensors[index].kept].pub.name;
}

/* ---- what an output format sees (formats/output.h) -------------------------- */

const ckpt_writer_options *ckpt__out_options(const ckpt__output *o) { return &W(o)->opt; }
const char *ckpt__out_prefix(const ckpt__output *o) { return W(o)->prefix; }
const char *ckpt__out_path(const ckpt__output *o) { return W(o)->path; }
bool ckpt__out_directory(const ckpt__output *o) { return W(o)->directory; }
ckpt__arena *ckpt__out_arena(ckpt__output *o) { return &W(o)->arena; }
ckpt__arena *ckpt__writer_arena(ckpt_writer *w) { return &w->arena; }
void **ckpt__out_format_state(ckpt__output *o) { return &W(o)->fmt_state; }
size_t ckpt__out_count(const ckpt__output *o) { return W(o)->count; }
ckpt__out_tensor *ckpt__out_tensor_at(ckpt__output *o, size_t i) { return &W(o)->tensors[i].pub; }
const ckpt__pairs *ckpt__out_file_metadata(const ckpt__output *o) { return &W(o)->meta; }
const ckpt__pairs *ckpt__out_checkpoint_metadata(const ckpt__output *o) {
    ckpt_writer *w = W(o);
    const char **pending = pending_tree(w);
    char *text = pending ? ckpt__value_json_text(w->tree) : NULL;
    if (text && ckpt__arena_adopt(&w->arena, text)) *pending = text; /* out of memory: the tree is left out */
    return &w->ckpt_meta;
}

ckpt_status ckpt__out_tree(ckpt__output *o, const char *key, const ckpt__value **tree, ckpt_error *err) {
    ckpt_writer *w = W(o);
    const char **pending = pending_tree(w);
    *tree = NULL;
    if (pending && !strcmp(w->tree_key, key)) {
        *tree = w->tree;
        return CKPT_OK;
    }
    const char *text = ckpt__pairs_get(&w->ckpt_meta, key);
    if (!text || text == tree_pending) return CKPT_OK;
    ckpt__value *v;
    ckpt_status st = ckpt__value_from_json(&w->arena, text, &v, err, w->path);
    if (st == CKPT_OK) *tree = v;
    return st;
}
size_t ckpt__out_file_count(const ckpt__output *o) { return W(o)->file_count; }
const char *ckpt__out_file_path(const ckpt__output *o, uint32_t f) { return W(o)->files[f].final_path; }
void ckpt__out_set_file_size(ckpt__output *o, uint32_t f, uint64_t size) { W(o)->files[f].size = size; }

void ckpt__out_same_bytes(ckpt__output *o, size_t i, size_t kept) {
    ckpt_writer *w = W(o);
    wtensor *t = &w->tensors[i];
    if (t->pub.file == CKPT__OUT_NONE) return;
    t->pub.file = CKPT__OUT_NONE;
    t->kept = kept;
    w->total -= t->pub.nbytes;
}

static ckpt_status name_file(ckpt_writer *w, wfile *f, const char *name, ckpt_error *err) {
    f->fd = -1;
    if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "'%s' is not a file name", name);
    f->name = ckpt__strdup(name);
    /* Named as the caller named the destination: "x.pt", not "./x.pt". */
    bool bare = !w->directory && !strchr(w->path, '/');
    f->final_path = !f->name ? NULL : bare ? ckpt__strdup(name) : ckpt__path_join(w->dir, name);
    return f->final_path ? CKPT_OK : ckpt__oom(err, w->path, NULL);
}

ckpt_status ckpt__out_set_files(ckpt__output *o, size_t count, const char *const *names, ckpt_error *err) {
    ckpt_writer *w = W(o);
    if (w->files || !count) return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "output files set twice or none");
    if (!(w->files = ckpt__calloc(count, sizeof *w->files))) return ckpt__oom(err, w->path, NULL);
    ckpt_status st = CKPT_OK;
    for (size_t f = 0; st == CKPT_OK && f < count; f++, w->file_count++) st = name_file(w, &w->files[f], names[f], err);
    return st;
}

ckpt_status ckpt__out_patch(ckpt__output *o, uint32_t f, uint64_t offset, const void *data, size_t n, ckpt_error *err) {
    ckpt_writer *w = W(o);
    if (w->opt.dry_run) return CKPT_OK;
    return ckpt__pwrite_full(w->files[f].fd, data, n, offset, w->files[f].final_path, err);
}

ckpt_status ckpt__out_add_side_file(ckpt__output *o, const char *name, const void *data, size_t n, ckpt_error *err) {
    ckpt_writer *w = W(o);
    wfile *s = ckpt__realloc(w->sides, (w->side_count + 1) * sizeof *s);
    if (!s) return ckpt__oom(err, w->path, NULL);
    w->sides = s;
    wfile *f = &s[w->side_count];
    memset(f, 0, sizeof *f);
    ckpt_status st = name_file(w, f, name, err);
    w->side_count++;
    f->size = n;
    if (w->opt.dry_run) return st; /* named, not written */
    if (st == CKPT_OK) st = ckpt__commit_create(w->commit, name, &f->fd, &f->tmp_path, err);
    if (st == CKPT_OK) st = ckpt__pwrite_full(f->fd, data, n, 0, f->final_path, err);
    f->size = n;
    return st;
}

/* ---- beginning ---------------------------------------------------------------- */

static bool output_name(const ckpt_writer *w, const char *name) {
    for (size_t f = 0; f < w->file_count; f++)
        if (!strcmp(w->files[f].name, name)) return true;
    return w->fmt->owns(w->prefix, name);
}

/* Names an extra file (copied along, or in a dry run only named). */
static ckpt_status add_extra(ckpt_writer *w, const char *name, ckpt_error *err) {
    char **x = ckpt__realloc(w->extras, (w->extra_count + 1) * sizeof *x);
    if (!x) return ckpt__oom(err, w->path, NULL);
    w->extras = x;
    if (!(x[w->extra_count] = ckpt__strdup(name))) return ckpt__oom(err, w->path, NULL);
    w->extra_count++;
    return CKPT_OK;
}

/* A model directory's config.json with the dtype the weights now have
 * (ckpt__writer_set_config_dtype); as it is when it names none. */
static ckpt_status copy_config(const ckpt_writer *w, int in, const char *src_path, uint64_t size, int out,
                               const char *dst_path, ckpt_error *err) {
    if (size > CKPT__HF_CONFIG_MAX_BYTES) return ckpt__copy_range(in, 0, src_path, out, 0, dst_path, size, NULL, NULL, err);
    char *text = ckpt__malloc(size ? size : 1);
    ckpt__buf edited = {0};
    ckpt_status st = text ? ckpt__pread_full(in, text, size, 0, src_path, err) : ckpt__oom(err, src_path, NULL);
    bool changed = st == CKPT_OK && ckpt__hf_config_set_dtype(text, size, w->config_dtype, &edited);
    if (changed && edited.failed) st = ckpt__oom(err, src_path, NULL);
    else if (st == CKPT_OK)
        st = changed ? ckpt__pwrite_full(out, edited.data, edited.len, 0, dst_path, err)
                     : ckpt__pwrite_full(out, text, size, 0, dst_path, err);
    free(edited.data);
    free(text);
    return st;
}

/* Copies the other files of the source's directory (config.json,
 * tokenizer files, …) along, as part of the commit.  They are the
 * checkpoint's files like its tensors' and are opened beneath its
 * directory: a link leading out of it, or a FIFO, is refused rather than
 * copied (subdirectories are left). */
static ckpt_status copy_extras(ckpt_writer *w, ckpt_error *err) {
    const char *from = w->opt.copy_files_from;
    ckpt__beneath *root = NULL;
    char **names = NULL;
    size_t count = 0;
    ckpt_status st = ckpt__beneath_open_root(from, &root, err);
    if (st == CKPT_OK) st = ckpt__beneath_list(root, from, false, &names, &count, err);
    for (size_t i = 0; st == CKPT_OK && i < count; i++) {
        if (ckpt__checkpoint_file_name(names[i]) || output_name(w, names[i])) continue;
        char *src_path = ckpt__path_join(from, names[i]);
        char *dst_path = ckpt__path_join(w->dir, names[i]); /* messages name the file, not its temporary */
        int in = -1, out = -1;
        const char *tmp;
        uint64_t size = 0;
        st = src_path && dst_path ? ckpt__beneath_open(root, src_path, true, &in, &size, err) : ckpt__oom(err, from, NULL);
        if (st == CKPT_OK && in >= 0) st = add_extra(w, names[i], err);
        if (st == CKPT_OK && in >= 0 && !w->opt.dry_run) { /* a dry run names it, no more */
            st = ckpt__commit_create(w->commit, names[i], &out, &tmp, err);
            if (st == CKPT_OK) st = w->config_dtype && !strcmp(names[i], CKPT__HF_CONFIG_NAME)
                                        ? copy_config(w, in, src_path, size, out, dst_path, err)
                                        : ckpt__copy_range(in, 0, src_path, out, 0, dst_path, size, NULL, NULL, err);
            if (st == CKPT_OK && !w->opt.no_sync && ckpt__io_fsync(out) != 0)
                st = ckpt__fail_errno(err, errno, dst_path, -1, "fsync failed");
            if (out >= 0 && close(out) != 0 && st == CKPT_OK) st = ckpt__fail_errno(err, errno, dst_path, -1, "close failed");
        }
        if (in >= 0) close(in);
        free(src_path);
        free(dst_path);
    }
    ckpt__beneath_free_names(names, count);
    ckpt__beneath_close(root);
    return st;
}

ckpt_status ckpt__writer_add_file(ckpt_writer *w, const char *name, const void *data, size_t len, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    if (!w->directory)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1,
                          "%s goes beside the tensors: the output must be a directory", name);
    struct given_file *g = ckpt__realloc(w->given, (w->given_count + 1) * sizeof *g);
    if (!g) return ckpt__oom(err, w->path, NULL);
    w->given = g;
    char *n = ckpt__arena_strndup(&w->arena, name, strlen(name));
    void *d = ckpt__arena_alloc(&w->arena, len ? len : 1);
    if (!n || !d) return ckpt__oom(err, w->path, NULL);
    memcpy(d, data, len);
    w->given[w->given_count++] = (struct given_file){n, d, len};
    return CKPT_OK;
}

/* Writes the files given with their bytes, as part of the commit. */
static ckpt_status write_given(ckpt_writer *w, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && i < w->given_count; i++) {
        const struct given_file *g = &w->given[i];
        if ((st = add_extra(w, g->name, err)) || w->opt.dry_run) continue; /* a dry run names it, no more */
        char *dst_path = ckpt__path_join(w->dir, g->name);
        int out = -1;
        const char *tmp;
        st = dst_path ? ckpt__commit_create(w->commit, g->name, &out, &tmp, err) : ckpt__oom(err, w->path, NULL);
        if (st == CKPT_OK) st = ckpt__pwrite_full(out, g->data, g->len, 0, dst_path, err);
        if (st == CKPT_OK && !w->opt.no_sync && ckpt__io_fsync(out) != 0)
            st = ckpt__fail_errno(err, errno, dst_path, -1, "fsync failed");
        if (out >= 0 && close(out) != 0 && st == CKPT_OK) st = ckpt__fail_errno(err, errno, dst_path, -1, "close failed");
        free(dst_path);
    }
    return st;
}

/* ---- metadata_json: entries that add to or replace the source's ---------------- */

/* Key `key` set to the text `value`, or to `typed`: in place where a
 * file's entry, or the checkpoint's, has the key, else a new entry of the
 * file's. */
static ckpt_status override_pair(ckpt_writer *w, const char *key, const char *value, const ckpt__encoded *typed,
                                 ckpt_error *err) {
    const char *v = typed ? NULL : ckpt__arena_strndup(&w->arena, value, strlen(value));
    if (!typed && !v) return ckpt__oom(err, w->path, NULL);
    for (int pass = 0; pass < 2; pass++) { /* in place: a file's entry, or the checkpoint's */
        ckpt__pairs *p = pass ? &w->ckpt_meta : &w->meta;
        int64_t i = ckpt__pairs_find(p, key);
        if (i < 0) continue;
        if (!typed) ckpt__pairs_set(p, (size_t)i, v);
        else if (!ckpt__pairs_set_value(p, (size_t)i, typed)) return ckpt__oom(err, w->path, NULL);
        return CKPT_OK;
    }
    const char *k = ckpt__arena_strndup(&w->arena, key, strlen(key));
    if (!k || !(typed ? ckpt__pairs_push_value(&w->meta, k, typed) : ckpt__pairs_push(&w->meta, k, v)))
        return ckpt__oom(err, w->path, NULL);
    return CKPT_OK;
}

ckpt_status ckpt__writer_override_metadata_value(ckpt_writer *w, const char *key, const ckpt__encoded *value,
                                                 ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    return st ? st : override_pair(w, key, NULL, value, err);
}

static ckpt_status apply_metadata_json(ckpt_writer *w, ckpt_error *err) {
    if (!w->opt.metadata_json) return CKPT_OK;
    char **keys, **values, why[512] = "";
    size_t n;
    ckpt_status st = ckpt__output_metadata_pairs(w->fmt, w->opt.metadata_json, &keys, &values, &n, why, sizeof why);
    if (st == CKPT_E_NO_MEMORY) return ckpt__oom(err, w->path, NULL);
    if (st) return ckpt__fail(err, st, w->path, NULL, -1, "metadata to add: %s", why);
    for (size_t i = 0; i < n; i++) {
        if (st == CKPT_OK) st = override_pair(w, keys[i], values[i], NULL, err);
        free(keys[i]);
        free(values[i]);
    }
    free(keys);
    free(values);
    return st;
}

ckpt_status ckpt_writer_begin(ckpt_writer *w, ckpt_error *err) {
    ckpt_status st = check_declaring(w, err);
    if (st) return st;
    w->state = FAILED; /* until every step below succeeds */
    for (size_t i = 0; i < w->count; i++) w->tensors[i].pub.storage = &w->tensors[i].storage; /* no more reallocs */
    if ((st = apply_metadata_json(w, err))) return st;
    if ((w->fmt->dedup && (st = dedup(w, err))) || (st = w->fmt->plan(O(w), err))) return st;
    /* One file renamed into place; its former parts, or files copied
     * along, go through the journal. */
    bool single = !w->directory && w->file_count == 1 && !w->opt.copy_files_from &&
                  (!w->stale_count || (w->stale_count == 1 && !strcmp(w->stale[0], w->files[0].name)));
    if (!w->opt.dry_run &&
        (st = ckpt__commit_begin(w->dir, w->directory, single,
                                 ckpt__lock_dir_fd(w->dest_lock), ckpt__output_owns_any, &w->commit, err)))
        return st;
    for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) {
        wfile *file = &w->files[f];
        ckpt__buf head = {0};
        st = w->fmt->layout(O(w), (uint32_t)f, &head, err);
        if (st == CKPT_OK && head.failed) st = ckpt__oom(err, w->path, NULL);
        if (w->opt.dry_run) { /* the layout only */
            free(head.data);
            continue;
        }
        if (st == CKPT_OK) st = ckpt__commit_create(w->commit, file->name, &file->fd, &file->tmp_path, err);
        /* Reserved now, so that a full disk fails before any data. */
        if (st == CKPT_OK) st = ckpt__reserve(file->fd, file->size, file->final_path, err);
        if (st == CKPT_OK) st = ckpt__pwrite_full(file->fd, head.data, head.len, 0, file->final_path, err);
        free(head.data);
    }
    if (st == CKPT_OK && w->opt.write_back && !w->opt.no_sync) ckpt__writer_drop_behind(w);
    if (st == CKPT_OK && w->opt.copy_files_from) st = copy_extras(w, err);
    if (st == CKPT_OK) st = write_given(w, err);
    if (st == CKPT_OK) w->state = WRITING;
    return st;
}

size_t ckpt_writer_file_count(const ckpt_writer *w) { return w ? w->file_count : 0; }

size_t ckpt_writer_published_count(const ckpt_writer *w) {
    return w && w->state == COMMITTED && !w->opt.dry_run && !w->joined ? w->file_count + w->side_count + w->extra_count : 0;
}

const char *ckpt_writer_published_path(const ckpt_writer *w, size_t i) {
    if (i >= ckpt_writer_published_count(w)) return NULL;
    if (i < w->file_count) return w->files[i].final_path;
    if ((i -= w->file_count) < w->side_count) return w->sides[i].final_path;
    i -= w->side_count;
    if (!w->extra_paths) return NULL;
    return w->extra_paths[i];
}
const char *ckpt_writer_file_path(const ckpt_writer *w, size_t i) {
    return w && i < w->file_count ? w->files[i].final_path : NULL;
}
size_t ckpt_writer_tensor_file(const ckpt_writer *w, size_t index) {
    if (!w || index >= w->count) return 0;
    return w->tensors[index].pub.file == CKPT__OUT_NONE ? SIZE_MAX : w->tensors[index].pub.file;
}
uint64_t ckpt_writer_total_bytes(const ckpt_writer *w) { return w ? w->total : 0; }
const char *ckpt_writer_path(const ckpt_writer *w) { return w ? w->path : NULL; }
ckpt_format ckpt_writer_format(const ckpt_writer *w) { return w ? w->fmt->id : (ckpt_format)0; }
int ckpt_writer_is_directory(const ckpt_writer *w) { return w && w->directory; }
const char *ckpt_writer_open_path(const ckpt_writer *w) { return w ? w->open_path : NULL; }
uint64_t ckpt_writer_file_size(const ckpt_writer *w, size_t i) { return w && i < w->file_count ? w->files[i].size : 0; }

size_t ckpt_writer_name_count(const ckpt_writer *w, ckpt_writer_names which) {
    if (!w || which < CKPT_WRITER_DATA_FILES || which > CKPT_WRITER_REPLACED_FILES) return 0;
    const size_t counts[] = {w->file_count, w->side_count, w->extra_count, w->stale_count};
    return counts[which];
}

const char *ckpt_writer_name_at(const ckpt_writer *w, ckpt_writer_names which, size_t i) {
    if (i >= ckpt_writer_name_count(w, which)) return NULL;
    return which == CKPT_WRITER_DATA_FILES    ? w->files[i].name
           : which == CKPT_WRITER_SIDE_FILES  ? w->sides[i].name
           : which == CKPT_WRITER_COPIED_FILES ? w->extras[i]
                                               : w->stale[i];
}

size_t ckpt_writer_tensor_count(const ckpt_writer *w) { return w ? w->count : 0; }

int ckpt_writer_tensor_info_at(const ckpt_writer *w, size_t index, ckpt_writer_tensor_info *info) {
    if (!w || !info || index >= w->count) return 0;
    const ckpt__out_tensor *t = &w->tensors[index].pub;
    bool kept = t->file == CKPT__OUT_NONE;
    ckpt_writer_tensor_info all = {.size = info->size, .name = t->name, .dtype = t->dtype, .ndim = t->ndim,
                                   .shape = t->shape, .nbytes = t->nbytes, .file = kept ? SIZE_MAX : t->file,
                                   .kept = kept ? w->tensors[w->tensors[index].kept].pub.name : NULL,
                                   .offset = t->offset, .part_count = t->part_count};
    memcpy(info, &all, info->size < sizeof all ? info->size : sizeof all);
    return 1;
}

int ckpt_writer_tensor_part(const ckpt_writer *w, size_t index, uint32_t k, size_t *file, uint64_t *begin,
                            uint64_t *nbytes, uint64_t *offset) {
    if (!w || index >= w->count || k >= w->tensors[index].pub.part_count) return 0;
    const ckpt__out_part *part = &w->tensors[index].pub.parts[k];
    if (file) *file = part->file;
    if (begin) *begin = part->begin;
    if (nbytes) *nbytes = part->nbytes;
    if (offset) *offset = part->offset;
    return 1;
}

/* ---- data --------------------------------------------------------------------- */

static ckpt_status check_append(ckpt_writer *w, size_t index, uint64_t at, uint64_t n, ckpt_error *err) {
    if (!w) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (w->state != WRITING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1,
                          w->state == DECLARING ? "data must come after ckpt_writer_begin"
                                                : "the writer is committed or has failed");
    if (index >= w->count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "no tensor with writer index %zu", index);
    if (w->opt.dry_run) return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "a dry run writes no data");
    wtensor *t = &w->tensors[index];
    if (at > t->pub.nbytes || n > t->pub.nbytes - at)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE,
                          t->pub.file == CKPT__OUT_NONE ? w->path : w->files[t->pub.file].final_path, t->pub.name, -1,
                          "bytes [%llu, %llu) are outside the declared %llu", (unsigned long long)at,
                          (unsigned long long)(at + n), (unsigned long long)t->pub.nbytes);
    return CKPT_OK;
}

/* Bytes for a tensor deduplicated away are accepted and dropped, so that
 * callers may stream every tensor they declared. */
static bool dropped(const ckpt_writer *w, size_t index) { return w->tensors[index].pub.file == CKPT__OUT_NONE; }

/* Drop-behind: every written range joins a queue and starts its
 * write-back; once DROP_WINDOW bytes wait in it, the oldest ranges — whose
 * write-back has had time to finish — are waited for and dropped from the
 * page cache.  The cache holds about DROP_WINDOW of output, and writing
 * rarely waits.  Small writes that continue the newest range (after at
 * most DROP_GAP bytes of padding) extend it, up to DROP_JOIN bytes, and its
 * write-back starts once DROP_START bytes of it wait: many small tensors
 * would otherwise each become a small write to the disk, and then a small
 * wait. */
enum { DROP_WINDOW = 32 << 20, DROP_JOIN = 8 << 20, DROP_START = 1 << 20, DROP_GAP = 64 << 10 };

const char *ckpt__writer_folder(const ckpt_writer *w) { return w->dir; }

void ckpt__writer_drop_behind(ckpt_writer *w) {
    if (w->drop_behind) return;
    pthread_mutex_init(&w->drop_lock, NULL);
    w->drop_behind = true;
}

static void drop_range(int fd, uint64_t off, uint64_t n) {
    sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
}

/* The ring fills only with small ranges that do not follow each other —
 * small tensors written in another order than the file's (a safetensors
 * file orders them by name).  Waiting for them one at a time made many
 * small waits (30,000 tensors of 1 KiB: 1 ms each), so the oldest half
 * becomes one entry, the span of the file its ranges cover (those of the
 * oldest one's file), which holds their bytes; it is waited for once the
 * window is full, as the others.  Called with drop_lock held; returns the
 * span, whose write-back the caller starts after unlocking. */
static struct dropped_range merge_oldest_half(ckpt_writer *w) {
    size_t cap = sizeof w->drops / sizeof w->drops[0], kept = 1, half = w->drop_count / 2;
    struct dropped_range span = w->drops[w->drop_first];
    uint64_t end = span.off + span.n;
    for (size_t i = 1; i < w->drop_count; i++) {
        struct dropped_range r = w->drops[(w->drop_first + i) % cap];
        if (i < half && r.fd == span.fd) {
            if (r.off < span.off) span.off = r.off;
            if (r.off + r.n > end) end = r.off + r.n;
            span.bytes += r.bytes;
        } else {
            w->drops[(w->drop_first + kept++) % cap] = r;
        }
    }
    span.n = span.started = end - span.off;
    w->drops[w->drop_first] = span;
    w->drop_count = kept;
    return span;
}

static void wrote(ckpt_writer *w, const wfile *f, uint64_t off, uint64_t n) {
    if (!w->drop_behind || !n) return;
    size_t cap = sizeof w->drops / sizeof w->drops[0];
    pthread_mutex_lock(&w->drop_lock);
    struct dropped_range *last = w->drop_count ? &w->drops[(w->drop_first + w->drop_count - 1) % cap] : NULL;
    uint64_t end = last ? last->off + last->n : 0;
    if (last && last->fd == f->fd && off >= end && off - end <= DROP_GAP && last->n < DROP_JOIN) {
        n += off - end; /* the padding between tensors goes along */
        last->n += n, last->bytes += n;
    } else {
        if (w->drop_count == cap) { /* full: small ranges out of the file's order (see merge_oldest_half) */
            struct dropped_range span = merge_oldest_half(w);
            pthread_mutex_unlock(&w->drop_lock);
            sync_file_range(span.fd, (off_t)span.off, (off_t)span.n, SYNC_FILE_RANGE_WRITE);
            pthread_mutex_lock(&w->drop_lock);
        }
        if (w->drop_count == cap) { /* another thread filled it meanwhile: this range starts and waits alone */
            pthread_mutex_unlock(&w->drop_lock);
            drop_range(f->fd, off, n);
            return;
        }
        last = &w->drops[(w->drop_first + w->drop_count++) % cap];
        *last = (struct dropped_range){f->fd, off, n, 0, n};
    }
    w->drop_bytes += n;
    if (last->n - last->started >= DROP_START) {
        uint64_t from = last->off + last->started, len = last->n - last->started;
        last->started = last->n;
        pthread_mutex_unlock(&w->drop_lock); /* starting write-back may wait for the device's queue */
        sync_file_range(f->fd, (off_t)from, (off_t)len, SYNC_FILE_RANGE_WRITE);
        pthread_mutex_lock(&w->drop_lock);
    }
    /* The oldest ranges, never the newest (the one a small write may still
     * extend). */
    while (w->drop_bytes > DROP_WINDOW && w->drop_count > 1) {
        struct dropped_range r = w->drops[w->drop_first];
        w->drop_first = (w->drop_first + 1) % cap, w->drop_count--, w->drop_bytes -= r.bytes;
        pthread_mutex_unlock(&w->drop_lock);
        drop_range(r.fd, r.off, r.n);
        pthread_mutex_lock(&w->drop_lock);
    }
    pthread_mutex_unlock(&w->drop_lock);
}

/* Before a file's descriptor closes: the queue forgets it, and what is
 * left of it leaves the page cache. */
static void drop_file(ckpt_writer *w, int fd) {
    if (!w->drop_behind || fd < 0) return;
    size_t cap = sizeof w->drops / sizeof w->drops[0], kept = 0;
    pthread_mutex_lock(&w->drop_lock);
    for (size_t i = 0; i < w->drop_count; i++) {
        struct dropped_range r = w->drops[(w->drop_first + i) % cap];
        if (r.fd == fd) w->drop_bytes -= r.bytes;
        else w->drops[(w->drop_first + kept++) % cap] = r;
    }
    w->drop_count = kept;
    pthread_mutex_unlock(&w->drop_lock);
    sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

static ckpt__out_part part_at(const wtensor *t, uint64_t at);

static ckpt_status add_segment(ckpt_writer *w, wtensor *t, uint64_t at, const void *data, size_t n, ckpt_error *err) {
    uint32_t crc = (uint32_t)crc32_z(0, data, n);
    ckpt_status st = CKPT_OK;
    pthread_mutex_lock(&w->lock);
    /* Bytes that continue one of the last few ranges (a box written in
     * pieces, a few threads at once: src/engine.c, convert_out) extend it,
     * so that the list keeps about one range per box, not one per piece. */
    bool part_edge = t->pub.part_count && part_at(t, at).begin == at; /* each part has its own CRC */
    for (size_t k = t->segment_count; !part_edge && k-- > 0 && t->segment_count - k <= SEGMENT_JOIN;)
        if (t->segments[k].at + t->segments[k].n == at) {
            t->segments[k].crc = (uint32_t)crc32_combine64(t->segments[k].crc, crc, (z_off64_t)n);
            t->segments[k].n += n;
            pthread_mutex_unlock(&w->lock);
            return CKPT_OK;
        }
    segment *g = ckpt__grow(t->segments, t->segment_count, &t->segment_cap, sizeof *g, 8);
    if (g) t->segments = g, t->segments[t->segment_count++] = (segment){at, n, crc};
    else st = ckpt__oom(err, w->path, t->pub.name);
    pthread_mutex_unlock(&w->lock);
    return st;
}

/* Rank 0 created the file: open it, never create.  A network file system
 * may show another client's new file a moment late (NFS attribute caches):
 * a missing file is tried again for a few seconds. */
static ckpt_status open_created(wfile *file, int *fd, ckpt_error *err) {
    for (int tries = 0; tries < 40; tries++) {
        *fd = ckpt__io_open(file->tmp_path, O_WRONLY | O_CLOEXEC);
        if (*fd >= 0 || (errno != ENOENT && errno != ESTALE)) break;
        struct timespec pause = {0, 125000000L};
        nanosleep(&pause, NULL);
    }
    if (*fd < 0)
        return ckpt__fail_errno(err, errno, file->final_path, -1,
                                "cannot open the file rank 0 created for it, %s (is the output directory on a file "
                                "system every rank shares?)",
                                file->tmp_path);
    return CKPT_OK;
}

/* A joined rank opens an output file when it first writes to it, so that
 * it holds only the files it writes (1,000 ranks × 2,000 shards would
 * exceed `ulimit -n` if each opened them all).  Threads race to the first
 * write: one descriptor wins, the others are closed. */
static ckpt_status joined_fd(ckpt_writer *w, wfile *f, ckpt_error *err) {
    if (!w->joined || __atomic_load_n(&f->fd, __ATOMIC_ACQUIRE) >= 0) return CKPT_OK;
    int fd, none = -1;
    ckpt_status st = open_created(f, &fd, err);
    if (st == CKPT_E_NOT_FOUND) /* the join saw the files: rank 0 has removed them since */
        return ckpt__fail(err, CKPT__D(PEER_FAILED), f->final_path, NULL, -1,
                          "the file rank 0 created for it, %s, is gone: rank 0 abandoned the save (it failed or "
                          "was stopped)",
                          f->tmp_path);
    if (st) return st;
    if (!__atomic_compare_exchange_n(&f->fd, &none, fd, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) close(fd);
    return CKPT_OK;
}

/* The file (opened in this process) and offset of the tensor's byte `at`,
 * and how many of the `want` bytes from there go in that place (up to a
 * part's end, or the tensor's). */
/* The part of tensor t that holds its byte `at`. */
static ckpt__out_part part_at(const wtensor *t, uint64_t at) {
    ckpt__out_part p = {.file = t->pub.file, .offset = t->pub.offset, .nbytes = t->pub.nbytes};
    if (t->pub.part_count) {
        size_t lo = 0, hi = t->pub.part_count; /* the last part that begins at or before `at` */
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (t->pub.parts[mid].begin <= at) lo = mid;
            else hi = mid;
        }
        p = t->pub.parts[lo];
    }
    return p;
}

uint64_t ckpt__writer_file_offset(const ckpt_writer *w, size_t index, uint64_t at) {
    if (!w || index >= w->count || dropped(w, index)) return 0;
    ckpt__out_part p = part_at(&w->tensors[index], at);
    return p.offset + (at - p.begin);
}

static ckpt_status place_of(ckpt_writer *w, const wtensor *t, uint64_t at, uint64_t want, wfile **file,
                            uint64_t *offset, uint64_t *len, ckpt_error *err) {
    ckpt__out_part p = part_at(t, at);
    uint64_t room = p.begin + p.nbytes - at;
    *file = &w->files[p.file], *offset = p.offset + (at - p.begin), *len = want < room ? want : room;
    ckpt_status st = joined_fd(w, *file, err);
    if (st == CKPT_OK && !__atomic_load_n(&(*file)->written, __ATOMIC_RELAXED))
        __atomic_store_n(&(*file)->written, true, __ATOMIC_RELAXED);
    return st ? ckpt__error_in_tensor(err, st, t->pub.name) : CKPT_OK;
}

/* The tensor's next bytes into its digest, and its chunks' (with checksums). */
static ckpt_status hash_in_order(ckpt_writer *w, wtensor *t, const void *data, size_t nbytes, ckpt_error *err) {
    if (!t->hash && (!(t->hash = XXH3_createState()) || XXH3_64bits_reset(t->hash) == XXH_ERROR))
        return ckpt__oom(err, w->path, NULL);
    XXH3_64bits_update(t->hash, data, nbytes);
    if (!t->pub.chunk_count) return CKPT_OK;
    ckpt_status st = CKPT_OK;
    if (!t->chunks.state)
        st = ckpt__chunk_hash_init(&t->chunks, t->pub.nbytes, t->pub.chunk_bytes, t->pub.offset, t->pub.chunk_xxh3,
                                   w->path, err);
    if (st == CKPT_OK) ckpt__chunk_hash_update(&t->chunks, data, nbytes);
    return st;
}

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
    if ((w->needs & CKPT__OUT_XXH3) && at != __atomic_load_n(&t->written, __ATOMIC_ACQUIRE))
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->files[t->pub.file].final_path, t->pub.name, -1,
                          "with checksums a tensor's bytes must arrive in order (byte %llu came after %llu)",
                          (unsigned long long)at, (unsigned long long)t->written);
    const unsigned char *src = data;
    for (uint64_t done = 0; done < nbytes;) {
        wfile *f;
        uint64_t off, n;
        if ((st = place_of(w, t, at + done, nbytes - done, &f, &off, &n, err))) return st;
        st = ckpt__pwrite_full(f->fd, src + done, n, off, f->final_path, err);
        if (st) return ckpt__error_in_tensor(err, st, t->pub.name);
        if ((w->needs & CKPT__OUT_CRC32) && (st = add_segment(w, t, at + done, src + done, (size_t)n, err))) return st;
        wrote(w, f, off, n);
        done += n;
    }
    if ((w->needs & CKPT__OUT_XXH3) && !t->digest_given && (st = hash_in_order(w, t, data, nbytes, err))) return st;
    __atomic_add_fetch(&t->written, nbytes, __ATOMIC_ACQ_REL);
    return CKPT_OK;
}

ckpt_status ckpt_writer_write(ckpt_writer *w, size_t index, const void *data, size_t nbytes, ckpt_error *err) {
    if (!w || index >= w->count) return check_append(w, index, 0, nbytes, err);
    return ckpt__writer_pwrite(w, index, w->tensors[index].written, data, nbytes, err);
}

/* Bytes the CRC-32 needs to see, or a source the kernel cannot copy from:
 * through a bounded buffer. */
static ckpt_status copy_through(ckpt_writer *w, size_t index, uint64_t at, ckpt__source *src, uint64_t src_offset,
                                uint64_t n, ckpt_error *err) {
    enum { CHUNK = 8 << 20 };
    size_t cap = n < CHUNK ? (size_t)n : CHUNK;
    unsigned char *buf = ckpt__malloc(cap ? cap : 1);
    if (!buf) return ckpt__oom(err, w->path, NULL);
    ckpt_status st = CKPT_OK;
    for (uint64_t done = 0; done < n && st == CKPT_OK;) {
        size_t len = n - done < cap ? (size_t)(n - done) : cap;
        st = ckpt__source_read(src, buf, len, src_offset + done, err);
        if (st == CKPT_OK) st = ckpt__writer_pwrite(w, index, at + done, buf, len, err);
        done += len;
    }
    free(buf);
    return st;
}

ckpt_status ckpt__writer_pcopy(ckpt_writer *w, size_t index, uint64_t at, ckpt__source *src, uint64_t src_offset,
                               uint64_t n, ckpt_error *err) {
    ckpt_status st = check_append(w, index, at, n, err);
    if (st) return st;
    wtensor *t = &w->tensors[index];
    if (dropped(w, index)) {
        __atomic_add_fetch(&t->written, n, __ATOMIC_ACQ_REL);
        return CKPT_OK;
    }
    if ((w->needs & CKPT__OUT_XXH3) && !t->digest_given)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->files[t->pub.file].final_path, t->pub.name, -1,
                          "a kernel copy cannot feed the checksums");
    if ((w->needs & CKPT__OUT_CRC32) || src->fd < 0) return copy_through(w, index, at, src, src_offset, n, err);
    for (uint64_t done = 0; done < n;) {
        wfile *f;
        uint64_t off, len;
        if ((st = place_of(w, t, at + done, n - done, &f, &off, &len, err))) return st;
        /* Whole blocks shared first: they leave nothing for the write-back
         * (drop-behind) to wait for, and the bytes around them are copied. */
        uint64_t shared_begin, shared_end;
        ckpt__clone_blocks(src->fd, src_offset + done, f->fd, off, len, &shared_begin, &shared_end);
        const uint64_t part[2][2] = {{0, shared_begin}, {shared_end > shared_begin ? shared_end : 0, len}};
        for (int k = 0; k < 2 && st == CKPT_OK; k++) {
            uint64_t from = part[k][0], to = part[k][1];
            if (from >= to) continue;
            st = ckpt__copy_range(src->fd, src_offset + done + from, src->name, f->fd, off + from, f->final_path,
                                  to - from, NULL, NULL, err);
            if (st == CKPT_OK) wrote(w, f, off + from, to - from);
        }
        if (st) return ckpt__error_in_tensor(err, st, t->pub.name);
        done += len;
    }
    __atomic_add_fetch(&t->written, n, __ATOMIC_ACQ_REL);
    return CKPT_OK;
}

bool ckpt__writer_needs_order(const ckpt_writer *w) { return w && (w->needs & CKPT__OUT_XXH3); }

ckpt_status ckpt__writer_give_digest(ckpt_writer *w, size_t index, uint64_t nbytes, uint64_t xxh3,
                                     const uint64_t *chunks, size_t count, ckpt_error *err) {
    ckpt_status st = check_append(w, index, 0, 0, err);
    if (st) return st;
    wtensor *t = &w->tensors[index];
    const char *path = dropped(w, index) ? w->path : w->files[t->pub.file].final_path;
    if (t->pub.nbytes != nbytes)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, t->pub.name, -1,
                          "it is declared with %llu bytes, and the copy has %llu", (unsigned long long)t->pub.nbytes,
                          (unsigned long long)nbytes);
    if (__atomic_load_n(&t->written, __ATOMIC_ACQUIRE) != 0 || t->hash)
        return ckpt__fail(err, CKPT_E_BAD_STATE, path, t->pub.name, -1,
                          "its digests must be given before any of its bytes");
    if (count != t->pub.chunk_count || (count && !chunks))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, t->pub.name, -1,
                          "it has %u chunk digests (ckpt_writer_tensor_chunks), and %zu were given",
                          (unsigned)t->pub.chunk_count, chunks ? count : 0);
    t->digest_given = true;
    t->pub.xxh3 = xxh3;
    if (count) memcpy(t->pub.chunk_xxh3, chunks, count * sizeof *chunks);
    return CKPT_OK;
}

ckpt_status ckpt_writer_give_digests(ckpt_writer *w, size_t index, uint64_t xxh3, const uint64_t *chunks,
                                     size_t count, ckpt_error *err) {
    ckpt_status st = check_append(w, index, 0, 0, err);
    if (st) return st;
    return ckpt__writer_give_digest(w, index, w->tensors[index].pub.nbytes, xxh3, chunks, count, err);
}

ckpt_status ckpt_writer_tensor_chunks(const ckpt_writer *w, size_t index, uint64_t *chunk_bytes, uint64_t *phase,
                                      size_t *count, ckpt_error *err) {
    if (!w || !chunk_bytes || !phase || !count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "a writer, chunk_bytes, phase and count are required");
    if (w->state == DECLARING) return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "chunks are laid out by ckpt_writer_begin");
    if (index >= w->count)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1, "no tensor with writer index %zu", index);
    const ckpt__out_tensor *t = &w->tensors[index].pub;
    *count = t->chunk_count;
    *chunk_bytes = t->chunk_count ? t->chunk_bytes : 0;
    *phase = t->chunk_count ? t->offset % t->chunk_bytes : 0;
    return CKPT_OK;
}

uint64_t ckpt__writer_tensor_nbytes(const ckpt_writer *w, size_t index) { return w->tensors[index].pub.nbytes; }

uint64_t ckpt__writer_tensor_written(const ckpt_writer *w, size_t index) {
    return __atomic_load_n(&w->tensors[index].written, __ATOMIC_ACQUIRE);
}

void ckpt__writer_set_config_dtype(ckpt_writer *w, const char *dtype) { w->config_dtype = dtype; }

bool ckpt__writer_takes_metadata_of(const ckpt_writer *w, ckpt_format source) {
    return !w->fmt->own_metadata_only || source == w->fmt->id || w->opt.source_metadata;
}

static int by_at(const void *a, const void *b) {
    uint64_t x = ((const segment *)a)->at, y = ((const segment *)b)->at;
    return x < y ? -1 : x > y;
}

/* A tensor's CRC-32 (each part's, when it has parts) from its segments,
 * which must tile its bytes exactly. */
static ckpt_status join_crcs(ckpt_writer *w, wtensor *t, ckpt_error *err) {
    if (t->segment_count) qsort(t->segments, t->segment_count, sizeof *t->segments, by_at);
    uint32_t parts = t->pub.part_count ? t->pub.part_count : 1;
    size_t k = 0;
    uint64_t at = 0;
    for (uint32_t p = 0; p < parts; p++) {
        uint64_t end = t->pub.part_count ? t->pub.parts[p].begin + t->pub.parts[p].nbytes : t->pub.nbytes;
        uLong crc = crc32_z(0, Z_NULL, 0);
        for (; k < t->segment_count && t->segments[k].at == at && at + t->segments[k].n <= end; k++) {
            crc = crc32_combine64(crc, t->segments[k].crc, (z_off64_t)t->segments[k].n);
            at += t->segments[k].n;
        }
        if (at != end)
            return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, t->pub.name, -1,
                              "its bytes from %llu arrived twice, or overlapping", (unsigned long long)at);
        if (t->pub.part_count) t->pub.parts[p].crc32 = (uint32_t)crc;
        else t->pub.crc32 = (uint32_t)crc;
    }
    return CKPT_OK;
}

/* ---- committing --------------------------------------------------------------- */

static ckpt_status finish_file(ckpt_writer *w, wfile *f, ckpt_error *err) {
    if (ckpt__io_ftruncate(f->fd, (off_t)f->size) != 0)
        return ckpt__fail_errno(err, errno, f->final_path, -1, "cannot set the file size");
    if (!w->opt.no_sync && ckpt__io_fsync(f->fd) != 0) return ckpt__fail_errno(err, errno, f->final_path, -1, "fsync failed");
    drop_file(w, f->fd);
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) return ckpt__fail_errno(err, errno, f->final_path, -1, "close failed");
    return CKPT_OK;
}

static bool in_files(const wfile *files, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(files[i].name, name)) return true;
    return false;
}

/* What a reader opens to read it all: the directory, an index, the
 * first of split parts, or the file (ckpt_writer_open_path). */
static ckpt_status name_open_path(ckpt_writer *w, ckpt_error *err) {
    char *index = !w->directory && w->side_count ? ckpt__path_join(w->dir, w->sides[0].name) : NULL;
    const char *open = w->directory ? w->path : index ? index : w->file_count ? w->files[0].final_path : w->path;
    w->open_path = ckpt__arena_strndup(&w->arena, open, strlen(open));
    free(index);
    return w->open_path ? CKPT_OK : ckpt__oom(err, w->path, NULL);
}

ckpt_status ckpt_writer_commit(ckpt_writer *w, ckpt_error *err) {
    if (!w) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, NULL, NULL, -1, "writer is NULL");
    if (w->state != WRITING)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "commit needs a begun, uncommitted writer");
    if (w->joined)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1,
                          "a joined writer is committed by the process that created it");
    w->state = FAILED;
    if (w->opt.dry_run) { /* names the side files; publishes nothing */
        ckpt_status st = w->fmt->finish ? w->fmt->finish(O(w), err) : CKPT_OK;
        if (st == CKPT_OK) st = name_open_path(w, err);
        if (st == CKPT_OK) w->state = COMMITTED;
        return st;
    }
    for (size_t i = 0; i < w->count; i++) {
        wtensor *t = &w->tensors[i];
        if (t->written != t->pub.nbytes && !dropped(w, i) && !w->shared)
            return ckpt__fail(err, CKPT_E_BAD_STATE, w->files[t->pub.file].final_path, t->pub.name, -1,
                              "only %llu of its %llu bytes were written", (unsigned long long)t->written,
                              (unsigned long long)t->pub.nbytes);
        if (t->digest_given || !(w->needs & CKPT__OUT_XXH3)) continue;
        t->pub.xxh3 = t->hash ? XXH3_64bits_digest(t->hash) : XXH3_64bits(NULL, 0);
        if (t->pub.chunk_count && t->chunks.state) ckpt__chunk_hash_final(&t->chunks);
        else if (t->pub.chunk_count) /* no byte came (a dry run, a deduplicated tensor): what the empty tensor has */
            for (uint32_t k = 0; k < t->pub.chunk_count; k++) t->pub.chunk_xxh3[k] = XXH3_64bits(NULL, 0);
    }
    ckpt_status st = CKPT_OK;
    for (size_t i = 0; st == CKPT_OK && (w->needs & CKPT__OUT_CRC32) && i < w->count; i++)
        if (!dropped(w, i)) st = join_crcs(w, &w->tensors[i], err);
    if (st == CKPT_OK && w->fmt->finish) st = w->fmt->finish(O(w), err);
    if (st == CKPT_OK) st = name_open_path(w, err);
    for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) st = finish_file(w, &w->files[f], err);
    for (size_t f = 0; st == CKPT_OK && f < w->side_count; f++) st = finish_file(w, &w->sides[f], err);
    /* Data files, the files copied along, then side files (an index) last;
     * a replaced checkpoint's files that no new data file replaces go
     * first (its index among them). */
    size_t n = w->file_count + w->extra_count + w->side_count, k = 0, r = 0;
    const char **order = ckpt__malloc((n ? n : 1) * sizeof *order);
    const char **remove = ckpt__malloc((w->stale_count ? w->stale_count : 1) * sizeof *remove);
    if (st == CKPT_OK && (!order || !remove)) st = ckpt__oom(err, w->path, NULL);
    for (size_t f = 0; st == CKPT_OK && f < w->file_count; f++) order[k++] = w->files[f].name;
    for (size_t f = 0; st == CKPT_OK && f < w->extra_count; f++) order[k++] = w->extras[f];
    for (size_t f = 0; st == CKPT_OK && f < w->side_count; f++) order[k++] = w->sides[f].name;
    for (size_t i = 0; st == CKPT_OK && i < w->stale_count; i++)
        if (!in_files(w->files, w->file_count, w->stale[i])) remove[r++] = w->stale[i];
    if (st == CKPT_OK) st = ckpt__commit_publish(w->commit, order, k, remove, r, w->opt.no_sync != 0, err);
    free(order);
    free(remove);
    if (st) return st; /* ckpt_writer_free rolls back what was not decided */
    w->state = COMMITTED;
    /* The copied files' paths, for ckpt_writer_published_path (best
     * effort: the commit is done). */
    if (w->extra_count && (w->extra_paths = ckpt__calloc(w->extra_count, sizeof *w->extra_paths)))
        for (size_t i = 0; i < w->extra_count; i++) w->extra_paths[i] = ckpt__path_join(w->dir, w->extras[i]);
    return CKPT_OK;
}

void ckpt_writer_free(ckpt_writer *w) {
    if (!w) return;
    if (w->drop_behind) pthread_mutex_destroy(&w->drop_lock);
    for (size_t f = 0; f < w->file_count; f++) {
        if (w->files[f].fd >= 0) close(w->files[f].fd);
        free(w->files[f].name);
        free(w->files[f].final_path);
    }
    for (size_t f = 0; f < w->side_count; f++) {
        if (w->sides[f].fd >= 0) close(w->sides[f].fd);
        free(w->sides[f].name);
        free(w->sides[f].final_path);
    }
    ckpt__commit_free(w->commit); /* an unpublished commit removes its temporaries */
    ckpt__lock_release(w->dest_lock);
    for (size_t i = 0; i < w->count; i++) {
        XXH3_freeState(w->tensors[i].hash);
        ckpt__chunk_hash_free(&w->tensors[i].chunks);
        free(w->tensors[i].segments);
    }
    pthread_mutex_destroy(&w->lock);
    for (size_t i = 0; i < w->stale_count; i++) free(w->stale[i]);
    for (size_t i = 0; i < w->extra_count; i++) free(w->extras[i]), free(w->extra_paths ? w->extra_paths[i] : NULL);
    free(w->extras);
    free(w->given);
    free(w->extra_paths);
    free(w->stale);
    free(w->files);
    free(w->sides);
    free(w->tensors);
    ckpt__pairs_free(&w->meta);
    ckpt__pairs_free(&w->ckpt_meta);
    ckpt__name_table_free(&w->names);
    ckpt__arena_free(&w->arena);
    free(w->path);
    free(w->dir);
    free(w->prefix);
    free(w);
}

/* ---- joining: other processes writing into this writer's files ------------- */

#define JOIN_MAGIC "CKPTJN01"

ckpt_status ckpt__writer_join_encode(const ckpt_writer *w, ckpt__buf *b, ckpt_error *err) {
    if (w->state != WRITING || w->joined)
        return ckpt__fail(err, CKPT_E_BAD_STATE, w->path, NULL, -1, "only a begun writer can be joined");
    ckpt__buf_append(b, JOIN_MAGIC, 8);
    ckpt__put_str(b, w->path);
    ckpt__put_str(b, w->dir);
    ckpt__put_u32(b, (uint32_t)w->file_count);
    for (size_t f = 0; f < w->file_count; f++) {
        ckpt__put_str(b, w->files[f].name);
        ckpt__put_str(b, w->files[f].tmp_path);
        ckpt__put_u64(b, w->files[f].size);
    }
    ckpt__put_u32(b, (uint32_t)w->count);
    for (size_t i = 0; i < w->count; i++) {
        const wtensor *t = &w->tensors[i];
        ckpt__put_str(b, t->pub.name);
        CKPT__PUT_FIELDS(b, {4, (uint32_t)t->pub.dtype}, {8, t->pub.nbytes}, {4, t->pub.file}, {8, t->pub.offset});
    }
    ckpt__buf_append(b, "END!", 4);
    return b->failed ? ckpt__oom(err, w->path, NULL) : CKPT_OK;
}

static ckpt_status join_bad(ckpt__rd *r, ckpt_error *err, const char *what) {
    return ckpt__fail(err, CKPT__D(COMM_DATA), NULL, NULL, (int64_t)ckpt__rd_error_at(r),
                      "the writer layout received from rank 0 is malformed (%s, at byte %llu of %zu)", what,
                      (unsigned long long)ckpt__rd_error_at(r), r->n);
}

static ckpt_status join_decode(ckpt_writer *w, const void *data, size_t n, ckpt_error *err) {
    ckpt__rd r = ckpt__rd_over(data, n, 0);
    bool oom = false;
    if (!ckpt__rd_expect(&r, JOIN_MAGIC, 8)) return join_bad(&r, err, "not a writer layout");
    const char *path = ckpt__rd_str(&r, &w->arena, NULL, &oom);
    const char *dir = ckpt__rd_str(&r, &w->arena, NULL, &oom);
    uint32_t files = ckpt__rd_count(&r, 4 + 4 + 8);
    if (oom) return ckpt__oom(err, NULL, "a writer layout");
    if (r.bad || !path || !dir || !files) return join_bad(&r, err, "header");
    if (!(w->path = ckpt__strdup(path)) || !(w->dir = ckpt__strdup(dir))) return ckpt__oom(err, path, NULL);
    if (!(w->files = ckpt__calloc(files, sizeof *w->files))) return ckpt__oom(err, path, NULL);
    for (uint32_t f = 0; f < files; f++, w->file_count++) {
        wfile *file = &w->files[f];
        file->fd = -1;
        const char *name = ckpt__rd_str(&r, &w->arena, NULL, &oom);
        const char *tmp = ckpt__rd_str(&r, &w->arena, NULL, &oom);
        file->size = ckpt__rd_u64(&r);
        if (oom) return ckpt__oom(err, path, NULL);
        if (r.bad || !name || !tmp || !*tmp) return join_bad(&r, err, "file");
        ckpt_status st = name_file(w, file, name, err);
        if (st) return st;
        file->tmp_path = tmp;
    }
    uint32_t count = ckpt__rd_count(&r, 4 + 4 + 8 + 4 + 8);
    if (r.bad) return join_bad(&r, err, "tensor count");
    if (!(w->tensors = ckpt__calloc(count ? count : 1, sizeof *w->tensors))) return ckpt__oom(err, path, NULL);
    w->cap = count ? count : 1;
    for (uint32_t i = 0; i < count; i++, w->count++) {
        wtensor *t = &w->tensors[i];
        t->pub.name = ckpt__rd_str(&r, &w->arena, NULL, &oom);
        t->pub.dtype = (ckpt_dtype)ckpt__rd_u32(&r);
        t->pub.nbytes = ckpt__rd_u64(&r);
        t->pub.file = ckpt__rd_u32(&r);
        t->pub.offset = ckpt__rd_u64(&r);
        t->kept = i;
        if (oom) return ckpt__oom(err, path, NULL);
        if (r.bad || !t->pub.name || !ckpt_dtype_name(t->pub.dtype)) return join_bad(&r, err, "tensor");
        uint64_t end;
        if (t->pub.file != CKPT__OUT_NONE &&
            (t->pub.file >= files || !ckpt__add_u64(t->pub.offset, t->pub.nbytes, &end) || end > w->files[t->pub.file].size))
            return ckpt__fail(err, CKPT__D(COMM_DATA), w->files[t->pub.file < files ? t->pub.file : 0].final_path,
                              t->pub.name, (int64_t)t->pub.offset,
                              "the writer layout received from rank 0 puts the tensor outside its file");
    }
    if (!ckpt__rd_expect(&r, "END!", 4) || ckpt__rd_left(&r)) return join_bad(&r, err, "end marker");
    return CKPT_OK;
}

ckpt_status ckpt__writer_join(const void *data, size_t n, bool open_files, ckpt_writer **out, ckpt_error *err) {
    *out = NULL;
    ckpt_writer *w = ckpt__calloc(1, sizeof *w);
    if (!w) return ckpt__oom(err, NULL, "a joined writer");
    ckpt_writer_options_init(&w->opt);
    w->joined = w->shared = true;
    w->state = FAILED;
    ckpt_status st = join_decode(w, data, n, err);
    /* The files are opened at the first write to each (joined_fd); the
     * first is opened here only to see it, so that a rank that does not
     * share the output's file system fails the vote on "opening the output
     * files" at once. */
    if (st == CKPT_OK && open_files && w->file_count) {
        int fd;
        st = open_created(&w->files[0], &fd, err);
        if (st == CKPT_OK) close(fd);
    }
    if (st) {
        ckpt_writer_free(w);
        return st;
    }
    w->state = WRITING;
    *out = w;
    return CKPT_OK;
}

ckpt_status ckpt__writer_set_shared(ckpt_writer *w, ckpt_error *err) {
    if (w->needs & CKPT__OUT_CRC32)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, w->path, NULL, -1,
                          "the %s output format records CRC-32s of every tensor's bytes, which a collective save or "
                          "convert would compute in several processes: write it from one process",
                          w->fmt->name);
    w->shared = true;
    return CKPT_OK;
}

uint64_t ckpt__writer_tensor_offset(const ckpt_writer *w, size_t index) { return w->tensors[index].pub.offset; }

ckpt_status ckpt__writer_sync_written(ckpt_writer *w, bool sync, uint64_t *synced, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    /* Write-back started on every file first, so that the disk has them
     * all queued at once; fsyncs one after another each waited for one
     * file's write-back alone. */
    for (size_t f = 0; sync && f < w->file_count; f++)
        if (w->files[f].fd >= 0 && __atomic_load_n(&w->files[f].written, __ATOMIC_RELAXED))
            sync_file_range(w->files[f].fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    for (size_t f = 0; f < w->file_count; f++) {
        wfile *file = &w->files[f];
        if (file->fd < 0) continue;
        if (st == CKPT_OK && sync && __atomic_load_n(&file->written, __ATOMIC_RELAXED)) {
            if (ckpt__io_fsync(file->fd) != 0) st = ckpt__fail_errno(err, errno, file->final_path, -1, "fsync failed");
            else if (synced) ++*synced;
        }
        if (!w->joined) continue; /* the creator's files stay open for its commit */
        if (close(file->fd) != 0 && st == CKPT_OK) st = ckpt__fail_errno(err, errno, file->final_path, -1, "close failed");
        file->fd = -1;
    }
    if (w->joined) w->state = st ? FAILED : COMMITTED;
    return st;
}
