/*
 * source.h — where a checkpoint's bytes come from.
 *
 * Formats and the engine read through sources, never through descriptors:
 * a local file is one kind of source (pread, io_uring, O_DIRECT, mmap), an
 * in-memory buffer another, and a remote object (HTTP range requests) is
 * one more file in src/io/ with no change to formats or the engine.  A
 * source is opened by name: ckpt__source_open picks the kind from the
 * name's scheme (see sources.c, one line per kind).
 *
 * Capabilities say what else a source allows besides reads:
 *   CKPT__SRC_FD      a local descriptor (io_uring, O_DIRECT reopen,
 *                     copy_file_range, fadvise) in `fd`;
 *   CKPT__SRC_MAP     memory mapping (zero-copy views);
 *   CKPT__SRC_REMOTE  data behind a network: no views, no direct I/O, and
 *                     reads are worth batching (read_many);
 *   CKPT__SRC_DIRECT  opened in direct mode (ckpt__source_options.direct):
 *                     reads bypass the page cache (O_DIRECT), and so
 *                     must the engine's and the writer's.
 * Depends on base only.
 */
#ifndef CKPT_IO_SOURCE_H
#define CKPT_IO_SOURCE_H

#include <pthread.h>
#include <stdint.h>

#include "../base/base.h"

enum { CKPT__SRC_FD = 1u, CKPT__SRC_MAP = 2u, CKPT__SRC_REMOTE = 4u, CKPT__SRC_DIRECT = 8u };

typedef struct ckpt__source ckpt__source;

/* One positional read of a batch (the engine's unit of I/O).  `fd` ≥ 0
 * reads that descriptor (the source's own, or an O_DIRECT one opened on
 * the same file); -1 reads through the source's operations. */
typedef struct ckpt__read_req {
    ckpt__source *src;
    int fd;
    uint64_t offset, len;
    uint64_t need;      /* bytes that must exist (< len for an O_DIRECT read rounded past the end) */
    void *dst;
    const char *tensor; /* for errors */
} ckpt__read_req;

/* A source's operations are the public table (ckpt_source_ops in ckpt.h,
 * documented there): the library's own kinds implement it with `user` the
 * kind's context and `file` the ckpt__source itself; a caller's table is
 * driven through user_source.c, which names files, tensors and offsets in
 * its errors and checks what it says. */
typedef ckpt_source_ops ckpt__source_ops;

struct ckpt__source {
    const ckpt__source_ops *ops;
    void *user;     /* the first argument of every operation */
    void *file;     /* the second: the kind's handle of this file */
    char *name;     /* path or URL, for errors and for finding sibling files */
    uint64_t size;
    int fd;         /* -1 unless caps has CKPT__SRC_FD */
    unsigned caps;
    void *impl;     /* the kind's own state */
    uint64_t bytes_read; /* bytes read from it so far, by every path (atomic) */
    char sha256[65];     /* the SHA-256 its bytes must have, as its kind knows it (a Hub LFS file), or "" */
    /* Optional (ckpt__source_settle): the verdict on every byte served so
     * far, for a kind that serves bytes before it can check them; with
     * `stop`, work under way to reach it is stopped instead. */
    ckpt_status (*settle)(ckpt__source *src, bool stop, ckpt_error *err);
};

/* Waits until every byte `src` has served is checked, where its kind
 * serves bytes before it can check them — a Hub file read while it
 * downloads (hf_stream.c: the SHA-256 of the whole file is known at its
 * last byte) — and gives the verdict: CKPT_OK, or why the bytes cannot be
 * trusted.  The engine asks it of every file at the end of a run, and the
 * catalog at the end of an open, so that neither succeeds on bytes that
 * fail a check; a run that failed stops such work instead (`stop`: the
 * reads of that run still under way fail), so that none goes on after
 * the call; a later read starts it again (hf_source.c resumes the
 * download), so that one failed run does not fail the open file for good.
 * Accepts NULL. */
static inline ckpt_status ckpt__source_settle(ckpt__source *src, bool stop, ckpt_error *err) {
    return src && src->settle ? src->settle(src, stop, err) : CKPT_OK;
}

/* Counts bytes read from a source (whichever path read them). */
static inline void ckpt__source_count(ckpt__source *src, uint64_t n) {
    __atomic_add_fetch(&src->bytes_read, n, __ATOMIC_RELAXED);
}

