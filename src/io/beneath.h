/*
 * beneath.h — opening the files of a checkpoint directory without ever
 * leaving it.
 *
 * A checkpoint directory comes from strangers (a Hub repo, a tarball, a
 * git clone) and may hold symbolic links and special files.  The path the
 * user named is theirs and is followed as given; every other file ckpt
 * opens because the checkpoint names it (an index's shards, gguf-split
 * parts, DCP's .distcp files) or because a listing found it is opened
 * relative to the directory's descriptor:
 *
 *   - with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) where the
 *     kernel has it (Linux 5.6), else by walking the name one component
 *     at a time with O_NOFOLLOW and resolving each symbolic link by hand
 *     (the same rule: a link may go anywhere inside the directory);
 *   - a name that is absolute or has a ".." component, or that leads out
 *     of the directory through a symbolic link, is CKPT_E_UNSAFE_PATH;
 *   - what it reaches is looked at before it is opened for reading (an
 *     O_PATH descriptor, fstat): a FIFO, socket, device or directory is
 *     CKPT_E_UNSAFE_PATH and is never opened (opening a device can act:
 *     a watchdog, a tape); the read open adds O_NONBLOCK, so that a FIFO
 *     swapped in meanwhile cannot block, and must reach the same inode.
 *
 * The one exception is the Hugging Face cache: in
 * <cache>/models--org--name/snapshots/<rev>/ every file is a symbolic link
 * to ../../blobs/<hash>.  When the directory is (inside) such a snapshot, a
 * link whose target is exactly the repo folder's blobs/<name> is followed
 * into blobs/, and nowhere else.
 *
 * CKPT_NO_OPENAT2=1 in the environment makes ckpt walk even where openat2
 * exists (tests run both ways).  Depends on base only.
 */
#ifndef CKPT_IO_BENEATH_H
#define CKPT_IO_BENEATH_H

#include <stdint.h>

#include "../base/base.h"

typedef struct ckpt__beneath ckpt__beneath;

/* Opens directory `dir` (as named: the user named it, so it may be or go
 * through a symbolic link) as the place files are opened beneath.  Names
 * given to the functions below are paths that start with `dir` as spelled
 * here (what joining a file name to it gives). */
CKPT__HIDDEN ckpt_status ckpt__beneath_open_root(const char *dir, ckpt__beneath **out, ckpt_error *err);

/* Closes it; accepts NULL. */
CKPT__HIDDEN void ckpt__beneath_close(ckpt__beneath *b);


/* Opens the regular file `name` (inside the directory, see above) for
 * reading: its descriptor (O_RDONLY | O_NONBLOCK | O_CLOEXEC) and size.
 * Errors name `name`.  With `skip_dirs`, a directory is no error: *fd is
 * -1 (a listing's subdirectories). */
CKPT__HIDDEN ckpt_status ckpt__beneath_open(const ckpt__beneath *b, const char *name, bool skip_dirs, int *fd,
                                            uint64_t *size, ckpt_error *err);

/* The names in directory `name` (the directory itself or one beneath it)
 * that do not start with '.' (with `dots`, every name but "." and ".."),
 * sorted, malloc'ed (each, and the array). */
CKPT__HIDDEN ckpt_status ckpt__beneath_list(const ckpt__beneath *b, const char *name, bool dots, char ***names,
                                            size_t *count, ckpt_error *err);

/* Whether the directory holds an entry `file` (a plain name), of any kind
 * — a symbolic link or a FIFO too: opening it says whether it is usable. */
CKPT__HIDDEN bool ckpt__beneath_has(const ckpt__beneath *b, const char *file);

/* The bytes of the regular files directly in the directory whose names do
 * not start with '.' (links and other entries count as nothing; 0 when it
 * cannot be listed): a checkpoint directory's size, for the metadata
 * budget. */
CKPT__HIDDEN uint64_t ckpt__beneath_file_bytes(const ckpt__beneath *b);
/* Frees what ckpt__beneath_list returned. */
CKPT__HIDDEN void ckpt__beneath_free_names(char **names, size_t count);

#endif
