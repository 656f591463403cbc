/* file_source.c — the local file kind of source: pread, mmap, and the
 * descriptor that io_uring, O_DIRECT and copy_file_range use. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "reader.h"
#include "source.h"

static ckpt_status file_read(ckpt__source *src, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    return ckpt__pread_full(src->fd, dst, n, offset, src->name, err);
}

static ckpt_status file_map(ckpt__source *src, int writable, void **base, ckpt_error *err) {
    /* A file cut short since it was opened would make the mapping fault
     * (SIGBUS) where the data used to be: check before mapping. */
    struct stat sb;
    if (fstat(src->fd, &sb) != 0) return ckpt__fail_errno(err, errno, src->name, -1, "cannot stat");
    if ((uint64_t)sb.st_size < src->size)
        return ckpt__fail(err, CKPT_E_TRUNCATED, src->name, NULL, (int64_t)sb.st_size,
                          "file shrank from %llu to %llu bytes since it was opened", (unsigned long long)src->size,
                          (unsigned long long)sb.st_size);
    if (src->size == 0) {
        *base = NULL;
        return CKPT_OK;
    }
    void *m = mmap(NULL, (size_t)src->size, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   writable ? MAP_PRIVATE : MAP_SHARED, src->fd, 0);
    if (m == MAP_FAILED) return ckpt__fail_errno(err, errno, src->name, -1, "cannot map the file");
    *base = m;
    return CKPT_OK;
}

static void file_unmap(ckpt__source *src, void *base) {
    if (base) munmap(base, (size_t)src->size);
}

static void file_close(ckpt__source *src) {
    if (src->fd >= 0) close(src->fd);
    src->fd = -1;
}

static const ckpt__source_ops file_ops = {.read = file_read, .map = file_map, .unmap = file_unmap, .close = file_close};

static bool file_claims(const char *name) {
    (void)name;
    return true; /* what no other kind claims is a path */
}

static ckpt_status file_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    (void)o;
    ckpt__source *src = ckpt__calloc(1, sizeof *src);
    if (!src) return ckpt__oom(err, name, NULL);
    src->ops = &file_ops;
    src->fd = -1;
    src->name = ckpt__strdup(name);
    ckpt_status st = src->name ? ckpt__file_open_read(name, &src->fd, &src->size, err) : ckpt__oom(err, name, NULL);
    if (st) {
        ckpt__source_close(src);
        return st;
    }
    /* Network file systems are read, never mapped: a server-side
     * truncation would fault a mapping. */
    src->caps = CKPT__SRC_FD | (ckpt__is_remote_fs(src->fd) ? CKPT__SRC_REMOTE : CKPT__SRC_MAP);
    *out = src;
    return CKPT_OK;
}

static ckpt__name_kind file_stat(const char *name) {
    struct stat sb;
    if (stat(name, &sb) != 0) return CKPT__NAME_MISSING;
    return S_ISDIR(sb.st_mode) ? CKPT__NAME_DIR : CKPT__NAME_FILE;
}

const ckpt__source_kind ckpt__file_kind = {"file", file_claims, file_open, file_stat};