/* Progress of the whole downloads of one catalog's files (a server that
 * serves no byte ranges: http_source.c): every source the catalog opens
 * adds to it, and the caller's callback (ckpt_catalog_options.
 * download_progress) hears the sums, one call at a time (a download that
 * restarts from its first byte takes its bytes back from `done`). */
typedef struct ckpt__download_meter {
    int (*fn)(uint64_t done, uint64_t total, void *user);
    void *user;
    pthread_mutex_t lock;
    uint64_t done, total; /* bytes received, and the sizes of the downloads begun */
    int64_t last_ms;      /* of the last call */
    unsigned running;     /* downloads under way */
    bool cancelled;       /* the callback asked to stop: every download under way stops */
} ckpt__download_meter;

/* The meter's functions accept NULL (no meter).  A download begins: its
 * size joins `total` and the callback hears it (a stop asked while none
 * ran is forgotten); false when the callback asks to stop. */
CKPT__HIDDEN bool ckpt__download_begin(ckpt__download_meter *m, uint64_t size);
/* Bytes arrived (or, negative, a restart took them back): the callback
 * hears of it when `force` or 100 ms after its last call.  False once it
 * asked to stop. */
CKPT__HIDDEN bool ckpt__download_report(ckpt__download_meter *m, int64_t done, bool force);
/* A download ended; one that failed takes its `received` bytes and its
 * `size` back out of the sums. */
CKPT__HIDDEN void ckpt__download_end(ckpt__download_meter *m, bool failed, uint64_t received, uint64_t size);

/* What opening a source may be told (filled by the catalog's options,
 * ckpt_catalog_options in ckpt.h, which documents each).  Zero means the
 * default for every field but `retries`, `min_speed_bytes` and
 * `retry_deadline_ms` (where it means none); CKPT__SOURCE_OPTIONS_DEFAULT
 * is the whole default. */
typedef struct ckpt__source_options {
    uint32_t connect_timeout_ms; /* remote: to establish a connection              */
    uint32_t read_timeout_ms;    /* remote: a transfer receiving nothing this long fails */
    uint32_t retries;            /* remote: attempts after the first               */
    uint32_t max_connections;    /* remote: parallel requests per file             */
    uint32_t min_speed_bytes;    /* remote: an attempt slower than this (bytes/s)… */
    uint32_t min_speed_time_ms;  /* …over each such window fails (0 bytes/s: never) */
    uint32_t retry_deadline_ms;  /* remote: no retry after this long without progress (0: none) */
    const char *bearer_token;    /* remote: "Authorization: Bearer", or NULL       */
    const char *userinfo;        /* remote: "user:password" taken out of the opened URL */
    const char *userinfo_host;   /* the host `userinfo` belongs to                 */
    const char *cache_dir;       /* remote: where verified copies are kept, or NULL */
    const char *hf_cache;        /* hf://: the Hub's cache (NULL: ckpt__hf_cache_dir's) */
    uint32_t head_bytes;         /* remote: the first bytes asked for at open (0: 256 KiB) */
    ckpt__download_meter *meter; /* remote: hears whole downloads (NULL: nobody) */
    /* remote: the query a directory's name carried as its credentials (an
     * Azure SAS token), taken out of the name (ckpt__source_take_query), and
     * that directory, ending in '/': its kind sends the query with every
     * request for a name inside it. */
    const char *dir_query, *dir_query_for;
    bool direct;                 /* local: O_DIRECT reads, nothing in the page cache */
} ckpt__source_options;

#define CKPT__DEFAULT_RETRIES 5u
#define CKPT__DEFAULT_MIN_SPEED 1024u               /* bytes per second, over 30 s */
#define CKPT__DEFAULT_RETRY_DEADLINE_MS 300000u     /* 5 minutes */
#define CKPT__SOURCE_OPTIONS_DEFAULT                                                                  \
    {.retries = CKPT__DEFAULT_RETRIES, .min_speed_bytes = CKPT__DEFAULT_MIN_SPEED,                     \
     .retry_deadline_ms = CKPT__DEFAULT_RETRY_DEADLINE_MS}

/* What a name is: a regular file (or remote object), a directory, or
 * nothing.  Remote names are objects (directories are not listed). */
typedef enum ckpt__name_kind { CKPT__NAME_MISSING, CKPT__NAME_FILE, CKPT__NAME_DIR } ckpt__name_kind;

