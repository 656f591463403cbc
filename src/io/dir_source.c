/* dir_source.c — the library's own directories as sources: the open, stat
 * and list of ckpt_source_ops (the table a caller gives too), so that the
 * catalog asks every checkpoint directory the same way.
 *
 *   - a local directory: its files opened beneath its descriptor
 *     (beneath.h), of the file kind; its names listed through it;
 *   - a remote prefix (a URL ending in '/'): names asked of the server,
 *     no listing;
 *   - a remote directory whose kind lists it (a Hub repo, hf://): the
 *     same, and its names listed by the kind.
 *
 * A file they open is the ckpt__source of its kind, given as the handle:
 * ckpt__source_open_in takes it as it is (its own operations read it). */
#include <stdlib.h>
#include <string.h>

#include "beneath.h"
#include "file.h"
#include "source.h"

static ckpt_status own_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    (void)user;
    return ckpt__source_read(file, dst, n, offset, err);
}

static void own_close(void *user, void *file) {
    (void)user;
    ckpt__source_close(file);
}

/* ---- a local directory ---------------------------------------------------------- */

static ckpt_status local_open(void *user, const char *name, void **file, uint64_t *size, ckpt_error *err) {
    const ckpt__local_dir *d = user;
    int fd;
    ckpt_status st = ckpt__beneath_open(d->root, name, false, &fd, size, err);
    ckpt__source *src = NULL;
    if (st == CKPT_OK) st = ckpt__file_source_adopt(name, fd, *size, d->options, &src, err);
    *file = src;
    return st;
}

/* Of the names in the directory (its plain file names, what the library
 * asks of it): whether it holds one, of any kind — opening it says
 * whether it may be read. */
static ckpt_status local_stat(void *user, const char *name, ckpt_source_stat *out, ckpt_error *err) {
    (void)err;
    const ckpt__local_dir *d = user;
    bool has = ckpt__beneath_has(d->root, ckpt__path_basename(name));
    *out = (ckpt_source_stat){has ? CKPT_SOURCE_FILE : CKPT_SOURCE_MISSING, 0, 0, NULL};
    return CKPT_OK;
}

static ckpt_status local_list(void *user, const char *dir, int (*add)(void *ctx, const char *name), void *ctx,
                              ckpt_error *err) {
    const ckpt__local_dir *d = user;
    char **names = NULL;
    size_t count = 0;
    ckpt_status st = ckpt__beneath_list(d->root, dir, false, &names, &count, err);
    for (size_t i = 0; st == CKPT_OK && i < count; i++)
        if (add(ctx, names[i])) st = CKPT_E_NO_MEMORY; /* the listing says why */
    ckpt__beneath_free_names(names, count);
    return st;
}

const ckpt_source_ops ckpt__local_dir_ops = {.version = CKPT_SOURCE_OPS_VERSION,
                                             .open = local_open,
                                             .read = own_read,
                                             .stat = local_stat,
                                             .list = local_list,
                                             .close = own_close};

/* ---- a remote prefix ------------------------------------------------------------ */

static ckpt_status remote_open(void *user, const char *name, void **file, uint64_t *size, ckpt_error *err) {
    ckpt__source *src = NULL;
    ckpt_status st = ckpt__source_open(name, user, &src, err);
    *file = src;
    *size = src ? src->size : 0;
    return st;
}

static ckpt_status remote_stat(void *user, const char *name, ckpt_source_stat *out, ckpt_error *err) {
    (void)err;
    ckpt__name_kind k = ckpt__source_stat(name, user);
    *out = (ckpt_source_stat){k == CKPT__NAME_FILE  ? CKPT_SOURCE_FILE
                              : k == CKPT__NAME_DIR ? CKPT_SOURCE_DIRECTORY
                                                    : CKPT_SOURCE_MISSING,
                              0, 0, NULL};
    return CKPT_OK;
}

const ckpt_source_ops ckpt__remote_dir_ops = {.version = CKPT_SOURCE_OPS_VERSION,
                                              .open = remote_open,
                                              .read = own_read,
                                              .stat = remote_stat,
                                              .close = own_close};

/* ---- a remote directory its kind lists (a Hub repo) ----------------------------- */

static ckpt_status remote_list(void *user, const char *dir, int (*add)(void *ctx, const char *name), void *ctx,
                               ckpt_error *err) {
    return ckpt__source_list(dir, user, add, ctx, err);
}

const ckpt_source_ops ckpt__remote_listed_dir_ops = {.version = CKPT_SOURCE_OPS_VERSION,
                                                     .open = remote_open,
                                                     .read = own_read,
                                                     .stat = remote_stat,
                                                     .list = remote_list,
                                                     .close = own_close};

bool ckpt__source_ops_own(const ckpt_source_ops *ops) {
    return ops == &ckpt__local_dir_ops || ops == &ckpt__remote_dir_ops || ops == &ckpt__remote_listed_dir_ops;
}
