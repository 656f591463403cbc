/* fault.c — the counting wrappers of fault.h (fault-injection builds only). */
#ifdef CKPT_FAULT_INJECTION
#include "fault.h"

#include <errno.h>
#include <stdarg.h>

/* Test-only state: this file is compiled into fault-injection builds alone. */
static ckpt__fault_mode armed;
static long target, calls;
static int fired;

void ckpt__fault_arm(ckpt__fault_mode mode, long n) {
    armed = mode;
    target = n;
    calls = 0;
    fired = 0;
}

int ckpt__fault_fired(void) { return fired; }

static int hit_alloc(void) {
    if (armed != CKPT__FAULT_ALLOC) return 0;
    if (++calls != target) return 0;
    fired = 1;
    return 1;
}

/* For I/O: 0 = proceed, else the mode to apply to this call. */
static ckpt__fault_mode hit_io(int transfer) {
    if (armed == CKPT__FAULT_NONE || armed == CKPT__FAULT_ALLOC) return CKPT__FAULT_NONE;
    if ((armed == CKPT__FAULT_SHORT || armed == CKPT__FAULT_EINTR) && !transfer) return CKPT__FAULT_NONE;
    if (++calls != target) return CKPT__FAULT_NONE;
    fired = 1;
    return armed;
}

static int fail_errno(ckpt__fault_mode m) {
    errno = m == CKPT__FAULT_ENOSPC ? ENOSPC : m == CKPT__FAULT_EINTR ? EINTR : EIO;
    return -1;
}

void *ckpt__malloc(size_t n) { return hit_alloc() ? NULL : malloc(n); }
void *ckpt__calloc(size_t n, size_t size) { return hit_alloc() ? NULL : calloc(n, size); }
void *ckpt__realloc(void *p, size_t n) { return hit_alloc() ? NULL : realloc(p, n); }
char *ckpt__strdup(const char *s) { return hit_alloc() ? NULL : strdup(s); }
char *ckpt__strndup(const char *s, size_t n) { return hit_alloc() ? NULL : strndup(s, n); }

int ckpt__io_open(const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = flags & O_CREAT ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    return ckpt__io_openat(AT_FDCWD, path, flags, mode);
}

/* A source's read is one I/O call whatever the kind (a caller's source,
 * memory, HTTP), so that every kind's failures are injected alike; EINTR
 * and short transfers are the descriptors' business, not a source's. */
int ckpt__io_source_fault(void) {
    ckpt__fault_mode m = hit_io(0);
    return m ? (m == CKPT__FAULT_ENOSPC ? ENOSPC : EIO) : 0;
}

ssize_t ckpt__io_pread(int fd, void *buf, size_t n, off_t offset) {
    ckpt__fault_mode m = hit_io(1);
    if (m == CKPT__FAULT_SHORT) n = n > 1 ? n / 2 : n; /* a one-byte transfer cannot be shorter */
    else if (m) return fail_errno(m);
    return pread(fd, buf, n, offset);
}

ssize_t ckpt__io_pwrite(int fd, const void *buf, size_t n, off_t offset) {
    ckpt__fault_mode m = hit_io(1);
    if (m == CKPT__FAULT_SHORT) n = n > 1 ? n / 2 : n; /* a one-byte transfer cannot be shorter */
    else if (m) return fail_errno(m);
    return pwrite(fd, buf, n, offset);
}

ssize_t ckpt__io_copy_file_range(int in, loff_t *in_off, int out, loff_t *out_off, size_t n, unsigned flags) {
    ckpt__fault_mode m = hit_io(1);
    if (m == CKPT__FAULT_SHORT) n = n > 1 ? n / 2 : n; /* a one-byte transfer cannot be shorter */
    else if (m) return fail_errno(m);
    return copy_file_range(in, in_off, out, out_off, n, flags);
}

int ckpt__io_fsync(int fd) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : fsync(fd);
}

int ckpt__io_ftruncate(int fd, off_t size) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : ftruncate(fd, size);
}

int ckpt__io_rename(const char *from, const char *to) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : rename(from, to);
}

int ckpt__io_openat(int dirfd, const char *path, int flags, ...) {
    va_list ap;
    va_start(ap, flags);
    mode_t mode = flags & O_CREAT ? (mode_t)va_arg(ap, int) : 0;
    va_end(ap);
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : openat(dirfd, path, flags, mode);
}

int ckpt__io_openat2(int dirfd, const char *path, const struct open_how *how, size_t size) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : (int)syscall(SYS_openat2, dirfd, path, how, size);
}

ssize_t ckpt__io_readlinkat(int dirfd, const char *path, char *buf, size_t size) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : readlinkat(dirfd, path, buf, size);
}

int ckpt__io_unlinkat(int dirfd, const char *name, int flags) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : unlinkat(dirfd, name, flags);
}

int ckpt__io_renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned flags) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : renameat2(from_dir, from, to_dir, to, flags);
}

int ckpt__io_flock(int fd, int op) {
    ckpt__fault_mode m = hit_io(0);
    return m ? fail_errno(m) : flock(fd, op);
}
#else
/* Ordinary builds: fault.h maps the wrappers to libc; nothing to compile. */
typedef int ckpt__fault_unused;
#endif
