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

/* Appends `endpoint` (a URL, its final '/'s dropped; "" for none) and
 * "/BUCKET/" (`n` bytes): a bucket's or container's URL, path-style. */
CKPT__HIDDEN void ckpt__store_base(ckpt__buf *b, const char *endpoint, const char *bucket, size_t n);

/* BUCKET and KEY of "SCHEME://BUCKET[/KEY]" (pointers into `name`; KEY
 * "" when absent): a failure naming `name` with `usage` when the bucket is
 * missing, or the key and `need_key`, or the bucket no plain name. */
CKPT__HIDDEN ckpt_status ckpt__store_bucket(const char *name, bool need_key, const char *usage, const char **bucket,
                                            size_t *bucket_len, const char **key, ckpt_error *err);

/* One object store as a kind of source: how it lists a prefix, whether
 * its names can carry credentials (an Azure SAS: shown redacted,
 * ckpt__url_redact), and how a name becomes its target — `prepare` names
 * `shown` in its errors, refuses a name without a key when `need_key`, and
 * points *key (*key_len bytes) at the object's or the directory's key. */
typedef struct ckpt__store {
    ckpt__store_listing listing;
    bool redact;
    ckpt_status (*prepare)(const char *name, const char *shown, const ckpt__source_options *o, bool need_key,
                           ckpt__store_target *t, const char **key, size_t *key_len, ckpt_error *err);
} ckpt__store;

/* A store kind's open (through http_source.c), stat and list.  Stat: a
 * directory when the key is empty or ends in '/', else what a HEAD of the
 * object says, a missing object that prefixes some objects a directory
 * too, and a name no target is made of "a file", so that opening it says
 * why.  List: the objects directly in the directory, as the store lists
 * its prefix. */
CKPT__HIDDEN ckpt_status ckpt__store_open(const ckpt__store *s, const char *name, const ckpt__source_options *o,
                                          ckpt__source **out, ckpt_error *err);
CKPT__HIDDEN ckpt__name_kind ckpt__store_name_kind(const ckpt__store *s, const char *name,
                                                   const ckpt__source_options *o);
CKPT__HIDDEN ckpt_status ckpt__store_list(const ckpt__store *s, const char *dir, const ckpt__source_options *o,
                                          int (*add)(void *ctx, const char *name), void *ctx, ckpt_error *err);

/* Defines the source kind `kind` of a store (a kind's functions take no
 * context, hence a trio a store): `prepare` as ckpt__store's, `secret`
 * both its `redact` and the kind's query_is_credentials (a name's query
 * is credentials: Azure's SAS), and the rest its ckpt__store_listing. */
#define CKPT__STORE_KIND(kind, label, claims, prepare, secret, ...)                                                  \
    static const ckpt__store kind##_store = {__VA_ARGS__, secret, prepare};                                           \
    static ckpt_status kind##_open(const char *name, const ckpt__source_options *o, ckpt__source **out,              \
                                   ckpt_error *err) {                                                                 \
        return ckpt__store_open(&kind##_store, name, o, out, err);                                                    \
    }                                                                                                                 \
    static ckpt__name_kind kind##_stat(const char *name, const ckpt__source_options *o) {                             \
        return ckpt__store_name_kind(&kind##_store, name, o);                                                         \
    }                                                                                                                 \
    static ckpt_status kind##_list(const char *dir, const ckpt__source_options *o,                                    \
                                   int (*add)(void *ctx, const char *name), void *ctx, ckpt_error *err) {             \
        return ckpt__store_list(&kind##_store, dir, o, add, ctx, err);                                                \
    }                                                                                                                 \
    const ckpt__source_kind kind = {label, claims, kind##_open, kind##_stat, NULL, kind##_list, secret}

#endif
