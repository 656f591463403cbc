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
 * the bucket name allows it.  Names shown in errors are the s3:// names.
 */
#include <stdlib.h>
#include <string.h>

#include "http.h"

static bool s3_claims(const char *name) { return !strncmp(name, "s3://", 5); }

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* A bucket name that can be a DNS label of its own (no dots, lower case). */
static bool virtual_host_bucket(const char *b, size_t n) {
    if (n < 3 || n > 63) return false;
    for (size_t i = 0; i < n; i++)
        if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '-')) return false;
    return b[0] != '-' && b[n - 1] != '-';
}

/* SigV4's canonical URI encoding (libcurl signs the path as sent): every
 * byte but the unreserved ones and '/' as %XX. */
static void encode_key(ckpt__buf *b, const char *key, size_t len) {
    static const char hex[] = "0123456789ABCDEF";
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
            c == '_' || c == '~' || c == '/') {
            ckpt__buf_append(b, (const char *)&c, 1);
        } else {
            char e[3] = {'%', hex[c >> 4], hex[c & 15]};
            ckpt__buf_append(b, e, 3);
        }
    }
}

typedef struct s3_target {
    char *url, *userpwd, *sigv4;
    ckpt__remote_auth auth;
} s3_target;

static void target_free(s3_target *t) {
    if (t->userpwd) memset(t->userpwd, 0, strlen(t->userpwd));
    free(t->userpwd);
    free(t->sigv4);
    free(t->url);
}

static ckpt_status s3_prepare(const char *name, bool allow_no_key, s3_target *t, ckpt_error *err) {
    memset(t, 0, sizeof *t);
    const char *bucket = name + 5, *slash = strchr(bucket, '/');
    size_t bucket_len = slash ? (size_t)(slash - bucket) : strlen(bucket);
    const char *key = slash ? slash + 1 : "";
    if (!bucket_len || (!*key && !allow_no_key))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1,
                          "an s3:// name needs a bucket and a key: s3://BUCKET/KEY");
    for (size_t i = 0; i < bucket_len; i++)
        if ((unsigned char)bucket[i] <= 0x20 || strchr("?#%@:\\", bucket[i]))
            return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "'%.*s' is not a bucket name",
                              (int)bucket_len, bucket);
    const char *region = env("AWS_REGION");
    if (!region) region = env("AWS_DEFAULT_REGION");
    if (!region) region = "us-east-1";
    const char *endpoint = env("AWS_ENDPOINT_URL_S3");
    if (!endpoint) endpoint = env("AWS_ENDPOINT_URL");
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
    encode_key(&b, key, strlen(key));
    if (b.failed) {
        free(b.data);
        return ckpt__oom(err, name, NULL);
    }
    t->url = b.data;
    t->auth.s3 = true;
    const char *id = env("AWS_ACCESS_KEY_ID"), *secret = env("AWS_SECRET_ACCESS_KEY");
    if (id && secret) {
        size_t a = strlen(id), s = strlen(secret), r = strlen(region);
        t->userpwd = ckpt__malloc(a + s + 2);
        t->sigv4 = ckpt__malloc(r + 16);
        if (!t->userpwd || !t->sigv4) {
            target_free(t);
            return ckpt__oom(err, name, NULL);
        }
        memcpy(t->userpwd, id, a);
        t->userpwd[a] = ':';
        memcpy(t->userpwd + a + 1, secret, s + 1);
        snprintf(t->sigv4, r + 16, "aws:amz:%s:s3", region);
        t->auth.userpwd = t->userpwd;
        t->auth.sigv4 = t->sigv4;
        t->auth.session_token = env("AWS_SESSION_TOKEN");
    }
    return CKPT_OK;
}

static ckpt_status s3_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    s3_target t;
    ckpt_status st = s3_prepare(name, false, &t, err);
    if (st) return st;
    st = ckpt__remote_open(name, t.url, &t.auth, o, out, err);
    target_free(&t);
    return st;
}

static ckpt__name_kind s3_stat(const char *name, const ckpt__source_options *o) {
    s3_target t;
    /* A name that is no object's: "a file", so that opening it says why. */
    if (s3_prepare(name, true, &t, NULL) != CKPT_OK) return CKPT__NAME_FILE;
    size_t n = strlen(name);
    if (n && name[n - 1] == '/') {
        target_free(&t);
        return CKPT__NAME_DIR;
    }
    ckpt__name_kind k = ckpt__remote_stat(t.url, &t.auth, o);
    target_free(&t);
    return k;
}

const ckpt__source_kind ckpt__s3_kind = {"s3", s3_claims, s3_open, s3_stat};
