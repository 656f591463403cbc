/*
 * http_source.c — remote files over HTTP(S), through libcurl: the http://
 * and https:// kind of source, and the machinery the s3:// kind drives.
 *
 * Opening sends one ranged GET for the first HEAD_BYTES: its answer gives
 * the size (Content-Range), the validators (ETag, Last-Modified) and the
 * bytes a format reads first (a safetensors header), which later reads of
 * them reuse.  Reads are batches: the requested ranges, sorted, are merged
 * where they touch (or nearly: holes up to GAP_BYTES are read and dropped),
 * cut into parts that share the connections, and sent in parallel through
 * a curl multi handle; each response's bytes go straight into the
 * destinations of its range.
 *
 * Every response is judged against its request — status, Content-Range,
 * length, no more bytes than asked for — and against the file as opened:
 * the validators are sent (If-Range, or If-Match to S3) and compared, so
 * that a file replaced mid-load fails instead of mixing versions.  What can
 * pass (5xx, 408, 429, refused or reset connections, short bodies,
 * timeouts) is retried with backoff, resuming at the last byte received.
 * A server may also be too slow: an attempt that receives less than the
 * minimum speed over a window fails like a timeout, and a request that has
 * gone the retry deadline without progress stops retrying, so that no
 * server, however it trickles, holds a read longer than that.
 *
 * Connections: each batch borrows a context (a multi handle and its easy
 * handles, whose connections stay open between batches) from the source's
 * pool; the transfers of all batches of a source together stay within
 * max_connections (a batch always gets one, so every caller progresses).
 * DNS and TLS sessions are shared across the pool (connections are not:
 * libcurl cannot share them between threads).
 *
 * With a cache directory, an open whose version has a trusted copy there
 * reads that instead; otherwise the first read past the open's bytes
 * starts a copy, filled as the reads arrive and committed once every byte
 * is in (http_cache.c says what trusted means).
 *
 * A server that serves no byte ranges answers the open's ranged GET with
 * the whole file (HTTP 200: `python -m http.server`, many mirrors).  A
 * file it brings whole in HEAD_BYTES needs no more; a larger one cannot be
 * read in parts.  With a cache directory, the open keeps the answer's
 * first HEAD_BYTES (a safetensors header: `inspect` needs no more) and
 * hangs up; the first read past them downloads the file whole, once, as
 * one more transfer of the same machinery (minimum speed, retry deadline,
 * retries that resume where a retry's answer is a range and restart from
 * the first byte where it is the whole file again), streamed to a
 * temporary in the cache directory (never held in memory), checked (the
 * size against the open's Content-Length, the SHA-256 where the server
 * states one) and renamed into place; every read then comes from it.
 * Without a cache directory the open fails, saying how to give one.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "file.h"
#include "http.h"

/* What a refusal for want of byte ranges tells to do. */
#define GIVE_A_CACHE                                                                                          \
    "give a cache directory to download it whole once and read it there: --cache-dir DIR (ckpt), "          \
    "cache_dir=DIR (Python), ckpt_catalog_options.cache_dir (C)"

enum {
    HEAD_BYTES = 256 << 10,    /* read at open: most safetensors headers fit */
    MIN_PART = 8 << 20,        /* parts of a batch: not smaller than this (object stores: 8-16 MB ranges)… */
    MAX_PART = 64 << 20,       /* …nor larger than this */
    GAP_BYTES = 64 << 10,      /* holes read and dropped to merge two ranges */
    MAX_HEADER_BYTES = 256 << 10, /* of one response: more is hostile */
    ERROR_BODY = 4096,         /* kept of an error response (S3's XML) */
    MAX_ERROR_BODY = 1 << 20,  /* drained of one before giving up on it */
    DEFAULT_CONNECT_MS = 30000,
    DEFAULT_READ_MS = 60000,
    DEFAULT_MIN_SPEED_MS = 30000,
    DEFAULT_CONNECTIONS = 16,
    MAX_CONNECTIONS = 256,
    BACKOFF_FIRST_MS = 200,
    BACKOFF_MAX_MS = 10000,
    RETRY_AFTER_CAP_S = 60,
    RECV_BUFFER = 256 << 10,
};

/* ---- the source's state ------------------------------------------------------ */

typedef struct span {
    uint64_t lo, hi;
} span;

typedef struct context context;

typedef struct remote {
    char *url;       /* what is requested */
    const char *shown; /* the source's name, for errors */
    /* Credentials (owned copies; wiped when freed). */
    char *bearer, *userpwd, *sigv4;
    char *sk_account, *sk_key; /* Azure's SharedKey (every request signed anew), or NULL */
    char *ca_bundle; /* $CURL_CA_BUNDLE: certificates to verify servers with, instead of the system's */
    char *store;     /* an object store's name (its semantics: ckpt__remote_auth.store), or NULL */
    char *hint;      /* what to do when refused without credentials, or NULL */
    bool signed_url; /* the URL carries the credentials (a SAS token) */
    /* A bearer token that expires: asked for before every attempt
     * (ckpt__remote_auth.refresh), with what says where it comes from and
     * the timeouts of asking (the options' numbers only). */
    ckpt_status (*refresh)(const char *refresh_ctx, const char *shown, const ckpt__source_options *o,
                           const char *stale, char **token, ckpt_error *err);
    char *refresh_ctx;
    ckpt__source_options token_options;
    struct curl_slist *headers; /* validators and the kind's headers, for every data request */
    long connect_ms, read_s;
    unsigned retries, max_conn;
    uint64_t min_speed;        /* bytes per second an attempt must keep up (0: no minimum)… */
    int64_t min_speed_ms;      /* …over each window this long */
    int64_t retry_deadline_ms; /* no retry after this long without progress (0: no limit) */
    uint64_t size;
    uint32_t head_bytes;       /* asked for at open (HEAD_BYTES unless the options say) */
    char *etag, *last_modified, *linked_etag;
    char sha256[65];           /* the file's SHA-256 as the server states it, or "" */
    pthread_mutex_t lock;
    context **idle; /* contexts not in use */
    size_t idle_count, idle_cap;
    unsigned active; /* transfers in flight, every batch together */
    CURLSH *share;
    pthread_mutex_t share_locks[CURL_LOCK_DATA_LAST];
    /* The first bytes, from the open (freed when the data reads start,
     * unless they are the whole file). */
    unsigned char *head;
    uint64_t head_len;
    bool head_whole;
    /* The cache: its directory, and the copy being written with what of it
     * is in.  The copy stays open until the source closes (reads may still
     * be writing to it when it completes or breaks). */
    char *cache_dir;
    atomic_int cache_state;
    ckpt__cache_copy *copy;
    span *spans;
    size_t span_count, span_cap;
    /* A server without byte ranges: the whole download (may_download: a
     * cache directory allows one; no_ranges: this file needs one), done
     * once under whole_lock, and its copy once it is complete. */
    bool may_download, no_ranges;
    pthread_mutex_t whole_lock;
    _Atomic(ckpt__cache_copy *) whole;
    ckpt__download_meter *meter; /* hears the whole download, or NULL */
} remote;

/* NONE: no cache; WANTED: a copy starts at the first read past the open's
 * bytes; WRITING → COMMITTING (the last byte is in) → DONE, or BROKEN. */
enum { CACHE_NONE, CACHE_WANTED, CACHE_WRITING, CACHE_COMMITTING, CACHE_DONE, CACHE_BROKEN };

struct context {
    CURLM *multi;
    CURL **easy; /* idle easy handles of this context */
    size_t easy_count, easy_cap;
};

/* ---- time -------------------------------------------------------------------- */

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- libcurl, once per process ------------------------------------------------ */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result = CURLE_FAILED_INIT;

static void init_curl(void) { curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT); }

