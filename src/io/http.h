/*
 * http.h — what the remote kinds of source share: the HTTP(S) machinery of
 * http_source.c (range requests through libcurl, retries, parallel batches,
 * the local cache), which the S3 kind (s3_source.c) drives with SigV4
 * credentials, and the parsers of untrusted response text (http_parse.c,
 * no libcurl: fuzzed by tests/fuzz/fuzz_http.c).
 * Depends on base and source.h only.
 */
#ifndef CKPT_IO_HTTP_H
#define CKPT_IO_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "source.h"

/* ---- parsing (http_parse.c) ---------------------------------------------- */

/* A parsed Content-Range value: "bytes FIRST-LAST/TOTAL", the same with
 * '*' for TOTAL (total unknown), or '*' for FIRST-LAST (an unsatisfiable
 * range, the answer to 416). */
typedef struct ckpt__content_range {
    bool has_range; /* FIRST-LAST present (false for "*") */
    bool has_total; /* TOTAL present (false for "*") */
    uint64_t first, last, total;
} ckpt__content_range;

/* Parses a Content-Range value (without the header name); false when it
 * is malformed, a number overflows, last < first or last ≥ total. */
CKPT__HIDDEN bool ckpt__parse_content_range(const char *value, size_t len, ckpt__content_range *out);

/* Splits a raw header line "Name: value\r\n" (as libcurl hands it);
 * false for a status line or a line without a colon.  The value has its
 * surrounding blanks and the line end removed. */
CKPT__HIDDEN bool ckpt__split_header(const char *line, size_t len, const char **name, size_t *name_len,
                                     const char **value, size_t *value_len);

/* Case-insensitive comparison of a header name with `want`. */
CKPT__HIDDEN bool ckpt__header_is(const char *name, size_t name_len, const char *want);

/* Seconds of a Retry-After value given in seconds (an HTTP date gives
 * false), capped at `cap`. */
CKPT__HIDDEN bool ckpt__parse_retry_after(const char *value, size_t len, unsigned cap, unsigned *seconds);

/* The SHA-256 an ETag value states, as the Hugging Face Hub's X-Linked-Etag
 * (and ETag) of an LFS file do: after an optional W/ and the quotes, exactly
 * 64 lower-case hex digits, copied to `out` with a NUL; false for any other
 * ETag (a server's own version tag says nothing about the bytes). */
CKPT__HIDDEN bool ckpt__etag_sha256(const char *etag, size_t len, char out[65]);

/* The text of the first <tag>…</tag> element of an XML error body (S3's
 * <Code> and <Message>), copied into out (truncated, NUL-terminated, with
 * control characters replaced); false when absent. */
CKPT__HIDDEN bool ckpt__xml_element(const char *body, size_t len, const char *tag, char *out, size_t cap);

/* What an object store's XML error body says, as ": Code: Message
 * (detail)" — Azure's AuthenticationErrorDetail, GCS's Details — into
 * `out` (truncated); "" (0) when it has no Code or Message. */
CKPT__HIDDEN size_t ckpt__store_error_text(const char *body, size_t len, char *out, size_t cap);

/* The next <tag>…</tag> element of an XML body (a store's listing) at or
 * after *pos: its text, entities decoded, into `out` (emptied first), and
 * *pos past it; false when there is none (or memory ran out). */
CKPT__HIDDEN bool ckpt__xml_next(const char *body, size_t len, const char *tag, size_t *pos, ckpt__buf *out);

/* The parts of an http(s) URL: [scheme://][userinfo@]host[:port][/path][?query][#fragment]. */
typedef struct ckpt__url_parts {
    const char *scheme, *userinfo, *host, *path, *query;
    size_t scheme_len, userinfo_len, host_len, path_len, query_len; /* host includes the port */
} ckpt__url_parts;

/* Splits a URL (pointers into it); false without "scheme://" or a host. */
CKPT__HIDDEN bool ckpt__url_split(const char *url, ckpt__url_parts *out);

/*
 * The URL as errors and listings may show it (malloc'ed): its whole user
 * part ("user:password@", "TOKEN@") replaced by "REDACTED@", and the values
 * of query parameters that carry credentials (signatures, tokens, keys:
 * X-Amz-Signature, X-Amz-Credential, X-Amz-Security-Token, Signature, sig,
 * token, access_token, …) by "REDACTED".  Anything that is not a URL comes
 * back as it is.  NULL when out of memory.  The one redaction of names:
 * ckpt_redact_name (ckpt.h) gives it to the CLI, Python and the bindings.
 */
CKPT__HIDDEN char *ckpt__url_redact(const char *url);

/* The URL without its userinfo (malloc'ed); *userinfo receives a malloc'ed
 * copy of "user:password" (percent-decoded) or NULL when there is none.
 * False when out of memory. */
