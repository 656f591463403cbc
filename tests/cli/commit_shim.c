/* commit_shim.c — an LD_PRELOAD library for tests/cli/test_journal.py that
 * makes a real `ckpt` process stop where a test needs it, by wrapping libc:
 *   CKPT_TEST_KILL_AFTER_DECISION=N  SIGKILL on the N-th rename (rename,
 *       renameat, renameat2) after the commit's journal (.ckpt-commit.json)
 *       was renamed into place: a crash after the commit was decided, with
 *       N - 1 of its files published;
 *   CKPT_TEST_SLOW_CREATE_MS=MS  sleep MS milliseconds before the first
 *       exclusive create (O_CREAT|O_EXCL) of the process, so that two
 *       processes started together are certain to overlap. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdio.h>

static int decided, renames, slowed;

static void after_rename(const char *to, int r) {
    if (r == 0 && strstr(to, ".ckpt-commit.json") && !strstr(to, ".ckpt-tmp-")) decided = 1;
}

static void before_rename(void) {
    const char *n = getenv("CKPT_TEST_KILL_AFTER_DECISION");
    if (decided && n && ++renames == atoi(n)) raise(SIGKILL);
}

static void before_create(int flags) {
    const char *ms = getenv("CKPT_TEST_SLOW_CREATE_MS");
    if (!ms || slowed || (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL)) return;
    slowed = 1;
    struct timespec t = {atoi(ms) / 1000, (long)(atoi(ms) % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

typedef int (*rename_fn)(const char *, const char *);
typedef int (*renameat_fn)(int, const char *, int, const char *);
typedef int (*renameat2_fn)(int, const char *, int, const char *, unsigned);
typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);

#define REAL(type, name) static type real; if (!real) real = (type)dlsym(RTLD_NEXT, name)

int rename(const char *from, const char *to) {
    REAL(rename_fn, "rename");
    before_rename();
    int r = real(from, to);
    after_rename(to, r);
    return r;
}

int renameat(int fd1, const char *from, int fd2, const char *to) {
    REAL(renameat_fn, "renameat");
    before_rename();
    int r = real(fd1, from, fd2, to);
    after_rename(to, r);
    return r;
}

int renameat2(int fd1, const char *from, int fd2, const char *to, unsigned flags) {
    REAL(renameat2_fn, "renameat2");
    before_rename();
    int r = real(fd1, from, fd2, to, flags);
    after_rename(to, r);
    return r;
}

/* The open family: the mode argument only with O_CREAT (or O_TMPFILE). */
#define MODE_ARG(flags) \
    mode_t mode = 0; \
    if (flags & (O_CREAT | O_TMPFILE)) { va_list ap; va_start(ap, flags); mode = (mode_t)va_arg(ap, int); va_end(ap); }

int open(const char *path, int flags, ...) {
    REAL(open_fn, "open");
    MODE_ARG(flags)
    before_create(flags);
    return real(path, flags, mode);
}

int open64(const char *path, int flags, ...) {
    REAL(open_fn, "open64");
    MODE_ARG(flags)
    before_create(flags);
    return real(path, flags, mode);
}

int openat(int dir, const char *path, int flags, ...) {
    REAL(openat_fn, "openat");
    MODE_ARG(flags)
    before_create(flags);
    return real(dir, path, flags, mode);
}

int openat64(int dir, const char *path, int flags, ...) {
    REAL(openat_fn, "openat64");
    MODE_ARG(flags)
    before_create(flags);
    return real(dir, path, flags, mode);
}
