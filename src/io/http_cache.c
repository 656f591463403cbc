/*
 * http_cache.c — the cache of remote files (ckpt_catalog_options.cache_dir):
 * local copies of exact versions, and what it takes to trust one.
 *
 * A copy is named "<32 hex>-<the URL's last segment>", the hex from a
 * SHA-256 of the URL (without its user part), the validators and the
 * size: a new version gets a new name, and the name says nothing of a
 * token in the URL's query.  Beside it, "<32 hex>.stamp" records what the
 * copy was when ckpt renamed it into place (inode, size, modification and
 * change times, and the SHA-256 it was checked against, if the server gave
 * one).  The change time cannot be set back by anyone but root, so a copy
 * written to, truncated or replaced since no longer matches its stamp.
 *
 * Everything is opened relative to the directory's descriptor, without
 * following symlinks (O_NOFOLLOW) or blocking on FIFOs (O_NONBLOCK, and
 * only after fstatat found a regular file); a copy is used only if it is a
 * regular file of this user with a single link, of the right size, that
 * matches its stamp — or, when the server gives the file's SHA-256, whose
 * bytes hash to it.  New files are 0600 in a directory created 0700, and
 * come into place only by rename from a temporary created with O_EXCL, so
 * nothing is ever written through a name that already exists.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/sha256.h"
#include "file.h"
#include "http.h"

enum {
    NAME_CAP = 256,          /* "<32 hex>-<segment of up to 95 bytes>" and its temporaries */
    STAMP_CAP = 512,         /* a stamp's text */
    HASH_STEP = 4 << 20,     /* bytes hashed per read */
};

struct ckpt__cache_copy {
    int dirfd, fd;
    uint64_t size;
    char sha256[65]; /* what the server gave, or "" */
    char tmp[NAME_CAP], final[NAME_CAP];
    atomic_bool committed;
};

/* ---- names ---------------------------------------------------------------------- */

/* The copy's name: a hash of the version, and the URL's last path segment
 * (in safe characters) for people looking at the directory. */
static void entry_name(const ckpt__cache_key *k, char out[NAME_CAP]) {
    ckpt__sha256 h;
    ckpt__sha256_init(&h);
    char size[32];
    snprintf(size, sizeof size, "%llu", (unsigned long long)k->size);
    const char *parts[] = {k->url, k->etag ? k->etag : "", k->last_modified ? k->last_modified : "",
                           k->linked_etag ? k->linked_etag : "", size};
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) ckpt__sha256_update(&h, parts[i], strlen(parts[i]) + 1);
    unsigned char d[32];
    ckpt__sha256_final(&h, d);
    char hex[65];
    ckpt__sha256_hex(d, hex);
    size_t n = (size_t)snprintf(out, NAME_CAP, "%.32s", hex);
    ckpt__url_parts u;
    if (!ckpt__url_split(k->url, &u) || !u.path_len) return;
    const char *seg = u.path, *end = u.path + u.path_len;
    for (const char *p = u.path; p < end; p++)
        if (*p == '/') seg = p + 1;
    if (seg == end) return;
    out[n++] = '-';
    for (const char *p = seg; p < end && n < 32 + 1 + 95; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                  c == '-' || c == '_';
        out[n++] = ok ? c : '_';
    }
    out[n] = '\0';
}

/* "<32 hex>.stamp" for the copy "<32 hex>-…". */
static void stamp_name(const char *entry, char out[NAME_CAP]) { snprintf(out, NAME_CAP, "%.32s.stamp", entry); }

/* ---- files of this user, and nothing else ------------------------------------------- */

/* The cache directory, created 0700 with any parent it lacks; -1 when it
 * cannot be had or belongs to another user (whose files could not be
 * trusted, and who could swap ours). */
static int open_dir(const char *dir, bool create) {
    if (create) {
        char *p = ckpt__strdup(dir);
        if (!p) return -1;
        for (char *s = p + 1; *s; s++) {
            if (*s != '/') continue;
            *s = '\0';
            mkdir(p, 0700); /* an existing one stays as it is */
            *s = '/';
        }
        mkdir(p, 0700);
        free(p);
    }
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_uid != geteuid()) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool own_regular(const struct stat *sb) {
    return S_ISREG(sb->st_mode) && sb->st_uid == geteuid() && sb->st_nlink == 1;
}

