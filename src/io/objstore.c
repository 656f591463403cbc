/*
 * objstore.c — what the object-store kinds share (s3_source.c,
 * gcs_source.c, azure_source.c): the variables they read, the encoding of
 * keys into URLs, SigV4 credentials for libcurl (S3, and GCS's HMAC keys
 * in its interoperability mode), the target a name becomes (the bucket
 * of a name, its URL path-style), the listing of a "directory" (a prefix)
 * through the stores' XML listings, and each kind's open, stat and list
 * (ckpt__store: a kind gives its listing and how a name becomes a target,
 * so that the three differ only where the stores do).
 */
#include <stdlib.h>
#include <string.h>

#include "objstore.h"

const char *ckpt__env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* SigV4's canonical URI encoding, which the stores all accept in paths:
 * every byte but the unreserved ones and '/' as %XX. */
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

bool ckpt__store_plain_name(const char *s, size_t n) {
    if (!n) return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] <= 0x20 || strchr("?#%@:\\/", s[i])) return false;
    return true;
}

void ckpt__store_target_free(ckpt__store_target *t) {
    for (size_t i = 0; i < sizeof t->owned / sizeof *t->owned; i++) {
        if (t->owned[i]) memset(t->owned[i], 0, strlen(t->owned[i]));
        free(t->owned[i]);
    }
    free(t->url);
    free(t->base);
    free(t->query);
    memset(t, 0, sizeof *t);
}

const char *ckpt__store_own(ckpt__store_target *t, char *s) {
    for (size_t i = 0; i < sizeof t->owned / sizeof *t->owned; i++)
        if (!t->owned[i]) return t->owned[i] = s;
    free(s);
    return NULL;
}

const char *ckpt__store_header(ckpt__store_target *t, char *line) {
    const char *l = ckpt__store_own(t, line);
    if (!l) return NULL;
    size_t n = 0;
    while (t->lines[n]) n++;
    if (n + 1 >= sizeof t->lines / sizeof *t->lines) return NULL;
    t->lines[n] = l;
    t->auth.headers = t->lines;
    return l;
}

static char *joined(const char *a, const char *b, const char *c) {
    ckpt__buf x = {0};
    ckpt__buf_puts(&x, a);
    ckpt__buf_puts(&x, b);
    ckpt__buf_puts(&x, c ? c : "");
    return ckpt__buf_text(&x);
}

bool ckpt__store_sigv4(ckpt__store_target *t, const char *id, const char *secret, const char *scope,
                       const char *prefix, const char *token) {
    char *h = joined("x-", prefix, "-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *userpwd = ckpt__store_own(t, joined(id, ":", secret)), *sigv4 = ckpt__store_own(t, ckpt__strdup(scope));
    /* Signed with the request: the payload hash of a GET (empty), and a
     * session token. */
    if (!userpwd || !sigv4 || !ckpt__store_header(t, h)) return false;
    if (token) {
        char *p = joined("x-", prefix, "-security-token: ");
        char *line = p ? joined(p, token, NULL) : NULL;
        free(p);
        if (!ckpt__store_header(t, line)) return false;
    }
    t->auth.userpwd = userpwd;
    t->auth.sigv4 = sigv4;
    return true;
}

char *ckpt__store_url(const ckpt__store_target *t, const char *path, const char *query) {
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, t->base);
    if (path) encode_key(&b, path, strlen(path));
    bool q = false;
    if (query && *query) ckpt__buf_puts(&b, "?"), ckpt__buf_puts(&b, query), q = true;
    if (t->query) ckpt__buf_puts(&b, q ? "&" : "?"), ckpt__buf_puts(&b, t->query);
    return ckpt__buf_text(&b);
}

/* Appends `s` percent-encoded as a query value: as a key, and '/' too. */
static void encode_value(ckpt__buf *b, const char *s) {
    for (const char *p = s; *p; p++) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        encode_key(b, p, n);
        if (!slash) break;
        ckpt__buf_puts(b, "%2F");
        p = slash;
    }
}

/* One query parameter of a listing's page: "name=value", the value encoded. */
static char *param(const char *name, const char *value) {
    ckpt__buf b = {0};
    ckpt__buf_puts(&b, name);
    ckpt__buf_puts(&b, "=");
    encode_value(&b, value);
    return ckpt__buf_text(&b);
}

/* Parameters in order of their names (the part before '='). */
static int by_name(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    size_t m = strcspn(x, "="), n = strcspn(y, "=");
    int c = strncmp(x, y, m < n ? m : n);
    return c ? c : (m > n) - (m < n);
}

