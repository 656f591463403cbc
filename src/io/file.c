/* file.c — see file.h. */
#include "file.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

/* Linux caps one read/write at 0x7ffff000 bytes; stay under it. */
enum { MAX_IO = 1 << 30 };
/* Writes through the page cache go in pieces of at most this: a file
 * system with large folios (ext4, XFS) sizes each new page-cache folio by
 * the write that creates it, and a folio over 32 KiB (an order above
 * PAGE_ALLOC_COSTLY_ORDER) is taken from whole free blocks, compacting
 * memory for them — blocks that a VM has often handed back to its host,
 * each touch then a host fault.  A 1 GB Q8_0 GGUF converted to 1.9 GB of
 * bf16 on ext4 took 1.65 to 1.8 times less time and CPU in 32 KiB pieces
 * than in the engine's 8 MiB boxes (bench/q8_to_bf16_quick.py, a 2-vCPU
 * VM), a 0.8 GB ckpt.save in a fresh process 3.7 s against 6.5 s.  On
 * tmpfs (order-0 pages: nothing to gain) the extra calls cost about 7% of
 * the write's CPU (0.91 s against 0.85 s for 1.9 GB): writes there go
 * whole (write_piece).  Large writes win
 * only where as much memory was just freed in large blocks (the same file
 * saved again and again in one process: 0.7 s against 1.4 s there). */
enum { WRITE_PIECE = CKPT__WRITE_PIECE };
#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

/* The most one write call to fd takes: WRITE_PIECE, except on tmpfs, whose
 * folios the write's size does not choose (pieces would only add calls). */
static uint64_t write_piece(int fd, uint64_t n) {
    if (n <= WRITE_PIECE) return WRITE_PIECE;
    struct statfs s;
    return fstatfs(fd, &s) == 0 && (unsigned long)s.f_type == TMPFS_MAGIC ? MAX_IO : WRITE_PIECE;
}

/* Buffer of the pread/pwrite fallback copy, and the granularity of progress. */
enum { COPY_CHUNK = 8 << 20, COPY_TICK = 64 << 20, CLONE_BLOCK = 4096 /* the usual file system block */ };

ckpt_status ckpt__file_open_read(const char *path, int *fd, uint64_t *size, ckpt_error *err) {
    /* O_NONBLOCK: a FIFO is refused below rather than waited on. */
    int f = ckpt__io_open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) return ckpt__fail_errno(err, errno, path, -1, "cannot open for reading");
    struct stat st;
    if (fstat(f, &st) != 0) {
        int e = errno;
        close(f);
        return ckpt__fail_errno(err, e, path, -1, "cannot stat");
    }
    if (!S_ISREG(st.st_mode)) {
        close(f);
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, path, NULL, -1, "not a regular file");
    }
    ckpt__fd_blocking(f);
    *fd = f;
    *size = (uint64_t)st.st_size;
    return CKPT_OK;
}

