/* file_source.c — the local file kind of source: pread, mmap, and the
 * descriptor that io_uring, O_DIRECT and copy_file_range use. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "reader.h"
#include "source.h"

static ckpt_status file_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    ckpt__source *src = file;
    (void)user;
    return ckpt__pread_full(src->fd, dst, n, offset, src->name, err);
}

/* ---- direct mode: reads around the page cache ---------------------------- */

typedef struct direct_file {
    int dfd;        /* O_DIRECT descriptor, or -1 where the file system refuses it */
    uint32_t align; /* offset, length and memory alignment it needs */
} direct_file;

enum { DIRECT_STEP = 8 << 20 };

/* Reads the aligned blocks holding [offset, offset + n) into an aligned
 * buffer, a step at a time, and copies the asked bytes out. */
static ckpt_status direct_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    ckpt__source *src = file;
    (void)user;
    const direct_file *f = src->impl;
    if (f->dfd < 0) {
        /* No O_DIRECT here: read, then drop what the read cached. */
        ckpt_status st = ckpt__pread_full(src->fd, dst, n, offset, src->name, err);
        posix_fadvise(src->fd, (off_t)offset, (off_t)n, POSIX_FADV_DONTNEED);
        return st;
    }
    uint64_t a = f->align;
    if ((uintptr_t)dst % a == 0 && offset % a == 0 && n % a == 0) {
        /* Aligned: straight into the caller's memory. */
        unsigned char *p = dst;
        uint64_t got = 0;
        while (got < n) {
            ssize_t r = ckpt__io_pread(f->dfd, p + got, (size_t)(n - got > (1u << 30) ? (1u << 30) : n - got),
                                       (off_t)(offset + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return ckpt__fail_errno(err, errno, src->name, (int64_t)(offset + got), "read (O_DIRECT) failed");
            if (r == 0)
                return ckpt__fail(err, CKPT_E_TRUNCATED, src->name, NULL, (int64_t)(offset + got),
                                  "file ends %llu bytes early", (unsigned long long)(n - got));
            got += (uint64_t)r;
        }
        return CKPT_OK;
    }
    uint64_t step = n < DIRECT_STEP ? n : DIRECT_STEP;
    unsigned char *buf = NULL;
    if (posix_memalign((void **)&buf, a, (size_t)(step + 2 * a)) != 0) return ckpt__oom(err, src->name, NULL);
    ckpt_status st = CKPT_OK;
    for (uint64_t done = 0; done < n && st == CKPT_OK;) {
        uint64_t at = offset + done, len = n - done < step ? n - done : step;
        uint64_t lo = at / a * a, hi = (at + len + a - 1) / a * a, got = 0;
        while (got < at + len - lo) {
            ssize_t r = ckpt__io_pread(f->dfd, buf + got, (size_t)(hi - lo - got), (off_t)(lo + got));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                st = ckpt__fail_errno(err, errno, src->name, (int64_t)(lo + got), "read (O_DIRECT) failed");
                break;
            }
            if (r == 0) {
                st = ckpt__fail(err, CKPT_E_TRUNCATED, src->name, NULL, (int64_t)(lo + got),
                                "file ends %llu bytes early", (unsigned long long)(at + len - lo - got));
                break;
            }
            got += (uint64_t)r;
            if (got % a) break; /* a short read ends at the end of the file */
        }
        if (st == CKPT_OK && got < at + len - lo)
            st = ckpt__fail(err, CKPT_E_TRUNCATED, src->name, NULL, (int64_t)(lo + got), "file ends %llu bytes early",
                            (unsigned long long)(at + len - lo - got));
        if (st == CKPT_OK) memcpy((unsigned char *)dst + done, buf + (at - lo), (size_t)len);
        done += len;
    }
    free(buf);
    return st;
}

static void direct_close(void *user, void *file) {
    ckpt__source *src = file;
    (void)user;
    direct_file *f = src->impl;
    if (f && f->dfd >= 0) close(f->dfd);
    free(f);
    src->impl = NULL;
    if (src->fd >= 0) close(src->fd);
    src->fd = -1;
}

static const ckpt__source_ops direct_ops = {.version = CKPT_SOURCE_OPS_VERSION,
    .read = direct_read,
    .close = direct_close};

static ckpt_status file_map(void *user, void *file, int writable, void **base, ckpt_error *err) {
    ckpt__source *src = file;
    (void)user;
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

static void file_unmap(void *user, void *file, void *base) {
    ckpt__source *src = file;
    (void)user;
    if (base) munmap(base, (size_t)src->size);
}

static void file_close(void *user, void *file) {
    ckpt__source *src = file;
    (void)user;
    if (src->fd >= 0) close(src->fd);
    src->fd = -1;
}

static const ckpt__source_ops file_ops = {.version = CKPT_SOURCE_OPS_VERSION,
    .read = file_read,
    .map = file_map,
    .unmap = file_unmap,
    .close = file_close};

static bool file_claims(const char *name) {
    (void)name;
    return true; /* what no other kind claims is a path */
}

ckpt_status ckpt__file_source_adopt(const char *name, int fd, uint64_t size, const ckpt__source_options *o,
                                    ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    ckpt__source *src = ckpt__calloc(1, sizeof *src);
    if (!src || !(src->name = ckpt__strdup(name))) {
        free(src);
        close(fd);
        return ckpt__oom(err, name, NULL);
    }
    src->ops = &file_ops;
    src->file = src;
    src->fd = fd;
    src->size = size;
    /* Network file systems are read, never mapped: a server-side
     * truncation would fault a mapping. */
    bool remote = ckpt__is_remote_fs(src->fd);
    src->caps = CKPT__SRC_FD | (remote ? CKPT__SRC_REMOTE : CKPT__SRC_MAP);
    if (o->direct) {
        /* Direct mode: no mappings (they fill the page cache), reads with
         * O_DIRECT where the file system takes it. */
        direct_file *f = ckpt__malloc(sizeof *f);
        if (!f) {
            ckpt__source_close(src);
            return ckpt__oom(err, name, NULL);
        }
        f->dfd = ckpt__open_direct(name, src->fd, &f->align);
        src->impl = f;
        src->ops = &direct_ops;
        src->file = src;
        src->caps = CKPT__SRC_FD | CKPT__SRC_DIRECT | (remote ? CKPT__SRC_REMOTE : 0);
    }
    *out = src;
    return CKPT_OK;
}

static ckpt_status file_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    int fd;
    uint64_t size;
    ckpt_status st = ckpt__file_open_read(name, &fd, &size, err);
    return st ? st : ckpt__file_source_adopt(name, fd, size, o, out, err);
}

ckpt__name_kind ckpt__local_kind(const char *path, bool *link) {
    struct stat sb;
    if (link) *link = lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
    if (stat(path, &sb) != 0) return CKPT__NAME_MISSING;
    return S_ISDIR(sb.st_mode) ? CKPT__NAME_DIR : CKPT__NAME_FILE;
}

static ckpt__name_kind file_stat(const char *name, const ckpt__source_options *o) {
    (void)o;
    return ckpt__local_kind(name, NULL);
}

const ckpt__source_kind ckpt__file_kind = {"file", file_claims, file_open, file_stat};