/* One page of a listing: its URL, the bucket's or container's own (no
 * '/' after it) with the parameters in their sorted order (libcurl signs
 * the query as sent), then the target's own query (a SAS token). */
static char *page_url(const ckpt__store_target *t, const ckpt__store_listing *l, const char *prefix,
                      const char *marker) {
    char *mine[3] = {param("delimiter", "/"), param("prefix", prefix),
                     marker && *marker ? param(l->marker_param, marker) : NULL};
    const char *all[5];
    size_t n = 0;
    bool failed = !mine[0] || !mine[1] || (marker && *marker && !mine[2]);
    for (size_t i = 0; i < 3; i++)
        if (mine[i]) all[n++] = mine[i];
    for (size_t i = 0; i < 2; i++)
        if (l->params[i]) all[n++] = l->params[i];
    qsort(all, n, sizeof *all, by_name);
    ckpt__buf q = {0};
    ckpt__buf_puts(&q, t->base);
    if (q.len && q.data[q.len - 1] == '/') q.data[--q.len] = '\0';
    for (size_t i = 0; i < n; i++) ckpt__buf_puts(&q, i ? "&" : "?"), ckpt__buf_puts(&q, all[i]);
    if (t->query) ckpt__buf_puts(&q, "&"), ckpt__buf_puts(&q, t->query);
    for (size_t i = 0; i < 3; i++) free(mine[i]);
    if (failed) q.failed = true;
    return ckpt__buf_text(&q);
}

/* A listing's error as the store says it: its code, message and detail. */
static ckpt_status listing_failed(const char *shown, const ckpt__store_target *t, const ckpt__remote_reply *reply,
                                  const ckpt__buf *body, ckpt_error *err) {
    char said[1200];
    ckpt__store_error_text(body->data ? body->data : "", body->len, said, sizeof said);
    long s = reply->status;
    ckpt_status cat = s == 404 ? CKPT_E_NOT_FOUND : s == 401 || s == 403 ? CKPT__D(HTTP_AUTH) : CKPT__D(HTTP_STATUS);
    bool anonymous = !t->auth.bearer && !t->auth.userpwd && !t->auth.shared_key_account && !t->auth.signed_url;
    bool hint = anonymous && t->auth.hint && (s == 401 || s == 403 || s == 404);
    return ckpt__fail(err, cat, shown, NULL, -1, "HTTP %ld listing the directory%s%s%s%s", s, said,
                      hint ? " (no credentials were sent: " : "", hint ? t->auth.hint : "", hint ? ")" : "");
}

/*
 * The objects directly under `prefix` (ending in '/', or "" for the
 * bucket's top) of the target's bucket: each name, the prefix taken off,
 * given to `add` (NULL: only *any is wanted, set when there is one); the
 * store's answer other than 200 is an error naming `shown`, with its code
 * and message (401/403: CKPT_E_AUTH, 404: CKPT_E_NOT_FOUND).
 */
static ckpt_status store_list(const char *shown, const ckpt__store_target *t, const ckpt__store_listing *l,
                              const char *prefix, const ckpt__source_options *o,
                              int (*add)(void *ctx, const char *name), void *ctx, bool *any, ckpt_error *err) {
    ckpt__buf body = {0}, item = {0}, marker = {0};
    ckpt_status st = CKPT_OK;
    size_t plen = strlen(prefix);
    if (any) *any = false;
    for (unsigned page = 0; st == CKPT_OK; page++) {
        if (page >= 10000) {
            st = ckpt__fail(err, CKPT_E_LIMIT, shown, NULL, -1, "the listing runs past 10000 pages");
            break;
        }
        char *url = page_url(t, l, prefix, marker.data);
        if (!url) {
            st = ckpt__oom(err, shown, NULL);
            break;
        }
        ckpt__remote_reply reply;
        body.len = 0;
        st = ckpt__remote_request(shown, url, &t->auth, NULL, o, 16u << 20, &body, &reply, err);
        free(url);
        if (st) break;
        if (reply.status != 200) {
            st = listing_failed(shown, t, &reply, &body, err);
            break;
        }
        const char *xml = body.data ? body.data : "";
        for (size_t pos = 0; st == CKPT_OK && ckpt__xml_next(xml, body.len, l->name_tag, &pos, &item);) {
            const char *name = item.data ? item.data : "";
            if (strncmp(name, prefix, plen) != 0) continue;
            name += plen;
            if (!*name || strchr(name, '/')) continue; /* a "subdirectory", or the prefix itself */
            if (any) *any = true;
            if (add && add(ctx, name)) st = ckpt__oom(err, shown, NULL);
        }
        size_t pos = 0;
        if (st || !ckpt__xml_next(xml, body.len, l->next_tag, &pos, &marker) || !marker.len) break;
        if (any && *any && !add) break; /* asked only whether there is something */
    }
    free(body.data);
    free(item.data);
    free(marker.data);
    return st;
}

