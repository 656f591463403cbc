/*
 * ckpt_collective.h — many processes, each with its part: collective
 * loads, converts and saves over a communicator the program already has.
 *
 * It extends <ckpt.h> (included): the catalogs, plans, load options and
 * writer options of a single process are the same here.  Communicators:
 * torch.distributed (the Python package's ckpt.distributed), MPI
 * (<ckpt_mpi.h>, libckpt_mpi), or "none" (ckpt_comm_from_env).
 */
#ifndef CKPT_COLLECTIVE_H
#define CKPT_COLLECTIVE_H

#include "ckpt.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * When N processes (ranks) load or save one checkpoint — tensor or pipeline
 * parallel, FSDP, several nodes — each reads or writes only its part, and
 * they coordinate through a *communicator* the program already has:
 * torch.distributed (the Python package's ckpt.distributed), MPI
 * (libckpt_mpi, <ckpt_mpi.h>, built when Open MPI is installed), or none.
 * libckpt itself depends on neither: a communicator is this table of
 * callbacks.
 *
 * Every collective function below must be called by every rank of the
 * communicator, in the same order.  Each step waits at most
 * ckpt_collective_options.timeout_ms for the other ranks; a rank that died
 * or hangs makes the others fail with CKPT_E_TIMEOUT (detail
 * CKPT_D_PEER_TIMEOUT) naming it, a rank that failed makes the others fail
 * with CKPT_E_PEER (CKPT_D_PEER_FAILED) naming it and quoting its error,
 * and nothing is published under a final name.  After a CKPT_E_TIMEOUT or
 * a CKPT_E_PEER of the communicator the communicator may hold unfinished
 * operations: end the job (MPI_Abort, or destroy the process group).
 *
 * Files are reached by path from every rank: a checkpoint to load must be
 * visible to all of them (a shared or replicated file system), and so must
 * an output directory (a shared file system).
 */

/* A vote of ckpt_comm.agree. */
typedef struct ckpt_vote {
    ckpt_status status; /* in: this rank's; out: CKPT_OK only when every rank voted CKPT_OK */
    int32_t rank;       /* out: the rank whose failure `status` and `message` are (the lowest), or -1 */
    char message[512];  /* in: this rank's error message (may be empty); out: that rank's */
} ckpt_vote;

/*
 * A communicator: this rank, the number of ranks, and the operations
 * libckpt needs.  With the four functions NULL the communicator is "none":
 * ranks exchange nothing, each plans from the headers and its rank alone
 * (loads only; see ckpt_comm_from_env).
 *
 * libckpt calls the functions from the thread that called the collective
 * function, never from its worker threads, with at most 64 MiB per call.
 * Each returns CKPT_OK, or a failure with `err` filled (CKPT_E_TIMEOUT
 * after `timeout_ms` milliseconds, naming the ranks that did not take
 * part when it knows them; CKPT_E_PEER for anything else; err->detail
 * CKPT_D_PEER_TIMEOUT and CKPT_D_COMM, or CKPT_D_NONE).
 */
typedef struct ckpt_comm {
    size_t size; /* sizeof(ckpt_comm), set by ckpt_comm_init */
    int rank;    /* this process, 0 ≤ rank < nranks */
    int nranks;
    void *user;  /* passed to every function */
    /* Copies `nbytes` at `data` on rank `root` into `data` on every rank. */
    ckpt_status (*broadcast)(void *user, void *data, uint64_t nbytes, int root, uint32_t timeout_ms,
                             ckpt_error *err);
    /* `data` holds nranks blocks of `block` bytes, this rank's (block number
     * `rank`) filled; on return every block is (MPI_Allgather in place). */
    ckpt_status (*allgather)(void *user, void *data, uint64_t block, uint32_t timeout_ms, ckpt_error *err);
    /* Returns once every rank has called it. */
    ckpt_status (*barrier)(void *user, uint32_t timeout_ms, ckpt_error *err);
    /* Every rank votes its status; on return `vote` holds the outcome, the
     * same on every rank: CKPT_OK, or the failure of the lowest failing
     * rank with its rank and message.  A rank that does not vote in time
     * makes it fail with CKPT_E_TIMEOUT naming that rank in vote->rank. */
    ckpt_status (*agree)(void *user, ckpt_vote *vote, uint32_t timeout_ms, ckpt_error *err);
} ckpt_comm;

/* Zeroes a communicator ("none", rank 0 of 1) and sets its size. */
CKPT_API void ckpt_comm_init_sized(ckpt_comm *comm, size_t size);
static inline void ckpt_comm_init(ckpt_comm *comm) { ckpt_comm_init_sized(comm, sizeof *comm); }

/*
 * The "none" communicator of rank `rank` of `nranks`, taken from the
 * environment when `rank` is negative: RANK and WORLD_SIZE (torchrun),
 * OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (Open MPI's mpirun),
 * PMI_RANK and PMI_SIZE (MPICH, Intel MPI), SLURM_PROCID and SLURM_NTASKS
 * (srun), in that order; rank 0 of 1 when none is set.  Values that are
 * not numbers, or a rank outside [0, nranks), fail with
 * CKPT_E_INVALID_ARGUMENT naming the variable.
 */
CKPT_API ckpt_status ckpt_comm_from_env(ckpt_comm *comm, int rank, int nranks, ckpt_error *err);

/* How a collective operation runs. */
typedef enum ckpt_replicated {
    /* Tensors that every rank loads whole and alike are read once: each
     * rank reads a disjoint 1/N of their bytes, then broadcasts its part. */
    CKPT_REPLICATED_BROADCAST = 0,
    /* Every rank reads every tensor it loads from the files. */
    CKPT_REPLICATED_READ = 1
} ckpt_replicated;

typedef struct ckpt_collective_options {
    size_t size;         /* sizeof(ckpt_collective_options), set by ckpt_collective_options_init */
    uint32_t timeout_ms; /* the longest wait for the other ranks at each step; 0: 30 minutes */
    ckpt_replicated replicated;
} ckpt_collective_options;

CKPT_API void ckpt_collective_options_init_sized(ckpt_collective_options *options, size_t size);
static inline void ckpt_collective_options_init(ckpt_collective_options *options) {
    ckpt_collective_options_init_sized(options, sizeof *options);
}

/* What one rank did in a collective operation. */
typedef struct ckpt_collective_stats {
    uint64_t bytes_needed;     /* source bytes this rank had to read: its slices and its share of replicated tensors */
    uint64_t bytes_read;       /* bytes it read from files */
    uint64_t bytes_written;    /* bytes it wrote into output files */
    uint64_t bytes_received;   /* bytes it received from other ranks (broadcasts) */
    uint64_t bytes_sent;       /* bytes it broadcast as root */
    uint64_t replicated_bytes; /* output bytes of the tensors every rank loads alike */
    uint64_t collectives;      /* communicator calls made */
    double io_seconds;         /* wall time reading or writing files */
    double comm_seconds;       /* wall time inside the communicator */
    uint64_t files_synced;     /* output files this rank wrote and fsynced before the commit's vote */
} ckpt_collective_stats;

/*
 * Opens a checkpoint on every rank, parsing its headers once: rank 0 opens
 * it as ckpt_catalog_open_ex does and broadcasts the catalog (names, dtypes,
 * shapes, where every byte lies, metadata, object tree, file paths and
 * sizes); the other ranks build theirs from those bytes, opening the data
 * files by path without reading them.  A file whose size differs from rank
 * 0's fails with CKPT_D_COMM_DATA naming it.  With a "none" communicator
 * each rank opens the checkpoint itself.  `options` and `coll` may be NULL.
 */
CKPT_API ckpt_status ckpt_catalog_open_collective(const char *path, const ckpt_catalog_options *options,
                                                  const ckpt_comm *comm, const ckpt_collective_options *coll,
                                                  ckpt_catalog **out, ckpt_error *err);

/*
 * ckpt_load on every rank: each rank's plan says what it needs (its
 * tensor-parallel slices, from ckpt_plan_split with its rank, or any
 * slices), and each rank reads only that.  Tensors that every rank's plan
 * loads whole with the same dtype and axis order are "replicated"; with
 * CKPT_REPLICATED_BROADCAST (the default, when the communicator can
 * broadcast) each rank reads a disjoint share of their bytes into place and
 * the ranks then broadcast their shares, so the files are read once.
 * Replicated tensors get buffers even when options->views is set.
 * `stats` (may be NULL) receives what this rank did.
 */
CKPT_API ckpt_status ckpt_load_collective(ckpt_plan *plan, const ckpt_load_options *options, const ckpt_comm *comm,
                                          const ckpt_collective_options *coll, ckpt_collective_stats *stats,
                                          ckpt_error *err);

/*
 * ckpt_convert_plan split across ranks: every rank holds the same plan (the
 * same rules over a catalog from ckpt_catalog_open_collective); rank 0
 * lays out the output and creates its files, and each rank converts a
 * disjoint range of the output's bytes (whole files where there are
 * enough, rows of tensors otherwise) straight into place; rank 0 commits
 * once every rank has succeeded.  The output is the same bytes
 * ckpt_convert_plan writes.  Checksums (options->checksums) need each
 * tensor's bytes in order in one process and are refused.
 * options->progress reports this rank's bytes.
 */
CKPT_API ckpt_status ckpt_convert_collective(ckpt_plan *plan, const char *dst_path, const ckpt_writer_options *options,
                                             const ckpt_comm *comm, const ckpt_collective_options *coll,
                                             ckpt_collective_stats *stats, ckpt_error *err);

/*
 * A checkpoint saved by many ranks, each holding parts of the tensors
 * (tensor-parallel shards, DTensor local shards, or whole copies): the
 * ranks agree on the one Hugging Face layout that the whole state dict
 * would have (files, headers and index as huggingface_hub's
 * save_torch_state_dict writes them, tensors in the order of rank 0's
 * declarations, then those only later ranks hold), rank 0 creates the
 * files, every rank writes its bytes straight into place, and rank 0
 * commits once every rank has succeeded.
 *
 *   ckpt_shard_writer_create   every rank, same path and options
 *   ckpt_shard_writer_add      this rank's parts: a box of a tensor
 *   ckpt_shard_writer_begin    collective: the layout, the files
 *   ckpt_shard_writer_order    the order to write this rank's parts in
 *   ckpt_shard_writer_write    this rank's bytes, any order, any thread
 *   ckpt_shard_writer_commit   collective: one status, one commit
 *
 * The parts of a tensor must tile it: boxes that do not overlap, or that
 * are identical (a replicated tensor: its rows are then shared among the
 * ranks that hold it), covering every element.  Metadata is rank 0's.
 * A rank that gives up calls ckpt_shard_writer_abort, so that the others
 * fail at once naming it instead of waiting for the timeout.
 */
typedef struct ckpt_shard_writer ckpt_shard_writer;

/* Creates this rank's shard writer (nothing is written; no collective).
 * options->checksums is refused (see ckpt_convert_collective). */
CKPT_API ckpt_status ckpt_shard_writer_create(const char *path, const ckpt_writer_options *options,
                                              const ckpt_comm *comm, const ckpt_collective_options *coll,
                                              ckpt_shard_writer **out, ckpt_error *err);

/* ckpt_writer_set_metadata and ckpt_writer_set_checkpoint_metadata; only
 * rank 0's entries are written. */
CKPT_API ckpt_status ckpt_shard_writer_set_metadata(ckpt_shard_writer *writer, const char *key, const char *value,
                                                    ckpt_error *err);
CKPT_API ckpt_status ckpt_shard_writer_set_checkpoint_metadata(ckpt_shard_writer *writer, const char *key,
                                                               const char *value, ckpt_error *err);

/*
 * Declares this rank's part of tensor `name` of the global `shape`: the box
 * starting at `start` with extent `count` per axis (NULL: the whole
 * tensor).  Its bytes are the box's elements, dense and row-major.  A rank
 * declares each tensor at most once; ranks that hold none of a tensor do
 * not declare it.  *index (may be NULL) receives the part's number for
 * ckpt_shard_writer_write.
 */
CKPT_API ckpt_status ckpt_shard_writer_add(ckpt_shard_writer *writer, const char *name, ckpt_dtype dtype,
                                           uint32_t ndim, const uint64_t *shape, const uint64_t *start,
                                           const uint64_t *count, size_t *index, ckpt_error *err);

/* Collective: exchanges every rank's declarations, checks that they tile
 * every tensor (CKPT_D_COMM_DATA naming the tensor and the ranks
 * otherwise), lays out the output, and creates its files (rank 0); the
 * other ranks open a file only when they first write to it, so that each
 * holds only the files it writes. */
CKPT_API ckpt_status ckpt_shard_writer_begin(ckpt_shard_writer *writer, ckpt_error *err);

/* Bytes [at, at + nbytes) of part `index` (its dense row-major bytes),
 * written at their places in the output files; bytes another rank writes
 * (a replicated part's rows that are not this rank's) are skipped.  May be
 * called from several threads at once for different ranges. */
CKPT_API ckpt_status ckpt_shard_writer_write(ckpt_shard_writer *writer, size_t index, uint64_t at, const void *data,
                                             uint64_t nbytes, ckpt_error *err);

/*
 * After begin: this rank's parts (the indices ckpt_shard_writer_add gave,
 * `count` of them) in the order to write them — by their place in the
 * output (files in order, bytes by offset), starting at the part that
 * holds byte rank/size of this rank's bytes and wrapping round.  Ranks of a
 * tensor-parallel save hold rows of the same tensors: written in one
 * order by all, they write into the same file at the same time, and a
 * file system takes the file's inode lock for each buffered write (ext4,
 * XFS), so their copies take turns; started at different places, they
 * write different files at once.  ckpt_save_collective writes in it.
 */
CKPT_API ckpt_status ckpt_shard_writer_order(const ckpt_shard_writer *writer, size_t *order, size_t count,
                                             ckpt_error *err);

/* Collective: checks that this rank wrote all its bytes and syncs them,
 * agrees on one status, and (rank 0) publishes the checkpoint atomically;
 * every rank returns the outcome of that commit. */
CKPT_API ckpt_status ckpt_shard_writer_commit(ckpt_shard_writer *writer, ckpt_error *err);

/* Collective counterpart of a failure on this rank: takes part in the
 * next collective step (begin, or commit) with a failure vote carrying
 * `reason` (may be NULL), so that every rank fails now and nothing is
 * published.  Returns the vote's outcome. */
CKPT_API ckpt_status ckpt_shard_writer_abort(ckpt_shard_writer *writer, const ckpt_error *reason, ckpt_error *err);

/* This rank's bytes written and time spent. */
CKPT_API void ckpt_shard_writer_stats(const ckpt_shard_writer *writer, ckpt_collective_stats *stats);

/* Releases a shard writer; on rank 0, an uncommitted output's temporaries
 * are removed.  Not collective.  Accepts NULL. */
CKPT_API void ckpt_shard_writer_free(ckpt_shard_writer *writer);

/* One rank's part of a tensor, for ckpt_save_collective. */
typedef struct ckpt_shard {
    const char *name;
    ckpt_dtype dtype;
    uint32_t ndim;
    const uint64_t *shape; /* the whole tensor's */
    const uint64_t *start; /* the part's first element per axis; NULL: 0, … */
    const uint64_t *count; /* the part's extent per axis; NULL: the shape */
    const void *data;      /* the part's elements, dense and row-major */
} ckpt_shard;

/* The shard writer's whole sequence over parts held in memory. */
CKPT_API ckpt_status ckpt_save_collective(const char *path, const ckpt_shard *shards, size_t count,
                                          const ckpt_writer_options *options, const ckpt_comm *comm,
                                          const ckpt_collective_options *coll, ckpt_collective_stats *stats,
                                          ckpt_error *err);

#ifdef __cplusplus
}
#endif

#endif /* CKPT_COLLECTIVE_H */
