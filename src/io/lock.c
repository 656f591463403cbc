/* lock.c — see lock.h. */
#include "lock.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "file.h"

struct ckpt__lock {
    int dir_fd;      /* the destination directory, locked; -1: none */
    int parent_fd;   /* the directory holding the lock file; -1: none */
    int file_fd;     /* the lock file, locked; -1: none */
    char *file_name; /* its name in parent_fd */
};

/* A lock file's name: ".<name>.ckpt-lock" beside the destination. */
static char *lock_file_name(const char *base) {
    size_t n = strlen(base);
    char *s = ckpt__malloc(n + 12);
    if (s) snprintf(s, n + 12, ".%s.ckpt-lock", base);
    return s;
}

long ckpt__lock_holder(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return 0;
    FILE *f = fopen("/proc/locks", "re");
    if (!f) return 0;
    /* "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2359570 0 EOF"; a waiter's line
     * has "->" before FLOCK and is skipped. */
    char line[512], kind[16];
    long pid, found = 0;
    unsigned maj, min;
    unsigned long long ino;
    while (!found && fgets(line, sizeof line, f))
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", kind, &pid, &maj, &min, &ino) == 5 &&
            !strcmp(kind, "FLOCK") && ino == (unsigned long long)st.st_ino && maj == major(st.st_dev) &&
            min == minor(st.st_dev))
            found = pid;
    fclose(f);
    return found;
}

/* The pid a lock file holds (written by its holder), or 0. */
static long pid_in_file(int fd) {
    char buf[32];
    ssize_t n = ckpt__io_pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *end;
    long pid = strtol(buf, &end, 10);
    return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}

/* CKPT_E_LOCKED naming the holder (0: not known). */
static ckpt_status locked(ckpt_error *err, const char *what, long pid) {
    if (pid)
        return ckpt__fail(err, CKPT_E_LOCKED, what, NULL, -1,
                          "another process (pid %ld) is writing this destination: wait for it to finish, or stop it",
                          pid);
    return ckpt__fail(err, CKPT_E_LOCKED, what, NULL, -1,
                      "another process is writing this destination (its pid is not visible here): wait for it to "
                      "finish, or stop it");
}

ckpt_status ckpt__lock_fd(int fd, const char *what, ckpt_error *err) {
    while (ckpt__io_flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK) return locked(err, what, ckpt__lock_holder(fd));
        return ckpt__fail_errno(err, errno, what, -1, "cannot lock");
    }
    return CKPT_OK;
}

/* Whether `name` in `parent_fd` is (still) the file open at `fd`: a lock
 * taken on a file that another holder has removed meanwhile locks nothing. */
static bool still_named(int parent_fd, const char *name, int fd, int at_flags) {
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(parent_fd, name, &b, at_flags) == 0 && a.st_dev == b.st_dev &&
           a.st_ino == b.st_ino;
}

/* Opens lock file `name` in `parent_fd`, creating it when `create`
 * (*created then says whether this call did); -1 with errno on failure.
 * O_NOFOLLOW: a symlink in its place is not followed; O_NONBLOCK: a FIFO
 * in its place does not hang the open.  Another user's lock file opens
 * read-only, which locks as well. */
static int open_lock_file(int parent_fd, const char *name, bool create, bool *created) {
    const int flags = O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    *created = false;
    for (int attempt = 0; attempt < 100; attempt++) {
        int f = create ? ckpt__io_openat(parent_fd, name, O_RDWR | O_CREAT | O_EXCL | flags, 0666) : -1;
        if (f >= 0) {
            *created = true;
            return f;
        }
        if (create && errno != EEXIST) return -1;
        f = ckpt__io_openat(parent_fd, name, O_RDWR | flags);
        if (f < 0 && errno == EACCES) f = ckpt__io_openat(parent_fd, name, O_RDONLY | flags);
        if (f >= 0 || errno != ENOENT || !create) return f;
        /* removed between the two opens by its holder: create it again */
    }
    errno = EAGAIN;
    return -1;
}

/* Takes lock file `name` in `parent_fd` (`what` in messages): creates it
 * when `create`, else *fd = -1 when there is none.  Retries when the file
 * it locked was removed by its previous holder meanwhile. */
static ckpt_status take_lock_file(int parent_fd, const char *name, const char *what, bool create, int *fd,
                                  ckpt_error *err) {
    *fd = -1;
    for (int attempt = 0; attempt < 100; attempt++) {
        bool created;
        int f = open_lock_file(parent_fd, name, create, &created);
        if (f < 0 && errno == ENOENT && !create) return CKPT_OK;
        if (f < 0) return ckpt__fail_errno(err, errno, what, -1, "cannot open the lock file %s", name);
        struct stat st;
        ckpt_status s = CKPT_OK;
        if (fstat(f, &st) != 0 || !S_ISREG(st.st_mode))
            s = ckpt__fail(err, CKPT_E_UNSAFE_PATH, what, NULL, -1, "the lock file %s is not a regular file: remove it",
                           name);
        else
            s = ckpt__lock_fd(f, what, err);
        if (s == CKPT_E_LOCKED && !ckpt__lock_holder(f)) {
            s = locked(err, what, pid_in_file(f)); /* no /proc/locks here: the pid its holder wrote */
        } else if (s && created) {
            unlinkat(parent_fd, name, 0); /* this call's own file, never locked: cleanup (raw) */
        }
        if (s) {
            close(f);
            return s;
        }
        if (still_named(parent_fd, name, f, AT_SYMLINK_NOFOLLOW)) {
            *fd = f;
            return CKPT_OK;
        }
        close(f);
    }
    return ckpt__fail(err, CKPT_E_LOCKED, what, NULL, -1, "the lock file %s keeps changing", name);
}

