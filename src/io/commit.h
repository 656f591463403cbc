/*
 * commit.h — publishing a set of new files atomically, whatever moment a
 * crash hits.
 *
 * Files are written under temporary names, then published:
 *   - one file: renamed over its final name (rename is atomic);
 *   - a new (or empty) directory of files: built in a staging directory
 *     beside it, renamed into place in one step;
 *   - files going into a directory that holds others (an old checkpoint
 *     being replaced, config.json …): built in a staging directory inside
 *     it, then a journal (.ckpt-commit.json, written atomically) records
 *     what to remove and what to publish.  Once the journal exists the
 *     commit is decided: applying it (removals first — the old index among
 *     them — then the new files, side files such as an index last) is
 *     idempotent, so a crash at any point is finished by the next
 *     ckpt__commit_recover of that directory (every ckpt open and writer
 *     does it first).  Before the journal exists, the old files are
 *     untouched and the staging directory is a stale temporary.
 * Depends on base and io/file.
 */
#ifndef CKPT_IO_COMMIT_H
#define CKPT_IO_COMMIT_H

#include "../base/base.h"

/* The journal's name inside a directory. */
#define CKPT__JOURNAL ".ckpt-commit.json"

typedef struct ckpt__commit ckpt__commit;

/*
 * Prepares publishing into `dir`.  With `whole_dir`, the files make up the
 * directory `dir` itself (a checkpoint directory: staged beside it when it
 * is missing or empty).  Otherwise, or when `dir` holds other files, they
 * are staged inside `dir` (which must exist) and published through the
 * journal — except a single file (`single`), which is simply renamed into
 * place.  A checkpoint directory's parents are created when missing.
 */
CKPT__HIDDEN ckpt_status ckpt__commit_begin(const char *dir, bool whole_dir, bool single, ckpt__commit **out,
                                            ckpt_error *err);

/* Creates file `name` (a plain name, no '/') for writing; *fd receives
 * its descriptor and *tmp_path its temporary path (owned by the commit). */
CKPT__HIDDEN ckpt_status ckpt__commit_create(ckpt__commit *c, const char *name, int *fd, const char **tmp_path,
                                             ckpt_error *err);

/*
 * Publishes every created file (each already fsynced and closed by the
 * caller unless no_sync): `order` lists their names, data files first and
 * side files (an index) last; `remove` lists names in `dir` to delete (an
 * old checkpoint's files that the new one does not reuse).  On failure
 * before the decision, nothing changed; after it, the journal finishes the
 * commit on the next recovery.
 */
CKPT__HIDDEN ckpt_status ckpt__commit_publish(ckpt__commit *c, const char *const *order, size_t count,
                                              const char *const *remove, size_t remove_count, bool no_sync,
                                              ckpt_error *err);

/* Frees a commit; an unpublished one removes what it created. */
CKPT__HIDDEN void ckpt__commit_free(ckpt__commit *c);

/* Finishes an interrupted commit of `dir` (a journal there): true in
 * *recovered when there was one.  Fails (naming what to do) when the
 * directory cannot be written. */
CKPT__HIDDEN ckpt_status ckpt__commit_recover(const char *dir, bool *recovered, ckpt_error *err);

#endif