/* One kind of source: the names it takes and how it opens them. */
typedef struct ckpt__source_kind {
    const char *label;
    /* Whether this kind serves `name` (by its scheme). */
    bool (*claims)(const char *name);
    ckpt_status (*open)(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err);
    /* What `name` is, without opening it (a remote kind may ask its
     * server, with the options' credentials and timeouts). */
    ckpt__name_kind (*stat)(const char *name, const ckpt__source_options *o);
    /* Optional: `name` pinned to the version it names now (a branch to its
     * commit), so that every file a checkpoint opens is of one version;
     * *pinned is malloc'ed, or NULL to keep the name. */
    ckpt_status (*pin)(const char *name, const ckpt__source_options *o, char **pinned, ckpt_error *err);
    /* Optional: the names directly in directory `name` (what
     * ckpt_source_ops.list says), for a kind whose directories can be
     * listed (a Hub repo); without it, a remote directory is a prefix whose
     * names can only be tried. */
    ckpt_status (*list)(const char *name, const ckpt__source_options *o, int (*add)(void *ctx, const char *name),
                        void *ctx, ckpt_error *err);
    /* Whether a name's query is credentials that hold for its directory
     * (Azure's SAS token), which a directory's name passes on to the names
     * inside it (ckpt__source_take_query). */
    bool query_is_credentials;
} ckpt__source_kind;

/* Opens a source by name (a path, or a URL of a registered scheme). */
CKPT__HIDDEN ckpt_status ckpt__source_open(const char *name, const ckpt__source_options *o, ckpt__source **out,
                                           ckpt_error *err);

/* What the local path `path` is, through links; *link (may be NULL): 1
 * when `path` itself is a symbolic link, dangling or not. */
CKPT__HIDDEN ckpt__name_kind ckpt__local_kind(const char *path, bool *link);

/* What `name` is, asked of the kind that claims it (`o` may be NULL). */
CKPT__HIDDEN ckpt__name_kind ckpt__source_stat(const char *name, const ckpt__source_options *o);

/* `name` pinned by its kind (see ckpt__source_kind.pin): *pinned is
 * malloc'ed, or NULL when the name stays as it is. */
CKPT__HIDDEN ckpt_status ckpt__source_pin(const char *name, const ckpt__source_options *o, char **pinned,
                                          ckpt_error *err);

/* Whether the kind of remote name `name` lists its directories (its
 * directory is then asked through ckpt__remote_listed_dir_ops, else
 * ckpt__remote_dir_ops). */
CKPT__HIDDEN bool ckpt__source_lists(const char *name);

/* The names in remote directory `name`, asked of its kind (see
 * ckpt__source_kind.list; CKPT_E_NOT_FOUND for a kind that cannot list). */
CKPT__HIDDEN ckpt_status ckpt__source_list(const char *name, const ckpt__source_options *o,
                                           int (*add)(void *ctx, const char *name), void *ctx, ckpt_error *err);

/* A directory name's query taken out of it, where its kind takes the query
 * as credentials for the names inside it (query_is_credentials): *clean
 * the name without it, *query the query (without '?'), both malloc'ed;
 * both NULL when the name keeps its query.  False when out of memory. */
CKPT__HIDDEN bool ckpt__source_take_query(const char *name, char **clean, char **query);

/* True when `name` is served by a remote kind (no local directory to list). */
CKPT__HIDDEN bool ckpt__source_is_remote_name(const char *name);

/* Wraps `size` bytes at `data` (which must outlive the source) as a
 * source named `name` (ckpt_memory_source_ops). */
CKPT__HIDDEN ckpt_status ckpt__source_memory(const char *name, const void *data, uint64_t size, ckpt__source **out,
                                             ckpt_error *err);

/* Closes and frees a source; accepts NULL. */
CKPT__HIDDEN void ckpt__source_close(ckpt__source *src);

/* Reads exactly `n` bytes at `offset` (see ckpt__source_ops.read). */
static inline ckpt_status ckpt__source_read(ckpt__source *src, void *dst, uint64_t n, uint64_t offset,
                                            ckpt_error *err) {
    if (!n) return CKPT_OK;
    int fault = ckpt__io_source_fault(); /* every kind, the caller's too, faulted alike */
    if (fault) return ckpt__fail_errno(err, fault, src->name, (int64_t)offset, "cannot read %llu bytes", (unsigned long long)n);
    ckpt_status st = src->ops->read(src->user, src->file, dst, n, offset, err);
    if (st == CKPT_OK) ckpt__source_count(src, n);
    return st;
}

