/* user_source.c — a source given as a table of functions (ckpt_source_ops,
 * ckpt.h), the caller's or the library's memory source.
 *
 * The table's functions are called through a thin layer of its own
 * operations, so that what the table says is checked as a file's bytes
 * are: a read is never asked beyond the size `open` gave, a failure is
 * named (file, byte offset; the engine adds the tensor), a listing's names
 * are plain names of the directory.  Depends on base only. */
#include <stdlib.h>
#include <string.h>

#include "beneath.h"
#include "file.h"
#include "source.h"

typedef struct user_file {
    ckpt__source_ops layer; /* this file's operations: the table's, checked */
    const ckpt_source_ops *ops;
    void *user;
    void *handle;
    void *owned; /* freed with the file (ckpt__source_memory's description) */
} user_file;

/* The table's failure, named: the file and offset, and its own words. */
static ckpt_status failed(const ckpt__source *src, ckpt_status st, const ckpt_error *said, const char *what,
                          uint64_t offset, ckpt_error *err) {
    if (st == CKPT_OK) st = CKPT_E_IO; /* a table must say why; one that does not still failed */
    return ckpt__fail(err, ckpt__code_of(said, st), src->name, said->tensor[0] ? said->tensor : NULL, (int64_t)offset, "%s failed: %s", what,
                      said->message[0] ? said->message : ckpt_status_message(st));
}

static ckpt_status beyond_end(const ckpt__source *src, uint64_t n, uint64_t offset, ckpt_error *err) {
    return ckpt__fail(err, CKPT_E_TRUNCATED, src->name, NULL, (int64_t)(offset < src->size ? src->size : offset),
                      "the source's file is %llu bytes, and data runs to byte %llu", (unsigned long long)src->size,
                      (unsigned long long)(offset + n));
}

static ckpt_status layer_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    ckpt__source *src = file;
    const user_file *u = user;
    if (offset > src->size || n > src->size - offset) return beyond_end(src, n, offset, err);
    ckpt_error said;
    ckpt_error_clear(&said);
    ckpt_status st = u->ops->read(u->user, u->handle, dst, n, offset, &said);
    return st == CKPT_OK ? st : failed(src, st, &said, "reading", offset, err);
}

static ckpt_status layer_read_many(void *user, void *file, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    ckpt__source *src = file;
    const user_file *u = user;
    for (size_t i = 0; i < n; i++) /* `need` is within the file; `len` may run past it (O_DIRECT rounding) */
        if (reqs[i].offset > src->size || reqs[i].need > src->size - reqs[i].offset)
            return beyond_end(src, reqs[i].need, reqs[i].offset, err);
    ckpt_error said;
    ckpt_error_clear(&said);
    ckpt_status st = u->ops->read_many(u->user, u->handle, reqs, n, &said);
    return st == CKPT_OK ? st : failed(src, st, &said, "a batch of reads", n ? reqs[0].offset : 0, err);
}

static ckpt_status layer_map(void *user, void *file, int writable, void **base, ckpt_error *err) {
    ckpt__source *src = file;
    const user_file *u = user;
    if (writable) /* private copy-on-write mappings are the file kind's (mapping.c unmaps them) */
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, src->name, NULL, -1,
                          "a source's own mapping cannot be written: read it instead");
    ckpt_error said;
    ckpt_error_clear(&said);
    ckpt_status st = u->ops->map(u->user, u->handle, 0, base, &said);
    return st == CKPT_OK ? st : failed(src, st, &said, "mapping", 0, err);
}

static void layer_unmap(void *user, void *file, void *base) {
    const user_file *u = user;
    (void)file;
    if (u->ops->unmap) u->ops->unmap(u->user, u->handle, base);
}

static void layer_close(void *user, void *file) {
    user_file *u = user;
    (void)file;
    if (u->ops->close) u->ops->close(u->user, u->handle);
    free(u->owned);
    free(u);
}

static ckpt_status check_table(const ckpt_source_ops *ops, const char *name, ckpt_error *err) {
    if (!ops || ops->version < 1 || !ops->open || !ops->read)
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "a source's table needs a version (CKPT_SOURCE_OPS_VERSION), open and read");
    return CKPT_OK;
}

ckpt_status ckpt__source_open_in(const ckpt_source_ops *ops, void *user, const char *name, ckpt__source **out,
                                 ckpt_error *err) {
    *out = NULL;
    uint64_t size = 0;
    if (ckpt__source_ops_own(ops)) return ops->open(user, name, (void **)out, &size, err);
    ckpt_status st = check_table(ops, name, err);
    if (st) return st;
    ckpt__source *src = ckpt__calloc(1, sizeof *src);
    user_file *u = ckpt__calloc(1, sizeof *u);
    if (!src || !u || !(src->name = ckpt__strdup(name))) {
        free(src);
        free(u);
        return ckpt__oom(err, name, NULL);
    }
    ckpt_error said;
    ckpt_error_clear(&said);
    if ((st = ops->open(user, name, &u->handle, &size, &said))) {
        st = failed(src, st, &said, "opening", 0, err);
        free(u);
        ckpt__source_close(src);
        return st;
    }
    u->ops = ops;
    u->user = user;
    u->layer = (ckpt__source_ops){.version = CKPT_SOURCE_OPS_VERSION,
                                  .read = layer_read,
                                  .read_many = ops->read_many ? layer_read_many : NULL,
                                  .map = ops->map ? layer_map : NULL,
                                  .unmap = layer_unmap,
                                  .close = layer_close};
    src->ops = &u->layer;
    src->user = u;
    src->file = src;
    src->fd = -1;
    src->size = size;
    src->caps = ops->map ? CKPT__SRC_MAP : 0;
    *out = src;
    return CKPT_OK;
}