static ckpt_status need_curl(const char *shown, ckpt_error *err) {
    pthread_once(&curl_once, init_curl);
    if (curl_init_result != CURLE_OK)
        return ckpt__fail(err, CKPT__D(NETWORK), shown, NULL, -1, "libcurl could not start: %s",
                          curl_easy_strerror(curl_init_result));
    return CKPT_OK;
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *user) {
    (void)h, (void)access;
    remote *r = user;
    if ((unsigned)data < CURL_LOCK_DATA_LAST) pthread_mutex_lock(&r->share_locks[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *user) {
    (void)h;
    remote *r = user;
    if ((unsigned)data < CURL_LOCK_DATA_LAST) pthread_mutex_unlock(&r->share_locks[data]);
}

/* ---- one transfer ------------------------------------------------------------- */

/* Where the bytes of a merged range go: pieces in file order, each to its
 * destination (NULL: a hole, dropped). */
typedef struct piece {
    uint64_t off, len;
    unsigned char *dst;
    const char *tensor;
} piece;

/* X_WHOLE: the whole file into a cache copy, from a server without ranges. */
typedef enum xfer_mode { X_DATA, X_OPEN, X_HEAD, X_WHOLE } xfer_mode;

/* What went wrong with an attempt, as judged here (beyond libcurl's code). */
typedef enum verdict {
    V_NONE,
    V_CHANGED,      /* validators or size differ from the open's */
    V_NO_RANGES,    /* a whole file for a range request */
    V_BAD_RANGE,    /* Content-Range or length not what was asked */
    V_TOO_MUCH,     /* more bytes than asked for */
    V_HEADERS,      /* headers too large */
    V_ENCODED,      /* a Content-Encoding was applied */
    V_SLOW,         /* below the minimum speed over a window */
    V_CACHE_WRITE,  /* the whole download's copy could not be written */
    V_CANCELLED,    /* the download progress callback asked to stop */
} verdict;

typedef struct xfer {
    remote *r;
    xfer_mode mode;
    CURL *easy;
    const piece *pieces;
    size_t piece_count, cur;
    uint64_t begin, end, pos; /* the part [begin, end); next byte expected at pos */
    uint64_t attempt_from;    /* pos when this attempt started */
    unsigned attempts;
    int64_t not_before;       /* earliest start of the next attempt (ms) */
    int64_t attempt_at;       /* when this attempt started (ms) */
    int64_t progress_at;      /* when the request started, or an attempt last kept the minimum speed */
    bool deadline_passed;     /* no retry: the retry deadline is past */
    /* The minimum speed's window: from when, and pos then (armed by the
     * answer's first header line). */
    bool window_armed;
    int64_t window_at;
    uint64_t window_pos;
    bool running, done;
    struct curl_slist *signed_headers; /* this attempt's headers, signed for it (SharedKey), or NULL */
    char *token;              /* the bearer token this attempt sent (a refreshed one), or NULL */
    char *stale;              /* a token answered 401, to be replaced before the next attempt, or NULL */
    bool token_renewed;       /* a 401 got its one attempt with a fresh token */
    /* The current response. */
    long status;
    bool checked, error_status;
    verdict verdict;
    char verdict_text[512];
    size_t header_bytes;
    char content_range[160];
    bool has_content_range;
    char etag[256], last_modified[128], region[64], encoding[64];
    bool has_etag, has_last_modified;
    char linked_etag[256]; /* X-Linked-Etag, of any answer of the attempt (the Hub sends it with its redirect) */
    bool has_linked_etag;
    unsigned retry_after;
    bool has_retry_after;
    uint64_t content_length;
    bool has_content_length, bad_content_length;
    char body[ERROR_BODY];
    size_t body_len, body_seen;
    char curl_error[CURL_ERROR_SIZE];
    /* X_OPEN: the first bytes (into r->head) and what the answer said;
     * open_no_ranges: the whole file of open_total bytes is coming, and
     * open_cut: its first HEAD_BYTES are in, the rest refused on purpose. */
    uint64_t open_total;
    bool open_whole, open_empty, open_no_ranges, open_cut;
    /* X_WHOLE: where the bytes go (in order; from offset 0 again after a
     * restart), errno of a write that failed, and pos as last told to the
     * download meter. */
    ckpt__remote_sink sink;
    void *sink_ctx;
    int write_errno;
    uint64_t reported;
} xfer;

/* A new answer (of a new attempt, or after a redirect or a 100): what an
 * earlier one said is forgotten, but for X-Linked-Etag (see start). */
static void reset_response(xfer *x) {
    x->status = 0;
    x->checked = x->error_status = false;
    x->verdict = V_NONE;
    x->verdict_text[0] = '\0';
    x->header_bytes = 0;
    x->has_content_range = x->has_etag = x->has_last_modified = x->has_retry_after = false;
    x->has_content_length = x->bad_content_length = false;
    x->etag[0] = x->last_modified[0] = x->region[0] = x->encoding[0] = '\0';
    x->body_len = x->body_seen = 0;
    x->curl_error[0] = '\0';
    x->open_whole = x->open_empty = x->open_no_ranges = x->open_cut = false;
}

/* Records why the answer is refused (the first reason only); false, so
 * that a check can write `return set_verdict(...)`. */
static bool set_verdict(xfer *x, verdict v, const char *fmt, ...) CKPT__PRINTF(3, 4);
static bool set_verdict(xfer *x, verdict v, const char *fmt, ...) {
    if (x->verdict != V_NONE) return false;
    x->verdict = v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->verdict_text, sizeof x->verdict_text, fmt, ap);
    va_end(ap);
    return false;
}

static void copy_value(char *out, size_t cap, const char *v, size_t n) {
    if (n >= cap) n = cap - 1;
    memcpy(out, v, n);
    out[n] = '\0';
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *user) {
    xfer *x = user;
    size_t n = size * nmemb;
    if (!x->window_armed) { /* the answer begins: its speed is measured from here */
        x->window_armed = true;
        x->window_at = now_ms();
        x->window_pos = x->pos;
    }
    if (n >= 5 && !memcmp(line, "HTTP/", 5)) { /* a new response (after a redirect or a 100) */
        size_t keep = x->header_bytes;
        reset_response(x);
        x->header_bytes = keep;
    }
    x->header_bytes += n;
    if (x->header_bytes > MAX_HEADER_BYTES) {
        set_verdict(x, V_HEADERS, "the response headers run past %u bytes", (unsigned)MAX_HEADER_BYTES);
        return 0;
    }
    const char *name, *value;
    size_t nl, vl;
    if (!ckpt__split_header(line, n, &name, &nl, &value, &vl)) return n;
    if (ckpt__header_is(name, nl, "Content-Range")) {
        copy_value(x->content_range, sizeof x->content_range, value, vl);
        x->has_content_range = vl < sizeof x->content_range;
        if (!x->has_content_range) set_verdict(x, V_BAD_RANGE, "its Content-Range header is %zu bytes long", vl);
    } else if (ckpt__header_is(name, nl, "ETag")) {
        copy_value(x->etag, sizeof x->etag, value, vl);
        x->has_etag = true;
    } else if (ckpt__header_is(name, nl, "Last-Modified")) {
        copy_value(x->last_modified, sizeof x->last_modified, value, vl);
        x->has_last_modified = true;
    } else if (ckpt__header_is(name, nl, "Retry-After")) {
        x->has_retry_after = ckpt__parse_retry_after(value, vl, RETRY_AFTER_CAP_S, &x->retry_after);
    } else if (ckpt__header_is(name, nl, "Content-Length")) {
        uint64_t v = 0;
        bool ok = vl > 0 && vl <= 20;
        for (size_t k = 0; ok && k < vl; k++)
            ok = value[k] >= '0' && value[k] <= '9' && ckpt__mul_u64(v, 10, &v) && ckpt__add_u64(v, (uint64_t)(value[k] - '0'), &v);
        x->has_content_length = ok;
        x->bad_content_length = !ok;
        x->content_length = v;
    } else if (ckpt__header_is(name, nl, "Content-Encoding")) {
        copy_value(x->encoding, sizeof x->encoding, value, vl);
    } else if (ckpt__header_is(name, nl, "x-amz-bucket-region")) {
        copy_value(x->region, sizeof x->region, value, vl);
    } else if (ckpt__header_is(name, nl, "X-Linked-Etag")) {
        copy_value(x->linked_etag, sizeof x->linked_etag, value, vl);
        x->has_linked_etag = true;
    }
    return n;
}

/* Tells the download meter what the whole download received since it was
 * last told (a restart takes bytes back); false once its callback asked
 * to stop. */
static bool report_download(xfer *x, bool force) {
    int64_t delta = (int64_t)x->pos - (int64_t)x->reported;
    x->reported = x->pos;
    return ckpt__download_report(x->r->meter, delta, force);
}

/* libcurl's progress callback (every received chunk, and about once a
 * second while nothing comes): fails the attempt when the bytes of the
 * window that just ended fall short of the minimum speed. */
static int on_progress(void *user, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    xfer *x = user;
    const remote *r = x->r;
    if (x->mode == X_WHOLE && !report_download(x, false)) {
        set_verdict(x, V_CANCELLED, "the download progress callback asked to stop");
        return 1;
    }
    /* The sink asked whether it still wants the bytes (no bytes: n = 0),
     * so that one stopped meanwhile (the Hub stream of a load that failed
     * or was cancelled) ends the transfer now, not only when the server
     * next sends, which a stalled one may not do for a read timeout.  Not
     * once every byte is in: that download ends now anyway, with its
     * verdict (a stopped one would keep a partial blob of a whole file). */
    if (x->mode == X_WHOLE && x->pos < x->end && !x->sink(x->sink_ctx, "", 0, x->pos)) {
        set_verdict(x, V_CANCELLED, "the download was stopped (%s)", strerror(errno));
        return 1;
    }
    /* Every byte asked for is in: there is nothing left to be slow about
     * (a retry would ask for the empty range past the end). */
    if (!r->min_speed || !x->window_armed || x->pos >= x->end) return 0;
    int64_t now = now_ms(), elapsed = now - x->window_at;
    if (elapsed < r->min_speed_ms) return 0;
    uint64_t got = x->pos - x->window_pos, need = r->min_speed * (uint64_t)elapsed / 1000;
    if (got < need) {
        set_verdict(x, V_SLOW, "the server sent %llu bytes in %.1f s: slower than the minimum speed of %llu bytes/s",
                    (unsigned long long)got, (double)elapsed / 1000, (unsigned long long)r->min_speed);
        return 1;
    }
    x->window_at = now;
    x->window_pos = x->pos;
    return 0;
}

/* Whether the validators of this response differ from the open's. */
static bool changed(const xfer *x) {
    const remote *r = x->r;
    if (r->etag && x->has_etag && strcmp(r->etag, x->etag) != 0) return true;
    if (r->last_modified && x->has_last_modified && strcmp(r->last_modified, x->last_modified) != 0) return true;
    return false;
}

/* Refuses an answer whose validators differ from the open's; false. */
static bool refuse_changed(xfer *x) {
    const remote *r = x->r;
    return set_verdict(x, V_CHANGED, "its ETag/Last-Modified (%s%s%s) differ from the ones at open (%s%s%s)", x->etag,
                       x->has_etag && x->has_last_modified ? ", " : "", x->last_modified, r->etag ? r->etag : "",
                       r->etag && r->last_modified ? ", " : "", r->last_modified ? r->last_modified : "");
}

/* A whole download's answer: the file from its first byte (HTTP 200: the
 * first attempt, or a retry the server answers whole again — the copy
 * restarts), or from where the last attempt stopped (206, to a retry's
 * range).  Its size and validators must be the open's. */
static bool check_whole(xfer *x, long code, const ckpt__content_range *cr) {
    const remote *r = x->r;
    if (changed(x)) return refuse_changed(x);
    if (code == 200) {
        if (x->has_content_length && x->content_length != r->size)
            return set_verdict(x, V_CHANGED, "it now gives the file's size as %llu bytes, not %llu",
                               (unsigned long long)x->content_length, (unsigned long long)r->size);
        x->pos = x->attempt_from = x->window_pos = 0; /* from the first byte again */
        return true;
    }
    if (code == 206 && x->pos && cr && cr->has_range && cr->first == x->pos && cr->last == r->size - 1 &&
        (!cr->has_total || cr->total == r->size) &&
        (!x->has_content_length || x->content_length == r->size - x->pos))
        return true;
    return set_verdict(x, V_BAD_RANGE, "status %ld%s%s for a download of the whole file from byte %llu", code,
                       x->has_content_range ? ", Content-Range " : "", x->has_content_range ? x->content_range : "",
                       (unsigned long long)x->pos);
}

/* Judges the response's status and headers, once, before its body. */
static bool check_response(xfer *x) {
    x->checked = true;
    long code = 0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &code);
    x->status = code;
    if (code < 200 || code >= 300) {
        x->error_status = true;
        return true; /* the body is an explanation, kept (a little of it) */
    }
    if (x->encoding[0] && strcmp(x->encoding, "identity") != 0)
        return set_verdict(x, V_ENCODED, "the server applied Content-Encoding \"%s\" to a byte range", x->encoding);
    if (x->mode == X_HEAD) return true;
    if (x->bad_content_length) return set_verdict(x, V_BAD_RANGE, "its Content-Length is not a number");
    ckpt__content_range cr;
    bool has_cr = x->has_content_range && ckpt__parse_content_range(x->content_range, strlen(x->content_range), &cr);
    if (x->has_content_range && !has_cr)
        return set_verdict(x, V_BAD_RANGE, "its Content-Range \"%s\" is malformed", x->content_range);
    if (x->mode == X_OPEN) {
        if (code == 206) {
            if (!has_cr || !cr.has_range || !cr.has_total)
                return set_verdict(x, V_BAD_RANGE, "a partial answer (206) without a Content-Range giving the size");
            uint64_t want_last = (cr.total < x->r->head_bytes ? cr.total : x->r->head_bytes) - 1;
            if (cr.first != 0 || cr.last != want_last)
                return set_verdict(x, V_BAD_RANGE, "it sent bytes %llu-%llu of %llu for a request of bytes 0-%u",
                                   (unsigned long long)cr.first, (unsigned long long)cr.last,
                                   (unsigned long long)cr.total, (unsigned)x->r->head_bytes - 1);
            if (x->has_content_length && x->content_length != cr.last + 1)
                return set_verdict(x, V_BAD_RANGE, "its Content-Length %llu does not match its Content-Range \"%s\"",
                                   (unsigned long long)x->content_length, x->content_range);
            x->open_total = cr.total;
            x->end = cr.last + 1;
            return true;
        }
        if (code == 200) { /* the whole file: fine if it is small, downloaded whole or refused otherwise */
            curl_off_t length = -1;
            curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
            if (length > x->r->head_bytes && !x->r->may_download)
                return set_verdict(x, V_NO_RANGES,
                                   "the server does not serve byte ranges (it answered a range request with the whole "
                                   "file: HTTP 200, %lld bytes), which ckpt needs to read a file over %u KiB in parts; "
                                   "%s",
                                   (long long)length, (unsigned)x->r->head_bytes >> 10, GIVE_A_CACHE);
            x->open_no_ranges = length > x->r->head_bytes;
            x->open_whole = !x->open_no_ranges;
            x->open_total = length > 0 ? (uint64_t)length : 0;
            x->end = x->r->head_bytes; /* at most; a longer body is cut (no_ranges) or refused as it comes */
            return true;
        }
        return set_verdict(x, V_BAD_RANGE, "unexpected status %ld", code);
    }
    if (x->mode == X_WHOLE) return check_whole(x, code, has_cr ? &cr : NULL);
    const remote *r = x->r;
    if (code == 206) {
        if (changed(x)) return refuse_changed(x);
        if (!has_cr || !cr.has_range)
            return set_verdict(x, V_BAD_RANGE, "a partial answer (206) without a usable Content-Range");
        if (cr.has_total && cr.total != r->size)
            return set_verdict(x, V_CHANGED, "it now gives the file's size as %llu bytes, not %llu",
                               (unsigned long long)cr.total, (unsigned long long)r->size);
        if (cr.first != x->pos || cr.last != x->end - 1)
            return set_verdict(x, V_BAD_RANGE,
                               "it sent bytes %llu-%llu (Content-Range \"%s\") for a request of bytes %llu-%llu",
                               (unsigned long long)cr.first, (unsigned long long)cr.last, x->content_range,
                               (unsigned long long)x->pos, (unsigned long long)(x->end - 1));
        if (x->has_content_length && x->content_length != x->end - x->pos)
            return set_verdict(x, V_BAD_RANGE, "its Content-Length %llu is not the %llu bytes of its Content-Range",
                               (unsigned long long)x->content_length, (unsigned long long)(x->end - x->pos));
        return true;
    }
    if (code == 200) {
        if (changed(x))
            return set_verdict(x, V_CHANGED, "it answered with the whole file (HTTP 200) under new validators (%s%s%s)",
                               x->etag, x->has_etag && x->has_last_modified ? ", " : "", x->last_modified);
        curl_off_t length = -1;
        curl_easy_getinfo(x->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
        if (x->pos == 0 && x->end == r->size && (length < 0 || (uint64_t)length == r->size)) return true;
        return set_verdict(x, V_NO_RANGES,
                           "it answered a range request with the whole file (HTTP 200): the server "
                           "ignores byte ranges");
    }
    return set_verdict(x, V_BAD_RANGE, "unexpected status %ld for a range request", code);
}

/* Records that [lo, hi) of the cache copy is written; true when that was
 * its last missing byte (the state is then COMMITTING, and the caller
 * commits).  Called under r->lock. */
static bool cache_cover(remote *r, uint64_t lo, uint64_t hi);

static size_t on_body(char *data, size_t size, size_t nmemb, void *user) {
    xfer *x = user;
    size_t n = size * nmemb;
    if (!x->checked && !check_response(x)) return 0;
    if (x->error_status) {
        size_t keep = ERROR_BODY - 1 - x->body_len;
        if (keep > n) keep = n;
        memcpy(x->body + x->body_len, data, keep);
        x->body_len += keep;
        x->body[x->body_len] = '\0';
        x->body_seen += n;
        return x->body_seen > MAX_ERROR_BODY ? 0 : n;
    }
    if (x->mode == X_HEAD) return n;
    remote *r = x->r;
    if (x->open_no_ranges && n >= x->end - x->pos) { /* the first bytes are in: the rest waits for a read */
        memcpy(r->head + x->pos, data, (size_t)(x->end - x->pos));
        x->pos = x->end;
        x->open_cut = true;
        return 0;
    }
    if (n > x->end - x->pos) {
        if (x->open_whole)
            set_verdict(x, V_NO_RANGES, "the server does not serve byte ranges (it answered a range request with "
                                        "the whole file, HTTP 200, of more than %u KiB%s); %s",
                        (unsigned)r->head_bytes >> 10, r->may_download ? " and without a Content-Length" : "",
                        r->may_download ? "ckpt cannot download a file of unknown size" : GIVE_A_CACHE);
        else
            set_verdict(x, V_TOO_MUCH, "it sent more than the %llu bytes asked for",
                        (unsigned long long)(x->end - x->attempt_from));
        return 0;
    }
    if (x->mode == X_OPEN) {
        memcpy(r->head + x->pos, data, n);
        x->pos += n;
        return n;
    }
    if (x->mode == X_WHOLE) {
        /* The time the sink takes is ours, not the server's: a sink that
         * waits (the Hub's stream holding the download until a read asks,
         * hf_stream.c, or a slow disk) does not count against the minimum
         * speed, which is the server's to keep. */
        int64_t before = now_ms();
        bool taken = x->sink(x->sink_ctx, data, n, x->pos);
        int64_t spent = now_ms() - before;
        x->window_at += spent;
        x->attempt_at += spent;
        if (!taken) {
            x->write_errno = errno;
            set_verdict(x, V_CACHE_WRITE, "cannot write the download into the cache directory: %s", strerror(errno));
            return 0;
        }
        x->pos += n;
        return n;
    }
    /* Scatter into the pieces, from the cursor on. */
    uint64_t at = x->pos;
    const unsigned char *p = (const unsigned char *)data;
    size_t left = n;
    while (left) {
        const piece *pc = &x->pieces[x->cur];
        uint64_t in = at - pc->off, take = pc->len - in;
        if (take > left) take = left;
        if (pc->dst) memcpy(pc->dst + in, p, (size_t)take);
        p += take, left -= (size_t)take, at += take;
        if (at == pc->off + pc->len && x->cur + 1 < x->piece_count) x->cur++;
    }
    if (atomic_load(&r->cache_state) == CACHE_WRITING && !ckpt__cache_write(r->copy, data, n, x->pos))
        atomic_store(&r->cache_state, CACHE_BROKEN); /* the cache stops; the read goes on */
    x->pos += n;
    return n;
}

/* ---- contexts (multi handle + easy handles) --------------------------------------- */

static context *borrow_context(remote *r) {
    pthread_mutex_lock(&r->lock);
    context *c = r->idle_count ? r->idle[--r->idle_count] : NULL;
    pthread_mutex_unlock(&r->lock);
    if (c) return c;
    c = ckpt__calloc(1, sizeof *c);
    if (!c) return NULL;
    if (!(c->multi = curl_multi_init())) {
        free(c);
        return NULL;
    }
    curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)r->max_conn);
    curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, (long)r->max_conn);
    return c;
}

