/* writer_internal.h — what the conversions (convert.c, load.c) may do with a
 * writer beyond the public API: positional writes and kernel copies. */
#ifndef CKPT_WRITER_INTERNAL_H
#define CKPT_WRITER_INTERNAL_H

#include "base/base.h"
#include "io/file.h"
#include "io/source.h"

/* Tensor bytes [at, at + n) at their place in the output file.  Threads
 * may write different ranges at once; with checksums a tensor's bytes must
 * arrive in order. */
CKPT__HIDDEN ckpt_status ckpt__writer_pwrite(ckpt_writer *w, size_t index, uint64_t at, const void *data, size_t n,
                                             ckpt_error *err);

/* Direct mode (a catalog opened with `direct`): written data leaves the
 * page cache once it is on disk (sync_file_range, POSIX_FADV_DONTNEED). */
CKPT__HIDDEN void ckpt__writer_drop_behind(ckpt_writer *w);

/* Tensor bytes [at, at + n) copied by the kernel from a local source (no
 * checksums). */
CKPT__HIDDEN ckpt_status ckpt__writer_pcopy(ckpt_writer *w, size_t index, uint64_t at, ckpt__source *src,
                                            uint64_t src_offset, uint64_t n, ckpt_error *err);

/* Whether each tensor's bytes must arrive in order (the output format
 * hashes them as they stream). */
CKPT__HIDDEN bool ckpt__writer_needs_order(const ckpt_writer *w);

#endif
