/* beneath.c — see beneath.h. */
#include "beneath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

enum {
    MAX_LINKS = 40,  /* symbolic links one name may go through (the kernel's own limit) */
    MAX_DEPTH = 256, /* directories one walk may be inside at once */
    RETRIES = 8,     /* openat2 answers EAGAIN when a rename raced its ".." */
};

struct ckpt__beneath {
    int fd;             /* the directory (O_PATH) */
    char *path;         /* as named */
    int blobs;          /* Hugging Face cache: the repo folder's blobs/ (O_PATH), or -1 */
    int store;          /* ... and the cache-wide store of shared blobs, <cache>/blobs/, or -1 */
    unsigned hub_depth; /* Hugging Face cache: levels from the repo folder down to the directory */
};

/* ---- resolving a name beneath a directory ---------------------------------- */

/* 1: openat2 works, -1: the kernel has none (ENOSYS, remembered). */
static atomic_int openat2_state;

static bool use_openat2(void) {
    const char *off = getenv("CKPT_NO_OPENAT2");
    return atomic_load(&openat2_state) >= 0 && !(off && *off && strcmp(off, "0"));
}

static int resolve_openat2(int dirfd, const char *rel, int flags, bool links) {
    struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC),
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | (links ? 0 : RESOLVE_NO_SYMLINKS)};
    for (int i = 0;; i++) {
        int fd = ckpt__io_openat2(dirfd, rel, &how, sizeof how);
        if (fd >= 0 || errno != EAGAIN || i == RETRIES) return fd;
    }
}

/* The directories a walk is inside: each an O_PATH descriptor it owns,
 * above `base` (which it does not). */
typedef struct walk {
    int base;
    int dirs[MAX_DEPTH];
    int depth;
} walk;

static int walk_here(const walk *w) { return w->depth ? w->dirs[w->depth - 1] : w->base; }

/* The next component of `s` (skipping slashes), its length in *len (0 at
 * the end). */
static const char *next_component(const char *s, size_t *len) {
    while (*s == '/') s++;
    *len = strcspn(s, "/");
    return s;
}

static bool is_dots(const char *s, size_t n, size_t dots) { return n == dots && !strncmp(s, "..", dots); }

/* `target` followed by what remained after a symbolic link, as the path
 * still to walk (malloc'ed), or NULL. */
static char *link_spliced(const char *target, const char *rest) {
    size_t a = strlen(target), b = strlen(rest);
    char *p = ckpt__malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, target, a);
    p[a] = '/';
    memcpy(p + a + 1, rest, b + 1);
    return p;
}

/*
 * The fallback of openat2(RESOLVE_BENEATH): one component at a time, each
 * opened with O_NOFOLLOW relative to the last.  A symbolic link is read
 * (readlinkat) and its target walked in its place: an absolute target, or
 * a ".." above `base`, leads out (EXDEV).  With `links` false any link
 * fails (ELOOP).  Returns the descriptor opened with `flags`, or -1 with
 * errno.
 */
