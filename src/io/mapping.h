/*
 * mapping.h — a private, copy-on-write mapping of a whole source, with an
 * optional prefetch: writable memory whose writes never reach the file
 * (tensors handed to frameworks as if freshly allocated), that outlives the
 * catalog it came from.
 *
 * Prefetch reads the file into the page cache in the background, so that
 * first touches find their pages there: the kernel reads at most one
 * readahead window per fault or per WILLNEED call, so one call per window
 * submits the whole file, which the disk then serves at full queue depth.
 * Only what fits in half of MemAvailable is prefetched, never a file
 * already cached (64 sampled pages), never a network file system (which is
 * not mapped at all).  Depends on base and io.
 */
#ifndef CKPT_IO_MAPPING_H
#define CKPT_IO_MAPPING_H

#include "../base/base.h"
#include "source.h"

typedef struct ckpt_mapping ckpt__mapping; /* public as ckpt_mapping */

CKPT__HIDDEN ckpt_status ckpt__mapping_create(ckpt__source *src, bool prefetch, ckpt__mapping **out, ckpt_error *err);
CKPT__HIDDEN void *ckpt__mapping_data(const ckpt__mapping *m);
CKPT__HIDDEN uint64_t ckpt__mapping_size(const ckpt__mapping *m);
/* A byte range of a file. */
typedef struct ckpt__range {
    uint64_t offset, len;
} ckpt__range;

/* Prefetches only these ranges of the mapping's file (`src`, the source it
 * was made from), as create's prefetch does the whole file: in the
 * background, when they fit in half of MemAvailable and are not cached
 * already.  Sorts and merges `ranges` in place.  Returns whether a thread
 * was started. */
CKPT__HIDDEN bool ckpt__mapping_prefetch(ckpt__mapping *m, ckpt__source *src, ckpt__range *ranges, size_t n);

/* Whether a prefetch thread was started. */
CKPT__HIDDEN bool ckpt__mapping_prefetching(const ckpt__mapping *m);
/* Drops an owner of the mapping (the last unmaps). */
CKPT__HIDDEN void ckpt__mapping_release(ckpt__mapping *m);

#endif
