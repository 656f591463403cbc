/*
 * fault.h — allocation and I/O calls, with fault injection for tests.
 *
 * Library code allocates with ckpt__malloc/calloc/realloc/strdup/strndup
 * and makes its data system calls through ckpt__io_*.  In ordinary builds
 * these are the libc functions themselves.  A build with
 * CKPT_FAULT_INJECTION (tests/fault) routes them through counters so a test
 * can make the N-th call fail — SQLite's way of testing every error path.
 */
#ifndef CKPT_BASE_FAULT_H
#define CKPT_BASE_FAULT_H

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <unistd.h>

/* openat2 (Linux 5.6): glibc has no wrapper, older headers no struct. */
#if defined(__has_include) && __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#else
struct open_how {
    uint64_t flags, mode, resolve;
};
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#endif
#ifndef SYS_openat2
#define SYS_openat2 437 /* the same number on every architecture */
#endif

#ifndef CKPT_FAULT_INJECTION

#define ckpt__malloc malloc
#define ckpt__calloc calloc
#define ckpt__realloc realloc
#define ckpt__strdup strdup
#define ckpt__strndup strndup
#define ckpt__io_open open
#define ckpt__io_pread pread
#define ckpt__io_pwrite pwrite
#define ckpt__io_copy_file_range copy_file_range
#define ckpt__io_fsync fsync
#define ckpt__io_ftruncate ftruncate
#define ckpt__io_rename rename
#define ckpt__io_openat openat
#define ckpt__io_readlinkat readlinkat
#define ckpt__io_unlinkat unlinkat
#define ckpt__io_renameat2 renameat2
#define ckpt__io_flock flock
/* A read of any source (src/io/source.h): the errno it fails with, or 0. */
#define ckpt__io_source_fault() 0
static inline int ckpt__io_openat2(int dirfd, const char *path, const struct open_how *how, size_t size) {
    return (int)syscall(SYS_openat2, dirfd, path, how, size);
}

#else

void *ckpt__malloc(size_t n);
void *ckpt__calloc(size_t n, size_t size);
void *ckpt__realloc(void *p, size_t n);
char *ckpt__strdup(const char *s);
char *ckpt__strndup(const char *s, size_t n);
int ckpt__io_open(const char *path, int flags, ...);
ssize_t ckpt__io_pread(int fd, void *buf, size_t n, off_t offset);
ssize_t ckpt__io_pwrite(int fd, const void *buf, size_t n, off_t offset);
ssize_t ckpt__io_copy_file_range(int in, loff_t *in_off, int out, loff_t *out_off, size_t n, unsigned flags);
int ckpt__io_fsync(int fd);
int ckpt__io_ftruncate(int fd, off_t size);
int ckpt__io_rename(const char *from, const char *to);
int ckpt__io_openat(int dirfd, const char *path, int flags, ...);
int ckpt__io_openat2(int dirfd, const char *path, const struct open_how *how, size_t size);
ssize_t ckpt__io_readlinkat(int dirfd, const char *path, char *buf, size_t size);
int ckpt__io_unlinkat(int dirfd, const char *name, int flags);
int ckpt__io_renameat2(int from_dir, const char *from, int to_dir, const char *to, unsigned flags);
int ckpt__io_flock(int fd, int op);
int ckpt__io_source_fault(void);

/* What the N-th call of a kind does. */
typedef enum ckpt__fault_mode {
    CKPT__FAULT_NONE,
    CKPT__FAULT_ALLOC,  /* the N-th allocation returns NULL */
    CKPT__FAULT_EIO,    /* the N-th I/O call fails with EIO */
    CKPT__FAULT_ENOSPC, /* the N-th I/O call fails with ENOSPC */
    CKPT__FAULT_SHORT,  /* the N-th read/write transfers half (at least 1 byte) */
    CKPT__FAULT_EINTR   /* the N-th read/write/copy fails with EINTR */
} ckpt__fault_mode;

/* Arms the injection: calls of the mode's kind are counted from 1 and the
 * n-th gets the fault (n = 0: none).  Returns nothing; not thread-safe. */
void ckpt__fault_arm(ckpt__fault_mode mode, long n);
/* Whether the fault fired. */
int ckpt__fault_fired(void);

#endif
#endif
