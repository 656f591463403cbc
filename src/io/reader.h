/*
 * reader.h — batches of positional reads, through io_uring when the kernel
 * offers it (probed at run time; a seccomp filter or an old kernel falls
 * back to pread; requests without a descriptor go through their source),
 * and the facts about files that choose how to read them:
 * O_DIRECT alignment (statx), network file systems (statfs), page-cache
 * residency (mincore).  Depends on base only.
 */
#ifndef CKPT_IO_READER_H
#define CKPT_IO_READER_H

#include <stdint.h>

#include "../base/base.h"
#include "source.h"

typedef struct ckpt__reader {
    void *uring;        /* struct io_uring *, or NULL: pread */
    uint64_t reads, bytes;
} ckpt__reader;

/* Sets a reader up; with want_uring, tries io_uring (no failure: falls
 * back to pread). */
CKPT__HIDDEN void ckpt__reader_init(ckpt__reader *reader, bool want_uring);
CKPT__HIDDEN void ckpt__reader_free(ckpt__reader *reader);

/* Performs every request (in any order, concurrently with io_uring or a
 * source's read_many).  A file ending before a request's `need` gives
 * CKPT_E_TRUNCATED. */
CKPT__HIDDEN ckpt_status ckpt__reader_run(ckpt__reader *reader, ckpt__read_req *reqs, size_t n, ckpt_error *err);

/* Called for each piece of a stream as it lands: `data` holds the `n`
 * bytes at file offset `at`, until the call returns (its buffer slot is
 * then reused for a later piece). */
typedef void (*ckpt__piece_fn)(uint64_t at, const unsigned char *data, uint64_t n, void *user);

/* Reads [offset, offset + len) of `fd` in pieces of `piece` bytes through
 * `slots` slots of `buf` (slots * piece bytes, aligned as the descriptor
 * needs), handing each piece to done() as it lands and reading the next
 * into its slot at once: with io_uring every slot stays in flight until
 * the last pieces, where a batch would drain before refilling.  Errors
 * name src and tensor; every read in flight has finished on return. */
CKPT__HIDDEN ckpt_status ckpt__reader_stream(ckpt__reader *reader, ckpt__source *src, int fd, uint64_t offset,
                                             uint64_t len, unsigned char *buf, size_t slots, uint64_t piece,
                                             const char *tensor, ckpt__piece_fn done, void *user, ckpt_error *err);

/* Opens `path` again with O_DIRECT if the file system allows it and it is
 * still the file behind `fd`; returns -1 otherwise.  *align receives the
 * offset/length/memory alignment direct reads need. */
CKPT__HIDDEN int ckpt__open_direct(const char *path, int fd, uint32_t *align);

/* True for network and FUSE file systems, where ckpt neither maps files
 * (a server-side truncation would fault) nor reads around the page cache. */
CKPT__HIDDEN bool ckpt__is_remote_fs(int fd);

/* Fraction (0..1) of sampled pages of [offset, offset + len) in the page
 * cache; 1 when it cannot tell. */
CKPT__HIDDEN double ckpt__cached_fraction(int fd, uint64_t file_size, uint64_t offset, uint64_t len);

#endif
