/* writer_internal.h — what convert.c may do with a writer beyond the public
 * API: copy a tensor's bytes from another file by kernel copy. */
#ifndef CKPT_WRITER_INTERNAL_H
#define CKPT_WRITER_INTERNAL_H

#include "base/base.h"
#include "io/file.h"

/* Appends `n` bytes to tensor `index`, copied from (src_fd, src_offset). */
CKPT__HIDDEN ckpt_status ckpt__writer_copy(ckpt_writer *w, size_t index, int src_fd, uint64_t src_offset,
                                           const char *src_path, uint64_t n, ckpt__copy_tick tick,
                                           void *user, ckpt_error *err);

#endif
