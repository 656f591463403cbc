/*
 * hf.h — the Hugging Face Hub's cache, as huggingface_hub keeps it
 * (hf_cache.c), and the download that fills it while reads wait for its
 * bytes (hf_stream.c), for the hf:// kind of source (hf_source.c):
 *
 *   <cache>/models--org--name/blobs/<etag>                 a file's bytes
 *   <cache>/models--org--name/snapshots/<commit>/<path>    a relative link
 *                                                          to ../../blobs/<etag>
 *   <cache>/models--org--name/refs/<branch>                the commit it was at
 *   <cache>/.locks/models--org--name/<etag>.lock           flock'ed by whoever
 *                                                          writes that blob
 *
 * <cache> is $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub or ~/.cache/huggingface/hub.  The etag
 * is the file's X-Linked-Etag (an LFS file's SHA-256), else its ETag (a
 * small file's git blob id), without W/ and quotes.  A file being read is
 * streamed (hf_stream.c): its download, on a thread of its own, copies
 * the bytes into the reads that wait for them as they arrive.  Depends on
 * base, source.h and http.h.
 */
#ifndef CKPT_IO_HF_H
#define CKPT_IO_HF_H

#include <stdint.h>

#include "../base/base.h"
#include "source.h"

/* The cache directory (malloc'ed), or NULL without a home to put it in. */
CKPT__HIDDEN char *ckpt__hf_cache_dir(void);

/* One file of one commit of a repo, and where its copy goes. */
typedef struct ckpt__hf_entry {
    const char *cache;  /* ckpt__hf_cache_dir */
    const char *repo;   /* org/name */
    const char *commit; /* 40 hex digits */
    const char *path;   /* the file in the repo (checked: plain components) */
    const char *ref;    /* a branch or tag that named the commit (refs/<ref> written), or NULL */
    const char *shown;  /* the hf:// name, for errors */
} ckpt__hf_entry;

/* The repo folder's path in the cache (malloc'ed). */
CKPT__HIDDEN char *ckpt__hf_repo_folder(const char *cache, const char *repo);

/* What a download tells, besides the cache, as it goes (the stream that
 * serves reads of a file while it downloads, hf_stream.c). */
typedef struct ckpt__hf_tee {
    /* The partial blob (blobs/<etag>.incomplete, open for reading and
     * writing: the callee dups what it keeps) before the transfer starts at
     * `from`: bytes before it are that file's, a resumed download's.  Not
     * called when the blob is already there. */
    void (*begin)(void *ctx, int fd, uint64_t from);
    /* Bytes [offset, offset + n) of the file, written and hashed; offset
     * goes back to 0 when the server sends the file again from its start
     * (first told with n = 0, before the partial blob is cut back); also
     * told n = 0 at the current offset while nothing comes, so that a
     * stop is heard then too.
     * False (errno set) stops the download: the fill fails, the partial
     * blob kept for a later resume. */
    bool (*bytes)(void *ctx, const void *data, size_t n, uint64_t offset);
    void *ctx;
} ckpt__hf_tee;

/*
 * Brings the remote file `remote` (of ckpt__remote_open, whose version tag
 * names the blob) into the cache, under the hub's lock of that blob:
 * a blob already there is used; else blobs/<etag>.incomplete is resumed
 * from where a cut download left it (its bytes hashed first) or started,
 * filled by ckpt__remote_fetch and hashed with SHA-256 as the bytes
 * stream (each then handed to `tee`, when not NULL), checked against
 * `sha256` (the Hub's X-Linked-Etag or its API's lfs.sha256; NULL for a
 * file that is not in LFS) and its size, and renamed to blobs/<etag>; then
 * snapshots/<commit>/<path> links to it and refs/<ref> names the commit.
 * A mismatch is CKPT_E_CHECKSUM naming the file and the commit, and leaves
 * no blob (nor the partial download).  *fd: the blob, open for reading.
 */
CKPT__HIDDEN ckpt_status ckpt__hf_cache_fill(const ckpt__hf_entry *e, ckpt__source *remote, const char *sha256,
                                             const ckpt__hf_tee *tee, int *fd, ckpt_error *err);

/*
 * A file read while it downloads (hf_stream.c): ckpt__hf_cache_fill of
 * entry `e` (copied) on a thread of its own, with a tee that copies the
 * bytes, as they arrive, into the reads waiting for them.  NULL when no
 * thread can be started (the caller then fills the cache itself).
 * `remote` must outlive the stream; `sha256` as ckpt__hf_cache_fill's.
 */
typedef struct ckpt__hf_stream ckpt__hf_stream;
CKPT__HIDDEN ckpt__hf_stream *ckpt__hf_stream_start(const ckpt__hf_entry *e, ckpt__source *remote, const char *sha256);

/* Reads `n` requests (a source's read_many: `need` bytes of each, up to
 * `len`): each waits for its bytes, copied straight from the download as
 * they arrive; bytes that went by before the read asked for them are read
 * from the partial blob, and after the download from the blob.  Returns
 * before the download's SHA-256 is checked: ckpt__hf_stream_wait says
 * whether the bytes pass. */
CKPT__HIDDEN ckpt_status ckpt__hf_stream_read(ckpt__hf_stream *s, ckpt_source_request *reqs, size_t n,
                                              ckpt_error *err);

/* Waits for the download's end: CKPT_OK and *fd a descriptor of the blob
 * (the caller's), once every byte is in, checked and committed to the
 * cache; else the download's error (a failed download fails every read
 * and wait of this stream after it). */
CKPT__HIDDEN ckpt_status ckpt__hf_stream_wait(ckpt__hf_stream *s, int *fd, ckpt_error *err);

/* Stops a download under way (its partial blob stays, to be resumed by
 * the next one: a stopped download fails every read and wait after it)
 * and waits for its thread. */
CKPT__HIDDEN void ckpt__hf_stream_stop(ckpt__hf_stream *s);

/* ckpt__hf_stream_stop, then frees.  No read may be running.  Accepts
 * NULL. */
CKPT__HIDDEN void ckpt__hf_stream_free(ckpt__hf_stream *s);

/* The commit refs/<ref> of the repo names in the cache, into `commit`
 * (41 bytes); false when there is none (or it is not a commit). */
CKPT__HIDDEN bool ckpt__hf_cache_ref(const char *cache, const char *repo, const char *ref, char commit[41]);

#endif