static void free_context(context *c) {
    if (!c) return;
    for (size_t i = 0; i < c->easy_count; i++) curl_easy_cleanup(c->easy[i]);
    free(c->easy);
    if (c->multi) curl_multi_cleanup(c->multi);
    free(c);
}

static void return_context(remote *r, context *c) {
    if (!c) return;
    pthread_mutex_lock(&r->lock);
    context **idle = ckpt__grow(r->idle, r->idle_count, &r->idle_cap, sizeof *idle, 4);
    if (idle) r->idle = idle;
    bool kept = r->idle_count < r->idle_cap;
    if (kept) r->idle[r->idle_count++] = c;
    pthread_mutex_unlock(&r->lock);
    if (!kept) free_context(c);
}

/* How a request signs itself: SigV4 with `userpwd` its key, else a bearer
 * token, else basic authentication with `userpwd`, else nothing. */
static void set_auth(CURL *e, const char *sigv4, const char *userpwd, const char *bearer) {
    if (sigv4) {
        curl_easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4);
        curl_easy_setopt(e, CURLOPT_USERPWD, userpwd);
    } else if (bearer) {
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
        curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, bearer);
    } else if (userpwd) {
        curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(e, CURLOPT_USERPWD, userpwd);
    }
}

/* An easy handle with everything but the range set. */
static CURL *easy_for(remote *r, context *c) {
    if (c->easy_count) return c->easy[--c->easy_count];
    CURL *e = curl_easy_init();
    if (!e) return NULL;
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, r->connect_ms);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L); /* nothing at all: the read timeout */
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, r->read_s);
    curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L); /* too little: the minimum speed (on_progress) */
    curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, (long)RECV_BUFFER);
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ckpt/" CKPT_VERSION_STRING);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(e, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    if (!r->store) {
        curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
        curl_easy_setopt(e, CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
    }
    if (r->share) curl_easy_setopt(e, CURLOPT_SHARE, r->share);
    if (r->ca_bundle) curl_easy_setopt(e, CURLOPT_CAINFO, r->ca_bundle);
    set_auth(e, r->sigv4, r->userpwd, r->bearer);
    return e;
}

static void easy_back(context *c, CURL *e) {
    CURL **easy = ckpt__grow(c->easy, c->easy_count, &c->easy_cap, sizeof *easy, 8);
    if (!easy) {
        curl_easy_cleanup(e);
        return;
    }
    c->easy = easy;
    c->easy[c->easy_count++] = e;
}

/* ---- running a batch of transfers ------------------------------------------------- */

