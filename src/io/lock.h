/*
 * lock.h — one writer at a time per destination.
 *
 * A writer holds its destination's lock from ckpt_writer_create until it is
 * freed (the write, the commit, and the recovery of an interrupted commit
 * before them), so that a second writer of the same destination fails at
 * once with CKPT_E_LOCKED naming the first one's pid — rather than both
 * writing, one index naming one set of files and the other set left behind.
 *
 * Locks are flock(2) locks: advisory, released by the kernel when their
 * holder dies (a writer killed with SIGKILL never leaves its destination
 * locked), and visible in /proc/locks with the holder's pid.  What is
 * locked:
 *   - a directory destination that exists: the directory itself (flock on
 *     its descriptor).  Nothing is created.
 *   - a directory destination that does not exist yet: there is nothing to
 *     lock until it appears, so a lock file beside it, ".<name>.ckpt-lock"
 *     in its parent, stands for it; its writer builds the directory in a
 *     staging directory that it locks too (commit.c) and renames into place
 *     only where nothing appeared meanwhile, so the directory is locked
 *     from the moment it exists.  A writer finding the directory checks the
 *     lock file too (a holder is still finishing; a leftover of a killed
 *     writer is removed).
 *   - a file destination: the lock file beside it (".<name>.ckpt-lock").
 *     The file itself cannot be locked: it is replaced by a rename.
 * A lock file holds its writer's pid (for systems without /proc/locks) and
 * is removed when the lock is released; only a writer killed while holding
 * it leaves it, and the next writer of that destination, or into the
 * directory holding it, removes it (ckpt__lock_remove_stale).
 * Depends on base and io/file.
 */
#ifndef CKPT_IO_LOCK_H
#define CKPT_IO_LOCK_H

#include "../base/base.h"

typedef struct ckpt__lock ckpt__lock;

/* Locks the destination `path` (a directory destination when `directory`;
 * for either, its parent directories are created when missing) for a writer:
 * CKPT_E_LOCKED, naming the holder's pid, when another process holds it. */
CKPT__HIDDEN ckpt_status ckpt__lock_destination(const char *path, bool directory, ckpt__lock **out, ckpt_error *err);

/* The locked destination directory's descriptor, or -1 (a file
 * destination, or a directory that did not exist when it was locked). */
CKPT__HIDDEN int ckpt__lock_dir_fd(const ckpt__lock *l);

/* Releases the lock (removing its lock file); NULL is fine. */
CKPT__HIDDEN void ckpt__lock_release(ckpt__lock *l);

/* Locks the file or directory open at `fd` (named `what` in messages),
 * exclusively, without waiting: CKPT_E_LOCKED naming the holder. */
CKPT__HIDDEN ckpt_status ckpt__lock_fd(int fd, const char *what, ckpt_error *err);

/* Removes, in directory `dir`, the lock files (".<name>.ckpt-lock") that no
 * process holds: those of writers killed while holding them.  Each is
 * locked first and removed while locked (a writer that opened it meanwhile
 * then finds it no longer named, and takes a new one); a symlink or another
 * kind of file with such a name is left alone.  Best effort. */
CKPT__HIDDEN void ckpt__lock_remove_stale(const char *dir);

/* The pid of a process holding a flock(2) lock on what `fd` is open on, from
 * /proc/locks; 0 when none is seen. */
CKPT__HIDDEN long ckpt__lock_holder(int fd);

#endif