CKPT__HIDDEN bool ckpt__url_take_userinfo(const char *url, char **clean, char **userinfo);

/* Appends `s` to `b` percent-encoding what may not appear in a URL (blanks,
 * controls, non-ASCII, and `extra` characters); '%' is kept, so names that
 * are already encoded stay as they are. */
CKPT__HIDDEN void ckpt__url_encode_into(ckpt__buf *b, const char *s, size_t len, const char *extra);

/* ---- remote sources (http_source.c) --------------------------------------- */

/* How a remote kind authenticates its requests. */
typedef struct ckpt__remote_auth {
    const char *bearer;        /* "Authorization: Bearer …" (never sent to a host a redirect leads to) */
    const char *userpwd;       /* "user:password" for basic auth, or "KEY_ID:SECRET" with sigv4 */
    const char *sigv4;         /* libcurl's CURLOPT_AWS_SIGV4 ("aws:amz:REGION:s3"), or NULL */
    const char *const *headers; /* header lines sent with every request (signed with it), NULL-terminated, or NULL */
    /* Azure's SharedKey: every request signed anew (its date, range and
     * validators) with the account's key, Base64 as the portal gives it
     * (ckpt__shared_key_sign). */
    const char *shared_key_account, *shared_key;
    /* An object store's name ("S3", "GCS", "Azure") for its semantics:
     * If-Match, no redirects followed, XML error bodies; NULL for plain HTTP. */
    const char *store;
    /* What to do, said when a request without credentials is refused or
     * answered 404 (a private bucket's objects are hidden), or NULL. */
    const char *hint;
    bool signed_url;           /* the URL's query carries the credentials (an Azure SAS token) */
    /* A bearer token that expires (an OAuth access token, GCS's): asked
     * before each data request for the token to send — the one it keeps,
     * or a fresh one once that is about to expire — and, after a 401, for
     * a fresh one in place of `stale` (NULL otherwise), the request then
     * tried once more with it; malloc'ed into *token.  `refresh_ctx` (copied)
     * says where the token comes from; `o` the timeouts of its request. */
    ckpt_status (*refresh)(const char *refresh_ctx, const char *shown, const ckpt__source_options *o,
                           const char *stale, char **token, ckpt_error *err);
    const char *refresh_ctx;
} ckpt__remote_auth;

/*
 * Opens a remote object: `display` is the name errors and listings show
 * (the source's name, also used to find sibling files), `url` the
 * http(s) URL requested.  One ranged GET learns the size, the validators
 * (ETag, Last-Modified) and the first bytes, which later reads of them
 * reuse; with a cache directory, a cached copy of this exact version
 * opens instead as a local file.
 */
CKPT__HIDDEN ckpt_status ckpt__remote_open(const char *display, const char *url, const ckpt__remote_auth *auth,
                                           const ckpt__source_options *o, ckpt__source **out, ckpt_error *err);

/* What a remote name is, by a HEAD request: an object (2xx), missing
 * (404/410), or — for a name ending in '/' — a directory, without a
 * request. */
CKPT__HIDDEN ckpt__name_kind ckpt__remote_stat(const char *url, const ckpt__remote_auth *auth,
                                               const ckpt__source_options *o);

/* Receives a whole download's bytes in order (offset 0 again when the
 * server restarts it); false stops it (errno says why).  Also called with
 * n = 0 at the current offset, about once a second while nothing comes:
 * false then stops it too (a caller that no longer wants it). */
typedef bool (*ckpt__remote_sink)(void *ctx, const void *data, size_t n, uint64_t offset);

/* Downloads a remote file (of ckpt__remote_open) from byte `from` to its
 * end into `sink`, with the data requests' checks, retries, minimum speed
 * and download meter; what the open already holds is given without a
 * request. */
CKPT__HIDDEN ckpt_status ckpt__remote_fetch(ckpt__source *src, uint64_t from, ckpt__remote_sink sink, void *ctx,
                                            ckpt_error *err);

/* Whether [offset, offset + n) of a remote file is among the bytes its
 * open brought (a read of them sends no request). */
CKPT__HIDDEN bool ckpt__remote_in_head(const ckpt__source *src, uint64_t offset, uint64_t n);

/* The version tag of a remote file, as huggingface_hub names a blob by it:
 * X-Linked-Etag, else the ETag, as sent (quotes included), or NULL;
 * *sha256 the SHA-256 it states (64 hex digits) or NULL. */
CKPT__HIDDEN const char *ckpt__remote_version(const ckpt__source *src, const char **sha256);