static bool take_slot(remote *r, size_t running) {
    pthread_mutex_lock(&r->lock);
    bool ok = r->active < r->max_conn || running == 0;
    if (ok) r->active++;
    pthread_mutex_unlock(&r->lock);
    return ok;
}

static bool slot_free(remote *r) {
    pthread_mutex_lock(&r->lock);
    bool free_now = r->active < r->max_conn;
    pthread_mutex_unlock(&r->lock);
    return free_now;
}

static void give_slot(remote *r) {
    pthread_mutex_lock(&r->lock);
    r->active--;
    pthread_mutex_unlock(&r->lock);
}

/* `lines` with the SharedKey lines that sign this request added (a new
 * list, which the caller frees), or NULL when out of memory. */
static struct curl_slist *sign_headers(const char *account, const char *key, const char *method, const char *url,
                                       const char *range, const struct curl_slist *lines) {
    const char *all[64];
    size_t n = 0;
    char range_line[96];
    struct curl_slist *out = NULL;
    for (const struct curl_slist *l = lines; l && n < 63; l = l->next) {
        all[n++] = l->data;
        struct curl_slist *t = curl_slist_append(out, l->data);
        if (!t) goto fail;
        out = t;
    }
    if (range) {
        snprintf(range_line, sizeof range_line, "Range: bytes=%s", range);
        all[n++] = range_line;
    }
    ckpt__buf b = {0};
    bool ok = ckpt__shared_key_sign(account, key, method, url, all, n, &b);
    for (size_t i = 0; ok && i < b.len;) {
        char *end = memchr(b.data + i, '\n', b.len - i);
        *end = '\0';
        struct curl_slist *t = curl_slist_append(out, b.data + i);
        if (!t) ok = false;
        else out = t;
        i = (size_t)(end - b.data) + 1;
    }
    if (b.data) memset(b.data, 0, b.len), free(b.data);
    if (ok) return out;
fail:
    curl_slist_free_all(out);
    return NULL;
}

/* Forgets an attempt's tokens (wiped). */
static void drop_tokens(xfer *x) {
    char *t[] = {x->token, x->stale};
    for (size_t i = 0; i < 2; i++)
        if (t[i]) memset(t[i], 0, strlen(t[i])), free(t[i]);
    x->token = x->stale = NULL;
}

/* A token that expires: the one to send now (fresh in place of a stale
 * one after a 401, or once the kept one is about to expire). */
static ckpt_status send_token(remote *r, xfer *x, CURL *e, ckpt_error *err) {
    if (!r->refresh) return CKPT_OK;
    char *token = NULL;
    ckpt_status st = r->refresh(r->refresh_ctx, r->shown, &r->token_options, x->stale, &token, err);
    drop_tokens(x);
    if (st) return st;
    x->token = token;
    curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BEARER);
    curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, token);
    return CKPT_OK;
}

static ckpt_status start(remote *r, context *c, xfer *x, ckpt_error *err) {
    CURL *e = easy_for(r, c);
    if (!e) return ckpt__oom(err, r->shown, NULL);
    x->easy = e;
    reset_response(x);
    x->has_linked_etag = false;
    x->attempt_from = x->pos;
    x->attempt_at = now_ms();
    if (!x->attempts) x->progress_at = x->attempt_at;
    x->window_armed = false;
    x->attempts++;
    char range[64];
    const char *range_sent = NULL;
    struct curl_slist *headers;
    curl_easy_setopt(e, CURLOPT_PRIVATE, x);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->curl_error);
    curl_easy_setopt(e, CURLOPT_NOBODY, x->mode == X_HEAD ? 1L : 0L);
    if (x->mode == X_HEAD) {
        curl_easy_setopt(e, CURLOPT_RANGE, NULL);
        headers = r->store ? r->headers : NULL;
    } else if (x->mode == X_WHOLE && !x->pos) { /* the whole file: no range to ignore */
        curl_easy_setopt(e, CURLOPT_RANGE, NULL);
        headers = r->headers;
    } else {
        snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)x->pos, (unsigned long long)(x->end - 1));
        curl_easy_setopt(e, CURLOPT_RANGE, range);
        range_sent = range;
        /* The open's request has no validators yet (a store's signed
         * headers are in the list from the start). */
        headers = r->headers;
    }
    curl_slist_free_all(x->signed_headers); /* the last attempt's */
    x->signed_headers = NULL;
    if (r->sk_account) {
        x->signed_headers = sign_headers(r->sk_account, r->sk_key, x->mode == X_HEAD ? "HEAD" : "GET", r->url,
                                         range_sent, headers);
        if (!x->signed_headers) {
            easy_back(c, e);
            x->easy = NULL;
            return ckpt__oom(err, r->shown, NULL);
        }
        headers = x->signed_headers;
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    ckpt_status st = send_token(r, x, e, err);
    if (st) {
        easy_back(c, e);
        x->easy = NULL;
        return st;
    }
    if (curl_multi_add_handle(c->multi, e) != CURLM_OK) {
        easy_back(c, e);
        x->easy = NULL;
        return ckpt__oom(err, r->shown, NULL);
    }
    x->running = true;
    return CKPT_OK;
}

typedef enum outcome { O_DONE, O_RETRY, O_FAIL } outcome;

static bool retryable_code(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_AGAIN:
        return true;
    default:
        return false;
    }
}

static const char *reason(long status) {
    switch (status) {
    case 400: return " (Bad Request)";
    case 401: return " (Unauthorized)";
    case 403: return " (Forbidden)";
    case 404: return " (Not Found)";
    case 405: return " (Method Not Allowed)";
    case 408: return " (Request Timeout)";
    case 410: return " (Gone)";
    case 412: return " (Precondition Failed)";
    case 416: return " (Range Not Satisfiable)";
    case 429: return " (Too Many Requests)";
    case 500: return " (Internal Server Error)";
    case 502: return " (Bad Gateway)";
    case 503: return " (Service Unavailable)";
    case 504: return " (Gateway Timeout)";
    default: return "";
    }
}

/* "bytes A-B" of the attempt, for messages. */
static void range_text(const xfer *x, char *out, size_t cap) {
    if (x->mode == X_HEAD) snprintf(out, cap, "a HEAD request");
    else if (x->mode == X_OPEN) snprintf(out, cap, "bytes 0-%u (the first request)", (unsigned)x->r->head_bytes - 1);
    else if (x->mode == X_WHOLE)
        snprintf(out, cap, "the whole file (%llu bytes, from byte %llu)", (unsigned long long)x->end,
                 (unsigned long long)x->attempt_from);
    else snprintf(out, cap, "bytes %llu-%llu", (unsigned long long)x->attempt_from, (unsigned long long)(x->end - 1));
}

/* The tensor whose bytes an offset belongs to, if any. */
static const char *tensor_at(const xfer *x, uint64_t at) {
    for (size_t i = 0; i < x->piece_count; i++)
        if (at >= x->pieces[i].off && at < x->pieces[i].off + x->pieces[i].len && x->pieces[i].dst)
            return x->pieces[i].tensor;
    return NULL;
}

static ckpt_status fail_xfer(const xfer *x, ckpt_error *err, ckpt_status st, const char *fmt, ...) CKPT__PRINTF(4, 5);
static ckpt_status fail_xfer(const xfer *x, ckpt_error *err, ckpt_status st, const char *fmt, ...) {
    char what[1024], range[96], deadline[160] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    range_text(x, range, sizeof range);
    if (x->deadline_passed)
        snprintf(deadline, sizeof deadline, "; no more: %.0f s without progress passes the retry deadline (%.0f s)",
                 (double)(now_ms() - x->progress_at) / 1000, (double)x->r->retry_deadline_ms / 1000);
    return ckpt__fail(err, st, x->r->shown, tensor_at(x, x->pos), x->mode == X_HEAD ? -1 : (int64_t)x->pos,
                      "%s, for %s%s%s", what, range,
                      x->attempts > 1 ? (x->attempts == 2 ? ", after 1 retry" : ", after retries") : "", deadline);
}

static int64_t backoff_ms(const xfer *x);

/* Whether a failed attempt may be tried again: retries left, and the retry
 * deadline not passed by the time the next attempt would start. */
static bool may_retry(xfer *x) {
    const remote *r = x->r;
    if (x->attempts > r->retries) return false;
    if (r->retry_deadline_ms && now_ms() + backoff_ms(x) - x->progress_at > r->retry_deadline_ms) {
        x->deadline_passed = true;
        return false;
    }
    return true;
}

/* An error status: what it means, and whether to try again. */
static outcome judge_status(xfer *x, ckpt_status *st, ckpt_error *err) {
    remote *r = x->r;
    long s = x->status;
    ckpt__content_range cr;
    bool has_cr = x->has_content_range && ckpt__parse_content_range(x->content_range, strlen(x->content_range), &cr);
    if (x->mode == X_OPEN && s == 416 && has_cr && !cr.has_range && cr.has_total && cr.total == 0) {
        x->open_empty = true; /* "bytes * /0": an empty file has no byte 0 */
        x->pos = 0;
        return O_DONE;
    }
    char detail[1400] = "";
    if (r->store) {
        ckpt__store_error_text(x->body, x->body_len, detail, sizeof detail - 200);
        if (x->region[0]) {
            size_t l = strlen(detail);
            snprintf(detail + l, sizeof detail - l, " (the bucket is in region %s: set AWS_REGION=%s)", x->region,
                     x->region);
        }
    }
    bool credentials = r->bearer || r->userpwd || r->sk_account || r->signed_url;
    if (r->hint && !credentials && (s == 401 || s == 403 || s == 404)) {
        size_t l = strlen(detail);
        snprintf(detail + l, sizeof detail - l, " (no credentials were sent: %s)", r->hint);
    }
    if (s == 401 && r->refresh && x->token && !x->token_renewed) { /* expired meanwhile: once more, with a fresh one */
        x->token_renewed = true;
        x->stale = x->token;
        x->token = NULL;
        return O_RETRY;
    }
    if (s == 408 || s == 429 || (s >= 500 && s < 600)) {
        if (may_retry(x)) return O_RETRY;
        *st = fail_xfer(x, err, CKPT__D(HTTP_STATUS), "HTTP %ld%s%s", s, reason(s), detail);
        return O_FAIL;
    }
    if (s == 404 || s == 410) {
        *st = fail_xfer(x, err, CKPT_E_NOT_FOUND, "HTTP %ld%s: no such file on the server%s", s, reason(s), detail);
    } else if (s == 401 || s == 403) {
        *st = fail_xfer(x, err, CKPT__D(HTTP_AUTH), "HTTP %ld%s: the server refused %s%s", s, reason(s),
                        credentials ? "the credentials" : "access without credentials", detail);
    } else if (s == 412) {
        *st = fail_xfer(x, err, CKPT__D(REMOTE_CHANGED),
                        "HTTP 412 (Precondition Failed): the file changed on the server since it was opened%s", detail);
    } else if (s == 416) {
        if (has_cr && cr.has_total && cr.total != r->size && x->mode == X_DATA)
            *st = fail_xfer(x, err, CKPT__D(REMOTE_CHANGED),
                            "HTTP 416 (Range Not Satisfiable): the file is now %llu bytes, not %llu as when opened",
                            (unsigned long long)cr.total, (unsigned long long)r->size);
        else
            *st = fail_xfer(x, err, CKPT__D(BAD_RESPONSE), "HTTP 416 (Range Not Satisfiable) for a range inside the "
                                                         "file's %llu bytes%s", (unsigned long long)r->size, detail);
    } else if (s >= 300 && s < 400) {
        char why[96];
        if (r->store) snprintf(why, sizeof why, ", which %s requests do not follow", r->store);
        else snprintf(why, sizeof why, " too many, or without a Location");
        *st = fail_xfer(x, err, CKPT__D(HTTP_STATUS), "HTTP %ld (a redirect%s)%s", s, why, detail);
    } else {
        *st = fail_xfer(x, err, CKPT__D(HTTP_STATUS), "HTTP %ld%s%s", s, reason(s), detail);
    }
    return O_FAIL;
}

