/*
 * commit.h — publishing a set of new files atomically, whatever moment a
 * crash hits; and finishing a commit a crash cut short.
 *
 * Files are written under temporary names, then published:
 *   - one file: renamed over its final name (rename is atomic);
 *   - a new (or empty) directory of files: built in a staging directory
 *     beside it, renamed into place in one step;
 *   - files going into a directory that holds others (an old checkpoint
 *     being replaced, config.json …): built in a staging directory inside
 *     it, then a journal (.ckpt-commit.json, written atomically, io/journal.h)
 *     records what to remove and what to publish.  Once the journal exists
 *     the commit is decided: applying it (removals first — the old index
 *     among them — then the new files, side files such as an index last) is
 *     idempotent, so a crash at any point is finished by a later recovery.
 *     Before the journal exists, the old files are untouched and the
 *     staging directory is a stale temporary.
 *
 * Who recovers, and what.  A read never writes: opening a checkpoint never
 * finishes, changes or removes anything (ckpt__commit_check_read only
 * looks: a journal ckpt can finish makes the open fail with
 * CKPT_E_INCOMPLETE naming the fix; any other is ignored).  Recovery is
 * explicit (ckpt_commit_recover, `ckpt recover`, ckpt.recover) or done by
 * the next writer into the directory, under the destination's lock
 * (io/lock.h) — because:
 *   - a live writer may be between its journal and its last rename: a
 *     reader "finishing" it would race with it; a writer holds the lock;
 *   - a read may run on a read-only mount, or in a directory the reader
 *     may read but not write (a shared model store);
 *   - a checkpoint directory may come from elsewhere with a planted
 *     journal.  As SQLite replays a hot journal only when it is provably
 *     its own, recovery executes a journal only when every rule holds: it
 *     parses (ckpt__journal_parse: the stage named exactly as this file
 *     names stages, plain names that an output format owns), its stage is a
 *     real directory directly inside the directory (opened O_NOFOLLOW
 *     relative to the directory's descriptor), each file it publishes is a
 *     regular file there, nothing it replaces is a directory, and every
 *     unlink and rename is relative to the directory's descriptor.  A
 *     journal that breaks any rule is refused as a whole (CKPT_E_INCOMPLETE
 *     naming the journal, the rule and the byte offset) and left alone.
 * Names no output format owns (files copied along such as config.json, the
 * one file a caller named) are never in a journal: this process publishes
 * them after the decision, and a crash then leaves their old version.
 * Depends on base, io/file, io/journal and io/lock.
 */
#ifndef CKPT_IO_COMMIT_H
#define CKPT_IO_COMMIT_H

#include "../base/base.h"
#include "journal.h"

typedef struct ckpt__commit ckpt__commit;

/*
 * Prepares publishing into `dir`.  With `whole_dir`, the files make up the
 * directory `dir` itself (a checkpoint directory: staged beside it when it
 * is missing or empty); `dir_fd` is then the destination lock's descriptor
 * of it (-1 when it was missing), under which any interrupted commit was
 * finished already.  Otherwise, or when `dir` holds other files, they are
 * staged inside `dir` (which must exist: the destination's lock makes
 * it) and published through the
 * journal — except a single file (`single`), which is simply renamed into
 * place.  Files published through the journal of a directory that is not
 * the destination itself lock that directory for the commit (and finish
 * an interrupted commit there first).  `journaled` says which names the
 * journal may carry.  A checkpoint directory's parents are created when
 * missing.
 */
CKPT__HIDDEN ckpt_status ckpt__commit_begin(const char *dir, bool whole_dir, bool single, int dir_fd,
                                            ckpt__name_rule journaled, ckpt__commit **out, ckpt_error *err);

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

/*
 * Finishes the interrupted commit of the directory open at `dir_fd` (`dir`
 * in messages), whose lock the caller holds: *found true when there was a
 * journal (with `check_only`, it is checked and nothing changes).  A
 * journal that breaks a rule gives CKPT_E_INCOMPLETE naming it, the rule
 * and its byte offset, and nothing is done.  `owned`: the names a journal
 * may name (ckpt__output_owns_any).
 */
CKPT__HIDDEN ckpt_status ckpt__commit_recover_at(int dir_fd, const char *dir, ckpt__name_rule owned, bool check_only,
                                                 bool *found, ckpt_error *err);

typedef enum ckpt__recover_mode {
    CKPT__RECOVER,             /* lock the directory (CKPT_E_LOCKED when a writer holds it), finish */
    CKPT__RECOVER_UNLESS_BUSY, /* the same, but a directory a live writer holds is left to it */
    CKPT__RECOVER_CHECK        /* check only: no lock, no change */
} ckpt__recover_mode;

/* ckpt__commit_recover_at on directory `dir`, opened and locked here as
 * `how` says. */
CKPT__HIDDEN ckpt_status ckpt__commit_recover(const char *dir, ckpt__name_rule owned, ckpt__recover_mode how,
                                              bool *found, ckpt_error *err);

/*
 * For a read of a checkpoint in `dir` (the whole directory, or one `file`
 * in it; NULL: the directory): fails with CKPT_E_INCOMPLETE, naming the
 * directory and the fix (or the live writer's pid), when the directory
 * holds a journal that recovery would execute and that concerns the read
 * (any, for a directory; one naming `file`, for a file).  A journal that is
 * not provably ckpt's is ignored.  Changes nothing and takes no lock.
 */
CKPT__HIDDEN ckpt_status ckpt__commit_check_read(const char *dir, const char *file, ckpt__name_rule owned,
                                                 ckpt_error *err);

#endif