ckpt_status ckpt__source_stat_in(const ckpt_source_ops *ops, void *user, const char *name, ckpt_source_kind *kind,
                                 ckpt_error *err) {
    ckpt_source_stat sb = {CKPT_SOURCE_MISSING, 0, 0, NULL};
    ckpt_error said;
    ckpt_error_clear(&said);
    ckpt_status st = ops->stat ? ops->stat(user, name, &sb, &said) : CKPT_OK;
    if (st)
        return ckpt__fail(err, ckpt__code_of(&said, st), name, NULL, -1, "asking the source what it is failed: %s",
                          said.message[0] ? said.message : ckpt_status_message(st));
    *kind = sb.kind == CKPT_SOURCE_FILE || sb.kind == CKPT_SOURCE_DIRECTORY ? sb.kind : CKPT_SOURCE_MISSING;
    return CKPT_OK;
}

/* ---- listings ----------------------------------------------------------------- */

typedef struct listing {
    const char *dir;
    char **names;
    size_t count, cap;
    ckpt_status st; /* a name refused, or memory */
    ckpt_error *err;
} listing;

/* A name the table gives must be a plain name of the directory: any other
 * would reach outside it once joined to it. */
static int add_name(void *ctx, const char *name) {
    listing *l = ctx;
    if (l->st) return 1;
    if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..")) {
        l->st = ckpt__fail(l->err, CKPT_E_UNSAFE_PATH, l->dir, NULL, -1,
                           "the source lists '%s' in the directory: a name there is one plain name",
                           name ? name : "(null)");
        return 1;
    }
    if (name[0] == '.') return 0; /* hidden, as a local listing's */
    char **names = ckpt__grow(l->names, l->count, &l->cap, sizeof *names, 16);
    if (!names) return (l->st = ckpt__oom(l->err, l->dir, NULL)), 1;
    l->names = names;
    if (!(l->names[l->count] = ckpt__strdup(name))) return (l->st = ckpt__oom(l->err, l->dir, NULL)), 1;
    l->count++;
    return 0;
}

ckpt_status ckpt__source_list_in(const ckpt_source_ops *ops, void *user, const char *dir, char ***names, size_t *count,
                                 ckpt_error *err) {
    *names = NULL;
    *count = 0;
    if (!ops->list) return ckpt__fail(err, CKPT_E_NOT_FOUND, dir, NULL, -1, "this source cannot list a directory");
    listing l = {dir, NULL, 0, 0, CKPT_OK, err};
    ckpt_error said;
    ckpt_error_clear(&said);
    ckpt_status st = ops->list(user, dir, add_name, &l, &said);
    if (l.st)
        st = l.st;
    else if (st)
        st = ckpt__fail(err, ckpt__code_of(&said, st), dir, NULL, -1, "listing the directory failed: %s",
                        said.message[0] ? said.message : ckpt_status_message(st));
    if (st) {
        ckpt__beneath_free_names(l.names, l.count);
        return st;
    }
    if (l.count > 1) qsort(l.names, l.count, sizeof *l.names, ckpt__cmp_str);
    *names = l.names;
    *count = l.count;
    return CKPT_OK;
}

/* ---- the library's memory source: one file, any name ------------------------- */

static ckpt_status memory_open(void *user, const char *name, void **file, uint64_t *size, ckpt_error *err) {
    (void)name;
    (void)err;
    const ckpt_memory_source *m = user;
    *file = (void *)m;
    *size = m->size;
    return CKPT_OK;
}

static ckpt_status memory_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    (void)user;
    (void)err;
    const ckpt_memory_source *m = file; /* the layer checked the range */
    memcpy(dst, (const char *)m->data + offset, (size_t)n);
    return CKPT_OK;
}

static ckpt_status memory_map(void *user, void *file, int writable, void **base, ckpt_error *err) {
    (void)user;
    (void)writable; /* the layer asks for read-only mappings only */
    (void)err;
    *base = (void *)((const ckpt_memory_source *)file)->data;
    return CKPT_OK;
}

static ckpt_status memory_stat(void *user, const char *name, ckpt_source_stat *out, ckpt_error *err) {
    (void)name;
    (void)err;
    *out = (ckpt_source_stat){CKPT_SOURCE_FILE, ((const ckpt_memory_source *)user)->size, 0, NULL};
    return CKPT_OK;
}

const ckpt_source_ops ckpt_memory_source_ops = {.version = CKPT_SOURCE_OPS_VERSION,
                                                .open = memory_open,
                                                .read = memory_read,
                                                .map = memory_map,
                                                .stat = memory_stat};

ckpt_status ckpt__source_memory(const char *name, const void *data, uint64_t size, ckpt__source **out,
                                ckpt_error *err) {
    ckpt_memory_source *m = ckpt__malloc(sizeof *m);
    if (!m) return ckpt__oom(err, name, NULL);
    *m = (ckpt_memory_source){data, size};
    ckpt_status st = ckpt__source_open_in(&ckpt_memory_source_ops, m, name, out, err);
    if (st)
        free(m);
    else
        ((user_file *)(*out)->user)->owned = m;
    return st;
}
