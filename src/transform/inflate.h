/*
 * inflate.h — reading DEFLATE records (re-zipped torch files) as a stream
 * that resumes where it stopped.
 *
 * A DEFLATE record can only be decoded from its start.  An inflater keeps
 * its zlib state between reads, so reading a record front to back in
 * chunks costs one pass over it, not one pass per chunk; a read behind the
 * current position starts over.  Memory: one 1 MiB input buffer and zlib's
 * window, whatever the record's size.  Depends on base and io.
 */
#ifndef CKPT_TRANSFORM_INFLATE_H
#define CKPT_TRANSFORM_INFLATE_H

#include "../base/base.h"
#include "../io/source.h"

typedef struct ckpt__inflater ckpt__inflater;

/* Creates an inflater for the record of `record_size` compressed bytes at
 * `record` in `src`. */
CKPT__HIDDEN ckpt_status ckpt__inflater_create(ckpt__source *src, uint64_t record, uint64_t record_size,
                                               ckpt__inflater **out, ckpt_error *err);

/* Whether the inflater reads that record of that source. */
CKPT__HIDDEN bool ckpt__inflater_is(const ckpt__inflater *f, const ckpt__source *src, uint64_t record);

/* The next inflated byte's offset. */
CKPT__HIDDEN uint64_t ckpt__inflater_position(const ckpt__inflater *f);

/* Inflated bytes [offset, offset + n) into dst; errors name `tensor`. */
CKPT__HIDDEN ckpt_status ckpt__inflater_read(ckpt__inflater *f, uint64_t offset, void *dst, uint64_t n,
                                             const char *tensor, ckpt_error *err);

/*
 * Inflates the record to its end (from where the inflater is, or from its
 * start) and checks it against its ZIP member: exactly `size` bytes before
 * the DEFLATE stream ends (else CKPT__D(ZIP_INVALID)), whose CRC-32 is `crc32`
 * (else CKPT__D(CHECKSUM)).  The inflater keeps the CRC-32 of every byte it
 * produced since its record's start, so bytes already read are not read
 * again.  Errors name the member and `tensor`.
 */
CKPT__HIDDEN ckpt_status ckpt__inflater_check(ckpt__inflater *f, uint64_t size, uint32_t crc32, const char *member,
                                              const char *tensor, ckpt_error *err);

/* Compressed bytes read from the source so far (the cost of the reads). */
CKPT__HIDDEN uint64_t ckpt__inflater_bytes_in(const ckpt__inflater *f);

CKPT__HIDDEN void ckpt__inflater_free(ckpt__inflater *f);

#endif
