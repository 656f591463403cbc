/*
 * engine.h — the one engine every byte goes through (engine.c).
 *
 * A *move* is one tensor's journey: a slice of a catalog tensor (in its
 * axes), an axis order and a dtype for the output, and a sink —
 *   MEMORY  a dense row-major buffer (loads, ckpt_catalog_read);
 *   WRITER  a tensor of a ckpt_writer, written at computed offsets
 *           (conversions), by the kernel where no byte changes;
 *   HASH    an XXH3-64 of the output bytes (verify);
 *   STAGE   memory the engine cannot write (a GPU's): each box is read into
 *           a slot the move's stage lends, dense in output order, and handed
 *           back to the stage, which sends it on (src/device/ring.c).
 * The engine cuts every move into boxes of at most a chunk, runs them on a
 * pool of threads (the caller is one of them), reads each box from the
 * tensor's pieces in runs (src/transform/layout.h) through batched reads
 * (io_uring, O_DIRECT, or the source's own reads), straight into place
 * when no byte changes and through one bounce buffer per thread when they
 * do (swap, cast, permute, inflate).  Memory beyond the destinations is
 * that ring, whatever the tensors' sizes.
 */
#ifndef CKPT_ENGINE_H
#define CKPT_ENGINE_H

#include "catalog_internal.h"
#include "transform/elementwise.h"

typedef enum ckpt__sink { CKPT__SINK_MEMORY, CKPT__SINK_WRITER, CKPT__SINK_HASH, CKPT__SINK_STAGE } ckpt__sink;

/* A destination reached through host slots (STAGE sinks): the engine knows
 * nothing of what is behind it.  Boxes are at most slot_bytes (the run's
 * chunk shrinks to fit).  acquire may block until a slot is free; submit
 * takes the slot back with `bytes` of output for dst + at (the tensor's
 * name for errors); abandon takes back a slot whose box failed.  Called
 * from any worker thread.
 *
 * read_direct (NULL: none) reads file bytes straight to the destination,
 * with no slot: GPUDirect Storage.  The engine offers it the part of a box
 * whose bytes are the file's unchanged (no cast, swap, gather or permute,
 * no CRC-32 to follow) and that lies on `fd`, an O_DIRECT descriptor of
 * the file at `path`, at offsets and a size aligned to 4 KiB; the box's
 * unaligned head and tail still go through slots.  *taken false: the
 * stage cannot read that file (the engine sends the box through slots).
 * forget_files (NULL with it) is called once the run's reads are over,
 * before the engine closes the descriptors it gave. */
typedef struct ckpt__stage ckpt__stage;
struct ckpt__stage {
    uint64_t slot_bytes;
    ckpt_status (*acquire)(ckpt__stage *stage, void **slot, ckpt_error *err);
    ckpt_status (*submit)(ckpt__stage *stage, void *slot, void *dst, uint64_t at, uint64_t bytes, const char *tensor,
                          ckpt_error *err);
    void (*abandon)(ckpt__stage *stage, void *slot);
    ckpt_status (*read_direct)(ckpt__stage *stage, int fd, const char *path, uint64_t offset, void *dst, uint64_t at,
                               uint64_t bytes, const char *tensor, bool *taken, ckpt_error *err);
    void (*forget_files)(ckpt__stage *stage);
};

