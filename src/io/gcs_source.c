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

static const ckpt__store_listing gcs_listing = {{NULL, NULL}, "marker", "NextMarker", "Key"};

#define GCS_HINT                                                                                                      \
    "a private bucket needs GS_ACCESS_KEY_ID and GS_SECRET_ACCESS_KEY (HMAC keys), or "                              \
    "GOOGLE_APPLICATION_CREDENTIALS (a service account's key file), or the metadata server of a Google Cloud "       \
    "machine (GCE_METADATA_HOST)"

/* The endpoint: $STORAGE_EMULATOR_HOST ("host:port" means http://), else Google's. */
static void endpoint(ckpt__buf *b) {
    const char *e = ckpt__env("STORAGE_EMULATOR_HOST");
    if (!e) {
        ckpt__buf_puts(b, "https://storage.googleapis.com");
        return;
    }
    if (!strstr(e, "://")) ckpt__buf_puts(b, "http://");
    size_t n = strlen(e);
    while (n && e[n - 1] == '/') n--;
    ckpt__buf_append(b, e, n);
}

/* The target of gs://BUCKET[/KEY]; *key points at KEY in `name`. */
static ckpt_status gcs_prepare(const char *name, const ckpt__source_options *o, bool need_key, ckpt__store_target *t,
                               const char **key, ckpt_error *err) {
    memset(t, 0, sizeof *t);
    const char *bucket = name + 5, *slash = strchr(bucket, '/');
    size_t bucket_len = slash ? (size_t)(slash - bucket) : strlen(bucket);
    *key = slash ? slash + 1 : "";
    if (!bucket_len || (need_key && !**key))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "a gs:// name needs a bucket and a key: gs://BUCKET/KEY");
    if (!ckpt__store_plain_name(bucket, bucket_len))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "'%.*s' is not a bucket name",
                          (int)bucket_len, bucket);
    ckpt__buf b = {0};
    endpoint(&b);
    ckpt__buf_puts(&b, "/");
    ckpt__buf_append(&b, bucket, bucket_len);
    ckpt__buf_puts(&b, "/");
    t->base = b.data;
    t->auth.store = "GCS";
    t->auth.hint = GCS_HINT;
    bool ok = !b.failed && (t->url = ckpt__store_url(t, *key, NULL));
    const char *id = ckpt__env("GS_ACCESS_KEY_ID"), *secret = ckpt__env("GS_SECRET_ACCESS_KEY");
    ckpt_status st = CKPT_OK;
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

static ckpt_status gcs_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    ckpt__store_target t;
    const char *key;
    ckpt_status st = gcs_prepare(name, o, true, &t, &key, err);
    if (st) return st;
    st = ckpt__remote_open(name, t.url, &t.auth, o, out, err);
    ckpt__store_target_free(&t);
    return st;
}

static ckpt__name_kind gcs_stat(const char *name, const ckpt__source_options *o) {
    ckpt__store_target t;
    const char *key;
    /* A name that is no object's: "a file", so that opening it says why. */
    if (gcs_prepare(name, o, false, &t, &key, NULL) != CKPT_OK) return CKPT__NAME_FILE;
    ckpt__name_kind k = ckpt__store_stat(name, &t, &gcs_listing, key, strlen(key), o);
    ckpt__store_target_free(&t);
    return k;
}

static ckpt_status gcs_list(const char *dir, const ckpt__source_options *o, int (*add)(void *ctx, const char *name),
                            void *ctx, ckpt_error *err) {
    ckpt__store_target t;
    const char *key;
    ckpt_status st = gcs_prepare(dir, o, false, &t, &key, err);
    if (st) return st;
    st = ckpt__store_list_dir(dir, &t, &gcs_listing, key, strlen(key), o, add, ctx, err);
    ckpt__store_target_free(&t);
    return st;
}

const ckpt__source_kind ckpt__gcs_kind = {"gs", gcs_claims, gcs_open, gcs_stat, NULL, gcs_list};
