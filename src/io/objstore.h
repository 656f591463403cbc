/*
 * objstore.h — what the object-store kinds of source share (objstore.c):
 * S3 (s3_source.c), Google Cloud Storage (gcs_source.c) and Azure Blob
 * Storage (azure_source.c) each turn a name into a target — the URL of the
 * object, the URL of its bucket or container, and the credentials of
 * ckpt__remote_auth — and read it through http_source.c.
 * Depends on base, source.h and http.h only.
 */
#ifndef CKPT_IO_OBJSTORE_H
#define CKPT_IO_OBJSTORE_H

#include "http.h"

/* $name, or NULL when unset or empty. */
CKPT__HIDDEN const char *ckpt__env(const char *name);

/* Whether `s` (n bytes) can be a bucket, container or account name in a
 * URL: not empty, no blank, control, '/', '?', '#', '%', '@', ':' or '\'. */
CKPT__HIDDEN bool ckpt__store_plain_name(const char *s, size_t n);

/* A name made ready to request. */
typedef struct ckpt__store_target {
    char *url;              /* the object's URL (encoded, with `query`), or NULL for a bare bucket */
    char *base;             /* the bucket's or container's URL, ending in '/' */
    char *query;            /* what every request's query carries (an Azure SAS), or NULL */
    char *owned[8];         /* what `auth` and `lines` point at (wiped when freed) */
    const char *lines[8];   /* header lines, NULL-terminated (auth.headers) */
    ckpt__remote_auth auth;
} ckpt__store_target;

CKPT__HIDDEN void ckpt__store_target_free(ckpt__store_target *t);

/* Keeps malloc'ed `s` with the target (freed, wiped, with it) and returns
 * it; NULL when `s` is NULL or no room is left. */
CKPT__HIDDEN const char *ckpt__store_own(ckpt__store_target *t, char *s);

/* Adds a malloc'ed header line to every request of the target; NULL when
 * `line` is NULL or no room is left. */
CKPT__HIDDEN const char *ckpt__store_header(ckpt__store_target *t, char *line);

/* SigV4 credentials for libcurl: `scope` its CURLOPT_AWS_SIGV4
 * ("aws:amz:REGION:s3", "goog:goog:auto:storage"), `prefix` that of the
 * signed headers ("amz": x-amz-content-sha256, x-amz-security-token with
 * `token` when not NULL).  False when out of memory. */
CKPT__HIDDEN bool ckpt__store_sigv4(ckpt__store_target *t, const char *id, const char *secret, const char *scope,
                                    const char *prefix, const char *token);

/* base + `path` (encoded as a key, or NULL) + "?" `query` (as given, or
 * NULL) and the target's own query; malloc'ed, NULL when out of memory. */
CKPT__HIDDEN char *ckpt__store_url(const ckpt__store_target *t, const char *path, const char *query);

/* How a store lists a prefix: its own parameters ("name=value", as sent:
 * Azure's "comp=list" and "restype=container", S3's "list-type=2"), the
 * parameter that carries the next page's marker ("marker", S3's
 * "continuation-token") and the element the answer gives it in
 * ("NextMarker", "NextContinuationToken"), and the element holding each
 * object's name ("Key", Azure's "Name").  Every page asks for the
 * delimiter "/" and the prefix; the parameters go in sorted order (a
 * SigV4 signature covers the query as sent). */
typedef struct ckpt__store_listing {
    const char *params[2];
    const char *marker_param, *next_tag, *name_tag;
} ckpt__store_listing;

/* What `key` (`n` bytes) of the target's bucket is: a directory when it is
 * empty or ends in '/', else what a HEAD of the object says, and a missing
 * object that is the prefix of some objects a directory too. */
CKPT__HIDDEN ckpt__name_kind ckpt__store_stat(const char *shown, const ckpt__store_target *t,
                                              const ckpt__store_listing *l, const char *key, size_t n,
                                              const ckpt__source_options *o);

/* The objects directly in directory `key` (`n` bytes; "" is the bucket's
 * top, a final '/' optional), as the store lists its prefix. */
CKPT__HIDDEN ckpt_status ckpt__store_list_dir(const char *shown, const ckpt__store_target *t,
                                              const ckpt__store_listing *l, const char *key, size_t n,
                                              const ckpt__source_options *o, int (*add)(void *ctx, const char *name),
                                              void *ctx, ckpt_error *err);

#endif
