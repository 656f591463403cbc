/*
 * collective_internal.h — what the collective operations (comm.c,
 * collective_load.c, collective_write.c) share: a communicator wrapped
 * with its timeout, statistics and failure handling, and the encodings of
 * what ranks send each other (wire.c: catalogs, writer layouts, shard
 * declarations) — bytes that are untrusted on the receiving side, read with
 * every length and count checked.
 */
#ifndef CKPT_COLLECTIVE_INTERNAL_H
#define CKPT_COLLECTIVE_INTERNAL_H

#include "base/base.h"
#include "ckpt_collective.h"
#include "io/source.h"

/* The most bytes handed to one communicator call. */
#define CKPT__COMM_CHUNK ((uint64_t)64 << 20)

typedef struct ckpt__coll {
    const ckpt_comm *comm;
    int rank, n;
    bool exchange;       /* the communicator can exchange bytes (not "none") */
    bool broken;         /* a call failed: no further calls */
    uint32_t timeout_ms;
    ckpt_replicated replicated;
    ckpt_collective_stats *stats; /* never NULL */
    ckpt_collective_stats own_stats;
} ckpt__coll;

/* Checks and takes a communicator and options (either may be NULL for
 * options).  `stats` may be NULL. */
CKPT__HIDDEN ckpt_status ckpt__coll_init(ckpt__coll *c, const ckpt_comm *comm, const ckpt_collective_options *options,
                                         ckpt_collective_stats *stats, ckpt_error *err);

/* Monotonic seconds. */
CKPT__HIDDEN double ckpt__now(void);

/* Broadcasts `n` bytes from `root`, in calls of at most CKPT__COMM_CHUNK.
 * `what` names the step in errors. */
CKPT__HIDDEN ckpt_status ckpt__coll_bcast(ckpt__coll *c, void *data, uint64_t n, int root, const char *what,
                                          ckpt_error *err);

/*
 * Broadcasts a variable-size message from `root` together with the root's
 * status: on the root, `status`/`root_err` say whether it has something to
 * send (`data`, `n`); elsewhere *data receives a malloc'ed copy (at most
 * `limit` bytes) and *n its size.  When the root failed, every rank returns
 * its failure: the root its own error, the others CKPT__D(PEER_FAILED)
 * quoting it.
 */
CKPT__HIDDEN ckpt_status ckpt__coll_bcast_message(ckpt__coll *c, int root, ckpt_status status,
                                                  const ckpt_error *root_err, void **data, uint64_t *n,
                                                  uint64_t limit, const char *what, ckpt_error *err);

/* Every rank's `n` bytes, concatenated in rank order into *all (malloc'ed);
 * *offsets (malloc'ed, nranks + 1 entries) says where each begins.  Each
 * rank sends at most `limit` bytes. */
CKPT__HIDDEN ckpt_status ckpt__coll_allgatherv(ckpt__coll *c, const void *mine, uint64_t n, uint64_t limit,
                                               unsigned char **all, uint64_t **offsets, const char *what,
                                               ckpt_error *err);

/*
 * Every rank votes `local` (with `local_err` as its reason when it failed);
 * returns CKPT_OK when all voted OK.  Otherwise every rank fails: a rank
 * that failed itself returns its own error (err untouched when it is
 * local_err), the others CKPT__D(PEER_FAILED) naming the lowest failing rank
 * and quoting it, or CKPT__D(PEER_TIMEOUT) naming a rank that did not vote.
 */
CKPT__HIDDEN ckpt_status ckpt__coll_agree(ckpt__coll *c, ckpt_status local, const ckpt_error *local_err,
                                          const char *what, ckpt_error *err);

/* ---- wire.c: the encodings ------------------------------------------------- */

/* Opens the source of a catalog's data file named `name`, which rank 0
 * saw with `size` bytes. */
typedef ckpt_status (*ckpt__wire_opener)(void *user, const char *name, uint64_t size, ckpt__source **out,
                                         ckpt_error *err);

/* A catalog as bytes: files (paths, sizes, metadata), tensors with their
 * pieces, storages, metadata, object tree, index path, format. */
CKPT__HIDDEN ckpt_status ckpt__catalog_encode(const ckpt_catalog *catalog, ckpt__buf *out, ckpt_error *err);

/* A catalog from ckpt__catalog_encode's bytes, every field checked (pieces
 * inside their files, boxes inside their tensors); data files are opened
 * with `opener` (NULL: by path, the size checked — as ckpt_catalog_open
 * would: `path`, what this rank was asked to open, as named, any other
 * local file beneath its directory; a NULL `path` opens no local file). */
CKPT__HIDDEN ckpt_status ckpt__catalog_decode(const void *data, size_t n, const char *path,
                                              const ckpt_catalog_options *options,
                                              ckpt__wire_opener opener, void *opener_user, ckpt_catalog **out,
                                              ckpt_error *err);

/* One rank's declared parts (a shard writer's), as bytes. */
typedef struct ckpt__wire_part {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape, *start, *count;
} ckpt__wire_part;

CKPT__HIDDEN ckpt_status ckpt__parts_encode(const ckpt__wire_part *parts, size_t count, ckpt__buf *out,
                                            ckpt_error *err);

/* Decodes one rank's parts into arrays allocated from `arena`. */
CKPT__HIDDEN ckpt_status ckpt__parts_decode(const void *data, size_t n, int rank, ckpt__arena *arena,
                                            ckpt__wire_part **parts, size_t *count, ckpt_error *err);

#endif