/* Opens `name` in the directory read-only if it is a regular file of this
 * user with one link: looked at first without following it (a FIFO or a
 * device is never opened), then opened without following a symlink or
 * blocking, and checked to be the file looked at.  -1 otherwise. */
static int open_own_file(int dirfd, const char *name, struct stat *sb) {
    struct stat before;
    if (fstatat(dirfd, name, &before, AT_SYMLINK_NOFOLLOW) != 0 || !own_regular(&before)) return -1;
    int fd = ckpt__io_openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    if (fstat(fd, sb) != 0 || !own_regular(sb) || sb->st_ino != before.st_ino || sb->st_dev != before.st_dev) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A new file, 0600, under a temporary name beside `final` (the pattern
 * ckpt__remove_stale_temps clears after a crash); -1 on failure. */
static int create_temp(int dirfd, const char *final, char tmp[NAME_CAP]) {
    static atomic_uint counter;
    for (int attempt = 0; attempt < 100; attempt++) {
        if (snprintf(tmp, NAME_CAP, ".%s.ckpt-tmp-%ld-%u", final, (long)getpid(), atomic_fetch_add(&counter, 1)) >=
            NAME_CAP)
            return -1;
        int fd = ckpt__io_openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    return -1;
}

/* ---- stamps and digests --------------------------------------------------------- */

static void stamp_text(const struct stat *sb, const char *sha256, char out[STAMP_CAP]) {
    snprintf(out, STAMP_CAP, "ckpt-cache-stamp 1\ninode %llu\nsize %llu\nmtime %lld.%09ld\nctime %lld.%09ld\nsha256 %s\n",
             (unsigned long long)sb->st_ino, (unsigned long long)sb->st_size, (long long)sb->st_mtim.tv_sec,
             (long)sb->st_mtim.tv_nsec, (long long)sb->st_ctim.tv_sec, (long)sb->st_ctim.tv_nsec,
             sha256[0] ? sha256 : "-");
}

/* Records what the copy `entry` is now (best effort: without a stamp, a
 * copy is checked again, or fetched again). */
static void write_stamp(int dirfd, const char *entry, const struct stat *sb, const char *sha256) {
    char name[NAME_CAP], tmp[NAME_CAP], text[STAMP_CAP];
    stamp_name(entry, name);
    stamp_text(sb, sha256, text);
    int fd = create_temp(dirfd, name, tmp);
    if (fd < 0) return;
    bool ok = ckpt__pwrite_full(fd, text, strlen(text), 0, NULL, NULL) == CKPT_OK;
    close(fd);
    if (!ok || ckpt__io_renameat2(dirfd, tmp, dirfd, name, 0) != 0) unlinkat(dirfd, tmp, 0);
}

/* Whether the stamp of `entry` describes the open copy exactly (with the
 * SHA-256 the server gives, when it gives one). */
static bool stamp_matches(int dirfd, const char *entry, const struct stat *sb, const char *sha256) {
    char name[NAME_CAP], want[STAMP_CAP], have[STAMP_CAP];
    stamp_name(entry, name);
    struct stat ssb;
    int fd = open_own_file(dirfd, name, &ssb);
    if (fd < 0) return false;
    bool ok = ssb.st_size > 0 && ssb.st_size < STAMP_CAP &&
              ckpt__pread_full(fd, have, (uint64_t)ssb.st_size, 0, name, NULL) == CKPT_OK;
    close(fd);
    if (!ok) return false;
    have[ssb.st_size] = '\0';
    stamp_text(sb, sha256, want);
    return strcmp(have, want) == 0;
}

/* Whether the `size` bytes of `fd` hash to `sha256` (64 hex digits). */
static bool hashes_to(int fd, uint64_t size, const char *sha256) {
    unsigned char *buf = ckpt__malloc(HASH_STEP);
    if (!buf) return false;
    ckpt__sha256 h;
    ckpt__sha256_init(&h);
    bool ok = true;
    for (uint64_t at = 0; ok && at < size;) {
        uint64_t n = size - at < HASH_STEP ? size - at : HASH_STEP;
        ok = ckpt__pread_full(fd, buf, n, at, "cache", NULL) == CKPT_OK;
        if (ok) ckpt__sha256_update(&h, buf, (size_t)n);
        at += n;
    }
    free(buf);
    if (!ok) return false;
    unsigned char d[32];
    char hex[65];
    ckpt__sha256_final(&h, d);
    ckpt__sha256_hex(d, hex);
    return strcmp(hex, sha256) == 0;
}

/* ---- using a copy ------------------------------------------------------------------ */

ckpt__source *ckpt__cache_open(const char *dir, const ckpt__cache_key *k, const char *shown,
                               const ckpt__source_options *o) {
    int dirfd = open_dir(dir, false);
    if (dirfd < 0) return NULL;
    char name[NAME_CAP];
    entry_name(k, name);
    struct stat sb;
    int fd = open_own_file(dirfd, name, &sb);
    const char *sha256 = k->sha256 ? k->sha256 : "";
    bool trusted = fd >= 0 && (uint64_t)sb.st_size == k->size && stamp_matches(dirfd, name, &sb, sha256);
    if (fd >= 0 && !trusted && (uint64_t)sb.st_size == k->size && sha256[0] && hashes_to(fd, k->size, sha256)) {
        trusted = true; /* copied here, or its stamp lost: the bytes are the server's */
        write_stamp(dirfd, name, &sb, sha256);
    }
    close(dirfd);
    if (!trusted) {
        if (fd >= 0) close(fd);
        return NULL;
    }
    ckpt__source_options lo = *o;
    lo.cache_dir = NULL;
    ckpt__source *src = NULL;
    if (ckpt__file_source_adopt(shown, fd, k->size, &lo, &src, NULL) != CKPT_OK) return NULL;
    return src;
}

/* ---- writing one --------------------------------------------------------------------- */

ckpt__cache_copy *ckpt__cache_begin(const char *dir, const ckpt__cache_key *k) {
    int dirfd = open_dir(dir, true);
    if (dirfd < 0) return NULL;
    ckpt__remove_stale_temps(dir);
    ckpt__cache_copy *c = ckpt__calloc(1, sizeof *c);
    if (!c) {
        close(dirfd);
        return NULL;
    }
    c->dirfd = dirfd;
    c->size = k->size;
    if (k->sha256) snprintf(c->sha256, sizeof c->sha256, "%s", k->sha256);
    entry_name(k, c->final);
    c->fd = create_temp(dirfd, c->final, c->tmp);
    if (c->fd < 0 || ckpt__io_ftruncate(c->fd, (off_t)k->size) != 0) {
        ckpt__cache_end(c);
        return NULL;
    }
    return c;
}

bool ckpt__cache_write(ckpt__cache_copy *c, const void *data, size_t n, uint64_t offset) {
    return !atomic_load(&c->committed) && ckpt__pwrite_full(c->fd, data, n, offset, NULL, NULL) == CKPT_OK;
}

ckpt_status ckpt__cache_commit(ckpt__cache_copy *c, const char *shown, ckpt_error *err) {
    /* Durable and, when the server stated its SHA-256, proven, before it
     * has the name a later open trusts. */
    if (ckpt__io_fsync(c->fd) != 0)
        return ckpt__fail_errno(err, errno, shown, -1, "cannot sync its copy in the cache directory");
    if (c->sha256[0] && !hashes_to(c->fd, c->size, c->sha256))
        return ckpt__fail(err, CKPT__D(CHECKSUM), shown, NULL, -1,
                          "the %llu bytes the server sent do not hash to the SHA-256 it states (%s): no copy is kept",
                          (unsigned long long)c->size, c->sha256);
    if (ckpt__io_renameat2(c->dirfd, c->tmp, c->dirfd, c->final, 0) != 0)
        return ckpt__fail_errno(err, errno, shown, -1, "cannot rename its copy into place in the cache directory");
    atomic_store(&c->committed, true);
    ckpt__io_fsync(c->dirfd);
    struct stat sb;
    if (fstat(c->fd, &sb) == 0) write_stamp(c->dirfd, c->final, &sb, c->sha256);
    return CKPT_OK;
}

ckpt_status ckpt__cache_read(ckpt__cache_copy *c, void *dst, uint64_t n, uint64_t offset, const char *shown,
                             ckpt_error *err) {
    return ckpt__pread_full(c->fd, dst, n, offset, shown, err);
}

void ckpt__cache_end(ckpt__cache_copy *c) {
    if (!c) return;
    if (c->fd >= 0) {
        if (!atomic_load(&c->committed)) unlinkat(c->dirfd, c->tmp, 0);
        close(c->fd);
    }
    close(c->dirfd);
    free(c);
}