static outcome judge(xfer *x, CURLcode rc, ckpt_status *st, ckpt_error *err) {
    switch (x->verdict) {
    case V_NONE:
        break;
    case V_CHANGED:
        *st = fail_xfer(x, err, CKPT__D(REMOTE_CHANGED), "the file changed on the server since it was opened: %s",
                        x->verdict_text);
        return O_FAIL;
    case V_NO_RANGES:
        *st = fail_xfer(x, err, CKPT__D(NO_RANGES), "%s", x->verdict_text);
        return O_FAIL;
    case V_SLOW:
        if (may_retry(x)) return O_RETRY;
        *st = fail_xfer(x, err, CKPT__D(TIMEOUT), "%s", x->verdict_text);
        return O_FAIL;
    case V_CACHE_WRITE:
        *st = fail_xfer(x, err, x->write_errno == ENOSPC || x->write_errno == EDQUOT ? CKPT_E_NO_SPACE : CKPT_E_IO,
                        "%s", x->verdict_text);
        if (err) err->sys_errno = x->write_errno;
        return O_FAIL;
    case V_CANCELLED:
        *st = fail_xfer(x, err, CKPT_E_CANCELLED, "%s", x->verdict_text);
        return O_FAIL;
    default:
        *st = fail_xfer(x, err, CKPT__D(BAD_RESPONSE), "the server's answer does not fit the request: %s",
                        x->verdict_text);
        return O_FAIL;
    }
    if (x->open_cut) return O_DONE; /* hung up on purpose, the first bytes in */
    if (x->error_status) return judge_status(x, st, err);
    if (rc != CURLE_OK) {
        if (rc == CURLE_COULDNT_RESOLVE_HOST || rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT) {
            *st = fail_xfer(x, err, CKPT__D(NETWORK), "%s", x->curl_error[0] ? x->curl_error : curl_easy_strerror(rc));
            return O_FAIL;
        }
        if (retryable_code(rc) && may_retry(x)) return O_RETRY;
        bool timeout = rc == CURLE_OPERATION_TIMEDOUT;
        *st = fail_xfer(x, err, timeout ? CKPT__D(TIMEOUT) : CKPT__D(NETWORK), "%s%s",
                        x->curl_error[0] ? x->curl_error : curl_easy_strerror(rc),
                        timeout ? " (see the connect and read timeouts)" : "");
        return O_FAIL;
    }
    if ((x->mode == X_DATA || x->mode == X_WHOLE) && x->pos < x->end) {
        /* The body ended early without libcurl noticing (no length given). */
        if (may_retry(x)) return O_RETRY;
        *st = fail_xfer(x, err, CKPT__D(NETWORK), "the body ended after %llu of %llu bytes",
                        (unsigned long long)(x->pos - x->attempt_from), (unsigned long long)(x->end - x->attempt_from));
        return O_FAIL;
    }
    return O_DONE;
}

/* The wait before the next attempt. */
static int64_t backoff_ms(const xfer *x) {
    if (x->has_retry_after) return (int64_t)x->retry_after * 1000;
    int64_t ms = BACKOFF_FIRST_MS;
    for (unsigned i = 1; i < x->attempts && ms < BACKOFF_MAX_MS; i++) ms *= 2;
    if (ms > BACKOFF_MAX_MS) ms = BACKOFF_MAX_MS;
    /* Jitter, so that parts failing together do not come back together. */
    return ms / 2 + (int64_t)((uintptr_t)x * 2654435761u % (uint64_t)(ms / 2 + 1));
}

/* After an attempt: one that received its bytes at the minimum speed or
 * faster (any bytes, without a minimum) restarts the retry deadline. */
static void note_progress(xfer *x) {
    const remote *r = x->r;
    int64_t now = now_ms(), took = now - x->attempt_at;
    uint64_t got = x->pos - x->attempt_from;
    if (got && got * 1000 >= r->min_speed * (uint64_t)(took > 0 ? took : 0)) x->progress_at = now;
}

static void cache_commit(remote *r);

/* Runs every transfer to its end (retrying what may be retried); on a
 * failure, stops the others and reports the first. */