void ckpt__fd_blocking(int fd) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0 && (flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

ckpt_status ckpt__pread_full(int fd, void *buf, uint64_t n, uint64_t offset, const char *path,
                             ckpt_error *err) {
    char *p = buf;
    while (n > 0) {
        size_t want = n > MAX_IO ? MAX_IO : (size_t)n;
        ssize_t got = ckpt__io_pread(fd, p, want, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return ckpt__fail_errno(err, errno, path, (int64_t)offset, "read failed");
        }
        if (got == 0)
            return ckpt__fail(err, CKPT_E_TRUNCATED, path, NULL, (int64_t)offset,
                              "file ends %llu bytes early", (unsigned long long)n);
        p += got;
        n -= (uint64_t)got;
        offset += (uint64_t)got;
    }
    return CKPT_OK;
}

ckpt_status ckpt__pwrite_full(int fd, const void *buf, uint64_t n, uint64_t offset, const char *path,
                              ckpt_error *err) {
    const char *p = buf;
    uint64_t piece = write_piece(fd, n);
    while (n > 0) {
        /* Pieces end on multiples of WRITE_PIECE in the file, so that each
         * fills whole pages: a write that ends inside a page of a hole
         * (the output is sized before its data comes) zeroes the rest of
         * it, and the next write finishes it — 1.9 GB in 32 KiB writes
         * 100 bytes off the pages took 1.6 times the system time of
         * aligned ones (1.28 s against 0.78 s, ext4, a 2-vCPU VM). */
        uint64_t to_edge = piece == WRITE_PIECE ? WRITE_PIECE - offset % WRITE_PIECE : piece;
        size_t want = n > to_edge ? (size_t)to_edge : (size_t)n;
        ssize_t put = ckpt__io_pwrite(fd, p, want, (off_t)offset);
        if (put < 0) {
            if (errno == EINTR) continue;
            return ckpt__fail_errno(err, errno, path, (int64_t)offset, "write failed");
        }
        if (put == 0) return ckpt__fail_errno(err, ENOSPC, path, (int64_t)offset, "write made no progress");
        p += put;
        n -= (uint64_t)put;
        offset += (uint64_t)put;
    }
    return CKPT_OK;
}

static ckpt_status copy_by_buffer(int src_fd, uint64_t src_offset, const char *src_path, int dst_fd,
                                  uint64_t dst_offset, const char *dst_path, uint64_t n,
                                  uint64_t done, ckpt__copy_tick tick, void *user, ckpt_error *err) {
    size_t cap = n - done < COPY_CHUNK ? (size_t)(n - done) : COPY_CHUNK;
    char *buf = ckpt__malloc(cap ? cap : 1);
    if (!buf) return ckpt__fail(err, CKPT_E_NO_MEMORY, dst_path, NULL, -1, "cannot allocate copy buffer");
    ckpt_status st = CKPT_OK;
    uint64_t since_tick = 0;
    while (done < n && st == CKPT_OK) {
        size_t len = n - done < cap ? (size_t)(n - done) : cap;
        st = ckpt__pread_full(src_fd, buf, len, src_offset + done, src_path, err);
        if (st == CKPT_OK) st = ckpt__pwrite_full(dst_fd, buf, len, dst_offset + done, dst_path, err);
        done += len;
        since_tick += len;
        if (st == CKPT_OK && tick && (since_tick >= COPY_TICK || done == n)) {
            since_tick = 0;
            if (tick(done, user)) st = ckpt__fail(err, CKPT_E_CANCELLED, dst_path, NULL, -1, "cancelled");
        }
    }
    free(buf);
    return st;
}

void ckpt__clone_blocks(int src_fd, uint64_t src_offset, int dst_fd, uint64_t dst_offset, uint64_t n,
                        uint64_t *begin, uint64_t *end) {
    *begin = *end = 0;
    if (src_offset % CLONE_BLOCK != dst_offset % CLONE_BLOCK) return;
    uint64_t head = (CLONE_BLOCK - src_offset % CLONE_BLOCK) % CLONE_BLOCK;
    if (head >= n || (n - head) / CLONE_BLOCK == 0) return;
    uint64_t whole = (n - head) / CLONE_BLOCK * CLONE_BLOCK;
    struct file_clone_range r = {.src_fd = src_fd, .src_offset = src_offset + head, .src_length = whole,
                                 .dest_offset = dst_offset + head};
    if (ioctl(dst_fd, FICLONERANGE, &r) == 0) *begin = head, *end = head + whole;
}

bool ckpt__can_clone_into(int src_fd, const char *dir) {
    struct stat from;
    if (src_fd < 0 || !dir || fstat(src_fd, &from) != 0 || !S_ISREG(from.st_mode)) return false;
    /* O_TMPFILE: no name ever appears, and the kernel removes the file
     * however this process ends. */
    int probe = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (probe < 0) return false;
    struct stat st;
    bool shares = false;
    if (fstat(probe, &st) == 0) {
        /* Whole blocks, or the file's end: a clone of a partial block is
         * refused unless it reaches the source's end. */
        uint64_t block = st.st_blksize > 0 ? (uint64_t)st.st_blksize : CLONE_BLOCK;
        struct file_clone_range r = {.src_fd = src_fd, .src_offset = 0,
                                     .src_length = (uint64_t)from.st_size >= block ? block : 0, .dest_offset = 0};
        shares = ioctl(probe, FICLONERANGE, &r) == 0;
    }
    close(probe);
    return shares;
}

ckpt_status ckpt__copy_range(int src_fd, uint64_t src_offset, const char *src_path, int dst_fd,
                             uint64_t dst_offset, const char *dst_path, uint64_t n,
                             ckpt__copy_tick tick, void *user, ckpt_error *err) {
    uint64_t done = 0;
    while (done < n) {
        size_t want = n - done > COPY_TICK ? COPY_TICK : (size_t)(n - done);
        /* Up to the source's next block first: the rest then starts on a
         * block, and the kernel shares blocks (a reflink) wherever the
         * output's offset agrees with it modulo the block size. */
        uint64_t into_block = (src_offset + done) % CLONE_BLOCK;
        if (into_block && want > CLONE_BLOCK - into_block) want = (size_t)(CLONE_BLOCK - into_block);
        loff_t in = (loff_t)(src_offset + done), out = (loff_t)(dst_offset + done);
        ssize_t got = ckpt__io_copy_file_range(src_fd, &in, dst_fd, &out, want, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP ||
                errno == EBADF || errno == ETXTBSY || errno == EPERM)
                return copy_by_buffer(src_fd, src_offset, src_path, dst_fd, dst_offset, dst_path, n,
                                      done, tick, user, err);
            if (errno == ENOSPC || errno == EDQUOT)
                return ckpt__fail_errno(err, errno, dst_path, (int64_t)(dst_offset + done), "write failed");
            return ckpt__fail_errno(err, errno, src_path, (int64_t)(src_offset + done),
                                    "copy to %s failed", dst_path);
        }
        if (got == 0)
            return ckpt__fail(err, CKPT_E_TRUNCATED, src_path, NULL, (int64_t)(src_offset + done),
                              "file ends %llu bytes early", (unsigned long long)(n - done));
        done += (uint64_t)got;
        if (tick && tick(done, user))
            return ckpt__fail(err, CKPT_E_CANCELLED, dst_path, NULL, -1, "cancelled");
    }
    return CKPT_OK;
}