/* The prefix that lists directory `key` ("" for the bucket, else ending in '/'), malloc'ed. */
static char *dir_prefix(const char *key, size_t n) {
    ckpt__buf b = {0};
    ckpt__buf_append(&b, key, n);
    if (n && key[n - 1] != '/') ckpt__buf_puts(&b, "/");
    return ckpt__buf_text(&b);
}

void ckpt__store_base(ckpt__buf *b, const char *endpoint, const char *bucket, size_t n) {
    size_t len = strlen(endpoint);
    while (len && endpoint[len - 1] == '/') len--;
    ckpt__buf_append(b, endpoint, len);
    ckpt__buf_puts(b, "/");
    ckpt__buf_append(b, bucket, n);
    ckpt__buf_puts(b, "/");
}

ckpt_status ckpt__store_bucket(const char *name, bool need_key, const char *usage, const char **bucket,
                               size_t *bucket_len, const char **key, ckpt_error *err) {
    const char *b = strstr(name, "://") + 3, *slash = strchr(b, '/');
    *bucket = b;
    *bucket_len = slash ? (size_t)(slash - b) : strlen(b);
    *key = slash ? slash + 1 : "";
    if (!*bucket_len || (need_key && !**key)) return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "%s", usage);
    if (!ckpt__store_plain_name(b, *bucket_len))
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, name, NULL, -1, "'%.*s' is not a bucket name",
                          (int)*bucket_len, b);
    return CKPT_OK;
}

/* `name` as errors show it (malloc'ed when the store redacts it), NULL when out of memory. */
static const char *shown_name(const ckpt__store *s, const char *name) {
    return s->redact ? ckpt__url_redact(name) : name;
}

static void shown_free(const ckpt__store *s, const char *shown) {
    if (s->redact) free((char *)shown);
}

ckpt_status ckpt__store_open(const ckpt__store *s, const char *name, const ckpt__source_options *o,
                             ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    const char *shown = shown_name(s, name), *key;
    if (!shown) return ckpt__oom(err, NULL, NULL);
    ckpt__store_target t;
    size_t n;
    ckpt_status st = s->prepare(name, shown, o, true, &t, &key, &n, err);
    if (st == CKPT_OK) {
        st = ckpt__remote_open(shown, t.url, &t.auth, o, out, err);
        ckpt__store_target_free(&t);
    }
    shown_free(s, shown);
    return st;
}

ckpt__name_kind ckpt__store_name_kind(const ckpt__store *s, const char *name, const ckpt__source_options *o) {
    const char *shown = shown_name(s, name), *key;
    ckpt__store_target t;
    size_t n;
    if (!shown || s->prepare(name, shown, o, false, &t, &key, &n, NULL) != CKPT_OK) {
        shown_free(s, shown);
        return CKPT__NAME_FILE;
    }
    ckpt__name_kind k = CKPT__NAME_DIR;
    if (n && key[n - 1] != '/' && (k = ckpt__remote_stat(t.url, &t.auth, o)) == CKPT__NAME_MISSING) {
        char *prefix = dir_prefix(key, n); /* a prefix of objects is a directory */
        bool any = false;
        if (prefix && store_list(shown, &t, &s->listing, prefix, o, NULL, NULL, &any, NULL) == CKPT_OK && any)
            k = CKPT__NAME_DIR;
        free(prefix);
    }
    ckpt__store_target_free(&t);
    shown_free(s, shown);
    return k;
}

ckpt_status ckpt__store_list(const ckpt__store *s, const char *dir, const ckpt__source_options *o,
                             int (*add)(void *ctx, const char *name), void *ctx, ckpt_error *err) {
    const char *shown = shown_name(s, dir), *key;
    if (!shown) return ckpt__oom(err, NULL, NULL);
    ckpt__store_target t;
    size_t n;
    ckpt_status st = s->prepare(dir, shown, o, false, &t, &key, &n, err);
    if (st == CKPT_OK) {
        char *prefix = dir_prefix(key, n);
        st = prefix ? store_list(shown, &t, &s->listing, prefix, o, add, ctx, NULL, err) : ckpt__oom(err, shown, NULL);
        free(prefix);
        ckpt__store_target_free(&t);
    }
    shown_free(s, shown);
    return st;
}
