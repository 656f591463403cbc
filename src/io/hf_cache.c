/*
 * hf_cache.c — the Hugging Face Hub's cache (layout in hf.h), written as
 * huggingface_hub writes it so that each tool finds what the other
 * downloaded: the same blob names, relative snapshot links, refs and lock
 * files (filelock's: flock on <etag>.lock), so that two processes — ckpt
 * or huggingface_hub — never write one entry at once.
 *
 * Everything below the cache directory (which the user named, through
 * $HF_HUB_CACHE or $HF_HOME) is reached from its descriptor one plain
 * component at a time, without following a link (O_NOFOLLOW), and a file
 * is used only if it is a regular one: a planted link cannot send a write
 * out of the cache.  A blob appears under its final name only complete
 * and of the stated SHA-256 (renamed from its .incomplete).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/sha256.h"
#include "file.h"
#include "http.h"
#include "hf.h"

enum { HASH_CHUNK = 1 << 20 };

char *ckpt__hf_cache_dir(void) {
    const char *v = getenv("HF_HUB_CACHE");
    if (v && *v) return ckpt__strdup(v);
    ckpt__buf b = {0};
    const char *home = getenv("HF_HOME"), *xdg = getenv("XDG_CACHE_HOME"), *user = getenv("HOME");
    if (home && *home) {
        ckpt__buf_puts(&b, home);
    } else if (xdg && *xdg) {
        ckpt__buf_puts(&b, xdg);
        ckpt__buf_puts(&b, "/huggingface");
    } else if (user && *user) {
        ckpt__buf_puts(&b, user);
        ckpt__buf_puts(&b, "/.cache/huggingface");
    } else {
        return NULL;
    }
    ckpt__buf_puts(&b, "/hub");
    return ckpt__buf_text(&b);
}

/* "models--org--name" (malloc'ed). */
static char *folder_name(const char *repo) {
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, "models--");
    for (const char *p = repo; *p; p++) {
        if (*p == '/') ckpt__buf_puts(&b, "--");
        else ckpt__buf_append(&b, p, 1);
    }
    return ckpt__buf_text(&b);
}

char *ckpt__hf_repo_folder(const char *cache, const char *repo) {
    char *f = folder_name(repo);
    char *p = f ? ckpt__path_join(cache, f) : NULL;
    free(f);
    return p;
}

/* The directory `rel` ("a/b/c", plain components) beneath `dirfd`, made
 * where missing, each component opened without following a link; -1 with
 * errno. */
