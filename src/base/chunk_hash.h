/* chunk_hash.h — the XXH3-64 of each chunk of a large tensor's bytes
 * (CKPT_CHUNK_METADATA_KEY), fed in order as the bytes stream.
 *
 * Chunk edges are the file's multiples of the chunk size, not the
 * tensor's: a chunk whose bytes equal the base's is then whole file blocks
 * (the chunk size is a multiple of 4 KiB) that a reflink can share.  A
 * tensor whose data begins `phase` bytes past an edge (its file offset
 * modulo the chunk size) has chunk k = tensor bytes
 * [max(0, k·C − phase), min(n, (k+1)·C − phase)).  Every tensor of n bytes
 * has ckpt__chunk_count(n, C) chunks whatever its phase, so that the
 * header's length does not depend on where the data lands; the last one is
 * empty when the tensor ends before it. */
#ifndef CKPT_BASE_CHUNK_HASH_H
#define CKPT_BASE_CHUNK_HASH_H

#include <xxhash.h>

#include "base.h"

/* ceil(n / chunk) + 1. */
CKPT__HIDDEN uint32_t ckpt__chunk_count(uint64_t nbytes, uint64_t chunk);
/* Chunk k's bytes [*begin, *end) in the tensor's own byte numbers. */
CKPT__HIDDEN void ckpt__chunk_range(uint64_t nbytes, uint64_t chunk, uint64_t phase, uint32_t k, uint64_t *begin,
                                    uint64_t *end);

typedef struct ckpt__chunk_hash {
    XXH3_state_t *state;
    uint64_t nbytes, chunk, phase, at, end; /* end: where chunk k ends */
    uint64_t *digests;                       /* count of them, the caller's */
    uint32_t count, k;
} ckpt__chunk_hash;

/* Starts hashing a tensor's chunks into digests[count] (count =
 * ckpt__chunk_count).  CKPT_E_NO_MEMORY (err names `path`) if the state
 * cannot be made. */
CKPT__HIDDEN ckpt_status ckpt__chunk_hash_init(ckpt__chunk_hash *h, uint64_t nbytes, uint64_t chunk, uint64_t phase,
                                               uint64_t *digests, const char *path, ckpt_error *err);
/* The tensor's next n bytes. */
CKPT__HIDDEN void ckpt__chunk_hash_update(ckpt__chunk_hash *h, const void *data, size_t n);
/* After the last byte: the digests of the chunks not yet ended. */
CKPT__HIDDEN void ckpt__chunk_hash_final(ckpt__chunk_hash *h);
CKPT__HIDDEN void ckpt__chunk_hash_free(ckpt__chunk_hash *h);
#endif