/* Performs a batch of reads of one source through its read_many (which
 * the caller checked it has); the caller counts the bytes. */
CKPT__HIDDEN ckpt_status ckpt__source_read_many(ckpt__source *src, const ckpt__read_req *reqs, size_t n,
                                                ckpt_error *err);

/* Opens the file `name` of a directory-like source `ops` (a caller's, or
 * one of the library's: ckpt__dir_ops): what it says is checked. */
CKPT__HIDDEN ckpt_status ckpt__source_open_in(const ckpt_source_ops *ops, void *user, const char *name,
                                              ckpt__source **out, ckpt_error *err);

/* What `name` is, asked of `ops` (its stat; a kind it does not know is
 * CKPT_SOURCE_MISSING); a stat that fails is an error naming `name`. */
CKPT__HIDDEN ckpt_status ckpt__source_stat_in(const ckpt_source_ops *ops, void *user, const char *name,
                                              ckpt_source_kind *kind, ckpt_error *err);

/* The names in directory `dir` of `ops` that do not start with '.',
 * sorted, malloc'ed (each, and the array; free with ckpt__beneath_free_names,
 * beneath.h).  A
 * name with '/' (or "..", "." ) is CKPT_E_UNSAFE_PATH; a table without
 * `list` is CKPT_E_NOT_FOUND. */
CKPT__HIDDEN ckpt_status ckpt__source_list_in(const ckpt_source_ops *ops, void *user, const char *dir, char ***names,
                                              size_t *count, ckpt_error *err);


/* Reads a whole (small) source into a malloc'ed, NUL-terminated buffer;
 * larger than `limit` bytes gives `too_large_status`.  The bytes are
 * settled (ckpt__source_settle): a Hub file that fails its SHA-256 fails
 * here, naming the file and the revision. */
CKPT__HIDDEN ckpt_status ckpt__source_slurp(ckpt__source *src, uint64_t limit, ckpt_status too_large_status,
                                            char **data, ckpt_error *err);

/* A source of the `length` bytes of `base` from `offset` (window_source.c):
 * an archive embedded in a file, read in its own coordinates.  `base`
 * must outlive the window, which has no descriptor and no mapping.  Fails
 * with CKPT_E_TRUNCATED when the range runs past the end of `base`.
 * `held`, where the caller read those bytes already (borrowed: they must
 * outlive the window), serves every read without a read of `base`; NULL
 * reads them from `base`. */
CKPT__HIDDEN ckpt_status ckpt__source_window_held(ckpt__source *base, uint64_t offset, uint64_t length,
                                                  const void *held, ckpt__source **out, ckpt_error *err);

/* A local file source over `fd` (a regular file of `size` bytes, opened
 * for reading), named `name`: what a file opened beneath a checkpoint's
 * directory (beneath.h) becomes.  Takes `fd` (closed on failure too). */
CKPT__HIDDEN ckpt_status ckpt__file_source_adopt(const char *name, int fd, uint64_t size, const ckpt__source_options *o,
                                                 ckpt__source **out, ckpt_error *err);

/* The library's own directories as sources (dir_source.c): a local one,
 * with `user` a ckpt__local_dir, and a remote prefix, with `user` the
 * ckpt__source_options.  Their files' handles are ckpt__source objects
 * (ckpt__source_ops_own: taken as they are by ckpt__source_open_in). */
typedef struct ckpt__beneath ckpt__beneath;
typedef struct ckpt__local_dir {
    ckpt__beneath *root;
    const ckpt__source_options *options;
} ckpt__local_dir;
CKPT__HIDDEN extern const ckpt_source_ops ckpt__local_dir_ops;
CKPT__HIDDEN extern const ckpt_source_ops ckpt__remote_dir_ops;
CKPT__HIDDEN extern const ckpt_source_ops ckpt__remote_listed_dir_ops; /* the same, and its kind lists */
CKPT__HIDDEN bool ckpt__source_ops_own(const ckpt_source_ops *ops);

/* The local file kind (file_source.c): registered in sources.c. */
CKPT__HIDDEN extern const ckpt__source_kind ckpt__file_kind;

#endif