char *ckpt__path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = ckpt__malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t n = a;
    if (a && dir[a - 1] != '/') p[n++] = '/';
    memcpy(p + n, name, b + 1);
    return p;
}

const char *ckpt__path_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

char *ckpt__path_dirname(const char *path) {
    /* In a URL the query and fragment are not part of the path. */
    const char *scheme = strstr(path, "://");
    if (scheme && !memchr(path, '/', (size_t)(scheme - path))) {
        size_t end = (size_t)(scheme + 3 - path) + strcspn(scheme + 3, "?#");
        const char *slash = NULL;
        for (size_t i = (size_t)(scheme + 3 - path); i < end; i++)
            if (path[i] == '/') slash = path + i;
        if (slash) return ckpt__strndup(path, (size_t)(slash - path));
        return ckpt__strndup(path, end);
    }
    const char *slash = strrchr(path, '/');
    if (!slash) return ckpt__strdup(".");
    if (slash == path) return ckpt__strdup("/");
    return ckpt__strndup(path, (size_t)(slash - path));
}

/* The marks of every temporary's name: ".<base>" TEMP_MARK "<pid>-<n>" for
 * a file, ".<base>" TEMP_MARK "<pid>-d<n>" for a directory. */
#define TEMP_MARK ".ckpt-tmp-"

/* Process-wide counters keep names unique between writers of one process;
 * the pid lets a later run recognise leftovers of a dead one. */
ckpt_status ckpt__temp_create(const char *final_path, char **tmp_path, int *fd, ckpt_error *err) {
    static atomic_uint file_counter, dir_counter;
    const char *what = fd ? "file" : "directory";
    char *dir = ckpt__path_dirname(final_path);
    if (!dir) return ckpt__fail(err, CKPT_E_NO_MEMORY, final_path, NULL, -1, "out of memory");
    const char *base = ckpt__path_basename(final_path);
    for (int attempt = 0; attempt < 100; attempt++) {
        char name[PATH_MAX];
        int w = snprintf(name, sizeof name, ".%s" TEMP_MARK "%ld-%s%u", base, (long)getpid(), fd ? "" : "d",
                         atomic_fetch_add(fd ? &file_counter : &dir_counter, 1));
        if (w < 0 || (size_t)w >= sizeof name) break;
        char *p = ckpt__path_join(dir, name);
        if (!p) break;
        int f = fd ? ckpt__io_open(p, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666) : mkdir(p, 0777);
        if (f >= 0) {
            free(dir);
            *tmp_path = p;
            if (fd) *fd = f;
            return CKPT_OK;
        }
        int e = errno;
        free(p);
        if (e != EEXIST) {
            ckpt_status st = ckpt__fail_errno(err, e, final_path, -1, "cannot create a temporary %s in %s", what, dir);
            free(dir);
            return st;
        }
    }
    free(dir);
    return ckpt__fail(err, CKPT_E_IO, final_path, NULL, -1, "cannot create a temporary %s name", what);
}

