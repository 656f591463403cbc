/*
 * s3_source.c — the s3://bucket/key kind of source: S3 (or an S3-compatible
 * store) through the HTTP machinery of http_source.c, with requests signed
 * by libcurl's SigV4 (CURLOPT_AWS_SIGV4).
 *
 * The usual variables say where and who: AWS_ACCESS_KEY_ID,
 * AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (no keys: unsigned,
 * anonymous requests, for public buckets), AWS_REGION (or
 * AWS_DEFAULT_REGION; us-east-1 by default), and AWS_ENDPOINT_URL_S3 or
 * AWS_ENDPOINT_URL for S3-compatible stores (MinIO, Ceph, moto, R2…),
 * which are addressed path-style (<endpoint>/<bucket>/<key>); AWS itself
 * virtual-hosted (https://<bucket>.s3.<region>.amazonaws.com/<key>) when
 * the bucket name allows it.  A "directory" (a prefix) is listed with
 * ListObjectsV2 (list-type=2, delimiter=/, page after page by continuation
 * token), so that a directory of shards opens as one; a name that is no
 * object but a prefix of some is a directory too.  Names shown in errors
 * are the s3:// names.
 * What the stores share (keys in URLs, SigV4 for libcurl) is objstore.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "objstore.h"

static const ckpt__store_listing s3_listing = {{"list-type=2", NULL}, "continuation-token",
                                                "NextContinuationToken", "Key"};

static bool s3_claims(const char *name) { return !strncmp(name, "s3://", 5); }

/* A bucket name that can be a DNS label of its own (no dots, lower case). */
static bool virtual_host_bucket(const char *b, size_t n) {
    if (n < 3 || n > 63) return false;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-')) return false;
    return b[0] != '-' && b[n - 1] != '-';
}

/* The target of s3://BUCKET[/KEY]; *key points at KEY in `name`. */
static ckpt_status s3_prepare(const char *name, bool allow_no_key, ckpt__store_target *t, const char **key_out,
                              ckpt_error *err) {
    memset(t, 0, sizeof *t);
    const char *bucket = name + 5, *slash = strchr(bucket, '/');
    size_t bucket_len = slash ? (size_t)(slash - bucket) : strlen(bucket);
    const char *key = slash ? slash + 1 : "";
    *key_out = key;
    if (!bucket_len || (!*key && !allow_no_key))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "an s3:// name needs a bucket and a key: s3://BUCKET/KEY");
    if (!ckpt__store_plain_name(bucket, bucket_len))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "'%.*s' is not a bucket name",
                          (int)bucket_len, bucket);
    const char *region = ckpt__env("AWS_REGION");
    if (!region) region = ckpt__env("AWS_DEFAULT_REGION");
    if (!region) region = "us-east-1";
    const char *endpoint = ckpt__env("AWS_ENDPOINT_URL_S3");
    if (!endpoint) endpoint = ckpt__env("AWS_ENDPOINT_URL");
    ckpt__buf b = {0};
    if (endpoint) {
        size_t n = strlen(endpoint);
        while (n && endpoint[n - 1] == '/') n--;
        ckpt__buf_append(&b, endpoint, n);
        ckpt__buf_puts(&b, "/");
        ckpt__buf_append(&b, bucket, bucket_len);
        ckpt__buf_puts(&b, "/");
    } else if (virtual_host_bucket(bucket, bucket_len)) {
        ckpt__buf_puts(&b, "https://");
        ckpt__buf_append(&b, bucket, bucket_len);
        ckpt__buf_puts(&b, ".s3.");
        ckpt__buf_puts(&b, region);
        ckpt__buf_puts(&b, ".amazonaws.com/");
    } else {
        ckpt__buf_puts(&b, "https://s3.");
        ckpt__buf_puts(&b, region);
        ckpt__buf_puts(&b, ".amazonaws.com/");
        ckpt__buf_append(&b, bucket, bucket_len);
        ckpt__buf_puts(&b, "/");
    }
    t->base = b.data;
    bool ok = !b.failed && (t->url = ckpt__store_url(t, key, NULL));
    t->auth.store = "S3";
    const char *id = ckpt__env("AWS_ACCESS_KEY_ID"), *secret = ckpt__env("AWS_SECRET_ACCESS_KEY");
    char scope[128];
    snprintf(scope, sizeof scope, "aws:amz:%s:s3", region);
    if (ok && id && secret) ok = ckpt__store_sigv4(t, id, secret, scope, "amz", ckpt__env("AWS_SESSION_TOKEN"));
    if (!ok) {
        ckpt__store_target_free(t);
        return ckpt__oom(err, name, NULL);
    }
    return CKPT_OK;
}

static ckpt_status s3_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    ckpt__store_target t;
    const char *key;
    ckpt_status st = s3_prepare(name, false, &t, &key, err);
    if (st) return st;
    st = ckpt__remote_open(name, t.url, &t.auth, o, out, err);
    ckpt__store_target_free(&t);
    return st;
}

static ckpt__name_kind s3_stat(const char *name, const ckpt__source_options *o) {
    ckpt__store_target t;
    const char *key;
    /* A name that is no object's: "a file", so that opening it says why. */
    if (s3_prepare(name, true, &t, &key, NULL) != CKPT_OK) return CKPT__NAME_FILE;
    ckpt__name_kind k = ckpt__store_stat(name, &t, &s3_listing, key, strlen(key), o);
    ckpt__store_target_free(&t);
    return k;
}

static ckpt_status s3_list(const char *dir, const ckpt__source_options *o, int (*add)(void *ctx, const char *name),
                           void *ctx, ckpt_error *err) {
    ckpt__store_target t;
    const char *key;
    ckpt_status st = s3_prepare(dir, true, &t, &key, err);
    if (st) return st;
    st = ckpt__store_list_dir(dir, &t, &s3_listing, key, strlen(key), o, add, ctx, err);
    ckpt__store_target_free(&t);
    return st;
}

const ckpt__source_kind ckpt__s3_kind = {"s3", s3_claims, s3_open, s3_stat, NULL, s3_list};