static int resolve_walk(int base, const char *rel, int flags, bool links) {
    walk w = {.base = base};
    char *path = ckpt__strdup(rel);
    if (!path) {
        errno = ENOMEM;
        return -1;
    }
    const char *p = path;
    int result = -1, e = 0, followed = 0;
    for (;;) {
        size_t n;
        p = next_component(p, &n);
        const char *rest = p + n;
        size_t after;
        bool last = (next_component(rest, &after), after == 0);
        if (n == 0) { /* nothing left: the directory reached */
            result = ckpt__io_openat(walk_here(&w), ".", flags | O_CLOEXEC);
            e = errno;
            break;
        }
        if (is_dots(p, n, 1)) {
            p = rest;
            continue;
        }
        if (is_dots(p, n, 2)) {
            if (!w.depth) {
                e = EXDEV;
                break;
            }
            close(w.dirs[--w.depth]);
            p = rest;
            continue;
        }
        if (n > NAME_MAX) {
            e = ENAMETOOLONG;
            break;
        }
        char name[NAME_MAX + 1];
        memcpy(name, p, n);
        name[n] = '\0';
        if (!last) {
            int fd = ckpt__io_openat(walk_here(&w), name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (fd >= 0 && w.depth == MAX_DEPTH) {
                close(fd);
                e = ENAMETOOLONG;
                break;
            }
            if (fd >= 0) {
                w.dirs[w.depth++] = fd;
                p = rest;
                continue;
            }
            if (errno != ENOTDIR && errno != ELOOP) {
                e = errno;
                break;
            }
        }
        /* A symbolic link, or (last) a file to open. */
        char target[PATH_MAX];
        ssize_t len = ckpt__io_readlinkat(walk_here(&w), name, target, sizeof target);
        if (len < 0 && errno == EINVAL && last) { /* not a link */
            result = ckpt__io_openat(walk_here(&w), name, flags | O_NOFOLLOW | O_CLOEXEC);
            e = errno;
            break;
        }
        if (len < 0) {
            e = errno == EINVAL ? ENOTDIR : errno;
            break;
        }
        if (!links || ++followed > MAX_LINKS || (size_t)len == sizeof target) {
            e = (size_t)len == sizeof target ? ENAMETOOLONG : ELOOP;
            break;
        }
        target[len] = '\0';
        if (target[0] == '/' || len == 0) {
            e = target[0] == '/' ? EXDEV : ENOENT;
            break;
        }
        char *next = link_spliced(target, rest);
        if (!next) {
            e = ENOMEM;
            break;
        }
        free(path);
        path = next;
        p = path;
    }
    while (w.depth) close(w.dirs[--w.depth]);
    free(path);
    if (result < 0) errno = e;
    return result;
}

/* Opens `rel` beneath `dirfd` with `flags` (O_CLOEXEC added): openat2, or
 * the walk where the kernel has no openat2.  -1 with errno (EXDEV: the
 * name leads out of the directory). */
static int resolve(int dirfd, const char *rel, int flags, bool links) {
    if (!*rel) rel = ".";
    if (use_openat2()) {
        int fd = resolve_openat2(dirfd, rel, flags, links);
        if (fd >= 0 || (errno != ENOSYS && errno != EPERM)) return fd;
        /* ENOSYS: no openat2 (Linux < 5.6); EPERM: a seccomp filter
         * (older container runtimes) refuses the call it does not know. */
        if (errno == ENOSYS) atomic_store(&openat2_state, -1);
    }
    return resolve_walk(dirfd, rel, flags, links);
}

/*
 * The file `rel` names beneath `dirfd`, looked at before it is opened for
 * reading: its O_PATH descriptor is fstat'ed, so a FIFO or a device is
 * never opened.  Returns a descriptor for reading (O_NONBLOCK: a FIFO
 * swapped in meanwhile does not block, and is caught by the inode check)
 * with *st, -2 when it is not a regular file (*st says what), or -1 with
 * errno when it cannot be reached.
 */
static int open_at(int dirfd, const char *rel, bool links, struct stat *st) {
    int probe = resolve(dirfd, rel, O_PATH, links);
    if (probe < 0) return -1;
    int rc = fstat(probe, st);
    int e = errno;
    close(probe);
    if (rc != 0) {
        errno = e;
        return -1;
    }
    if (!S_ISREG(st->st_mode)) return -2;
    int fd = resolve(dirfd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY, links);
    if (fd < 0) return -1;
    struct stat now;
    rc = fstat(fd, &now);
    e = errno;
    if (rc == 0 && S_ISREG(now.st_mode) && now.st_dev == st->st_dev && now.st_ino == st->st_ino) {
        ckpt__fd_blocking(fd);
        *st = now;
        return fd;
    }
    close(fd);
    if (rc != 0) {
        errno = e;
        return -1;
    }
    if (!S_ISREG(now.st_mode)) {
        *st = now;
        return -2;
    }
    errno = EAGAIN; /* another file took its name between the two opens */
    return -1;
}

/* ---- the Hugging Face cache ------------------------------------------------ */

/* Whether `s` (n bytes) is a Hub cache repo folder's name. */
static bool hub_repo_name(const char *s, size_t n) {
    static const char *const kinds[] = {"models--", "datasets--", "spaces--"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t k = strlen(kinds[i]);
        if (n > k && !strncmp(s, kinds[i], k)) return true;
    }
    return false;
}

/* How many levels the directory at (physical, absolute) `real` lies below
 * a Hub cache repo folder, through snapshots/<rev>/ — 2 for the snapshot
 * itself, more for a subfolder of it — or 0 when it is in no snapshot. */
static unsigned hub_levels(const char *real) {
    const char *comp[MAX_DEPTH];
    size_t len[MAX_DEPTH], count = 0, n;
    for (const char *p = next_component(real, &n); n && count < MAX_DEPTH; p = next_component(p + n, &n))
        comp[count] = p, len[count++] = n;
    for (size_t i = count; i-- > 0;)
        if (i + 2 < count && hub_repo_name(comp[i], len[i]) && len[i + 1] == 9 && !strncmp(comp[i + 1], "snapshots", 9))
            return (unsigned)(count - 1 - i);
    return 0;
}

/* The repo folder's blobs/ above the directory `fd` named `dir`, when `dir`
 * is (in) a snapshot of the Hub cache: *levels says how far up the repo
 * folder is.  -1 otherwise. */
static int hub_blobs(int fd, const char *dir, unsigned *levels) {
    char *real = realpath(dir, NULL); /* where the links' "../" lead: the physical parents */
    *levels = real ? hub_levels(real) : 0;
    free(real);
    if (!*levels) return -1;
    char up[3 * MAX_DEPTH + 8] = "";
    for (unsigned i = 0; i < *levels; i++) strcat(up, "../");
    strcat(up, "blobs");
    int blobs = ckpt__io_openat(fd, up, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (blobs < 0) *levels = 0;
    return blobs;
}

/* The cache-wide store of shared blobs beside the repo folder whose blobs/
 * is `blobs` — <cache>/blobs/, which huggingface_hub marks with a file
 * .huggingface-shared-blobs — or -1. */
static int hub_store(int blobs) {
    int store = ckpt__io_openat(blobs, "../../blobs", O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat sb;
    if (store >= 0 && (fstatat(store, ".huggingface-shared-blobs", &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
                       !S_ISREG(sb.st_mode))) {
        close(store);
        store = -1;
    }
    return store;
}

/* The target of the link `file` in `dir`, NUL-terminated, in `target`
 * (PATH_MAX bytes); -1 with errno (EINVAL: not a link). */
static ssize_t read_link(int dir, const char *file, char *target) {
    ssize_t len = ckpt__io_readlinkat(dir, file, target, PATH_MAX - 1);
    if (len >= 0) target[len] = '\0';
    return len;
}

/* What follows "../" × `ups` + `dir` + "/" in the link target `t`, or NULL. */
static const char *link_into(const char *t, unsigned ups, const char *dir) {
    for (unsigned i = 0; i < ups; i++, t += 3)
        if (strncmp(t, "../", 3)) return NULL;
    size_t n = strlen(dir);
    return strncmp(t, dir, n) || t[n] != '/' ? NULL : t + n + 1;
}

/* A file name of one component (not "." or ".."). */
static bool plain_name(const char *s) {
    size_t n = strlen(s);
    return n && !strchr(s, '/') && !is_dots(s, n, 1) && !is_dots(s, n, 2);
}

/* A repo blob that huggingface_hub moved into the shared store: a link to
 * exactly ../../blobs/<xx>/<hash> (64 hex digits, xx its first two), opened
 * in the store without following anything further.  Like open_at. */
static int open_in_store(const ckpt__beneath *b, const char *blob, struct stat *st) {
    char target[PATH_MAX];
    if (b->store < 0 || read_link(b->blobs, blob, target) < 0) {
        errno = EXDEV;
        return -1;
    }
    const char *hash = link_into(target, 2, "blobs");
    bool shared = hash && strlen(hash) == 67 && hash[2] == '/' && !strncmp(hash, hash + 3, 2) &&
                  strspn(hash + 3, "0123456789abcdef") == 64;
    if (!shared) {
        errno = EXDEV;
        return -1;
    }
    int fd = open_at(b->store, hash, false, st);
    if (fd == -1 && errno == ELOOP) errno = EXDEV;
    return fd;
}

/*
 * `rel` through the Hub cache's links: a file of the snapshot that is a
 * symbolic link to exactly "../" × depth + "blobs/<name>", the repo
 * folder's blobs/ (huggingface_hub's _create_symlink makes them relative,
 * so), opened in blobs/ — or, where the hub moved that blob into its
 * shared store, there — without following anything further.  The
 * directories on the way must be real ones beneath the directory.  Like
 * open_at; EXDEV when `rel` is no such link.
 */
static int open_in_blobs(const ckpt__beneath *b, const char *rel, struct stat *st) {
    const char *slash = strrchr(rel, '/');
    char *parent = slash ? ckpt__strndup(rel, (size_t)(slash - rel)) : ckpt__strdup(".");
    if (!parent) {
        errno = ENOMEM;
        return -1;
    }
    unsigned levels = b->hub_depth;
    size_t n;
    for (const char *p = next_component(parent, &n); n; p = next_component(p + n, &n))
        if (!is_dots(p, n, 1)) levels++;
    int dir = resolve(b->fd, parent, O_PATH | O_DIRECTORY, false);
    free(parent);
    if (dir < 0) {
        if (errno == ELOOP) errno = EXDEV;
        return -1;
    }
    char target[PATH_MAX];
    ssize_t len = read_link(dir, slash ? slash + 1 : rel, target);
    int e = errno;
    close(dir);
    const char *blob = len < 0 ? NULL : link_into(target, levels, "blobs");
    if (!blob || !plain_name(blob)) {
        errno = len < 0 && e != EINVAL ? e : EXDEV;
        return -1;
    }
    int fd = open_at(b->blobs, blob, false, st);
    if (fd == -1 && errno == ELOOP) fd = open_in_store(b, blob, st);
    return fd;
}

/* ---- the directory --------------------------------------------------------- */

ckpt_status ckpt__beneath_open_root(const char *dir, ckpt__beneath **out, ckpt_error *err) {
    *out = NULL;
    ckpt__beneath *b = ckpt__calloc(1, sizeof *b);
    if (!b || !(b->path = ckpt__strdup(dir))) {
        free(b);
        return ckpt__oom(err, dir, NULL);
    }
    b->blobs = b->store = -1;
    b->fd = ckpt__io_open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (b->fd < 0) {
        ckpt_status st = ckpt__fail_errno(err, errno, dir, -1, "cannot open the checkpoint's directory");
        ckpt__beneath_close(b);
        return st;
    }
    b->blobs = hub_blobs(b->fd, dir, &b->hub_depth);
    if (b->blobs >= 0) b->store = hub_store(b->blobs);
    *out = b;
    return CKPT_OK;
}

void ckpt__beneath_close(ckpt__beneath *b) {
    if (!b) return;
    if (b->fd >= 0) close(b->fd);
    if (b->blobs >= 0) close(b->blobs);
    if (b->store >= 0) close(b->store);
    free(b->path);
    free(b);
}


/* The part of `name` below the directory (pointing into `name`; "" for the
 * directory itself).  A name elsewhere, or with a ".." component, is
 * refused. */
static ckpt_status relative(const ckpt__beneath *b, const char *name, const char **rel, ckpt_error *err) {
    const char *r = b->path, *n = name;
    size_t rl, nl;
    bool inside = (*r == '/') == (*n == '/');
    for (r = next_component(r, &rl); inside && rl; r = next_component(r + rl, &rl)) {
        if (is_dots(r, rl, 1)) continue;
        for (n = next_component(n, &nl); is_dots(n, nl, 1); n = next_component(n + nl, &nl)) {
        }
        inside = rl == nl && !memcmp(r, n, rl);
        n += nl;
    }
    if (!inside)
        return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1, "is not inside the checkpoint's directory %s",
                          b->path);
    for (n = next_component(n, &nl); is_dots(n, nl, 1); n = next_component(n + nl, &nl)) {
    }
    *rel = n;
    for (const char *p = n; nl; p = next_component(p + nl, &nl))
        if (is_dots(p, nl, 2))
            return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1,
                              "has a '..' component: a file of a checkpoint is inside its directory %s", b->path);
    return CKPT_OK;
}

static const char *kind_of(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISSOCK(mode) ? "a socket"
         : S_ISCHR(mode) ? "a character device" : S_ISBLK(mode) ? "a block device"
         : S_ISLNK(mode) ? "a symbolic link" : "not a regular file";
}

/* CKPT_E_UNSAFE_PATH for a name that leads out, quoting the link at its
 * end when there is one. */
static ckpt_status refuse_outside(const ckpt__beneath *b, const char *name, const char *rel, ckpt_error *err) {
    const char *slash = strrchr(rel, '/');
    char *parent = slash ? ckpt__strndup(rel, (size_t)(slash - rel)) : ckpt__strdup(".");
    int dir = parent ? resolve(b->fd, parent, O_PATH | O_DIRECTORY, true) : -1;
    free(parent);
    char target[PATH_MAX];
    ssize_t len = dir >= 0 ? read_link(dir, slash ? slash + 1 : rel, target) : -1;
    if (dir >= 0) close(dir);
    const char *hub = b->blobs >= 0 ? " (in a Hugging Face cache snapshot only links to the repo's blobs/ are followed)"
                                    : "";
    if (len < 0)
        return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1,
                          "leads out of the checkpoint's directory %s through a symbolic link%s", b->path, hub);
    return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1,
                      "is a symbolic link to '%s', which leads out of the checkpoint's directory %s%s", target, b->path,
                      hub);
}

