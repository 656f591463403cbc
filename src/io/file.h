/*
 * file.h — the system calls ckpt makes on files, with their failure modes
 * turned into ckpt errors: full reads and writes that survive EINTR and short
 * transfers, kernel-side copies, and atomic output through temporaries.
 * Depends on base only.
 */
#ifndef CKPT_IO_FILE_H
#define CKPT_IO_FILE_H

#include <stdint.h>
#include <stdio.h>

#include "../base/base.h"

/* Opens `path` read-only (O_CLOEXEC) and returns its descriptor and size.
 * A directory or a special file is refused with CKPT_E_INVALID_ARGUMENT
 * (a FIFO without waiting for a writer).  `path` is followed as given:
 * files a checkpoint names are opened with ckpt__beneath_open instead. */
CKPT__HIDDEN ckpt_status ckpt__file_open_read(const char *path, int *fd, uint64_t *size,
                                              ckpt_error *err);

/* Clears O_NONBLOCK from a regular file's descriptor once it is open (the
 * flag only kept a FIFO from blocking the open): io_uring would otherwise
 * answer EAGAIN for data not in the page cache. */
CKPT__HIDDEN void ckpt__fd_blocking(int fd);

/* Reads exactly `n` bytes at `offset`.  End of file first gives
 * CKPT_E_TRUNCATED naming the offset where data stopped. */
CKPT__HIDDEN ckpt_status ckpt__pread_full(int fd, void *buf, uint64_t n, uint64_t offset,
                                          const char *path, ckpt_error *err);

/* The most one write through the page cache takes, except on tmpfs
 * (file.c says why): a caller that makes its data in pieces of this size
 * has each written by one call, without a statfs. */
enum { CKPT__WRITE_PIECE = 32 << 10 };

/* Writes exactly `n` bytes at `offset`, in calls of at most
 * CKPT__WRITE_PIECE except on tmpfs; a failure names the offset of the
 * piece that failed. */
CKPT__HIDDEN ckpt_status ckpt__pwrite_full(int fd, const void *buf, uint64_t n, uint64_t offset,
                                           const char *path, ckpt_error *err);

/* Called between chunks of a long copy with the bytes copied so far by this
 * call; non-zero cancels. */
typedef int (*ckpt__copy_tick)(uint64_t copied, void *user);

/*
 * Copies `n` bytes from (src_fd, src_offset) to (dst_fd, dst_offset).  Uses
 * copy_file_range so that the kernel moves the bytes (no user-space copy, no
 * memory growth); falls back to pread/pwrite through one bounded buffer
 * where the kernel cannot.  `tick` may be NULL.
 */
CKPT__HIDDEN ckpt_status ckpt__copy_range(int src_fd, uint64_t src_offset, const char *src_path,
                                          int dst_fd, uint64_t dst_offset, const char *dst_path,
                                          uint64_t n, ckpt__copy_tick tick, void *user,
                                          ckpt_error *err);

/*
 * Creates a temporary file beside `final_path`, named
 * "<dir>/.<base>.ckpt-tmp-<pid>-<n>", exclusively, mode 0666 & ~umask, its
 * descriptor in *fd; with `fd` NULL, a temporary directory
 * "<dir>/.<base>.ckpt-tmp-<pid>-d<n>".  *tmp_path is malloc'ed.
 */
CKPT__HIDDEN ckpt_status ckpt__temp_create(const char *final_path, char **tmp_path, int *fd,
                                           ckpt_error *err);

/*
 * Removes, in directory `dir`, the temporaries (files and directories named
 * ".<name>.ckpt-tmp-<pid>-<n>") left by ckpt processes that no longer run —
 * a writer killed before it could clean up.  Works relative to the
 * directory's descriptor and never follows a symlink (a symlink with such
 * a name is removed as a name; a temporary directory is emptied one level
 * by ckpt__remove_flat_dirat).  Returns how many it removed.
 */
CKPT__HIDDEN size_t ckpt__remove_stale_temps(const char *dir);

/*
 * Shares with dst the whole blocks of [src_offset, src_offset + n) that
 * lie at the same place within a block in both files (FICLONERANGE: a
 * reflink, which leaves nothing dirty in the page cache); [*begin, *end)
 * (relative to src_offset) gets the bytes shared, empty where the file
 * system cannot share them or the offsets disagree modulo the block size.
 * The caller copies the rest (ckpt__copy_range).  Never fails: what was
 * not shared is left to copy.
 */
CKPT__HIDDEN void ckpt__clone_blocks(int src_fd, uint64_t src_offset, int dst_fd, uint64_t dst_offset, uint64_t n,
                                     uint64_t *begin, uint64_t *end);

/* Whether the kernel can share the blocks of the file open at `src_fd`
 * with a new file in directory `dir` (a reflink), tried by cloning its
 * first block (FICLONERANGE) into an unnamed temporary file there, which
 * then goes: false on ext4, tmpfs, across file systems, or where `dir`
 * refuses a new file. */
CKPT__HIDDEN bool ckpt__can_clone_into(int src_fd, const char *dir);

/* Creates directory `path` and its missing parents (mkdir -p). */
CKPT__HIDDEN ckpt_status ckpt__make_directories(const char *path, ckpt_error *err);

/* Whether `name` is exactly a temporary directory's name that
 * ckpt__temp_create makes for a final path whose file name is `base`:
 * ".<base>.ckpt-tmp-<pid>-d<n>", the numbers as printf writes them. */
CKPT__HIDDEN bool ckpt__temp_dir_name_is(const char *name, const char *base);

/* Removes directory `name` inside the directory open at `dirfd` with the
 * entries directly in it (one level: what a writer made), never following
 * a symlink: `name` itself is opened O_NOFOLLOW, an entry is unlinked as a
 * name (a symlink, never its target), and a subdirectory in it stays (and
 * so does `name`).  Best effort: errors are ignored. */
CKPT__HIDDEN void ckpt__remove_flat_dirat(int dirfd, const char *name);

/* ckpt__remove_flat_dirat on a path (its parent opened as given). */
CKPT__HIDDEN void ckpt__remove_flat_dir(const char *dir);

/* Reserves `size` bytes for a file so that a full disk fails now rather
 * than mid-write; a file system without the feature is not an error. */
CKPT__HIDDEN ckpt_status ckpt__reserve(int fd, uint64_t size, const char *path, ckpt_error *err);


/* `path` with repeated and trailing slashes removed ("out//x/" → "out/x";
 * "/" stays), as a malloc'ed string. */
CKPT__HIDDEN char *ckpt__path_normalize(const char *path);

/* Joins a directory and a file name into a malloc'ed path ("dir/name"). */
CKPT__HIDDEN char *ckpt__path_join(const char *dir, const char *name);

/* The directory part of `path` as a malloc'ed string ("." when none). */
CKPT__HIDDEN char *ckpt__path_dirname(const char *path);

/* The file-name part of `path` (points into it). */
CKPT__HIDDEN const char *ckpt__path_basename(const char *path);

#endif
