/*
 * layout.h — where a box of a tensor's elements lies in its file, and where
 * its converted elements go in memory: slicing, gathering strided views and
 * permuting axes, chunk by chunk.
 *
 * A piece's elements lie at element strides in its file (dense row-major,
 * or a torch view's own strides).  Sorted by stride, outermost first, the
 * axes give the piece's *physical order*; in that order a box of elements
 * is a set of *runs*: contiguous byte ranges of the file, one per row of
 * the innermost axes that are whole and contiguous.  A view whose
 * innermost stride is not 1 (a column, a step, a broadcast) has runs of
 * one element.  Runs are read into the destination directly when their
 * bytes need no conversion and land contiguous there, else into a bounce
 * buffer (densely, in physical order) and scattered from it, converting
 * each element (ckpt__scatter).  Depends on base only.
 */
#ifndef CKPT_TRANSFORM_LAYOUT_H
#define CKPT_TRANSFORM_LAYOUT_H

#include "../base/base.h"
#include "cast.h"

/* A box of a piece in its physical order: per physical axis k (outermost
 * first) the source axis it is, the box's extent, the file stride and the
 * destination stride; and how it splits into runs. */
typedef struct ckpt__runs {
    uint32_t n;                      /* axes */
    uint32_t axis[CKPT_MAX_DIMS];    /* physical axis k is source axis axis[k] */
    uint64_t count[CKPT_MAX_DIMS];   /* the box's extent per physical axis */
    int64_t stride[CKPT_MAX_DIMS];   /* file element stride per physical axis */
    int64_t dst[CKPT_MAX_DIMS];      /* destination stride (output units) per physical axis */
    uint32_t outer;                  /* runs are indexed by physical axes [0, outer) */
    uint64_t run_units;              /* units per run */
    uint64_t runs;                   /* number of runs */
    uint64_t units;                  /* units in the box */
    bool direct_ok;                  /* every run lands contiguous in the destination */
} ckpt__runs;

/*
 * Describes a box of a piece.  `piece_count` is the piece's extent and
 * `strides` its file strides (NULL: dense row-major over piece_count),
 * `box` the box's extent, `dst_stride` the destination stride of each
 * source axis.  Without `direct`, runs are as long as the file allows
 * (to read into a bounce buffer); with it, as long as they also land
 * contiguous in the destination (to read straight there).  r->direct_ok
 * tells whether every run does.
 */
CKPT__HIDDEN void ckpt__runs_plan(ckpt__runs *r, uint32_t n, const uint64_t *piece_count, const int64_t *strides,
                                  const uint64_t *box, const int64_t *dst_stride, bool direct);

/* Iterates runs: *file_elem and *dst_unit are the element offsets (in the
 * file, from the box's first element; in the destination, from the box's
 * origin) of run i, given those of run i - 1 (call with i = 0 first, with
 * both zero).  idx[] is the iterator's state (CKPT_MAX_DIMS zeros at
 * first). */
CKPT__HIDDEN void ckpt__runs_next(const ckpt__runs *r, uint64_t i, uint64_t *idx, int64_t *file_elem,
                                  int64_t *dst_unit);

/*
 * Scatters a dense box (row-major over count[0, n), `in_size`-byte units)
 * into `dst`, whose units along axis k are dst_stride[k] output units
 * apart, converting each unit with fn.  This is what permutes axes: the
 * same dense bytes land transposed when the strides say so.
 */
CKPT__HIDDEN void ckpt__scatter(ckpt__cast_fn fn, unsigned in_size, unsigned out_size, const unsigned char *src,
                                uint32_t n, const uint64_t *count, unsigned char *dst, const int64_t *dst_stride);

#endif
