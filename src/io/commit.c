/* commit.c — see commit.h. */
#include "commit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "lock.h"

typedef enum mode { SINGLE, STAGED_BESIDE, JOURNAL } mode;

typedef struct created {
    char *name, *tmp_path;
    bool existed; /* SINGLE: a file had the final name before */
} created;

struct ckpt__commit {
    char *dir;
    int dir_fd; /* JOURNAL: the directory (the destination lock's, or its own: own_dir_fd) */
    bool own_dir_fd;
    char *stage;  /* the staging directory (STAGED_BESIDE, JOURNAL) */
    int stage_fd; /* open on it; STAGED_BESIDE: locked, as it becomes the directory */
    mode mode;
    bool dir_existed; /* STAGED_BESIDE: an empty directory was there */
    bool published;
    ckpt__name_rule journaled; /* the names a journal may carry */
    created *files;
    size_t count, cap;
};

static char *join(const char *a, const char *b) {
    return ckpt__path_join(a, b);
}

/* True when `path` is missing or an empty directory. */
static bool missing_or_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

static ckpt_status sync_fd(int fd, const char *what, ckpt_error *err) {
    if (ckpt__io_fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        return ckpt__fail_errno(err, errno, what, -1, "cannot sync directory");
    return CKPT_OK;
}

static ckpt_status sync_dir(const char *dir, ckpt_error *err) {
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ckpt__fail_errno(err, errno, dir, -1, "cannot sync directory");
    ckpt_status st = sync_fd(fd, dir, err);
    close(fd);
    return st;
}

/* Opens the staging directory just made at c->stage (never through a
 * symlink), locked when it is to become the destination itself. */
static ckpt_status open_stage(ckpt__commit *c, bool lock, ckpt_error *err) {
    c->stage_fd = ckpt__io_open(c->stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c->stage_fd < 0) return ckpt__fail_errno(err, errno, c->stage, -1, "cannot open the staging directory");
    return lock ? ckpt__lock_fd(c->stage_fd, c->dir, err) : CKPT_OK;
}

/* Files beside others in `dir`, published through its journal: the
 * directory is opened and locked for the whole commit (the journal is
 * shared by every writer into it), and a commit a dead writer left there
 * is finished first. */
static ckpt_status take_journal_dir(ckpt__commit *c, ckpt_error *err) {
    c->dir_fd = ckpt__io_open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (c->dir_fd < 0) return ckpt__fail_errno(err, errno, c->dir, -1, "cannot open the output's directory");
    c->own_dir_fd = true;
    ckpt_status st = ckpt__lock_fd(c->dir_fd, c->dir, err);
    bool found;
    return st ? st : ckpt__commit_recover_at(c->dir_fd, c->dir, c->journaled, false, &found, err);
}

ckpt_status ckpt__commit_begin(const char *dir, bool whole_dir, bool single, int dir_fd, ckpt__name_rule journaled,
                               ckpt__commit **out, ckpt_error *err) {
    *out = NULL;
    ckpt__commit *c = ckpt__calloc(1, sizeof *c);
    if (!c || !(c->dir = ckpt__strdup(dir))) {
        free(c);
        return ckpt__oom(err, dir, NULL);
    }
    c->dir_fd = c->stage_fd = -1;
    c->journaled = journaled;
    ckpt_status st = CKPT_OK;
    if (whole_dir) {
        char *parent = ckpt__path_dirname(dir);
        st = parent ? ckpt__make_directories(parent, err) : ckpt__oom(err, dir, NULL);
        if (st == CKPT_OK) { /* what killed writers left beside it */
            ckpt__remove_stale_temps(parent);
            ckpt__lock_remove_stale(parent);
        }
        free(parent);
        if (st == CKPT_OK && missing_or_empty(dir)) {
            struct stat sb;
            c->mode = STAGED_BESIDE;
            c->dir_existed = stat(dir, &sb) == 0;
            st = ckpt__temp_create(dir, &c->stage, NULL, err);
            if (st == CKPT_OK) st = open_stage(c, true, err);
        } else if (st == CKPT_OK && dir_fd < 0) {
            st = ckpt__fail(err, CKPT_E_EXISTS, dir, NULL, -1, "appeared while this writer was starting: left alone");
        } else if (st == CKPT_OK) {
            c->mode = JOURNAL;
            c->dir_fd = dir_fd; /* the destination's lock holds it (and any interrupted commit is finished) */
        }
    } else {
        /* Files beside others: their directory exists (the destination's
         * lock made it, as it makes a directory destination's parents). */
        c->mode = single ? SINGLE : JOURNAL;
        if (c->mode == JOURNAL) st = take_journal_dir(c, err);
    }
    if (st == CKPT_OK && c->mode != STAGED_BESIDE) {
        ckpt__remove_stale_temps(dir);
        ckpt__lock_remove_stale(dir);
    }
    if (st == CKPT_OK && c->mode == JOURNAL) {
        char *base = join(dir, CKPT__STAGE_BASE);
        st = base ? ckpt__temp_create(base, &c->stage, NULL, err) : ckpt__oom(err, dir, NULL);
        if (st && err) snprintf(err->path, sizeof err->path, "%s", dir); /* the directory, not the stage's inner name */
        free(base);
        if (st == CKPT_OK) st = open_stage(c, false, err);
    }
    if (st) {
        ckpt__commit_free(c);
        return st;
    }
    *out = c;
    return CKPT_OK;
}

ckpt_status ckpt__commit_create(ckpt__commit *c, const char *name, int *fd, const char **tmp_path, ckpt_error *err) {
    created *f = ckpt__grow(c->files, c->count, &c->cap, sizeof *f, 8);
    if (!f) return ckpt__oom(err, c->dir, NULL);
    c->files = f;
    f = &c->files[c->count];
    memset(f, 0, sizeof *f);
    if (!(f->name = ckpt__strdup(name))) return ckpt__oom(err, c->dir, NULL);
    c->count++;
    if (c->mode == SINGLE) {
        char *final = join(c->dir, name);
        if (!final) return ckpt__oom(err, c->dir, NULL);
        struct stat sb;
        f->existed = lstat(final, &sb) == 0;
        ckpt_status st = ckpt__temp_create(final, &f->tmp_path, fd, err);
        free(final);
        if (st) return st;
    } else {
        if (!(f->tmp_path = join(c->stage, name))) return ckpt__oom(err, c->dir, NULL);
        *fd = ckpt__io_openat(c->stage_fd, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        if (*fd < 0) { /* named as the file it would become: the staging directory is the commit's own business */
            int e = errno;
            char *final = join(c->dir, name);
            ckpt_status st = ckpt__fail_errno(err, e, final ? final : name, -1, "cannot create it (in %s)", c->stage);
            free(final);
            return st;
        }
    }
    *tmp_path = f->tmp_path;
    return CKPT_OK;
}

/* ---- finishing a decided commit ------------------------------------------------ */

/* `list` sorted, for `listed` (a journal may hold many names: no quadratic
 * lookups); NULL when out of memory. */
static const char **sorted_names(const char *const *list, size_t n) {
    const char **s = ckpt__malloc((n ? n : 1) * sizeof *s);
    if (!s) return NULL;
    if (n) memcpy(s, list, n * sizeof *s);
    qsort(s, n, sizeof *s, ckpt__cmp_str);
    return s;
}

/* Whether `name` is in `sorted` (from sorted_names). */
static bool listed(const char *const *sorted, size_t n, const char *name) {
    return n && bsearch(&name, sorted, n, sizeof *sorted, ckpt__cmp_str);
}

/* Whether `name` is still in the stage (not yet published). */
static bool staged(int stage_fd, const char *name) {
    struct stat sb;
    return stage_fd >= 0 && fstatat(stage_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0;
}

/*
 * Finishes a decided commit of the directory open at `dir_fd` (`dir` in
 * messages): removals, then the new files in order, renamed out of the
 * stage `stage_name` (open at `stage_fd`, or -1 when it is gone: every file
 * already moved), then the stage and the journal.  Idempotent: an old file
 * whose new namesake is published already (its staged copy gone) is that
 * new file, and a file already moved is skipped.  Every call is relative to
 * the two descriptors: nothing outside the directory is ever named.
 */
static ckpt_status finish(int dir_fd, const char *dir, const char *stage_name, int stage_fd, const char *const *remove,
                          size_t nremove, const char *const *publish, size_t npublish, bool no_sync, ckpt_error *err) {
    const char **published = sorted_names(publish, npublish);
    ckpt_status st = published ? CKPT_OK : ckpt__oom(err, dir, NULL);
    for (size_t i = 0; st == CKPT_OK && i < nremove; i++) {
        if (!staged(stage_fd, remove[i]) && listed(published, npublish, remove[i])) continue;
        if (ckpt__io_unlinkat(dir_fd, remove[i], 0) != 0 && errno != ENOENT)
            st = ckpt__fail_errno(err, errno, dir, -1, "cannot remove %s", remove[i]);
    }
    free(published);
    for (size_t i = 0; st == CKPT_OK && stage_fd >= 0 && i < npublish; i++)
        if (ckpt__io_renameat2(stage_fd, publish[i], dir_fd, publish[i], 0) != 0 && errno != ENOENT)
            st = ckpt__fail_errno(err, errno, dir, -1, "cannot rename %s/%s into place", stage_name, publish[i]);
    if (st == CKPT_OK && !no_sync) st = sync_fd(dir_fd, dir, err);
    if (st == CKPT_OK) {
        ckpt__remove_flat_dirat(dir_fd, stage_name);
        if (ckpt__io_unlinkat(dir_fd, CKPT__JOURNAL, 0) != 0 && errno != ENOENT)
            st = ckpt__fail_errno(err, errno, dir, -1, "cannot remove %s", CKPT__JOURNAL);
    }
    if (st == CKPT_OK && !no_sync) st = sync_fd(dir_fd, dir, err);
    return st;
}

/* The journal lists only the names recovery may act on (c->journaled):
 * a name no output format owns (a file copied along such as config.json,
 * the one file a caller named) is published or removed by this process
 * after the decision, never by a recovery, which cannot tell it from a
 * user's file.  A crash after the decision leaves such a file's old
 * version (or none). */
static size_t journaled_names(const ckpt__commit *c, const char *const *names, size_t n, const char **out) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (c->journaled(names[i])) out[k++] = names[i];
    return k;
}

static ckpt_status write_journal(ckpt__commit *c, const char *const *order, size_t count, const char *const *remove,
                                 size_t remove_count, bool no_sync, ckpt_error *err) {
    const char **r = ckpt__malloc((remove_count + 1) * sizeof *r), **p = ckpt__malloc((count + 1) * sizeof *p);
    ckpt__buf b = {0};
    if (r && p)
        ckpt__journal_encode(&b, ckpt__path_basename(c->stage), r, journaled_names(c, remove, remove_count, r), p,
                             journaled_names(c, order, count, p));
    char *final = join(c->dir, CKPT__JOURNAL), *tmp = NULL;
    int fd = -1;
    ckpt_status st =
        !r || !p || b.failed || !final ? ckpt__oom(err, c->dir, NULL) : ckpt__temp_create(final, &tmp, &fd, err);
    if (st == CKPT_OK) st = ckpt__pwrite_full(fd, b.data, b.len, 0, tmp, err);
    if (st == CKPT_OK && !no_sync && ckpt__io_fsync(fd) != 0)
        st = ckpt__fail_errno(err, errno, tmp, -1, "fsync failed");
    if (fd >= 0) close(fd);
    /* The rename decides the commit. */
    if (st == CKPT_OK && ckpt__io_rename(tmp, final) != 0)
        st = ckpt__fail_errno(err, errno, final, -1, "cannot rename %s into place", tmp);
    if (st != CKPT_OK && tmp) unlink(tmp);
    if (st == CKPT_OK && !no_sync) st = sync_fd(c->dir_fd, c->dir, err);
    free(tmp);
    free(final);
    free(b.data);
    free(r);
    free(p);
    return st;
}

/* Refuses, before the decision, a directory standing at one of the names
 * the commit publishes or removes: rename cannot put a file over it, and
 * unlink cannot take it away, so a commit decided anyway would stop half
 * done, with the old checkpoint partly removed.  Nothing has changed yet. */
static ckpt_status refuse_directories(const ckpt__commit *c, const char *const *order, size_t count,
                                      const char *const *remove, size_t remove_count, ckpt_error *err) {
    for (size_t i = 0; i < count + remove_count; i++) {
        const char *name = i < count ? order[i] : remove[i - count];
        struct stat sb;
        if (fstatat(c->dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
            return ckpt__fail(err, CKPT_E_EXISTS, c->dir, NULL, -1,
                              "%s in it is a directory, which the new checkpoint's file of that name cannot replace; "
                              "nothing was changed (move the directory away and write again)",
                              name);
    }
    return CKPT_OK;
}

/* Publishes a staging directory built beside the destination with one
 * rename.  Over an empty directory that was there, rename replaces it;
 * where nothing was, RENAME_NOREPLACE makes sure nothing appeared
 * meanwhile (file systems without it: a plain rename, which still never
 * replaces a directory that holds files). */
static int rename_stage(const ckpt__commit *c) {
    if (c->dir_existed) return ckpt__io_rename(c->stage, c->dir);
    int r = ckpt__io_renameat2(AT_FDCWD, c->stage, AT_FDCWD, c->dir, RENAME_NOREPLACE);
    if (r != 0 && errno == EINVAL) r = ckpt__io_rename(c->stage, c->dir);
    return r;
}

ckpt_status ckpt__commit_publish(ckpt__commit *c, const char *const *order, size_t count, const char *const *remove,
                                 size_t remove_count, bool no_sync, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    if (c->mode == SINGLE) {
        for (size_t i = 0; st == CKPT_OK && i < c->count; i++) {
            char *final = join(c->dir, c->files[i].name);
            if (!final)
                st = ckpt__oom(err, c->dir, NULL);
            else if (ckpt__io_rename(c->files[i].tmp_path, final) != 0)
                st = ckpt__fail_errno(err, errno, final, -1, "cannot rename %s into place", c->files[i].tmp_path);
            free(final);
        }
        if (st == CKPT_OK && !no_sync) st = sync_dir(c->dir, err);
        if (st == CKPT_OK)
            c->published = true;
        else /* not durable, or not all there: take back the names it created */
            for (size_t i = 0; i < c->count; i++) {
                char *final = c->files[i].existed ? NULL : join(c->dir, c->files[i].name);
                struct stat sb;
                if (final && stat(c->files[i].tmp_path, &sb) != 0) unlink(final); /* renamed: its final name is new */
                free(final);
            }
        return st;
    }
    if (!no_sync) st = sync_fd(c->stage_fd, c->stage, err);
    if (st == CKPT_OK && c->mode == STAGED_BESIDE) {
        /* One rename publishes every file at once. */
        if (rename_stage(c) != 0)
            return ckpt__fail_errno(err, errno, c->dir, -1, "cannot rename %s into place", c->stage);
        c->published = true;
        char *parent = ckpt__path_dirname(c->dir);
        st = !parent ? ckpt__oom(err, c->dir, NULL) : no_sync ? CKPT_OK : sync_dir(parent, err);
        free(parent);
        if (st) { /* published, then not durable: take it back, leaving what was there */
            ckpt__remove_flat_dir(c->dir);
            if (c->dir_existed) mkdir(c->dir, 0777);
            c->published = false;
            free(c->stage);
            c->stage = NULL;
        }
        return st;
    }
    if (st == CKPT_OK) st = refuse_directories(c, order, count, remove, remove_count, err);
    if (st == CKPT_OK) st = write_journal(c, order, count, remove, remove_count, no_sync, err);
    if (st) return st;
    c->published = true; /* decided: what follows, recovery would finish */
    return finish(c->dir_fd, c->dir, ckpt__path_basename(c->stage), c->stage_fd, remove, remove_count, order, count,
                  no_sync, err);
}

void ckpt__commit_free(ckpt__commit *c) {
    if (!c) return;
    if (!c->published) {
        if (c->mode == SINGLE)
            for (size_t i = 0; i < c->count; i++)
                if (c->files[i].tmp_path) unlink(c->files[i].tmp_path);
        if (c->stage) ckpt__remove_flat_dir(c->stage);
    }
    for (size_t i = 0; i < c->count; i++) {
        free(c->files[i].name);
        free(c->files[i].tmp_path);
    }
    if (c->stage_fd >= 0) close(c->stage_fd);
    if (c->own_dir_fd) close(c->dir_fd);
    free(c->files);
    free(c->stage);
    free(c->dir);
    free(c);
}

/* ---- journals found on disk ------------------------------------------------------ */

/* A journal read from a directory and checked against it. */
typedef struct found_journal {
    char *path;  /* DIR/.ckpt-commit.json, for messages */
    char *bytes; /* what it holds (ckpt__journal points into it) */
    ckpt__journal j;
    int stage_fd; /* its stage, open; -1 when gone */
} found_journal;

static void found_free(found_journal *f) {
    if (f->stage_fd >= 0) close(f->stage_fd);
    ckpt__journal_free(&f->j);
    free(f->bytes);
    free(f->path);
}

/* Reads the journal of the directory open at `dir_fd`: never through a
 * symlink, never blocking on a FIFO, never more than CKPT__JOURNAL_MAX. */
static ckpt_status read_journal(int dir_fd, found_journal *f, uint64_t *len, ckpt_error *err) {
    int fd = ckpt__io_openat(dir_fd, CKPT__JOURNAL, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ELOOP) return ckpt__journal_refuse(err, f->path, 0, "it is a symbolic link", NULL);
    if (fd < 0) return ckpt__fail_errno(err, errno, f->path, -1, "cannot open");
    struct stat sb;
    ckpt_status st = CKPT_OK;
    if (fstat(fd, &sb) != 0)
        st = ckpt__fail_errno(err, errno, f->path, -1, "cannot stat");
    else if (!S_ISREG(sb.st_mode))
        st = ckpt__journal_refuse(err, f->path, 0, "it is not a regular file", NULL);
    else if ((uint64_t)sb.st_size > CKPT__JOURNAL_MAX)
        st = ckpt__journal_refuse(err, f->path, CKPT__JOURNAL_MAX, "it is too large", NULL);
    else if (!(f->bytes = ckpt__malloc((size_t)sb.st_size + 1)))
        st = ckpt__oom(err, f->path, NULL);
    else
        st = ckpt__pread_full(fd, f->bytes, (uint64_t)sb.st_size, 0, f->path, err);
    *len = (uint64_t)sb.st_size;
    close(fd);
    return st;
}

/* The rules a journal's names cannot show alone, checked on the directory
 * (relative to its descriptor, never following a symlink): the stage is a
 * real directory directly inside it (or gone: every file moved already),
 * each file to publish still in it is a regular file, and nothing to
 * replace or remove is a directory. */
static ckpt_status check_on_disk(int dir_fd, found_journal *f, ckpt_error *err) {
    const ckpt__journal *j = &f->j;
    f->stage_fd = ckpt__io_openat(dir_fd, j->stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (f->stage_fd < 0 && (errno == ELOOP || errno == ENOTDIR))
        return ckpt__journal_refuse(err, f->path, j->stage_at,
                                    "its stage is not a directory (a symbolic link or a file)", j->stage);
    if (f->stage_fd < 0 && errno != ENOENT) return ckpt__fail_errno(err, errno, f->path, -1, "cannot open its stage");
    struct stat sb;
    for (size_t i = 0; i < j->publish_count; i++) {
        /* One already moved (gone from the stage) is not moved again. */
        if (f->stage_fd < 0 || fstatat(f->stage_fd, j->publish[i], &sb, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!S_ISREG(sb.st_mode))
            return ckpt__journal_refuse(err, f->path, j->publish_at[i],
                                        "a file to publish is not a regular file in its stage (a symbolic link, "
                                        "FIFO, device or directory)",
                                        j->publish[i]);
        if (fstatat(dir_fd, j->publish[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
            return ckpt__journal_refuse(err, f->path, j->publish_at[i], "a file to publish would replace a directory",
                                        j->publish[i]);
    }
    for (size_t i = 0; i < j->remove_count; i++)
        if (fstatat(dir_fd, j->remove[i], &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(sb.st_mode))
            return ckpt__journal_refuse(err, f->path, j->remove_at[i], "a file to remove is a directory", j->remove[i]);
    return CKPT_OK;
}

/* Finds, reads and checks the journal of the directory open at `dir_fd`:
 * *present false when there is none; CKPT_E_INCOMPLETE naming the rule
 * when there is one that is not provably ckpt's. */
static ckpt_status load_journal(int dir_fd, const char *dir, ckpt__name_rule owned, found_journal *f, bool *present,
                                ckpt_error *err) {
    memset(f, 0, sizeof *f);
    f->stage_fd = -1;
    *present = false;
    if (!(f->path = join(dir, CKPT__JOURNAL))) return ckpt__oom(err, dir, NULL);
    struct stat sb;
    if (fstatat(dir_fd, CKPT__JOURNAL, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return CKPT_OK;
        return ckpt__fail_errno(err, errno, f->path, -1, "cannot stat");
    }
    *present = true;
    uint64_t len = 0;
    ckpt_status st = read_journal(dir_fd, f, &len, err);
    if (st == CKPT_OK) st = ckpt__journal_parse(f->bytes, (size_t)len, owned, f->path, &f->j, err);
    if (st == CKPT_OK) st = check_on_disk(dir_fd, f, err);
    return st;
}

ckpt_status ckpt__commit_recover_at(int dir_fd, const char *dir, ckpt__name_rule owned, bool check_only, bool *found,
                                    ckpt_error *err) {
    *found = false;
    found_journal f;
    bool present;
    ckpt_status st = load_journal(dir_fd, dir, owned, &f, &present, err);
    if (st == CKPT_E_INCOMPLETE && err) { /* not provably ckpt's: nothing of it is executed */
        size_t n = strlen(err->message);
        snprintf(err->message + n, sizeof err->message - n,
                 "; left alone: unless a ckpt commit into %s was interrupted, this file came with the directory "
                 "(delete it to write here)",
                 dir);
    }
    if (st == CKPT_OK && present) {
        *found = true;
        if (!check_only)
            st = finish(dir_fd, dir, f.j.stage, f.stage_fd, f.j.remove, f.j.remove_count, f.j.publish,
                        f.j.publish_count, false, err);
    }
    found_free(&f);
    return st;
}

ckpt_status ckpt__commit_recover(const char *dir, ckpt__name_rule owned, ckpt__recover_mode how, bool *found,
                                 ckpt_error *err) {
    *found = false;
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ckpt__fail_errno(err, errno, dir, -1, "cannot open the directory");
    ckpt_status st = CKPT_OK;
    struct stat sb;
    if (how == CKPT__RECOVER_UNLESS_BUSY && fstatat(fd, CKPT__JOURNAL, &sb, AT_SYMLINK_NOFOLLOW) != 0) {
        close(fd); /* no journal: nothing to lock */
        return CKPT_OK;
    }
    if (how != CKPT__RECOVER_CHECK) st = ckpt__lock_fd(fd, dir, err);
    if (st == CKPT_E_LOCKED && how == CKPT__RECOVER_UNLESS_BUSY)
        st = CKPT_OK; /* its live writer finishes it */
    else if (st == CKPT_OK)
        st = ckpt__commit_recover_at(fd, dir, owned, how == CKPT__RECOVER_CHECK, found, err);
    close(fd); /* and with it the lock */
    return st;
}

/* Whether the journal names `file` (removes or publishes it). */
static bool journal_names(const ckpt__journal *j, const char *file) {
    for (size_t i = 0; i < j->remove_count; i++)
        if (!strcmp(j->remove[i], file)) return true;
    for (size_t i = 0; i < j->publish_count; i++)
        if (!strcmp(j->publish[i], file)) return true;
    return false;
}

ckpt_status ckpt__commit_check_read(const char *dir, const char *file, ckpt__name_rule owned, ckpt_error *err) {
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return CKPT_OK; /* the open proper says what is wrong */
    found_journal f;
    bool present;
    ckpt_error ignored;
    ckpt_status st = load_journal(fd, dir, owned, &f, &present, &ignored);
    if (st == CKPT_OK && present && (!file || journal_names(&f.j, file))) {
        long pid = ckpt__lock_holder(fd);
        if (pid)
            st = ckpt__fail(err, CKPT_E_INCOMPLETE, dir, NULL, -1,
                            "is being written by another process (pid %ld), which is publishing a new checkpoint: "
                            "open it once that process is done",
                            pid);
        else
            st = ckpt__fail(
                err, CKPT_E_INCOMPLETE, dir, NULL, -1,
                "a commit into this directory was interrupted (%s is there): finish it with `ckpt recover %s`, "
                "ckpt.recover('%s') in Python or ckpt_commit_recover() in C, or by writing into the "
                "directory again; a read never changes it",
                CKPT__JOURNAL, dir, dir);
    } else {
        st = CKPT_OK; /* none, or not ckpt's: a read ignores it (inspect and verify say so) */
    }
    found_free(&f);
    close(fd);
    return st;
}
