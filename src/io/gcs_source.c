/*
 * gcs_source.c — the gs://bucket/key kind of source: Google Cloud Storage
 * through its XML API (https://storage.googleapis.com/BUCKET/KEY, or
 * $STORAGE_EMULATOR_HOST as Google's client libraries take it: a host and
 * port, or a URL), read by the HTTP machinery of http_source.c.
 *
 * Credentials, in this order:
 *   - HMAC keys, $GS_ACCESS_KEY_ID and $GS_SECRET_ACCESS_KEY (boto's and
 *     gsutil's names): requests signed with V4 signatures,
 *     GOOG4-HMAC-SHA256 over the x-goog-* headers (libcurl's SigV4 with
 *     Google's names; objstore.c);
 *   - an OAuth 2.0 bearer token from Application Default Credentials: a
 *     service account's key file, an authorized user's, or the metadata
 *     server (gcs_auth.c);
 *   - none: anonymous requests, for public buckets.
 * A "directory" (a prefix) is listed with the XML API's bucket listing
 * (delimiter=/), so that a directory of shards opens as one; a name that
 * is no object but a prefix of some is a directory too.  Names shown in
 * errors are the gs:// names.
 */
#include <stdlib.h>
#include <string.h>

#include "gcs.h"

static bool gcs_claims(const char *name) { return !strncmp(name, "gs://", 5); }

#define GCS_HINT                                                                                                      \
    "a private bucket needs GS_ACCESS_KEY_ID and GS_SECRET_ACCESS_KEY (HMAC keys), or "                              \
    "GOOGLE_APPLICATION_CREDENTIALS (a service account's key file), or the metadata server of a Google Cloud "       \
    "machine (GCE_METADATA_HOST)"

/* The target of gs://BUCKET[/KEY]; *key points at KEY in `name`. */
static ckpt_status gcs_prepare(const char *name, const char *shown, const ckpt__source_options *o, bool need_key,
                               ckpt__store_target *t, const char **key, size_t *key_len, ckpt_error *err) {
    (void)shown; /* gs:// names carry no secrets */
    memset(t, 0, sizeof *t);
    const char *bucket;
    size_t bucket_len;
    ckpt_status st = ckpt__store_bucket(name, need_key, "a gs:// name needs a bucket and a key: gs://BUCKET/KEY",
                                        &bucket, &bucket_len, key, err);
    if (st) return st;
    *key_len = strlen(*key);
    /* The endpoint: $STORAGE_EMULATOR_HOST ("host:port" means http://), else Google's. */
    const char *e = ckpt__env("STORAGE_EMULATOR_HOST");
    ckpt__buf b = {0};
    if (e && !strstr(e, "://")) ckpt__buf_puts(&b, "http://");
    ckpt__store_base(&b, e ? e : "https://storage.googleapis.com", bucket, bucket_len);
    t->base = b.data;
    t->auth.store = "GCS";
    t->auth.hint = GCS_HINT;
    bool ok = !b.failed && (t->url = ckpt__store_url(t, *key, NULL));
    const char *id = ckpt__env("GS_ACCESS_KEY_ID"), *secret = ckpt__env("GS_SECRET_ACCESS_KEY");
    char *origin = NULL;
    if (ok && id && secret) {
        ok = ckpt__store_sigv4(t, id, secret, "goog:goog:auto:storage", "goog", NULL);
    } else if (ok && (origin = ckpt__gcs_token_origin())) {
        /* Asked again before each request of the files opened with it. */
        char *token = NULL;
        st = ckpt__gcs_token_refresh(origin, name, o, NULL, &token, err);
        t->auth.refresh = ckpt__gcs_token_refresh;
        ok = st == CKPT_OK && (t->auth.refresh_ctx = ckpt__store_own(t, origin)) &&
             (t->auth.bearer = ckpt__store_own(t, token));
        if (st) free(origin), free(token);
    }
    if (st == CKPT_OK && !ok) st = ckpt__oom(err, name, NULL);
    if (st) ckpt__store_target_free(t);
    return st;
}

CKPT__STORE_KIND(ckpt__gcs_kind, "gs", gcs_claims, gcs_prepare, false, {{NULL, NULL}, "marker", "NextMarker", "Key"});