typedef struct ckpt__move {
    size_t tensor;                 /* the catalog's index of the source tensor */
    const uint64_t *start;         /* the slice, per source axis; NULL: the whole tensor */
    const uint64_t *count;
    const uint32_t *perm;          /* output axis i is source axis perm[i]; NULL: the source's order */
    /* The source seen with other axes of the same elements (a row-major
     * reshape: llama.cpp's Q/K permutation splits the rows into heads);
     * start, count and perm are then in these axes.  0: the source's.  Only
     * for a tensor stored as one dense piece, in a dtype of whole bytes. */
    uint32_t view_ndim;
    const uint64_t *view_shape;
    ckpt_dtype dtype;              /* the output's; CKPT_DTYPE_INVALID: the source's */
    const char *name;              /* the output's name, for errors; NULL: the source's */
    /* An elementwise rule: each element widened to float32, the rule
     * applied, the result cast to dtype (never a copy by the kernel).
     * NULL: none. */
    const ckpt__elementwise *op;
    ckpt__sink sink;
    void *dst;                     /* MEMORY: the output, dense row-major, any alignment; STAGE: the
                                      stage's address of it */
    ckpt__stage *stage;            /* STAGE: where boxes go */
    size_t writer_index;           /* WRITER: the tensor's index in the writer */
    uint64_t writer_at;            /* WRITER: where the move's output begins in that tensor's bytes (a part) */
    uint64_t digest;               /* HASH: set by the run */
    /* HASH: also each chunk's XXH3-64 into chunk_digests (ckpt__chunk_count
     * of them), chunks of chunk_bytes whose edges are `chunk_phase` bytes
     * before the tensor's multiples of it (base/chunk_hash.h).  NULL: none. */
    uint64_t *chunk_digests;
    uint64_t chunk_bytes, chunk_phase;
} ckpt__move;

typedef struct ckpt__engine_options {
    unsigned threads;        /* 0: as ckpt_load_options.threads documents */
    uint64_t chunk_bytes;    /* 0: the default, within the ring budget */
    ckpt_io_mode io;
    int io_uring;            /* -1: never */
    ckpt_progress_fn progress;
    void *user;
    ckpt_writer *writer;     /* for WRITER sinks */
    bool ordered;            /* WRITER: each tensor's bytes must arrive in order (checksums) */
    int (*move_done)(size_t move, void *user); /* a move's bytes all in place; non-zero cancels */
    void *done_user;
    /* Check the CRC-32s of the ZIP members whose bytes the moves read whole
     * (see "CRC-32s" below). */
    bool check_crc;
    /* Recorded CRC-32s (the catalog's numbers) to read whole and check
     * besides the moves: ckpt_verify's. */
    const uint32_t *members;
    size_t member_count;
} ckpt__engine_options;

/*
 * CRC-32s.  A ZIP member (a torch storage, an .npz array) records the
 * CRC-32 of its bytes; formats declare them (ckpt__cat_add_crc) and link
 * the pieces that lie in them (ckpt__piece.crc).  With check_crc, a move
 * that reads a whole tensor (no slice) into memory or a writer checks its
 * member as the bytes stream:
 *   stored members: each box's bytes, as they land, give CRC-32s of
 *     segments of the member; once every task of every move on the member
 *     is done, the segments are chained in offset order (crc32_combine)
 *     from the member's head (the bytes the format read at open, an .npy
 *     header): when they cover the member, its CRC-32 is compared.  So a
 *     member shared by several tensors (a torch storage and its views) is
 *     checked when the last of them is in place — before that one's
 *     move_done — if together they cover it; bytes of a member that no
 *     tensor read whole covers (a storage's elements no saved view shows)
 *     leave it unchecked, as does one read in runs under 1 KiB on average
 *     (max_segments).  The kernel copies no checked bytes: they pass
 *     through memory.
 *   DEFLATE members: the inflater keeps the CRC-32 of everything it
 *     inflated; at the end of the move it inflates the rest of the member
 *     and checks its declared size and CRC-32.
 * A mismatch fails the run with CKPT__D(CHECKSUM) naming the file, the
 * member and the tensor; a declared size the DEFLATE stream contradicts,
 * CKPT__D(ZIP_INVALID).  `members` reads members whole for ckpt_verify, in
 * chunks whose CRC-32s are chained the same way.
 */

/* Runs every move; the first failure stops the rest and is returned (a
 * failed move's destination holds partial data).  `stats` may be NULL. */
CKPT__HIDDEN ckpt_status ckpt__engine_run(ckpt_catalog *catalog, ckpt__move *moves, size_t count,
                                          const ckpt__engine_options *options, ckpt_load_stats *stats,
                                          ckpt_error *err);

/* Output bytes of a move (its slice's elements in its dtype). */
CKPT__HIDDEN uint64_t ckpt__move_nbytes(const ckpt_catalog *catalog, const ckpt__move *move);

#endif
