/* writer_internal.h — what the conversions (convert.c, load.c) may do with a
 * writer beyond the public API: kernel copies, and the source's metadata. */
#ifndef CKPT_WRITER_INTERNAL_H
#define CKPT_WRITER_INTERNAL_H

#include "base/base.h"
#include "io/file.h"
#include "io/source.h"

/* Appends `n` bytes to tensor `index`, copied from `src` at `src_offset`
 * (by the kernel when the source is a local file). */
CKPT__HIDDEN ckpt_status ckpt__writer_copy(ckpt_writer *w, size_t index, ckpt__source *src, uint64_t src_offset,
                                           uint64_t n, ckpt__copy_tick tick, void *user, ckpt_error *err);

/* What every conversion writes besides tensors: the source's metadata
 * ("format": "pt" for torch sources) and a torch source's object tree
 * (convert.c). */
CKPT__HIDDEN ckpt_status ckpt__copy_source_metadata(const ckpt_catalog *src, ckpt_writer *w, ckpt_error *err);

#endif
