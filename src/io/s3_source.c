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
 * What the stores share (keys in URLs, SigV4 for libcurl, open, stat and
 * list) is objstore.c's.
 */
#include <stdlib.h>
#include <string.h>

#include "objstore.h"

static bool s3_claims(const char *name) { return !strncmp(name, "s3://", 5); }

/* A bucket name that can be a DNS label of its own (no dots, lower case). */
static bool virtual_host_bucket(const char *b, size_t n) {
    if (n < 3 || n > 63) return false;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-')) return false;
    return b[0] != '-' && b[n - 1] != '-';
}

/* The target of s3://BUCKET[/KEY]; *key points at KEY in `name`. */
static ckpt_status s3_prepare(const char *name, const char *shown, const ckpt__source_options *o, bool need_key,
                              ckpt__store_target *t, const char **key, size_t *key_len, ckpt_error *err) {
    (void)shown, (void)o; /* s3:// names carry no secrets; the keys come from the environment */
    memset(t, 0, sizeof *t);
    const char *bucket;
    size_t bucket_len;
    ckpt_status st = ckpt__store_bucket(name, need_key, "an s3:// name needs a bucket and a key: s3://BUCKET/KEY",
                                        &bucket, &bucket_len, key, err);
    if (st) return st;
    *key_len = strlen(*key);
    const char *region = ckpt__env("AWS_REGION");
    if (!region) region = ckpt__env("AWS_DEFAULT_REGION");
    if (!region) region = "us-east-1";
    const char *endpoint = ckpt__env("AWS_ENDPOINT_URL_S3");
    if (!endpoint) endpoint = ckpt__env("AWS_ENDPOINT_URL");
    ckpt__buf b = {0};
    if (endpoint) {
        ckpt__store_base(&b, endpoint, bucket, bucket_len);
    } else if (virtual_host_bucket(bucket, bucket_len)) {
        ckpt__buf_puts(&b, "https://");
        ckpt__buf_append(&b, bucket, bucket_len);
        ckpt__buf_puts(&b, ".s3.");
        ckpt__buf_puts(&b, region);
        ckpt__buf_puts(&b, ".amazonaws.com/");
    } else {
        ckpt__buf_puts(&b, "https://s3.");
        ckpt__buf_puts(&b, region);
        ckpt__buf_puts(&b, ".amazonaws.com");
        ckpt__store_base(&b, "", bucket, bucket_len);
    }
    t->base = b.data;
    bool ok = !b.failed && (t->url = ckpt__store_url(t, *key, NULL));
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

CKPT__STORE_KIND(ckpt__s3_kind, "s3", s3_claims, s3_prepare, false,
                 {{"list-type=2", NULL}, "continuation-token", "NextContinuationToken", "Key"});