ckpt_status ckpt__beneath_open(const ckpt__beneath *b, const char *name, bool skip_dirs, int *fd, uint64_t *size,
                               ckpt_error *err) {
    *fd = -1;
    const char *rel;
    ckpt_status st = relative(b, name, &rel, err);
    if (st) return st;
    struct stat sb;
    int f = open_at(b->fd, rel, true, &sb);
    if (f == -1 && errno == EXDEV && b->blobs >= 0) f = open_in_blobs(b, rel, &sb);
    if (f == -1 && errno == EXDEV) return refuse_outside(b, name, rel, err);
    if (f == -1) return ckpt__fail_errno(err, errno, name, -1, "cannot open for reading");
    if (f == -2 && S_ISDIR(sb.st_mode) && skip_dirs) return CKPT_OK;
    if (f == -2)
        return ckpt__fail(err, CKPT_E_UNSAFE_PATH, name, NULL, -1,
                          "is %s, not a regular file: a checkpoint's files are regular files", kind_of(sb.st_mode));
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return CKPT_OK;
}

void ckpt__beneath_free_names(char **names, size_t count) {
    for (size_t i = 0; names && i < count; i++) free(names[i]);
    free(names);
}

ckpt_status ckpt__beneath_list(const ckpt__beneath *b, const char *name, bool dots, char ***names, size_t *count,
                               ckpt_error *err) {
    *names = NULL;
    *count = 0;
    const char *rel;
    ckpt_status st = relative(b, name, &rel, err);
    if (st) return st;
    int fd = resolve(b->fd, rel, O_RDONLY | O_DIRECTORY | O_NONBLOCK, true);
    if (fd < 0 && errno == EXDEV) return refuse_outside(b, name, rel, err);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        st = ckpt__fail_errno(err, errno, name, -1, "cannot list the directory");
        if (fd >= 0) close(fd);
        return st;
    }
    char **list = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *e; st == CKPT_OK && (e = readdir(d));) {
        if (e->d_name[0] == '.' && (!dots || !strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))) continue;
        char **grown = ckpt__grow(list, n, &cap, sizeof *grown, 16);
        if (!grown) {
            st = ckpt__oom(err, name, NULL);
            break;
        }
        list = grown;
        if (!(list[n] = ckpt__strdup(e->d_name))) st = ckpt__oom(err, name, NULL);
        else n++;
    }
    closedir(d);
    if (st) {
        ckpt__beneath_free_names(list, n);
        return st;
    }
    if (n > 1) qsort(list, n, sizeof *list, ckpt__cmp_str);
    *names = list;
    *count = n;
    return CKPT_OK;
}

bool ckpt__beneath_has(const ckpt__beneath *b, const char *file) {
    struct stat sb;
    return !strchr(file, '/') && fstatat(b->fd, file, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

uint64_t ckpt__beneath_file_bytes(const ckpt__beneath *b) {
    char **names;
    size_t n;
    ckpt_error ignored;
    if (ckpt__beneath_list(b, b->path, false, &names, &n, &ignored)) return 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st; /* the entry itself, never through a link */
        if (fstatat(b->fd, names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
            !ckpt__add_u64(total, (uint64_t)st.st_size, &total))
            total = UINT64_MAX;
    }
    ckpt__beneath_free_names(names, n);
    return total;
}