ckpt_status ckpt__make_directories(const char *path, ckpt_error *err) {
    char *p = ckpt__strdup(path);
    if (!p) return ckpt__fail(err, CKPT_E_NO_MEMORY, path, NULL, -1, "out of memory");
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

/* A decimal number as printf's %ld or %u writes it (no sign, no leading
 * zero, at most 10 digits) at *s, which moves past it; false when none. */
static bool printed_number(const char **s, unsigned long long *value) {
    const char *p = *s;
    size_t n = 0;
    unsigned long long v = 0;
    while (p[n] >= '0' && p[n] <= '9' && n < 11) v = v * 10 + (unsigned long long)(p[n++] - '0');
    if (n == 0 || n > 10 || (n > 1 && p[0] == '0')) return false;
    *s = p + n;
    *value = v;
    return true;
}

bool ckpt__temp_dir_name_is(const char *name, const char *base) {
    size_t b = strlen(base), m = strlen(TEMP_MARK);
    if (name[0] != '.' || strncmp(name + 1, base, b) || strncmp(name + 1 + b, TEMP_MARK, m)) return false;
    const char *s = name + 1 + b + m;
    unsigned long long pid, n;
    if (!printed_number(&s, &pid) || pid == 0 || pid > LONG_MAX || s[0] != '-' || s[1] != 'd') return false;
    s += 2;
    return printed_number(&s, &n) && n <= UINT_MAX && *s == '\0';
}

void ckpt__remove_flat_dirat(int dirfd, const char *name) {
    /* Cleanup is best effort and never fails an operation: the raw calls,
     * outside the fault shim, as for every cleanup path. */
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (fd >= 0 && !d) close(fd);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        unlinkat(fd, e->d_name, 0); /* the name itself (a symlink: never its target); a directory stays */
    }
    if (d) closedir(d);
    unlinkat(dirfd, name, AT_REMOVEDIR); /* fails, leaving it, when something stayed in it */
}

void ckpt__remove_flat_dir(const char *dir) {
    char *parent = ckpt__path_dirname(dir);
    int fd = parent ? open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    if (fd >= 0) ckpt__remove_flat_dirat(fd, ckpt__path_basename(dir));
    if (fd >= 0) close(fd);
    free(parent);
}

/* Whether process `pid` still runs (a zombie, which writes nothing more,
 * does not: under mpirun killed ranks may stay unreaped). */
static bool process_runs(long pid) {
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')'); /* "pid (comm) S ..." */
    return !(close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z');
}

/* The pid in a temporary's name ".<name>.ckpt-tmp-<pid>-…", or 0. */
static long temp_owner(const char *name) {
    const char *mark = name[0] == '.' ? strstr(name, TEMP_MARK) : NULL;
    if (!mark) return 0;
    const char *s = mark + strlen(TEMP_MARK);
    unsigned long long pid;
    if (!printed_number(&s, &pid) || pid == 0 || pid > LONG_MAX || *s != '-') return 0;
    return (long)pid;
}

size_t ckpt__remove_stale_temps(const char *dir) {
    /* Everything relative to the directory's descriptor, never following a
     * symlink: a name that looks like a temporary is removed as a name (a
     * symlink itself, never its target), and a temporary directory loses
     * only the entries directly in it (ckpt__remove_flat_dirat). */
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return 0;
    int list_fd = dup(fd);
    DIR *d = list_fd >= 0 ? fdopendir(list_fd) : NULL;
    if (list_fd >= 0 && !d) close(list_fd);
    size_t removed = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid = temp_owner(e->d_name);
        if (!pid || process_runs(pid)) continue;
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (S_ISDIR(st.st_mode)) ckpt__remove_flat_dirat(fd, e->d_name);
        else unlinkat(fd, e->d_name, 0);
        removed++;
    }
    if (d) closedir(d);
    close(fd);
    return removed;
}

ckpt_status ckpt__reserve(int fd, uint64_t size, const char *path, ckpt_error *err) {
    if (size == 0) return CKPT_OK;
    if (fallocate(fd, 0, 0, (off_t)size) == 0) return CKPT_OK;
    if (errno == EOPNOTSUPP || errno == ENOSYS || errno == EINVAL) return CKPT_OK;
    return ckpt__fail_errno(err, errno, path, -1, "cannot reserve %llu bytes", (unsigned long long)size);
}

char *ckpt__path_normalize(const char *path) {
    size_t n = strlen(path);
    char *out = ckpt__malloc(n + 2);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (path[i] == '/' && k && out[k - 1] == '/') continue; /* "a//b" */
        out[k++] = path[i];
    }
    while (k > 1 && out[k - 1] == '/') k--; /* "out/" names "out"; "/" stays */
    /* A trailing "/." (or ".") names the directory itself. */
    while (k > 2 && out[k - 1] == '.' && out[k - 2] == '/') k -= 2;
    out[k] = '\0';
    return out;
}
