/* memdir.c — see memdir.h. */
#include "memdir.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

void memdir_load(memdir *d, const char *root, const char *local_dir) {
    memset(d, 0, sizeof *d);
    d->root = strdup(root);
    DIR *dir = opendir(local_dir);
    struct dirent *e;
    while (dir && (e = readdir(dir))) {
        char path[4096];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", local_dir, e->d_name);
        if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        d->files = realloc(d->files, (d->count + 1) * sizeof *d->files);
        memfile *f = &d->files[d->count++];
        f->name = malloc(strlen(root) + strlen(e->d_name) + 2);
        sprintf(f->name, "%s/%s", root, e->d_name);
        f->data = (unsigned char *)read_all(path, &f->size);
    }
    if (dir) closedir(dir);
}

void memdir_free(memdir *d) {
    for (size_t i = 0; i < d->count; i++)
        free(d->files[i].name), free(d->files[i].data);
    free(d->files);
    free(d->root);
}

static memfile *find(memdir *d, const char *name) {
    for (size_t i = 0; i < d->count; i++)
        if (!strcmp(d->files[i].name, name)) return &d->files[i];
    return NULL;
}

static ckpt_status md_open(void *user, const char *name, void **file, uint64_t *size, ckpt_error *err) {
    memdir *d = user;
    memfile *f = find(d, name);
    if (!f) {
        if (err) snprintf(err->message, sizeof err->message, "memdir has no file %s", name);
        return CKPT_E_NOT_FOUND;
    }
    *file = f;
    *size = f->size > d->short_by ? f->size - d->short_by : 0;
    return CKPT_OK;
}

static ckpt_status md_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    memdir *d = user;
    memfile *f = file;
    if (d->fail_file && !strcmp(f->name, d->fail_file) && offset <= d->fail_offset && d->fail_offset < offset + n) {
        if (err) snprintf(err->message, sizeof err->message, "the disk of memdir broke");
        return CKPT_E_IO;
    }
    if (offset > f->size || n > f->size - offset) return CKPT_E_TRUNCATED;
    memcpy(dst, f->data + offset, n);
    return CKPT_OK;
}

static ckpt_status md_read_many(void *user, void *file, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    memfile *f = file;
    for (size_t i = 0; i < n; i++) {
        uint64_t len = reqs[i].len;
        if (reqs[i].offset + len > f->size) len = reqs[i].need;
        ckpt_status st = md_read(user, file, reqs[i].dst, len, reqs[i].offset, err);
        if (st) return st;
    }
    return CKPT_OK;
}

static ckpt_status md_stat(void *user, const char *name, ckpt_source_stat *out, ckpt_error *err) {
    (void)err;
    memdir *d = user;
    memfile *f = find(d, name);
    out->kind = f ? CKPT_SOURCE_FILE : !strcmp(name, d->root) ? CKPT_SOURCE_DIRECTORY : CKPT_SOURCE_MISSING;
    out->size = f ? f->size - (f->size > d->short_by ? d->short_by : f->size) : 0;
    out->mtime_ns = 0;
    out->etag = NULL;
    return CKPT_OK;
}

static ckpt_status md_list(void *user, const char *dir, int (*add)(void *ctx, const char *name), void *ctx,
                           ckpt_error *err) {
    memdir *d = user;
    d->listings++;
    if (strcmp(dir, d->root)) {
        if (err) snprintf(err->message, sizeof err->message, "memdir has no directory %s", dir);
        return CKPT_E_NOT_FOUND;
    }
    size_t skip = strlen(d->root) + 1;
    for (size_t i = 0; i < d->count; i++)
        if (add(ctx, d->files[i].name + skip)) return CKPT_E_NO_MEMORY;
    if (d->extra && add(ctx, d->extra)) return CKPT_E_NO_MEMORY;
    return CKPT_OK;
}

static void md_close(void *user, void *file) {
    (void)user;
    (void)file;
}

const ckpt_source_ops memdir_ops = {.version = CKPT_SOURCE_OPS_VERSION,
                                    .open = md_open,
                                    .read = md_read,
                                    .read_many = md_read_many,
                                    .stat = md_stat,
                                    .list = md_list,
                                    .close = md_close};