static ckpt_status run_batch(remote *r, xfer *xs, size_t n, ckpt_error *err) {
    context *c = borrow_context(r);
    if (!c) return ckpt__oom(err, r->shown, NULL);
    ckpt_status st = CKPT_OK;
    size_t finished = 0, running = 0;
    while (finished < n && st == CKPT_OK) {
        int64_t now = now_ms();
        for (size_t i = 0; i < n && st == CKPT_OK; i++) {
            xfer *x = &xs[i];
            if (x->done || x->running || x->not_before > now) continue;
            if (!take_slot(r, running)) break;
            st = start(r, c, x, err);
            if (st) give_slot(r);
            else running++;
        }
        if (st) break;
        int still = 0;
        curl_multi_perform(c->multi, &still);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(c->multi, &left))) {
            if (m->msg != CURLMSG_DONE) continue;
            xfer *x = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode rc = m->data.result;
            /* A response without a body is judged here, while its handle is. */
            if (rc == CURLE_OK && !x->checked && !x->error_status) check_response(x);
            curl_multi_remove_handle(c->multi, x->easy);
            easy_back(c, x->easy);
            x->easy = NULL;
            x->running = false;
            running--;
            give_slot(r);
            if (x->mode == X_DATA && atomic_load(&r->cache_state) == CACHE_WRITING && x->pos > x->attempt_from) {
                pthread_mutex_lock(&r->lock);
                bool last = cache_cover(r, x->attempt_from, x->pos);
                pthread_mutex_unlock(&r->lock);
                if (last) cache_commit(r);
            }
            note_progress(x);
            if (st != CKPT_OK) continue;
            ckpt_status xst = CKPT_OK;
            switch (judge(x, rc, &xst, err)) {
            case O_DONE:
                x->done = true;
                finished++;
                break;
            case O_RETRY:
                x->not_before = now_ms() + (x->stale ? 0 : backoff_ms(x)); /* a fresh token: at once */
                if (x->mode == X_OPEN) x->pos = 0, x->end = r->head_bytes; /* the first request starts over */
                break;
            case O_FAIL:
                st = xst;
                break;
            }
        }
        if (st || finished == n) break;
        /* Until a transfer has news, or a retry is due. */
        int64_t wait = 1000;
        now = now_ms();
        for (size_t i = 0; i < n; i++)
            if (!xs[i].done && !xs[i].running && xs[i].not_before - now < wait) wait = xs[i].not_before - now;
        if (wait <= 0 && (!running || slot_free(r))) continue;
        if (wait <= 0) wait = 10; /* waiting for a connection of another batch to free up */
        if (running) curl_multi_poll(c->multi, NULL, 0, (int)wait, NULL);
        else {
            struct timespec ts = {(time_t)(wait / 1000), (long)(wait % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    /* Stop what still runs (after a failure). */
    for (size_t i = 0; i < n; i++) {
        xfer *x = &xs[i];
        if (x->running) {
            curl_multi_remove_handle(c->multi, x->easy);
            easy_back(c, x->easy);
            x->easy = NULL;
            x->running = false;
            give_slot(r);
        }
        curl_slist_free_all(x->signed_headers);
        x->signed_headers = NULL;
        drop_tokens(x);
    }
    return_context(r, c);
    return st;
}

/* ---- the cache ------------------------------------------------------------------ */

static ckpt__cache_key cache_key(const remote *r) {
    return (ckpt__cache_key){r->url, r->etag, r->last_modified, r->linked_etag, r->size, r->sha256[0] ? r->sha256 : NULL};
}

/* The first read past the open's bytes: a copy starts, with those bytes.
 * Called under r->lock, before they are freed. */
static void cache_start(remote *r) {
    ckpt__cache_key k = cache_key(r);
    r->copy = ckpt__cache_begin(r->cache_dir, &k);
    bool ok = r->copy && ckpt__cache_write(r->copy, r->head, (size_t)r->head_len, 0);
    atomic_store(&r->cache_state, ok ? CACHE_WRITING : CACHE_BROKEN);
    /* Not the last byte: the read that starts the copy needs one the head lacks. */
    if (ok) (void)cache_cover(r, 0, r->head_len);
}

static void cache_commit(remote *r) {
    atomic_store(&r->cache_state, ckpt__cache_commit(r->copy, r->shown, NULL) == CKPT_OK ? CACHE_DONE : CACHE_BROKEN);
}

/* At close: the copy stays only if committed. */
static void cache_free(remote *r) {
    ckpt__cache_end(r->copy);
    r->copy = NULL;
    free(r->cache_dir);
    free(r->spans);
    r->cache_dir = NULL;
    r->spans = NULL;
}

static bool cache_cover(remote *r, uint64_t lo, uint64_t hi) {
    if (atomic_load(&r->cache_state) != CACHE_WRITING || lo >= hi) return false;
    /* Insert, merging with neighbours (the spans stay sorted and apart). */
    size_t i = 0;
    while (i < r->span_count && r->spans[i].hi < lo) i++;
    size_t j = i;
    while (j < r->span_count && r->spans[j].lo <= hi) {
        if (r->spans[j].lo < lo) lo = r->spans[j].lo;
        if (r->spans[j].hi > hi) hi = r->spans[j].hi;
        j++;
    }
    if (i == j) {
        span *s = ckpt__grow(r->spans, r->span_count, &r->span_cap, sizeof *s, 16);
        if (!s) {
            atomic_store(&r->cache_state, CACHE_BROKEN);
            return false;
        }
        r->spans = s;
        memmove(&r->spans[i + 1], &r->spans[i], (r->span_count - i) * sizeof *r->spans);
        r->span_count++;
    } else if (j - i > 1) {
        memmove(&r->spans[i + 1], &r->spans[j], (r->span_count - j) * sizeof *r->spans);
        r->span_count -= j - i - 1;
    }
    r->spans[i] = (span){lo, hi};
    if (r->span_count != 1 || r->spans[0].lo != 0 || r->spans[0].hi != r->size) return false;
    atomic_store(&r->cache_state, CACHE_COMMITTING);
    return true;
}

/* ---- the source operations -------------------------------------------------------- */

static void remote_free(remote *r) {
    if (!r) return;
    cache_free(r);
    ckpt__cache_end(atomic_load(&r->whole));
    pthread_mutex_destroy(&r->whole_lock);
    for (size_t i = 0; i < r->idle_count; i++) free_context(r->idle[i]);
    free(r->idle);
    if (r->share) curl_share_cleanup(r->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_destroy(&r->share_locks[i]);
    pthread_mutex_destroy(&r->lock);
    curl_slist_free_all(r->headers);
    char *secrets[] = {r->bearer, r->userpwd, r->sk_key, r->refresh_ctx};
    for (size_t i = 0; i < 4; i++)
        if (secrets[i]) memset(secrets[i], 0, strlen(secrets[i]));
    free(r->refresh_ctx);
    free(r->bearer);
    free(r->userpwd);
    free(r->sigv4);
    free(r->sk_account);
    free(r->sk_key);
    free(r->store);
    free(r->hint);
    free(r->ca_bundle);
    free(r->url);
    free(r->etag);
    free(r->last_modified);
    free(r->linked_etag);
    free(r->head);
    free(r);
}

static void remote_close(void *user, void *file) {
    ckpt__source *src = file;
    (void)user;
    remote_free(src->impl);
    src->impl = NULL;
}

/* One read request of a batch, as sorted. */
typedef struct want {
    uint64_t off, len;
    unsigned char *dst;
    const char *tensor;
} want;

static int by_offset(const void *a, const void *b) {
    const want *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Copies what of [off, off + len) the open's first bytes hold; returns how
 * many bytes from `off` on were served. */
static uint64_t from_head(remote *r, unsigned char *dst, uint64_t off, uint64_t len) {
    pthread_mutex_lock(&r->lock);
    uint64_t n = 0;
    if (r->head && off < r->head_len) {
        n = r->head_len - off < len ? r->head_len - off : len;
        memcpy(dst, r->head + off, (size_t)n);
    }
    pthread_mutex_unlock(&r->lock);
    return n;
}

/* ---- a server without byte ranges: one whole download --------------------------------- */

/* Whether the server gave validators: what names a version in the cache. */
static bool versioned(const remote *r) { return r->etag || r->last_modified || r->linked_etag; }

/* The file from byte `from` to its end, in order, into `sink` (one
 * transfer: retries resume, or restart from byte 0 where the server sends
 * the whole file again), heard by the download meter. */
static ckpt_status transfer_whole(remote *r, uint64_t from, ckpt__remote_sink sink, void *ctx, ckpt_error *err) {
    xfer x;
    memset(&x, 0, sizeof x);
    x.r = r;
    x.mode = X_WHOLE;
    x.pos = x.begin = from;
    x.end = r->size;
    x.sink = sink;
    x.sink_ctx = ctx;
    x.reported = from;
    ckpt__download_begin(r->meter, r->size - from); /* a stop it asks for comes with the first progress */
    ckpt_status st = from < r->size ? run_batch(r, &x, 1, err) : CKPT_OK;
    if (st == CKPT_OK) report_download(&x, true);
    ckpt__download_end(r->meter, st != CKPT_OK, x.reported > from ? x.reported - from : 0, r->size - from);
    return st;
}

static bool to_cache_copy(void *ctx, const void *data, size_t n, uint64_t offset) {
    return ckpt__cache_write(ctx, data, n, offset);
}

/* Downloads the file whole into a new copy in the cache directory: a
 * 0600 temporary, filled as the bytes arrive (retries resume or restart
 * it), then checked and renamed into place — if the server gave
 * validators; without them no later open could tell this version, and the
 * copy stays a temporary, removed when the source closes. */
static ckpt_status fetch_whole(remote *r, ckpt__cache_copy **out, ckpt_error *err) {
    ckpt__cache_key k = cache_key(r);
    ckpt__cache_copy *c = ckpt__cache_begin(r->cache_dir, &k);
    if (!c)
        return ckpt__fail(err, CKPT__D(NO_RANGES), r->shown, NULL, -1,
                          "the server does not serve byte ranges, and the cache directory %s cannot take the whole "
                          "file (%llu bytes) to read it there: it cannot be created or written, or another user "
                          "owns it", r->cache_dir, (unsigned long long)r->size);
    ckpt_status st = transfer_whole(r, 0, to_cache_copy, c, err);
    if (st == CKPT_OK && versioned(r)) st = ckpt__cache_commit(c, r->shown, err);
    if (st) {
        ckpt__cache_end(c); /* the temporary goes: nothing under the copy's name */
        return st;
    }
    *out = c;
    return CKPT_OK;
}

/* The whole download, once: concurrent readers wait for it. */
static ckpt_status download_whole(remote *r, ckpt_error *err) {
    if (atomic_load_explicit(&r->whole, memory_order_acquire)) return CKPT_OK;
    pthread_mutex_lock(&r->whole_lock);
    ckpt_status st = CKPT_OK;
    ckpt__cache_copy *c = NULL;
    if (!atomic_load_explicit(&r->whole, memory_order_relaxed) && (st = fetch_whole(r, &c, err)) == CKPT_OK) {
        atomic_store_explicit(&r->whole, c, memory_order_release);
        pthread_mutex_lock(&r->lock); /* every byte is local now */
        free(r->head);
        r->head = NULL;
        r->head_len = 0;
        pthread_mutex_unlock(&r->lock);
    }
    pthread_mutex_unlock(&r->whole_lock);
    return st;
}

/* Reads (past the open's first bytes) from the whole download. */
static ckpt_status read_whole(remote *r, const want *w, size_t n, ckpt_error *err) {
    ckpt_status st = download_whole(r, err);
    if (st) return ckpt__error_in_tensor(err, st, w[0].tensor);
    ckpt__cache_copy *c = atomic_load_explicit(&r->whole, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if ((st = ckpt__cache_read(c, w[i].dst, w[i].len, w[i].off, r->shown, err)) != CKPT_OK)
            return ckpt__error_in_tensor(err, st, w[i].tensor);
    return CKPT_OK;
}

static ckpt_status remote_batch(ckpt__source *src, want *w, size_t n, ckpt_error *err) {
    remote *r = src->impl;
    ckpt_status st = CKPT_OK;
    /* Bytes the first request brought, and requests past the end. */
    size_t m = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        want q = w[i];
        if (q.off > r->size || q.len > r->size - q.off)
            return ckpt__fail(err, CKPT_E_TRUNCATED, src->name, q.tensor, (int64_t)(q.off < r->size ? r->size : q.off),
                              "the file ends at byte %llu, inside data that runs to byte %llu",
                              (unsigned long long)r->size, (unsigned long long)(q.off + q.len));
        uint64_t done = from_head(r, q.dst, q.off, q.len);
        q.off += done, q.dst += done, q.len -= done;
        if (q.len) w[m++] = q, total += q.len;
    }
    if (!m) return CKPT_OK;
    if (r->no_ranges) return read_whole(r, w, m, err);
    pthread_mutex_lock(&r->lock);
    if (atomic_load(&r->cache_state) == CACHE_WANTED) cache_start(r);
    if (r->head && !r->head_whole) { /* the data phase: the first bytes are not needed any more */
        free(r->head);
        r->head = NULL;
        r->head_len = 0;
    }
    pthread_mutex_unlock(&r->lock);
    qsort(w, m, sizeof *w, by_offset);
    /* Merged ranges, as pieces (destinations and dropped holes). */
    piece *pieces = ckpt__malloc(2 * m * sizeof *pieces);
    size_t *range_first = ckpt__malloc((m + 1) * sizeof *range_first);
    if (!pieces || !range_first) {
        free(pieces);
        free(range_first);
        return ckpt__oom(err, src->name, NULL);
    }
    size_t np = 0, ranges = 0;
    for (size_t i = 0; i < m; i++) {
        bool join = np && w[i].off >= pieces[np - 1].off + pieces[np - 1].len &&
                    w[i].off - (pieces[np - 1].off + pieces[np - 1].len) <= GAP_BYTES;
        if (join && w[i].off > pieces[np - 1].off + pieces[np - 1].len) {
            uint64_t end = pieces[np - 1].off + pieces[np - 1].len;
            pieces[np++] = (piece){end, w[i].off - end, NULL, NULL};
        }
        if (!join) range_first[ranges++] = np;
        pieces[np++] = (piece){w[i].off, w[i].len, w[i].dst, w[i].tensor};
    }
    range_first[ranges] = np;
    /* Parts: each merged range cut so that the connections share the work. */
    uint64_t part = total / r->max_conn;
    if (part < MIN_PART) part = MIN_PART;
    if (part > MAX_PART) part = MAX_PART;
    size_t nx = 0;
    for (size_t k = 0; k < ranges; k++) {
        uint64_t lo = pieces[range_first[k]].off, hi = pieces[range_first[k + 1] - 1].off + pieces[range_first[k + 1] - 1].len;
        nx += (size_t)((hi - lo + part - 1) / part);
    }
    xfer *xs = ckpt__calloc(nx, sizeof *xs);
    if (!xs) st = ckpt__oom(err, src->name, NULL);
    size_t ix = 0;
    for (size_t k = 0; st == CKPT_OK && k < ranges; k++) {
        size_t first = range_first[k], count = range_first[k + 1] - first;
        uint64_t lo = pieces[first].off, hi = pieces[first + count - 1].off + pieces[first + count - 1].len;
        for (uint64_t at = lo; at < hi; at += part) {
            xfer *x = &xs[ix++];
            x->r = r;
            x->mode = X_DATA;
            x->pieces = pieces + first;
            x->piece_count = count;
            x->begin = x->pos = at;
            x->end = hi - at < part ? hi : at + part;
            while (x->cur + 1 < count && x->pieces[x->cur].off + x->pieces[x->cur].len <= at) x->cur++;
        }
    }
    if (st == CKPT_OK) st = run_batch(r, xs, nx, err);
    free(xs);
    free(pieces);
    free(range_first);
    return st;
}

static ckpt_status remote_read(void *user, void *file, void *dst, uint64_t n, uint64_t offset, ckpt_error *err) {
    ckpt__source *src = file;
    (void)user;
    want w = {offset, n, dst, NULL};
    return remote_batch(src, &w, 1, err);
}

static ckpt_status remote_read_many(void *user, void *file, ckpt_source_request *reqs, size_t n, ckpt_error *err) {
    ckpt__source *src = file;
    (void)user;
    want stack[64], *w = n <= 64 ? stack : ckpt__malloc(n * sizeof *w);
    if (!w) return ckpt__oom(err, src->name, NULL);
    for (size_t i = 0; i < n; i++) {
        /* A remote file is read to `need` (its size is known: no O_DIRECT rounding). */
        uint64_t len = reqs[i].need < reqs[i].len ? reqs[i].need : reqs[i].len;
        w[i] = (want){reqs[i].offset, len, reqs[i].dst, reqs[i].tensor};
    }
    ckpt_status st = remote_batch(src, w, n, err);
    if (w != stack) free(w);
    return st;
}

static const ckpt__source_ops remote_ops = {.version = CKPT_SOURCE_OPS_VERSION,
    .read = remote_read,
    .read_many = remote_read_many,
    .close = remote_close};

/* ---- opening -------------------------------------------------------------------------- */

static char *dup_or_null(const char *s, bool *failed) {
    if (!s) return NULL;
    char *d = ckpt__strdup(s);
    if (!d) *failed = true;
    return d;
}

static ckpt_status remote_new(const char *shown, const char *url, const ckpt__remote_auth *auth,
                              const ckpt__source_options *o, remote **out, ckpt_error *err) {
    ckpt_status st = need_curl(shown, err);
    if (st) return st;
    remote *r = ckpt__calloc(1, sizeof *r);
    if (!r) return ckpt__oom(err, shown, NULL);
    pthread_mutex_init(&r->lock, NULL);
    pthread_mutex_init(&r->whole_lock, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++) pthread_mutex_init(&r->share_locks[i], NULL);
    r->may_download = o->cache_dir != NULL;
    r->meter = o->meter;
    bool failed = false;
    r->shown = shown;
    r->url = dup_or_null(url, &failed);
    r->bearer = dup_or_null(auth->bearer, &failed);
    r->userpwd = dup_or_null(auth->userpwd, &failed);
    r->sigv4 = dup_or_null(auth->sigv4, &failed);
    r->sk_account = dup_or_null(auth->shared_key_account, &failed);
    r->sk_key = dup_or_null(auth->shared_key, &failed);
    const char *ca = getenv("CURL_CA_BUNDLE");
    r->ca_bundle = dup_or_null(ca && *ca ? ca : NULL, &failed);
    r->store = dup_or_null(auth->store, &failed);
    r->hint = dup_or_null(auth->hint, &failed);
    r->signed_url = auth->signed_url;
    r->refresh = auth->refresh;
    r->refresh_ctx = dup_or_null(auth->refresh_ctx, &failed);
    r->token_options = (ckpt__source_options){.connect_timeout_ms = o->connect_timeout_ms,
                                              .read_timeout_ms = o->read_timeout_ms,
                                              .retries = o->retries};
    r->connect_ms = o->connect_timeout_ms ? (long)o->connect_timeout_ms : DEFAULT_CONNECT_MS;
    r->read_s = (long)(((o->read_timeout_ms ? o->read_timeout_ms : DEFAULT_READ_MS) + 999) / 1000);
    r->min_speed = o->min_speed_bytes;
    r->min_speed_ms = o->min_speed_time_ms ? o->min_speed_time_ms : DEFAULT_MIN_SPEED_MS;
    r->retry_deadline_ms = o->retry_deadline_ms;
    r->retries = o->retries;
    r->head_bytes = o->head_bytes ? o->head_bytes : HEAD_BYTES;
    r->max_conn = o->max_connections ? o->max_connections : DEFAULT_CONNECTIONS;
    if (r->max_conn > MAX_CONNECTIONS) r->max_conn = MAX_CONNECTIONS;
    if (!failed && (r->share = curl_share_init())) {
        curl_share_setopt(r->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(r->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(r->share, CURLSHOPT_USERDATA, r);
        curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(r->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    }
    for (const char *const *h = auth->headers; h && *h && !failed; h++) {
        struct curl_slist *t = curl_slist_append(r->headers, *h);
        if (t) r->headers = t;
        else failed = true;
    }
    if (failed || !r->share) {
        remote_free(r);
        return ckpt__oom(err, shown, NULL);
    }
    *out = r;
    return CKPT_OK;
}

/* After the open: the validators go with every data request. */
static bool add_validators(remote *r) {
    char line[400];
    const char *v = NULL, *name = r->store ? "If-Match" : "If-Range";
    /* If-Range takes a strong ETag or a date; the stores answer If-Match. */
    if (r->etag && (r->store || strncmp(r->etag, "W/", 2) != 0)) v = r->etag;
    else if (!r->store && r->last_modified) v = r->last_modified;
    if (!v) return true;
    if ((size_t)snprintf(line, sizeof line, "%s: %s", name, v) >= sizeof line) return true;
    struct curl_slist *h = curl_slist_append(r->headers, line);
    if (!h) return false;
    r->headers = h;
    return true;
}

/* The trusted copy of this version in the cache, if there is one; else
 * a copy is wanted, started by the first read the open's bytes cannot
 * serve (a file they hold whole is not copied: its version check brings it
 * anyway).  False when out of memory. */
static bool use_cache(remote *r, ckpt__source *src, const ckpt__source_options *o, ckpt__source **local) {
    *local = NULL;
    if (!o->cache_dir || (!versioned(r) && !r->no_ranges) || r->head_len == r->size) return true;
    if (versioned(r)) {
        ckpt__cache_key k = cache_key(r);
        *local = ckpt__cache_open(o->cache_dir, &k, src->name, o);
        if (*local) return true;
    }
    if (!(r->cache_dir = ckpt__strdup(o->cache_dir))) return false;
    /* Without ranges the copy is the whole download (read_whole), not one
     * filled by the reads. */
    if (!r->no_ranges) atomic_store(&r->cache_state, CACHE_WANTED);
    return true;
}

ckpt_status ckpt__remote_open(const char *display, const char *url, const ckpt__remote_auth *auth,
                              const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    ckpt__source *src = ckpt__calloc(1, sizeof *src);
    if (!src || !(src->name = ckpt__strdup(display))) {
        free(src);
        return ckpt__oom(err, display, NULL);
    }
    src->fd = -1;
    src->ops = &remote_ops;
    src->file = src;
    src->caps = CKPT__SRC_REMOTE;
    remote *r = NULL;
    ckpt_status st = remote_new(src->name, url, auth, o, &r, err);
    if (st) {
        ckpt__source_close(src);
        return st;
    }
    src->impl = r;
    if (!(r->head = ckpt__malloc(r->head_bytes))) {
        ckpt__source_close(src);
        return ckpt__oom(err, display, NULL);
    }
    xfer x;
    memset(&x, 0, sizeof x);
    x.r = r;
    x.mode = X_OPEN;
    x.end = r->head_bytes;
    /* The first request: the size, the validators and the first bytes. */
    st = run_batch(r, &x, 1, err);
    if (st == CKPT_OK) {
        if (x.open_whole || x.open_empty) {
            r->size = x.pos;
            r->head_whole = true;
        } else {
            r->no_ranges = x.open_no_ranges; /* read whole at the first read past these bytes */
            r->size = x.open_total;
            if (x.pos != x.end) st = ckpt__fail(err, CKPT__D(BAD_RESPONSE), display, NULL, (int64_t)x.pos,
                                                "the first answer ended after %llu of %llu bytes",
                                                (unsigned long long)x.pos, (unsigned long long)x.end);
        }
        r->head_len = x.pos;
        bool failed = false;
        if (x.has_etag) r->etag = dup_or_null(x.etag, &failed);
        if (x.has_last_modified) r->last_modified = dup_or_null(x.last_modified, &failed);
        if (x.has_linked_etag) r->linked_etag = dup_or_null(x.linked_etag, &failed);
        /* The Hub states an LFS file's SHA-256: X-Linked-Etag, else the ETag,
         * read as huggingface_hub reads them. */
        const char *tag = x.has_linked_etag ? x.linked_etag : x.has_etag ? x.etag : NULL;
        if (tag) ckpt__etag_sha256(tag, strlen(tag), r->sha256);
        if (st == CKPT_OK && (failed || !add_validators(r))) st = ckpt__oom(err, display, NULL);
    }
    if (st) {
        ckpt__source_close(src);
        return st;
    }
    src->size = r->size;
    ckpt__source *local = NULL;
    if (!use_cache(r, src, o, &local)) {
        ckpt__source_close(src);
        return ckpt__oom(err, display, NULL);
    }
    if (local) {
        ckpt__source_close(src);
        *out = local;
        return CKPT_OK;
    }
    *out = src;
    return CKPT_OK;
}

ckpt__name_kind ckpt__remote_stat(const char *url, const ckpt__remote_auth *auth, const ckpt__source_options *o) {
    size_t n = strlen(url);
    if (n && url[n - 1] == '/') return CKPT__NAME_DIR;
    remote *r = NULL;
    if (remote_new(url, url, auth, o, &r, NULL) != CKPT_OK) return CKPT__NAME_MISSING;
    xfer x;
    memset(&x, 0, sizeof x);
    x.r = r;
    x.mode = X_HEAD;
    ckpt_status st = run_batch(r, &x, 1, NULL);
    remote_free(r);
    return st == CKPT_OK ? CKPT__NAME_FILE : CKPT__NAME_MISSING;
}

/* ---- what other kinds ask of a remote file (hf_source.c) ------------------------------ */

ckpt_status ckpt__remote_fetch(ckpt__source *src, uint64_t from, ckpt__remote_sink sink, void *ctx, ckpt_error *err) {
    remote *r = src->impl;
    if (from > r->size)
        return ckpt__fail(err, CKPT_E_OUT_OF_RANGE, src->name, NULL, (int64_t)from, "past the file's %llu bytes",
                          (unsigned long long)r->size);
    uint64_t head = r->head && r->head_len == r->size ? r->head_len : 0;
    if (head) { /* the open brought it all */
        if (from < head && !sink(ctx, r->head + from, (size_t)(head - from), from))
            return ckpt__fail_errno(err, errno, src->name, (int64_t)from, "cannot store the file");
        return CKPT_OK;
    }
    return transfer_whole(r, from, sink, ctx, err);
}

bool ckpt__remote_in_head(const ckpt__source *src, uint64_t offset, uint64_t n) {
    remote *r = src->impl;
    pthread_mutex_lock(&r->lock);
    bool in = r->head && offset <= r->head_len && n <= r->head_len - offset;
    pthread_mutex_unlock(&r->lock);
    return in;
}

const char *ckpt__remote_version(const ckpt__source *src, const char **sha256) {
    const remote *r = src->impl;
    *sha256 = r->sha256[0] ? r->sha256 : NULL;
    return r->linked_etag ? r->linked_etag : r->etag;
}

/* ---- one small GET: an API's answer ------------------------------------------------------- */

typedef struct small_get {
    ckpt__buf *body;
    size_t limit;
    ckpt__remote_reply *reply;
} small_get;

static size_t small_header(char *line, size_t size, size_t nmemb, void *user) {
    small_get *g = user;
    size_t n = size * nmemb;
    const char *name, *value;
    size_t nl, vl;
    if (n >= 5 && !memcmp(line, "HTTP/", 5)) g->reply->error_code[0] = g->reply->error_message[0] = '\0';
    if (!ckpt__split_header(line, n, &name, &nl, &value, &vl)) return n;
    if (ckpt__header_is(name, nl, "X-Error-Code"))
        copy_value(g->reply->error_code, sizeof g->reply->error_code, value, vl);
    else if (ckpt__header_is(name, nl, "X-Error-Message"))
        copy_value(g->reply->error_message, sizeof g->reply->error_message, value, vl);
    return n;
}

static size_t small_body(char *data, size_t size, size_t nmemb, void *user) {
    small_get *g = user;
    size_t n = size * nmemb;
    if (g->body->len + n > g->limit) return 0;
    ckpt__buf_append(g->body, data, n);
    return g->body->failed ? 0 : n;
}

/* The header lines of a small request: the kind's, and SharedKey's
 * signature of them; false when out of memory. */
static bool request_headers(const ckpt__remote_auth *auth, const char *method, const char *url,
                            struct curl_slist **out) {
    *out = NULL;
    struct curl_slist *h = NULL;
    for (const char *const *l = auth->headers; l && *l; l++) {
        struct curl_slist *t = curl_slist_append(h, *l);
        if (!t) {
            curl_slist_free_all(h);
            return false;
        }
        h = t;
    }
    if (auth->shared_key_account) {
        struct curl_slist *signed_h = sign_headers(auth->shared_key_account, auth->shared_key, method, url, NULL, h);
        curl_slist_free_all(h);
        if (!signed_h) return false;
        h = signed_h;
    }
    *out = h;
    return true;
}

/* A bearer token that expires (auth->refresh), refused with 401: a fresh
 * one in place of the one sent, set on `e` for the request's one more
 * attempt, as the data requests do (judge_status); *fresh holds it (wiped
 * and freed by the caller). */
static ckpt_status renew_bearer(const ckpt__remote_auth *auth, const char *shown, const ckpt__source_options *o,
                                CURL *e, char **fresh, ckpt_error *err) {
    char *token = NULL;
    ckpt_status st = auth->refresh(auth->refresh_ctx, shown, o, auth->bearer, &token, err);
    if (st) return st;
    *fresh = token;
    curl_easy_setopt(e, CURLOPT_XOAUTH2_BEARER, token);
    return CKPT_OK;
}

ckpt_status ckpt__remote_request(const char *shown, const char *url, const ckpt__remote_auth *auth, const char *form,
                                 const ckpt__source_options *o, size_t limit, ckpt__buf *body,
                                 ckpt__remote_reply *reply, ckpt_error *err) {
    memset(reply, 0, sizeof *reply);
    ckpt_status st = need_curl(shown, err);
    if (st) return st;
    CURL *e = curl_easy_init();
    if (!e) return ckpt__oom(err, shown, NULL);
    struct curl_slist *headers = NULL;
    if (!request_headers(auth, form ? "POST" : "GET", url, &headers)) {
        curl_easy_cleanup(e);
        return ckpt__oom(err, shown, NULL);
    }
    small_get g = {body, limit, reply};
    char curl_error[CURL_ERROR_SIZE] = "";
    const char *ca = getenv("CURL_CA_BUNDLE");
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, small_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &g);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, small_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &g);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, o->connect_timeout_ms ? (long)o->connect_timeout_ms : (long)DEFAULT_CONNECT_MS);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, o->read_timeout_ms ? (long)o->read_timeout_ms : (long)DEFAULT_READ_MS);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, auth->store ? 0L : 1L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "ckpt/" CKPT_VERSION_STRING);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    if (form) curl_easy_setopt(e, CURLOPT_POSTFIELDS, form);
    if (ca && *ca) curl_easy_setopt(e, CURLOPT_CAINFO, ca);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
    /* as ever, no basic authentication in these small requests (listings, tokens): only the data requests send it */
    set_auth(e, auth->sigv4, auth->sigv4 ? auth->userpwd : NULL, auth->bearer);
    /* Retried as the data requests are: 5xx, 408, 429 and broken
     * connections; a 401 once more with a fresh token, where it expires. */
    int64_t wait = BACKOFF_FIRST_MS;
    char *fresh = NULL;
    for (unsigned attempt = 0;; attempt++) {
        body->len = 0;
        CURLcode rc = curl_easy_perform(e);
        long code = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
        reply->status = code;
        if (rc == CURLE_OK && code == 401 && auth->refresh && auth->bearer && !auth->sigv4 && !fresh) {
            st = renew_bearer(auth, shown, o, e, &fresh, err);
            if (st) break;
            continue;
        }
        bool again = rc == CURLE_OK ? code == 408 || code == 429 || code >= 500 : retryable_code(rc);
        if (!again || attempt >= o->retries) {
            if (rc == CURLE_WRITE_ERROR && !body->failed)
                st = ckpt__fail(err, CKPT_E_LIMIT, shown, NULL, -1, "the answer runs past %zu bytes", limit);
            else if (body->failed) st = ckpt__oom(err, shown, NULL);
            else if (rc != CURLE_OK)
                st = ckpt__fail(err, rc == CURLE_OPERATION_TIMEDOUT ? CKPT__D(TIMEOUT) : CKPT__D(NETWORK), shown, NULL, -1,
                                "%s", curl_error[0] ? curl_error : curl_easy_strerror(rc));
            break;
        }
        struct timespec ts = {(time_t)(wait / 1000), (long)(wait % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        if (wait < BACKOFF_MAX_MS) wait *= 2;
    }
    curl_easy_cleanup(e);
    curl_slist_free_all(headers);
    if (fresh) memset(fresh, 0, strlen(fresh));
    free(fresh);
    return st;
}

/* ---- the http(s):// kind ------------------------------------------------------------------ */

static bool http_claims(const char *name) { return !strncmp(name, "http://", 7) || !strncmp(name, "https://", 8); }

/* $HF_TOKEN goes to the Hugging Face hosts only. */
static bool hugging_face_host(const char *host, size_t len) {
    const char *colon = memchr(host, ':', len);
    if (colon) len = (size_t)(colon - host);
    static const char *const hosts[] = {"huggingface.co", "hf.co"};
    for (size_t i = 0; i < 2; i++) {
        size_t h = strlen(hosts[i]);
        if (len == h && !strncmp(host, hosts[i], h)) return true;
        if (len > h && host[len - h - 1] == '.' && !strncmp(host + len - h, hosts[i], h)) return true;
    }
    return false;
}

/* The credentials of a name, and the URL to request (encoded). */
static ckpt_status http_prepare(const char *name, const char *shown, const ckpt__source_options *o, char **url,
                                ckpt__remote_auth *auth, char **userinfo_copy, ckpt_error *err) {
    memset(auth, 0, sizeof *auth);
    *url = NULL;
    *userinfo_copy = NULL;
    char *clean, *userinfo;
    if (!ckpt__url_take_userinfo(name, &clean, &userinfo)) return ckpt__oom(err, shown, NULL);
    ckpt__url_parts u;
    if (!ckpt__url_split(clean, &u)) {
        free(clean);
        free(userinfo);
        return ckpt__fail(err, CKPT_E_INVALID_ARGUMENT, shown, NULL, -1, "not a URL with a host");
    }
    if (userinfo) {
        *userinfo_copy = userinfo;
        auth->userpwd = userinfo;
    } else if (o->userinfo && o->userinfo_host && strlen(o->userinfo_host) == u.host_len &&
               !strncmp(o->userinfo_host, u.host, u.host_len)) {
        auth->userpwd = o->userinfo;
    }
    if (o->bearer_token) auth->bearer = o->bearer_token;
    else if (hugging_face_host(u.host, u.host_len) && getenv("HF_TOKEN") && *getenv("HF_TOKEN"))
        auth->bearer = getenv("HF_TOKEN");
    ckpt__buf b = {0};
    ckpt__url_encode_into(&b, clean, strlen(clean), NULL);
    free(clean);
    if (b.failed) {
        free(b.data);
        return ckpt__oom(err, shown, NULL);
    }
    *url = b.data;
    return CKPT_OK;
}

static ckpt_status http_open(const char *name, const ckpt__source_options *o, ckpt__source **out, ckpt_error *err) {
    *out = NULL;
    char *shown = ckpt__url_redact(name);
    if (!shown) return ckpt__oom(err, NULL, NULL);
    char *url, *userinfo;
    ckpt__remote_auth auth;
    ckpt_status st = http_prepare(name, shown, o, &url, &auth, &userinfo, err);
    if (st == CKPT_OK) st = ckpt__remote_open(shown, url, &auth, o, out, err);
    if (userinfo) memset(userinfo, 0, strlen(userinfo));
    free(userinfo);
    free(url);
    free(shown);
    return st;
}

static ckpt__name_kind http_stat(const char *name, const ckpt__source_options *o) {
    char *url, *userinfo;
    ckpt__remote_auth auth;
    /* Not a URL: "a file", so that opening it says why. */
    if (http_prepare(name, name, o, &url, &auth, &userinfo, NULL) != CKPT_OK) return CKPT__NAME_FILE;
    ckpt__name_kind k = ckpt__remote_stat(url, &auth, o);
    if (userinfo) memset(userinfo, 0, strlen(userinfo));
    free(userinfo);
    free(url);
    return k;
}

const ckpt__source_kind ckpt__http_kind = {"http", http_claims, http_open, http_stat};
