/*
 * hf.h — the Hugging Face Hub's cache, as huggingface_hub keeps it
 * (hf_cache.c), for the hf:// kind of source (hf_source.c):
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
 * small file's git blob id), without W/ and quotes.  Depends on base,
 * source.h and http.h.
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

/*
 * Brings the remote file `remote` (of ckpt__remote_open, whose version tag
 * names the blob) into the cache, under the hub's lock of that blob:
 * a blob already there is used; else blobs/<etag>.incomplete is resumed
 * from where a cut download left it (its bytes hashed first) or started,
 * filled by ckpt__remote_fetch and hashed with SHA-256 as the bytes
 * stream, checked against `sha256` (the Hub's X-Linked-Etag or its API's
 * lfs.sha256; NULL for a file that is not in LFS) and its size, and renamed
 * to blobs/<etag>; then snapshots/<commit>/<path> links to it and
 * refs/<ref> names the commit.  A mismatch is CKPT_E_CHECKSUM naming the
 * file and the commit, and leaves no blob (nor the partial download).
 * *fd: the blob, open for reading.
 */
CKPT__HIDDEN ckpt_status ckpt__hf_cache_fill(const ckpt__hf_entry *e, ckpt__source *remote, const char *sha256,
                                             int *fd, ckpt_error *err);

/* The commit refs/<ref> of the repo names in the cache, into `commit`
 * (41 bytes); false when there is none (or it is not a commit). */
CKPT__HIDDEN bool ckpt__hf_cache_ref(const char *cache, const char *repo, const char *ref, char commit[41]);

#endif