/* The parts of a small answer an API caller reads besides its body. */
typedef struct ckpt__remote_reply {
    long status;
    char error_code[64];      /* X-Error-Code (the Hugging Face Hub's) */
    char error_message[512];  /* X-Error-Message */
} ckpt__remote_reply;

/* One GET of a small document (an API's JSON) into `body`, up to `limit`
 * bytes, redirects followed (none for a store), retried on 5xx, 408, 429
 * and broken connections; any HTTP status is an answer (the caller judges
 * it).  With `form`, a POST of it instead (application/x-www-form-urlencoded,
 * an OAuth token request). */
CKPT__HIDDEN ckpt_status ckpt__remote_request(const char *shown, const char *url, const ckpt__remote_auth *auth,
                                              const char *form, const ckpt__source_options *o, size_t limit,
                                              ckpt__buf *body, ckpt__remote_reply *reply, ckpt_error *err);

/* ---- signing (sign.c) ------------------------------------------------------ */

/*
 * Azure's SharedKey: appends to `out` the header lines (each ended by
 * '\n') that sign a request — x-ms-date (now) and Authorization — for
 * `method` on `url` as sent (its path percent-encoded, its query), whose
 * other header lines are `lines` ("Name: value": Range, If-Match and the
 * x-ms-* headers take part), with the account's Base64 key.  False when
 * the key is not Base64 or memory runs out.
 */
CKPT__HIDDEN bool ckpt__shared_key_sign(const char *account, const char *key, const char *method, const char *url,
                                        const char *const *lines, size_t n, ckpt__buf *out);

/* ---- the cache (http_cache.c) ---------------------------------------------- */

/* One version of a remote file: what names its copy and what checks it. */
typedef struct ckpt__cache_key {
    const char *url;                         /* as requested: no user part */
    const char *etag, *last_modified, *linked_etag; /* validators given, or NULL */
    uint64_t size;
    const char *sha256;                      /* the bytes' SHA-256 the server gave (64 hex), or NULL */
} ckpt__cache_key;

/* The copy of this version in `dir` as a local file source shown as
 * `shown`, if one can be trusted (see http_cache.c); NULL when there is
 * none, or none to trust (a planted or altered file is left alone). */
CKPT__HIDDEN ckpt__source *ckpt__cache_open(const char *dir, const ckpt__cache_key *k, const char *shown,
                                            const ckpt__source_options *o);

/* A copy being written: a 0600 temporary of the file's size in `dir`
 * (created 0700 if missing).  NULL when none can be written (a directory
 * of another user, no space, …), which only means no cache. */
typedef struct ckpt__cache_copy ckpt__cache_copy;
CKPT__HIDDEN ckpt__cache_copy *ckpt__cache_begin(const char *dir, const ckpt__cache_key *k);

/* Writes bytes of the file at their offset (threads may write disjoint
 * ranges at once); false when the copy is broken or already committed. */
CKPT__HIDDEN bool ckpt__cache_write(ckpt__cache_copy *c, const void *data, size_t n, uint64_t offset);

/* Every byte is in: synced, checked against the server's SHA-256 if it
 * gave one, renamed into place and stamped; else why not (CKPT__D(CHECKSUM):
 * the bytes are not what the server states; `err` may be NULL), and the
 * copy stays a temporary, removed by ckpt__cache_end. */
CKPT__HIDDEN ckpt_status ckpt__cache_commit(ckpt__cache_copy *c, const char *shown, ckpt_error *err);

/* Reads bytes of a copy (committed or not: a download read from its
 * temporary), naming `shown` in errors. */
CKPT__HIDDEN ckpt_status ckpt__cache_read(ckpt__cache_copy *c, void *dst, uint64_t n, uint64_t offset,
                                          const char *shown, ckpt_error *err);

/* Closes a copy; one never committed is removed.  Accepts NULL. */
CKPT__HIDDEN void ckpt__cache_end(ckpt__cache_copy *c);

/* The HTTP(S) kind (http:// and https:// names). */
CKPT__HIDDEN extern const ckpt__source_kind ckpt__http_kind;
/* The S3 kind (s3://bucket/key names, s3_source.c). */
CKPT__HIDDEN extern const ckpt__source_kind ckpt__s3_kind;
/* The Google Cloud Storage kind (gs://bucket/key, gcs_source.c). */
CKPT__HIDDEN extern const ckpt__source_kind ckpt__gcs_kind;
/* The Azure Blob Storage kind (az://account/container/blob and
 * https://ACCOUNT.blob.core.windows.net/…, azure_source.c). */
CKPT__HIDDEN extern const ckpt__source_kind ckpt__azure_kind;
/* The Hugging Face Hub kind (hf://org/repo[@revision][/path], hf_source.c). */
CKPT__HIDDEN extern const ckpt__source_kind ckpt__hf_kind;

#endif