static int open_dirs(int dirfd, const char *rel, size_t len, bool create) {
    int fd = ckpt__io_openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (size_t at = 0; fd >= 0 && at < len;) {
        size_t n = 0;
        while (at + n < len && rel[at + n] != '/') n++;
        char comp[256];
        if (!n || n >= sizeof comp || (n == 1 && rel[at] == '.') || (n == 2 && !strncmp(rel + at, "..", 2))) {
            close(fd);
            errno = EINVAL;
            return -1;
        }
        memcpy(comp, rel + at, n);
        comp[n] = '\0';
        if (create && mkdirat(fd, comp, 0777) != 0 && errno != EEXIST) {
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        int next = ckpt__io_openat(fd, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(fd);
        errno = e;
        fd = next;
        at += n + (at + n < len);
    }
    return fd;
}

/* The cache's directory `rel`, as open_dirs. */
static int cache_dirs(const char *cache, const char *rel, bool create) {
    if (create) {
        /* The cache and its missing parents ($HF_HOME, ~/.cache on a fresh
         * account), as huggingface_hub's makedirs makes them; a failure
         * shows as the open's below. */
        ckpt_error ignored = {0};
        ckpt__make_directories(cache, &ignored);
    }
    int root = ckpt__io_open(cache, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) return -1;
    int fd = open_dirs(root, rel, strlen(rel), create);
    int e = errno;
    close(root);
    errno = e;
    return fd;
}

/* A regular file `name` in `dir`, opened with `flags` (never through a
 * link, never a FIFO's open that blocks); -1 with errno. */
static int open_regular(int dir, const char *name, int flags, struct stat *sb) {
    int fd = ckpt__io_openat(dir, name, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) return -1;
    if (fstat(fd, sb) != 0 || !S_ISREG(sb->st_mode)) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

bool ckpt__hf_cache_ref(const char *cache, const char *repo, const char *ref, char commit[41]) {
    char *f = folder_name(repo);
    ckpt__buf rel = {0};
    ckpt__buf_puts(&rel, f ? f : "");
    ckpt__buf_puts(&rel, "/refs");
    free(f);
    int dir = !f || rel.failed ? -1 : cache_dirs(cache, rel.data, false);
    free(rel.data);
    if (dir < 0) return false;
    struct stat sb;
    int fd = strchr(ref, '/') ? -1 : open_regular(dir, ref, O_RDONLY, &sb);
    close(dir);
    if (fd < 0) return false;
    char text[64];
    ssize_t n = ckpt__io_pread(fd, text, sizeof text - 1, 0);
    close(fd);
    if (n < 40) return false;
    text[n] = '\0';
    for (int i = 0; i < 40; i++)
        if (!strchr("0123456789abcdef", text[i])) return false;
    if (text[40] && !strchr("\r\n", text[40])) return false;
    memcpy(commit, text, 40);
    commit[40] = '\0';
    return true;
}

/* ---- one download into blobs/<etag>.incomplete --------------------------------- */

/* The download's bytes: written in order at their offsets and hashed as
 * they stream (one pass), then handed to the tee; a restart from byte 0
 * starts all three again. */
typedef struct fill {
    int fd;
    uint64_t at;
    ckpt__sha256 sha;
    const ckpt__hf_tee *tee;
} fill;

static bool fill_sink(void *ctx, const void *data, size_t n, uint64_t offset) {
    fill *f = ctx;
    if (offset != f->at) {
        /* The tee hears of a restart before the partial blob is cut back. */
        if (offset == 0 && f->tee && !f->tee->bytes(f->tee->ctx, data, 0, 0)) return false;
        if (offset != 0 || ckpt__io_ftruncate(f->fd, 0) != 0) {
            if (offset) errno = EIO;
            return false;
        }
        ckpt__sha256_init(&f->sha);
        f->at = 0;
    }
    if (ckpt__pwrite_full(f->fd, data, n, f->at, NULL, NULL)) return false;
    ckpt__sha256_update(&f->sha, data, n);
    f->at += n;
    return !f->tee || f->tee->bytes(f->tee->ctx, data, n, f->at - n);
}

/* A resumed download: the bytes a cut one left, hashed (they are not sent
 * again). */
static ckpt_status resume(fill *f, uint64_t have, const char *shown, ckpt_error *err) {
    unsigned char *buf = ckpt__malloc(HASH_CHUNK);
    if (!buf) return ckpt__oom(err, shown, NULL);
    for (uint64_t at = 0; at < have;) {
        size_t want = have - at < HASH_CHUNK ? (size_t)(have - at) : HASH_CHUNK;
        ssize_t n = ckpt__io_pread(f->fd, buf, want, (off_t)at);
        if (n <= 0) break; /* shorter than it said: resume from here */
        ckpt__sha256_update(&f->sha, buf, (size_t)n);
        at += (uint64_t)n;
        f->at = at;
    }
    free(buf);
    return CKPT_OK;
}

/* The blob's name: the version tag without W/ and quotes, checked to be a
 * plain file name of the characters an ETag of the Hub holds. */
static bool blob_name(const char *tag, char *out, size_t cap) {
    if (!tag) return false;
    if (!strncmp(tag, "W/", 2)) tag += 2;
    size_t n = strlen(tag);
    if (n >= 2 && tag[0] == '"' && tag[n - 1] == '"') tag++, n -= 2;
    if (!n || n >= cap) return false;
    for (size_t i = 0; i < n; i++) {
        char c = tag[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '_'))
            return false;
    }
    memcpy(out, tag, n);
    out[n] = '\0';
    return true;
}

/* The link snapshots/<commit>/<path> → ../../blobs/<blob> (one "../" more
 * per folder of the path), replacing what was there. */
static bool link_snapshot(int repo, const ckpt__hf_entry *e, const char *blob) {
    ckpt__buf rel = {0}, target = {0};
    ckpt__buf_puts(&rel, "snapshots/");
    ckpt__buf_puts(&rel, e->commit);
    const char *slash = strrchr(e->path, '/');
    if (slash) {
        ckpt__buf_puts(&rel, "/");
        ckpt__buf_append(&rel, e->path, (size_t)(slash - e->path));
    }
    ckpt__buf_puts(&target, "../../");
    for (const char *p = e->path; *p; p++)
        if (*p == '/') ckpt__buf_puts(&target, "../");
    ckpt__buf_puts(&target, "blobs/");
    ckpt__buf_puts(&target, blob);
    bool ok = !rel.failed && !target.failed;
    int dir = ok ? open_dirs(repo, rel.data, rel.len, true) : -1;
    const char *name = slash ? slash + 1 : e->path;
    if (dir >= 0) {
        unlinkat(dir, name, 0);
        ok = symlinkat(target.data, dir, name) == 0 || errno == EEXIST;
        close(dir);
    }
    free(rel.data);
    free(target.data);
    return ok && dir >= 0;
}

/* refs/<ref> = the commit (a temporary renamed over it). */
static void write_ref(int repo, const ckpt__hf_entry *e) {
    if (!e->ref || !*e->ref || strchr(e->ref, '/') || e->ref[0] == '.') return;
    int dir = open_dirs(repo, "refs", 4, true);
    if (dir < 0) return;
    char tmp[300];
    snprintf(tmp, sizeof tmp, ".%s.ckpt-tmp-%ld", e->ref, (long)getpid());
    int fd = ckpt__io_openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    bool ok = fd >= 0 && ckpt__io_pwrite(fd, e->commit, 40, 0) == 40;
    if (fd >= 0) close(fd);
    if (!ok || ckpt__io_renameat2(dir, tmp, dir, e->ref, 0) != 0) unlinkat(dir, tmp, 0);
    close(dir);
}

/* The hub's lock of a blob: .locks/models--org--name/<blob>.lock, flock'ed
 * as filelock does; -1 when it cannot be taken (errno). */
static int take_lock(const ckpt__hf_entry *e, const char *folder, const char *blob) {
    ckpt__buf rel = {0};
    ckpt__buf_puts(&rel, ".locks/");
    ckpt__buf_puts(&rel, folder);
    int dir = rel.failed ? -1 : cache_dirs(e->cache, rel.data, true);
    free(rel.data);
    if (dir < 0) return -1;
    char name[300];
    snprintf(name, sizeof name, "%s.lock", blob);
    struct stat sb;
    int fd = open_regular(dir, name, O_RDWR | O_CREAT, &sb);
    close(dir);
    if (fd >= 0 && ckpt__io_flock(fd, LOCK_EX) != 0) {
        int er = errno;
        close(fd);
        errno = er;
        return -1;
    }
    return fd;
}

/* Downloads into blobs/<blob>.incomplete and renames it to blobs/<blob>,
 * under the lock; the blob's descriptor in *fd. */
static ckpt_status download_blob(const ckpt__hf_entry *e, int blobs, const char *blob, ckpt__source *remote,
                                 const char *sha256, const ckpt__hf_tee *tee, int *fd, ckpt_error *err) {
    struct stat sb;
    int have = open_regular(blobs, blob, O_RDONLY, &sb);
    if (have >= 0 && (uint64_t)sb.st_size == remote->size) { /* another process brought it meanwhile */
        *fd = have;
        return CKPT_OK;
    }
    if (have >= 0) close(have);
    char part[300];
    snprintf(part, sizeof part, "%s.incomplete", blob);
    fill f = {.fd = open_regular(blobs, part, O_RDWR | O_CREAT, &sb), .tee = tee};
    if (f.fd < 0) return ckpt__fail_errno(err, errno, e->shown, -1, "cannot write %s in the Hub's cache %s", part, e->cache);
    ckpt__sha256_init(&f.sha);
    ckpt_status st = CKPT_OK;
    if ((uint64_t)sb.st_size <= remote->size) st = resume(&f, (uint64_t)sb.st_size, e->shown, err);
    else if (ckpt__io_ftruncate(f.fd, 0) != 0) st = ckpt__fail_errno(err, errno, e->shown, -1, "cannot restart %s", part);
    if (st == CKPT_OK && tee) tee->begin(tee->ctx, f.fd, f.at);
    if (st == CKPT_OK) st = ckpt__remote_fetch(remote, f.at, fill_sink, &f, err);
    if (st == CKPT_OK && f.at != remote->size)
        st = ckpt__fail(err, CKPT_E_TRUNCATED, e->shown, NULL, (int64_t)f.at, "the download ended at byte %llu of %llu",
                        (unsigned long long)f.at, (unsigned long long)remote->size);
    unsigned char digest[32];
    char hex[65];
    ckpt__sha256_final(&f.sha, digest);
    ckpt__sha256_hex(digest, hex);
    if (st == CKPT_OK && sha256 && strcmp(hex, sha256) != 0) {
        st = ckpt__fail(err, CKPT__D(CHECKSUM), e->shown, NULL, -1,
                        "the downloaded bytes of %s at revision %s have SHA-256 %s, but the Hub states %s: the copy "
                        "is corrupt and was not kept", e->path, e->commit, hex, sha256);
        unlinkat(blobs, part, 0); /* a resumed download may be what is wrong: nothing of it is kept */
    }
    if (st == CKPT_OK && ckpt__io_fsync(f.fd) != 0) st = ckpt__fail_errno(err, errno, e->shown, -1, "cannot sync %s", part);
    if (st == CKPT_OK && ckpt__io_renameat2(blobs, part, blobs, blob, 0) != 0)
        st = ckpt__fail_errno(err, errno, e->shown, -1, "cannot rename %s into place in the Hub's cache", part);
    if (st) {
        close(f.fd);
        return st;
    }
    ckpt__io_fsync(blobs);
    *fd = f.fd;
    return CKPT_OK;
}

ckpt_status ckpt__hf_cache_fill(const ckpt__hf_entry *e, ckpt__source *remote, const char *sha256,
                                const ckpt__hf_tee *tee, int *fd, ckpt_error *err) {
    *fd = -1;
    const char *stated = NULL;
    const char *tag = ckpt__remote_version(remote, &stated);
    if (!sha256) sha256 = stated;
    char blob[200];
    if (!blob_name(tag, blob, sizeof blob))
        return ckpt__fail(err, CKPT__D(BAD_RESPONSE), e->shown, NULL, -1,
                          "the server gave no usable ETag or X-Linked-Etag to name the file in the Hub's cache");
    char *folder = folder_name(e->repo);
    if (!folder) return ckpt__oom(err, e->shown, NULL);
    int repo = cache_dirs(e->cache, folder, true);
    int blobs = repo >= 0 ? open_dirs(repo, "blobs", 5, true) : -1;
    ckpt_status st = CKPT_OK;
    if (blobs < 0) st = ckpt__fail_errno(err, errno, e->shown, -1, "cannot write into the Hub's cache %s", e->cache);
    int lock = st == CKPT_OK ? take_lock(e, folder, blob) : -1;
    if (st == CKPT_OK && lock < 0)
        st = ckpt__fail_errno(err, errno, e->shown, -1, "cannot take the Hub cache's lock of %s", blob);
    if (st == CKPT_OK) st = download_blob(e, blobs, blob, remote, sha256, tee, fd, err);
    if (st == CKPT_OK && !link_snapshot(repo, e, blob))
        st = ckpt__fail_errno(err, errno, e->shown, -1, "cannot link snapshots/%s/%s in the Hub's cache", e->commit,
                              e->path);
    if (st == CKPT_OK) write_ref(repo, e);
    if (lock >= 0) close(lock); /* closing releases the flock */
    if (blobs >= 0) close(blobs);
    if (repo >= 0) close(repo);
    free(folder);
    if (st && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    return st;
}