/* Records the holder's pid in its lock file (best effort: a read-only lock
 * file of another user still locks). */
static void write_pid(int fd) {
    char buf[32];
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ckpt__io_ftruncate(fd, 0) == 0 && ckpt__io_pwrite(fd, buf, (size_t)n, 0) != n) {
        /* nothing more to do: /proc/locks names the holder anyway */
    }
}

/* Removes and closes the lock file (removed while still locked, so that a
 * process that opened it meanwhile sees it is no longer named, and
 * retries).  Raw calls, as every cleanup: never a failure to report. */
static void drop_lock_file(ckpt__lock *l) {
    if (l->file_fd < 0) return;
    unlinkat(l->parent_fd, l->file_name, 0);
    close(l->file_fd);
    l->file_fd = -1;
}

void ckpt__lock_release(ckpt__lock *l) {
    if (!l) return;
    drop_lock_file(l);
    if (l->dir_fd >= 0) close(l->dir_fd);
    if (l->parent_fd >= 0) close(l->parent_fd);
    free(l->file_name);
    free(l);
}

int ckpt__lock_dir_fd(const ckpt__lock *l) {
    return l ? l->dir_fd : -1;
}

/* An existing destination directory: locked itself.  A lock file beside it
 * still held is a writer that made the directory and is finishing; one no
 * process holds is a killed writer's, removed. */
static ckpt_status lock_existing_dir(ckpt__lock *l, const char *base, const char *path, int dir_fd, bool *retry,
                                     ckpt_error *err) {
    *retry = false;
    ckpt_status st = ckpt__lock_fd(dir_fd, path, err);
    if (st) return st;
    if (!still_named(l->parent_fd, base, dir_fd, 0)) { /* replaced after the open: lock the new one */
        *retry = true;
        return CKPT_OK;
    }
    st = take_lock_file(l->parent_fd, l->file_name, path, false, &l->file_fd, err);
    drop_lock_file(l);
    return st;
}

static ckpt_status lock_directory(ckpt__lock *l, const char *path, const char *base, ckpt_error *err) {
    for (int attempt = 0; attempt < 100; attempt++) {
        int d = ckpt__io_openat(l->parent_fd, base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (d >= 0) {
            bool retry;
            ckpt_status st = lock_existing_dir(l, base, path, d, &retry, err);
            if (st == CKPT_OK && !retry) {
                l->dir_fd = d;
                return CKPT_OK;
            }
            close(d);
            if (st) return st;
            continue;
        }
        if (errno != ENOENT && errno != ENOTDIR) return ckpt__fail_errno(err, errno, path, -1, "cannot open");
        /* Missing (or not a directory, which the writer refuses next): the
         * lock file stands for it until it appears. */
        ckpt_status st = take_lock_file(l->parent_fd, l->file_name, path, true, &l->file_fd, err);
        if (st) return st;
        struct stat sb;
        if (fstatat(l->parent_fd, base, &sb, 0) != 0 || !S_ISDIR(sb.st_mode)) {
            write_pid(l->file_fd);
            return CKPT_OK;
        }
        drop_lock_file(l); /* it appeared meanwhile (its writer is done): lock it */
    }
    return ckpt__fail(err, CKPT_E_LOCKED, path, NULL, -1, "the destination keeps changing while being locked");
}

ckpt_status ckpt__lock_destination(const char *path, bool directory, ckpt__lock **out, ckpt_error *err) {
    *out = NULL;
    ckpt__lock *l = ckpt__calloc(1, sizeof *l);
    char *parent = ckpt__path_dirname(path);
    const char *base = ckpt__path_basename(path);
    if (!l || !parent || !(l->file_name = lock_file_name(base))) {
        free(l ? l->file_name : NULL);
        free(l);
        free(parent);
        return ckpt__oom(err, path, NULL);
    }
    l->dir_fd = l->parent_fd = l->file_fd = -1;
    /* The parents are made for a file as for a directory: the lock file
     * lies in the parent, which must exist first. */
    ckpt_status st = ckpt__make_directories(parent, err);
    if (st == CKPT_OK && (l->parent_fd = ckpt__io_open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        st = ckpt__fail_errno(err, errno, parent, -1, "cannot open the output's directory");
    if (st == CKPT_OK && directory) {
        st = lock_directory(l, path, base, err);
    } else if (st == CKPT_OK) {
        st = take_lock_file(l->parent_fd, l->file_name, path, true, &l->file_fd, err);
        if (st == CKPT_OK) write_pid(l->file_fd);
    }
    free(parent);
    if (st) {
        ckpt__lock_release(l);
        return st;
    }
    *out = l;
    return CKPT_OK;
}

void ckpt__lock_remove_stale(const char *dir) {
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    int list_fd = dup(fd);
    DIR *d = list_fd >= 0 ? fdopendir(list_fd) : NULL;
    if (list_fd >= 0 && !d) close(list_fd);
    static const char suffix[] = ".ckpt-lock";
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] != '.' || n <= sizeof suffix || strcmp(e->d_name + n - (sizeof suffix - 1), suffix)) continue;
        ckpt_error ignored;
        int lock_fd;
        if (take_lock_file(fd, e->d_name, e->d_name, false, &lock_fd, &ignored) == CKPT_OK && lock_fd >= 0) {
            unlinkat(fd, e->d_name, 0); /* while locked: see drop_lock_file */
            close(lock_fd);
        }
    }
    if (d) closedir(d);
    close(fd);
}
