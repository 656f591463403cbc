/* commit.c — see commit.h. */
#include "commit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"

typedef enum mode { SINGLE, STAGED_BESIDE, JOURNAL } mode;

typedef struct created {
    char *name, *tmp_path;
    bool existed; /* SINGLE: a file had the final name before */
} created;

struct ckpt__commit {
    char *dir;
    char *stage;       /* the staging directory (STAGED_BESIDE, JOURNAL) */
    mode mode;
    bool dir_existed;  /* STAGED_BESIDE: an empty directory was there */
    bool published;
    created *files;
    size_t count, cap;
};

/* The journal: NUL-separated fields, so any file name fits.
 *   "ckpt-commit-1" "stage" NAME ("remove" NAME)* ("publish" NAME)* "end" */
static const char MAGIC[] = "ckpt-commit-1";

static char *join(const char *a, const char *b) { return ckpt__path_join(a, b); }

/* mkdir -p. */
static ckpt_status make_directories(const char *path, ckpt_error *err) {
    char *p = ckpt__strdup(path);
    if (!p) return ckpt__oom(err, path, NULL);
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

/* True when `path` is missing or an empty directory. */
static bool missing_or_empty(const char *path) {
    DIR *d = opendir(path);
    if (!d) return errno == ENOENT;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

static ckpt_status sync_dir(const char *dir, ckpt_error *err) {
    int fd = ckpt__io_open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ckpt_status st = CKPT_OK;
    if (fd < 0 || (ckpt__io_fsync(fd) != 0 && errno != EINVAL && errno != EROFS))
        st = ckpt__fail_errno(err, errno, dir, -1, "cannot sync directory");
    if (fd >= 0) close(fd);
    return st;
}

ckpt_status ckpt__commit_begin(const char *dir, bool whole_dir, bool single, ckpt__commit **out, ckpt_error *err) {
    *out = NULL;
    ckpt__commit *c = ckpt__calloc(1, sizeof *c);
    if (!c || !(c->dir = ckpt__strdup(dir))) {
        free(c);
        return ckpt__oom(err, dir, NULL);
    }
    ckpt_status st = CKPT_OK;
    bool recovered;
    if (whole_dir) {
        char *parent = ckpt__path_dirname(dir);
        st = parent ? make_directories(parent, err) : ckpt__oom(err, dir, NULL);
        if (st == CKPT_OK) ckpt__remove_stale_temps(parent); /* what killed writers left beside it */
        free(parent);
        if (st == CKPT_OK) st = ckpt__commit_recover(dir, &recovered, err);
        if (st == CKPT_OK && missing_or_empty(dir)) {
            struct stat sb;
            c->mode = STAGED_BESIDE;
            c->dir_existed = stat(dir, &sb) == 0;
            st = ckpt__temp_dir_create(dir, &c->stage, err);
        } else if (st == CKPT_OK) {
            c->mode = JOURNAL;
        }
    } else {
        /* Files beside others: their directory must exist (as for cp). */
        st = ckpt__commit_recover(dir, &recovered, err);
        c->mode = single ? SINGLE : JOURNAL;
    }
    if (st == CKPT_OK && c->mode != STAGED_BESIDE) ckpt__remove_stale_temps(dir);
    if (st == CKPT_OK && c->mode == JOURNAL) {
        char *base = join(dir, ".commit");
        st = base ? ckpt__temp_dir_create(base, &c->stage, err) : ckpt__oom(err, dir, NULL);
        free(base);
    }
    if (st) {
        ckpt__commit_free(c);
        return st;
    }
    *out = c;
    return CKPT_OK;
}

ckpt_status ckpt__commit_create(ckpt__commit *c, const char *name, int *fd, const char **tmp_path, ckpt_error *err) {
    if (c->count == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        created *f = ckpt__realloc(c->files, cap * sizeof *f);
        if (!f) return ckpt__oom(err, c->dir, NULL);
        c->files = f, c->cap = cap;
    }
    created *f = &c->files[c->count];
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
        *fd = ckpt__io_open(f->tmp_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (*fd < 0) return ckpt__fail_errno(err, errno, f->tmp_path, -1, "cannot create");
    }
    *tmp_path = f->tmp_path;
    return CKPT_OK;
}

/* ---- the journal -------------------------------------------------------------- */

static void field(ckpt__buf *b, const char *s) { ckpt__buf_append(b, s, strlen(s) + 1); }

/* Removals, then the new files in order (renamed out of the stage; one
 * already moved is skipped), then the stage and the journal.  Idempotent. */
static ckpt_status apply(const char *dir, const char *stage_name, const char *const *remove, size_t nremove,
                         const char *const *publish, size_t npublish, bool no_sync, ckpt_error *err) {
    char *stage = join(dir, stage_name), *journal = join(dir, CKPT__JOURNAL);
    ckpt_status st = stage && journal ? CKPT_OK : ckpt__oom(err, dir, NULL);
    for (size_t i = 0; st == CKPT_OK && i < nremove; i++) {
        /* An old file whose new namesake is published already (its staged
         * copy gone) is that new file: a second pass leaves it. */
        bool published = false;
        for (size_t k = 0; k < npublish && !published; k++) {
            if (strcmp(publish[k], remove[i])) continue;
            char *staged = join(stage, publish[k]);
            struct stat sb;
            published = staged && stat(staged, &sb) != 0;
            free(staged);
        }
        char *p = published ? NULL : join(dir, remove[i]);
        if (!published && !p) st = ckpt__oom(err, dir, NULL);
        else if (p && unlink(p) != 0 && errno != ENOENT) st = ckpt__fail_errno(err, errno, p, -1, "cannot remove");
        free(p);
    }
    for (size_t i = 0; st == CKPT_OK && i < npublish; i++) {
        char *from = join(stage, publish[i]), *to = join(dir, publish[i]);
        if (!from || !to) st = ckpt__oom(err, dir, NULL);
        else if (ckpt__io_rename(from, to) != 0 && errno != ENOENT)
            st = ckpt__fail_errno(err, errno, to, -1, "cannot rename %s into place", from);
        free(from);
        free(to);
    }
    if (st == CKPT_OK && !no_sync) st = sync_dir(dir, err);
    if (st == CKPT_OK) {
        ckpt__remove_flat_dir(stage);
        if (unlink(journal) != 0 && errno != ENOENT) st = ckpt__fail_errno(err, errno, journal, -1, "cannot remove");
    }
    if (st == CKPT_OK && !no_sync) st = sync_dir(dir, err);
    free(stage);
    free(journal);
    return st;
}

static ckpt_status write_journal(ckpt__commit *c, const char *const *order, size_t count, const char *const *remove,
                                 size_t remove_count, bool no_sync, ckpt_error *err) {
    ckpt__buf b = {0};
    field(&b, MAGIC);
    field(&b, "stage");
    field(&b, ckpt__path_basename(c->stage));
    for (size_t i = 0; i < remove_count; i++) field(&b, "remove"), field(&b, remove[i]);
    for (size_t i = 0; i < count; i++) field(&b, "publish"), field(&b, order[i]);
    field(&b, "end");
    char *final = join(c->dir, CKPT__JOURNAL), *tmp = NULL;
    int fd = -1;
    ckpt_status st = b.failed || !final ? ckpt__oom(err, c->dir, NULL) : ckpt__temp_create(final, &tmp, &fd, err);
    if (st == CKPT_OK) st = ckpt__pwrite_full(fd, b.data, b.len, 0, tmp, err);
    if (st == CKPT_OK && !no_sync && ckpt__io_fsync(fd) != 0) st = ckpt__fail_errno(err, errno, tmp, -1, "fsync failed");
    if (fd >= 0) close(fd);
    /* The rename decides the commit. */
    if (st == CKPT_OK && ckpt__io_rename(tmp, final) != 0)
        st = ckpt__fail_errno(err, errno, final, -1, "cannot rename %s into place", tmp);
    if (st != CKPT_OK && tmp) unlink(tmp);
    if (st == CKPT_OK && !no_sync) st = sync_dir(c->dir, err);
    free(tmp);
    free(final);
    free(b.data);
    return st;
}

ckpt_status ckpt__commit_publish(ckpt__commit *c, const char *const *order, size_t count, const char *const *remove,
                                 size_t remove_count, bool no_sync, ckpt_error *err) {
    ckpt_status st = CKPT_OK;
    if (c->mode == SINGLE) {
        for (size_t i = 0; st == CKPT_OK && i < c->count; i++) {
            char *final = join(c->dir, c->files[i].name);
            if (!final) st = ckpt__oom(err, c->dir, NULL);
            else if (ckpt__io_rename(c->files[i].tmp_path, final) != 0)
                st = ckpt__fail_errno(err, errno, final, -1, "cannot rename %s into place", c->files[i].tmp_path);
            free(final);
        }
        if (st == CKPT_OK && !no_sync) st = sync_dir(c->dir, err);
        if (st == CKPT_OK) c->published = true;
        else /* not durable, or not all there: take back the names it created */
            for (size_t i = 0; i < c->count; i++) {
                char *final = c->files[i].existed ? NULL : join(c->dir, c->files[i].name);
                struct stat sb;
                if (final && stat(c->files[i].tmp_path, &sb) != 0) unlink(final); /* renamed: its final name is new */
                free(final);
            }
        return st;
    }
    if (!no_sync) st = sync_dir(c->stage, err);
    if (st == CKPT_OK && c->mode == STAGED_BESIDE) {
        /* One rename publishes every file at once (over an empty directory,
         * which rename replaces). */
        if (ckpt__io_rename(c->stage, c->dir) != 0)
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
    if (st == CKPT_OK) st = write_journal(c, order, count, remove, remove_count, no_sync, err);
    if (st) return st;
    c->published = true; /* decided: what follows, recovery would finish */
    return apply(c->dir, ckpt__path_basename(c->stage), remove, remove_count, order, count, no_sync, err);
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
    free(c->files);
    free(c->stage);
    free(c->dir);
    free(c);
}

ckpt_status ckpt__commit_recover(const char *dir, bool *recovered, ckpt_error *err) {
    *recovered = false;
    char *journal = join(dir, CKPT__JOURNAL);
    if (!journal) return ckpt__oom(err, dir, NULL);
    char *text = NULL;
    uint64_t len = 0;
    ckpt_error ignored;
    struct stat sb;
    if (stat(journal, &sb) != 0) {
        free(journal);
        return CKPT_OK;
    }
    ckpt_status st = ckpt__read_small_file(journal, 1u << 24, CKPT_E_INCOMPLETE, &text, &len, &ignored);
    size_t nf = 0;
    for (size_t at = 0; st == CKPT_OK && at < len; at++) nf += text[at] == '\0';
    const char **fields = st == CKPT_OK ? ckpt__malloc((nf + 1) * sizeof *fields) : NULL;
    if (st == CKPT_OK && !fields) st = ckpt__oom(err, journal, NULL);
    nf = 0;
    for (size_t at = 0; fields && at < len;) {
        fields[nf++] = text + at;
        at += strlen(text + at) + 1;
    }
    /* magic, "stage", name, ("remove"|"publish", name)*, "end" */
    bool ok = st == CKPT_OK && nf >= 4 && !strcmp(fields[0], MAGIC) && !strcmp(fields[1], "stage") &&
              !strcmp(fields[nf - 1], "end") && (nf - 4) % 2 == 0 && !strchr(fields[2], '/');
    const char **remove = ok ? ckpt__malloc(nf * sizeof *remove) : NULL, **publish = ok ? ckpt__malloc(nf * sizeof *publish) : NULL;
    size_t nr = 0, np = 0;
    for (size_t i = 3; ok && i + 1 < nf; i += 2) {
        const char *what = fields[i], *name = fields[i + 1];
        ok = !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..");
        if (ok && !strcmp(what, "remove")) remove[nr++] = name;
        else if (ok && !strcmp(what, "publish")) publish[np++] = name;
        else ok = false;
    }
    if (!ok)
        st = ckpt__fail(err, CKPT_E_INCOMPLETE, journal, NULL, -1,
                        "a commit into %s was interrupted and its journal is damaged: move the checkpoint's files "
                        "out and convert again",
                        dir);
    else {
        ckpt_error inner;
        st = apply(dir, fields[2], remove, nr, publish, np, false, &inner);
        if (st)
            st = ckpt__fail(err, CKPT_E_INCOMPLETE, dir, NULL, -1,
                            "a commit into this directory was interrupted, and finishing it failed (%s): run any ckpt "
                            "command on it where it can be written (ckpt inspect %s)",
                            inner.message, dir);
        else *recovered = true;
    }
    free(remove);
    free(publish);
    free(fields);
    free(text);
    free(journal);
    return st;
}
